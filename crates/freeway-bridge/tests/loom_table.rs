//! Loom models of the FDB table's publication protocol.
//!
//! Run with: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p freeway-bridge
//! --test loom_table --release`
//!
//! What is checked, over every interleaving loom explores:
//! * a reader racing the writer's insert either misses the key or sees the fully initialised
//!   entry (right port), never garbage;
//! * a reader looking up a key that stays in the table finds it while the writer inserts and
//!   unlinks *other* entries of the same chain;
//! * a worker's in-place MAC move racing the writer's inserts and its delete of a neighbour
//!   neither loses the move nor resurrects the deleted entry;
//! * a reader racing the replacement of an entry (`fdb add` over an existing one) finds the
//!   old entry or the new one, never none.
//!
//! Guarded against vacuity: each model must explore a minimum number of executions
//! (`freeway_sync::loom_model::model`) and, where its reader can tell, reach each of the outcomes it names
//! (`Outcomes`). The writer and the reader both run in spawned threads (the main thread
//! only sets up, joins and checks), which lets loom 0.7 explore more interleavings than with
//! the writer on the main thread (13 executions instead of 8 for the first model, 70 instead
//! of 35 for the second); see `loom_ct.rs`. Loom explores them properly
//! only with a preemption bound (the bounded search adds backtracking points the unbounded
//! one misses): without `LOOM_MAX_PREEMPTIONS` it stops after 3 executions each, and the
//! guard fails.
//!
//! Mutations checked to fail (each reverted): `Release` → `Relaxed` on the insert's publish
//! (`insert_new`: loom reports the causality violation in the first three models), on the
//! replacement's (`replace`: the last model) and on the unlink's (`remove_where`: the MAC move
//! model); `Acquire` → `Relaxed` on a lookup's load of the bucket head (the first three) and
//! of a `next` link (the last).
#![cfg(loom)]

use std::sync::{Arc, Mutex};

use freeway_bridge::fdb::{new_seeded, FdbConfig};
use freeway_bridge::table::{key, unkey};
use freeway_bridge::{Mac, Padded};
use loom::thread;

use freeway_sync::loom_model::{explore, model};

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
    let out = Arc::new(Mutex::new([0u64; 3]));
    let o = out.clone();
    // A search, not a model: one execution by design, so not through `model`.
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
    explore(5, move |seen| {
        let (fdb, mut w) = new_seeded::<Padded>(small(), SEED);
        let reader = fdb.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            let Some(n) = reader.table().lookup(a, &g) else {
                return "the reader missed the key";
            };
            assert_eq!(n.port(), 7);
            assert_eq!(n.key(), a);
            assert!(!n.is_static());
            "the reader found the key"
        });
        let wt = thread::spawn(move || {
            w.learn(a, 7, 1);
        });
        seen.saw(r.join().unwrap());
        wt.join().unwrap();
    })
    .expect(&["the reader missed the key", "the reader found the key"]);
}

#[test]
fn stable_key_is_always_found_while_its_chain_changes() {
    let [a, b, c] = colliding_keys();
    explore(25, move |seen| {
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
            let Some(n) = reader.table().lookup(b, &g) else {
                return "the reader missed the key being removed";
            };
            assert_eq!(n.port(), 2);
            "the reader found the key being removed"
        });
        let wt = thread::spawn(move || {
            w.learn(c, 3, 0);
            let (mac, vlan) = unkey(b);
            assert!(w.delete(Mac(mac), vlan));
        });
        seen.saw(r.join().unwrap());
        wt.join().unwrap();
        let g = fdb.pin();
        assert!(fdb.table().lookup(b, &g).is_none());
        assert_eq!(fdb.table().lookup(c, &g).map(|n| n.port()), Some(3));
        assert_eq!(fdb.len(), 2);
    })
    .expect(&[
        "the reader missed the key being removed",
        "the reader found the key being removed",
    ]);
}

/// The neighbours are learned while the worker runs and the newest one (the chain head) is
/// deleted, so the worker may walk nodes it has no other synchronisation with, through a head
/// that the unlink wrote: the unlink's `Release` is what makes them initialised for it.
#[test]
fn mac_move_races_neighbour_delete() {
    let [a, b, c] = colliding_keys();
    model(25, move || {
        let (fdb, mut w) = new_seeded::<Padded>(small(), SEED);
        w.learn(a, 1, 0);
        let worker = fdb.clone();
        let t = thread::spawn(move || {
            let g = worker.pin();
            let n = worker.table().lookup(a, &g).expect("entry present");
            assert!(n.move_to(5));
            n.touch_updated(9);
        });
        let wt = thread::spawn(move || {
            w.learn(b, 2, 0);
            w.learn(c, 3, 0);
            let (mac, vlan) = unkey(c);
            assert!(w.delete(Mac(mac), vlan));
        });
        t.join().unwrap();
        wt.join().unwrap();
        let g = fdb.pin();
        assert_eq!(fdb.table().lookup(a, &g).map(|n| n.port()), Some(5));
        assert_eq!(fdb.table().lookup(b, &g).map(|n| n.port()), Some(2));
        assert!(fdb.table().lookup(c, &g).is_none());
    });
}

#[test]
fn a_static_entry_replaced_is_never_missing() {
    // `fdb add` over an existing entry (static moved to another port, or learned made
    // static): a reader finds the old entry or the new one, never none (which would flood
    // the frame to every port of the VLAN). Found by the churn oracle.
    let [a, b, _] = colliding_keys();
    explore(6, move |seen| {
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
            assert!(n.is_static());
            let found = match n.port() {
                1 => "the reader found the old entry",
                2 => "the reader found the new entry",
                p => panic!("port {p}"),
            };
            let n = reader.table().lookup(b, &g).expect("neighbour missing");
            assert_eq!(n.port(), 3);
            found
        });
        let wt = thread::spawn(move || {
            w.add_static(Mac(mac), vlan, 2, 0).unwrap();
        });
        seen.saw(r.join().unwrap());
        wt.join().unwrap();
        let g = fdb.pin();
        assert_eq!(fdb.table().lookup(a, &g).map(|n| n.port()), Some(2));
        assert_eq!(fdb.len(), 2);
    })
    .expect(&["the reader found the old entry", "the reader found the new entry"]);
}
