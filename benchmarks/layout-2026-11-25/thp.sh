#!/bin/bash
# usage: thp.sh BIN: during `bench route`, each anonymous mapping of 60-80 MiB (the madvised interior
# of the tbl24, the groups pool, the heap) with its start mod 2 MiB and AnonHugePages, then the
# process total (smaps_rollup)
BIN=$1
OUTF=$(mktemp)
$BIN bench route --threads 1 --runs 1 --v6 1000 --lookups 2000000 > "$OUTF" 2>&1 &
pid=$!
while ! grep -q '^v4 random' "$OUTF" 2>/dev/null; do sleep 0.2; kill -0 $pid 2>/dev/null || break; done
python3 - $pid <<'PY'
import sys,re
pid=sys.argv[1]
cur=None
for l in open(f'/proc/{pid}/smaps'):
    m=re.match(r'([0-9a-f]+)-([0-9a-f]+) ',l)
    if m:
        s,e=int(m.group(1),16),int(m.group(2),16); cur=(s,e)
    elif l.startswith('AnonHugePages:') and cur:
        s,e=cur; ahp=int(l.split()[1])
        if e-s >= 60<<20 and e-s < 80<<20:
            print('map %x-%x size %.1f MiB start%%2M=%d KiB AnonHuge %d MiB'%(s,e,(e-s)/2**20,(s%(2<<20))>>10,ahp>>10))
PY
grep -m1 'AnonHuge' /proc/$pid/smaps_rollup
wait $pid
grep '^v4 random ' "$OUTF" | head -1
rm -f "$OUTF"
