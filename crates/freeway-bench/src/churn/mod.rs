//! The churn oracle: the real multi-worker runtime forwards generated traffic while
//! a control thread changes its tables as fast as it can, and an oracle checks every frame
//! that comes out.
//!
//! # What runs
//!
//! [`run`] starts the datapath ([`freeway_datapath::runtime`], the same code as `freeway run`)
//! on six ports of this module's own kind ([`ChurnPort`]): `lan0..lan2` (access VLAN 10),
//! `wan0`, `wan1` (access VLAN 20) and `trunk0`, a trunk carrying both VLANs tagged (hosts of
//! VLAN 10 and the WAN side of VLAN 20 behind it); a router with one interface on each VLAN,
//! each with an IPv4 and an IPv6 address; connection tracking and an nftables ruleset
//! ([`ruleset_text`]) that lets new connections start only from the `lan` interface (the
//! LAN access ports and the trunk's VLAN 10 hosts) and drops everything to the remote IPv4
//! prefixes of its named set `blocked`, even on established connections. Each port's receive queues generate
//! traffic; its transmit queues are where the oracle looks at every frame the datapath sends.
//!
//! Traffic, each frame carrying a tag in its UDP payload (worker, sequence number, class,
//! ingress port, the table version it was generated at); frames received on the trunk are
//! tagged with their VLAN:
//!
//! * `L2T`: a VLAN 10 host (access or trunk) to one of [`NT`] MACs that never send; their
//!   static FDB entries are added, moved between the access ports and the trunk, and deleted
//!   by the control side (flooded while absent).
//! * `L2H`: a VLAN 10 host to a host on another VLAN 10 port (learned; flooded after a flush).
//! * `FWD`, `FWD6`: a VLAN 10 host (access or trunk) to one of [`NX`] remote IPv4 /24s or [`NX6`] remote IPv6
//!   prefixes (four /64s inside one of the four /48s, so a deleted /64 falls back to its /48),
//!   routed via [`NG`] gateways (each with an IPv4 and an IPv6 address) whose routes are
//!   replaced (ECMP over one or two gateways) and deleted. Each gateway's neighbour entry
//!   (IPv4 and IPv6 apart) points at one of [`NM`] MACs and is added, replaced (another MAC)
//!   and deleted; those MACs' static FDB entries move between the WAN ports and the trunk,
//!   and are deleted.
//! * `REPLY`, `REPLY6`: the remote side answering a `FWD`/`FWD6` flow, from a VLAN 20 port:
//!   forwarded only while the connection exists (the control side flushes the connection
//!   table).
//! * `UNSOL`, `UNSOL6`: unsolicited frames from the WAN access ports: never forwarded.
//!
//! The control thread works through the control socket (`fdb add/del/flush`, `route
//! replace/del` for both families, `neigh add/del`, `conntrack flush`, `set add/del blocked`
//! and `firewall load` of the whole ruleset again: the path `freeway ctl` takes) and attaches, re-filters and detaches capture taps on the run's tap registry, one
//! operation at a time. Every few dozen operations it *settles*: it adds a neighbour entry for
//! every gateway that has none, then issues nothing until every worker has routed a frame
//! generated after that (see below); at the end it does the same before the datapath stops.
//!
//! With [`ChurnOptions::reload`] (`freeway stress churn --reload`) the targets' static FDB
//! entries, the IPv4 routes and the `blocked` set belong to the configuration file instead:
//! the control side changes them only by writing a new random configuration and asking for
//! `reload FILE` (the path of `freeway ctl reload` and SIGHUP). One reload is one operation
//! whose changes land one by one while the workers forward, so each key may be old or new in
//! a frame's window; every change must apply and none may wait for a restart. The ruleset
//! replaced by a reload keeps the connection table: a reply dropped without a flush or a
//! block in its window is a violation.
//!
//! # The oracle
//!
//! Operation `k` is counted in `sent` before it is issued and in `done` once its answer came
//! back, so at any moment the tables hold the effect of at least the first `done` and at
//! most the first `sent` operations. A frame is stamped with `done` when generated; when it
//! comes out, `sent` is read: every table value the datapath can have used for it lies in the
//! versioned history between those two numbers ([`History`]). Each output frame must go to a
//! port, and carry addresses and tagging, that some value in that window allows: a frame
//! leaving the trunk carries its VLAN's tag, one leaving an access port none; a routed frame
//! leaves from the router's MAC with its TTL or hop limit decremented (and the IPv4 checksum
//! right), to a MAC that the neighbour entry of a gateway of some route version of its window
//! held in some version of that window, on a port that MAC's FDB entry allowed in the window
//! (or flooded over VLAN 20 when some version had none); a routed IPv4 frame's prefix was
//! out of the `blocked` set in some version of its window, and one that was dropped may
//! have been blocked. Every frame is judged by one whole ruleset: a replacement (a new set,
//! a reloaded file) never shows half of one. A frame never reaches a port twice;
//! a flood reaches exactly the flood set, and only when some version had no entry; a frame
//! that reached no port must have been droppable in its window, and the number of such frames
//! must equal the drops the datapath counted. Capture taps are checked the same way: a
//! captured frame was on the tap's port and direction and matched a filter the tap had during
//! the frame's window, never twice, and each tap's counters balance. The resident set size is
//! sampled throughout; its growth after a warm-up is reported (and bounded when asked).
//!
//! # Unresolved next hops
//!
//! A routed frame whose gateway has no usable neighbour entry waits in its worker's pending
//! queue in the router while an ARP request or neighbour solicitation goes out; it leaves
//! once the entry is back (with the MAC of that moment: still a version between its `done`
//! and the `sent` read when it leaves), or is dropped and counted (queue full, timed out, or
//! the entry failed). So a routed frame that reached no port in its batch is *parked* rather
//! than closed. Its worker closes it when it comes out, or at a settle: once every gateway is
//! resolved and nothing else changes, a routed frame generated after that goes through the
//! router, whose pending queue is polled (and so emptied) before it; what is still parked
//! when that frame is closed was dropped, and must have been droppable (no route, or a
//! gateway of its routes without an entry in some version of its window). The router's
//! solicitations are checked too: from the router's addresses, for a gateway, out of a VLAN
//! 20 port with its tagging, and only when some version since the worker's last receive call
//! had no usable entry for that gateway.
//!
//! # Threads
//!
//! The runtime's workers own the [`ChurnPort`] queues; a worker's receive and transmit
//! queues share that worker's book (frames in flight and parked), locked only by that worker
//! and, after the run, by the caller. The control thread is the only writer of the history (a
//! write lock per operation; workers and tap writers take read locks). A monitor thread
//! samples memory and ends the run.

mod control;
mod model;
mod oracle;
mod ports;
mod taps;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use freeway_bridge::Padded;
use freeway_capture::Taps;
use freeway_io::Port;
use serde::Serialize;

use freeway_datapath::runtime::{self, RunError, RunOptions};

use control::Control;
pub use control::Ops;
use model::*;
pub use model::{NG, NM, NT, NX, NX6};
pub use oracle::History;
use oracle::{Book, Shared};
pub use ports::ChurnPort;

/// Settings of a churn run (`freeway stress churn` takes them as its flags).
#[derive(Clone, Debug, clap::Args)]
pub struct ChurnOptions {
    /// How long traffic and churn go on, at least (e.g. 300s, 5m).
    #[arg(short, long, default_value = "60s", value_parser = freeway_datapath::config::parse_duration)]
    pub duration: Duration,
    /// Go on past the duration until this many control operations are done (so that a short
    /// run on a slow machine still changes every table; the run ends early if the control
    /// side fails).
    #[arg(long, default_value_t = 0)]
    pub min_ops: u64,
    /// Worker threads.
    #[arg(short, long, default_value_t = 2)]
    pub workers: usize,
    /// Seed of the traffic and of the operations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Change the targets' static FDB entries, the IPv4 routes and the firewall's `blocked`
    /// set by reloading a new configuration file (`ctl reload`) instead of one request each.
    #[arg(long)]
    pub reload: bool,
    /// Resident set baseline taken after this long.
    #[arg(long, default_value = "5s", value_parser = freeway_datapath::config::parse_duration)]
    pub warmup: Duration,
    /// Fail when the resident set grows by more than this many KiB after the warm-up (the
    /// command line gives it in MiB: [`ChurnArgs::rss_limit_mib`]).
    #[arg(skip)]
    pub rss_limit_kib: Option<u64>,
    /// Print a progress line this often, to standard error (the command line: every 10 s
    /// unless [`ChurnArgs::quiet`]).
    #[arg(skip)]
    pub progress: Option<Duration>,
}

impl Default for ChurnOptions {
    fn default() -> Self {
        ChurnOptions {
            duration: Duration::from_secs(10),
            min_ops: 0,
            workers: 2,
            seed: 1,
            warmup: Duration::from_secs(2),
            rss_limit_kib: None,
            progress: None,
            reload: false,
        }
    }
}

/// What a churn run did and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChurnReport {
    /// Seconds the traffic ran.
    pub elapsed_s: f64,
    /// Workers.
    pub workers: usize,
    /// Control operations completed.
    pub ops: Ops,
    /// Frames generated.
    pub generated: u64,
    /// Frames the datapath transmitted, each checked by the oracle.
    pub outputs_checked: u64,
    /// Generated frames closed by the oracle (all of them, at the end).
    pub frames_closed: u64,
    /// Frames that reached at least one port.
    pub delivered: u64,
    /// Of those, frames that reached several ports (floods).
    pub flooded: u64,
    /// Frames that reached no port.
    pub dropped: u64,
    /// Drops the datapath counted, by reason.
    pub drops_counted: std::collections::BTreeMap<String, u64>,
    /// Frames captured by taps and checked.
    pub tap_frames: u64,
    /// Checks that could not be made (history pruned past a frame's window).
    pub unchecked: u64,
    /// Violations found (all counted; the first few described in `messages`).
    pub violations: u64,
    /// The first violations.
    pub messages: Vec<String>,
    /// Resident set at the start, after the warm-up, highest after the warm-up, at the end (KiB).
    pub rss_kib: [u64; 4],
    /// Route generation bumps seen by the workers' caches (refills).
    pub route_cache_refills: u64,
    /// Connections created by the tracker.
    pub ct_created: u64,
    /// Routed frames that reached no port in their batch and were kept open (their next hop
    /// may have been unresolved: queued in the router's pending queue, or dropped).
    pub parked: u64,
    /// Of those, frames that left later, once their neighbour resolved.
    pub parked_delivered: u64,
    /// ARP requests of the router checked (unresolved IPv4 next hops).
    pub arp_requests: u64,
    /// Neighbour solicitations of the router checked (unresolved IPv6 next hops).
    pub neighbour_solicitations: u64,
    /// Frames that left the trunk port (tagged), checked.
    pub trunk_frames: u64,
    /// Routed IPv6 frames checked.
    pub routed_v6: u64,
    /// The router's own numbers: packets queued for a neighbour and sent once it resolved.
    pub pending_queued: u64,
    /// See `pending_queued`.
    pub pending_sent: u64,
}

impl ChurnReport {
    /// Resident set growth after the warm-up, KiB (end or highest, whichever is larger).
    pub fn rss_growth_kib(&self) -> u64 {
        self.rss_kib[2].max(self.rss_kib[3]).saturating_sub(self.rss_kib[1])
    }

    /// Whether the run found nothing wrong.
    pub fn clean(&self) -> bool {
        self.violations == 0
    }
}

/// The resident set size in KiB (from `/proc/self/statm`, 4 KiB pages), 0 if unknown.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4)
}

/// What a churn run's configuration file says of the tables that reloads change: the port of
/// each target's static entry in VLAN 10 ([`NONE`]: none), each IPv4 remote prefix's route
/// (a gateway mask, 0: none) and which of those prefixes the `blocked` set holds.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Reloaded {
    pub(super) t_port: [u8; NT],
    pub(super) routes: [u8; NX],
    pub(super) blocked: [bool; NX],
}

impl Reloaded {
    /// The tables at the start.
    pub(super) fn initial() -> Reloaded {
        Reloaded {
            t_port: [NONE; NT],
            routes: std::array::from_fn(control::init_route),
            blocked: [false; NX],
        }
    }
}

/// The datapath's configuration for a churn run.
pub(super) fn config_text(workers: usize, r: &Reloaded) -> String {
    let mut t = format!("workers = {workers}\npin_workers = false\n");
    for (i, n) in PORT_NAMES.iter().enumerate() {
        let vlan = match i as u16 {
            TRUNK => "{ mode = \"trunk\", vlans = [\"10\", \"20\"] }".to_string(),
            p if LAN.contains(&p) => "{ mode = \"access\", vlan = 10 }".to_string(),
            _ => "{ mode = \"access\", vlan = 20 }".to_string(),
        };
        t += &format!("[[port]]\nname = \"{n}\"\nkind = \"sink\"\nvlan = {vlan}\n");
    }
    t += "[bridge]\nstatic = [";
    for (ti, &p) in r.t_port.iter().enumerate().filter(|(_, p)| **p != NONE) {
        t += &format!(
            "{{ mac = \"{}\", vlan = 10, port = \"{}\" }},",
            mac_text(t_mac(ti)),
            PORT_NAMES[usize::from(p)]
        );
    }
    for m in 0..NM {
        t += &format!(
            "{{ mac = \"{}\", vlan = 20, port = \"{}\" }},",
            mac_text(GWS.mac(m)),
            PORT_NAMES[usize::from(control::init_m_port(m))]
        );
    }
    t += "]\n";
    t += &format!(
        "[router]\nmac = \"{}\"\nicmp_rate = 0\nicmp_burst = 0\n\
         [[interface]]\nname = \"lan\"\nvlan = 10\naddr = [\"10.0.10.1/24\", \"2001:db8:10::1/64\"]\n\
         [[interface]]\nname = \"wan\"\nvlan = 20\naddr = [\"{WAN_ADDR}/24\", \"2001:db8:20::1/64\"]\n",
        mac_text(RMAC)
    );
    for (j, &mask) in r.routes.iter().enumerate().filter(|(_, m)| **m != 0) {
        let gws: Vec<String> = (0..NG)
            .filter(|a| mask & (1 << a) != 0)
            .map(|a| format!("\"{}\"", GWS.ip(a)))
            .collect();
        t += &format!("[[route]]\ndst = \"10.100.{j}.0/24\"\nvia = [{}]\n", gws.join(", "));
    }
    for j in 0..NX6 {
        let a = usize::from(control::init_route(j).trailing_zeros() as u8);
        t += &format!("[[route]]\ndst = \"{}\"\nvia = \"{}\"\n", prefix6(j), GWS.ip6(a));
    }
    let neigh = |ip: String, mac: [u8; 6], dev: &str| {
        format!(
            "[[neigh]]\nip = \"{ip}\"\nmac = \"{}\"\ndev = \"{dev}\"\n",
            mac_text(mac)
        )
    };
    for h in 0..NHOSTS {
        t += &neigh(HOSTS.ip(h).to_string(), HOSTS.mac(h), "lan");
        t += &neigh(HOSTS.ip6(h).to_string(), HOSTS.mac(h), "lan");
    }
    // Gateway `a` starts at pool MAC `a`.
    for a in 0..NG {
        t += &neigh(GWS.ip(a).to_string(), GWS.mac(a), "wan");
        t += &neigh(GWS.ip6(a).to_string(), GWS.mac(a), "wan");
    }
    // The traffic has a few thousand flows at most: a small table (quick to set up, also
    // under valgrind).
    t += &format!(
        "[conntrack]\nmax = 16384\n[firewall]\nrules = '''\n{}'''\n",
        ruleset_text(&r.blocked)
    );
    t
}

/// The firewall's nftables ruleset, with the remote prefixes `blocked` marks in its
/// `blocked` set: traffic to a blocked prefix is dropped, even that of an established
/// connection; new connections start only from the `lan` interface (VLAN 10: the LAN access
/// ports and the trunk's VLAN 10 hosts); replies pass while their connection exists.
pub(super) fn ruleset_text(blocked: &[bool; NX]) -> String {
    let elems: Vec<String> = (0..NX)
        .filter(|&j| blocked[j])
        .map(|j| format!("10.100.{j}.0/24"))
        .collect();
    let elements = if elems.is_empty() {
        String::new()
    } else {
        format!("\t\telements = {{ {} }}\n", elems.join(", "))
    };
    format!(
        "table inet churn {{\n\tset blocked {{\n\t\ttype ipv4_addr\n\t\tflags interval\n{elements}\t}}\n\
         \tchain forward {{\n\t\ttype filter hook forward priority filter; policy drop;\n\
         \t\tip daddr @blocked drop\n\t\tct state established,related accept\n\
         \t\tiifname \"lan\" accept\n\t}}\n}}\n"
    )
}

fn socket_path() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "freeway-churn-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, SeqCst)
    ))
}

/// Runs the datapath under churn for `opts.duration` and checks every frame (see the module
/// docs). `Err` only when the run could not be made; what it found is in the report.
pub fn run(opts: &ChurnOptions) -> Result<ChurnReport, RunError> {
    let workers = opts.workers.max(1);
    let sock = socket_path();
    // With reloads, the configuration is a file the control side writes again.
    let cfg_path = opts.reload.then(|| sock.with_extension("toml"));
    let text = config_text(workers, &Reloaded::initial());
    if let Some(p) = &cfg_path {
        std::fs::write(p, &text).map_err(|e| RunError(format!("{}: {e}", p.display())))?;
    }
    let cfg = freeway_datapath::config::parse(&text, "<churn>", None).map_err(|e| RunError(e.to_string()))?;
    let mut init = vec![NONE; NKEYS];
    for m in 0..NM {
        init[key_m(m)] = control::init_m_port(m) as u8;
    }
    for j in 0..NX {
        init[key_x(j)] = control::init_route(j);
    }
    for j in 0..NX6 {
        init[key_x6(j)] = control::init_route(j);
    }
    for a in 0..NG {
        init[key_n(a, false)] = a as u8;
        init[key_n(a, true)] = a as u8;
    }
    for j in 0..NX {
        init[key_b(j)] = 0;
    }
    let shared = Arc::new(Shared::new(&init, workers));
    let books: Vec<Arc<Mutex<Book>>> = (0..workers)
        .map(|w| {
            Arc::new(Mutex::new(Book::new(
                w as u16,
                Rng(freeway_io::gen::Rng(
                    opts.seed ^ (w as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d),
                )),
            )))
        })
        .collect();
    let ports: Vec<Box<dyn Port>> = (0..NPORTS)
        .map(|i| {
            Box::new(ChurnPort {
                index: i as u16,
                books: books.clone(),
                shared: shared.clone(),
            }) as Box<dyn Port>
        })
        .collect();
    let reg = Taps::new(workers);
    let stop = Arc::new(AtomicBool::new(false));
    let rss_start = rss_kib();

    let control = Control {
        shared: shared.clone(),
        sock: sock.clone(),
        reg: reg.clone(),
        rng: Rng(freeway_io::gen::Rng(opts.seed.wrapping_mul(31).wrapping_add(7))),
        t_port: [NONE; NT],
        m_port: std::array::from_fn(|m| control::init_m_port(m) as u8),
        routes: std::array::from_fn(control::init_route),
        routes6: std::array::from_fn(control::init_route),
        neigh: [std::array::from_fn(|a| a as u8); 2],
        blocked: [false; NX],
        taps: Vec::new(),
        ops: Ops::default(),
        tap_stats: Vec::new(),
        reload: cfg_path.clone().map(|p| (p, workers)),
    };
    let control = std::thread::Builder::new()
        .name("churn-ctl".into())
        .spawn(move || control.run())
        .map_err(|e| RunError(format!("cannot start the control thread: {e}")))?;
    let monitor = {
        let (shared, stop, o) = (shared.clone(), stop.clone(), opts.clone());
        std::thread::Builder::new()
            .name("churn-monitor".into())
            .spawn(move || monitor(&shared, &stop, &o, rss_start))
            .map_err(|e| RunError(format!("cannot start the monitor thread: {e}")))?
    };
    let res = runtime::run_on_ports::<Padded, Taps>(
        &cfg,
        RunOptions {
            stop: Some(stop.clone()),
            control: Some(sock.clone()),
            ..RunOptions::default()
        },
        Some(reg.clone()),
        ports,
    );
    // Whatever happened, end the other threads.
    shared.gen_stop.store(true, SeqCst);
    stop.store(true, SeqCst);
    let ctl = control.join();
    // The files the run and its control side wrote (the configuration it reloads, the ruleset
    // of `firewall load`), once nothing writes them again.
    if let Some(p) = &cfg_path {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_file(sock.with_extension("nft"));
    let ctl = ctl.map_err(|_| RunError("the control thread panicked".into()))?;
    let (rss_warm, rss_max, elapsed) = monitor
        .join()
        .map_err(|_| RunError("the monitor thread panicked".into()))?;
    let res = res?;
    let ctl = ctl.map_err(|e| RunError(format!("control side: {e}")))?;

    for b in &books {
        b.lock().unwrap_or_else(|e| e.into_inner()).finalize(&shared, true);
    }
    let c = &shared.c;
    let s = &res.last;
    let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
    let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
    let drops = s.drops();
    let counted: u64 = drops.values().sum();
    let generated = c.generated.load(SeqCst);
    let outputs = c.outputs.load(SeqCst);
    let lost = c.lost.load(SeqCst);
    if rx != generated {
        shared.violation(format!("{generated} frames generated, the datapath received {rx}"));
    }
    if tx != outputs {
        shared.violation(format!(
            "the datapath counted {tx} frames transmitted, the ports saw {outputs}"
        ));
    }
    if lost != counted {
        shared.violation(format!(
            "{lost} frames reached no port, the datapath counted {counted} drops: {drops:?}"
        ));
    }
    if c.finalized.load(SeqCst) != generated {
        shared.violation(format!(
            "{generated} frames generated, {} closed",
            c.finalized.load(SeqCst)
        ));
    }
    for t in &ctl.taps {
        if t.matched != t.written + t.dropped + t.discarded {
            shared.violation(format!("tap counters do not balance: {t:?}"));
        }
    }
    let rss_end = rss_kib();
    let mut report = ChurnReport {
        elapsed_s: elapsed.as_secs_f64(),
        workers,
        ops: ctl.ops,
        generated,
        outputs_checked: outputs,
        frames_closed: c.finalized.load(SeqCst),
        delivered: c.delivered.load(SeqCst),
        flooded: c.floods.load(SeqCst),
        dropped: lost,
        drops_counted: drops,
        tap_frames: c.tap_frames.load(SeqCst),
        unchecked: c.unchecked.load(SeqCst),
        violations: 0,
        messages: Vec::new(),
        rss_kib: [rss_start, rss_warm, rss_max, rss_end],
        route_cache_refills: s.router.as_ref().map_or(0, |r| r.route_cache_refills),
        ct_created: s.conntrack.as_ref().map_or(0, |c| c.created),
        parked: c.parked.load(SeqCst),
        parked_delivered: c.late.load(SeqCst),
        arp_requests: c.arp_requests.load(SeqCst),
        neighbour_solicitations: c.ns.load(SeqCst),
        trunk_frames: c.trunk_out.load(SeqCst),
        routed_v6: c.v6_out.load(SeqCst),
        pending_queued: s.router.as_ref().map_or(0, |r| r.l3.pending_queued),
        pending_sent: s.router.as_ref().map_or(0, |r| r.l3.pending_sent),
    };
    if let Some(limit) = opts.rss_limit_kib {
        if report.rss_growth_kib() > limit {
            shared.violation(format!(
                "resident set grew by {} KiB after the warm-up (limit {limit} KiB): {:?}",
                report.rss_growth_kib(),
                report.rss_kib
            ));
        }
    }
    report.violations = c.violations.load(SeqCst);
    report.messages = shared.messages.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(report)
}

/// Samples the resident set, prints progress, ends generation at the deadline and the run
/// shortly after. Returns the resident set after the warm-up and the highest after it, and
/// how long traffic ran.
fn monitor(s: &Shared, stop: &AtomicBool, o: &ChurnOptions, rss_start: u64) -> (u64, u64, Duration) {
    // The clock starts once the datapath is up (slow under valgrind).
    while !s.ready.load(SeqCst) && !s.gen_stop.load(SeqCst) && !stop.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    let (mut warm, mut max) = (None, 0);
    let mut next_progress = o.progress;
    while (t0.elapsed() < o.duration || s.done.load(SeqCst) < o.min_ops)
        && !stop.load(SeqCst)
        && !s.gen_stop.load(SeqCst)
    {
        std::thread::sleep(Duration::from_millis(50));
        let el = t0.elapsed();
        let rss = rss_kib();
        if el >= o.warmup.min(o.duration / 2) {
            if warm.is_none() {
                warm = Some(rss);
            }
            max = max.max(rss);
        }
        if let Some(p) = next_progress {
            if el >= p {
                eprintln!(
                    "churn: {:>6.1}s ops {:>8} generated {:>10} checked {:>10} violations {} rss {} KiB",
                    el.as_secs_f64(),
                    s.done.load(SeqCst),
                    s.c.generated.load(SeqCst),
                    s.c.outputs.load(SeqCst),
                    s.c.violations.load(SeqCst),
                    rss
                );
                next_progress = o.progress.map(|d| p + d);
            }
        }
    }
    s.gen_stop.store(true, SeqCst);
    let ran = t0.elapsed();
    // The control side's last operations resolve every gateway: what waits for a neighbour
    // then leaves when the workers stop (they poll once more).
    while !s.ctl_done.load(SeqCst) && !stop.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Frames in flight leave within a batch; give the workers a moment.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, SeqCst);
    (warm.unwrap_or(rss_start), max.max(warm.unwrap_or(rss_start)), ran)
}

/// Writes `report` as the `freeway stress churn` table.
pub fn print_report(r: &ChurnReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "churn oracle: {:.1} s, {} workers", r.elapsed_s, r.workers)?;
    let o = &r.ops;
    writeln!(
        out,
        "  operations   {} (fdb add {}, fdb del {}, fdb flush {}, route replace {}, route del {}, route6 replace {}, route6 del {}, neigh add {}, neigh replace {}, neigh del {}, conntrack flush {}, tap attach {}, tap filter {}, tap detach {}, set add {}, set del {}, firewall load {}, reload {}; {} settles)",
        o.total(),
        o.fdb_add,
        o.fdb_del,
        o.fdb_flush,
        o.route_replace,
        o.route_del,
        o.route6_replace,
        o.route6_del,
        o.neigh_add,
        o.neigh_replace,
        o.neigh_del,
        o.ct_flush,
        o.tap_attach,
        o.tap_replace,
        o.tap_detach,
        o.set_add,
        o.set_del,
        o.fw_load,
        o.reload,
        o.settles
    )?;
    writeln!(out, "  generated    {}", r.generated)?;
    writeln!(
        out,
        "  checked      {} output frames, {} tap frames",
        r.outputs_checked, r.tap_frames
    )?;
    writeln!(
        out,
        "  frames       {} closed: {} delivered ({} flooded), {} dropped",
        r.frames_closed, r.delivered, r.flooded, r.dropped
    )?;
    writeln!(out, "  drops        {:?}", r.drops_counted)?;
    writeln!(
        out,
        "  route cache  {} refills; conntrack {} connections created",
        r.route_cache_refills, r.ct_created
    )?;
    writeln!(
        out,
        "  next hops    {} parked ({} left later), {} ARP requests, {} neighbour solicitations; router: {} queued, {} sent once resolved",
        r.parked, r.parked_delivered, r.arp_requests, r.neighbour_solicitations, r.pending_queued, r.pending_sent
    )?;
    writeln!(
        out,
        "  coverage     {} frames out of the trunk, {} routed IPv6 frames",
        r.trunk_frames, r.routed_v6
    )?;
    writeln!(out, "  unchecked    {}", r.unchecked)?;
    writeln!(
        out,
        "  rss          start {} KiB, after warm-up {} KiB, max {} KiB, end {} KiB (growth {} KiB)",
        r.rss_kib[0],
        r.rss_kib[1],
        r.rss_kib[2],
        r.rss_kib[3],
        r.rss_growth_kib()
    )?;
    writeln!(out, "  violations   {}", r.violations)?;
    for m in &r.messages {
        writeln!(out, "    {m}")?;
    }
    Ok(())
}

/// `freeway stress ...`: long-running reliability checks.
#[derive(clap::Subcommand, Debug)]
pub enum StressCmd {
    /// The churn oracle: FDB entries, IPv4 and IPv6 routes, neighbours, taps and connections
    /// changed as fast as the control socket allows while the workers forward generated
    /// traffic over access and trunk ports; every output frame checked against the tables'
    /// versions, every frame accounted for, memory sampled.
    Churn(ChurnArgs),
}

/// Arguments of `freeway stress churn`.
#[derive(clap::Args, Debug)]
pub struct ChurnArgs {
    /// The run's settings.
    #[command(flatten)]
    pub opts: ChurnOptions,
    /// Fail if the resident set grows by more than this many MiB after the warm-up (0: no
    /// limit, e.g. under valgrind).
    #[arg(long, default_value_t = 32)]
    pub rss_limit_mib: u64,
    /// Print the report as JSON.
    #[arg(short = 'j', long)]
    pub json: bool,
    /// No progress lines.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs a `freeway stress` command; `Err` when it could not run or found a violation.
pub fn main(cmd: StressCmd) -> Result<(), String> {
    let StressCmd::Churn(a) = cmd;
    if a.opts.workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    let opts = ChurnOptions {
        rss_limit_kib: (a.rss_limit_mib > 0).then_some(a.rss_limit_mib * 1024),
        progress: (!a.quiet).then_some(Duration::from_secs(10)),
        ..a.opts
    };
    let r = run(&opts).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
        writeln!(out, "{v}").map_err(|e| e.to_string())?;
    } else {
        print_report(&r, &mut out).map_err(|e| e.to_string())?;
    }
    if r.clean() {
        Ok(())
    } else {
        Err(format!("the churn oracle found {} violations", r.violations))
    }
}
