//! Taps: copies of the packets crossing a port, filtered, handed to a writer thread.
//!
//! # Who touches what
//!
//! * **Control plane** (any thread, through [`Taps`] or [`crate::locked::LockedTaps`]):
//!   [`TapRegistry::attach`], [`TapRegistry::detach`], [`TapRegistry::replace_filter`].
//!   Control-plane calls are serialised among themselves by a mutex that **no worker ever
//!   takes**.
//! * **Workers** (one [`TapRegistry::Worker`] handle per worker index, claimed once; it
//!   holds the worker's [`crate::ring::ProducerKey`], the only way to push into the
//!   worker's ring of any tap): call
//!   [`TapPoint::tap`] on every batch with the port index, the direction and a timestamp.
//!   The [`Taps`] variant keeps a counted reference to the list it last read and the list's
//!   generation: while nothing changes, a batch costs one load of the shared generation
//!   word, one compare and a test of the cached list's port masks (with no tap attached,
//!   nothing more). When the generation moved, the worker pins an epoch once to take the
//!   new list. For each tap on the batch's port and direction it runs the tap's filter;
//!   matches are copied (up to the snap length) into that tap's ring for this
//!   worker ([`crate::ring::Ring`], single producer, single consumer), a batch's matches
//!   reserved and published at once. A full ring drops the copies that do not fit and counts
//!   them. Workers never wait.
//! * **Writer** (one thread per tap, [`crate::writer::TapWriter`]): drains the tap's rings.
//!   When it has found nothing for a while it parks; a worker that pushes into a ring then
//!   wakes it (one load of the tap's `parked` flag per batch that matched), and so does
//!   closing the tap. An idle capture wakes no thread, so on a machine with no spare core
//!   it preempts no worker.
//!
//! # Publication ([`Taps`])
//!
//! The tap list is immutable once published: attach, detach and filter replacement build a
//! new list (sharing the unchanged taps through `Arc`) and swap it in with one `AcqRel`
//! pointer swap, then bump the generation; the old pointer is freed by crossbeam-epoch after
//! every worker that might still read it has unpinned, and the list itself (an `Arc`) when
//! the last worker cache holding it has moved on (at its next batch, or its next idle poll
//! when traffic stopped). This is the FreeBSD change in seed 002 (the rwlock on the tap path
//! replaced by epoch(9) and a program buffer swapped without the interface lock). The
//! orderings of the swap and the generation are model-checked on a replica in
//! `tests/loom_ring.rs` (`tap_list_generation_cache`).
//!
//! # Closing
//!
//! A tap is closed (detach, count reached, write error) by setting its `closed` flag; each
//! worker brackets its pushes into the tap's ring with the ring's `busy` flag (see
//! [`crate::ring::Producer::enter`]), so once the writer has seen `closed` and then every
//! ring not busy, nothing more arrives and its final drain is complete:
//! `matched == written + dropped + discarded` exactly.

use std::fmt;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;

use crossbeam_epoch::{self as epoch, Atomic, Owned};
use freeway_packet::Packet;
use freeway_sync::CachePadded;

use crate::bpf::vm::LANES;
use crate::filter::Filter;
use crate::ring::{Claims, Consumer, ConsumerKey, ProducerKey, Ring, Rings};

/// Which packets of a port a tap sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Received on the port.
    Rx = 1,
    /// Transmitted on the port.
    Tx = 2,
    /// Both.
    Both = 3,
}

impl Direction {
    /// Whether a tap attached with `self` sees packets going `d`.
    #[inline]
    pub fn covers(self, d: Direction) -> bool {
        (self as u8) & (d as u8) != 0
    }
}

/// Identifies an attached tap.
pub type TapId = u64;

/// What to attach.
#[derive(Clone, Debug)]
pub struct TapSpec {
    /// Port index.
    pub port: u16,
    /// Direction(s).
    pub dir: Direction,
    /// Bytes kept per packet (also bounded by what the filter returns).
    pub snaplen: u32,
    /// Slots per worker ring (the bound on buffered packets per worker).
    pub ring_slots: usize,
    /// When a worker's ring is full, the worker waits for the writer to make room instead
    /// of dropping the copies (backpressure, for offline runs that must capture every
    /// packet; see [`TapShared`]). Default false: workers never wait.
    pub lossless: bool,
}

impl Default for TapSpec {
    /// Port 0, both directions, 262144-byte snap length capped to 2048 here (rings are
    /// preallocated), 1024 slots.
    fn default() -> Self {
        TapSpec {
            port: 0,
            dir: Direction::Both,
            snaplen: 2048,
            ring_slots: 1024,
            lossless: false,
        }
    }
}

/// Per-worker progress marks, each on its own cache line.
pub(crate) type Marks = Arc<[CachePadded<AtomicU64>]>;

/// Most memory the rings of one tap may take (slots × snaplen × workers).
pub const MAX_TAP_MEMORY: usize = 256 << 20;

/// Tap errors.
#[derive(Debug)]
pub enum TapError {
    /// No tap with this id.
    NoSuchTap(TapId),
    /// A bad [`TapSpec`].
    BadSpec(String),
    /// The output failed; the tap stopped (forwarding goes on).
    Write(std::io::Error),
}

impl fmt::Display for TapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TapError::NoSuchTap(id) => write!(f, "no tap with id {id}"),
            TapError::BadSpec(s) => write!(f, "bad tap: {s}"),
            TapError::Write(e) => write!(f, "tap output failed: {e}"),
        }
    }
}

impl std::error::Error for TapError {}

/// The part of a tap shared by workers (producers) and its writer (consumer).
#[derive(Debug)]
pub struct TapShared {
    id: TapId,
    port: u16,
    dir: Direction,
    snaplen: u32,
    /// One ring per worker, and the tap's `closed` flag.
    rings: Rings,
    /// Each worker's progress mark ([`TapPoint::progress`]), shared by every tap of the
    /// registry.
    marks: Marks,
    lossless: bool,
    /// Set by the writer while it sleeps waiting for packets ([`TapShared::wake_writer`]).
    parked: AtomicBool,
    /// The writer's thread, registered by [`crate::writer::TapWriter::run`].
    writer: OnceLock<Thread>,
}

impl TapShared {
    /// A tap with one ring per producer index of `claims`, and the key of its consumer.
    fn new(id: TapId, spec: &TapSpec, claims: &Claims, marks: Marks) -> (TapShared, ConsumerKey) {
        let (rings, key) = Rings::new(claims, spec.ring_slots, spec.snaplen as usize);
        let tap = TapShared {
            id,
            port: spec.port,
            dir: spec.dir,
            snaplen: spec.snaplen,
            rings,
            marks,
            lossless: spec.lossless,
            parked: AtomicBool::new(false),
            writer: OnceLock::new(),
        };
        (tap, key)
    }

    /// Writer side: registers the calling thread as the one that drains this tap, so that
    /// workers can wake it when it sleeps ([`TapShared::set_parked`]).
    pub(crate) fn register_writer(&self) {
        let _ = self.writer.set(std::thread::current());
    }

    /// Writer side: announces that the writer is about to sleep (`true`, then a `SeqCst`
    /// fence, then a last look at the rings) or is awake again (`false`).
    pub(crate) fn set_parked(&self, parked: bool) {
        self.parked.store(parked, Ordering::SeqCst);
        if parked {
            fence(Ordering::SeqCst);
        }
    }

    /// Worker side, after pushing into a ring: wakes the writer if it sleeps. One load of a
    /// line the writer writes only when it goes to sleep or wakes. Best effort: a push that
    /// races with the writer's last look at the rings may not wake it; the writer's sleep
    /// is bounded (`WriterOptions::park_timeout`), as libpcap's buffer timeout bounds
    /// tcpdump's.
    #[inline]
    fn wake_writer(&self) {
        if self.parked.load(Ordering::Relaxed) {
            if let Some(t) = self.writer.get() {
                t.unpark();
            }
        }
    }

    /// Marks the tap closed (the closer side of the close protocol,
    /// [`Rings::close`]) and wakes its writer so it notices at once.
    pub(crate) fn close(&self) {
        self.rings.close();
        if let Some(t) = self.writer.get() {
            t.unpark();
        }
    }

    /// The tap's id.
    pub fn id(&self) -> TapId {
        self.id
    }

    /// Port index.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Direction(s).
    pub fn dir(&self) -> Direction {
        self.dir
    }

    /// Snap length.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Worker `w`'s progress mark: it will push no packet older than this (`Acquire`: the
    /// pushes it made before setting the mark are visible after reading it). 0 until the
    /// worker first reports, `u64::MAX` once its handle is gone.
    pub(crate) fn mark(&self, w: usize) -> u64 {
        self.marks.get(w).map_or(u64::MAX, |m| m.load(Ordering::Acquire))
    }

    /// Whether workers wait for room instead of dropping ([`TapSpec::lossless`]).
    pub fn lossless(&self) -> bool {
        self.lossless
    }

    /// Packets run through the tap's filter (matched or not), over all workers: what
    /// tcpdump calls "received by filter".
    pub fn seen(&self) -> u64 {
        self.rings.rings().iter().map(Ring::seen).sum()
    }

    /// Packets that matched (pushed or dropped), over all workers.
    pub fn matched(&self) -> u64 {
        self.rings.rings().iter().map(|r| r.pushed() + r.dropped()).sum()
    }

    /// Packets dropped because a ring was full, over all workers.
    pub fn dropped(&self) -> u64 {
        self.rings.rings().iter().map(Ring::dropped).sum()
    }

    /// Whether the tap is closed.
    pub fn is_closed(&self) -> bool {
        self.rings.is_closed()
    }

    /// Closes the tap and waits until no worker is inside a push section: afterwards no
    /// packet will be added to any ring. Waits only for workers already copying (bounded
    /// by one batch), never for a worker to do anything new.
    pub fn close_and_quiesce(&self) {
        self.close();
        while self.rings.busy() {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    /// Worker side: runs `filter` over `frames` (at most [`LANES`], one batch run of the
    /// VM) and copies matches into the ring of `key`'s worker, each recorded at `ts` and as
    /// long on the wire as it is.
    #[inline]
    fn offer(&self, key: &mut ProducerKey, filter: &Filter, dir: Direction, frames: &[&[u8]], ts: u64) {
        let mut keep = [0u32; LANES];
        self.saw(key, frames.len());
        if filter.program().run_batch(frames, &mut keep) {
            self.push_matches(key, dir, &keep[..frames.len()], |i| {
                (frames[i], ts, frames[i].len() as u32)
            });
        }
    }

    /// [`TapShared::offer`] for packets (at most [`LANES`]): compiled filters read the
    /// frames straight from the packets; each is recorded at its receive time
    /// (`meta.ts_ns`, or `ts` when it has none) with its wire length
    /// ([`Packet::wire_len`]) as the original length.
    #[inline]
    fn offer_packets(&self, key: &mut ProducerKey, filter: &Filter, dir: Direction, pkts: &[Packet], ts: u64) {
        let mut keep = [0u32; LANES];
        self.saw(key, pkts.len());
        if filter.program().run_packets(pkts, &mut keep) {
            self.push_matches(key, dir, &keep[..pkts.len()], |i| {
                let p = &pkts[i];
                let t = if p.meta.ts_ns != 0 { p.meta.ts_ns } else { ts };
                (p.data(), t, p.wire_len())
            });
        }
    }

    /// Counts `n` packets seen by the filter on the ring of `key`'s worker.
    #[inline(always)]
    fn saw(&self, key: &mut ProducerKey, n: usize) {
        if let Some(mut p) = self.rings.producer(key) {
            p.saw(n);
        }
    }

    /// Copies packet `i` (`pkt(i)`: its bytes, timestamp and wire length), up to `keep[i]`
    /// bytes and the snap length, into the ring of `key`'s worker for every `keep[i]` that
    /// is not 0: the room is looked up once, the copies are published with one store, and
    /// what does not fit is counted as dropped at once. A lossless tap instead publishes
    /// what fits, wakes the writer and waits for room (giving up, and counting the rest as
    /// dropped, only if the tap closes meanwhile).
    #[cold]
    #[inline(never)]
    fn push_matches<'f>(
        &self,
        key: &mut ProducerKey,
        dir: Direction,
        keep: &[u32],
        pkt: impl Fn(usize) -> (&'f [u8], u64, u32),
    ) {
        let Some(mut producer) = self.rings.producer(key) else {
            return;
        };
        let matched = keep.iter().filter(|&&k| k != 0).count();
        if matched == 0 {
            return;
        }
        let Some(mut section) = producer.enter() else { return };
        let mut todo = keep.iter().enumerate().filter(|(_, &k)| k != 0);
        let mut left = matched;
        loop {
            let mut b = section.batch(left);
            for (i, &k) in todo.by_ref().take(b.len()) {
                let (frame, ts, wire) = pkt(i);
                let snap = k.min(self.snaplen) as usize;
                if !b.fill(ts, self.port, dir as u8, frame, wire, snap) {
                    break;
                }
            }
            left -= b.filled();
            if left == 0 || !self.lossless {
                b.commit(left);
                break;
            }
            // Lossless: publish what fits, let the writer drain, wait for room.
            b.commit(0);
            self.wake_writer();
            if section.is_closed() {
                section.refuse(left);
                break;
            }
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        drop(section);
        self.wake_writer();
    }
}

/// One attached tap in a published list: its shared part and its current filter.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) tap: Arc<TapShared>,
    pub(crate) filter: Arc<Filter>,
}

impl Entry {
    /// Worker side (the worker of `key`): offers `frames` (any number; run through the
    /// filter [`LANES`] at a time) if the tap is on this port and direction.
    #[inline]
    pub(crate) fn offer_frames(&self, key: &mut ProducerKey, port: u16, dir: Direction, frames: &[&[u8]], ts: u64) {
        if self.tap.port == port && self.tap.dir.covers(dir) {
            for chunk in frames.chunks(LANES) {
                self.tap.offer(key, &self.filter, dir, chunk, ts);
            }
        }
    }

    /// [`Entry::offer_frames`] for packets, [`LANES`] at a time (compiled filters read the
    /// frames straight from the packets). Both registries tap through here.
    #[inline]
    pub(crate) fn offer_packets(&self, key: &mut ProducerKey, port: u16, dir: Direction, pkts: &[Packet], ts: u64) {
        if self.tap.port == port && self.tap.dir.covers(dir) {
            for chunk in pkts.chunks(LANES) {
                self.tap.offer_packets(key, &self.filter, dir, chunk, ts);
            }
        }
    }
}

/// Control-plane operations a [`TapReader`] needs to detach its own tap.
pub(crate) trait Detach: Send + Sync {
    fn detach_id(&self, id: TapId) -> bool;
}

/// The consumer side of a tap, given to its writer ([`crate::writer::TapWriter`]).
pub struct TapReader {
    pub(crate) tap: Arc<TapShared>,
    /// The right to drain the tap's rings (one per tap).
    pub(crate) key: ConsumerKey,
    pub(crate) registry: Weak<dyn Detach>,
}

impl fmt::Debug for TapReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TapReader").field("tap", &self.tap.id).finish()
    }
}

impl TapReader {
    /// The tap.
    pub fn tap(&self) -> &TapShared {
        &self.tap
    }

    /// The tap and the consumer side of its rings: this reader holds the rings' one
    /// consumer key (made with them in [`Common::new_tap`]).
    pub(crate) fn consume(&mut self) -> (&TapShared, Consumer<'_>) {
        let rings = self
            .tap
            .rings
            .consumer(&mut self.key)
            .expect("a tap's reader holds the key of the tap's rings");
        (&self.tap, rings)
    }

    /// Closes the tap, detaches it from its registry (if still alive) and waits until no
    /// worker is pushing. Closed first: a worker waiting for room in a lossless tap's ring
    /// gives up, so it lets go of whatever it holds (the `RwLock` registry's read lock)
    /// before the registry is changed.
    pub fn detach(&self) {
        self.tap.close();
        if let Some(r) = self.registry.upgrade() {
            r.detach_id(self.tap.id);
        }
        self.tap.close_and_quiesce();
    }
}

/// The worker-facing API: called once per batch from a run-to-completion loop.
pub trait TapPoint: Send {
    /// Offers a batch seen on `port` going `dir` (`Rx` or `Tx`) to the taps. Each packet is
    /// recorded at its receive time (`meta.ts_ns`), or at `ts_ns` when it has none (a
    /// frame the datapath made), with its length on the wire ([`Packet::wire_len`]) as the
    /// original length.
    fn tap(&mut self, port: u16, dir: Direction, pkts: &[Packet], ts_ns: u64);

    /// The same for raw frames, all recorded at `ts_ns`.
    fn tap_frames(&mut self, port: u16, dir: Direction, frames: &[&[u8]], ts_ns: u64);

    /// Whether any tap is attached anywhere (the per-batch fast check).
    fn any(&self) -> bool;

    /// Called by an idle worker now and then: lets go of anything the handle caches that
    /// the control plane has since replaced (a detached tap's rings, an old filter).
    fn idle(&mut self) {}

    /// The worker's progress mark, for the writers' merge of the workers' rings by
    /// timestamp ([`crate::writer`]): a promise that no packet this worker offers from now
    /// on has a timestamp below `ts_ns`. A worker calls it once per poll of its queues
    /// while a tap is attached (one store to a line only it writes), with the time it read
    /// before receiving, or a received batch's timestamp. A worker that never calls it is
    /// waited for at most [`crate::WriterOptions::reorder_hold`] at a time.
    fn progress(&mut self, ts_ns: u64);
}

/// The control-plane API, implemented by the epoch variant ([`Taps`]) and the `RwLock`
/// variant ([`crate::locked::LockedTaps`]), so the runtime can be instantiated with either.
pub trait TapRegistry: Clone + Send + Sync + 'static {
    /// The per-worker handle.
    type Worker: TapPoint;

    /// A registry for `workers` worker threads.
    fn with_workers(workers: usize) -> Self;

    /// Claims worker handle `index` (`None` if out of range or already claimed; a handle
    /// releases its claim when dropped).
    fn worker(&self, index: usize) -> Option<Self::Worker>;

    /// Attaches a tap; returns its id and the reader for its writer thread.
    fn attach(&self, spec: TapSpec, filter: Filter) -> Result<(TapId, TapReader), TapError>;

    /// Replaces a tap's filter (takes effect at the workers' next batch).
    fn replace_filter(&self, id: TapId, filter: Filter) -> Result<(), TapError>;

    /// Detaches and closes a tap; false if there was none with this id.
    fn detach(&self, id: TapId) -> bool;

    /// Number of attached taps.
    fn active(&self) -> usize;
}

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

// ------------------------------------------------------------------ the epoch variant

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
            let bit = 1u64 << (e.tap.port % 64);
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

/// The tap registry with an epoch-published tap list: attach, detach and filter
/// replacement never block a worker. Cheap to clone (shared).
#[derive(Clone)]
pub struct Taps {
    inner: Arc<Inner>,
}

impl fmt::Debug for Taps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Taps").field("active", &self.active()).finish()
    }
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
/// it read it at (the per-worker route cache of seed 001, applied to taps): a batch costs
/// one load of the shared generation word and one compare while nothing changes, plus a
/// test of the cached list's port masks. Only when the generation moved does the worker
/// pin an epoch, read the published pointer and swap in the new list's `Arc`. A dropped
/// old list is freed by whichever holder lets go last (possibly this worker, once per
/// change).
pub struct TapWorker {
    inner: Arc<Inner>,
    /// The claim on this worker's index: the right to push into its rings.
    key: ProducerKey,
    /// The list this worker taps with.
    list: Arc<TapList>,
    /// The generation `list` was read at.
    generation: u64,
}

impl fmt::Debug for TapWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TapWorker").field("index", &self.key.index()).finish()
    }
}

impl Drop for TapWorker {
    fn drop(&mut self) {
        self.inner.common.release(self.key.index());
    }
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

    /// Offers the batch to the entries of `list` that tap `port`/`dir`, [`LANES`] packets
    /// at a time (compiled filters read the frames straight from the packets).
    #[inline(never)]
    fn offer(list: &TapList, key: &mut ProducerKey, port: u16, dir: Direction, pkts: &[Packet], ts: u64) {
        for e in &list.entries {
            e.offer_packets(key, port, dir, pkts, ts);
        }
    }
}

impl TapPoint for TapWorker {
    #[inline]
    fn tap(&mut self, port: u16, dir: Direction, pkts: &[Packet], ts_ns: u64) {
        self.revalidate();
        if !self.list.may_cover(port, dir) || pkts.is_empty() {
            return;
        }
        Self::offer(&self.list, &mut self.key, port, dir, pkts, ts_ns);
    }

    #[inline]
    fn tap_frames(&mut self, port: u16, dir: Direction, frames: &[&[u8]], ts_ns: u64) {
        self.revalidate();
        if !self.list.may_cover(port, dir) {
            return;
        }
        for e in &self.list.entries {
            e.offer_frames(&mut self.key, port, dir, frames, ts_ns);
        }
    }

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

    #[inline]
    fn progress(&mut self, ts_ns: u64) {
        self.inner.common.progress(self.key.index(), ts_ns);
    }
}

impl TapRegistry for Taps {
    type Worker = TapWorker;

    fn with_workers(workers: usize) -> Self {
        Taps::new(workers)
    }

    fn worker(&self, index: usize) -> Option<TapWorker> {
        let key = self.inner.common.claim(index)?;
        let mut w = TapWorker {
            inner: self.inner.clone(),
            key,
            list: Arc::default(),
            generation: 0,
        };
        w.refresh(self.inner.common.generation.load(Ordering::Acquire));
        Some(w)
    }

    fn attach(&self, spec: TapSpec, filter: Filter) -> Result<(TapId, TapReader), TapError> {
        let (tap, key) = self.inner.common.new_tap(&spec)?;
        let id = tap.id;
        let entry = Entry {
            tap: tap.clone(),
            filter: Arc::new(filter),
        };
        self.inner.update(|v| v.push(entry));
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        Ok((
            id,
            TapReader {
                tap,
                key,
                registry: weak,
            },
        ))
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
