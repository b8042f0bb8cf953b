//! A reference count that scales: `get` is one `fetch_add`, with no compare-and-swap loop.
//!
//! For objects found through an epoch-protected table (a route's next hop, a neighbour) and
//! kept beyond the read-side section. The classic `increment if not zero` is a CAS loop: under
//! contention every core retries (Linux measured an average of 8 retries per get on 112 CPUs
//! for `dst_entry`). Here, as in Linux's `rcuref`, the counter is *biased* and its value space
//! is split into zones, so `get` and `put` are single atomic additions and only the rare edge
//! cases take a slow path:
//!
//! ```text
//!  0x0000_0000 ..= 0x7fff_ffff   live: the value is (references - 1), so 0 means one reference
//!  0x8000_0000 ..= 0xbfff_ffff   saturation zone: too many gets; pinned at SATURATED, never freed
//!  0xc000_0000 ..= 0xffff_fffe   dead zone: the object was released; gets fail
//!  0xffff_ffff                   NOREF: the last reference was just put
//! ```
//!
//! * `get`: `fetch_add(1)`. If the new value is live, done (NOREF + 1 wraps to 0: a get that
//!   races the last put takes the object over, and the put's CAS fails). If it is in the dead
//!   zone, the object was released: the get fails and the counter is put back to `DEAD`, far
//!   from the zone edges, so racing gets can never walk it back to live.
//! * `put`: `fetch_sub(1, Release)`. If the new value is live, done. If it is NOREF, this was the
//!   last reference unless a `get` slipped in: one CAS `NOREF → DEAD` decides, and only its
//!   winner frees. A new value in the dead zone is an underflow (a put too many): detected,
//!   counted, and the counter pinned at `DEAD`; nothing is freed twice.
//!
//! `get` must only be called while the object's memory is guaranteed (inside the epoch section
//! that found it, or while holding a reference): the counter protects the object's life, the
//! epoch protects the counter's memory. The counter lives on its own cache line
//! ([`crate::CachePadded`]) so that gets and puts do not disturb the object's read-mostly fields.
//!
//! Threads: any thread may `get`/`put`. Model-checked in `tests/loom_refcount.rs`.

use crate::atomic::{AtomicU32, Ordering};
use crate::CachePadded;

const LIVE_MAX: u32 = 0x7fff_ffff;
const SATURATED: u32 = 0xa000_0000;
const RELEASED: u32 = 0xc000_0000;
const DEAD: u32 = 0xe000_0000;
const NOREF: u32 = 0xffff_ffff;

/// What [`RcRef::put`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// Other references remain.
    Alive,
    /// This was the last reference: the caller must release the object (exactly one caller
    /// ever sees this).
    Last,
    /// More puts than gets: detected; nothing to free (the counter is pinned dead).
    Underflow,
    /// The counter is saturated: the object is never freed (a leak, not a use-after-free).
    Saturated,
}

/// A scalable reference count, starting at one reference.
#[derive(Debug)]
pub struct RcRef {
    cnt: CachePadded<AtomicU32>,
}

impl Default for RcRef {
    fn default() -> Self {
        RcRef::new()
    }
}

impl RcRef {
    /// A counter holding one reference (the creator's).
    pub fn new() -> RcRef {
        RcRef {
            cnt: CachePadded::new(AtomicU32::new(0)),
        }
    }

    /// Takes a reference. `false` if the object is dying or dead (then it must not be used).
    #[inline]
    pub fn get(&self) -> bool {
        let new = self.cnt.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        // NOREF + 1 wraps to 0: a get racing the last put revives the object, and that put's
        // CAS then fails, so the getter now holds the last reference.
        if new <= LIVE_MAX {
            return true;
        }
        self.get_slow(new)
    }

    #[cold]
    fn get_slow(&self, new: u32) -> bool {
        if new >= RELEASED {
            // Dying or dead: pull the counter back to the middle of the dead zone so a storm
            // of failing gets can never carry it over the edge into the live range.
            self.cnt.store(DEAD, Ordering::Relaxed);
            return false;
        }
        // Saturation zone: keep it pinned in the middle of the zone; the object leaks.
        self.cnt.store(SATURATED, Ordering::Relaxed);
        true
    }

    /// Drops a reference; see [`Put`] for what the caller must do.
    #[inline]
    pub fn put(&self) -> Put {
        let new = self.cnt.fetch_sub(1, Ordering::Release).wrapping_sub(1);
        if new <= LIVE_MAX {
            return Put::Alive;
        }
        self.put_slow(new)
    }

    #[cold]
    fn put_slow(&self, new: u32) -> Put {
        if new == NOREF {
            // Last reference, unless a get raced in; exactly one CAS can win.
            if self
                .cnt
                .compare_exchange(NOREF, DEAD, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                // Pairs with the Release of every other put: their uses of the object
                // happen-before the caller frees it.
                crate::atomic::fence(Ordering::Acquire);
                return Put::Last;
            }
            return Put::Alive;
        }
        if new >= RELEASED {
            self.cnt.store(DEAD, Ordering::Relaxed);
            return Put::Underflow;
        }
        self.cnt.store(SATURATED, Ordering::Relaxed);
        Put::Saturated
    }

    /// References currently held (0 once dead; approximate while others get and put).
    pub fn count(&self) -> u64 {
        match self.cnt.load(Ordering::Relaxed) {
            c if c <= LIVE_MAX => u64::from(c) + 1,
            c if c < RELEASED => u64::from(c) + 1,
            _ => 0,
        }
    }

    /// Whether the object was released.
    pub fn is_dead(&self) -> bool {
        self.cnt.load(Ordering::Relaxed) >= RELEASED
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn get_put_and_last() {
        let r = RcRef::new();
        assert_eq!(r.count(), 1);
        assert!(r.get());
        assert_eq!(r.count(), 2);
        assert_eq!(r.put(), Put::Alive);
        assert_eq!(r.put(), Put::Last);
        assert!(r.is_dead());
        assert!(!r.get(), "a dead object cannot be revived");
        assert!(!r.get());
        assert_eq!(r.put(), Put::Underflow);
        assert_eq!(r.count(), 0);
    }

    #[test]
    fn underflow_is_detected_not_wrapped() {
        let r = RcRef::new();
        assert_eq!(r.put(), Put::Last);
        for _ in 0..1000 {
            assert_eq!(r.put(), Put::Underflow);
            assert!(!r.get());
        }
        assert!(r.is_dead());
    }

    #[test]
    fn saturation_pins_instead_of_overflowing() {
        let r = RcRef::new();
        // Jump close to the edge of the live range.
        r.cnt.store(LIVE_MAX, Ordering::Relaxed);
        assert!(r.get(), "the get that enters the saturation zone still succeeds");
        assert!(r.get());
        assert_eq!(r.cnt.load(Ordering::Relaxed), SATURATED);
        // Puts never free a saturated object.
        for _ in 0..10 {
            assert_eq!(r.put(), Put::Saturated);
        }
        assert!(!r.is_dead());
    }

    #[test]
    fn threads_free_exactly_once() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        let r = Arc::new(RcRef::new());
        let frees = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (r, f) = (r.clone(), frees.clone());
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        if r.get() && r.put() == Put::Last {
                            f.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(
            frees.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "the creator's reference keeps it alive"
        );
        assert_eq!(r.put(), Put::Last);
        assert_eq!(r.count(), 0);
    }
}
