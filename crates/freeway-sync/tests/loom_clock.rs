//! Loom model of the coarse clock's publication: one writer advances the tick (as the ticker
//! thread does, with relaxed stores), readers load it (as workers do, once per batch).
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p freeway-sync --test loom_clock --release`
//!
//! Over every interleaving: a reader never sees time go backwards, never sees a value the
//! writer did not store, and everyone sees the last value once the writer is joined.
#![cfg(loom)]

use freeway_sync::Clock;
use loom::thread;

#[test]
fn readers_never_see_the_clock_go_back() {
    loom::model(|| {
        let c = Clock::manual();
        let w = c.clone();
        let writer = thread::spawn(move || {
            for _ in 0..3 {
                w.advance(4);
            }
        });
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let r = c.clone();
                thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..3 {
                        let now = r.now();
                        assert!(now >= last, "time went back: {last} -> {now}");
                        assert!(now % 4 == 0 && now <= 12, "a value never stored: {now}");
                        last = now;
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(c.now(), 12);
    });
}
