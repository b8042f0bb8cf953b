#!/bin/bash
# afp-alt.sh ROUNDS OLD NEW: scripts/e2e-bench.sh -d kernel-bridge,freeway-bridge with FW_BIN
# set to each binary in turn (order swapped each round), from the repository root, as root.
rounds=$1; old=$2; new=$3
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) -eq 1 ]; then order="$old $new"; else order="$new $old"; fi
  for bin in $order; do
    echo "== round $i $bin $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    FW_BIN=$bin nice -n -20 scripts/e2e-bench.sh -d kernel-bridge,freeway-bridge 2>&1 | tail -n 3
  done
done
