#!/usr/bin/env bash
# usage: sim2.sh BIN NAME DELAY bench-args...  -> callgrind.out.NAME (counters zeroed DELAY s into the run)
# e.g. sim2.sh /abs/path/freeway fix 30 bridge --workers 1 --layout padded --runs 1 --seconds 40 --no-pin
BIN=$1; NAME=$2; DELAY=$3; shift 3
cd "$(dirname "$0")"
rm -f callgrind.out.$NAME*
valgrind --tool=callgrind --cache-sim=yes --branch-sim=yes --dump-instr=yes --callgrind-out-file=callgrind.out.$NAME \
  $BIN bench "$@" > $NAME.log 2>&1 &
VP=$!
sleep $DELAY
callgrind_control -z $VP >> $NAME.log 2>&1
wait $VP
echo done $NAME
