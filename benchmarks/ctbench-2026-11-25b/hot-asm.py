# Usage: hot-asm.py CALLGRIND_OUT(--dump-instr=yes) BINARY MIN_COUNT PACKETS: objdump of the instructions run at least MIN_COUNT times, each with its count per packet.
# Per-instruction Ir from a callgrind --dump-instr=yes file (self cost only), then annotate objdump.
import sys,re,subprocess,collections
import sys
out,binary,minc=sys.argv[1],sys.argv[2],int(sys.argv[3])
cost=collections.Counter()
addr=0; line=0; incall=False
def val(tok,prev):
    if tok.startswith('0x'): return int(tok,16)
    if tok.startswith('+'): return prev+int(tok[1:],16) if False else prev+int(tok[1:])
    if tok.startswith('-'): return prev-int(tok[1:])
    if tok=='*': return prev
    return int(tok)
for l in open(out):
    l=l.rstrip('\n')
    if not l: continue
    c=l[0]
    if c.isdigit() or c in '+-*':
        parts=l.split()
        a=val(parts[0],addr); 
        # subposition for instr uses hex after 0x; +N are hex? callgrind uses hex for instr compressions? keep decimal
        addr=a
        ln=val(parts[1],line) if len(parts)>2 else line
        line=ln
        if incall:
            incall=False; continue
        if len(parts)>=3: cost[a]+=int(parts[2])
        elif len(parts)==2: pass
    elif l.startswith('calls='):
        incall=True

hot=sorted(a for a,v in cost.items() if v>=minc)
# group into ranges and objdump each
ranges=[]
for a in hot:
    if ranges and a-ranges[-1][1]<64: ranges[-1][1]=a
    else: ranges.append([a,a])
tot=0
for s,e in ranges:
    d=subprocess.run(["objdump","-d","--no-show-raw-insn","-C","--start-address=%d"%s,"--stop-address=%d"%(e+16),binary],capture_output=True,text=True).stdout
    for l in d.splitlines():
        m=re.match(r'\s*([0-9a-f]+):\s*(.*)',l)
        if m:
            a=int(m.group(1),16); c=cost.get(a,0); tot+=c
            print("%10.2f %s: %s"%(c/float(sys.argv[4]),m.group(1),m.group(2)))
        elif l.strip() and not l.startswith('/') and 'file format' not in l and 'Disassembly' not in l: print(l)
    print('----')
