#!/usr/bin/env bash
# The quiet figures of the 2026-12-07 evening stop (as root, nothing else running):
# run.sh BEFORE AFTER: ping-only alternation (epoll_wait against poll(), AF_PACKET and AF_XDP,
# the Linux bridge in the same rounds), then the side-by-side script of AFTER, then bench nat
# of both alternated.
set -euo pipefail
B=$1; A=$2
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
VARIANTS="kb pkt-before=$B:1 pkt-after=$A:1 xdp-before=$B:1:afxdp xdp-after=$A:1:afxdp" \
    nice -n -20 bash ../ping2-2026-12-07/ping-alt.sh 6 2>&1 | tee ping-alt.txt
FW_BIN=$A FW_SUFFIX=-q7c nice -n -20 bash ../../scripts/e2e-bench.sh -r 3 \
    -d kernel-bridge,freeway-bridge,freeway-bridge-xdp -j e2e.jsonl 2>&1 | tee e2e.txt
bash ../quiet-2026-12-07b/nat-alt.sh 3 "$B" "$A" 2>&1 | tee nat-alt.txt
