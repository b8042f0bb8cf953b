//! Atomics that become `loom` atomics under `--cfg loom`.
//!
//! Hand-written lock-free code in Freeway imports its atomics from here, never from `std`
//! directly, so the loom models in `tests/loom_*.rs` exercise the real code paths.

#[cfg(not(loom))]
pub use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
