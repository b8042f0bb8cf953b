#!/usr/bin/env python3
"""summary.py DIRECTIONS...: per binary (before/after) and worker count, the medians over the
rounds' JSON rows of nat-DIR-TAG-N.json: new plain/NAT fresh and warm (M/s), their ratios,
established ns plain/NAT and the ratio (the median of each round's ratio)."""
import glob, json, statistics as st, sys
for d in sys.argv[1:]:
    for tag in ("before", "after"):
        rows = {}
        for f in sorted(glob.glob(f"nat-{d}-{tag}-*.json")):
            for r in json.load(open(f))["rows"]:
                rows.setdefault(r["workers"], []).append(r)
        for w, rs in sorted(rows.items()):
            m = lambda f: st.median(f(r) for r in rs)
            print(f"{d:8} {tag:6} {w}w n={len(rs)}  new NAT fresh {m(lambda r: r['new_nat'])/1e6:.2f} "
                  f"({m(lambda r: r['new_nat']/r['new_plain']):.2f}x)  warm {m(lambda r: r['new_nat_warm'])/1e6:.2f} "
                  f"({m(lambda r: r['new_nat_warm']/r['new_plain_warm']):.2f}x)  est plain {m(lambda r: r['ns_plain']):.1f} "
                  f"NAT {m(lambda r: r['ns_nat']):.1f} ns ({m(lambda r: r['ns_nat']/r['ns_plain']):.2f}x)  "
                  "ratios " + " ".join("%.2f" % (r["ns_nat"] / r["ns_plain"]) for r in rs))
