//! `freeway ctl reload [FILE] [--check]` and `SIGHUP`: a configuration read again, compared
//! with the one the run applied last, and the difference applied while forwarding goes on.
//!
//! What changes live, through the same single-writer paths as the matching `freeway ctl`
//! requests: routes (`route replace`/`route del`), static neighbours (`neigh add`/`del`),
//! static FDB entries (`fdb add`/`del`), the firewall's nftables ruleset (compiled first and
//! swapped atomically), the connection tracker's zone limits and timeouts (a connection takes
//! a new timeout at its next packet), and of each port: its VLAN membership (access VLAN,
//! trunk list and native VLAN: every port's mode published at once as one version of the
//! bridge's VLAN view, which a worker loads once per batch), its bridge flags and its MTU
//! (`link set`); the file's taps: one the file gained starts (writing its file from the
//! start, as `capture start` does), one it lost stops (`capture stop`: its counts stay in
//! `capture list`); and the router interfaces' addresses ([`readdress`]): every interface
//! whose addresses changed, at once, in one new version of the interfaces published to the
//! workers ([`freeway_l3::LiveInterfaces`]: a worker compares its generation once per batch
//! and takes the new version between batches), the connected routes of the addresses that
//! went deleted and those of the new ones added in one RIB publication. From the next batch
//! the router answers ARP, ND and pings for the new addresses and delivers to them, and no
//! longer for the old ones. Router interfaces added and removed ([`Change::Ifaces`], applied
//! by [`super::ifaces`]): one new version of the interfaces, an added one at an id never used
//! before in the run; the connected routes of both in one RIB publication, with every route
//! through a removed interface, and its neighbours, deleted (as the kernel deletes them); the
//! router's bridge port joins and leaves their VLANs, with their static FDB entries; the
//! ruleset is compiled again for the new interface ids; packets a worker queued for a
//! removed interface's neighbour are dropped and counted (`iface_removed`). An interface
//! whose VLAN or MAC changes is removed and added again (the routes and static neighbours
//! of the file through it are then set again); one whose MTU changes keeps its id and takes
//! the MTU live ([`Change::IfaceMtu`]). The membership, the interfaces and the addresses go
//! first, so static entries of a port that joins a VLAN, and routes through a gateway on a
//! new subnet or interface, find them. Ports added and removed change live
//! (`runtime/portset.rs`): a port the file adds opens ([`Change::PortAdd`], first of the
//! changes, so static entries naming it find it); one it no longer has is taken from the
//! workers and closed ([`Change::PortRemove`], last, after the static entries on it are
//! deleted), no frame leaving it afterwards, its FDB entries flushed, its counters kept in
//! `stats` until a restart; one whose kind or settings changed is removed and added again
//! (with its static entries). Unchanged ports never stop. Ports are matched by name, so
//! their order in the file does not matter (except to taps, which wait while the ports
//! differ). What does not change live (the router's own settings, workers, the FDB's
//! settings, the tracker's size) is named in the answer as waiting for a restart, and left
//! as it is.
//! Masquerade's source address follows an address change with the interfaces' version: a
//! worker takes up an interface's new first address when it takes up the version, so the
//! next new connection masquerades to it; connections already translated keep the address
//! they have until they expire, as Linux's do. The kernel twins (`[linux] punt`) take the
//! new addresses too, by netlink, once the workers have them ([`readdress_twins`]: those
//! that went are deleted, the kernel deleting their connected routes, then the new list is
//! added); twins turned on or off wait for a restart, and so do interfaces added or removed
//! while there are twins or the kernel's routes are mirrored (`[linux]`: the twins are made
//! once, at start, and the mirror names interfaces by the ids they had then). A file with an error changes nothing:
//! the error names its file and line. A change the datapath refuses (an MTU larger than its
//! buffers, an address the kernel refuses on a twin) is reported as failed; the others are
//! applied.
//!
//! Threads: the control thread only; it keeps the [`Live`] view of the configuration it
//! applied last.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_bridge::{Mac, PortFlags, PortVlan};

use super::protocol::Hops;
use crate::config::capture::TapSpec;
use crate::config::Checked;

/// What of a configuration can change live, keyed as the tables key it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Live {
    /// Prefix (as `ip route` writes it) → next hops.
    routes: BTreeMap<String, Hops>,
    /// (address, interface) → MAC.
    neighs: BTreeMap<(IpAddr, String), Mac>,
    /// (MAC, VLAN) → port.
    statics: BTreeMap<(Mac, u16), String>,
    /// Where the ruleset came from, and the ruleset.
    ruleset: Option<(String, freeway_firewall::ast::Ruleset)>,
    /// Zone → connection limit.
    zone_limits: BTreeMap<u16, usize>,
    /// The connection tracker's timeout overrides (name, seconds), when it runs.
    ct_timeouts: Option<Vec<(String, u64)>>,
    /// Each configured port's VLAN mode, flags and MTU, in port order.
    ports: Vec<PortLive>,
    /// Each router interface's addresses, in interface order.
    addrs: Vec<IfaceAddrs>,
    /// Each router interface without its addresses, in interface order.
    ifaces: Vec<IfaceLive>,
    /// Whether the router interfaces have kernel twins (`[linux] punt`).
    twins: bool,
    /// Whether the kernel's routes are mirrored (`[linux] mirror`: it names interfaces by
    /// the ids they had at start).
    mirror: bool,
    /// The taps of the file: what they are (as [`tap_words`] writes them), and their specs.
    taps: Vec<(String, FileTap)>,
    /// The rest, section by section, in a form that compares (its `Debug` text).
    rest: Vec<(&'static str, String)>,
}

/// What of a port changes live: its name, VLAN mode, bridge flags and L2 MTU; and the rest of
/// its settings (kind, device, rings, ...), which wait for a restart.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PortLive {
    name: String,
    vlan: PortVlan,
    flags: PortFlags,
    mtu: u16,
    /// Its settings that wait for a restart (as [`port_rest`] writes them).
    rest: String,
    /// Its kind (`afpacket`, `pcap`, ...).
    kind: &'static str,
    /// All its settings (what opens it when a reload adds it).
    spec: FilePort,
}

impl PortLive {
    /// The port `p` of a file.
    fn of(p: &crate::config::PortSpec) -> PortLive {
        PortLive {
            name: p.name.clone(),
            vlan: p.vlan.clone(),
            flags: p.flags,
            mtu: p.mtu,
            rest: port_rest(p),
            kind: p.kind.name(),
            spec: FilePort(p.clone()),
        }
    }
}

/// A port of the file, with all its settings (compared by them).
#[derive(Clone, Debug)]
pub(crate) struct FilePort(pub(crate) crate::config::PortSpec);

impl PartialEq for FilePort {
    fn eq(&self, o: &FilePort) -> bool {
        format!("{:?}", self.0) == format!("{:?}", o.0)
    }
}

/// A router interface's addresses: its name, IPv4 and IPv6 addresses with prefix lengths.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IfaceAddrs {
    pub(crate) name: String,
    pub(crate) v4: Vec<(Ipv4Addr, u8)>,
    pub(crate) v6: Vec<(Ipv6Addr, u8)>,
}

impl fmt::Display for IfaceAddrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v4 = self.v4.iter().map(|(a, l)| format!("{a}/{l}"));
        let all: Vec<String> = v4.chain(self.v6.iter().map(|(a, l)| format!("{a}/{l}"))).collect();
        if all.is_empty() {
            write!(f, "{} (none)", self.name)
        } else {
            write!(f, "{} {}", self.name, all.join(" "))
        }
    }
}

/// A router interface as the configuration has it, without its addresses: its name, VLAN and
/// MAC (an interface whose VLAN or MAC changes is removed and added again) and its IP MTU
/// (which changes in place).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IfaceLive {
    pub(crate) name: String,
    pub(crate) vlan: u16,
    pub(crate) mac: Mac,
    pub(crate) mtu: u16,
}

impl IfaceLive {
    /// Whether `o` is the same interface (name, VLAN and MAC; the MTU may differ).
    fn same(&self, o: &IfaceLive) -> bool {
        (&self.name, self.vlan, self.mac) == (&o.name, o.vlan, o.mac)
    }
}

/// Router interfaces a reload removes (by name) and adds (with their addresses), applied at
/// once ([`super::ifaces`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IfacePlan {
    pub(crate) removed: Vec<String>,
    pub(crate) added: Vec<(IfaceLive, IfaceAddrs)>,
}

impl fmt::Display for IfacePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w: Vec<String> = self.removed.iter().map(|n| format!("{n} removed")).collect();
        for (i, a) in &self.added {
            w.push(format!(
                "{} added (vlan {} mac {} mtu {}): {a}",
                i.name, i.vlan, i.mac, i.mtu
            ));
        }
        write!(f, "router interfaces: {}", w.join("; "))
    }
}

/// A tap of the file (compared by all its settings).
#[derive(Clone, Debug)]
pub(crate) struct FileTap(pub(crate) TapSpec);

impl PartialEq for FileTap {
    fn eq(&self, o: &FileTap) -> bool {
        format!("{:?}", self.0) == format!("{:?}", o.0)
    }
}

/// One change a reload makes, in `freeway ctl` words.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Change {
    /// `route replace PREFIX ...`.
    RouteSet(String, Hops),
    /// `route del PREFIX`.
    RouteDel(String),
    /// `neigh add IP lladdr MAC dev IFACE`.
    NeighSet(IpAddr, Mac, String),
    /// `neigh del IP dev IFACE`.
    NeighDel(IpAddr, String),
    /// `fdb add MAC dev PORT vlan N`.
    FdbSet(Mac, u16, String),
    /// `fdb del MAC vlan N`.
    FdbDel(Mac, u16),
    /// `firewall load SOURCE` (the new ruleset).
    Ruleset(String, freeway_firewall::ast::Ruleset),
    /// A zone's connection limit (none: unlimited).
    ZoneLimit(u16, Option<usize>),
    /// The VLAN modes of the ports that stay, by name (published at once, in one version).
    PortVlans(Vec<(String, PortVlan)>),
    /// `link set dev PORT FLAG on|off ...`: a port's bridge flags, all of them.
    LinkFlags(String, PortFlags),
    /// `link set dev PORT mtu N`.
    LinkMtu(String, u16),
    /// The connection tracker's timeouts: the defaults with these overrides (seconds).
    CtTimeouts(Vec<(String, u64)>),
    /// `capture start`: a tap of the file, writing its file from the start.
    TapStart(String, FileTap),
    /// `capture stop`: a tap of the file that the file no longer has.
    TapStop(String, FileTap),
    /// The router interfaces whose addresses change, with all their new addresses (published
    /// at once, with their connected routes).
    Addrs(Vec<IfaceAddrs>),
    /// Router interfaces removed and added (published at once, with their connected routes;
    /// the routes and neighbours through a removed one go with it).
    Ifaces(IfacePlan),
    /// `link set dev IFACE mtu N`: a router interface's IP MTU.
    IfaceMtu(String, u16),
    /// A port of the file that the run does not have, opened and handed to the workers.
    PortAdd(Box<FilePort>),
    /// A running port the file no longer has (or has with another kind or settings: then
    /// added again after), taken from the workers and closed.
    PortRemove(String),
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::RouteSet(p, h) => write!(f, "route replace {p}{h}"),
            Change::RouteDel(p) => write!(f, "route del {p}"),
            Change::NeighSet(ip, mac, dev) => write!(f, "neigh add {ip} lladdr {mac} dev {dev}"),
            Change::NeighDel(ip, dev) => write!(f, "neigh del {ip} dev {dev}"),
            Change::FdbSet(mac, vlan, port) => write!(f, "fdb add {mac} dev {port} vlan {vlan}"),
            Change::FdbDel(mac, vlan) => write!(f, "fdb del {mac} vlan {vlan}"),
            Change::Ruleset(src, _) => write!(f, "firewall load {src}"),
            Change::ZoneLimit(z, Some(n)) => write!(f, "conntrack zone {z} limit {n}"),
            Change::ZoneLimit(z, None) => write!(f, "conntrack zone {z} no limit"),
            Change::PortVlans(ports) => {
                let p: Vec<String> = ports.iter().map(|(n, v)| format!("{n} {v}")).collect();
                write!(f, "vlan membership: {}", p.join("; "))
            }
            Change::LinkFlags(port, flags) => {
                write!(f, "link set dev {port} {}", super::lan::flags_words(flags))
            }
            Change::LinkMtu(port, mtu) => write!(f, "link set dev {port} mtu {mtu}"),
            Change::Addrs(a) => {
                let a: Vec<String> = a.iter().map(ToString::to_string).collect();
                write!(f, "interface addresses: {}", a.join("; "))
            }
            Change::Ifaces(p) => p.fmt(f),
            Change::IfaceMtu(n, m) => write!(f, "link set dev {n} mtu {m} (router interface)"),
            Change::PortAdd(p) => write!(f, "port add {} ({})", p.0.name, p.0.kind.name()),
            Change::PortRemove(p) => write!(f, "port remove {p}"),
            Change::TapStart(w, _) => write!(f, "capture start {w}"),
            Change::TapStop(w, _) => write!(f, "capture stop {w}"),
            Change::CtTimeouts(t) if t.is_empty() => write!(f, "conntrack timeouts: the defaults"),
            Change::CtTimeouts(t) => {
                let t: Vec<String> = t.iter().map(|(n, s)| format!("{n} {s}")).collect();
                write!(f, "conntrack timeouts: {}", t.join(", "))
            }
        }
    }
}

/// Pushes the changes that turn the table `old` into `new`: deletions of the keys `new` lacks,
/// then settings of the keys whose value `old` lacks or differs; `gone` are keys of `old`
/// already removed with their interface (not deleted again, and set again when `new` has them).
fn table_diff<K: Ord, V: PartialEq>(
    out: &mut Vec<Change>,
    (old, new): (&BTreeMap<K, V>, &BTreeMap<K, V>),
    gone: impl Fn(&K) -> bool,
    del: impl Fn(&K) -> Change,
    set: impl Fn(&K, &V) -> Change,
) {
    let old_get = |k: &K| if gone(k) { None } else { old.get(k) };
    out.extend(
        old.keys()
            .filter(|k| !new.contains_key(*k) && old_get(k).is_some())
            .map(del),
    );
    out.extend(
        new.iter()
            .filter(|(k, v)| old_get(k) != Some(*v))
            .map(|(k, v)| set(k, v)),
    );
}

impl Live {
    /// The live parts of a checked configuration.
    pub(crate) fn of(c: &Checked) -> Live {
        let port = |i: u16| {
            c.ports
                .get(usize::from(i))
                .map_or_else(|| format!("port{i}"), |p| p.name.clone())
        };
        let mut live = Live {
            statics: c.statics.iter().map(|(m, v, p)| ((*m, *v), port(*p))).collect(),
            ruleset: c.firewall.as_ref().and_then(|f| f.ruleset.clone()),
            zone_limits: c
                .conntrack
                .as_ref()
                .map(|ct| ct.zone_limits.iter().copied().collect())
                .unwrap_or_default(),
            ct_timeouts: c.conntrack.as_ref().map(|ct| ct.timeouts.clone()),
            ports: c.ports.iter().map(PortLive::of).collect(),
            taps: c
                .taps
                .iter()
                .map(|t| (tap_words(t, &c.ports), FileTap(t.clone())))
                .collect(),
            twins: c.linux.as_ref().is_some_and(|l| l.punt),
            mirror: c.linux.as_ref().is_some_and(|l| l.mirror.is_some()),
            ..Live::default()
        };
        if let Some(r) = &c.router {
            let ifname = |i: usize| r.interfaces.get(i).map_or_else(|| format!("if{i}"), |x| x.name.clone());
            for rt in &r.routes {
                let prefix = if rt.len == 0 {
                    "default".to_string()
                } else {
                    format!("{}/{}", rt.dst, rt.len)
                };
                let hops = if rt.hops.iter().all(|h| h.gateway.is_some()) {
                    Hops::Via(rt.hops.iter().filter_map(|h| h.gateway).collect())
                } else {
                    Hops::Dev(ifname(rt.hops.first().map_or(0, |h| h.iface)))
                };
                // A default route of each family: keyed apart.
                let key = if rt.len == 0 && rt.dst.is_ipv6() {
                    "::/0".to_string()
                } else {
                    prefix
                };
                live.routes.insert(key, hops);
            }
            for n in &r.neighs {
                live.neighs.insert((n.ip, ifname(n.iface)), n.mac);
            }
            live.addrs = r
                .interfaces
                .iter()
                .map(|i| IfaceAddrs {
                    name: i.name.clone(),
                    v4: i.v4.clone(),
                    v6: i.v6.clone(),
                })
                .collect();
            live.ifaces = r
                .interfaces
                .iter()
                .map(|i| IfaceLive {
                    name: i.name.clone(),
                    vlan: i.vlan,
                    mac: i.mac,
                    mtu: i.mtu,
                })
                .collect();
        }
        // The router's own settings (its interfaces change live); the default MAC shows in
        // the interfaces' MACs.
        let router_rest = c
            .router
            .as_ref()
            .map(|r| format!("{} {} {} {}", r.route_cache, r.neigh_limit, r.icmp_rate, r.icmp_burst));
        live.rest = vec![
            ("workers", format!("{} {:?}", c.workers, c.pin_workers)),
            ("the FDB's settings", format!("{:?}", c.fdb)),
            (
                "the router (added or removed, its route cache, neighbour limit or ICMP rate)",
                format!("{router_rest:?}"),
            ),
            (
                "the connection tracker's size and reassembly",
                format!("{:?}", c.conntrack.as_ref().map(|ct| (ct.max, &ct.reassembly))),
            ),
            (
                "the firewall's new-connection ports",
                format!("{:?}", c.firewall.as_ref().map(|f| &f.allow_new_from)),
            ),
        ];
        live
    }

    /// Records that `c` was applied: afterwards `self` describes the running tables again.
    /// What waits for a restart stays as it runs, so a later reload names it again.
    pub(crate) fn absorb(&mut self, c: &Change) {
        match c {
            Change::RouteSet(p, h) => {
                self.routes.insert(p.clone(), h.clone());
            }
            Change::RouteDel(p) => {
                self.routes.remove(p);
            }
            Change::NeighSet(ip, mac, dev) => {
                self.neighs.insert((*ip, dev.clone()), *mac);
            }
            Change::NeighDel(ip, dev) => {
                self.neighs.remove(&(*ip, dev.clone()));
            }
            Change::FdbSet(mac, vlan, port) => {
                self.statics.insert((*mac, *vlan), port.clone());
            }
            Change::FdbDel(mac, vlan) => {
                self.statics.remove(&(*mac, *vlan));
            }
            Change::Ruleset(src, rs) => self.ruleset = Some((src.clone(), rs.clone())),
            Change::ZoneLimit(z, Some(n)) => {
                self.zone_limits.insert(*z, *n);
            }
            Change::ZoneLimit(z, None) => {
                self.zone_limits.remove(z);
            }
            Change::PortVlans(v) => {
                for (p, (_, vlan)) in self.ports.iter_mut().zip(v) {
                    p.vlan = vlan.clone();
                }
            }
            Change::LinkFlags(name, f) => self
                .ports
                .iter_mut()
                .filter(|p| p.name == *name)
                .for_each(|p| p.flags = *f),
            Change::LinkMtu(name, m) => self
                .ports
                .iter_mut()
                .filter(|p| p.name == *name)
                .for_each(|p| p.mtu = *m),
            Change::CtTimeouts(t) => self.ct_timeouts = Some(t.clone()),
            Change::Addrs(new) => {
                for n in new {
                    self.addrs
                        .iter_mut()
                        .filter(|a| a.name == n.name)
                        .for_each(|a| *a = n.clone());
                }
            }
            Change::Ifaces(plan) => {
                // What went with the removed interfaces (as the runtime deleted it).
                let (routes, neighs) = self.through(&plan.removed);
                self.routes.retain(|p, _| !routes.contains(p));
                self.neighs.retain(|k, _| !neighs.contains(k));
                self.ifaces.retain(|i| !plan.removed.contains(&i.name));
                self.addrs.retain(|a| !plan.removed.contains(&a.name));
                for (i, a) in &plan.added {
                    self.ifaces.push(i.clone());
                    self.addrs.push(a.clone());
                }
            }
            Change::IfaceMtu(name, m) => self
                .ifaces
                .iter_mut()
                .filter(|i| i.name == *name)
                .for_each(|i| i.mtu = *m),
            Change::PortAdd(p) => self.ports.push(PortLive::of(&p.0)),
            Change::PortRemove(name) => self.ports.retain(|p| p.name != *name),
            Change::TapStart(w, t) => self.taps.push((w.clone(), t.clone())),
            Change::TapStop(w, _) => {
                if let Some(i) = self.taps.iter().position(|x| x.0 == *w) {
                    self.taps.remove(i);
                }
            }
        }
    }

    /// What turns `self` into `new`: the changes to apply, in an order that never leaves a
    /// table worse than before (deletions of what goes, then what is new or changed), and
    /// the sections that differ but wait for a restart.
    pub(crate) fn diff(&self, new: &Live) -> (Vec<Change>, Vec<&'static str>) {
        let mut out = Vec::new();
        if self.ruleset != new.ruleset {
            if let Some((src, rs)) = &new.ruleset {
                out.push(Change::Ruleset(src.clone(), rs.clone()));
            }
        }
        let (iface_changes, iface_wait) = self.iface_diff(new);
        // Routes and neighbours through an interface removed go with it: those of the new
        // file are added again (through the interface added in its place, if any).
        let removed = iface_changes
            .iter()
            .find_map(|c| match c {
                Change::Ifaces(p) => Some(p.removed.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let (gone_routes, gone_neighs) = self.through(&removed);
        let tables = (&self.routes, &new.routes);
        let (del, set) = (
            |p: &String| Change::RouteDel(p.clone()),
            |p: &String, h: &Hops| Change::RouteSet(p.clone(), h.clone()),
        );
        table_diff(&mut out, tables, |p| gone_routes.contains(p), del, set);
        let tables = (&self.neighs, &new.neighs);
        let del = |(ip, dev): &(IpAddr, String)| Change::NeighDel(*ip, dev.clone());
        let set = |(ip, dev): &(IpAddr, String), mac: &Mac| Change::NeighSet(*ip, *mac, dev.clone());
        table_diff(&mut out, tables, |k| gone_neighs.contains(k), del, set);
        let tables = (&self.statics, &new.statics);
        let del = |&(mac, vlan): &(Mac, u16)| Change::FdbDel(mac, vlan);
        let set = |&(mac, vlan): &(Mac, u16), port: &String| Change::FdbSet(mac, vlan, port.clone());
        table_diff(&mut out, tables, |_| false, del, set);
        let tables = (&self.zone_limits, &new.zone_limits);
        table_diff(
            &mut out,
            tables,
            |_| false,
            |z| Change::ZoneLimit(*z, None),
            |z, n| Change::ZoneLimit(*z, Some(*n)),
        );
        self.kept_port_diff(new, &mut out);
        let old_port = |n: &str| self.ports.iter().find(|p| p.name == n);
        // Taps name ports by their place in the file: they change only while that stays.
        let same_ports = self
            .ports
            .iter()
            .map(|p| (&p.name, &p.rest))
            .eq(new.ports.iter().map(|p| (&p.name, &p.rest)));
        if let (Some(a), Some(b)) = (&self.ct_timeouts, &new.ct_timeouts) {
            if a != b {
                out.push(Change::CtTimeouts(b.clone()));
            }
        }
        if same_ports {
            let has = |l: &Live, w: &str| l.taps.iter().any(|t| t.0 == w);
            for (w, t) in self.taps.iter().filter(|t| !has(new, &t.0)) {
                out.push(Change::TapStop(w.clone(), t.clone()));
            }
            for (w, t) in new.taps.iter().filter(|t| !has(self, &t.0)) {
                out.push(Change::TapStart(w.clone(), t.clone()));
            }
        }
        let taps_wait = !same_ports && self.taps.iter().map(|t| &t.0).ne(new.taps.iter().map(|t| &t.0));
        // The ruleset and the routes can need a membership that changes here (a static FDB
        // entry on a port that joins its VLAN): the membership goes first.
        if let Some(i) = out.iter().position(|c| matches!(c, Change::PortVlans(_))) {
            let v = out.remove(i);
            let at = usize::from(matches!(out.first(), Some(Change::Ruleset(..))));
            out.insert(at, v);
        }
        // Right after the ruleset (which stops the rest when it does not compile), so that
        // routes and neighbours of a new subnet or interface find it.
        let at = usize::from(matches!(out.first(), Some(Change::Ruleset(..))));
        out.splice(at..at, iface_changes);
        // A port whose kind or settings changed is removed and added again, first (after the
        // ruleset), with new ports, so that static entries naming them find them; in the
        // file's order. Its static entries go with it, and are added again.
        let at = usize::from(matches!(out.first(), Some(Change::Ruleset(..))));
        let changed = |n: &str| old_port(n).is_some_and(|a| new.ports.iter().any(|b| b.name == n && a.rest != b.rest));
        for ((mac, vlan), port) in &new.statics {
            let set = Change::FdbSet(*mac, *vlan, port.clone());
            if changed(port) && !out.contains(&set) {
                out.push(set);
            }
        }
        for p in new.ports.iter().rev() {
            match old_port(&p.name) {
                None => out.insert(at, Change::PortAdd(Box::new(p.spec.clone()))),
                Some(a) if a.rest != p.rest => {
                    out.insert(at, Change::PortAdd(Box::new(p.spec.clone())));
                    out.insert(at, Change::PortRemove(p.name.clone()));
                }
                Some(_) => {}
            }
        }
        // Ports removed go last: the static entries on them are deleted before.
        for a in self
            .ports
            .iter()
            .filter(|a| !new.ports.iter().any(|b| b.name == a.name))
        {
            out.push(Change::PortRemove(a.name.clone()));
        }
        (out, self.restart_needs(new, taps_wait, iface_wait))
    }

    /// Per-port changes of the ports that stay (same name, kind and settings), by name: their
    /// VLAN membership (all at once), link flags and MTU.
    fn kept_port_diff(&self, new: &Live, out: &mut Vec<Change>) {
        let old_port = |n: &str| self.ports.iter().find(|p| p.name == n);
        let kept: Vec<(&PortLive, &PortLive)> = new
            .ports
            .iter()
            .filter_map(|b| old_port(&b.name).filter(|a| a.rest == b.rest).map(|a| (a, b)))
            .collect();
        if kept.iter().any(|(a, b)| a.vlan != b.vlan) {
            out.push(Change::PortVlans(
                kept.iter().map(|(_, b)| (b.name.clone(), b.vlan.clone())).collect(),
            ));
        }
        for (a, b) in &kept {
            if a.flags != b.flags {
                out.push(Change::LinkFlags(b.name.clone(), b.flags));
            }
            if a.mtu != b.mtu {
                out.push(Change::LinkMtu(b.name.clone(), b.mtu));
            }
        }
    }

    /// The sections whose change from `self` to `new` waits for a restart: `taps_wait` when
    /// the taps changed with their ports, `iface_wait` that of the router interfaces.
    fn restart_needs(&self, new: &Live, taps_wait: bool, iface_wait: Option<&'static str>) -> Vec<&'static str> {
        let mut restart: Vec<&'static str> = self
            .rest
            .iter()
            .zip(&new.rest)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0)
            .collect();
        if self.ruleset.is_some() && new.ruleset.is_none() {
            restart.push("the firewall's ruleset (removed)");
        }
        if self.ct_timeouts.is_some() != new.ct_timeouts.is_some() {
            restart.push("connection tracking (added or removed)");
        }
        if taps_wait {
            restart.push("taps (their ports changed)");
        }
        if self.twins != new.twins {
            restart.push("the kernel twins ([linux] punt turned on or off)");
        }
        restart.extend(iface_wait);
        restart
    }

    /// The changes of the router interfaces from `self` to `new`: those removed and added
    /// (one whose VLAN or MAC changed is both), then the new addresses of those that stay,
    /// then their new MTUs; or, with kernel twins (which are made at start), what waits.
    fn iface_diff(&self, new: &Live) -> (Vec<Change>, Option<&'static str>) {
        let router = |l: &Live| {
            l.rest
                .iter()
                .find(|x| x.0.starts_with("the router"))
                .map(|x| x.1.clone())
        };
        if router(self) != router(new) {
            return (Vec::new(), None);
        }
        let kept = |i: &IfaceLive, l: &Live| l.ifaces.iter().any(|o| o.same(i));
        let removed: Vec<String> = self
            .ifaces
            .iter()
            .filter(|i| !kept(i, new))
            .map(|i| i.name.clone())
            .collect();
        let addrs_of = |l: &Live, n: &str| l.addrs.iter().find(|a| a.name == n).cloned();
        let added: Vec<(IfaceLive, IfaceAddrs)> = new
            .ifaces
            .iter()
            .filter(|i| !kept(i, self))
            .map(|i| {
                let a = addrs_of(new, &i.name).unwrap_or_else(|| IfaceAddrs {
                    name: i.name.clone(),
                    v4: Vec::new(),
                    v6: Vec::new(),
                });
                (i.clone(), a)
            })
            .collect();
        let mut out = Vec::new();
        if !removed.is_empty() || !added.is_empty() {
            if self.twins || new.twins || self.mirror {
                return (
                    Vec::new(),
                    Some("router interfaces added or removed (with [linux]: its kernel twins and the route mirror's interfaces are set at start)"),
                );
            }
            out.push(Change::Ifaces(IfacePlan { removed, added }));
        }
        let stay = || new.ifaces.iter().filter(|i| kept(i, self));
        let readdressed: Vec<IfaceAddrs> = stay()
            .filter_map(|i| addrs_of(new, &i.name).filter(|a| addrs_of(self, &i.name).as_ref() != Some(a)))
            .collect();
        if !readdressed.is_empty() {
            out.push(Change::Addrs(readdressed));
        }
        for i in stay() {
            if self.ifaces.iter().any(|o| o.same(i) && o.mtu != i.mtu) {
                out.push(Change::IfaceMtu(i.name.clone(), i.mtu));
            }
        }
        (out, None)
    }

    /// The routes (prefixes) and neighbours of `self` that go through one of the interfaces
    /// `names`: a route to one of them by name, or through a gateway on one of their
    /// subnets.
    fn through(&self, names: &[String]) -> (Vec<String>, Vec<(IpAddr, String)>) {
        let subnets: Vec<&IfaceAddrs> = self.addrs.iter().filter(|a| names.contains(&a.name)).collect();
        let on = |gw: &IpAddr| {
            subnets.iter().any(|a| match gw {
                IpAddr::V4(g) => {
                    a.v4.iter()
                        .any(|(x, l)| same_subnet(IpAddr::V4(*x), IpAddr::V4(*g), *l))
                }
                IpAddr::V6(g) => {
                    a.v6.iter()
                        .any(|(x, l)| same_subnet(IpAddr::V6(*x), IpAddr::V6(*g), *l))
                }
            })
        };
        let routes = self
            .routes
            .iter()
            .filter(|(_, h)| match h {
                Hops::Dev(d) => names.contains(d),
                Hops::Via(gws) => gws.iter().any(on),
                Hops::Nexthops(h) => h
                    .iter()
                    .any(|h| h.dev.as_ref().is_some_and(|d| names.contains(d)) || h.via.as_ref().is_some_and(on)),
            })
            .map(|(p, _)| p.clone())
            .collect();
        let neighs = self.neighs.keys().filter(|(_, d)| names.contains(d)).cloned().collect();
        (routes, neighs)
    }
}

/// Whether `a` and `b` share their first `len` bits.
fn same_subnet(a: IpAddr, b: IpAddr, len: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0);
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

/// A tap in `capture` words: `-i PORT -Q DIR [-s SNAPLEN] [-c COUNT] -w FILE [FILTER]` (every
/// setting, so that two taps that differ in any are different).
fn tap_words(t: &TapSpec, ports: &[crate::config::PortSpec]) -> String {
    let names: Vec<String> = ports.iter().map(|p| p.name.clone()).collect();
    let d = super::super::capture::desc_of(t, &names);
    let mut w = format!("-i {} -Q {} -s {}", d.port, d.direction, t.snaplen);
    if let Some(c) = t.count {
        w.push_str(&format!(" -c {c}"));
    }
    w.push_str(&format!(" -w {}", d.write));
    if t.pcapng {
        w.push_str(" (pcapng)");
    }
    if !t.filter.is_empty() {
        w.push_str(&format!(" {}", t.filter));
    }
    w
}

/// One port with what changes live (VLAN mode, flags, MTU, and the ring frame size an MTU
/// implies) left out: its name, kind and every other setting. A port whose settings here
/// differ is removed and added again.
fn port_rest(p: &crate::config::PortSpec) -> String {
    let ring = p.afpacket.as_ref().map(|a| {
        let mut a = a.clone();
        if a.frame_size == crate::config::mtu::ring_frame_size(0, p.mtu) {
            a.frame_size = 0;
        }
        a
    });
    format!(
        "{} {:?} {:?} {:?} {:?} {:?} {} {} {:?} {:?}",
        p.name, p.kind, p.gen, p.pcap, ring, p.afxdp, p.zone, p.group_fwd_mask, p.storm, p.mcast
    )
}

/// Gives the kernel twins (`[linux] punt`) of the interfaces named in `new` their new
/// addresses; `old`: the interfaces before the change.
pub(crate) fn readdress_twins(
    twins: &freeway_linuxcp::Twins,
    old: &freeway_l3::Interfaces,
    new: &[IfaceAddrs],
) -> Result<(), String> {
    for n in new {
        let Some((i, o)) = old.by_name(&n.name).and_then(|i| Some((i, old.get(i)?))) else {
            continue;
        };
        twins
            .set_addresses(i, (&o.v4, &o.v6), (&n.v4, &n.v6))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Gives the router interfaces named in `new` their new addresses: the connected routes of
/// the addresses that go are deleted, the new interfaces published to the workers (they take
/// them up at their next batch), then the connected routes of the new addresses added, all
/// the route changes in one RIB publication ([`super::ifaces::publish`]). `ifs` becomes the
/// new interfaces. Addresses that do not fit together (one held twice) change nothing.
pub(crate) fn readdress(
    rib: &mut freeway_route::Rib,
    ifs: &mut std::sync::Arc<freeway_l3::Interfaces>,
    live: &freeway_l3::LiveInterfaces,
    new: &[IfaceAddrs],
) -> Result<(), String> {
    let mut next = (**ifs).clone();
    for a in new {
        let i = ifs
            .by_name(&a.name)
            .ok_or_else(|| format!("no router interface {:?}", a.name))?;
        next = next
            .with_addresses(i, a.v4.clone(), a.v6.clone())
            .map_err(|e| format!("interface {}: {e}", a.name))?;
    }
    super::ifaces::publish(rib, ifs, live, next, &[])
}

/// The connection tracker's timeouts: the defaults with `overrides` (name, seconds).
pub(crate) fn timeouts(overrides: &[(String, u64)]) -> Result<freeway_conntrack::Timeouts, String> {
    let mut t = freeway_conntrack::Timeouts::default();
    for (name, secs) in overrides {
        t.set(name, *secs)?;
    }
    Ok(t)
}

/// Each change of a reload, and whether it was applied.
pub(crate) type Outcome = Vec<(Change, Result<(), String>)>;

/// The answer of a reload: what changed (or would, with `--check`), what failed, what waits.
pub(crate) fn report(check: bool, applied: &[(Change, Result<(), String>)], restart: &[&str]) -> String {
    let mut s = String::new();
    if applied.is_empty() {
        s.push_str("no live change\n");
    }
    for (c, r) in applied {
        match r {
            Ok(()) if check => s.push_str(&format!("would apply: {c}\n")),
            Ok(()) => s.push_str(&format!("applied: {c}\n")),
            Err(e) => s.push_str(&format!("FAILED: {c}: {e}\n")),
        }
    }
    if !restart.is_empty() {
        s.push_str(&format!("not applied, waits for a restart: {}\n", restart.join(", ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    /// The changes from `a` to `b` in `freeway ctl` words, and what waits.
    fn said(a: &Live, b: &Live) -> (Vec<String>, Vec<&'static str>) {
        let (changes, restart) = a.diff(b);
        (changes.iter().map(ToString::to_string).collect(), restart)
    }

    /// The router demo with `from` replaced by `to` (which must be in it).
    fn router_with(from: &str, to: &str) -> Live {
        let text = crate::config::ROUTER_CONFIG.replace(from, to);
        assert_ne!(text, crate::config::ROUTER_CONFIG, "{from:?} is not in the router demo");
        Live::of(&parse(&text, "t.toml", None).unwrap())
    }

    /// `a` with every change from `a` to `b` absorbed: nothing is left to change live.
    fn absorbed_all(a: &Live, b: &Live) -> Live {
        let mut now = a.clone();
        for c in &a.diff(b).0 {
            now.absorb(c);
        }
        assert_eq!(now.diff(b).0, vec![]);
        now
    }

    fn live(extra: &str) -> Live {
        let base = crate::config::ROUTER_CONFIG;
        Live::of(&parse(&format!("{base}\n{extra}"), "t.toml", None).unwrap())
    }

    #[test]
    fn a_route_and_a_neighbour_changed_are_the_changes_and_nothing_waits() {
        let a = live("");
        assert_eq!(a.diff(&a), (vec![], vec![]));
        let b = live(
            "[[route]]\ndst = \"203.0.113.0/24\"\nvia = \"10.0.20.7\"\n\n[[neigh]]\nip = \"10.0.20.9\"\nmac = \"02:00:00:00:20:09\"\ndev = \"wan\"\n",
        );
        let (words, restart) = said(&a, &b);
        assert_eq!(
            words,
            [
                "route replace 203.0.113.0/24 via 10.0.20.7",
                "neigh add 10.0.20.9 lladdr 02:00:00:00:20:09 dev wan"
            ]
        );
        assert!(restart.is_empty(), "{restart:?}");
        assert_eq!(
            said(&b, &a).0,
            ["route del 203.0.113.0/24", "neigh del 10.0.20.9 dev wan"]
        );
    }

    #[test]
    fn a_changed_port_waits_for_a_restart() {
        let a = live("");
        let text = crate::config::ROUTER_CONFIG.replace("workers = 2", "workers = 1");
        let b = Live::of(&parse(&text, "t.toml", None).unwrap());
        let (changes, restart) = a.diff(&b);
        assert!(changes.is_empty());
        assert_eq!(restart, ["workers"]);
    }

    #[test]
    fn applied_changes_are_absorbed_and_what_waits_is_named_again() {
        let a = live("");
        let text = crate::config::ROUTER_CONFIG
            .replace("workers = 2", "workers = 1")
            .replace(
                "[conntrack]\nmax = 100000",
                "[conntrack]\nmax = 100000\ntimeouts = { udp_single = 7 }",
            );
        let b = Live::of(
            &parse(
                &format!("{text}\n[[route]]\ndst = \"203.0.113.0/24\"\nvia = \"10.0.20.7\"\n"),
                "t.toml",
                None,
            )
            .unwrap(),
        );
        let (changes, restart) = a.diff(&b);
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(restart, ["workers"]);
        let mut now = a.clone();
        for c in &changes {
            now.absorb(c);
        }
        assert_eq!(now.diff(&b), (vec![], vec!["workers"]));
        // Only the route applied: the timeouts are still a change.
        let mut part = a.clone();
        part.absorb(&changes[0]);
        assert_eq!(part.diff(&b).0.len(), 1);
    }

    #[test]
    fn an_interface_address_changed_is_one_change_applied_first_and_nothing_waits() {
        let a = live("");
        let b = router_with(
            "addr = [\"10.0.20.1/24\", \"2001:db8:20::1/64\"]",
            "addr = [\"10.0.20.1/24\", \"10.0.30.1/24\", \"2001:db8:20::1/64\"]\n[[route]]\ndst = \"203.0.113.0/24\"\nvia = \"10.0.30.7\"",
        );
        let addrs = "interface addresses: wan 10.0.20.1/24 10.0.30.1/24 2001:db8:20::1/64";
        let route = "route replace 203.0.113.0/24 via 10.0.30.7";
        assert_eq!(said(&a, &b), (vec![addrs.to_string(), route.to_string()], vec![]));
        assert!(absorbed_all(&a, &b).diff(&b).1.is_empty());
    }

    #[test]
    fn with_twins_an_address_change_waits_for_nothing_and_punt_toggled_does() {
        let punt = "\n[linux]\npunt = true\n";
        let from = "addr = [\"10.0.20.1/24\", \"2001:db8:20::1/64\"]";
        let a = router_with(from, &format!("{from}{punt}"));
        let b = router_with(from, &format!("addr = [\"10.0.20.9/24\", \"2001:db8:20::1/64\"]{punt}"));
        let (words, restart) = said(&a, &b);
        assert_eq!(words, vec!["interface addresses: wan 10.0.20.9/24 2001:db8:20::1/64"]);
        assert!(restart.is_empty(), "{restart:?}");
        let (words, restart) = said(&live(""), &a);
        assert!(words.is_empty(), "{words:?}");
        assert_eq!(restart, vec!["the kernel twins ([linux] punt turned on or off)"]);
    }

    /// The router demo with port `intruder` moved to VLAN `vlan`, and `extra` after it.
    fn intruder_on(vlan: u16, extra: &str) -> Live {
        let text = crate::config::ROUTER_CONFIG.replace(
            "name = \"intruder\"\nkind = \"gen\"\nvlan = { mode = \"access\", vlan = 20 }",
            &format!("name = \"intruder\"\nkind = \"gen\"\nvlan = {{ mode = \"access\", vlan = {vlan} }}"),
        );
        Live::of(&parse(&format!("{text}\n{extra}"), "t.toml", None).unwrap())
    }

    #[test]
    fn an_interface_added_or_removed_is_one_change_and_its_routes_and_neighbours_follow() {
        let a = intruder_on(30, "");
        let dmz = "[[interface]]\nname = \"dmz\"\nvlan = 30\naddr = [\"10.0.30.1/24\"]\nmtu = 1400\n\n[[route]]\ndst = \"203.0.113.0/24\"\nvia = \"10.0.30.7\"\n";
        let b = intruder_on(30, dmz);
        let added = "router interfaces: dmz added (vlan 30 mac 02:fe:00:00:00:01 mtu 1400): dmz 10.0.30.1/24";
        let route = "route replace 203.0.113.0/24 via 10.0.30.7";
        assert_eq!(said(&a, &b), (vec![added.to_string(), route.to_string()], vec![]));
        // Removed: its route goes with it (no `route del` of its own).
        assert_eq!(
            said(&b, &a),
            (vec!["router interfaces: dmz removed".to_string()], vec![])
        );
        assert_eq!(
            absorbed_all(&b, &a),
            a,
            "the routes through the removed interface are gone"
        );
    }

    #[test]
    fn an_interface_whose_vlan_changes_is_removed_and_added_and_its_routes_set_again() {
        let a = intruder_on(21, "");
        let b = Live::of(
            &parse(
                &crate::config::ROUTER_CONFIG
                    .replace(
                        "name = \"intruder\"\nkind = \"gen\"\nvlan = { mode = \"access\", vlan = 20 }",
                        "name = \"intruder\"\nkind = \"gen\"\nvlan = { mode = \"access\", vlan = 21 }",
                    )
                    .replace("name = \"wan\"\nvlan = 20", "name = \"wan\"\nvlan = 21"),
                "t.toml",
                None,
            )
            .unwrap(),
        );
        let (words, restart) = said(&a, &b);
        assert!(restart.is_empty(), "{restart:?}");
        assert_eq!(
            words,
            [
                "router interfaces: wan removed; wan added (vlan 21 mac 02:fe:00:00:00:01 mtu 1500): wan 10.0.20.1/24 2001:db8:20::1/64",
                "route replace 198.51.100.0/24 via 10.0.20.7",
                "neigh add 10.0.20.7 lladdr 02:00:00:00:20:07 dev wan",
            ]
        );
        assert!(absorbed_all(&a, &b).diff(&b).1.is_empty());
    }

    #[test]
    fn an_interface_mtu_changes_in_place_and_the_router_settings_wait() {
        let a = live("");
        let b = router_with("name = \"wan\"\nvlan = 20", "name = \"wan\"\nvlan = 20\nmtu = 1400");
        assert_eq!(
            said(&a, &b),
            (vec!["link set dev wan mtu 1400 (router interface)".to_string()], vec![])
        );
        let c = router_with(
            "mac = \"02:fe:00:00:00:01\"",
            "mac = \"02:fe:00:00:00:01\"\nneigh_limit = 77",
        );
        assert_eq!(
            a.diff(&c).1,
            ["the router (added or removed, its route cache, neighbour limit or ICMP rate)"]
        );
    }

    #[test]
    fn with_twins_interfaces_added_or_removed_wait_for_a_restart() {
        let punt = "\n[linux]\npunt = true\n";
        let a = intruder_on(30, punt);
        let b = intruder_on(
            30,
            &format!("{punt}\n[[interface]]\nname = \"dmz\"\nvlan = 30\naddr = [\"10.0.30.1/24\"]\n"),
        );
        let (changes, restart) = a.diff(&b);
        assert!(changes.is_empty(), "{changes:?}");
        assert_eq!(
            restart,
            ["router interfaces added or removed (with [linux]: its kernel twins and the route mirror's interfaces are set at start)"]
        );
    }

    #[test]
    fn ports_added_removed_or_changed_are_changes_and_nothing_waits() {
        let a = live("");
        let b = live("[[port]]\nname = \"extra\"\nkind = \"sink\"\n");
        assert_eq!(said(&a, &b), (vec!["port add extra (sink)".to_string()], vec![]));
        assert_eq!(said(&b, &a), (vec!["port remove extra".to_string()], vec![]));
        // Absorbed, the added port is a running one, and the removed one is gone.
        for (x, y) in [(&a, &b), (&b, &a)] {
            let mut now = x.clone();
            for c in &x.diff(y).0 {
                now.absorb(c);
            }
            assert_eq!(now.diff(y), (vec![], vec![]));
        }
        // A port of another setting: removed, then added again.
        let c = router_with("rate_pps = 10000, seed = 3", "rate_pps = 10000, seed = 4");
        assert_eq!(said(&a, &c).0, ["port remove intruder", "port add intruder (gen)"]);
        // A port whose VLAN, flags or MTU change stays: that applies live.
        let d = router_with(
            "name = \"intruder\"\nkind = \"gen\"\nvlan = { mode = \"access\", vlan = 20 }",
            "name = \"intruder\"\nkind = \"gen\"\nvlan = { mode = \"access\", vlan = 10 }",
        );
        assert!(
            said(&a, &d).0.iter().all(|c| !c.starts_with("port ")),
            "{:?}",
            said(&a, &d)
        );
        let text = report(true, &[(b.diff(&a).0[0].clone(), Ok(()))], &[]);
        assert_eq!(text, "would apply: port remove extra\n");
    }
}
