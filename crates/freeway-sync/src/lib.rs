//! Freeway's concurrency building blocks.
//!
//! Everything here exists so that the fast path obeys the rules set out in the repository's
//! `ARCHITECTURE.md` ("The rules of the fast path"):
//!
//! * [`clock`]: a coarse clock ("ticks") written by one background thread and read by workers
//!   with a single relaxed load, so no worker calls the OS clock per packet.
//! * [`counter`]: single-writer statistics counters. A worker owns its block of counters (kept on
//!   its own cache lines by [`CachePadded`]); readers sum the blocks of all workers.
//! * [`refcount`]: a reference count whose `get` is one `fetch_add` (no CAS loop), with dead
//!   and saturation zones, for objects kept beyond an epoch read-side section.
//! * [`atomic`]: a shim that re-exports `std` atomics normally and `loom` atomics under
//!   `--cfg loom`, so the hand-written lock-free structures in other crates can be model-checked.
//! * [`reclaim`]: epoch reclamation (crossbeam-epoch) for the lock-free tables, or a stand-in
//!   under `--cfg loom` that keeps retired objects until their owner drops.
//! * [`published`]: a whole value one writer replaces and readers load under their epoch
//!   guard (snapshots such as the bridge's multicast table).
//! * [`chain`]: the writer-side unlink and the teardown of the hash-bucket chains that the
//!   lock-free tables share.
//! * [`rng`]: SplitMix64, the deterministic generator of workloads, traffic and test inputs.
//! * `loom_model` (under `--cfg loom` only): runs a loom model and fails it if loom explored
//!   too few executions to mean anything.
#![warn(missing_docs)]

pub mod atomic;
pub mod bucket;
pub mod chain;
pub mod clock;
pub mod counter;
#[cfg(loom)]
pub mod loom_model;
pub mod mailbox;
pub mod published;
pub mod reclaim;
pub mod refcount;
pub mod rng;

pub use bucket::TokenBucket;
pub use clock::{Clock, Sleeper, Tick};
pub use counter::Counter;
/// Pads and aligns a value to the length of a cache line (128 bytes on x86-64, covering the
/// adjacent-line prefetcher), so that a write-heavy field does not share a line with read-mostly data.
pub use crossbeam_utils::CachePadded;
pub use mailbox::Mailbox;
pub use published::Published;
pub use refcount::{Put, RcRef};
