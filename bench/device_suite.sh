#!/usr/bin/env bash
# The whole gpu suite at real sizes, on the GPU machine. Usage: bash bench/device_suite.sh $OUT
set -u
OUT=${1:-/tmp/suite-out}
export PYTHONPATH=. PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 540 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -60 > "$OUT/gpu_suite.txt"
tail -25 "$OUT/gpu_suite.txt"
