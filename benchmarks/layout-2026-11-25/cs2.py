# Like cs.py, but prints every instruction under the lock once (lines "TR ...").
import gdb,os
base=0x555555554000
lockat=int(os.environ['LOCKAT'],16)+base
unl=[int(x,16)+base for x in os.environ['UNLOCK'].split(',')]
gdb.execute('set pagination off'); gdb.execute('set confirm off')
gdb.execute('break *%#x'%lockat)
gdb.execute('run bench conntrack 1 64000 --runs 1 --baseline global-lock > /dev/null')
for _ in range(200): gdb.execute('continue', to_string=True)
while True:
    pc=int(gdb.parse_and_eval('$pc'))
    print('TR', gdb.execute('x/i $pc', to_string=True).strip().replace('=> ',''))
    if pc in unl: break
    gdb.execute('stepi', to_string=True)
gdb.execute('kill')
