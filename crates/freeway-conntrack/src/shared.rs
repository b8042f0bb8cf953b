//! The state every handle of one tracker shares: the table, the limits and their counts, the
//! workers' statistics blocks and expiry queues, and the remover's bookkeeping.
//!
//! [`Conntrack`](crate::Conntrack) and [`CtWorker`](crate::CtWorker) (in `ct`) and the
//! [`Expirer`](crate::Expirer) (in `expiry`) each hold an `Arc<Shared>`; this module depends
//! on neither, so `expiry` uses it without going through `ct`. The invariants on the counts
//! are stated in `ct`, those on the remover's list in `expiry`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_queue::ArrayQueue;
use freeway_sync::{CachePadded, Clock, Counter};

use crate::table::{ConnPtr, Table};
use crate::timeout::{LiveTimeouts, Timeouts};
use crate::CtState;

/// Number of zones.
pub const ZONES: usize = 1 << 16;

/// The remover's bookkeeping: every live connection it knows of, and where the next sweep
/// starts. Behind [`Shared::remover`]; its operations are in `expiry`.
#[derive(Default)]
pub(crate) struct Remover {
    pub(crate) list: Vec<ConnPtr>,
    pub(crate) cursor: usize,
}

/// Per-worker counters (single writer: the worker).
#[derive(Default)]
pub(crate) struct WorkerStats {
    /// The worker's spare credits of the global count (invariant 1 of `ct`).
    pub(crate) spare: AtomicU32,
    /// Its spare credits of one zone: `zone << 32 | places`.
    pub(crate) spare_zone: AtomicU64,
    // No per-packet total: every packet lands in exactly one state counter, and
    // `Conntrack::stats` sums them (one counter write per packet instead of two). Established
    // packets have their own counter, every other state a slot of one array indexed by
    // `CtState::counter`, the state's own byte (a `match` would be a jump table); see
    // `WorkerStats::count` for why. Two slots stay unused (the byte no state has, and
    // established's).
    pub(crate) states: [Counter; CtState::COUNTERS],
    /// Packets of established connections.
    pub(crate) established: Counter,
    pub(crate) created: Counter,
    pub(crate) races: Counter,
    pub(crate) reopened: Counter,
    /// Connections created with a translation.
    pub(crate) nat_created: Counter,
    /// New translated connections refused: no free port.
    pub(crate) nat_exhausted: Counter,
    /// Node slabs the worker mapped itself (its node cache's counter).
    pub(crate) slab_sync_maps: Arc<Counter>,
}

impl WorkerStats {
    /// Counts a packet in its state's counter.
    ///
    /// An established packet (most packets) goes to its own counter after a branch, whose
    /// prediction makes the counter's address known at once. Indexed by the state, the
    /// counter's load and store have an address that waits for the state, which a lookup over
    /// a large table loads from the node with a cache miss; and such a store held the
    /// packets after it back: `bench conntrack-table` (a million connections, random
    /// packets) ran at 2.1–2.3 Mpps a worker with the index against 3.6–3.8 with the branch.
    #[inline(always)]
    pub(crate) fn count(&self, s: CtState) {
        if s == CtState::Established {
            self.established.inc();
        } else {
            self.states[s.counter()].inc();
        }
    }
}

/// State shared by all handles.
pub(crate) struct Shared {
    pub(crate) table: Table,
    pub(crate) clock: Clock,
    pub(crate) max: usize,
    /// Places a worker reserves ahead at once: [`CREDIT_CHUNK`](crate::ct::CREDIT_CHUNK), fewer for small limits.
    pub(crate) credit_chunk: u32,
    pub(crate) count: CachePadded<AtomicUsize>,
    pub(crate) zone_count: Box<[AtomicU32]>,
    pub(crate) zone_limit: Box<[AtomicU32]>,
    /// Policy 0 is the default; unused entries are copies of it (fixed size: a `u8` index
    /// needs no bounds check).
    pub(crate) policies: Box<[LiveTimeouts; 256]>,
    pub(crate) zone_policy: Box<[AtomicU8; ZONES]>,
    pub(crate) tcp_loose: bool,
    // What the expiry thread and the control plane write (the remover's list and cursor,
    // the queue list's lock, the removal counters) sits on cache lines of its own: sharing a
    // line with the fields above, which workers read on every packet, made each packet miss
    // while a sweep ran.
    pub(crate) queues: CachePadded<Mutex<Vec<Arc<ArrayQueue<ConnPtr>>>>>,
    pub(crate) remover: CachePadded<Mutex<Remover>>,
    pub(crate) workers: CachePadded<Mutex<Vec<Arc<CachePadded<WorkerStats>>>>>,
    pub(crate) global: Option<Mutex<()>>,
    pub(crate) queue_cap: usize,
    pub(crate) interval_ms: u64,
    pub(crate) chunk: usize,
    pub(crate) expired: CachePadded<AtomicU64>,
    pub(crate) flushed: CachePadded<AtomicU64>,
}

impl Shared {
    #[inline(always)]
    pub(crate) fn timeouts(&self, zone: u16) -> &LiveTimeouts {
        // Both arrays are indexed by the full range of their index type: no checks.
        &self.policies[usize::from(self.zone_policy[usize::from(zone)].load(Ordering::Relaxed))]
    }

    /// Sets the default policy (slot 0) and the per-zone ones (slots 1..=255, in order):
    /// zones that lose their policy fall back to the default. One writer at a time; a worker
    /// reading meanwhile gets, for a class, a value of the old or the new policies.
    pub(crate) fn set_timeouts(&self, default: &Timeouts, zones: &[(u16, Timeouts)]) {
        self.policies[0].store(default);
        for (zone, slot) in self.zone_policy.iter().enumerate() {
            if !zones.iter().any(|(z, _)| usize::from(*z) == zone) {
                slot.store(0, Ordering::Relaxed);
            }
        }
        for (i, (z, t)) in zones.iter().enumerate() {
            self.policies[i + 1].store(t);
            self.zone_policy[usize::from(*z)].store((i + 1) as u8, Ordering::Relaxed);
        }
        for p in &self.policies[zones.len() + 1..] {
            p.store(default);
        }
    }

    /// Reserves up to `want` places of the global count; returns how many it got (0: the
    /// table is full).
    #[cold]
    pub(crate) fn reserve_global(&self, want: u32) -> u32 {
        let want = want as usize;
        let prev = self.count.fetch_add(want, Ordering::Relaxed);
        let got = self.max.saturating_sub(prev).min(want);
        if got < want {
            self.count.fetch_sub(want - got, Ordering::Relaxed);
        }
        got as u32
    }

    /// Reserves exactly one place in the limited zone `z` (`false`: the zone is full).
    #[inline]
    pub(crate) fn reserve_zone_exact(&self, z: usize, limit: u32) -> bool {
        if self.zone_count[z].fetch_add(1, Ordering::Relaxed) >= limit {
            self.zone_count[z].fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Spare credits over all workers: (global, per zone).
    pub(crate) fn spare(&self) -> (usize, BTreeMap<u16, u32>) {
        let mut global = 0usize;
        let mut zones = BTreeMap::new();
        for w in self.workers.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            global += w.spare.load(Ordering::Relaxed) as usize;
            let z = w.spare_zone.load(Ordering::Relaxed);
            if z as u32 != 0 {
                *zones.entry((z >> 32) as u16).or_insert(0) += z as u32;
            }
        }
        (global, zones)
    }

    /// Gives back a place (a lost insert race, or a removal).
    #[inline]
    pub(crate) fn release(&self, zone: u16) {
        self.zone_count[usize::from(zone)].fetch_sub(1, Ordering::Relaxed);
        self.count.fetch_sub(1, Ordering::Relaxed);
    }

    /// Gives back `in_zone` places of `zone` and `total` places of the global count (the
    /// remover's summed releases).
    #[inline]
    pub(crate) fn release_many(&self, zone: u16, in_zone: u32, total: usize) {
        if in_zone != 0 {
            self.zone_count[usize::from(zone)].fetch_sub(in_zone, Ordering::Relaxed);
        }
        if total != 0 {
            self.count.fetch_sub(total, Ordering::Relaxed);
        }
    }

    pub(crate) fn lock_remover(&self) -> MutexGuard<'_, Remover> {
        self.remover.lock().unwrap_or_else(|e| e.into_inner())
    }
}
