#!/bin/sh
# Superseded by ../natperf-2026-12-07b/cg.sh: since conntrack's slab preparer thread and the
# reassembly figures run in `bench nat`, the dump numbers below no longer name these phases.
# cg.sh BIN TAG [OUTDIR]: callgrind of `bench nat`, one dump per worker thread (2: new plain,
# 4: new NAT, 6: established plain, 8: established NAT), C = 20,000 and 40,000 connections,
# P = 5C packets, 4,096 flows; per new connection (dumps 2, 4) and per established packet
# (6, 8): the difference of the two runs' totals over 20,000 connections / 100,000 packets.
BIN=$1; TAG=$2; OUT=${3:-/tmp/natcg}
for C in 20000 40000; do
  P=$((5*C))
  d=$OUT/$TAG-$C; rm -rf $d; mkdir -p $d; cd $d
  valgrind --tool=callgrind --dump-instr=no --dump-after='*__rust_begin_short_backtrace*' \
    $BIN bench nat --workers 1 --runs 1 --flows 4096 --conns $C --packets $P > out.txt 2> vg.txt
done
for k in 2 4 6 8; do
  a=$(grep -h '^summary:' $OUT/$TAG-20000/callgrind.out.*.$k | awk '{print $2}')
  b=$(grep -h '^summary:' $OUT/$TAG-40000/callgrind.out.*.$k | awk '{print $2}')
  case $k in 2|4) n=20000;; *) n=100000;; esac
  python3 -c "print('$TAG dump $k', $a, $b, 'Ir per unit', round(($b-$a)/$n, 1))"
done
