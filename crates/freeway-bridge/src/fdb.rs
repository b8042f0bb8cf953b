//! The forwarding database: (MAC, VLAN) → port.
//!
//! # Who does what
//!
//! * **Workers** hold an [`Fdb`] (cheap to clone). They look up sources and destinations
//!   lock-free, refresh timestamps at most once per tick, apply MAC moves in place, and ask
//!   for new addresses to be learned by pushing a [`LearnRequest`] onto a bounded lock-free
//!   queue ([`freeway_sync::Mailbox`]). A full queue is counted (`learn_queue_full`) and
//!   the request dropped: the next frame from that host asks again. Workers never wait. A queued request also rings the writer's
//!   doorbell ([`FdbWriter::doorbell`], a one-slot channel): the writer's thread waits on it
//!   between rounds, so a new address is learned at once instead of after the thread's nap
//!   (its frames to it are flooded until then). Ringing a bell already rung is a few loads
//!   and a fence, no shared write; the futex wake-up happens only when the writer is asleep
//!   on it, at most once per nap, never once per frame.
//! * **The FDB writer** ([`FdbWriter`], exactly one, not `Clone`) is the only thread that
//!   changes the table's shape: it drains learn requests (enforcing the learning limit, counting
//!   refusals), adds and deletes configured entries, flushes, and ages learned entries in
//!   bounded chunks at least [`MIN_AGE_INTERVAL_MS`] apart. Lookups never check expiry.
//!
//! In a live run the writer lives on the background "fdb" thread. Offline runs (one worker
//! reading a pcap) and tests may instead own the writer on the worker thread and apply each
//! request immediately ([`FdbWriter::learn`]), which makes forwarding deterministic.
//!
//! # Bounds
//!
//! Learned entries ≤ `learn_limit` (default 65,536); static entries ≤ `static_limit`
//! (default 4,096); learn queue ≤ `learn_queue` requests. The bucket array is sized once from
//! these bounds and never grows.

use std::sync::Arc;

use freeway_sync::Mailbox;
use freeway_sync::{Counter, Tick};
use serde::{Deserialize, Serialize};

use crate::layout::{Layout, Padded};
use crate::mac::Mac;
use crate::table::{key, pin, unkey, Guard, Node, Table};

/// Ageing never runs more often than this (ARCHITECTURE.md, fast-path rule 3).
pub const MIN_AGE_INTERVAL_MS: u64 = 10;

/// FDB settings (the `[bridge]` section of the config).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FdbConfig {
    /// Most learned entries; learning stops (and is counted) at this size.
    pub learn_limit: usize,
    /// Most static entries.
    pub static_limit: usize,
    /// A learned entry not seen as a source for this long is removed.
    pub ageing_ms: u64,
    /// Minimum time between two ageing chunks (at least [`MIN_AGE_INTERVAL_MS`]).
    pub age_interval_ms: u64,
    /// Buckets scanned per ageing chunk.
    pub age_chunk_buckets: usize,
    /// Capacity of the learn request queue.
    pub learn_queue: usize,
}

impl Default for FdbConfig {
    fn default() -> Self {
        FdbConfig {
            learn_limit: 65_536,
            static_limit: 4_096,
            ageing_ms: 300_000,
            age_interval_ms: MIN_AGE_INTERVAL_MS,
            age_chunk_buckets: 4_096,
            learn_queue: 4_096,
        }
    }
}

impl FdbConfig {
    /// Checks the settings; the error names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        if self.learn_limit == 0 || self.learn_limit > 1 << 24 {
            return Err(format!(
                "learn_limit must be between 1 and {} (got {})",
                1 << 24,
                self.learn_limit
            ));
        }
        if self.static_limit > 1 << 20 {
            return Err(format!(
                "static_limit must be at most {} (got {})",
                1 << 20,
                self.static_limit
            ));
        }
        if self.ageing_ms < 1_000 {
            return Err(format!("ageing_ms must be at least 1000 (got {})", self.ageing_ms));
        }
        if self.age_interval_ms < MIN_AGE_INTERVAL_MS {
            return Err(format!(
                "age_interval_ms must be at least {MIN_AGE_INTERVAL_MS} (got {})",
                self.age_interval_ms
            ));
        }
        if self.age_chunk_buckets == 0 {
            return Err("age_chunk_buckets must be at least 1".into());
        }
        if self.learn_queue == 0 || self.learn_queue > 1 << 20 {
            return Err(format!(
                "learn_queue must be between 1 and {} (got {})",
                1 << 20,
                self.learn_queue
            ));
        }
        Ok(())
    }
}

/// A worker's request to learn `key` on `port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnRequest {
    /// Packed (MAC, VLAN), see [`crate::table::key`].
    pub key: u64,
    /// Ingress port.
    pub port: u16,
}

/// Counters kept by the writer (single writer: the FDB thread).
#[derive(Debug, Default)]
pub struct FdbStats {
    /// Entries learned.
    pub learned: Counter,
    /// Learn requests refused because `learn_limit` was reached.
    pub limit_reached: Counter,
    /// Entries removed by ageing.
    pub aged: Counter,
    /// Entries removed by delete or flush.
    pub deleted: Counter,
    /// Learned entries moved to another port by the writer.
    pub moved: Counter,
    /// Static entries refused because `static_limit` was reached.
    pub static_limit_reached: Counter,
}

/// One entry as shown by dumps.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FdbEntry {
    /// Address.
    pub mac: Mac,
    /// VLAN.
    pub vlan: u16,
    /// Port index.
    pub port: u16,
    /// Configured (never ages).
    #[serde(rename = "static")]
    pub is_static: bool,
    /// Milliseconds since last seen as a source.
    pub updated_ms_ago: u64,
    /// Milliseconds since last used as a destination.
    pub used_ms_ago: u64,
}

/// Errors from FDB control operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FdbError {
    /// The learning limit is reached.
    LearnLimit,
    /// The static entry limit is reached.
    StaticLimit,
    /// Group addresses cannot be FDB entries.
    MulticastAddress(Mac),
    /// VLAN outside 1..=4094.
    BadVlan(u16),
}

impl std::fmt::Display for FdbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FdbError::LearnLimit => write!(f, "learning limit reached"),
            FdbError::StaticLimit => write!(f, "static entry limit reached"),
            FdbError::MulticastAddress(m) => write!(f, "{m} is a group address and cannot be an FDB entry"),
            FdbError::BadVlan(v) => write!(f, "VLAN {v} is outside 1..=4094"),
        }
    }
}

impl std::error::Error for FdbError {}

struct Shared<L: Layout> {
    table: Table<L>,
    /// Workers' requests and the writer's doorbell.
    queue: Mailbox<LearnRequest>,
    stats: FdbStats,
}

/// The read side of the FDB, handed to workers and dumps. Cheap to clone.
pub struct Fdb<L: Layout = Padded> {
    shared: Arc<Shared<L>>,
}

impl<L: Layout> Clone for Fdb<L> {
    fn clone(&self) -> Self {
        Fdb {
            shared: self.shared.clone(),
        }
    }
}

/// The write side of the FDB. Exactly one exists per table.
pub struct FdbWriter<L: Layout = Padded> {
    shared: Arc<Shared<L>>,
    cfg: FdbConfig,
    learned: usize,
    statics: usize,
    cursor: usize,
    last_age: Option<Tick>,
    /// The multicast database's writer, serviced with the FDB's (same thread).
    mdb: Option<crate::mdb::MdbWriter>,
    /// Ports retired for good ([`FdbWriter::retire_port`]): learning on them is refused.
    /// Empty unless ports were removed from a running bridge, so the check costs a length test.
    retired: Vec<u16>,
}

/// Creates an FDB: the shared read side and its single writer.
pub fn new<L: Layout>(cfg: FdbConfig) -> (Fdb<L>, FdbWriter<L>) {
    let seed = {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
    };
    new_seeded(cfg, seed)
}

/// Like [`new`] with a fixed hash seed (tests, reproducible benchmarks).
pub fn new_seeded<L: Layout>(cfg: FdbConfig, seed: u64) -> (Fdb<L>, FdbWriter<L>) {
    let buckets = cfg.learn_limit + cfg.static_limit;
    let shared = Arc::new(Shared {
        table: Table::new(buckets, seed),
        queue: Mailbox::new(cfg.learn_queue),
        stats: FdbStats::default(),
    });
    (
        Fdb { shared: shared.clone() },
        FdbWriter {
            shared,
            cfg,
            learned: 0,
            statics: 0,
            cursor: 0,
            last_age: None,
            mdb: None,
            retired: Vec::new(),
        },
    )
}

impl<L: Layout> Fdb<L> {
    /// Enters a read-side section; pin once per batch.
    #[inline]
    pub fn pin(&self) -> Guard {
        pin()
    }

    /// The underlying table (for lookups with a precomputed bucket).
    #[inline(always)]
    pub fn table(&self) -> &Table<L> {
        &self.shared.table
    }

    /// Looks up `(mac, vlan)`.
    #[inline]
    pub fn lookup<'g>(&'g self, mac: Mac, vlan: u16, guard: &'g Guard) -> Option<&'g Node<L>> {
        self.shared.table.lookup(key(mac.0, vlan), guard)
    }

    /// Asks the writer to learn an address and rings its doorbell. Never blocks; `false` if
    /// the queue is full.
    #[inline]
    pub fn request_learn(&self, req: LearnRequest) -> bool {
        self.shared.queue.push(req)
    }

    /// Rings the writer's doorbell, as each queued learn request does; a caller that set the
    /// writer thread's stop flag rings it so that the thread sees the flag at once.
    #[inline]
    pub fn wake_writer(&self) {
        self.shared.queue.ring();
    }

    /// Requests waiting for the writer.
    pub fn pending(&self) -> usize {
        self.shared.queue.len()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.shared.table.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The writer's counters.
    pub fn stats(&self) -> &FdbStats {
        &self.shared.stats
    }

    /// A snapshot of every entry, sorted by VLAN then MAC.
    pub fn entries(&self, now: Tick) -> Vec<FdbEntry> {
        let g = self.pin();
        let mut v = Vec::with_capacity(self.len());
        self.shared.table.for_each(&g, |n| {
            let (mac, vlan) = unkey(n.key());
            let t = n.times();
            use freeway_sync::atomic::Ordering::Relaxed;
            v.push(FdbEntry {
                mac: Mac(mac),
                vlan,
                port: n.port(),
                is_static: n.is_static(),
                updated_ms_ago: now.saturating_sub(t.updated.load(Relaxed)),
                used_ms_ago: now.saturating_sub(t.used.load(Relaxed)),
            });
        });
        v.sort_by_key(|e| (e.vlan, e.mac));
        v
    }
}

/// What [`FdbWriter::learn`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// A new entry was created.
    New,
    /// The entry existed; it was refreshed (and moved if the port changed).
    Refreshed,
    /// Refused: the learning limit is reached.
    LimitReached,
    /// A static entry exists for this address; it was left alone.
    Static,
    /// Refused: the port was retired ([`FdbWriter::retire_port`]).
    RetiredPort,
}

impl<L: Layout> FdbWriter<L> {
    /// A read handle on the same table.
    pub fn reader(&self) -> Fdb<L> {
        Fdb {
            shared: self.shared.clone(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &FdbConfig {
        &self.cfg
    }

    /// The doorbell: holds a message when a worker queued a learn request (or
    /// [`Fdb::wake_writer`] was called) since the writer last took it. The writer's thread
    /// waits on it between rounds, and takes the message *before* it drains the queue, so
    /// that a request queued after the drain rings again.
    pub fn doorbell(&self) -> &crossbeam_channel::Receiver<()> {
        self.shared.queue.bell()
    }

    /// Learned entries currently in the table.
    pub fn learned_len(&self) -> usize {
        self.learned
    }

    /// Takes on the multicast database's writer: [`FdbWriter::service`] services it too.
    pub fn attach_mdb(&mut self, w: crate::mdb::MdbWriter) {
        self.mdb = Some(w);
    }

    /// The multicast database's writer, when attached.
    pub fn mdb_mut(&mut self) -> Option<&mut crate::mdb::MdbWriter> {
        self.mdb.as_mut()
    }

    /// Learns `key` on `port` now (the writer's side of a [`LearnRequest`]).
    pub fn learn(&mut self, key: u64, port: u16, now: Tick) -> Learned {
        if !self.retired.is_empty() && self.retired.contains(&port) {
            return Learned::RetiredPort;
        }
        let g = pin();
        let stats = &self.shared.stats;
        if let Some(n) = self.shared.table.lookup(key, &g) {
            if n.is_static() {
                return Learned::Static;
            }
            if n.move_to(port) {
                stats.moved.inc();
            }
            n.touch_updated(now);
            return Learned::Refreshed;
        }
        if self.learned >= self.cfg.learn_limit {
            stats.limit_reached.inc();
            return Learned::LimitReached;
        }
        self.shared.table.insert_new(key, port, false, now);
        self.learned += 1;
        stats.learned.inc();
        Learned::New
    }

    /// Applies up to `max` queued learn requests. Returns how many were taken off the queue.
    pub fn drain_learn_queue(&mut self, now: Tick, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(r) = self.shared.queue.pop() else { break };
            self.learn(r.key, r.port, now);
            n += 1;
        }
        n
    }

    /// Adds or replaces a static entry (never ages, never moves).
    pub fn add_static(&mut self, mac: Mac, vlan: u16, port: u16, now: Tick) -> Result<(), FdbError> {
        if mac.is_multicast() {
            return Err(FdbError::MulticastAddress(mac));
        }
        if vlan == 0 || vlan > 4094 {
            return Err(FdbError::BadVlan(vlan));
        }
        let k = key(mac.0, vlan);
        let g = pin();
        let existing = self.shared.table.lookup(k, &g).map(|n| n.is_static());
        if existing != Some(true) && self.statics >= self.cfg.static_limit {
            self.shared.stats.static_limit_reached.inc();
            return Err(FdbError::StaticLimit);
        }
        // An existing entry is replaced in place, never removed first: a lookup in between
        // would find nothing and flood (found by the churn oracle, `freeway stress churn`).
        match existing {
            // Same address: replace (the port may differ).
            Some(true) => {
                self.shared.table.replace(k, port, true, now, &g);
            }
            // A learned entry becomes static.
            Some(false) => {
                self.shared.table.replace(k, port, true, now, &g);
                self.learned -= 1;
                self.statics += 1;
            }
            None => {
                self.shared.table.insert_new(k, port, true, now);
                self.statics += 1;
            }
        }
        Ok(())
    }

    fn remove_key(&self, k: u64, g: &Guard) -> usize {
        let t = &self.shared.table;
        t.remove_where(t.bucket_of(k), g, |n| n.key() == k)
    }

    /// Deletes an entry (static or learned). Returns whether it existed.
    pub fn delete(&mut self, mac: Mac, vlan: u16) -> bool {
        let k = key(mac.0, vlan);
        let g = pin();
        let Some(was_static) = self.shared.table.lookup(k, &g).map(|n| n.is_static()) else {
            return false;
        };
        self.remove_key(k, &g);
        if was_static {
            self.statics -= 1;
        } else {
            self.learned -= 1;
        }
        self.shared.stats.deleted.inc();
        true
    }

    /// Retires `port` for good: every entry on it goes (static ones too), and learning on it
    /// is refused from now on, so a learn request a worker queued before the port stopped
    /// cannot bring an entry back. A removed port's number is never given to another port,
    /// so the refusal never hides a live one. Returns how many entries went.
    pub fn retire_port(&mut self, port: u16) -> usize {
        if !self.retired.contains(&port) {
            self.retired.push(port);
        }
        self.remove_counted(|n| n.port() == port)
    }

    /// Removes learned entries (and static ones too if `include_static`). Returns the count.
    pub fn flush(&mut self, include_static: bool) -> usize {
        self.remove_counted(|n| include_static || !n.is_static())
    }

    /// Removes every entry `pred` picks, keeping the learned and static counts. The count.
    fn remove_counted(&mut self, mut pred: impl FnMut(&crate::table::Node<L>) -> bool) -> usize {
        let g = pin();
        let t = &self.shared.table;
        let (mut l, mut s) = (0, 0);
        for b in 0..t.buckets() {
            t.remove_where(b, &g, |n| {
                let hit = pred(n);
                if hit {
                    if n.is_static() {
                        s += 1
                    } else {
                        l += 1
                    }
                }
                hit
            });
        }
        self.learned -= l;
        self.statics -= s;
        self.shared.stats.deleted.add((l + s) as u64);
        l + s
    }

    /// Runs one ageing chunk if at least `age_interval_ms` passed since the last one:
    /// scans the next `age_chunk_buckets` buckets and removes learned entries not seen as a
    /// source for `ageing_ms`. Returns how many were removed.
    pub fn age(&mut self, now: Tick) -> usize {
        let interval = self.cfg.age_interval_ms.max(MIN_AGE_INTERVAL_MS);
        if let Some(last) = self.last_age {
            if now < last + interval {
                return 0;
            }
        }
        self.last_age = Some(now);
        let g = pin();
        let t = &self.shared.table;
        let ageing = self.cfg.ageing_ms;
        let mut removed = 0;
        let chunk = self.cfg.age_chunk_buckets.min(t.buckets());
        for _ in 0..chunk {
            removed += t.remove_where(self.cursor, &g, |n| {
                use freeway_sync::atomic::Ordering::Relaxed;
                !n.is_static() && now.saturating_sub(n.times().updated.load(Relaxed)) >= ageing
            });
            self.cursor = (self.cursor + 1) % t.buckets();
        }
        self.learned -= removed;
        self.shared.stats.aged.add(removed as u64);
        removed
    }

    /// One round of the writer thread's loop: apply pending learn requests (bounded) and run
    /// an ageing chunk if due. Returns the number of requests applied.
    pub fn service(&mut self, now: Tick) -> usize {
        let n = self.drain_learn_queue(now, 65_536);
        self.age(now);
        n + self.mdb.as_mut().map_or(0, |m| m.service(now))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn mac(i: u32) -> Mac {
        let b = i.to_be_bytes();
        Mac([0x02, 0, b[0], b[1], b[2], b[3]])
    }

    /// A padded table and its writer under `cfg`, with the tests' hash seed.
    fn seeded(cfg: FdbConfig) -> (Fdb<Padded>, FdbWriter<Padded>) {
        new_seeded(cfg, 7)
    }

    #[test]
    fn learn_limit_is_enforced_and_counted() {
        let (fdb, mut w) = seeded(FdbConfig {
            learn_limit: 10,
            ..Default::default()
        });
        for i in 0..25 {
            w.learn(key(mac(i).0, 1), 1, 0);
        }
        assert_eq!(fdb.len(), 10);
        assert_eq!(fdb.stats().limit_reached.get(), 15);
        // Static entries do not count against the learning limit.
        w.add_static(mac(1000), 1, 2, 0).unwrap();
        assert_eq!(fdb.len(), 11);
    }

    #[test]
    fn ageing_runs_in_chunks_no_more_than_every_10ms() {
        let (fdb, mut w) = seeded(FdbConfig {
            ageing_ms: 1_000,
            age_chunk_buckets: 1 << 20,
            ..Default::default()
        });
        for i in 0..100 {
            w.learn(key(mac(i).0, 1), 1, 0);
        }
        w.add_static(mac(5000), 1, 3, 0).unwrap();
        // Entry 0 stays fresh.
        fdb.lookup(mac(0), 1, &fdb.pin()).unwrap().touch_updated(900);
        assert_eq!(w.age(995), 0);
        // Too soon after the previous chunk: nothing happens even though entries expired.
        assert_eq!(w.age(1_000), 0);
        assert_eq!(w.age(1_005), 99);
        assert_eq!(fdb.len(), 2);
        assert!(
            fdb.lookup(mac(5000), 1, &fdb.pin()).is_some(),
            "static entries never age"
        );
        assert_eq!(fdb.stats().aged.get(), 99);
    }

    #[test]
    fn a_retired_port_loses_its_entries_and_learns_nothing_more() {
        let (fdb, mut w) = seeded(FdbConfig::default());
        w.learn(key(mac(1).0, 1), 4, 0);
        w.learn(key(mac(2).0, 1), 5, 0);
        w.add_static(mac(3), 1, 4, 0).unwrap();
        // A request queued by a worker before the port stopped ...
        assert!(fdb.request_learn(LearnRequest {
            key: key(mac(4).0, 1),
            port: 4,
        }));
        assert_eq!(w.retire_port(4), 2);
        // ... is refused when the writer comes to it; other ports learn as before.
        assert_eq!(w.drain_learn_queue(0, 10), 1);
        assert_eq!(w.learn(key(mac(1).0, 1), 4, 1), Learned::RetiredPort);
        assert_eq!(w.learn(key(mac(6).0, 1), 5, 1), Learned::New);
        assert_eq!((fdb.len(), w.learned_len()), (2, 2));
        assert!(fdb.entries(1).iter().all(|e| e.port == 5));
    }

    #[test]
    fn queue_is_bounded_and_drained() {
        let (fdb, mut w) = seeded(FdbConfig {
            learn_queue: 4,
            ..Default::default()
        });
        let ok = (0..10)
            .filter(|i| {
                fdb.request_learn(LearnRequest {
                    key: key(mac(*i).0, 1),
                    port: 1,
                })
            })
            .count();
        assert_eq!(ok, 4);
        assert_eq!(w.drain_learn_queue(0, 100), 4);
        assert_eq!(fdb.len(), 4);
    }

    #[test]
    fn a_queued_request_rings_the_doorbell_which_holds_one_ring_until_taken() {
        let (fdb, mut w) = seeded(FdbConfig {
            learn_queue: 2,
            ..Default::default()
        });
        let req = |i| LearnRequest {
            key: key(mac(i).0, 1),
            port: 1,
        };
        assert!(w.doorbell().is_empty());
        assert!(fdb.request_learn(req(1)));
        assert!(fdb.request_learn(req(2)));
        // Rung twice, one ring waits.
        assert_eq!(w.doorbell().len(), 1);
        assert!(w.doorbell().try_recv().is_ok());
        // A request refused by a full queue does not ring: the writer has nothing new to do.
        assert!(!fdb.request_learn(req(3)));
        assert!(w.doorbell().is_empty());
        assert_eq!(w.drain_learn_queue(0, 10), 2);
        // A request queued after the writer took the ring rings again.
        assert!(fdb.request_learn(req(4)));
        assert_eq!(w.doorbell().len(), 1);
        // So does a caller that wants the writer's thread to look at its stop flag.
        assert!(w.doorbell().try_recv().is_ok());
        fdb.wake_writer();
        assert_eq!(w.doorbell().len(), 1);
        assert_eq!(w.drain_learn_queue(0, 10), 1);
        assert_eq!(fdb.len(), 3);
    }

    #[test]
    fn replacing_an_entry_never_leaves_it_missing() {
        // Found by the churn oracle (`freeway stress churn`): `fdb add` over an existing
        // entry removed it and inserted the new one, so a worker could find no entry in
        // between and flood a frame to ports that were valid in neither version.
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let (fdb, mut w) = seeded(FdbConfig::default());
        let k = key(mac(1).0, 1);
        w.add_static(mac(1), 1, 1, 0).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (missing, looked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (fdb, stop, missing, looked) = (fdb.clone(), stop.clone(), missing.clone(), looked.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let g = fdb.pin();
                        match fdb.table().lookup(k, &g) {
                            Some(n) => assert!(matches!(n.port(), 1 | 2), "port {}", n.port()),
                            None => {
                                missing.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        looked.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for i in 0..200_000u32 {
            w.add_static(mac(1), 1, 1 + (i % 2) as u16, 0).unwrap();
            if i % 1024 == 0 {
                // A learned entry made static takes the same path.
                assert!(w.delete(mac(2), 1) || i == 0);
                w.learn(key(mac(2).0, 1), 3, 0);
                w.add_static(mac(2), 1, 3, 0).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert!(looked.load(Ordering::Relaxed) > 0);
        assert_eq!(
            missing.load(Ordering::Relaxed),
            0,
            "lookups found no entry mid-replacement"
        );
        assert_eq!(w.learned_len(), 0);
        assert_eq!(fdb.len(), 2);
    }

    #[test]
    fn static_entries_refuse_bad_input() {
        let (_fdb, mut w) = seeded(FdbConfig::default());
        assert_eq!(
            w.add_static(Mac::BROADCAST, 1, 1, 0),
            Err(FdbError::MulticastAddress(Mac::BROADCAST))
        );
        assert_eq!(w.add_static(mac(1), 4095, 1, 0), Err(FdbError::BadVlan(4095)));
        assert_eq!(w.add_static(mac(1), 0, 1, 0), Err(FdbError::BadVlan(0)));
    }
}
