#!/usr/bin/env bash
# One device call: the file-to-file benchmark on CUDA (floors, import torch + CUDA init,
# rltscan) and a per-call profile.
# Usage (device, repo root): [ESTIMATORS=gae,returns] [BUDGET_S=400] [PROFILE=1] \
#   bash bench/device_e2e.sh STEPS
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
steps=${1:-100000000}
out=${OUT:-/tmp/out}
ests=${ESTIMATORS:-gae,returns}
budget=${BUDGET_S:-400}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; uptime; } \
  > "$out/machine.txt" 2>&1
timeout $((budget + 20)) python3 bench/e2e.py --steps "$steps" --formats hdf5,parquet \
  --estimators "$ests" --devices cuda --out "$out" --workdir /tmp/e2e --budget-s "$budget" \
  2>&1 | tail -25
if [ "${PROFILE:-1}" = 1 ]; then
  f=$(ls /tmp/e2e/e2e-n${steps}-*.h5 | head -1)
  timeout 120 python3 bench/profile_stream.py "$f" --device cuda --out "$out" 2>&1 | tail -6 \
    | tee "$out/profile_stream.txt"
fi
