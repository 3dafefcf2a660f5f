#!/bin/bash
# GPU machine: wait up to $1 s for the run to finish (or fail), show its log, pack the results into $OUT.
G=/tmp/gb; R=$G/results; end=$(( $(date +%s) + ${1:-500} ))
while [ "$(date +%s)" -lt "$end" ]; do
  [ -f $R/DONE ] && break
  sleep 3
done
tail -n 40 $R/run.log
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
if [ -n "$OUT" ]; then
  tar -czf "$OUT/results.tgz" -C $G results 2>/dev/null
  cp $R/probe.json $R/serving.csv $R/loop_summary.csv $R/budget_summary.csv $R/run.log "$OUT/" 2>/dev/null
  for d in $R/slo*/; do [ -f $d/loop_summary.csv ] && cp $d/loop_summary.csv "$OUT/loop_summary_$(basename $d).csv"; done
  ls -la "$OUT"
fi
[ -f $R/DONE ] && echo RUN_DONE || echo RUN_STILL_GOING
