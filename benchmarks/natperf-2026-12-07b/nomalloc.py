#!/usr/bin/env python3
"""nomalloc.py OUT TAG FN N: cg.sh's per-unit figure of phase FN (the worker thread's dumps
that hold it) without glibc's malloc.c, whose share (the set-up's allocations) differs
between the two runs by a few Ir per unit from build to build."""
import glob, os, re, sys
from importlib.machinery import SourceFileLoader
cg = SourceFileLoader("cgp", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "..", "nat-2026-12-07", "cgparse.py")).load_module()
out, tag, fn, n = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def tot(c):
    s = 0
    for f in glob.glob(f"{out}/{tag}-{c}/callgrind.out.*"):
        if re.search(rf"freeway_bench::nat::{fn}$", open(f).read(), re.M):
            for k, v in cg.parse(f, "file").items():
                if "malloc.c" not in k:
                    s += v
    return s
print(f"{tag} {fn} without malloc.c: {(tot(40000) - tot(20000)) / n:.1f} Ir per unit")
