//! Loom models of the capture ring (single producer, single consumer) and of the close
//! protocol between a worker and a tap's writer.
//!
//! Run with: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p freeway-capture
//! --test loom_ring --release`
//!
//! Checked over every interleaving loom explores:
//! * the consumer sees packets in push order, each one complete (never a half-written
//!   slot), and a full ring refuses a push instead of overwriting an unread slot;
//! * pushed + dropped = offered, popped = pushed, also for batches published at once
//!   (`Section::batch`, `Batch::fill`, `Batch::commit`) with each side working from its
//!   cached copy of the other's index;
//! * once the closer has set `closed` and seen `busy` clear, no packet arrives afterwards,
//!   so its final drain is complete.
//! * (a replica of the tap-list cache, `tap_list_generation_cache`) a worker that sees a new
//!   generation reads a list at least that new, and never one still being built.
#![cfg(loom)]

use std::sync::Arc;

use freeway_capture::ring::{Claims, ConsumerKey, Producer, ProducerKey, Rings};
use loom::thread;

// The consumer yields before each pop: without a scheduling point there, loom explored a
// single execution of each SPSC model (see `freeway_sync::loom_model`); every model runs
// under `model`, which fails it if loom explores fewer executions than expected.
use freeway_sync::loom_model::model;

fn frame(i: u8) -> [u8; 4] {
    [i, i.wrapping_mul(3), i ^ 0x5a, 0xff - i]
}

/// A set of one ring of `capacity` slots of 4 bytes, its producer key and its consumer key.
fn one_ring(capacity: usize) -> (Arc<Rings>, ProducerKey, ConsumerKey) {
    let claims = Claims::new(1);
    let (rings, ck) = Rings::new(&claims, capacity, 4);
    let pk = claims.claim(0).expect("index 0 is free");
    (Arc::new(rings), pk, ck)
}

/// Runs `produce` on a new thread as the producer of `rings`' ring (with `pk`); it returns
/// how many packets it pushed.
fn spawn_producer(
    rings: &Arc<Rings>,
    mut pk: ProducerKey,
    produce: impl FnOnce(&mut Producer<'_>) -> usize + Send + 'static,
) -> thread::JoinHandle<usize> {
    let r = rings.clone();
    thread::spawn(move || produce(&mut r.producer(&mut pk).expect("the set's own key")))
}

/// The consumer side of the SPSC models: `pops` pops while the producer runs (yielding
/// before each: without a scheduling point there loom explored a single execution), then
/// the rest after it ends; checks every packet complete and in order, popped = pushed and
/// pushed + dropped = `offered`.
fn consume_and_check(
    rings: &Rings,
    ck: &mut ConsumerKey,
    producer: thread::JoinHandle<usize>,
    pops: usize,
    offered: u64,
) {
    let mut seen = Vec::new();
    for _ in 0..pops {
        thread::yield_now();
        if let Some(x) = rings.consumer(ck).unwrap().pop(0, |s| (s.ts_ns, s.data().to_vec())) {
            seen.push(x);
        }
    }
    let pushed = producer.join().unwrap();
    let mut c = rings.consumer(ck).unwrap();
    while let Some(x) = c.pop(0, |s| (s.ts_ns, s.data().to_vec())) {
        seen.push(x);
    }
    let ring = &rings.rings()[0];
    assert_eq!(seen.len(), pushed);
    assert_eq!(ring.pushed() as usize, pushed);
    assert_eq!(ring.pushed() + ring.dropped(), offered);
    let mut last = None;
    for (ts, data) in seen {
        assert_eq!(data, frame(ts as u8).to_vec(), "torn slot");
        assert!(last.is_none_or(|l| l < ts), "out of order");
        last = Some(ts);
    }
}

/// An SPSC model: `produce` runs as the producer of a ring of `capacity` slots (offering
/// `offered` packets) while the consumer pops `pops` times, then drains and checks.
fn spsc(capacity: usize, pops: usize, offered: u64, produce: impl FnOnce(&mut Producer<'_>) -> usize + Send + 'static) {
    let (rings, pk, mut ck) = one_ring(capacity);
    let producer = spawn_producer(&rings, pk, produce);
    consume_and_check(&rings, &mut ck, producer, pops, offered);
}

#[test]
fn spsc_order_and_integrity() {
    model(20, || {
        spsc(2, 3, 3, |p| {
            let mut s = p.enter().expect("not closed");
            (0..3u8).filter(|&i| s.push(i as u64, 0, 1, &frame(i), 4)).count()
        });
    });
}

/// Batches through `Section::batch`/`Batch::fill`/`Batch::commit`, with both sides working
/// from their cached copies of the other's index: two batches of two into a ring of two
/// while the consumer pops. Checked: every popped slot is complete and in order (a
/// producer trusting a stale `tail_seen` too far, or a consumer a stale `head_seen`, would
/// hand out a slot still being written: loom reports the race on the slot's cell), and
/// filled + refused = offered.
#[test]
fn spsc_batches_with_cached_indices() {
    model(4, || {
        spsc(2, 2, 4, |p| {
            let mut ok = 0;
            let mut s = p.enter().expect("not closed");
            for b in 0..2u8 {
                let mut res = s.batch(2);
                for i in 0..2u8 {
                    let n = 2 * b + i;
                    if res.fill(n as u64, 0, 1, &frame(n), 4, 4) {
                        ok += 1;
                    }
                }
                let refused = 2 - res.filled();
                res.commit(refused);
            }
            ok
        });
    });
}

#[test]
fn close_protocol_final_drain_is_complete() {
    model(50, || {
        let (rings, pk, mut ck) = one_ring(4);
        let worker = spawn_producer(&rings, pk, |p| {
            // One section per push; a closed set opens none.
            (0..2u8)
                .filter(|&i| p.enter().is_some_and(|mut s| s.push(i as u64, 0, 1, &frame(i), 4)))
                .count()
        });
        // The writer closes the tap and waits for in-flight pushes.
        rings.close();
        while rings.busy() {
            thread::yield_now();
        }
        let mut drained = 0;
        let mut c = rings.consumer(&mut ck).unwrap();
        while c.pop(0, |_| ()).is_some() {
            drained += 1;
        }
        let pushed = worker.join().unwrap();
        // Nothing arrived after the final drain.
        assert!(rings.rings()[0].is_empty(), "a packet arrived after the final drain");
        assert_eq!(drained, pushed);
    });
}

/// The tap-list cache of `tap::TapWorker` (`current`/`refresh`) against the control plane's
/// `Inner::update`, as a replica with the same orderings (the real code publishes through
/// crossbeam-epoch, which loom cannot run): the control plane writes a new list, swaps the
/// published index (`AcqRel`), then bumps the generation (`Release`); a worker loads the
/// generation (`Acquire`) once per batch and only when it moved loads the published index
/// (`Acquire`) and reads that list.
///
/// Checked: a worker that saw generation `g` reads a list at least as new as the `g`-th
/// publication, never a list still being written (loom's cells would report the race), and
/// a worker that revalidates after the control plane finished holds the newest list.
/// (Weakening the swap and its load to `Relaxed` makes loom report the race on the list;
/// weakening the generation's bump and load makes the first assertion fail.)
#[test]
fn tap_list_generation_cache() {
    use freeway_sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use loom::cell::UnsafeCell;

    struct Shared {
        lists: [UnsafeCell<u64>; 3],
        published: AtomicUsize,
        generation: AtomicU64,
    }
    // SAFETY (test replica): list `i` is written only before index `i` is published and read
    // only after it was seen published, which is what the model checks.
    unsafe impl Sync for Shared {}

    model(30, || {
        let s = Arc::new(Shared {
            lists: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
            published: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
        });
        let c = s.clone();
        let control = thread::spawn(move || {
            for v in 1..=2usize {
                // Build the new list (its content: its version), then publish it.
                // SAFETY: list `v` is not published yet: no reader can reach it.
                c.lists[v].with_mut(|p| unsafe { *p = v as u64 });
                c.published.swap(v, Ordering::AcqRel);
                c.generation.fetch_add(1, Ordering::Release);
            }
        });
        // The worker: its cached list and generation, revalidated per batch.
        let (mut cached_gen, mut cached_list) = (0u64, 0u64);
        let mut batch = |s: &Shared| {
            let g = s.generation.load(Ordering::Acquire);
            if g != cached_gen {
                let v = s.published.load(Ordering::Acquire);
                // SAFETY: `v` was read published (Acquire): its list is complete and never
                // written again.
                cached_list = s.lists[v].with(|p| unsafe { *p });
                cached_gen = g;
                assert!(cached_list >= g, "generation {g} but list {cached_list}");
            }
        };
        batch(&s);
        batch(&s);
        control.join().unwrap();
        batch(&s);
        assert_eq!(
            (cached_gen, cached_list),
            (2, 2),
            "the newest list after the control plane finished"
        );
    });
}
