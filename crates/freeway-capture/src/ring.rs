//! A bounded single-producer single-consumer ring of packet copies, with fixed memory.
//!
//! Each tap has one ring per worker: the worker is the only producer, the tap's writer
//! thread the only consumer. Slots are allocated once (each with room for `slot_size`
//! bytes); a push copies into the next free slot, a full ring refuses the copy and counts it.
//! Nobody ever waits.
//!
//! # Protocol
//!
//! * `head` (written by the producer only) counts pushed slots; `tail` (written by the
//!   consumer only) counts popped slots. Both only grow (wrapping `usize`).
//! * The producer fills slots `head % cap ..` and then publishes them with one `Release`
//!   store of `head + n` ([`Ring::reserve`], [`Ring::fill`], [`Ring::commit`]: a worker's
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
//! * Room is looked up once per [`Ring::reserve`]: the packets of a batch that do not fit
//!   are dropped and counted at once, even if the consumer frees slots meanwhile.
//! * Memory: one allocation of `cap` records, each a small header (timestamp, lengths,
//!   port, direction) followed by the bytes, 64-byte aligned. The producer only *writes*
//!   a record (no load from a line the consumer has just read, which would stall the worker
//!   on a cache miss; stores to such lines wait in the store buffer instead), and the
//!   records of a batch are consecutive lines. Written by hand rather than with a crate
//!   (`rtrb`, `crossbeam::ArrayQueue`) because those queue values: here a slot is a
//!   variable-length byte record copied in place, published a batch at a time, with the
//!   close protocol below.
//! * The close protocol (`busy` + the tap's `closed` flag, both `SeqCst`) lets the writer
//!   know that no push is in flight before its final drain (see [`Ring::enter`]).
//!
//! The protocol is model-checked in `tests/loom_ring.rs`.

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
/// borrowed, see [`Ring::pop`]).
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

/// Slots taken by [`Ring::reserve`] for one batch of pushes, filled by [`Ring::fill`] and
/// published by [`Ring::commit`].
#[derive(Debug)]
#[must_use = "reserved slots are published by Ring::commit"]
pub struct Reserved {
    /// Index of the next slot to fill.
    idx: usize,
    /// Slots reserved.
    n: usize,
    /// Slots filled so far.
    filled: usize,
}

impl Reserved {
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
}

/// The ring. Use it through [`Producer`]/[`Consumer`] (from [`channel`]) or, inside this
/// crate, through the `unsafe` methods whose contract is "one producer, one consumer".
#[derive(Debug)]
pub struct Ring {
    prod: CachePadded<Prod>,
    cons: CachePadded<Cons>,
    /// `cap` records of `stride` bytes (a multiple of 64): header, then up to `slot_size`
    /// bytes of the packet.
    mem: Box<[Line]>,
    stride: usize,
    cap: usize,
    /// Loom's view of the records (one cell per slot, written by `fill`, read by `pop` and
    /// `peek_ts`), so the models check the publication of the bytes kept in `mem`; a
    /// zero-sized no-op outside loom.
    cells: Box<[UnsafeCell<()>]>,
    slot_size: usize,
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Line")
    }
}

// SAFETY: records are only accessed under the SPSC protocol above: a record is written only by
// the single producer while it is free (head - tail < cap, checked with Acquire on tail) and
// read only by the single consumer after publication (Acquire on head). Everything else is
// atomics.
unsafe impl Sync for Ring {}
// SAFETY: the ring owns its slots; moving it between threads moves plain data.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring of `capacity` slots (at least 1) of `slot_size` bytes each.
    pub fn new(capacity: usize, slot_size: usize) -> Ring {
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

    /// Consumer: slot `idx`'s packet, borrowed.
    ///
    /// # Safety
    /// The slot is filled and published, and not freed while the result lives.
    unsafe fn slot<'a>(&'a self, idx: usize) -> Slot<'a> {
        let rec = self.record(idx);
        // SAFETY: the record is 64-byte aligned (Header needs 8), was written whole by
        // `fill` before its publication, and nobody writes it until the consumer frees it.
        let h = unsafe { rec.cast::<Header>().read() };
        // SAFETY: `fill` wrote `cap_len <= slot_size` bytes after the header, inside the
        // record (HEADER + slot_size <= stride).
        let data = unsafe { std::slice::from_raw_parts(rec.add(HEADER), h.cap_len as usize) };
        Slot {
            ts_ns: h.ts_ns,
            orig_len: h.orig_len,
            cap_len: h.cap_len,
            dir: h.dir,
            port: h.port,
            data,
        }
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

    /// Packets the producer offered to the tap's filter ([`Ring::saw`]), matched or not.
    pub fn seen(&self) -> u64 {
        self.prod.seen.load(Ordering::Relaxed)
    }

    /// Producer: counts `n` packets run through the tap's filter.
    ///
    /// # Safety
    /// Only one thread at a time may act as the producer of this ring.
    #[inline]
    pub unsafe fn saw(&self, n: usize) {
        Self::add(&self.prod.seen, n);
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

    fn add(c: &AtomicU64, n: usize) {
        // Single writer: a plain load and store, no locked read-modify-write.
        c.store(c.load(Ordering::Relaxed).wrapping_add(n as u64), Ordering::Relaxed);
    }

    /// Producer side of the close protocol: marks a push section as in flight and returns
    /// whether pushing is allowed (`closed` is false). Call [`Ring::leave`] afterwards in
    /// both cases.
    ///
    /// Dekker with `SeqCst` fences: the producer stores `busy`, fences, loads `closed`; the
    /// closer ([`close`]) stores `closed`, fences, then loads `busy`. Either the producer sees
    /// `closed` and does not push, or the closer sees `busy` and waits for [`Ring::leave`]
    /// (whose `Release` store, read with `Acquire` by [`Ring::busy`], makes the pushes
    /// visible to the final drain).
    ///
    /// # Safety
    /// Only the ring's single producer may call it.
    pub unsafe fn enter(&self, closed: &AtomicBool) -> bool {
        self.prod.busy.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        !closed.load(Ordering::Relaxed)
    }

    /// Ends a section begun with [`Ring::enter`].
    ///
    /// # Safety
    /// Only the ring's single producer may call it.
    pub unsafe fn leave(&self) {
        self.prod.busy.store(false, Ordering::Release);
    }

    /// Whether a producer section is in flight (closer side of the protocol, after
    /// [`close`]).
    pub fn busy(&self) -> bool {
        self.prod.busy.load(Ordering::Acquire)
    }

    /// Copies a packet in (cut to the slot size and to `snap`). Returns false, counting a
    /// drop, if the ring is full. (One [`Ring::reserve`], [`Ring::fill`], [`Ring::commit`].)
    ///
    /// # Safety
    /// Only one thread at a time may act as the producer of this ring.
    pub unsafe fn push(&self, ts_ns: u64, port: u16, dir: u8, frame: &[u8], snap: usize) -> bool {
        // SAFETY (all three): forwarded contract.
        let mut r = unsafe { self.reserve(1) };
        let ok = unsafe { self.fill(&mut r, ts_ns, port, dir, frame, frame.len() as u32, snap) };
        unsafe { self.commit(r, usize::from(!ok)) };
        ok
    }

    /// Producer: takes as many of the next `want` slots as are free now (looking at the
    /// consumer's index only if the last look no longer shows room for all of them). Fill
    /// them with [`Ring::fill`], then publish with [`Ring::commit`] before the next
    /// `reserve`.
    ///
    /// # Safety
    /// Only one thread at a time may act as the producer of this ring.
    pub unsafe fn reserve(&self, want: usize) -> Reserved {
        let cap = self.cap;
        let head = self.prod.head.load(Ordering::Relaxed);
        // Invariant: tail_seen <= tail <= head <= tail_seen + cap (the producer only ever
        // filled slots its copy of tail showed free).
        let mut free = cap - head.wrapping_sub(self.prod.tail_seen.load(Ordering::Relaxed));
        if free < want {
            let tail = self.cons.tail.load(Ordering::Acquire);
            self.prod.tail_seen.store(tail, Ordering::Relaxed);
            free = cap - head.wrapping_sub(tail);
        }
        Reserved {
            idx: head % cap,
            n: free.min(want),
            filled: 0,
        }
    }

    /// Producer: copies a packet (cut to the slot size and to `snap`) into the next slot of
    /// `r`; `wire_len` is its length on the wire (at least `frame.len()`; the record's
    /// original length). Returns false, writing nothing, when every reserved slot is filled.
    ///
    /// # Safety
    /// Only one thread at a time may act as the producer of this ring, and `r` must come
    /// from this ring's latest [`Ring::reserve`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn fill(
        &self,
        r: &mut Reserved,
        ts_ns: u64,
        port: u16,
        dir: u8,
        frame: &[u8],
        wire_len: u32,
        snap: usize,
    ) -> bool {
        if r.filled >= r.n {
            return false;
        }
        let n = frame.len().min(snap).min(self.slot_size);
        self.cells[r.idx].with_mut(|_| ());
        let rec = self.record(r.idx);
        let h = Header {
            ts_ns,
            orig_len: wire_len.max(frame.len() as u32),
            cap_len: n as u32,
            port,
            dir,
        };
        // SAFETY: the slot is free (`reserve` counted it against an Acquire-read tail) and
        // only this producer writes free slots; the consumer reads it only after `commit`
        // publishes it. The record is 64-byte aligned and `HEADER + n <= stride` bytes long.
        unsafe {
            rec.cast::<Header>().write(h);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), rec.add(HEADER), n);
        }
        r.idx += 1;
        if r.idx == self.cap {
            r.idx = 0;
        }
        r.filled += 1;
        true
    }

    /// Producer: publishes the slots filled in `r` (one `Release` store) and counts them as
    /// pushed, and `refused` packets as dropped.
    ///
    /// # Safety
    /// Only one thread at a time may act as the producer of this ring, and `r` must come
    /// from this ring's latest [`Ring::reserve`].
    pub unsafe fn commit(&self, r: Reserved, refused: usize) {
        if r.filled > 0 {
            let head = self.prod.head.load(Ordering::Relaxed);
            self.prod.head.store(head.wrapping_add(r.filled), Ordering::Release);
            Self::add(&self.prod.pushed, r.filled);
        }
        if refused > 0 {
            Self::add(&self.prod.dropped, refused);
        }
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

    /// Timestamp of the oldest filled slot, if any.
    ///
    /// # Safety
    /// Only one thread at a time may act as the consumer of this ring.
    pub unsafe fn peek_ts(&self) -> Option<u64> {
        let tail = self.cons.tail.load(Ordering::Relaxed);
        if !self.filled_at(tail) {
            return None;
        }
        let idx = tail % self.cap;
        self.cells[idx].with(|_| ());
        // SAFETY: the slot at `tail` was published by the producer (`filled_at` saw it below
        // a head read with Acquire by this consumer, now or when it took `head_seen`) and is
        // not reused until this consumer advances tail; the record is 64-byte aligned.
        Some(unsafe { self.record(idx).cast::<Header>().read().ts_ns })
    }

    /// Hands the oldest filled slot to `f`, then frees it. Returns `None` if empty.
    ///
    /// # Safety
    /// Only one thread at a time may act as the consumer of this ring.
    pub unsafe fn pop<R>(&self, f: impl FnOnce(&Slot<'_>) -> R) -> Option<R> {
        let tail = self.cons.tail.load(Ordering::Relaxed);
        if !self.filled_at(tail) {
            return None;
        }
        let idx = tail % self.cap;
        self.cells[idx].with(|_| ());
        // SAFETY: as in `peek_ts`; the slot is freed only after `f` returns.
        let r = f(&unsafe { self.slot(idx) });
        self.cons.tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(r)
    }
}

/// Closer side of the close protocol: sets `closed` and fences. Afterwards, wait until
/// [`Ring::busy`] is false on every ring of the tap; then no push can still happen.
pub fn close(closed: &AtomicBool) {
    closed.store(true, Ordering::Relaxed);
    fence(Ordering::SeqCst);
}

/// The producing end of a ring made by [`channel`].
#[derive(Debug)]
pub struct Producer(Arc<Ring>);

/// The consuming end of a ring made by [`channel`].
#[derive(Debug)]
pub struct Consumer(Arc<Ring>);

/// A ring of `capacity` slots of `slot_size` bytes, split into its two ends.
pub fn channel(capacity: usize, slot_size: usize) -> (Producer, Consumer) {
    let r = Arc::new(Ring::new(capacity, slot_size));
    (Producer(r.clone()), Consumer(r))
}

impl Producer {
    /// Copies `frame` in (see [`Ring::push`]).
    pub fn push(&mut self, ts_ns: u64, port: u16, dir: u8, frame: &[u8]) -> bool {
        // SAFETY: `Producer` is not `Clone` and `push` takes `&mut self`: one producer.
        unsafe { self.0.push(ts_ns, port, dir, frame, usize::MAX) }
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.0
    }
}

impl Consumer {
    /// Pops the oldest packet into `f` (see [`Ring::pop`]).
    pub fn pop<R>(&mut self, f: impl FnOnce(&Slot<'_>) -> R) -> Option<R> {
        // SAFETY: `Consumer` is not `Clone` and `pop` takes `&mut self`: one consumer.
        unsafe { self.0.pop(f) }
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn pop_all(r: &Ring) -> Vec<(u64, Vec<u8>)> {
        let mut v = Vec::new();
        // SAFETY: the test is the only consumer.
        while let Some(x) = unsafe { r.pop(|s| (s.ts_ns, s.data().to_vec())) } {
            v.push(x);
        }
        v
    }

    #[test]
    fn batch_reserve_fills_what_fits_and_counts_the_rest() {
        let r = Ring::new(5, 8);
        // SAFETY (every producer call): the test is the only producer.
        let mut res = unsafe { r.reserve(3) };
        assert_eq!(res.len(), 3);
        for i in 0..3u8 {
            assert!(unsafe { r.fill(&mut res, u64::from(i), 1, 0, &[i; 10], 10, 4) });
        }
        // Every reserved slot is filled: a fourth fill writes nothing.
        assert!(!unsafe { r.fill(&mut res, 9, 1, 0, &[9; 4], 4, 4) });
        unsafe { r.commit(res, 0) };
        // Two slots left: of four wanted, two fit, two are refused.
        let mut res = unsafe { r.reserve(4) };
        assert_eq!(res.len(), 2);
        for i in 3..5u8 {
            assert!(unsafe { r.fill(&mut res, u64::from(i), 1, 0, &[i; 3], 3, 4) });
        }
        unsafe { r.commit(res, 2) };
        assert_eq!((r.pushed(), r.dropped(), r.len()), (5, 2, 5));
        let got = pop_all(&r);
        let want: Vec<(u64, Vec<u8>)> = (0..5u8)
            .map(|i| (u64::from(i), vec![i; if i < 3 { 4 } else { 3 }]))
            .collect();
        assert_eq!(got, want, "snap length 4 and slot size 8 cut the copies");
    }

    #[test]
    fn producer_rereads_the_consumer_index_only_when_full() {
        let r = Ring::new(3, 4);
        for round in 0..10u64 {
            // Fill the ring: the producer's copy of tail (from the last look) may say full;
            // the ring was emptied since, so `reserve` must look again and find room.
            let mut res = unsafe { r.reserve(3) };
            assert_eq!(res.len(), 3, "round {round}");
            for i in 0..3 {
                assert!(unsafe { r.fill(&mut res, round * 3 + i, 0, 1, &[i as u8; 4], 4, 4) });
            }
            unsafe { r.commit(res, 0) };
            // Full now: a push is refused and counted.
            assert!(!unsafe { r.push(99, 0, 1, &[0; 4], 4) });
            let got: Vec<u64> = pop_all(&r).into_iter().map(|(t, _)| t).collect();
            assert_eq!(
                got,
                vec![round * 3, round * 3 + 1, round * 3 + 2],
                "order across the wrap"
            );
        }
        assert_eq!((r.pushed(), r.dropped()), (30, 10));
    }

    #[test]
    fn partly_filled_reservation_publishes_only_the_filled_slots() {
        let r = Ring::new(4, 4);
        let mut res = unsafe { r.reserve(4) };
        assert!(unsafe { r.fill(&mut res, 1, 0, 0, &[1; 4], 4, 4) });
        unsafe { r.commit(res, 0) };
        assert_eq!(r.len(), 1);
        // The next reservation starts right after the published slot.
        let mut res = unsafe { r.reserve(2) };
        assert!(unsafe { r.fill(&mut res, 2, 0, 0, &[2; 4], 4, 4) });
        assert!(unsafe { r.fill(&mut res, 3, 0, 0, &[3; 4], 4, 4) });
        unsafe { r.commit(res, 0) };
        let got: Vec<u64> = pop_all(&r).into_iter().map(|(t, _)| t).collect();
        assert_eq!(got, vec![1, 2, 3]);
        // An empty reservation publishes nothing.
        let res = unsafe { r.reserve(0) };
        assert!(res.is_empty());
        unsafe { r.commit(res, 0) };
        assert!(r.is_empty());
        assert_eq!((r.pushed(), r.dropped()), (3, 0));
    }
}
