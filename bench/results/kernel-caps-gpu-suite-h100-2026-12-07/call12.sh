#!/usr/bin/env bash
# Device call 12 (2026-12-07, session 2): register caps on the H200 at 2^26 flat, then the
# GPU suite. HEAD (cap GAE/V-trace 80, plain launches) against: no cap; the cap also under
# validate=True; caps of 64 / 80 for every kind; the cap on K settings and per-step gamma_t.
set -u
OUT=$1
TOTAL=${2:-588}  # seconds this call may take, all told
GUARD=$(( TOTAL * 2 / 5 ))
R=$(pwd)
START=$(date +%s)
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; uname -r; python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } > $OUT/record.txt 2>&1
cat $OUT/record.txt
probe() {  # tree label phases cap capcheck capmulti
  local dir=$1 label=$2 t0=$(date +%s)
  if [ "$(( $(date +%s) - START ))" -gt $GUARD ]; then echo "skip $label"; return; fi
  (cd $dir && RLTSCAN_CAP=$4 RLTSCAN_CAPCHECK=${5:-0} RLTSCAN_CAPMULTI=${6:-0} timeout 70 python -m bench.kernel_probe run /tmp/kp-$label $label full $3 > /tmp/kp-$label.log 2>&1)
  echo "probe $label exit $? after $(( $(date +%s) - t0 )) s"; grep -E "default|settings|per-step" /tmp/kp-$label.log | grep -v "^{" | cut -c1-150
}
RC=$R/.devcarry/rc
probe $R head1 default
probe $RC nocap default ""
probe $RC capcheck default "gae=80,vtrace=80" 1
probe $RC all64 default "gae=64,vtrace=64,returns=64,td_lambda=64,retrace=64" 1
probe $RC all80 default "gae=80,vtrace=80,returns=80,td_lambda=80,retrace=80" 1
probe $R head1s settings,per-step
probe $RC multi80 settings,per-step "gae=80,vtrace=80" 1 1
python - > $OUT/probes.json <<'PY'
import json, glob
print(json.dumps({p: json.load(open(p)) for p in sorted(glob.glob('/tmp/kp-*.json')) if '_base' not in p}))
PY
cat /tmp/kp-*.log > $OUT/probe-console.txt
t0=$(date +%s)
left=$(( TOTAL - ($(date +%s) - START) )); echo "suite gets $left s"
timeout $left python -m pytest -q -p no:cacheprovider -n 16 --dist load -m gpu tests -rf --tb=short --durations=15 > $OUT/suite.txt 2>&1
echo "suite exit $? after $(( $(date +%s) - t0 )) s"; grep -v -i warn $OUT/suite.txt | tail -30
