#!/usr/bin/env bash
# The session's closing check on the GPU machine, one call: the whole gpu suite at real
# sizes, issue 13's rows (trace family, per-step γ_t/λ_t) and issue 12's latency table
# (without the torch.compile column, for time). Usage (repo root, carry bench/.baselines):
#   bash bench/device_final.sh $OUT
set -u
OUT=${1:-/tmp/final-out}
export PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 70 python bench/issue13.py "$OUT/issue13" 2>&1 | tail -16
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -40 > "$OUT/gpu_suite.txt"
tail -3 "$OUT/gpu_suite.txt"
LATENCY_NO_COMPILE=1 timeout 130 python bench/latency.py "$OUT/latency" 2>&1 | tail -16
