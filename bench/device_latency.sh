#!/usr/bin/env bash
# Issue 12 on the GPU machine, one call: the gpu tests of the call path, then the
# profile breakdown and the side-by-side latency table. Usage (repo root):
#   bash bench/device_latency.sh $OUT     (carry bench/.baselines for rl-triton)
set -u
OUT=${1:-/tmp/latency-out}
mkdir -p "$OUT/tests" "$OUT/profile" "$OUT/table"
export PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/tests/gpu.txt"
timeout 240 python -m pytest -q -m gpu tests/test_gpu.py -x \
  -k "bound or direct or deferred or custom_op or prepare" \
  2>&1 | tail -30 | tee "$OUT/tests/pytest.txt"
timeout 120 python bench/profile_latency.py "$OUT/profile" > "$OUT/profile/stdout.txt" 2>&1
tail -5 "$OUT/profile/stdout.txt"
timeout 400 python bench/latency.py "$OUT/table" 2>&1 | tail -25
