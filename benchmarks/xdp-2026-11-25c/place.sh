#!/usr/bin/env bash
# alternate 14a1bc7 (auto: worker 0 on core 0) and 9bbc5b4 (auto: worker 0 on core 1), -w 1
cd /work/wt/xdp
N=${N:-3}
D=/tmp/xdpw/place; mkdir -p $D
for i in $(seq 1 $N); do
  for v in before after; do
    b=/work/freeway-14a1bc7; [ $v = after ] && b=/work/wt/xdp-rel/release/freeway
    FW_BIN=$b nice -n -20 scripts/e2e-bench.sh -w 1 -d kernel-bridge,freeway-bridge,freeway-bridge-xdp -j $D/$v.jsonl > $D/$v-$i.txt 2>&1
  done
done
