//! `freeway bench route`: FIB lookups on a synthetic full BGP table, with and without the
//! per-worker route cache. [`lookup`] does the work on tables from [`bgp`].

use std::path::PathBuf;

use clap::Args;
use freeway_route::FibConfig;

pub mod bgp;
pub mod lookup;

use bgp::BgpConfig;
use lookup::{build, run_lookups, Family, LookupConfig, LookupResult, Pattern};

use crate::{median, runs_text, write_json};

/// `bench route`.
#[derive(Args, Clone)]
pub struct RouteArgs {
    /// IPv4 prefixes in the synthetic table.
    #[arg(long, default_value_t = 1_000_000)]
    pub v4: usize,
    /// IPv6 prefixes.
    #[arg(long, default_value_t = 200_000)]
    pub v6: usize,
    /// Thread counts, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Lookups per thread per run.
    #[arg(long, default_value_t = 20_000_000)]
    pub lookups: u64,
    /// Runs per configuration.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Route changes per second made by a writer thread during the runs.
    #[arg(long, default_value_t = 0)]
    pub updates: u64,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs `bench route`.
pub fn route(a: RouteArgs) -> Result<(), String> {
    if a.threads.iter().any(|&n| n == 0 || n > 1024) || a.lookups == 0 {
        return Err("need threads 1..=1024 and lookups >= 1".into());
    }
    let bgp = BgpConfig {
        v4_prefixes: a.v4,
        v6_prefixes: a.v6,
        ..BgpConfig::default()
    };
    eprintln!("building the synthetic tables ({} v4, {} v6 prefixes)...", a.v4, a.v6);
    let mut tables = build(&bgp, FibConfig::default());
    let b = tables.build;
    println!(
        "bench route: {} v4 routes built in {:.2} s, {} v6 in {:.2} s, {} next-hop groups, {} refused; FIB memory {:.1} MiB",
        b.v4_routes,
        b.v4_build_s,
        b.v6_routes,
        b.v6_build_s,
        b.nh_groups,
        b.refused,
        b.memory.total as f64 / (1 << 20) as f64
    );
    // `hot`: every lookup for one of 256 destinations, so after the first pass every cache
    // lookup is a hit: the cache's hit path, to set against a full lookup (`fib`, random).
    let cases: [(&str, Family, Pattern); 6] = [
        ("v4 random", Family::V4, Pattern::Routed),
        ("v4 skewed", Family::V4, Pattern::Skewed { hot: 256, pct: 95 }),
        ("v4 hot", Family::V4, Pattern::Skewed { hot: 256, pct: 100 }),
        ("v6 random", Family::V6, Pattern::Routed),
        ("v6 skewed", Family::V6, Pattern::Skewed { hot: 256, pct: 95 }),
        ("v6 hot", Family::V6, Pattern::Skewed { hot: 256, pct: 100 }),
    ];
    let mut medians: Vec<(&str, usize, &str, f64)> = Vec::new();
    let mut all: Vec<LookupResult> = Vec::new();
    println!("\ncase       threads  mode        M lookups/s/thread  ns/lookup  cache hits  runs");
    for (name, family, pattern) in cases {
        for &threads in &a.threads {
            for (mode, cache, batch) in [
                ("fib", false, false),
                ("fib-batch", false, true),
                ("cache", true, false),
            ] {
                if batch && family == Family::V6 {
                    continue; // no batched v6 lookup yet
                }
                let mut per = Vec::new();
                let mut last = None;
                for r in 0..a.runs.max(1) {
                    let cfg = LookupConfig {
                        family,
                        pattern,
                        cache,
                        batch,
                        threads,
                        lookups_per_thread: a.lookups,
                        updates_per_sec: a.updates,
                        seed: 7 + r as u64,
                        ..LookupConfig::default()
                    };
                    let res = run_lookups(&mut tables, &cfg);
                    per.push(res.per_thread_per_sec / 1e6);
                    last = Some(res);
                    all.push(res);
                }
                let res = last.expect("at least one run");
                let m = median(&per);
                let hits = if cache {
                    let c = res.cache;
                    format!("{:.1}%", 100.0 * c.hits as f64 / (c.hits + c.misses).max(1) as f64)
                } else {
                    "-".into()
                };
                medians.push((name, threads, mode, m));
                let runs = runs_text(per.iter().copied(), 1);
                println!(
                    "{name:<10} {threads:>7}  {mode:<10}  {m:>18.1}  {:>9.1}  {hits:>10}  {}",
                    1e3 / m,
                    runs
                );
            }
        }
    }
    println!();
    for fam in ["v4", "v6"] {
        for &threads in &a.threads {
            let get = |case: &str, mode: &str| {
                medians
                    .iter()
                    .find(|(c, t, m, _)| *c == format!("{fam} {case}") && *t == threads && *m == mode)
                    .map(|x| 1e3 / x.3)
            };
            if let (Some(hit), Some(full)) = (get("hot", "cache"), get("random", "fib")) {
                println!(
                    "{fam}, {threads} thread(s): cache hit path {hit:.1} ns vs full lookup {full:.1} ns (random): {:.2}x cheaper",
                    full / hit
                );
            }
        }
    }
    write_json(a.json.as_deref(), &all)
}
