//! The "before" of `freeway bench refcount`: a reference count taken with the classic
//! increment-if-not-zero compare-and-swap loop, set against [`freeway_sync::RcRef`].

use std::sync::atomic::{fence, AtomicU32, Ordering};

use freeway_sync::CachePadded;

/// The classic increment-if-not-zero reference count: a compare-and-swap loop, the counter on
/// its own cache line too.
#[derive(Debug)]
pub(crate) struct CasRef {
    cnt: CachePadded<AtomicU32>,
}

impl CasRef {
    /// A counter holding one reference.
    pub(crate) fn new() -> CasRef {
        CasRef {
            cnt: CachePadded::new(AtomicU32::new(1)),
        }
    }

    /// Takes a reference unless the count is zero; also returns the CAS retries it took.
    #[inline]
    pub(crate) fn get(&self) -> (bool, u32) {
        let mut retries = 0;
        let mut cur = self.cnt.load(Ordering::Relaxed);
        loop {
            if cur == 0 {
                return (false, retries);
            }
            match self
                .cnt
                .compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return (true, retries),
                Err(now) => {
                    cur = now;
                    retries += 1;
                }
            }
        }
    }

    /// Drops a reference; `true` for the last one.
    #[inline]
    pub(crate) fn put(&self) -> bool {
        if self.cnt.fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_baseline_counts() {
        let c = CasRef::new();
        assert_eq!(c.get(), (true, 0));
        assert!(!c.put());
        assert!(c.put());
        assert!(!c.get().0);
    }
}
