#!/usr/bin/env bash
# usage: tcp.sh FWBIN MODE(kb|xdp|pkt) [perf]  -- one TCP stream h1->h2, prints Gb/s
set -eu
cd /work/wt/xdp
export FW_SUFFIX=-xdpw FW_QUEUES=2
FW=$1; MODE=$2; PERF=${3:-}
S=${SECS:-5}
ns() { echo "fw-$1$FW_SUFFIX"; }
bash scripts/netns-testbed.sh up >/dev/null
ip netns exec $(ns h1) ip addr add 10.0.0.1/24 dev eth0 2>/dev/null || true
FP=""
if [ $MODE = kb ]; then
  ip netns exec $(ns sw) ip link add br0 type bridge
  ip netns exec $(ns sw) ip link set h1 master br0; ip netns exec $(ns sw) ip link set h2 master br0
  ip netns exec $(ns sw) ip link set br0 up
else
  k=afpacket; [ $MODE = xdp ] && k=afxdp
  printf 'workers = 2\n%s\n[[port]]\nname="h1"\nkind="%s"\n%s={iface="h1"%s}\n[[port]]\nname="h2"\nkind="%s"\n%s={iface="h2"%s}\n' "${FW_OPTS:-}" $k $k "${XO:-}" $k $k "${XO:-}" > /tmp/xdpw/fw.toml
  ip netns exec $(ns sw) $FW run -q -j --config /tmp/xdpw/fw.toml >/tmp/xdpw/fw.out 2>/tmp/xdpw/fw.err &
  FP=$!; sleep 0.7
fi
ip netns exec $(ns h1) ping -c 2 -W 1 10.0.0.2 >/dev/null
ip netns exec $(ns h2) iperf3 -s -1 -D -p 5202
sleep 0.3
PP=""; [ -z "$FP" ] || [ -z "$PERF" ] || PERFTGT="-p $FP"; if [ -n "$PERF" ]; then (sleep 1; perf record -e cpu-clock ${PERFTGT:--a} -g -o /tmp/xdpw/perf.data -- sleep 3 >/dev/null 2>&1) & PP=$!; fi
ip netns exec $(ns h1) iperf3 -c 10.0.0.2 -p 5202 -t $S -J > /tmp/xdpw/tcp.json || true
[ -z "$PP" ] || wait $PP
python3 -c "
import json; j=json.load(open('/tmp/xdpw/tcp.json'))['end']; print('$MODE ${XO:-}', round(j['sum_received']['bits_per_second']/1e9,3), j['sum_sent'].get('retransmits',0))"
[ -n "$FP" ] && { kill -INT $FP; wait $FP || cat /tmp/xdpw/fw.err; python3 -c "
import json; j=json.load(open('/tmp/xdpw/fw.out')); print('  fill_empty', sum(p['counters'].get('afxdp_kernel_rx_fill_ring_empty',0) for p in j['ports']), 'rx_full', sum(p['counters'].get('afxdp_kernel_rx_ring_full',0) for p in j['ports']), 'tx_busy', sum(p['counters'].get('afxdp_tx_busy',0) for p in j['ports']), 'batches', [w.get('batches') for w in j['workers']], 'pkts', [w.get('packets') for w in j['workers']])" || true; }
bash scripts/netns-testbed.sh down >/dev/null
