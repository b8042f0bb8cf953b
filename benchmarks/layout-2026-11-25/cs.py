# gdb -batch -x cs.py BIN, with LOCKAT=<file offset of the global mutex's lock cmpxchg> and
# UNLOCK=<offsets of the xchg that releases it, comma-separated>: runs `bench conntrack 1 64000
# --baseline global-lock` without ASLR and counts, three times after 200 packets, the
# instructions from taking the lock to releasing it and from there to taking it again.
import gdb
base=0x555555554000
import os
lockat=int(os.environ['LOCKAT'],16)+base
unl=[int(x,16)+base for x in os.environ['UNLOCK'].split(',')]
gdb.execute('set pagination off')
gdb.execute('set confirm off')
gdb.execute('break *%#x'%lockat)
gdb.execute('run bench conntrack 1 64000 --runs 1 --baseline global-lock > /dev/null')
for _ in range(200): gdb.execute('continue', to_string=True)
res=[]
for k in range(3):
    n=0
    while True:
        gdb.execute('stepi', to_string=True); n+=1
        pc=int(gdb.parse_and_eval('$pc'))
        if pc in unl: break
    m=0
    while True:
        gdb.execute('stepi', to_string=True); m+=1
        pc=int(gdb.parse_and_eval('$pc'))
        if pc==lockat: break
    res.append((n,m))
print('RESULT inside(lock->unlock), outside(unlock->next lock):',res)
gdb.execute('kill')
