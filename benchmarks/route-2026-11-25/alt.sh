#!/bin/bash
# Alternates 643ae32 and HEAD on `bench route`, v4 only matters (v6 table small).
for i in 1 2 3 4; do
  for n in old new; do
    b=/work/freeway-643ae32; [ $n = new ] && b=/tmp/route-head-freeway
    echo "$(date -u +%T) $n $i load $(cut -d' ' -f1 /proc/loadavg)" >> times.txt
    $b bench route --threads 1 --runs 3 --v6 1000 --json b-$n-$i.json > b-$n-$i.txt 2>/dev/null
  done
done
echo done >> times.txt
