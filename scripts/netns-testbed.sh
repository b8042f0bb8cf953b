#!/usr/bin/env bash
# Freeway test bed: three hosts and a switch namespace joined by veth pairs.
#
#   netns ${P}h1${S}            netns ${P}sw${S}             netns ${P}h2${S} / ${P}h3${S}
#   eth0 10.0.0.1/24  <--veth-->  h1      h2  <--veth-->  eth0 10.0.0.2/24, fd00::2/64
#        fd00::1/64                       h3  <--veth-->  eth0 10.0.0.3/24, fd00::3/64
#
# P = $FW_PREFIX (default "fw-"), S = $FW_SUFFIX (default empty): set a suffix to run several
# test beds side by side (e.g. FW_SUFFIX=-$$). Host hN's eth0 has MAC 02:00:00:00:00:0N. The
# switch ends (h1, h2, h3 inside ${P}sw${S}) have no addresses and no IPv6, so the kernel sends
# nothing on them: Freeway runs in the switch namespace with one afpacket port per end, e.g.
#   scripts/netns-testbed.sh exec sw freeway run config.toml
#   [[port]] kind = "afpacket", afpacket = { iface = "h1" }
#
# Offloads: Freeway reads frames as the kernel hands them to AF_PACKET, so the veths are set
# up as a wire would behave: TX checksum, scatter-gather, TSO, GSO and GRO off on every end (no
# 64 KiB super-frames, no partial checksums). With `ethtool` that is `ethtool -K`; without it
# the same legacy ETHTOOL ioctls are issued from python3; with neither, a warning is printed
# (Freeway then completes partial checksums itself, but GSO super-frames count as too big).
#
# Environment: FW_PREFIX, FW_SUFFIX, FW_QUEUES (RX/TX queues per veth end, default 2, for
# multi-worker runs with fanout), FW_MTU (default 1500).
#
# Usage: netns-testbed.sh up | down | status | exec <h1|h2|h3|sw> <command...>
# `up` is idempotent (it tears down any previous bed of the same names first) and cleans up
# after itself if any step fails; `down` removes everything and succeeds if nothing exists.
set -euo pipefail

P=${FW_PREFIX:-fw-}
S=${FW_SUFFIX:-}
QUEUES=${FW_QUEUES:-2}
MTU=${FW_MTU:-1500}
HOSTS=(h1 h2 h3)

ns() { echo "${P}$1${S}"; }

die() {
    echo "netns-testbed: $*" >&2
    exit 1
}

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (creates namespaces and veths)"
    command -v ip >/dev/null || die "ip (iproute2) not found"
}

# Turns offloads off on device $2 in namespace $1.
offloads_off() {
    local n=$1 dev=$2
    if command -v ethtool >/dev/null; then
        ip netns exec "$n" ethtool -K "$dev" tx off rx off sg off tso off gso off gro off 2>/dev/null ||
            ip netns exec "$n" ethtool -K "$dev" tx off sg off tso off gso off gro off ||
            echo "netns-testbed: warning: ethtool -K $dev failed in $n" >&2
    elif command -v python3 >/dev/null; then
        ip netns exec "$n" python3 - "$dev" <<'PY'
import ctypes, fcntl, socket, struct, sys
SIOCETHTOOL = 0x8946
# Legacy ETHTOOL set commands: GRO, GSO, TSO, SG, TX checksum, RX checksum.
CMDS = {"gro": 0x2C, "gso": 0x24, "tso": 0x1F, "sg": 0x19, "tx": 0x17, "rx": 0x15}
dev = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for name, cmd in CMDS.items():
    val = ctypes.create_string_buffer(struct.pack("II", cmd, 0))
    ifr = struct.pack("16sP", dev.encode(), ctypes.addressof(val)) + b"\0" * 16
    try:
        fcntl.ioctl(s, SIOCETHTOOL, ifr)
    except OSError as e:
        print(f"netns-testbed: warning: {dev}: {name} off: {e}", file=sys.stderr)
PY
    else
        echo "netns-testbed: warning: neither ethtool nor python3: offloads stay on for $dev in $n" >&2
    fi
}

down() {
    local n
    for n in "${HOSTS[@]}" sw; do
        # Deleting a namespace destroys the veth ends inside it, and with them their peers.
        if ip netns list | awk '{print $1}' | grep -qx "$(ns "$n")"; then
            ip netns del "$(ns "$n")"
        fi
    done
}

up() {
    need_root
    down
    trap 'echo "netns-testbed: setup failed, cleaning up" >&2; down' ERR
    local n sw i h mac
    for n in "${HOSTS[@]}" sw; do
        ip netns add "$(ns "$n")"
        ip -n "$(ns "$n")" link set lo up
    done
    sw=$(ns sw)
    i=0
    for h in "${HOSTS[@]}"; do
        i=$((i + 1))
        mac=$(printf '02:00:00:00:00:%02x' "$i")
        # Created directly in the two namespaces: no name is ever taken in the root namespace.
        ip link add eth0 netns "$(ns "$h")" numtxqueues "$QUEUES" numrxqueues "$QUEUES" address "$mac" \
            mtu "$MTU" type veth peer name "$h" netns "$sw" numtxqueues "$QUEUES" numrxqueues "$QUEUES" \
            mtu "$MTU"
        ip netns exec "$sw" sh -c "echo 1 > /proc/sys/net/ipv6/conf/$h/disable_ipv6"
        ip -n "$sw" link set "$h" addrgenmode none
        offloads_off "$sw" "$h"
        offloads_off "$(ns "$h")" eth0
        ip -n "$(ns "$h")" addr add "10.0.0.$i/24" dev eth0
        ip -n "$(ns "$h")" addr add "fd00::$i/64" dev eth0 nodad
        ip -n "$sw" link set "$h" up
        ip -n "$(ns "$h")" link set eth0 up
    done
    trap - ERR
    echo "netns-testbed: up: hosts $(ns h1) $(ns h2) $(ns h3) (eth0 10.0.0.N/24, fd00::N/64), switch $sw (ports h1 h2 h3), $QUEUES queues, MTU $MTU"
}

status() {
    local n
    for n in "${HOSTS[@]}" sw; do
        if ip netns list | awk '{print $1}' | grep -qx "$(ns "$n")"; then
            echo "== $(ns "$n")"
            ip -n "$(ns "$n")" -br addr
        else
            echo "== $(ns "$n") (absent)"
        fi
    done
}

cmd=${1:-}
case "$cmd" in
up) up ;;
down)
    need_root
    down
    echo "netns-testbed: down"
    ;;
status) status ;;
exec)
    [ $# -ge 3 ] || die "usage: $0 exec <h1|h2|h3|sw> <command...>"
    node=$2
    shift 2
    case "$node" in h1 | h2 | h3 | sw) ;; *) die "unknown node $node (h1, h2, h3 or sw)" ;; esac
    exec ip netns exec "$(ns "$node")" "$@"
    ;;
*)
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
