//! Loom models of the neighbour table's publication protocol.
//!
//! Run with: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p freeway-l3 --test
//! loom_neigh --release`
//!
//! What is checked, over every interleaving loom explores:
//! * a worker racing the writer's insert either misses the entry or sees it fully initialised
//!   (right MAC and state), never garbage;
//! * a worker looking up an entry that stays in the table finds it while the writer inserts
//!   and unlinks *other* entries of the same chain, in its middle and at its head;
//! * a worker racing an in-place MAC change and a state change sees one of the (MAC, state)
//!   pairs the writer stored, never a mix, and with it the tick stored with it or a later one.
//!
//! Guarded against vacuity: each model must explore a minimum number of executions
//! (`freeway_sync::loom_model::model`) and reach each of the outcomes it names (`Outcomes`). The writer and the
//! worker both run in spawned threads (the main thread only sets up, joins and checks), which
//! lets loom 0.7 explore more interleavings than with the writer on the main thread (13
//! executions instead of 8 for the first model, 166 instead of 90 for the last), cf.
//! tokio-rs/loom#392 and `loom_ct.rs`. Loom explores them properly only with a preemption
//! bound (the bounded search adds backtracking points the unbounded one misses): without
//! `LOOM_MAX_PREEMPTIONS` it explores 3, 3 and 21 executions, and the guard fails.
//!
//! Mutations checked to fail (each reverted): `Release` → `Relaxed` on the insert's publish
//! (loom reports the causality violation in the first two models) and on the unlink's (the
//! second: the head of the chain is unlinked with a successor the worker has no other
//! synchronisation with); `Acquire` → `Relaxed` on a lookup's load of the bucket head (the
//! first two); `Release` → `Relaxed` on the word's store in `learn` or in `add_static`, and
//! `Acquire` → `Relaxed` on its load in a lookup (the last model sees a state with an older
//! tick; it passed with each of them before it checked the tick).
#![cfg(loom)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use freeway_l3::neigh::{new_seeded, NeighConfig};
use freeway_l3::NeighState;
use loom::thread;

use freeway_sync::loom_model::explore;

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

/// Four distinct addresses that land in the same bucket (searched inside a trivial model,
/// since loom atomics exist only there; one execution by design, so not through [`model`]).
fn colliding() -> [IpAddr; 4] {
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    loom::model(move || {
        let (n, _w) = new_seeded(small(), SEED);
        let b = n.bucket_of(host(1), 0);
        let mut v = vec![host(1)];
        let mut i = 2;
        while v.len() < 4 {
            if n.bucket_of(host(i), 0) == b {
                v.push(host(i));
            }
            i += 1;
        }
        *o.lock().unwrap() = v;
    });
    let v = out.lock().unwrap().clone();
    [v[0], v[1], v[2], v[3]]
}

#[test]
fn reader_sees_inserted_entry_fully_initialised() {
    let [a, ..] = colliding();
    explore(5, move |seen| {
        let (n, mut w) = new_seeded(small(), SEED);
        let reader = n.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            let Some(v) = reader.lookup(a, 0, &g) else {
                return "the worker missed the entry";
            };
            assert_eq!((v.mac, v.state, v.updated), (A, NeighState::Reachable, 5));
            "the worker found the entry"
        });
        let wt = thread::spawn(move || {
            w.learn(a, 0, A, true, 5);
        });
        seen.saw(r.join().unwrap());
        wt.join().unwrap();
    })
    .expect(&["the worker missed the entry", "the worker found the entry"]);
}

/// `b` is unlinked from the middle of the chain, then `d` from its head, with as successor
/// `c`, inserted while the worker runs: the unlink's `Release` is what makes `c` initialised
/// for a worker that reads the head it wrote.
#[test]
fn stable_entry_is_always_found_while_its_chain_changes() {
    let [a, b, c, d] = colliding();
    explore(120, move |seen| {
        let (n, mut w) = new_seeded(small(), SEED);
        w.learn(a, 0, A, true, 0);
        w.learn(b, 0, B, true, 0);
        let reader = n.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            let v = reader.lookup(a, 0, &g).expect("stable entry lost");
            assert_eq!(v.mac, A);
            let Some(v) = reader.lookup(b, 0, &g) else {
                return "the worker missed the entry being removed";
            };
            assert_eq!(v.mac, B);
            "the worker found the entry being removed"
        });
        let wt = thread::spawn(move || {
            w.resolve(c, 0, 1);
            assert!(w.delete(b, 0));
            w.resolve(d, 0, 1);
            assert!(w.delete(d, 0));
        });
        seen.saw(r.join().unwrap());
        wt.join().unwrap();
        let g = n.pin();
        assert!(n.lookup(b, 0, &g).is_none());
        assert!(n.lookup(d, 0, &g).is_none());
        assert_eq!(n.lookup(c, 0, &g).map(|v| v.state), Some(NeighState::Incomplete));
        assert_eq!(n.len(), 2);
    })
    .expect(&[
        "the worker missed the entry being removed",
        "the worker found the entry being removed",
    ]);
}

#[test]
fn mac_and_state_change_together() {
    let [a, ..] = colliding();
    explore(60, move |seen| {
        let (n, mut w) = new_seeded(small(), SEED);
        w.resolve(a, 0, 0);
        let reader = n.clone();
        let r = thread::spawn(move || {
            let g = reader.pin();
            let v = reader.lookup(a, 0, &g).expect("entry present");
            // Each (MAC, state) pair the writer stored, and the tick it stored before it (the
            // word's `Release` publishes it): the worker sees that tick or a later one.
            let (tick, pair) = match (v.mac, v.state) {
                ([0, 0, 0, 0, 0, 0], NeighState::Incomplete) => (0, "the worker saw it incomplete"),
                (A, NeighState::Reachable) => (1, "the worker saw it reachable"),
                (B, NeighState::Permanent) => (2, "the worker saw it permanent"),
                _ => panic!("mixed entry {v:?}"),
            };
            assert!(v.updated >= tick, "entry {v:?} with a tick older than its state's");
            pair
        });
        let wt = thread::spawn(move || {
            w.learn(a, 0, A, false, 1);
            w.add_static(a, 0, B, 2).unwrap();
        });
        seen.saw(r.join().unwrap());
        wt.join().unwrap();
    })
    .expect(&[
        "the worker saw it incomplete",
        "the worker saw it reachable",
        "the worker saw it permanent",
    ]);
}
