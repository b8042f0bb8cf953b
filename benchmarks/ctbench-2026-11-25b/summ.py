import json,glob,sys,statistics,collections
d=sys.argv[1]
res=collections.defaultdict(list); runs=collections.defaultdict(list)
for f in sorted(glob.glob(d+'/*.json')):
    w=f.split('/')[-1].split('-')[0]
    for r in json.load(open(f))['rows']:
        if r['variant']!='freeway': continue
        res[(w,r['threads'])].append(r['median_ms']); runs[(w,r['threads'])]+=r['runs_ms']
for k in sorted(res):
    v=res[k]
    print(k, 'invocations',len(v),'median of medians %.2f'%statistics.median(v),'pooled median %.2f'%statistics.median(runs[k]),'min %.1f'%min(runs[k]), ' '.join('%.0f'%x for x in v))
for n in sorted({k[1] for k in res}):
    a=statistics.median(res[('A',n)]); b=statistics.median(res[('B',n)])
    print('N=%d B/A = %.3f'%(n,b/a))
