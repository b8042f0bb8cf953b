//! `[router]`, `[[interface]]`, `[[route]]` and `[[neigh]]`: the router's part of the config.
//!
//! ```toml
//! [router]
//! mac = "02:fe:00:00:00:01"   # the router MAC of every interface that sets none
//! route_cache = true          # per-worker route cache (false = full FIB lookup per packet)
//! icmp_rate = 100             # ICMP errors per second per worker, and their burst
//! icmp_burst = 50
//! neigh_limit = 4096
//!
//! [[interface]]               # a router interface on a VLAN of the bridge (an SVI)
//! name = "v10"
//! vlan = 10
//! addr = ["10.0.10.1/24", "2001:db8:10::1/64"]
//! mtu = 1500                 # IP MTU (68..=9216, at least 1280 with IPv6; default 1500)
//!
//! [[route]]
//! dst = "0.0.0.0/0"
//! via = ["10.0.10.254", "10.0.10.253"]   # one or more next hops (ECMP); or `dev` alone
//!
//! [[neigh]]                   # a permanent neighbour entry
//! ip = "10.0.10.254"
//! mac = "02:00:00:00:10:fe"
//! dev = "v10"
//! ```
//!
//! Interfaces live on VLANs: the router is one more member of each interface's VLAN, reached
//! through the bridge by its MAC. A routed port is a port alone in its own access VLAN.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use freeway_bridge::Mac;
use serde::Deserialize;
use toml::Spanned;

/// `[router]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    /// Default router MAC.
    pub mac: Option<Spanned<Mac>>,
    /// Use the per-worker route cache (default true).
    pub route_cache: Option<bool>,
    /// ICMP errors per second per worker.
    pub icmp_rate: Option<Spanned<u32>>,
    /// ICMP error burst per worker.
    pub icmp_burst: Option<Spanned<u32>>,
    /// Most neighbour entries.
    pub neigh_limit: Option<Spanned<usize>>,
}

/// One `[[interface]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    /// Unique name (used by routes and neighbours, and in dumps).
    pub name: Spanned<String>,
    /// The bridge VLAN the interface sits on.
    pub vlan: Spanned<u16>,
    /// Router MAC of this interface (default `[router].mac`).
    pub mac: Option<Spanned<Mac>>,
    /// Addresses with prefix length, IPv4 or IPv6.
    #[serde(default)]
    pub addr: Vec<Spanned<String>>,
    /// IP MTU: the largest IP packet sent on this interface (default 1500; 68..=9216, at
    /// least 1280 with IPv6 addresses).
    #[serde(default)]
    pub mtu: Option<Spanned<u32>>,
}

/// A string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// `via = "10.0.0.1"`
    One(String),
    /// `via = ["10.0.0.1", "10.0.0.2"]`
    Many(Vec<String>),
}

impl OneOrMany {
    fn items(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// One `[[route]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Destination prefix (`default` is accepted for 0.0.0.0/0).
    pub dst: Spanned<String>,
    /// Gateway(s).
    pub via: Option<Spanned<OneOrMany>>,
    /// Output interface (required without `via`; checked against the gateways' subnets).
    pub dev: Option<Spanned<String>>,
}

/// One `[[neigh]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighConfig {
    /// Neighbour address.
    pub ip: Spanned<String>,
    /// Its MAC.
    pub mac: Spanned<Mac>,
    /// The interface it is on.
    pub dev: Spanned<String>,
}

/// A checked interface.
#[derive(Clone, Debug)]
pub struct IfaceSpec {
    /// Name.
    pub name: String,
    /// VLAN.
    pub vlan: u16,
    /// Router MAC.
    pub mac: Mac,
    /// IPv4 addresses.
    pub v4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses.
    pub v6: Vec<(Ipv6Addr, u8)>,
    /// IP MTU.
    pub mtu: u16,
}

/// A checked next hop: an interface index and an optional gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopSpec {
    /// Interface index in [`RouterSpec::interfaces`].
    pub iface: usize,
    /// Gateway; `None` for a directly connected destination.
    pub gateway: Option<IpAddr>,
}

/// A checked route.
#[derive(Clone, Debug)]
pub struct RouteSpec {
    /// Network address (host bits zero).
    pub dst: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Next hops (several = ECMP).
    pub hops: Vec<HopSpec>,
}

/// A checked static neighbour.
#[derive(Clone, Debug)]
pub struct NeighSpec {
    /// Address.
    pub ip: IpAddr,
    /// MAC.
    pub mac: Mac,
    /// Interface index.
    pub iface: usize,
}

/// The router, checked; absent when the config has no interface.
#[derive(Clone, Debug)]
pub struct RouterSpec {
    /// Default router MAC.
    pub mac: Mac,
    /// Per-worker route cache on.
    pub route_cache: bool,
    /// ICMP errors per second per worker.
    pub icmp_rate: u32,
    /// ICMP error burst.
    pub icmp_burst: u32,
    /// Most neighbour entries.
    pub neigh_limit: usize,
    /// Interfaces.
    pub interfaces: Vec<IfaceSpec>,
    /// Routes (connected routes are added by the runtime from the interfaces).
    pub routes: Vec<RouteSpec>,
    /// Static neighbours.
    pub neighs: Vec<NeighSpec>,
}

/// The router MAC used when the config sets none (locally administered).
pub const DEFAULT_ROUTER_MAC: Mac = Mac([0x02, 0xfe, 0, 0, 0, 1]);

/// Parses `addr/len` (or `default`), checking the length for the family. With `host_ok`,
/// host bits may be set (an interface address); otherwise they must be zero (a route).
pub fn parse_prefix(s: &str, host_ok: bool) -> Result<(IpAddr, u8), String> {
    let s = s.trim();
    if s == "default" {
        return Ok((IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
    }
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| format!("{a:?} is not an IPv4 or IPv6 address"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("prefix length {l:?} is not between 0 and {max} for {addr}"))?,
        None if host_ok => return Err(format!("{s:?} needs a prefix length, e.g. {s}/24")),
        None => max,
    };
    let net = mask(addr, len);
    if !host_ok && net != addr {
        return Err(format!("{s} has host bits set (the network is {net}/{len})"));
    }
    Ok((addr, len))
}

/// `addr` with the bits past `len` cleared.
pub fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

fn on_subnet(ip: IpAddr, iface: &IfaceSpec) -> bool {
    match ip {
        IpAddr::V4(a) => iface
            .v4
            .iter()
            .any(|&(n, l)| mask(IpAddr::V4(n), l) == mask(IpAddr::V4(a), l)),
        IpAddr::V6(a) => iface
            .v6
            .iter()
            .any(|&(n, l)| mask(IpAddr::V6(n), l) == mask(IpAddr::V6(a), l)),
    }
}

type Err = (Option<Range<usize>>, String);

/// Checks the router sections. `vlan_used` says whether some port is a member of a VLAN.
pub fn check(
    rc: &RouterConfig,
    ifaces: &[InterfaceConfig],
    routes: &[RouteConfig],
    neighs: &[NeighConfig],
    vlan_used: impl Fn(u16) -> bool,
) -> Result<Option<RouterSpec>, Err> {
    if ifaces.is_empty() {
        if let Some(r) = routes.first() {
            return Err((
                Some(r.dst.span()),
                "route: there is no [[interface]] to route through".into(),
            ));
        }
        if let Some(n) = neighs.first() {
            return Err((Some(n.ip.span()), "neigh: there is no [[interface]]".into()));
        }
        return Ok(None);
    }
    let mut spec = check_router_table(rc)?;
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut by_vlan: HashMap<u16, usize> = HashMap::new();
    for (i, f) in ifaces.iter().enumerate() {
        let iface = check_interface(i, f, ifaces, spec.mac, &mut by_name, &mut by_vlan, &vlan_used)?;
        spec.interfaces.push(iface);
    }
    check_unique_addresses(&spec.interfaces, ifaces)?;
    let mut dsts: HashMap<(IpAddr, u8), ()> = HashMap::new();
    for r in routes {
        let route = check_route(r, &by_name, &spec.interfaces)?;
        if dsts.insert((route.dst, route.len), ()).is_some() {
            return Err((
                Some(r.dst.span()),
                format!("route {}/{} is listed twice", route.dst, route.len),
            ));
        }
        spec.routes.push(route);
    }
    for n in neighs {
        spec.neighs.push(check_neigh(n, &by_name)?);
    }
    Ok(Some(spec))
}

/// `[router]`: the router's own settings, with no interface, route or neighbour yet.
fn check_router_table(rc: &RouterConfig) -> Result<RouterSpec, Err> {
    let mac = rc.mac.as_ref().map(|m| *m.get_ref()).unwrap_or(DEFAULT_ROUTER_MAC);
    if mac.is_multicast() || mac.0 == [0; 6] {
        let span = rc.mac.as_ref().map(|m| m.span());
        return Err((span, format!("router.mac: {mac} cannot be a router address")));
    }
    let icmp_rate = rc.icmp_rate.as_ref().map(|v| *v.get_ref()).unwrap_or(100);
    let icmp_burst = rc.icmp_burst.as_ref().map(|v| *v.get_ref()).unwrap_or(50);
    if icmp_burst == 0 && icmp_rate > 0 {
        let span = rc.icmp_burst.as_ref().map(|v| v.span());
        return Err((span, "router.icmp_burst: must be at least 1 when icmp_rate > 0".into()));
    }
    let neigh_limit = rc.neigh_limit.as_ref().map(|v| *v.get_ref()).unwrap_or(4096);
    if neigh_limit == 0 || neigh_limit > 1 << 20 {
        let span = rc.neigh_limit.as_ref().map(|v| v.span());
        return Err((
            span,
            format!("router.neigh_limit: must be 1..=1048576 (got {neigh_limit})"),
        ));
    }
    Ok(RouterSpec {
        mac,
        route_cache: rc.route_cache.unwrap_or(true),
        icmp_rate,
        icmp_burst,
        neigh_limit,
        interfaces: Vec::new(),
        routes: Vec::new(),
        neighs: Vec::new(),
    })
}

/// The `i`th `[[interface]]`: a unique name and VLAN (recorded in `by_name` and `by_vlan`),
/// a VLAN some port is on, a unicast MAC (default `router_mac`) and its addresses.
fn check_interface(
    i: usize,
    f: &InterfaceConfig,
    ifaces: &[InterfaceConfig],
    router_mac: Mac,
    by_name: &mut HashMap<String, usize>,
    by_vlan: &mut HashMap<u16, usize>,
    vlan_used: impl Fn(u16) -> bool,
) -> Result<IfaceSpec, Err> {
    let name = f.name.get_ref().clone();
    if name.is_empty() || name.len() > 15 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err((
            Some(f.name.span()),
            format!("interface.name: {name:?} must be 1-15 letters, digits, '-', '_' or '.'"),
        ));
    }
    if by_name.insert(name.clone(), i).is_some() {
        return Err((Some(f.name.span()), format!("interface {name:?} is defined twice")));
    }
    let vlan = *f.vlan.get_ref();
    freeway_bridge::vlan::check_vid(vlan).map_err(|m| (Some(f.vlan.span()), format!("interface {name:?}: {m}")))?;
    if let Some(o) = by_vlan.insert(vlan, i) {
        return Err((
            Some(f.vlan.span()),
            format!(
                "interface {name:?}: VLAN {vlan} already has interface {:?}",
                ifaces[o].name.get_ref()
            ),
        ));
    }
    if !vlan_used(vlan) {
        return Err((
            Some(f.vlan.span()),
            format!("interface {name:?}: no port is a member of VLAN {vlan}"),
        ));
    }
    let imac = f.mac.as_ref().map(|m| *m.get_ref()).unwrap_or(router_mac);
    if imac.is_multicast() || imac.0 == [0; 6] {
        return Err((
            f.mac.as_ref().map(|m| m.span()),
            format!("interface {name:?}: {imac} cannot be a router address"),
        ));
    }
    let mut spec = IfaceSpec {
        name,
        vlan,
        mac: imac,
        v4: Vec::new(),
        v6: Vec::new(),
        mtu: freeway_l3::iface::DEFAULT_MTU,
    };
    for a in &f.addr {
        let (ip, len) = parse_prefix(a.get_ref(), true)
            .map_err(|m| (Some(a.span()), format!("interface {:?}: addr: {m}", spec.name)))?;
        match ip {
            IpAddr::V4(v) => spec.v4.push((v, len)),
            IpAddr::V6(v) => spec.v6.push((v, len)),
        }
    }
    if let Some(m) = &f.mtu {
        let mut probe = freeway_l3::Interface::new(spec.name.clone(), 0, None, imac.0);
        probe.v6 = spec.v6.clone();
        spec.mtu = probe.check_mtu(*m.get_ref()).map_err(|e| (Some(m.span()), e))?;
    }
    Ok(spec)
}

/// An address may appear once in the whole router.
fn check_unique_addresses(checked: &[IfaceSpec], ifaces: &[InterfaceConfig]) -> Result<(), Err> {
    let mut seen: HashMap<IpAddr, &str> = HashMap::new();
    for (f, c) in checked.iter().zip(ifaces) {
        let addrs =
            f.v4.iter()
                .map(|a| IpAddr::V4(a.0))
                .chain(f.v6.iter().map(|a| IpAddr::V6(a.0)));
        for a in addrs {
            if let Some(o) = seen.insert(a, &f.name) {
                return Err((
                    Some(c.name.span()),
                    format!("address {a} is on interfaces {o:?} and {:?}", f.name),
                ));
            }
        }
    }
    Ok(())
}

/// One `[[route]]`: its prefix and its next hops, through `via` gateways or a `dev` alone.
fn check_route(r: &RouteConfig, by_name: &HashMap<String, usize>, ifaces: &[IfaceSpec]) -> Result<RouteSpec, Err> {
    let (dst, len) =
        parse_prefix(r.dst.get_ref(), false).map_err(|m| (Some(r.dst.span()), format!("route: dst: {m}")))?;
    let dev = match &r.dev {
        Some(d) => Some(*by_name.get(d.get_ref()).ok_or_else(|| {
            (
                Some(d.span()),
                format!("route {dst}/{len}: no interface named {:?}", d.get_ref()),
            )
        })?),
        None => None,
    };
    let hops = match (&r.via, dev) {
        (Some(v), _) => check_gateways(v, dst, len, dev, ifaces)?,
        (None, Some(iface)) => vec![HopSpec { iface, gateway: None }],
        (None, None) => return Err((Some(r.dst.span()), format!("route {dst}/{len}: needs via or dev"))),
    };
    Ok(RouteSpec { dst, len, hops })
}

/// A route's `via` list: addresses of the route's family, each once, 1 to 64 of them, each on
/// `dev` or else on the subnet of some interface.
fn check_gateways(
    v: &Spanned<OneOrMany>,
    dst: IpAddr,
    len: u8,
    dev: Option<usize>,
    ifaces: &[IfaceSpec],
) -> Result<Vec<HopSpec>, Err> {
    let mut hops = Vec::new();
    for g in v.get_ref().items() {
        let gw: IpAddr = g.parse().map_err(|_| {
            (
                Some(v.span()),
                format!("route {dst}/{len}: via {g:?} is not an address"),
            )
        })?;
        if gw.is_ipv4() != dst.is_ipv4() {
            return Err((
                Some(v.span()),
                format!("route {dst}/{len}: via {gw} is of the other IP family"),
            ));
        }
        let iface = match dev {
            Some(d) => d,
            None => ifaces.iter().position(|f| on_subnet(gw, f)).ok_or_else(|| {
                (
                    Some(v.span()),
                    format!("route {dst}/{len}: gateway {gw} is on no interface's subnet (add dev = ...)"),
                )
            })?,
        };
        let hop = HopSpec {
            iface,
            gateway: Some(gw),
        };
        if hops.contains(&hop) {
            return Err((Some(v.span()), format!("route {dst}/{len}: via {gw} is listed twice")));
        }
        hops.push(hop);
    }
    if hops.is_empty() {
        return Err((Some(v.span()), format!("route {dst}/{len}: via is empty")));
    }
    if hops.len() > 64 {
        return Err((Some(v.span()), format!("route {dst}/{len}: at most 64 next hops")));
    }
    Ok(hops)
}

/// One `[[neigh]]`: an address, a unicast MAC and an existing interface.
fn check_neigh(n: &NeighConfig, by_name: &HashMap<String, usize>) -> Result<NeighSpec, Err> {
    let ip: IpAddr = n.ip.get_ref().parse().map_err(|_| {
        (
            Some(n.ip.span()),
            format!("neigh: {:?} is not an address", n.ip.get_ref()),
        )
    })?;
    let iface = *by_name.get(n.dev.get_ref()).ok_or_else(|| {
        (
            Some(n.dev.span()),
            format!("neigh {ip}: no interface named {:?}", n.dev.get_ref()),
        )
    })?;
    let mac = *n.mac.get_ref();
    if mac.is_multicast() || mac.0 == [0; 6] {
        return Err((
            Some(n.mac.span()),
            format!("neigh {ip}: {mac} is not a unicast address"),
        ));
    }
    Ok(NeighSpec { ip, mac, iface })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(parse_prefix("10.0.0.0/8", false), Ok(("10.0.0.0".parse().unwrap(), 8)));
        assert_eq!(parse_prefix("default", false), Ok(("0.0.0.0".parse().unwrap(), 0)));
        assert_eq!(parse_prefix("10.0.0.1", false), Ok(("10.0.0.1".parse().unwrap(), 32)));
        assert!(parse_prefix("10.0.0.1/8", false).unwrap_err().contains("host bits"));
        assert!(parse_prefix("10.0.0.0/40", false)
            .unwrap_err()
            .contains("between 0 and 32"));
        assert!(parse_prefix("2001:db8::/129", false)
            .unwrap_err()
            .contains("between 0 and 128"));
        assert_eq!(parse_prefix("10.0.0.1/24", true), Ok(("10.0.0.1".parse().unwrap(), 24)));
        assert!(parse_prefix("10.0.0.1", true).unwrap_err().contains("prefix length"));
        assert!(parse_prefix("foo/8", false).is_err());
        assert_eq!(
            mask("2001:db8::1".parse().unwrap(), 64),
            "2001:db8::".parse::<IpAddr>().unwrap()
        );
    }
}
