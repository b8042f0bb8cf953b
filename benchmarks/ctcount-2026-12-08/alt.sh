#!/bin/sh
# alt.sh ROUNDS BEFORE AFTER: the conntrack benchmarks of two release binaries
# (/tmp/freeway-BEFORE, /tmp/freeway-AFTER) alternated, the order swapped each round, at
# nice -20; raw text and JSON per benchmark, binary and round in the current directory.
R=$1 A=$2 B=$3
for r in $(seq 1 "$R"); do
  if [ $((r % 2)) = 1 ]; then set -- "$A" "$B"; else set -- "$B" "$A"; fi
  for b in "$@"; do
    bin=/tmp/freeway-$b
    echo "round $r $b $(date -u +%H:%M:%S)"
    nice -n -20 $bin bench conntrack-table --workers 1,2 --runs 3 --json cttable-$b-$r.json > cttable-$b-$r.txt 2>&1
    nice -n -20 $bin bench conntrack 1,2 --runs 5 --json conntrack-$b-$r.json > conntrack-$b-$r.txt 2>&1
    nice -n -20 $bin bench conntrack-churn --runs 3 --json churn-$b-$r.json > churn-$b-$r.txt 2>&1
    nice -n -20 $bin bench nat --workers 1,2 --runs 3 --json nat-$b-$r.json > nat-$b-$r.txt 2>&1
  done
done
