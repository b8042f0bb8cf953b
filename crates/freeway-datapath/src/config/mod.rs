//! The TOML configuration: ports, bridge, workers, duration.
//!
//! Errors name the key and the line: syntax and type errors come from the TOML parser with
//! their span; checks that span several keys (a port named twice, a static entry on a port
//! that does not exist, a generator setting out of range) point at the line of the value
//! they concern.
//!
//! ```toml
//! workers = 2
//! duration_secs = 5
//! pin_workers = "auto"                 # true | false | "auto": pin when a core is spare (PinWorkers)
//!
//! [[port]]
//! name = "gen0"
//! kind = "gen"                        # gen | pcap | sink
//! vlan = { mode = "access", vlan = 1 } # or { mode = "trunk", vlans = ["10", "20-30"], native = 1 }
//! gen = { src_macs = ["02:00:00:00:00:01"], dst_macs = ["02:00:00:00:00:02"] }
//! group_fwd_mask = 0x4000              # forward LLDP (01:80:c2:00:00:0e); STP/PAUSE/LACP never
//! isolated = false                     # and learning, flood, mcast_flood, bcast_flood (true)
//! bpdu_guard = false                   # an STP BPDU received here disables the port
//! storm_control = { broadcast = 1000, multicast = 1000, unknown_unicast = 1000 }  # frames/s in
//! mtu = 1500                           # L2 MTU, 68..=9216 (frames of mtu + 14 + tags bytes)
//! multicast_router = 1                 # 0 never, 1 learned from queries, 2 always a router port
//! multicast_fast_leave = false         # a leave removes the member at once
//!
//! [bridge]
//! learn_limit = 65536
//! ageing_ms = 300000
//! multicast_snooping = true            # IGMP/MLD snooping, as Linux's default (multicast_* keys:
//!                                      # freeway_bridge::MdbConfig)
//! static = [{ mac = "02:00:00:00:00:09", vlan = 1, port = "gen0" }]
//! ```

pub mod capture;
pub mod duration;
pub mod l3;
pub mod linux;
pub mod mtu;
pub mod stateful;

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use freeway_bridge::{FdbConfig, Mac, MdbConfig, PortVlanConfig};
use freeway_io::gen::GenConfig;
use freeway_io::pcap::PcapConfig;
use serde::Deserialize;
use toml::Spanned;

pub use duration::{parse_duration, parse_seconds, DurationValue, MAX_DURATION};

/// The embedded default: a bridge between two generator ports and a sink, for
/// `freeway run` with no arguments.
pub const DEFAULT_CONFIG: &str = include_str!("../../configs/default.toml");

/// The embedded router demo: two VLANs routed, a stateful firewall (`freeway default-config --router`).
pub const ROUTER_CONFIG: &str = include_str!("../../configs/router.toml");

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Worker threads (default: one per core, at most 2 ports' worth).
    #[serde(default)]
    pub workers: Option<Spanned<usize>>,
    /// Stop after this long: a number of seconds or a string with a unit such as `"5m"` (see
    /// [`parse_duration`]; default: when every input is exhausted, or 5 s if some input never
    /// ends).
    #[serde(default)]
    pub duration_secs: Option<Spanned<DurationValue>>,
    /// Pin workers to cores: `true`, `false` or `"auto"` (the default; see [`PinWorkers`]).
    #[serde(default)]
    pub pin_workers: Option<PinWorkers>,
    /// Ports, in order; a port's index is its position.
    #[serde(default, rename = "port")]
    pub ports: Vec<PortConfig>,
    /// Bridge settings.
    #[serde(default)]
    pub bridge: BridgeConfig,
    /// Router settings.
    #[serde(default)]
    pub router: l3::RouterConfig,
    /// Router interfaces.
    #[serde(default, rename = "interface")]
    pub interfaces: Vec<l3::InterfaceConfig>,
    /// Routes.
    #[serde(default, rename = "route")]
    pub routes: Vec<l3::RouteConfig>,
    /// Static neighbours.
    #[serde(default, rename = "neigh")]
    pub neighs: Vec<l3::NeighConfig>,
    /// Connection tracking.
    #[serde(default)]
    pub conntrack: Option<stateful::ConntrackConfig>,
    /// Stateful firewall.
    #[serde(default)]
    pub firewall: Option<stateful::FirewallConfig>,
    /// Capture taps.
    #[serde(default, rename = "tap")]
    pub taps: Vec<capture::TapConfig>,
    /// The Linux control plane (kernel route mirror).
    #[serde(default)]
    pub linux: linux::LinuxConfig,
}

/// `pin_workers`: whether each worker runs only on a core of its own ([`PinWorkers::core_index`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PinWorkers {
    /// `true`: always pinned (as many cores as workers or not: worker `i` on the process's
    /// core `i % cores`).
    On,
    /// `false`: never pinned; the scheduler places the workers.
    Off,
    /// `"auto"`, the default: pinned when a core is left over for what is not a worker (see
    /// [`PinWorkers::resolve`]).
    #[default]
    Auto,
}

impl PinWorkers {
    /// Whether `workers` workers are pinned on a machine of `cores` cores whose ports are
    /// `ports`. `"auto"` pins when there are more cores than workers; with every port
    /// in-process (`gen`, `pcap`, `sink`) as many cores as workers are enough. A port on a
    /// Linux interface (`afpacket`, `afxdp`) has the kernel receive and transmit its frames in
    /// softirq on whichever core the sender or the interrupt ran on: a worker pinned to that
    /// core waits for it, where an unpinned one moves to a free core. On 2 cores with 2 workers
    /// bridging two veths (quiet run of 16d1ea0, benchmarks/HISTORY.md), pinned workers
    /// forwarded 522 k 64-byte frames/s on AF_XDP against 1.31 M unpinned, and a ping took
    /// 0.048 ms against 0.028.
    pub fn resolve(self, workers: usize, cores: usize, ports: &[PortSpec]) -> bool {
        match self {
            PinWorkers::On => true,
            PinWorkers::Off => false,
            PinWorkers::Auto => {
                let in_process = ports
                    .iter()
                    .all(|p| matches!(p.kind, PortKind::Gen | PortKind::Pcap | PortKind::Sink));
                workers < cores || (in_process && workers <= cores)
            }
        }
    }

    /// The index, among the `cores` cores the process may use, of the core that pinned worker
    /// `worker` of `workers` runs on. `true`: worker `i` on core `i % cores`. `"auto"`: the
    /// last `workers` cores, worker `i` on core `cores - workers + i`, so that the cores left
    /// over are the first ones, where a program started with `taskset -c 0` (a sender, a
    /// generator), the boot CPU's housekeeping and interrupts left at their default affinity
    /// run: a worker sharing core 0 with a sender waits for it (and for the sender's softirq,
    /// where the kernel receives the frames of a veth), one on a spare core does not. With as
    /// many cores as workers the two are the same.
    pub fn core_index(self, worker: usize, workers: usize, cores: usize) -> usize {
        debug_assert!(cores > 0 && worker < workers);
        match self {
            PinWorkers::Auto if workers <= cores => cores - workers + worker,
            _ => worker % cores,
        }
    }
}

impl<'de> Deserialize<'de> for PinWorkers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = PinWorkers;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or \"auto\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<PinWorkers, E> {
                Ok(if v { PinWorkers::On } else { PinWorkers::Off })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PinWorkers, E> {
                match v {
                    "auto" => Ok(PinWorkers::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Kinds of port.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PortKind {
    /// Built-in traffic generator.
    Gen,
    /// pcap file reader and/or writer.
    Pcap,
    /// Discards what it is sent.
    Sink,
    /// A Linux network interface through AF_PACKET (TPACKET_V2 rings; needs CAP_NET_RAW).
    Afpacket,
    /// A Linux network interface through AF_XDP sockets fed by an XDP program (needs
    /// CAP_NET_RAW and CAP_BPF or CAP_SYS_ADMIN).
    Afxdp,
}

impl PortKind {
    /// The name used in the config.
    pub fn name(self) -> &'static str {
        match self {
            PortKind::Gen => "gen",
            PortKind::Pcap => "pcap",
            PortKind::Sink => "sink",
            PortKind::Afpacket => "afpacket",
            PortKind::Afxdp => "afxdp",
        }
    }
}

/// One `[[port]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Unique name.
    pub name: Spanned<String>,
    /// What it is.
    pub kind: Spanned<PortKind>,
    /// VLAN membership (default: access port of VLAN 1).
    #[serde(default)]
    pub vlan: Option<Spanned<PortVlanConfig>>,
    /// Generator settings (kind = "gen").
    #[serde(default)]
    pub gen: Option<Spanned<GenConfig>>,
    /// pcap settings (kind = "pcap").
    #[serde(default)]
    pub pcap: Option<Spanned<PcapConfig>>,
    /// AF_PACKET settings (kind = "afpacket"), e.g. `afpacket = { iface = "veth0" }`.
    #[serde(default)]
    pub afpacket: Option<Spanned<freeway_io::afpacket::AfPacketConfig>>,
    /// AF_XDP settings (kind = "afxdp"), e.g. `afxdp = { iface = "eth0", queues = 1 }`.
    #[serde(default)]
    pub afxdp: Option<Spanned<freeway_io::afxdp::AfXdpConfig>>,
    /// Conntrack zone of frames received here (default 0).
    #[serde(default)]
    pub zone: Option<u16>,
    /// Link-local groups (01:80:c2:00:00:0N, bit N) that frames received here are forwarded
    /// to, as Linux's `group_fwd_mask` (e.g. 0x4008: LLDP and 802.1X). Default 0: none; STP,
    /// PAUSE and LACP (bits 0-2) are never forwarded.
    #[serde(default)]
    pub group_fwd_mask: Option<Spanned<u16>>,
    /// Learn source addresses of frames received here (default true), as the Linux bridge's
    /// port flag of that name; likewise the next four.
    #[serde(default)]
    pub learning: Option<bool>,
    /// Unknown-unicast frames are flooded out of this port (default true).
    #[serde(default)]
    pub flood: Option<bool>,
    /// Multicast frames are flooded out of this port (default true).
    #[serde(default)]
    pub mcast_flood: Option<bool>,
    /// Broadcast frames are flooded out of this port (default true).
    #[serde(default)]
    pub bcast_flood: Option<bool>,
    /// Nothing goes between two isolated ports (default false).
    #[serde(default)]
    pub isolated: Option<bool>,
    /// An STP BPDU received here disables the port until `freeway ctl link set dev PORT up`
    /// (default false).
    #[serde(default)]
    pub bpdu_guard: Option<bool>,
    /// Most broadcast, multicast and unknown-unicast frames a second taken in (each key
    /// optional; none: no limit).
    #[serde(default)]
    pub storm_control: Option<StormConfig>,
    /// The port's L2 MTU (see [`mtu`]); default 1500.
    #[serde(default)]
    pub mtu: Option<Spanned<u32>>,
    /// Linux's `multicast_router`: 0 never a multicast router port, 1 (default) while IGMP/MLD
    /// queries arrive on it, 2 always.
    #[serde(default)]
    pub multicast_router: Option<Spanned<u8>>,
    /// A leave (IGMP leave, MLD done) removes the member at once (default false: after the
    /// last-member time).
    #[serde(default)]
    pub multicast_fast_leave: Option<bool>,
}

/// `storm_control = { ... }` of a `[[port]]`: frames a second, by class.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StormConfig {
    /// Broadcast frames a second.
    pub broadcast: Option<u32>,
    /// Multicast frames a second.
    pub multicast: Option<u32>,
    /// Unknown-unicast frames a second.
    pub unknown_unicast: Option<u32>,
}

/// `[bridge]`: FDB bounds and ageing (defaults in [`FdbConfig`]) and static entries.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// See [`FdbConfig::learn_limit`].
    pub learn_limit: Option<Spanned<usize>>,
    /// See [`FdbConfig::static_limit`].
    pub static_limit: Option<Spanned<usize>>,
    /// See [`FdbConfig::ageing_ms`].
    pub ageing_ms: Option<Spanned<u64>>,
    /// See [`FdbConfig::age_interval_ms`].
    pub age_interval_ms: Option<Spanned<u64>>,
    /// See [`FdbConfig::age_chunk_buckets`].
    pub age_chunk_buckets: Option<Spanned<usize>>,
    /// See [`FdbConfig::learn_queue`].
    pub learn_queue: Option<Spanned<usize>>,
    /// See [`MdbConfig::multicast_snooping`] (default true, as Linux).
    pub multicast_snooping: Option<Spanned<bool>>,
    /// See [`MdbConfig::multicast_hash_max`].
    pub multicast_hash_max: Option<Spanned<usize>>,
    /// See [`MdbConfig::multicast_membership_interval_ms`].
    pub multicast_membership_interval_ms: Option<Spanned<u64>>,
    /// See [`MdbConfig::multicast_querier_interval_ms`].
    pub multicast_querier_interval_ms: Option<Spanned<u64>>,
    /// See [`MdbConfig::multicast_last_member_count`].
    pub multicast_last_member_count: Option<Spanned<u32>>,
    /// See [`MdbConfig::multicast_last_member_interval_ms`].
    pub multicast_last_member_interval_ms: Option<Spanned<u64>>,
    /// See [`MdbConfig::multicast_queue`].
    pub multicast_queue: Option<Spanned<usize>>,
    /// Static FDB entries.
    #[serde(default, rename = "static")]
    pub statics: Vec<Spanned<StaticEntry>>,
}

/// A static FDB entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticEntry {
    /// Address.
    pub mac: Mac,
    /// VLAN (default 1).
    #[serde(default = "one")]
    pub vlan: u16,
    /// Port name.
    pub port: String,
}

fn one() -> u16 {
    1
}

/// A configuration error with its location.
#[derive(Debug)]
pub struct ConfigError {
    /// What file.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub msg: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.msg),
            None => write!(f, "{}: {}", self.file, self.msg),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A port ready to open.
#[derive(Clone, Debug)]
pub struct PortSpec {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: PortKind,
    /// Compiled VLAN mode.
    pub vlan: freeway_bridge::PortVlan,
    /// Generator settings.
    pub gen: Option<GenConfig>,
    /// pcap settings.
    pub pcap: Option<PcapConfig>,
    /// AF_PACKET settings.
    pub afpacket: Option<freeway_io::afpacket::AfPacketConfig>,
    /// AF_XDP settings.
    pub afxdp: Option<freeway_io::afxdp::AfXdpConfig>,
    /// Conntrack zone of received frames.
    pub zone: u16,
    /// Link-local groups forwarded from this port (see [`PortConfig::group_fwd_mask`]).
    pub group_fwd_mask: u16,
    /// The port's bridge flags (learning, flooding, isolation, BPDU guard).
    pub flags: freeway_bridge::PortFlags,
    /// The port's storm control, for the whole port (the datapath shares it among workers).
    pub storm: freeway_bridge::StormControl,
    /// The port's L2 MTU (see [`mtu`]).
    pub mtu: u16,
    /// Its `multicast_router` mode and fast leave.
    pub mcast: (freeway_bridge::McastRouter, bool),
}

/// A checked configuration.
#[derive(Debug)]
pub struct Checked {
    /// Workers to start.
    pub workers: usize,
    /// Run time limit.
    pub duration_secs: Option<f64>,
    /// Pin workers to cores: resolved when the workers start ([`PinWorkers::resolve`], with
    /// the run's worker count and the cores the process may use).
    pub pin_workers: PinWorkers,
    /// Ports by index.
    pub ports: Vec<PortSpec>,
    /// FDB settings.
    pub fdb: FdbConfig,
    /// Multicast snooping settings.
    pub mdb: MdbConfig,
    /// Static entries: (mac, vlan, port index).
    pub statics: Vec<(Mac, u16, u16)>,
    /// The router, when some interface is configured.
    pub router: Option<l3::RouterSpec>,
    /// Connection tracking, when enabled.
    pub conntrack: Option<stateful::ConntrackSpec>,
    /// The stateful firewall, when configured.
    pub firewall: Option<stateful::FirewallSpec>,
    /// Capture taps.
    pub taps: Vec<capture::TapSpec>,
    /// The Linux control plane, when enabled.
    pub linux: Option<linux::LinuxSpec>,
}

/// Most ports a run may open: those configured at start and those a reload adds (every
/// table a worker reads by port index is sized for this many, plus the router's port).
pub const MAX_PORTS: usize = 256;
/// Most workers.
pub const MAX_WORKERS: usize = 128;

/// A TOML error's words with the Rust type serde names (`invalid type: string "two",
/// expected usize`) said as the value a user writes (`expected a whole number of 0 or more`).
fn plain_types(msg: &str) -> String {
    const NAMES: [(&str, &str); 10] = [
        ("usize", "a whole number of 0 or more"),
        ("u64", "a whole number of 0 or more"),
        ("u32", "a whole number from 0 to 4294967295"),
        ("u16", "a whole number from 0 to 65535"),
        ("u8", "a whole number from 0 to 255"),
        ("isize", "a whole number"),
        ("i64", "a whole number"),
        ("i32", "a whole number"),
        ("f64", "a number"),
        ("f32", "a number"),
    ];
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find("expected ") {
        let (head, tail) = rest.split_at(i + "expected ".len());
        out.push_str(head);
        rest = tail;
        let word = tail.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or("");
        if let Some((name, plain)) = NAMES.iter().find(|(n, _)| *n == word) {
            out.push_str(plain);
            rest = &tail[name.len()..];
        }
    }
    out.push_str(rest);
    out
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

/// Reads and checks a config file.
pub fn load(path: &Path) -> Result<Checked, ConfigError> {
    let src = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.display().to_string(),
        line: None,
        msg: format!("cannot read: {e}"),
    })?;
    parse(&src, &path.display().to_string(), path.parent())
}

/// Parses and checks config text. `file` names it in errors; relative pcap paths are taken
/// relative to `base` when given.
pub fn parse(src: &str, file: &str, base: Option<&Path>) -> Result<Checked, ConfigError> {
    let at = Locator { src, file };
    let cfg: Config = toml::from_str(src).map_err(|e| at.err(e.span(), plain_types(e.message().trim())))?;

    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let workers = check_workers(&at, cfg.workers.as_ref(), cores)?;
    let duration_secs = check_duration(&at, cfg.duration_secs.as_ref())?;
    if cfg.ports.is_empty() {
        return Err(at.err(None, "no ports: add at least one [[port]]".into()));
    }
    if cfg.ports.len() > MAX_PORTS {
        return Err(at.err(
            None,
            format!("too many ports ({}): a run holds at most {MAX_PORTS}", cfg.ports.len()),
        ));
    }
    let (fdb, mdb) = check_fdb(&at, &cfg.bridge)?;

    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut ports = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        ports.push(check_port(&at, i, p, &mut by_name, base)?);
    }
    let statics = check_statics(&at, &cfg.bridge.statics, &by_name, &ports)?;

    let lift = |(span, msg): (Option<Range<usize>>, String)| at.err(span, msg);
    let router = l3::check(&cfg.router, &cfg.interfaces, &cfg.routes, &cfg.neighs, |v| {
        ports.iter().any(|p| p.vlan.is_member(v))
    })
    .map_err(lift)?;
    let port_index = |n: &str| by_name.get(n).map(|&i| i as u16);
    let (conntrack, firewall) = stateful::check(
        cfg.conntrack.as_ref(),
        cfg.firewall.as_ref(),
        base,
        port_index,
        freeway_conntrack::Timeouts::is_name,
        &freeway_conntrack::Timeouts::names(),
    )
    .map_err(lift)?;
    let port_names: Vec<String> = cfg.ports.iter().map(|p| p.name.get_ref().clone()).collect();
    let taps = capture::check(&cfg.taps, &port_names, capture::filter_compiles, base).map_err(lift)?;
    let linux = linux::check(&cfg.linux, router.is_some()).map_err(lift)?;

    Ok(Checked {
        linux,
        router,
        conntrack,
        firewall,
        taps,
        workers,
        duration_secs,
        pin_workers: cfg.pin_workers.unwrap_or_default(),
        ports,
        fdb,
        mdb,
        statics,
    })
}

/// Turns a span of the config text into a [`ConfigError`] naming its file and line.
struct Locator<'a> {
    src: &'a str,
    file: &'a str,
}

impl Locator<'_> {
    fn err(&self, span: Option<Range<usize>>, msg: String) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            line: span.map(|s| line_of(self.src, s.start)),
            msg,
        }
    }
}

/// `workers`: 1 to [`MAX_WORKERS`]; by default one per core, at most 2.
fn check_workers(at: &Locator, workers: Option<&Spanned<usize>>, cores: usize) -> Result<usize, ConfigError> {
    let Some(w) = workers else {
        return Ok(cores.min(2));
    };
    let n = *w.get_ref();
    if n == 0 || n > MAX_WORKERS {
        return Err(at.err(
            Some(w.span()),
            format!("workers: must be between 1 and {MAX_WORKERS} (got {n})"),
        ));
    }
    Ok(n)
}

/// `duration_secs`, in seconds.
fn check_duration(at: &Locator, d: Option<&Spanned<DurationValue>>) -> Result<Option<f64>, ConfigError> {
    let Some(d) = d else {
        return Ok(None);
    };
    let secs = d
        .get_ref()
        .check()
        .map_err(|e| at.err(Some(d.span()), format!("duration_secs = {e}")))?
        .as_secs_f64();
    Ok(Some(secs))
}

/// `[bridge]`'s FDB bounds and multicast snooping settings over the defaults, validated
/// together.
fn check_fdb(at: &Locator, b: &BridgeConfig) -> Result<(FdbConfig, MdbConfig), ConfigError> {
    let mut fdb = FdbConfig::default();
    let mut mdb = MdbConfig::default();
    let mut spans: Vec<(&str, Range<usize>)> = Vec::new();
    macro_rules! take {
        ($c:ident: $($f:ident)*) => {$(
            if let Some(v) = &b.$f {
                $c.$f = *v.get_ref();
                spans.push((stringify!($f), v.span()));
            }
        )*};
    }
    take!(fdb: learn_limit static_limit ageing_ms age_interval_ms age_chunk_buckets learn_queue);
    take!(mdb: multicast_snooping multicast_hash_max multicast_membership_interval_ms multicast_querier_interval_ms);
    take!(mdb: multicast_last_member_count multicast_last_member_interval_ms multicast_queue);
    if let Err(m) = fdb.validate().and_then(|()| mdb.validate()) {
        let span = spans.iter().find(|(k, _)| m.starts_with(k)).map(|(_, s)| s.clone());
        return Err(at.err(span, format!("bridge.{m}")));
    }
    Ok((fdb, mdb))
}

/// One `[[port]]`, the `i`th: its name (recorded in `by_name`), VLAN mode and the settings
/// table of its kind.
fn check_port(
    at: &Locator,
    i: usize,
    p: &PortConfig,
    by_name: &mut HashMap<String, usize>,
    base: Option<&Path>,
) -> Result<PortSpec, ConfigError> {
    let name = check_port_name(at, i, p, by_name)?;
    let kind = *p.kind.get_ref();
    let vlan = match &p.vlan {
        Some(v) => v
            .get_ref()
            .build()
            .map_err(|m| at.err(Some(v.span()), format!("port {name:?}: vlan: {m}")))?,
        None => freeway_bridge::PortVlan::Access(1),
    };
    let (gen, pcap) = port_file_tables(at, &name, p, base)?;
    let mut afpacket = iface_table(at, &name, p, PortKind::Afpacket, p.afpacket.as_ref(), |c| c.validate())?;
    let afxdp = iface_table(at, &name, p, PortKind::Afxdp, p.afxdp.as_ref(), |c| c.validate())?;
    let mtu = port_mtu(at, &name, p, afpacket.as_mut(), afxdp.as_ref())?;
    let group_fwd_mask = match &p.group_fwd_mask {
        Some(m) => {
            freeway_bridge::check_group_fwd_mask(*m.get_ref())
                .map_err(|e| at.err(Some(m.span()), format!("port {name:?}: {e}")))?;
            *m.get_ref()
        }
        None => 0,
    };
    let router = match &p.multicast_router {
        Some(r) => freeway_bridge::McastRouter::from_linux(*r.get_ref()).ok_or_else(|| {
            at.err(
                Some(r.span()),
                format!(
                    "port {name:?}: multicast_router must be 0, 1 or 2 (got {})",
                    r.get_ref()
                ),
            )
        })?,
        None => freeway_bridge::McastRouter::Learn,
    };
    Ok(PortSpec {
        name,
        kind,
        vlan,
        gen,
        pcap,
        afpacket,
        afxdp,
        zone: p.zone.unwrap_or(0),
        group_fwd_mask,
        flags: port_flags(p),
        storm: p
            .storm_control
            .as_ref()
            .map_or_else(Default::default, |s| freeway_bridge::StormControl {
                broadcast: s.broadcast.unwrap_or(0),
                multicast: s.multicast.unwrap_or(0),
                unknown_unicast: s.unknown_unicast.unwrap_or(0),
            }),
        mtu,
        mcast: (router, p.multicast_fast_leave.unwrap_or(false)),
    })
}

/// The `i`th port's name: valid, and not taken by an earlier port (recorded in `by_name`).
fn check_port_name(
    at: &Locator,
    i: usize,
    p: &PortConfig,
    by_name: &mut HashMap<String, usize>,
) -> Result<String, ConfigError> {
    let name = p.name.get_ref().clone();
    if name.is_empty() || name.len() > 32 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(at.err(
            Some(p.name.span()),
            format!("port.name: {name:?} must be 1-32 characters of letters, digits, '-', '_' or '.'"),
        ));
    }
    if let Some(prev) = by_name.insert(name.clone(), i) {
        return Err(at.err(
            Some(p.name.span()),
            format!("port.name: {name:?} is listed twice (ports {prev} and {i})"),
        ));
    }
    Ok(name)
}

/// A port's `gen` and `pcap` tables, checked (a pcap table's paths rebased on `base`); a
/// `gen` port without its table gets the defaults, a `pcap` port without its table is an error.
fn port_file_tables(
    at: &Locator,
    name: &str,
    p: &PortConfig,
    base: Option<&Path>,
) -> Result<(Option<GenConfig>, Option<PcapConfig>), ConfigError> {
    let kind = *p.kind.get_ref();
    let gen = match kind_table(at, name, p, PortKind::Gen, "a `gen`", p.gen.as_ref())? {
        Some(g) => {
            g.get_ref()
                .validate()
                .map_err(|m| at.err(Some(g.span()), format!("port {name:?}: gen: {m}")))?;
            Some(g.get_ref().clone())
        }
        None if kind == PortKind::Gen => Some(GenConfig::default()),
        None => None,
    };
    let pcap = match kind_table(at, name, p, PortKind::Pcap, "a `pcap`", p.pcap.as_ref())? {
        Some(c) => {
            let mut c2 = c.get_ref().clone();
            if let Some(b) = base {
                c2.rebase(b);
            }
            c2.validate()
                .map_err(|m| at.err(Some(c.span()), format!("port {name:?}: pcap: {m}")))?;
            Some(c2)
        }
        None if kind == PortKind::Pcap => {
            return Err(missing_table(
                at,
                name,
                p,
                r#"a pcap table, e.g. pcap = { read = "in.pcap" }"#,
            ))
        }
        None => None,
    };
    Ok((gen, pcap))
}

/// A port's MTU (checked against its AF_XDP settings), and its AF_PACKET ring slots made
/// large enough for it.
fn port_mtu(
    at: &Locator,
    name: &str,
    p: &PortConfig,
    afpacket: Option<&mut freeway_io::afpacket::AfPacketConfig>,
    afxdp: Option<&freeway_io::afxdp::AfXdpConfig>,
) -> Result<u16, ConfigError> {
    let mtu = match &p.mtu {
        Some(m) => mtu::check_port_mtu(*m.get_ref(), afxdp)
            .map_err(|e| at.err(Some(m.span()), format!("port {name:?}: {e}")))?,
        None => mtu::DEFAULT_PORT_MTU,
    };
    if let Some(a) = afpacket {
        a.frame_size = mtu::ring_frame_size(a.frame_size, mtu);
        if a.frame_size > a.block_size {
            return Err(at.err(
                p.mtu.as_ref().map(|m| m.span()),
                format!(
                    "port {name:?}: mtu {mtu} needs ring slots of {} bytes, more than afpacket.block_size ({})",
                    a.frame_size, a.block_size
                ),
            ));
        }
    }
    Ok(mtu)
}

/// A port's bridge flags: its keys, or the defaults.
fn port_flags(p: &PortConfig) -> freeway_bridge::PortFlags {
    let d = freeway_bridge::PortFlags::default();
    freeway_bridge::PortFlags {
        learning: p.learning.unwrap_or(d.learning),
        flood: p.flood.unwrap_or(d.flood),
        mcast_flood: p.mcast_flood.unwrap_or(d.mcast_flood),
        bcast_flood: p.bcast_flood.unwrap_or(d.bcast_flood),
        isolated: p.isolated.unwrap_or(d.isolated),
        bpdu_guard: p.bpdu_guard.unwrap_or(d.bpdu_guard),
    }
}

/// A port's settings table for `owner` (`gen`, `pcap`, `afpacket`): refused on a port of
/// another kind (`what` names the table, with its article, in the error).
fn kind_table<'t, T>(
    at: &Locator,
    name: &str,
    p: &PortConfig,
    owner: PortKind,
    what: &str,
    table: Option<&'t Spanned<T>>,
) -> Result<Option<&'t Spanned<T>>, ConfigError> {
    let kind = *p.kind.get_ref();
    match table {
        Some(t) if kind != owner => Err(at.err(
            Some(t.span()),
            format!(
                "port {name:?}: {what} table needs kind = \"{}\" (kind is {:?})",
                owner.name(),
                kind.name()
            ),
        )),
        t => Ok(t),
    }
}

/// The interface table of a live port kind (`afpacket`, `afxdp`: the key is the kind's
/// name): refused on a port of another kind, required on one of this kind, and checked with
/// `validate` (its error is prefixed with the port and the key).
fn iface_table<T: Clone>(
    at: &Locator,
    name: &str,
    p: &PortConfig,
    owner: PortKind,
    table: Option<&Spanned<T>>,
    validate: fn(&T) -> Result<(), String>,
) -> Result<Option<T>, ConfigError> {
    let key = owner.name();
    match kind_table(at, name, p, owner, &format!("an `{key}`"), table)? {
        Some(c) => {
            validate(c.get_ref()).map_err(|m| at.err(Some(c.span()), format!("port {name:?}: {key}: {m}")))?;
            Ok(Some(c.get_ref().clone()))
        }
        None if *p.kind.get_ref() == owner => Err(missing_table(
            at,
            name,
            p,
            &format!("an {key} table, e.g. {key} = {{ iface = \"eth0\" }}"),
        )),
        None => Ok(None),
    }
}

/// A port of a kind that needs its settings table has none (`what`: the table, with an
/// example).
fn missing_table(at: &Locator, name: &str, p: &PortConfig, what: &str) -> ConfigError {
    at.err(
        Some(p.kind.span()),
        format!("port {name:?}: kind = \"{}\" needs {what}", p.kind.get_ref().name()),
    )
}

/// `bridge.static`: each entry's port exists and is a member of its VLAN; the address is
/// unicast. Returns (mac, vlan, port index).
fn check_statics(
    at: &Locator,
    statics: &[Spanned<StaticEntry>],
    by_name: &HashMap<String, usize>,
    ports: &[PortSpec],
) -> Result<Vec<(Mac, u16, u16)>, ConfigError> {
    let mut out = Vec::new();
    for s in statics {
        let e = s.get_ref();
        let Some(&port) = by_name.get(&e.port) else {
            return Err(at.err(Some(s.span()), format!("bridge.static: no port named {:?}", e.port)));
        };
        if e.mac.is_multicast() {
            return Err(at.err(Some(s.span()), format!("bridge.static: {} is a group address", e.mac)));
        }
        freeway_bridge::vlan::check_vid(e.vlan).map_err(|m| at.err(Some(s.span()), format!("bridge.static: {m}")))?;
        if !ports[port].vlan.is_member(e.vlan) {
            return Err(at.err(
                Some(s.span()),
                format!("bridge.static: port {:?} is not a member of VLAN {}", e.port, e.vlan),
            ));
        }
        out.push((e.mac, e.vlan, port as u16));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// The error `text` gets, after one sink port.
    fn error_of(text: &str) -> String {
        let src = format!("{text}\n[[port]]\nname = \"p\"\nkind = \"sink\"\n");
        super::parse(&src, "f.toml", None).unwrap_err().to_string()
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_as_a_user_writes_it_not_as_a_rust_type() {
        assert_eq!(
            error_of("workers = \"two\""),
            "f.toml:1: invalid type: string \"two\", expected a whole number of 0 or more"
        );
        assert_eq!(
            error_of("[bridge]\nlearn_limit = -1"),
            "f.toml:2: invalid value: integer `-1`, expected a whole number of 0 or more"
        );
        // Serde's own words stay.
        let e = error_of("[bridge]\nlearn_limit = true");
        assert!(e.ends_with("expected a whole number of 0 or more"), "{e}");
        assert_eq!(
            super::plain_types("invalid value: integer `70000`, expected u16; expected a boolean"),
            "invalid value: integer `70000`, expected a whole number from 0 to 65535; expected a boolean"
        );
        assert_eq!(super::plain_types("expected u8s"), "expected u8s");
    }
}
