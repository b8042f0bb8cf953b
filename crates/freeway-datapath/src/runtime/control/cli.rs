//! `freeway ctl`'s command line: clap subcommands in the words of `ip`, `bridge` and
//! `conntrack` (`fdb add MAC dev PORT [vlan N]`, `route add PREFIX via GW`, `conntrack -L`),
//! each turned into a typed [`Request`]; and [`TapArgs`], the tcpdump-shaped capture flags
//! that `freeway capture` and `freeway ctl capture start` share, turned into a
//! [`TapOptions`].

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use freeway_bridge::Mac;
use freeway_conntrack::query::{parse_proto, parse_state};
use freeway_conntrack::{CtFilter, TupleFilter};

use super::protocol::{CtlError, Direction, FileFormat, HopSpec, Hops, Request, TapOptions};
use crate::config::capture::{TapOptionsError, MAX_SNAPLEN};

/// The capture flags of `freeway capture` and `freeway ctl capture start` (tcpdump's).
#[derive(Args, Clone, Debug)]
pub struct TapArgs {
    /// The port to capture on (its name in the config; `any`: every port, as tcpdump -i any).
    #[arg(short = 'i', long = "interface", value_name = "PORT")]
    pub interface: Option<String>,
    /// Direction: in, out or inout (as tcpdump -Q).
    #[arg(short = 'Q', long = "direction", default_value = "inout", value_parser = parse_direction)]
    pub direction: Direction,
    /// Bytes kept of each packet (tcpdump -s; 0 means 262144).
    #[arg(short = 's', long = "snapshot-length", default_value_t = MAX_SNAPLEN)]
    pub snaplen: u32,
    /// Stop after this many packets.
    #[arg(short = 'c')]
    pub count: Option<u64>,
    /// File format: pcap or pcapng (default: pcapng for a `.pcapng` file, pcap otherwise).
    #[arg(long, value_parser = parse_format)]
    pub format: Option<FileFormat>,
    /// Filter expression, tcpdump syntax (e.g. `tcp port 80 and host 10.0.0.1`).
    pub expression: Vec<String>,
}

/// conntrack(8)'s selectors, as `freeway conntrack` and `freeway ctl conntrack list` take
/// them.
#[derive(Args, Clone, Debug, Default)]
pub struct CtFilterArgs {
    /// Only this protocol: tcp, udp, icmp, icmpv6 or a number.
    #[arg(short = 'p', long = "proto", value_name = "PROTO", value_parser = parse_proto)]
    pub proto: Option<u8>,
    /// Only this original source address.
    #[arg(short = 's', long = "orig-src", alias = "src", value_name = "ADDR")]
    pub orig_src: Option<IpAddr>,
    /// Only this original destination address.
    #[arg(short = 'd', long = "orig-dst", alias = "dst", value_name = "ADDR")]
    pub orig_dst: Option<IpAddr>,
    /// Only this reply source address.
    #[arg(short = 'r', long = "reply-src", value_name = "ADDR")]
    pub reply_src: Option<IpAddr>,
    /// Only this reply destination address.
    #[arg(short = 'q', long = "reply-dst", value_name = "ADDR")]
    pub reply_dst: Option<IpAddr>,
    /// Only this original source port.
    #[arg(long = "sport", alias = "orig-port-src", value_name = "PORT")]
    pub sport: Option<u16>,
    /// Only this original destination port.
    #[arg(long = "dport", alias = "orig-port-dst", value_name = "PORT")]
    pub dport: Option<u16>,
    /// Only this reply source port.
    #[arg(long = "reply-port-src", value_name = "PORT")]
    pub reply_sport: Option<u16>,
    /// Only this reply destination port.
    #[arg(long = "reply-port-dst", value_name = "PORT")]
    pub reply_dport: Option<u16>,
    /// Only this zone.
    #[arg(short = 'w', long = "zone", value_name = "N")]
    pub zone: Option<u16>,
    /// Only TCP connections in this state, in conntrack's words (ESTABLISHED, SYN_SENT,
    /// TIME_WAIT, ...).
    #[arg(long = "state", value_name = "STATE", value_parser = parse_state)]
    pub state: Option<String>,
}

impl CtFilterArgs {
    /// The filter these selectors make.
    pub fn filter(&self) -> CtFilter {
        CtFilter {
            proto: self.proto,
            orig: TupleFilter {
                src: self.orig_src,
                dst: self.orig_dst,
                ports: (self.sport, self.dport),
            },
            reply: TupleFilter {
                src: self.reply_src,
                dst: self.reply_dst,
                ports: (self.reply_sport, self.reply_dport),
            },
            zone: self.zone,
            state: self.state.clone(),
        }
    }
}

fn parse_direction(s: &str) -> Result<Direction, String> {
    s.parse()
}

fn parse_format(s: &str) -> Result<FileFormat, String> {
    s.parse()
}

/// The usage of `capture start`.
const CAPTURE_START: &str =
    "capture start -i PORT [-Q in|out|inout] [-s SNAPLEN] [-c COUNT] -w /ABSOLUTE/FILE [FILTER...]";

impl TapArgs {
    /// The options these flags ask for (`usage`: the command's usage, for a missing `-i`).
    /// Their values are checked where the capture is attached ([`TapOptions::check`]).
    pub fn options(&self, usage: &str) -> Result<TapOptions, CtlError> {
        let port = self
            .interface
            .clone()
            .ok_or_else(|| CtlError::Usage(format!("-i PORT is required; {usage}")))?;
        Ok(TapOptions {
            port,
            direction: self.direction,
            snaplen: if self.snaplen == 0 { MAX_SNAPLEN } else { self.snaplen },
            count: self.count,
            format: self.format,
            filter: self.expression.join(" "),
        })
    }
}

/// A [`TapOptionsError`] in the words of the flags (`-i nope: no such port (ports: ...)`).
pub fn flag_error(e: &TapOptionsError) -> String {
    match e {
        TapOptionsError::NoSuchPort { name, ports } => {
            format!("-i {name}: no such port (ports: {})", ports.join(", "))
        }
        TapOptionsError::Snaplen(s) => format!("-s {s}: at most {MAX_SNAPLEN}"),
        TapOptionsError::ZeroCount => "-c 0: count must be at least 1".into(),
        TapOptionsError::Filter(_) => e.to_string(),
    }
}

/// A keyword argument (`dev`, `vlan`, `via`...): a positional that must be that word.
macro_rules! keyword {
    ($($w:literal),+) => { clap::builder::PossibleValuesParser::new([$($w),+]) };
}

/// `freeway ctl` commands.
#[derive(Subcommand, Clone, Debug)]
pub enum CtlCmd {
    /// The list of commands (as the datapath knows them).
    Help,
    /// Counters of ports, workers and drops.
    Stats,
    /// The control socket's clients: answered, refused busy, timed out, dropped.
    Clients,
    /// The forwarding database: show | add | del | flush.
    Fdb {
        /// The subcommand (default: show or list).
        #[command(subcommand)]
        cmd: Option<FdbCmd>,
    },
    /// The routing table: show | add | replace | del.
    Route {
        /// The subcommand (default: show or list).
        #[command(subcommand)]
        cmd: Option<RouteCmd>,
    },
    /// The neighbour table: show | add | del | flush.
    Neigh {
        /// The subcommand (default: show or list).
        #[command(subcommand)]
        cmd: Option<NeighCmd>,
    },
    /// The connection table: list (-L) | flush (-F) [zone N].
    Conntrack {
        /// The subcommand (default: show or list).
        #[command(subcommand)]
        cmd: Option<ConntrackCmd>,
    },
    /// The bridge ports: show | set dev PORT up | set dev PORT FLAG on|off ...
    Link {
        /// The subcommand (default: show).
        #[command(subcommand)]
        cmd: Option<LinkCmd>,
    },
    /// The multicast database (IGMP/MLD snooping): show.
    Mdb {
        /// The subcommand (default: show).
        #[command(subcommand)]
        cmd: Option<MdbCmd>,
    },
    /// The firewall's nftables ruleset: list | load FILE.
    Firewall {
        /// The subcommand (default: list).
        #[command(subcommand)]
        cmd: Option<FirewallCmd>,
    },
    /// Named sets of the firewall's ruleset: add | del NAME ELEMENT...
    Set {
        /// The subcommand.
        #[command(subcommand)]
        cmd: SetCmd,
    },
    /// Capture taps: list | start | stop.
    Capture {
        /// The subcommand (default: show or list).
        #[command(subcommand)]
        cmd: Option<CaptureCmd>,
    },
    /// Reads the configuration again and applies what changed (routes, neighbours, static FDB
    /// entries, the ruleset, zone limits); names what waits for a restart.
    Reload {
        /// Only print what would change.
        #[arg(long)]
        check: bool,
        /// The file (default: the one the datapath was started with).
        file: Option<String>,
    },
    /// What the datapath does with one packet, stage by stage (nothing is sent or changed).
    Trace {
        /// Fields, OVS style: in_port=PORT dl_src= dl_dst= dl_vlan= ip|ipv6|arp nw_src= nw_dst=
        /// tcp|udp|icmp tp_src= tp_dst= tcp_flags= nw_ttl= len= arp_spa= arp_tpa=, or hex=FRAME.
        #[arg(allow_hyphen_values = true, trailing_var_arg = true, value_name = "FIELD")]
        fields: Vec<String>,
    },
    /// Any other word: refused with a clear error.
    #[command(external_subcommand)]
    Unknown(Vec<String>),
}

/// `fdb` commands.
#[derive(Subcommand, Clone, Debug)]
pub enum FdbCmd {
    /// The forwarding database.
    #[command(alias = "list")]
    Show,
    /// A static entry: `fdb add MAC dev PORT [vlan N] [master] [static|permanent]` (default
    /// VLAN: the port's access or native VLAN).
    Add(FdbEntryArgs),
    /// Deletes an entry: `fdb del MAC dev PORT [vlan N]` or `fdb del MAC vlan N` (the default
    /// VLAN is the port's, as for `add`).
    #[command(alias = "delete")]
    Del(FdbEntryArgs),
    /// Deletes the learned entries.
    Flush,
}

/// `MAC WORDS...` of `fdb add` and `fdb del`.
#[derive(Args, Clone, Debug)]
pub struct FdbEntryArgs {
    /// The MAC address (a unicast one for `add`).
    mac: Mac,
    /// `dev PORT` and `vlan N`, in either order (`add` needs `dev`, `del` one of the two at
    /// least); bridge(8)'s `master`, `static` and `permanent` are accepted (every entry added
    /// here is one).
    #[arg(
        value_name = "dev PORT | vlan N",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    words: Vec<String>,
}

/// The `dev PORT` and `vlan N` of an `fdb add` or `fdb del`, in either order, with bridge(8)'s
/// flag words allowed.
fn fdb_words(words: &[String]) -> Result<(Option<String>, Option<u16>), CtlError> {
    let (mut dev, mut vlan) = (None, None);
    let mut it = words.iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "dev" => {
                let p = it.next().ok_or_else(|| CtlError::Usage("dev: which port?".into()))?;
                dev = Some(p.clone());
            }
            "vlan" => {
                let v = it.next().ok_or_else(|| CtlError::Usage("vlan: which VLAN?".into()))?;
                let n = v
                    .parse::<u16>()
                    .ok()
                    .filter(|n| (1..=4094).contains(n))
                    .ok_or_else(|| CtlError::Usage(format!("vlan {v}: a VLAN is 1 to 4094")))?;
                vlan = Some(n);
            }
            "master" | "static" | "permanent" => {}
            "self" | "dynamic" | "local" | "extern_learn" | "sticky" | "router" | "use" => {
                return Err(CtlError::Usage(format!(
                    "{w}: Freeway's FDB entries added here are static entries of the bridge \
                     (master static)"
                )))
            }
            other => {
                return Err(CtlError::Usage(format!(
                    "{other:?}: expected dev PORT, vlan N, master, static or permanent"
                )))
            }
        }
    }
    Ok((dev, vlan))
}

/// `route add|replace` arguments, as `ip route` takes them: `PREFIX via GW[,GW...]`,
/// `PREFIX dev IFACE`, `PREFIX via GW dev IFACE`, or ECMP as
/// `PREFIX nexthop via GW dev IFACE [weight N] nexthop ...`.
#[derive(Args, Clone, Debug)]
pub struct RouteAddArgs {
    /// The destination (`10.9.0.0/24`, `2001:db8::/32`, `default`).
    prefix: String,
    /// `via GW[,GW...]` (several: ECMP), `dev IFACE`, both, or `nexthop [via GW] [dev IFACE]
    /// [weight N]` once per hop.
    #[arg(
        value_name = "via GW | dev IFACE | nexthop ...",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    words: Vec<String>,
}

impl RouteAddArgs {
    fn hops(&self) -> Result<Hops, CtlError> {
        route_hops(&self.words)
    }
}

/// The hops of `route add|replace PREFIX WORDS...`.
fn route_hops(words: &[String]) -> Result<Hops, CtlError> {
    let usage = |m: String| CtlError::Usage(m);
    let mut it = words.iter().map(String::as_str).peekable();
    // ECMP: one `nexthop` group per hop.
    if it.peek() == Some(&"nexthop") {
        let mut hops = Vec::new();
        while let Some(w) = it.next() {
            if w != "nexthop" {
                return Err(usage(format!(
                    "{w:?}: expected nexthop [via GW] [dev IFACE] [weight N] (one per hop)"
                )));
            }
            let mut h = HopSpec {
                via: None,
                dev: None,
                weight: None,
            };
            while let Some(&w) = it.peek().filter(|w| **w != "nexthop") {
                it.next();
                let arg = it.next().ok_or_else(|| usage(format!("nexthop ... {w}: which?")))?;
                match w {
                    "via" => h.via = Some(gateway(arg)?),
                    "dev" => h.dev = Some(arg.to_string()),
                    "weight" => {
                        let n = arg
                            .parse::<u32>()
                            .ok()
                            .filter(|n| (1..=256).contains(n))
                            .ok_or_else(|| usage(format!("weight {arg}: a weight is 1 to 256")))?;
                        h.weight = Some(n);
                    }
                    other => {
                        return Err(usage(format!(
                            "nexthop {other:?}: expected via GW, dev IFACE or weight N"
                        )))
                    }
                }
            }
            if h.via.is_none() && h.dev.is_none() {
                return Err(usage("nexthop: via GW or dev IFACE needed".into()));
            }
            hops.push(h);
        }
        return Ok(Hops::Nexthops(hops));
    }
    let (mut via, mut dev) = (None, None);
    while let Some(w) = it.next() {
        let arg = it.next();
        match (w, arg) {
            ("via", Some(a)) => {
                via = Some(a.split(',').map(gateway).collect::<Result<Vec<_>, _>>()?);
            }
            ("dev", Some(a)) => dev = Some(a.to_string()),
            ("via" | "dev", None) => return Err(usage(format!("{w}: which?"))),
            ("nexthop", _) => {
                return Err(usage(
                    "nexthop: the hops are either all `nexthop ...` groups or one via/dev".into(),
                ))
            }
            (other, _) => {
                return Err(usage(format!(
                    "{other:?}: expected via GW[,GW...], dev IFACE or nexthop ..."
                )))
            }
        }
    }
    Ok(match (via, dev) {
        (Some(g), None) => Hops::Via(g),
        (None, Some(d)) => Hops::Dev(d),
        (Some(g), Some(d)) => Hops::Nexthops(
            g.into_iter()
                .map(|g| HopSpec {
                    via: Some(g),
                    dev: Some(d.clone()),
                    weight: None,
                })
                .collect(),
        ),
        (None, None) => return Err(usage("via GW or dev IFACE needed".into())),
    })
}

/// A gateway address of `via GW`.
fn gateway(g: &str) -> Result<IpAddr, CtlError> {
    g.parse::<IpAddr>()
        .map_err(|_| CtlError::Usage(format!("via {g:?}: not an address")))
}

/// `route` commands.
#[derive(Subcommand, Clone, Debug)]
pub enum RouteCmd {
    /// The routing table.
    #[command(alias = "list")]
    Show,
    /// The route a packet to ADDR takes: `route get ADDR` (as `ip route get`).
    Get {
        /// The destination address.
        addr: IpAddr,
    },
    /// Adds a route: `route add PREFIX via GW[,GW...]`, `route add PREFIX [via GW] dev IFACE`
    /// or `route add PREFIX nexthop via GW dev IFACE nexthop via GW dev IFACE` (ECMP).
    Add(RouteAddArgs),
    /// Adds or replaces a route.
    Replace(RouteAddArgs),
    /// Deletes a route.
    #[command(alias = "delete")]
    Del {
        /// The destination.
        prefix: String,
    },
}

/// `neigh` commands.
#[derive(Subcommand, Clone, Debug)]
pub enum NeighCmd {
    /// The neighbour table.
    Show,
    /// A permanent neighbour: `neigh add IP lladdr MAC dev IFACE`.
    Add {
        /// Its address.
        ip: IpAddr,
        /// The word `lladdr`.
        #[arg(value_name = "lladdr", value_parser = keyword!("lladdr"), hide_possible_values = true)]
        lladdr_kw: String,
        /// Its MAC address.
        mac: Mac,
        /// The word `dev`.
        #[arg(value_name = "dev", value_parser = keyword!("dev"), hide_possible_values = true)]
        dev_kw: String,
        /// The interface.
        dev: String,
    },
    /// Deletes a neighbour: `neigh del IP dev IFACE`.
    Del {
        /// Its address.
        ip: IpAddr,
        /// The word `dev`.
        #[arg(value_name = "dev", value_parser = keyword!("dev"), hide_possible_values = true)]
        dev_kw: String,
        /// The interface.
        dev: String,
    },
    /// Deletes the dynamic neighbours: `neigh flush [dev IFACE]`.
    Flush {
        /// The word `dev`.
        #[arg(value_name = "dev", value_parser = keyword!("dev"), hide_possible_values = true, requires = "dev")]
        dev_kw: Option<String>,
        /// The interface.
        #[arg(value_name = "IFACE")]
        dev: Option<String>,
    },
}

/// `conntrack` commands.
#[derive(Subcommand, Clone, Debug)]
pub enum ConntrackCmd {
    /// The connection table, or what conntrack(8)'s selectors choose (`-L -p tcp --state
    /// ESTABLISHED`).
    #[command(short_flag = 'L')]
    List(CtFilterArgs),
    /// Deletes connections: `conntrack flush [zone N]`.
    #[command(short_flag = 'F')]
    Flush {
        /// The word `zone`.
        #[arg(value_name = "zone", value_parser = keyword!("zone"), hide_possible_values = true, requires = "zone")]
        zone_kw: Option<String>,
        /// The zone.
        #[arg(value_name = "N")]
        zone: Option<u16>,
    },
}

/// `capture` commands.
#[derive(Subcommand, Clone, Debug)]
pub enum CaptureCmd {
    /// The capture taps (config and started here).
    List,
    /// A tap writing a pcap (.pcapng: pcapng) file on the datapath's side.
    Start {
        /// What to capture.
        #[command(flatten)]
        tap: TapArgs,
        /// The file (an absolute path: the datapath writes it).
        #[arg(short = 'w', value_name = "/ABS/FILE")]
        write: Option<PathBuf>,
    },
    /// Detaches a tap (its file is completed).
    Stop {
        /// The tap's id (see `capture list`).
        id: u64,
    },
}

impl CtlCmd {
    /// The request these words make.
    pub fn request(&self) -> Result<Request, CtlError> {
        Ok(match self {
            CtlCmd::Help => Request::Help,
            CtlCmd::Stats => Request::Stats,
            CtlCmd::Reload { check, file } => Request::Reload {
                file: file.clone(),
                check: *check,
            },
            CtlCmd::Clients => Request::Clients,
            CtlCmd::Fdb { cmd } => cmd.as_ref().map_or(Ok(Request::FdbShow), FdbCmd::request)?,
            CtlCmd::Route { cmd } => match cmd {
                None | Some(RouteCmd::Show) => Request::RouteShow,
                Some(RouteCmd::Get { addr }) => Request::RouteGet { addr: *addr },
                Some(RouteCmd::Add(a)) => Request::RouteAdd {
                    prefix: a.prefix.clone(),
                    hops: a.hops()?,
                },
                Some(RouteCmd::Replace(a)) => Request::RouteReplace {
                    prefix: a.prefix.clone(),
                    hops: a.hops()?,
                },
                Some(RouteCmd::Del { prefix }) => Request::RouteDel { prefix: prefix.clone() },
            },
            CtlCmd::Neigh { cmd } => match cmd {
                None | Some(NeighCmd::Show) => Request::NeighShow,
                Some(NeighCmd::Add { ip, mac, dev, .. }) => Request::NeighAdd {
                    ip: *ip,
                    mac: *mac,
                    dev: dev.clone(),
                },
                Some(NeighCmd::Del { ip, dev, .. }) => Request::NeighDel {
                    ip: *ip,
                    dev: dev.clone(),
                },
                Some(NeighCmd::Flush { dev, .. }) => Request::NeighFlush { dev: dev.clone() },
            },
            CtlCmd::Conntrack { cmd } => match cmd {
                None => Request::ConntrackList {
                    filter: CtFilter::default(),
                },
                Some(ConntrackCmd::List(f)) => Request::ConntrackList { filter: f.filter() },
                Some(ConntrackCmd::Flush { zone, .. }) => Request::ConntrackFlush { zone: *zone },
            },
            CtlCmd::Capture { cmd } => cmd.as_ref().map_or(Ok(Request::CaptureList), CaptureCmd::request)?,
            CtlCmd::Link { cmd } => match cmd {
                None | Some(LinkCmd::Show) => Request::LinkShow,
                Some(LinkCmd::Set { port, settings, .. }) if settings.first().is_some_and(|w| w == "mtu") => {
                    link_set(port, settings)?
                }
                Some(LinkCmd::Set { port, settings, .. }) => match super::lan::parse_settings(settings)? {
                    (true, f) if f.is_empty() => Request::LinkUp { port: port.clone() },
                    (up, flags) => Request::LinkSet {
                        port: port.clone(),
                        up,
                        flags,
                    },
                },
            },
            CtlCmd::Mdb { cmd } => match cmd {
                None | Some(MdbCmd::Show) => Request::MdbShow,
            },
            CtlCmd::Firewall { cmd } => match cmd {
                None | Some(FirewallCmd::List) => Request::FirewallList,
                Some(FirewallCmd::Load { file }) => Request::FirewallLoad {
                    // The datapath reads the file: it gets the path from the client's
                    // working directory.
                    path: std::path::absolute(file).map_err(|e| CtlError::Usage(format!("{}: {e}", file.display())))?,
                },
            },
            CtlCmd::Set { cmd } => match cmd {
                SetCmd::Add { set, elements: e } => Request::SetAdd {
                    set: set.clone(),
                    elements: elements(e),
                },
                SetCmd::Del { set, elements: e } => Request::SetDel {
                    set: set.clone(),
                    elements: elements(e),
                },
            },
            CtlCmd::Trace { fields } => Request::Trace { fields: fields.clone() },
            CtlCmd::Unknown(words) => {
                return Err(CtlError::UnknownCommand(format!(
                    "unknown command {:?}; try `freeway ctl help`",
                    words.join(" ")
                )))
            }
        })
    }
}

impl FdbCmd {
    /// The request of `fdb show|add|del|flush`.
    fn request(&self) -> Result<Request, CtlError> {
        Ok(match self {
            FdbCmd::Show => Request::FdbShow,
            FdbCmd::Add(FdbEntryArgs { mac, words }) => {
                let (port, vlan) = fdb_words(words)?;
                let port = port.ok_or_else(|| CtlError::Usage("fdb add MAC dev PORT [vlan N]: which port?".into()))?;
                Request::FdbAdd { mac: *mac, port, vlan }
            }
            FdbCmd::Del(FdbEntryArgs { mac, words }) => {
                let (port, vlan) = fdb_words(words)?;
                if port.is_none() && vlan.is_none() {
                    return Err(CtlError::Usage(
                        "fdb del MAC dev PORT [vlan N] | fdb del MAC vlan N: which entry?".into(),
                    ));
                }
                Request::FdbDel { mac: *mac, port, vlan }
            }
            FdbCmd::Flush => Request::FdbFlush,
        })
    }
}

impl CaptureCmd {
    /// The request of `capture list|start|stop`.
    fn request(&self) -> Result<Request, CtlError> {
        Ok(match self {
            CaptureCmd::List => Request::CaptureList,
            CaptureCmd::Start { tap, write } => {
                let tap = tap.options(CAPTURE_START)?;
                let write = write.clone().ok_or_else(|| {
                    CtlError::Usage(format!(
                        "-w FILE is required (to stream a capture back, use `freeway capture --ctl`); {CAPTURE_START}"
                    ))
                })?;
                Request::CaptureStart { tap, write }
            }
            CaptureCmd::Stop { id } => Request::CaptureStop { id: *id },
        })
    }
}

/// `link set dev NAME up` or `link set dev NAME mtu N`.
fn link_set(dev: &str, what: &[String]) -> Result<Request, CtlError> {
    let words: Vec<&str> = what.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["up"] => Ok(Request::LinkUp { port: dev.to_string() }),
        ["mtu", n] => n
            .parse()
            .map(|mtu| Request::LinkMtu {
                dev: dev.to_string(),
                mtu,
            })
            .map_err(|_| CtlError::Usage(format!("mtu {n:?} is not a number; usage: link set dev NAME mtu N"))),
        _ => Err(CtlError::Usage(format!(
            "link set dev {dev} {}: expected `up` or `mtu N`",
            words.join(" ")
        ))),
    }
}

/// `freeway ctl link ...`.
#[derive(Subcommand, Clone, Debug)]
pub enum LinkCmd {
    /// Every port's state and flags (`bridge link show`).
    #[command(visible_alias = "list")]
    Show,
    /// Changes a port while it forwards: `set dev PORT up` enables a port its BPDU guard
    /// disabled; `set dev PORT learning off flood on ...` sets flags (learning, flood,
    /// mcast_flood, bcast_flood, isolated, guard: on or off); `set dev NAME mtu N` sets the
    /// MTU of a port or a router interface (as `ip link`).
    Set {
        /// `dev`.
        #[arg(value_parser = keyword!("dev"))]
        dev_kw: String,
        /// The port (or, with `mtu`, the router interface).
        port: String,
        /// `up`, `FLAG on|off` pairs, or `mtu N`.
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        settings: Vec<String>,
    },
}

/// `freeway ctl mdb ...`.
#[derive(Subcommand, Clone, Debug)]
pub enum MdbCmd {
    /// Groups and their member ports per VLAN, and router ports (`bridge mdb show`).
    #[command(visible_alias = "list")]
    Show,
}

/// `freeway ctl firewall ...`.
#[derive(Subcommand, Clone, Debug)]
pub enum FirewallCmd {
    /// The ruleset with its counters, as `nft list ruleset` prints it.
    #[command(visible_alias = "show")]
    List,
    /// Replaces the ruleset with an nftables file, atomically (a bad file changes nothing).
    Load {
        /// The file (`nft -f` syntax).
        file: PathBuf,
    },
}

/// `freeway ctl set ...`.
#[derive(Subcommand, Clone, Debug)]
pub enum SetCmd {
    /// Adds elements to a named set.
    Add {
        /// The set (`NAME`, or `TABLE/NAME` where several tables have a set of that name).
        set: String,
        /// Elements, in nftables syntax: `10.0.0.5`, `10.0.1.0/24`, `10.0.0.5 . 22`, or
        /// several as `{ a, b }`.
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        elements: Vec<String>,
    },
    /// Deletes elements from a named set.
    #[command(visible_alias = "delete")]
    Del {
        /// The set.
        set: String,
        /// Elements, as for `add`.
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        elements: Vec<String>,
    },
}

/// Set elements given as words: joined, with one pair of braces around them removed.
fn elements(words: &[String]) -> String {
    let s = words.join(" ");
    let t = s.trim();
    t.strip_prefix('{')
        .and_then(|x| x.strip_suffix('}'))
        .unwrap_or(t)
        .trim()
        .to_string()
}

/// `freeway ctl`'s words alone (for [`parse_words`]).
#[derive(Parser, Debug)]
#[command(name = "freeway ctl", disable_help_subcommand = true, disable_version_flag = true)]
struct Words {
    /// The subcommand (default: show or list).
    #[command(subcommand)]
    cmd: CtlCmd,
}

/// The request that `freeway ctl WORDS...` sends (`["route", "show"]`); words it would refuse
/// get a [`CtlError::Usage`] (or [`CtlError::UnknownCommand`]) saying why.
pub fn parse_words(words: &[String]) -> Result<Request, CtlError> {
    let w = Words::try_parse_from(std::iter::once("freeway ctl").chain(words.iter().map(String::as_str)))
        .map_err(|e| CtlError::Usage(e.render().to_string().trim_end().to_string()))?;
    w.cmd.request()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn req(w: &str) -> Result<Request, CtlError> {
        let words: Vec<String> = w.split_whitespace().map(String::from).collect();
        parse_words(&words)
    }

    #[test]
    fn the_words_are_well_formed() {
        Words::command().debug_assert();
    }

    #[test]
    fn ctl_words_become_typed_requests_and_back() {
        for w in [
            "stats",
            "clients",
            "help",
            "fdb show",
            "fdb add 02:00:00:00:00:99 dev lan",
            "fdb add 02:00:00:00:00:99 dev lan vlan 10",
            "fdb del 02:00:00:00:00:99 vlan 10",
            "fdb flush",
            "route show",
            "route add 10.8.0.0/16 via 10.0.20.7,10.0.20.8",
            "route add 10.0.20.0/24 dev wan",
            "route replace default via 10.0.20.7",
            "route add 10.8.0.0/16 via 10.0.20.7 dev wan",
            "route add 10.8.0.0/16 nexthop via 10.0.20.7 dev wan nexthop via 10.0.20.8",
            "route replace 10.8.0.0/16 nexthop via 10.0.20.7 dev wan weight 1 nexthop dev lan weight 1",
            "route del 10.6.0.0/16",
            "neigh show",
            "neigh add 10.0.20.9 lladdr 02:00:00:00:20:09 dev wan",
            "neigh del 10.0.20.9 dev wan",
            "neigh flush",
            "neigh flush dev wan",
            "conntrack list",
            "conntrack flush",
            "conntrack flush zone 3",
            "capture list",
            "capture stop 4",
            "link show",
            "link set dev lan up",
            "link set dev lan mtu 9000",
            "firewall list",
            "firewall load /etc/freeway/rules.nft",
            "set add allowed { 10.0.0.5, 10.0.1.0/24 }",
            "set del filter/allowed { 10.0.0.5 . 22 }",
            "trace in_port=lan udp tp_dst=53",
        ] {
            let r = req(w).unwrap_or_else(|e| panic!("{w}: {e}"));
            // Logs show a request as the words that made it.
            assert_eq!(r.to_string(), w, "{r:?}");
        }
        // Short forms.
        assert_eq!(req("fdb").unwrap(), Request::FdbShow);
        assert_eq!(req("route").unwrap(), Request::RouteShow);
        assert_eq!(req("neigh").unwrap(), Request::NeighShow);
        let all = Request::ConntrackList {
            filter: CtFilter::default(),
        };
        assert_eq!(req("conntrack").unwrap(), all);
        assert_eq!(req("conntrack -L").unwrap(), all);
        assert_eq!(
            req("conntrack -L -p tcp -s 10.0.0.1 --dport 80 -w 3 --state established").unwrap(),
            Request::ConntrackList {
                filter: CtFilter {
                    proto: Some(6),
                    orig: TupleFilter {
                        src: Some("10.0.0.1".parse().unwrap()),
                        dst: None,
                        ports: (None, Some(80)),
                    },
                    zone: Some(3),
                    state: Some("ESTABLISHED".into()),
                    ..Default::default()
                }
            }
        );
        assert_eq!(
            req("conntrack list -p tcp --dport 80").unwrap().to_string(),
            "conntrack list -p 6 --dport 80"
        );
        assert!(req("conntrack -L --state OPEN").is_err());
        assert_eq!(req("conntrack -F").unwrap(), Request::ConntrackFlush { zone: None });
        assert_eq!(req("capture").unwrap(), Request::CaptureList);
        assert_eq!(req("firewall").unwrap(), Request::FirewallList);
        assert_eq!(
            req("set add allowed 10.0.0.7").unwrap(),
            Request::SetAdd {
                set: "allowed".into(),
                elements: "10.0.0.7".into()
            }
        );
        assert_eq!(
            req("route delete 10.6.0.0/16").unwrap(),
            Request::RouteDel {
                prefix: "10.6.0.0/16".into()
            }
        );
        let r = req("capture start -i wan -Q out -c 5 -w /tmp/w.pcap udp and dst port 5001").unwrap();
        let Request::CaptureStart { tap, write } = r else {
            panic!("{r:?}")
        };
        assert_eq!(write, PathBuf::from("/tmp/w.pcap"));
        assert_eq!(tap.port, "wan");
        assert_eq!(tap.direction, Direction::Out);
        assert_eq!(tap.count, Some(5));
        assert_eq!(tap.snaplen, MAX_SNAPLEN);
        assert_eq!(tap.filter, "udp and dst port 5001");
    }

    #[test]
    fn bad_words_are_refused_before_sending() {
        for (w, kind, msg) in [
            ("bogus", "unknown_command", "unknown command \"bogus\""),
            ("fdb add zz dev lan", "usage", "zz"),
            ("fdb add 02:00:00:00:00:99 on lan", "usage", "on"),
            ("fdb add 02:00:00:00:00:99 dev lan vlan", "usage", "vlan"),
            (
                "route add 10.0.0.0/8 via nowhere",
                "usage",
                "via \"nowhere\": not an address",
            ),
            ("route add 10.0.0.0/8 through 10.0.20.7", "usage", "through"),
            (
                "route add 10.0.0.0/8 nexthop via 10.0.20.7 weight 0",
                "usage",
                "weight 0: a weight is 1 to 256",
            ),
            (
                "route add 10.0.0.0/8 nexthop weight 1",
                "usage",
                "nexthop: via GW or dev IFACE needed",
            ),
            ("route add 10.0.0.0/8 nexthop via 10.0.20.7 dev", "usage", "dev: which?"),
            (
                "route add 10.0.0.0/8 nexthop via 10.0.20.7 onlink x",
                "usage",
                "\"onlink\"",
            ),
            (
                "route add 10.0.0.0/8 via 10.0.20.7 nexthop via 10.0.20.8",
                "usage",
                "either all `nexthop ...` groups",
            ),
            ("neigh add 10.0.20.9 02:00:00:00:20:09 dev wan", "usage", "lladdr"),
            ("capture start -w /tmp/x.pcap", "usage", "-i PORT"),
            ("capture start -i wan", "usage", "-w FILE"),
            (
                "capture start -i wan -Q sideways -w /tmp/x",
                "usage",
                "in, out or inout",
            ),
            ("capture stop x", "usage", "x"),
        ] {
            let e = req(w).unwrap_err();
            assert_eq!(e.kind(), kind, "{w}: {e}");
            assert!(e.to_string().contains(msg), "{w}: {e}");
        }
    }
}
