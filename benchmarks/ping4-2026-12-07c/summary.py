#!/usr/bin/env python3
"""Medians of floor-alt.sh output files: per variant the median of the rounds' averages and
p50s, and the median of the per-round ratio of its average to the Linux bridge's (kb)."""
import re, statistics as st, sys
d = {}
for f in sys.argv[1:]:
    rnd = {}
    for l in open(f):
        m = re.match(r'(\S+)\s+n=\s*\d+ avg=([\d.]+) p50=([\d.]+)', l)
        if m:
            rnd[m[1]] = (float(m[2]), float(m[3]))
        if l.startswith('round') and rnd:
            for k, v in rnd.items():
                d.setdefault(k, []).append((v, rnd['kb'][0]))
            rnd = {}
    for k, v in rnd.items():
        d.setdefault(k, []).append((v, rnd['kb'][0]))
for k, v in d.items():
    avg = [a for (a, _), _ in v]; p50 = [p for (_, p), _ in v]; r = sorted(a / kb for (a, _), kb in v)
    print('%-8s rounds %2d  avg median %.4f ms  p50 median %.4f ms  avg/kb per round: median %.2f (%.2f-%.2f)' % (
        k, len(v), st.median(avg), st.median(p50), st.median(r), r[0], r[-1]))
