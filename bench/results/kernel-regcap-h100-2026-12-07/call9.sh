#!/usr/bin/env bash
# Device call 9 (2026-12-07): HEAD (base) / eviction hints + register cap (cand, the
# working tree) / hints alone (nocap) at 2^26 flat, K = 3 settings and per-step gamma_t,
# then the GPU suite on the working tree. <= 8 files in OUT.
set -u
OUT=$1
R=$(pwd)
START=$(date +%s)
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; uname -r; python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } > $OUT/record.txt 2>&1
cat $OUT/record.txt
probe() {  # tree label phases
  local dir=$1 label=$2 t0=$(date +%s)
  (cd $dir && timeout 120 python -m bench.kernel_probe run /tmp/kp-$label $label full $3 > /tmp/kp-$label.log 2>&1)
  echo "probe $label exit $? after $(( $(date +%s) - t0 )) s"; grep -E "default|settings|per-step" /tmp/kp-$label.log | grep -v "^{" | cut -c1-150
}
probe $R/.devcarry/base base1 default,settings,per-step
probe $R cand1 default,settings,per-step
probe $R/.devcarry/nocap nocap default
probe $R/.devcarry/base base2 default
probe $R cand2 default
python - > $OUT/probes.json <<'PY'
import json, glob
print(json.dumps({p: json.load(open(p)) for p in sorted(glob.glob('/tmp/kp-*.json')) if '_base' not in p}))
PY
cat /tmp/kp-*.log > $OUT/probe-console.txt
t0=$(date +%s)
left=$(( 590 - ($(date +%s) - START) )); echo "suite gets $left s"
timeout $left python -m pytest -q -p no:cacheprovider -n 16 -m gpu tests -rf --tb=short > $OUT/suite.txt 2>&1
echo "suite exit $? after $(( $(date +%s) - t0 )) s"; grep -v -i warn $OUT/suite.txt | tail -8
