#!/bin/bash
# Test bed: FW_PREFIX=fdbbell- scripts/netns-testbed.sh up; /tmp/fdbbell/sw.toml bridges h1 h2 h3 (afpacket, 2 workers).
# $1 = binary. 20 rounds: flush the FDB (ctl fdb flush), wait 0.3 s, h1 pings h2 five times 5 ms apart; counts unicast
# frames between h1 and h2 that reached h3 (flooded).
B=$1; S=/tmp/fdbbell/ctl-flood.sock
ip netns exec fdbbell-sw $B run --config /tmp/fdbbell/sw.toml -d 3600 -q --ctl $S > /dev/null 2>&1 &
P=$!
sleep 2
ip netns exec fdbbell-h3 tcpdump --immediate-mode -U -Z root -i eth0 -n -e -w /tmp/fdbbell/h3.pcap 'not ether multicast' 2>/dev/null &
T=$!
sleep 1
for i in $(seq 20); do
  $B ctl -s $S fdb flush >/dev/null
  sleep 0.3
  ip netns exec fdbbell-h1 ping -c5 -i 0.005 -W1 10.0.0.2 >/dev/null
done
sleep 0.5
kill -TERM $T; wait $T
kill -INT $P; wait $P
echo "$(basename $(dirname $(dirname $(dirname $B))))$B flooded unicast frames on h3: $(tcpdump -r /tmp/fdbbell/h3.pcap -n 2>/dev/null | wc -l)"
