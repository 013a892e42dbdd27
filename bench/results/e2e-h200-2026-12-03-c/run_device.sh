#!/usr/bin/env bash
# issue 12 host path, one device call: e2e (gae, 10^8 steps), the CUDA streaming test,
# the auto-without-triton fallback on a real GPU.
set -u
cd "$(dirname "$0")"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 -c "import sys, torch, triton, numpy, h5py, pyarrow; print(sys.version.split()[0], torch.__version__, triton.__version__, numpy.__version__, h5py.__version__, pyarrow.__version__)" > "$out/versions.txt" 2>&1
ESTIMATORS=gae BUDGET_S=165 PROFILE=0 bash bench/device_e2e.sh 100000000
cp sample_data/cartpole_flat.h5 /tmp/f.h5
B="import sys; sys.modules['triton'] = None; from rltscan.cli import main; sys.argv = ['rltscan', *sys.argv[1:]]; main()"
timeout 60 python3 -c "$B" gae /tmp/f.h5 -o /tmp/f1.h5 --device cuda --json -q > "$out/fallback_auto.json" 2> "$out/fallback_auto.err"; echo "rc=$?" >> "$out/fallback_auto.err"
timeout 60 python3 -c "$B" gae /tmp/f.h5 -o /tmp/f2.h5 --device cuda --backend triton -q > /dev/null 2> "$out/fallback_triton.err"; echo "rc=$?" >> "$out/fallback_triton.err"
timeout 75 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_stream_gpu.py -k gae 2>&1 | tail -15 > "$out/test_stream_gpu.txt"
