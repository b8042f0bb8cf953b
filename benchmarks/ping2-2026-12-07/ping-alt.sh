#!/usr/bin/env bash
# Ping-only alternation on the e2e test bed (FW_SUFFIX=-p2x$$): for ROUNDS rounds, each variant
# in turn, 200 pings h1 -> h2 10 ms apart; prints avg, p50, p99 (ms) and, for Freeway, the
# frames each worker took and its sleeps/wake-ups (from `run -j`).
# Variants (VARIANTS, space-separated): kb = Linux bridge; NAME=BIN:WORKERS[:KIND[:EXTRA]] =
# Freeway binary BIN with WORKERS workers on KIND ports (afpacket|afxdp), EXTRA top-level
# config line (e.g. pin_workers=true). PING_PREFIX wraps ping (e.g. "taskset -c 0").
# Usage: ping-alt.sh ROUNDS   (as root)
set -euo pipefail
ROUNDS=${1:-3}
export FW_SUFFIX=-p2x$$ FW_QUEUES=${FW_QUEUES:-2}
BED=$(dirname "$0")/../../scripts/netns-testbed.sh
TMP=$(mktemp -d)
FWPID=""
cleanup() { [ -n "$FWPID" ] && kill -INT "$FWPID" 2>/dev/null; wait 2>/dev/null; bash $BED down >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
bash $BED up >/dev/null
in_ns() { local n=$1; shift; ip netns exec "fw-$n$FW_SUFFIX" "$@"; }
cfg() { # workers kind extra
    printf 'workers = %s\n%s\n' "$1" "$3"
    for p in h1 h2; do
        printf '[[port]]\nname = "%s"\nkind = "%s"\n%s = { iface = "%s" }\n' $p "$2" "$2" $p
    done
}
pings() { # label
    in_ns h1 ${PING_PREFIX:-} ping -c 200 -i 0.01 -W 1 10.0.0.2 >"$TMP/p.txt" || true
    python3 -c "
import math, re
t = sorted(float(x) for x in re.findall(r'time=([0-9.]+) ms', open('$TMP/p.txt').read()))
print('%-14s n=%3d avg=%.3f p50=%.3f p99=%.3f' % ('$1', len(t), sum(t)/len(t), t[len(t)//2], t[max(0, math.ceil(0.99*len(t))-1)]), end='')"
}
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    for v in ${VARIANTS:-kb}; do
        if [ "$v" = kb ]; then
            in_ns sw ip link add br0 type bridge
            in_ns sw ip link set h1 master br0
            in_ns sw ip link set h2 master br0
            in_ns sw ip link set br0 up
            in_ns h1 ping -c 2 -W 1 10.0.0.2 >/dev/null; sleep 0.3
            pings kb; echo
            in_ns sw ip link del br0
            continue
        fi
        name=${v%%=*}; IFS=: read -r bin wk kind extra <<<"${v#*=}"
        cfg "$wk" "${kind:-afpacket}" "${extra:-}" >"$TMP/fw.toml"
        ip netns exec "fw-sw$FW_SUFFIX" "$bin" run -q -j --config "$TMP/fw.toml" >"$TMP/fw.json" 2>"$TMP/fw.err" &
        FWPID=$!
        sleep 0.7
        in_ns h1 ping -c 2 -W 1 10.0.0.2 >/dev/null; sleep 0.3
        pings "$name"
        kill -INT "$FWPID"; wait "$FWPID" || cat "$TMP/fw.err"; FWPID=""
        python3 -c "
import json
j=json.load(open('$TMP/fw.json'))
print('  ' + ' '.join('w%d:pk=%d,sl=%d,wk=%d' % (w['id'], w['packets'], w['sleeps'], w['wakeups']) for w in j['workers']))"
    done
done
