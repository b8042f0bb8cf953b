//! Workers reading while the writer changes routes, the route cache's generation protocol, and
//! the lifetimes of next-hop groups (freed exactly once, never leaked).
#![cfg(not(loom))]

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use freeway_route::nh::{canonical, mix32, pick_index};
use freeway_route::{epoch, Fib, FibConfig, NextHop, Prefix, Rib, Route, RouteCache, RouteError};
use freeway_sync::rng::Rng;

fn via(gw: &str, iface: u16) -> NextHop {
    NextHop::via(gw.parse().unwrap(), iface)
}

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

fn config() -> FibConfig {
    FibConfig {
        v4_groups: 256,
        v6_groups: 1024,
        nh_groups: 1024,
    }
}

/// Waits (pushing the epoch along) until `cond` holds, at most 10 s.
fn settle(cond: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while !cond() {
        if t.elapsed() > Duration::from_secs(10) {
            return false;
        }
        epoch::flush();
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// What the RIB says a flow to `dst` must get (control-side reference).
fn expected(rib: &Rib, dst: IpAddr, flow: u32) -> Option<NextHop> {
    rib.lookup(dst).map(|r| {
        let hops = canonical(&r.hops);
        hops[pick_index(flow, hops.len())]
    })
}

fn flow_of(d: IpAddr) -> u32 {
    match d {
        IpAddr::V4(a) => mix32(u32::from(a)),
        IpAddr::V6(a) => mix32(u128::from(a) as u32 ^ 0x6666),
    }
}

#[test]
fn readers_only_ever_see_published_answers() {
    let prefixes: Vec<Prefix> = [
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.1.2.0/24",
        "10.1.2.128/25",
        "10.1.2.192/26",
        "10.1.2.200/32",
        "10.1.3.0/24",
        "10.1.3.16/28",
        "10.2.0.0/15",
        "96.0.0.0/6",
        "2001:db8::/32",
        "2001:db8:1::/48",
        "2001:db8:1:2::/64",
        "2001:db8:1:2::80/121",
        "2001:db8:1:2::99/128",
        "2001:db8:2::/47",
    ]
    .iter()
    .map(|s| p(s))
    .collect();
    let dests: Vec<IpAddr> = [
        "10.1.2.200",
        "10.1.2.201",
        "10.1.2.129",
        "10.1.2.1",
        "10.1.3.17",
        "10.1.3.200",
        "10.2.200.1",
        "10.3.0.1",
        "10.200.0.1",
        "99.0.0.1",
        "97.1.2.3",
        "200.0.0.1",
        "2001:db8:1:2::99",
        "2001:db8:1:2::81",
        "2001:db8:1:2::1",
        "2001:db8:1:3::1",
        "2001:db8:3::1",
        "2001:db8:2:1::1",
        "2001:db9::1",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let v4_sets = [
        vec![via("192.0.2.1", 1)],
        vec![via("192.0.2.2", 2)],
        vec![via("192.0.2.1", 1), via("192.0.2.2", 2), via("192.0.2.3", 3)],
        vec![NextHop::connected(4)],
    ];
    let v6_sets = [
        vec![via("fe80::1", 1)],
        vec![via("fe80::2", 2), via("fe80::3", 3)],
        vec![NextHop::connected(4)],
    ];
    let (mut rib, fib) = Rib::new(config());
    let mut allowed: Vec<HashSet<Option<NextHop>>> = vec![HashSet::new(); dests.len()];
    let record = |rib: &Rib, allowed: &mut Vec<HashSet<Option<NextHop>>>| {
        for (i, d) in dests.iter().enumerate() {
            allowed[i].insert(expected(rib, *d, flow_of(*d)));
        }
    };
    record(&rib, &mut allowed);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (fib, stop, dests) = (fib.clone(), stop.clone(), dests.clone());
            std::thread::spawn(move || {
                let mut cache = RouteCache::new(64, t == 0);
                let mut seen: Vec<HashSet<Option<NextHop>>> = vec![HashSet::new(); dests.len()];
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let guard = Fib::pin();
                    for (i, d) in dests.iter().enumerate() {
                        let h = cache.lookup_in(&fib, &guard, *d, flow_of(*d));
                        seen[i].insert(h);
                        // And the FIB alone, straight.
                        seen[i].insert(fib.lookup(*d, &guard).map(|g| *g.pick(flow_of(*d))));
                        n += 1;
                    }
                }
                (seen, n, cache.stats())
            })
        })
        .collect();
    let mut rng = Rng::new(42);
    let t = Instant::now();
    let mut changes = 0;
    while changes < 20_000 && t.elapsed() < Duration::from_secs(8) {
        let pfx = prefixes[rng.below(prefixes.len() as u64) as usize];
        let hops = if pfx.is_v4() {
            v4_sets[rng.below(v4_sets.len() as u64) as usize].clone()
        } else {
            v6_sets[rng.below(v6_sets.len() as u64) as usize].clone()
        };
        if rng.pct(40) {
            let _ = rib.delete(pfx);
        } else {
            rib.replace(Route::new(pfx, hops)).unwrap();
        }
        record(&rib, &mut allowed);
        changes += 1;
    }
    stop.store(true, Ordering::Relaxed);
    eprintln!("{changes} changes in {:?}", t.elapsed());
    let mut total = 0;
    for r in readers {
        let (seen, n, _stats) = r.join().unwrap();
        total += n;
        for (i, s) in seen.iter().enumerate() {
            for h in s {
                assert!(
                    allowed[i].contains(h),
                    "{}: answer {h:?} never published; allowed {:?}",
                    dests[i],
                    allowed[i]
                );
            }
        }
    }
    assert!(total > 1000, "readers ran ({total} lookups)");
    assert!(changes > 1000);
    // The writer never stalled on readers and everything it retired is eventually freed.
    rib.flush();
    let stats = fib.clone();
    assert!(settle(|| stats.group_stats().alive() == 0), "groups leaked");
    assert_eq!(fib.memory().v4_groups + fib.memory().v6_groups, 0);
}

#[test]
fn cache_refills_after_every_change() {
    let (mut rib, fib) = Rib::new(config());
    rib.add(Route::new(p("10.0.0.0/8"), vec![via("192.0.2.1", 1)])).unwrap();
    rib.add(Route::new(p("2001:db8::/32"), vec![via("fe80::1", 1)]))
        .unwrap();
    let mut c = RouteCache::new(256, true);
    let d4 = Ipv4Addr::new(10, 1, 1, 1);
    let d6: Ipv6Addr = "2001:db8::1".parse().unwrap();
    assert_eq!(c.lookup_v4(&fib, d4, 1), Some(via("192.0.2.1", 1)));
    assert_eq!(c.lookup_v6(&fib, d6, 1), Some(via("fe80::1", 1)));
    assert_eq!(c.lookup_v4(&fib, d4, 1), Some(via("192.0.2.1", 1)));
    assert_eq!(c.lookup_v6(&fib, d6, 1), Some(via("fe80::1", 1)));
    let s = c.stats();
    assert_eq!((s.misses, s.hits, s.refills), (2, 2, 0));
    // An unrelated change still invalidates every entry: they refill, with the same answer.
    rib.add(Route::new(p("192.168.0.0/16"), vec![via("192.0.2.9", 2)]))
        .unwrap();
    assert_eq!(c.lookup_v4(&fib, d4, 1), Some(via("192.0.2.1", 1)));
    assert_eq!(c.lookup_v6(&fib, d6, 1), Some(via("fe80::1", 1)));
    assert_eq!(c.stats().refills, 2);
    assert_eq!(c.lookup_v4(&fib, d4, 1), Some(via("192.0.2.1", 1)));
    assert_eq!(c.stats().hits, 3);
    // A more specific route takes over at the next lookup.
    rib.add(Route::new(p("10.1.0.0/16"), vec![via("192.0.2.7", 3)]))
        .unwrap();
    assert_eq!(c.lookup_v4(&fib, d4, 1), Some(via("192.0.2.7", 3)));
    // Deleting it: back to the /8. Deleting everything: the cached negative answer.
    rib.delete(p("10.1.0.0/16")).unwrap();
    assert_eq!(c.lookup_v4(&fib, d4, 1), Some(via("192.0.2.1", 1)));
    rib.flush();
    assert_eq!(c.lookup_v4(&fib, d4, 1), None);
    assert_eq!(c.lookup_v4(&fib, d4, 1), None);
    assert_eq!(c.lookup_v6(&fib, d6, 1), None);
    let s = c.stats();
    assert_eq!(s.refills, 6);
    assert_eq!(s.hits, 4);
    assert_eq!(c.held(), 0, "negative entries hold no reference");
    // The baseline never caches.
    let mut off = RouteCache::new(256, false);
    rib.add(Route::new(p("10.0.0.0/8"), vec![via("192.0.2.1", 1)])).unwrap();
    for _ in 0..3 {
        assert_eq!(off.lookup_v4(&fib, d4, 1), Some(via("192.0.2.1", 1)));
    }
    assert_eq!(off.stats().uncached, 3);
    assert_eq!(off.stats().hits, 0);
    // A cache moved to another FIB starts over instead of answering from the old one.
    let (_rib2, fib2) = Rib::new(config());
    assert_eq!(c.lookup_v4(&fib2, d4, 1), None);
}

#[test]
fn ecmp_flows_stick_and_spread() {
    let (mut rib, fib) = Rib::new(config());
    let hops: Vec<NextHop> = (1..=4).map(|i| via(&format!("192.0.2.{i}"), i)).collect();
    rib.add(Route::new(p("0.0.0.0/0"), hops.clone())).unwrap();
    let mut c = RouteCache::new(1024, true);
    let mut counts = [0u32; 5];
    for flow in 0..40_000u32 {
        let dst = Ipv4Addr::from(0x0b00_0000 + (flow % 512));
        let a = c.lookup_v4(&fib, dst, flow).unwrap();
        assert_eq!(Some(a), fib.next_hop(IpAddr::V4(dst), flow), "cache and FIB pick alike");
        assert_eq!(Some(a), c.lookup_v4(&fib, dst, flow), "one flow, one path");
        counts[usize::from(a.iface)] += 1;
    }
    let exp = 10_000.0;
    let chi2: f64 = counts[1..].iter().map(|&c| (f64::from(c) - exp).powi(2) / exp).sum();
    assert!(chi2 < 16.3, "uneven spread {counts:?} (chi2 {chi2})");
}

#[test]
fn groups_freed_once_after_caches_let_go() {
    let (mut rib, fib) = Rib::new(config());
    rib.add(Route::new(p("10.0.0.0/8"), vec![via("192.0.2.1", 1)])).unwrap();
    rib.add(Route::new(
        p("11.0.0.0/8"),
        vec![via("192.0.2.1", 1), via("192.0.2.2", 2)],
    ))
    .unwrap();
    rib.add(Route::new(p("12.0.0.0/8"), vec![via("192.0.2.1", 1)])).unwrap();
    assert_eq!(rib.nh_groups(), 2, "equal hop sets share a group");
    let stats = fib.clone();
    let mut caches: Vec<RouteCache> = (0..3).map(|_| RouteCache::new(64, true)).collect();
    for c in caches.iter_mut() {
        for d in ["10.0.0.1", "11.0.0.1", "12.0.0.1"] {
            assert!(c.lookup(&fib, d.parse().unwrap(), 0).is_some());
        }
        assert_eq!(c.held(), 2, "one reference per distinct group, not per entry");
    }
    rib.flush();
    assert_eq!(rib.nh_groups(), 0);
    // The table's references go after the grace period; the caches still hold theirs.
    std::thread::sleep(Duration::from_millis(20));
    for _ in 0..100 {
        epoch::flush();
    }
    assert_eq!(stats.group_stats().freed(), 0, "held by caches");
    // Two caches refill (no route now) and drop their references; the third is dropped.
    for c in caches.iter_mut().take(2) {
        assert!(c.lookup(&fib, "10.0.0.1".parse().unwrap(), 0).is_none());
        assert!(c.lookup(&fib, "11.0.0.1".parse().unwrap(), 0).is_none());
        assert!(c.lookup(&fib, "12.0.0.1".parse().unwrap(), 0).is_none());
        assert_eq!(c.held(), 0);
    }
    std::thread::sleep(Duration::from_millis(20));
    for _ in 0..100 {
        epoch::flush();
    }
    assert_eq!(stats.group_stats().freed(), 0, "the third cache still holds both");
    caches.truncate(2);
    assert!(
        settle(|| stats.group_stats().freed() == 2),
        "freed when the last reference went"
    );
    assert_eq!(stats.group_stats().created(), 2);
    // Dropping the FIB with a cache still holding a group: freed when the cache drops.
    let (mut rib, fib) = Rib::new(config());
    rib.add(Route::new(p("10.0.0.0/8"), vec![via("192.0.2.1", 1)])).unwrap();
    let mut c = RouteCache::new(64, true);
    c.lookup(&fib, "10.0.0.1".parse().unwrap(), 0).unwrap();
    let gs = fib.group_stats();
    drop(rib);
    drop(fib);
    assert!(settle(|| gs.created() == 1));
    assert_eq!(gs.freed(), 0, "the cache holds it");
    assert_eq!(c.held(), 1);
    drop(c);
    assert_eq!(gs.freed(), 1, "freed by the cache's last put");
}

/// Targets the recycling of tbl8 groups: /25s come and go in two /24s with different next hops,
/// so groups are collapsed and reused across the /24s while readers look up both. A group
/// recycled before its grace period would show a reader the other /24's next hop.
#[test]
fn recycled_groups_never_leak_answers_across_prefixes() {
    let (mut rib, fib) = Rib::new(config());
    let a_hop = via("192.0.2.1", 1);
    let b_hop = via("192.0.2.2", 2);
    rib.add(Route::new(p("10.0.1.0/24"), vec![a_hop])).unwrap();
    rib.add(Route::new(p("10.0.2.0/24"), vec![b_hop])).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (fib, stop) = (fib.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut x = t as u32;
                while !stop.load(Ordering::Relaxed) {
                    let g = Fib::pin();
                    for _ in 0..64 {
                        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        let low = x >> 24;
                        let (dst, want_iface) = if x & 1 == 0 {
                            (Ipv4Addr::new(10, 0, 1, low as u8), 1)
                        } else {
                            (Ipv4Addr::new(10, 0, 2, low as u8), 2)
                        };
                        let got = fib.lookup_v4(dst, &g).expect("covered by its /24");
                        // Each /24 and its /25s use hops of one interface only.
                        assert!(
                            got.hops().iter().all(|h| h.iface == want_iface),
                            "{dst} got {:?}",
                            got.hops()
                        );
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let a2 = via("192.0.2.11", 1);
    let b2 = via("192.0.2.12", 2);
    let t = Instant::now();
    let mut rounds = 0;
    // An add may find the group pool full while the groups retired by the previous rounds
    // wait out a grace period longer than the writer's bounded wait (a reader descheduled on
    // a loaded machine): refused cleanly, and the round goes on. What this test checks is
    // what readers see.
    let mut full = 0u32;
    let mut churn = |prefix: &str, hop| match rib.add(Route::new(p(prefix), vec![hop])) {
        Ok(()) => {
            rib.delete(p(prefix)).unwrap();
        }
        Err(RouteError::FibFull(_) | RouteError::NextHopTableFull) => full += 1,
        Err(e) => panic!("{prefix}: {e}"),
    };
    while t.elapsed() < Duration::from_millis(1500) {
        churn("10.0.1.128/25", a2);
        churn("10.0.2.0/25", b2);
        rounds += 1;
    }
    if full > 0 {
        eprintln!("{full} adds found the pool full while retired groups waited for readers");
    }
    stop.store(true, Ordering::Relaxed);
    let total: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(rounds > 100 && total > 1000, "{rounds} rounds, {total} lookups");
}
