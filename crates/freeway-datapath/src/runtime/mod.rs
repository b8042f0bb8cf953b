//! The runtime: workers, the per-batch pipeline, background threads, statistics.
//!
//! # Threads
//!
//! * **Workers** (`fw-worker-N`, pinned to cores as `pin_workers` says: `config::PinWorkers`): each
//!   owns a set of receive queues (queue `i` of every port goes to worker `i % workers`) and one
//!   transmit queue per port. A worker polls a batch, runs it to completion and moves on: ingress
//!   taps → parse → conntrack and firewall (when configured) → bridge → router (for what the bridge
//!   delivered to the router port; its output is bridged again) → egress taps → transmit batches
//!   per port. Everything a worker needs is in its `Worker` context, passed explicitly down the
//!   pipeline; it shares nothing writable with other workers except the FDB entries and connections
//!   its packets' own flows touch.
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
pub mod control;
mod firewall;
mod linux;
mod metrics;
mod mtu;
mod nat;
mod portset;
mod router;
mod start;
mod stateful;
mod stats;
mod trace;
mod tx;
mod worker;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use freeway_bridge::{FdbEntry, Layout};
use freeway_capture::{TapRegistry, Taps};
use freeway_conntrack::ConnRecord;
use freeway_l3::NeighEntry;
use freeway_route::RouteRecord;

pub use capture::{TapDesc, TapResult};
pub use control::protocol::decode_request;
pub use control::{capture_request as ctl_capture, request as ctl_request, send as ctl_send, MAX_REQUEST};
pub use trace::{Step as TraceStep, Trace};

/// The frame and input port a `freeway ctl trace` request describes (the control socket's
/// field parser, public for its fuzz target): `words` are the request's words after `trace`,
/// `port_names` the datapath's ports.
pub fn trace_request_frame(words: &[&str], port_names: &[String]) -> Result<(u16, Vec<u8>), String> {
    trace::frame_from_words(words, port_names, port_names.len())
}
use crate::config::Checked;
pub use start::{run_on_ports, trace_config};

/// A snapshot in the Prometheus text format, as `GET /metrics` serves it.
pub fn metrics_text(s: &Snapshot) -> String {
    metrics::render(s)
}
pub(crate) use stats::Snapper;
pub use stats::{PortCounters, PortSnap, RouterSnap, Snapshot, WorkerSnap, WorkerStats};

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
    /// Who may use the control socket besides root and the datapath's own user
    /// ([`control::access`]).
    pub ctl_access: control::access::Access,
    /// Called once every thread runs and the control and metrics sockets listen: the
    /// datapath is forwarding (a service manager's "ready"). Every worker's thread has
    /// started by then, under its name (`fw-worker-N` in `/proc/self/task/*/comm`).
    pub on_ready: Option<&'a mut dyn FnMut()>,
    /// A reload is asked for when set (`SIGHUP`): the run clears it, reads the configuration
    /// again with `reload_config` and applies what can change live: with a control socket,
    /// everything `freeway ctl reload` applies; without, the firewall's ruleset. The rest
    /// waits for a restart, and the log says so.
    pub reload: Option<Arc<AtomicBool>>,
    /// Reads the configuration again, for `reload`.
    pub reload_config: Option<&'a mut dyn FnMut() -> Result<Checked, String>>,
    /// The file the configuration came from: the default of `freeway ctl reload`.
    pub config_path: Option<std::path::PathBuf>,
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
            ctl_access: Default::default(),
            on_ready: None,
            reload: None,
            reload_config: None,
            config_path: None,
        }
    }
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

/// The routing table a configuration describes (connected routes of its interfaces and its
/// static routes), as `ip -j route` records and as `ip route` text, without running it.
pub fn route_table(cfg: &Checked) -> Result<(Vec<RouteRecord>, String), RunError> {
    let Some(spec) = &cfg.router else {
        return Err(RunError(
            "this configuration has no router: add an [[interface]] (see `freeway default-config`)".into(),
        ));
    };
    let (shared, rib, _) = router::build(spec, cfg.ports.len() as u16, 0)?;
    Ok((rib.records(&*shared.ifaces), rib.show(&*shared.ifaces).to_string()))
}
