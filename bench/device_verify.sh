#!/usr/bin/env bash
# One device call: the gpu-marked tests, then the whole suite with CUDA present (real tiles, no interpreter).
# Usage (device, repo root): bash bench/device_verify.sh
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}
mkdir -p "$out"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv;
  python3 -c "import torch, triton, sys; print(sys.version); print('torch', torch.__version__, 'triton', triton.__version__)"; } 2>&1 | tee "$out/env.txt"
timeout 200 python3 -m pytest tests/test_gpu.py tests/test_chunks.py -m gpu -q -p no:cacheprovider 2>&1 | tail -30 | tee "$out/gpu_marked.log"

timeout 330 python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -40 | tee "$out/full_suite_cuda.log"
