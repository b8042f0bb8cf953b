//! An immutable value published by one writer and read by many under an epoch guard.
//!
//! The writer builds a whole new version and [`Published::publish`]es it with one `AcqRel`
//! pointer swap; the old version is retired through [`crate::reclaim`] and freed once every
//! reader pinned before the swap has unpinned. Readers [`Published::load`] the current
//! version with one `Acquire` load under a guard they already hold (workers: the guard of
//! their batch) and write nothing shared.
//!
//! # Invariants
//!
//! 1. The pointer is never null and always points to a fully built value (published with
//!    `Release`, read with `Acquire`).
//! 2. A replaced value is freed only after an epoch grace period (under loom: when the
//!    `Published` drops).
//! 3. There is one writer at a time: [`Published::publish`] takes `&mut self` or is called
//!    by the single owner of the writing side.

use crate::atomic::{AtomicPtr, Ordering};
use crate::reclaim::{pin, Guard, Retired};

/// A value of type `T` that one writer replaces whole and readers see under a guard.
pub struct Published<T: Send + Sync + 'static> {
    ptr: AtomicPtr<T>,
    retired: Retired<T>,
}

impl<T: Send + Sync + 'static> Published<T> {
    /// Publishes `v` as the first version.
    pub fn new(v: T) -> Self {
        Published {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(v))),
            retired: Retired::new(),
        }
    }

    /// The current version, valid while `guard` is held.
    #[inline]
    pub fn load<'g>(&self, _guard: &'g Guard) -> &'g T {
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: the pointer is never null and points to a fully built value (invariant 1);
        // a replaced value is freed only after every guard pinned before its replacement is
        // dropped (invariant 2), and `guard` outlives the returned reference.
        unsafe { &*p }
    }

    /// Replaces the current version with `v`. Callers serialise publication (one writer).
    pub fn publish(&self, v: T) {
        let new = Box::into_raw(Box::new(v));
        let guard = pin();
        let old = self.ptr.swap(new, Ordering::AcqRel);
        // SAFETY: `old` came from `Box::into_raw`, is now unreachable for readers that pin
        // from here on, and is retired once (only this swap returned it).
        unsafe { self.retired.retire(old, &guard) };
    }
}

impl<T: Send + Sync + 'static> Drop for Published<T> {
    fn drop(&mut self) {
        let p = self.ptr.load(Ordering::Relaxed);
        // SAFETY: we are the last owner; no reader can hold a guard on this value any more,
        // and the pointer came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(p) });
    }
}

impl<T: Send + Sync + std::fmt::Debug + 'static> std::fmt::Debug for Published<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Published").field(self.load(&pin())).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn readers_see_whole_versions() {
        let p = std::sync::Arc::new(Published::new(vec![0u64; 8]));
        let r = {
            let p = p.clone();
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    let g = pin();
                    let v = p.load(&g);
                    assert!(v.iter().all(|x| *x == v[0]), "torn version {v:?}");
                }
            })
        };
        for i in 1..2_000u64 {
            p.publish(vec![i; 8]);
        }
        r.join().unwrap();
        assert_eq!(p.load(&pin())[0], 1_999);
    }
}
