#!/bin/bash
# inter.sh OUT TREE...: interleaved rounds of the Parquet CLI (in place, -o) at 1e7 and 5e7; VmHWM
out=$1; shift
cd /tmp/gapb
for t in "$@"; do cp /tmp/w25/e2e-n100000-s0-c1048576-g1.parquet w.parquet; PYTHONPATH=/tmp/gapb/$t python -m rltscan gae w.parquet --device cpu -q --backend cpu >/dev/null; rm w.parquet; done
for r in $(seq ${REPS:-3}); do for t in "$@"; do for mode in inplace out; do for n in 10000000 50000000; do
  src=/tmp/w25/e2e-n$n-s0-c1048576-g1.parquet
  if [ $mode = inplace ]; then cp $src ip.parquet; args="ip.parquet"; else args="$src -o o.parquet --overwrite"; fi
  res=$(PYTHONPATH=/tmp/gapb/$t python sample.py python -m rltscan gae $args --device cpu --json -q --gamma 0.99 --lam 0.95 --backend cpu)
  echo "$t $mode $n $r $(echo $res | python -c 'import json,sys; d=json.load(sys.stdin); print(d["rc"], d["wall"], d["peak_mib_at_s"]["VmHWM"][0], d["peak_mib_at_s"]["VmHWM"][1])')" | tee -a $out
  rm -f ip.parquet o.parquet
done; done; done; done
