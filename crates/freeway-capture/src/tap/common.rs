//! [`Common`]: the registry state both variants ([`super::Taps`],
//! [`crate::locked::LockedTaps`]) share: the workers' claims (their producer keys), their
//! progress marks, the tap count, the list generation and tap creation.
//!
//! Threads: the control plane (attach, detach, serialised by `ctl`); workers claim their
//! handle once, store their progress mark once per poll and read `any`/`generation` once per
//! batch.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use freeway_sync::CachePadded;

use super::{Marks, TapError, TapShared, TapSpec, MAX_TAP_MEMORY};
use crate::ring::{Claims, ConsumerKey, ProducerKey};

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
    /// Each worker's progress mark ([`TapPoint::progress`]), shared with every tap.
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
    pub(crate) fn claim(&self, index: usize) -> Option<ProducerKey> {
        let key = self.claims.claim(index)?;
        self.marks[index].store(0, Ordering::Release);
        Some(key)
    }

    /// Called as worker handle `index` goes, before its key is dropped (which gives the
    /// index back): a gone worker pushes nothing more, so its mark holds no writer back.
    pub(crate) fn release(&self, index: usize) {
        if let Some(m) = self.marks.get(index) {
            m.store(u64::MAX, Ordering::Release);
        }
    }

    /// Worker `index`'s progress mark (see [`TapPoint::progress`]). `Release`: a writer
    /// that reads the mark sees every push the worker made before.
    #[inline(always)]
    pub(crate) fn progress(&self, index: usize, ts_ns: u64) {
        if let Some(m) = self.marks.get(index) {
            m.store(ts_ns, Ordering::Release);
        }
    }

    /// A new tap (checked against the limits) and the key of its consumer.
    pub(crate) fn new_tap(&self, spec: &TapSpec) -> Result<(Arc<TapShared>, ConsumerKey), TapError> {
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
        Ok((Arc::new(tap), key))
    }
}
