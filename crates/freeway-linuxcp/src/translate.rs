//! From rtnetlink route messages to Freeway's route changes: pure functions and the mirror's
//! state, no socket.
//!
//! The kernel may hold several routes for one prefix (different metrics, or TOS for IPv4);
//! Freeway holds one route per prefix. [`Mirror`] keeps every wanted kernel route, keyed like
//! the kernel keys them (prefix, TOS, priority), and installs for each prefix the one with the
//! lowest priority (metric), as the kernel's own lookup prefers it. Each change of that choice
//! is one [`Change`].
//!
//! A kernel route is *wanted* when it is a unicast route of the mirrored table, of an allowed
//! protocol (by default every protocol but `kernel`: the kernel's connected routes, which
//! Freeway derives from its own interfaces), and at least one of its next hops leaves by a
//! device that is one of the router's interfaces (matched by name: an interface's kernel twin
//! carries its name). Hops on other devices are left out; a route with none left is not
//! wanted. Routes through nexthop objects (`RTA_NH_ID`) are not mirrored (counted).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::IpAddr;

use freeway_route::{NextHop, Prefix, Route, RouteKind};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteType, RouteVia};
use netlink_packet_route::AddressFamily;
use smallvec::{smallvec, SmallVec};

/// Which kernel routes are mirrored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The kernel routing table (254: `main`).
    pub table: u32,
    /// Allowed route protocols (`RTPROT_*`); `None`: every protocol but `kernel` (2).
    pub protocols: Option<Vec<u8>>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            table: u32::from(RouteHeader::RT_TABLE_MAIN),
            protocols: None,
        }
    }
}

impl Filter {
    fn allows(&self, proto: u8) -> bool {
        match &self.protocols {
            Some(list) => list.contains(&proto),
            None => proto != RTPROT_KERNEL,
        }
    }
}

const RTPROT_KERNEL: u8 = 2;

/// How the kernel keys a route in a table: prefix, TOS (IPv4), priority (metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Destination.
    pub prefix: Prefix,
    /// Type of service (0 for IPv6).
    pub tos: u8,
    /// Priority (metric): lower wins.
    pub priority: u32,
}

/// Why a route message was not mirrored (each a counter of the mirror).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not the mirrored table, not IPv4/IPv6, or no usable destination.
    Other,
    /// Not a unicast route (local, broadcast, blackhole, unreachable, multicast...).
    NotUnicast,
    /// A protocol the filter leaves out.
    Protocol,
    /// No next hop on one of the router's interfaces.
    Unmapped,
    /// Next hops given as a nexthop object (`RTA_NH_ID`) or otherwise unusable.
    BadNextHops,
}

/// What one route message says about the mirrored table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A route of the mirrored table: the route as Freeway would install it, or why it is
    /// not wanted (so a wanted route replaced by an unwanted one at the same key goes).
    Route(Key, Result<Route, Skip>),
    /// Nothing for the mirror (another table or family, no destination).
    Ignored,
}

/// Reads a route message. `iface` maps a kernel interface index to the router interface of
/// the same name, if any.
pub fn decode(msg: &RouteMessage, filter: &Filter, iface: impl Fn(u32) -> Option<u16>) -> Decoded {
    let h = &msg.header;
    let mut table = u32::from(h.table);
    let (mut dst, mut gw, mut oif, mut prio, mut multipath, mut nh_id) = (None, None, None, 0u32, None, false);
    for a in &msg.attributes {
        match a {
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Destination(d) => dst = addr(d),
            RouteAttribute::Gateway(g) => gw = addr(g),
            RouteAttribute::Via(v) => gw = via(v),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Priority(p) => prio = *p,
            RouteAttribute::MultiPath(m) => multipath = Some(m),
            RouteAttribute::NhId(_) => nh_id = true,
            _ => {}
        }
    }
    if table != filter.table {
        return Decoded::Ignored;
    }
    let unspecified = match h.address_family {
        AddressFamily::Inet => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        _ => return Decoded::Ignored,
    };
    let dst = dst.unwrap_or(unspecified);
    if dst.is_ipv4() != unspecified.is_ipv4() {
        return Decoded::Ignored;
    }
    let Ok(prefix) = Prefix::new_truncate(dst, h.destination_prefix_length) else {
        return Decoded::Ignored;
    };
    let key = Key {
        prefix,
        tos: h.tos,
        priority: prio,
    };
    let proto = u8::from(h.protocol);
    let why = if h.kind != RouteType::Unicast {
        Some(Skip::NotUnicast)
    } else if !filter.allows(proto) {
        Some(Skip::Protocol)
    } else if nh_id {
        Some(Skip::BadNextHops)
    } else {
        None
    };
    if let Some(w) = why {
        return Decoded::Route(key, Err(w));
    }
    let mut hops = Vec::new();
    match multipath {
        Some(m) => {
            for nh in m {
                let mut g = None;
                for a in &nh.attributes {
                    match a {
                        RouteAttribute::Gateway(x) => g = addr(x),
                        RouteAttribute::Via(v) => g = via(v),
                        _ => {}
                    }
                }
                if let Some(i) = iface(nh.interface_index) {
                    hops.push(hop(g, i));
                }
            }
        }
        None => {
            if let Some(i) = oif.and_then(&iface) {
                hops.push(hop(gw, i));
            }
        }
    }
    // A gateway of the other family (an IPv4 route via an IPv6 next hop) is not something
    // Freeway's next hops carry.
    hops.retain(|h| h.gateway.is_none_or(|g| g.is_ipv4() == prefix.is_v4()));
    if hops.is_empty() {
        return Decoded::Route(key, Err(Skip::Unmapped));
    }
    hops.truncate(freeway_route::nh::MAX_PATHS);
    let mut route = Route::new(prefix, hops);
    route.kind = RouteKind::Linux(proto);
    route.metric = prio;
    Decoded::Route(key, Ok(route))
}

fn hop(gw: Option<IpAddr>, iface: u16) -> NextHop {
    match gw {
        Some(g) if !g.is_unspecified() => NextHop::via(g, iface),
        _ => NextHop::connected(iface),
    }
}

fn addr(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(x) => Some(IpAddr::V4(*x)),
        RouteAddress::Inet6(x) => Some(IpAddr::V6(*x)),
        _ => None,
    }
}

fn via(v: &RouteVia) -> Option<IpAddr> {
    match v {
        RouteVia::Inet(x) => Some(IpAddr::V4(*x)),
        RouteVia::Inet6(x) => Some(IpAddr::V6(*x)),
        _ => None,
    }
}

/// A change for the RIB (applied by its owner, the control thread).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Install this route (add, or replace the mirror's route of the prefix).
    Replace(Route),
    /// The mirror has no route for this prefix any more.
    Delete(Prefix),
}

/// Counts of what the mirror saw and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Route messages of the mirrored table that were wanted.
    pub wanted: u64,
    /// Not unicast.
    pub not_unicast: u64,
    /// Left out by the protocol filter.
    pub protocol: u64,
    /// No next hop on a router interface.
    pub unmapped: u64,
    /// Nexthop objects or unusable hops.
    pub bad_next_hops: u64,
    /// Full resynchronisations (start-up dump included).
    pub resyncs: u64,
}

impl MirrorStats {
    fn count(&mut self, r: &Result<Route, Skip>) {
        match r {
            Ok(_) => self.wanted += 1,
            Err(Skip::NotUnicast) => self.not_unicast += 1,
            Err(Skip::Protocol) => self.protocol += 1,
            Err(Skip::Unmapped) => self.unmapped += 1,
            Err(Skip::BadNextHops) | Err(Skip::Other) => self.bad_next_hops += 1,
        }
    }
}

/// The mirror's state: every wanted kernel route, by prefix then (priority, TOS); the route
/// installed for a prefix is the first of its list (kept sorted; nearly always one route, so
/// held inline). The map hashes with foldhash, seeded at random per map (the prefixes come
/// from the kernel, so from a routing daemon's peers: not a fixed, guessable hash).
#[derive(Debug, Default)]
pub struct Mirror {
    routes: HashMap<Prefix, Routes, foldhash::fast::RandomState>,
    stats: MirrorStats,
}

/// A route's place among its prefix's: (priority, TOS).
type Slot = (u32, u8);

/// A prefix's routes, by slot.
type Routes = SmallVec<[(Slot, Route); 1]>;

impl Mirror {
    /// An empty mirror.
    pub fn new() -> Mirror {
        Mirror::default()
    }

    /// What it counted.
    pub fn stats(&self) -> MirrorStats {
        self.stats
    }

    /// Prefixes it currently installs.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether it installs nothing.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Counts a full resynchronisation done by handing an empty mirror every route of a dump
    /// through [`Mirror::new_route`] (which reaches the state [`Mirror::resync`] would, one
    /// change at a time).
    pub fn note_resync(&mut self) {
        self.stats.resyncs += 1;
    }

    fn insert(list: &mut Routes, slot: Slot, route: Route) {
        match list.binary_search_by_key(&slot, |(s, _)| *s) {
            Ok(i) => list[i].1 = route,
            Err(i) => list.insert(i, (slot, route)),
        }
    }

    /// A route was added or replaced in the kernel (`RTM_NEWROUTE`) with what `decode` made
    /// of it; returns the RIB change, if the prefix's installed route changed.
    pub fn new_route(&mut self, key: Key, r: Result<Route, Skip>) -> Option<Change> {
        self.stats.count(&r);
        self.set(key.prefix, (key.priority, key.tos), r.ok())
    }

    /// A route was deleted in the kernel (`RTM_DELROUTE`).
    pub fn del_route(&mut self, key: Key) -> Option<Change> {
        self.set(key.prefix, (key.priority, key.tos), None)
    }

    /// Puts `route` at `slot` of `prefix`'s list (`None`: takes the slot's route out) and
    /// returns the RIB change if the prefix's installed route (the list's first) changed. The
    /// only route copied is the one handed on.
    fn set(&mut self, prefix: Prefix, slot: Slot, route: Option<Route>) -> Option<Change> {
        let mut o = match self.routes.entry(prefix) {
            Entry::Occupied(o) => o,
            Entry::Vacant(v) => {
                let r = route?;
                v.insert(smallvec![(slot, r.clone())]);
                return Some(Change::Replace(r));
            }
        };
        let l = o.get_mut();
        let first_changed = match (l.binary_search_by_key(&slot, |(s, _)| *s), route) {
            (Ok(i), Some(r)) => {
                let changed = i == 0 && l[0].1 != r;
                l[i].1 = r;
                changed
            }
            (Err(i), Some(r)) => {
                let changed = i == 0 && l[0].1 != r;
                l.insert(i, (slot, r));
                changed
            }
            (Ok(i), None) => {
                let (_, old) = l.remove(i);
                if l.is_empty() {
                    o.remove();
                    return Some(Change::Delete(prefix));
                }
                i == 0 && l[0].1 != old
            }
            (Err(_), None) => false,
        };
        first_changed.then(|| Change::Replace(l[0].1.clone()))
    }

    /// A full dump of the table (at start, or after the socket overran): the state becomes
    /// exactly the dump's, and the changes from the previous state are returned (deletions
    /// first).
    pub fn resync(&mut self, dump: impl IntoIterator<Item = (Key, Result<Route, Skip>)>) -> Vec<Change> {
        self.stats.resyncs += 1;
        let old = std::mem::take(&mut self.routes);
        for (key, r) in dump {
            self.stats.count(&r);
            if let Ok(route) = r {
                Self::insert(
                    self.routes.entry(key.prefix).or_default(),
                    (key.priority, key.tos),
                    route,
                );
            }
        }
        let mut out: Vec<Change> = old
            .keys()
            .filter(|p| !self.routes.contains_key(p))
            .map(|p| Change::Delete(*p))
            .collect();
        for (p, m) in &self.routes {
            let now = &m.first().expect("no empty list is kept").1;
            if old.get(p).and_then(|o| o.first()).map(|(_, r)| r) != Some(now) {
                out.push(Change::Replace(now.clone()));
            }
        }
        out
    }

    /// The routes it installs, one per prefix.
    pub fn installed(&self) -> impl Iterator<Item = &Route> {
        self.routes.values().filter_map(|m| m.first()).map(|(_, r)| r)
    }
}
