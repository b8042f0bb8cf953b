# trstat.py TRACE...: branches (taken), 32-byte chunks and 64-byte lines touched, and jumps on a
# 32-byte boundary (macro-fused pairs as one) of a tr.py trace.
import sys,re
fuse=('cmp','test','and','add','sub','inc','dec','cmpb','cmpl','cmpq','cmpw','testb','testl','testq')
for fn in sys.argv[1:]:
    tr=[]
    for l in open(fn):
        a,n,t=l.split(' ',2); tr.append((int(a,16),int(n),t.strip()))
    N=len(tr); taken=0; jcc=0; c32=set(); c64=set(); loads=0; stores=0; jb=0
    for i,(a,n,t) in enumerate(tr):
        c32.add(a//32); c64.add(a//64)
        op=t.split()[0] if t else ''
        nxt=tr[i+1][0] if i+1<N else tr[0][0]
        if op.startswith('j') or op in('call','ret'):
            jcc+=1
            if nxt!=a+n: taken+=1
            s=tr[i-1][0] if (i>0 and op!='jmp' and tr[i-1][2].split()[0] in fuse and tr[i-1][0]+tr[i-1][1]==a) else a
            e=a+n
            if (s//32)!=((e-1)//32) or e%32==0: jb+=1
        ops=t.split(None,1)[1] if len(t.split(None,1))>1 else ''
        if '(' in ops and op not in ('lea','nop','nopl','nopw'):
            parts=ops.split(',')
            if '(' in parts[-1] and len(parts)>1 and not op.startswith('cmp') and not op.startswith('test'): stores+=1
            if '(' in ''.join(parts[:-1]) or op.startswith(('cmp','test','add','sub','and','or','xor','inc')) or len(parts)==1: loads+=1
    print('%s: %d instructions, %d branches (%d taken), %d 32B chunks, %d 64B lines, %d dynamic jumps on a 32B boundary'%(fn,N,jcc,taken,len(c32),len(c64),jb))
