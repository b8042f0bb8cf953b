#!/bin/sh
# Alternates main's release binary (before) and wt-slab's (after), two rounds each.
# BASE, AFTER: the two binaries; output lands next to this script.
d=$(dirname "$0")
for round in ${ROUNDS:-1 2}; do
    for v in before after; do
        if [ $v = before ]; then bin=$BASE; else bin=$AFTER; fi
        { date -u; uptime; "$bin" bench nat --workers 1,2 --runs 3 --frag-seconds 0; uptime; } \
            > "$d/nat-$v-$round.txt" 2>&1
    done
done
