# hotjcc.py PERF_DATA BIN SYMBOL (perf record -e cpu-clock of a benchmark)
# For the hottest symbol of a perf.data: sample-weighted share of instructions that lie in a
# basic block ending with a jump that crosses or ends on a 32-byte boundary (the JCC-erratum
# condition, macro-fused cmp/test+jcc counted as one), and hot-range alignment mod 64.
import subprocess,sys,re,collections
data,binf,sym=sys.argv[1:4]
ann=subprocess.run(['perf','annotate','-i',data,'--stdio','-s',sym],capture_output=True,text=True).stdout
w={}
for l in ann.splitlines():
    m=re.match(r'\s+([0-9.]+)\s+:\s+([0-9a-f]+):',l)
    if m: w[int(m.group(2),16)]=float(m.group(1))
hot=[a for a,p in w.items() if p>0]
lo,hi=min(hot),max(hot)+16
d=subprocess.run(['objdump','-d','--insn-width=16','--start-address=%#x'%lo,'--stop-address=%#x'%hi,binf],capture_output=True,text=True).stdout
ins=[]
for l in d.splitlines():
    m=re.match(r'\s+([0-9a-f]+):\s+((?:[0-9a-f]{2} )+)\s*(\S.*)?',l)
    if m: ins.append((int(m.group(1),16),len(m.group(2).split()),(m.group(3) or '').split()))
fuse=('cmp','test','and','add','sub','inc','dec','cmpb','cmpl','cmpq','cmpw','testb','testl','testq')
bad=0.0;tot=0.0;nbadj=0;hotj=0
blk=[]
for i,(a,n,t) in enumerate(ins):
    blk.append(a)
    if t and t[0].startswith('j'):
        s=ins[i-1][0] if (i>0 and t[0]!='jmp' and ins[i-1][2] and ins[i-1][2][0] in fuse) else a
        e=a+n
        isbad=(s//32)!=((e-1)//32) or e%32==0
        bw=sum(w.get(x,0) for x in blk)
        tot+=bw
        if isbad:
            bad+=bw
            if bw>0.5: nbadj+=1; print('  hot boundary jump %x %s block weight %.1f%%'%(a,' '.join(t[:2]),bw))
        blk=[]
print('%s: hot range %x-%x, samples in blocks with a boundary jump %.1f%% of %.1f%%'%(binf,lo,hi,bad,tot))
