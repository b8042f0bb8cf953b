//! The neighbour table: (IP address, interface) → MAC, for ARP (IPv4) and ND (IPv6).
//!
//! # Who does what
//!
//! * **Workers** hold a [`Neigh`] (cheap to clone). They look entries up lock-free under an
//!   epoch guard pinned once per batch, and never write the table. What they learn (ARP
//!   requests and replies, NS/NA link-layer options) and what they need resolved go to the
//!   writer as [`NeighUpdate`]s on a bounded lock-free queue ([`freeway_sync::Mailbox`]); a
//!   full queue is counted by the worker and the update dropped (the next ARP/ND frame, or the
//!   worker's retransmission, asks again). Workers never wait. A queued update also rings the
//!   writer's doorbell ([`NeighWriter::doorbell`], a one-slot channel): the writer's thread
//!   waits on it between rounds, so an answer or a resolution request is applied at once
//!   instead of after the thread's nap. Ringing a bell already rung is a few loads and a
//!   fence, no shared write; the futex wake-up happens only when the writer is asleep on it, at most once per
//!   nap, never once per packet.
//! * **The neighbour writer** ([`NeighWriter`], exactly one, not `Clone`) is the only thread
//!   that changes the table: it applies updates (enforcing the bound, counting refusals),
//!   adds and deletes static entries, flushes, and ages entries in bounded chunks at least
//!   [`MIN_AGE_INTERVAL_MS`] apart. Lookups never check expiry (ARCHITECTURE.md, fast-path rule 3).
//!
//! # The table
//!
//! A fixed array of buckets (sized once from the bounds, never resized), each the head of a
//! singly linked chain of nodes, in the manner of `freeway-bridge`'s FDB table and the
//! kernel's RCU hash lists. The writer publishes a fully initialised node with a `Release`
//! store of the bucket head and unlinks with a `Release` store of the successor; unlinked nodes
//! are freed after an epoch grace period (crossbeam-epoch; under `--cfg loom` at drop).
//!
//! An entry's MAC and state live together in one `AtomicU64` (`mac << 16 | state`), so a
//! worker always reads a consistent (MAC, state) pair, and the writer changes a MAC or a state
//! in place with one store, without republishing the node. The "last confirmed" tick is a
//! second atomic written only by the writer. Workers write nothing in the table: no shared
//! write on the fast path at all (ARCHITECTURE.md, fast-path rule 2).
//!
//! # States (as iproute2 shows them)
//!
//! * `INCOMPLETE`: a worker asked for resolution ([`NeighUpdate::Resolve`]); requests are being
//!   sent. Becomes `FAILED` after `incomplete_ms` without an answer.
//! * `REACHABLE`: confirmed by an ARP/NA from the neighbour within `reachable_ms`; then `STALE`.
//! * `STALE`: still used for forwarding; workers that use it send unicast probes (at most one
//!   per `retrans_ms` per worker), an answer makes it `REACHABLE` again. Removed
//!   `gc_stale_ms` after the last confirmation (a dead neighbour in use thus fails at the
//!   latest then, an idle one is collected).
//! * `FAILED`: resolution failed; workers drop packets to it (ICMP host unreachable) without
//!   resolving again until the entry is removed, `failed_ms` later.
//! * `PERMANENT`: static, never ages, never changed by learning.
//!
//! # Bounds
//!
//! Dynamic entries ≤ `limit`; static entries ≤ `static_limit`; the update queue ≤ `queue`.
//! Refusals are counted ([`NeighStats::table_full`], [`NeighStats::static_limit_reached`]).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use freeway_sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use freeway_sync::Mailbox;
use freeway_sync::{Counter, Tick};
use serde::{Deserialize, Serialize};

use crate::iface::Interfaces;
use freeway_packet::Mac;

/// Ageing never runs more often than this (ARCHITECTURE.md, fast-path rule 3).
pub const MIN_AGE_INTERVAL_MS: u64 = 10;

/// Neighbour table settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NeighConfig {
    /// Most dynamic (learned, incomplete, failed) entries.
    pub limit: usize,
    /// Most static entries.
    pub static_limit: usize,
    /// Capacity of the update queue from workers to the writer.
    pub queue: usize,
    /// A confirmation keeps an entry `REACHABLE` this long.
    pub reachable_ms: u64,
    /// A `STALE` entry is removed this long after its last confirmation.
    pub gc_stale_ms: u64,
    /// An `INCOMPLETE` entry becomes `FAILED` after this long.
    pub incomplete_ms: u64,
    /// A `FAILED` entry is removed after this long.
    pub failed_ms: u64,
    /// Minimum time between two ageing chunks (at least [`MIN_AGE_INTERVAL_MS`]).
    pub age_interval_ms: u64,
    /// Buckets scanned per ageing chunk.
    pub age_chunk_buckets: usize,
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig {
            limit: 4096,
            static_limit: 1024,
            queue: 4096,
            reachable_ms: 30_000,
            gc_stale_ms: 60_000,
            incomplete_ms: 3_000,
            failed_ms: 3_000,
            age_interval_ms: MIN_AGE_INTERVAL_MS,
            age_chunk_buckets: 1024,
        }
    }
}

impl NeighConfig {
    /// Checks the settings; the error names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        if self.limit == 0 || self.limit > 1 << 22 {
            return Err(format!("limit must be between 1 and {} (got {})", 1 << 22, self.limit));
        }
        if self.static_limit > 1 << 20 {
            return Err(format!(
                "static_limit must be at most {} (got {})",
                1 << 20,
                self.static_limit
            ));
        }
        if self.queue == 0 || self.queue > 1 << 20 {
            return Err(format!("queue must be between 1 and {} (got {})", 1 << 20, self.queue));
        }
        if self.reachable_ms == 0 || self.gc_stale_ms <= self.reachable_ms {
            return Err("gc_stale_ms must be greater than reachable_ms, which must be > 0".into());
        }
        if self.incomplete_ms == 0 || self.failed_ms == 0 {
            return Err("incomplete_ms and failed_ms must be > 0".into());
        }
        if self.age_interval_ms < MIN_AGE_INTERVAL_MS || self.age_chunk_buckets == 0 {
            return Err(format!(
                "age_interval_ms must be at least {MIN_AGE_INTERVAL_MS} and age_chunk_buckets at least 1"
            ));
        }
        Ok(())
    }
}

/// Neighbour state, as iproute2 names them.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NeighState {
    /// Resolution in progress.
    Incomplete = 1,
    /// Recently confirmed.
    Reachable = 2,
    /// Usable, not recently confirmed.
    Stale = 3,
    /// Resolution failed.
    Failed = 4,
    /// Static.
    Permanent = 5,
}

impl NeighState {
    /// The iproute2 name (`REACHABLE`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            NeighState::Incomplete => "INCOMPLETE",
            NeighState::Reachable => "REACHABLE",
            NeighState::Stale => "STALE",
            NeighState::Failed => "FAILED",
            NeighState::Permanent => "PERMANENT",
        }
    }

    /// Whether packets can be sent to the entry's MAC.
    #[inline]
    pub fn usable(&self) -> bool {
        matches!(self, NeighState::Reachable | NeighState::Stale | NeighState::Permanent)
    }

    fn from_u8(v: u8) -> NeighState {
        match v {
            2 => NeighState::Reachable,
            3 => NeighState::Stale,
            4 => NeighState::Failed,
            5 => NeighState::Permanent,
            _ => NeighState::Incomplete,
        }
    }
}

impl fmt::Display for NeighState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A consistent snapshot of one entry, as a worker reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighView {
    /// Link-layer address (zero while `INCOMPLETE`/`FAILED` with none known).
    pub mac: [u8; 6],
    /// State.
    pub state: NeighState,
    /// Last confirmation (or state change for `INCOMPLETE`/`FAILED`).
    pub updated: Tick,
}

/// What workers ask of the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighUpdate {
    /// The neighbour `ip` on `iface` is at `mac` (from an ARP or ND frame). With `create`
    /// false only an existing entry is updated (unsolicited/gratuitous announcements).
    Learn {
        /// Address.
        ip: IpAddr,
        /// Interface index.
        iface: u16,
        /// Link-layer address.
        mac: [u8; 6],
        /// Whether a missing entry may be created.
        create: bool,
    },
    /// A worker has packets for `ip` on `iface` and no entry: create an `INCOMPLETE` one.
    Resolve {
        /// Address.
        ip: IpAddr,
        /// Interface index.
        iface: u16,
    },
}

macro_rules! neigh_stats {
    ($($(#[$m:meta])* $f:ident,)*) => {
        /// Counters kept by the writer (single writer: the neighbour writer thread).
        #[derive(Debug, Default)]
        pub struct NeighStats {
            $($(#[$m])* pub $f: Counter,)*
        }

        impl NeighStats {
            /// Every counter by name, for tables and JSON.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f.get()),)*]
            }
        }
    };
}

neigh_stats! {
    /// Entries created `REACHABLE` by learning.
    created,
    /// Confirmations of existing entries (incl. `INCOMPLETE` → `REACHABLE`).
    confirmed,
    /// Entries whose MAC changed.
    mac_changed,
    /// `INCOMPLETE` entries created for resolution.
    incomplete,
    /// Updates refused because `limit` was reached.
    table_full,
    /// Update-only learns for which no entry existed (ignored).
    unsolicited_ignored,
    /// Learns about a `PERMANENT` entry (left alone).
    static_ignored,
    /// `REACHABLE` → `STALE` transitions.
    to_stale,
    /// `INCOMPLETE` → `FAILED` transitions.
    to_failed,
    /// Entries removed by ageing (stale and failed).
    removed,
    /// Entries removed by delete or flush.
    deleted,
    /// Static entries refused because `static_limit` was reached.
    static_limit_reached,
    /// Updates from workers about an interface already removed ([`NeighWriter::retire`]),
    /// ignored.
    retired_ignored,
}

/// One entry as shown by dumps (`ip neigh` style with [`fmt::Display`], JSON with serde).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighEntry {
    /// Address.
    pub dst: IpAddr,
    /// Interface name.
    pub dev: String,
    /// Interface index.
    pub ifindex: u16,
    /// Link-layer address, when known (`02:00:00:00:00:01`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lladdr: Option<String>,
    /// State, as a one-element list like `ip -j neigh` (`["REACHABLE"]`).
    pub state: Vec<NeighState>,
    /// Milliseconds since the last confirmation or state change.
    pub updated_ms_ago: u64,
}

impl fmt::Display for NeighEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} dev {}", self.dst, self.dev)?;
        if let Some(l) = &self.lladdr {
            write!(f, " lladdr {l}")?;
        }
        for s in &self.state {
            write!(f, " {s}")?;
        }
        Ok(())
    }
}

/// Errors from neighbour control operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NeighError {
    /// The static entry limit is reached.
    StaticLimit,
    /// Group, zero or broadcast MAC.
    BadMac([u8; 6]),
    /// Multicast, unspecified or broadcast IP address.
    BadAddress(IpAddr),
}

impl fmt::Display for NeighError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NeighError::StaticLimit => write!(f, "static neighbour limit reached"),
            NeighError::BadMac(m) => write!(f, "{} cannot be a neighbour's address", Mac(*m)),
            NeighError::BadAddress(a) => write!(f, "{a} cannot be a neighbour"),
        }
    }
}

impl std::error::Error for NeighError {}

use freeway_sync::chain::{self, Linked};
pub use freeway_sync::reclaim::Guard;
use freeway_sync::reclaim::Retired;

#[inline(always)]
fn pack(mac: [u8; 6], state: NeighState) -> u64 {
    let mut b = [0u8; 8];
    b[0..6].copy_from_slice(&mac);
    b[7] = state as u8;
    u64::from_be_bytes(b)
}

#[inline(always)]
fn unpack(w: u64) -> ([u8; 6], NeighState) {
    let b = w.to_be_bytes();
    ([b[0], b[1], b[2], b[3], b[4], b[5]], NeighState::from_u8(b[7]))
}

struct Node {
    ip: IpAddr,
    iface: u16,
    /// MAC and state (see [`pack`]); written by the writer only.
    word: AtomicU64,
    /// Last confirmation / state change; written by the writer only.
    updated: AtomicU64,
    next: AtomicPtr<Node>,
}

impl Node {
    #[inline(always)]
    fn view(&self) -> NeighView {
        let (mac, state) = unpack(self.word.load(Ordering::Acquire));
        NeighView {
            mac,
            state,
            updated: self.updated.load(Ordering::Relaxed),
        }
    }

    fn state(&self) -> NeighState {
        unpack(self.word.load(Ordering::Relaxed)).1
    }
}

#[inline(always)]
fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)) | (0xffff << 32),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[inline(always)]
fn mix(ip: IpAddr, iface: u16, seed: u64) -> u64 {
    let b = ip_bits(ip);
    let k = (b as u64) ^ ((b >> 64) as u64).rotate_left(29) ^ (u64::from(iface) << 48);
    let full = u128::from(k ^ seed) * u128::from(0x9e37_79b9_7f4a_7c15_u64 ^ seed.rotate_left(32));
    (full as u64) ^ ((full >> 64) as u64)
}

struct Table {
    buckets: Box<[AtomicPtr<Node>]>,
    mask: usize,
    seed: u64,
    len: AtomicUsize,
    retired: Retired<Node>,
}

// SAFETY: nodes are reached only through atomics; one writer (`NeighWriter`, `&mut self`) and
// epoch reclamation make sharing sound; node contents are plain data and atomics.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

impl Table {
    fn new(capacity: usize, seed: u64) -> Table {
        let n = capacity.max(16).next_power_of_two();
        Table {
            buckets: (0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            mask: n - 1,
            seed,
            len: AtomicUsize::new(0),
            retired: Retired::new(),
        }
    }

    #[inline(always)]
    fn bucket(&self, ip: IpAddr, iface: u16) -> &AtomicPtr<Node> {
        &self.buckets[(mix(ip, iface, self.seed) as usize) & self.mask]
    }

    #[inline(always)]
    fn find<'g>(&'g self, ip: IpAddr, iface: u16, _guard: &'g Guard) -> Option<&'g Node> {
        let mut p = self.bucket(ip, iface).load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: `p` was reached from a bucket under a pinned guard: it was published
            // fully initialised (Release/Acquire) and is freed only after the guard drops.
            let n = unsafe { &*p };
            if n.iface == iface && n.ip == ip {
                return Some(n);
            }
            p = n.next.load(Ordering::Acquire);
        }
        None
    }

    fn for_each<'g>(&'g self, _guard: &'g Guard, mut f: impl FnMut(&'g Node)) {
        for b in self.buckets.iter() {
            let mut p = b.load(Ordering::Acquire);
            while !p.is_null() {
                // SAFETY: as in `find`.
                let n = unsafe { &*p };
                f(n);
                p = n.next.load(Ordering::Acquire);
            }
        }
    }

    /// *Writer only.* Inserts a node the caller checked is absent.
    fn insert(&self, ip: IpAddr, iface: u16, mac: [u8; 6], state: NeighState, now: Tick) {
        let b = self.bucket(ip, iface);
        let node = Box::into_raw(Box::new(Node {
            ip,
            iface,
            word: AtomicU64::new(pack(mac, state)),
            updated: AtomicU64::new(now),
            next: AtomicPtr::new(b.load(Ordering::Relaxed)),
        }));
        // Release: the node's contents happen-before any reader that loads this pointer.
        b.store(node, Ordering::Release);
        self.len.store(self.len.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// *Writer only.* Unlinks the nodes of bucket `b` for which `pred` holds; returns them
    /// counted by kind (static, dynamic).
    fn remove_where(&self, b: usize, guard: &Guard, mut pred: impl FnMut(&Node) -> bool) -> (usize, usize) {
        let (mut s, mut d) = (0, 0);
        let count = |n: &Node| {
            let remove = pred(n);
            if remove && n.state() == NeighState::Permanent {
                s += 1;
            } else if remove {
                d += 1;
            }
            remove
        };
        // SAFETY: the caller is the writer (`NeighWriter`); nodes are boxed, linked in this
        // chain only, hold plain data and atomics; `retired` is this table's.
        unsafe { chain::remove_where(&self.buckets[b & self.mask], &self.retired, guard, count) };
        if s + d > 0 {
            self.len
                .store(self.len.load(Ordering::Relaxed) - (s + d), Ordering::Relaxed);
        }
        (s, d)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer remains; every linked node is boxed and
        // owned by the table, in one chain.
        unsafe { chain::free_chains(&self.buckets) };
    }
}

impl Linked for Node {
    #[inline(always)]
    fn next(&self) -> &AtomicPtr<Self> {
        &self.next
    }
}

struct Shared {
    table: Table,
    /// Workers' requests and the writer's doorbell.
    queue: Mailbox<NeighUpdate>,
    stats: NeighStats,
}

/// The read side, handed to workers and dumps. Cheap to clone.
#[derive(Clone)]
pub struct Neigh {
    shared: Arc<Shared>,
}

/// The write side. Exactly one exists per table.
pub struct NeighWriter {
    shared: Arc<Shared>,
    cfg: NeighConfig,
    dynamic: usize,
    statics: usize,
    cursor: usize,
    last_age: Option<Tick>,
    /// Interfaces removed for good ([`NeighWriter::retire`]); interface ids are never reused.
    retired: Vec<u16>,
}

/// Creates a neighbour table: the shared read side and its single writer.
pub fn new(cfg: NeighConfig) -> (Neigh, NeighWriter) {
    let seed = {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0x6e65_6967_u64)
    };
    new_seeded(cfg, seed)
}

/// Like [`new`] with a fixed hash seed (tests, reproducible runs).
pub fn new_seeded(cfg: NeighConfig, seed: u64) -> (Neigh, NeighWriter) {
    let shared = Arc::new(Shared {
        table: Table::new(cfg.limit + cfg.static_limit, seed),
        queue: Mailbox::new(cfg.queue),
        stats: NeighStats::default(),
    });
    (
        Neigh { shared: shared.clone() },
        NeighWriter {
            shared,
            cfg,
            dynamic: 0,
            statics: 0,
            cursor: 0,
            last_age: None,
            retired: Vec::new(),
        },
    )
}

/// Enters a read-side critical section. Workers pin once per batch.
pub use freeway_sync::reclaim::pin;

impl Neigh {
    /// Enters a read-side critical section; pin once per batch.
    #[inline]
    pub fn pin(&self) -> Guard {
        pin()
    }

    /// Looks up `ip` on `iface`. Lock-free, writes nothing shared.
    #[inline]
    pub fn lookup(&self, ip: IpAddr, iface: u16, guard: &Guard) -> Option<NeighView> {
        self.shared.table.find(ip, iface, guard).map(Node::view)
    }

    /// The bucket `(ip, iface)` hashes to (for tests that need colliding keys).
    #[doc(hidden)]
    pub fn bucket_of(&self, ip: IpAddr, iface: u16) -> usize {
        let t = &self.shared.table;
        (mix(ip, iface, t.seed) as usize) & t.mask
    }

    /// Hands an update to the writer and rings its doorbell. Never blocks; `false` if the
    /// queue is full.
    #[inline]
    pub fn request(&self, u: NeighUpdate) -> bool {
        self.shared.queue.push(u)
    }

    /// Rings the writer's doorbell ([`freeway_sync::Mailbox::ring`]): a queued update does it, and
    /// so does a caller that set the writer thread's stop flag, for the thread to see it now.
    #[inline]
    pub fn wake_writer(&self) {
        self.shared.queue.ring();
    }

    /// Updates waiting for the writer.
    pub fn pending(&self) -> usize {
        self.shared.queue.len()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.shared.table.len.load(Ordering::Relaxed)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The writer's counters.
    pub fn stats(&self) -> &NeighStats {
        &self.shared.stats
    }

    /// A snapshot of every entry, sorted by interface then address (`ip neigh show`).
    pub fn entries(&self, now: Tick, ifaces: &Interfaces) -> Vec<NeighEntry> {
        let g = self.pin();
        let mut v = Vec::with_capacity(self.len());
        self.shared.table.for_each(&g, |n| {
            let view = n.view();
            let known = !matches!(view.state, NeighState::Incomplete | NeighState::Failed) || view.mac != [0; 6];
            v.push(NeighEntry {
                dst: n.ip,
                dev: ifaces
                    .get(n.iface)
                    .map_or_else(|| format!("if{}", n.iface), |i| i.name.clone()),
                ifindex: n.iface,
                lladdr: known.then(|| Mac(view.mac).to_string()),
                state: vec![view.state],
                updated_ms_ago: now.saturating_sub(view.updated),
            });
        });
        v.sort_by_key(|e| (e.ifindex, e.dst));
        v
    }
}

/// What [`NeighWriter::learn`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// A new `REACHABLE` entry.
    Created,
    /// An existing entry was confirmed (and its MAC changed if different).
    Confirmed,
    /// Refused: the table is full.
    TableFull,
    /// No entry and `create` was false.
    Ignored,
    /// A `PERMANENT` entry exists; left alone.
    Static,
}

fn valid_neighbour(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast() || a.is_loopback()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast() || a.is_loopback()),
    }
}

fn valid_mac(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

impl NeighWriter {
    /// A read handle on the same table.
    pub fn reader(&self) -> Neigh {
        Neigh {
            shared: self.shared.clone(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &NeighConfig {
        &self.cfg
    }

    /// The doorbell: holds a message when a worker queued an update (or
    /// [`Neigh::wake_writer`] was called) since the writer last took it. The writer's thread
    /// waits on it between rounds, and takes the message *before* it drains the queue, so
    /// that an update queued after the drain rings again.
    pub fn doorbell(&self) -> &crossbeam_channel::Receiver<()> {
        self.shared.queue.bell()
    }

    /// Dynamic entries currently in the table.
    pub fn dynamic_len(&self) -> usize {
        self.dynamic
    }

    /// Records that `ip` on `iface` is at `mac`.
    pub fn learn(&mut self, ip: IpAddr, iface: u16, mac: [u8; 6], create: bool, now: Tick) -> Learned {
        if !valid_neighbour(ip) || !valid_mac(mac) {
            self.shared.stats.unsolicited_ignored.inc();
            return Learned::Ignored;
        }
        let g = pin();
        let t = &self.shared.table;
        let stats = &self.shared.stats;
        if let Some(n) = t.find(ip, iface, &g) {
            let (old_mac, state) = unpack(n.word.load(Ordering::Relaxed));
            if state == NeighState::Permanent {
                stats.static_ignored.inc();
                return Learned::Static;
            }
            if old_mac != mac && old_mac != [0; 6] {
                stats.mac_changed.inc();
            }
            n.updated.store(now, Ordering::Relaxed);
            // Release: pairs with readers' Acquire of the word (the tick above goes with it).
            n.word.store(pack(mac, NeighState::Reachable), Ordering::Release);
            stats.confirmed.inc();
            return Learned::Confirmed;
        }
        if !create {
            stats.unsolicited_ignored.inc();
            return Learned::Ignored;
        }
        if self.dynamic >= self.cfg.limit {
            stats.table_full.inc();
            return Learned::TableFull;
        }
        t.insert(ip, iface, mac, NeighState::Reachable, now);
        self.dynamic += 1;
        stats.created.inc();
        Learned::Created
    }

    /// Creates an `INCOMPLETE` entry for `ip` on `iface` if there is none. Returns whether one
    /// was created.
    pub fn resolve(&mut self, ip: IpAddr, iface: u16, now: Tick) -> bool {
        if !valid_neighbour(ip) {
            return false;
        }
        let g = pin();
        if self.shared.table.find(ip, iface, &g).is_some() {
            return false;
        }
        if self.dynamic >= self.cfg.limit {
            self.shared.stats.table_full.inc();
            return false;
        }
        self.shared.table.insert(ip, iface, [0; 6], NeighState::Incomplete, now);
        self.dynamic += 1;
        self.shared.stats.incomplete.inc();
        true
    }

    /// Applies one update from a worker.
    pub fn apply(&mut self, u: NeighUpdate, now: Tick) {
        let (NeighUpdate::Learn { iface, .. } | NeighUpdate::Resolve { iface, .. }) = u;
        if self.retired.contains(&iface) {
            self.shared.stats.retired_ignored.inc();
            return;
        }
        match u {
            NeighUpdate::Learn { ip, iface, mac, create } => {
                self.learn(ip, iface, mac, create, now);
            }
            NeighUpdate::Resolve { ip, iface } => {
                self.resolve(ip, iface, now);
            }
        }
    }

    /// Applies up to `max` queued updates. Returns how many were taken off the queue.
    pub fn drain_queue(&mut self, now: Tick, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(u) = self.shared.queue.pop() else { break };
            self.apply(u, now);
            n += 1;
        }
        n
    }

    /// Adds or replaces a `PERMANENT` entry.
    pub fn add_static(&mut self, ip: IpAddr, iface: u16, mac: [u8; 6], now: Tick) -> Result<(), NeighError> {
        if !valid_neighbour(ip) {
            return Err(NeighError::BadAddress(ip));
        }
        if !valid_mac(mac) {
            return Err(NeighError::BadMac(mac));
        }
        let g = pin();
        let t = &self.shared.table;
        if let Some(n) = t.find(ip, iface, &g) {
            if n.state() != NeighState::Permanent {
                if self.statics >= self.cfg.static_limit {
                    self.shared.stats.static_limit_reached.inc();
                    return Err(NeighError::StaticLimit);
                }
                self.dynamic -= 1;
                self.statics += 1;
            }
            n.updated.store(now, Ordering::Relaxed);
            n.word.store(pack(mac, NeighState::Permanent), Ordering::Release);
            return Ok(());
        }
        if self.statics >= self.cfg.static_limit {
            self.shared.stats.static_limit_reached.inc();
            return Err(NeighError::StaticLimit);
        }
        t.insert(ip, iface, mac, NeighState::Permanent, now);
        self.statics += 1;
        Ok(())
    }

    fn bucket_index(&self, ip: IpAddr, iface: u16) -> usize {
        let t = &self.shared.table;
        (mix(ip, iface, t.seed) as usize) & t.mask
    }

    /// Deletes an entry (static or not). Returns whether it existed.
    pub fn delete(&mut self, ip: IpAddr, iface: u16) -> bool {
        let g = pin();
        let b = self.bucket_index(ip, iface);
        let (s, d) = self
            .shared
            .table
            .remove_where(b, &g, |n| n.ip == ip && n.iface == iface);
        self.statics -= s;
        self.dynamic -= d;
        self.shared.stats.deleted.add((s + d) as u64);
        s + d > 0
    }

    /// Removes dynamic entries (and static ones too if `include_static`); with `iface`, only
    /// that interface's. Returns the count.
    pub fn flush(&mut self, iface: Option<u16>, include_static: bool) -> usize {
        let g = pin();
        let t = &self.shared.table;
        let (mut s, mut d) = (0, 0);
        for b in 0..t.buckets.len() {
            let (bs, bd) = t.remove_where(b, &g, |n| {
                iface.is_none_or(|i| n.iface == i) && (include_static || n.state() != NeighState::Permanent)
            });
            s += bs;
            d += bd;
        }
        self.statics -= s;
        self.dynamic -= d;
        self.shared.stats.deleted.add((s + d) as u64);
        s + d
    }

    /// Deletes every entry of interface `iface` (static ones too) and ignores from now on the
    /// workers' updates about it: a worker still routing with the interfaces of before its
    /// removal, or an update queued before it, would otherwise create an `INCOMPLETE` entry on
    /// an interface that no longer exists. For interfaces removed for good (their ids are not
    /// reused). Returns how many entries were deleted.
    pub fn retire(&mut self, iface: u16) -> usize {
        if !self.retired.contains(&iface) {
            self.retired.push(iface);
        }
        self.flush(Some(iface), true)
    }

    /// Runs one ageing chunk if at least `age_interval_ms` passed since the last: scans the
    /// next `age_chunk_buckets` buckets, turns `REACHABLE` into `STALE` and `INCOMPLETE` into
    /// `FAILED`, and removes expired `STALE` and `FAILED` entries. Returns how many were removed.
    pub fn age(&mut self, now: Tick) -> usize {
        let interval = self.cfg.age_interval_ms.max(MIN_AGE_INTERVAL_MS);
        if self.last_age.is_some_and(|last| now < last + interval) {
            return 0;
        }
        self.last_age = Some(now);
        let g = pin();
        let t = &self.shared.table;
        let cfg = &self.cfg;
        let stats = &self.shared.stats;
        let chunk = cfg.age_chunk_buckets.min(t.buckets.len());
        let mut removed = 0;
        for _ in 0..chunk {
            let (_, d) = t.remove_where(self.cursor, &g, |n| {
                let (mac, state) = unpack(n.word.load(Ordering::Relaxed));
                let age = now.saturating_sub(n.updated.load(Ordering::Relaxed));
                match state {
                    NeighState::Reachable if age >= cfg.reachable_ms => {
                        n.word.store(pack(mac, NeighState::Stale), Ordering::Release);
                        stats.to_stale.inc();
                        age >= cfg.gc_stale_ms
                    }
                    NeighState::Stale => age >= cfg.gc_stale_ms,
                    NeighState::Incomplete if age >= cfg.incomplete_ms => {
                        n.updated.store(now, Ordering::Relaxed);
                        n.word.store(pack(mac, NeighState::Failed), Ordering::Release);
                        stats.to_failed.inc();
                        false
                    }
                    NeighState::Failed => age >= cfg.failed_ms,
                    _ => false,
                }
            });
            removed += d;
            self.cursor = (self.cursor + 1) & t.mask;
        }
        self.dynamic -= removed;
        stats.removed.add(removed as u64);
        removed
    }

    /// One round of the writer thread's loop: apply pending updates (bounded) and run an
    /// ageing chunk if due. Returns the number of updates applied.
    pub fn service(&mut self, now: Tick) -> usize {
        let n = self.drain_queue(now, 65_536);
        self.age(now);
        n
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
    }
    const M: [u8; 6] = [2, 0, 0, 0, 0, 9];

    #[test]
    fn pack_round_trips() {
        for s in [
            NeighState::Incomplete,
            NeighState::Reachable,
            NeighState::Stale,
            NeighState::Failed,
            NeighState::Permanent,
        ] {
            assert_eq!(unpack(pack(M, s)), (M, s));
        }
    }

    #[test]
    fn states_follow_the_clock() {
        let cfg = NeighConfig {
            age_chunk_buckets: 1 << 20,
            ..Default::default()
        };
        let (n, mut w) = new_seeded(cfg.clone(), 1);
        let g = n.pin();
        assert_eq!(w.learn(ip(1), 0, M, true, 0), Learned::Created);
        assert!(w.resolve(ip(2), 0, 0));
        assert!(!w.resolve(ip(1), 0, 0));
        w.add_static(ip(3), 0, M, 0).unwrap();
        assert_eq!(w.learn(ip(3), 0, [2, 0, 0, 0, 0, 1], true, 0), Learned::Static);
        assert_eq!(n.lookup(ip(1), 0, &g).unwrap().state, NeighState::Reachable);
        assert_eq!(n.lookup(ip(1), 1, &g), None, "keyed by interface too");
        w.age(cfg.incomplete_ms);
        assert_eq!(n.lookup(ip(2), 0, &g).unwrap().state, NeighState::Failed);
        w.age(cfg.incomplete_ms + cfg.failed_ms);
        assert_eq!(n.lookup(ip(2), 0, &g), None);
        w.age(cfg.reachable_ms);
        assert_eq!(n.lookup(ip(1), 0, &g).unwrap().state, NeighState::Stale);
        assert!(n.lookup(ip(1), 0, &g).unwrap().state.usable());
        assert_eq!(w.learn(ip(1), 0, M, false, cfg.reachable_ms + 5), Learned::Confirmed);
        assert_eq!(n.lookup(ip(1), 0, &g).unwrap().state, NeighState::Reachable);
        w.age(10 * cfg.gc_stale_ms);
        assert_eq!(n.lookup(ip(1), 0, &g), None);
        assert_eq!(n.lookup(ip(3), 0, &g).unwrap().state, NeighState::Permanent);
        assert_eq!(n.len(), 1);
        assert_eq!(w.dynamic_len(), 0);
    }
}
