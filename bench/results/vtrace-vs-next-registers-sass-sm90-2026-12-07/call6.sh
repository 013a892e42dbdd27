#!/usr/bin/env bash
# (bench/results/vtrace-vs-next-registers-sass-sm90-2026-12-07) 2026-12-07 late: V-trace's vs_{t+1} from registers (this tree) against HEAD (base.tar),
# interleaved, flat 2^26 (K = 1) and K = 3; then the GPU tests that touch V-trace.
set -u
OUT=$1; BUDGET=${2:-420}
T0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - T0))); }
export PYTHONUNBUFFERED=1 PROBE_KINDS=vtrace
NEW=$PWD
mkdir -p "$OUT" /tmp/base /tmp/probes && tar -xf .devcarry/base.tar -C /tmp/base
{ date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  echo "base: $(cat .devcarry/base.rev)"
  git -C "$NEW" status --short 2>/dev/null | head -20
} > "$OUT/record.txt" 2>&1
cat "$OUT/record.txt"
probe() { # label tree phases limit
  local l=$(left); local lim=$4; [ "$l" -lt "$lim" ] && lim=$l
  [ "$lim" -le 5 ] && { echo "skip $1 (no time)"; return; }
  echo "== probe $1 ($3, limit $lim s) at +$(( $(date +%s) - T0 )) s"
  (cd "$2" && PYTHONPATH="$2" timeout "$lim" python -m bench.kernel_probe run /tmp/probes/$1 $1 full $3) 2>&1 | grep -v -i warn | tee -a "$OUT/probe-console.txt" | grep "vtrace" | tail -n 8
}
probe base1 /tmp/base default,settings 60
probe new1 "$NEW" default,settings 60
probe base2 /tmp/base default,settings 60
probe new2 "$NEW" default,settings 60
PYTHONPATH=. python -m bench.kernel_probe merge "$OUT/probes" /tmp/probes/*.json > /dev/null 2>&1
l=$(left)
echo "== tests (limit $l s) at +$(( $(date +%s) - T0 )) s"
[ "$l" -gt 20 ] && PYTHONPATH=. timeout "$l" python -m pytest -q -p no:cacheprovider -n 8 --dist load \
  -m "gpu or not gpu" tests/gpu tests/unit/test_steps_a_thread.py tests/unit/test_chunks.py \
  -k "vtrace or v_trace or several_settings" > "$OUT/tests.txt" 2>&1
echo "tests rc=$?"; tail -n 3 "$OUT/tests.txt"
echo "== done at +$(( $(date +%s) - T0 )) s"
