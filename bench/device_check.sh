#!/usr/bin/env bash
# One device call: environment, the gpu test suite, a quick benchmark.
# Usage (on the device machine, from the repo root): bash bench/device_check.sh [full|quick]
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
mode=${1:-quick}
out=${OUT:-/tmp/out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv;
  python3 -c "import torch, triton, sys; print(sys.version); print('torch', torch.__version__, 'triton', triton.__version__)"; } 2>&1 | tee "$out/env.txt"
if [ "$mode" != "bench-only" ]; then
  timeout 300 python3 -m pytest tests/test_gpu.py -m gpu -x -q -p no:cacheprovider 2>&1 | tail -40 | tee "$out/gpu_tests.log"
fi
case "$mode" in
  quick) timeout 240 python3 -m rltscan.scan.bench --quick --out "$out" 2>&1 | tail -60 ;;
  batched) timeout 560 python3 -m rltscan.scan.bench --subset batched --out "$out" 2>&1 | tail -80 ;;
  flat) timeout 560 python3 -m rltscan.scan.bench --subset flat --out "$out" 2>&1 | tail -80 ;;
esac
