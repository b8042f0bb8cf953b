#!/usr/bin/env bash
# perf stat of Freeway's worker threads over 200 pings (AF_PACKET, 2 workers). Usage: pf.sh BIN [kind]
set -euo pipefail
export FW_SUFFIX=-p3x FW_QUEUES=2
BED=$(dirname "$0")/../../scripts/netns-testbed.sh
bash $BED up >/dev/null
T=$(mktemp -d)
K=${2:-afpacket}
printf 'workers = 2\n' >$T/fw.toml
for p in h1 h2; do printf '[[port]]\nname = "%s"\nkind = "%s"\n%s = { iface = "%s" }\n' $p $K $K $p >>$T/fw.toml; done
ip netns exec fw-sw$FW_SUFFIX "$1" run -q --config $T/fw.toml >/dev/null 2>$T/err &
P=$!
sleep 1
ip netns exec fw-h1$FW_SUFFIX ping -c 2 -W 1 10.0.0.2 >/dev/null
TIDS=$(ps -T -p $P -o spid=,comm= | awk '$2 ~ /fw-w|worker/ {print $1}' | paste -sd,)
ps -T -p $P -o spid=,comm=
echo "worker tids: $TIDS"
perf stat -e page-faults,minor-faults,major-faults,context-switches,cpu-migrations,dTLB-load-misses,iTLB-load-misses -t "$TIDS" -- ip netns exec fw-h1$FW_SUFFIX ping -q -c 200 -i 0.01 10.0.0.2 2>&1 | tail -20
kill -INT $P; wait $P || true
bash $BED down >/dev/null
rm -rf $T
