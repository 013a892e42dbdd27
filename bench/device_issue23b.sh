#!/usr/bin/env bash
# Issue 23, second device call: the chosen kernel's numbers (bench/kernel_probe.py, every
# phase: 2^26 flat with the tile sweep bound as default calls are, K = 3 settings, per-step
# γ_t, the other shapes, rl-triton 0.1.3 beside it), then the GPU suite's kernel files
# (tests/test_gpu.py, tests/test_lookback.py's GPU-relevant cases). Each step has a time
# limit; the probe saves its rows as it goes.
# Usage, from the tree's root: bash bench/device_issue23b.sh $OUT
set -u
OUT=${1:-/tmp/issue23b}
export PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
[ -f .tree_commit ] && cat .tree_commit >> "$OUT/commit.txt"  # (a copy without .git)
timeout 160 env PYTHONPATH=.:.baselines/rl_triton-0.1.3 python bench/kernel_probe.py run \
  "$OUT/kernel_probe" new 2>&1 | grep -v -i warn > "$OUT/probe.log"
tail -n 75 "$OUT/probe.log"
timeout 320 env PYTHONPATH=. python -m pytest -q -p no:cacheprovider -m "gpu or not gpu" \
  tests/test_gpu.py tests/test_lookback.py -k "not several_steps" 2>&1 \
  | grep -v -i warn | tail -25 > "$OUT/gpu_tests.txt"
cat "$OUT/gpu_tests.txt"
