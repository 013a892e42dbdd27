#!/usr/bin/env bash
# Session 4's first device run: the whole gpu suite (the bound-launch refactor and the
# tile-override fix had run on the CPU only), then the kernel probe (where the time goes
# at 2^26 steps). Usage: bash bench/device_session4.sh $OUT
set -u
OUT=${1:-/tmp/session4-out}
export PYTHONPATH=. PYTHONUNBUFFERED=1
bash bench/device_record.sh "$OUT"
timeout 330 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -x 2>&1 | tail -30 > "$OUT/gpu_suite.txt"
tail -4 "$OUT/gpu_suite.txt"
timeout 240 python bench/kernel_probe.py "$OUT/kernel_probe" 2>&1 | tail -100
