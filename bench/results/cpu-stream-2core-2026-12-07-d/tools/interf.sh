#!/bin/bash
# inter.sh OUT TREE...: interleaved rounds of the Parquet CLI (in place, -o) at 1e7 and 5e7; VmHWM
out=$1; shift
cd /tmp/gapb
for t in "$@"; do cp /tmp/w25/e2e-n100000-s0-c1048576-g1.$FMT w.$FMT; PYTHONPATH=/tmp/gapb/$t python -m rltscan gae w.$FMT --device cpu -q --backend cpu >/dev/null; rm w.$FMT; done
for r in $(seq ${REPS:-3}); do for t in "$@"; do for mode in inplace out; do for n in 10000000 50000000; do
  src=/tmp/w25/e2e-n$n-s0-c1048576-g1.$FMT
  if [ $mode = inplace ]; then cp $src ip.$FMT; args="ip.$FMT"; else args="$src -o o.$FMT --overwrite"; fi
  res=$(PYTHONPATH=/tmp/gapb/$t python sample.py python -m rltscan gae $args --device cpu --json -q --gamma 0.99 --lam 0.95 --backend cpu)
  echo "$t $mode $n $r $(echo $res | python -c 'import json,sys; d=json.load(sys.stdin); print(d["rc"], d["wall"], d["peak_mib_at_s"]["VmHWM"][0], d["peak_mib_at_s"]["VmHWM"][1])')" | tee -a $out
  rm -f ip.$FMT o.$FMT
done; done; done; done
