//! Loom models of the conntrack table's insert/expire races.
//!
//! Run with: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p freeway-conntrack
//! --test loom_ct --release`
//!
//! What is checked, over every interleaving loom explores (the table's bucket heads, links,
//! connection fields are loom atomics):
//! * a worker inserting a connection into a chain while the expiry thread unlinks its expired
//!   neighbour (the chain head) leaves exactly the live connection, counted once, known to the
//!   expiry side once;
//! * a worker hitting an expired connection while it is being removed either updates it
//!   before removal or re-creates it after, never both and never a duplicate;
//! * two workers racing to create the same connection create it once.
#![cfg(loom)]

use std::net::{IpAddr, Ipv4Addr};

use freeway_conntrack::frames;
use freeway_conntrack::{Conntrack, CtConfig, CtState, Tuple};
use freeway_packet::Packet;
use freeway_sync::Clock;
use loom::thread;

const SEED: u64 = 42;

fn cfg() -> CtConfig {
    CtConfig {
        max: 8,
        seed: SEED,
        expiry_queue: 4,
        ..CtConfig::default()
    }
}

fn a() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))
}
fn b() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))
}

fn tuple(sport: u16) -> Tuple {
    Tuple::v4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 17, sport, 53)
}

/// Two source ports whose connections share a bucket (searched inside a trivial model, since
/// loom atomics exist only there).
fn colliding() -> (u16, u16) {
    let out = std::sync::Arc::new(std::sync::Mutex::new((0, 0)));
    let o = out.clone();
    loom::model(move || {
        let (ct, _e) = Conntrack::new(cfg(), Clock::manual()).unwrap();
        let b0 = ct.bucket_of(&tuple(1), 0);
        let p = (2..).find(|&p| ct.bucket_of(&tuple(p), 0) == b0).unwrap();
        *o.lock().unwrap() = (1, p);
    });
    let r = *out.lock().unwrap();
    r
}

fn udp(sport: u16) -> Packet {
    frames::udp(a(), b(), sport, 53, 0)
}

fn check_invariants(ct: &Conntrack) {
    let st = ct.stats();
    let dump = ct.dump();
    assert_eq!(st.connections, dump.len());
    assert_eq!(st.created - st.expired - st.flushed, dump.len() as u64);
    assert_eq!(ct.tracked_by_expiry(), dump.len());
    let mut keys: Vec<_> = dump.iter().map(|r| (r.orig.sport, r.orig.dport)).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), dump.len(), "duplicate connection");
    assert_eq!(ct.flush(), dump.len());
    assert!(ct.is_empty());
}

#[test]
fn insert_races_expiry_of_chain_head() {
    let (old, new) = colliding();
    let (p_old, p_new) = (udp(old), udp(new));
    loom::model(move || {
        let clock = Clock::manual();
        let (ct, exp) = Conntrack::new(cfg(), clock.clone()).unwrap();
        let mut w = ct.worker();
        {
            let g = w.pin();
            assert_eq!(w.track_packet(&g, &p_old, 0, true).state, CtState::New);
        }
        exp.step(); // the old connection is now listed by the expiry side
        clock.set(31_000); // and expired (udp_single = 30 s)
        let p_new = p_new.clone();
        let t = thread::spawn(move || {
            let g = w.pin();
            assert_eq!(w.track_packet(&g, &p_new, 0, true).state, CtState::New);
        });
        let removed = exp.step();
        t.join().unwrap();
        assert!(removed <= 1);
        exp.step();
        assert_eq!(ct.len(), 1, "only the new connection is left");
        assert!(ct.get(&tuple(new), 0).is_some());
        assert!(ct.get(&tuple(old), 0).is_none());
        check_invariants(&ct);
    });
}

#[test]
fn packet_races_removal_of_its_own_connection() {
    let p = udp(7);
    loom::model(move || {
        let clock = Clock::manual();
        let (ct, exp) = Conntrack::new(cfg(), clock.clone()).unwrap();
        let mut w = ct.worker();
        {
            let g = w.pin();
            w.track_packet(&g, &p, 0, true);
        }
        clock.set(31_000);
        let p = p.clone();
        let t = thread::spawn(move || {
            let g = w.pin();
            let r = w.track_packet(&g, &p, 0, true);
            assert_eq!(r.state, CtState::New);
        });
        exp.step();
        t.join().unwrap();
        let st = ct.stats();
        // Either the update landed before removal (1 created, 1 expired, 0 left), or the
        // packet re-created the connection after it (2 created, 1 expired, 1 left).
        assert!(
            matches!((st.created, st.expired, ct.len()), (1, 1, 0) | (2, 1, 1)),
            "{st:?}"
        );
        check_invariants(&ct);
    });
}

#[test]
fn two_workers_create_the_same_connection_once() {
    let p = udp(9);
    let r = frames::udp(b(), a(), 53, 9, 0);
    loom::model(move || {
        let (ct, exp) = Conntrack::new(cfg(), Clock::manual()).unwrap();
        let mut w1 = ct.worker();
        let mut w2 = ct.worker();
        let (p, r) = (p.clone(), r.clone());
        let t = thread::spawn(move || {
            let g = w1.pin();
            w1.track_packet(&g, &p, 0, true).state
        });
        let s2 = {
            let g = w2.pin();
            w2.track_packet(&g, &r, 0, true).state
        };
        let s1 = t.join().unwrap();
        // Whoever came second saw the other's packet as the other direction.
        assert!(
            matches!(
                (s1, s2),
                (CtState::New, CtState::Established) | (CtState::Established, CtState::New)
            ),
            "{s1:?} {s2:?}"
        );
        assert_eq!(ct.len(), 1);
        assert_eq!(ct.stats().created, 1);
        exp.step();
        check_invariants(&ct);
    });
}
