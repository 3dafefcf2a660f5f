#!/bin/bash
# GPU machine, step 2 (repo root, piece 2 carried as .whl/p2): dependency wheels + FlashAttention 3 into /tmp/site,
# this checkout as the vllm-governor distribution (entry points for the plugins), the model directory, an import
# check, then the whole run started detached (device_run.sh); poll it with device_poll.sh.
set -e
G=/tmp/gb
# A second run on a warm machine starts clean: the last run's DONE would end device_poll.sh at once.
rm -rf $G/results
mkdir -p $G/results $G/bin
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/p2/deps/*.whl
xz -dc .whl/p2/fa3.so.xz > /tmp/site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so
python3 benchmarks/gpu/install_project.py "$PWD" /tmp/site
cp benchmarks/gpu/*.py benchmarks/gpu/*.sh $G/bin/
export PYTHONPATH=/tmp/site
python3 $G/bin/write_model.py /tmp/llama8b-dummy
python3 - <<'PY'
import time
t = time.time()
import torch, vllm
from importlib.metadata import entry_points
print("vllm", vllm.__version__, "torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))
import vllm.entrypoints.openai.api_server
import vllm._C_stable_libtorch
from vllm.vllm_flash_attn import flash_attn_interface as f
print("FA3", f.FA3_AVAILABLE, f.FA3_UNAVAILABLE_REASON)
print("plugins", [e.name for e in entry_points(group="vllm.general_plugins")],
      [e.name for e in entry_points(group="vllm.endpoint_plugins")])
from governor_runtime import vllm_compat, plugin, endpoint
print("running-limit branch:", vllm_compat.uses_running_limit())
plugin.register()
try:
    import governor.cli, governor.commands.run, governor.services.standalone, governor.adapters.scrape
    print("governor standalone imports")
except Exception as exc:
    print("governor cli does NOT import:", repr(exc))
print("imports ok in %.1fs" % (time.time() - t))
PY
setsid nohup bash $G/bin/device_run.sh > $G/results/run.log 2>&1 < /dev/null &
echo "run started (pid $!)"
