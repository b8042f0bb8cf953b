#!/bin/bash
# cg.sh BIN TAG [N]: callgrind of `BIN bench conntrack N P 32` for P = 300,000 and 600,000;
# the per-packet instructions by function are the difference over the extra 300,000 packets
# (agg.py), so set-up and teardown cancel. Output in cg-TAG-*.
bin=$1; tag=$2; n=${3:-1}
for p in 300000 600000; do
  valgrind --tool=callgrind --callgrind-out-file=/tmp/cg-$tag-n$n-$p.out $bin bench conntrack $n $p 32 > /dev/null 2>&1
done
python3 agg.py /tmp/cg-$tag-n$n-300000.out /tmp/cg-$tag-n$n-600000.out $((300000 * n)) > callgrind-$tag-n$n-per-packet.txt
cat callgrind-$tag-n$n-per-packet.txt
