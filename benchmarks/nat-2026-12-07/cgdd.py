#!/usr/bin/env python3
"""cgdd.py A1 B1 A2 B2 N [by]: (B2 - A2) - (B1 - A1) self Ir over N, grouped as cgdiff.py:
what the second pair of dumps (e.g. the translated phase) spends beyond the first (plain)."""
import sys
sys.argv = sys.argv[:1] + sys.argv[1:]
from importlib.machinery import SourceFileLoader
import os
cg = SourceFileLoader("cgd", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cgparse.py")).load_module()
a1, b1, a2, b2, n = sys.argv[1:6]
by = sys.argv[6] if len(sys.argv) > 6 else "line"
n = float(n)
c = [cg.parse(p, by) for p in (a1, b1, a2, b2)]
keys = set().union(*c)
rows = [((c[3].get(k, 0) - c[2].get(k, 0)) - (c[1].get(k, 0) - c[0].get(k, 0))) / n for k in keys]
print(f"total {sum(rows):.1f}")
for d, k in sorted(zip(rows, keys), key=lambda r: -abs(r[0])):
    if abs(d) >= 0.5:
        print(f"{d:9.1f}  {k}")
