#!/usr/bin/env bash
# 2026-12-07 late: the H200 bar in one call: kernel at 2^26 flat, K = 3 and per-step,
# then the README table (rl-triton carried in bench/.baselines).
set -u
OUT=$1
export PYTHONUNBUFFERED=1 PYTHONPATH=.
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$OUT/record.txt"
python -c 'import json; from bench import harness; print(json.dumps(harness.run_record()))' >> "$OUT/record.txt" 2>&1
cat "$OUT/record.txt"
timeout 150 python -m bench.kernel_probe run "$OUT/kernel" k full flat 2>&1 | grep -v -i warn | tee "$OUT/kernel-console.txt" | grep "default"
echo "== kernel done +$(( $(date +%s) - T0 )) s"
timeout 80 python -m bench.kernel_probe run "$OUT/settings" s full settings,per-step 2>&1 | grep -v -i warn | tee "$OUT/settings-console.txt" | tail -n 14
echo "== settings done +$(( $(date +%s) - T0 )) s"
bash bench/device.sh table "$OUT/t" 2>&1 | tail -n 40
echo "== done +$(( $(date +%s) - T0 )) s"
