//! Runs the conntrack benchmarks and prints their numbers.
//!
//! ```sh
//! cargo run --release -p freeway-conntrack --example ct_bench -- [ovs|ovs1|churn|churn1|large|large1|all] [runs]
//! ```
use std::time::Duration;

use freeway_conntrack::bench::{churn, large_table, ovs_workload, Teardown, Variant};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map(String::as_str).unwrap_or("all");
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    if what == "ovs" || what == "ovs1" || what == "all" {
        let ns: &[usize] = if what == "ovs1" { &[1] } else { &[1, 2] };
        let variants: &[Variant] = if what == "ovs1" {
            &[Variant::Freeway]
        } else {
            &[Variant::Freeway, Variant::GlobalLock]
        };
        for &variant in variants {
            for &n in ns {
                let ms: Vec<f64> = (0..runs)
                    .map(|_| {
                        let d: Duration = ovs_workload(n, 3_000_000, 32, variant, true);
                        d.as_secs_f64() * 1e3
                    })
                    .collect();
                println!(
                    "ovs_workload {:<11} N={n}: median {:7.1} ms  runs {:?}",
                    variant.name(),
                    median(ms.clone()),
                    ms.iter().map(|m| m.round() as u64).collect::<Vec<_>>()
                );
            }
        }
    }
    if what == "cpu" {
        // Control experiment: a pure ALU loop (no shared memory) on 1 and 2 threads.
        fn spin() -> u128 {
            let t0 = std::time::Instant::now();
            let mut x = 0x1234_5678_9abc_def0u64;
            for _ in 0..200_000_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            std::hint::black_box(x);
            t0.elapsed().as_millis()
        }
        for n in [1, 2, 1, 2] {
            let hs: Vec<_> = (0..n).map(|_| std::thread::spawn(spin)).collect();
            let ms: Vec<u128> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            println!("pure ALU loop, {n} threads: {ms:?} ms");
        }
    }
    if what == "sep" {
        // Control experiment: two independent tables, one worker each, at the same time.
        for _ in 0..runs {
            let hs: Vec<_> = (0..2)
                .map(|_| std::thread::spawn(|| ovs_workload(1, 3_000_000, 32, Variant::Freeway, true)))
                .collect();
            let ms: Vec<u128> = hs.into_iter().map(|h| h.join().unwrap().as_millis()).collect();
            println!("two independent N=1 runs at once: {ms:?} ms");
        }
    }
    if what == "churn1" {
        // One worker, FIN teardown, `runs` x 100,000 connections (for instruction counts).
        let r = churn(1, runs * 100_000, Teardown::Fin, 65_536);
        println!(
            "churn1: {:.2}M conns/s unexpected={}",
            r.conns_per_sec[0] / 1e6,
            r.unexpected
        );
    }
    if what == "large1" {
        // One worker over `runs` x 100,000 connections, 1M packets (for instruction counts).
        let r = large_table(1, runs * 100_000, 1_000_000);
        println!("large1: {:.2} Mpps unexpected={}", r.pps[0] / 1e6, r.unexpected);
    }
    if what == "churn" || what == "all" {
        for t in [1, 2] {
            for td in [Teardown::Fin, Teardown::Rst] {
                let r = churn(t, 2_000_000, td, 1 << 20);
                println!(
                    "churn {td:?} threads={t}: conns/s/worker {:?} unexpected={} refused={} expired={} left={}",
                    r.conns_per_sec
                        .iter()
                        .map(|c| format!("{:.2}M", c / 1e6))
                        .collect::<Vec<_>>(),
                    r.unexpected,
                    r.refused,
                    r.expired,
                    r.left
                );
            }
        }
    }
    if what == "large" || what == "all" {
        for t in [1, 2] {
            let r = large_table(t, 1_000_000, 10_000_000);
            println!(
                "large_table threads={t} conns=1M: preload {:.0} ms, pps/worker {:?} unexpected={}",
                r.preload_ms,
                r.pps.iter().map(|c| format!("{:.2}M", c / 1e6)).collect::<Vec<_>>(),
                r.unexpected
            );
        }
    }
}
