#!/bin/bash
# hashes.sh TREE: output files' sha256 of the CLI's GAE/returns/vtrace-less runs, in place and -o
t=$1; cd /tmp/gapb; out=/tmp/gapb/hash-$(basename $t); rm -rf $out; mkdir $out
for src in /tmp/w25/e2e-n10000000-s0-c1048576-g1.parquet /tmp/w25/e2e-n10000000-s0-c1048576-g1.h5 /tmp/gapb/nonv.h5 /tmp/gapb/nonv.parquet; do
  for cmd in gae returns td-lambda; do
    b=$(basename $src); ext=${b##*.}
    cp $src $out/ip-$cmd-$b
    PYTHONPATH=$t python -m rltscan $cmd $out/ip-$cmd-$b --device cpu --backend cpu -q >/dev/null 2>$out/err-ip-$cmd-$b; echo "rc=$?" >> $out/err-ip-$cmd-$b
    PYTHONPATH=$t python -m rltscan $cmd $src -o $out/o-$cmd-$b --device cpu --backend cpu -q >/dev/null 2>$out/err-o-$cmd-$b; echo "rc=$?" >> $out/err-o-$cmd-$b
  done
done
cd $out && sha256sum * | sort -k2
