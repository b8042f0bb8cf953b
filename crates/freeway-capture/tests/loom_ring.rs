//! Loom models of the capture ring (single producer, single consumer) and of the close
//! protocol between a worker and a tap's writer.
//!
//! Run with: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p freeway-capture
//! --test loom_ring --release`
//!
//! Checked over every interleaving loom explores:
//! * the consumer sees packets in push order, each one complete (never a half-written
//!   slot), and a full ring refuses a push instead of overwriting an unread slot;
//! * pushed + dropped = offered, popped = pushed;
//! * once the closer has set `closed` and seen `busy` clear, no packet arrives afterwards,
//!   so its final drain is complete.
#![cfg(loom)]

use std::sync::Arc;

use freeway_capture::ring::Ring;
use freeway_sync::atomic::AtomicBool;
use loom::thread;

fn frame(i: u8) -> [u8; 4] {
    [i, i.wrapping_mul(3), i ^ 0x5a, 0xff - i]
}

#[test]
fn spsc_order_and_integrity() {
    loom::model(|| {
        let ring = Arc::new(Ring::new(2, 4));
        let r = ring.clone();
        let producer = thread::spawn(move || {
            let mut ok = 0;
            for i in 0..3u8 {
                // SAFETY: the only producer.
                if unsafe { r.push(i as u64, 0, 1, &frame(i), 4) } {
                    ok += 1;
                }
            }
            ok
        });
        let mut seen = Vec::new();
        for _ in 0..3 {
            // SAFETY: the only consumer.
            if let Some((ts, data)) = unsafe { ring.pop(|s| (s.ts_ns, s.data().to_vec())) } {
                seen.push((ts, data));
            }
        }
        let pushed = producer.join().unwrap();
        // SAFETY: the only consumer (the producer has finished).
        while let Some(x) = unsafe { ring.pop(|s| (s.ts_ns, s.data().to_vec())) } {
            seen.push(x);
        }
        assert_eq!(seen.len(), pushed);
        assert_eq!(ring.pushed() as usize, pushed);
        assert_eq!(ring.pushed() + ring.dropped(), 3);
        let mut last = None;
        for (ts, data) in seen {
            assert_eq!(data, frame(ts as u8).to_vec(), "torn slot");
            assert!(last.is_none_or(|l| l < ts), "out of order");
            last = Some(ts);
        }
    });
}

#[test]
fn close_protocol_final_drain_is_complete() {
    loom::model(|| {
        let ring = Arc::new(Ring::new(4, 4));
        let closed = Arc::new(AtomicBool::new(false));
        let (r, c) = (ring.clone(), closed.clone());
        let worker = thread::spawn(move || {
            let mut pushed = 0;
            for i in 0..2u8 {
                // SAFETY: the only producer.
                unsafe {
                    if r.enter(&c) && r.push(i as u64, 0, 1, &frame(i), 4) {
                        pushed += 1;
                    }
                    r.leave();
                }
            }
            pushed
        });
        // The writer closes the tap and waits for in-flight pushes.
        freeway_capture::ring::close(&closed);
        while ring.busy() {
            thread::yield_now();
        }
        let mut drained = 0;
        // SAFETY: the only consumer.
        while unsafe { ring.pop(|_| ()) }.is_some() {
            drained += 1;
        }
        let pushed = worker.join().unwrap();
        // Nothing arrived after the final drain.
        assert!(ring.is_empty(), "a packet arrived after the final drain");
        assert_eq!(drained, pushed);
    });
}
