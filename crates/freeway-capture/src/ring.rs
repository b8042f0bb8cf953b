//! A bounded single-producer single-consumer ring of packet copies, with fixed memory.
//!
//! Each tap has one ring per worker ([`Rings`]): the worker is the only producer, the tap's
//! writer thread the only consumer. Slots are allocated once (each with room for `slot_size`
//! bytes); a push copies into the next free slot, a full ring refuses the copy and counts it.
//! Nobody ever waits.
//!
//! # Who may touch a ring: enforced by the types
//!
//! * A producer index (a worker) is claimed once from a [`Claims`] table, which hands out
//!   at most one [`ProducerKey`] per index (not `Clone`, not `Sync`). Ring `i` of every
//!   [`Rings`] made with that table is written only through
//!   [`Rings::producer`]`(&mut key_i)`, so at most one [`Producer`] of a ring exists at a
//!   time. Its [`Producer::enter`] opens a [`Section`] of the close protocol (below), whose
//!   [`Section::batch`] reserves slots ([`Batch`]): [`Batch::fill`] copies packets in,
//!   [`Batch::commit`] (or dropping the batch) publishes them.
//! * [`Rings::new`] returns the set's one [`ConsumerKey`] (not `Clone`);
//!   [`Rings::consumer`]`(&mut key)` gives the [`Consumer`] ([`Consumer::peek_ts`],
//!   [`Consumer::pop`]).
//! * Everyone else reads counters only ([`Ring::pushed`], [`Ring::dropped`], ...).
//!
//! The `unsafe` code (reading and writing the records) is private to this module, behind
//! those handles.
//!
//! # Protocol
//!
//! * `head` (written by the producer only) counts pushed slots; `tail` (written by the
//!   consumer only) counts popped slots. Both only grow (wrapping `usize`).
//! * The producer fills slots `head % cap ..` and then publishes them with one `Release`
//!   store of `head + n` ([`Section::batch`], [`Batch::fill`], [`Batch::commit`]: a worker's
//!   matches of one batch are published at once); the consumer reads `head` with `Acquire`
//!   before reading a slot.
//! * The consumer reads slot `tail % cap` and then frees it with a `Release` store of
//!   `tail + 1`; the producer reads `tail` with `Acquire` before overwriting the slot.
//! * Each side keeps the other's index as it last read it (`tail_seen` in the producer's
//!   line, `head_seen` in the consumer's): `tail_seen <= tail` and `head_seen <= head`
//!   always, so what they promise (free slots, filled slots) is never more than there is.
//!   A side reads the other's line only when its copy says "full" or "empty", so while
//!   both run the two lines are not passed back and forth on every packet (the
//!   cached-index SPSC queue, as in Lamport's queue with FastForward's lesson).
//! * Counters `pushed`/`dropped` and the `busy` flag sit on the producer's cache line and
//!   are written only by the producer (plain load + store, no read-modify-write).
//! * Room is looked up once per [`Section::batch`]: the packets of a batch that do not fit
//!   are dropped and counted at once, even if the consumer frees slots meanwhile.
//! * Memory: one allocation of `cap` records, each a small header (timestamp, lengths,
//!   port, direction) followed by the bytes, 64-byte aligned. The producer only *writes*
//!   a record (no load from a line the consumer has just read, which would stall the worker
//!   on a cache miss; stores to such lines wait in the store buffer instead), and the
//!   records of a batch are consecutive lines. Written by hand rather than with a crate
//!   (`rtrb`, `crossbeam::ArrayQueue`) because those queue values: here a slot is a
//!   variable-length byte record copied in place, published a batch at a time, with the
//!   close protocol below.
//! * The close protocol (each ring's `busy` + the set's `closed` flag, both `SeqCst`) lets
//!   the writer know that no push is in flight before its final drain (see
//!   [`Producer::enter`], [`Rings::close`]).
//!
//! The protocol is model-checked in `tests/loom_ring.rs`.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;

use freeway_sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use freeway_sync::CachePadded;

#[cfg(loom)]
use loom::cell::UnsafeCell;

#[cfg(not(loom))]
#[derive(Debug)]
struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }
    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// One captured packet, as the consumer sees it in its slot (valid while the slot is
/// borrowed, see [`Consumer::pop`]).
#[derive(Debug)]
pub struct Slot<'a> {
    /// Timestamp (ns since the Unix epoch, or whatever clock the caller uses).
    pub ts_ns: u64,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// Bytes captured (`data[..cap_len]`).
    pub cap_len: u32,
    /// Direction tag (see [`crate::tap::Direction`] as `u8`).
    pub dir: u8,
    /// Port index.
    pub port: u16,
    data: &'a [u8],
}

impl Slot<'_> {
    /// The captured bytes.
    pub fn data(&self) -> &[u8] {
        self.data
    }
}

/// The header at the start of each record.
#[derive(Clone, Copy)]
#[repr(C)]
struct Header {
    ts_ns: u64,
    orig_len: u32,
    cap_len: u32,
    port: u16,
    dir: u8,
}

/// Bytes of a record before the packet's bytes.
const HEADER: usize = std::mem::size_of::<Header>().next_multiple_of(8);

/// The unit of the records' allocation: 64 bytes, 64-byte aligned, interior mutability.
#[repr(C, align(64))]
struct Line(std::cell::UnsafeCell<[u8; 64]>);

#[derive(Debug)]
struct Prod {
    head: AtomicUsize,
    /// The consumer's `tail` as the producer last read it (producer only).
    tail_seen: AtomicUsize,
    pushed: AtomicU64,
    dropped: AtomicU64,
    /// Packets the producer ran through the tap's filter (matched or not).
    seen: AtomicU64,
    busy: AtomicBool,
}

#[derive(Debug)]
struct Cons {
    tail: AtomicUsize,
    /// The producer's `head` as the consumer last read it (consumer only).
    head_seen: AtomicUsize,
}

/// The ring: one producer, one consumer (see the module documentation for the handles that
/// give access to either side). Shared references give its counters only.
#[derive(Debug)]
pub struct Ring {
    prod: CachePadded<Prod>,
    cons: CachePadded<Cons>,
    /// `cap` records of `stride` bytes (a multiple of 64): header, then up to `slot_size`
    /// bytes of the packet.
    mem: Box<[Line]>,
    stride: usize,
    cap: usize,
    /// Loom's view of the records (one cell per slot, written by `Batch::fill`, read by
    /// `Consumer::pop` and `Consumer::peek_ts`), so the models check the publication of the
    /// bytes kept in `mem`; a zero-sized no-op outside loom.
    cells: Box<[UnsafeCell<()>]>,
    slot_size: usize,
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Line")
    }
}

// SAFETY: records are only accessed under the SPSC protocol above: a record is written only by
// the single producer (the holder of the ring's `Producer`) while it is free (head - tail <
// cap, checked with Acquire on tail) and read only by the single consumer (the holder of the
// `Consumer`) after publication (Acquire on head). Everything else is atomics.
unsafe impl Sync for Ring {}
// SAFETY: the ring owns its slots; moving it between threads moves plain data.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of `capacity` slots (at least 1) of `slot_size` bytes each.
    fn new(capacity: usize, slot_size: usize) -> Ring {
        let cap = capacity.max(1);
        let stride = (HEADER + slot_size).next_multiple_of(64);
        let lines = cap.checked_mul(stride / 64).expect("ring size overflows");
        Ring {
            prod: CachePadded::new(Prod {
                head: AtomicUsize::new(0),
                tail_seen: AtomicUsize::new(0),
                pushed: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                seen: AtomicU64::new(0),
                busy: AtomicBool::new(false),
            }),
            cons: CachePadded::new(Cons {
                tail: AtomicUsize::new(0),
                head_seen: AtomicUsize::new(0),
            }),
            mem: (0..lines).map(|_| Line(std::cell::UnsafeCell::new([0; 64]))).collect(),
            stride,
            cap,
            cells: (0..cap).map(|_| UnsafeCell::new(())).collect(),
            slot_size,
        }
    }

    /// The record of slot `idx` (< `cap`).
    fn record(&self, idx: usize) -> *mut u8 {
        debug_assert!(idx < self.cap);
        // `raw_get` keeps the provenance of the whole allocation; `idx * stride` stays inside
        // it (`idx < cap`, `cap * stride` bytes).
        std::cell::UnsafeCell::raw_get(self.mem.as_ptr().cast::<std::cell::UnsafeCell<[u8; 64]>>())
            .cast::<u8>()
            .wrapping_add(idx * self.stride)
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes per slot (longer packets are cut).
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Packets pushed so far.
    pub fn pushed(&self) -> u64 {
        self.prod.pushed.load(Ordering::Relaxed)
    }

    /// Packets refused because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.prod.dropped.load(Ordering::Relaxed)
    }

    /// Packets the producer offered to the tap's filter ([`Producer::saw`]), matched or not.
    pub fn seen(&self) -> u64 {
        self.prod.seen.load(Ordering::Relaxed)
    }

    /// Slots currently filled (approximate while both sides run).
    pub fn len(&self) -> usize {
        let head = self.prod.head.load(Ordering::Acquire);
        let tail = self.cons.tail.load(Ordering::Acquire);
        head.wrapping_sub(tail)
    }

    /// Whether no slot is filled (approximate while both sides run).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a producer section ([`Producer::enter`]) is in flight (closer side of the
    /// close protocol, after [`Rings::close`]). `Acquire`: once it reads false, the pushes of
    /// the section that ended are visible.
    pub fn busy(&self) -> bool {
        self.prod.busy.load(Ordering::Acquire)
    }

    /// Adds to a producer counter. Single writer (the producer): a plain load and store, no
    /// locked read-modify-write.
    fn add(c: &AtomicU64, n: usize) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n as u64), Ordering::Relaxed);
    }

    /// Consumer: whether a filled slot is waiting at `tail` (reading the producer's index
    /// only when the last look shows none).
    fn filled_at(&self, tail: usize) -> bool {
        if tail != self.cons.head_seen.load(Ordering::Relaxed) {
            return true;
        }
        let head = self.prod.head.load(Ordering::Acquire);
        self.cons.head_seen.store(head, Ordering::Relaxed);
        head != tail
    }
}

/// Source of the identities that tie [`ProducerKey`]s to their [`Claims`] table and a
/// [`ConsumerKey`] to its [`Rings`]: taken once per table or ring set, never per packet (a
/// plain `std` counter, also under loom: it is not part of the modelled protocol).
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The producer claims of a set of producers (one per index: the workers): whoever holds the
/// [`ProducerKey`] of index `i` is the only producer of ring `i` of every [`Rings`] made
/// with this table. Shared (`Arc`) by the keys and their registry.
#[derive(Debug)]
pub struct Claims {
    id: u64,
    taken: Box<[AtomicBool]>,
}

impl Claims {
    /// A table of `producers` indices, none claimed.
    pub fn new(producers: usize) -> Arc<Claims> {
        Arc::new(Claims {
            id: next_id(),
            taken: (0..producers).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// Number of producer indices.
    pub fn producers(&self) -> usize {
        self.taken.len()
    }

    /// Claims producer index `index`: `None` if out of range or already claimed. The key
    /// gives the claim back when dropped. (`AcqRel`: a new holder sees everything the
    /// previous holder wrote before giving the claim back.)
    pub fn claim(self: &Arc<Self>, index: usize) -> Option<ProducerKey> {
        let free = self.taken.get(index)?.swap(true, Ordering::AcqRel);
        (!free).then(|| ProducerKey {
            claims: self.clone(),
            table: self.id,
            index,
            not_sync: PhantomData,
        })
    }
}

/// The claim on one producer index of a [`Claims`] table: the right to produce into ring
/// `index` of every [`Rings`] made with that table. At most one exists per index; not
/// `Clone` and not `Sync`, and used through `&mut`, so one thread at a time produces.
#[derive(Debug)]
pub struct ProducerKey {
    claims: Arc<Claims>,
    /// `claims.id`, kept here so that checking a key against a ring set reads no other line.
    table: u64,
    index: usize,
    not_sync: PhantomData<Cell<()>>,
}

impl ProducerKey {
    /// The producer index (the worker).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for ProducerKey {
    fn drop(&mut self) {
        // Release: the next holder of the index (AcqRel swap in `claim`) sees every write
        // of this one.
        self.claims.taken[self.index].store(false, Ordering::Release);
    }
}

/// The right to consume every ring of one [`Rings`] (its writer's): one per set, made with
/// it, not `Clone`.
#[derive(Debug)]
pub struct ConsumerKey {
    rings: u64,
}

/// The rings of one tap, one per producer index of a [`Claims`] table, with the tap's
/// `closed` flag (the close protocol's shared half).
#[derive(Debug)]
pub struct Rings {
    rings: Box<[Ring]>,
    /// The [`Claims`] table whose keys produce into these rings.
    claims: u64,
    /// This set's identity (its [`ConsumerKey`]'s).
    id: u64,
    closed: AtomicBool,
}

impl Rings {
    /// One ring of `capacity` slots of `slot_size` bytes per producer index of `claims`,
    /// and the set's consumer key.
    pub fn new(claims: &Claims, capacity: usize, slot_size: usize) -> (Rings, ConsumerKey) {
        let id = next_id();
        let rings = Rings {
            rings: (0..claims.producers())
                .map(|_| Ring::new(capacity, slot_size))
                .collect(),
            claims: claims.id,
            id,
            closed: AtomicBool::new(false),
        };
        (rings, ConsumerKey { rings: id })
    }

    /// The rings (for their counters), by producer index.
    pub fn rings(&self) -> &[Ring] {
        &self.rings
    }

    /// The producer side of ring `key.index()`: `None` if the key is of another [`Claims`]
    /// table (or the index has no ring). Two compares, no atomic.
    #[inline(always)]
    pub fn producer<'k>(&'k self, key: &'k mut ProducerKey) -> Option<Producer<'k>> {
        if key.table != self.claims {
            return None;
        }
        let ring = self.rings.get(key.index)?;
        Some(Producer {
            ring,
            closed: &self.closed,
        })
    }

    /// The consumer side of every ring: `None` if the key is another set's.
    pub fn consumer<'k>(&'k self, key: &'k mut ConsumerKey) -> Option<Consumer<'k>> {
        (key.rings == self.id).then_some(Consumer { rings: &self.rings })
    }

    /// Closer side of the close protocol: sets `closed` and fences. Afterwards, wait until
    /// [`Rings::busy`] is false; then no push can still happen.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Whether [`Rings::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether some producer is inside a section ([`Producer::enter`]).
    pub fn busy(&self) -> bool {
        self.rings.iter().any(Ring::busy)
    }
}

/// The producer side of one ring (from [`Rings::producer`]; only the holder of the ring's
/// [`ProducerKey`] can have one).
#[derive(Debug)]
pub struct Producer<'a> {
    ring: &'a Ring,
    closed: &'a AtomicBool,
}

impl<'a> Producer<'a> {
    /// The ring.
    pub fn ring(&self) -> &'a Ring {
        self.ring
    }

    /// Counts `n` packets run through the tap's filter (matched or not).
    #[inline(always)]
    pub fn saw(&mut self, n: usize) {
        Ring::add(&self.ring.prod.seen, n);
    }

    /// Opens a push section of the close protocol: `None` (pushing nothing) once the set is
    /// closed. The section ends when the returned guard is dropped.
    ///
    /// Dekker with `SeqCst` fences: the producer stores `busy`, fences, loads `closed`; the
    /// closer ([`Rings::close`]) stores `closed`, fences, then loads `busy`. Either the
    /// producer sees `closed` and does not push, or the closer sees `busy` and waits for the
    /// section's end (whose `Release` store, read with `Acquire` by [`Ring::busy`], makes the
    /// pushes visible to the final drain).
    pub fn enter(&mut self) -> Option<Section<'_>> {
        let prod = &self.ring.prod;
        prod.busy.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::Relaxed) {
            prod.busy.store(false, Ordering::Release);
            return None;
        }
        Some(Section {
            ring: self.ring,
            closed: self.closed,
            producer: PhantomData,
        })
    }
}

/// A push section of the close protocol ([`Producer::enter`]); leaves it when dropped.
#[derive(Debug)]
pub struct Section<'p> {
    ring: &'p Ring,
    closed: &'p AtomicBool,
    /// Borrows the producer mutably: one section (and one batch) at a time.
    producer: PhantomData<&'p mut ()>,
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        self.ring.prod.busy.store(false, Ordering::Release);
    }
}

impl Section<'_> {
    /// Whether the set was closed since the section began (`Acquire`), e.g. while waiting
    /// for room.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Takes as many of the next `want` slots as are free now (looking at the consumer's
    /// index only if the last look no longer shows room for all of them). Fill them with
    /// [`Batch::fill`]; they are published by [`Batch::commit`] or when the batch is dropped.
    #[inline]
    pub fn batch(&mut self, want: usize) -> Batch<'_> {
        let ring = self.ring;
        let cap = ring.cap;
        let head = ring.prod.head.load(Ordering::Relaxed);
        // Invariant: tail_seen <= tail <= head <= tail_seen + cap (the producer only ever
        // filled slots its copy of tail showed free).
        let mut free = cap - head.wrapping_sub(ring.prod.tail_seen.load(Ordering::Relaxed));
        if free < want {
            let tail = ring.cons.tail.load(Ordering::Acquire);
            ring.prod.tail_seen.store(tail, Ordering::Relaxed);
            free = cap - head.wrapping_sub(tail);
        }
        Batch {
            ring,
            idx: head % cap,
            n: free.min(want),
            filled: 0,
            refused: 0,
            section: PhantomData,
        }
    }

    /// Counts `n` packets as dropped (refused without a reservation).
    pub fn refuse(&mut self, n: usize) {
        Ring::add(&self.ring.prod.dropped, n);
    }

    /// Copies a packet in (cut to the slot size and to `snap`; recorded as long on the wire
    /// as it is). Returns false, counting a drop, if the ring is full. (One batch of one.)
    pub fn push(&mut self, ts_ns: u64, port: u16, dir: u8, frame: &[u8], snap: usize) -> bool {
        let mut b = self.batch(1);
        let ok = b.fill(ts_ns, port, dir, frame, frame.len() as u32, snap);
        b.commit(usize::from(!ok));
        ok
    }
}

/// Slots reserved by [`Section::batch`] for one batch of pushes: filled by [`Batch::fill`],
/// published (the filled ones) by [`Batch::commit`] or on drop.
#[derive(Debug)]
pub struct Batch<'s> {
    ring: &'s Ring,
    /// Index of the next slot to fill.
    idx: usize,
    /// Slots reserved.
    n: usize,
    /// Slots filled so far.
    filled: usize,
    /// Packets to count as dropped when published.
    refused: usize,
    /// Borrows the section mutably: no other reservation until this one is published.
    section: PhantomData<&'s mut ()>,
}

impl Batch<'_> {
    /// Slots reserved (what fits of what was asked).
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether nothing fits.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Slots filled so far.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Copies a packet (cut to the slot size and to `snap`) into the next reserved slot;
    /// `wire_len` is its length on the wire (at least `frame.len()`; the record's original
    /// length). Returns false, writing nothing, when every reserved slot is filled.
    #[inline]
    pub fn fill(&mut self, ts_ns: u64, port: u16, dir: u8, frame: &[u8], wire_len: u32, snap: usize) -> bool {
        if self.filled >= self.n {
            return false;
        }
        let ring = self.ring;
        let n = frame.len().min(snap).min(ring.slot_size);
        ring.cells[self.idx].with_mut(|_| ());
        let rec = ring.record(self.idx);
        let h = Header {
            ts_ns,
            orig_len: wire_len.max(frame.len() as u32),
            cap_len: n as u32,
            port,
            dir,
        };
        // SAFETY: the slot is free: `Section::batch` counted it against a tail read with
        // Acquire (the consumer is done with it), and it is not published before this
        // batch's commit, so the consumer does not read it meanwhile. Only this batch writes
        // it: the one `Producer` of the ring (its key is unique and borrowed mutably) has one
        // section, and the section one batch, at a time. The record is 64-byte aligned
        // (Header needs 8) and `HEADER + n <= HEADER + slot_size <= stride` bytes long.
        unsafe {
            rec.cast::<Header>().write(h);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), rec.add(HEADER), n);
        }
        self.idx += 1;
        if self.idx == ring.cap {
            self.idx = 0;
        }
        self.filled += 1;
        true
    }

    /// Publishes the filled slots (one `Release` store), counts them as pushed and
    /// `refused` packets as dropped.
    pub fn commit(mut self, refused: usize) {
        self.refused = refused;
    }
}

impl Drop for Batch<'_> {
    /// Publishes the filled slots (see [`Batch::commit`]).
    fn drop(&mut self) {
        let prod = &self.ring.prod;
        if self.filled > 0 {
            let head = prod.head.load(Ordering::Relaxed);
            prod.head.store(head.wrapping_add(self.filled), Ordering::Release);
            Ring::add(&prod.pushed, self.filled);
        }
        if self.refused > 0 {
            Ring::add(&prod.dropped, self.refused);
        }
    }
}

/// The consumer side of a tap's rings (from [`Rings::consumer`]; only the holder of the
/// set's [`ConsumerKey`] can have one).
#[derive(Debug)]
pub struct Consumer<'a> {
    rings: &'a [Ring],
}

impl Consumer<'_> {
    /// Number of rings.
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    /// Whether there is no ring.
    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// Ring `i`, its `tail` and the record there, if that slot is filled (telling loom
    /// that the consumer reads it).
    fn oldest(&mut self, i: usize) -> Option<(&Ring, usize, *mut u8)> {
        let ring = self.rings.get(i)?;
        let tail = ring.cons.tail.load(Ordering::Relaxed);
        if !ring.filled_at(tail) {
            return None;
        }
        let idx = tail % ring.cap;
        ring.cells[idx].with(|_| ());
        Some((ring, tail, ring.record(idx)))
    }

    /// Timestamp of the oldest filled slot of ring `i`, if any.
    pub fn peek_ts(&mut self, i: usize) -> Option<u64> {
        let (_, _, rec) = self.oldest(i)?;
        // SAFETY: the slot at `tail` was published by the producer (`filled_at` saw it below
        // a head read with Acquire by this consumer, now or when it took `head_seen`) and is
        // not reused until this consumer (the only one: its key is unique and borrowed
        // mutably) advances tail; the record is 64-byte aligned.
        Some(unsafe { rec.cast::<Header>().read().ts_ns })
    }

    /// Hands the oldest filled slot of ring `i` to `f`, then frees it. Returns `None` if
    /// empty.
    pub fn pop<R>(&mut self, i: usize, f: impl FnOnce(&Slot<'_>) -> R) -> Option<R> {
        let (ring, tail, rec) = self.oldest(i)?;
        // SAFETY: as in `peek_ts`: the slot is published and stays untouched by the
        // producer until tail moves past it, after `f` returns. The record was written whole
        // by `Batch::fill` (header, 64-byte aligned, then `cap_len <= slot_size` bytes inside
        // the record's `stride`).
        let slot = unsafe {
            let h = rec.cast::<Header>().read();
            Slot {
                ts_ns: h.ts_ns,
                orig_len: h.orig_len,
                cap_len: h.cap_len,
                dir: h.dir,
                port: h.port,
                data: std::slice::from_raw_parts(rec.add(HEADER), h.cap_len as usize),
            }
        };
        let r = f(&slot);
        ring.cons.tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(r)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// One ring (one producer index) and both its keys.
    fn one_ring(capacity: usize, slot_size: usize) -> (Rings, ProducerKey, ConsumerKey) {
        let claims = Claims::new(1);
        let (rings, ck) = Rings::new(&claims, capacity, slot_size);
        (rings, claims.claim(0).unwrap(), ck)
    }

    /// Runs `f` in a producer section of the ring.
    fn produce<R>(rings: &Rings, pk: &mut ProducerKey, f: impl FnOnce(&mut Section<'_>) -> R) -> R {
        f(&mut rings.producer(pk).unwrap().enter().unwrap())
    }

    /// Pops every slot: (timestamp, bytes).
    fn pop_all(rings: &Rings, ck: &mut ConsumerKey) -> Vec<(u64, Vec<u8>)> {
        let mut c = rings.consumer(ck).unwrap();
        let mut v = Vec::new();
        while let Some(x) = c.pop(0, |s| (s.ts_ns, s.data().to_vec())) {
            v.push(x);
        }
        v
    }

    /// Pops every slot: the timestamps.
    fn pop_ts(rings: &Rings, ck: &mut ConsumerKey) -> Vec<u64> {
        pop_all(rings, ck).into_iter().map(|(t, _)| t).collect()
    }

    /// Pushed, dropped, filled.
    fn counts(rings: &Rings) -> (u64, u64, usize) {
        let r = &rings.rings()[0];
        (r.pushed(), r.dropped(), r.len())
    }

    #[test]
    fn batch_reserve_fills_what_fits_and_counts_the_rest() {
        let (rings, mut pk, mut ck) = one_ring(5, 8);
        produce(&rings, &mut pk, |s| {
            let mut b = s.batch(3);
            assert_eq!(b.len(), 3);
            for i in 0..3u8 {
                assert!(b.fill(u64::from(i), 1, 0, &[i; 10], 10, 4));
            }
            // Every reserved slot is filled: a fourth fill writes nothing.
            assert!(!b.fill(9, 1, 0, &[9; 4], 4, 4));
            b.commit(0);
            // Two slots left: of four wanted, two fit, two are refused.
            let mut b = s.batch(4);
            assert_eq!(b.len(), 2);
            for i in 3..5u8 {
                assert!(b.fill(u64::from(i), 1, 0, &[i; 3], 3, 4));
            }
            b.commit(2);
        });
        assert_eq!(counts(&rings), (5, 2, 5));
        let want: Vec<(u64, Vec<u8>)> = (0..5u8)
            .map(|i| (u64::from(i), vec![i; if i < 3 { 4 } else { 3 }]))
            .collect();
        assert_eq!(
            pop_all(&rings, &mut ck),
            want,
            "snap length 4 and slot size 8 cut the copies"
        );
    }

    #[test]
    fn producer_rereads_the_consumer_index_only_when_full() {
        let (rings, mut pk, mut ck) = one_ring(3, 4);
        for round in 0..10u64 {
            produce(&rings, &mut pk, |s| {
                // Fill the ring: the producer's copy of tail (from the last look) may say
                // full; the ring was emptied since, so `batch` must look again and find room.
                let mut b = s.batch(3);
                assert_eq!(b.len(), 3, "round {round}");
                for i in 0..3 {
                    assert!(b.fill(round * 3 + i, 0, 1, &[i as u8; 4], 4, 4));
                }
                b.commit(0);
                // Full now: a push is refused and counted.
                assert!(!s.push(99, 0, 1, &[0; 4], 4));
            });
            let want = vec![round * 3, round * 3 + 1, round * 3 + 2];
            assert_eq!(pop_ts(&rings, &mut ck), want, "order across the wrap");
        }
        assert_eq!(counts(&rings), (30, 10, 0));
    }

    #[test]
    fn partly_filled_reservation_publishes_only_the_filled_slots() {
        let (rings, mut pk, mut ck) = one_ring(4, 4);
        produce(&rings, &mut pk, |s| {
            let mut b = s.batch(4);
            assert!(b.fill(1, 0, 0, &[1; 4], 4, 4));
            // Dropping the batch publishes what was filled.
            drop(b);
            assert_eq!(rings.rings()[0].len(), 1);
            // The next reservation starts right after the published slot.
            let mut b = s.batch(2);
            assert!(b.fill(2, 0, 0, &[2; 4], 4, 4));
            assert!(b.fill(3, 0, 0, &[3; 4], 4, 4));
        });
        assert_eq!(pop_ts(&rings, &mut ck), vec![1, 2, 3]);
        // An empty reservation publishes nothing.
        produce(&rings, &mut pk, |s| {
            let b = s.batch(0);
            assert!(b.is_empty());
            b.commit(0);
        });
        assert_eq!(counts(&rings), (3, 0, 0));
    }

    #[test]
    fn keys_are_unique_and_bound_to_their_table_and_set() {
        let claims = Claims::new(2);
        let k0 = claims.claim(0).unwrap();
        assert!(claims.claim(0).is_none(), "index 0 is claimed once");
        assert!(claims.claim(2).is_none(), "out of range");
        drop(k0);
        let mut k0 = claims.claim(0).expect("given back on drop");
        // A key of another table produces into none of these rings.
        let other = Claims::new(2);
        let mut foreign = other.claim(0).unwrap();
        let (rings, mut ck) = Rings::new(&claims, 2, 4);
        assert!(rings.producer(&mut foreign).is_none());
        assert!(rings.producer(&mut k0).is_some());
        // A consumer key opens its own set only.
        let (others, mut other_ck) = Rings::new(&claims, 2, 4);
        assert!(rings.consumer(&mut other_ck).is_none());
        assert!(others.consumer(&mut ck).is_none());
        assert!(rings.consumer(&mut ck).is_some());
    }

    #[test]
    fn a_closed_set_opens_no_section() {
        let (rings, mut pk, _ck) = one_ring(2, 4);
        produce(&rings, &mut pk, |_| assert!(rings.busy(), "a section is in flight"));
        assert!(!rings.busy());
        rings.close();
        assert!(rings.is_closed());
        let mut p = rings.producer(&mut pk).unwrap();
        assert!(p.enter().is_none());
        assert!(!rings.busy(), "a refused section leaves at once");
    }
}
