//! The work behind `freeway bench route` (the command prints; nothing here does).
//!
//! * [`build`]: generates the synthetic tables ([`super::bgp`]) and loads them, timing each
//!   family and measuring the FIB's memory.
//! * [`run_lookups`]: lookups per second per thread, IPv4 or IPv6, with destinations drawn
//!   uniformly from the address space, from routed space, or skewed (a share of lookups to a
//!   small hot set), through per-thread route caches or straight to the FIB (the
//!   `--no-route-cache` baseline), on 1..N threads, optionally while a writer thread replaces
//!   routes at a given rate (each change bumps the generation, so every cache refills).
//!
//! Every thread pins once per batch of 32 lookups, like a worker. The destination array (2^20
//! addresses) is precomputed; threads start at different offsets.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde::Serialize;

use freeway_route::nh::mix32;
use freeway_route::prefix::{mask4, mask6};
use freeway_route::{epoch, CacheStats, Fib, FibConfig, FibMemory, Prefix, Rib, Route, RouteCache};

use super::bgp::{self, BgpConfig, Rng};

/// Loaded tables.
pub struct Tables {
    /// The RIB (writer).
    pub rib: Rib,
    /// The FIB (readers).
    pub fib: Fib,
    /// The IPv4 routes loaded.
    pub v4: Vec<Route>,
    /// The IPv6 routes loaded.
    pub v6: Vec<Route>,
    /// Build figures.
    pub build: BuildResult,
}

/// Table build figures.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BuildResult {
    /// IPv4 routes installed.
    pub v4_routes: usize,
    /// IPv6 routes installed.
    pub v6_routes: usize,
    /// Time to install the IPv4 routes (RIB + FIB), seconds.
    pub v4_build_s: f64,
    /// Time to install the IPv6 routes, seconds.
    pub v6_build_s: f64,
    /// Time to generate both tables, seconds.
    pub generate_s: f64,
    /// FIB memory after the build.
    pub memory: FibMemory,
    /// Distinct next-hop groups.
    pub nh_groups: usize,
    /// Routes refused (pool full).
    pub refused: u64,
}

/// Generates and loads the synthetic tables.
pub fn build(bgp: &BgpConfig, fib_config: FibConfig) -> Tables {
    let t = Instant::now();
    let v4 = bgp::v4_routes(bgp);
    let v6 = bgp::v6_routes(bgp);
    let generate_s = t.elapsed().as_secs_f64();
    let (mut rib, fib) = Rib::new(fib_config);
    let mut refused = 0;
    let t = Instant::now();
    for r in &v4 {
        refused += u64::from(rib.add(r.clone()).is_err());
    }
    let v4_build_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for r in &v6 {
        refused += u64::from(rib.add(r.clone()).is_err());
    }
    let v6_build_s = t.elapsed().as_secs_f64();
    let build = BuildResult {
        v4_routes: v4.len(),
        v6_routes: v6.len(),
        v4_build_s,
        v6_build_s,
        generate_s,
        memory: fib.memory(),
        nh_groups: rib.nh_groups(),
        refused,
    };
    Tables {
        rib,
        fib,
        v4,
        v6,
        build,
    }
}

/// Address family of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// How destinations are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// Uniform over the whole address space (IPv6: over 2000::/3); many miss every route.
    Uniform,
    /// A random address inside a random route of the table.
    Routed,
    /// `pct` % of lookups go to `hot` fixed destinations (each in a distinct random route),
    /// the rest are [`Pattern::Routed`].
    Skewed {
        /// Size of the hot set.
        hot: usize,
        /// Share of lookups to the hot set, percent.
        pct: u32,
    },
}

/// One lookup run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LookupConfig {
    /// Family.
    pub family: Family,
    /// Destinations.
    pub pattern: Pattern,
    /// Through a per-thread route cache (`false`: FIB every lookup).
    pub cache: bool,
    /// Cache slots per family.
    pub cache_entries: usize,
    /// Without the cache, IPv4: use [`Fib::lookup_v4_batch`] on each batch of 32.
    pub batch: bool,
    /// Lookup threads.
    pub threads: usize,
    /// Lookups per thread.
    pub lookups_per_thread: u64,
    /// Route replacements per second by a writer thread during the run (0: none).
    pub updates_per_sec: u64,
    /// Seed of the destinations.
    pub seed: u64,
}

impl Default for LookupConfig {
    fn default() -> Self {
        LookupConfig {
            family: Family::V4,
            pattern: Pattern::Routed,
            cache: false,
            cache_entries: freeway_route::cache::DEFAULT_ENTRIES,
            batch: false,
            threads: 1,
            lookups_per_thread: 20_000_000,
            updates_per_sec: 0,
            seed: 7,
        }
    }
}

/// What a lookup run measured.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LookupResult {
    /// The run.
    pub config: LookupConfig,
    /// Lookups by all threads.
    pub lookups: u64,
    /// Wall time of the slowest thread, seconds.
    pub secs: f64,
    /// Mean over threads of lookups per second.
    pub per_thread_per_sec: f64,
    /// Sum over threads of lookups per second.
    pub total_per_sec: f64,
    /// Mean nanoseconds per lookup on a thread.
    pub ns_per_lookup: f64,
    /// Lookups that found a route.
    pub found: u64,
    /// Cache counters summed over threads.
    pub cache: CacheStats,
    /// Route replacements the writer made during the run.
    pub updates: u64,
}

const DESTS: usize = 1 << 20;

fn random_in(p: &Prefix, rng: &mut Rng) -> u128 {
    let r = u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64());
    match p {
        Prefix::V4(p) => {
            let host = (r as u32) & !mask4(p.len());
            u128::from(p.bits() | host)
        }
        Prefix::V6(p) => p.bits() | (r & !mask6(p.len())),
    }
}

/// The destinations of a run (IPv4 in the low 32 bits).
pub fn destinations(routes: &[Route], family: Family, pattern: Pattern, seed: u64) -> Vec<u128> {
    let mut rng = Rng::new(seed);
    let routed = |rng: &mut Rng| -> u128 {
        if routes.is_empty() {
            return 0;
        }
        random_in(&routes[rng.below(routes.len() as u64) as usize].prefix, rng)
    };
    let hot: Vec<u128> = match pattern {
        Pattern::Skewed { hot, .. } => (0..hot.max(1)).map(|_| routed(&mut rng)).collect(),
        _ => Vec::new(),
    };
    (0..DESTS)
        .map(|_| match pattern {
            Pattern::Uniform => match family {
                Family::V4 => u128::from(rng.next_u64() as u32),
                Family::V6 => {
                    (0x2000u128 << 112) | ((u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())) >> 3)
                }
            },
            Pattern::Routed => routed(&mut rng),
            Pattern::Skewed { pct, .. } => {
                if rng.pct(pct) {
                    hot[rng.below(hot.len() as u64) as usize]
                } else {
                    routed(&mut rng)
                }
            }
        })
        .collect()
}

struct ThreadOut {
    secs: f64,
    found: u64,
    stats: CacheStats,
}

fn lookup_thread(fib: &Fib, dests: &[u128], cfg: &LookupConfig, offset: usize, barrier: &Barrier) -> ThreadOut {
    let mut cache = RouteCache::new(cfg.cache_entries, cfg.cache);
    let mask = dests.len() - 1;
    let mut i = offset;
    let mut found = 0u64;
    let batches = cfg.lookups_per_thread.div_ceil(32);
    barrier.wait();
    let t = Instant::now();
    let batched = cfg.batch && !cfg.cache && cfg.family == Family::V4;
    let mut addrs = [Ipv4Addr::UNSPECIFIED; 32];
    for _ in 0..batches {
        let guard = epoch::pin();
        if batched {
            let mut groups = [None; 32];
            for a in addrs.iter_mut() {
                *a = Ipv4Addr::from(dests[i & mask] as u32);
                i += 1;
            }
            fib.lookup_v4_batch(&addrs, &guard, &mut groups);
            for (a, g) in addrs.iter().zip(&groups) {
                let h = mix32(u32::from(*a));
                found += u64::from(g.map(|g| *g.pick(h)).is_some());
            }
            continue;
        }
        for _ in 0..32 {
            let d = dests[i & mask];
            i += 1;
            let h = mix32(d as u32 ^ (d >> 96) as u32);
            let hop = match cfg.family {
                Family::V4 => cache.lookup_v4_in(fib, &guard, Ipv4Addr::from(d as u32), h),
                Family::V6 => cache.lookup_v6_in(fib, &guard, Ipv6Addr::from(d), h),
            };
            found += u64::from(hop.is_some());
        }
    }
    let secs = t.elapsed().as_secs_f64();
    ThreadOut {
        secs,
        found: std::hint::black_box(found),
        stats: cache.stats(),
    }
}

/// Runs lookups on the loaded tables (see the module docs). With `updates_per_sec > 0`, a
/// writer thread replaces routes of the family (alternating each route's hops with another
/// table route's hops) at that rate until the lookup threads finish.
pub fn run_lookups(tables: &mut Tables, cfg: &LookupConfig) -> LookupResult {
    let routes = match cfg.family {
        Family::V4 => &tables.v4,
        Family::V6 => &tables.v6,
    };
    let dests = destinations(routes, cfg.family, cfg.pattern, cfg.seed);
    let threads = cfg.threads.max(1);
    let barrier = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let fib = tables.fib.clone();
    let rib = &mut tables.rib;
    let (outs, updates) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (fib, dests, barrier) = (&fib, &dests, &barrier);
                s.spawn(move || lookup_thread(fib, dests, cfg, t * (DESTS / threads), barrier))
            })
            .collect();
        let writer = (cfg.updates_per_sec > 0 && !routes.is_empty()).then(|| {
            let stop = &stop;
            s.spawn(move || {
                let mut rng = Rng::new(cfg.seed ^ 0xabc);
                let period = Duration::from_secs_f64(1.0 / cfg.updates_per_sec as f64);
                let start = Instant::now();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let r = &routes[rng.below(routes.len() as u64) as usize];
                    let other = &routes[rng.below(routes.len() as u64) as usize];
                    let hops = if n % 2 == 0 { other.hops.clone() } else { r.hops.clone() };
                    let _ = rib.replace(Route::new(r.prefix, hops));
                    n += 1;
                    let due = start + period.mul_f64(n as f64);
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                }
                n
            })
        });
        barrier.wait();
        let outs: Vec<ThreadOut> = hs.into_iter().map(|h| h.join().expect("lookup thread")).collect();
        stop.store(true, Ordering::Relaxed);
        let updates = writer.map_or(0, |w| w.join().expect("writer thread"));
        (outs, updates)
    });
    let per_thread = cfg.lookups_per_thread.div_ceil(32) * 32;
    let secs = outs.iter().map(|o| o.secs).fold(0.0, f64::max);
    let rates: Vec<f64> = outs.iter().map(|o| per_thread as f64 / o.secs).collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let mut cache = CacheStats::default();
    for o in &outs {
        cache.hits += o.stats.hits;
        cache.misses += o.stats.misses;
        cache.refills += o.stats.refills;
        cache.uncached += o.stats.uncached;
    }
    LookupResult {
        config: *cfg,
        lookups: per_thread * threads as u64,
        secs,
        per_thread_per_sec: mean,
        total_per_sec: rates.iter().sum(),
        ns_per_lookup: 1e9 / mean,
        found: outs.iter().map(|o| o.found).sum(),
        cache,
        updates,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn small_run_is_consistent() {
        let mut t = build(
            &BgpConfig {
                v4_prefixes: 5_000,
                v6_prefixes: 2_000,
                ..Default::default()
            },
            FibConfig::default(),
        );
        assert_eq!(t.build.refused, 0);
        assert_eq!(t.rib.len(), 7_000);
        for family in [Family::V4, Family::V6] {
            for cache in [false, true] {
                let cfg = LookupConfig {
                    family,
                    cache,
                    pattern: Pattern::Skewed { hot: 100, pct: 90 },
                    lookups_per_thread: 64_000,
                    threads: 2,
                    updates_per_sec: 1_000,
                    ..Default::default()
                };
                let r = run_lookups(&mut t, &cfg);
                assert_eq!(r.lookups, 128_000);
                assert_eq!(r.found, r.lookups, "routed destinations always match");
                if cache {
                    assert_eq!(r.cache.hits + r.cache.misses + r.cache.refills, r.lookups);
                    assert!(r.cache.hits > 0);
                } else {
                    assert_eq!(r.cache.uncached, r.lookups);
                }
            }
        }
    }
}
