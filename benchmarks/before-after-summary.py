#!/usr/bin/env python3
"""Summarises a before/after run of benchmarks/refactor-2026-11-24-run.sh: for each figure,
the median over the rounds of each invocation's median, for the binary named before and
after.  Usage: before-after-summary.py DIR"""
import glob, json, statistics, sys

d = sys.argv[1]

def load(kind, which):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{d}/{kind}-{which}-*.json"))]

def med(xs):
    return statistics.median(xs) if xs else float("nan")

def bridge(js, layout, workers):
    return med([r["median_mpps_per_worker"] for j in js for r in j["rows"] if r["layout"] == layout and r["workers"] == workers])

def capture(js, topo, scen, reg, workers):
    return med([r["median_mpps_per_worker"] for j in js for r in j["rows"]
                if (r["topology"], r["scenario"], r["registry"], r["workers"]) == (topo, scen, reg, workers)])

def route(js, family, cache, pattern, threads):
    """`pattern`: "Routed" (random routed destinations) or "Hot" (256 hot destinations, 100%)."""
    want = "Routed" if pattern == "Routed" else {"Skewed": {"hot": 256, "pct": 100}}
    return med([r["per_thread_per_sec"] / 1e6 for j in js for r in j["rows"]
                if (r["config"]["family"], r["config"]["cache"], r["config"]["pattern"], r["config"]["threads"], r["config"]["batch"]) == (family, cache, want, threads, False)])

def ct(js, variant, threads):
    return med([r["median_ms"] for j in js for r in j["rows"] if r["variant"] == variant and r["threads"] == threads])

rows = []
for which in ("before", "after"):
    b, c, r, t = (load(k, which) for k in ("bridge", "capture", "route", "conntrack"))
    rows.append({
        "bridge padded 1w": bridge(b, "padded", 1),
        "bridge padded 2w": bridge(b, "padded", 2),
        "bridge naive 1w": bridge(b, "naive", 1),
        "capture bridge none 1w": capture(c, "bridge", "none", "epoch", 1),
        "capture bridge matchall 2w": capture(c, "bridge", "matchall", "epoch", 2),
        "capture router none 1w": capture(c, "router", "none", "epoch", 1),
        "capture router matchall 1w": capture(c, "router", "matchall", "epoch", 1),
        "route v4 random fib 1t": route(r, "V4", False, "Routed", 1),
        "route v4 hot cache 1t": route(r, "V4", True, "Hot", 1),
        "route v6 hot cache 1t": route(r, "V6", True, "Hot", 1),
        "conntrack freeway N=1 ms": ct(t, "freeway", 1),
        "conntrack freeway N=2 ms": ct(t, "freeway", 2),
        "conntrack global-lock N=2 ms": ct(t, "global-lock", 2),
    })
for k in rows[0]:
    a, b = rows[0][k], rows[1][k]
    print(f"{k:32} before {a:8.2f}  after {b:8.2f}  after/before {b / a:5.2f}x")
