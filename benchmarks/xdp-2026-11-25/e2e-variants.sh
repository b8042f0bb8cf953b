#!/usr/bin/env bash
# Alternates AF_XDP placement variants with the e2e script; JSON lines tagged by variant.
cd /work/wt/xdp
OUT=${OUT:-/tmp/xdpx/res.jsonl}
R=${R:-3}
S=${S:-3}
B=/tmp/xdpx/freeway-base
N=/tmp/xdpx/freeway-new
E="scripts/e2e-bench.sh -s $S -j /tmp/xdpx/tmp.jsonl"
for r in $(seq 1 $R); do
  for v in ${VARIANTS:-pinned swap unpinned}; do
    case $v in
      pinned) env FW_BIN=$B nice -n -20 $E -d kernel-bridge,freeway-bridge-xdp ;;
      swap) env FW_BIN=/tmp/xdpx/fw-swap.sh nice -n -20 $E -d freeway-bridge-xdp ;;
      unpinned) env FW_BIN=$B FW_OPTS='pin_workers = false' nice -n -20 $E -d freeway-bridge-xdp ;;
      new-same) env FW_BIN=$N FW_XDP_OPTS=', rx_worker = "same"' nice -n -20 $E -d freeway-bridge-xdp ;;
      new-other) env FW_BIN=$N FW_XDP_OPTS=', rx_worker = "other"' nice -n -20 $E -d freeway-bridge-xdp ;;
      afpacket) env FW_BIN=$B nice -n -20 $E -d freeway-bridge ;;
    esac
    python3 -c "
import json,sys
for l in open('/tmp/xdpx/tmp.jsonl'):
    j=json.loads(l); j['variant']='$v'; j['round']=$r; print(json.dumps(j))" >> $OUT
    rm -f /tmp/xdpx/tmp.jsonl
  done
done
