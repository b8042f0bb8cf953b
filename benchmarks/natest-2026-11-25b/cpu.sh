#!/bin/sh
# CPU time (task-clock) of bench nat's per-packet part, plain + NAT, P packets each; alternated
A=$1; B=$2; N=${3:-3}; P=${4:-30000000}
for i in $(seq 1 $N); do
  for bin in $A $B; do
    for p in $P $((2*P)); do
      t=$(nice -n -20 perf stat -x, -e task-clock $bin bench nat --workers 1 --runs 1 --conns 1 --flows 4096 --packets $p 2>&1 >/dev/null | grep task-clock | cut -d, -f1)
      echo "$(basename $bin) $i $p $t $(date +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
