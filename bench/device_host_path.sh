#!/usr/bin/env bash
# The host-path breakdown per latency row. Usage (carry bench/.baselines):
#   bash bench/device_host_path.sh $OUT
set -u
OUT=${1:-/tmp/host-path-out}
mkdir -p "$OUT"
export PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
git log -1 --format='%H %s' > "$OUT/commit.txt" 2>/dev/null || true
git status --short >> "$OUT/commit.txt" 2>/dev/null || true
timeout 280 python bench/host_path.py "$OUT/host_path" 2>&1 | tail -14
