#!/bin/bash
# Test bed: FW_PREFIX=fdbbell- scripts/netns-testbed.sh up; /tmp/fdbbell/sw.toml bridges h1 h2 h3 (afpacket, 2 workers).
# $1 = binary; prints fw-fdb voluntary ctx switches over 10 s of idle
B=$1
ip netns exec fdbbell-sw $B run --config /tmp/fdbbell/sw.toml -d 14 -q > /dev/null 2>&1 &
P=$!
sleep 3
T=$(for t in /proc/$P/task/*; do [ "$(cat $t/comm)" = fw-fdb ] && echo $t; done)
a=$(awk '/^voluntary/{print $2}' $T/status)
sleep 10
b=$(awk '/^voluntary/{print $2}' $T/status)
echo "$B fw-fdb wakeups/10s: $((b-a))"
wait $P
