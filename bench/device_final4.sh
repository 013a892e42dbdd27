#!/usr/bin/env bash
# Session 4's closing device run: the whole gpu suite on the final tree (the look-back
# scratch lease, 8 warps for one-tile rows, the tile-override fix), then issue 12's
# side-by-side table and the host-path breakdown beside rl-triton.
# Usage (carry bench/.baselines): bash bench/device_final4.sh $OUT
set -u
OUT=${1:-/tmp/final4-out}
export PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 300 python -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_lookback.py -m "gpu or not gpu" 2>&1 | tail -6 > "$OUT/gpu_suite.txt"
tail -2 "$OUT/gpu_suite.txt"
LATENCY_NO_COMPILE=1 timeout 150 python bench/latency.py "$OUT/latency" 2>&1 | tail -16
timeout 130 python bench/host_path.py "$OUT/host_path" 2>&1 | tail -14
