//! The runtime: workers, the per-batch pipeline, background threads, statistics.
//!
//! # Threads
//!
//! * **Workers** (`fw-worker-N`, pinned to cores when there are enough): each owns a set of
//!   receive queues (queue `i` of every port goes to worker `i % workers`) and one transmit
//!   queue per port. A worker polls a batch, runs it to completion and moves on:
//!   ingress taps → parse → conntrack and firewall (when configured) → bridge → router (for
//!   what the bridge delivered to the router port; its output is bridged again) → egress
//!   taps → transmit batches per port. Everything a worker needs is in its `Worker`
//!   context, passed explicitly down the pipeline; it shares nothing writable with other
//!   workers except the FDB entries and connections its packets' own flows touch.
//! * **Clock** (`fw-clock`): advances the coarse tick every millisecond.
//! * **FDB writer** (`fw-fdb`): applies learn requests and ages the FDB in chunks. In offline
//!   runs (one worker, a pcap input) the worker owns the writer instead and learns inline, so
//!   the output is deterministic.
//! * **Neighbour writer** (`fw-neigh`, with a router): applies the workers' ARP/ND updates
//!   and ages the neighbour table; inline in offline runs, like the FDB writer.
//! * **Conntrack expiry** (`fw-ct-expiry`, with conntrack): removes expired connections in
//!   bounded chunks.
//! * **Tap writers** (`fw-tap-N`, one per capture tap): drain the taps' per-worker rings into
//!   pcap or pcapng.
//! * **The caller's thread** watches the clock, takes statistics snapshots (summing the
//!   workers' single-writer counters) and decides when to stop.
//!
//! Statistics are per worker, each block on its own cache lines, summed only in snapshots.

mod capture;
mod control;
mod metrics;
mod router;
mod stateful;
mod trace;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use freeway_bridge::vlan::VlanSet;
use freeway_bridge::{
    fdb, Bridge, BridgeCounters, BridgeWorker, Emit, FdbEntry, FdbWriter, Layout, Learning, PortVlan,
};
use freeway_capture::{Direction, TapPoint, TapRegistry, Taps};
use freeway_conntrack::{ConnRecord, CtStats, FwStats};
use freeway_io::{Port, PortQueues, RxQueue, TxQueue};
use freeway_l3::neigh::NeighWriter;
use freeway_l3::{L3Counters, L3Stats, NeighEntry};
use freeway_packet::{parse, Batch, Packet, PacketPool, ParseError};
use freeway_route::cache::CacheCounters;
use freeway_route::RouteRecord;
use freeway_sync::{CachePadded, Clock, Counter, Tick};
use serde::Serialize;

pub use capture::{TapDesc, TapResult};
pub use control::{capture_request as ctl_capture, decode_request, request as ctl_request, MAX_REQUEST};
pub use trace::{Step as TraceStep, Trace};

/// The frame and input port a `freeway ctl trace` request describes (the control socket's
/// field parser, public for its fuzz target): `words` are the request's words after `trace`,
/// `port_names` the datapath's ports.
pub fn trace_request_frame(words: &[&str], port_names: &[String]) -> Result<(u16, Vec<u8>), String> {
    trace::frame_from_words(words, port_names, port_names.len())
}

use crate::config::{Checked, PortKind};
use router::{Bridging, RouterWorker};
use stateful::{CtStage, Stateful};

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
    /// The L3 stage's counters (with a router).
    pub l3: Option<Arc<CachePadded<L3Counters>>>,
    /// The route cache's counters (with a router).
    pub route_cache: Option<Arc<CachePadded<CacheCounters>>>,
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
    /// The router's counters, summed over workers (with a router).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterSnap>,
    /// Connection tracking (when configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<CtStats>,
    /// Firewall verdicts (when configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firewall: Option<FwStats>,
}

/// The router's counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RouterSnap {
    /// The L3 stage, summed over workers.
    pub l3: L3Stats,
    /// Route cache lookups answered from the cache.
    pub route_cache_hits: u64,
    /// Route cache misses (slot empty or another destination).
    pub route_cache_misses: u64,
    /// Route cache refills after a routing change (generation moved).
    pub route_cache_refills: u64,
    /// Full FIB lookups with the cache off.
    pub route_uncached: u64,
    /// Neighbour entries.
    pub neigh_entries: usize,
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
        if let Some(r) = &self.router {
            for (k, v) in &r.l3.drops {
                m.insert(format!("router:{k}"), *v);
            }
        }
        if let Some(f) = &self.firewall {
            for (k, v) in [
                ("invalid", f.drop_invalid),
                ("limit", f.drop_limit),
                ("new_not_allowed", f.drop_new_not_allowed),
            ] {
                if v > 0 {
                    m.insert(format!("firewall:{k}"), v);
                }
            }
        } else if let Some(c) = &self.conntrack {
            for (k, v) in &c.invalid_by_reason {
                if k.starts_with("limit") || k.starts_with("queue") {
                    m.insert(format!("conntrack:{k}"), *v);
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

/// No router port.
const NO_ROUTER: usize = usize::MAX;

/// Wall-clock time in nanoseconds (capture timestamps: read only when a tap matches).
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The emit side of the pipeline: per-port transmit batches and queues, egress taps, the
/// frames bridged to the router port, and the pool.
struct Tx<T: TapPoint> {
    queues: Vec<Box<dyn TxQueue>>,
    /// One per port, plus one for the router port when there is a router.
    pending: Vec<Batch>,
    pool: PacketPool,
    stats: Arc<CachePadded<WorkerStats>>,
    taps: T,
    /// Index of the router port (`NO_ROUTER` without a router).
    router_port: usize,
    /// Frames the bridge delivered to the router port, waiting for the L3 stage.
    router_inbox: Vec<Packet>,
}

impl<T: TapPoint> Tx<T> {
    #[inline]
    fn flush(&mut self, port: usize) {
        let b = &mut self.pending[port];
        if b.is_empty() {
            return;
        }
        if port == self.router_port {
            self.router_inbox.extend(b.drain());
            return;
        }
        if self.taps.any() {
            self.taps
                .tap_lazy(port as u16, Direction::Tx, b.as_slice(), &mut wall_ns);
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

impl<T: TapPoint> Emit for Tx<T> {
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
struct Worker<L: Layout, T: TapPoint> {
    id: usize,
    core: Option<core_affinity::CoreId>,
    rx: Vec<(u16, Box<dyn RxQueue>)>,
    tx: Tx<T>,
    bridge: Arc<Bridge<L>>,
    bw: BridgeWorker,
    router: Option<RouterWorker>,
    ct: Option<CtStage>,
    stats: Arc<CachePadded<WorkerStats>>,
}

/// The bridge as the router sees it from inside a worker: bridging the router's output.
struct BridgeCtx<'a, 'w, L: Layout, T: TapPoint> {
    tx: &'a mut Tx<T>,
    bridge: &'a Bridge<L>,
    bw: &'a mut BridgeWorker,
    learning: &'a mut Learning<'w, L>,
}

impl<L: Layout, T: TapPoint> Bridging for BridgeCtx<'_, '_, L, T> {
    #[inline]
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.tx.pool
    }

    #[inline]
    fn take_router_inbox(&mut self, into: &mut Vec<Packet>) {
        let r = self.tx.router_port;
        self.tx.flush(r);
        into.append(&mut self.tx.router_inbox);
    }

    #[inline]
    fn bridge(&mut self, batch: &mut Batch, now: Tick) {
        self.bridge.process(self.bw, batch, now, self.tx, self.learning);
    }
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
    /// The routing table at the end (with a router), as `ip -j route` records.
    pub routes: Vec<RouteRecord>,
    /// The routing table as `ip route` prints it.
    pub routes_text: String,
    /// The neighbour table at the end (with a router).
    pub neighbours: Vec<NeighEntry>,
    /// The connection table at the end (with conntrack).
    pub connections: Vec<ConnRecord>,
    /// What each capture tap did.
    pub taps: Vec<TapResult>,
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
    /// Ends the run once every capture tap has stopped (its count reached), like
    /// `tcpdump -c`.
    pub stop_when_taps_done: bool,
    /// Listen on this Unix socket for `freeway ctl` (see `runtime/control.rs`).
    pub control: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics (`GET /metrics`) on this TCP address.
    pub metrics: Option<String>,
}

impl Default for RunOptions<'_> {
    fn default() -> Self {
        RunOptions {
            duration: None,
            workers: None,
            interval: Duration::from_secs(1),
            on_snapshot: None,
            stop: None,
            stop_when_taps_done: false,
            control: None,
            metrics: None,
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
        PortKind::Afpacket => Box::new(
            freeway_io::afpacket::AfPacketPort::new(spec.afpacket.clone().expect("checked by config"))
                .map_err(|x| e(x.to_string()))?,
        ),
    })
}

/// Runs the datapath described by `cfg` until its duration ends, every input is exhausted,
/// or `opts.stop` is set. `L` chooses the FDB entry layout (the benchmark runs both).
pub fn run<L: Layout>(cfg: &Checked, opts: RunOptions<'_>) -> Result<RunResult, RunError> {
    run_with::<L, Taps>(cfg, opts, None)
}

/// The number of workers a run of `cfg` with `opts` starts.
pub fn worker_count(cfg: &Checked, opts: &RunOptions<'_>) -> usize {
    opts.workers.unwrap_or(cfg.workers).max(1)
}

/// Runs a background service (`f` once per round, returning how much work it found) until
/// `stop` is set, backing off while idle: every wake-up preempts a worker on a busy
/// machine, but the latency of the service is the sleep while work arrives.
fn spawn_service<S: Send + 'static>(
    name: &str,
    clock: Clock,
    stop: Arc<AtomicBool>,
    mut s: S,
    f: fn(&mut S, Tick) -> usize,
) -> Result<std::thread::JoinHandle<S>, RunError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut nap = Duration::from_millis(1);
            while !stop.load(Ordering::Relaxed) {
                if f(&mut s, clock.now()) == 0 {
                    nap = (nap * 2).min(Duration::from_millis(8));
                } else {
                    nap = Duration::from_millis(1);
                }
                std::thread::sleep(nap);
            }
            f(&mut s, clock.now());
            s
        })
        .map_err(|e| RunError(format!("cannot start the {name} thread: {e}")))
}

/// Takes snapshots of a run's counters (the caller's thread and the control thread).
pub(crate) struct Snapper<L: Layout> {
    names: Arc<[(String, &'static str)]>,
    stats: Arc<[Arc<CachePadded<WorkerStats>>]>,
    cores: Arc<[Option<usize>]>,
    fdb: freeway_bridge::Fdb<L>,
    neigh: Option<freeway_l3::Neigh>,
    ct: Option<freeway_conntrack::Conntrack>,
    fw: Option<freeway_conntrack::Firewall>,
}

impl<L: Layout> Clone for Snapper<L> {
    fn clone(&self) -> Self {
        Snapper {
            names: self.names.clone(),
            stats: self.stats.clone(),
            cores: self.cores.clone(),
            fdb: self.fdb.clone(),
            neigh: self.neigh.clone(),
            ct: self.ct.clone(),
            fw: self.fw.clone(),
        }
    }
}

impl<L: Layout> Snapper<L> {
    /// Sums every counter now.
    pub(crate) fn snap(&self, elapsed: Duration) -> Snapshot {
        let mut s = snapshot(elapsed, &self.names, &self.stats, &self.cores, &self.fdb);
        if let Some(r) = &mut s.router {
            r.neigh_entries = self.neigh.as_ref().map_or(0, |n| n.len());
        }
        if let Some(ct) = &self.ct {
            s.conntrack = Some(ct.stats());
            s.firewall = self.fw.as_ref().map(|f| f.stats());
        }
        s
    }
}

/// The writers a worker owns in offline runs (deterministic output).
struct Inline<L: Layout> {
    fdb: Option<FdbWriter<L>>,
    neigh: Option<NeighWriter>,
}

/// Like [`run`], with the capture registry `R` (the benchmark's baseline uses an `RwLock`
/// one). `taps`, when given, must be built for [`worker_count`] workers; the caller may
/// attach, replace and detach taps on it from another thread while the run goes on.
pub fn run_with<L: Layout, R: TapRegistry>(
    cfg: &Checked,
    opts: RunOptions<'_>,
    taps: Option<R>,
) -> Result<RunResult, RunError> {
    run_on_ports::<L, R>(cfg, opts, taps, Vec::new())
}

/// Like [`run_with`], with the first `given.len()` ports supplied by the caller instead of
/// opened from the config (whose entries still give their names and VLANs): the churn
/// harness (`freeway-bench`'s churn oracle) drives the runtime through ports of its own.
pub fn run_on_ports<L: Layout, R: TapRegistry>(
    cfg: &Checked,
    mut opts: RunOptions<'_>,
    taps: Option<R>,
    given: Vec<Box<dyn Port>>,
) -> Result<RunResult, RunError> {
    let mut given = given.into_iter();
    let nworkers = worker_count(cfg, &opts);
    let nports = cfg.ports.len();
    let (clock, _ticker) = Clock::start();
    let taps = taps.unwrap_or_else(|| R::with_workers(nworkers));

    // The router, as one more (internal) port of the bridge.
    let router = match &cfg.router {
        Some(spec) => Some(router::build(spec, nports as u16, clock.now())?),
        None => None,
    };
    let mut port_vlans: Vec<PortVlan> = cfg.ports.iter().map(|p| p.vlan.clone()).collect();
    if let Some(spec) = &cfg.router {
        let mut allowed = VlanSet::default();
        for i in &spec.interfaces {
            allowed.insert(i.vlan);
        }
        port_vlans.push(PortVlan::Trunk {
            allowed: Box::new(allowed),
            native: None,
        });
    }

    // The FDB and its static entries.
    let (fdb_r, mut fdb_w) = fdb::new::<L>(cfg.fdb.clone());
    for (mac, vlan, port) in &cfg.statics {
        fdb_w
            .add_static(*mac, *vlan, *port, clock.now())
            .map_err(|e| RunError(format!("static entry {mac} vlan {vlan}: {e}")))?;
    }
    if let Some(spec) = &cfg.router {
        for i in &spec.interfaces {
            fdb_w
                .add_static(i.mac, i.vlan, nports as u16, clock.now())
                .map_err(|e| RunError(format!("router interface {}: {e}", i.name)))?;
        }
    }
    let bridge = Arc::new(Bridge::new(fdb_r.clone(), port_vlans));
    let stateful = Stateful::start(
        cfg.conntrack.as_ref(),
        cfg.firewall.as_ref(),
        cfg.ports.iter().map(|p| p.zone).collect(),
        clock.clone(),
    )?;

    // Open ports and deal their queues out to workers.
    let mut ports: Vec<Box<dyn Port>> = Vec::with_capacity(nports);
    let mut rx_of: Vec<Vec<(u16, Box<dyn RxQueue>)>> = (0..nworkers).map(|_| Vec::new()).collect();
    let mut tx_of: Vec<Vec<Box<dyn TxQueue>>> = (0..nworkers).map(|_| Vec::new()).collect();
    for (i, spec) in cfg.ports.iter().enumerate() {
        let mut port = match given.next() {
            Some(p) => p,
            None => open_port(spec)?,
        };
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

    let mut port_names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
    if router.is_some() {
        // The router's internal bridge port, as FDB dumps name it.
        port_names.push("(router)".into());
    }
    let control_listener = opts.control.as_deref().map(control::bind).transpose()?;
    let metrics_listener = opts.metrics.as_deref().map(metrics::bind).transpose()?;
    if let Some(l) = &metrics_listener {
        if let Ok(a) = l.local_addr() {
            eprintln!("freeway: metrics on http://{a}/metrics");
        }
    }
    let running_taps = capture::attach(&taps, &cfg.taps, &port_names, nworkers)?;
    tracing::info!(
        workers = nworkers,
        ports = ?port_names,
        router = router.is_some(),
        conntrack = cfg.conntrack.is_some() || cfg.firewall.is_some(),
        taps = running_taps.len(),
        control = ?opts.control,
        metrics = ?opts.metrics,
        "datapath starting"
    );

    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let pin = cfg.pin_workers && !cores.is_empty();
    let npending = nports + usize::from(router.is_some());
    let mut workers = Vec::new();
    let mut all_stats = Vec::new();
    for (id, (rx, txq)) in rx_of.into_iter().zip(tx_of).enumerate() {
        let bw = BridgeWorker::default();
        let rw = router.as_ref().map(|(shared, _, _)| RouterWorker::new(shared));
        let stats = Arc::new(CachePadded::new(WorkerStats {
            packets: Counter::new(),
            batches: Counter::new(),
            idle_polls: Counter::new(),
            parse_drops: std::array::from_fn(|_| Counter::new()),
            ports: (0..nports).map(|_| CachePadded::new(PortCounters::default())).collect(),
            bridge: bw.counters.clone(),
            l3: rw.as_ref().map(|r| r.l3.counters().clone()),
            route_cache: rw.as_ref().map(|r| r.cache.counters()),
        }));
        all_stats.push(stats.clone());
        let tap_worker = taps
            .worker(id)
            .ok_or_else(|| RunError(format!("tap registry has no worker handle {id}")))?;
        workers.push(Worker {
            id,
            core: if pin { Some(cores[id % cores.len()]) } else { None },
            rx,
            tx: Tx {
                queues: txq,
                // Replaced on the worker's own thread (see `worker_main`).
                pending: (0..npending).map(|_| Batch::default()).collect(),
                pool: PacketPool::new(freeway_packet::DEFAULT_BUF_SIZE, 0, 0),
                stats: stats.clone(),
                taps: tap_worker,
                router_port: if router.is_some() { nports } else { NO_ROUTER },
                router_inbox: Vec::new(),
            },
            bridge: bridge.clone(),
            bw,
            router: rw,
            ct: stateful.as_ref().map(Stateful::worker),
            stats,
        });
    }
    let cores_used: Vec<Option<usize>> = workers.iter().map(|w| w.core.map(|c| c.id)).collect();

    let (router_shared, mut rib, neigh_w) = match router {
        Some((s, r, n)) => (Some(s), Some(r), Some(n)),
        None => (None, None, None),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let writer_stop = Arc::new(AtomicBool::new(false));
    let (mut inline, fdb_live, neigh_live) = if offline {
        (
            Some(Inline {
                fdb: Some(fdb_w),
                neigh: neigh_w,
            }),
            None,
            None,
        )
    } else {
        (None, Some(fdb_w), neigh_w)
    };
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in workers {
        let clock = clock.clone();
        let stop = stop.clone();
        let inline = inline.take();
        handles.push(
            std::thread::Builder::new()
                .name(format!("fw-worker-{}", w.id))
                .spawn(move || worker_main(w, clock, stop, inline))
                .map_err(|e| RunError(format!("cannot start a worker thread: {e}")))?,
        );
    }
    // The tables' writer threads also take the control socket's changes.
    let (fdb_ops, fdb_ops_rx) = crossbeam_channel::bounded::<control::Op<control::FdbOp>>(64);
    let (neigh_ops, neigh_ops_rx) = crossbeam_channel::bounded::<control::Op<control::NeighOp>>(64);
    let fdb_ops = fdb_live.is_some().then_some(fdb_ops);
    let neigh_ops = neigh_live.is_some().then_some(neigh_ops);
    let fdb_handle = fdb_live
        .map(|w| {
            spawn_service(
                "fw-fdb",
                clock.clone(),
                writer_stop.clone(),
                (w, fdb_ops_rx),
                |(w, rx), now| w.service(now) + control::apply_fdb(w, rx, now),
            )
        })
        .transpose()?;
    let neigh_handle = neigh_live
        .map(|w| {
            spawn_service(
                "fw-neigh",
                clock.clone(),
                writer_stop.clone(),
                (w, neigh_ops_rx),
                |(w, rx), now| w.service(now) + control::apply_neigh(w, rx, now),
            )
        })
        .transpose()?;

    let endless = cfg
        .ports
        .iter()
        .any(|p| p.kind == PortKind::Gen && p.gen.as_ref().is_none_or(|g| g.count.is_none()));
    let deadline = opts
        .duration
        .or(cfg.duration_secs.map(Duration::from_secs_f64))
        .or(if endless { Some(Duration::from_secs(5)) } else { None });
    let snapper = Snapper {
        names: cfg.ports.iter().map(|p| (p.name.clone(), p.kind.name())).collect(),
        stats: all_stats.into(),
        cores: cores_used.into(),
        fdb: fdb_r.clone(),
        neigh: router_shared.as_ref().map(|r| r.neigh.clone()),
        ct: stateful.as_ref().map(|s| s.ct.clone()),
        fw: stateful.as_ref().and_then(|s| s.fw.clone()),
    };
    let snap = |elapsed: Duration| snapper.snap(elapsed);
    let metrics_handle = match metrics_listener {
        Some(l) => {
            let (snap, stop) = (snapper.clone(), writer_stop.clone());
            Some(
                std::thread::Builder::new()
                    .name("fw-metrics".into())
                    .spawn(move || metrics::serve(l, snap, start, stop))
                    .map_err(|e| RunError(format!("cannot start the metrics thread: {e}")))?,
            )
        }
        None => None,
    };
    // The control socket, with the RIB, on its own thread.
    let ctl_handle = match (&opts.control, control_listener) {
        (Some(path), Some(l)) => {
            let c = control::Control {
                snap: snapper.clone(),
                start,
                clock: clock.clone(),
                fdb: fdb_r.clone(),
                port_names: port_names.clone(),
                rib: match (rib.take(), &router_shared) {
                    (Some(r), Some(sh)) => Some((r, sh.ifaces.clone(), sh.neigh.clone())),
                    _ => None,
                },
                ct: stateful.as_ref().map(|s| s.ct.clone()),
                port_vlans: bridge.ports().to_vec(),
                nports,
                fdb_ops: fdb_ops.clone(),
                neigh_ops: neigh_ops.clone(),
                attach: {
                    let (reg, names) = (taps.clone(), port_names.clone());
                    Box::new(move |spec, out| capture::attach_to(&reg, "fw-ctl-tap", spec, &names, nworkers, out))
                },
                detach: {
                    let reg = taps.clone();
                    Box::new(move |id| {
                        reg.detach(id);
                    })
                },
                captures: Vec::new(),
                config_taps: running_taps.iter().map(|t| (t.id(), t.desc().clone(), false)).collect(),
                ended: Vec::new(),
                fw: stateful.as_ref().and_then(|s| s.fw.clone()),
                zones: stateful
                    .as_ref()
                    .map_or_else(|| Arc::from(Vec::new()), |s| s.zones.clone()),
                l3: router_shared.as_ref().map(|r| r.l3.clone()),
            };
            let stop = writer_stop.clone();
            let h = std::thread::Builder::new()
                .name("fw-ctl".into())
                .spawn(move || control::serve(l, c, stop))
                .map_err(|e| RunError(format!("cannot start the control thread: {e}")))?;
            Some((path.clone(), h))
        }
        _ => None,
    };
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
        let taps_done =
            opts.stop_when_taps_done && !running_taps.is_empty() && running_taps.iter().all(|t| t.is_finished());
        if external || taps_done || deadline.is_some_and(|d| el >= d) || handles.iter().all(|h| h.is_finished()) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut inline_back = None;
    for h in handles {
        match h.join() {
            Ok(i) => inline_back = inline_back.or(i),
            Err(_) => return Err(RunError("a worker thread panicked".into())),
        }
    }
    let elapsed = start.elapsed();
    writer_stop.store(true, Ordering::Relaxed);
    if let Some(h) = fdb_handle {
        h.join().map_err(|_| RunError("the FDB thread panicked".into()))?;
    }
    let mut neigh_w = match neigh_handle {
        Some(h) => Some(
            h.join()
                .map_err(|_| RunError("the neighbour thread panicked".into()))?
                .0,
        ),
        None => inline_back.and_then(|i| i.neigh),
    };
    if let Some(h) = metrics_handle {
        h.join().map_err(|_| RunError("the metrics thread panicked".into()))?;
    }
    if let Some((path, h)) = ctl_handle {
        let c = h.join().map_err(|_| RunError("the control thread panicked".into()))?;
        rib = c.rib.map(|(r, _, _)| r);
        let _ = std::fs::remove_file(path);
    }
    let tap_results = capture::finish(&taps, running_taps);
    tracing::info!(elapsed_s = elapsed.as_secs_f64(), "datapath stopped");
    let mut close_errors = Vec::new();
    for (p, spec) in ports.iter_mut().zip(&cfg.ports) {
        if let Err(e) = p.close() {
            close_errors.push(format!("port {:?}: {e}", spec.name));
        }
    }
    for t in &tap_results {
        if let Some(e) = &t.error {
            close_errors.push(format!("tap on {:?} writing {}: {e}", t.tap.port, t.tap.write));
        }
    }
    let now = clock.now();
    let (routes, routes_text, neighbours) = match (&router_shared, &rib) {
        (Some(r), Some(rib)) => {
            if let Some(w) = neigh_w.as_mut() {
                w.service(now);
            }
            let name = |i: u16| r.ifaces.get(i).map_or_else(|| format!("if{i}"), |x| x.name.clone());
            (
                rib.records(name),
                rib.show(name).to_string(),
                r.neigh.entries(now, &r.ifaces),
            )
        }
        _ => (Vec::new(), String::new(), Vec::new()),
    };
    let last = snap(elapsed);
    let connections = stateful.as_ref().map(|s| s.ct.dump()).unwrap_or_default();
    Ok(RunResult {
        last,
        fdb: fdb_r.entries(now),
        port_names,
        close_errors,
        routes,
        routes_text,
        neighbours,
        connections,
        taps: tap_results,
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
        if let Some(l3) = &w.l3 {
            let r = s.router.get_or_insert_with(RouterSnap::default);
            r.l3.merge(&l3.snapshot());
            if let Some(c) = &w.route_cache {
                let c = c.snapshot();
                r.route_cache_hits += c.hits;
                r.route_cache_misses += c.misses;
                r.route_cache_refills += c.refills;
                r.route_uncached += c.uncached;
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

fn worker_main<L: Layout, T: TapPoint>(
    mut w: Worker<L, T>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    mut inline: Option<Inline<L>>,
) -> Option<Inline<L>> {
    if let Some(c) = w.core {
        core_affinity::set_for_current(c);
    }
    // Allocate the worker's own buffers here, on its thread: the allocator then serves them
    // from this thread's arena, so no line of them neighbours another worker's hot data.
    w.tx.pending = (0..w.tx.pending.len()).map(|_| Batch::new()).collect();
    w.tx.pool = PacketPool::default();
    w.tx.router_inbox = Vec::with_capacity(2 * freeway_packet::MAX_BATCH);
    if let Some(r) = w.router.as_mut() {
        r.on_thread();
    }
    let mut scratch: Vec<Packet> = Vec::with_capacity(2 * freeway_packet::MAX_BATCH);
    let mut batch = Batch::new();
    let mut rx = std::mem::take(&mut w.rx);
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
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
                w.tx.taps.tap_lazy(*port, Direction::Rx, batch.as_slice(), &mut wall_ns);
            }
            process_batch(&mut w, *port, &mut batch, now, inline.as_mut(), &mut scratch);
        }
        if got == 0 {
            if !live {
                break;
            }
            w.stats.idle_polls.inc();
            idle += 1;
            if idle % 64 == 0 {
                // Packets waiting for a neighbour go out (or time out) while no traffic comes;
                // the tap handle drops a tap list the control plane has replaced.
                poll_router(&mut w, now, inline.as_mut());
                w.tx.taps.idle();
            }
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
    poll_router(&mut w, clock.now(), inline.as_mut());
    w.tx.flush_all();
    inline
}

fn poll_router<L: Layout, T: TapPoint>(w: &mut Worker<L, T>, now: Tick, inline: Option<&mut Inline<L>>) {
    let Worker {
        tx, bridge, bw, router, ..
    } = w;
    let Some(r) = router.as_mut() else { return };
    let mut learning = match inline.and_then(|i| i.fdb.as_mut()) {
        Some(f) => Learning::Inline(f),
        None => Learning::Queue,
    };
    r.poll(
        now,
        &mut BridgeCtx {
            tx,
            bridge,
            bw,
            learning: &mut learning,
        },
    );
    tx.flush_all();
}

/// The pipeline for one received batch: count, parse, track, bridge, route, transmit.
#[inline]
fn process_batch<L: Layout, T: TapPoint>(
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
    if let Some(ct) = ct.as_mut() {
        ct.process(batch, &mut tx.pool);
    }
    let (fdb_w, neigh_w) = match inline {
        Some(i) => (i.fdb.as_mut(), i.neigh.as_mut()),
        None => (None, None),
    };
    let mut learning = match fdb_w {
        Some(f) => Learning::Inline(f),
        None => Learning::Queue,
    };
    bridge.process(bw, batch, now, tx, &mut learning);
    if let Some(r) = router.as_mut() {
        r.run(
            now,
            &mut BridgeCtx {
                tx,
                bridge,
                bw,
                learning: &mut learning,
            },
            scratch,
        );
        if let Some(nw) = neigh_w {
            // Offline: neighbour updates apply at once, so the output is deterministic.
            nw.service(now);
        }
    }
    tx.flush_all();
}

/// The routing table a configuration describes (connected routes of its interfaces and its
/// static routes), as `ip -j route` records and as `ip route` text, without running it.
pub fn route_table(cfg: &Checked) -> Result<(Vec<RouteRecord>, String), RunError> {
    let Some(spec) = &cfg.router else {
        return Err(RunError(
            "this configuration has no router: add an [[interface]] (see `freeway default-config`)".into(),
        ));
    };
    let (shared, rib, _) = router::build(spec, cfg.ports.len() as u16, 0)?;
    let name = |i: u16| {
        shared
            .ifaces
            .get(i)
            .map_or_else(|| format!("if{i}"), |x| x.name.clone())
    };
    Ok((rib.records(name), rib.show(name).to_string()))
}
