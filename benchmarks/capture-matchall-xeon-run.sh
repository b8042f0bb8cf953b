#!/bin/bash
# alternate base and ring binaries, matchall vs none, both topologies, 1 and 2 workers
cd /work/meas/s15
for i in 1 2 3; do
  for b in base arena; do
    echo "=== $b round $i $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    flock -x /work/cpu.lock ./freeway.$b bench capture --workers 1,2 --topology bridge,router --scenarios none,matchall --registry epoch --runs 3 --seconds 2 --json matchall2-$b-$i.json 2>&1 | grep -v "^\s*$" | tail -9
  done
done
