import sys, re, collections
# parse callgrind out: self cost per fn, inclusive call costs, call counts per callee
def load(path):
    names = {}; fls={}
    self_cost = collections.defaultdict(lambda: None)
    calls = collections.Counter()
    events = None
    npos = 1
    fn = None; cfn = None; pending_calls = None
    selfc = {}
    def nm(kind, s):
        m = re.match(r'\((\d+)\)(?:\s+(.*))?', s)
        if m:
            if m.group(2): names[(kind,m.group(1))] = m.group(2)
            return names.get((kind,m.group(1)), s)
        return s
    for line in open(path, errors='replace'):
        line=line.rstrip('\n')
        if line.startswith('positions:'):
            npos = len(line.split()) - 1; continue
        if line.startswith('events:'):
            events = line.split()[1:]; continue
        if line.startswith('fn='):
            fn = nm('fn', line[3:]); continue
        if line.startswith('cfn='):
            cfn = nm('fn', line[4:]); continue
        if line.startswith(('fl=','fi=','fe=')):
            nm('fl', line[3:]); continue
        if line.startswith('cfl=') or line.startswith('cfi='):
            nm('fl', line[4:]); continue
        if line.startswith('ob=') or line.startswith('cob='):
            continue
        if line.startswith('calls='):
            pending_calls = int(line[6:].split()[0]); calls[cfn]+=pending_calls; continue
        if line and (line[0].isdigit() or line[0] in '+-*'):
            parts = line.split()
            vals = [int(x) for x in parts[npos:]]
            if pending_calls is not None:
                pending_calls = None  # inclusive cost line of call: skip for self
                continue
            a = selfc.setdefault(fn, [0]*len(events))
            for i,v in enumerate(vals): a[i]+=v
    return events, selfc, calls
events, selfc, calls = load(sys.argv[1])
pk_fn = [k for k in calls if 'GenQueue' in k and 'rx_burst' in k]
pk = sum(calls[k] for k in pk_fn)*32
print('rx_burst fns', pk_fn, 'packets', pk)
tot = [sum(v[i] for v in selfc.values()) for i in range(len(events))]
print('TOTAL/pkt', ' '.join(f'{e}={t/pk:.2f}' for e,t in zip(events,tot)))
rows = sorted(selfc.items(), key=lambda kv: -kv[1][0])[:int(sys.argv[2]) if len(sys.argv)>2 else 30]
print(' '.join(f'{e:>7}' for e in events), 'fn')
for k,v in rows:
    print(' '.join(f'{x/pk:7.2f}' for x in v), k[:150])
