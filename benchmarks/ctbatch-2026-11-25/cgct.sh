#!/bin/bash
# cgct.sh BIN TAG [N]: callgrind totals of `BIN bench conntrack N P 32`, P = 300,000 and 600,000; Ir per packet from the difference
bin=$1; tag=$2; n=${3:-1}
for p in 300000 600000; do
  valgrind --tool=callgrind --callgrind-out-file=/tmp/ctb/cg-$tag-n$n-$p.out $bin bench conntrack $n $p 32 > /dev/null 2>&1
done
a=$(grep -h '^summary:\|^totals:' /tmp/ctb/cg-$tag-n$n-300000.out | head -1 | awk '{print $2}')
b=$(grep -h '^summary:\|^totals:' /tmp/ctb/cg-$tag-n$n-600000.out | head -1 | awk '{print $2}')
python3 -c "print('$tag n=$n Ir/pkt', ($b-$a)/(300000*$n))"
