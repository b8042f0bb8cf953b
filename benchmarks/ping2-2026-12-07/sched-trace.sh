#!/usr/bin/env bash
# perf sched record of 50 pings (20 ms apart) through Freeway binary $1 (2 workers, AF_PACKET)
# on test bed FW_SUFFIX=-p2t$$; prints, per ping, the worker's scheduling delay (wake-up to
# running), ping's CPU time after waking the worker, and wake(worker) -> wake(ping) (us),
# then medians. Usage: sched-trace.sh BIN [LABEL]
set -euo pipefail
export FW_SUFFIX=-p2t$$ FW_QUEUES=2
BED=$(dirname "$0")/../../scripts/netns-testbed.sh
TMP=$(mktemp -d); FWPID=""
cleanup() { [ -n "$FWPID" ] && kill -INT "$FWPID" 2>/dev/null; wait 2>/dev/null; bash $BED down >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
bash $BED up >/dev/null
printf 'workers = 2\n[[port]]\nname = "h1"\nkind = "afpacket"\nafpacket = { iface = "h1" }\n[[port]]\nname = "h2"\nkind = "afpacket"\nafpacket = { iface = "h2" }\n' >"$TMP/fw.toml"
ip netns exec "fw-sw$FW_SUFFIX" "$1" run -q --config "$TMP/fw.toml" >/dev/null 2>"$TMP/fw.err" &
FWPID=$!
sleep 0.7
ip netns exec "fw-h1$FW_SUFFIX" ping -c 2 -W 1 10.0.0.2 >/dev/null
perf sched record -o "$TMP/s.data" -- sleep 1.3 >/dev/null 2>&1 &
sleep 0.2
ip netns exec "fw-h1$FW_SUFFIX" ping -c 50 -i 0.02 10.0.0.2 | tail -1
wait %2 2>/dev/null || true; sleep 0.3
perf sched timehist -i "$TMP/s.data" -w 2>/dev/null >"$TMP/th.txt"; cp "$TMP/th.txt" /tmp/p2-th-last.txt
python3 - "$TMP/th.txt" "${2:-$1}" <<'PY'
import re, sys, statistics
lines = open(sys.argv[1]).read().splitlines()
ev = []
for l in lines:
    m = re.match(r'\s*([\d.]+)\s+\[(\d+)\]\s+(\S*)\s*(\S+)\s*(.*)', l)
    if not m: continue
    ev.append((float(m.group(1)), int(m.group(2)), l))
# wake of worker by ping
out = []
for i, (t, cpu, l) in enumerate(ev):
    if re.search(r'\bping\[\d+\].*awakened: fw-worker', l):
        w = re.search(r'awakened: (fw-worker-\d)', l).group(1)
        run = None; pw = None; pcpu = None; wcpu = None
        for t2, c2, l2 in ev[i+1:i+60]:
            if run is None and re.match(r'\s*[\d.]+\s+\[\d+\]\s+\S*\s*' + w, l2) and 'awakened' not in l2:
                f = l2.split()
                # columns: time cpu [state] task wait schdelay runtime
                nums = [x for x in f if re.match(r'^[\d.]+$', x)]
                run = (t2, c2, float(nums[-2]) * 1000)
            if pw is None and w in l2 and 'awakened: ping' in l2:
                pw = t2; wcpu = c2
            if pw and run:
                break
        if pw:
            out.append(((pw - t) * 1e6, run[2] if run else float('nan'), cpu, wcpu))
for o in out: print('wake->pingwake %6.1f us  worker sch delay %6.1f us  ping cpu %d worker cpu %d' % o)
if out:
    print('%s: n=%d median wake->pingwake %.1f us, sch delay %.1f us, same cpu %d/%d' % (sys.argv[2], len(out),
      statistics.median(o[0] for o in out), statistics.median(o[1] for o in out), sum(o[2] == o[3] for o in out), len(out)))
PY
