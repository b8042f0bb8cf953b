#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a set time and prints one line per target with its
# exec count, coverage and result (the rows of the Results table in fuzz/README.md).
#
#   scripts/fuzz-all.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, all targets)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain, or a stable one with
# RUSTC_BOOTSTRAP=1 (used automatically when `cargo +nightly` is not installed). The committed
# seed corpora stay untouched: each run grows a scratch corpus under $FUZZ_WORK (default
# /tmp/freeway-fuzz). Exit status: 0 if every target ran clean, 1 if any crashed (its input
# is in fuzz/artifacts/TARGET/).
set -uo pipefail
cd "$(dirname "$0")/../fuzz"

secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parse_packet filter_compile bpf_vm bpf_jit config_load ctl_request trace_request pcap_read nft_parse)
work=${FUZZ_WORK:-/tmp/freeway-fuzz}

command -v cargo-fuzz >/dev/null || { echo "fuzz-all: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2; exit 2; }
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi

declare -A maxlen=([parse_packet]=9300 [filter_compile]=256 [bpf_vm]=600 [bpf_jit]=600 [config_load]=4096 [ctl_request]=70000 [trace_request]=512 [pcap_read]=4096 [nft_parse]=4096)
status=0
printf '%-16s %8s %12s %8s %8s  %s\n' target seconds execs exec/s edges result
for t in "${targets[@]}"; do
    mkdir -p "$work/$t" "corpus/$t"
    log="$work/$t.log"
    "${fuzz[@]}" run "$t" "$work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -max_len="${maxlen[$t]:-4096}" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
    if [ $rc -eq 0 ]; then
        result=clean
    else
        result="FAILED (rc $rc, see $log and fuzz/artifacts/$t/)"
        status=1
    fi
    printf '%-16s %8s %12s %8s %8s  %s\n' "$t" "$secs" "${execs:-?}" "${rate:-?}" "${edges:-?}" "$result"
done
exit $status
