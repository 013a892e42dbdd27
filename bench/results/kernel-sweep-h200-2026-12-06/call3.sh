#!/usr/bin/env bash
# Device call 3 (2026-12-06 evening): the tile sweep on the H200 (four tiles, three
# look-back shapes, five estimators), then the kernel's GPU tests. At most 8 files in OUT.
set -u
OUT=$1
export PYTHONUNBUFFERED=1 PYTHONPATH=.
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc;
  python -c 'import json; from bench import harness; print(json.dumps(harness.run_record()))'; } > $OUT/record.txt 2>&1
cat $OUT/record.txt
t0=$(date +%s)
timeout 100 python -c "
import sys
sys.argv = ['kernel_probe', 'run', '$OUT/sweep', 'h200-sweep', 'full', 'sweep']
import bench.kernel_probe as k
k.TILES = [(1, 1024, 4), (1, 2048, 4), (1, 2048, 8), (1, 4096, 8)]
k.main()
" > $OUT/console.txt 2>&1
echo "sweep exit $? after $(( $(date +%s) - t0 )) s"
grep "\] " $OUT/console.txt | grep -v -i warn | sed 's/  */ /g' | cut -c1-150
t0=$(date +%s)
timeout 80 python -m pytest -q -p no:cacheprovider -n 12 -m "gpu or not gpu" tests/unit/test_tiles.py \
  tests/gpu/test_lookback.py > $OUT/tests.txt 2>&1
echo "tests exit $? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/tests.txt
