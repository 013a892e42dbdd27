#!/usr/bin/env bash
# bash .devcarry/call.sh OUT BUDGET_S : base (HEAD, .devcarry/base.tar) vs this tree at
# 2^26 flat, interleaved; settings/per-step both; then the GPU suite of this tree.
set -u
OUT=$1; BUDGET=${2:-540}
T0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - T0))); }
export PYTHONUNBUFFERED=1
NEW=$PWD
mkdir -p "$OUT" /tmp/base /tmp/probes && tar -xf .devcarry/base.tar -C /tmp/base
{ date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "$(nproc) CPUs"
  python -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  echo "base tree: $(tar -tf .devcarry/base.tar | head -0; cat .devcarry/base.rev 2>/dev/null)"
} > "$OUT/record.txt" 2>&1
cat "$OUT/record.txt"
probe() { # label tree phases limit
  local l=$(left); local lim=$4; [ "$l" -lt "$lim" ] && lim=$l
  [ "$lim" -le 5 ] && { echo "skip $1 (no time)"; return; }
  echo "== probe $1 ($3, limit $lim s) at +$(( $(date +%s) - T0 )) s"
  (cd "$2" && PYTHONPATH="$2" timeout "$lim" python -m bench.kernel_probe run /tmp/probes/$1 $1 full $3) 2>&1 | tee -a "$OUT/probe-console.txt" | grep -v -i warn | tail -n 12
}
cp bench/kernel_probe.py /tmp/base/bench/kernel_probe.py  # (its PROBE_KINDS filter)
export PROBE_KINDS=td_lambda
probe newsweep "$NEW" sweep 110
probe newshapes "$NEW" shapes 50
probe baseshapes /tmp/base shapes 50
unset PROBE_KINDS
PYTHONPATH=. python -m bench.kernel_probe merge "$OUT/probes" /tmp/probes/*.json > /dev/null 2>&1
(cd /tmp/probes && tar -czf "$OUT/raw.tar.gz" .)
l=$(left)
echo "== suite (limit $l s) at +$(( $(date +%s) - T0 )) s"
[ "$l" -gt 20 ] && timeout "$l" python -m pytest -q -p no:cacheprovider -n 16 --dist load \
  -m "gpu or not gpu" tests/unit/test_tiles.py tests/gpu -k "td_lambda or tiles or long" \
  > "$OUT/suite.txt" 2>&1
echo "suite rc=$?"; tail -n 8 "$OUT/suite.txt"
echo "== done at +$(( $(date +%s) - T0 )) s"
