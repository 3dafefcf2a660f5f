#!/bin/bash
# GPU machine, step 1 (repo root, piece 1 carried as .whl/p1): unpack vLLM 0.26.0's Python files and its main
# CUDA library into /tmp/site, and show what the machine has.
set -e
mkdir -p /tmp/site
tar -xJf .whl/p1/vllm_py.tar.xz -C /tmp/site
xz -dc .whl/p1/C.so.xz > /tmp/site/vllm/_C_stable_libtorch.abi3.so
du -sh /tmp/site
set +e
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
python3 --version; nproc; free -g | head -2; df -h /tmp | tail -1
python3 -m pip list 2>/dev/null | grep -i -E "^(torch|triton|transformers|tokenizers|numpy|aiohttp|uvloop|httpx|prometheus.client|pyyaml|rich|matplotlib) "
echo STEP1_OK
