//! The "before" variant of the tap registry for the capture benchmark: the tap list and
//! every tap's filter live behind one `RwLock`, read-locked by every worker on every batch
//! that finds a tap attached (the FreeBSD BPF design before its lock-free tap path). Same rings, same
//! writer, same filter path (`Entry::offer_packets`), same worker-facing API ([`TapPoint`])
//! as [`crate::tap::Taps`]: the two differ only in how a worker reaches the list.
//!
//! Threads: workers take the read lock once per batch when any tap is attached; the control
//! plane takes the write lock to attach, detach or replace a filter, and workers wait for it.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, Weak};

use freeway_packet::Packet;

use crate::filter::Filter;
use crate::tap::{
    registry_handle, tap_point_via_offer, Common, Detach, Direction, Entry, Offer, TapError, TapId, TapPoint,
    TapReader, TapRegistry, TapSpec, WorkerClaim,
};

#[derive(Debug)]
struct Inner {
    common: Common,
    list: RwLock<Vec<Entry>>,
}

impl Detach for Inner {
    fn detach_id(&self, id: TapId) -> bool {
        let mut l = self.list.write().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = l.iter().position(|e| e.tap.id() == id) else {
            return false;
        };
        let e = l.remove(pos);
        self.common.any.store(l.len(), Ordering::Release);
        drop(l);
        e.tap.close_and_quiesce();
        true
    }
}

registry_handle! {
    /// The `RwLock` tap registry (benchmark baseline).
    LockedTaps
}

/// A worker's handle on [`LockedTaps`].
#[derive(Debug)]
pub struct LockedTapWorker {
    inner: Arc<Inner>,
    /// The claim on this worker's index: its producer key and progress mark.
    claim: WorkerClaim,
}

impl LockedTapWorker {
    /// Offers `batch` to every tap, under the read lock, when any tap is attached.
    #[inline]
    fn offer<B: Offer>(&mut self, port: u16, dir: Direction, batch: B, ts: u64) {
        if self.inner.common.any.load(Ordering::Relaxed) == 0 {
            return;
        }
        let l = self.inner.list.read().unwrap_or_else(|e| e.into_inner());
        for e in l.iter() {
            batch.offer_to(e, self.claim.key(), port, dir, ts);
        }
    }
}

impl TapPoint for LockedTapWorker {
    tap_point_via_offer!();

    fn any(&self) -> bool {
        self.inner.common.any.load(Ordering::Relaxed) != 0
    }
}

impl TapRegistry for LockedTaps {
    type Worker = LockedTapWorker;

    fn with_workers(workers: usize) -> Self {
        LockedTaps {
            inner: Arc::new(Inner {
                common: Common::new(workers),
                list: RwLock::new(Vec::new()),
            }),
        }
    }

    fn worker(&self, index: usize) -> Option<LockedTapWorker> {
        let claim = self.inner.common.claim(index)?;
        Some(LockedTapWorker {
            inner: self.inner.clone(),
            claim,
        })
    }

    fn attach(&self, spec: TapSpec, filter: Filter) -> Result<(TapId, TapReader), TapError> {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let (entry, reader) = self.inner.common.new_tap(&spec, filter, weak)?;
        let id = entry.tap.id();
        let mut l = self.inner.list.write().unwrap_or_else(|e| e.into_inner());
        l.push(entry);
        self.inner.common.any.store(l.len(), Ordering::Release);
        Ok((id, reader))
    }

    fn replace_filter(&self, id: TapId, filter: Filter) -> Result<(), TapError> {
        let mut l = self.inner.list.write().unwrap_or_else(|e| e.into_inner());
        match l.iter_mut().find(|e| e.tap.id() == id) {
            Some(e) => {
                e.filter = Arc::new(filter);
                Ok(())
            }
            None => Err(TapError::NoSuchTap(id)),
        }
    }

    fn detach(&self, id: TapId) -> bool {
        self.inner.detach_id(id)
    }

    fn active(&self) -> usize {
        self.inner.common.any.load(Ordering::Acquire)
    }
}
