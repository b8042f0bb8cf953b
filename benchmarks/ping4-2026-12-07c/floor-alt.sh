#!/usr/bin/env bash
# The floor of a user-space forwarder's ping on the e2e test bed: for ROUNDS rounds, in turn,
# the Linux bridge (kb), minfwd.c sleeping in poll() (minpoll; minring: the same reading a
# TPACKET_V2 ring), minfwd.c never sleeping (minspin), and each Freeway variant NAME=BIN:WORKERS[:KIND[:EXTRA]] (EXTRA: a top-level
# configuration line, e.g. pin_workers=false); 200 pings h1 -> h2 10 ms apart,
# avg / p50 / p99 ms. MINFWD is the compiled minfwd.c (default /tmp/minfwd).
# Usage: floor-alt.sh ROUNDS [NAME=BIN:WORKERS[:KIND[:EXTRA]]...]   (as root)
# (`ip netns exec` execs its command, so $! is the forwarder itself and `kill` reaches it.)
set -euo pipefail
ROUNDS=${1:-3}; shift || true
MINFWD=${MINFWD:-/tmp/minfwd}
export FW_SUFFIX=-p4x$$ FW_QUEUES=${FW_QUEUES:-2}
BED=$(dirname "$0")/../../scripts/netns-testbed.sh
TMP=$(mktemp -d)
BG=""
cleanup() { [ -n "$BG" ] && kill "$BG" 2>/dev/null; wait 2>/dev/null; bash $BED down >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
bash $BED up >/dev/null
in_ns() { local n=$1; shift; ip netns exec "fw-$n$FW_SUFFIX" "$@"; }
pings() {
    in_ns h1 ping -c 2 -W 1 10.0.0.2 >/dev/null; sleep 0.3
    in_ns h1 ping -c 200 -i 0.01 -W 1 10.0.0.2 >"$TMP/p.txt" || true
    python3 -c "
import math, re
t = sorted(float(x) for x in re.findall(r'time=([0-9.]+) ms', open('$TMP/p.txt').read()))
print('%-8s n=%3d avg=%.3f p50=%.3f p99=%.3f' % ('$1', len(t), sum(t)/len(t), t[len(t)//2], t[max(0, math.ceil(0.99*len(t))-1)]))"
}
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    in_ns sw ip link add br0 type bridge
    in_ns sw ip link set h1 master br0
    in_ns sw ip link set h2 master br0
    in_ns sw ip link set br0 up
    pings kb
    in_ns sw ip link del br0
    for m in poll ring spin; do
        ip netns exec "fw-sw$FW_SUFFIX" "$MINFWD" $m h1 h2 & BG=$!
        sleep 0.3
        pings min$m
        kill $BG; wait $BG 2>/dev/null || true; BG=""
    done
    for v in "$@"; do
        name=${v%%=*}; IFS=: read -r bin wk kind extra <<<"${v#*=}"; kind=${kind:-afpacket}
        printf 'workers = %s\n%s\n' "$wk" "${extra:-}" >"$TMP/fw.toml"
        for p in h1 h2; do printf '[[port]]\nname = "%s"\nkind = "%s"\n%s = { iface = "%s" }\n' $p $kind $kind $p >>"$TMP/fw.toml"; done
        ip netns exec "fw-sw$FW_SUFFIX" "$bin" run -q --config "$TMP/fw.toml" >/dev/null 2>"$TMP/fw.err" & BG=$!
        sleep 0.7
        pings "$name"
        kill -INT $BG; wait $BG || cat "$TMP/fw.err"; BG=""
    done
done
