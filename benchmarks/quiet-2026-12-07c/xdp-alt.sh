#!/usr/bin/env bash
# xdp-alt.sh ROUNDS BEFORE AFTER: the side-by-side script's AF_XDP and Linux bridge rows for two
# binaries alternated (order swapped each round), at nice -20; raw output xdp-alt-*.txt.
set -euo pipefail
R=$1; B=$2; A=$3
here=$(cd "$(dirname "$0")" && pwd)
for i in $(seq 1 "$R"); do
  if [ $((i % 2)) = 1 ]; then set -- before "$B" after "$A"; else set -- after "$A" before "$B"; fi
  for k in 1 2; do
    tag=$1 bin=$2; shift 2
    echo "round $i $tag $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    FW_BIN=$bin FW_SUFFIX=-x7c nice -n -20 bash "$here/../../scripts/e2e-bench.sh" \
        -d kernel-bridge,freeway-bridge-xdp > "$here/xdp-alt-$tag-$i.txt" 2>&1
    tail -2 "$here/xdp-alt-$tag-$i.txt"
  done
done
