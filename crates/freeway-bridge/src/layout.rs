//! Where an FDB entry keeps its write-heavy timestamps.
//!
//! The Linux bridge found that the `updated`/`used` fields, written on every packet, sat in the
//! same cache line as the MAC/VLAN key that every lookup reads: each write invalidated the line
//! in every other core's cache (100% load HitM). Freeway's entry keeps them on their own cache
//! line and writes them at most once per clock tick ([`Padded`]). The [`Naive`] layout is the
//! "before" of that fix, kept in the binary so `freeway bench bridge --layout naive` can
//! measure the difference in the same run. Production code uses [`Padded`].

use freeway_sync::atomic::{AtomicU64, Ordering};
use freeway_sync::{CachePadded, Tick};

/// The two timestamps of an entry.
#[derive(Debug)]
pub struct Times {
    /// Last tick the address was seen as a source (drives ageing).
    pub updated: AtomicU64,
    /// Last tick the address was used as a destination.
    pub used: AtomicU64,
}

impl Times {
    fn at(now: Tick) -> Times {
        Times {
            updated: AtomicU64::new(now),
            used: AtomicU64::new(now),
        }
    }
}

/// How an entry stores and refreshes its timestamps.
pub trait Layout: Send + Sync + 'static {
    /// The storage embedded in each entry.
    type Hot: Send + Sync;
    /// Name for tables and JSON ("padded", "naive").
    const NAME: &'static str;
    /// Fresh timestamps for an entry created at `now`.
    fn new_hot(now: Tick) -> Self::Hot;
    /// The storage as plain timestamps.
    fn times(hot: &Self::Hot) -> &Times;
    /// Records that the address was seen as a source at `now`.
    fn touch_updated(hot: &Self::Hot, now: Tick);
    /// Records that the address was used as a destination at `now`.
    fn touch_used(hot: &Self::Hot, now: Tick);
}

/// Timestamps on their own cache line, each written at most once per tick.
#[derive(Debug)]
pub enum Padded {}

/// Timestamps next to the key, written on every packet (the pre-fix Linux bridge).
#[derive(Debug)]
pub enum Naive {}

impl Layout for Padded {
    type Hot = CachePadded<Times>;
    const NAME: &'static str = "padded";

    fn new_hot(now: Tick) -> Self::Hot {
        CachePadded::new(Times::at(now))
    }

    #[inline(always)]
    fn times(hot: &Self::Hot) -> &Times {
        hot
    }

    #[inline(always)]
    fn touch_updated(hot: &Self::Hot, now: Tick) {
        // Compare first: a store to an unchanged value still takes the line exclusive.
        if hot.updated.load(Ordering::Relaxed) != now {
            hot.updated.store(now, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    fn touch_used(hot: &Self::Hot, now: Tick) {
        if hot.used.load(Ordering::Relaxed) != now {
            hot.used.store(now, Ordering::Relaxed);
        }
    }
}

impl Layout for Naive {
    type Hot = Times;
    const NAME: &'static str = "naive";

    fn new_hot(now: Tick) -> Self::Hot {
        Times::at(now)
    }

    #[inline(always)]
    fn times(hot: &Self::Hot) -> &Times {
        hot
    }

    #[inline(always)]
    fn touch_updated(hot: &Self::Hot, now: Tick) {
        hot.updated.store(now, Ordering::Relaxed);
    }

    #[inline(always)]
    fn touch_used(hot: &Self::Hot, now: Tick) {
        hot.used.store(now, Ordering::Relaxed);
    }
}
