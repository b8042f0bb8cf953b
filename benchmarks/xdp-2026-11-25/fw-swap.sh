#!/usr/bin/env bash
# Experiment wrapper: runs the release freeway; for a datapath run (not the generator's
# gen.toml) pins fw-worker-N to CPU (N+1) % 2 a moment after start.
REAL=${REAL_FW:-/tmp/xdpx/freeway-base}
case "$*" in
*gen.toml*) exec "$REAL" "$@" ;;
esac
me=$$
(
    sleep 0.3
    for t in /proc/$me/task/*; do
        n=$(cat "$t/comm" 2>/dev/null)
        case $n in
        fw-worker-*) w=${n#fw-worker-}; taskset -p -c $(((w + 1) % 2)) "${t##*/}" >>/tmp/xdpx/swap.log 2>&1 ;;
        esac
    done
) &
exec "$REAL" "$@"
