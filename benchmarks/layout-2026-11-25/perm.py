#!/usr/bin/env python3
"""Two-sided exact permutation test of the difference of medians of two samples.

usage: perm.py "a1 a2 ..." "b1 b2 ..."   (one figure per benchmark invocation)
Prints both medians, their ratio b/a and p: the share of the equally likely relabellings of
the pooled figures whose difference of medians is at least the observed one.
"""
import statistics as st
import sys
from itertools import combinations

a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
pool = a + b
obs = abs(st.median(a) - st.median(b))
hits = total = 0
for idx in combinations(range(len(pool)), len(a)):
    s = set(idx)
    x = [pool[i] for i in idx]
    y = [pool[i] for i in range(len(pool)) if i not in s]
    total += 1
    hits += abs(st.median(x) - st.median(y)) >= obs - 1e-12
print(f"median a {st.median(a):.2f} b {st.median(b):.2f} ratio b/a {st.median(b) / st.median(a):.3f} "
      f"range a {min(a)}-{max(a)} b {min(b)}-{max(b)} p={hits / total:.3f} ({total} relabellings)")
