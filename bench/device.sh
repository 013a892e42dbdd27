#!/usr/bin/env bash
# The one entry point on the GPU machine: record the machine and the code, then run the
# named steps, each under its own time limit, writing JSON + markdown into OUT.
#
#   bash bench/device.sh STEP[,STEP...] OUT        (from the repository's root)
#
#   suite     the GPU tests at real sizes (tests/gpu/), and the generic kernel path and the
#             public functions on CUDA (tests/unit/: test_generic_kernel, test_public_functions)
#   table     the README's performance table (bench/table.py): result.json, table.md
#   latency   a repeated call's host path beside rl-triton (bench/latency.py): latency.json, .md
#   kernel    the kernel probe at 2^26 flat steps, tiles and shapes (bench/kernel_probe.py
#             phases flat, shapes): kernel.json, kernel.md
#   settings  K settings in one launch, per-step γ_t, and the K = 3 one-launch rows across
#             tiles (kernel_probe phases settings, per-step, settings-tiles): settings.json,
#             settings.md
#   e2e       file to file at 10^8 steps against the I/O floor (bench/e2e.py): e2e.json, .md
#   ray       --engine ray scaling, CPU then GPU workers (bench/ray_scaling.py): tasks held
#             to their CPU (1-16 workers) and not (1, 8, 16), the disk's write rate per
#             writer count (fsync each vs one batch): ray/result.json, ray/result.md
#             (ray from bench/.wheels if not installed)
#   all       every step above, in that order
#
# OUT/log.txt holds the machine record (GPU, driver, versions, date, the commit where the
# tree is a git checkout and the hash of the code, bench.harness.tree_hash) and each
# step's console; every result JSON carries the same record. A step that runs out of time
# keeps what it wrote (the scripts save as they go); the next step still runs.
# Time limits (s): suite 330, table 340, latency 230, kernel 240, settings 150, e2e 480,
# ray 560: `table,latency` fits one 10-minute device call; `all` does not.
# rl-triton 0.1.3 is timed where bench/.baselines/rl_triton-0.1.3 was carried
# (cp -r <shared>/baselines/rl_triton-0.1.3 bench/.baselines/). BENCH_QUICK=1 runs table,
# kernel and settings on tiny shapes (a check of this script without a GPU, not a
# measurement).
set -u

usage() {
  sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//; /^set -u/d' >&2
  exit 2
}
STEPS="suite table latency kernel settings e2e ray"
[ $# -eq 2 ] || usage
steps=${1//,/ }
OUT=$2
[ "$steps" = all ] && steps=$STEPS
for s in $steps; do
  case " $STEPS " in *" $s "*) ;; *) echo "unknown step: $s" >&2; usage ;; esac
done
mkdir -p "$OUT"
LOG=$OUT/log.txt
QUICK=${BENCH_QUICK:-}
PROBE_SIZE=$([ -n "$QUICK" ] && echo small || echo full)
export PYTHONUNBUFFERED=1 PYTHONPATH=.
for d in bench/.baselines/rl_triton-0.1.3 .baselines/rl_triton-0.1.3; do
  if [ -d "$d/rl_triton" ]; then PYTHONPATH=.:$d; break; fi
done

{
  echo "== bench/device.sh $1 $OUT, $(date -u +%Y-%m-%dT%H:%M:%SZ), PYTHONPATH=$PYTHONPATH"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
    2>&1 || echo "(no nvidia-smi)"
  echo "$(nproc) CPUs; $(uptime)"
  python -c 'import json; from bench import harness; print(json.dumps(harness.run_record()))'
} >>"$LOG" 2>&1
tail -n 4 "$LOG"

# step NAME LIMIT_S COMMAND...: run under the limit, console into the log, its tail here
step() {
  local name=$1 limit=$2 t0 rc tmp
  shift 2
  tmp=$(mktemp)
  t0=$(date +%s)
  echo "== $name (limit ${limit} s): $*" | tee -a "$LOG"
  timeout "$limit" "$@" >"$tmp" 2>&1
  rc=$?
  cat "$tmp" >>"$LOG"
  grep -v -i "warn" "$tmp" | tail -n 30
  rm -f "$tmp"
  echo "== $name: exit $rc after $(($(date +%s) - t0)) s$([ $rc = 124 ] && echo ', time limit')" \
    | tee -a "$LOG"
}

for s in $steps; do
  case $s in
    suite)
      # --dist load: the default loadfile keeps each file on one worker, and 363 of the
      # suite's 391 GPU tests are in tests/gpu/test_gpu.py (counted 2026-12-07)
      step suite 330 python -m pytest -q -p no:cacheprovider -n 8 --dist load \
        -m "gpu or not gpu" \
        tests/gpu tests/unit/test_generic_kernel.py tests/unit/test_public_functions.py ;;
    table)
      if [ -n "$QUICK" ]; then
        step table 340 python -m bench.table "$OUT" --quick --baseline eager
      else
        step table 340 python -m bench.table "$OUT" --budget-s 300
      fi ;;
    latency)
      step latency 230 python -m bench.latency "$OUT" ;;
    kernel)
      step kernel 240 python -m bench.kernel_probe run "$OUT/kernel" "$(basename "$OUT")" \
        "$PROBE_SIZE" flat,shapes ;;
    settings)
      step settings 150 python -m bench.kernel_probe run "$OUT/settings" "$(basename "$OUT")" \
        "$PROBE_SIZE" settings,per-step,settings-tiles ;;
    e2e)
      step e2e 480 python bench/e2e.py --steps "${E2E_STEPS:-100000000}" \
        --formats hdf5,parquet --estimators gae,returns --devices cuda --out "$OUT" \
        --workdir /tmp/rltscan-e2e --budget-s 420 ;;
    ray)
      if ! python -c 'import ray' 2>/dev/null && ls bench/.wheels/*.whl >/dev/null 2>&1; then
        python -m pip install -q --no-deps bench/.wheels/*.whl >>"$LOG" 2>&1
      fi
      step ray 560 python bench/ray_scaling.py --shards 64 --shard-steps 16000000 \
        --workers 1,2,4,8,16 --full 8,16 --disk-probe 1,8,16 --process-floor 1,8 \
        --gpu-workers 16 --scratch /tmp/rltscan-ray --deadline-s 480 --out "$OUT/ray" ;;
  esac
done
