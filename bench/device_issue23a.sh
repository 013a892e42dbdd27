#!/usr/bin/env bash
# Issue 23, first device call: the look-back's word protocol on the GPU (its tests), then
# the kernel's variants side by side at 2^26 flat steps (bench/kernel_probe.py: default
# and tile shapes, validate=True, reduce-then-scan, K settings in one launch, per-step
# γ_t) on this tree and, default tiles only, on the tree it started from
# (.baselines/rltscan_main: git archive of the branch point), one merged table. Every
# timed row is checked against float64 first; each step has a time limit, and the probe
# saves its rows as it goes.
# Usage, from the tree's root: bash bench/device_issue23a.sh $OUT
set -u
OUT=${1:-/tmp/issue23a}
TMP=$(mktemp -d)
export PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
[ -f .tree_commit ] && cat .tree_commit >> "$OUT/commit.txt"  # (a copy without .git)
timeout 40 env PYTHONPATH=. python -m pytest -q -p no:cacheprovider tests/test_lookback.py \
  -k "not several_steps" 2>&1 | tail -3 > "$OUT/lookback_tests.txt"
cat "$OUT/lookback_tests.txt"
timeout 130 env PYTHONPATH=. PROBE=flat,settings,per-step python bench/kernel_probe.py run \
  "$TMP/new" new 2>&1 | grep -v -i warn > "$OUT/new.log"
tail -n 90 "$OUT/new.log"
timeout 45 env PYTHONPATH=.baselines/rltscan_main PROBE=flat python bench/kernel_probe.py run \
  "$TMP/main" main 2>&1 | grep -v -i warn > "$OUT/main.log"
tail -n 40 "$OUT/main.log"
PYTHONPATH=. python bench/kernel_probe.py merge "$OUT/kernel_probe" "$TMP"/new.json "$TMP"/main.json
