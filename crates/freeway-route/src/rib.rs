//! The RIB: the control side's table of routes, and the single writer of the FIB.
//!
//! One route per prefix (`add` refuses an existing prefix like `ip route add`; `replace` adds
//! or overwrites like `ip route replace`), with one or more next hops (more than one: ECMP)
//! and a kind. Every change is applied to the FIB immediately and in full, then the FIB's
//! generation is bumped (`Release`), so per-worker route caches refill on their next lookup.
//! Inside [`Rib::batch`] the bump waits for the end of the batch: many changes (a routing
//! daemon's burst, a full table) are one publication, and the workers' caches refill once, not
//! once per route.
//!
//! # Invariants
//! * The FIB answers, for every address, the next-hop group of the longest RIB prefix
//!   containing it (checked against a linear-scan model in `tests/lpm_model.rs`).
//! * Each RIB route holds one user of its next-hop group; a group whose last user goes is
//!   retired only after no FIB entry names it (see [`crate::nh`]).
//! * A refused change (full pools, bad next hops) leaves RIB and FIB untouched. When a pool
//!   is full only because retired groups wait for their grace period, the change first waits
//!   for them, at most [`crate::epoch::RETRY_LIMIT`] (the control thread may wait; workers never
//!   do), then is refused and counted in [`RibStats::refused`].
//!
//! Threads: a `Rib` is owned by one control thread (`&mut self` for every change); it is
//! `Send`, not `Clone`. Workers only ever see the [`Fib`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use crate::dir::{leaf, Dir, DirFull};
use crate::epoch;
use crate::fib::{Fib, FibConfig};
use crate::nh::{Map, NextHop, NhError, NhWriter, MAX_PATHS};
use crate::prefix::{mask6, Prefix, Prefix4, Prefix6};

/// Where a route came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteKind {
    /// A prefix of a router interface (next hops without gateway).
    Connected,
    /// Configured (or generated, for benchmarks).
    Static,
    /// Added by the control socket (`freeway ctl route add|replace`).
    Ctl,
    /// Mirrored from the kernel's routing table; the kernel's route protocol number
    /// (`RTPROT_*`: 2 kernel, 3 boot, 4 static, 12 bird, ...).
    Linux(u8),
}

impl RouteKind {
    /// The `protocol` of `ip route` (`proto NAME`): `kernel` for connected routes, `static`
    /// for configured ones, `ctl` for the control socket's, and the kernel's own protocol
    /// name (iproute2's `rt_protos`) or number for mirrored ones.
    pub fn protocol(self) -> std::borrow::Cow<'static, str> {
        match self {
            RouteKind::Connected => "kernel".into(),
            RouteKind::Static => "static".into(),
            RouteKind::Ctl => "ctl".into(),
            RouteKind::Linux(p) => match rt_proto_name(p) {
                Some(n) => n.into(),
                None => p.to_string().into(),
            },
        }
    }

    /// Who put the route in: `connected`, `config`, `ctl` or `linux`.
    pub fn origin(self) -> &'static str {
        match self {
            RouteKind::Connected => "connected",
            RouteKind::Static => "config",
            RouteKind::Ctl => "ctl",
            RouteKind::Linux(_) => "linux",
        }
    }
}

/// iproute2's names of the kernel's route protocols (`/usr/share/iproute2/rt_protos`).
const RT_PROTOS: [(u8, &str); 19] = [
    (1, "redirect"),
    (2, "kernel"),
    (3, "boot"),
    (4, "static"),
    (8, "gated"),
    (9, "ra"),
    (10, "mrt"),
    (11, "zebra"),
    (12, "bird"),
    (13, "dnrouted"),
    (14, "xorp"),
    (15, "ntk"),
    (16, "dhcp"),
    (42, "babel"),
    (186, "bgp"),
    (187, "isis"),
    (188, "ospf"),
    (189, "rip"),
    (192, "eigrp"),
];

/// The iproute2 name of route protocol `p`, if it has one.
pub fn rt_proto_name(p: u8) -> Option<&'static str> {
    RT_PROTOS.iter().find(|(n, _)| *n == p).map(|(_, s)| *s)
}

/// The route protocol named `s` (an iproute2 name or a number).
pub fn rt_proto_parse(s: &str) -> Option<u8> {
    s.parse()
        .ok()
        .or_else(|| RT_PROTOS.iter().find(|(_, n)| *n == s).map(|(p, _)| *p))
}

/// A route: prefix, next hops (several: ECMP), kind, informational metric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Route {
    /// Destination prefix.
    pub prefix: Prefix,
    /// Next hops (sorted and deduplicated when installed).
    pub hops: Vec<NextHop>,
    /// Where it came from.
    pub kind: RouteKind,
    /// Shown by dumps; not used for selection (one route per prefix).
    pub metric: u32,
}

impl Route {
    /// A static route.
    pub fn new(prefix: Prefix, hops: Vec<NextHop>) -> Route {
        Route {
            prefix,
            hops,
            kind: RouteKind::Static,
            metric: 0,
        }
    }

    /// A connected route: the prefix is on `iface`, no gateway.
    pub fn connected(prefix: Prefix, iface: u16) -> Route {
        Route {
            prefix,
            hops: vec![NextHop::connected(iface)],
            kind: RouteKind::Connected,
            metric: 0,
        }
    }
}

/// Why a change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// `add` of a prefix already present.
    #[error("route {0} exists")]
    Exists(Prefix),
    /// `delete` of a prefix not present.
    #[error("no route {0}")]
    NotFound(Prefix),
    /// No next hop, or more than [`MAX_PATHS`].
    #[error("route {0}: 1 to {max} next hops required", max = MAX_PATHS)]
    BadNextHops(Prefix),
    /// A gateway of the other family.
    #[error("route {prefix}: gateway {gateway} is of the other address family")]
    GatewayFamily {
        /// The route's prefix.
        prefix: Prefix,
        /// The offending gateway.
        gateway: IpAddr,
    },
    /// The next-hop group table is full.
    #[error("next-hop group table full")]
    NextHopTableFull,
    /// The FIB's group pool for this family is full (raise `FibConfig::v4_groups`/`v6_groups`).
    #[error("route {0}: FIB group pool full")]
    FibFull(Prefix),
}

/// What the RIB did and refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RibStats {
    /// Routes added.
    pub added: u64,
    /// Routes replaced in place.
    pub replaced: u64,
    /// Routes deleted.
    pub deleted: u64,
    /// Changes refused (full pools, bad next hops; not `Exists`/`NotFound`).
    pub refused: u64,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    nh: u32,
    kind: RouteKind,
    metric: u32,
}

/// The routing table (control side) and FIB writer.
pub struct Rib {
    fib: Fib,
    nh: NhWriter,
    /// Per family (0: IPv4, 1: IPv6), per length: left-aligned network -> entry.
    maps: [Vec<Map<u128, Entry>>; 2],
    stats: RibStats,
    /// Inside [`Rib::batch`]: the generation bump waits for its end.
    holding: bool,
    /// A change was made while holding.
    held_change: bool,
}

impl fmt::Debug for Rib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rib")
            .field("routes", &self.len())
            .field("generation", &self.generation())
            .finish()
    }
}

/// Left-aligned key of a prefix, and its family index.
fn key_of(p: &Prefix) -> (usize, u128, u32) {
    match p {
        Prefix::V4(p) => (0, u128::from(p.bits()) << 96, u32::from(p.len())),
        Prefix::V6(p) => (1, p.bits(), u32::from(p.len())),
    }
}

fn prefix_of(fam: usize, key: u128, len: u32) -> Prefix {
    if fam == 0 {
        Prefix::V4(Prefix4::new_truncate(Ipv4Addr::from((key >> 96) as u32), len as u8).expect("len <= 32"))
    } else {
        Prefix::V6(Prefix6::new_truncate(Ipv6Addr::from(key), len as u8).expect("len <= 128"))
    }
}

impl Rib {
    /// An empty RIB and the FIB it writes.
    pub fn new(config: FibConfig) -> (Rib, Fib) {
        let (nh, table) = NhWriter::new(config.nh_groups);
        let fib = Fib::new(config, table);
        let rib = Rib {
            fib: fib.clone(),
            nh,
            maps: [
                (0..=32).map(|_| Map::default()).collect(),
                (0..=128).map(|_| Map::default()).collect(),
            ],
            stats: RibStats::default(),
            holding: false,
            held_change: false,
        };
        (rib, fib)
    }

    /// The FIB this RIB writes.
    pub fn fib(&self) -> &Fib {
        &self.fib
    }

    /// The current route generation.
    pub fn generation(&self) -> u64 {
        self.fib.generation()
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.maps.iter().flatten().map(Map::len).sum()
    }

    /// Whether there is no route.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct next-hop groups in use.
    pub fn nh_groups(&self) -> usize {
        self.nh.len()
    }

    /// Counts of changes.
    pub fn stats(&self) -> RibStats {
        self.stats
    }

    fn dir(&self, fam: usize) -> &Dir {
        if fam == 0 {
            &self.fib.shared.v4
        } else {
            &self.fib.shared.v6
        }
    }

    fn bump(&mut self) {
        if self.holding {
            self.held_change = true;
            return;
        }
        self.publish();
    }

    fn publish(&self) {
        // Release: every entry store of the change happens-before a reader that sees the new
        // generation (single writer, so load + store would do; fetch_add is as cheap here).
        self.fib
            .shared
            .generation
            .fetch_add(1, freeway_sync::atomic::Ordering::Release);
    }

    /// The route's hops made canonical (sorted, deduplicated: in place, no copy), checked.
    fn validate(prefix: Prefix, mut hops: Vec<NextHop>) -> Result<Vec<NextHop>, RouteError> {
        hops.sort_unstable();
        hops.dedup();
        if hops.is_empty() || hops.len() > MAX_PATHS {
            return Err(RouteError::BadNextHops(prefix));
        }
        for h in &hops {
            if let Some(gw) = h.gateway {
                if gw.is_ipv4() != prefix.is_v4() {
                    return Err(RouteError::GatewayFamily { prefix, gateway: gw });
                }
            }
        }
        Ok(hops)
    }

    /// Runs `f` on this RIB as one publication: every change `f` makes reaches the FIB at
    /// once (workers may meet some of them early, as they may meet a single change half
    /// done), and the generation moves once, at the end, if anything changed. Nested batches
    /// are part of the outer one.
    pub fn batch<R>(&mut self, f: impl FnOnce(&mut Rib) -> R) -> R {
        if self.holding {
            return f(self);
        }
        self.holding = true;
        self.held_change = false;
        // Published even if `f` panics, so no change is left unannounced.
        struct Publish<'a>(&'a mut Rib);
        impl Drop for Publish<'_> {
            fn drop(&mut self) {
                self.0.holding = false;
                if std::mem::take(&mut self.0.held_change) {
                    self.0.publish();
                }
            }
        }
        let p = Publish(self);
        f(&mut *p.0)
    }

    /// Adds a route; refuses an existing prefix.
    pub fn add(&mut self, route: Route) -> Result<(), RouteError> {
        self.install(route, false)
    }

    /// Adds a route or replaces the route of the same prefix.
    pub fn replace(&mut self, route: Route) -> Result<(), RouteError> {
        self.install(route, true)
    }

    fn install(&mut self, route: Route, allow_replace: bool) -> Result<(), RouteError> {
        let (fam, key, len) = key_of(&route.prefix);
        let old = self.maps[fam][len as usize].get(&key).copied();
        if old.is_some() && !allow_replace {
            return Err(RouteError::Exists(route.prefix));
        }
        let hops = Self::validate(route.prefix, route.hops).inspect_err(|_| self.stats.refused += 1)?;
        let idx = match self.nh.acquire_canonical(hops) {
            Ok(i) => i,
            Err(NhError::Full) => {
                self.stats.refused += 1;
                return Err(RouteError::NextHopTableFull);
            }
            Err(NhError::BadSize) => unreachable!("validated"),
        };
        if let Err(DirFull) = self.dir(fam).insert(key, len, idx) {
            self.nh.release(idx, &epoch::pin());
            self.stats.refused += 1;
            return Err(RouteError::FibFull(route.prefix));
        }
        self.maps[fam][len as usize].insert(
            key,
            Entry {
                nh: idx,
                kind: route.kind,
                metric: route.metric,
            },
        );
        match old {
            Some(o) => {
                self.nh.release(o.nh, &epoch::pin());
                self.stats.replaced += 1;
            }
            None => self.stats.added += 1,
        }
        // Last: the change (entries, and the retired mark of a released group) is complete.
        self.bump();
        Ok(())
    }

    /// The leaf of the longest route strictly shorter than `len` covering `key`, or 0.
    fn covering_leaf(&self, fam: usize, key: u128, len: u32) -> u32 {
        for l in (0..len).rev() {
            if let Some(e) = self.maps[fam][l as usize].get(&(key & mask6(l as u8))) {
                return leaf(l, e.nh);
            }
        }
        0
    }

    /// Deletes the route of `prefix`, returning it.
    pub fn delete(&mut self, prefix: Prefix) -> Result<Route, RouteError> {
        let (fam, key, len) = key_of(&prefix);
        let Some(e) = self.maps[fam][len as usize].remove(&key) else {
            return Err(RouteError::NotFound(prefix));
        };
        let route = self.route_of(fam, key, len, &e);
        let repl = self.covering_leaf(fam, key, len);
        let guard = epoch::pin();
        self.dir(fam).remove(key, len, repl, &guard);
        self.nh.release(e.nh, &guard);
        self.bump();
        self.stats.deleted += 1;
        Ok(route)
    }

    /// Deletes every route for which `pred` is true; returns how many.
    pub fn flush_where(&mut self, mut pred: impl FnMut(&Route) -> bool) -> usize {
        let mut victims: Vec<Prefix> = self.iter_unsorted().filter(|r| pred(r)).map(|r| r.prefix).collect();
        // Longest first: groups collapse as early as possible.
        victims.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let n = victims.len();
        for p in victims {
            self.delete(p).expect("listed above");
        }
        n
    }

    /// Deletes every route; returns how many.
    pub fn flush(&mut self) -> usize {
        self.flush_where(|_| true)
    }

    fn route_of(&self, fam: usize, key: u128, len: u32, e: &Entry) -> Route {
        Route {
            prefix: prefix_of(fam, key, len),
            hops: self.nh.hops(e.nh).map(<[NextHop]>::to_vec).unwrap_or_default(),
            kind: e.kind,
            metric: e.metric,
        }
    }

    fn iter_unsorted(&self) -> impl Iterator<Item = Route> + '_ {
        self.maps.iter().enumerate().flat_map(move |(fam, lens)| {
            lens.iter()
                .enumerate()
                .flat_map(move |(len, m)| m.iter().map(move |(k, e)| self.route_of(fam, *k, len as u32, e)))
        })
    }

    /// The route of exactly `prefix`.
    pub fn get(&self, prefix: Prefix) -> Option<Route> {
        let (fam, key, len) = key_of(&prefix);
        self.maps[fam][len as usize]
            .get(&key)
            .map(|e| self.route_of(fam, key, len, e))
    }

    /// The kind of the route of exactly `prefix`, if there is one.
    pub fn kind_of(&self, prefix: Prefix) -> Option<RouteKind> {
        let (fam, key, len) = key_of(&prefix);
        self.maps[fam][len as usize].get(&key).map(|e| e.kind)
    }

    /// Longest-prefix match on the control side (hash probes per length; for tools and tests,
    /// not for workers).
    pub fn lookup(&self, dst: IpAddr) -> Option<Route> {
        let (fam, key, width) = match dst {
            IpAddr::V4(a) => (0, u128::from(u32::from(a)) << 96, 32),
            IpAddr::V6(a) => (1, u128::from(a), 128),
        };
        for l in (0..=width).rev() {
            let k = key & mask6(l as u8);
            if let Some(e) = self.maps[fam][l as usize].get(&k) {
                return Some(self.route_of(fam, k, l, e));
            }
        }
        None
    }

    /// Every route, IPv4 first, ordered by address then length.
    pub fn routes(&self) -> Vec<Route> {
        let mut v: Vec<Route> = self.iter_unsorted().collect();
        v.sort_by_key(|r| r.prefix);
        v
    }

    /// A dump in the style of `ip route`; `names` maps interface indices to device names
    /// (and may tell connected routes' source addresses: [`Ifaces`]).
    pub fn show<F: Ifaces>(&self, names: F) -> Show<F> {
        Show {
            routes: self.routes(),
            names,
        }
    }

    /// Records for `-j` output, in the shape of `ip -j route`.
    pub fn records(&self, names: impl Ifaces) -> Vec<RouteRecord> {
        self.routes().iter().map(|r| RouteRecord::new(r, &names)).collect()
    }
}

/// What a dump needs of the router's interfaces: each one's name and, for a connected IPv4
/// route, the interface's own address in the prefix (`ip route`'s `src`, `prefsrc` in JSON).
/// A closure from index to name is one (without source addresses).
pub trait Ifaces {
    /// The device name of interface `iface`.
    fn name(&self, iface: u16) -> String;
    /// The address of interface `iface` inside `prefix`, if it has one.
    fn prefsrc(&self, _iface: u16, _prefix: &Prefix) -> Option<IpAddr> {
        None
    }
}

impl<F: Fn(u16) -> String> Ifaces for F {
    fn name(&self, iface: u16) -> String {
        self(iface)
    }
}

/// The `scope link` of an IPv4 route without a gateway and the `src` of a connected one, as
/// `ip route` shows them (the kernel's IPv6 routes have neither).
fn link_scope(r: &Route, names: &impl Ifaces) -> (Option<&'static str>, Option<IpAddr>) {
    if !r.prefix.is_v4() || r.hops.iter().any(|h| h.gateway.is_some()) {
        return (None, None);
    }
    let src = match (r.kind, r.hops.first()) {
        (RouteKind::Connected, Some(h)) => names.prefsrc(h.iface, &r.prefix),
        _ => None,
    };
    (Some("link"), src)
}

fn dst_string(p: &Prefix) -> String {
    if p.len() == 0 {
        "default".to_string()
    } else {
        p.to_string()
    }
}

/// A printable dump (see [`Rib::show`]). One route per line; ECMP routes continue on
/// `\tnexthop via ... dev ...` lines.
pub struct Show<F> {
    routes: Vec<Route>,
    names: F,
}

impl<F: Ifaces> fmt::Display for Show<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.routes {
            write!(f, "{}", dst_string(&r.prefix))?;
            let tail = |f: &mut fmt::Formatter<'_>| -> fmt::Result {
                write!(f, " proto {}", r.kind.protocol())?;
                let (scope, src) = link_scope(r, &self.names);
                if let Some(scope) = scope {
                    write!(f, " scope {scope}")?;
                }
                if let Some(src) = src {
                    write!(f, " src {src}")?;
                }
                if r.metric != 0 {
                    write!(f, " metric {}", r.metric)?;
                }
                Ok(())
            };
            if let [h] = r.hops.as_slice() {
                if let Some(gw) = h.gateway {
                    write!(f, " via {gw}")?;
                }
                write!(f, " dev {}", self.names.name(h.iface))?;
                tail(f)?;
                writeln!(f)?;
            } else {
                tail(f)?;
                writeln!(f)?;
                for h in &r.hops {
                    write!(f, "\tnexthop")?;
                    if let Some(gw) = h.gateway {
                        write!(f, " via {gw}")?;
                    }
                    writeln!(f, " dev {} weight 1", self.names.name(h.iface))?;
                }
            }
        }
        Ok(())
    }
}

/// One next hop of a [`RouteRecord`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HopRecord {
    /// Gateway, absent for connected hops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Device name.
    pub dev: String,
    /// Interface index (not in `ip -j route`'s shape: not serialised).
    #[serde(skip)]
    pub iface: u16,
    /// The hop's weight: 1, as ECMP hops are equal.
    pub weight: u32,
    /// `ip -j route`'s hop flags (`onlink`, `linkdown`, ...): none here.
    pub flags: [&'static str; 0],
}

/// A route as JSON, shaped like `ip -j route` (single hop: `gateway`/`dev` inline; ECMP:
/// `nexthops`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouteRecord {
    /// Destination (`default` for /0).
    pub dst: String,
    /// Gateway of a single-hop route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Device of a single-hop route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// iproute2's `protocol`: `kernel` (connected), `static` (configured), `ctl` (control
    /// socket), or the kernel's protocol of a mirrored route (`bird`, `static`, `boot`, ...).
    pub protocol: String,
    /// `link` for an IPv4 route without a gateway (connected, or `dev IFACE`), as the kernel's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<&'static str>,
    /// The interface's own address of a connected IPv4 route (`src` in text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefsrc: Option<IpAddr>,
    /// Who put the route in: `connected`, `config`, `ctl` or `linux` (Freeway's own key).
    pub origin: &'static str,
    /// Metric; absent when 0, as in `ip -j route`.
    #[serde(skip_serializing_if = "is_zero")]
    pub metric: u32,
    /// `ip -j route`'s route flags (`onlink`, `linkdown`, ...): none here.
    pub flags: [&'static str; 0],
    /// Hops of an ECMP route.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nexthops: Vec<HopRecord>,
}

impl RouteRecord {
    /// The record of a route.
    pub fn new(r: &Route, names: &impl Ifaces) -> RouteRecord {
        let single = r.hops.len() == 1;
        let (scope, prefsrc) = link_scope(r, names);
        RouteRecord {
            dst: dst_string(&r.prefix),
            gateway: if single { r.hops[0].gateway } else { None },
            dev: single.then(|| names.name(r.hops[0].iface)),
            protocol: r.kind.protocol().into_owned(),
            scope,
            prefsrc,
            origin: r.kind.origin(),
            metric: r.metric,
            flags: [],
            nexthops: if single {
                Vec::new()
            } else {
                r.hops
                    .iter()
                    .map(|h| HopRecord {
                        gateway: h.gateway,
                        dev: names.name(h.iface),
                        iface: h.iface,
                        weight: 1,
                        flags: [],
                    })
                    .collect()
            },
        }
    }
}

fn is_zero(m: &u32) -> bool {
    *m == 0
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    fn via(gw: &str, iface: u16) -> NextHop {
        NextHop::via(gw.parse().unwrap(), iface)
    }

    fn small() -> FibConfig {
        FibConfig {
            v4_groups: 64,
            v6_groups: 256,
            nh_groups: 64,
        }
    }

    #[test]
    fn add_replace_delete_and_generation() {
        let (mut rib, fib) = Rib::new(small());
        let g0 = fib.generation();
        rib.add(Route::new(p("10.0.0.0/8"), vec![via("192.0.2.1", 1)])).unwrap();
        assert_eq!(fib.generation(), g0 + 1);
        assert_eq!(
            rib.add(Route::new(p("10.0.0.0/8"), vec![via("192.0.2.2", 1)])),
            Err(RouteError::Exists(p("10.0.0.0/8")))
        );
        assert_eq!(fib.next_hop("10.1.2.3".parse().unwrap(), 0), Some(via("192.0.2.1", 1)));
        rib.replace(Route::new(p("10.0.0.0/8"), vec![via("192.0.2.2", 2)]))
            .unwrap();
        assert_eq!(fib.next_hop("10.1.2.3".parse().unwrap(), 0), Some(via("192.0.2.2", 2)));
        rib.add(Route::connected(p("10.1.2.0/28"), 3)).unwrap();
        assert_eq!(
            fib.next_hop("10.1.2.3".parse().unwrap(), 0),
            Some(NextHop::connected(3))
        );
        assert_eq!(
            rib.lookup("10.1.2.3".parse().unwrap()).unwrap().prefix,
            p("10.1.2.0/28")
        );
        let r = rib.delete(p("10.1.2.0/28")).unwrap();
        assert_eq!(r.kind, RouteKind::Connected);
        assert_eq!(fib.next_hop("10.1.2.3".parse().unwrap(), 0), Some(via("192.0.2.2", 2)));
        assert_eq!(
            rib.delete(p("10.1.2.0/28")),
            Err(RouteError::NotFound(p("10.1.2.0/28")))
        );
        assert_eq!(rib.stats().added, 2);
        assert_eq!(rib.stats().replaced, 1);
        assert_eq!(rib.stats().deleted, 1);
        assert_eq!(fib.generation(), g0 + 4);
        assert_eq!(fib.memory().v4_groups, 0, "the /28's group collapsed");
    }

    #[test]
    fn a_batch_is_one_publication() {
        let (mut rib, fib) = Rib::new(small());
        let g0 = fib.generation();
        let n = rib.batch(|rib| {
            for i in 0..100u32 {
                let pre = Prefix::new(std::net::Ipv4Addr::from((10 << 24) | (i << 8)).into(), 24).unwrap();
                rib.add(Route::new(pre, vec![via("192.0.2.1", 1)])).unwrap();
            }
            // Nested: part of the outer batch.
            rib.batch(|rib| rib.delete(p("10.0.99.0/24")).unwrap());
            assert_eq!(fib.generation(), g0, "nothing announced inside the batch");
            rib.len()
        });
        assert_eq!(n, 99);
        assert_eq!(fib.generation(), g0 + 1);
        assert_eq!(fib.next_hop("10.0.42.1".parse().unwrap(), 0), Some(via("192.0.2.1", 1)));
        assert_eq!(fib.next_hop("10.0.99.1".parse().unwrap(), 0), None);
        // A batch that changed nothing announces nothing; changes after it are announced alone.
        rib.batch(|rib| assert!(rib.delete(p("11.0.0.0/8")).is_err()));
        assert_eq!(fib.generation(), g0 + 1);
        rib.delete(p("10.0.42.0/24")).unwrap();
        assert_eq!(fib.generation(), g0 + 2);
    }

    #[test]
    fn refusals_leave_everything_untouched() {
        let (mut rib, fib) = Rib::new(FibConfig {
            v4_groups: 1,
            v6_groups: 4,
            nh_groups: 2,
        });
        assert!(matches!(
            rib.add(Route::new(p("10.0.0.0/8"), vec![via("2001:db8::1", 1)])),
            Err(RouteError::GatewayFamily { .. })
        ));
        assert_eq!(
            rib.add(Route::new(p("10.0.0.0/8"), vec![])),
            Err(RouteError::BadNextHops(p("10.0.0.0/8")))
        );
        rib.add(Route::new(p("10.0.0.1/32"), vec![via("192.0.2.1", 1)]))
            .unwrap();
        let g = fib.generation();
        assert_eq!(
            rib.add(Route::new(p("10.0.1.1/32"), vec![via("192.0.2.1", 1)])),
            Err(RouteError::FibFull(p("10.0.1.1/32")))
        );
        rib.add(Route::new(p("10.0.0.0/24"), vec![via("192.0.2.2", 1)]))
            .unwrap();
        assert_eq!(
            rib.add(Route::new(p("11.0.0.0/24"), vec![via("192.0.2.3", 1)])),
            Err(RouteError::NextHopTableFull)
        );
        assert_eq!(fib.generation(), g + 1);
        assert_eq!(rib.len(), 2);
        assert_eq!(rib.stats().refused, 4);
        assert_eq!(fib.next_hop("10.0.1.1".parse().unwrap(), 0), None);
        assert_eq!(fib.next_hop("11.0.0.1".parse().unwrap(), 0), None);
    }

    #[test]
    fn dump_like_ip_route() {
        let (mut rib, _fib) = Rib::new(small());
        rib.add(Route::new(p("0.0.0.0/0"), vec![via("192.0.2.1", 0)])).unwrap();
        rib.add(Route::connected(p("192.0.2.0/24"), 0)).unwrap();
        rib.add(Route::new(
            p("10.0.0.0/8"),
            vec![via("192.0.2.2", 0), via("198.51.100.1", 1)],
        ))
        .unwrap();
        let mut r6 = Route::new(p("2001:db8::/32"), vec![via("fe80::1", 1)]);
        r6.metric = 20;
        rib.add(r6).unwrap();
        let names = |i: u16| format!("p{i}");
        let s = rib.show(names).to_string();
        assert_eq!(
            s,
            "default via 192.0.2.1 dev p0 proto static\n\
             10.0.0.0/8 proto static\n\
             \tnexthop via 192.0.2.2 dev p0 weight 1\n\
             \tnexthop via 198.51.100.1 dev p1 weight 1\n\
             192.0.2.0/24 dev p0 proto kernel scope link\n\
             2001:db8::/32 via fe80::1 dev p1 proto static metric 20\n"
        );
        let j = serde_json::to_value(rib.records(names)).unwrap();
        assert_eq!(j[0]["dst"], "default");
        assert_eq!(j[0]["gateway"], "192.0.2.1");
        assert_eq!(j[0]["dev"], "p0");
        assert_eq!(j[1]["nexthops"][1]["gateway"], "198.51.100.1");
        assert!(j[1].get("dev").is_none());
        assert_eq!(j[2]["protocol"], "kernel");
        assert!(j[2].get("gateway").is_none());
        assert_eq!(rib.flush(), 4);
        assert!(rib.is_empty());
        assert_eq!(rib.nh_groups(), 0);
    }

    /// Interfaces that know their addresses: connected IPv4 routes get `src`/`prefsrc`.
    struct Addrs;

    impl Ifaces for Addrs {
        fn name(&self, iface: u16) -> String {
            format!("p{iface}")
        }

        fn prefsrc(&self, iface: u16, prefix: &Prefix) -> Option<IpAddr> {
            let a: IpAddr = ["192.0.2.1", "2001:db8::1"][usize::from(iface)].parse().unwrap();
            prefix.contains(a).then_some(a)
        }
    }

    #[test]
    fn connected_ipv4_routes_have_a_link_scope_and_a_source_as_the_kernels() {
        let (mut rib, _fib) = Rib::new(small());
        rib.add(Route::connected(p("192.0.2.0/24"), 0)).unwrap();
        rib.add(Route::connected(p("2001:db8::/64"), 1)).unwrap();
        // A route through a device, without a gateway: scope link, no source.
        let mut dev = Route::connected(p("198.51.100.0/24"), 0);
        dev.kind = RouteKind::Ctl;
        rib.add(dev).unwrap();
        assert_eq!(
            rib.show(Addrs).to_string(),
            "192.0.2.0/24 dev p0 proto kernel scope link src 192.0.2.1\n\
             198.51.100.0/24 dev p0 proto ctl scope link\n\
             2001:db8::/64 dev p1 proto kernel\n"
        );
        let j = serde_json::to_value(rib.records(Addrs)).unwrap();
        assert_eq!(j[0]["scope"], "link");
        assert_eq!(j[0]["prefsrc"], "192.0.2.1");
        assert_eq!(j[0]["flags"], serde_json::json!([]));
        assert!(j[0].get("metric").is_none(), "metric 0 is not shown: {j}");
        assert_eq!(j[1]["scope"], "link");
        assert!(j[1].get("prefsrc").is_none(), "{j}");
        assert!(j[2].get("scope").is_none() && j[2].get("prefsrc").is_none(), "{j}");
    }

    #[test]
    fn every_origin_is_shown_with_its_protocol() {
        let (mut rib, _fib) = Rib::new(small());
        let mut r = |s: &str, kind| {
            let mut x = Route::new(p(s), vec![via("192.0.2.1", 0)]);
            x.kind = kind;
            rib.add(x).unwrap();
        };
        r("10.1.0.0/16", RouteKind::Ctl);
        r("10.2.0.0/16", RouteKind::Linux(12));
        r("10.3.0.0/16", RouteKind::Linux(4));
        r("10.4.0.0/16", RouteKind::Linux(99));
        r("10.5.0.0/16", RouteKind::Static);
        let s = rib.show(|i| format!("p{i}")).to_string();
        assert_eq!(
            s,
            "10.1.0.0/16 via 192.0.2.1 dev p0 proto ctl\n\
             10.2.0.0/16 via 192.0.2.1 dev p0 proto bird\n\
             10.3.0.0/16 via 192.0.2.1 dev p0 proto static\n\
             10.4.0.0/16 via 192.0.2.1 dev p0 proto 99\n\
             10.5.0.0/16 via 192.0.2.1 dev p0 proto static\n"
        );
        let j = serde_json::to_value(rib.records(|i| format!("p{i}"))).unwrap();
        let got: Vec<(&str, &str)> = j
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["protocol"].as_str().unwrap(), r["origin"].as_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("ctl", "ctl"),
                ("bird", "linux"),
                ("static", "linux"),
                ("99", "linux"),
                ("static", "config")
            ]
        );
        assert_eq!(rt_proto_parse("bird"), Some(12));
        assert_eq!(rt_proto_parse("200"), Some(200));
        assert_eq!(rt_proto_parse("nonesuch"), None);
    }
}
