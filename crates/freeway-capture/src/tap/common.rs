//! [`Common`]: the registry state both variants ([`super::Taps`],
//! [`crate::locked::LockedTaps`]) share: the workers' claims (their producer keys), their
//! progress marks, the tap count, the list generation and tap creation.
//!
//! Threads: the control plane (attach, detach, serialised by `ctl`); workers claim their
//! handle once, store their progress mark once per poll and read `any`/`generation` once per
//! batch.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use freeway_sync::CachePadded;

use super::{Detach, Entry, Marks, TapError, TapReader, TapShared, TapSpec, MAX_TAP_MEMORY};
use crate::filter::Filter;
use crate::ring::{Claims, ProducerKey};

/// State common to both registry variants.
#[derive(Debug)]
pub(crate) struct Common {
    pub(crate) any: CachePadded<AtomicUsize>,
    /// Bumped (after the new list is published) by every change of the epoch variant's
    /// tap list; workers revalidate their cached list against it once per batch.
    pub(crate) generation: CachePadded<AtomicU64>,
    pub(crate) next_id: AtomicU64,
    /// The workers' producer keys, one per worker index.
    pub(crate) claims: Arc<Claims>,
    /// Each worker's progress mark ([`super::TapPoint::progress`]), shared with every tap.
    pub(crate) marks: Marks,
    pub(crate) workers: usize,
    /// Serialises control-plane changes; never taken by a worker.
    pub(crate) ctl: Mutex<()>,
}

impl Common {
    pub(crate) fn new(workers: usize) -> Common {
        Common {
            any: CachePadded::new(AtomicUsize::new(0)),
            generation: CachePadded::new(AtomicU64::new(0)),
            next_id: AtomicU64::new(1),
            claims: Claims::new(workers),
            marks: (0..workers)
                .map(|_| CachePadded::new(AtomicU64::new(u64::MAX)))
                .collect(),
            workers,
            ctl: Mutex::new(()),
        }
    }

    /// Claims worker handle `index` (its producer key); its progress mark starts at 0 (no
    /// promise yet).
    pub(crate) fn claim(&self, index: usize) -> Option<WorkerClaim> {
        let key = self.claims.claim(index)?;
        self.marks[index].store(0, Ordering::Release);
        Some(WorkerClaim {
            key,
            marks: self.marks.clone(),
        })
    }

    /// A new tap (checked against the limits) with `filter`: the entry for the registry's
    /// list and the reader for its writer (holding the key of the tap's rings' consumer),
    /// which detaches the tap through `registry`.
    pub(crate) fn new_tap(
        &self,
        spec: &TapSpec,
        filter: Filter,
        registry: Weak<dyn Detach>,
    ) -> Result<(Entry, TapReader), TapError> {
        if spec.snaplen == 0 || spec.snaplen > 262_144 {
            return Err(TapError::BadSpec(format!("snaplen {} not in 1..=262144", spec.snaplen)));
        }
        if spec.ring_slots == 0 || spec.ring_slots > 1 << 20 {
            return Err(TapError::BadSpec(format!(
                "ring_slots {} not in 1..=1048576",
                spec.ring_slots
            )));
        }
        let mem = spec
            .ring_slots
            .saturating_mul(spec.snaplen as usize)
            .saturating_mul(self.workers.max(1));
        if mem > MAX_TAP_MEMORY {
            return Err(TapError::BadSpec(format!(
                "rings would take {mem} bytes (max {MAX_TAP_MEMORY}); lower ring_slots or snaplen"
            )));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tap, key) = TapShared::new(id, spec, &self.claims, self.marks.clone());
        let tap = Arc::new(tap);
        let entry = Entry {
            tap: tap.clone(),
            filter: Arc::new(filter),
        };
        Ok((entry, TapReader { tap, key, registry }))
    }
}

/// A worker handle's claim on its index: its producer key (the right to push into its
/// rings) and its progress mark. When the handle goes, the mark is set to `u64::MAX` first
/// (a gone worker pushes nothing more, so its mark holds no writer back), then the key
/// gives the index back.
pub(crate) struct WorkerClaim {
    key: ProducerKey,
    marks: Marks,
}

impl fmt::Debug for WorkerClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker {}", self.key.index())
    }
}

impl Drop for WorkerClaim {
    fn drop(&mut self) {
        if let Some(m) = self.marks.get(self.key.index()) {
            m.store(u64::MAX, Ordering::Release);
        }
    }
}

impl WorkerClaim {
    /// The producer key.
    #[inline(always)]
    pub(crate) fn key(&mut self) -> &mut ProducerKey {
        &mut self.key
    }

    /// Stores the worker's progress mark (see [`super::TapPoint::progress`]). `Release`: a
    /// writer that reads the mark sees every push the worker made before.
    #[inline(always)]
    pub(crate) fn progress(&self, ts_ns: u64) {
        if let Some(m) = self.marks.get(self.key.index()) {
            m.store(ts_ns, Ordering::Release);
        }
    }
}
