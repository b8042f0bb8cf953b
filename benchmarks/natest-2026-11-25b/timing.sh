#!/bin/sh
# alternates the two binaries N times: bench nat --workers 1,2 --runs 3 --conns 100000
A=$1; B=$2; N=${3:-3}
for i in $(seq 1 $N); do
  for bin in $A $B; do
    echo "== $(basename $bin) $i $(date +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    nice -n -20 $bin bench nat --workers 1,2 --runs 3 --conns 100000 | tail -n 2
  done
done
