//! Taps: copies of the packets crossing a port, filtered, handed to a writer thread.
//!
//! # Who touches what
//!
//! * **Control plane** (any thread, through [`Taps`] or [`crate::locked::LockedTaps`]):
//!   [`TapRegistry::attach`], [`TapRegistry::detach`], [`TapRegistry::replace_filter`].
//!   Control-plane calls are serialised among themselves by a mutex that **no worker ever
//!   takes** (`common.rs`); the [`Taps`] variant publishes its tap list under epoch
//!   protection (`epoch.rs`).
//! * **Workers** (one [`TapRegistry::Worker`] handle per worker index, claimed once; it
//!   holds the worker's [`crate::ring::ProducerKey`], the only way to push into the
//!   worker's ring of any tap): call [`TapPoint::tap`] on every batch with the port index,
//!   the direction and a timestamp. The [`Taps`] variant keeps a counted reference to the
//!   list it last read and the list's generation: while nothing changes, a batch costs one
//!   load of the shared generation word, one compare and a test of the cached list's port
//!   masks (with no tap attached, nothing more). When the generation moved, the worker pins
//!   an epoch once to take the new list. For each tap on the batch's port and direction it
//!   runs the tap's filter; matches are copied (up to the snap length) into that tap's ring
//!   for this worker ([`crate::ring::Ring`], single producer, single consumer), a batch's
//!   matches reserved and published at once (`offer.rs`). A full ring drops the copies that
//!   do not fit and counts them. Workers never wait.
//! * **Writer** (one thread per tap, [`crate::writer::TapWriter`], through the tap's
//!   [`TapReader`]): drains the tap's rings. When it has found nothing for a while it
//!   parks; a worker that pushes into a ring then wakes it (one load of the tap's `parked`
//!   flag per batch that matched), and so does closing the tap. An idle capture wakes no
//!   thread, so on a machine with no spare core it preempts no worker.
//!
//! # Files
//!
//! * `mod.rs`: the public types (spec, direction, errors) and the two traits;
//! * `shared.rs`: [`TapShared`], the state of one tap that all three sides share (its
//!   rings, counters, closing, the writer's wake-up);
//! * `offer.rs`: the worker side: running a tap's filter over a batch and copying matches;
//! * `reader.rs`: [`TapReader`], the writer's end of a tap;
//! * `common.rs`: the registry state both variants share (worker claims, progress marks,
//!   tap creation);
//! * `epoch.rs`: the epoch-published registry [`Taps`] and its worker handle [`TapWorker`].

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use freeway_packet::Packet;
use freeway_sync::CachePadded;

use crate::filter::Filter;

mod common;
mod epoch;
mod offer;
mod reader;
mod shared;

pub use epoch::{TapWorker, Taps};
pub use reader::TapReader;
pub use shared::TapShared;

pub(crate) use common::{Common, WorkerClaim};
pub(crate) use offer::{Entry, Offer};
pub(crate) use reader::Detach;

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

/// The port of a tap on every port (`tcpdump -i any`).
pub const ANY_PORT: u16 = u16::MAX;

/// What to attach.
#[derive(Clone, Debug)]
pub struct TapSpec {
    /// Port index, or [`ANY_PORT`] for every port.
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

/// The [`TapPoint`] methods the two worker handles share, for inside their `impl TapPoint`:
/// `tap` and `tap_frames` hand the batch to the handle's own generic
/// `offer(port, dir, batch, ts)`, and `progress` goes to its [`WorkerClaim`] (field `claim`).
macro_rules! tap_point_via_offer {
    () => {
        #[inline]
        fn tap(&mut self, port: u16, dir: Direction, pkts: &[Packet], ts_ns: u64) {
            self.offer(port, dir, pkts, ts_ns);
        }

        #[inline]
        fn tap_frames(&mut self, port: u16, dir: Direction, frames: &[&[u8]], ts_ns: u64) {
            self.offer(port, dir, frames, ts_ns);
        }

        #[inline]
        fn progress(&mut self, ts_ns: u64) {
            self.claim.progress(ts_ns);
        }
    };
}
pub(crate) use tap_point_via_offer;

/// Declares a registry's public handle: a cheap clone of its `Arc<Inner>` (the calling
/// module's `Inner`), whose `Debug` shows the number of attached taps and nothing of the
/// lists and rings behind it.
macro_rules! registry_handle {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[derive(Clone)]
        pub struct $name {
            inner: Arc<Inner>,
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name)).field("active", &self.active()).finish()
            }
        }
    };
}
pub(crate) use registry_handle;

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
