//! [`TapShared`]: the part of a tap that its workers (producers), its writer (consumer)
//! and the control plane share: its rings, its counters, the close protocol and the
//! writer's wake-up.
//!
//! Threads: workers push into their rings (through `offer.rs`) and read `parked`;
//! the writer drains the rings (through [`super::TapReader`]) and sets `parked`; the
//! control plane and the writer close the tap; anyone reads the counters.
//!
//! # Closing
//!
//! A tap is closed (detach, count reached, write error) by setting its `closed` flag; each
//! worker brackets its pushes into the tap's ring with the ring's `busy` flag (see
//! [`crate::ring::Producer::enter`]), so once the writer has seen `closed` and then every
//! ring not busy, nothing more arrives and its final drain is complete:
//! `matched == written + dropped + discarded` exactly.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;

use super::{Direction, Marks, TapId, TapSpec};
use crate::ring::{Claims, ConsumerKey, Ring, Rings};

/// The part of a tap shared by workers (producers) and its writer (consumer).
#[derive(Debug)]
pub struct TapShared {
    pub(super) id: TapId,
    pub(super) port: u16,
    pub(super) dir: Direction,
    pub(super) snaplen: u32,
    /// One ring per worker, and the tap's `closed` flag.
    pub(super) rings: Rings,
    /// Each worker's progress mark ([`super::TapPoint::progress`]), shared by every tap of
    /// the registry.
    marks: Marks,
    pub(super) lossless: bool,
    /// Set by the writer while it sleeps waiting for packets ([`TapShared::wake_writer`]).
    parked: AtomicBool,
    /// The writer's thread, registered by [`crate::writer::TapWriter::run`].
    writer: OnceLock<Thread>,
}

impl TapShared {
    /// A tap with one ring per producer index of `claims`, and the key of its consumer.
    pub(crate) fn new(id: TapId, spec: &TapSpec, claims: &Claims, marks: Marks) -> (TapShared, ConsumerKey) {
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
    pub(crate) fn wake_writer(&self) {
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
}
