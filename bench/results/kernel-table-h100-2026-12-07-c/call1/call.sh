#!/usr/bin/env bash
# call 1 of 2026-12-07 evening: kernel probe (flat, shapes), settings/per-step, then the GPU
# suite of this tree (with the steps-a-thread tests) in the time left.
set -u
OUT=$1; BUDGET=${2:-575}
T0=$(date +%s)
export PYTHONUNBUFFERED=1
bash bench/device.sh kernel,settings "$OUT/probe" 2>&1 | tail -n 60
l=$((BUDGET - ($(date +%s) - T0)))
echo "== suite (limit $l s) at +$(( $(date +%s) - T0 )) s"
[ "$l" -gt 20 ] && PYTHONPATH=. timeout "$l" python -m pytest -q -p no:cacheprovider -n 16 --dist load \
  -m "gpu or not gpu" tests/gpu tests/unit/test_generic_kernel.py \
  tests/unit/test_public_functions.py tests/unit/test_steps_a_thread.py > "$OUT/suite.txt" 2>&1
echo "suite rc=$?"; tail -n 8 "$OUT/suite.txt"
echo "== done at +$(( $(date +%s) - T0 )) s"
