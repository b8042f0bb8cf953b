#!/usr/bin/env python3
"""Self Ir of a callgrind dump by source line, file or function (used by cgdiff.py, cgdd.py)."""
import re, sys
from collections import defaultdict

def parse(path, by):
    names = {"fl": {}, "fn": {}}
    cost = defaultdict(int)
    fl = fi = fn = None
    last = 0
    skip = False
    def name(kind, rest):
        m = re.match(r"\((\d+)\)(?: (.*))?", rest)
        if not m:
            return rest
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), "?")
    for line in open(path):
        line = line.rstrip("\n")
        if not line or line[0] == "#":
            continue
        if line.startswith("fl="):
            fl = fi = name("fl", line[3:]); continue
        if line.startswith(("fi=", "fe=")):
            fi = name("fl", line[3:]); continue
        if line.startswith("fn="):
            fn = name("fn", line[3:]); fi = fl; continue
        if line.startswith(("cfn=", "cfl=", "cfi=", "cob=", "ob=")):
            if line.startswith("cfn="):
                name("fn", line[4:])
            elif line.startswith(("cfl=", "cfi=")):
                name("fl", line[4:])
            continue
        if line.startswith("calls="):
            skip = True; continue
        m = re.match(r"^([+-]?\d+|\*)\s+(\d+)", line)
        if not m:
            continue
        pos = m.group(1)
        if pos == "*":
            ln = last
        elif pos[0] in "+-":
            ln = last + int(pos)
        else:
            ln = int(pos)
        last = ln
        if skip:
            skip = False; continue
        c = int(m.group(2))
        key = {"line": f"{fi}:{ln}", "file": fi, "fn": fn}[by]
        cost[key] += c
    return cost

