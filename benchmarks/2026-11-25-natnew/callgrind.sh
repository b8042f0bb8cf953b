#!/bin/bash
# usage: cg.sh BIN TAG ; callgrind per-thread dumps for C=20000 and 40000
BIN=$1; TAG=$2; D=/tmp/natnew/cg-$TAG; rm -rf $D; mkdir -p $D; cd $D
for C in 20000 40000; do
  valgrind --tool=callgrind --callgrind-out-file=$D/cg.$C.%p --dump-after='*__rust_begin_short_backtrace*' $BIN bench nat --workers 1 --runs 1 --flows 1024 --conns $C --packets $((5*C)) > $D/out.$C 2>&1
done
for C in 20000 40000; do
  for f in $D/cg.$C.*; do echo "$C $f $(grep -m1 '^summary:\|^totals:' $f)"; done
done
