//! Single-writer statistics counters.
//!
//! A [`Counter`] is written by exactly one thread (the worker that owns it) and read by any.
//! The owner increments with a relaxed load and a relaxed store, never a read-modify-write, so
//! an increment costs the same as on a plain integer and never locks the bus. Readers see a
//! value that may be slightly stale but never torn. Workers keep their counters in a block
//! wrapped in [`crate::CachePadded`]; totals are summed only when someone asks.

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter with one writer and many readers.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero.
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    /// Adds `n`. Only the owning thread may call this (two writers would lose increments).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Relaxed);
    }

    /// Adds one. Only the owning thread may call this.
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1)
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn single_writer_counts_exactly() {
        let c = Arc::new(Counter::new());
        let w = c.clone();
        let h = std::thread::spawn(move || {
            for _ in 0..100_000 {
                w.inc();
            }
            w.add(5);
        });
        // A concurrent reader only ever sees values that grow.
        let mut last = 0;
        while !h.is_finished() {
            let v = c.get();
            assert!(v >= last);
            last = v;
        }
        h.join().unwrap();
        assert_eq!(c.get(), 100_005);
    }
}
