#!/bin/sh
# natnew-pass.sh OUTDIR TAG: after cg.sh BIN TAG OUTDIR, the inclusive Ir of bench nat's
# new-connection pass functions (new_plain_pass in dump 2, new_nat_pass in dump 4; before
# 745a620 both were new_conns_pass) per connection-pass: the difference of the C = 40,000
# and 20,000 runs over 40,000 (each run times two passes: fresh and warm).
OUT=$1; TAG=$2
for k in 2 4; do
  a=$(callgrind_annotate --inclusive=yes $OUT/$TAG-20000/callgrind.out.*.$k 2>/dev/null | grep -E 'new_[a-z]*_pass \[' | head -1 | awk '{gsub(",","",$1); print $1}')
  b=$(callgrind_annotate --inclusive=yes $OUT/$TAG-40000/callgrind.out.*.$k 2>/dev/null | grep -E 'new_[a-z]*_pass \[' | head -1 | awk '{gsub(",","",$1); print $1}')
  python3 -c "print('$TAG pass dump $k', $a, $b, 'Ir per conn-pass', round(($b-$a)/40000, 1))"
done
