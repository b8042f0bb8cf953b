import re,sys,glob,statistics as st
D=sys.argv[1]
res={}
for f in sorted(glob.glob(D+'/*-*.txt')):
    v,i=re.match(r'.*/(\w+)-(\d+)\.txt',f).groups()
    rows={l.split()[0]:l.split() for l in open(f) if l.startswith(('kernel','freeway'))}
    kb=rows.get('kernel-bridge')
    if not kb: continue
    for dp in ('freeway-bridge','freeway-bridge-xdp'):
        r=rows.get(dp)
        if not r: continue
        t=(float(r[2])/float(kb[2]), float(r[4])/float(kb[4]), float(r[6])/float(kb[6]), int(r[7]), float(r[3]))
        res.setdefault((v,dp),[]).append(t)
        print(v,i,dp,'ping %.2fx gen64 %.2fx tcp %.2fx retr %d p99 %.3f'%t)
for (v,dp),ts in sorted(res.items()):
    print('median',v,dp,'ping %.2fx gen64 %.2fx tcp %.2fx retr %d p99 %.3f'%tuple(st.median(x[k] for x in ts) for k in range(5)), 'n=%d'%len(ts))
