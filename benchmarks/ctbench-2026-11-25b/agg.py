# Usage: agg.py SMALL.out LARGE.out N_DIFF: per packet Ir by function (callgrind_annotate of two runs of different packet counts, differenced).
import re,subprocess,sys,collections
def load(f, incl=False):
    out=subprocess.run(["callgrind_annotate","--auto=no","--threshold=100","--inclusive="+("yes" if incl else "no"),f],capture_output=True,text=True).stdout
    d=collections.Counter()
    for line in out.splitlines():
        m=re.match(r'\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$',line)
        if not m: continue
        n=int(m.group(1).replace(',',''))
        rest=m.group(2)
        if "(" in rest and "x)" in rest: pass
        if rest.startswith('PROGRAM TOTALS'): continue
        fn=rest.split(':',1)[1] if ':' in rest else rest
        fn=re.sub(r'\s*\[.*\]$','',fn)
        d[fn]+=n
    return d
# usage: agg.py small large packets_diff
a,b,n=sys.argv[1],sys.argv[2],float(sys.argv[3])
da,db=load(a),load(b)
diff={k:(db[k]-da[k])/n for k in set(da)|set(db)}
for k,v in sorted(diff.items(),key=lambda x:-abs(x[1])):
    if abs(v)>=0.05: print(f"{v:8.2f}  {k}")
print("total", sum(diff.values()))
