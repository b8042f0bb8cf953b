# gdb -batch -x tr.py BIN, with AT=<file offset of an instruction run once a packet>,
# ARGS=<benchmark arguments>, OUT=<file>: after 300 passes, writes the instructions (offset,
# length, text) of one pass from AT back to AT.
import gdb,os,re
base=0x555555554000
at=int(os.environ['AT'],16)+base
args=os.environ['ARGS']
gdb.execute('set pagination off'); gdb.execute('set confirm off')
gdb.execute('break *%#x'%at)
gdb.execute('run '+args+' > /dev/null')
for _ in range(300): gdb.execute('continue', to_string=True)
gdb.execute('delete')
tr=[]
while True:
    pc=int(gdb.parse_and_eval('$pc'))
    if tr and pc==at: break
    s=gdb.execute('x/2i $pc', to_string=True).splitlines()
    nxt=int(re.match(r'\s*(0x[0-9a-f]+)',s[1]).group(1),16)
    txt=s[0].split(':',1)[1].strip()
    tr.append((pc-base,nxt-pc,txt))
    gdb.execute('stepi', to_string=True)
    if len(tr)>5000: break
with open(os.environ['OUT'],'w') as f:
    for a,n,t in tr: f.write('%x %d %s\n'%(a,n,t))
gdb.execute('kill')
