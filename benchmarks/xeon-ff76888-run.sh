#!/bin/bash
# Re-measurement on the Intel Xeon 2-vCPU machine, binary of main ff76888 (/tmp/fw-main).
B=/tmp/fw-main
D=/work/main/benchmarks
cd /work/meas
log() { echo "== $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/') :: $*" >> /work/meas/log.txt; }
for i in 1 2 3; do
  log "conntrack run$i"
  flock -x /work/cpu.lock $B bench conntrack 1,2,4,8 --compare --runs 5 --json $D/conntrack-xeon-ff76888-run$i.json > conntrack-run$i.txt 2>&1
done
for i in 1 2; do
  log "churn run$i"
  flock -x /work/cpu.lock $B bench conntrack-churn --json $D/churn-xeon-ff76888-run$i.json > churn-run$i.txt 2>&1
done
log "table"
flock -x /work/cpu.lock $B bench conntrack-table --json $D/cttable-xeon-ff76888.json > cttable.txt 2>&1
for i in 1 2 3; do
  log "refcount run$i"
  flock -x /work/cpu.lock $B bench refcount --threads 1,2 --json $D/refcount-xeon-ff76888-run$i.json > refcount-run$i.txt 2>&1
done
for i in 1 2; do
  log "route run$i"
  flock -x /work/cpu.lock $B bench route --threads 1,2 --runs 3 --json $D/route-xeon-ff76888-run$i.json > route-run$i.txt 2>&1
done
log "capture"
flock -x /work/cpu.lock $B bench capture --workers 1,2 --topology bridge,router --runs 3 --seconds 2 --json $D/capture-xeon-ff76888.json > capture.txt 2>&1
log "done"
