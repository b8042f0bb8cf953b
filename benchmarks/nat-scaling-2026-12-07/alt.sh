#!/bin/bash
# Alternates before (main a95cf69) and after (wt-nat2), order swapped each round.
out=$1; rounds=$2
for r in $(seq 1 $rounds); do
  if [ $((r % 2)) -eq 1 ]; then order="base after"; else order="after base"; fi
  for b in $order; do
    echo "=== round $r $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    nice -n -20 ./$b bench nat --workers 1,2 --runs 5 --frag-seconds 0.01 2>&1 | grep -v fragment
  done
done > $out
