#!/usr/bin/env bash
# One device call: kernel tiles A/B (kexp tree), main's default rows, then Ray scaling.
set -u
OUT=$1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
git rev-parse --short HEAD 2>/dev/null
(cd .devcarry/kexp && PYTHONPATH=. timeout 110 python -m bench.kernel_probe run $OUT/kexp kexp full flat 2>&1 | grep -v -i warn | grep "\] ")
PYTHONPATH=. timeout 45 python -m bench.kernel_probe run $OUT/main main full default 2>&1 | grep -v -i warn | grep "\] "
python -c 'import ray' 2>/dev/null || python -m pip install -q --no-deps bench/.wheels/*.whl > $OUT/pip.txt 2>&1
PYTHONPATH=. PYTHONUNBUFFERED=1 timeout 400 python bench/ray_scaling.py --shards 64 --shard-steps 16000000 \
  --workers 1,2,4,8,16 --full 8 --process-floor 1,8 --gpu-workers 16 \
  --scratch /tmp/rltscan-ray --deadline-s 330 --out $OUT/ray > $OUT/ray-console.txt 2>&1
echo "ray exit $?"; grep -v -i warn $OUT/ray-console.txt | tail -25
