//! Loom models of the FDB table's publication protocol.
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p freeway-bridge --test loom_table --release`
//!
//! What is checked, over every interleaving loom explores:
//! * a reader racing the writer's insert either misses the key or sees the fully initialised
//!   entry (right port), never garbage;
//! * a reader looking up a key that stays in the table finds it while the writer inserts and
//!   unlinks *other* entries of the same chain;
//! * a worker's in-place MAC move racing the writer's delete of a neighbour neither loses the
//!   move nor resurrects the deleted entry.
#![cfg(loom)]

use freeway_bridge::fdb::{new_seeded, FdbConfig};
use freeway_bridge::table::{key, unkey};
use freeway_bridge::{Mac, Padded};
use loom::thread;

const SEED: u64 = 99;

fn small() -> FdbConfig {
    FdbConfig {
        learn_limit: 4,
        static_limit: 4,
        learn_queue: 4,
        ..Default::default()
    }
}

/// Three distinct keys that land in the same bucket, so they share one chain. (Loom atomics
/// exist only inside a model, so the search runs in a trivial one.)
fn colliding_keys() -> [u64; 3] {
    let out = std::sync::Arc::new(std::sync::Mutex::new([0u64; 3]));
    let o = out.clone();
    loom::model(move || *o.lock().unwrap() = find_colliding());
    let keys = *out.lock().unwrap();
    keys
}

fn find_colliding() -> [u64; 3] {
    let (fdb, _w) = new_seeded::<Padded>(small(), SEED);
    let t = fdb.table();
    let k0 = key([2, 0, 0, 0, 0, 1], 1);
    let b = t.bucket_of(k0);
    let mut found = vec![k0];
    let mut i = 2u32;
    while found.len() < 3 {
        let b4 = i.to_be_bytes();
        let k = key([2, 0, b4[0], b4[1], b4[2], b4[3]], 1);
        if t.bucket_of(k) == b {
            found.push(k);
        }
        i += 1;
    }
    [found[0], found[1], found[2]]
}

#[test]
fn reader_sees_inserted_entry_fully_initialised() {
    let [a, _, _] = colliding_keys();
    loom::model(move || {
        let (fdb, mut w) = new_seeded::<Padded>(small(), SEED);
        let r = thread::spawn(move || {
            let g = fdb.pin();
            if let Some(n) = fdb.table().lookup(a, &g) {
                assert_eq!(n.port(), 7);
                assert_eq!(n.key(), a);
                assert!(!n.is_static());
            }
        });
        w.learn(a, 7, 1);
        r.join().unwrap();
    });
}

#[test]
fn stable_key_is_always_found_while_its_chain_changes() {
    let [a, b, c] = colliding_keys();
    loom::model(move || {
        let (fdb, mut w) = new_seeded::<Padded>(small(), SEED);
        w.learn(a, 1, 0);
        w.learn(b, 2, 0);
        let reader = fdb.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            // `a` is never removed: every interleaving must find it.
            let n = reader.table().lookup(a, &g).expect("stable key lost");
            assert_eq!(n.port(), 1);
            // `b` is being removed: found with the right port, or not found.
            if let Some(n) = reader.table().lookup(b, &g) {
                assert_eq!(n.port(), 2);
            }
        });
        w.learn(c, 3, 0);
        let (mac, vlan) = unkey(b);
        assert!(w.delete(Mac(mac), vlan));
        r.join().unwrap();
        let g = fdb.pin();
        assert!(fdb.table().lookup(b, &g).is_none());
        assert_eq!(fdb.table().lookup(c, &g).map(|n| n.port()), Some(3));
        assert_eq!(fdb.len(), 2);
    });
}

#[test]
fn mac_move_races_neighbour_delete() {
    let [a, b, _] = colliding_keys();
    loom::model(move || {
        let (fdb, mut w) = new_seeded::<Padded>(small(), SEED);
        w.learn(a, 1, 0);
        w.learn(b, 2, 0);
        let worker = fdb.clone();
        let t = thread::spawn(move || {
            let g = worker.pin();
            let n = worker.table().lookup(a, &g).expect("entry present");
            assert!(n.move_to(5));
            n.touch_updated(9);
        });
        let (mac, vlan) = unkey(b);
        w.delete(Mac(mac), vlan);
        t.join().unwrap();
        let g = fdb.pin();
        assert_eq!(fdb.table().lookup(a, &g).map(|n| n.port()), Some(5));
        assert!(fdb.table().lookup(b, &g).is_none());
    });
}

#[test]
fn a_static_entry_replaced_is_never_missing() {
    // `fdb add` over an existing entry (static moved to another port, or learned made
    // static): a reader finds the old entry or the new one, never none (which would flood
    // the frame to every port of the VLAN). Found by the churn oracle.
    let [a, b, _] = colliding_keys();
    loom::model(move || {
        let (fdb, mut w) = new_seeded::<Padded>(small(), SEED);
        let (mac, vlan) = unkey(a);
        w.add_static(Mac(mac), vlan, 1, 0).unwrap();
        let (mb, vb) = unkey(b);
        w.add_static(Mac(mb), vb, 3, 0).unwrap();
        let reader = fdb.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            let n = reader
                .table()
                .lookup(a, &g)
                .expect("entry missing during its replacement");
            assert!(n.port() == 1 || n.port() == 2);
            assert!(n.is_static());
            let n = reader.table().lookup(b, &g).expect("neighbour missing");
            assert_eq!(n.port(), 3);
        });
        w.add_static(Mac(mac), vlan, 2, 0).unwrap();
        r.join().unwrap();
        let g = fdb.pin();
        assert_eq!(fdb.table().lookup(a, &g).map(|n| n.port()), Some(2));
        assert_eq!(fdb.len(), 2);
    });
}
