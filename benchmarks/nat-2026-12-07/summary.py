#!/usr/bin/env python3
"""summary.py DIR...: per binary (base, new) and worker count, each invocation's NAT/plain
ratios from the JSON files alt.sh wrote, and their medians."""
import glob, json, os, statistics, sys
rows = {}
for d in sys.argv[1:]:
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        v = os.path.basename(f).split("-")[0]
        for r in json.load(open(f))["rows"]:
            rows.setdefault((v, r["workers"]), []).append(r)
for (v, w), rs in sorted(rows.items()):
    nn = [r["new_nat"] / 1e6 for r in rs]
    newr = [r["new_nat"] / r["new_plain"] for r in rs]
    pk = [r["ns_nat"] / r["ns_plain"] for r in rs]
    print(f"{v:4} workers {w}: {len(rs)} invocations")
    print("  new NAT M/s      ", " ".join(f"{x:.2f}" for x in nn), f"median {statistics.median(nn):.2f}")
    print("  new plain M/s    ", " ".join(f"{r['new_plain']/1e6:.2f}" for r in rs), f"median {statistics.median([r['new_plain']/1e6 for r in rs]):.2f}")
    print("  new NAT/plain    ", " ".join(f"{x:.2f}" for x in newr), f"median {statistics.median(newr):.2f}")
    print("  plain ns/pkt     ", " ".join(f"{r['ns_plain']:.1f}" for r in rs), f"median {statistics.median([r['ns_plain'] for r in rs]):.1f}")
    print("  NAT ns/pkt       ", " ".join(f"{r['ns_nat']:.1f}" for r in rs), f"median {statistics.median([r['ns_nat'] for r in rs]):.1f}")
    print("  pkt NAT/plain    ", " ".join(f"{x:.2f}" for x in pk), f"median {statistics.median(pk):.2f}")
