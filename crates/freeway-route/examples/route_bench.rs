//! Route lookup benchmark on the synthetic full tables.
//!
//! `cargo run --release -p freeway-route --example route_bench [-- V4_PREFIXES V6_PREFIXES LOOKUPS THREADS...]`
use freeway_route::bench::{build, run_lookups, Family, LookupConfig, Pattern};
use freeway_route::bgp::BgpConfig;
use freeway_route::FibConfig;

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("number")).collect();
    let v4 = args.first().copied().unwrap_or(1_000_000) as usize;
    let v6 = args.get(1).copied().unwrap_or(200_000) as usize;
    let lookups = args.get(2).copied().unwrap_or(20_000_000);
    let threads: Vec<usize> = if args.len() > 3 {
        args[3..].iter().map(|&t| t as usize).collect()
    } else {
        vec![1, 2]
    };
    let bgp = BgpConfig {
        v4_prefixes: v4,
        v6_prefixes: v6,
        ..Default::default()
    };
    let mut t = build(&bgp, FibConfig::default());
    let b = &t.build;
    println!(
        "build: v4 {} routes {:.2}s, v6 {} routes {:.2}s (generate {:.2}s), nh groups {}, refused {}",
        b.v4_routes, b.v4_build_s, b.v6_routes, b.v6_build_s, b.generate_s, b.nh_groups, b.refused
    );
    let m = b.memory;
    println!(
        "memory: v4 tbl24 {} MiB + {} tbl8 groups ({} KiB); v6 first {} KiB + {} groups ({} MiB); total {:.1} MiB",
        m.v4_tbl24 >> 20,
        m.v4_groups,
        m.v4_tbl8 >> 10,
        m.v6_first >> 10,
        m.v6_groups,
        m.v6_groups_bytes >> 20,
        m.total as f64 / (1 << 20) as f64
    );
    println!(
        "{:<4} {:<14} {:<6} {:>3} {:>7} {:>10} {:>8} {:>7} {:>9}",
        "fam", "pattern", "cache", "thr", "upd/s", "Mlookup/s", "ns/lkp", "hit%", "updates"
    );
    for family in [Family::V4, Family::V6] {
        for pattern in [
            Pattern::Uniform,
            Pattern::Routed,
            Pattern::Skewed { hot: 1000, pct: 90 },
            Pattern::Skewed { hot: 256, pct: 100 },
        ] {
            for &threads in &threads {
                for (cache, batch, upd) in [
                    (false, false, 0),
                    (false, true, 0),
                    (true, false, 0),
                    (false, false, 1000),
                    (true, false, 1000),
                ] {
                    if upd > 0 && !matches!(pattern, Pattern::Skewed { .. }) {
                        continue;
                    }
                    if batch && family == Family::V6 {
                        continue;
                    }
                    let cfg = LookupConfig {
                        family,
                        pattern,
                        cache,
                        batch,
                        threads,
                        lookups_per_thread: lookups,
                        updates_per_sec: upd,
                        ..Default::default()
                    };
                    let r = run_lookups(&mut t, &cfg);
                    let hit = if cache {
                        100.0 * r.cache.hits as f64 / r.lookups as f64
                    } else {
                        0.0
                    };
                    let pat = match pattern {
                        Pattern::Uniform => "uniform".to_string(),
                        Pattern::Routed => "routed".to_string(),
                        Pattern::Skewed { hot, pct } => format!("{pct}%->{hot}"),
                    };
                    println!(
                        "{:<4} {:<14} {:<6} {:>3} {:>7} {:>10.1} {:>8.2} {:>7.1} {:>9}",
                        format!("{family:?}"),
                        pat,
                        match (cache, batch) {
                            (true, _) => "on",
                            (false, true) => "batch",
                            _ => "off",
                        },
                        threads,
                        upd,
                        r.per_thread_per_sec / 1e6,
                        r.ns_per_lookup,
                        hit,
                        r.updates
                    );
                }
            }
        }
    }
}
