#!/usr/bin/env bash
# usage: sim.sh BIN NAME [extra bench args...]  -> callgrind.out.NAME in /work/wt/fwd-sim
BIN=$1; NAME=$2; shift 2
cd "$(dirname "$0")"
rm -f callgrind.out.$NAME*
valgrind --tool=callgrind --cache-sim=yes --branch-sim=yes --dump-instr=yes --callgrind-out-file=callgrind.out.$NAME \
  $BIN bench bridge --workers 1 --layout padded --runs 1 --seconds 40 --no-pin "$@" > $NAME.log 2>&1 &
VP=$!
sleep 30
callgrind_control -z $VP >> $NAME.log 2>&1
wait $VP
echo done $NAME
