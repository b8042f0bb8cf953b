//! Epoch reclamation for the FIB ([`freeway_sync::reclaim`]: crossbeam-epoch, or a stand-in
//! under `--cfg loom`), and the writer's bounded wait for grace periods.
//!
//! Readers pin a [`Guard`] (workers: once per batch) and may use every reference they found in
//! the FIB until they drop it. The writer retires what it unlinked with `defer`: the closure
//! runs once no reader pinned before the unlink remains. Under loom there is no collector: the
//! model keeps retired objects until their owner drops (loom models are short).

pub(crate) use freeway_sync::reclaim::defer;
pub use freeway_sync::reclaim::{flush, pin, Guard};

/// How long the writer waits for grace periods before refusing a change.
pub const RETRY_LIMIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Retries `f` while it fails, pushing the epoch along between tries, for at most
/// [`RETRY_LIMIT`]. For the *writer* only, when a bounded pool is empty only because retired
/// entries still wait for their grace period (a worker descheduled inside its read-side section
/// holds every grace period up); workers never wait.
pub(crate) fn retry<T, E>(mut f: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let mut r = f();
    if r.is_ok() {
        return r;
    }
    let start = std::time::Instant::now();
    let mut tries = 0u32;
    while r.is_err() && start.elapsed() < RETRY_LIMIT {
        flush();
        if tries < 16 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        tries += 1;
        r = f();
    }
    r
}
