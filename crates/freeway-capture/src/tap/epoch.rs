//! The tap registry with an epoch-published tap list ([`Taps`]) and its worker handle
//! ([`TapWorker`]).
//!
//! Threads: the control plane builds and publishes lists (under `Common::ctl`); each worker
//! reads the published list through its own [`TapWorker`].
//!
//! # Publication
//!
//! The tap list is immutable once published: attach, detach and filter replacement build a
//! new list (sharing the unchanged taps through `Arc`) and swap it in with one `AcqRel`
//! pointer swap, then bump the generation; the old pointer is freed by crossbeam-epoch after
//! every worker that might still read it has unpinned, and the list itself (an `Arc`) when
//! the last worker cache holding it has moved on (at its next batch, or its next idle poll
//! when traffic stopped). This is FreeBSD's lock-free BPF tap path (the rwlock on the tap
//! path replaced by epoch(9) and a program buffer swapped without the interface lock). The
//! orderings of the swap and the generation are model-checked on a replica in
//! `tests/loom_ring.rs` (`tap_list_generation_cache`).

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crossbeam_epoch::{self as epoch, Atomic, Owned};
use freeway_packet::Packet;

use super::{
    registry_handle, tap_point_via_offer, Common, Detach, Direction, Entry, Offer, TapError, TapId, TapPoint,
    TapReader, TapRegistry, TapSpec, WorkerClaim,
};
use crate::filter::Filter;
use crate::ring::ProducerKey;

/// A published tap list: immutable once built.
#[derive(Debug, Default)]
struct TapList {
    entries: Vec<Entry>,
    /// Bit `port % 64` set when some entry taps `port` in the receive direction: a quick,
    /// conservative reject test (the entries are checked exactly afterwards).
    rx_ports: u64,
    /// The same for the transmit direction.
    tx_ports: u64,
}

impl TapList {
    fn new(entries: Vec<Entry>) -> TapList {
        let (mut rx_ports, mut tx_ports) = (0u64, 0u64);
        for e in &entries {
            let bit = if e.tap.port == super::ANY_PORT {
                u64::MAX
            } else {
                1u64 << (e.tap.port % 64)
            };
            if e.tap.dir.covers(Direction::Rx) {
                rx_ports |= bit;
            }
            if e.tap.dir.covers(Direction::Tx) {
                tx_ports |= bit;
            }
        }
        TapList {
            entries,
            rx_ports,
            tx_ports,
        }
    }

    /// Whether some entry may tap `port` going `dir` (no false negatives).
    #[inline]
    fn may_cover(&self, port: u16, dir: Direction) -> bool {
        let mask = match dir {
            Direction::Rx => self.rx_ports,
            Direction::Tx => self.tx_ports,
            Direction::Both => self.rx_ports | self.tx_ports,
        };
        mask & (1u64 << (port % 64)) != 0
    }
}

/// What the epoch-protected pointer holds: the list, shared with the workers' caches.
#[derive(Debug, Default)]
struct Published {
    list: Arc<TapList>,
}

#[derive(Debug)]
struct Inner {
    common: Common,
    list: Atomic<Published>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: we are the last owner (drop), no worker can hold a guard on this list.
        unsafe {
            let g = epoch::unprotected();
            let p = self.list.load(Ordering::Relaxed, g);
            if !p.is_null() {
                drop(p.into_owned());
            }
        }
    }
}

impl Inner {
    /// Builds a new list from the current one with `f` and publishes it (control plane,
    /// under `ctl`).
    fn update<R>(&self, f: impl FnOnce(&mut Vec<Entry>) -> R) -> R {
        let _ctl = self.common.ctl.lock().unwrap_or_else(|e| e.into_inner());
        let guard = epoch::pin();
        let cur = self.list.load(Ordering::Acquire, &guard);
        // SAFETY: `cur` is protected by `guard`; only control-plane code (serialised by
        // `ctl`) replaces it.
        let mut entries = unsafe { cur.as_ref() }
            .map(|p| p.list.entries.clone())
            .unwrap_or_default();
        let r = f(&mut entries);
        let n = entries.len();
        let list = Arc::new(TapList::new(entries));
        let old = self.list.swap(Owned::new(Published { list }), Ordering::AcqRel, &guard);
        // Release: a worker that reads the new generation (Acquire) then reads this list
        // or a later one.
        self.common.generation.fetch_add(1, Ordering::Release);
        self.common.any.store(n, Ordering::Release);
        if !old.is_null() {
            // SAFETY: `old` is unlinked; readers that still see it are pinned, and the
            // destruction waits for them.
            unsafe { guard.defer_destroy(old) };
        }
        r
    }
}

impl Detach for Inner {
    fn detach_id(&self, id: TapId) -> bool {
        let found = self.update(|v| {
            let before = v.len();
            let tap = v.iter().find(|e| e.tap.id == id).map(|e| e.tap.clone());
            v.retain(|e| e.tap.id != id);
            (before != v.len(), tap)
        });
        if let (true, Some(tap)) = &found {
            tap.close();
        }
        found.0
    }
}

registry_handle! {
    /// The tap registry with an epoch-published tap list: attach, detach and filter
    /// replacement never block a worker. Cheap to clone (shared).
    Taps
}

impl Taps {
    /// A registry for `workers` worker threads.
    pub fn new(workers: usize) -> Taps {
        Taps {
            inner: Arc::new(Inner {
                common: Common::new(workers),
                list: Atomic::null(),
            }),
        }
    }
}

/// A worker's handle on [`Taps`].
///
/// It keeps its own counted reference to the tap list it last read, with the generation
/// it read it at (the generation-checked per-worker cache the router uses for routes, applied to taps): a batch costs
/// one load of the shared generation word and one compare while nothing changes, plus a
/// test of the cached list's port masks. Only when the generation moved does the worker
/// pin an epoch, read the published pointer and swap in the new list's `Arc`. A dropped
/// old list is freed by whichever holder lets go last (possibly this worker, once per
/// change).
#[derive(Debug)]
pub struct TapWorker {
    inner: Arc<Inner>,
    /// The claim on this worker's index: its producer key and progress mark.
    claim: WorkerClaim,
    /// The list this worker taps with.
    list: Arc<TapList>,
    /// The generation `list` was read at.
    generation: u64,
}

impl TapWorker {
    /// Re-reads the published list (the generation moved to `g`).
    #[cold]
    #[inline(never)]
    fn refresh(&mut self, g: u64) {
        let guard = epoch::pin();
        let p = self.inner.list.load(Ordering::Acquire, &guard);
        // SAFETY: the pointer is protected by `guard` while we clone the `Arc` it holds.
        self.list = unsafe { p.as_ref() }.map(|p| p.list.clone()).unwrap_or_default();
        self.generation = g;
    }

    /// Revalidates the cached list against the generation.
    #[inline(always)]
    fn revalidate(&mut self) {
        let g = self.inner.common.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.refresh(g);
        }
    }

    /// Offers `batch` to the taps of the current list, if one may tap `port`/`dir`.
    #[inline(always)]
    fn offer<B: Offer>(&mut self, port: u16, dir: Direction, batch: B, ts: u64) {
        self.revalidate();
        if !self.list.may_cover(port, dir) || batch.is_empty() {
            return;
        }
        Self::offer_all(&self.list, self.claim.key(), port, dir, batch, ts);
    }

    /// Offers `batch` to every entry of `list` (each checks its port and direction).
    #[inline(never)]
    fn offer_all<B: Offer>(list: &TapList, key: &mut ProducerKey, port: u16, dir: Direction, batch: B, ts: u64) {
        for e in &list.entries {
            batch.offer_to(e, key, port, dir, ts);
        }
    }
}

impl TapPoint for TapWorker {
    tap_point_via_offer!();

    /// True while a tap is attached, and while this worker still holds a list with taps
    /// (so that the next `tap` call, or [`TapPoint::idle`], lets go of it after the last
    /// detach).
    #[inline]
    fn any(&self) -> bool {
        self.inner.common.any.load(Ordering::Relaxed) != 0 || !self.list.entries.is_empty()
    }

    fn idle(&mut self) {
        self.revalidate();
    }
}

impl TapRegistry for Taps {
    type Worker = TapWorker;

    fn with_workers(workers: usize) -> Self {
        Taps::new(workers)
    }

    fn worker(&self, index: usize) -> Option<TapWorker> {
        let claim = self.inner.common.claim(index)?;
        let mut w = TapWorker {
            inner: self.inner.clone(),
            claim,
            list: Arc::default(),
            generation: 0,
        };
        w.refresh(self.inner.common.generation.load(Ordering::Acquire));
        Some(w)
    }

    fn attach(&self, spec: TapSpec, filter: Filter) -> Result<(TapId, TapReader), TapError> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let (entry, reader) = self.inner.common.new_tap(&spec, filter, weak)?;
        let id = entry.tap.id;
        self.inner.update(|v| v.push(entry));
        Ok((id, reader))
    }

    fn replace_filter(&self, id: TapId, filter: Filter) -> Result<(), TapError> {
        let filter = Arc::new(filter);
        let found = self.inner.update(|v| {
            let mut found = false;
            for e in v.iter_mut().filter(|e| e.tap.id == id) {
                e.filter = filter.clone();
                found = true;
            }
            found
        });
        if found {
            Ok(())
        } else {
            Err(TapError::NoSuchTap(id))
        }
    }

    fn detach(&self, id: TapId) -> bool {
        self.inner.detach_id(id)
    }

    fn active(&self) -> usize {
        self.inner.common.any.load(Ordering::Acquire)
    }
}
