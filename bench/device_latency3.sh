#!/usr/bin/env bash
# Issue 12's latency table and the host-path breakdown, after the direct bound launch,
# plus the bound-call tests. Usage (carry bench/.baselines): bash bench/device_latency3.sh $OUT
set -u
OUT=${1:-/tmp/latency3-out}
export PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 200 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "bound or prepared or per_step or deferred or graph" 2>&1 | tail -5 > "$OUT/gpu_tests.txt"
tail -2 "$OUT/gpu_tests.txt"
LATENCY_NO_COMPILE=1 timeout 200 python bench/latency.py "$OUT/latency" 2>&1 | tail -16
timeout 200 python bench/host_path.py "$OUT/host_path" 2>&1 | tail -14
timeout 90 python bench/issue13.py "$OUT/issue13" 2>&1 | tail -16
