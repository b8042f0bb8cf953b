//! The neighbour table: bound, ageing on a manual clock, static entries, flush, dumps, the
//! update queue, and a concurrent reader/writer run.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use freeway_l3::neigh::{new_seeded, Learned, NeighConfig};
use freeway_l3::{NeighError, NeighState, NeighUpdate};
use freeway_sync::Clock;

fn host(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0100 + i))
}
fn mac(i: u32) -> [u8; 6] {
    let b = i.to_be_bytes();
    [2, 0, b[0], b[1], b[2], b[3]]
}

#[test]
fn table_is_bounded_and_refusals_are_counted() {
    let cfg = NeighConfig {
        limit: 8,
        static_limit: 2,
        ..Default::default()
    };
    let (n, mut w) = new_seeded(cfg, 3);
    for i in 0..20 {
        w.learn(host(i), 0, mac(i), true, 0);
    }
    assert_eq!(n.len(), 8);
    assert_eq!(n.stats().table_full.get(), 12);
    assert!(!w.resolve(host(100), 0, 0), "resolution is bounded too");
    assert_eq!(n.stats().table_full.get(), 13);
    // Statics have their own bound.
    w.add_static(host(200), 0, mac(200), 0).unwrap();
    w.add_static(host(201), 0, mac(201), 0).unwrap();
    assert_eq!(w.add_static(host(202), 0, mac(202), 0), Err(NeighError::StaticLimit));
    assert_eq!(n.stats().static_limit_reached.get(), 1);
    // Replacing an existing static is not a new one.
    w.add_static(host(200), 0, mac(7), 0).unwrap();
    assert_eq!(
        w.add_static(host(1), 0, [1, 0, 0, 0, 0, 0], 0),
        Err(NeighError::BadMac([1, 0, 0, 0, 0, 0]))
    );
    assert_eq!(
        w.add_static(IpAddr::V4(Ipv4Addr::BROADCAST), 0, mac(1), 0),
        Err(NeighError::BadAddress(IpAddr::V4(Ipv4Addr::BROADCAST)))
    );
    assert_eq!(n.len(), 10);
    // Flush dynamic only, then everything.
    assert_eq!(w.flush(None, false), 8);
    assert_eq!(n.len(), 2);
    assert_eq!(w.dynamic_len(), 0);
    assert_eq!(w.learn(host(1), 0, mac(1), true, 0), Learned::Created);
    assert_eq!(w.flush(Some(0), true), 3);
    assert!(n.is_empty());
}

#[test]
fn ageing_follows_a_manual_clock() {
    let clock = Clock::manual();
    let cfg = NeighConfig {
        reachable_ms: 30_000,
        gc_stale_ms: 60_000,
        incomplete_ms: 3_000,
        failed_ms: 3_000,
        age_chunk_buckets: 1 << 20,
        ..Default::default()
    };
    let (n, mut w) = new_seeded(cfg, 3);
    w.learn(host(1), 0, mac(1), true, clock.now());
    w.learn(host(2), 0, mac(2), true, clock.now());
    w.resolve(host(3), 0, clock.now());
    w.add_static(host(4), 0, mac(4), clock.now()).unwrap();
    let state = |n: &freeway_l3::Neigh, i| {
        let g = n.pin();
        n.lookup(host(i), 0, &g).map(|v| v.state)
    };
    clock.advance(3_000);
    w.age(clock.now());
    assert_eq!(state(&n, 3), Some(NeighState::Failed));
    // Ageing runs at most every 10 ms.
    clock.advance(5);
    w.learn(host(3), 0, mac(3), false, clock.now());
    assert_eq!(
        state(&n, 3),
        Some(NeighState::Reachable),
        "a late answer still resolves"
    );
    clock.advance(27_000);
    w.age(clock.now());
    assert_eq!(state(&n, 1), Some(NeighState::Stale));
    // Host 2 is confirmed (e.g. answered a probe).
    w.learn(host(2), 0, mac(2), false, clock.now());
    clock.advance(30_000);
    w.age(clock.now());
    assert_eq!(
        state(&n, 1),
        None,
        "stale entry collected gc_stale_ms after its last confirmation"
    );
    assert_eq!(state(&n, 2), Some(NeighState::Stale));
    clock.advance(1_000_000);
    w.age(clock.now());
    assert_eq!(state(&n, 2), None);
    assert_eq!(state(&n, 3), None);
    assert_eq!(state(&n, 4), Some(NeighState::Permanent), "static entries never age");
    assert_eq!(w.learn(host(4), 0, mac(9), true, clock.now()), Learned::Static);
    assert_eq!(n.stats().removed.get(), 3);
}

#[test]
fn dump_is_ip_neigh_style_and_json() {
    let ifs = interfaces();
    let (n, mut w) = new_seeded(NeighConfig::default(), 3);
    w.learn(ip("192.0.2.1"), 0, [2, 0, 0, 0, 0, 1], true, 100);
    w.resolve(ip("10.0.2.9"), 1, 100);
    w.add_static(ip("2001:db8:2::fe"), 1, GW, 0).unwrap();
    let e = n.entries(1_100, &ifs);
    let lines: Vec<String> = e.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        lines,
        vec![
            "192.0.2.1 dev p1 lladdr 02:00:00:00:00:01 REACHABLE",
            "10.0.2.9 dev p2 INCOMPLETE",
            "2001:db8:2::fe dev p2 lladdr 02:00:00:00:02:fe PERMANENT",
        ]
    );
    assert_eq!(e[0].updated_ms_ago, 1_000);
    let j = serde_json::to_value(&e).unwrap();
    assert_eq!(j[0]["dst"], "192.0.2.1");
    assert_eq!(j[0]["dev"], "p1");
    assert_eq!(j[0]["lladdr"], "02:00:00:00:00:01");
    assert_eq!(j[0]["state"][0], "REACHABLE");
    assert!(j[1].get("lladdr").is_none());
}

#[test]
fn update_queue_is_bounded_and_drained_by_the_writer() {
    let cfg = NeighConfig {
        queue: 4,
        ..Default::default()
    };
    let (n, mut w) = new_seeded(cfg, 3);
    let ok = (0..10)
        .filter(|i| {
            n.request(NeighUpdate::Learn {
                ip: host(*i),
                iface: 0,
                mac: mac(*i),
                create: true,
            })
        })
        .count();
    assert_eq!(ok, 4);
    assert_eq!(n.pending(), 4);
    assert_eq!(w.service(0), 4);
    assert_eq!(n.len(), 4);
}

#[test]
fn workers_read_consistent_entries_while_the_writer_churns() {
    let (n, mut w) = new_seeded(
        NeighConfig {
            limit: 64,
            ..Default::default()
        },
        3,
    );
    // Host i's MAC always encodes i in its last bytes, whatever generation it has.
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let n = n.clone();
        let stop = stop.clone();
        readers.push(std::thread::spawn(move || {
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = n.pin();
                for i in 0..64 {
                    if let Some(v) = n.lookup(host(i), 0, &g) {
                        if v.state.usable() {
                            assert_eq!(&v.mac[2..6], &i.to_be_bytes()[..], "torn entry");
                            assert!(v.mac[1] < 4);
                            seen += 1;
                        }
                    }
                }
            }
            seen
        }));
    }
    for round in 0..2_000u32 {
        let i = round % 64;
        let mut m = mac(i);
        m[1] = (round % 4) as u8;
        w.learn(host(i), 0, m, true, u64::from(round));
        if round % 3 == 0 {
            w.delete(host((round * 7) % 64), 0);
        }
        if round % 500 == 499 {
            w.flush(None, false);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn a_retired_interface_gets_no_entries_from_late_worker_updates() {
    let (n, mut w) = new_seeded(NeighConfig::default(), 5);
    w.add_static(host(1), 1, mac(1), 0).unwrap();
    w.apply(NeighUpdate::Resolve { ip: host(2), iface: 1 }, 0);
    w.apply(NeighUpdate::Resolve { ip: host(3), iface: 2 }, 0);
    assert_eq!(n.len(), 3);
    // Interface 1 removed: its entries go, static ones too.
    assert_eq!(w.retire(1), 2);
    assert_eq!(n.len(), 1);
    // An update a worker queued before the removal, or made while it still routed with the
    // interfaces of before, creates nothing on it; other interfaces are unaffected.
    w.apply(NeighUpdate::Resolve { ip: host(2), iface: 1 }, 0);
    w.apply(
        NeighUpdate::Learn {
            ip: host(4),
            iface: 1,
            mac: mac(4),
            create: true,
        },
        0,
    );
    assert_eq!(n.len(), 1);
    assert_eq!(n.stats().retired_ignored.get(), 2);
    w.apply(NeighUpdate::Resolve { ip: host(5), iface: 2 }, 0);
    assert_eq!(n.len(), 2);
    // Retiring twice deletes nothing more.
    assert_eq!(w.retire(1), 0);
}
