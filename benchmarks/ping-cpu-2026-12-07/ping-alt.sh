#!/usr/bin/env bash
# Ping-only alternation on the e2e test bed: for ROUNDS rounds, each datapath in turn
# (Linux bridge; Freeway AF_PACKET hash, workers unpinned (the default on 2 cores); Freeway
# AF_PACKET fanout = "cpu", pin_workers = true), 200 pings h1 -> h2 10 ms apart, with ping
# unpinned and with ping pinned to CPU $PINCPU (taskset). Prints avg and p99 (ms) per line.
# Usage: ping-alt.sh ROUNDS   (run from the repository root, as root)
set -euo pipefail
ROUNDS=${1:-3}
PINCPU=${PINCPU:-0}
FW=${FW_BIN:-$PWD/target/release/freeway}
export FW_SUFFIX=-pa$$ FW_QUEUES=2
BED=scripts/netns-testbed.sh
TMP=$(mktemp -d)
FWPID=""
cleanup() { [ -n "$FWPID" ] && kill -INT "$FWPID" 2>/dev/null; wait 2>/dev/null; bash $BED down >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
bash $BED up >/dev/null
in_ns() { local n=$1; shift; ip netns exec "fw-$n$FW_SUFFIX" "$@"; }
cfg() { # fanout, pin
    printf 'workers = 2\npin_workers = %s\n' "$2"
    for p in h1 h2; do
        printf '[[port]]\nname = "%s"\nkind = "afpacket"\nafpacket = { iface = "%s", fanout = "%s" }\n' $p $p "$1"
    done
}
pings() { # label, taskset prefix...
    local label=$1; shift
    in_ns h1 "$@" ping -c 200 -i 0.01 -W 1 10.0.0.2 >"$TMP/p.txt" || true
    python3 -c "
import math, re
t = sorted(float(x) for x in re.findall(r'time=([0-9.]+) ms', open('$TMP/p.txt').read()))
print('%-28s n=%3d avg=%.3f p50=%.3f p99=%.3f' % ('$label', len(t), sum(t)/len(t), t[len(t)//2], t[max(0, math.ceil(0.99*len(t))-1)]))"
}
both() { # name
    in_ns h1 ping -c 2 -W 1 10.0.0.2 >/dev/null
    sleep 0.5
    pings "$1" env
    pings "$1 ping@cpu$PINCPU" taskset -c "$PINCPU"
}
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    in_ns sw ip link add br0 type bridge
    in_ns sw ip link set h1 master br0
    in_ns sw ip link set h2 master br0
    in_ns sw ip link set br0 up
    both kernel-bridge
    in_ns sw ip link del br0
    for m in "hash false" "cpu true"; do
        set -- $m
        cfg "$1" "$2" >"$TMP/fw.toml"
        # Not through in_ns: $! must be freeway itself, which SIGINT stops.
        ip netns exec "fw-sw$FW_SUFFIX" "$FW" run -q --config "$TMP/fw.toml" >/dev/null 2>"$TMP/fw.err" &
        FWPID=$!
        sleep 0.5
        both "freeway-$1"
        kill -INT "$FWPID"; wait "$FWPID" || cat "$TMP/fw.err"; FWPID=""
    done
done
