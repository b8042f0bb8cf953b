//! The coarse clock.
//!
//! One background thread (started by [`Clock::start`]) stores the milliseconds elapsed since
//! the clock was created into a single atomic roughly every millisecond. Workers read it with
//! one relaxed load ([`Clock::now`]) instead of calling the OS clock per packet; table entries
//! that record "last seen" times compare against this value and write only when it changed, so
//! a hot entry is written at most once per tick.
//!
//! Idle: while every thread that announces its sleeps ([`Clock::sleeper`]: the workers that
//! sleep in `poll()`) is asleep, nothing needs the clock to move every few milliseconds, so
//! the ticker slows to one step per [`IDLE_PERIOD_MS`] (an idle process then wakes up ten
//! times a second for it, not 250). A sleeper that wakes brings the clock up to date itself
//! ([`Sleeper::sleep`]) before it reads it, and one that woke for work wakes the ticker
//! ([`Sleeper::wake_ticker`]); other readers (background services) may see the clock that
//! much behind while everything sleeps, or bring it up to date with [`Clock::refresh`].
//!
//! Threads: the ticker thread writes the clock, and so do sleepers as they wake and
//! [`Clock::refresh`] (each with `fetch_max`, so time never goes back); any thread may read. The atomics come from
//! [`crate::atomic`], so `tests/loom_clock.rs` model-checks the publication under loom. Tests drive the clock by
//! hand with [`Clock::manual`] and [`Clock::set`].

use crate::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
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

/// How often the ticker advances the clock while every [`Sleeper`] sleeps (milliseconds).
pub const IDLE_PERIOD_MS: u64 = 100;

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
    /// Registered [`Sleeper`]s, and how many of them sleep now.
    sleepers: CachePadded<AtomicUsize>,
    asleep: AtomicUsize,
    /// Set while the ticker waits its idle period: a sleeper that wakes for work unparks it.
    napping: AtomicBool,
    ticker: OnceLock<Thread>,
}

/// A thread that announces its sleeps to the clock (see the module doc); unregistered when
/// dropped.
#[derive(Debug)]
pub struct Sleeper {
    clock: Clock,
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
                sleepers: CachePadded::new(AtomicUsize::new(0)),
                asleep: AtomicUsize::new(0),
                napping: AtomicBool::new(false),
                ticker: OnceLock::new(),
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
                let idle = Duration::from_millis(IDLE_PERIOD_MS);
                while !c.inner.stop.load(Ordering::Relaxed) {
                    if c.all_asleep() {
                        // Announce the nap before looking again: a sleeper that wakes either
                        // is seen here, or sees `napping` and unparks this thread.
                        c.inner.napping.store(true, Ordering::SeqCst);
                        if c.all_asleep() {
                            std::thread::park_timeout(idle);
                        }
                        c.inner.napping.store(false, Ordering::SeqCst);
                    } else {
                        // Parked, not slept: dropping the `Ticker` unparks it at once. An early
                        // return (a stray unpark) only makes one tick early.
                        std::thread::park_timeout(period);
                    }
                    c.refresh();
                }
            })
            .expect("spawning the clock thread");
        let _ = clock.inner.ticker.set(handle.thread().clone());
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

    /// Brings a ticking clock up to date now and returns it (a manual clock is left as it is).
    /// Costs an OS clock read and an atomic read-modify-write: not for the per-packet path.
    pub fn refresh(&self) -> Tick {
        if self.inner.manual {
            return self.now();
        }
        let ms = self.inner.origin.elapsed().as_millis() as u64;
        self.inner.now.fetch_max(ms, Ordering::Relaxed).max(ms)
    }

    /// Registers the calling thread as one that sleeps through [`Sleeper::sleep`]: while all
    /// registered ones sleep, the ticker slows down (see the module doc).
    pub fn sleeper(&self) -> Sleeper {
        self.inner.sleepers.fetch_add(1, Ordering::SeqCst);
        Sleeper { clock: self.clone() }
    }

    fn all_asleep(&self) -> bool {
        let n = self.inner.sleepers.load(Ordering::SeqCst);
        n > 0 && self.inner.asleep.load(Ordering::SeqCst) >= n
    }
}

impl Sleeper {
    /// Runs `wait` (a sleep) counted as asleep, then brings the clock up to date.
    pub fn sleep<R>(&self, wait: impl FnOnce() -> R) -> R {
        let i = &self.clock.inner;
        i.asleep.fetch_add(1, Ordering::SeqCst);
        let r = wait();
        i.asleep.fetch_sub(1, Ordering::SeqCst);
        self.clock.refresh();
        r
    }

    /// Wakes the ticker if it is taking its idle nap: call it after a sleep that ended for
    /// work (frames came), so the clock moves every few milliseconds again while it lasts.
    /// Costs one load when the ticker is not napping.
    pub fn wake_ticker(&self) {
        let i = &self.clock.inner;
        if i.napping.load(Ordering::SeqCst) {
            if let Some(t) = i.ticker.get() {
                t.unpark();
            }
        }
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.clock.inner.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.clock.inner.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
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
        // The ticker runs on its own thread: on a loaded machine it may wait for a core, so
        // this waits for the advance (up to a minute) rather than for a fixed time.
        let give_up = std::time::Instant::now() + Duration::from_secs(60);
        while c.now() < a + 10 && std::time::Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            c.now() >= a + 10,
            "clock did not advance in a minute: {} -> {}",
            a,
            c.now()
        );
    }

    #[test]
    fn a_sleeper_brings_the_clock_up_to_date_as_it_wakes() {
        let (c, _t) = Clock::start_with_period(Duration::from_secs(3600));
        let s = c.sleeper();
        let before = c.now();
        s.sleep(|| std::thread::sleep(Duration::from_millis(20)));
        assert!(c.now() >= before + 20, "{before} -> {}", c.now());
        s.wake_ticker();
        assert!(c.refresh() >= c.now());
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
