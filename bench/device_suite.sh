#!/usr/bin/env bash
# The whole gpu suite at real sizes, on the GPU machine. Usage: bash bench/device_suite.sh $OUT
set -u
OUT=${1:-/tmp/suite-out}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/gpu.txt"
git log -1 --format='%H %s' > "$OUT/commit.txt" 2>/dev/null || true
git status --short >> "$OUT/commit.txt" 2>/dev/null || true
timeout 540 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -60 > "$OUT/gpu_suite.txt"
tail -25 "$OUT/gpu_suite.txt"
