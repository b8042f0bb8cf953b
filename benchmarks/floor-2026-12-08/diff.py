#!/usr/bin/env python3
"""diff.py TSV PLAIN TRANSLATED: instructions per unit by source file, plain, translated and
the difference, largest difference first (files under 2 either way and under 10 both left out)."""
import collections
import sys

path, a, b = sys.argv[1:4]
d = collections.defaultdict(dict)
for line in open(path):
    f, k, v = line.rstrip("\n").split("\t")
    d[k][f] = float(v)
tp = tn = 0.0
for k, v in sorted(d.items(), key=lambda kv: -(kv[1].get(b, 0) - kv[1].get(a, 0))):
    p, n = v.get(a, 0.0), v.get(b, 0.0)
    tp, tn = tp + p, tn + n
    if abs(n - p) >= 2 or p >= 10 or n >= 10:
        print(f"{p:7.1f} {n:7.1f} {n - p:+7.1f} {k}")
print(f"{tp:7.1f} {tn:7.1f} {tn - tp:+7.1f} total")
