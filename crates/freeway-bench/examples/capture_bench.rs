//! Prints the numbers of capture's parts measured alone (the BPF VM per filter, against
//! libpcap with the `libpcap-oracle` feature; the worker side of taps, epoch against
//! `RwLock` registry):
//! `cargo run --release -p freeway-bench --features libpcap-oracle --example capture_bench`.
use std::time::Duration;

use freeway_bench::capture_parts::{tap_path_bench, vm_bench, TapBenchConfig, DEFAULT_FILTERS};
use freeway_capture::{LockedTaps, Taps};

fn main() {
    println!(
        "{:<55} {:>5} {:>8} {:>9} {:>8} {:>8} {:>10}",
        "filter", "insns", "ours ns", "batch ns", "pcap ns", "pcap in", "ours(pcap)"
    );
    for r in vm_bench(DEFAULT_FILTERS, 4096, 200).expect("filters compile") {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        println!(
            "{:<55} {:>5} {:>8.1} {:>9.1} {:>8} {:>8} {:>10}",
            r.expr,
            r.insns,
            r.ns_per_packet,
            r.batch_ns_per_packet,
            opt(r.libpcap_ns_per_packet),
            r.libpcap_insns.map_or("-".into(), |v| v.to_string()),
            opt(r.vm_on_libpcap_program_ns)
        );
    }
    for taps in [0, 1, 4] {
        for swap in [None, Some(Duration::from_millis(1))] {
            let cfg = TapBenchConfig {
                taps,
                swap_every: swap,
                duration: Duration::from_millis(700),
                ..Default::default()
            };
            let e = tap_path_bench::<Taps>(&cfg).expect("bench");
            let l = tap_path_bench::<LockedTaps>(&cfg).expect("bench");
            println!(
                "taps {taps} swap {:?}: epoch {:.1} Mpps, rwlock {:.1} Mpps (swaps {}/{})",
                swap, e.mpps_total, l.mpps_total, e.swaps, l.swaps
            );
        }
    }
}
