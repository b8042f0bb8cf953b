# Usage: aggf.py SMALL.out LARGE.out N_DIFF SMALL2.out LARGE2.out N_DIFF2: per packet Ir by source file:function of two binaries (difference of two packet counts).
import re,subprocess,sys,collections
def load(f):
    out=subprocess.run(["callgrind_annotate","--auto=no","--threshold=100",f],capture_output=True,text=True).stdout
    d=collections.Counter()
    for line in out.splitlines():
        m=re.match(r'\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$',line)
        if not m: continue
        rest=m.group(2)
        if rest.startswith('PROGRAM TOTALS'): continue
        rest=re.sub(r'\s*\[.*\]$','',rest)
        rest=re.sub(r'/work/wt/(c643|ctbench)/','',rest)
        rest=re.sub(r'/rustc/[0-9a-f]+/','',rest)
        rest=rest.replace('freeway-conntrack/src/bench.rs','BENCH').replace('freeway-bench/src/conntrack/workload.rs','BENCH')
        d[rest]+=int(m.group(1).replace(',',''))
    return d
def per(a,b,n):
    da,db=load(a),load(b); return {k:(db[k]-da[k])/n for k in set(da)|set(db)}
x=per(sys.argv[1],sys.argv[2],float(sys.argv[3])); y=per(sys.argv[4],sys.argv[5],float(sys.argv[6]))
rows=[(k,x.get(k,0),y.get(k,0)) for k in set(x)|set(y)]
print("%8s %8s %8s  %s"%("before","after","delta","file:function"))
for k,a,b in sorted(rows,key=lambda r:-abs(r[2]-r[1])):
    if abs(a)>=0.05 or abs(b)>=0.05: print("%8.2f %8.2f %+8.2f  %s"%(a,b,b-a,k))
print("%8.2f %8.2f"%(sum(x.values()),sum(y.values())))
