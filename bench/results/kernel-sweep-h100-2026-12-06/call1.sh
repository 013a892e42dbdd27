#!/usr/bin/env bash
# Device call 1 (2026-12-06 evening): tile sweep over long rows, then the GPU suite.
set -u
OUT=$1
export PYTHONUNBUFFERED=1 PYTHONPATH=.
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc;
  python -c 'import json; from rltscan import bench; print(json.dumps(bench.run_record()))'; } > $OUT/record.txt 2>&1
cat $OUT/record.txt
t0=$(date +%s)
timeout 290 python -m bench.kernel_probe run $OUT/sweep sweep full sweep > $OUT/sweep-console.txt 2>&1
echo "sweep exit $? after $(( $(date +%s) - t0 )) s"
grep "\] " $OUT/sweep-console.txt | grep -v -i warn | awk '{print $2, $3, $4, $6, $(NF-6), $(NF-2)}' | head -120
t0=$(date +%s)
timeout 250 python -m pytest -q -p no:cacheprovider -n 12 -m "gpu or not gpu" tests/gpu \
  tests/unit/test_generic_kernel.py tests/unit/test_public_functions.py > $OUT/suite.txt 2>&1
echo "suite exit $? after $(( $(date +%s) - t0 )) s"; tail -5 $OUT/suite.txt
