#!/bin/sh
# cgnat.sh BIN TAG: callgrind, one dump per thread, C=20000/40000 (P = 5C); per established packet: (dump .6 and .8 differences)/100000
BIN=$1; TAG=$2
for C in 20000 40000; do
  P=$((5*C))
  d=/tmp/ctb/nat-$TAG-f${FLOWS:-1024}-$C; rm -rf $d; mkdir -p $d; cd $d
  valgrind --tool=callgrind --dump-after='*__rust_begin_short_backtrace*' $BIN bench nat --workers 1 --runs 1 --flows ${FLOWS:-1024} --conns $C --packets $P > out.txt 2> vg.txt
done
for k in 6 8; do
  a=$(grep -h '^summary:' /tmp/ctb/nat-$TAG-f${FLOWS:-1024}-20000/callgrind.out.*.$k | awk '{print $2}')
  b=$(grep -h '^summary:' /tmp/ctb/nat-$TAG-f${FLOWS:-1024}-40000/callgrind.out.*.$k | awk '{print $2}')
  python3 -c "print('$TAG dump $k Ir/pkt', ($b-$a)/100000)"
done
