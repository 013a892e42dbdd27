#!/usr/bin/env bash
# Issue 23, first device call: the look-back's word protocol on the GPU (its tests), then
# the kernel's variants side by side (bench/kernel_probe.py: default and tile shapes,
# reduce-then-scan, K settings in one launch, per-step γ_t, rl-triton 0.1.3) on this tree
# and on the tree it started from (.baselines/rltscan_main: git archive of the branch
# point), one merged table. Every timed row is checked against float64 first.
# Usage, from the tree's root: bash bench/device_issue23a.sh $OUT
set -u
OUT=${1:-/tmp/issue23a}
TMP=$(mktemp -d)
export PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
[ -f .tree_commit ] && cat .tree_commit >> "$OUT/commit.txt"  # (a copy without .git)
timeout 60 env PYTHONPATH=. python -m pytest -q -p no:cacheprovider tests/test_lookback.py \
  -k "not several_steps" 2>&1 | tail -3 > "$OUT/lookback_tests.txt"
cat "$OUT/lookback_tests.txt"
timeout 230 env PYTHONPATH=.:.baselines/rl_triton-0.1.3 python bench/kernel_probe.py run \
  "$TMP/new" new 2>&1 | grep -v -i warn > "$OUT/new.log"
tail -n 90 "$OUT/new.log"
timeout 100 env PYTHONPATH=.baselines/rltscan_main python bench/kernel_probe.py run \
  "$TMP/main" main 2>&1 | grep -v -i warn > "$OUT/main.log"
tail -n 40 "$OUT/main.log"
PYTHONPATH=. python bench/kernel_probe.py merge "$OUT/kernel_probe" "$TMP"/new.json "$TMP"/main.json
