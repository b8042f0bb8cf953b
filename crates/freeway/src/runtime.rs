//! The runtime: workers, the per-batch pipeline, background threads, statistics.
//!
//! # Threads
//!
//! * **Workers** (`fw-worker-N`, pinned to cores when there are enough): each owns a set of
//!   receive queues (queue `i` of every port goes to worker `i % workers`) and one transmit
//!   queue per port. A worker polls a batch, runs it to completion (parse → bridge → transmit
//!   batches per port) and moves on. Everything a worker needs is in its [`Worker`] context,
//!   passed explicitly down the pipeline; it shares nothing writable with other workers except
//!   the FDB entries its packets' own flows touch.
//! * **Clock** (`fw-clock`): advances the coarse tick every millisecond.
//! * **FDB writer** (`fw-fdb`): applies learn requests and ages the FDB in chunks. In offline
//!   runs (one worker, a pcap input) the worker owns the writer instead and learns inline, so
//!   the output is deterministic.
//! * **The caller's thread** watches the clock, takes statistics snapshots (summing the
//!   workers' single-writer counters) and decides when to stop.
//!
//! Statistics are per worker, each block on its own cache lines, summed only in snapshots.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use freeway_bridge::{fdb, Bridge, BridgeCounters, BridgeWorker, Emit, FdbEntry, FdbWriter, Layout, Learning};
use freeway_io::{Port, PortQueues, RxQueue, TxQueue};
use freeway_packet::{parse, Batch, Packet, PacketPool, ParseError};
use freeway_sync::{CachePadded, Clock, Counter};
use serde::Serialize;

use crate::config::{Checked, PortKind};

/// Per-port counters of one worker.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames received.
    pub rx_packets: Counter,
    /// Bytes received.
    pub rx_bytes: Counter,
    /// Frames handed to the transmit queue and accepted.
    pub tx_packets: Counter,
    /// Bytes transmitted.
    pub tx_bytes: Counter,
    /// Frames the transmit queue refused.
    pub tx_dropped: Counter,
}

/// One worker's counters. Single writer: that worker.
#[derive(Debug)]
pub struct WorkerStats {
    /// Frames received by this worker.
    pub packets: Counter,
    /// Non-empty batches processed.
    pub batches: Counter,
    /// Polls of all queues that found nothing.
    pub idle_polls: Counter,
    /// Parser drops, indexed by `ParseError as usize` (inline, on this worker's lines).
    pub parse_drops: [Counter; ParseError::ALL.len()],
    /// Per-port counters.
    pub ports: Box<[CachePadded<PortCounters>]>,
    /// The bridge stage's counters.
    pub bridge: Arc<CachePadded<BridgeCounters>>,
}

/// Port counters summed over workers.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PortSnap {
    /// Port name.
    pub name: String,
    /// Port kind.
    pub kind: &'static str,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames refused by the transmit queue.
    pub tx_dropped: u64,
}

/// One worker's totals.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct WorkerSnap {
    /// Worker index.
    pub id: usize,
    /// Core it is pinned to.
    pub core: Option<usize>,
    /// Frames received.
    pub packets: u64,
    /// Batches processed.
    pub batches: u64,
    /// Empty polls.
    pub idle_polls: u64,
}

/// A point-in-time sum of every counter.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Snapshot {
    /// Seconds since the workers started.
    pub elapsed_s: f64,
    /// Per port.
    pub ports: Vec<PortSnap>,
    /// Per worker.
    pub workers: Vec<WorkerSnap>,
    /// Bridge stage counters, summed.
    pub bridge: BTreeMap<&'static str, u64>,
    /// Parser drops by reason (only non-zero ones).
    pub parse_drops: BTreeMap<&'static str, u64>,
    /// FDB entries.
    pub fdb_entries: usize,
    /// FDB writer counters.
    pub fdb: BTreeMap<&'static str, u64>,
}

impl Snapshot {
    /// Every drop, by reason, including transmit drops (only non-zero).
    pub fn drops(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (k, v) in &self.parse_drops {
            m.insert(format!("parse:{k}"), *v);
        }
        for (k, v) in &self.bridge {
            if let Some(r) = k.strip_prefix("drop_") {
                if *v > 0 {
                    m.insert(format!("bridge:{r}"), *v);
                }
            }
        }
        let tx: u64 = self.ports.iter().map(|p| p.tx_dropped).sum();
        if tx > 0 {
            m.insert("tx:queue_full".into(), tx);
        }
        m
    }
}

/// The emit side of the pipeline: per-port transmit batches and queues, and the pool.
struct Tx {
    queues: Vec<Box<dyn TxQueue>>,
    pending: Vec<Batch>,
    pool: PacketPool,
    stats: Arc<CachePadded<WorkerStats>>,
}

impl Tx {
    #[inline]
    fn flush(&mut self, port: usize) {
        let b = &mut self.pending[port];
        if b.is_empty() {
            return;
        }
        let n = b.len() as u64;
        let bytes: usize = b.as_slice().iter().map(Packet::len).sum();
        let sent = self.queues[port].tx_burst(b, &mut self.pool) as u64;
        let pc = &self.stats.ports[port];
        pc.tx_packets.add(sent);
        pc.tx_bytes.add(if sent == n {
            bytes as u64
        } else {
            bytes as u64 * sent / n.max(1)
        });
        if sent < n {
            pc.tx_dropped.add(n - sent);
        }
    }

    fn flush_all(&mut self) {
        for p in 0..self.pending.len() {
            self.flush(p);
        }
    }
}

impl Emit for Tx {
    #[inline(always)]
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }

    #[inline(always)]
    fn emit(&mut self, port: u16, pkt: Packet) {
        let port = usize::from(port);
        if self.pending[port].is_full() {
            self.flush(port);
        }
        // Cannot fail: flushed above when full.
        let _ = self.pending[port].push(pkt);
    }

    #[inline]
    fn emit_batch(&mut self, port: u16, batch: &mut Batch) {
        let port = usize::from(port);
        if !self.pending[port].is_empty() {
            self.flush(port);
        }
        // The whole batch becomes the port's transmit batch; the caller gets the empty one.
        std::mem::swap(&mut self.pending[port], batch);
    }
}

/// A worker's context, passed explicitly down the pipeline (DESIGN law 7).
struct Worker<L: Layout> {
    id: usize,
    core: Option<core_affinity::CoreId>,
    rx: Vec<(u16, Box<dyn RxQueue>)>,
    tx: Tx,
    bridge: Arc<Bridge<L>>,
    bw: BridgeWorker,
    stats: Arc<CachePadded<WorkerStats>>,
}

/// Why the datapath could not start.
#[derive(Debug)]
pub struct RunError(pub String);

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunError {}

/// What a run produced.
#[derive(Debug)]
pub struct RunResult {
    /// The last snapshot, taken after every worker stopped.
    pub last: Snapshot,
    /// The FDB at the end of the run.
    pub fdb: Vec<FdbEntry>,
    /// Port names by index.
    pub port_names: Vec<String>,
    /// Errors reported by ports when closing (e.g. a pcap file that could not be written).
    pub close_errors: Vec<String>,
}

/// Options of a run beyond the config.
pub struct RunOptions<'a> {
    /// Overrides the config's duration.
    pub duration: Option<Duration>,
    /// Overrides the config's worker count.
    pub workers: Option<usize>,
    /// How often `on_snapshot` is called.
    pub interval: Duration,
    /// Called with a snapshot every `interval` while running.
    pub on_snapshot: Option<&'a mut dyn FnMut(&Snapshot)>,
    /// Stops the run early when set.
    pub stop: Option<Arc<AtomicBool>>,
}

impl Default for RunOptions<'_> {
    fn default() -> Self {
        RunOptions {
            duration: None,
            workers: None,
            interval: Duration::from_secs(1),
            on_snapshot: None,
            stop: None,
        }
    }
}

fn open_port(spec: &crate::config::PortSpec) -> Result<Box<dyn Port>, RunError> {
    let e = |m: String| RunError(format!("port {:?}: {m}", spec.name));
    Ok(match spec.kind {
        PortKind::Gen => Box::new(freeway_io::gen::GenPort::new(spec.gen.clone().unwrap_or_default()).map_err(e)?),
        PortKind::Pcap => Box::new(
            freeway_io::pcap::PcapPort::new(spec.pcap.clone().expect("checked by config"))
                .map_err(|x| e(x.to_string()))?,
        ),
        PortKind::Sink => Box::new(freeway_io::sink::SinkPort::new()),
    })
}

/// Runs the datapath described by `cfg` until its duration ends, every input is exhausted,
/// or `opts.stop` is set. `L` chooses the FDB entry layout (the benchmark runs both).
pub fn run<L: Layout>(cfg: &Checked, mut opts: RunOptions<'_>) -> Result<RunResult, RunError> {
    let nworkers = opts.workers.unwrap_or(cfg.workers).max(1);
    let nports = cfg.ports.len();
    let (clock, _ticker) = Clock::start();

    // The FDB and its static entries.
    let (fdb_r, mut fdb_w) = fdb::new::<L>(cfg.fdb.clone());
    for (mac, vlan, port) in &cfg.statics {
        fdb_w
            .add_static(*mac, *vlan, *port, clock.now())
            .map_err(|e| RunError(format!("static entry {mac} vlan {vlan}: {e}")))?;
    }
    let bridge = Arc::new(Bridge::new(
        fdb_r.clone(),
        cfg.ports.iter().map(|p| p.vlan.clone()).collect(),
    ));

    // Open ports and deal their queues out to workers.
    let mut ports: Vec<Box<dyn Port>> = Vec::with_capacity(nports);
    let mut rx_of: Vec<Vec<(u16, Box<dyn RxQueue>)>> = (0..nworkers).map(|_| Vec::new()).collect();
    let mut tx_of: Vec<Vec<Box<dyn TxQueue>>> = (0..nworkers).map(|_| Vec::new()).collect();
    for (i, spec) in cfg.ports.iter().enumerate() {
        let mut port = open_port(spec)?;
        let PortQueues { rx, tx } = port
            .open(nworkers)
            .map_err(|e| RunError(format!("port {:?}: cannot open: {e}", spec.name)))?;
        if tx.len() != nworkers {
            return Err(RunError(format!(
                "port {:?} gave {} transmit queues for {nworkers} workers",
                spec.name,
                tx.len()
            )));
        }
        for (q, r) in rx.into_iter().enumerate() {
            rx_of[q % nworkers].push((i as u16, r));
        }
        for (w, t) in tx.into_iter().enumerate() {
            tx_of[w].push(t);
        }
        ports.push(port);
    }
    let offline = nworkers == 1
        && cfg
            .ports
            .iter()
            .any(|p| p.pcap.as_ref().is_some_and(|c| c.read.is_some()));

    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let pin = cfg.pin_workers && !cores.is_empty();
    let mut workers = Vec::new();
    let mut all_stats = Vec::new();
    for (id, (rx, txq)) in rx_of.into_iter().zip(tx_of).enumerate() {
        let bw = BridgeWorker::default();
        let stats = Arc::new(CachePadded::new(WorkerStats {
            packets: Counter::new(),
            batches: Counter::new(),
            idle_polls: Counter::new(),
            parse_drops: std::array::from_fn(|_| Counter::new()),
            ports: (0..nports).map(|_| CachePadded::new(PortCounters::default())).collect(),
            bridge: bw.counters.clone(),
        }));
        all_stats.push(stats.clone());
        workers.push(Worker {
            id,
            core: if pin { Some(cores[id % cores.len()]) } else { None },
            rx,
            tx: Tx {
                queues: txq,
                // Replaced on the worker's own thread (see `worker_main`).
                pending: (0..nports).map(|_| Batch::default()).collect(),
                pool: PacketPool::new(freeway_packet::DEFAULT_BUF_SIZE, 0, 0),
                stats: stats.clone(),
            },
            bridge: bridge.clone(),
            bw,
            stats,
        });
    }
    let cores_used: Vec<Option<usize>> = workers.iter().map(|w| w.core.map(|c| c.id)).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let writer_stop = Arc::new(AtomicBool::new(false));
    let (mut inline_writer, live_writer) = if offline {
        (Some(fdb_w), None)
    } else {
        (None, Some(fdb_w))
    };
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in workers {
        let clock = clock.clone();
        let stop = stop.clone();
        let writer = inline_writer.take();
        handles.push(
            std::thread::Builder::new()
                .name(format!("fw-worker-{}", w.id))
                .spawn(move || worker_main(w, clock, stop, writer))
                .map_err(|e| RunError(format!("cannot start a worker thread: {e}")))?,
        );
    }
    let writer_handle = match live_writer {
        Some(mut w) => {
            let clock = clock.clone();
            let ws = writer_stop.clone();
            Some(
                std::thread::Builder::new()
                    .name("fw-fdb".into())
                    .spawn(move || {
                        // Back off while idle: every wake-up preempts a worker on a busy
                        // machine, but learning latency is the sleep while requests arrive.
                        let mut nap = Duration::from_millis(1);
                        while !ws.load(Ordering::Relaxed) {
                            if w.service(clock.now()) == 0 {
                                nap = (nap * 2).min(Duration::from_millis(8));
                            } else {
                                nap = Duration::from_millis(1);
                            }
                            std::thread::sleep(nap);
                        }
                        w.service(clock.now());
                        w
                    })
                    .map_err(|e| RunError(format!("cannot start the FDB thread: {e}")))?,
            )
        }
        None => None,
    };

    let endless = cfg
        .ports
        .iter()
        .any(|p| p.kind == PortKind::Gen && p.gen.as_ref().is_none_or(|g| g.count.is_none()));
    let deadline = opts
        .duration
        .or(cfg.duration_secs.map(Duration::from_secs_f64))
        .or(if endless { Some(Duration::from_secs(5)) } else { None });
    let names: Vec<(String, &'static str)> = cfg.ports.iter().map(|p| (p.name.clone(), p.kind.name())).collect();
    let snap = |elapsed: Duration| snapshot(elapsed, &names, &all_stats, &cores_used, &fdb_r);
    let mut next_report = opts.interval;
    loop {
        std::thread::sleep(Duration::from_millis(20).min(opts.interval));
        let el = start.elapsed();
        if el >= next_report {
            if let Some(cb) = opts.on_snapshot.as_mut() {
                cb(&snap(el));
            }
            next_report += opts.interval;
        }
        let external = opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
        if external || deadline.is_some_and(|d| el >= d) || handles.iter().all(|h| h.is_finished()) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut writer = None;
    for h in handles {
        match h.join() {
            Ok(w) => writer = writer.or(w),
            Err(_) => return Err(RunError("a worker thread panicked".into())),
        }
    }
    let elapsed = start.elapsed();
    writer_stop.store(true, Ordering::Relaxed);
    if let Some(h) = writer_handle {
        writer = Some(h.join().map_err(|_| RunError("the FDB thread panicked".into()))?);
    }
    let mut close_errors = Vec::new();
    for (p, spec) in ports.iter_mut().zip(&cfg.ports) {
        if let Err(e) = p.close() {
            close_errors.push(format!("port {:?}: {e}", spec.name));
        }
    }
    drop(writer);
    Ok(RunResult {
        last: snap(elapsed),
        fdb: fdb_r.entries(clock.now()),
        port_names: cfg.ports.iter().map(|p| p.name.clone()).collect(),
        close_errors,
    })
}

fn snapshot<L: Layout>(
    elapsed: Duration,
    names: &[(String, &'static str)],
    stats: &[Arc<CachePadded<WorkerStats>>],
    cores: &[Option<usize>],
    fdb: &freeway_bridge::Fdb<L>,
) -> Snapshot {
    let mut s = Snapshot {
        elapsed_s: elapsed.as_secs_f64(),
        fdb_entries: fdb.len(),
        ..Default::default()
    };
    s.ports = names
        .iter()
        .enumerate()
        .map(|(i, (n, k))| {
            let mut p = PortSnap {
                name: n.clone(),
                kind: k,
                ..Default::default()
            };
            for w in stats {
                let c = &w.ports[i];
                p.rx_packets += c.rx_packets.get();
                p.rx_bytes += c.rx_bytes.get();
                p.tx_packets += c.tx_packets.get();
                p.tx_bytes += c.tx_bytes.get();
                p.tx_dropped += c.tx_dropped.get();
            }
            p
        })
        .collect();
    for (id, w) in stats.iter().enumerate() {
        s.workers.push(WorkerSnap {
            id,
            core: cores[id],
            packets: w.packets.get(),
            batches: w.batches.get(),
            idle_polls: w.idle_polls.get(),
        });
        for (k, v) in w.bridge.snapshot() {
            *s.bridge.entry(k).or_default() += v;
        }
        for (r, c) in ParseError::ALL.iter().zip(w.parse_drops.iter()) {
            if c.get() > 0 {
                *s.parse_drops.entry(r.name()).or_default() += c.get();
            }
        }
    }
    let f = fdb.stats();
    for (k, v) in [
        ("learned", f.learned.get()),
        ("limit_reached", f.limit_reached.get()),
        ("aged", f.aged.get()),
        ("deleted", f.deleted.get()),
        ("moved", f.moved.get()),
    ] {
        s.fdb.insert(k, v);
    }
    s
}

fn worker_main<L: Layout>(
    mut w: Worker<L>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    mut writer: Option<FdbWriter<L>>,
) -> Option<FdbWriter<L>> {
    if let Some(c) = w.core {
        core_affinity::set_for_current(c);
    }
    let Worker {
        rx,
        tx,
        bridge,
        bw,
        stats,
        ..
    } = &mut w;
    // Allocate the worker's own buffers here, on its thread: the allocator then serves them
    // from this thread's arena, so no line of them neighbours another worker's hot data.
    tx.pending = (0..tx.pending.len()).map(|_| Batch::new()).collect();
    tx.pool = PacketPool::default();
    let mut batch = Batch::new();
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        let mut got = 0;
        let mut live = false;
        for (port, q) in rx.iter_mut() {
            let n = q.rx_burst(&mut batch, &mut tx.pool, now);
            live |= !q.is_done();
            if n == 0 {
                continue;
            }
            got += n;
            process_batch(*port, &mut batch, now, tx, bridge, bw, stats, writer.as_mut());
        }
        if got == 0 {
            if !live {
                break;
            }
            stats.idle_polls.inc();
            idle += 1;
            if idle < 64 {
                std::hint::spin_loop();
            } else if idle < 1024 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        } else {
            idle = 0;
        }
    }
    tx.flush_all();
    writer
}

/// The pipeline for one received batch: count, parse, bridge, transmit.
#[allow(clippy::too_many_arguments)]
#[inline]
fn process_batch<L: Layout>(
    port: u16,
    batch: &mut Batch,
    now: u64,
    tx: &mut Tx,
    bridge: &Bridge<L>,
    bw: &mut BridgeWorker,
    stats: &WorkerStats,
    writer: Option<&mut FdbWriter<L>>,
) {
    let n = batch.len() as u64;
    let mut bytes = 0;
    batch.retain_or_recycle(&mut tx.pool, |p| {
        bytes += p.len();
        match parse(p) {
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
    stats.batches.inc();
    let mut learning = match writer {
        Some(w) => Learning::Inline(w),
        None => Learning::Queue,
    };
    bridge.process(bw, batch, now, tx, &mut learning);
    tx.flush_all();
}
