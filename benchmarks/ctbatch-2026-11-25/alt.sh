#!/bin/bash
# alt.sh OUT ROUNDS TAIL BIN_A BIN_B ARGS...: alternate `BIN ARGS...` between two binaries
# (order swapped each round), keeping the last TAIL lines of each invocation.
# The conntrack series ran `alt.sh OUT N 6 A B bench conntrack 1,2 --compare --runs 3`,
# the NAT series `alt.sh OUT N 2 A B bench nat --workers 1,2 --runs 3 --conns 10000`.
out=$1; rounds=$2; keep=$3; A=$4; B=$5; shift 5
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for w in $order; do
    if [ "$w" = A ]; then bin=$A; else bin=$B; fi
    echo "== $w $(basename "$bin") round $i $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    nice -n -20 "$bin" "$@" 2>&1 | tail -n "$keep"
  done
done >> "$out"
