#!/bin/sh
# cg.sh BIN TAG OUTDIR: nat-2026-12-07/cg.sh with `--frag-seconds 0` (no reassembly
# threads) and `--separate-threads=yes`: the table's slab preparer threads run beside the
# workers and a thread's end dumps what every thread counted so far, so a phase could be
# split over two dumps and mixed with the preparer's work; here each phase is the sum of its
# worker thread's dumps that hold its function: new plain (new_plain_pass), new NAT
# (new_nat_pass), established plain (established_plain), established NAT (established_nat).
# Per new connection (both passes, fresh and warm, with the flush) and per established
# packet (with the flows' set-up): the difference of the C = 40,000 and 20,000 runs over
# 20,000 connections / 100,000 packets.
BIN=$1; TAG=$2; OUT=$3
for C in 20000 40000; do
  P=$((5*C))
  d=$OUT/$TAG-$C; rm -rf $d; mkdir -p $d; cd $d
  valgrind --tool=callgrind --dump-instr=no --separate-threads=yes \
    --dump-after='*__rust_begin_short_backtrace*' \
    $BIN bench nat --workers 1 --runs 1 --flows 4096 --conns $C --packets $P --frag-seconds 0 > out.txt 2> vg.txt
done
tot() { s=0; for f in $(grep -l "freeway_bench::nat::$2\$" $OUT/$TAG-$1/callgrind.out.*); do
  s=$((s + $(grep -h '^summary:' $f | awk '{print $2}'))); done; echo $s; }
for f in new_plain_pass new_nat_pass established_plain established_nat; do
  a=$(tot 20000 $f); b=$(tot 40000 $f)
  case $f in new_*) n=20000;; *) n=100000;; esac
  python3 -c "print('$TAG $f', $a, $b, 'Ir per unit', round(($b-$a)/$n, 1))"
  echo "  $(grep -l "freeway_bench::nat::$f\$" $OUT/$TAG-20000/callgrind.out.* | tr '\n' ' ')"
done
