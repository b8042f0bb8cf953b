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
//! * The producer fills slot `head % cap` and then publishes it with a `Release` store of
//!   `head + 1`; the consumer reads `head` with `Acquire` before reading the slot.
//! * The consumer reads slot `tail % cap` and then frees it with a `Release` store of
//!   `tail + 1`; the producer reads `tail` with `Acquire` before overwriting the slot.
//! * Counters `pushed`/`dropped` and the `busy` flag sit on the producer's cache line and
//!   are written only by the producer (plain load + store, no read-modify-write).
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

/// One captured packet in a ring slot.
#[derive(Debug)]
pub struct Slot {
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
    data: Box<[u8]>,
}

impl Slot {
    /// The captured bytes.
    pub fn data(&self) -> &[u8] {
        &self.data[..self.cap_len as usize]
    }
}

#[derive(Debug)]
struct Prod {
    head: AtomicUsize,
    pushed: AtomicU64,
    dropped: AtomicU64,
    busy: AtomicBool,
}

#[derive(Debug)]
struct Cons {
    tail: AtomicUsize,
}

/// The ring. Use it through [`Producer`]/[`Consumer`] (from [`channel`]) or, inside this
/// crate, through the `unsafe` methods whose contract is "one producer, one consumer".
#[derive(Debug)]
pub struct Ring {
    prod: CachePadded<Prod>,
    cons: CachePadded<Cons>,
    slots: Box<[UnsafeCell<Slot>]>,
    slot_size: usize,
}

// SAFETY: slots are only accessed under the SPSC protocol above: a slot is written only by
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
        let slots = (0..cap)
            .map(|_| {
                UnsafeCell::new(Slot {
                    ts_ns: 0,
                    orig_len: 0,
                    cap_len: 0,
                    dir: 0,
                    port: 0,
                    data: vec![0u8; slot_size].into_boxed_slice(),
                })
            })
            .collect();
        Ring {
            prod: CachePadded::new(Prod {
                head: AtomicUsize::new(0),
                pushed: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                busy: AtomicBool::new(false),
            }),
            cons: CachePadded::new(Cons {
                tail: AtomicUsize::new(0),
            }),
            slots,
            slot_size,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
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

    fn bump(c: &AtomicU64) {
        // Single writer: a plain load and store, no locked read-modify-write.
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
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
    /// drop, if the ring is full.
    ///
    /// # Safety
    /// Only one thread at a time may act as the producer of this ring.
    pub unsafe fn push(&self, ts_ns: u64, port: u16, dir: u8, frame: &[u8], snap: usize) -> bool {
        let head = self.prod.head.load(Ordering::Relaxed);
        let tail = self.cons.tail.load(Ordering::Acquire);
        if head.wrapping_sub(tail) >= self.slots.len() {
            Self::bump(&self.prod.dropped);
            return false;
        }
        let n = frame.len().min(snap).min(self.slot_size);
        self.slots[head % self.slots.len()].with_mut(|p| {
            // SAFETY: the slot at `head` is free (checked above against the consumer's
            // Acquire-published tail) and only this producer writes free slots.
            let s = unsafe { &mut *p };
            s.ts_ns = ts_ns;
            s.orig_len = frame.len() as u32;
            s.cap_len = n as u32;
            s.dir = dir;
            s.port = port;
            s.data[..n].copy_from_slice(&frame[..n]);
        });
        self.prod.head.store(head.wrapping_add(1), Ordering::Release);
        Self::bump(&self.prod.pushed);
        true
    }

    /// Timestamp of the oldest filled slot, if any.
    ///
    /// # Safety
    /// Only one thread at a time may act as the consumer of this ring.
    pub unsafe fn peek_ts(&self) -> Option<u64> {
        let tail = self.cons.tail.load(Ordering::Relaxed);
        let head = self.prod.head.load(Ordering::Acquire);
        if tail == head {
            return None;
        }
        // SAFETY: the slot at `tail` was published by the producer (Acquire on head) and is
        // not reused until this consumer advances tail.
        Some(self.slots[tail % self.slots.len()].with(|p| unsafe { (*p).ts_ns }))
    }

    /// Hands the oldest filled slot to `f`, then frees it. Returns `None` if empty.
    ///
    /// # Safety
    /// Only one thread at a time may act as the consumer of this ring.
    pub unsafe fn pop<R>(&self, f: impl FnOnce(&Slot) -> R) -> Option<R> {
        let tail = self.cons.tail.load(Ordering::Relaxed);
        let head = self.prod.head.load(Ordering::Acquire);
        if tail == head {
            return None;
        }
        // SAFETY: as in `peek_ts`.
        let r = self.slots[tail % self.slots.len()].with(|p| f(unsafe { &*p }));
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
    pub fn pop<R>(&mut self, f: impl FnOnce(&Slot) -> R) -> Option<R> {
        // SAFETY: `Consumer` is not `Clone` and `pop` takes `&mut self`: one consumer.
        unsafe { self.0.pop(f) }
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.0
    }
}
