#!/bin/sh
# dir-alt.sh ROUNDS DIRECTIONS BEFORE AFTER: `freeway bench nat --workers 1,2 --runs 5
# --directions DIRECTIONS` of two binaries alternated (order swapped each round), at nice -20;
# output nat-DIRECTIONS-{before,after}-N.{txt,json}.
R=$1; D=$2; B=$3; A=$4
for i in $(seq 1 "$R"); do
  if [ $((i % 2)) = 1 ]; then set -- before "$B" after "$A"; else set -- after "$A" before "$B"; fi
  for k in 1 2; do
    tag=$1 bin=$2; shift 2
    echo "round $i $tag $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    nice -n -20 "$bin" bench nat --workers 1,2 --runs 5 --directions "$D" --json "nat-$D-$tag-$i.json" > "nat-$D-$tag-$i.txt" 2>&1
  done
done
