//! Property tests: the FIB (and the RIB's control-side lookup) against a naive reference
//! (linear scan for the longest matching prefix), over random tables built by random adds,
//! replaces and deletes, probed at random addresses and at the boundaries of every prefix.
#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_route::nh::canonical;
use freeway_route::prefix::{mask4, mask6};
use freeway_route::{Fib, FibConfig, NextHop, Prefix, Prefix4, Prefix6, Rib, Route, RouteError};
use proptest::prelude::*;

fn hop_sets(v6: bool) -> Vec<Vec<NextHop>> {
    let gw = |i: u8| -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, u16::from(i)))
        } else {
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, i))
        }
    };
    vec![
        vec![NextHop::via(gw(1), 1)],
        vec![NextHop::via(gw(2), 2)],
        vec![NextHop::connected(3)],
        vec![NextHop::via(gw(1), 1), NextHop::via(gw(2), 2)],
        vec![NextHop::via(gw(4), 1), NextHop::via(gw(5), 2), NextHop::via(gw(6), 3)],
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Add(Prefix, usize),
    Replace(Prefix, usize),
    /// Deletes the n-th prefix of the model (mod its size), or a random one if empty.
    Delete(usize, Prefix),
}

fn v4_prefix() -> impl Strategy<Value = Prefix> {
    // Few distinct high bits, so prefixes nest and overlap; short lengths are rare (a /0 writes
    // 2^24 entries).
    let len = prop_oneof![1 => 0u8..8, 60 => 8u8..=32];
    (any::<u32>(), len).prop_map(|(x, len)| {
        let a = 0x0a00_0000 | (x & 0x0103_0f0f);
        Prefix::V4(Prefix4::new_truncate(Ipv4Addr::from(a), len).unwrap())
    })
}

fn v6_prefix() -> impl Strategy<Value = Prefix> {
    let len = prop_oneof![1 => 0u8..16, 30 => 16u8..=64, 10 => 65u8..=128];
    (any::<u128>(), len).prop_map(|(x, len)| {
        let pattern: u128 = 0x0003_00f0_0000_0000_0000_0000_0000_000f | (0x3u128 << 70);
        let a = (0x2001_0db8u128 << 96) | (x & pattern);
        Prefix::V6(Prefix6::new_truncate(Ipv6Addr::from(a), len).unwrap())
    })
}

fn ops(prefix: BoxedStrategy<Prefix>) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (prefix.clone(), 0usize..5).prop_map(|(p, h)| Op::Add(p, h)),
        2 => (prefix.clone(), 0usize..5).prop_map(|(p, h)| Op::Replace(p, h)),
        3 => (any::<usize>(), prefix).prop_map(|(i, p)| Op::Delete(i, p)),
    ];
    prop::collection::vec(op, 1..48)
}

/// Linear scan: the longest model prefix containing `a`.
fn reference(model: &BTreeMap<Prefix, Vec<NextHop>>, a: IpAddr) -> Option<(Prefix, Vec<NextHop>)> {
    model
        .iter()
        .filter(|(p, _)| p.contains(a))
        .max_by_key(|(p, _)| p.len())
        .map(|(p, h)| (*p, h.clone()))
}

/// Both ends of the block of addresses `lo..=lo | host` (`host`: the host bits), one past
/// each (wrapping, as the family's width is taken back from these) and its middle.
fn edges(lo: u128, host: u128) -> [u128; 5] {
    let hi = lo | host;
    [lo, hi, lo.wrapping_sub(1), hi.wrapping_add(1), lo | (host >> 1)]
}

/// Addresses at and around the edges of a prefix.
fn boundaries(p: &Prefix) -> Vec<IpAddr> {
    match p {
        Prefix::V4(p) => edges(p.bits().into(), (!mask4(p.len())).into())
            .map(|x| IpAddr::V4(Ipv4Addr::from(x as u32)))
            .into(),
        Prefix::V6(p) => edges(p.bits(), !mask6(p.len()))
            .map(|x| IpAddr::V6(Ipv6Addr::from(x)))
            .into(),
    }
}

fn small() -> FibConfig {
    FibConfig {
        v4_groups: 4096,
        v6_groups: 8192,
        nh_groups: 64,
    }
}

fn check(ops: Vec<Op>, probes: Vec<IpAddr>, v6: bool) -> Result<(), TestCaseError> {
    let hops = hop_sets(v6);
    let (mut rib, fib): (Rib, Fib) = Rib::new(small());
    let mut model: BTreeMap<Prefix, Vec<NextHop>> = BTreeMap::new();
    let mut touched: Vec<Prefix> = Vec::new();
    for op in ops {
        match op {
            Op::Add(p, h) => {
                let r = rib.add(Route::new(p, hops[h].clone()));
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(p) {
                    prop_assert_eq!(r, Ok(()));
                    e.insert(canonical(&hops[h]));
                } else {
                    prop_assert_eq!(r, Err(RouteError::Exists(p)));
                }
                touched.push(p);
            }
            Op::Replace(p, h) => {
                prop_assert_eq!(rib.replace(Route::new(p, hops[h].clone())), Ok(()));
                model.insert(p, canonical(&hops[h]));
                touched.push(p);
            }
            Op::Delete(i, q) => {
                let p = if model.is_empty() {
                    q
                } else {
                    *model.keys().nth(i % model.len()).unwrap()
                };
                let r = rib.delete(p);
                match model.remove(&p) {
                    Some(h) => prop_assert_eq!(r.map(|r| r.hops), Ok(h)),
                    None => prop_assert_eq!(r, Err(RouteError::NotFound(p))),
                }
                touched.push(p);
            }
        }
    }
    prop_assert_eq!(rib.len(), model.len());
    let mut addrs = probes;
    for p in &touched {
        addrs.extend(boundaries(p));
    }
    let guard = Fib::pin();
    let v4: Vec<Ipv4Addr> = addrs
        .iter()
        .filter_map(|a| match a {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        })
        .collect();
    let mut batch = vec![None; v4.len()];
    fib.lookup_v4_batch(&v4, &guard, &mut batch);
    for (a, b) in v4.iter().zip(&batch) {
        let one = fib.lookup_v4(*a, &guard).map(|g| g.index());
        prop_assert_eq!(b.map(|g| g.index()), one, "batch answer for {}", a);
    }
    for a in addrs {
        let want = reference(&model, a);
        let got = fib.lookup(a, &guard).map(|g| g.hops().to_vec());
        prop_assert_eq!(&got, &want.as_ref().map(|w| w.1.clone()), "FIB answer for {}", a);
        let rib_got = rib.lookup(a).map(|r| (r.prefix, r.hops));
        prop_assert_eq!(rib_got, want, "RIB answer for {}", a);
    }
    drop(guard);
    // Everything removed: no group left linked in the FIB.
    rib.flush();
    prop_assert_eq!(fib.memory().v4_groups + fib.memory().v6_groups, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn v4_lpm_matches_linear_scan(
        ops in ops(v4_prefix().boxed()),
        probes in prop::collection::vec(any::<u32>().prop_map(|x| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (x & 0x0103_ffff)))), 32),
    ) {
        check(ops, probes, false)?;
    }

    #[test]
    fn v6_lpm_matches_linear_scan(
        ops in ops(v6_prefix().boxed()),
        probes in prop::collection::vec(any::<u128>().prop_map(|x| IpAddr::V6(Ipv6Addr::from((0x2001_0db8u128 << 96) | (x & 0x0003_00ff_0000_0000_0000_0000_0000_ffff)))), 32),
    ) {
        check(ops, probes, true)?;
    }
}

#[test]
fn default_route_and_host_routes() {
    let (mut rib, fib) = Rib::new(small());
    let hops = hop_sets(false);
    rib.add(Route::new("0.0.0.0/0".parse().unwrap(), hops[0].clone()))
        .unwrap();
    rib.add(Route::new("255.255.255.255/32".parse().unwrap(), hops[1].clone()))
        .unwrap();
    rib.add(Route::new("0.0.0.0/32".parse().unwrap(), hops[2].clone()))
        .unwrap();
    let g = Fib::pin();
    let at = |s: &str| fib.lookup(s.parse().unwrap(), &g).map(|x| x.hops().to_vec());
    assert_eq!(at("255.255.255.255"), Some(hops[1].clone()));
    assert_eq!(at("255.255.255.254"), Some(hops[0].clone()));
    assert_eq!(at("0.0.0.0"), Some(hops[2].clone()));
    assert_eq!(at("0.0.0.1"), Some(hops[0].clone()));
    assert_eq!(at("::1"), None);
    rib.delete("0.0.0.0/0".parse().unwrap()).unwrap();
    assert_eq!(at("1.2.3.4"), None);
    assert_eq!(at("255.255.255.255"), Some(hops[1].clone()));
}
