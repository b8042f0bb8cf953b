#!/usr/bin/env bash
# End-to-end benchmark through Linux network namespaces: the same test bed
# (scripts/netns-testbed.sh: hosts h1, h2 joined to a switch namespace by veth pairs, offloads
# off) carries, in one go, five datapaths in turn:
#
#   kernel-bridge     the Linux bridge in the switch namespace (the "before")
#   freeway-bridge    Freeway bridging the two veth ends (AF_PACKET)
#   freeway-bridge-xdp the same on AF_XDP ports (native XDP on the veths, copy mode)
#   freeway-router    Freeway routing between 10.1.0.0/24 and 10.2.0.0/24
#   freeway-conntrack the router with connection tracking and the stateful firewall
#
# and measures for each: the CPU the datapath's process uses while idle ("idle cpu %", of one
# core, from /proc/PID/stat over 5 s without traffic; "-" for the kernel's datapath); ping
# round-trip times h1 -> h2, 200 pings 10 ms apart, average and 99th percentile of the
# per-packet times ("ping avg/p99 ms": at that spacing an idle datapath is asleep when each
# ping comes); 64-byte frames per second that reach h2's kernel when Freeway's own
# generator (one worker pinned to CPU 0, bridged onto h1's eth0 through AF_PACKET) sends as
# fast as it can ("gen64 pps", h2's rx_packets counter); the same with iperf3 as the sender
# (-u -b 0 -l 18: 64-byte frames; iperf3's own rate limits it, "iperf3 pps", packets its
# server received); and single-stream TCP throughput h1 -> h2 (iperf3, with its retransmit
# count). With -r RUNS the whole sequence runs RUNS times (the datapaths alternating) and a
# table of medians follows. Results: a table on stdout, and JSON lines with -j FILE.
#
# Needs root, iproute2, iperf3, python3 and a release build (cargo build --release; FW_BIN
# names another freeway binary, e.g. an older build to compare). -d LIST measures only the
# datapaths named in the comma-separated LIST (e.g. -d freeway-bridge,freeway-bridge-xdp to
# set AF_PACKET against AF_XDP in alternation); FW_XDP_OPTS adds fields to the AF_XDP ports'
# tables (e.g. FW_XDP_OPTS=', mode = "skb"'); FW_OPTS adds top-level lines to every Freeway
# datapath's configuration, not the generator's (e.g. FW_OPTS='pin_workers = false'). Usage:
#   scripts/e2e-bench.sh [-s SECONDS] [-w WORKERS] [-r RUNS] [-j FILE] [-d LIST]
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=5
WORKERS=2
RUNS=1
JSON=""
ONLY=""
while getopts "s:w:r:j:d:" o; do
    case $o in
    s) SECS=$OPTARG ;;
    w) WORKERS=$OPTARG ;;
    r) RUNS=$OPTARG ;;
    j) JSON=$OPTARG ;;
    d) ONLY=",$OPTARG," ;;
    *) sed -n '2,30p' "$0"; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "e2e-bench: must run as root" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "e2e-bench: iperf3 not installed" >&2; exit 1; }
FW=${FW_BIN:-$PWD/target/release/freeway}
[ -x "$FW" ] || { echo "e2e-bench: build first: cargo build --release (or set FW_BIN)" >&2; exit 1; }

export FW_SUFFIX=-e2e$$ FW_QUEUES=$WORKERS
BED=scripts/netns-testbed.sh
TMP=$(mktemp -d)
ALL=$TMP/all.json
FWPID=""
DPPID=""
cleanup() {
    [ -n "$FWPID" ] && kill -INT "$FWPID" 2>/dev/null && wait "$FWPID" 2>/dev/null || true
    bash $BED down >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
bash $BED up >/dev/null
ns() { echo "fw-$1$FW_SUFFIX"; }
in_ns() { local n=$1; shift; ip netns exec "$(ns "$n")" "$@"; }

addr() { # host, address/len, gateway or ""
    in_ns "$1" ip addr flush dev eth0
    in_ns "$1" ip addr add "$2" dev eth0
    [ -z "$3" ] || in_ns "$1" ip route add default via "$3"
}

ports() { # vlan of h1, vlan of h2, port kind (default afpacket)
    local k=${3:-afpacket} o=""
    [ "$k" != afxdp ] || o=${FW_XDP_OPTS:-}
    printf 'workers = %s\n%s\n' "$WORKERS" "${FW_OPTS:-}"
    printf '[[port]]\nname = "h1"\nkind = "%s"\n%s = { iface = "h1"%s }\nvlan = { mode = "access", vlan = %s }\n' "$k" "$k" "$o" "$1"
    printf '[[port]]\nname = "h2"\nkind = "%s"\n%s = { iface = "h2"%s }\nvlan = { mode = "access", vlan = %s }\n' "$k" "$k" "$o" "$2"
}
ROUTER='
[router]
mac = "02:fe:00:00:00:01"
[[interface]]
name = "v10"
vlan = 10
addr = ["10.1.0.1/24"]
[[interface]]
name = "v20"
vlan = 20
addr = ["10.2.0.1/24"]
'

start_freeway() { # config text
    printf '%s\n' "$1" >"$TMP/fw.toml"
    # `ip netns exec` execs freeway: $! is freeway itself, which SIGINT stops cleanly.
    ip netns exec "$(ns sw)" "$FW" run -q -j --config "$TMP/fw.toml" >"$TMP/fw.json" 2>"$TMP/fw.err" &
    FWPID=$!
    DPPID=$FWPID
    sleep 0.5
}
stop_freeway() {
    kill -INT "$FWPID"
    wait "$FWPID" || { cat "$TMP/fw.err" >&2; return 1; }
    FWPID=""
    DPPID=""
}

# Percent of one core the datapath's process ($DPPID) uses over 5 s without traffic ("-"
# without a process: the kernel's datapath).
idle_cpu() {
    [ -n "$DPPID" ] || { echo -; return; }
    local hz t0 t1
    hz=$(getconf CLK_TCK)
    t0=$(awk '{print $14 + $15}' "/proc/$DPPID/stat")
    sleep 5
    t1=$(awk '{print $14 + $15}' "/proc/$DPPID/stat")
    python3 -c "print(round(($t1 - $t0) * 100 / $hz / 5, 1))"
}

# Round trips h1 -> $1: 200 pings 10 ms apart; prints the average and the 99th percentile of
# the per-packet times in ms (nearest rank), or "0 0" if none came back.
ping_lat() {
    in_ns h1 ping -c 200 -i 0.01 -W 1 "$1" >"$TMP/ping.txt" || true
    python3 -c "
import math, re
t = sorted(float(x) for x in re.findall(r'time=([0-9.]+) ms', open('$TMP/ping.txt').read()))
if not t:
    print(0, 0)
else:
    print(round(sum(t) / len(t), 3), t[max(0, math.ceil(0.99 * len(t)) - 1)])"
}

rx_packets() { # host: packets its eth0 received so far
    in_ns "$1" cat /sys/class/net/eth0/statistics/rx_packets
}

# 64-byte frames per second that reach h2, sent by Freeway's own generator bridged onto
# h1's eth0 through AF_PACKET (one worker pinned to CPU 0), counted by h2's kernel.
# The worker is pinned by `pin_workers`, not the process by `taskset`: the generator's
# control thread, which ends the run after `duration_secs`, must be free to run on another
# core, or a worker spinning at real-time priority (the script run under `chrt -f`) starves
# it on CPU 0 and the run never ends. `timeout` stops a generator that overstays anyway.
gen_pps() { # destination address, destination MAC
    local cfg=$TMP/gen.toml before after
    cat >"$cfg" <<EOF
workers = 1
pin_workers = true
duration_secs = $((SECS + 1))
[[port]]
name = "gen"
kind = "gen"
gen = { src_macs = ["02:00:00:00:00:01"], dst_macs = ["$2"], src_ip = "$(in_ns h1 ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)", dst_ip = "$1", flows = 64, frame_size = [64] }
[[port]]
name = "eth0"
kind = "afpacket"
afpacket = { iface = "eth0" }
EOF
    in_ns h1 timeout -s INT -k 5 $((SECS + 15)) "$FW" run -q --config "$cfg" >/dev/null 2>"$TMP/gen.err" &
    local g=$!
    sleep 1
    before=$(rx_packets h2)
    sleep "$SECS"
    after=$(rx_packets h2)
    wait "$g" || { cat "$TMP/gen.err" >&2; return 1; }
    echo $(((after - before) / SECS))
}

# The test bed turns GRO off on the veths; Freeway changes no offload. Linux from 5.13 until
# "net: veth: do not manipulate GRO when using XDP" (6.9, and the stable kernels it went to)
# turns GRO on on a veth when an XDP program is attached and the user had not asked for it,
# keeps it on while the program stays (`ethtool -K gro off` does not hold) and clears it
# again when the program leaves. Its GRO runs only on frames the program passes to the
# stack, and Freeway's program redirects every frame to its sockets, so the AF_XDP row is the
# same either way; this says when it happened (once the XDP program is attached).
gro_check() {
    local d
    command -v ethtool >/dev/null || return 0
    for d in h1 h2; do
        in_ns sw ethtool -k "$d" | grep -q '^generic-receive-offload: on' || continue
        in_ns sw ethtool -K "$d" gro off 2>/dev/null || true
        in_ns sw ethtool -k "$d" | grep -q '^generic-receive-offload: on' &&
            echo "e2e-bench: $d: the kernel turned GRO on with the XDP program attached (veth before Linux 6.9); it goes off again when Freeway stops" >&2
    done
    return 0
}

# Whether datapath $1 is to be measured (-d).
wanted() { [ -z "$ONLY" ] || [[ $ONLY == *",$1,"* ]]; }

measure() { # name, destination address, destination MAC (the next hop's)
    local name=$1 dst=$2 pps tcp retr gpps cpu avg p99
    # Warm up ARP (and the router's neighbour entries) before measuring.
    in_ns h1 ping -c 2 -W 1 "$dst" >/dev/null || { echo "e2e-bench: $name: $dst unreachable" >&2; return 1; }
    cpu=$(idle_cpu)
    read -r avg p99 < <(ping_lat "$dst")
    in_ns h2 iperf3 -s -1 -D -p 5201 --logfile "$TMP/srv-udp.log"
    sleep 0.3
    in_ns h1 taskset -c 0 iperf3 -c "$dst" -p 5201 -u -b 0 -l 18 -t "$SECS" -J >"$TMP/udp.json" || true
    pps=$(python3 -c "
import json,sys
j=json.load(open('$TMP/udp.json'))
s=j['end']['sum']
print(round((s['packets']-s['lost_packets'])/s['seconds']))" 2>/dev/null || echo 0)
    sleep 0.5
    in_ns h2 iperf3 -s -1 -D -p 5202 --logfile "$TMP/srv-tcp.log"
    sleep 0.3
    in_ns h1 iperf3 -c "$dst" -p 5202 -t "$SECS" -J >"$TMP/tcp.json" || true
    read -r tcp retr < <(python3 -c "
import json
j=json.load(open('$TMP/tcp.json'))
e=j['end']
print(round(e['sum_received']['bits_per_second']/1e9, 3), e['sum_sent'].get('retransmits', 0))" 2>/dev/null || echo "0 0")
    sleep 0.5
    gpps=$(gen_pps "$dst" "$3")
    printf "$ROW" "$name" "$cpu" "$avg" "$p99" "$gpps" "$pps" "$tcp" "$retr"
    [ "$cpu" != - ] || cpu=null
    printf '{"run":%s,"datapath":"%s","workers":%s,"seconds":%s,"idle_cpu_pct":%s,"ping_avg_ms":%s,"ping_p99_ms":%s,"gen64_pps":%s,"iperf3_udp64_pps":%s,"tcp_gbps":%s,"tcp_retransmits":%s}\n' \
        "$RUN" "$name" "$WORKERS" "$SECS" "$cpu" "$avg" "$p99" "$gpps" "$pps" "$tcp" "$retr" >>"$ALL"
    sleep 0.5
}

ROW='%-18s %10s %9s %9s %12s %12s %9s %12s\n'
HEAD=(datapath "idle cpu%" "ping avg" "ping p99" "gen64 pps" "iperf3 pps" "tcp Gb/s" retransmits)

# Open vSwitch's userspace datapath would be one more row; it is not measured yet.
command -v ovs-vswitchd >/dev/null && echo "e2e-bench: Open vSwitch is installed but not measured (no ovs-netdev row yet)" >&2

for RUN in $(seq 1 "$RUNS"); do
[ "$RUNS" -eq 1 ] || echo "run $RUN of $RUNS"
# shellcheck disable=SC2059
printf "$ROW" "${HEAD[@]}"

# One subnet for the bridges (the routers' rows below renumber the hosts).
addr h1 10.0.0.1/24 ""
addr h2 10.0.0.2/24 ""

# 1. The Linux bridge.
if wanted kernel-bridge; then
    in_ns sw ip link add br0 type bridge
    in_ns sw ip link set h1 master br0
    in_ns sw ip link set h2 master br0
    in_ns sw ip link set br0 up
    measure kernel-bridge 10.0.0.2 02:00:00:00:00:02
    in_ns sw ip link del br0
fi

# 2. Freeway's bridge.
if wanted freeway-bridge; then
    start_freeway "$(ports 1 1)"
    measure freeway-bridge 10.0.0.2 02:00:00:00:00:02
    stop_freeway
fi

# 2b. The same on AF_XDP ports.
if wanted freeway-bridge-xdp; then
    start_freeway "$(ports 1 1 afxdp)"
    gro_check
    measure freeway-bridge-xdp 10.0.0.2 02:00:00:00:00:02
    stop_freeway
fi

# 3. Freeway's router.
addr h1 10.1.0.2/24 10.1.0.1
addr h2 10.2.0.2/24 10.2.0.1
if wanted freeway-router; then
    start_freeway "$(ports 10 20)$ROUTER"
    measure freeway-router 10.2.0.2 02:fe:00:00:00:01
    stop_freeway
fi

# 4. The router with conntrack and the stateful firewall.
if wanted freeway-conntrack; then
    start_freeway "$(ports 10 20)$ROUTER
[conntrack]
max = 100000
[firewall]
allow_new_from = [\"h1\"]"
    measure freeway-conntrack 10.2.0.2 02:fe:00:00:00:01
    stop_freeway
fi
done

[ -z "$JSON" ] || cat "$ALL" >>"$JSON"
if [ "$RUNS" -gt 1 ]; then
    echo "medians of $RUNS runs"
    python3 - "$ALL" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ["idle_cpu_pct", "ping_avg_ms", "ping_p99_ms", "gen64_pps", "iperf3_udp64_pps", "tcp_gbps", "tcp_retransmits"]
print("%-18s %10s %9s %9s %12s %12s %9s %12s" % ("datapath", "idle cpu%", "ping avg", "ping p99", "gen64 pps", "iperf3 pps", "tcp Gb/s", "retransmits"))
for name in dict.fromkeys(r["datapath"] for r in rows):
    out = []
    for k in keys:
        v = [r[k] for r in rows if r["datapath"] == name and r[k] is not None]
        out.append(statistics.median(v) if v else "-")
    print("%-18s %10s %9s %9s %12s %12s %9s %12s" % (name, *out))
PY
fi
