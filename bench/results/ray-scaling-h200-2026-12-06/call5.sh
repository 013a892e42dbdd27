#!/usr/bin/env bash
# Device call 5 (2026-12-06 night, issue 25): --engine ray over the whole 1.024e9-step
# dataset at 1, 2, 4, 8, 16 CPU workers and 16 GPU-sharing workers, after the edge-block
# pass 1 (24e2f50) and the early dictionary fallback (8cba301). At most 8 files in OUT.
set -u
OUT=$1
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\)|NUMA node\(s\))"; } > $OUT/record.txt 2>&1
cat $OUT/record.txt
python -c 'import ray' 2>/dev/null || python -m pip install -q --no-deps bench/.wheels/*.whl > /dev/null 2>&1
t0=$(date +%s)
PYTHONPATH=. timeout 500 python bench/ray_scaling.py --shards 64 --shard-steps 16000000 \
  --workers 1,2,4,8,16 --shards-per-worker 64 --gpu-workers 16 --local-gpu-shards 4 \
  --scratch /tmp/rltscan-ray --deadline-s 420 --out $OUT/ray > $OUT/ray-console.txt 2>&1
echo "ray exit $? after $(( $(date +%s) - t0 )) s"
grep -E "^(generated|warm|cpu|gpu)" $OUT/ray-console.txt | cut -c1-200
grep -v -i warn $OUT/ray-console.txt | grep -i -E "error|traceback" | head -5
cat $OUT/ray/result.md | head -30
