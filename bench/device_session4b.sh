#!/usr/bin/env bash
# The windowed look-back, the V-trace register shift and the scratch lease: their tests
# and the multi-tile and bound-call gpu tests, then the kernel
# probe's uncapped tiles (compare bench/results/kernel-probe-h200-2026-12-03).
# Usage: bash bench/device_session4b.sh $OUT
set -u
OUT=${1:-/tmp/session4b-out}
export PYTHONPATH=. PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 300 python -m pytest -q -p no:cacheprovider tests/test_lookback.py tests/test_gpu.py -m "gpu or not gpu" -k "lookback or float64_loop or large or tile_shape or dtypes or chunks or repeated or bound or prepared or graph or direct" 2>&1 | tail -8 > "$OUT/gpu_tests.txt"
tail -4 "$OUT/gpu_tests.txt"
timeout 200 python bench/kernel_probe.py "$OUT/kernel_probe" quick 2>&1 | grep -v -i warn | tail -40
