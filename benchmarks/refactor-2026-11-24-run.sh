#!/usr/bin/env bash
# The datapath restructuring of 2026-11-24 (crate split, pipeline edges, one parse per packet,
# ports' drops in the snapshot), measured before and after: the release binaries of 643ae32
# (before) and of the commit named as AFTER, run alternately, round by round, each benchmark
# with its usual in-binary baseline. Raw JSON lands in benchmarks/refactor-2026-11-24/.
#   BEFORE=/path/to/freeway-643ae32 AFTER=/path/to/freeway-HEAD benchmarks/refactor-2026-11-24-run.sh [ROUNDS]
set -euo pipefail
rounds=${1:-3}
out=${OUT:-benchmarks/refactor-2026-11-24}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
    for which in before after; do
        bin=$BEFORE; [ "$which" = after ] && bin=$AFTER
        echo "== round $r: $which ($bin)"
        "$bin" bench bridge --workers 1,2 --runs 3 --seconds 2 --json "$out/bridge-$which-$r.json"
        "$bin" bench route --threads 1,2 --runs 3 --json "$out/route-$which-$r.json"
        "$bin" bench conntrack 1,2 --compare --runs 3 --json "$out/conntrack-$which-$r.json"
        "$bin" bench capture --workers 1,2 --topology bridge,router --scenarios none,matchall --registry epoch,rwlock \
            --runs 3 --seconds 2 --json "$out/capture-$which-$r.json"
    done
done
