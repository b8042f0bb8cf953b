#!/usr/bin/env bash
set -euo pipefail
export FW_SUFFIX=-p3x FW_QUEUES=2
BED=$(dirname "$0")/../../scripts/netns-testbed.sh
bash $BED up >/dev/null
T=/tmp/wt-ping3-look; rm -rf $T; mkdir -p $T
K=${2:-afpacket}
printf 'workers = 2\n' >$T/fw.toml
for p in h1 h2; do printf '[[port]]\nname = "%s"\nkind = "%s"\n%s = { iface = "%s" }\n' $p $K $K $p >>$T/fw.toml; done
ip netns exec fw-sw$FW_SUFFIX "$1" run -q --config $T/fw.toml >/dev/null 2>$T/err &
P=$!
sleep 0.7
ip netns exec fw-h1$FW_SUFFIX ping -c 2 -W 1 10.0.0.2 >/dev/null; sleep 0.3
TIDS=$(ps -T -p $P -o spid=,comm= | awk '$2 ~ /fw-worker/ {print $1}' | paste -sd,)
perf record -q -o $T/perf.data -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit -e sched:sched_switch -e exceptions:page_fault_user -t "$TIDS" -- \
      ip netns exec fw-h1$FW_SUFFIX ping -c 20 -i 0.01 10.0.0.2 >$T/ping.txt 2>/dev/null || true
kill -INT $P; wait $P || true
bash $BED down >/dev/null
perf script -i $T/perf.data -F tid,cpu,time,event,trace 2>/dev/null >$T/s.txt
