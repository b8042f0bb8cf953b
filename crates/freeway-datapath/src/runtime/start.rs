//! Starting and stopping a datapath, in named steps: [`build_tables`] (router, FDB, bridge,
//! conntrack), [`open_ports`] (queues dealt out to workers), [`build_workers`], then the
//! threads ([`start_threads`]: [`spawn_workers`], [`spawn_writers`], [`spawn_metrics`]; then
//! [`start_control`] and the Linux control plane's [`spawn_linux`]), [`wait`] for the end of
//! the run, and [`stop_and_collect`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::capture::RunningTap;
use super::control::{Control, FdbOp, NeighOp, Op};
use super::firewall::FirewallShared;
use super::router::{RouterShared, RouterWorker};
use super::stateful::Stateful;
use super::stats::{PortCounters, Snapper, WorkerStats};
use super::tx::{Next, Tx};
use super::worker::{worker_main, Inline, Worker};
use super::{capture, control, metrics, router, worker_count, RunError, RunOptions, RunResult};
use crate::config::{Checked, PortKind};
use crossbeam_channel::{Receiver, Sender};
use freeway_bridge::vlan::VlanSet;
use freeway_bridge::{fdb, Bridge, BridgeWorker, Fdb, FdbWriter, Layout, PortVlan};
use freeway_capture::TapRegistry;
use freeway_io::{Port, PortQueues, RxQueue, TxQueue};
use freeway_l3::neigh::NeighWriter;
use freeway_packet::{Batch, PacketPool};
use freeway_route::Rib;
use freeway_sync::{CachePadded, Clock, Counter, Tick};

pub(crate) fn open_port(spec: &crate::config::PortSpec) -> Result<Box<dyn Port>, RunError> {
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
                .map_err(|x| e(open_error(spec.kind, &x)))?,
        ),
        PortKind::Afxdp => Box::new(
            freeway_io::afxdp::AfXdpPort::new(spec.afxdp.clone().expect("checked by config"))
                .map_err(|x| e(x.to_string()))?,
        ),
    })
}

/// A port's opening error; an AF_PACKET port's refused permission says what it asks for
/// (tcpdump says it too: the user may not capture on that device).
pub(crate) fn open_error(kind: PortKind, x: &std::io::Error) -> String {
    if kind == PortKind::Afpacket && x.kind() == std::io::ErrorKind::PermissionDenied {
        format!("{x} (an afpacket port needs root or the CAP_NET_RAW capability)")
    } else {
        x.to_string()
    }
}

/// How a table's writer thread (`fw-fdb`, `fw-neigh`) naps between rounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Naps {
    /// After a round that found work: the thread naps this long without listening to its
    /// doorbell, so a flood of updates wakes it at most once per nap (the control socket's
    /// changes still wake it).
    pub(crate) after_work: Duration,
    /// The first nap after an idle round; each further idle round doubles it...
    pub(crate) idle_first: Duration,
    /// ...up to this. Idle naps end early when the doorbell rings or a control change comes.
    pub(crate) idle_max: Duration,
}

/// The writers' naps. While idle, the workers' queues (learn requests, neighbour updates)
/// ring the writer's doorbell, which wakes the thread at once, as do the control socket's
/// changes; without them the thread wakes every `idle_max` (ageing). About 30 wake-ups a
/// second while idle, where 8 ms gave 125; right after work it naps 1 ms.
pub(crate) const SERVICE_NAPS: Naps = Naps {
    after_work: Duration::from_millis(1),
    idle_first: Duration::from_millis(2),
    idle_max: Duration::from_millis(32),
};

/// Naps `nap`, or less when a control change arrives on `ops` or `bell` rings (what came
/// is left there for the service to take).
fn nap_on<T>(ops: &Receiver<T>, bell: Option<&Receiver<()>>, nap: Duration) {
    let deadline = Instant::now() + nap;
    let mut sel = crossbeam_channel::Select::new();
    sel.recv(ops);
    if let Some(b) = bell {
        sel.recv(b);
    }
    if sel.ready_deadline(deadline).is_err() || !ops.is_empty() || bell.is_some_and(|b| !b.is_empty()) {
        return;
    }
    // Ready with nothing there: `ops` is disconnected (it reads as ready at once). Nap the
    // rest of the time, still woken by the bell.
    match bell {
        Some(b) => {
            let _ = b.recv_deadline(deadline);
        }
        None => std::thread::sleep(deadline.saturating_duration_since(Instant::now())),
    }
}

/// Runs a background service (`f` once per round, returning how much work it found) until
/// `stop` is set, backing off while idle: every wake-up preempts a worker on a busy
/// machine, but the latency of the service is the sleep while work arrives, unless the
/// workers ring `bell` (see [`Naps`]). Its state is a table's writer and the control
/// socket's changes for it, which wake it.
pub(crate) fn spawn_service<W: Send + 'static, T: Send + 'static>(
    name: &str,
    clock: Clock,
    stop: Arc<AtomicBool>,
    naps: Naps,
    bell: Option<Receiver<()>>,
    mut s: (W, Receiver<T>),
    f: fn(&mut (W, Receiver<T>), Tick) -> usize,
) -> Result<std::thread::JoinHandle<(W, Receiver<T>)>, RunError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut idle = naps.idle_first;
            while !stop.load(Ordering::Relaxed) {
                // Taken before the round looks at the queue: an update queued after it
                // rings again.
                if let Some(b) = &bell {
                    let _ = b.try_recv();
                }
                // Up to date even while the ticker naps (all workers asleep).
                if f(&mut s, clock.refresh()) == 0 {
                    nap_on(&s.1, bell.as_ref(), idle);
                    idle = idle.saturating_mul(2).min(naps.idle_max);
                } else {
                    nap_on(&s.1, None, naps.after_work);
                    idle = naps.idle_first;
                }
            }
            f(&mut s, clock.now());
            s
        })
        .map_err(|e| RunError(format!("cannot start the {name} thread: {e}")))
}

/// Wakes the sleeping workers when the run stops; without it (no eventfd) they wake every
/// few milliseconds to look at the stop flag.
fn stop_wake() -> Option<Arc<freeway_io::wait::StopWake>> {
    freeway_io::wait::StopWake::new()
        .inspect_err(|e| tracing::warn!(error = %e, "no eventfd to wake idle workers: they wake every 5 ms"))
        .ok()
        .map(Arc::new)
}

/// Like [`run_with`](super::run_with), with the first `given.len()` ports supplied by the
/// caller instead of opened from the config (whose entries still give their names and
/// VLANs): the churn harness (`freeway-bench`'s churn oracle) drives the runtime through ports
/// of its own.
pub fn run_on_ports<L: Layout, R: TapRegistry>(
    cfg: &Checked,
    mut opts: RunOptions<'_>,
    taps: Option<R>,
    given: Vec<Box<dyn Port>>,
) -> Result<RunResult, RunError> {
    let nworkers = worker_count(cfg, &opts);
    let (clock, _ticker) = Clock::start();
    let taps = taps.unwrap_or_else(|| R::with_workers(nworkers));
    let mut tables = build_tables::<L>(cfg, &clock, nworkers)?;
    let twins = open_twins(cfg, &mut tables)?;
    let OpenPorts { ports, rx_of, tx_of } = open_ports(cfg, given, nworkers)?;
    let rx_load: Vec<usize> = rx_of.iter().map(Vec::len).collect();
    let ports = run_ports(cfg, ports);
    let offline = is_offline(cfg, nworkers);
    let port_names = bridge_port_names(cfg);
    let (control_listener, metrics_listener) = bind_listeners(&opts)?;
    let running_taps = capture::attach(&taps, &cfg.taps, &port_names, nworkers, offline)?;
    log_start(cfg, &opts, nworkers, &port_names, running_taps.len());
    let (mut workers, all_stats) = build_workers(cfg, &tables, rx_of, tx_of, &taps)?;
    let adder = hand_over(
        &mut workers,
        rx_load,
        port_names.len(),
        &ports,
        cfg.mdb.multicast_snooping,
    );
    let snapper = snapper_of(&tables, &workers, all_stats, &ports);
    let (router_shared, mut rib, neigh_w) = tables
        .router
        .map_or((None, None, None), |(s, r, n)| (Some(s), Some(r), Some(n)));
    let mut threads = start_threads(
        offline,
        (tables.fdb_w, neigh_w),
        workers,
        metrics_listener,
        &snapper,
        &clock,
    )?;
    let start = threads.start;
    // SIGHUP: the main thread reads the file again and, with a control thread, hands the
    // configuration to it (the owner of the RIB and of the tables' change queues).
    let (reload_tx, reload_rx) = crossbeam_channel::bounded::<Checked>(1);
    let (linux_threads, linux_feed) = spawn_linux(cfg, router_shared.as_ref(), twins.as_ref(), &threads.writer_stop)?;
    let share = || ShareCtl {
        config_path: opts.config_path.clone(),
        reloads: Some(reload_rx),
        cfg,
        snapper: &snapper,
        start,
        clock: &clock,
        fdb: &tables.fdb_r,
        bridge: &tables.bridge,
        port_names: &port_names,
        rib: rib.take(),
        router: router_shared.as_ref(),
        stateful: tables.stateful.as_ref(),
        firewall: tables.firewall.as_ref(),
        mtus: &tables.mtus,
        writers: &threads.writers,
        taps: &taps,
        nworkers,
        offline,
        running_taps: &running_taps,
        adder: Some(adder),
    };
    threads.control = start_control(control_listener, linux_feed, share, &threads.writer_stop)?;

    if let Some(ready) = opts.on_ready.as_mut() {
        ready();
    }
    let reload_to = threads.control.is_some().then_some(&reload_tx);
    wait(
        cfg,
        &mut opts,
        start,
        &snapper,
        &running_taps,
        &threads.workers,
        (tables.firewall.as_ref(), reload_to),
    );
    let (elapsed, inline_back, neigh_w, ctl_rib) = stop_and_collect(threads)?;
    linux_threads.join()?;
    let rib = ctl_rib.or(rib);
    let taps = capture::finish(&taps, running_taps);
    tracing::info!(elapsed_s = elapsed.as_secs_f64(), "datapath stopped");
    let close_errors = close_ports(&ports, &taps);
    let port_names = final_port_names(&ports, &port_names, cfg.router.is_some().then_some(cfg.ports.len()));
    let now = clock.now();
    let neigh_w = neigh_w.or(inline_back.and_then(|i| i.neigh));
    let (routes, routes_text, neighbours) = router_tables(router_shared.as_ref(), rib.as_ref(), neigh_w, now);
    Ok(RunResult {
        last: snapper.snap(elapsed),
        fdb: tables.fdb_r.entries(now),
        port_names,
        close_errors,
        routes,
        routes_text,
        neighbours,
        connections: tables.stateful.as_ref().map(|s| s.ct.dump()).unwrap_or_default(),
        taps,
    })
}

/// The run's open ports, indexed as the config lists them (the bridge indexes).
fn run_ports(cfg: &Checked, ports: Vec<Box<dyn Port>>) -> super::portset::RunPorts {
    let ports = ports.into_iter().zip(&cfg.ports).enumerate();
    Arc::new(Mutex::new(
        ports
            .map(|(i, (port, spec))| super::portset::RunPort {
                index: i as u16,
                name: spec.name.clone(),
                kind: spec.kind.name(),
                port,
                removed: false,
            })
            .collect(),
    ))
}

/// The control socket's and the metrics endpoint's listeners, bound before any thread starts
/// (a taken address fails the run at once).
fn bind_listeners(
    opts: &RunOptions<'_>,
) -> Result<(Option<control::Listener>, Option<std::net::TcpListener>), RunError> {
    let control = opts.control.as_deref();
    let control_listener = control.map(|p| control::bind(p, &opts.ctl_access)).transpose()?;
    let metrics_listener = opts.metrics.as_deref().map(metrics::bind).transpose()?;
    Ok((control_listener, metrics_listener))
}

/// Gives each worker the receiving end of a hand-over channel, and returns what adds ports
/// to them while they run: a reload's new ports go to the least-loaded worker.
fn hand_over<W: freeway_capture::TapPoint>(
    workers: &mut [Worker<impl Layout, W>],
    rx_load: Vec<usize>,
    next_index: usize,
    ports: &super::portset::RunPorts,
    snooping: bool,
) -> super::portset::Adder {
    let (to_workers, handovers) = super::portset::channels(workers.len());
    for (w, h) in workers.iter_mut().zip(handovers) {
        w.handover = Some(h);
    }
    super::portset::Adder {
        to_workers,
        rx_load,
        next_index,
        ports: ports.clone(),
        snooping,
        removed: Vec::new(),
    }
}

/// The log line of a run that starts.
fn log_start(cfg: &Checked, opts: &RunOptions<'_>, workers: usize, ports: &[String], taps: usize) {
    tracing::info!(
        workers,
        ports = ?ports,
        router = cfg.router.is_some(),
        conntrack = cfg.conntrack.is_some() || cfg.firewall.is_some(),
        taps,
        control = ?opts.control,
        metrics = ?opts.metrics,
        "datapath starting"
    );
}

/// Starts the tables' writers (or hands them to the one worker of an offline run), the
/// workers and the metrics endpoint; the run's time starts here. The control thread is added
/// to what it returns once it is built.
fn start_threads<L: Layout, T: freeway_capture::TapPoint + 'static>(
    offline: bool,
    (fdb_w, neigh_w): (FdbWriter<L>, Option<NeighWriter>),
    workers: Vec<Worker<L, T>>,
    metrics: Option<std::net::TcpListener>,
    snapper: &Snapper<L>,
    clock: &Clock,
) -> Result<Threads<L>, RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    let writer_stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let (inline, writers) = writers_for(offline, fdb_w, neigh_w, clock, &writer_stop)?;
    let stop_wake = stop_wake();
    let workers = spawn_workers(workers, clock, &stop, stop_wake.clone(), inline)?;
    let metrics = metrics
        .map(|l| spawn_metrics(l, snapper.clone(), start, &writer_stop))
        .transpose()?;
    Ok(Threads {
        start,
        stop,
        stop_wake,
        writer_stop,
        workers,
        writers,
        metrics,
        control: None,
    })
}

/// The tables' writers: in offline runs the one worker owns them (deterministic output);
/// otherwise they run on their own threads, which also take the control socket's changes.
fn writers_for<L: Layout>(
    offline: bool,
    fdb_w: FdbWriter<L>,
    neigh_w: Option<NeighWriter>,
    clock: &Clock,
    stop: &Arc<AtomicBool>,
) -> Result<(Option<Inline<L>>, Writers<L>), RunError> {
    Ok(if offline {
        let fdb = Some(fdb_w);
        (Some(Inline { fdb, neigh: neigh_w }), Writers::none())
    } else {
        (None, spawn_writers(fdb_w, neigh_w, clock, stop)?)
    })
}

/// The router interfaces' kernel twins (`[linux] punt`), opened before the workers that
/// write to them are built.
fn open_twins<L: Layout>(
    cfg: &Checked,
    tables: &mut Tables<L>,
) -> Result<Option<Arc<freeway_linuxcp::Twins>>, RunError> {
    Ok(match tables.router.as_mut() {
        Some((sh, _, _)) => {
            sh.twins = super::linux::twins(cfg, &sh.ifaces)?;
            sh.twins.clone()
        }
        None => None,
    })
}

/// The Linux control plane's threads: the kernel route mirror and the twins' reader.
struct LinuxThreads {
    mirror: Option<JoinHandle<()>>,
    twins: Option<JoinHandle<()>>,
}

impl LinuxThreads {
    /// Waits for both (they stop with the writers' stop flag).
    fn join(self) -> Result<(), RunError> {
        if let Some(h) = self.mirror {
            h.join()
                .map_err(|_| RunError("the linux mirror's thread panicked".into()))?;
        }
        if let Some(h) = self.twins {
            h.join().map_err(|_| RunError("the twins' thread panicked".into()))?;
        }
        Ok(())
    }
}

/// Starts the kernel route mirror (`[linux] mirror`, with a router: its changes go to the
/// control thread through the feed) and the reader of what the kernel sends through the
/// twins (`[linux] punt`).
fn spawn_linux(
    cfg: &Checked,
    router: Option<&RouterShared>,
    twins: Option<&Arc<freeway_linuxcp::Twins>>,
    stop: &Arc<AtomicBool>,
) -> Result<(LinuxThreads, Option<super::linux::LinuxFeed>), RunError> {
    let filter = cfg.linux.as_ref().and_then(|l| l.mirror.as_ref());
    let (mirror, feed) = match (filter, router) {
        (Some(filter), Some(sh)) => {
            let names = sh.ifaces.iter().map(|i| i.name.clone()).collect();
            let (h, feed) = super::linux::spawn(filter, names, sh.neigh.clone(), stop)?;
            (Some(h), Some(feed))
        }
        _ => (None, None),
    };
    let twins = twins.map(|t| super::linux::spawn_twins(t, stop)).transpose()?;
    Ok((LinuxThreads { mirror, twins }, feed))
}

/// What snapshots of a run read: every worker's counters, the tables, the ports' own counters.
fn snapper_of<L: Layout, T: freeway_capture::TapPoint>(
    tables: &Tables<L>,
    workers: &[Worker<L, T>],
    stats: Vec<Arc<CachePadded<WorkerStats>>>,
    ports: &super::portset::RunPorts,
) -> Snapper<L> {
    let stateful = tables.stateful.as_ref();
    Snapper {
        stats: stats.into(),
        cores: workers.iter().map(|w| w.core.map(|c| c.id)).collect(),
        fdb: tables.fdb_r.clone(),
        mdb: tables.bridge.mdb().cloned(),
        neigh: tables.router.as_ref().map(|(r, _, _)| r.neigh.clone()),
        ct: stateful.map(|s| s.ct.clone()),
        fw: stateful.and_then(|s| s.fw.clone()),
        ports: ports.clone(),
    }
}

/// Whether a run is offline: one worker and a pcap input. The worker then owns the tables'
/// writers, so the output is deterministic.
fn is_offline(cfg: &Checked, nworkers: usize) -> bool {
    nworkers == 1
        && cfg
            .ports
            .iter()
            .any(|p| p.pcap.as_ref().is_some_and(|c| c.read.is_some()))
}

/// The bridge's ports by name: the configured ones, then the router's internal port (as FDB
/// dumps name it).
fn bridge_port_names(cfg: &Checked) -> Vec<String> {
    let mut names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
    if cfg.router.is_some() {
        names.push("(router)".into());
    }
    names
}

/// Every bridge port's VLAN membership: the configured ports', then the router port's.
fn bridge_port_vlans(cfg: &Checked) -> Vec<PortVlan> {
    cfg.ports
        .iter()
        .map(|p| p.vlan.clone())
        .chain(router_vlans(cfg))
        .collect()
}

/// The bridge's ports by name at the end of a run: those it started with (`start`, the
/// router's at `router`), then those a reload added, at their indexes.
fn final_port_names(ports: &super::portset::RunPorts, start: &[String], router: Option<usize>) -> Vec<String> {
    let mut names = start.to_vec();
    for p in ports.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let i = usize::from(p.index);
        if names.len() <= i {
            names.resize(i + 1, String::new());
        }
        if Some(i) != router {
            names[i] = p.name.clone();
        }
    }
    names
}

/// Closes every port (flushing outputs) and lists what went wrong, with the taps' errors.
fn close_ports(ports: &super::portset::RunPorts, taps: &[super::TapResult]) -> Vec<String> {
    let mut errors = Vec::new();
    let mut ports = ports.lock().unwrap_or_else(|e| e.into_inner());
    for p in ports.iter_mut().filter(|p| !p.removed) {
        if let Err(e) = p.port.close() {
            errors.push(format!("port {:?}: {e}", p.name));
        }
    }
    for t in taps {
        if let Some(e) = &t.error {
            errors.push(format!("tap on {:?} writing {}: {e}", t.tap.port, t.tap.write));
        }
    }
    errors
}

/// The routing table (as `ip -j route` records and as `ip route` text) and the neighbour
/// table at the end of a run, after the neighbour writer's last round.
fn router_tables(
    router: Option<&RouterShared>,
    rib: Option<&Rib>,
    neigh_w: Option<NeighWriter>,
    now: Tick,
) -> (Vec<freeway_route::RouteRecord>, String, Vec<freeway_l3::NeighEntry>) {
    let (Some(r), Some(rib)) = (router, rib) else {
        return (Vec::new(), String::new(), Vec::new());
    };
    if let Some(mut w) = neigh_w {
        w.service(now);
    }
    // The interfaces as they are now (a reload may have changed their addresses).
    let ifs = r.live.current().1;
    (
        rib.records(&*ifs),
        rib.show(&*ifs).to_string(),
        r.neigh.entries(now, &ifs),
    )
}

/// What the control thread is built from.
pub(crate) struct ShareCtl<'a, L: Layout, R: TapRegistry> {
    cfg: &'a Checked,
    snapper: &'a Snapper<L>,
    start: Instant,
    clock: &'a Clock,
    fdb: &'a Fdb<L>,
    bridge: &'a Arc<Bridge<L>>,
    port_names: &'a [String],
    rib: Option<Rib>,
    router: Option<&'a RouterShared>,
    stateful: Option<&'a Stateful>,
    firewall: Option<&'a FirewallShared>,
    mtus: &'a Arc<super::mtu::PortMtus>,
    writers: &'a Writers<L>,
    taps: &'a R,
    nworkers: usize,
    /// Offline run: taps attached from the control socket are lossless too.
    offline: bool,
    running_taps: &'a [RunningTap],
    /// The file the run was started with (for `reload`).
    config_path: Option<std::path::PathBuf>,
    /// Configurations read again on SIGHUP, for the control thread to apply.
    reloads: Option<crossbeam_channel::Receiver<Checked>>,
    /// Adds ports to the running workers (a reload's new ports).
    adder: Option<super::portset::Adder>,
}

/// The control thread's state: read sides of every table, the RIB it owns from now on, the
/// writers' change queues, and the tap registry's attach/detach.
pub(crate) fn control_state<L: Layout, R: TapRegistry>(mut x: ShareCtl<'_, L, R>) -> Control<L> {
    Control {
        rates: Default::default(),
        live: super::control::reload_live(x.cfg),
        config_path: x.config_path.clone(),
        reloads: x.reloads.take(),
        snap: x.snapper.clone(),
        start: x.start,
        clock: x.clock.clone(),
        fdb: x.fdb.clone(),
        bridge: x.bridge.clone(),
        port_names: x.port_names.to_vec(),
        rib: match (x.rib.take(), x.router) {
            (Some(r), Some(sh)) => Some((r, sh.ifaces.clone(), sh.neigh.clone())),
            _ => None,
        },
        ifaces_live: x.router.map(|sh| sh.live.clone()),
        twins: x.router.and_then(|sh| sh.twins.clone()),
        ct: x.stateful.map(|s| s.ct.clone()),
        port_vlans: bridge_port_vlans(x.cfg),
        nports: x.cfg.ports.len(),
        fdb_ops: x.writers.fdb_ops.clone(),
        neigh_ops: x.writers.neigh_ops.clone(),
        attach: {
            let (n, offline) = (x.nworkers, x.offline);
            let (reg, names) = (x.taps.clone(), x.port_names.to_vec());
            Box::new(move |spec, out| capture::attach_to(&reg, "fw-ctl-tap", spec, &names, n, offline, out))
        },
        detach: {
            let reg = x.taps.clone();
            Box::new(move |id| {
                reg.detach(id);
            })
        },
        captures: Vec::new(),
        config_taps: x
            .running_taps
            .iter()
            .map(|t| (t.id(), t.desc().clone(), false))
            .collect(),
        ended: Vec::new(),
        fw: x.stateful.and_then(|s| s.fw.clone()),
        nft: x.firewall.cloned(),
        zones: x
            .stateful
            .as_ref()
            .map_or_else(|| Arc::from(Vec::new()), |s| s.zones.clone()),
        l3: x.router.map(|r| r.l3.clone()),
        mtus: x.mtus.clone(),
        linux: None,
        adder: x.adder.take(),
    }
}

/// Traces `frame` arriving on port `in_port` through the tables `cfg` describes, before any
/// traffic (static FDB entries, routes and neighbours only), without starting a datapath:
/// what `freeway ctl trace` answers on a run of `cfg` that has seen nothing yet.
pub fn trace_config<L: Layout>(cfg: &Checked, in_port: u16, frame: Vec<u8>) -> Result<super::Trace, RunError> {
    let (clock, _ticker) = Clock::start();
    let mut tables = build_tables::<L>(cfg, &clock, cfg.workers)?;
    if let Some((_, _, nw)) = tables.router.as_mut() {
        nw.service(clock.now());
    }
    let port_names = bridge_port_names(cfg);
    let port_vlans: Vec<PortVlan> = bridge_port_vlans(cfg);
    let no_zones: Arc<[u16]> = Arc::from(Vec::new());
    let t = super::trace::Tables {
        bridge: &tables.bridge,
        fdb: &tables.fdb_r,
        port_names: &port_names,
        port_vlans: &port_vlans,
        nports: cfg.ports.len(),
        now: clock.now(),
        ct: tables.stateful.as_ref().map(|s| &s.ct),
        fw: tables.stateful.as_ref().and_then(|s| s.fw.as_ref()),
        nft: tables.firewall.as_ref().map(|f| (f.current(), f.zones())),
        ct_state: Default::default(),
        zones: tables.stateful.as_ref().map_or(&no_zones, |s| &s.zones),
        router: tables.router.as_ref().map(|(sh, rib, _)| super::trace::RouterView {
            rib,
            ifaces: &sh.ifaces,
            neigh: &sh.neigh,
            l3: &sh.l3,
        }),
    };
    Ok(t.trace(in_port, frame))
}

/// The shared tables of a run, built before any thread starts.
pub(crate) struct Tables<L: Layout> {
    /// The router's shared state, its RIB and its neighbour writer (with a router).
    pub(crate) router: Option<(RouterShared, Rib, NeighWriter)>,
    /// The FDB's read side.
    pub(crate) fdb_r: Fdb<L>,
    /// The FDB's writer, with the static entries already in.
    pub(crate) fdb_w: FdbWriter<L>,
    /// The bridge (every port's VLAN membership, the FDB).
    pub(crate) bridge: Arc<Bridge<L>>,
    /// Conntrack and the firewall (when configured).
    pub(crate) stateful: Option<Stateful>,
    /// The nftables firewall (with `[firewall] ruleset`).
    pub(crate) firewall: Option<FirewallShared>,
    /// The ports' live MTUs and the buffer sizes they need.
    pub(crate) mtus: Arc<super::mtu::PortMtus>,
}

/// The VLANs of the router's internal bridge port: a trunk of its interfaces' VLANs.
fn router_vlans(cfg: &Checked) -> Option<PortVlan> {
    let spec = cfg.router.as_ref()?;
    let mut allowed = VlanSet::default();
    for i in &spec.interfaces {
        allowed.insert(i.vlan);
    }
    Some(PortVlan::Trunk {
        allowed: Box::new(allowed),
        native: None,
    })
}

/// Builds the router (one more, internal, port of the bridge), the FDB with its static
/// entries, the bridge and the connection table.
pub(crate) fn build_tables<L: Layout>(cfg: &Checked, clock: &Clock, nworkers: usize) -> Result<Tables<L>, RunError> {
    let nports = cfg.ports.len();
    let router = match &cfg.router {
        Some(spec) => Some(router::build(spec, nports as u16, clock.now())?),
        None => None,
    };
    // Room for every port index of the run (see `portset`).
    let port_vlans: Vec<PortVlan> = super::portset::padded(&bridge_port_vlans(cfg));
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
    let mut bridge = Bridge::new(fdb_r.clone(), port_vlans);
    if cfg.mdb.multicast_snooping {
        let (mdb_r, mdb_w) = freeway_bridge::mdb::new_random(cfg.mdb.clone(), cfg.ports.iter().map(|p| p.mcast));
        fdb_w.attach_mdb(mdb_w);
        bridge.set_mdb(mdb_r);
    }
    for (i, p) in cfg.ports.iter().enumerate() {
        bridge
            .set_group_fwd_mask(i as u16, p.group_fwd_mask)
            .and_then(|()| bridge.set_port_name(i as u16, &p.name))
            .and_then(|()| bridge.set_port_flags(i as u16, p.flags))
            .and_then(|()| bridge.set_storm_control(i as u16, per_worker(p.storm, nworkers)))
            .map_err(|e| RunError(format!("port {:?}: {e}", p.name)))?;
    }
    let bridge = Arc::new(bridge);
    let stateful = Stateful::start(
        cfg.conntrack.as_ref(),
        cfg.firewall.as_ref(),
        cfg.ports.iter().map(|p| p.zone).collect(),
        clock.clone(),
    )?;
    let firewall = build_firewall(cfg, router.as_ref().map(|r| &r.0), stateful.as_ref(), nworkers)?;
    Ok(Tables {
        router,
        fdb_r,
        fdb_w,
        bridge,
        stateful,
        firewall,
        mtus: Arc::new(super::mtu::PortMtus::new(cfg)),
    })
}

/// A port's storm control as each of `workers` workers applies it: an even share of every
/// rate, rounded up (a limited class stays limited).
fn per_worker(s: freeway_bridge::StormControl, workers: usize) -> freeway_bridge::StormControl {
    let share = |r: u32| if r == 0 { 0 } else { r.div_ceil(workers.max(1) as u32) };
    freeway_bridge::StormControl {
        broadcast: share(s.broadcast),
        multicast: share(s.multicast),
        unknown_unicast: share(s.unknown_unicast),
    }
}

/// Compiles the nftables ruleset of `[firewall]`, if there is one: it judges routed packets,
/// so it needs the router; each router interface's conntrack zone is that of the ports on
/// its VLAN, which must agree.
fn build_firewall(
    cfg: &Checked,
    router: Option<&RouterShared>,
    stateful: Option<&Stateful>,
    nworkers: usize,
) -> Result<Option<FirewallShared>, RunError> {
    let Some((source, rs)) = cfg.firewall.as_ref().and_then(|f| f.ruleset.as_ref()) else {
        return Ok(None);
    };
    let (Some(router), Some(st), Some(spec)) = (router, stateful, cfg.router.as_ref()) else {
        return Err(RunError(
            "firewall: a ruleset judges routed packets: it needs a [router] with interfaces".into(),
        ));
    };
    let zones = spec
        .interfaces
        .iter()
        .map(|i| super::firewall::iface_zone(cfg, i).map_err(RunError))
        .collect::<Result<Vec<u16>, RunError>>()?;
    let nat_on = st.nat_on.clone();
    FirewallShared::new(
        rs.clone(),
        source,
        &router.ifaces,
        zones,
        nworkers,
        st.ct.clone(),
        nat_on,
    )
    .map(Some)
}

/// The ports of a run, open, with their queues dealt out to workers.
pub(crate) struct OpenPorts {
    /// Every port, in config order.
    pub(crate) ports: Vec<Box<dyn Port>>,
    /// Each worker's receive queues, with their port index.
    pub(crate) rx_of: Vec<Vec<(u16, Box<dyn RxQueue>)>>,
    /// Each worker's transmit queues, one per port.
    pub(crate) tx_of: Vec<Vec<Box<dyn TxQueue>>>,
}

/// Opens every port (the `given` ones first, in order) and deals its queues out: receive
/// queue `q` to worker `q % workers`, transmit queue `w` to worker `w`.
pub(crate) fn open_ports(cfg: &Checked, given: Vec<Box<dyn Port>>, nworkers: usize) -> Result<OpenPorts, RunError> {
    let mut given = given.into_iter();
    let mut out = OpenPorts {
        ports: Vec::with_capacity(cfg.ports.len()),
        rx_of: (0..nworkers).map(|_| Vec::new()).collect(),
        tx_of: (0..nworkers).map(|_| Vec::new()).collect(),
    };
    for (i, spec) in cfg.ports.iter().enumerate() {
        let mut port = match given.next() {
            Some(p) => p,
            None => open_port(spec)?,
        };
        let PortQueues { rx, tx } = port.open(nworkers).map_err(|e| {
            RunError(format!(
                "port {:?}: cannot open: {}",
                spec.name,
                open_error(spec.kind, &e)
            ))
        })?;
        if tx.len() != nworkers {
            return Err(RunError(format!(
                "port {:?} gave {} transmit queues for {nworkers} workers",
                spec.name,
                tx.len()
            )));
        }
        for (q, r) in rx.into_iter().enumerate() {
            out.rx_of[q % nworkers].push((i as u16, r));
        }
        for (w, t) in tx.into_iter().enumerate() {
            out.tx_of[w].push(t);
        }
        out.ports.push(port);
    }
    Ok(out)
}

/// A worker ready to start, and its counters.
type Built<L, R> = (
    Vec<Worker<L, <R as TapRegistry>::Worker>>,
    Vec<Arc<CachePadded<WorkerStats>>>,
);

/// Builds each worker's context: its queues, transmit batches, bridge and router stages,
/// conntrack stage, tap handle and counters (allocated again on its own thread).
pub(crate) fn build_workers<L: Layout, R: TapRegistry>(
    cfg: &Checked,
    tables: &Tables<L>,
    rx_of: Vec<Vec<(u16, Box<dyn RxQueue>)>>,
    tx_of: Vec<Vec<Box<dyn TxQueue>>>,
    taps: &R,
) -> Result<Built<L, R>, RunError> {
    let nports = cfg.ports.len();
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let nworkers = rx_of.len();
    let pin = !cores.is_empty() && cfg.pin_workers.resolve(nworkers, cores.len(), &cfg.ports);
    tracing::info!(pinned = pin, pin_workers = ?cfg.pin_workers, cores = cores.len(), "worker placement");
    let next: Box<[Next]> = (0..nports)
        .map(|_| Next::Tx)
        .chain(tables.router.as_ref().map(|_| Next::Router))
        .collect();
    let mut workers = Vec::new();
    let mut all_stats = Vec::new();
    for (id, (rx, txq)) in rx_of.into_iter().zip(tx_of).enumerate() {
        let bw = BridgeWorker::default();
        let fw = tables.firewall.as_ref().map(|f| f.worker(id));
        let rw = tables
            .router
            .as_ref()
            .map(|(shared, _, _)| RouterWorker::new(shared, fw, id == 0));
        let ct = tables.stateful.as_ref().map(Stateful::worker);
        let frag = ct.as_ref().and_then(|c| c.reasm.as_ref()).map(|r| r.counters().clone());
        let stats = Arc::new(CachePadded::new(WorkerStats {
            packets: Counter::new(),
            batches: Counter::new(),
            parses: Counter::new(),
            idle_polls: Counter::new(),
            sleeps: Counter::new(),
            wakeups: Counter::new(),
            parse_drops: std::array::from_fn(|_| Counter::new()),
            ports: (0..super::portset::PORT_INDEXES)
                .map(|_| CachePadded::new(PortCounters::default()))
                .collect(),
            bridge: bw.counters.clone(),
            l3: rw.as_ref().map(|r| r.l3.counters().clone()),
            route_cache: rw.as_ref().map(|r| r.cache.counters()),
            frag: frag.clone(),
        }));
        all_stats.push(stats.clone());
        let tap_worker = taps
            .worker(id)
            .ok_or_else(|| RunError(format!("tap registry has no worker handle {id}")))?;
        workers.push(Worker {
            id,
            core: pin.then(|| cores[cfg.pin_workers.core_index(id, nworkers, cores.len())]),
            rx,
            tx: Tx {
                queues: txq,
                // Replaced on the worker's own thread (see `worker_main`).
                pending: (0..nports).map(|_| Batch::default()).collect(),
                pool: PacketPool::new(freeway_packet::DEFAULT_BUF_SIZE, 0, 0),
                stats: stats.clone(),
                taps: tap_worker,
                poll_ns: 0,
                next: next.clone(),
                to_router: Vec::new(),
                refrag: frag,
                refrag_out: Vec::new(),
                mtus: tables.mtus.clone(),
            },
            bridge: tables.bridge.clone(),
            bw,
            router: rw,
            ct,
            stats,
            handover: None,
        });
    }
    Ok((workers, all_stats))
}

/// Starts one thread per worker (`fw-worker-N`); the first takes the inline writers. Returns
/// once every worker's thread runs under its name (a thread is named by itself as it starts,
/// so until then `/proc` shows its creator's name): `RunOptions::on_ready` may then find each.
pub(crate) fn spawn_workers<L: Layout, T: freeway_capture::TapPoint + 'static>(
    workers: Vec<Worker<L, T>>,
    clock: &Clock,
    stop: &Arc<AtomicBool>,
    stop_wake: Option<Arc<freeway_io::wait::StopWake>>,
    mut inline: Option<Inline<L>>,
) -> Result<Vec<JoinHandle<Option<Inline<L>>>>, RunError> {
    let mut handles = Vec::new();
    let (started_tx, started) = crossbeam_channel::unbounded::<()>();
    for w in workers {
        let (clock, stop, wake, inline) = (clock.clone(), stop.clone(), stop_wake.clone(), inline.take());
        let started_tx = started_tx.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("fw-worker-{}", w.id))
                .spawn(move || {
                    // The spawner waits for this (it is gone only if a later worker failed to start).
                    let _ = started_tx.send(());
                    worker_main(w, clock, stop, wake, inline)
                })
                .map_err(|e| RunError(format!("cannot start a worker thread: {e}")))?,
        );
    }
    // Ends early only if a worker's thread ended before saying it started (every sender gone).
    drop(started_tx);
    for _ in 0..handles.len() {
        if started.recv().is_err() {
            break;
        }
    }
    Ok(handles)
}

/// A table's writer thread: it hands back the writer and its change queue.
type WriterThread<W, T> = JoinHandle<(W, Receiver<Op<T>>)>;

/// The tables' writer threads and the channels that bring them the control socket's changes.
pub(crate) struct Writers<L: Layout> {
    /// Changes for the FDB writer (none in offline runs).
    pub(crate) fdb_ops: Option<Sender<Op<FdbOp>>>,
    /// Changes for the neighbour writer (none in offline runs or without a router).
    pub(crate) neigh_ops: Option<Sender<Op<NeighOp>>>,
    fdb: Option<WriterThread<FdbWriter<L>, FdbOp>>,
    neigh: Option<WriterThread<NeighWriter, NeighOp>>,
    /// Rings the FDB writer's doorbell once its stop flag is set.
    fdb_wake: Option<Fdb<L>>,
    /// Rings the neighbour writer's doorbell once its stop flag is set.
    neigh_wake: Option<freeway_l3::neigh::Neigh>,
}

impl<L: Layout> Writers<L> {
    /// No writer threads (offline runs: the worker owns the writers).
    fn none() -> Self {
        Writers {
            fdb_ops: None,
            neigh_ops: None,
            fdb: None,
            neigh: None,
            fdb_wake: None,
            neigh_wake: None,
        }
    }
}

/// Starts the FDB writer (`fw-fdb`) and, with a router, the neighbour writer (`fw-neigh`):
/// each ages its table and applies learn requests and control changes.
pub(crate) fn spawn_writers<L: Layout>(
    fdb_w: FdbWriter<L>,
    neigh_w: Option<NeighWriter>,
    clock: &Clock,
    stop: &Arc<AtomicBool>,
) -> Result<Writers<L>, RunError> {
    let (fdb_ops, fdb_rx) = crossbeam_channel::bounded::<Op<FdbOp>>(64);
    let (bell, fdb_wake) = (fdb_w.doorbell().clone(), fdb_w.reader());
    let fdb = spawn_fdb_service(clock, stop, SERVICE_NAPS, bell, (fdb_w, fdb_rx))?;
    let (neigh_ops, neigh, neigh_wake) = match neigh_w {
        Some(w) => {
            let (tx, rx) = crossbeam_channel::bounded::<Op<NeighOp>>(64);
            let (bell, wake) = (w.doorbell().clone(), w.reader());
            let h = spawn_neigh_service(clock, stop, SERVICE_NAPS, bell, (w, rx))?;
            (Some(tx), Some(h), Some(wake))
        }
        None => (None, None, None),
    };
    Ok(Writers {
        fdb_ops: Some(fdb_ops),
        neigh_ops,
        fdb: Some(fdb),
        neigh,
        fdb_wake: Some(fdb_wake),
        neigh_wake,
    })
}

/// The FDB writer's thread (`fw-fdb`): the workers' learn requests, ageing, the multicast
/// database and the control socket's changes, woken by the table's doorbell.
pub(crate) fn spawn_fdb_service<L: Layout>(
    clock: &Clock,
    stop: &Arc<AtomicBool>,
    naps: Naps,
    bell: Receiver<()>,
    s: (FdbWriter<L>, Receiver<Op<FdbOp>>),
) -> Result<WriterThread<FdbWriter<L>, FdbOp>, RunError> {
    spawn_service(
        "fw-fdb",
        clock.clone(),
        stop.clone(),
        naps,
        Some(bell),
        s,
        |(w, rx), now| w.service(now) + control::apply_fdb(w, rx, now),
    )
}

/// The neighbour writer's thread (`fw-neigh`): the workers' updates, ageing and the control
/// socket's changes, woken by the table's doorbell.
pub(crate) fn spawn_neigh_service(
    clock: &Clock,
    stop: &Arc<AtomicBool>,
    naps: Naps,
    bell: Receiver<()>,
    s: (NeighWriter, Receiver<Op<NeighOp>>),
) -> Result<WriterThread<NeighWriter, NeighOp>, RunError> {
    spawn_service(
        "fw-neigh",
        clock.clone(),
        stop.clone(),
        naps,
        Some(bell),
        s,
        |(w, rx), now| w.service(now) + control::apply_neigh(w, rx, now),
    )
}

/// Starts the Prometheus endpoint's thread (`fw-metrics`).
pub(crate) fn spawn_metrics<L: Layout>(
    l: std::net::TcpListener,
    snap: Snapper<L>,
    start: Instant,
    stop: &Arc<AtomicBool>,
) -> Result<JoinHandle<()>, RunError> {
    let stop = stop.clone();
    std::thread::Builder::new()
        .name("fw-metrics".into())
        .spawn(move || metrics::serve(l, snap, start, stop))
        .map_err(|e| RunError(format!("cannot start the metrics thread: {e}")))
}

/// Starts the control socket's thread (`fw-ctl`), which owns the RIB while the run lasts
/// (and its acceptor and client threads, see `control.rs`).
/// The control thread, started when there is a socket to serve or when the kernel route
/// mirror needs the RIB's writer; `share` is called only then (it takes the RIB).
fn start_control<'a, L: Layout, R: TapRegistry + 'a>(
    listener: Option<control::Listener>,
    linux: Option<super::linux::LinuxFeed>,
    share: impl FnOnce() -> ShareCtl<'a, L, R>,
    stop: &Arc<AtomicBool>,
) -> Result<Option<JoinHandle<Control<L>>>, RunError> {
    if listener.is_none() && linux.is_none() {
        return Ok(None);
    }
    let mut c = control_state(share());
    c.linux = linux;
    spawn_control(listener, c, stop).map(Some)
}

pub(crate) fn spawn_control<L: Layout>(
    l: Option<control::Listener>,
    c: Control<L>,
    stop: &Arc<AtomicBool>,
) -> Result<JoinHandle<Control<L>>, RunError> {
    let stop = stop.clone();
    std::thread::Builder::new()
        .name("fw-ctl".into())
        .spawn(move || control::serve(l, c, stop))
        .map_err(|e| RunError(format!("cannot start the control thread: {e}")))
}

/// The longest the caller's thread sleeps while it waits for the run's end: an external stop
/// (a signal), finished taps or workers are noticed that late at most. Twenty wake-ups a
/// second while idle, where 20 ms gave 50.
const WAIT_NAP: Duration = Duration::from_millis(50);

/// Waits, on the caller's thread, until the run should end: its duration (5 s for an
/// endless generator without one), an external stop, every tap done (`tcpdump -c`), or every
/// worker finished (inputs exhausted). Calls `on_snapshot` every interval meanwhile.
pub(crate) fn wait<L: Layout, T>(
    cfg: &Checked,
    opts: &mut RunOptions<'_>,
    start: Instant,
    snapper: &Snapper<L>,
    running_taps: &[RunningTap],
    workers: &[JoinHandle<T>],
    (firewall, control): (Option<&FirewallShared>, Option<&crossbeam_channel::Sender<Checked>>),
) {
    let endless = cfg
        .ports
        .iter()
        .any(|p| p.kind == PortKind::Gen && p.gen.as_ref().is_none_or(|g| g.count.is_none()));
    let deadline = opts
        .duration
        .or(cfg.duration_secs.map(Duration::from_secs_f64))
        .or(if endless { Some(Duration::from_secs(5)) } else { None });
    let mut next_report = opts.interval;
    loop {
        // Until the next report or the deadline, looking at the stop flag, the taps and the
        // workers at least every `WAIT_NAP`.
        let el = start.elapsed();
        let due = deadline.map_or(next_report, |d| d.min(next_report));
        std::thread::sleep(WAIT_NAP.min(due.saturating_sub(el)));
        let el = start.elapsed();
        if el >= next_report {
            if let Some(cb) = opts.on_snapshot.as_mut() {
                cb(&snapper.snap(el));
            }
            next_report += opts.interval;
        }
        if opts.reload.as_ref().is_some_and(|r| r.swap(false, Ordering::Relaxed)) {
            if let Some(read) = opts.reload_config.as_mut() {
                match (read(), control) {
                    // The control thread applies every live change (see `control/reload.rs`).
                    (Ok(new), Some(tx)) => {
                        if tx.try_send(new).is_err() {
                            tracing::warn!("reload: the previous reload is still being applied; try again");
                        }
                    }
                    (new, _) => reload(new, firewall),
                }
            }
        }
        let external = opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
        let taps_done =
            opts.stop_when_taps_done && !running_taps.is_empty() && running_taps.iter().all(|t| t.is_finished());
        if external {
            tracing::info!("stop requested: draining and shutting down");
        }
        if external || taps_done || deadline.is_some_and(|d| el >= d) || workers.iter().all(|h| h.is_finished()) {
            break;
        }
    }
}

/// Applies a configuration read again (`SIGHUP`): the firewall's ruleset is replaced
/// atomically when the run has one; the rest of a changed configuration takes effect at the
/// next start. Every outcome is logged; a configuration with an error changes nothing.
fn reload(new: Result<Checked, String>, firewall: Option<&FirewallShared>) {
    let new = match new {
        Ok(c) => c,
        Err(e) => return tracing::error!(error = %e, "reload: the configuration has an error; nothing changed"),
    };
    let ruleset = new.firewall.as_ref().and_then(|f| f.ruleset.as_ref());
    match (firewall, ruleset) {
        (Some(fw), Some((source, rs))) => match fw.replace(rs.clone(), source) {
            Ok(()) => tracing::info!(ruleset = %source, "reload: firewall ruleset replaced"),
            Err(e) => {
                tracing::error!(error = %e, ruleset = %source, "reload: the ruleset does not compile; nothing changed")
            }
        },
        (None, Some(_)) => tracing::warn!("reload: a ruleset was added: it takes effect at the next start"),
        (Some(_), None) => {
            tracing::warn!("reload: the ruleset was removed: the current one stays until the next start")
        }
        (None, None) => {}
    }
    tracing::info!("reload: done; changes other than the firewall's ruleset take effect at the next start");
}

/// Every thread of a running datapath.
pub(crate) struct Threads<L: Layout> {
    /// When the run started (its length is measured from here).
    start: Instant,
    stop: Arc<AtomicBool>,
    stop_wake: Option<Arc<freeway_io::wait::StopWake>>,
    writer_stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<Option<Inline<L>>>>,
    writers: Writers<L>,
    metrics: Option<JoinHandle<()>>,
    control: Option<JoinHandle<Control<L>>>,
}

/// What the stopped threads hand back: the run's length, the worker's inline writers
/// (offline runs), the neighbour writer and the RIB (from the control thread).
type Collected<L> = (Duration, Option<Inline<L>>, Option<NeighWriter>, Option<Rib>);

/// Stops the workers first (they drain what they hold), then the services, and collects what
/// they owned. The control thread removes its socket file (if still its own) as it ends.
pub(crate) fn stop_and_collect<L: Layout>(t: Threads<L>) -> Result<Collected<L>, RunError> {
    t.stop.store(true, Ordering::Relaxed);
    if let Some(w) = &t.stop_wake {
        w.signal();
    }
    let mut inline_back = None;
    for h in t.workers {
        match h.join() {
            Ok(i) => inline_back = inline_back.or(i),
            Err(_) => return Err(RunError("a worker thread panicked".into())),
        }
    }
    let elapsed = t.start.elapsed();
    t.writer_stop.store(true, Ordering::Relaxed);
    if let Some(f) = &t.writers.fdb_wake {
        f.wake_writer();
    }
    if let Some(n) = &t.writers.neigh_wake {
        n.wake_writer();
    }
    if let Some(h) = t.writers.fdb {
        h.join().map_err(|_| RunError("the FDB thread panicked".into()))?;
    }
    let neigh_w = match t.writers.neigh {
        Some(h) => Some(
            h.join()
                .map_err(|_| RunError("the neighbour thread panicked".into()))?
                .0,
        ),
        None => None,
    };
    if let Some(h) = t.metrics {
        h.join().map_err(|_| RunError("the metrics thread panicked".into()))?;
    }
    let mut rib = None;
    if let Some(h) = t.control {
        let c = h.join().map_err(|_| RunError("the control thread panicked".into()))?;
        rib = c.rib.map(|(r, _, _)| r);
    }
    Ok((elapsed, inline_back, neigh_w, rib))
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_l3::neigh::{self, NeighConfig, NeighState, NeighUpdate};
    use std::net::IpAddr;

    /// Polls `done` until it holds. The bound (a minute) is not a timing check: the writer in
    /// play naps an hour, so only its doorbell can make `done` hold before it.
    fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let give_up = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                Instant::now() < give_up,
                "{what}: still waiting for the writer's nap to end"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn an_afpacket_port_refused_for_permission_names_the_capability() {
        let denied = std::io::Error::from_raw_os_error(1);
        assert_eq!(
            open_error(PortKind::Afpacket, &denied),
            "Operation not permitted (os error 1) (an afpacket port needs root or the CAP_NET_RAW capability)"
        );
        let absent = std::io::Error::from_raw_os_error(19);
        assert_eq!(open_error(PortKind::Afpacket, &absent), "No such device (os error 19)");
        assert_eq!(
            open_error(PortKind::Pcap, &denied),
            "Operation not permitted (os error 1)"
        );
    }

    /// Naps of an hour and none after work: the round after each applied request finds
    /// nothing, and a writer is back in its hour-long idle nap, where only its doorbell can
    /// reach it.
    fn hour_naps() -> Naps {
        let hour = Duration::from_secs(3600);
        Naps {
            after_work: Duration::ZERO,
            idle_first: hour,
            idle_max: hour,
        }
    }

    #[test]
    fn the_neighbour_writer_wakes_for_workers_updates_not_at_the_end_of_its_nap() {
        let (clock, _ticker) = Clock::start();
        let (reader, w) = neigh::new(NeighConfig::default());
        let stop = Arc::new(AtomicBool::new(false));
        let naps = hour_naps();
        let (_ops, rx) = crossbeam_channel::bounded(1);
        let bell = w.doorbell().clone();
        let h = spawn_neigh_service(&clock, &stop, naps, bell, (w, rx)).unwrap();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let state = || {
            let g = reader.pin();
            reader.lookup(ip, 1, &g).map(|v| v.state)
        };
        // A worker with packets for an unknown neighbour asks for its resolution...
        assert!(reader.request(NeighUpdate::Resolve { ip, iface: 1 }));
        eventually("the resolution request", || state() == Some(NeighState::Incomplete));
        // ...and one that receives the neighbour's answer passes it on.
        let mac = [2, 0, 0, 0, 0, 9];
        assert!(reader.request(NeighUpdate::Learn {
            ip,
            iface: 1,
            mac,
            create: false,
        }));
        eventually("the answer", || state() == Some(NeighState::Reachable));
        let g = reader.pin();
        assert_eq!(reader.lookup(ip, 1, &g).map(|v| v.mac), Some(mac));
        drop(g);
        // Stopping rings the bell too.
        stop.store(true, Ordering::Relaxed);
        reader.wake_writer();
        eventually("the stop", || h.is_finished());
        let (w, _) = h.join().unwrap();
        assert_eq!(w.dynamic_len(), 1);
    }

    #[test]
    fn the_fdb_writer_wakes_for_learn_requests_not_at_the_end_of_its_nap() {
        use freeway_bridge::fdb::{FdbConfig, LearnRequest};
        use freeway_bridge::table::key;
        use freeway_bridge::{Mac, Padded};
        let (clock, _ticker) = Clock::start();
        let (fdb, w) = fdb::new::<Padded>(FdbConfig::default());
        let stop = Arc::new(AtomicBool::new(false));
        let naps = hour_naps();
        let (_ops, rx) = crossbeam_channel::bounded(1);
        let bell = w.doorbell().clone();
        let h = spawn_fdb_service(&clock, &stop, naps, bell, (w, rx)).unwrap();
        let port_of = |i: u8| {
            let g = fdb.pin();
            fdb.lookup(Mac([2, 0, 0, 0, 0, i]), 1, &g).map(|n| n.port())
        };
        // Workers see frames from three new stations in turn (each one learned before the
        // next comes, so the writer is asleep again each time)...
        for i in 1..=3u8 {
            assert!(fdb.request_learn(LearnRequest {
                key: key([2, 0, 0, 0, 0, i], 1),
                port: u16::from(i),
            }));
            eventually("the learn request", || port_of(i) == Some(u16::from(i)));
        }
        // ...and the first one moves to another port.
        assert!(fdb.request_learn(LearnRequest {
            key: key([2, 0, 0, 0, 0, 1], 1),
            port: 7,
        }));
        eventually("the move", || port_of(1) == Some(7));
        // Stopping rings the bell too.
        stop.store(true, Ordering::Relaxed);
        fdb.wake_writer();
        eventually("the stop", || h.is_finished());
        let (w, _) = h.join().unwrap();
        assert_eq!(
            (w.learned_len(), fdb.stats().learned.get(), fdb.stats().moved.get()),
            (3, 3, 1)
        );
    }
}
