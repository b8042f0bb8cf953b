#!/bin/bash
# CPU nanoseconds a packet of `freeway run`, binaries alternated round by round (load-proof:
# task-clock counts only the time the process ran, not the time it waited for a CPU).
# usage: cpu-per-packet.sh ROUNDS CONFIG PACKETS NAME=BINARY...
#   e.g. cpu-per-packet.sh 4 bridge-90m.toml 90e6 old=/path/a new=/path/b
cd "$(dirname "$0")"
R=$1; C=$2; P=$3; shift 3
for r in $(seq 1 "$R"); do
  for nb in "$@"; do
    n=${nb%%=*}; b=${nb#*=}
    perf stat -e task-clock -x, -o "/tmp/ps-$n.txt" "$b" run -c "$C" -q > "/tmp/out-$n.txt" 2>&1
    ms=$(grep task-clock "/tmp/ps-$n.txt" | cut -d, -f1)
    echo "$r $n $(python3 -c "print(f'{$ms/$P*1e6:.2f}')")"
  done
done
