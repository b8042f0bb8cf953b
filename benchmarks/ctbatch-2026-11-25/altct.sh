#!/bin/bash
# altct.sh OUT ROUNDS BIN_A BIN_B: alternate `bench conntrack 1,2 --compare --runs 3` (order swapped each round)
out=$1; rounds=$2; A=$3; B=$4
for i in $(seq 1 $rounds); do
  if [ $((i % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for w in $order; do
    if [ $w = A ]; then bin=$A; else bin=$B; fi
    echo "== $w $(basename $bin) round $i $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    nice -n -20 $bin bench conntrack 1,2 --compare --runs 3 2>&1 | tail -n 6
  done
done >> $out
