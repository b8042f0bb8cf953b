#!/bin/sh
# natnew-pass.sh OUTDIR TAG: after cg.sh BIN TAG OUTDIR (this folder's, one file per thread),
# the inclusive Ir of bench nat's new-connection pass functions (new_plain_pass,
# new_nat_pass) per connection-pass: the difference of the C = 40,000 and 20,000 runs over
# 40,000 (each run times two passes, fresh and warm), as nat-2026-12-07/natnew-pass.sh.
OUT=$1; TAG=$2
for f in new_plain_pass new_nat_pass; do
  n() { callgrind_annotate --inclusive=yes $(grep -l "freeway_bench::nat::$f\$" $OUT/$TAG-$1/callgrind.out.*) 2>/dev/null \
    | grep -E "$f \[" | head -1 | awk '{gsub(",","",$1); print $1}'; }
  a=$(n 20000); b=$(n 40000)
  python3 -c "print('$TAG $f pass', $a, $b, 'Ir per conn-pass', round(($b-$a)/40000, 1))"
done
