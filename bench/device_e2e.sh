#!/usr/bin/env bash
# One device call: the file-to-file benchmark on CUDA (floors + rltscan) and a per-call profile.
# Usage (device, repo root): bash bench/device_e2e.sh STEPS
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
steps=${1:-100000000}
out=${OUT:-/tmp/out}
mkdir -p "$out"
timeout 420 python3 bench/e2e.py --steps "$steps" --formats hdf5,parquet --estimators gae,returns \
  --devices cuda --out "$out" --workdir /tmp/e2e --budget-s 400 2>&1 | tail -25
f=$(ls /tmp/e2e/e2e-n${steps}-*.h5 | head -1)
timeout 120 python3 bench/profile_stream.py "$f" --device cuda --out "$out" 2>&1 | tail -6 | tee "$out/profile_stream.txt"
