//! A worker: its context, its poll loop, and the pipeline it runs on each received batch.
//!
//! Idle: after an empty poll a worker spins ([`SPIN_POLLS`] polls), then yields its core (until
//! [`YIELD_POLLS`] polls or [`YIELD_WINDOW`] has passed, whichever comes first), then sleeps in
//! `poll()` on its queues' descriptors and the run's stop signal (`freeway_io::wait`), woken
//! by the first frame. The sleep's timeout is the next thing due without a frame: 5 ms while
//! packets wait for a neighbour or fragments for reassembly (or on worker 0 when it routes the
//! kernel twins' output), else [`SLEEP_QUIET`]; stopping the run signals an eventfd every
//! worker polls, so no timeout exists just to look at the stop flag. An idle Freeway thus
//! costs each worker about ten wake-ups a second, where a fixed 5 ms timeout cost 200: on a
//! laptop or a small VM each wake-up is a timer interrupt, an IPI and a context switch.
//! While every worker sleeps the coarse clock's ticker slows down too (`freeway_sync::clock`):
//! a worker brings the clock up to date as it wakes, and wakes the ticker only once frames
//! keep it awake ([`TickerWake`]): after [`TICKER_AFTER_BATCHES`] batches, or when it stops
//! spinning [`TICKER_AFTER`] or more after the wake-up. A lone frame (a ping: the request and
//! its reply, then sleep again) thus costs one wake-up, the worker's, where waking the ticker
//! after the first batch added a `futex` call and one or two of the ticker's wake-ups to each,
//! the first of them landing while the reply is delivered (on a small machine, on the core
//! that waits for it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::router::{Bridging, RouterWorker};
use super::stateful::CtStage;
use super::stats::WorkerStats;
use super::tx::{wall_ns, Tx};
use freeway_bridge::{Bridge, BridgeWorker, FdbWriter, Layout, Learning};
use freeway_capture::{Direction, TapPoint};
use freeway_io::wait::{StopWake, Waiter, Woken};
use freeway_io::RxQueue;
use freeway_l3::neigh::NeighWriter;
use freeway_packet::{parse, Batch, Packet, PacketPool};
use freeway_sync::{CachePadded, Clock, Sleeper, Tick};

/// A worker's context, passed explicitly down the pipeline (never hidden in
/// packet metadata).
pub(crate) struct Worker<L: Layout, T: TapPoint> {
    pub(crate) id: usize,
    pub(crate) core: Option<core_affinity::CoreId>,
    pub(crate) rx: Vec<(u16, Box<dyn RxQueue>)>,
    pub(crate) tx: Tx<T>,
    pub(crate) bridge: Arc<Bridge<L>>,
    pub(crate) bw: BridgeWorker,
    pub(crate) router: Option<RouterWorker>,
    pub(crate) ct: Option<CtStage>,
    pub(crate) stats: Arc<CachePadded<WorkerStats>>,
    /// Ports added while the run goes on (see `portset`), taken between batches.
    pub(crate) handover: Option<crossbeam_channel::Receiver<super::portset::Handover>>,
}

/// The bridge as the router sees it from inside a worker: bridging the router's output.
pub(crate) struct BridgeCtx<'a, 'w, L: Layout, T: TapPoint> {
    pub(crate) tx: &'a mut Tx<T>,
    pub(crate) bridge: &'a Bridge<L>,
    pub(crate) bw: &'a mut BridgeWorker,
    pub(crate) learning: &'a mut Learning<'w, L>,
}

impl<'a, 'w, L: Layout, T: TapPoint> BridgeCtx<'a, 'w, L, T> {
    fn new(
        tx: &'a mut Tx<T>,
        bridge: &'a Bridge<L>,
        bw: &'a mut BridgeWorker,
        learning: &'a mut Learning<'w, L>,
    ) -> Self {
        BridgeCtx {
            tx,
            bridge,
            bw,
            learning,
        }
    }
}

/// How a worker learns: inline into the FDB writer it owns (offline runs), else through the
/// FDB thread's queue.
fn learning_of<L: Layout>(fdb: Option<&mut FdbWriter<L>>) -> Learning<'_, L> {
    match fdb {
        Some(f) => Learning::Inline(f),
        None => Learning::Queue,
    }
}

impl<L: Layout, T: TapPoint> Bridging for BridgeCtx<'_, '_, L, T> {
    #[inline]
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.tx.pool
    }

    #[inline]
    fn take_for_router(&mut self, into: &mut Vec<Packet>) {
        into.append(&mut self.tx.to_router);
    }

    #[inline]
    fn parsed(&mut self) {
        self.tx.stats.parses.inc();
    }

    #[inline]
    fn bridge(&mut self, batch: &mut Batch, now: Tick) {
        self.bridge.process(self.bw, batch, now, self.tx, self.learning);
    }
}

/// The writers a worker owns in offline runs (deterministic output).
pub(crate) struct Inline<L: Layout> {
    pub(crate) fdb: Option<FdbWriter<L>>,
    pub(crate) neigh: Option<NeighWriter>,
}

pub(crate) fn worker_main<L: Layout, T: TapPoint>(
    mut w: Worker<L, T>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    stop_wake: Option<Arc<StopWake>>,
    mut inline: Option<Inline<L>>,
) -> Option<Inline<L>> {
    if let Some(c) = w.core {
        core_affinity::set_for_current(c);
    }
    // Allocate the worker's own buffers here, on its thread: the allocator then serves them
    // from this thread's arena, so no line of them neighbours another worker's hot data.
    w.tx.pending = (0..w.tx.pending.len()).map(|_| Batch::new()).collect();
    w.tx.pool = PacketPool::default().with_large(w.tx.mtus.large_buf());
    w.tx.to_router = Vec::with_capacity(2 * freeway_packet::MAX_BATCH);
    if let Some(r) = w.router.as_mut() {
        r.on_thread();
    }
    let mut scratch: Vec<Packet> = Vec::with_capacity(2 * freeway_packet::MAX_BATCH);
    let mut batch = Batch::new();
    let mut rx = std::mem::take(&mut w.rx);
    // Declared after `rx`, so dropped before the queues whose descriptors it polls.
    // Without the stop signal to poll, the worker cannot sleep past its stop flag: no long
    // sleeps then (see `idle_wait`).
    let mut waiter = waiter_of(&rx, stop_wake.as_deref());
    let long_sleeps = stop_wake.is_some();
    // A worker that sleeps in `poll()` tells the clock, which slows down while all do.
    let mut sleeper = waiter.as_ref().map(|_| clock.sleeper());
    let mut ticker = TickerWake::default();
    let mut idle = 0u32;
    // When this idle stretch's yielding began (see `idle_wait`).
    let mut yield_since = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Some(h) = w.handover.as_ref().and_then(super::portset::poll_handover) {
            take_port(&mut w, &mut rx, h);
            waiter = waiter_of(&rx, stop_wake.as_deref());
            sleeper = waiter.as_ref().map(|_| clock.sleeper());
            idle = 0;
        }
        let now = clock.now();
        if w.tx.taps.any() {
            // One clock read per poll, before receiving: every packet received from now on
            // is stamped no earlier, which is the worker's promise to the taps' writers.
            w.tx.poll_ns = wall_ns();
            w.tx.taps.progress(w.tx.poll_ns);
        }
        let mut got = 0;
        let mut live = false;
        for (port, q) in rx.iter_mut() {
            let n = q.rx_burst(&mut batch, &mut w.tx.pool, now);
            live |= !q.is_done();
            if n == 0 {
                continue;
            }
            got += n;
            if w.tx.taps.any() {
                w.tx.taps.tap(*port, Direction::Rx, batch.as_slice(), w.tx.poll_ns);
            }
            process_batch(&mut w, *port, &mut batch, now, inline.as_mut(), &mut scratch);
        }
        if got == 0 {
            if !live {
                break;
            }
            w.stats.idle_polls.inc();
            // Past the spin, a worker stays in the sleeping phase (even after years idle).
            idle = idle.checked_add(1).unwrap_or(YIELD_POLLS);
            if idle % SPIN_POLLS == 0 || (idle >= YIELD_POLLS && waiter.is_some()) {
                // Packets waiting for a neighbour go out (or time out) while no traffic comes;
                // the tap handle drops a tap list the control plane has replaced.
                poll_router(&mut w, now, inline.as_mut());
                w.tx.taps.idle();
                if let Some(r) = w.ct.as_mut().and_then(|c| c.reasm.as_mut()) {
                    r.expire(now, &mut w.tx.pool);
                }
            }
            // Nothing due until a frame comes: sleep long (the stop signal wakes the worker).
            let quiet = long_sleeps
                && w.router.as_ref().is_none_or(|r| r.quiet())
                && w.ct
                    .as_ref()
                    .and_then(|c| c.reasm.as_ref())
                    .is_none_or(|r| r.is_empty());
            let sleep = if quiet { SLEEP_QUIET } else { SLEEP_MAX };
            if idle == SPIN_POLLS {
                yield_since = Instant::now();
                ticker.stops_spinning(sleeper.as_ref(), yield_since);
            } else if idle < YIELD_POLLS && idle > SPIN_POLLS && yield_since.elapsed() >= YIELD_WINDOW {
                // Yielding for longer than the window (a loaded core gives each yield away for
                // a whole time slice): sleep from now on.
                idle = YIELD_POLLS;
            }
            if idle >= YIELD_POLLS {
                // The worker sleeps again: it never needed the ticker.
                ticker.woke_at = None;
            }
            if idle_wait(idle, &mut waiter, sleeper.as_ref(), w.tx.taps.any(), sleep, &w.stats) {
                ticker.woke();
            }
        } else {
            idle = 0;
            ticker.had_frames(sleeper.as_ref());
        }
    }
    poll_router(&mut w, clock.now(), inline.as_mut());
    w.tx.flush_all();
    inline
}

/// What a worker sleeps on: its receive queues' descriptors and the run's stop signal.
fn waiter_of(rx: &[(u16, Box<dyn RxQueue>)], stop: Option<&StopWake>) -> Option<Waiter> {
    let w = Waiter::new(rx.iter().map(|(_, q)| q.as_ref()));
    match stop {
        Some(sw) => w.map(|wt| wt.with_stop(sw)),
        None => w,
    }
}

/// Takes a port added to or removed from the run (between batches): an added port's
/// transmit queue, and its receive queues when this worker polls them; a removed port's
/// queues dropped. Then says so.
fn take_port<L: Layout, T: TapPoint>(
    w: &mut Worker<L, T>,
    rx: &mut Vec<(u16, Box<dyn RxQueue>)>,
    h: super::portset::Handover,
) {
    use super::portset::Handover;
    let taken = match h {
        Handover::Add {
            index,
            tx,
            rx: queues,
            taken,
        } => {
            w.tx.add_port(index, tx);
            rx.extend(queues.into_iter().map(|q| (index, q)));
            taken
        }
        Handover::Remove { index, taken } => {
            rx.retain(|(p, _)| *p != index);
            w.tx.remove_port(index);
            taken
        }
    };
    taken.fetch_add(1, Ordering::Release);
}

/// Batches a worker handles after a sleep that frames ended before it wakes the clock's
/// ticker (see [`TickerWake`]).
const TICKER_AFTER_BATCHES: u32 = 64;
/// How long after a sleep that frames ended a worker that stops spinning wakes the clock's
/// ticker (see [`TickerWake`]); until then the clock stays at the time it woke.
const TICKER_AFTER: Duration = Duration::from_millis(2);

/// When a worker that frames woke wakes the clock's ticker, which naps while every worker
/// sleeps: not at once, but once the frames keep it awake, so that a short burst (a ping's
/// request and reply) goes out and the worker sleeps again without the ticker's wake-ups and
/// the `futex` call that wakes it. Until then the worker's ticks are the time it woke (the
/// sleeper brings the clock up to date as it wakes), at most [`TICKER_AFTER`] behind, or
/// [`TICKER_AFTER_BATCHES`] batches of steady traffic. A sleep ends the wait: a worker that
/// went back to sleep never needed the ticker.
#[derive(Debug, Default)]
struct TickerWake {
    /// When frames woke the worker, while the ticker is not woken yet.
    woke_at: Option<Instant>,
    /// Batches since then.
    batches: u32,
}

impl TickerWake {
    /// A sleep ended for frames (or a stop signal: waking the ticker for it is harmless).
    fn woke(&mut self) {
        self.woke_at = Some(Instant::now());
        self.batches = 0;
    }

    /// A poll found frames.
    fn had_frames(&mut self, sleeper: Option<&Sleeper>) {
        if self.woke_at.is_some() {
            self.batches += 1;
            if self.batches >= TICKER_AFTER_BATCHES {
                self.fire(sleeper);
            }
        }
    }

    /// The worker stops spinning at `now` (and yields, then sleeps, unless frames come).
    fn stops_spinning(&mut self, sleeper: Option<&Sleeper>, now: Instant) {
        match self.woke_at {
            Some(t) if now.saturating_duration_since(t) >= TICKER_AFTER => self.fire(sleeper),
            _ => {}
        }
    }

    fn fire(&mut self, sleeper: Option<&Sleeper>) {
        self.woke_at = None;
        if let Some(s) = sleeper {
            s.wake_ticker();
        }
    }
}

/// Empty polls in a row a worker spins through (`spin_loop`), then yields its core until
/// [`YIELD_POLLS`], before it sleeps: a frame arriving within about a millisecond of the last
/// one is picked up without a wake-up, and a loaded worker never sleeps.
const SPIN_POLLS: u32 = 64;
/// See [`SPIN_POLLS`]; a multiple of it.
const YIELD_POLLS: u32 = 1024;
/// The longest a worker yields before it sleeps, whatever the count of polls: on a core other
/// threads want, each `yield_now` can give the core away for a whole time slice, and 960
/// yields would then keep an idle worker awake (and runnable) for seconds.
const YIELD_WINDOW: Duration = Duration::from_millis(1);
/// The longest a worker sleeps in `poll()` while something is due without a frame: packets
/// waiting for a neighbour (re-sent requests, timeouts: [`poll_router`]), fragments to expire,
/// the kernel twins' output; or when it has no stop signal to wake it.
const SLEEP_MAX: Duration = Duration::from_millis(5);
/// The longest a worker sleeps in `poll()` when nothing is due: a frame or the run's stop
/// signal ([`StopWake`]) wakes it, so the timeout only bounds how late it notices what changed
/// without waking it (a tap attached, whose writer then waits for the worker's progress; a
/// replaced tap list it still holds; transmit frames a kick left on an AF_XDP ring): at most
/// 10 wake-ups a second, where 5 ms gave 200.
const SLEEP_QUIET: Duration = Duration::from_millis(100);

/// What a worker does after its `idle`-th empty poll in a row: spin, yield, then sleep. It
/// sleeps in `poll()` on its queues' descriptors, woken by the first frame, when it has a
/// [`Waiter`] (every queue gives a descriptor: no generator or pcap file) and no tap is
/// attached (the taps' writers merge by the workers' progress marks, which a sleeping worker
/// would not advance); else 50 µs at a time. A waiter that fails is dropped for good.
/// Returns whether it slept in `poll()` and a descriptor woke it.
fn idle_wait(
    idle: u32,
    waiter: &mut Option<Waiter>,
    sleeper: Option<&Sleeper>,
    taps: bool,
    sleep: Duration,
    stats: &WorkerStats,
) -> bool {
    if idle < SPIN_POLLS {
        std::hint::spin_loop();
    } else if idle < YIELD_POLLS {
        std::thread::yield_now();
    } else if let Some(wt) = waiter.as_mut().filter(|_| !taps) {
        stats.sleeps.inc();
        let woken = match sleeper {
            Some(s) => s.sleep(|| wt.wait(sleep)),
            None => wt.wait(sleep),
        };
        match woken {
            Ok(Woken::Ready) => {
                stats.wakeups.inc();
                return true;
            }
            Ok(Woken::Timeout) => {}
            Err(_) => *waiter = None,
        }
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
    false
}

pub(crate) fn poll_router<L: Layout, T: TapPoint>(w: &mut Worker<L, T>, now: Tick, inline: Option<&mut Inline<L>>) {
    let Worker {
        tx, bridge, bw, router, ..
    } = w;
    let Some(r) = router.as_mut() else { return };
    let learning = &mut learning_of(inline.and_then(|i| i.fdb.as_mut()));
    r.poll(now, &mut BridgeCtx::new(tx, bridge, bw, learning));
    tx.flush_all();
}

/// The pipeline for one received batch: count, parse, track, bridge, route, transmit.
#[inline]
pub(crate) fn process_batch<L: Layout, T: TapPoint>(
    w: &mut Worker<L, T>,
    port: u16,
    batch: &mut Batch,
    now: u64,
    inline: Option<&mut Inline<L>>,
    scratch: &mut Vec<Packet>,
) {
    let Worker {
        tx,
        bridge,
        bw,
        router,
        ct,
        stats,
        ..
    } = w;
    let n = batch.len() as u64;
    let mut bytes = 0;
    let bc = &bw.counters;
    batch.retain_or_recycle(&mut tx.pool, |p| {
        bytes += p.len();
        match parse(p) {
            // A group (multicast or broadcast) source address: the bridge drops such a frame
            // (`drop_src_multicast`). Dropped here, counted as the bridge counts it, so that
            // no stage before the bridge (conntrack) acts on a frame that goes nowhere.
            Ok(()) if p.data().get(6).is_some_and(|b| b & 1 != 0) => {
                bc.rx.inc();
                bc.drop_src_multicast.inc();
                false
            }
            Ok(()) => {
                p.meta.in_port = port;
                true
            }
            Err(e) => {
                stats.parse_drops[e as usize].inc();
                false
            }
        }
    });
    let pc = &stats.ports[usize::from(port)];
    pc.rx_packets.add(n);
    pc.rx_bytes.add(bytes as u64);
    stats.packets.add(n);
    stats.parses.add(n);
    stats.batches.inc();
    if let Some(ct) = ct.as_mut() {
        ct.process(batch, &mut tx.pool, now);
    }
    let (fdb_w, neigh_w) = match inline {
        Some(i) => (i.fdb.as_mut(), i.neigh.as_mut()),
        None => (None, None),
    };
    let learning = &mut learning_of(fdb_w);
    bridge.process(bw, batch, now, tx, learning);
    if let Some(r) = router.as_mut() {
        r.run(now, &mut BridgeCtx::new(tx, bridge, bw, learning), scratch);
        if let Some(nw) = neigh_w {
            // Offline: neighbour updates apply at once, so the output is deterministic.
            nw.service(now);
        }
    }
    tx.flush_all();
}
