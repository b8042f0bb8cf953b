#!/bin/bash
# A = 643ae32, B = 5554b2a in the run of 2026-11-25 10:50-10:53 UTC (alternated-loaded.txt).
# alt.sh OUTDIR ROUNDS BIN_A BIN_B [args...]: alternate A and B (order swapped each round)
out=$1; rounds=$2; A=$3; B=$4; shift 4
mkdir -p $out
for i in $(seq 1 $rounds); do
  if [ $((i % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for w in $order; do
    if [ $w = A ]; then bin=$A; else bin=$B; fi
    nice -n -10 $bin bench conntrack "$@" --json $out/$w-$i.json > $out/$w-$i.txt 2>&1
  done
done
echo done > $out/DONE
