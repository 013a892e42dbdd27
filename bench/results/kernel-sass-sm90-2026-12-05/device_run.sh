#!/bin/bash
# One device call for issue 23's kernel branch (not yet run: no device machine could be
# started for it). The GPU tests on the branch's tree, then three kernel files side by side
# at 2^26 flat steps, each in its own process on the same warm GPU
# (bench/kernel_probe.py phase default: full call and kernel time, float64-checked):
#   main       MAIN_KERNEL (main's rltscan/scan/triton_scan.py)
#   branch     the branch's kernel
#   no-barrier the branch's kernel without the barrier that keeps the dense loads first
# then the branch's tile sweep (phase flat). About 150-250 s on the device.
#
#   OUT=... bash BRANCH_TREE/bench/results/kernel-sass-sm90-2026-12-05/device_run.sh \
#       BRANCH_TREE MAIN_KERNEL
set -u
OUT=${OUT:?}
B=$(cd "$1" && pwd)
MAIN_KERNEL=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
HERE=$B/bench/results/kernel-sass-sm90-2026-12-05
T0=$(date +%s)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
el() { echo "[$(($(date +%s) - T0)) s] $*" | tee -a "$OUT/steps.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nproc; date -u; } >"$OUT/gpu.txt" 2>&1
for v in main no-barrier; do
  mkdir -p "/tmp/var/$v"
  cp -r "$B/rltscan" "$B/bench" "$B/tests" "/tmp/var/$v/"
done
cp "$MAIN_KERNEL" /tmp/var/main/rltscan/scan/triton_scan.py
sed '/^    tl.debug_barrier()$/d' "$B/rltscan/scan/triton_scan.py" \
  >/tmp/var/no-barrier/rltscan/scan/triton_scan.py
ln -sfn "$B" /tmp/var/branch
cd "$B" || exit 2
export PYTHONPATH=.
python -c 'import json; from rltscan import bench; print(json.dumps(bench.run_record()))' \
  >"$OUT/record.json" 2>&1
el "phase 1: the GPU tests (in shards) and the compile warm-up, in parallel"
python -m pytest --collect-only -q -p no:cacheprovider -m "gpu or not gpu" tests/test_gpu.py \
  2>/dev/null | grep '::' >/tmp/gpu_ids.txt
split -n r/6 /tmp/gpu_ids.txt /tmp/shard_
for f in /tmp/shard_*; do
  (
    mapfile -t ids <"$f"
    timeout 200 python -m pytest -q -p no:cacheprovider -m "gpu or not gpu" "${ids[@]}" \
      >"$OUT/tests_gpu_$(basename "$f").txt" 2>&1
    echo "exit $?" >>"$OUT/tests_gpu_$(basename "$f").txt"
  ) &
done
for t in "tests/test_lookback.py tests/test_generic_kernel.py" tests/test_stream_gpu.py; do
  (
    # shellcheck disable=SC2086
    timeout 200 python -m pytest -q -p no:cacheprovider -m "gpu or not gpu" $t \
      >"$OUT/tests_$(basename "${t%% *}" .py).txt" 2>&1
    echo "exit $?" >>"$OUT/tests_$(basename "${t%% *}" .py).txt"
  ) &
done
for v in main branch no-barrier; do
  (cd "/tmp/var/$v" && timeout 200 python "$HERE/warm.py" default >"$OUT/warm_$v.txt" 2>&1) &
done
(cd /tmp/var/branch && timeout 200 python "$HERE/warm.py" tiles >"$OUT/warm_tiles.txt" 2>&1) &
wait
el "phase 1 done"
for v in main branch no-barrier; do
  (cd "/tmp/var/$v" && timeout 60 python -m bench.kernel_probe run "$OUT/$v" "$v" full default \
    >"$OUT/$v.log" 2>&1)
  el "probe $v: exit $?"
done
(cd /tmp/var/branch && timeout 120 python -m bench.kernel_probe run "$OUT/branch-tiles" branch \
  full flat >"$OUT/branch-tiles.log" 2>&1)
el "probe branch tiles: exit $?"
python -m bench.kernel_probe merge "$OUT/kernel_probe" "$OUT/main.json" "$OUT/branch.json" \
  "$OUT/no-barrier.json" "$OUT/branch-tiles.json" >>"$OUT/steps.txt" 2>&1
el "done"
grep -h "passed\|failed\|error\|^exit" "$OUT"/tests_*.txt | tail -n 16
grep -h "%" "$OUT"/*.log | cut -c1-170
