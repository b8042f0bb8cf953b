//! Loom models of the neighbour table's publication protocol.
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p freeway-l3 --test loom_neigh --release`
//!
//! What is checked, over every interleaving loom explores:
//! * a worker racing the writer's insert either misses the entry or sees it fully initialised
//!   (right MAC and state), never garbage;
//! * a worker looking up an entry that stays in the table finds it while the writer inserts
//!   and unlinks *other* entries of the same chain;
//! * a worker racing an in-place MAC change and a state change sees one of the (MAC, state)
//!   pairs the writer stored, never a mix.
#![cfg(loom)]

use std::net::{IpAddr, Ipv4Addr};

use freeway_l3::neigh::{new_seeded, NeighConfig};
use freeway_l3::NeighState;
use loom::thread;

const SEED: u64 = 77;
const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

fn small() -> NeighConfig {
    NeighConfig {
        limit: 4,
        static_limit: 4,
        queue: 4,
        ..Default::default()
    }
}

fn host(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

/// Three distinct addresses that land in the same bucket (searched inside a trivial model,
/// since loom atomics exist only there).
fn colliding() -> [IpAddr; 3] {
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let o = out.clone();
    loom::model(move || {
        let (n, _w) = new_seeded(small(), SEED);
        let b = n.bucket_of(host(1), 0);
        let mut v = vec![host(1)];
        let mut i = 2;
        while v.len() < 3 {
            if n.bucket_of(host(i), 0) == b {
                v.push(host(i));
            }
            i += 1;
        }
        *o.lock().unwrap() = v;
    });
    let v = out.lock().unwrap().clone();
    [v[0], v[1], v[2]]
}

#[test]
fn reader_sees_inserted_entry_fully_initialised() {
    let [a, _, _] = colliding();
    loom::model(move || {
        let (n, mut w) = new_seeded(small(), SEED);
        let r = thread::spawn(move || {
            let g = n.pin();
            if let Some(v) = n.lookup(a, 0, &g) {
                assert_eq!((v.mac, v.state, v.updated), (A, NeighState::Reachable, 5));
            }
        });
        w.learn(a, 0, A, true, 5);
        r.join().unwrap();
    });
}

#[test]
fn stable_entry_is_always_found_while_its_chain_changes() {
    let [a, b, c] = colliding();
    loom::model(move || {
        let (n, mut w) = new_seeded(small(), SEED);
        w.learn(a, 0, A, true, 0);
        w.learn(b, 0, B, true, 0);
        let reader = n.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            let v = reader.lookup(a, 0, &g).expect("stable entry lost");
            assert_eq!(v.mac, A);
            if let Some(v) = reader.lookup(b, 0, &g) {
                assert_eq!(v.mac, B);
            }
        });
        w.resolve(c, 0, 1);
        assert!(w.delete(b, 0));
        r.join().unwrap();
        let g = n.pin();
        assert!(n.lookup(b, 0, &g).is_none());
        assert_eq!(n.lookup(c, 0, &g).map(|v| v.state), Some(NeighState::Incomplete));
        assert_eq!(n.len(), 2);
    });
}

#[test]
fn mac_and_state_change_together() {
    let [a, _, _] = colliding();
    loom::model(move || {
        let (n, mut w) = new_seeded(small(), SEED);
        w.resolve(a, 0, 0);
        let reader = n.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            let v = reader.lookup(a, 0, &g).expect("entry present");
            let pair = (v.mac, v.state);
            let ok = pair == ([0; 6], NeighState::Incomplete)
                || pair == (A, NeighState::Reachable)
                || pair == (B, NeighState::Permanent);
            assert!(ok, "mixed entry {v:?}");
        });
        w.learn(a, 0, A, false, 1);
        w.add_static(a, 0, B, 2).unwrap();
        r.join().unwrap();
    });
}
