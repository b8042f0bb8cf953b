#!/bin/bash
# Alternates two binaries ROUNDS times on one benchmark command and prints the CPU time
# (perf stat task-clock, ms) each invocation used. On a loaded machine the wall-clock figures
# the benchmarks print are mostly time spent waiting for a core; a single-threaded run's
# task-clock is not, and it reproduced the quiet 1.05x of `bench conntrack 1` (2026-11-25).
# usage: alt-taskclock.sh ROUNDS BIN_A BIN_B -- ARGS...   (ARGS: e.g. bench conntrack 1 30000000 --runs 1)
set -eu
rounds=$1 a=$2 b=$3; shift 4
for ((i = 1; i <= rounds; i++)); do
  for bin in "$a" "$b"; do
    t=$(perf stat -x, -e task-clock "$bin" "$@" 2>&1 >/dev/null | grep task-clock | cut -d, -f1)
    echo "$(basename "$bin") $t"
  done
done
