#!/usr/bin/env bash
# The host-path breakdown per latency row. Usage (carry bench/.baselines):
#   bash bench/device_host_path.sh $OUT
set -u
OUT=${1:-/tmp/host-path-out}
export PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 280 python bench/host_path.py "$OUT/host_path" 2>&1 | tail -14
