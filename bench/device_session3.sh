#!/usr/bin/env bash
# One call on the GPU machine: the whole gpu suite (first GPU run of the fused per-step
# γ_t/λ_t path), issue 13's rows, and the host-path diagnosis per latency row.
# Usage (repo root, carry bench/.baselines): bash bench/device_session3.sh $OUT
set -u
OUT=${1:-/tmp/session3-out}
export PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 150 python bench/host_path.py "$OUT/host_path" 2>&1 | tail -30
timeout 80 python bench/issue13.py "$OUT/issue13" 2>&1 | tail -16
timeout 240 python -m pytest -q -m gpu tests/test_gpu.py -x 2>&1 | tail -40 > "$OUT/gpu_suite.txt"
tail -5 "$OUT/gpu_suite.txt"
