#!/bin/bash
# GPU machine, step 1 (repo root, piece 1 carried as .whl/p1): unpack vLLM 0.26.0's Python files and its main
# CUDA library into /tmp/site, and show what the machine has.
set -e
# Two calls (the device tool carries at most 64 MiB with the checkout): first with .whl/p0 carried (the
# Python files and half the library), then with .whl/p1 (the library's other half).
mkdir -p /tmp/site
if [ -f .whl/p0/vllm_py.tar.xz ]; then tar -xJf .whl/p0/vllm_py.tar.xz -C /tmp/site; fi
# The library comes in two halves, one per call: kept in /tmp/site-parts until both are there.
mkdir -p /tmp/site-parts
for part in .whl/p0/C.so.xz.* .whl/p1/C.so.xz.*; do if [ -f "$part" ]; then cp "$part" /tmp/site-parts/; fi; done
if [ -f /tmp/site-parts/C.so.xz.00 ] && [ -f /tmp/site-parts/C.so.xz.01 ] && [ -d /tmp/site/vllm ]; then
  cat /tmp/site-parts/C.so.xz.00 /tmp/site-parts/C.so.xz.01 | xz -dc > /tmp/site/vllm/_C_stable_libtorch.abi3.so
  ls -la /tmp/site/vllm/_C_stable_libtorch.abi3.so
else
  echo "vLLM's _C: have [$(ls /tmp/site-parts | tr '\n' ' ')], need C.so.xz.00 (p0) and C.so.xz.01 (p1)" \
    "and the Python files (p0); call again with the missing piece before device_step2.sh"
fi
du -sh /tmp/site
set +e
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
python3 --version; nproc; free -g | head -2; df -h /tmp | tail -1
python3 -m pip list 2>/dev/null | grep -i -E "^(torch|triton|transformers|tokenizers|numpy|aiohttp|uvloop|httpx|prometheus.client|pyyaml|rich|matplotlib) "
echo STEP1_OK
