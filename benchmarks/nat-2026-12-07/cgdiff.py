#!/usr/bin/env python3
"""cgdiff.py A B N [by]: self Ir of callgrind dump B minus dump A, divided by N, grouped
by source line (by=line, default), file (by=file) or function (by=fn); the largest first."""
import os, sys
from importlib.machinery import SourceFileLoader
cg = SourceFileLoader("cgp", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cgparse.py")).load_module()
parse = cg.parse

a, b, n = sys.argv[1], sys.argv[2], float(sys.argv[3])
by = sys.argv[4] if len(sys.argv) > 4 else "line"
ca, cb = parse(a, by), parse(b, by)
keys = set(ca) | set(cb)
rows = sorted(((cb.get(k, 0) - ca.get(k, 0)) / n, k) for k in keys)
tot = sum(r[0] for r in rows)
print(f"total {tot:.1f}")
for d, k in sorted(rows, key=lambda r: -abs(r[0])):
    if abs(d) >= 0.5:
        print(f"{d:9.1f}  {k}")
