//! The shared [`Conntrack`] handle and the per-worker [`CtWorker`].
//!
//! # Threads
//!
//! * [`CtWorker`]: one per worker thread, not `Clone`. It writes its own statistics block
//!   (single-writer counters on their own cache lines) and its own expiry queue (it is the
//!   queue's only producer, so a push after a successful "not full" check cannot fail). It
//!   reads the table lock-free and writes only the connections its packets belong to, plus
//!   the shared connection counters: it reserves places for new connections from them in
//!   chunks of up to [`CREDIT_CHUNK`] (one `fetch_add` per chunk, never per packet), so two
//!   workers creating connections at full speed do not pass the counters' cache line back
//!   and forth for every connection.
//! * [`Conntrack`]: any thread; control operations (flush, dump, stats, zone limits) never
//!   stop the workers. Flushes take the remover mutex, shared only with the expiry thread.
//!
//! # Invariants
//!
//! 1. `count` = connections linked in the table + places reserved by inserts in flight +
//!    the workers' spare credits (places reserved ahead, not yet used); `count <= max` at all
//!    times (a reservation that would exceed it is undone and refused). The same holds per
//!    zone with `zone_count` and the zone's limit; zones with a limit are never reserved
//!    ahead (each new connection is counted exactly), so a lowered limit takes effect at once.
//!    Each worker publishes its spare credits in its statistics block, and [`Conntrack::len`]
//!    and the zone counts subtract them: at rest they are exact. The price of reserving
//!    ahead: with `W` workers a new connection may be refused as "table full" while up to
//!    `(W - 1) * (CREDIT_CHUNK - 1)` places are still reserved, unused, by other workers
//!    (a few per million at the default limit; the chunk shrinks to 1 for small limits).
//! 2. Every linked connection is either in its creator's queue, or in the remover's list
//!    (exactly once), or about to be pushed by its creator (between CAS and push).
//! 3. `now` is read once per batch ([`CtWorker::pin`]); per-packet work reads no clock.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_queue::ArrayQueue;
use freeway_packet::{meta_flags, Meta, Packet};
use freeway_sync::{CachePadded, Clock, Tick};
use serde::Serialize;

use crate::dump::ConnRecord;
use crate::expiry::Expirer;
use crate::extract::{walk, Class, L4Info, TcpSeg};
use crate::key::{Key, Tuple};
use crate::nat::rewrite::{Half, Rewrite4};
use crate::shared::{Remover, Shared, WorkerStats};
use crate::table::{pin, Conn, ConnPtr, Guard, Kind, Nat4, NodeCache, Table, ASSURED, SEEN_REPLY};
use crate::tcp::{self, state as ts, TcpConn, Update};
use crate::timeout::{LiveTimeouts, TimeoutClass, Timeouts};
use crate::{CtResult, CtState, InvalidReason};

pub use crate::shared::ZONES;

/// Conntrack settings.
#[derive(Clone, Debug)]
pub struct CtConfig {
    /// Most connections in all zones (default 1,000,000).
    pub max: usize,
    /// Per-zone limits (zone, most connections).
    pub zone_limits: Vec<(u16, u32)>,
    /// The default timeout policy.
    pub timeouts: Timeouts,
    /// Per-zone timeout policies (at most 255).
    pub zone_timeouts: Vec<(u16, Timeouts)>,
    /// Pick up TCP connections mid-stream (an ACK without a connection creates one, like
    /// Linux `nf_conntrack_tcp_loose`). Default true.
    pub tcp_loose: bool,
    /// Capacity of each worker's queue of new connections for the expiry thread (default
    /// 65,536). A full queue refuses new connections ([`InvalidReason::QueueFull`]).
    pub expiry_queue: usize,
    /// Minimum time between two expiry chunks, ms (default 10).
    pub expiry_interval_ms: u64,
    /// Connections examined per expiry chunk (default 65,536).
    pub expiry_chunk: usize,
    /// Table seed (0: random).
    pub seed: u64,
    /// Baseline for benchmarks only: serialise lookup, update and insert behind one global
    /// mutex, the shape of Open vSwitch conntrack before its scalability series.
    pub global_lock: bool,
}

impl Default for CtConfig {
    fn default() -> Self {
        CtConfig {
            max: 1_000_000,
            zone_limits: Vec::new(),
            timeouts: Timeouts::default(),
            zone_timeouts: Vec::new(),
            tcp_loose: true,
            expiry_queue: 65_536,
            expiry_interval_ms: 10,
            expiry_chunk: 65_536,
            seed: 0,
            global_lock: false,
        }
    }
}

impl CtConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        if self.max == 0 || self.max > 1 << 28 {
            return Err(format!("conntrack max must be 1..={} (got {})", 1 << 28, self.max));
        }
        if self.zone_timeouts.len() > 255 {
            return Err("at most 255 per-zone timeout policies".into());
        }
        if self.expiry_queue == 0 || self.expiry_chunk == 0 {
            return Err("expiry_queue and expiry_chunk must be at least 1".into());
        }
        Ok(())
    }
}

/// Flags of one [`CtWorker::track`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackFlags {
    /// Create the connection if it does not exist (`ct(commit)`).
    pub commit: bool,
    /// The IPv4 header checksum of this buffer was already verified: skip it.
    pub l3_csum_verified: bool,
}

/// Most places a worker reserves ahead from the shared connection count (invariant 1).
pub const CREDIT_CHUNK: u32 = 64;

/// The shared connection tracker handle (cheap to clone).
#[derive(Clone)]
pub struct Conntrack {
    pub(crate) s: Arc<Shared>,
}

impl std::fmt::Debug for Conntrack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conntrack")
            .field("len", &self.len())
            .field("max", &self.s.max)
            .finish()
    }
}

/// Aggregated statistics ([`Conntrack::stats`]).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CtStats {
    /// Connections in the table.
    pub connections: usize,
    /// The limit.
    pub max: usize,
    /// Connections per zone (non-empty zones only).
    pub zones: BTreeMap<u16, usize>,
    /// Packets tracked.
    pub packets: u64,
    /// Packets in state new.
    pub new: u64,
    /// Packets in state established.
    pub established: u64,
    /// Packets in state related.
    pub related: u64,
    /// Packets not tracked.
    pub untracked: u64,
    /// Invalid packets, all reasons.
    pub invalid: u64,
    /// Invalid packets by reason (non-zero reasons only), including refused new connections.
    pub invalid_by_reason: BTreeMap<String, u64>,
    /// Connections created.
    pub created: u64,
    /// Connections created with a translation (NAT), included in `created`.
    pub nat_created: u64,
    /// New translated connections refused for want of a free port.
    pub nat_exhausted: u64,
    /// Inserts that found the connection already created by another worker.
    pub insert_races: u64,
    /// TCP connections re-opened by a SYN after TIME_WAIT/CLOSE.
    pub reopened: u64,
    /// Connections removed by expiry.
    pub expired: u64,
    /// Connections removed by flushes.
    pub flushed: u64,
    /// Node slabs a worker mapped itself while creating a connection, none having been
    /// prepared in time (each a page-faulting pause on the packet path).
    pub slab_sync_maps: u64,
}

impl Conntrack {
    /// A tracker with `cfg`, reading time from `clock`, and its expiry thread's body (run it
    /// with [`Expirer::spawn`] or [`Expirer::run`]).
    pub fn new(cfg: CtConfig, clock: Clock) -> Result<(Conntrack, Expirer), String> {
        cfg.validate()?;
        let seed = if cfg.seed != 0 { cfg.seed } else { random_seed() };
        let zone_limit: Box<[AtomicU32]> = (0..ZONES).map(|_| AtomicU32::new(u32::MAX)).collect();
        for &(z, l) in &cfg.zone_limits {
            zone_limit[usize::from(z)].store(l, Ordering::Relaxed);
        }
        // Built on the heap: 26 KiB of atomics would overflow a small thread stack (loom's
        // model threads have one).
        let policies: Box<[LiveTimeouts; 256]> = (0..256)
            .map(|_| LiveTimeouts::new(&cfg.timeouts))
            .collect::<Vec<_>>()
            .into_boxed_slice()
            .try_into()
            .expect("256 policies");
        let zone_policy: Box<[AtomicU8; ZONES]> = (0..ZONES)
            .map(|_| AtomicU8::new(0))
            .collect::<Vec<_>>()
            .into_boxed_slice()
            .try_into()
            .expect("ZONES entries");
        let s = Arc::new(Shared {
            // A translated connection has two nodes: no slab is prepared ahead past twice
            // the limit.
            table: Table::with_node_limit(cfg.max.div_ceil(2), seed, cfg.max.saturating_mul(2)),
            clock,
            max: cfg.max,
            credit_chunk: (cfg.max / 4096).clamp(1, CREDIT_CHUNK as usize) as u32,
            count: CachePadded::new(AtomicUsize::new(0)),
            zone_count: (0..ZONES).map(|_| AtomicU32::new(0)).collect(),
            zone_limit,
            policies,
            zone_policy,
            tcp_loose: cfg.tcp_loose,
            queues: CachePadded::new(Mutex::new(Vec::new())),
            remover: CachePadded::new(Mutex::new(Remover::default())),
            workers: CachePadded::new(Mutex::new(Vec::new())),
            global: cfg.global_lock.then(|| Mutex::new(())),
            queue_cap: cfg.expiry_queue,
            interval_ms: cfg.expiry_interval_ms,
            chunk: cfg.expiry_chunk,
            expired: CachePadded::new(AtomicU64::new(0)),
            flushed: CachePadded::new(AtomicU64::new(0)),
        });
        // `validate` allows at most 255 per-zone policies: slots 1..=255.
        s.set_timeouts(&cfg.timeouts, &cfg.zone_timeouts);
        let ct = Conntrack { s };
        let exp = Expirer::new(ct.s.clone());
        Ok((ct, exp))
    }

    /// A new worker context (call once per worker thread, at setup).
    pub fn worker(&self) -> CtWorker {
        let queue = Arc::new(ArrayQueue::new(self.s.queue_cap));
        self.s
            .queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(queue.clone());
        let nodes = self.s.table.node_cache();
        let stats = Arc::new(CachePadded::new(WorkerStats {
            slab_sync_maps: nodes.sync_maps(),
            ..WorkerStats::default()
        }));
        self.s
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(stats.clone());
        CtWorker {
            s: self.s.clone(),
            queue,
            stats,
            nodes: std::cell::RefCell::new(nodes),
            now: self.s.clock.now(),
            spare: Cell::new(0),
            spare_zone: Cell::new((0, 0)),
        }
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.s.clock
    }

    /// Connections in the table (plus inserts in flight).
    pub fn len(&self) -> usize {
        let (spare, _) = self.s.spare();
        self.s.count.load(Ordering::Relaxed).saturating_sub(spare)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The connection limit.
    pub fn max(&self) -> usize {
        self.s.max
    }

    /// Connections in `zone`.
    pub fn zone_len(&self, zone: u16) -> usize {
        let (_, spare) = self.s.spare();
        let c = self.s.zone_count[usize::from(zone)].load(Ordering::Relaxed);
        c.saturating_sub(spare.get(&zone).copied().unwrap_or(0)) as usize
    }

    /// Sets (or with `None` removes) the limit of `zone`. Existing connections above a lowered
    /// limit stay; new ones are refused until the zone drains below it.
    pub fn set_zone_limit(&self, zone: u16, limit: Option<u32>) {
        self.s.zone_limit[usize::from(zone)].store(limit.unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// The limit of `zone`.
    pub fn zone_limit(&self, zone: u16) -> Option<u32> {
        match self.s.zone_limit[usize::from(zone)].load(Ordering::Relaxed) {
            u32::MAX => None,
            l => Some(l),
        }
    }

    /// The timeout policy of `zone`.
    pub fn timeouts(&self, zone: u16) -> Timeouts {
        self.s.timeouts(zone).get()
    }

    /// Replaces the default timeout policy and the per-zone ones while workers track: a
    /// connection takes its new timeout at its next packet (its current expiry stays). Callers
    /// serialise (one control thread); more than 255 per-zone policies are refused.
    pub fn set_timeouts(&self, default: Timeouts, zones: &[(u16, Timeouts)]) -> Result<(), String> {
        if zones.len() > 255 {
            return Err("at most 255 per-zone timeout policies".into());
        }
        self.s.set_timeouts(&default, zones);
        Ok(())
    }

    /// Removes every connection; returns how many. Runs beside the workers (connections
    /// created while it runs may survive it).
    pub fn flush(&self) -> usize {
        self.s.lock_remover().flush(&self.s, None)
    }

    /// Removes every connection of `zone`; returns how many.
    pub fn flush_zone(&self, zone: u16) -> usize {
        self.s.lock_remover().flush(&self.s, Some(zone))
    }

    /// Removes every connection expired at the clock's current time, in one full pass (tests
    /// and offline runs; live runs leave this to the expiry thread). Returns how many.
    pub fn expire_now(&self) -> usize {
        let now = self.s.clock.now();
        self.s.lock_remover().sweep(&self.s, now, usize::MAX)
    }

    /// Every connection, as records (control path: walks the whole table).
    pub fn dump(&self) -> Vec<ConnRecord> {
        self.dump_filtered(&crate::CtFilter::default())
    }

    /// The connections `f` selects, as records (control path: walks the whole table, keeps
    /// only what matches).
    pub fn dump_filtered(&self, f: &crate::CtFilter) -> Vec<ConnRecord> {
        let mut out = Vec::new();
        self.for_each_record(|r| {
            if f.matches(&r) {
                out.push(r)
            }
        });
        out
    }

    /// Calls `f` with the record of every connection (control path: walks the whole table,
    /// allocates nothing for connections `f` does not keep).
    pub fn for_each_record(&self, mut f: impl FnMut(ConnRecord)) {
        let now = self.s.clock.now();
        let g = pin();
        for b in 0..self.s.table.buckets() {
            self.s.table.for_each_in_bucket(b, &g, |c| {
                // A translated connection is shown once, by its primary node.
                if !c.is_reply_node() {
                    f(ConnRecord::new(c, now))
                }
            });
        }
    }

    /// The connection `t` belongs to in `zone`, as a record whose `orig` is its original
    /// direction.
    pub fn get(&self, t: &Tuple, zone: u16) -> Option<ConnRecord> {
        let (k, _) = Key::new(t, zone);
        let g = pin();
        let now = self.s.clock.now();
        self.s
            .table
            .lookup(&k, self.s.table.hash(&k), &g)
            .map(|c| ConnRecord::new(c.primary(), now))
    }

    /// The bucket of the connection of `t` in `zone` (for tests that need chain collisions).
    #[doc(hidden)]
    pub fn bucket_of(&self, t: &Tuple, zone: u16) -> usize {
        let (k, _) = Key::new(t, zone);
        (self.s.table.hash(&k) as usize) & (self.s.table.buckets() - 1)
    }

    /// Connections known to the expiry side (listed by the remover plus still queued); equals
    /// [`Conntrack::len`] when no insert is in flight.
    pub fn tracked_by_expiry(&self) -> usize {
        let queued: usize = self
            .s
            .queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|q| q.len())
            .sum();
        self.s.lock_remover().listed() + queued
    }

    /// Connection counts by protocol and state (e.g. `tcp ESTABLISHED`, `udp UNREPLIED`);
    /// walks the table.
    pub fn state_counts(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in self.dump() {
            *m.entry(r.state_label()).or_insert(0) += 1;
        }
        m
    }

    /// Statistics summed over all workers.
    pub fn stats(&self) -> CtStats {
        let mut st = CtStats {
            connections: self.len(),
            max: self.s.max,
            expired: self.s.expired.load(Ordering::Relaxed),
            flushed: self.s.flushed.load(Ordering::Relaxed),
            ..Default::default()
        };
        let (_, spare) = self.s.spare();
        for (z, c) in self.s.zone_count.iter().enumerate() {
            let c = c
                .load(Ordering::Relaxed)
                .saturating_sub(spare.get(&(z as u16)).copied().unwrap_or(0));
            if c != 0 {
                st.zones.insert(z as u16, c as usize);
            }
        }
        let mut inv = [0u64; InvalidReason::COUNT];
        for w in self.s.workers.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let state = |s: CtState| w.states[s.counter()].get();
            st.new += state(CtState::New);
            st.established += w.established.get();
            st.related += state(CtState::Related);
            st.untracked += state(CtState::Untracked);
            st.created += w.created.get();
            st.nat_created += w.nat_created.get();
            st.nat_exhausted += w.nat_exhausted.get();
            st.insert_races += w.races.get();
            st.reopened += w.reopened.get();
            st.slab_sync_maps += w.slab_sync_maps.get();
            for r in InvalidReason::ALL {
                inv[r as usize] += state(CtState::Invalid(r));
            }
        }
        for r in InvalidReason::ALL {
            let n = inv[r as usize];
            st.invalid += n;
            if n != 0 {
                st.invalid_by_reason.insert(r.name().to_string(), n);
            }
        }
        st.packets = st.new + st.established + st.related + st.untracked + st.invalid;
        st
    }
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5eed);
    h.finish() | 1
}

/// A worker's conntrack context. Not `Clone`: one per worker thread.
pub struct CtWorker {
    s: Arc<Shared>,
    queue: Arc<ArrayQueue<ConnPtr>>,
    stats: Arc<CachePadded<WorkerStats>>,
    /// Free connection nodes (recycled by the table after expiry). A `RefCell` because the
    /// tracking methods take `&self` (the global-lock baseline's guard borrows the shared
    /// state); borrowed only in `create`, never re-entrantly.
    nodes: std::cell::RefCell<NodeCache>,
    now: Tick,
    /// Spare places of the global count reserved ahead (invariant 1).
    spare: Cell<u32>,
    /// Spare places of zone `spare_zone.0` (an unlimited zone) reserved ahead.
    spare_zone: Cell<(u16, u32)>,
}

impl Drop for CtWorker {
    fn drop(&mut self) {
        // Give the spare places back.
        let (z, n) = self.spare_zone.get();
        if n != 0 {
            self.s.zone_count[usize::from(z)].fetch_sub(n, Ordering::Relaxed);
        }
        let g = self.spare.get();
        if g != 0 {
            self.s.count.fetch_sub(g as usize, Ordering::Relaxed);
        }
        self.stats.spare.store(0, Ordering::Relaxed);
        self.stats.spare_zone.store(0, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for CtWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CtWorker").field("now", &self.now).finish()
    }
}

/// How many packets [`CtWorker::track_each`] classifies and prefetches ahead of their
/// lookups: a datapath batch.
const AHEAD: usize = freeway_packet::MAX_BATCH;
const _: () = assert!(AHEAD <= 64, "one bit of a u64 per packet of a group");

/// Below this many connections (counting the places workers reserved ahead) a batch is
/// tracked packet by packet, without prefetching: the table's lines in use (a bucket line and
/// a node of two lines each, under 400 KB) stay in the cache, and holding each packet's key
/// between the passes would cost more than the misses it hides. On `bench conntrack`'s one
/// flow, the prefetching passes cost 55 instructions a packet more (285 against 230,
/// callgrind) and 1.2-1.3x the time; on `bench nat`'s 4096 flows a worker they made a
/// translated established packet 22-29% faster (both 2026-11-25, under load).
const PREFETCH_MIN: usize = 2048;

/// A tracked packet classified ahead of its lookup ([`CtWorker::track_each`]): its key (in
/// its zone already), the key's hash, its L4 information and whether its source is the key's
/// low endpoint.
#[derive(Clone, Copy)]
struct Ahead {
    key: Key,
    hash: u64,
    l4: L4Info,
    src_lo: bool,
}

#[inline(always)]
fn tcp_class(st: u8) -> TimeoutClass {
    match st {
        ts::SYN_RECV => TimeoutClass::TcpSynRecv,
        ts::ESTABLISHED => TimeoutClass::TcpEstablished,
        ts::FIN_WAIT => TimeoutClass::TcpFinWait,
        ts::CLOSE_WAIT => TimeoutClass::TcpCloseWait,
        ts::LAST_ACK => TimeoutClass::TcpLastAck,
        ts::TIME_WAIT => TimeoutClass::TcpTimeWait,
        ts::CLOSE => TimeoutClass::TcpClose,
        ts::SYN_SENT2 => TimeoutClass::TcpSynSent2,
        _ => TimeoutClass::TcpSynSent,
    }
}

#[inline(always)]
fn seen(status: u8, reply: bool) -> CtResult {
    CtResult {
        state: if status & SEEN_REPLY != 0 {
            CtState::Established
        } else {
            CtState::New
        },
        reply,
        uncommitted: false,
    }
}

#[inline(always)]
fn invalid(r: InvalidReason, reply: bool) -> CtResult {
    CtResult {
        state: CtState::Invalid(r),
        reply,
        uncommitted: false,
    }
}

impl CtWorker {
    /// Reserves a place for a new connection in `zone` (invariant 1): from this worker's
    /// spare credits, refilled a chunk at a time from the shared counts.
    #[inline]
    fn reserve(&self, zone: u16) -> Result<(), InvalidReason> {
        let s = &*self.s;
        let mut g = self.spare.get();
        if g == 0 {
            g = s.reserve_global(s.credit_chunk);
            if g == 0 {
                return Err(InvalidReason::LimitGlobal);
            }
        }
        let z = usize::from(zone);
        let limit = s.zone_limit[z].load(Ordering::Relaxed);
        let (sz, sn) = self.spare_zone.get();
        if limit != u32::MAX || s.credit_chunk == 1 {
            // A limited zone is counted exactly; spare places of it (reserved before the limit
            // was set) go back first.
            if sz == zone && sn != 0 {
                s.zone_count[z].fetch_sub(sn, Ordering::Relaxed);
                self.set_spare_zone(zone, 0);
            }
            if !s.reserve_zone_exact(z, limit) {
                // The global place stays with this worker, spare.
                self.set_spare(g);
                return Err(InvalidReason::LimitZone);
            }
        } else if sz == zone && sn != 0 {
            self.set_spare_zone(zone, sn - 1);
        } else {
            self.refill_zone(zone);
        }
        self.set_spare(g - 1);
        Ok(())
    }

    /// Moves to spare places of the unlimited zone `zone`: gives back those of the previous
    /// zone, takes a chunk of this one's and uses one of them.
    #[cold]
    fn refill_zone(&self, zone: u16) {
        let s = &*self.s;
        let (sz, sn) = self.spare_zone.get();
        if sn != 0 {
            s.zone_count[usize::from(sz)].fetch_sub(sn, Ordering::Relaxed);
        }
        s.zone_count[usize::from(zone)].fetch_add(s.credit_chunk, Ordering::Relaxed);
        self.set_spare_zone(zone, s.credit_chunk - 1);
    }

    #[inline(always)]
    fn set_spare(&self, n: u32) {
        self.spare.set(n);
        self.stats.spare.store(n, Ordering::Relaxed);
    }

    #[inline(always)]
    fn set_spare_zone(&self, zone: u16, n: u32) {
        self.spare_zone.set((zone, n));
        self.stats
            .spare_zone
            .store(u64::from(zone) << 32 | u64::from(n), Ordering::Relaxed);
    }

    /// Starts a batch: reads the clock once and pins an epoch guard. Hold the guard while
    /// tracking the batch's packets; drop it between batches.
    #[inline]
    pub fn pin(&mut self) -> Guard {
        self.now = self.s.clock.now();
        pin()
    }

    /// Overrides the time used for the following packets (benchmarks, offline runs).
    #[inline]
    pub fn set_now(&mut self, now: Tick) {
        self.now = now;
    }

    /// The time used for packets.
    pub fn now(&self) -> Tick {
        self.now
    }

    /// The shared handle.
    pub fn conntrack(&self) -> Conntrack {
        Conntrack { s: self.s.clone() }
    }

    /// Tracks a parsed packet in `zone`, verifying its IPv4 header checksum unless its
    /// metadata says that was done ([`meta_flags::IPV4_CSUM_OK`]). After it, the checksum is
    /// known good whenever [`CtResult::ipv4_csum_checked`] says so.
    #[inline]
    pub fn track_packet(&mut self, g: &Guard, pkt: &Packet, zone: u16, commit: bool) -> CtResult {
        self.track(
            g,
            pkt.data(),
            &pkt.meta,
            zone,
            TrackFlags {
                commit,
                l3_csum_verified: pkt.meta.flags & meta_flags::IPV4_CSUM_OK != 0,
            },
        )
    }

    /// Tracks a batch: one clock read and one epoch pin for all of it, the packets' lookups
    /// prefetched as [`CtWorker::track_each`] does. `zone_of` gives each packet's zone;
    /// results are appended to `out`.
    pub fn track_batch(
        &mut self,
        pkts: &mut [Packet],
        zone_of: impl Fn(&Packet) -> u16,
        commit: bool,
        out: &mut Vec<CtResult>,
    ) {
        let g = self.pin();
        self.track_each(
            &g,
            pkts,
            |_, p| {
                let flags = TrackFlags {
                    commit,
                    l3_csum_verified: p.meta.flags & meta_flags::IPV4_CSUM_OK != 0,
                };
                (zone_of(p), flags)
            },
            |_, _, r| out.push(r),
        );
    }

    /// Tracks the packets of a batch in order, each exactly as [`CtWorker::track`] would
    /// (a packet sees every connection the packets before it created), with the memory
    /// misses of their lookups overlapped once the table holds enough connections for them to
    /// miss the cache (a few thousand): for each group of up to [`MAX_BATCH`] packets it
    /// first classifies every packet, hashes its key and prefetches its bucket, then
    /// prefetches each bucket's first node, then does the lookups and updates one by one
    /// (the prefetches are only hints; the lookup is the ordinary one). A table much larger
    /// than the cache pays a miss on a packet's bucket and another on its node: one after
    /// the other packet by packet, but together across the group here (as VPP's graph nodes
    /// and DPDK's bulk hash lookups prefetch a vector's buckets).
    ///
    /// `args(i, p)` gives packet `i`'s zone and flags; it is called for every packet of a
    /// group before `done` is called for the first of them. `done(i, p, r)` gets packet `i`
    /// (mutable: to record the result in it) and its result, in order.
    ///
    /// [`MAX_BATCH`]: freeway_packet::MAX_BATCH
    #[inline(always)]
    pub fn track_each(
        &mut self,
        g: &Guard,
        pkts: &mut [Packet],
        args: impl FnMut(usize, &Packet) -> (u16, TrackFlags),
        mut done: impl FnMut(usize, &mut Packet, CtResult),
    ) {
        self.track_ahead::<false>(g, pkts, args, |i, p, r, _, _| done(i, p, r));
    }

    /// [`CtWorker::track_each`] with what [`CtWorker::track_nat`] gives: each packet's
    /// result and, from the same lookup, its translation plan.
    #[inline]
    pub fn track_nat_each(
        &mut self,
        g: &Guard,
        pkts: &mut [Packet],
        args: impl FnMut(usize, &Packet) -> (u16, TrackFlags),
        mut done: impl FnMut(usize, &mut Packet, CtResult, Option<NatPlan>),
    ) {
        self.track_ahead::<true>(g, pkts, args, |i, p, r, plan, _| done(i, p, r, plan));
    }

    /// [`CtWorker::track_nat_each`] that also hands on, for each packet of a new connection
    /// that is not committed, what its creation needs ([`NewConn`], as
    /// [`CtWorker::track_new`] gives it).
    #[inline]
    pub fn track_nat_new_each(
        &mut self,
        g: &Guard,
        pkts: &mut [Packet],
        args: impl FnMut(usize, &Packet) -> (u16, TrackFlags),
        done: impl FnMut(usize, &mut Packet, CtResult, Option<NatPlan>, Option<NewConn>),
    ) {
        self.track_ahead::<true>(g, pkts, args, done);
    }

    /// The three passes of [`CtWorker::track_each`] over groups of up to [`AHEAD`] packets.
    /// A tracked packet's key, hash and L4 information wait in a slot between the passes;
    /// any other packet (an ICMP error, untracked, invalid: rare) is classified again when
    /// its turn comes, which gives the same class (classification reads only the packet).
    #[inline(always)]
    fn track_ahead<const NAT: bool>(
        &mut self,
        g: &Guard,
        pkts: &mut [Packet],
        mut args: impl FnMut(usize, &Packet) -> (u16, TrackFlags),
        mut done: impl FnMut(usize, &mut Packet, CtResult, Option<NatPlan>, Option<NewConn>),
    ) {
        if self.s.count.load(Ordering::Relaxed) < PREFETCH_MIN {
            for (i, p) in pkts.iter_mut().enumerate() {
                let (zone, flags) = args(i, p);
                let class = walk::<(Key, bool)>(p.data(), &p.meta, flags.l3_csum_verified);
                // The same calls as the group loop's below, written out: one function for
                // both changed what LLVM inlines (a translated packet +10 instructions).
                if NAT {
                    if let Class::Track((mut key, src_lo), l4) = class {
                        // As `track_class` does, with the new connection handed on.
                        key.set_zone(zone);
                        let h = self.s.table.hash(&key);
                        self.track_key_then(g, key, h, src_lo, l4, zone, flags.commit, |r, plan, new| {
                            self.stats.count(r.state);
                            done(i, p, r, plan, new);
                        });
                        continue;
                    }
                }
                let (r, plan) = self.track_class::<NAT>(g, class, zone, flags.commit);
                done(i, p, r, plan, None);
            }
            return;
        }
        let mut base = 0;
        for group in pkts.chunks_mut(AHEAD) {
            let mut slots = [const { MaybeUninit::<Ahead>::uninit() }; AHEAD];
            let mut zf = [(0u16, TrackFlags::default()); AHEAD];
            // Bit `i`: slot `i` holds packet `i`, a tracked one.
            let mut staged = 0u64;
            for (i, (p, zf)) in group.iter().zip(zf.iter_mut()).enumerate() {
                let (zone, flags) = args(base + i, p);
                *zf = (zone, flags);
                if let Class::Track((mut key, src_lo), l4) =
                    walk::<(Key, bool)>(p.data(), &p.meta, flags.l3_csum_verified)
                {
                    key.set_zone(zone);
                    let hash = self.s.table.hash(&key);
                    self.s.table.prefetch(hash);
                    slots[i].write(Ahead { key, hash, l4, src_lo });
                    staged |= 1 << i;
                }
            }
            let mut bits = staged;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // SAFETY: bit `i` of `staged` is set only after slot `i` was written.
                let a = unsafe { slots[i].assume_init_ref() };
                self.s.table.prefetch_first(a.hash, g);
            }
            for (i, (p, &(zone, flags))) in group.iter_mut().zip(zf.iter()).enumerate() {
                // `done` called in each arm: the plan goes to it without a copy where they meet.
                if staged & (1 << i) != 0 {
                    // SAFETY: as above; `Ahead` is `Copy`: reading it leaves nothing owned twice.
                    let a = unsafe { slots[i].assume_init_read() };
                    if NAT {
                        // The plan handed on where it is made, not merged with the others.
                        self.track_key_then(g, a.key, a.hash, a.src_lo, a.l4, zone, flags.commit, |r, plan, new| {
                            self.stats.count(r.state);
                            done(base + i, p, r, plan, new);
                        });
                    } else {
                        let (r, plan) =
                            self.track_key_hashed::<NAT>(g, a.key, a.hash, a.src_lo, a.l4, zone, flags.commit);
                        self.stats.count(r.state);
                        done(base + i, p, r, plan, None);
                    }
                } else {
                    let class = walk::<(Key, bool)>(p.data(), &p.meta, flags.l3_csum_verified);
                    let (r, plan) = self.track_class::<NAT>(g, class, zone, flags.commit);
                    done(base + i, p, r, plan, None);
                }
            }
            base += group.len();
        }
    }

    /// Tracks one packet: `frame` with the metadata `freeway_packet::parse` filled in.
    ///
    /// Always inlined: each call site gets its own copy, specialised for its arguments (a
    /// constant zone or commit folds away), with the key, the flags and the result in
    /// registers. Called out of line, the eight arguments do not fit the six argument
    /// registers, the three-byte result is packed into one and unpacked by the caller, and
    /// the body spills what the call's registers held: 21 instructions of 260 a packet on the
    /// `bench conntrack` workload (callgrind, 2026-11-25).
    #[inline(always)]
    pub fn track(&mut self, g: &Guard, frame: &[u8], meta: &Meta, zone: u16, flags: TrackFlags) -> CtResult {
        let class = walk::<(Key, bool)>(frame, meta, flags.l3_csum_verified);
        self.track_class::<false>(g, class, zone, flags.commit).0
    }

    /// Tracks one packet as [`CtWorker::track`] does and, from the same lookup, says how it
    /// is rewritten when its connection is translated (what [`CtWorker::nat_of`] says, without
    /// looking the connection up a second time). An ICMP error about a translated connection
    /// gets its plan too.
    #[inline]
    pub fn track_nat(
        &mut self,
        g: &Guard,
        frame: &[u8],
        meta: &Meta,
        zone: u16,
        flags: TrackFlags,
    ) -> (CtResult, Option<NatPlan>) {
        let class = walk::<(Key, bool)>(frame, meta, flags.l3_csum_verified);
        self.track_class::<true>(g, class, zone, flags.commit)
    }

    /// Tracks one packet as [`CtWorker::track_nat`] does and, when it is a new connection's
    /// that is not committed, says what its creation needs ([`NewConn`]): the ingress lookup
    /// of a datapath whose ruleset has nat chains.
    #[inline(always)]
    pub fn track_new(
        &mut self,
        g: &Guard,
        frame: &[u8],
        meta: &Meta,
        zone: u16,
        flags: TrackFlags,
    ) -> (CtResult, Option<NatPlan>, Option<NewConn>) {
        match walk::<(Key, bool)>(frame, meta, flags.l3_csum_verified) {
            Class::Track((mut key, src_lo), l4) => {
                key.set_zone(zone);
                let h = self.s.table.hash(&key);
                let mut out = (CtResult::orig(CtState::Untracked), None, None);
                self.track_key_then(g, key, h, src_lo, l4, zone, flags.commit, |r, plan, new| {
                    out = (r, plan, new)
                });
                self.stats.count(out.0.state);
                out
            }
            class => {
                let (r, plan) = self.track_class::<true>(g, class, zone, flags.commit);
                (r, plan, None)
            }
        }
    }

    /// The [`NewConn`] that [`NewConn::write`] wrote in `b`, its key hashed again; `None` for
    /// bytes it cannot have written.
    #[inline]
    pub fn read_new(&self, b: &[u8; NewConn::LEN]) -> Option<NewConn> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let l4 = match b[41] {
            0 => L4Info::Tcp(TcpSeg {
                flags: b[42],
                seq: u32_at(43),
                ack: u32_at(47),
                win: u16::from_le_bytes([b[51], b[52]]),
                len: u32_at(53),
                wscale: (b[57] != 0).then_some(b[58]),
            }),
            1 => L4Info::Udp,
            k @ (2 | 3) => L4Info::Sctp { starts: k == 3 },
            k @ (4 | 5) => L4Info::Echo { request: k == 5 },
            6 => L4Info::Generic,
            _ => return None,
        };
        let key = Key::from_words([u64_at(0), u64_at(8), u64_at(16), u64_at(24), u64_at(32)]);
        Some(NewConn {
            key,
            hash: self.s.table.hash(&key),
            src_lo: b[40] != 0,
            l4,
        })
    }

    /// Tracks a packet as its headers classify it and counts its state; with `NAT`, gives
    /// the translation plan of the packet's connection too (the plain variant compiles
    /// without it: no work added to untranslated tracking).
    #[inline(always)]
    fn track_class<const NAT: bool>(
        &mut self,
        g: &Guard,
        class: Class<(Key, bool)>,
        zone: u16,
        commit: bool,
    ) -> (CtResult, Option<NatPlan>) {
        let (r, plan) = match class {
            Class::Track((mut key, src_lo), l4) => {
                key.set_zone(zone);
                self.track_key::<NAT>(g, key, src_lo, l4, zone, commit)
            }
            Class::IcmpError(t) => self.icmp_error::<NAT>(g, &t, zone),
            Class::Untracked => (CtResult::orig(CtState::Untracked), None),
            Class::Invalid(r) => (invalid(r, false), None),
        };
        self.stats.count(r.state);
        (r, plan)
    }

    /// Tracks a packet already reduced to its key (in `zone`) and L4 information; with `NAT`,
    /// the translation plan of a packet of a translated connection too.
    #[inline(always)]
    fn track_key<const NAT: bool>(
        &self,
        g: &Guard,
        key: Key,
        src_lo: bool,
        l4: L4Info,
        zone: u16,
        commit: bool,
    ) -> (CtResult, Option<NatPlan>) {
        let h = self.s.table.hash(&key);
        self.track_key_hashed::<NAT>(g, key, h, src_lo, l4, zone, commit)
    }

    /// [`CtWorker::track_key`] of a key whose hash `h` is known.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn track_key_hashed<const NAT: bool>(
        &self,
        g: &Guard,
        key: Key,
        h: u64,
        src_lo: bool,
        l4: L4Info,
        zone: u16,
        commit: bool,
    ) -> (CtResult, Option<NatPlan>) {
        let s = &self.s;
        let _global = s.global.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(c) = s.table.lookup(&key, h, g) {
            let reply = src_lo != c.orig_lo();
            let r = self.update(c.primary(), reply, &l4, zone, commit);
            let plan = if NAT { packet_plan(c, &key, src_lo, reply) } else { None };
            return (r, plan);
        }
        if !commit {
            return (self.uncommitted(&l4), None);
        }
        (self.create(g, key, h, src_lo, l4, zone, commit), None)
    }

    /// [`CtWorker::track_key_hashed`] with translation, whose result and plan go to `then`
    /// from each path (a packet found, its plan made; a new one, none) instead of being
    /// merged into one value first: a plan of a translated IPv4 connection is then written
    /// once, where `then` keeps it, rather than built, moved and copied.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn track_key_then(
        &self,
        g: &Guard,
        key: Key,
        h: u64,
        src_lo: bool,
        l4: L4Info,
        zone: u16,
        commit: bool,
        then: impl FnOnce(CtResult, Option<NatPlan>, Option<NewConn>),
    ) {
        let s = &self.s;
        let global = s.global.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(c) = s.table.lookup(&key, h, g) {
            let reply = src_lo != c.orig_lo();
            let r = self.update(c.primary(), reply, &l4, zone, commit);
            // `packet_plan`, each kind of plan handed on where it is made.
            let plan = match c.twin() {
                Some(twin) => match stored_rewrite4(c, twin, &key, src_lo, reply) {
                    Some(rw) => {
                        drop(global);
                        return then(r, Some(NatPlan::Packet4(rw)), None);
                    }
                    None => tuple_plan(c, &key, src_lo),
                },
                None => None,
            };
            drop(global);
            return then(r, plan, None);
        }
        if commit {
            let r = self.create(g, key, h, src_lo, l4, zone, commit);
            drop(global);
            return then(r, None, None);
        }
        let r = self.uncommitted(&l4);
        drop(global);
        let new = (r.state == CtState::New).then_some(NewConn {
            key,
            hash: h,
            src_lo,
            l4,
        });
        then(r, None, new)
    }

    /// Tracks an ICMP error about the packet with tuple `inner`; with `NAT`, its plan too.
    #[inline(always)]
    fn icmp_error<const NAT: bool>(&self, g: &Guard, inner: &Tuple, zone: u16) -> (CtResult, Option<NatPlan>) {
        let r = self.related(g, inner, zone);
        let plan = if NAT && r.state == CtState::Related {
            nat_target(&self.s, g, inner, zone, true).map(|to| NatPlan::IcmpError { from: *inner, to })
        } else {
            None
        };
        (r, plan)
    }

    /// An ICMP error about the packet with tuple `inner`.
    fn related(&self, g: &Guard, inner: &Tuple, zone: u16) -> CtResult {
        let (key, src_lo) = Key::new(inner, zone);
        let h = self.s.table.hash(&key);
        let _global = self
            .s
            .global
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        match self.s.table.lookup(&key, h, g) {
            Some(c) => CtResult {
                state: CtState::Related,
                // The error travels against the embedded packet.
                reply: src_lo == c.orig_lo(),
                uncommitted: false,
            },
            None => invalid(InvalidReason::NoConnection, false),
        }
    }

    #[inline(always)]
    fn update(&self, c: &Conn, reply: bool, l4: &L4Info, zone: u16, commit: bool) -> CtResult {
        let to = self.s.timeouts(zone);
        if let L4Info::Tcp(seg) = l4 {
            return self.update_tcp(c, reply, seg, to, commit);
        }
        let st = c.status();
        let mut ns = st;
        if reply {
            ns |= SEEN_REPLY;
        } else if st & SEEN_REPLY != 0 {
            ns |= ASSURED;
        }
        if ns != st {
            c.hot.status.fetch_or(ns, freeway_sync::atomic::Ordering::Relaxed);
        }
        let class = match c.kind() {
            Kind::Udp if ns & SEEN_REPLY != 0 => TimeoutClass::UdpMultiple,
            Kind::Udp => TimeoutClass::UdpSingle,
            Kind::Echo => TimeoutClass::Icmp,
            _ => TimeoutClass::Generic,
        };
        c.touch(self.now + to.ms(class));
        seen(ns, reply)
    }

    fn update_tcp(&self, c: &Conn, reply: bool, seg: &TcpSeg, to: &LiveTimeouts, commit: bool) -> CtResult {
        use freeway_sync::atomic::Ordering::Relaxed;
        let mut lk = c.lock();
        let state = c.state();
        let st = c.status();
        match tcp::update(lk.tcp(), state, usize::from(reply), seg) {
            Update::Accept(ns) => {
                let mut nst = st;
                if reply {
                    nst |= SEEN_REPLY;
                }
                if (state == ts::SYN_RECV || state == ts::ESTABLISHED) && ns == ts::ESTABLISHED && nst & SEEN_REPLY != 0
                {
                    nst |= ASSURED;
                }
                if ns != state {
                    c.hot.state.store(ns, Relaxed);
                }
                if nst != st {
                    c.hot.status.store(nst, Relaxed);
                }
                c.touch(self.now + to.ms(tcp_class(ns)));
                seen(nst, reply)
            }
            Update::Ignore => seen(st, reply),
            Update::Invalid(r) => invalid(r, reply),
            Update::Reopen => {
                if !commit {
                    return CtResult::orig(CtState::New);
                }
                if reply && c.twin().is_some() {
                    // A translated connection keeps its direction: its translation is keyed
                    // by it. The old connection expires; a new one starts after it.
                    return invalid(InvalidReason::TcpState, reply);
                }
                match tcp::init(seg, false) {
                    Ok((t, s0)) => {
                        *lk.tcp() = t;
                        if reply {
                            c.set_orig_lo(!c.orig_lo());
                        }
                        c.hot.state.store(s0, Relaxed);
                        c.hot.status.store(0, Relaxed);
                        c.touch(self.now + to.ms(tcp_class(s0)));
                        self.stats.reopened.inc();
                        CtResult::orig(CtState::New)
                    }
                    Err(r) => invalid(r, reply),
                }
            }
        }
    }

    /// The tracker a new connection of `l4` starts with: kind, state, TCP tracker (`None`:
    /// not TCP, the default one), timeout class; `Err` for a packet that cannot start one.
    #[inline(always)]
    fn start(&self, l4: &L4Info) -> Result<(Kind, u8, Option<TcpConn>, TimeoutClass), CtResult> {
        Ok(match l4 {
            L4Info::Tcp(seg) => match tcp::init(seg, self.s.tcp_loose) {
                Ok((t, st)) => (Kind::Tcp, st, Some(t), tcp_class(st)),
                Err(r) => return Err(invalid(r, false)),
            },
            L4Info::Udp => (Kind::Udp, 0, None, TimeoutClass::UdpSingle),
            L4Info::Echo { request: true } => (Kind::Echo, 0, None, TimeoutClass::Icmp),
            L4Info::Echo { request: false } => return Err(invalid(InvalidReason::NoConnection, false)),
            L4Info::Generic | L4Info::Sctp { starts: true } => (Kind::Generic, 0, None, TimeoutClass::Generic),
            L4Info::Sctp { starts: false } => return Err(invalid(InvalidReason::NoConnection, false)),
        })
    }

    /// The result of a new packet that is not committed (its connection not created): new,
    /// or invalid if it cannot start one. Nothing is built (inlined where its commit flag is
    /// known, the miss of an ingress lookup costs no call).
    #[inline(always)]
    fn uncommitted(&self, l4: &L4Info) -> CtResult {
        match self.start(l4) {
            Ok(_) => CtResult {
                uncommitted: true,
                ..CtResult::orig(CtState::New)
            },
            Err(r) => r,
        }
    }

    /// Checks the worker's queue and reserves a place in `zone` for a new connection.
    #[inline(always)]
    fn admit(&self, zone: u16) -> Result<(), CtResult> {
        if self.queue.is_full() {
            return Err(invalid(InvalidReason::QueueFull, false));
        }
        self.reserve(zone).map_err(|r| invalid(r, false))
    }

    #[allow(clippy::too_many_arguments)]
    fn create(&self, g: &Guard, key: Key, h: u64, src_lo: bool, l4: L4Info, zone: u16, commit: bool) -> CtResult {
        if !commit {
            return self.uncommitted(&l4);
        }
        let to = self.s.timeouts(zone);
        let (kind, state, tcp, class) = match self.start(&l4) {
            Ok(v) => v,
            Err(r) => return r,
        };
        if let Err(r) = self.admit(zone) {
            return r;
        }
        let expires = self.now + to.ms(class);
        // SAFETY: `Conn::init` initialises the node in full.
        let node = unsafe {
            self.nodes
                .borrow_mut()
                .alloc_with(|n| Conn::init(n, key, src_lo, kind, false, std::ptr::null(), state, tcp, expires, None))
        };
        let s = &self.s;
        match s.table.insert(node, h, g) {
            Ok(c) => {
                // Cannot fail: this worker is the queue's only producer and it was not full.
                let pushed = self.queue.push(ConnPtr(c as *const Conn));
                debug_assert!(pushed.is_ok());
                self.stats.created.inc();
                CtResult::orig(CtState::New)
            }
            Err((node, existing)) => {
                self.nodes.borrow_mut().free(node);
                self.s.release(zone);
                self.stats.races.inc();
                let reply = src_lo != existing.orig_lo();
                self.update(existing.primary(), reply, &l4, zone, commit)
            }
        }
    }
}

/// The plan of a packet with key `key` (its source the key's low endpoint: `src_lo`) found
/// under node `c` (`reply`: it travels in the reply direction). A translated IPv4
/// connection's rewrite is on its primary's hot line, which the packet's update read: an
/// original-direction packet reads no other line, a reply reads its primary's key (the
/// original tuple) besides. An untranslated connection (no twin, on the key's line) has no
/// plan; the tuples' plan (IPv6, or a packet that needs no rewrite) is built out of line, so
/// that the common one is the only value the caller merges.
#[inline(always)]
fn packet_plan(c: &Conn, key: &Key, src_lo: bool, reply: bool) -> Option<NatPlan> {
    let twin = c.twin()?;
    if let Some(rw) = stored_rewrite4(c, twin, key, src_lo, reply) {
        return Some(NatPlan::Packet4(rw));
    }
    tuple_plan(c, key, src_lo)
}

/// The IPv4 rewrite a packet found under `c` (a node of a translated connection, whose other
/// node is `twin`) needs, from the primary's hot line (see [`packet_plan`]); `None` for
/// IPv6 (whose primary stores none: [`Conn::nat4`]), or a packet that needs no rewrite.
#[inline(always)]
fn stored_rewrite4(c: &Conn, twin: &Conn, key: &Key, src_lo: bool, reply: bool) -> Option<Rewrite4> {
    match (c.is_reply_node(), reply) {
        (false, false) => c.nat4(key, src_lo),
        (true, true) => twin.nat4(twin.key(), twin.orig_lo()).map(|rw| rw.reversed()),
        _ => None,
    }
}

/// [`packet_plan`] in tuples: the plan of a packet of a translated connection that has no
/// stored IPv4 rewrite.
#[cold]
#[inline(never)]
fn tuple_plan(c: &Conn, key: &Key, src_lo: bool) -> Option<NatPlan> {
    node_target(c, src_lo, false).map(|to| NatPlan::Packet {
        from: key.tuple(src_lo),
        to,
    })
}

/// A new connection's first packet as its ingress lookup saw it, not committed
/// ([`CtWorker::track_new`], [`CtWorker::track_nat_new_each`]): its key in its zone, the
/// key's hash, its direction and its transport state. Its creation later
/// ([`crate::nat::commit_seen`]) starts from it instead of parsing the packet and building
/// its key again. It can travel with the packet as [`NewConn::LEN`] bytes
/// ([`NewConn::write`], [`CtWorker::read_new`]; the hash does not travel: it is computed
/// again from the key, so that bytes changed on the way can give a wrong tuple, never a
/// key in the wrong bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewConn {
    pub(crate) key: Key,
    pub(crate) hash: u64,
    pub(crate) src_lo: bool,
    pub(crate) l4: L4Info,
}

impl NewConn {
    /// Bytes of [`NewConn::write`].
    pub const LEN: usize = 59;

    /// The packet's tuple.
    #[inline]
    pub fn tuple(&self) -> Tuple {
        self.key.tuple(self.src_lo)
    }

    /// The packet's transport state.
    #[inline]
    pub fn l4(&self) -> L4Info {
        self.l4
    }

    /// The zone it was looked up in.
    #[inline]
    pub fn zone(&self) -> u16 {
        self.key.zone()
    }

    /// Writes it as bytes: the key's words, the direction, then the transport state (a kind
    /// and, for TCP, the segment's fields).
    #[inline]
    pub fn write(&self, b: &mut [u8; NewConn::LEN]) {
        for (i, w) in self.key.words().iter().enumerate() {
            b[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        b[40] = u8::from(self.src_lo);
        b[41] = match self.l4 {
            L4Info::Tcp(_) => 0,
            L4Info::Udp => 1,
            L4Info::Sctp { starts } => 2 + u8::from(starts),
            L4Info::Echo { request } => 4 + u8::from(request),
            L4Info::Generic => 6,
        };
        if let L4Info::Tcp(seg) = self.l4 {
            b[42] = seg.flags;
            b[43..47].copy_from_slice(&seg.seq.to_le_bytes());
            b[47..51].copy_from_slice(&seg.ack.to_le_bytes());
            b[51..53].copy_from_slice(&seg.win.to_le_bytes());
            b[53..57].copy_from_slice(&seg.len.to_le_bytes());
            b[57] = u8::from(seg.wscale.is_some());
            b[58] = seg.wscale.unwrap_or(0);
        }
    }
}

/// What [`CtWorker::commit_nat`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatCommit {
    /// The connection exists now (created with its translation, or created first by another
    /// worker); the packet's tracking result.
    Done(CtResult),
    /// Another connection uses the translated tuple: pick another and try again.
    Taken,
}

/// How a packet of a translated connection is rewritten ([`CtWorker::nat_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatPlan {
    /// The packet's tuple `from` becomes `to`.
    Packet {
        /// The tuple it carries.
        from: Tuple,
        /// The tuple it must carry.
        to: Tuple,
    },
    /// An IPv4 packet's rewrite with the checksum changes its connection keeps
    /// ([`Rewrite4`]): what [`CtWorker::track_nat`] gives for a packet of a translated IPv4
    /// connection (the same rewrite as `Packet` of [`Rewrite4::tuples`]).
    Packet4(Rewrite4),
    /// An ICMP error about a packet of a translated connection: the quoted packet's tuple
    /// `from` becomes `to`, and the error's own addresses are mapped the same way (its
    /// destination is the quoted packet's source).
    IcmpError {
        /// The quoted packet's tuple.
        from: Tuple,
        /// The tuple it must carry.
        to: Tuple,
    },
}

impl NatPlan {
    /// The tuple the packet (an ICMP error: its quote) carries, and the one it must carry.
    pub fn tuples(&self) -> (Tuple, Tuple) {
        match *self {
            NatPlan::Packet4(rw) => rw.tuples(Half::Both),
            NatPlan::Packet { from, to } | NatPlan::IcmpError { from, to } => (from, to),
        }
    }

    /// The same plan with tuples: a `Packet4` as the `Packet` of the same rewrite.
    pub fn in_tuples(self) -> NatPlan {
        match self {
            NatPlan::Packet4(_) => {
                let (from, to) = self.tuples();
                NatPlan::Packet { from, to }
            }
            p => p,
        }
    }
}

/// The rewrite a packet of a translated connection needs, in its direction.
#[inline]
fn nat_plan(s: &Shared, g: &Guard, frame: &[u8], meta: &Meta, zone: u16, l3_csum_verified: bool) -> Option<NatPlan> {
    match walk::<Tuple>(frame, meta, l3_csum_verified) {
        Class::Track(t, _) => nat_target(s, g, &t, zone, false).map(|to| NatPlan::Packet { from: t, to }),
        Class::IcmpError(t) => nat_target(s, g, &t, zone, true).map(|to| NatPlan::IcmpError { from: t, to }),
        _ => None,
    }
}

/// The tuple a packet with tuple `t` must carry: for a packet in the original direction
/// (untranslated, found under the primary node) the reply node's translated tuple, for a
/// reply (translated, found under the reply node) the original's reverse. A packet quoted
/// in an ICMP error (`quoted`) travelled the other way through the translator: it is
/// mapped back, from its translated form to its original one and the other way round.
#[inline]
fn nat_target(s: &Shared, g: &Guard, t: &Tuple, zone: u16, quoted: bool) -> Option<Tuple> {
    let (key, src_lo) = Key::new(t, zone);
    let n = s.table.lookup(&key, s.table.hash(&key), g)?;
    node_target(n, src_lo, quoted)
}

/// [`nat_target`] once the node `n` that the tuple was found under is known (`src_lo`: the
/// tuple's source is the key's low endpoint).
#[inline(always)]
fn node_target(n: &Conn, src_lo: bool, quoted: bool) -> Option<Tuple> {
    let twin = n.twin()?;
    let reply = src_lo != n.orig_lo();
    match (n.is_reply_node(), reply, quoted) {
        (false, false, false) => Some(twin.key().tuple(twin.orig_lo())),
        (true, true, false) => Some(twin.key().tuple(twin.orig_lo()).reversed()),
        // A quoted original-direction packet as translated: back to the original.
        (true, false, true) => Some(twin.key().tuple(twin.orig_lo())),
        // A quoted reply as de-translated: to the reply as it was sent.
        (false, true, true) => Some(twin.key().tuple(!twin.orig_lo())),
        _ => None,
    }
}

impl Conntrack {
    /// The rewrite a packet of a translated connection needs ([`CtWorker::nat_of`]), for the
    /// control path (`freeway ctl trace`): reads the table only.
    pub fn nat_of(&self, frame: &[u8], meta: &Meta, zone: u16) -> Option<NatPlan> {
        let g = pin();
        nat_plan(&self.s, &g, frame, meta, zone, false)
    }
}

impl CtWorker {
    /// The rewrite a packet of a translated connection needs, in its direction (`None`: not
    /// translated, already translated, or no connection). Reads the table only.
    #[inline]
    pub fn nat_of(&self, g: &Guard, frame: &[u8], meta: &Meta, zone: u16, l3_csum_verified: bool) -> Option<NatPlan> {
        nat_plan(&self.s, g, frame, meta, zone, l3_csum_verified)
    }

    /// Counts a new translated connection refused for want of a free port.
    pub(crate) fn note_nat_exhausted(&self) {
        self.stats.nat_exhausted.inc();
    }

    /// Whether a connection in `zone` uses tuple `t` (in either direction, translated or not).
    #[inline]
    pub fn tuple_taken(&self, g: &Guard, t: &Tuple, zone: u16) -> bool {
        let (key, _) = Key::new(t, zone);
        self.s.table.lookup(&key, self.s.table.hash(&key), g).is_some()
    }

    /// Creates the connection of a new packet that was translated from tuple `orig`:
    /// `frame`/`meta` is the packet as translated, whose tuple keys the connection's reply
    /// node. Without a translation (the tuples agree) it is an ordinary commit. Refused like
    /// any new connection by the limits; [`NatCommit::Taken`] when the translated tuple is
    /// another connection's.
    pub fn commit_nat(
        &mut self,
        g: &Guard,
        frame: &[u8],
        meta: &Meta,
        zone: u16,
        orig: &Tuple,
        l3_csum_verified: bool,
    ) -> NatCommit {
        let (mut rkey, r_lo, l4) = match walk::<(Key, bool)>(frame, meta, l3_csum_verified) {
            Class::Track((k, lo), l4) => (k, lo, l4),
            Class::Invalid(r) => return NatCommit::Done(invalid(r, false)),
            _ => return NatCommit::Done(CtResult::orig(CtState::Untracked)),
        };
        rkey.set_zone(zone);
        let (okey, o_lo) = Key::new(orig, zone);
        let oh = self.hash_ahead(&okey);
        match self.create_translated(g, okey, oh, o_lo, &l4, zone, Some((rkey, r_lo, None)), || {
            Ok::<_, ()>(None)
        }) {
            Ok(Some(r)) => NatCommit::Done(r),
            _ => NatCommit::Taken,
        }
    }

    /// The hash of `key`, whose bucket is fetched meanwhile (a new connection's primary: its
    /// bucket is read last, [`CtWorker::create_translated`]).
    #[inline(always)]
    pub(crate) fn hash_ahead(&self, key: &Key) -> u64 {
        let h = self.hash_of(key);
        self.s.table.prefetch(h);
        h
    }

    /// The hash of `key` in this table.
    #[inline(always)]
    pub(crate) fn hash_of(&self, key: &Key) -> u64 {
        self.s.table.hash(key)
    }

    /// Fetches the bucket of hash `h` (a new connection's primary whose hash is known:
    /// [`crate::nat::commit_seen`]).
    #[inline(always)]
    pub(crate) fn prefetch_bucket(&self, h: u64) {
        self.s.table.prefetch(h);
    }

    /// Creates a translated connection whose original direction is keyed `okey` (its hash
    /// `oh`, [`CtWorker::hash_ahead`]; `o_lo`: its originator is the key's low endpoint),
    /// trying the reply key `first` and then those `next` gives (each with its low
    /// endpoint's direction) until the table takes one: the reply node first, then the
    /// primary. `first` may come with the rewrite from the original tuple to its own
    /// ([`Rewrite4::new`]), which the primary then stores as it is. A reply key equal to `okey` is an untranslated connection, created as such.
    /// `Ok(None)`: `next` ran out, every key was taken; `Err`: `next` failed. The place and
    /// the nodes are reserved once for all the tries. Always inlined, as
    /// [`crate::nat::commit_new`] is: its keys went through memory otherwise.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn create_translated<E>(
        &mut self,
        g: &Guard,
        okey: Key,
        oh: u64,
        o_lo: bool,
        l4: &L4Info,
        zone: u16,
        first: Option<(Key, bool, Option<Rewrite4>)>,
        mut next: impl FnMut() -> Result<Option<(Key, bool)>, E>,
    ) -> Result<Option<CtResult>, E> {
        let s = &self.s;
        let first = match first {
            Some(k) => Some(k),
            None => next()?.map(|(k, lo)| (k, lo, None)),
        };
        let Some((rkey, r_lo, rw)) = first else {
            return Ok(None);
        };
        if rkey == okey {
            return Ok(Some(self.track_key::<false>(g, okey, o_lo, *l4, zone, true).0));
        }
        // The reply node's bucket, fetched while the nodes are prepared: both buckets' misses
        // overlap that work.
        let mut rh = s.table.hash(&rkey);
        s.table.prefetch(rh);
        let to = s.timeouts(zone);
        let (kind, state, tcp, class) = match self.start(l4) {
            Ok(v) => v,
            Err(r) => return Ok(Some(r)),
        };
        if let Err(r) = self.admit(zone) {
            return Ok(Some(r));
        }
        let expires = self.now + to.ms(class);
        let nat4 = match rw {
            Some(rw) => Some(Nat4::of(&rw)),
            None => Nat4::between(&okey, o_lo, &rkey, r_lo),
        };
        // The two nodes made in place, linked (each the other's twin) and the primary's
        // stored rewrite set as they are written.
        // SAFETY: `Conn::init` initialises both nodes in full.
        let (mut p, mut a) = unsafe {
            self.nodes.borrow_mut().alloc_pair_with(|p, a| {
                Conn::init(p, okey, o_lo, kind, false, a, state, tcp, expires, nat4);
                Conn::init(a, rkey, r_lo, kind, true, p, 0, None, Tick::MAX, None);
            })
        };
        let a = loop {
            match s.table.insert(a, rh, g) {
                Ok(a) => break a,
                Err((back, _)) => {
                    a = back;
                    let more = next();
                    match more {
                        Ok(Some((k, lo))) if k != okey => {
                            a.rekey(k, lo);
                            p.set_nat4(&a);
                            rh = s.table.hash(&k);
                            continue;
                        }
                        _ => {}
                    }
                    let mut nodes = self.nodes.borrow_mut();
                    nodes.free(p);
                    nodes.free(a);
                    drop(nodes);
                    s.release(zone);
                    return match more {
                        Ok(Some(_)) => Ok(Some(self.track_key::<false>(g, okey, o_lo, *l4, zone, true).0)),
                        Ok(None) => Ok(None),
                        Err(e) => Err(e),
                    };
                }
            }
        };
        match s.table.insert(p, oh, g) {
            Ok(c) => {
                // Cannot fail: this worker is the queue's only producer and it was not full.
                let pushed = self.queue.push(ConnPtr(c as *const Conn));
                debug_assert!(pushed.is_ok());
                self.stats.created.inc();
                self.stats.nat_created.inc();
                Ok(Some(CtResult::orig(CtState::New)))
            }
            Err((p, existing)) => {
                // Another worker created the connection first: the published reply node is an
                // orphan that owns its twin until the remover retires both (table doc, NAT).
                let _ = p.into_raw();
                a.hot.expires.store(0, freeway_sync::atomic::Ordering::Relaxed);
                let pushed = self.queue.push(ConnPtr(a as *const Conn));
                debug_assert!(pushed.is_ok());
                s.release(zone);
                self.stats.races.inc();
                let reply = o_lo != existing.orig_lo();
                Ok(Some(self.update(existing.primary(), reply, l4, zone, true)))
            }
        }
    }
}
