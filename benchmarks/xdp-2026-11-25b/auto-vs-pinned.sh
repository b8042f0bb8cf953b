#!/usr/bin/env bash
# Alternates the default (pin_workers = "auto": unpinned on 2 cores with 2 workers and veth
# ports) with pin_workers = true, N times, each an e2e-bench run of the Linux bridge and both
# Freeway bridges; JSON lines per variant in $OUT.
set -u
cd "$(dirname "$0")/../.."
N=${N:-3}
OUT=${OUT:-/tmp/xdp-auto}
mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
    for v in auto pinned; do
        echo "== $i $v $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
        case $v in
        auto) nice -n -20 scripts/e2e-bench.sh -d kernel-bridge,freeway-bridge,freeway-bridge-xdp -j "$OUT/$v.json" ;;
        pinned) FW_OPTS='pin_workers = true' nice -n -20 scripts/e2e-bench.sh -d kernel-bridge,freeway-bridge,freeway-bridge-xdp -j "$OUT/$v.json" ;;
        esac
    done
done
