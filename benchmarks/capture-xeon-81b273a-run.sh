#!/bin/bash
# Capture series of 2026-11-23: base (9a7b6dc) and final (81b273a), one after another.
cd /work/main
log() { echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) $*"; }
log "base series start"
flock -x /work/cpu.lock /tmp/fw-base bench capture --workers 1,2 --topology bridge,router --scenarios none,nomatch,swap --registry epoch --runs 9 --seconds 2 --json benchmarks/capture-xeon-9a7b6dc-epoch9.json > benchmarks/capture-xeon-9a7b6dc-epoch9.txt 2>&1
log "final series start"
flock -x /work/cpu.lock /tmp/fw-81b273a bench capture --workers 1,2 --topology bridge,router --scenarios none,idle,nomatch,swap --registry epoch --runs 9 --seconds 2 --json benchmarks/capture-xeon-81b273a-epoch9.json > benchmarks/capture-xeon-81b273a-epoch9.txt 2>&1
log "full series start"
flock -x /work/cpu.lock /tmp/fw-81b273a bench capture --workers 1,2 --topology bridge,router --runs 3 --seconds 2 --json benchmarks/capture-xeon-81b273a-full.json > benchmarks/capture-xeon-81b273a-full.txt 2>&1
log "vm bench start"
for i in 1 2 3; do flock -x /work/cpu.lock /work/target-bench/release/examples/capture_bench > benchmarks/capture-vm-xeon-81b273a-run$i.txt 2>&1; done
log "done"
