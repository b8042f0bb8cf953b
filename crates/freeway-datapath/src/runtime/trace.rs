//! `freeway ctl trace`: what the datapath does with one given packet, stage by stage (in the
//! manner of Open vSwitch's `ofproto/trace`).
//!
//! The packet is described with OVS-style fields (`in_port=h1 dl_dst=… ip nw_dst=… tcp
//! tp_dst=80`) or given as raw bytes (`hex=…`). It is *not* injected: the trace reads the live
//! tables (FDB, conntrack, FIB, neighbours) and changes nothing: no MAC is learned, no
//! connection created, no neighbour resolved, no counter moved.
//!
//! How faithful each stage is:
//! * **parse** is the workers' parser.
//! * **conntrack/firewall** looks the connection up in the live table and applies the
//!   firewall's policy. For an existing TCP connection it reports the connection's state but
//!   does not simulate the sequence/window checks of that segment.
//! * **bridge** repeats the bridge stage's decisions (VLAN classification, source check,
//!   FDB lookup, same-port drop, flooding to the VLAN's members, egress tagging) with
//!   read-only lookups.
//! * **router** runs the real L3 stage ([`L3Worker`]) on a copy of the frame, over the live
//!   FIB and a private copy of the usable neighbour entries (so an unresolved next hop shows
//!   the ARP/ND request the router would send, without sending it). Its output is bridged
//!   again from the router port.
//!
//! Threads: runs on the control thread (`fw-ctl`); lookups take epoch guards only.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use freeway_bridge::{Bridge, BridgeWorker, Emit, Fdb, Layout, Learning, Mac, PortVlan};
use freeway_conntrack::extract::{classify, Class, L4Info};
use freeway_conntrack::{Conntrack, CtConfig, Firewall, NatPlan, Tuple};
use freeway_l3::neigh::NeighConfig;
use freeway_l3::{
    FilterHook, FilterVerdict, Interfaces, L3Config, L3Drop, L3Out, L3Worker, NatHook, Neigh, RouteLookup, Wants,
};
use freeway_packet::build::{build_arp_request, build_frame, tcp_flags, FrameSpec, L4};
use freeway_packet::{meta_flags, parse, Batch, Packet, PacketPool, NO_VLAN};
use freeway_route::{Fib, NextHop, Rib};
use freeway_sync::Tick;
use serde::Serialize;
use serde_json::Value;

/// One stage's verdict in a trace.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// `parse`, `conntrack`, `firewall`, `bridge`, `router`.
    pub stage: &'static str,
    /// Where the frame is (`in h1 vlan 10`, `from (router) vlan 20`).
    pub at: String,
    /// What the stage does with it, in words.
    pub result: String,
}

/// The whole trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Trace {
    /// The frame traced, in hex.
    pub frame: String,
    /// Stage by stage.
    pub steps: Vec<Step>,
    /// Ports the frame (or a copy, or a frame the router sends in answer) leaves by.
    pub outputs: Vec<String>,
    /// Why the original frame goes nowhere, when it doesn't.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<String>,
}

/// Read-only views of the run's tables, as the control thread holds them.
pub(crate) struct Tables<'a, L: Layout> {
    pub bridge: &'a Bridge<L>,
    pub fdb: &'a Fdb<L>,
    pub port_names: &'a [String],
    pub port_vlans: &'a [PortVlan],
    pub nports: usize,
    pub now: Tick,
    pub ct: Option<&'a Conntrack>,
    pub fw: Option<&'a Firewall>,
    /// The nftables ruleset, when the run has one (it replaces `fw`).
    pub nft: Option<(Arc<freeway_firewall::Firewall>, Arc<[u16]>)>,
    pub zones: &'a [u16],
    pub router: Option<RouterView<'a>>,
    /// The connection state conntrack found for the traced frame, as the datapath records it
    /// in the packet's metadata (`meta_flags::CT_*`).
    pub ct_state: std::cell::Cell<u8>,
}

/// The metadata flag of a connection state, by its name in the trace.
fn ct_flags(state: &str) -> u8 {
    match state {
        // Not in the table yet: its first packet creates it, as in the datapath.
        "new" => meta_flags::CT_NEW | meta_flags::CT_UNCOMMITTED,
        "established" => meta_flags::CT_ESTABLISHED,
        "related" => meta_flags::CT_RELATED,
        "invalid" => meta_flags::CT_INVALID,
        _ => meta_flags::CT_UNTRACKED,
    }
}

/// The router's side, for traces.
pub(crate) struct RouterView<'a> {
    pub rib: &'a Rib,
    pub ifaces: &'a Arc<Interfaces>,
    pub neigh: &'a Neigh,
    pub l3: &'a L3Config,
}

/// Builds the frame a `trace` request describes; returns it with its input port index.
pub(crate) fn frame_from_words(words: &[&str], port_names: &[String], nports: usize) -> Result<(u16, Vec<u8>), String> {
    let mut spec = FrameSpec::default();
    let mut in_port = None;
    let mut hex = None;
    let (mut arp, mut v6, mut addr_given) = (false, false, [false; 2]);
    let (mut spa, mut tpa) = (None, None);
    let mut flags = None;
    for w in words.iter().flat_map(|w| w.split(',')).filter(|w| !w.is_empty()) {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        let num = |v: &str| -> Result<u64, String> { v.parse().map_err(|_| format!("{k}={v}: not a number")) };
        let ip = |v: &str| -> Result<IpAddr, String> { v.parse().map_err(|_| format!("{k}={v}: not an address")) };
        let mac =
            |v: &str| -> Result<[u8; 6], String> { v.parse::<Mac>().map(|m| m.0).map_err(|e| format!("{k}={v}: {e}")) };
        match k {
            "in_port" => {
                let p = port_names[..nports]
                    .iter()
                    .position(|n| n == v)
                    .ok_or_else(|| format!("in_port={v}: no such port (ports: {})", port_names[..nports].join(", ")))?;
                in_port = Some(p as u16);
            }
            "hex" => {
                let v: String = v.chars().filter(|c| !c.is_whitespace() && *c != ':').collect();
                if !v.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err("hex=: not hex digits".into());
                }
                if v.len() % 2 != 0 || v.len() < 28 {
                    return Err("hex=: an even number of hex digits, at least a 14-byte Ethernet header".into());
                }
                let b = (0..v.len() / 2)
                    .map(|i| u8::from_str_radix(&v[2 * i..2 * i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| "hex=: not hex digits".to_string())?;
                hex = Some(b);
            }
            "dl_src" => spec.src_mac = mac(v)?,
            "dl_dst" => spec.dst_mac = mac(v)?,
            "dl_vlan" => {
                let n = num(v)?;
                if !(1..=4094).contains(&n) {
                    return Err(format!("dl_vlan={v}: 1..=4094"));
                }
                spec.vlan = Some(n as u16);
            }
            "ip" => {}
            "ipv6" => v6 = true,
            "arp" => arp = true,
            "nw_src" | "ipv6_src" => (spec.src_ip, addr_given[0]) = (ip(v)?, true),
            "nw_dst" | "ipv6_dst" => (spec.dst_ip, addr_given[1]) = (ip(v)?, true),
            "arp_spa" => {
                spa = Some(
                    v.parse::<Ipv4Addr>()
                        .map_err(|_| format!("{k}={v}: not an IPv4 address"))?,
                )
            }
            "arp_tpa" => {
                tpa = Some(
                    v.parse::<Ipv4Addr>()
                        .map_err(|_| format!("{k}={v}: not an IPv4 address"))?,
                )
            }
            "tcp" => spec.proto = L4::Tcp { flags: tcp_flags::SYN },
            "udp" => spec.proto = L4::Udp,
            "icmp" | "icmp6" => spec.proto = L4::Icmp,
            "tp_src" => spec.src_port = u16::try_from(num(v)?).map_err(|_| format!("{k}={v}: 0..=65535"))?,
            "tp_dst" => spec.dst_port = u16::try_from(num(v)?).map_err(|_| format!("{k}={v}: 0..=65535"))?,
            "tcp_flags" => flags = Some(parse_flags(v)?),
            "nw_ttl" | "ttl" => spec.ttl = u8::try_from(num(v)?).map_err(|_| format!("{k}={v}: 0..=255"))?,
            "len" => {
                spec.len = usize::try_from(num(v)?)
                    .unwrap_or(usize::MAX)
                    .min(freeway_packet::MAX_FRAME)
            }
            _ => return Err(format!("{w:?}: unknown field (see `freeway ctl help`)")),
        }
    }
    let in_port = in_port.ok_or("trace needs in_port=PORT")?;
    if let Some(b) = hex {
        return Ok((in_port, b));
    }
    if arp {
        let (Some(spa), Some(tpa)) = (spa, tpa) else {
            return Err("arp needs arp_spa=IP and arp_tpa=IP".into());
        };
        return Ok((in_port, build_arp_request(spec.src_mac, spec.vlan, spa, tpa)));
    }
    if let Some(f) = flags {
        match &mut spec.proto {
            L4::Tcp { flags } => *flags = f,
            _ => return Err("tcp_flags= needs tcp".into()),
        }
    }
    if v6 {
        // Defaults of the IPv6 addresses not given: fd00::1 > fd00::2.
        for (i, a) in [&mut spec.src_ip, &mut spec.dst_ip].into_iter().enumerate() {
            if !addr_given[i] {
                *a = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16 + 1));
            } else if a.is_ipv4() {
                return Err(format!("ipv6 with the IPv4 address {a}"));
            }
        }
    }
    if spec.src_ip.is_ipv4() != spec.dst_ip.is_ipv4() {
        return Err("nw_src and nw_dst of different families".into());
    }
    spec.len = spec.len.max(freeway_packet::build::header_len(&spec));
    Ok((in_port, build_frame(&spec)))
}

fn parse_flags(v: &str) -> Result<u8, String> {
    let mut f = 0u8;
    for n in v.split(['|', '+']).filter(|n| !n.is_empty()) {
        f |= match n.to_ascii_lowercase().as_str() {
            "fin" | "f" => tcp_flags::FIN,
            "syn" | "s" => tcp_flags::SYN,
            "rst" | "r" => tcp_flags::RST,
            "psh" | "p" => tcp_flags::PSH,
            "ack" | "a" | "." => tcp_flags::ACK,
            "urg" | "u" => tcp_flags::URG,
            x => return Err(format!("tcp_flags={v}: unknown flag {x:?} (fin|syn|rst|psh|ack|urg)")),
        };
    }
    Ok(f)
}

impl<L: Layout> Tables<'_, L> {
    fn name(&self, p: u16) -> String {
        self.port_names
            .get(usize::from(p))
            .cloned()
            .unwrap_or_else(|| format!("port{p}"))
    }

    /// Traces `frame` arriving on `in_port`.
    pub fn trace(&self, in_port: u16, frame: Vec<u8>) -> Trace {
        let mut t = Trace {
            frame: frame.iter().map(|b| format!("{b:02x}")).collect(),
            ..Trace::default()
        };
        let at = format!("in {}", self.name(in_port));
        let mut pkt = match Packet::from_frame(&frame) {
            Ok(p) => p,
            Err(_) => {
                t.dropped = Some("frame longer than the datapath's buffers".into());
                return t;
            }
        };
        if let Err(e) = parse(&mut pkt) {
            t.steps.push(Step {
                stage: "parse",
                at,
                result: format!("malformed: {} (dropped, counted as parse:{})", e, e.name()),
            });
            t.dropped = Some(format!("parse:{}", e.name()));
            return t;
        }
        pkt.meta.in_port = in_port;
        t.steps.push(Step {
            stage: "parse",
            at: at.clone(),
            result: describe(&pkt),
        });
        // As in the datapath, a frame from a group source goes straight to the bridge, which
        // drops it: conntrack never sees it.
        let group_src = pkt.data().get(6).is_some_and(|b| b & 1 != 0);
        if !group_src && !self.conntrack(&pkt, &at, &mut t) {
            return t;
        }
        self.bridge(pkt, 0, &mut t);
        if t.outputs.is_empty() && t.dropped.is_none() {
            t.dropped = Some("no output".into());
        }
        t
    }

    /// Conntrack and firewall; `false` when the frame is dropped there.
    fn conntrack(&self, pkt: &Packet, at: &str, t: &mut Trace) -> bool {
        let Some(ct) = self.ct else {
            return true;
        };
        let port = pkt.meta.in_port;
        let zone = self.zones.get(usize::from(port)).copied().unwrap_or(0);
        let allows_new = self.fw.is_none_or(|f| f.worker().allows_new(port, zone));
        // (state, may create, invalid reason)
        let (state, detail): (&str, String) = match classify(pkt.data(), &pkt.meta, false) {
            Class::Untracked => ("untracked", "not IP, or neighbour discovery: not tracked".into()),
            Class::Invalid(r) => ("invalid", format!("invalid ({})", r.name())),
            Class::IcmpError(inner) => match ct.get(&inner, zone) {
                Some(c) => ("related", format!("an ICMP error about the connection {c}")),
                None => (
                    "invalid",
                    "an ICMP error about no known connection (no_connection)".into(),
                ),
            },
            Class::Track(tuple, l4) => match ct.get(&tuple, zone) {
                Some(c) => (
                    "established",
                    format!("existing connection {c} (the segment's sequence/window checks are not simulated)"),
                ),
                None => match l4 {
                    L4Info::Tcp(seg) => match freeway_conntrack::tcp::init(&seg, CtConfig::default().tcp_loose) {
                        Ok(_) => ("new", "no connection yet: a new TCP connection".into()),
                        Err(r) => ("invalid", format!("no connection and cannot start one ({})", r.name())),
                    },
                    L4Info::Echo { request: false } | L4Info::Sctp { starts: false } => (
                        "invalid",
                        "no connection, and this packet cannot start one (no_connection)".into(),
                    ),
                    _ => ("new", "no connection yet: a new connection".into()),
                },
            },
        };
        t.steps.push(Step {
            stage: "conntrack",
            at: format!("{at} zone {zone}"),
            result: format!("{state}: {detail}"),
        });
        if self.nft.is_some() {
            // The ruleset judges at the router's hooks (see `route`), with this state.
            self.ct_state.set(ct_flags(state));
            return true;
        }
        let (pass, why) = match (self.fw.is_some(), state) {
            (_, "established" | "related" | "untracked") => (true, format!("accept ({state})")),
            (true, "new") if allows_new => (
                true,
                format!(
                    "accept new from {} (allow_new_from); the connection is created",
                    self.name(port)
                ),
            ),
            (true, "new") => (
                false,
                "drop: new connections are not allowed from this port (firewall:new_not_allowed)".into(),
            ),
            (true, _) => (false, "drop: invalid (firewall:invalid)".into()),
            (false, "new") => (true, "no firewall: pass; the connection is created".into()),
            (false, _) => (true, "no firewall: an invalid packet passes (counted)".into()),
        };
        if self.fw.is_some() {
            t.steps.push(Step {
                stage: "firewall",
                at: format!("{at} zone {zone}"),
                result: why.clone(),
            });
        }
        if !pass {
            t.dropped = Some(
                if state == "new" {
                    "firewall:new_not_allowed"
                } else {
                    "firewall:invalid"
                }
                .into(),
            );
        }
        pass
    }

    /// The bridge stage: the real [`Bridge::process`] on this one frame, over the live FDB,
    /// with a private [`BridgeWorker`] (its own counters) and [`Learning::ReadOnly`] (nothing
    /// learned, moved or touched). The verdict is what the stage reported: the counter it
    /// moved and the frames it emitted; the FDB lookups below only put it in words.
    fn bridge(&self, pkt: Packet, depth: usize, t: &mut Trace) {
        let in_port = pkt.meta.in_port;
        let tag = (pkt.meta.vlan_depth > 0 && pkt.meta.vlan != NO_VLAN).then_some(pkt.meta.vlan);
        let at = format!(
            "{} {}{}",
            if usize::from(in_port) == self.nports {
                "from"
            } else {
                "in"
            },
            self.name(in_port),
            tag.map_or(String::new(), |v| format!(" tagged {v}"))
        );
        let words = self.bridge_words(&pkt, tag);
        let mut w = BridgeWorker::default();
        let mut batch = Batch::new();
        let _ = batch.push(pkt);
        let mut out = Emitted {
            pool: PacketPool::new(freeway_packet::MAX_FRAME, 0, 8),
            frames: Vec::new(),
        };
        self.bridge
            .process(&mut w, &mut batch, self.now, &mut out, &mut Learning::ReadOnly);
        let seen: Vec<(&'static str, u64)> = w.counters.snapshot().into_iter().filter(|(_, v)| *v > 0).collect();
        let drop = seen.iter().find_map(|(k, _)| k.strip_prefix("drop_"));
        let flooded = seen.iter().any(|(k, _)| *k == "flooded");
        let result = match (drop, &words) {
            (Some("src_multicast"), _) => "drop: multicast source address (bridge:src_multicast)".to_string(),
            (Some("bad_port"), _) => "drop: no such bridge port (bridge:bad_port)".to_string(),
            (Some("link_local"), _) => {
                "drop: an IEEE 802.1D link-local control frame (01:80:c2:00:00:0X), not forwarded \
                 from this port (bridge:link_local; group_fwd_mask opens the ones that may be)"
                    .to_string()
            }
            (Some("vlan_filtered"), _) => format!(
                "drop: {} not admitted on this port (bridge:vlan_filtered)",
                tag.map_or("untagged frame".into(), |v| format!("vlan {v}"))
            ),
            (Some("same_port"), Some(w)) => format!("{w}, on the input port: drop (bridge:same_port)"),
            (Some("flood_empty"), Some(w)) => {
                format!("{w}: flood; no other member of the vlan: drop (bridge:flood_empty)")
            }
            (Some(d), Some(w)) => format!("{w}: drop (bridge:{d})"),
            (Some(d), None) => format!("drop (bridge:{d})"),
            (None, Some(w)) if flooded => format!("{w}: flood"),
            (None, Some(w)) => w.clone(),
            (None, None) => "no decision".to_string(),
        };
        t.steps.push(Step {
            stage: "bridge",
            at,
            result,
        });
        if let Some(d) = drop {
            t.dropped.get_or_insert(format!("bridge:{d}"));
        }
        for (port, mut p) in out.frames {
            if parse(&mut p).is_err() {
                continue;
            }
            let vid = p.meta.vlan;
            let tagged = p.meta.vlan_depth > 0 && vid != NO_VLAN;
            if usize::from(port) < self.nports {
                t.outputs.push(format!(
                    "{}{}",
                    self.name(port),
                    if tagged {
                        format!(" (tagged {vid})")
                    } else {
                        String::new()
                    }
                ));
                continue;
            }
            // The router port: a tagged member of every interface VLAN.
            let Some(r) = &self.router else { continue };
            if depth > 0 {
                continue;
            }
            p.meta.in_port = port;
            let at = format!("{} vlan {vid}", self.name(port));
            match r.ifaces.wants(&p) {
                Wants::NotOurs => {
                    if p.data()[0] & 1 == 0 {
                        t.steps.push(Step {
                            stage: "router",
                            at,
                            result: "not for the router: ignored".into(),
                        });
                    }
                }
                w => self.route(r, p, w, at, t),
            }
        }
    }

    /// The bridge's decision in words (`vlan 10; source … known on h1; destination … → h2
    /// (learned)`), from read-only FDB lookups; `None` when the frame has no VLAN here.
    fn bridge_words(&self, pkt: &Packet, tag: Option<u16>) -> Option<String> {
        let in_port = pkt.meta.in_port;
        let f = pkt.data();
        let dst = Mac(f.get(0..6)?.try_into().ok()?);
        let src = Mac(f.get(6..12)?.try_into().ok()?);
        let vid = self.port_vlans.get(usize::from(in_port))?.classify(tag)?;
        let g = self.fdb.pin();
        let learn = match self.fdb.lookup(src, vid, &g) {
            Some(n) if n.port() == in_port => format!("source {src} known on {}", self.name(in_port)),
            Some(n) if n.is_static() => format!(
                "source {src} is static on {}: not moved (bridge:static_conflict)",
                self.name(n.port())
            ),
            Some(n) => format!(
                "source {src} moves from {} to {}",
                self.name(n.port()),
                self.name(in_port)
            ),
            None => format!("source {src} would be learned on {}", self.name(in_port)),
        };
        let to = if dst.0[0] & 1 != 0 {
            format!("destination {dst} is a group address")
        } else {
            match self.fdb.lookup(dst, vid, &g) {
                Some(n) => format!(
                    "destination {dst} → {} ({})",
                    self.name(n.port()),
                    if n.is_static() { "static" } else { "learned" }
                ),
                None => format!("destination {dst} unknown"),
            }
        };
        Some(format!("vlan {vid}; {learn}; {to}"))
    }

    /// A private neighbour table with the live table's usable entries: the traced frame's
    /// resolution requests and learns land there, not in the live table.
    fn private_neigh(&self, r: &RouterView<'_>) -> Neigh {
        let live = r.neigh.entries(self.now, r.ifaces);
        let (neigh, mut nw) = freeway_l3::neigh::new(NeighConfig {
            limit: live.len() + 16,
            ..NeighConfig::default()
        });
        for e in live.iter().filter(|e| e.state.iter().all(|s| s.usable())) {
            if let Some(m) = e.lladdr.as_deref().and_then(|m| m.parse::<Mac>().ok()) {
                let _ = nw.add_static(e.dst, e.ifindex, m.0, self.now);
            }
        }
        neigh
    }

    /// Runs the L3 stage on `p` (received on the router port) and bridges what it emits.
    fn route(&self, r: &RouterView<'_>, p: Packet, w: Wants, at: String, t: &mut Trace) {
        let iface = r
            .ifaces
            .ingress(&p)
            .and_then(|i| r.ifaces.get(i))
            .map(|i| i.name.clone());
        let at = format!("{at}, interface {}", iface.unwrap_or_else(|| "?".into()));
        let mut l3 = L3Worker::new(r.ifaces.clone(), self.private_neigh(r), r.l3.clone());
        let mut rec = Record {
            pool: PacketPool::new(freeway_packet::MAX_FRAME, 0, 8),
            emitted: Vec::new(),
            dropped: None,
            nft: self.nft.clone().map(|(fw, zones)| NftTrace {
                st: fw.scratch_state(),
                fw,
                zones,
                now: self.now,
                said: Vec::new(),
                ct: self.ct.cloned(),
                src_half: None,
                new_orig: None,
                routed_dst: None,
            }),
            ifaces: Some(r.ifaces.clone()),
        };
        let mut lookup = FibLookup { fib: r.rib.fib() };
        let before_nat = dest(&p);
        let flow_hash = p.meta.flow_hash;
        // The state conntrack found, where the datapath keeps it: in the packet's metadata.
        let mut p = p;
        p.meta.flags = (p.meta.flags & !meta_flags::CT_MASK) | self.ct_state.get();
        l3.process_one(p, &mut lookup, self.now, &mut rec);
        // Where the packet went after a destination translation at prerouting.
        let routed = rec.nft.as_ref().and_then(|n| n.routed_dst).or(before_nat);
        let (dst, route) = routed
            .map(|d| (Some(d), route_words(r, d, flow_hash)))
            .unwrap_or((None, String::new()));
        let queued = l3.pending_len() > 0;
        let local = dst.is_some_and(|d| match d {
            IpAddr::V4(a) => r.ifaces.local_v4(a).is_some(),
            IpAddr::V6(a) => r.ifaces.local_v6(a).is_some(),
        });
        let mut result = match (w, rec.dropped) {
            (_, Some(L3Drop::Consumed)) => "consumed by the router".to_string(),
            (_, Some(d)) => format!("drop (router:{})", d.name()),
            _ if queued => "waits for the next hop's link-layer address (queued)".into(),
            (Wants::Copy(_), None) if rec.emitted.is_empty() => "a copy for the router: consumed".into(),
            (Wants::Copy(_), None) => "a copy for the router: answered".into(),
            _ if dst.is_none() || local => "for the router itself: answered".into(),
            _ => "forwarded".into(),
        };
        if local {
            result.push_str(&format!("; destination {} is the router's", dst.expect("local")));
        } else if let Some(d) = dst {
            result.push_str(&format!("; destination {d}: {route}"));
        }
        for said in rec.nft.iter().flat_map(|n| &n.said) {
            t.steps.push(Step {
                stage: "firewall",
                at: at.clone(),
                result: said.clone(),
            });
        }
        t.steps.push(Step {
            stage: "router",
            at,
            result: result.clone(),
        });
        if let Some(d) = rec.dropped {
            if !matches!(w, Wants::Copy(_)) {
                t.dropped.get_or_insert(format!("router:{}", d.name()));
            }
        }
        for e in rec.emitted {
            let mut q = Packet::from_frame(e.data()).expect("fits");
            if parse(&mut q).is_err() {
                continue;
            }
            t.steps.push(Step {
                stage: "router",
                at: "out".into(),
                result: format!("sends {}", describe(&q)),
            });
            q.meta.in_port = self.nports as u16;
            self.bridge(q, 1, t);
        }
    }
}

/// The route to `d` in words (`route PREFIX via GW dev IF, ...`), with the next hop the
/// flow hash picks among several.
fn route_words(r: &RouterView<'_>, d: IpAddr, flow_hash: u32) -> String {
    let Some(rt) = r.rib.lookup(d) else {
        return "no route".to_string();
    };
    let hop = |h: &freeway_route::NextHop| {
        let gw = h.gateway.map_or(String::new(), |g| format!("via {g} "));
        format!("{gw}dev {}", if_name(r.ifaces, h.iface))
    };
    let hops: Vec<String> = rt.hops.iter().map(hop).collect();
    let mut s = format!("route {} {}", rt.prefix, hops.join(", "));
    if rt.hops.len() > 1 {
        if let Some(h) = r.rib.fib().next_hop(d, flow_hash) {
            s.push_str(&format!(" (ECMP: the flow hash picks {})", hop(&h)));
        }
    }
    s
}

fn if_name(ifs: &Interfaces, i: u16) -> String {
    ifs.get(i).map_or_else(|| format!("if{i}"), |x| x.name.clone())
}

/// The bridge stage's output, kept with the port each frame goes to.
struct Emitted {
    pool: PacketPool,
    frames: Vec<(u16, Packet)>,
}

impl Emit for Emitted {
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }
    fn emit(&mut self, port: u16, pkt: Packet) {
        self.frames.push((port, pkt));
    }
}

/// The L3 stage's output, kept; and the firewall's verdicts at its hooks, in words.
struct Record {
    pool: PacketPool,
    emitted: Vec<Packet>,
    dropped: Option<L3Drop>,
    /// The router's interfaces (for the firewall's words).
    ifaces: Option<Arc<Interfaces>>,
    /// The ruleset, a private state (its counters are not the workers'), the connection
    /// state conntrack found, the interfaces' names, and the verdicts given.
    nft: Option<NftTrace>,
}

/// The firewall as a trace runs it.
struct NftTrace {
    fw: Arc<freeway_firewall::Firewall>,
    /// Conntrack zone of each router interface.
    zones: Arc<[u16]>,
    st: freeway_firewall::FwState,
    now: Tick,
    said: Vec<String>,
    /// The connection table, for the translations of existing connections.
    ct: Option<Conntrack>,
    /// What prerouting leaves for postrouting: the source half of an existing connection's
    /// translation, or a new connection's tuple before any translation.
    src_half: Option<super::nat::SrcHalf>,
    new_orig: Option<Tuple>,
    /// The destination after a translation at prerouting.
    routed_dst: Option<IpAddr>,
}

/// A tuple in words: `10.1.0.2:40000 -> 203.0.113.2:22`.
fn tuple_words(t: &Tuple) -> String {
    let ep = |a: IpAddr, p: u16| match a {
        IpAddr::V6(a) => format!("[{a}]:{p}"),
        IpAddr::V4(a) => format!("{a}:{p}"),
    };
    format!("{} -> {}", ep(t.src_ip(), t.sport), ep(t.dst_ip(), t.dport))
}

impl NftTrace {
    /// Which rule or policy gave decision `d`, in words.
    fn by_words(&self, d: &freeway_firewall::Decision) -> String {
        let rs = self.fw.ruleset();
        let chain = |t: u16, c: u16| {
            rs.tables.get(usize::from(t)).map_or_else(String::new, |t| {
                let name = t.chains.get(usize::from(c)).map_or("?", |c| c.name.as_str());
                format!("{} {} {name}", t.family.name(), t.name)
            })
        };
        match (d.by, d.policy_of) {
            (Some(r), _) => {
                let line = rs
                    .tables
                    .get(usize::from(r.table))
                    .and_then(|t| t.chains.get(usize::from(r.chain)))
                    .and_then(|c| c.rules.get(r.rule as usize))
                    .map_or(0, |x| x.span.line);
                format!("rule {} of chain {} (line {line})", r.rule + 1, chain(r.table, r.chain))
            }
            (None, Some((t, c))) => format!("the policy of chain {}", chain(t, c)),
            (None, None) => "no base chain on this hook".into(),
        }
    }

    /// NAT at prerouting for a packet of a connection that exists: the translation the
    /// connection carries (the source half waits for postrouting). Says what it did.
    fn existing_nat(&mut self, pkt: &mut Packet, zone: u16, place: &str) -> bool {
        let plan = self.ct.as_ref().and_then(|ct| ct.nat_of(pkt.data(), &pkt.meta, zone));
        let Some(plan) = plan else { return true };
        let (from, to) = plan.tuples();
        self.said.push(match plan {
            NatPlan::Packet { .. } | NatPlan::Packet4(_) => format!(
                "{place}: a translated connection: {} becomes {}",
                tuple_words(&from),
                tuple_words(&to)
            ),
            NatPlan::IcmpError { .. } => format!(
                "{place}: an ICMP error about a translated connection: its quote {} becomes {}",
                tuple_words(&from),
                tuple_words(&to)
            ),
        });
        let (ok, later) = super::nat::apply_prerouting(pkt, &plan);
        self.src_half = later;
        self.routed_dst = dest(pkt);
        ok
    }

    /// NAT at `hook`, as the datapath does it ([`super::nat`]) but creating nothing: a new
    /// connection's destination translation is applied, its source translation applied to
    /// the address only (the port is chosen when the connection is created); an existing
    /// connection's translation is applied. Says what it did.
    fn nat(&mut self, hook: NatHook, pkt: &mut Packet, iif: u16, oif: u16, ifs: &Interfaces) -> bool {
        use freeway_firewall::ast::{Hook, NatKind};
        use freeway_firewall::Action;
        if !self.fw.any_nat() {
            return true;
        }
        let zone = super::firewall::zone_of(&self.zones, iif);
        let (h, place) = match hook {
            NatHook::Prerouting => {
                self.src_half = None;
                self.new_orig = None;
                (Hook::Prerouting, format!("nat prerouting from {}", if_name(ifs, iif)))
            }
            NatHook::Postrouting => (Hook::Postrouting, format!("nat postrouting to {}", if_name(ifs, oif))),
        };
        if let Some(half) = self.src_half.take().filter(|_| hook == NatHook::Postrouting) {
            self.said.push(format!(
                "{place}: the connection's source translation to {}",
                tuple_words(&half.to())
            ));
            return half.apply(pkt);
        }
        let flags = pkt.meta.flags;
        let new = flags & meta_flags::CT_MASK == meta_flags::CT_NEW && flags & meta_flags::CT_UNCOMMITTED != 0;
        if hook == NatHook::Prerouting && !new {
            return self.existing_nat(pkt, zone, &place);
        }
        let Some(cur) = super::nat::tuple_of(pkt) else {
            return true;
        };
        let orig = match hook {
            NatHook::Prerouting => {
                self.new_orig = Some(cur);
                cur
            }
            NatHook::Postrouting => match self.new_orig.take() {
                Some(o) => o,
                None => return true,
            },
        };
        let oif_id = if hook == NatHook::Postrouting {
            u32::from(oif)
        } else {
            freeway_firewall::NO_IF
        };
        let f = super::firewall::fields_with(pkt, iif, oif_id, zone);
        if !self.fw.has_nat(f.nfproto, h) {
            return true;
        }
        let d = self.fw.judge_nat(h, &f, &mut self.st, self.now);
        let by = self.by_words(&d);
        match d.action {
            Action::Drop | Action::Reject(_) => {
                self.said.push(format!("{place}: drop by {by}"));
                false
            }
            Action::Accept => {
                self.said.push(format!("{place}: not translated ({by})"));
                true
            }
            Action::Nat(c) if c.kind == NatKind::Dnat => {
                let to = super::nat::dnat_target(&orig, &c);
                self.said.push(format!("{place}: dnat to {} by {by}", tuple_words(&to)));
                self.routed_dst = Some(to.dst_ip());
                freeway_conntrack::nat::rewrite_pkt(pkt, &cur, &to)
            }
            Action::Nat(c) => {
                let addr = match c.kind {
                    NatKind::Masquerade => {
                        let m = super::nat::masquerade_addrs(ifs);
                        let (v4, v6) = m.get(usize::from(oif)).copied().unwrap_or((None, None));
                        if cur.v6 {
                            v6
                        } else {
                            v4
                        }
                    }
                    _ => c.addr.map(|(lo, hi)| {
                        freeway_conntrack::nat::pick((lo, hi), freeway_conntrack::nat::addr_hash(orig.src))
                    }),
                };
                let Some(addr) = addr else {
                    self.said.push(format!(
                        "{place}: {} by {by}, but the interface has no address: drop",
                        c.kind.name()
                    ));
                    return false;
                };
                let to = Tuple { src: addr, ..cur };
                self.said.push(format!(
                    "{place}: {} to {} by {by} (the source port is chosen when the connection is created: its own if free)",
                    c.kind.name(),
                    to.src_ip()
                ));
                freeway_conntrack::nat::rewrite_pkt(pkt, &cur, &to)
            }
        }
    }

    /// Judges `pkt` at `hook` with the real ruleset and puts the verdict in words: which
    /// chain and rule (with its line) decided.
    fn judge(&mut self, hook: FilterHook, pkt: &Packet, iif: u16, oif: u16, ifs: &Interfaces) -> FilterVerdict {
        let h = super::firewall::hook_of(hook);
        let zone = super::firewall::zone_of(&self.zones, iif);
        let f = super::firewall::fields_at(hook, pkt, iif, oif, zone);
        let d = self.fw.judge(h, &f, &mut self.st, self.now);
        let by = self.by_words(&d);
        let (word, v) = match d.action {
            // Filter chains never translate (a NAT statement a filter chain reaches does not
            // compile).
            freeway_firewall::Action::Accept | freeway_firewall::Action::Nat(_) => {
                ("accept".to_string(), FilterVerdict::Accept)
            }
            freeway_firewall::Action::Drop => ("drop".to_string(), FilterVerdict::Drop),
            freeway_firewall::Action::Reject(w) => (
                format!("reject ({w:?})"),
                FilterVerdict::Reject(super::firewall::reject_of(w)),
            ),
        };
        let hook_name = h.name();
        let out = if hook == FilterHook::Forward {
            format!(" to {}", if_name(ifs, oif))
        } else {
            String::new()
        };
        self.said
            .push(format!("{hook_name} from {}{out}: {word} by {by}", if_name(ifs, iif)));
        v
    }
}

impl L3Out for Record {
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }
    fn emit(&mut self, _port: u16, pkt: Packet) {
        self.emitted.push(pkt);
    }
    fn drop(&mut self, _pkt: Packet, reason: L3Drop) {
        self.dropped.get_or_insert(reason);
    }
    fn filter(&mut self, hook: FilterHook, pkt: &Packet, iif: u16, oif: u16) -> FilterVerdict {
        match (self.nft.as_mut(), self.ifaces.as_ref()) {
            (Some(n), Some(ifs)) => n.judge(hook, pkt, iif, oif, ifs),
            _ => FilterVerdict::Accept,
        }
    }
    fn nat(&mut self, hook: NatHook, pkt: &mut Packet, iif: u16, oif: u16) -> Result<(), freeway_l3::L3Drop> {
        match (self.nft.as_mut(), self.ifaces.as_ref()) {
            // The trace creates no connection: no port is looked for, none is missing.
            (Some(n), Some(ifs)) => n
                .nat(hook, pkt, iif, oif, ifs)
                .then_some(())
                .ok_or(freeway_l3::L3Drop::Filtered),
            _ => Ok(()),
        }
    }
}

/// Uncached FIB lookups (the same answers the workers' caches hold).
struct FibLookup<'a> {
    fib: &'a Fib,
}

impl RouteLookup for FibLookup<'_> {
    fn lookup_v4(&mut self, dst: Ipv4Addr, flow_hash: u32) -> Option<NextHop> {
        self.fib.next_hop(IpAddr::V4(dst), flow_hash)
    }
    fn lookup_v6(&mut self, dst: Ipv6Addr, flow_hash: u32) -> Option<NextHop> {
        self.fib.next_hop(IpAddr::V6(dst), flow_hash)
    }
}

/// The IP destination of a parsed frame.
fn dest(p: &Packet) -> Option<IpAddr> {
    let f = p.data();
    let l3 = usize::from(p.meta.l3_off);
    match p.meta.ethertype {
        0x0800 => f
            .get(l3 + 16..l3 + 20)
            .map(|b| IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
        0x86dd => f
            .get(l3 + 24..l3 + 40)
            .map(|b| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes")))),
        _ => None,
    }
}

/// One line about a parsed frame: tcpdump's `-e` line (addresses, tags, summary), and the
/// IP TTL or hop limit, which the router changes.
fn describe(p: &Packet) -> String {
    let f = p.data();
    let mut s = crate::decode::Decoder::new(crate::decode::Options { link: true }).line(f, f.len());
    let l3 = usize::from(p.meta.l3_off);
    let ttl = match p.meta.ethertype {
        0x0800 => f.get(l3 + 8),
        0x86dd => f.get(l3 + 7),
        _ => None,
    };
    if let Some(t) = ttl {
        s.push_str(&format!(" (ttl {t})"));
    }
    s
}

/// The trace as `freeway ctl trace` prints it, and as JSON.
pub(crate) fn render(t: &Trace) -> (String, Value) {
    let mut s = String::new();
    for (i, st) in t.steps.iter().enumerate() {
        let _ = writeln!(s, "{:>2}. {:<9} [{}] {}", i + 1, st.stage, st.at, st.result);
    }
    if t.outputs.is_empty() {
        let _ = writeln!(
            s,
            "Datapath actions: drop ({})",
            t.dropped.as_deref().unwrap_or("no output")
        );
    } else {
        let _ = writeln!(s, "Datapath actions: output to {}", t.outputs.join(", "));
    }
    (s, serde_json::to_value(t).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["h1".into(), "h2".into()]
    }

    #[test]
    fn fields_build_the_frame_they_describe() {
        let (p, f) = frame_from_words(
            &[
                "in_port=h2,dl_vlan=20",
                "nw_src=10.1.0.2",
                "nw_dst=10.2.0.9",
                "tcp",
                "tp_dst=443",
                "tcp_flags=syn|ack",
            ],
            &names(),
            2,
        )
        .unwrap();
        assert_eq!(p, 1);
        let mut pkt = Packet::from_frame(&f).unwrap();
        parse(&mut pkt).unwrap();
        assert_eq!((pkt.meta.vlan_depth, pkt.meta.vlan), (1, 20));
        assert_eq!(dest(&pkt), Some(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 9))));
        let d = describe(&pkt);
        assert!(
            d.contains("vlan 20, p 0, ethertype IPv4 (0x0800), 10.1.0.2.1024 > 10.2.0.9.443: Flags [S.]"),
            "{d}"
        );
    }

    #[test]
    fn bad_fields_are_refused_not_panicked_on() {
        // Found by the trace_request fuzz target: a multi-byte character inside hex=.
        for w in [
            &["in_port=h1", "hex=ffd\u{2e8}n01_ind"][..],
            &["in_port=h1", "ipv6", "nw_src=10.0.0.1"],
            &["in_port=h1", "udp", "tcp_flags=syn"],
            &["in_port=h1", "tp_dst=70000"],
            &["in_port=h1", "arp"],
            &["in_port=h3"],
        ] {
            assert!(frame_from_words(w, &names(), 2).is_err(), "{w:?}");
        }
    }
}
