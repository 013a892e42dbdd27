#!/usr/bin/env bash
# Device call 2 (2026-12-06 evening): README table, settings/per-step probe, flat default rows.
set -u
OUT=$1
export PYTHONUNBUFFERED=1 PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc;
  python -c 'import json; from bench import harness; print(json.dumps(harness.run_record()))'; } > $OUT/record.txt 2>&1
cat $OUT/record.txt
t0=$(date +%s)
timeout 70 python -m bench.kernel_probe run $OUT/default default full default > $OUT/default-console.txt 2>&1
echo "default exit $? after $(( $(date +%s) - t0 )) s"; grep "\] " $OUT/default-console.txt | grep -v -i warn | cut -c1-200
t0=$(date +%s)
timeout 140 python -m bench.kernel_probe run $OUT/settings settings full settings,per-step > $OUT/settings-console.txt 2>&1
echo "settings exit $? after $(( $(date +%s) - t0 )) s"; grep "\] " $OUT/settings-console.txt | grep -v -i warn | cut -c1-220
t0=$(date +%s)
mkdir -p $OUT/table
timeout 320 python -m bench.table $OUT/table --budget-s 290 > $OUT/table-console.txt 2>&1
echo "table exit $? after $(( $(date +%s) - t0 )) s"; tail -40 $OUT/table-console.txt | grep -v -i warn
