#!/usr/bin/env bash
# alternate: default frames vs frames=8192, N times; JSON lines tagged by variant
cd /work/wt/xdp
N=${N:-3}
for i in $(seq 1 $N); do
  for v in base f8192; do
    o=""; [ $v = f8192 ] && o=', frames = 8192'
    FW_BIN=${FW_BIN:-/work/freeway-14a1bc7} FW_XDP_OPTS="$o" nice -n -20 scripts/e2e-bench.sh -d kernel-bridge,freeway-bridge-xdp -j /tmp/xdpw/alt/$v.jsonl > /tmp/xdpw/alt/$v-$i.txt 2>&1
  done
done
