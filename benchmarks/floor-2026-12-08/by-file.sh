#!/bin/sh
# by-file.sh BIN OUTDIR: callgrind of each timed function of `bench nat` on its own
# (--toggle-collect), one worker, and its instructions per unit by source file (inlined code
# counted in the file it comes from): OUTDIR/new-conn-by-file.tsv (per connection, 40,000 a
# pass: 20,000 --conns, fresh and warm) and OUTDIR/established-by-file.tsv (per packet,
# 400,000), columns: function, file, instructions per unit. diff.py prints the differences.
set -e
BIN=$1 OUT=$2
mkdir -p "$OUT"
run() { # FUNCTION UNITS ARGS...
  f=$1 n=$2; shift 2
  d=$(mktemp -d)
  (cd "$d" && valgrind --tool=callgrind --dump-instr=no --toggle-collect="freeway_bench::nat::$f" \
    "$BIN" bench nat --workers 1 --runs 1 --frag-seconds 0 "$@" >out.txt 2>vg.txt)
  callgrind_annotate --threshold=100 --show-percs=no "$d"/callgrind.out.* 2>/dev/null |
    grep -E "^ *[0-9,]+ +[./]" |
    awk -v F="$f" -v N="$n" '{c=$1; gsub(",","",c); split($2,a,":"); file=a[1];
      gsub("/work/main/crates/","",file); gsub(/\/rustc\/[0-9a-f]+\/library\//,"",file);
      gsub(/.*registry\/src\/[^\/]*\//,"",file); s[file]+=c}
      END{for (k in s) printf "%s\t%s\t%.1f\n", F, k, s[k]/N}'
  rm -rf "$d"
}
{ run new_plain_pass 40000 --flows 64 --conns 20000 --packets 1000
  run new_nat_pass 40000 --flows 64 --conns 20000 --packets 1000; } > "$OUT/new-conn-by-file.tsv"
{ run established_plain 400000 --flows 4096 --conns 2000 --packets 400000
  run established_nat 400000 --flows 4096 --conns 2000 --packets 400000; } > "$OUT/established-by-file.tsv"
