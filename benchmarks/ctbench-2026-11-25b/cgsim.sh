#!/bin/bash
# cgsim.sh BIN TAG: callgrind with cache and branch simulation of `BIN bench conntrack 1 P 32`, P = 300,000
# and 600,000; prints the program totals' difference per extra packet (events Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim).
bin=$1; tag=$2
for p in 300000 600000; do
  valgrind --tool=callgrind --cache-sim=yes --branch-sim=yes --callgrind-out-file=/tmp/cgs-$tag-$p.out $bin bench conntrack 1 $p 32 > /dev/null 2>&1
done
python3 - /tmp/cgs-$tag-300000.out /tmp/cgs-$tag-600000.out $tag <<'PY'
import sys
def tot(f):
    ev=None
    for l in open(f):
        if l.startswith('events:'): ev=l.split()[1:]
        if l.startswith('totals:') or l.startswith('summary:'): return ev,[int(x) for x in l.split()[1:]]
ea,a=tot(sys.argv[1]); eb,b=tot(sys.argv[2])
print(sys.argv[3], ' '.join('%s=%.2f'%(e,(y-x)/300000) for e,x,y in zip(ea,a,b)))
PY
