#!/usr/bin/env bash
# Device call 8 (2026-12-07): kernel variants at 2^26 flat (main / eviction hints / no load
# barrier, interleaved), ncu of GAE and TD(lambda), then the GPU suite. <= 8 files in OUT.
set -u
OUT=$1
R=$(pwd)
START=$(date +%s)
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; uname -r; python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; which ncu; } > $OUT/record.txt 2>&1
cat $OUT/record.txt
probe() {  # tree label [maxnreg] [pf distance] [pf evict_last]
  local dir=$1 label=$2 t0=$(date +%s)
  (cd $dir && RLTSCAN_MAXNREG=${3:-} RLTSCAN_PF=${4:-0} RLTSCAN_PFEV=${5:-0} timeout 100 python -m bench.kernel_probe run /tmp/kp-$label $label full default > /tmp/kp-$label.log 2>&1)
  echo "probe $label exit $? after $(( $(date +%s) - t0 )) s"; grep default /tmp/kp-$label.log | grep -v "^{" | cut -c1-140
}
probe $R main1
probe $R/.devcarry/pf pf1024 "" 1024
probe $R/.devcarry/pf pf512 "" 512
probe $R/.devcarry/pf pf2048 "" 2048
probe $R/.devcarry/pf pfev1024 "" 1024 1
probe $R/.devcarry/ev ev
probe $R/.devcarry/rc rc80 80
probe $R main2
python - > $OUT/probes.json <<'PY'
import json, glob
print(json.dumps({p: json.load(open(p)) for p in sorted(glob.glob('/tmp/kp-*.json')) if '_base' not in p}))
PY
if which ncu > /dev/null 2>&1; then
  for k in gae; do
    t0=$(date +%s)
    PYTHONPATH=. timeout 90 ncu --clock-control none --set full -k regex:_scan_kernel --launch-skip 3 --launch-count 1 \
      python .devcarry/prof.py $k 4 > /tmp/ncu-$k.txt 2>&1
    echo "ncu $k exit $? after $(( $(date +%s) - t0 )) s"
  done
  cat /tmp/ncu-*.txt > $OUT/ncu.txt
  grep -E "DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Duration|Block Limit" $OUT/ncu.txt | head -40
fi
t0=$(date +%s)
left=$(( 585 - ($(date +%s) - START) )); echo "suite gets $left s"
timeout $left python -m pytest -q -p no:cacheprovider -n 16 -m gpu tests -rf --tb=short > $OUT/suite.txt 2>&1
echo "suite exit $? after $(( $(date +%s) - t0 )) s"; grep -v -i warn $OUT/suite.txt | tail -8
