#!/usr/bin/env bash
# Ping-only alternation on one e2e test bed: kernel bridge, then Freeway AF_XDP and AF_PACKET,
# workers pinned and not; 200 pings 10 ms apart each, R rounds; prints avg/p99 per run.
set -u
cd /work/wt/xdp
export FW_SUFFIX=-xdpp FW_QUEUES=2
BED=scripts/netns-testbed.sh
FW=${FW:-/tmp/xdpx/freeway-base}
R=${R:-5}
bash $BED up >/dev/null
ns() { echo "fw-$1$FW_SUFFIX"; }
ip netns exec $(ns h1) ip addr add 10.0.0.1/24 dev eth0
ip netns exec $(ns h2) ip addr add 10.0.0.2/24 dev eth0
T=$(mktemp -d)
pingrun() {
    ip netns exec $(ns h1) ping -c 2 -W 1 10.0.0.2 >/dev/null
    nice -n -20 ip netns exec $(ns h1) ping -c 200 -i 0.01 -W 1 10.0.0.2 >$T/p.txt
    python3 -c "
import math, re
t = sorted(float(x) for x in re.findall(r'time=([0-9.]+) ms', open('$T/p.txt').read()))
print('$1', $r, round(sum(t)/len(t),3), t[max(0, math.ceil(0.99*len(t))-1)])"
}
for r in $(seq 1 $R); do
    ip netns exec $(ns sw) ip link add br0 type bridge
    ip netns exec $(ns sw) ip link set h1 master br0
    ip netns exec $(ns sw) ip link set h2 master br0
    ip netns exec $(ns sw) ip link set br0 up
    pingrun kernel-bridge
    ip netns exec $(ns sw) ip link del br0
    for k in afxdp afpacket; do for pin in true false; do
        printf 'workers = 2\npin_workers = %s\n[[port]]\nname = "h1"\nkind = "%s"\n%s = { iface = "h1" }\n[[port]]\nname = "h2"\nkind = "%s"\n%s = { iface = "h2" }\n' $pin $k $k $k $k >$T/fw.toml
        ip netns exec $(ns sw) nice -n -20 $FW run -q --config $T/fw.toml >/dev/null 2>$T/fw.err &
        F=$!
        sleep 0.7
        pingrun $k-pin-$pin
        kill -INT $F; wait $F
    done; done
done
bash $BED down >/dev/null
rm -rf $T
