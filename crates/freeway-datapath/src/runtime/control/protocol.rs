//! The control socket's wire protocol: typed requests and replies, one JSON object per line.
//!
//! # Requests
//!
//! A client sends one line (at most [`MAX_REQUEST`] bytes, ending in a newline):
//!
//! ```json
//! {"version":1,"request":{"cmd":"route_add","prefix":"10.9.0.0/24","hops":{"via":["10.0.20.7"]}}}
//! ```
//!
//! `version` is the protocol's ([`PROTOCOL_VERSION`]); `request` is a [`Request`], tagged by
//! its `cmd`. A line that is not such an object, of another version, or naming a command this
//! datapath does not know gets an error reply ([`CtlError::Malformed`],
//! [`CtlError::UnsupportedVersion`], [`CtlError::UnknownCommand`]) and changes nothing.
//!
//! # Replies
//!
//! One line, a [`Response`]:
//!
//! ```json
//! {"version":1,"ok":{"text":"...","data":...}}
//! {"version":1,"error":{"kind":"not_found","message":"no route for 10.6.0.0/16"}}
//! ```
//!
//! `text` is what `freeway ctl` prints, `data` what `freeway ctl -j` prints. An error has a
//! machine-readable `kind` (see [`CtlError`]) and a message for people. After the reply to a
//! [`Request::Capture`] the connection carries the capture itself (pcap or pcapng) until its
//! count is reached, the client goes away or the datapath stops.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use freeway_bridge::Mac;
use freeway_conntrack::CtFilter;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::config::capture::{Direction, FileFormat, TapOptions};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line, newline included.
pub const MAX_REQUEST: usize = 64 * 1024;

/// Most fields of a [`Request::Trace`].
pub const MAX_TRACE_FIELDS: usize = 64;

/// The next hops of a route being added.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Hops {
    /// Through these gateways (several: ECMP), each on some interface's subnet.
    Via(Vec<IpAddr>),
    /// Directly connected on this interface.
    Dev(String),
    /// Hops each naming its gateway, its interface or both, as `ip route`'s
    /// `via GW dev IFACE` and `nexthop via GW dev IFACE weight N nexthop ...` (ECMP).
    Nexthops(Vec<HopSpec>),
}

/// One next hop as `ip route` writes it: `[via GW] [dev IFACE] [weight N]` (one at least of
/// the gateway and the interface).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HopSpec {
    /// The gateway; absent: directly connected on `dev`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<IpAddr>,
    /// The router interface; absent: the one whose subnet holds the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// `ip route`'s weight (the router's ECMP is equal-cost: only 1 is accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

impl fmt::Display for HopSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if let Some(g) = self.via {
            write!(f, "via {g}")?;
            sep = " ";
        }
        if let Some(d) = &self.dev {
            write!(f, "{sep}dev {d}")?;
            sep = " ";
        }
        if let Some(w) = self.weight {
            write!(f, "{sep}weight {w}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Hops {
    /// The words after the prefix: ` via A,B`, ` dev X`, ` via A dev X`, ` nexthop ... nexthop ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hops::Via(g) => {
                let g: Vec<String> = g.iter().map(IpAddr::to_string).collect();
                write!(f, " via {}", g.join(","))
            }
            Hops::Dev(d) => write!(f, " dev {d}"),
            Hops::Nexthops(h) if h.len() == 1 && h[0].weight.is_none() => write!(f, " {}", h[0]),
            Hops::Nexthops(h) => h.iter().try_for_each(|h| write!(f, " nexthop {h}")),
        }
    }
}

/// A request to the control socket. Ports and interfaces are named as in the config;
/// a prefix is written as `ip route` writes it (`10.9.0.0/24`, `2001:db8::/32`, `default`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::VariantNames)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
#[strum(serialize_all = "snake_case")]
pub enum Request {
    /// The list of commands (`freeway ctl help`).
    Help,
    /// Counters of ports, workers and drops.
    Stats,
    /// The control socket's own counters: clients served, refused as busy, timed out, dropped.
    Clients,
    /// The forwarding database.
    FdbShow,
    /// A static FDB entry.
    FdbAdd {
        /// The address (a unicast one).
        mac: Mac,
        /// The port.
        port: String,
        /// The VLAN (default: the port's access or native VLAN).
        #[serde(default)]
        vlan: Option<u16>,
    },
    /// Deletes the FDB entry for (MAC, VLAN).
    FdbDel {
        /// The address.
        mac: Mac,
        /// The port (`dev PORT`, as `bridge fdb del`): its access or native VLAN is the
        /// default VLAN, as for `fdb add`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<String>,
        /// The VLAN (default: the port's; one of the two is needed).
        #[serde(default)]
        vlan: Option<u16>,
    },
    /// Deletes the learned FDB entries.
    FdbFlush,
    /// Reads the configuration again (this file, or the run's own) and applies the
    /// difference that can change live; with `check`, only says what it would do.
    Reload {
        /// The file (default: the one the run was started with).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
        /// Only compare and print.
        #[serde(default)]
        check: bool,
    },
    /// The routing table.
    RouteShow,
    /// The route a packet to this address takes (`ip route get`).
    RouteGet {
        /// The destination address.
        addr: IpAddr,
    },
    /// Adds a route (refused if the prefix has one).
    RouteAdd {
        /// The destination.
        prefix: String,
        /// Where to.
        hops: Hops,
    },
    /// Adds or replaces a route.
    RouteReplace {
        /// The destination.
        prefix: String,
        /// Where to.
        hops: Hops,
    },
    /// Deletes a route.
    RouteDel {
        /// The destination.
        prefix: String,
    },
    /// The neighbour (ARP/ND) table.
    NeighShow,
    /// A permanent neighbour.
    NeighAdd {
        /// Its address.
        ip: IpAddr,
        /// Its MAC address.
        mac: Mac,
        /// The interface.
        dev: String,
    },
    /// Deletes a neighbour.
    NeighDel {
        /// Its address.
        ip: IpAddr,
        /// The interface.
        dev: String,
    },
    /// Deletes the dynamic neighbours (of one interface).
    NeighFlush {
        /// The interface (default: all).
        #[serde(default)]
        dev: Option<String>,
    },
    /// The connection table, or the connections a filter selects (`conntrack -L -p tcp ...`).
    ConntrackList {
        /// conntrack(8)'s selectors (none: every connection).
        #[serde(default, skip_serializing_if = "CtFilter::is_empty")]
        filter: CtFilter,
    },
    /// conntrack -E: after the reply, the connection carries events (see
    /// `runtime::control::events`) until the client goes away or the datapath stops.
    ConntrackEvents {
        /// conntrack(8)'s selectors (none: every connection).
        #[serde(default, skip_serializing_if = "CtFilter::is_empty")]
        filter: CtFilter,
    },
    /// Deletes connections (of one zone).
    ConntrackFlush {
        /// The zone (default: all).
        #[serde(default)]
        zone: Option<u16>,
    },
    /// The capture taps: the config's and those started through the socket.
    CaptureList,
    /// A tap writing a file on the datapath's side.
    CaptureStart {
        /// What to capture.
        tap: TapOptions,
        /// The file (an absolute path: the datapath writes it).
        write: PathBuf,
    },
    /// Detaches a tap.
    CaptureStop {
        /// Its id (see [`Request::CaptureList`]).
        id: u64,
    },
    /// A capture streamed back on this connection after the reply (`freeway capture --ctl`).
    Capture(TapOptions),
    /// The bridge ports: state (forwarding, or disabled by a BPDU guard) and flags (`bridge
    /// link show`).
    LinkShow,
    /// Enables a port that its BPDU guard disabled (`link set dev PORT up`).
    LinkUp {
        /// The port.
        port: String,
    },
    /// Sets the MTU of a port (its L2 MTU) or of a router interface (its IP MTU), live
    /// (`link set dev NAME mtu N`, as `ip link`).
    LinkMtu {
        /// The port or router interface.
        dev: String,
        /// The new MTU.
        mtu: u32,
    },
    /// Changes a port's flags while it forwards (`link set dev PORT learning off ...`), and
    /// enables it again if `up`.
    LinkSet {
        /// The port.
        port: String,
        /// Enable the port too (`up`).
        #[serde(default)]
        up: bool,
        /// The flags to change, by their `link set` words (`learning`, `flood`,
        /// `mcast_flood`, `bcast_flood`, `isolated`, `guard`): on (true) or off.
        flags: std::collections::BTreeMap<String, bool>,
    },
    /// The multicast database: groups and their member ports per VLAN, router ports
    /// (`bridge mdb show`).
    MdbShow,
    /// The firewall's ruleset, with its counters (`nft list ruleset`).
    FirewallList,
    /// Replaces the firewall's ruleset with an nftables file, atomically: a file that does
    /// not parse or compile changes nothing.
    FirewallLoad {
        /// The file (an absolute path: the datapath reads it).
        path: PathBuf,
    },
    /// Adds elements to a named set of the ruleset (`nft add element`).
    SetAdd {
        /// The set's name (`allowed`, or `TABLE NAME` where several tables have one).
        set: String,
        /// The elements, in nftables syntax (`10.0.0.5, 10.0.1.0/24` or `10.0.0.5 . 22`).
        elements: String,
    },
    /// Deletes elements from a named set (`nft delete element`).
    SetDel {
        /// The set's name.
        set: String,
        /// The elements, as for [`Request::SetAdd`].
        elements: String,
    },
    /// What the datapath does with one packet, stage by stage (nothing is sent or changed).
    Trace {
        /// The packet, in OVS-style fields (`in_port=lan`, `nw_dst=10.0.20.7`, `hex=...`).
        fields: Vec<String>,
    },
}

impl Request {
    /// Every command's `cmd` tag, in the order of the variants (strum's names agree with
    /// serde's: both are the variant's name in snake case).
    pub const COMMANDS: &'static [&'static str] = <Request as strum::VariantNames>::VARIANTS;

    /// This request's `cmd` tag.
    pub fn command(&self) -> &'static str {
        self.into()
    }

    /// Whether the request changes the datapath's state (logged at `info`; reads at `debug`).
    pub fn is_change(&self) -> bool {
        matches!(
            self,
            Request::FdbAdd { .. }
                | Request::FdbDel { .. }
                | Request::FdbFlush
                | Request::Reload { .. }
                | Request::RouteAdd { .. }
                | Request::RouteReplace { .. }
                | Request::RouteDel { .. }
                | Request::NeighAdd { .. }
                | Request::NeighDel { .. }
                | Request::NeighFlush { .. }
                | Request::ConntrackFlush { .. }
                | Request::CaptureStart { .. }
                | Request::CaptureStop { .. }
                | Request::LinkUp { .. }
                | Request::LinkMtu { .. }
                | Request::LinkSet { .. }
                | Request::FirewallLoad { .. }
                | Request::SetAdd { .. }
                | Request::SetDel { .. }
        )
    }
}

/// The request as `freeway ctl` words (for logs): `route add 10.9.0.0/24 via 10.0.20.7`.
impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hops = |f: &mut fmt::Formatter<'_>, h: &Hops| write!(f, "{h}");
        let tap = |f: &mut fmt::Formatter<'_>, t: &TapOptions| {
            write!(f, " -i {} -Q {} -s {}", t.port, t.direction, t.snaplen)?;
            if let Some(c) = t.count {
                write!(f, " -c {c}")?;
            }
            if let Some(x) = t.format {
                write!(f, " --format {x}")?;
            }
            if !t.filter.is_empty() {
                write!(f, " {}", t.filter)?;
            }
            Ok(())
        };
        match self {
            Request::Help => f.write_str("help"),
            Request::Stats => f.write_str("stats"),
            Request::Clients => f.write_str("clients"),
            Request::FdbShow => f.write_str("fdb show"),
            Request::FdbAdd { mac, port, vlan } => {
                write!(f, "fdb add {mac} dev {port}")?;
                vlan.map_or(Ok(()), |v| write!(f, " vlan {v}"))
            }
            Request::FdbDel { mac, port, vlan } => {
                write!(f, "fdb del {mac}")?;
                if let Some(p) = port {
                    write!(f, " dev {p}")?;
                }
                vlan.map_or(Ok(()), |v| write!(f, " vlan {v}"))
            }
            Request::FdbFlush => f.write_str("fdb flush"),
            Request::Reload { file, check } => {
                f.write_str("reload")?;
                if *check {
                    f.write_str(" --check")?;
                }
                file.as_ref().map_or(Ok(()), |x| write!(f, " {x}"))
            }
            Request::RouteShow => f.write_str("route show"),
            Request::RouteGet { addr } => write!(f, "route get {addr}"),
            Request::RouteAdd { prefix, hops: h } => {
                write!(f, "route add {prefix}")?;
                hops(f, h)
            }
            Request::RouteReplace { prefix, hops: h } => {
                write!(f, "route replace {prefix}")?;
                hops(f, h)
            }
            Request::RouteDel { prefix } => write!(f, "route del {prefix}"),
            Request::NeighShow => f.write_str("neigh show"),
            Request::NeighAdd { ip, mac, dev } => write!(f, "neigh add {ip} lladdr {mac} dev {dev}"),
            Request::NeighDel { ip, dev } => write!(f, "neigh del {ip} dev {dev}"),
            Request::NeighFlush { dev } => {
                f.write_str("neigh flush")?;
                dev.as_ref().map_or(Ok(()), |d| write!(f, " dev {d}"))
            }
            Request::ConntrackList { filter } => write!(f, "conntrack list{}", filter_words(filter)),
            Request::ConntrackEvents { filter } => write!(f, "conntrack events{}", filter_words(filter)),
            Request::ConntrackFlush { zone } => {
                f.write_str("conntrack flush")?;
                zone.map_or(Ok(()), |z| write!(f, " zone {z}"))
            }
            Request::CaptureList => f.write_str("capture list"),
            Request::CaptureStart { tap: t, write } => {
                f.write_str("capture start")?;
                tap(f, t)?;
                write!(f, " -w {}", write.display())
            }
            Request::CaptureStop { id } => write!(f, "capture stop {id}"),
            Request::Capture(t) => {
                f.write_str("capture")?;
                tap(f, t)
            }
            Request::LinkShow => f.write_str("link show"),
            Request::LinkUp { port } => write!(f, "link set dev {port} up"),
            Request::LinkMtu { dev, mtu } => write!(f, "link set dev {dev} mtu {mtu}"),
            Request::LinkSet { port, up, flags } => {
                write!(f, "link set dev {port}{}", if *up { " up" } else { "" })?;
                for (k, v) in flags {
                    write!(f, " {k} {}", if *v { "on" } else { "off" })?;
                }
                Ok(())
            }
            Request::MdbShow => f.write_str("mdb show"),
            Request::FirewallList => f.write_str("firewall list"),
            Request::FirewallLoad { path } => write!(f, "firewall load {}", path.display()),
            Request::SetAdd { set, elements } => write!(f, "set add {set} {{ {elements} }}"),
            Request::SetDel { set, elements } => write!(f, "set del {set} {{ {elements} }}"),
            Request::Trace { fields } => write!(f, "trace {}", fields.join(" ")),
        }
    }
}

/// One request line: the protocol version and the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLine {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The request.
    pub request: Request,
}

/// A successful reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// What `freeway ctl` prints.
    pub text: String,
    /// What `freeway ctl -j` prints.
    pub data: Value,
}

impl Reply {
    /// A reply of text and data.
    pub fn new(text: impl Into<String>, data: Value) -> Reply {
        Reply {
            text: text.into(),
            data,
        }
    }
}

/// Declares [`CtlError`] from one list of variants and their kinds: the enum (serialized
/// with the kind as its tag), `kind` and `message`.
macro_rules! ctl_errors {
    ($($(#[$doc:meta])* $v:ident => $kind:literal,)+) => {
        /// Why a request was not done, with a machine-readable kind (serialized as
        /// `{"kind":"not_found","message":"..."}`) and a message for people (its `Display`).
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(tag = "kind", content = "message", rename_all = "snake_case")]
        pub enum CtlError {
            $($(#[$doc])* $v(String),)+
        }

        impl CtlError {
            /// The machine-readable kind, as serialized.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(CtlError::$v(_) => $kind,)+
                }
            }

            /// The message.
            pub fn message(&self) -> &str {
                match self {
                    $(CtlError::$v(m))|+ => m,
                }
            }
        }
    };
}

ctl_errors! {
    /// The line is not a request object (bad JSON, missing or misspelled fields, bad values).
    Malformed => "malformed",
    /// The line is longer than [`MAX_REQUEST`].
    TooLong => "too_long",
    /// The request is of a protocol version this datapath does not speak.
    UnsupportedVersion => "unsupported_version",
    /// The request names a command this datapath does not know.
    UnknownCommand => "unknown_command",
    /// The command's words are wrong (`freeway ctl` refuses them before sending).
    Usage => "usage",
    /// A value is out of range or of the wrong kind (a VLAN, a prefix, an address family).
    Invalid => "invalid",
    /// Something named does not exist (a port, an interface, a route, an entry, a tap).
    NotFound => "not_found",
    /// The change conflicts with the state (a route that exists, a tap already stopped).
    Conflict => "conflict",
    /// The change would break the datapath's own forwarding (its own MAC or addresses).
    Refused => "refused",
    /// This datapath does not have what the request needs (no router, no conntrack, an
    /// offline run).
    Unavailable => "unavailable",
    /// Too many clients, or a table's writer is busy: nothing done, try again.
    Busy => "busy",
    /// The client's user may not send this request (see `--ctl-group`).
    Forbidden => "forbidden",
    /// The request did not arrive whole in time.
    Timeout => "timeout",
    /// The request was accepted but failed (a file that cannot be written, a writer thread
    /// that stopped).
    Failed => "failed",
    /// The client could not reach the datapath or read its reply.
    Unreachable => "unreachable",
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for CtlError {}

/// A reply's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Done.
    Ok(Reply),
    /// Not done.
    Error(CtlError),
}

/// One reply line: the protocol version and the outcome (`{"version":1,"ok":{...}}` or
/// `{"version":1,"error":{...}}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The outcome.
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Response {
    /// The reply line for `r`, newline included.
    pub fn line(r: Result<Reply, CtlError>) -> String {
        let resp = Response {
            version: PROTOCOL_VERSION,
            outcome: match r {
                Ok(x) => Outcome::Ok(x),
                Err(e) => Outcome::Error(e),
            },
        };
        let mut s = serde_json::to_string(&resp).unwrap_or_else(|e| {
            format!(r#"{{"version":{PROTOCOL_VERSION},"error":{{"kind":"failed","message":"cannot encode the reply: {e}"}}}}"#)
        });
        s.push('\n');
        s
    }

    /// Decodes a reply line.
    pub fn decode(line: &str) -> Result<Reply, CtlError> {
        let r: Response = serde_json::from_str(line).map_err(|e| {
            // A newer datapath's error kinds are still shown.
            let v: Option<Value> = serde_json::from_str(line).ok();
            match v.as_ref().and_then(|v| v["error"]["message"].as_str()) {
                Some(m) => CtlError::Failed(m.to_string()),
                None => CtlError::Unreachable(format!("bad reply from the datapath: {e}")),
            }
        })?;
        match r.outcome {
            Outcome::Ok(x) => Ok(x),
            Outcome::Error(e) => Err(e),
        }
    }
}

/// A filter in `conntrack`'s words, each preceded by a space (for logs).
fn filter_words(f: &CtFilter) -> String {
    let mut s = String::new();
    let mut w = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            s.push_str(&format!(" {k} {v}"));
        }
    };
    w("-p", f.proto.map(|p| p.to_string()));
    w("-s", f.orig.src.map(|a| a.to_string()));
    w("-d", f.orig.dst.map(|a| a.to_string()));
    w("-r", f.reply.src.map(|a| a.to_string()));
    w("-q", f.reply.dst.map(|a| a.to_string()));
    w("--sport", f.orig.ports.0.map(|p| p.to_string()));
    w("--dport", f.orig.ports.1.map(|p| p.to_string()));
    w("--reply-port-src", f.reply.ports.0.map(|p| p.to_string()));
    w("--reply-port-dst", f.reply.ports.1.map(|p| p.to_string()));
    w("-w", f.zone.map(|z| z.to_string()));
    w("--state", f.state.clone());
    s
}

/// Encodes a request line (newline included).
pub fn encode_request(r: &Request) -> String {
    let mut s = serde_json::to_string(&RequestLine {
        version: PROTOCOL_VERSION,
        request: r.clone(),
    })
    .expect("a request always serializes");
    s.push('\n');
    s
}

/// Decodes one request line (the bytes up to and including the first newline, at most
/// [`MAX_REQUEST`] + 1 of them). Never panics; every refusal says what was wrong.
pub fn decode_request(line: &[u8]) -> Result<Request, CtlError> {
    if line.len() > MAX_REQUEST {
        return Err(CtlError::TooLong(format!("request longer than {MAX_REQUEST} bytes")));
    }
    let malformed = |m: String| CtlError::Malformed(format!("malformed request ({m})"));
    let v: Value = serde_json::from_slice(line).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let Value::Object(mut top) = v else {
        return Err(malformed(
            r#"a JSON object {"version":1,"request":{"cmd":...}} expected"#.into(),
        ));
    };
    let version = match top.get("version") {
        Some(Value::Number(n)) => n.as_u64(),
        None => return Err(malformed("no \"version\" field".into())),
        Some(_) => None,
    };
    match version {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(v) => {
            return Err(CtlError::UnsupportedVersion(format!(
                "protocol version {v} is not supported (this freeway speaks version {PROTOCOL_VERSION})"
            )))
        }
        None => return Err(malformed("\"version\" is not a whole number".into())),
    }
    if let Some(k) = top.keys().find(|k| *k != "version" && *k != "request") {
        return Err(malformed(format!("unknown field {k:?}")));
    }
    let req = top
        .remove("request")
        .ok_or_else(|| malformed("no \"request\" field".into()))?;
    let cmd = req
        .get("cmd")
        .ok_or_else(|| malformed("the request has no \"cmd\"".into()))?
        .as_str()
        .ok_or_else(|| malformed("\"cmd\" is not a string".into()))?
        .to_string();
    if !Request::COMMANDS.contains(&cmd.as_str()) {
        let shown: String = cmd.chars().take(64).collect();
        return Err(CtlError::UnknownCommand(format!(
            "unknown command {shown:?}; try `freeway ctl help`"
        )));
    }
    let r: Request = serde_json::from_value(req).map_err(|e| malformed(format!("{cmd}: {e}")))?;
    if let Request::Trace { fields } = &r {
        if fields.len() > MAX_TRACE_FIELDS {
            return Err(CtlError::Invalid(format!("trace: at most {MAX_TRACE_FIELDS} fields")));
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_request() -> Vec<Request> {
        let tap = TapOptions {
            port: "wan".into(),
            direction: Direction::Out,
            snaplen: 128,
            count: Some(5),
            format: Some(FileFormat::Pcapng),
            filter: "udp port 53".into(),
        };
        let mac: Mac = "02:00:00:00:00:99".parse().unwrap();
        vec![
            Request::Help,
            Request::Stats,
            Request::Clients,
            Request::FdbShow,
            Request::FdbAdd {
                mac,
                port: "lan".into(),
                vlan: Some(10),
            },
            Request::FdbDel {
                mac,
                port: Some("lan".into()),
                vlan: None,
            },
            Request::FdbFlush,
            Request::Reload {
                file: Some("/etc/freeway/freeway.toml".into()),
                check: true,
            },
            Request::RouteShow,
            Request::RouteGet {
                addr: "10.9.0.5".parse().unwrap(),
            },
            Request::RouteAdd {
                prefix: "10.9.0.0/24".into(),
                hops: Hops::Via(vec!["10.0.20.7".parse().unwrap(), "10.0.20.8".parse().unwrap()]),
            },
            Request::RouteReplace {
                prefix: "default".into(),
                hops: Hops::Dev("wan".into()),
            },
            Request::RouteDel {
                prefix: "10.9.0.0/24".into(),
            },
            Request::NeighShow,
            Request::NeighAdd {
                ip: "10.0.20.9".parse().unwrap(),
                mac,
                dev: "wan".into(),
            },
            Request::NeighDel {
                ip: "2001:db8::1".parse().unwrap(),
                dev: "wan".into(),
            },
            Request::NeighFlush { dev: None },
            Request::ConntrackList {
                filter: CtFilter {
                    proto: Some(6),
                    state: Some("ESTABLISHED".into()),
                    ..Default::default()
                },
            },
            Request::ConntrackEvents {
                filter: CtFilter {
                    zone: Some(2),
                    ..Default::default()
                },
            },
            Request::ConntrackFlush { zone: Some(3) },
            Request::CaptureList,
            Request::CaptureStart {
                tap: tap.clone(),
                write: "/tmp/x.pcapng".into(),
            },
            Request::CaptureStop { id: 7 },
            Request::Capture(tap),
            Request::LinkShow,
            Request::LinkUp { port: "lan".into() },
            Request::LinkMtu {
                dev: "lan".into(),
                mtu: 9000,
            },
            Request::LinkSet {
                port: "lan".into(),
                up: true,
                flags: [("learning".to_string(), false), ("guard".to_string(), true)].into(),
            },
            Request::MdbShow,
            Request::FirewallList,
            Request::FirewallLoad {
                path: "/etc/freeway/rules.nft".into(),
            },
            Request::SetAdd {
                set: "allowed".into(),
                elements: "10.0.0.5, 10.0.1.0/24".into(),
            },
            Request::SetDel {
                set: "filter allowed".into(),
                elements: "10.0.0.5".into(),
            },
            Request::Trace {
                fields: vec!["in_port=lan".into(), "udp".into()],
            },
        ]
    }

    #[test]
    fn every_request_round_trips_and_every_command_is_listed() {
        let all = every_request();
        assert_eq!(all.len(), Request::COMMANDS.len());
        for r in all {
            assert!(Request::COMMANDS.contains(&r.command()), "{r:?}");
            let line = encode_request(&r);
            assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["request"]["cmd"], r.command(), "{line}");
            assert_eq!(decode_request(line.as_bytes()).unwrap(), r, "{line}");
        }
    }

    #[test]
    fn ecmp_hops_round_trip_with_their_devices_and_weights() {
        let r = Request::RouteReplace {
            prefix: "10.9.0.0/24".into(),
            hops: Hops::Nexthops(vec![
                HopSpec {
                    via: Some("10.0.20.7".parse().unwrap()),
                    dev: Some("wan".into()),
                    weight: Some(1),
                },
                HopSpec {
                    via: None,
                    dev: Some("lan".into()),
                    weight: None,
                },
            ]),
        };
        let line = encode_request(&r);
        assert!(
            line.contains(r#""hops":{"nexthops":[{"via":"10.0.20.7","dev":"wan","weight":1},{"dev":"lan"}]}"#),
            "{line}"
        );
        assert_eq!(decode_request(line.as_bytes()).unwrap(), r, "{line}");
        assert_eq!(
            r.to_string(),
            "route replace 10.9.0.0/24 nexthop via 10.0.20.7 dev wan weight 1 nexthop dev lan"
        );
    }

    #[test]
    fn an_unknown_version_or_command_gets_its_own_typed_error() {
        let e = decode_request(br#"{"version":2,"request":{"cmd":"stats"}}"#).unwrap_err();
        assert_eq!(e.kind(), "unsupported_version", "{e}");
        assert!(e.to_string().contains("version 2"), "{e}");
        let e = decode_request(br#"{"version":1,"request":{"cmd":"reboot"}}"#).unwrap_err();
        assert_eq!(e.kind(), "unknown_command", "{e}");
        assert!(e.to_string().contains("\"reboot\""), "{e}");
        for bad in [
            &br#"["route","show"]"#[..],
            br#"{"request":{"cmd":"stats"}}"#,
            br#"{"version":"1","request":{"cmd":"stats"}}"#,
            br#"{"version":1}"#,
            br#"{"version":1,"request":{"cmd":"stats"},"x":1}"#,
            br#"{"version":1,"request":{"cmd":"fdb_add","mac":"zz","port":"lan"}}"#,
            br#"{"version":1,"request":{"cmd":"fdb_del","mac":"02:00:00:00:00:01","vlan":1,"extra":2}}"#,
            br#"{"version":1,"request":{"cmd":"route_add","prefix":"10.0.0.0/8","hops":{"via":["x"]}}}"#,
            b"{",
        ] {
            let e = decode_request(bad).unwrap_err();
            assert_eq!(e.kind(), "malformed", "{}: {e}", String::from_utf8_lossy(bad));
            assert!(e.to_string().starts_with("malformed request"), "{e}");
        }
        let mut big = vec![b' '; MAX_REQUEST + 1];
        big[0] = b'{';
        assert_eq!(decode_request(&big).unwrap_err().kind(), "too_long");
    }

    #[test]
    fn replies_round_trip_with_a_kind_and_a_message() {
        let ok = Response::line(Ok(Reply::new("hi\n", serde_json::json!({"n": 1}))));
        assert_eq!(ok, "{\"version\":1,\"ok\":{\"text\":\"hi\\n\",\"data\":{\"n\":1}}}\n");
        assert_eq!(Response::decode(&ok).unwrap().data["n"], 1);
        let e = CtlError::NotFound("no route for 10.6.0.0/16".into());
        let line = Response::line(Err(e.clone()));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"]["kind"], "not_found");
        for e in [
            CtlError::TooLong("x".into()),
            CtlError::UnsupportedVersion("x".into()),
            CtlError::Forbidden("x".into()),
        ] {
            let j = serde_json::to_value(&e).unwrap();
            assert_eq!(j["kind"], e.kind(), "the serialized tag is the kind");
        }
        assert_eq!(v["error"]["message"], "no route for 10.6.0.0/16");
        assert_eq!(Response::decode(&line).unwrap_err(), e);
        // An error kind this build does not know is still shown.
        let e = Response::decode(r#"{"version":1,"error":{"kind":"new_kind","message":"why"}}"#).unwrap_err();
        assert_eq!(e.to_string(), "why");
    }
}
