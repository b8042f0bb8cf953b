#!/bin/sh
# usage: run.sh BIN TAG ; callgrind dumps for C=20000 and 40000, prints per-thread totals
BIN=$1; TAG=$2
for C in 20000 40000; do
  P=$((5*C))
  d=/tmp/natest-cg2/$TAG-$C; rm -rf $d; mkdir -p $d; cd $d
  valgrind --tool=callgrind --dump-instr=yes --dump-after='*__rust_begin_short_backtrace*' $BIN bench nat --workers 1 --runs 1 --flows 1024 --conns $C --packets $P > out.txt 2> vg.txt
  for f in callgrind.out.*; do
    printf "%s %s " "$C" "$f"; grep -E "^(summary|totals):" $f | head -1
  done
done
