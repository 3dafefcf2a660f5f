#!/bin/bash
# GPU machine, started detached by device_step2.sh: one governed vLLM 0.26 server (ceiling 256), then
# gpubench.py all (probe, serving points, loop). Results in /tmp/gb/results; DONE marks the end.
# BENCH_SLOS="20 12": the loop part once per TPOT P99 SLO (ms) on the same server, each into results/slo<S>/
# (gpubench --slo-ms S; the governor command's --slo-p99 becomes S ms). Unset: one run into results/, as before.
# GOVERNOR_VARIANTS="levers=--law levers": policy governor-levers runs GOVERNOR_CMD plus those arguments.
set -u
G=${G:-/tmp/gb}; R=$G/results; B=$G/bin; M=${M:-/tmp/llama8b-dummy}; PORT=${PORT:-8000}
# SERVER_ARGS: extra vLLM arguments (a CPU rehearsal passes --dtype float32 and a small memory fraction).
ulimit -n 1048576 2>/dev/null || ulimit -n 65536
export PYTHONPATH=${PYTHONPATH:-/tmp/site} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export GOVERNOR_ADMIN_TOKEN=gpu-proof-local-token
# vLLM 0.26 has no --custom-histogram-buckets: the running-limit branch applies the runtime's finer buckets from
# this variable instead (the launcher is given --vllm-default-buckets so that it does not pass the flag).
GOVERNOR_HISTOGRAM_BUCKETS=$(python3 -c "import json; from governor_runtime.metrics import DEFAULT_BUCKETS as b; print(json.dumps({k: list(v) for k, v in b.items()}))")
export GOVERNOR_HISTOGRAM_BUCKETS
# The run's settings (override through the environment): shorter points than the calibration's 60/40 s, to fit
# the device time; the loop's governor reads TPOT P99 by scraping /metrics every 2 s over a 10 s window.
BENCH_ARGS=${BENCH_ARGS:-"--probe-rate 36 --dur 30 --dur-high 25 --warmup 8 --grace 15 \
  --phases 30:8,45:40,30:8 --policies static256,static64,governor --slo-ms 20 --loop-grace-s 20"}
GOVERNOR_CMD=${GOVERNOR_CMD:-"python3 -m governor.cli run --endpoint http://127.0.0.1:$PORT --slo-p99 20ms \
  --latency tpot --tick 2s --window 10s --cooldown 4s --gpu-type H200"}
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
ok() { python3 -c "import urllib.request as u; u.urlopen('$1', timeout=3).read()" >/dev/null 2>&1; }

log "server start"
t0=$(date +%s.%N)
setsid python3 -m governor_runtime serve --vllm-default-buckets \
  --model $M --served-model-name llama8b --load-format dummy --max-model-len 4096 \
  --gpu-memory-utilization 0.9 --max-num-seqs 256 --port $PORT --host 127.0.0.1 \
  --disable-uvicorn-access-log ${SERVER_ARGS:-} > $R/server.log 2>&1 &
spid=$!
ready=0
for _ in $(seq 1 420); do
  if ok http://127.0.0.1:$PORT/v1/models; then ready=1; break; fi
  kill -0 $spid 2>/dev/null || break
  sleep 1
done
log "server ready=$ready after $(python3 -c "import time; print(round(time.time()-$t0, 1))") s"
if [ $ready = 1 ]; then
  grep -i -E "async|V2 Model Runner|governor|FLASH_ATTN|max_num_seqs" $R/server.log | cut -c1-300 | head -20
  if [ -n "${BENCH_SLOS:-}" ]; then
    for S in $BENCH_SLOS; do
      mkdir -p $R/slo$S
      cmd=$(sed -E "s/--slo-p99 +[^ ]+//" <<< "$GOVERNOR_CMD")" --slo-p99 ${S}ms"
      python3 $B/gpubench.py loop --out $R/slo$S --token "$GOVERNOR_ADMIN_TOKEN" \
        --url http://127.0.0.1:$PORT --governor-cmd "$cmd" --governor-variants "${GOVERNOR_VARIANTS:-}" \
        $BENCH_ARGS --slo-ms $S
      log "bench slo=$S rc=$?"
    done
  else
    python3 $B/gpubench.py "${BENCH_PART:-all}" --out $R --token "$GOVERNOR_ADMIN_TOKEN" \
      --url http://127.0.0.1:$PORT --governor-cmd "$GOVERNOR_CMD" --governor-variants "${GOVERNOR_VARIANTS:-}" \
      $BENCH_ARGS
    log "bench rc=$?"
  fi
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())" \
    > $R/metrics_end.txt 2>&1
else
  tail -40 $R/server.log
fi
kill -INT $spid 2>/dev/null; sleep 5; kill -9 -- -$spid 2>/dev/null
log "end"
touch $R/DONE
