//! Starting a datapath: tables, ports, workers and services, then waiting and stopping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::router::RouterWorker;
use super::stateful::Stateful;
use super::stats::{PortCounters, Snapper, WorkerStats};
use super::tx::{Tx, NO_ROUTER};
use super::worker::{worker_main, Inline, Worker};
use super::{capture, control, metrics, router, worker_count, RunError, RunOptions, RunResult};
use crate::config::{Checked, PortKind};
use freeway_bridge::vlan::VlanSet;
use freeway_bridge::{fdb, Bridge, BridgeWorker, Layout, PortVlan};
use freeway_capture::TapRegistry;
use freeway_io::{Port, PortQueues, RxQueue, TxQueue};
use freeway_packet::{Batch, PacketPool};
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
                .map_err(|x| e(x.to_string()))?,
        ),
    })
}

/// Runs a background service (`f` once per round, returning how much work it found) until
/// `stop` is set, backing off while idle: every wake-up preempts a worker on a busy
/// machine, but the latency of the service is the sleep while work arrives.
pub(crate) fn spawn_service<S: Send + 'static>(
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
