#!/bin/sh
# alt.sh BASE NEW ROUNDS OUT: `bench nat --workers 1,2 --runs 5` of two binaries alternated
# (order swapped each round), each invocation's table and JSON kept in OUT.
BASE=$1; NEW=$2; R=$3; OUT=$4; mkdir -p $OUT
for r in $(seq 1 $R); do
  if [ $((r % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for v in $order; do
    if [ $v = base ]; then b=$BASE; else b=$NEW; fi
    echo "round $r $v $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $OUT/log.txt
    nice -n -20 $b bench nat --workers 1,2 --runs 5 --json $OUT/$v-$r.json | tee -a $OUT/log.txt
  done
done
