# memstat.py TRACE...: loads and stores by memory operand (and those relative to %rsp) of a
# tr.py trace; push/pop/call/ret are not counted (grep them).
import sys,re
def split_ops(s):
    out=[];d=0;cur=''
    for ch in s:
        if ch=='(': d+=1
        if ch==')': d-=1
        if ch==',' and d==0: out.append(cur); cur=''
        else: cur+=ch
    if cur: out.append(cur)
    return [o.strip() for o in out]
for fn in sys.argv[1:]:
    L=S=Lsp=Ssp=0
    for l in open(fn):
        a,n,t=l.split(' ',2); t=t.strip().split('#')[0]
        p=t.split(None,1); op=p[0]; ops=split_ops(p[1]) if len(p)>1 else []
        if op in('lea','nop','nopl','nopw') or op.startswith('j') or op.startswith('prefetch'): continue
        mem=[o for o in ops if '(' in o]
        if not mem: continue
        dst=ops[-1]
        for o in ops[:-1]:
            if '(' in o: L+=1; Lsp+= '%rsp' in o
        if '(' in dst:
            if op.startswith(('cmp','test')): L+=1; Lsp+='%rsp' in dst
            elif op.startswith(('mov','set')) : S+=1; Ssp+='%rsp' in dst
            else: L+=1; S+=1; Lsp+='%rsp' in dst; Ssp+='%rsp' in dst
    print('%s: loads %d (stack %d), stores %d (stack %d)'%(fn,L,Lsp,S,Ssp))
