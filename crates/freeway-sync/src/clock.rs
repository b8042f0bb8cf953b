//! The coarse clock.
//!
//! One background thread (started by [`Clock::start`]) stores the milliseconds elapsed since
//! the clock was created into a single atomic roughly every millisecond. Workers read it with
//! one relaxed load ([`Clock::now`]) instead of calling the OS clock per packet; table entries
//! that record "last seen" times compare against this value and write only when it changed, so
//! a hot entry is written at most once per tick.
//!
//! Threads: the ticker thread is the only writer; any thread may read. The atomics come from
//! [`crate::atomic`], so `tests/loom_clock.rs` model-checks the publication under loom. Tests drive the clock by
//! hand with [`Clock::manual`] and [`Clock::set`].

use crate::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

/// A point in time on the coarse clock: milliseconds since the clock was created.
pub type Tick = u64;

/// How often the ticker thread advances the clock, by default (milliseconds). Ticks are
/// counted in milliseconds, but the value moves in steps of this size: like the kernel's
/// jiffies at HZ=250. Each step is a timer wake-up that preempts whatever runs on that core
/// (on a machine with as many workers as cores, a worker), so the period trades precision for
/// fewer interruptions; nothing in the datapath needs better than a few milliseconds.
pub const DEFAULT_PERIOD_MS: u64 = 4;

/// A coarse, shared clock. Cloning is cheap (an `Arc`).
#[derive(Clone, Debug)]
pub struct Clock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    now: CachePadded<AtomicU64>,
    origin: Instant,
    stop: AtomicBool,
    manual: bool,
}

/// Stops the ticker thread when dropped.
#[derive(Debug)]
pub struct Ticker {
    clock: Clock,
    handle: Option<JoinHandle<()>>,
}

impl Clock {
    fn with(manual: bool) -> Self {
        Clock {
            inner: Arc::new(Inner {
                now: CachePadded::new(AtomicU64::new(0)),
                origin: Instant::now(),
                stop: AtomicBool::new(false),
                manual,
            }),
        }
    }

    /// A clock driven by a background thread advancing every [`DEFAULT_PERIOD_MS`]. Keep the
    /// returned [`Ticker`] alive as long as the clock should advance.
    pub fn start() -> (Clock, Ticker) {
        Clock::start_with_period(Duration::from_millis(DEFAULT_PERIOD_MS))
    }

    /// A clock driven by a background thread advancing every `period` (at least 1 ms).
    pub fn start_with_period(period: Duration) -> (Clock, Ticker) {
        let period = period.max(Duration::from_millis(1));
        let clock = Clock::with(false);
        let c = clock.clone();
        let handle = std::thread::Builder::new()
            .name("fw-clock".into())
            .spawn(move || {
                while !c.inner.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(period);
                    let ms = c.inner.origin.elapsed().as_millis() as u64;
                    c.inner.now.store(ms, Ordering::Relaxed);
                }
            })
            .expect("spawning the clock thread");
        (
            clock.clone(),
            Ticker {
                clock,
                handle: Some(handle),
            },
        )
    }

    /// A clock that only moves when [`Clock::set`] or [`Clock::advance`] is called (tests,
    /// offline pcap processing).
    pub fn manual() -> Clock {
        Clock::with(true)
    }

    /// The current tick. One relaxed load: safe to call per packet.
    #[inline(always)]
    pub fn now(&self) -> Tick {
        self.inner.now.load(Ordering::Relaxed)
    }

    /// Sets a manual clock. Panics on a clock driven by a ticker thread, where two writers
    /// would make time go backwards.
    pub fn set(&self, t: Tick) {
        assert!(self.inner.manual, "Clock::set on a ticking clock");
        self.inner.now.store(t, Ordering::Relaxed);
    }

    /// Advances a manual clock by `ms` milliseconds.
    pub fn advance(&self, ms: u64) {
        self.set(self.now() + ms);
    }

    /// Whether this clock is manual.
    pub fn is_manual(&self) -> bool {
        self.inner.manual
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.clock.inner.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticking_clock_advances() {
        let (c, _t) = Clock::start();
        let a = c.now();
        std::thread::sleep(Duration::from_millis(30));
        assert!(c.now() >= a + 10, "clock did not advance: {} -> {}", a, c.now());
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = Clock::manual();
        assert_eq!(c.now(), 0);
        c.advance(5);
        assert_eq!(c.now(), 5);
        c.set(100);
        assert_eq!(c.clone().now(), 100);
    }
}
