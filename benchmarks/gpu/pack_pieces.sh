#!/bin/bash
# On the CPU machine (repo root): build the two pieces that carry vLLM 0.26.0 to the GPU machine, into .whl/
# (ignored through .git/info/exclude; never commit it). Needs network to PyPI, xz and the project venv.
#   .whl/p0: vllm_py.tar.xz (vLLM's Python files + dist-info) and the first half of C.so.xz  ~32 MiB
#   .whl/p1: the second half of C.so.xz (_C_stable_libtorch, ~53 MiB in all)                 ~27 MiB
#            (the checkout travels with each piece and the device tool carries at most 64 MiB in all)
#   .whl/p2: fa3.so.xz (FlashAttention 3) and deps/ (~70 wheels for Python 3.12)                 ~34 MiB
# Each piece travels in its own device call (the working tree that travels is capped at 64 MiB).
set -euo pipefail
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
work=${WORK:-/tmp/vllm026}
mkdir -p "$work" .whl/p0 .whl/p1 .whl/p2
python3 -m pip download -q --no-deps vllm==0.26.0 -d "$work"
rm -rf "$work/w" && mkdir "$work/w" && (cd "$work/w" && unzip -q ../vllm-0.26.0-*.whl)
# Not used by a dense bf16 Llama on Hopper (their imports are guarded); the calibration dropped the same files.
(cd "$work/w" && rm -rf vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/_moe_C_stable_libtorch.abi3.so vllm/vllm-rs \
  vllm/third_party/deep_gemm vllm/third_party/fmha_sm100 vllm/_flashmla_C.abi3.so)
# The library in two halves, one beside each piece (the checkout grew past 64 MiB with the whole of it).
xz -9 -T0 -c "$work/w/vllm/_C_stable_libtorch.abi3.so" > "$work/C.so.xz"
rm -f .whl/p0/C.so.xz.* .whl/p1/C.so.xz*
split -n 2 -d "$work/C.so.xz" .whl/p0/C.so.xz. && mv .whl/p0/C.so.xz.01 .whl/p1/
xz -9 -T0 -c "$work/w/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" > .whl/p2/fa3.so.xz
tar -C "$work/w" -c --exclude=vllm/_C_stable_libtorch.abi3.so --exclude=vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so \
  vllm vllm-0.26.0.dist-info | xz -9 -T0 > .whl/p0/vllm_py.tar.xz
# vLLM's unconditional requirements (extras and markers resolved for Python 3.12 / Linux x86-64), xgrammar pinned
# first, plus what `governor run` needs beyond the GPU image (pydantic comes with vLLM; tenacity does not).
mapfile -t roots < <(unzip -p "$work"/vllm-0.26.0-*.whl 'vllm-0.26.0.dist-info/METADATA' \
  | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' | sed 's/;.*//; s/ //g')
rm -rf .whl/p2/deps
python3 benchmarks/gpu/deps_closure.py .whl/p2/deps "xgrammar==0.2.7" "${roots[@]}" tenacity
rm -f .whl/p2/deps/closure.json
du -sh .whl/p0 .whl/p1 .whl/p2
