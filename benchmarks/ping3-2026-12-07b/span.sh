#!/usr/bin/env bash
# For each binary in turn, ROUNDS times: Freeway (2 workers, KIND ports) under 200 pings, with
# `perf record` of the workers' wait-syscall exits and sendmmsg entries; prints the median and
# p90 (µs) of "wait returned ready -> first sendmmsg entered" per run, and ping's avg/p50.
# Usage: span.sh ROUNDS KIND NAME=BIN...
set -euo pipefail
ROUNDS=$1; K=$2; shift 2
export FW_SUFFIX=-p3x$$ FW_QUEUES=2
BED=$(dirname "$0")/../../scripts/netns-testbed.sh
bash $BED up >/dev/null
T=$(mktemp -d)
trap 'bash $BED down >/dev/null 2>&1; rm -rf $T' EXIT
printf 'workers = 2\n' >$T/fw.toml
for p in h1 h2; do printf '[[port]]\nname = "%s"\nkind = "%s"\n%s = { iface = "%s" }\n' $p $K $K $p >>$T/fw.toml; done
for r in $(seq 1 $ROUNDS); do
  echo "round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  for v in "$@"; do
    name=${v%%=*}; bin=${v#*=}
    ip netns exec fw-sw$FW_SUFFIX "$bin" run -q --config $T/fw.toml >/dev/null 2>$T/err &
    P=$!
    sleep 0.7
    ip netns exec fw-h1$FW_SUFFIX ping -c 2 -W 1 10.0.0.2 >/dev/null; sleep 0.3
    TIDS=$(ps -T -p $P -o spid=,comm= | awk '$2 ~ /fw-worker/ {print $1}' | paste -sd,)
    perf record -q -o $T/perf.data -e syscalls:sys_exit_poll -e syscalls:sys_exit_epoll_wait -e syscalls:sys_enter_sendmmsg -t "$TIDS" -- \
      ip netns exec fw-h1$FW_SUFFIX ping -c 200 -i 0.01 10.0.0.2 >$T/ping.txt 2>/dev/null
    kill -INT $P; wait $P || true
    perf script -i $T/perf.data -F tid,time,event,trace 2>/dev/null >$T/s.txt
    python3 - "$name" $T/s.txt $T/ping.txt <<'PY'
import re, sys, statistics as st
name, f, pf = sys.argv[1:]
last = {}; d = []
for l in open(f):
    m = re.match(r'\s*(\d+)\s+([\d.]+):\s+syscalls:(\S+):\s*(.*)', l)
    if not m: continue
    tid, t, ev, rest = m[1], float(m[2]), m[3], m[4]
    if ev.startswith('sys_exit_'):
        ret = int(rest.split('0x')[-1], 16) if '0x' in rest else 0
        last[tid] = t if ret > 0 else None
    elif ev == 'sys_enter_sendmmsg' and last.get(tid) is not None:
        d.append((t - last[tid]) * 1e6); last[tid] = None
d.sort()
p = sorted(float(x) for x in re.findall(r'time=([0-9.]+) ms', open(pf).read()))
print('%-6s wake->sendmmsg n=%3d median %.1f us p90 %.1f us | ping avg %.3f p50 %.3f ms' % (name, len(d), d[len(d)//2], d[len(d)*9//10], sum(p)/len(p), p[len(p)//2]))
PY
  done
done
