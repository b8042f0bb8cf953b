#!/bin/sh
# tc.sh BIN: Ir per call of each note probe (callgrind --toggle-collect, N = 10,000: 5N calls of put_note/take_note, 2N of the new-connection ones)
B=$1; T=$(mktemp)
for v in new old; do
  for f in put_note take_note put_new_note take_new_note; do
    if [ $v = old ]; then s=probe_old_$f; else s=probe_$f; fi
    valgrind --tool=callgrind --dump-instr=no --toggle-collect=$s --callgrind-out-file=$T $B 10000 $v >/dev/null 2>&1
    ir=$(grep '^summary:' $T | awk '{print $2}')
    case $f in put_note|take_note) c=50000;; *) c=20000;; esac
    python3 -c "print('$v $f', $ir, round($ir/$c, 2))"
  done
done
