#!/usr/bin/env bash
# Idle wake-ups and ping cost of one or more Freeway binaries, alternated on one test bed
# (scripts/netns-testbed.sh: h1 -> switch namespace -> h2, Freeway bridging the two veth ends
# on AF_PACKET, or AF_XDP with -x). Counts that a loaded machine does not change much:
#
#   idle: for each thread of the process, its context switches (voluntary + involuntary,
#         /proc/PID/task/*/status) per second over SECONDS without traffic, and the whole
#         process's CPU (utime + stime) in percent of one core;
#   ping: 100 pings 10 ms apart h1 -> h2 (each finds the workers asleep): the average round
#         trip and the workers' context switches per ping.
#
# With -r RUNS the binaries alternate RUNS times. Needs root, iproute2, python3.
# Usage: scripts/idle-wakeups.sh [-s SECONDS] [-w WORKERS] [-r RUNS] [-x] BINARY...
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=10
WORKERS=2
RUNS=1
KIND=afpacket
while getopts "s:w:r:x" o; do
    case $o in
    s) SECS=$OPTARG ;;
    w) WORKERS=$OPTARG ;;
    r) RUNS=$OPTARG ;;
    x) KIND=afxdp ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,13p' "$0"; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "idle-wakeups: must run as root" >&2; exit 1; }

export FW_SUFFIX=-iw$$ FW_QUEUES=$WORKERS
TMP=$(mktemp -d)
FWPID=""
# On exit: stop a Freeway still running, remove the bed and the temporary files.
trap 'if [ -n "$FWPID" ]; then kill -INT "$FWPID"; wait "$FWPID"; fi 2>/dev/null
      scripts/netns-testbed.sh down >/dev/null 2>&1; rm -rf "$TMP"' EXIT
scripts/netns-testbed.sh up >/dev/null
in_ns() { local n=$1; shift; ip netns exec "fw-$n$FW_SUFFIX" "$@"; }

{
    printf 'workers = %s\n' "$WORKERS"
    for h in h1 h2; do
        printf '[[port]]\nname = "%s"\nkind = "%s"\n%s = { iface = "%s" }\n' "$h" "$KIND" "$KIND" "$h"
    done
} >"$TMP/fw.toml"

# One line per thread: name, context switches so far; then "cpu TICKS" for the process.
sample() {
    for t in /proc/"$1"/task/*; do
        printf '%s %s\n' "$(tr ' ' _ <"$t/comm")" \
            "$(awk '/ctxt_switches/ {s += $2} END {print s}' "$t/status")"
    done
    printf 'cpu %s\n' "$(awk '{print $14 + $15}' "/proc/$1/stat")"
}

report() { # binary, before, after idle, after ping, seconds
    python3 - "$@" "$(getconf CLK_TCK)" <<'EOF'
import sys
from collections import defaultdict
binary, f0, f1, f2, secs, hz = sys.argv[1:]
secs = float(secs)
def load(f):
    d = defaultdict(int)
    for line in open(f):
        k, v = line.split()
        d[k] += int(v)
    return d
a, b, c = load(f0), load(f1), load(f2)
idle = {k: (b[k] - a[k]) / secs for k in b if k != "cpu"}
cpu = (b["cpu"] - a["cpu"]) * 100 / int(hz) / secs
workers = sum(c[k] - b[k] for k in c if k.startswith("fw-worker"))
print(f"{binary}: idle cpu {cpu:.2f}% of a core, {sum(idle.values()):.0f} switches/s: "
      + ", ".join(f"{k} {v:.0f}" for k, v in sorted(idle.items())))
print(f"{binary}: workers' switches per ping {workers / 100:.1f}")
EOF
}

for run in $(seq 1 "$RUNS"); do
    for bin in "$@"; do
        ip netns exec "fw-sw$FW_SUFFIX" "$bin" run -q --config "$TMP/fw.toml" >/dev/null 2>"$TMP/fw.err" &
        FWPID=$!
        sleep 1
        in_ns h1 ping -q -c 3 -i 0.2 10.0.0.2 >/dev/null || true
        sleep 1
        sample "$FWPID" >"$TMP/s0"
        sleep "$SECS"
        sample "$FWPID" >"$TMP/s1"
        in_ns h1 ping -q -c 100 -i 0.01 -W 1 10.0.0.2 >"$TMP/ping" || true
        sample "$FWPID" >"$TMP/s2"
        kill -INT "$FWPID"
        wait "$FWPID" || cat "$TMP/fw.err" >&2
        FWPID=""
        echo "run $run"
        report "$bin" "$TMP/s0" "$TMP/s1" "$TMP/s2" "$SECS"
        grep rtt "$TMP/ping" || true
    done
done
