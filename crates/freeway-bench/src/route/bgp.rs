//! Deterministic synthetic "full tables" for the route benchmarks.
//!
//! Same seed, same table. The prefix-length mixes approximate the public DFZ of 2024-2025
//! (about 1M IPv4 and 200k IPv6 prefixes), per 100 000 prefixes:
//!
//! * IPv4 ([`V4_LENGTHS`]): /24 61.4 %, /22-/23 20.5 %, /16-/21 14.4 %, /8-/15 2.2 %,
//!   /25-/32 0.43 % (kept by some peers; each needs a tbl8 group), the rest to /24.
//!   Addresses are uniform over 1.0.0.0-223.255.255.255 minus 10/8 and 127/8.
//! * IPv6 ([`V6_LENGTHS`]): /48 48 %, /32 12 %, /44 9 %, /40 6 %, /29 4 %, /36 4 %, /46-/47
//!   5.5 %, /28-/47 others, a trace of /56, /64 and /128. Structure matters for memory: prefixes
//!   of /32 and shorter are RIR allocations in 2001::/16, 2400::/12, 2600::/12, 2800::/12,
//!   2a00::/12 and 2c00::/12; longer prefixes are carved from the first 16 /40s of 2 000
//!   "large" allocations (ISP customers and deaggregates), and half of the /48s come from 64
//!   provider-independent pools assigned sequentially (the first 16 384 /48s of a /32). A uniform
//!   spread of /48s would need one 1 KiB group per /48 and is not what real tables look like.
//!
//! Next hops: `next_hops` gateways per family (100.64.x.y, 2001:db8:ffff::x) over `ifaces`
//! interfaces; a route takes one gateway (skewed: low-numbered peers carry more routes), or, for
//! `ecmp_pct` % of routes, one of `ecmp_groups` fixed sets of 2 to 4 gateways.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_route::prefix::{mask4, mask6};
use freeway_route::{NextHop, Prefix, Prefix4, Prefix6, Route};

/// IPv4 prefix lengths and their share per 100 000 (the remainder goes to /24).
pub const V4_LENGTHS: &[(u8, u32)] = &[
    (8, 2),
    (9, 3),
    (10, 8),
    (11, 30),
    (12, 120),
    (13, 300),
    (14, 700),
    (15, 1_000),
    (16, 1_400),
    (17, 800),
    (18, 1_300),
    (19, 2_400),
    (20, 4_000),
    (21, 4_500),
    (22, 10_500),
    (23, 10_000),
    (25, 100),
    (26, 80),
    (27, 60),
    (28, 50),
    (29, 50),
    (30, 50),
    (31, 10),
    (32, 30),
];

/// IPv6 prefix lengths and their share per 100 000 (the remainder goes to /48).
pub const V6_LENGTHS: &[(u8, u32)] = &[
    (16, 5),
    (19, 5),
    (20, 20),
    (24, 80),
    (28, 1_000),
    (29, 4_000),
    (30, 500),
    (31, 300),
    (32, 12_000),
    (33, 1_200),
    (34, 1_200),
    (35, 500),
    (36, 4_000),
    (37, 300),
    (38, 800),
    (39, 300),
    (40, 6_000),
    (41, 300),
    (42, 1_500),
    (43, 400),
    (44, 9_000),
    (45, 1_500),
    (46, 3_000),
    (47, 2_500),
    (56, 600),
    (64, 500),
    (128, 100),
];

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BgpConfig {
    /// Seed; same seed, same tables.
    pub seed: u64,
    /// IPv4 prefixes.
    pub v4_prefixes: usize,
    /// IPv6 prefixes.
    pub v6_prefixes: usize,
    /// Distinct gateways per family.
    pub next_hops: usize,
    /// Distinct ECMP sets per family.
    pub ecmp_groups: usize,
    /// Percentage of routes using an ECMP set.
    pub ecmp_pct: u32,
    /// Interfaces the gateways sit on.
    pub ifaces: u16,
}

impl Default for BgpConfig {
    fn default() -> Self {
        BgpConfig {
            seed: 1,
            v4_prefixes: 1_000_000,
            v6_prefixes: 200_000,
            next_hops: 64,
            ecmp_groups: 32,
            ecmp_pct: 5,
            ifaces: 4,
        }
    }
}

/// The table generator's random numbers (SplitMix64, seeded with [`Rng::new`]).
pub use freeway_sync::rng::Rng;

/// Counts per length for `n` prefixes from a per-100 000 table; the remainder goes to `rest`.
fn counts(n: usize, table: &[(u8, u32)], rest: u8) -> Vec<(u8, usize)> {
    let mut v: Vec<(u8, usize)> = table
        .iter()
        .map(|&(l, per)| (l, (n as u64 * u64::from(per) / 100_000) as usize))
        .collect();
    let used: usize = v.iter().map(|x| x.1).sum();
    v.push((rest, n.saturating_sub(used)));
    v.sort_unstable();
    v
}

struct Hops {
    single: Vec<NextHop>,
    ecmp: Vec<Vec<NextHop>>,
}

fn hop_sets(cfg: &BgpConfig, rng: &mut Rng, v6: bool) -> Hops {
    let n = cfg.next_hops.max(1);
    let ifaces = cfg.ifaces.max(1);
    let single: Vec<NextHop> = (0..n)
        .map(|i| {
            let gw = if v6 {
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, i as u16 + 1))
            } else {
                IpAddr::V4(Ipv4Addr::new(100, 64, (i >> 8) as u8, (i & 0xff) as u8 + 1))
            };
            NextHop::via(gw, i as u16 % ifaces)
        })
        .collect();
    let ecmp = (0..cfg.ecmp_groups)
        .map(|_| {
            let k = 2 + rng.below(3) as usize;
            let mut set: Vec<NextHop> = Vec::new();
            while set.len() < k.min(n) {
                let h = single[rng.below(n as u64) as usize];
                if !set.contains(&h) {
                    set.push(h);
                }
            }
            set
        })
        .collect();
    Hops { single, ecmp }
}

fn pick_hops(cfg: &BgpConfig, rng: &mut Rng, h: &Hops) -> Vec<NextHop> {
    if !h.ecmp.is_empty() && rng.pct(cfg.ecmp_pct) {
        return h.ecmp[rng.below(h.ecmp.len() as u64) as usize].clone();
    }
    // Skewed towards low-numbered peers: the minimum of two draws.
    let n = h.single.len() as u64;
    let i = rng.below(n).min(rng.below(n));
    vec![h.single[i as usize]]
}

/// The synthetic IPv4 table.
pub fn v4_routes(cfg: &BgpConfig) -> Vec<Route> {
    let mut rng = Rng::new(cfg.seed);
    let hops = hop_sets(cfg, &mut rng, false);
    let mut seen: HashSet<(u32, u8)> = HashSet::with_capacity(cfg.v4_prefixes);
    let mut out = Vec::with_capacity(cfg.v4_prefixes);
    for (len, n) in counts(cfg.v4_prefixes, V4_LENGTHS, 24) {
        let mut made = 0;
        let mut tries = 0u64;
        while made < n && tries < 100 * n as u64 + 1000 {
            tries += 1;
            let a = rng.next_u64() as u32;
            let first = a >> 24;
            if first == 0 || first == 10 || first == 127 || first >= 224 {
                continue;
            }
            let p = a & mask4(len);
            if !seen.insert((p, len)) {
                continue;
            }
            let prefix = Prefix::V4(Prefix4::new(Ipv4Addr::from(p), len).expect("masked"));
            out.push(Route::new(prefix, pick_hops(cfg, &mut rng, &hops)));
            made += 1;
        }
    }
    shuffle(&mut out, &mut rng);
    out
}

/// The synthetic IPv6 table.
pub fn v6_routes(cfg: &BgpConfig) -> Vec<Route> {
    const BLOCKS: [u128; 6] = [0x2001, 0x2400, 0x2600, 0x2800, 0x2a00, 0x2c00];
    let mut rng = Rng::new(cfg.seed.wrapping_add(0x66));
    let hops = hop_sets(cfg, &mut rng, true);
    let mut seen: HashSet<(u128, u8)> = HashSet::with_capacity(cfg.v6_prefixes);
    let mut out = Vec::with_capacity(cfg.v6_prefixes);
    let mut allocs: Vec<u128> = Vec::new();
    let plan = counts(cfg.v6_prefixes, V6_LENGTHS, 48);
    let mut push = |p: u128, len: u8, rng: &mut Rng, out: &mut Vec<Route>| -> bool {
        let p = p & mask6(len);
        if !seen.insert((p, len)) {
            return false;
        }
        let prefix = Prefix::V6(Prefix6::new(Ipv6Addr::from(p), len).expect("masked"));
        out.push(Route::new(prefix, pick_hops(cfg, rng, &hops)));
        true
    };
    // Allocations first (/32 and shorter), then what is carved from them.
    for &(len, n) in plan.iter().filter(|x| x.0 <= 32) {
        let (mut made, mut tries) = (0, 0u64);
        while made < n && tries < 100 * n as u64 + 1000 {
            tries += 1;
            let b = BLOCKS[rng.below(BLOCKS.len() as u64) as usize];
            // 2001::/16 is one /16; the others are /12s.
            let (base, fixed) = if b == 0x2001 { (b << 112, 16) } else { (b << 112, 12) };
            let p = base | (u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())) >> fixed;
            if push(p, len, &mut rng, &mut out) {
                made += 1;
                if len >= 28 {
                    allocs.push(p & mask6(len));
                }
            }
        }
    }
    if allocs.is_empty() {
        allocs.push(0x2001_0db8_u128 << 96);
    }
    let large = allocs.len().min(2_000);
    let pools: Vec<u128> = (0..64.min(allocs.len()))
        .map(|i| allocs[allocs.len() - 1 - i])
        .collect();
    for &(len, n) in plan.iter().filter(|x| x.0 > 32) {
        let (mut made, mut tries) = (0, 0u64);
        while made < n && tries < 100 * n as u64 + 1000 {
            tries += 1;
            let random = u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64());
            let p = if len == 48 && rng.pct(50) {
                // A provider-independent pool: the first 16 384 /48s of a /32, sequentially.
                let pool = pools[rng.below(pools.len() as u64) as usize];
                (pool & mask6(32)) | (u128::from(rng.below(16_384)) << 80)
            } else {
                // Carved from a large allocation, within its first 16 /40s.
                let parent = allocs[rng.below(large as u64) as usize] & mask6(32);
                parent | (u128::from(rng.below(16)) << 88) | (random & (u128::MAX >> 40))
            };
            if push(p, len, &mut rng, &mut out) {
                made += 1;
            }
        }
    }
    shuffle(&mut out, &mut rng);
    out
}

fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_sizes_and_mix() {
        let cfg = BgpConfig {
            v4_prefixes: 20_000,
            v6_prefixes: 5_000,
            ..Default::default()
        };
        let a = v4_routes(&cfg);
        assert_eq!(a, v4_routes(&cfg), "same seed, same table");
        assert_eq!(a.len(), 20_000);
        let l24 = a.iter().filter(|r| r.prefix.len() == 24).count();
        assert!((11_500..13_000).contains(&l24), "/24 share {l24}");
        assert!(a.iter().any(|r| r.hops.len() > 1), "some ECMP");
        let b = v6_routes(&cfg);
        assert_eq!(b.len(), 5_000);
        let l48 = b.iter().filter(|r| r.prefix.len() == 48).count();
        assert!((2_200..2_700).contains(&l48), "/48 share {l48}");
        let other = v4_routes(&BgpConfig { seed: 2, ..cfg });
        assert_ne!(a, other);
    }
}
