import sys,re
# fn.py FILE SYMBOL_SUBSTR: the function's instructions (labels and directives dropped, local label names and hashes normalised)
f,sub=sys.argv[1],sys.argv[2]
out=[];on=False
for line in open(f):
    if line.endswith(':\n') and not line.startswith(('\t','.')) :
        if on: break
        if sub in line and line.startswith('_ZN'): on=True; continue
    if on:
        t=line.strip()
        if not t or t.startswith('.') or t.startswith('#') : continue
        if t.endswith(':'): out.append('LABEL'); continue
        t=re.sub(r'\.L[A-Za-z0-9_$.]+','.L',t)
        t=re.sub(r'17h[0-9a-f]{16}E','17hE',t)
        out.append(t)
print('\n'.join(out))
