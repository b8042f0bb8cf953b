//! Router interfaces and the classifier that tells the bridge which frames are the router's.
//!
//! An [`Interface`] is a (port, VLAN) pair where the router has a MAC and addresses: a routed
//! port (`vlan: None`), a VLAN on a trunk port, or an SVI when `port` is the bridge's internal
//! "router" port (frames between the bridge and the router carry the VLAN as an 802.1Q tag, so
//! the router is a trunk member of every interface VLAN, "router on a stick"). Every interface
//! also gets an IPv6 link-local address derived from its MAC (modified EUI-64, RFC 4291 app. A).
//!
//! Frames are matched to an interface by `(meta.in_port, outer 802.1Q tag of the frame)`: the
//! tag is read from the frame as it reaches the L3 stage, not from `meta.vlan` (which the bridge
//! rewrites to the classified VLAN).
//!
//! [`Interfaces`] is built once (configuration) and then shared read-only (`Arc`) by all
//! workers; lookups are bisections of small sorted arrays, no lock, no shared write. A new
//! configuration is a new `Interfaces`: a reload that changes an interface's addresses, or
//! adds or removes interfaces, publishes one through [`LiveInterfaces`], which workers take
//! up between batches. An interface's id is never reused within a run: one added takes the
//! next id never used, one removed leaves its id empty ([`Interfaces::with_changes`]), so a
//! route, a neighbour entry or a queued packet naming an old id finds no interface (a counted
//! drop) instead of a newer one. Per-interface arrays (the live MTUs here, the firewall's
//! interface names and zones, masquerade's addresses) are built for each version, by id. The live
//! setting inside one version is each
//! interface's IP MTU ([`Interfaces::mtu`], [`Interfaces::set_mtu`]): a relaxed atomic per
//! interface, written by the control thread and read by the L3 stage for packets it
//! forwards (a load, never a write, on the fast path).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use freeway_packet::wire::{ETHERTYPE_ARP, ETHERTYPE_IPV6, IPPROTO_ICMPV6};
use freeway_packet::{Packet, NO_OFFSET};
use freeway_route::prefix::{mask4, mask6};
use freeway_sync::published::Published;
use serde::Serialize;

use crate::frame::{is_group, outer_vid, BROADCAST};
use crate::prefix_contains;

/// The default IP MTU of an interface.
pub const DEFAULT_MTU: u16 = 1500;
/// The smallest IP MTU of an interface with IPv4 only (RFC 791).
pub const MIN_MTU_V4: u16 = 68;
/// The smallest IP MTU of an interface with IPv6 addresses (RFC 8200).
pub const MIN_MTU_V6: u16 = 1280;
/// The largest IP MTU of an interface (a 9216-byte jumbo frame's payload).
pub const MAX_MTU: u16 = 9216;

/// One router interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Name (dumps, `ip neigh` style `dev`).
    pub name: String,
    /// The port index frames of this interface arrive on and leave by.
    pub port: u16,
    /// 802.1Q VLAN on that port (`None` = untagged).
    pub vlan: Option<u16>,
    /// The router MAC on this interface.
    pub mac: [u8; 6],
    /// IPv4 addresses with prefix length.
    pub v4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses with prefix length (the link-local one is added automatically).
    pub v6: Vec<(Ipv6Addr, u8)>,
    /// IP MTU (largest IP packet sent on this interface; default [`DEFAULT_MTU`]) as
    /// configured; the live value is [`Interfaces::mtu`].
    pub mtu: u16,
}

impl Interface {
    /// An interface without addresses, MTU [`DEFAULT_MTU`].
    pub fn new(name: impl Into<String>, port: u16, vlan: Option<u16>, mac: [u8; 6]) -> Self {
        Interface {
            name: name.into(),
            port,
            vlan,
            mac,
            v4: Vec::new(),
            v6: Vec::new(),
            mtu: DEFAULT_MTU,
        }
    }

    /// Adds an IPv4 address (builder style).
    pub fn with_v4(mut self, addr: Ipv4Addr, len: u8) -> Self {
        self.v4.push((addr, len));
        self
    }

    /// Adds an IPv6 address (builder style).
    pub fn with_v6(mut self, addr: Ipv6Addr, len: u8) -> Self {
        self.v6.push((addr, len));
        self
    }

    /// Sets the IP MTU (builder style).
    pub fn with_mtu(mut self, mtu: u16) -> Self {
        self.mtu = mtu;
        self
    }

    /// Checks `mtu` as this interface's IP MTU: [`MIN_MTU_V4`]..=[`MAX_MTU`], and at least
    /// [`MIN_MTU_V6`] with IPv6 addresses; the error says which bound and why.
    pub fn check_mtu(&self, mtu: u32) -> Result<u16, String> {
        let min = if self.v6.is_empty() { MIN_MTU_V4 } else { MIN_MTU_V6 };
        if mtu < u32::from(min) || mtu > u32::from(MAX_MTU) {
            let why = if self.v6.is_empty() {
                "IPv4 needs at least 68"
            } else {
                "an interface with IPv6 addresses needs at least 1280"
            };
            return Err(format!(
                "interface {:?}: mtu {mtu} is out of range {min}..={MAX_MTU} ({why})",
                self.name
            ));
        }
        Ok(mtu as u16)
    }

    /// The link-local address derived from the MAC (fe80::/64 + modified EUI-64).
    pub fn link_local(&self) -> Ipv6Addr {
        eui64_link_local(self.mac)
    }

    /// Whether `ip` is on one of this interface's IPv4 subnets.
    pub fn v4_on_link(&self, ip: Ipv4Addr) -> bool {
        self.v4
            .iter()
            .any(|(a, l)| prefix_contains(IpAddr::V4(*a), *l, IpAddr::V4(ip)))
    }

    /// Whether `ip` is on-link for IPv6: link-local, or on one of the interface's prefixes.
    pub fn v6_on_link(&self, ip: Ipv6Addr) -> bool {
        is_link_local(ip)
            || self
                .v6
                .iter()
                .any(|(a, l)| prefix_contains(IpAddr::V6(*a), *l, IpAddr::V6(ip)))
    }

    /// The source address for an IPv4 packet sent from this interface to `dst`: the address
    /// whose subnet holds `dst`, else the first one; `None` if the interface has none.
    pub fn v4_source_for(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        self.v4
            .iter()
            .find(|(a, l)| prefix_contains(IpAddr::V4(*a), *l, IpAddr::V4(dst)))
            .or(self.v4.first())
            .map(|(a, _)| *a)
    }

    /// The source address for an IPv6 packet sent from this interface to `dst`: the
    /// link-local address for link-local destinations, else the global address whose prefix
    /// holds `dst`, else the first global address, else the link-local one.
    pub fn v6_source_for(&self, dst: Ipv6Addr) -> Ipv6Addr {
        if is_link_local(dst) {
            return self.link_local();
        }
        self.v6
            .iter()
            .find(|(a, l)| prefix_contains(IpAddr::V6(*a), *l, IpAddr::V6(dst)))
            .or(self.v6.first())
            .map_or_else(|| self.link_local(), |(a, _)| *a)
    }

    /// Whether `ip` is one of this interface's IPv6 addresses (link-local included).
    pub fn has_v6(&self, ip: Ipv6Addr) -> bool {
        ip == self.link_local() || self.v6.iter().any(|(a, _)| *a == ip)
    }

    /// Whether `ip` is one of this interface's IPv4 addresses.
    pub fn has_v4(&self, ip: Ipv4Addr) -> bool {
        self.v4.iter().any(|(a, _)| *a == ip)
    }

    /// Whether `ip` is the directed broadcast address of one of this interface's subnets
    /// (prefixes of /31 and /32 have none).
    pub fn is_v4_broadcast(&self, ip: Ipv4Addr) -> bool {
        self.v4.iter().any(|(a, l)| {
            *l < 31 && {
                let host = u32::MAX >> l;
                u32::from(*a) | host == u32::from(ip)
            }
        })
    }

    /// Whether the interface listens to the IPv6 multicast group `g`: all-nodes (ff02::1),
    /// all-routers (ff02::2), or the solicited-node group of one of its addresses.
    pub fn listens_v6(&self, g: Ipv6Addr) -> bool {
        if g == ALL_NODES || g == ALL_ROUTERS {
            return true;
        }
        g == solicited_node(self.link_local()) || self.v6.iter().any(|(a, _)| solicited_node(*a) == g)
    }
}

/// ff02::1, all nodes on the link.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// ff02::2, all routers on the link.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

/// The link-local address fe80::/64 with the modified EUI-64 identifier of `mac`.
pub fn eui64_link_local(mac: [u8; 6]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8] = mac[0] ^ 0x02;
    o[9] = mac[1];
    o[10] = mac[2];
    o[11] = 0xff;
    o[12] = 0xfe;
    o[13] = mac[3];
    o[14] = mac[4];
    o[15] = mac[5];
    Ipv6Addr::from(o)
}

/// The solicited-node multicast group of `ip` (ff02::1:ffXX:XXXX, RFC 4291 2.7.1).
pub fn solicited_node(ip: Ipv6Addr) -> Ipv6Addr {
    let a = ip.octets();
    let mut o = [0u8; 16];
    o[0] = 0xff;
    o[1] = 0x02;
    o[11] = 0x01;
    o[12] = 0xff;
    o[13..16].copy_from_slice(&a[13..16]);
    Ipv6Addr::from(o)
}

/// The Ethernet address an IPv6 multicast group maps to (33:33 + low 32 bits, RFC 2464 7).
pub fn v6_multicast_mac(g: Ipv6Addr) -> [u8; 6] {
    let a = g.octets();
    [0x33, 0x33, a[12], a[13], a[14], a[15]]
}

/// Whether `ip` is link-local unicast (fe80::/10).
pub fn is_link_local(ip: Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

/// A connected prefix the integrator installs as a route (`gateway: None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ConnectedPrefix {
    /// Interface index.
    pub iface: u16,
    /// Network address (host bits zero).
    pub prefix: IpAddr,
    /// Prefix length.
    pub len: u8,
}

/// What the router wants of a frame (see [`Interfaces::wants`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wants {
    /// Not the router's: the bridge handles it alone.
    NotOurs,
    /// Unicast to the router MAC on a router interface: the L3 stage consumes it; the bridge
    /// must not forward it.
    Ours,
    /// A broadcast or multicast frame the router needs a copy of (ARP request for one of our
    /// addresses; ND, router solicitation or echo to a group we listen to). The bridge floods it
    /// as usual *and* hands a copy to the L3 stage.
    Copy(u16),
}

/// Why a set of interfaces was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfaceError {
    /// Two interfaces share a name.
    DuplicateName(String),
    /// Two interfaces share a (port, VLAN).
    DuplicatePortVlan(String, String),
    /// More interfaces than a `u16` index can name.
    TooMany,
    /// A prefix length beyond 32 (IPv4) or 128 (IPv6), or a VLAN beyond 4094.
    BadAddress(String),
    /// An address is configured on two interfaces.
    DuplicateAddress(IpAddr),
    /// A group MAC or an MTU below the IP minimum (68 for IPv4, 1280 with IPv6 addresses).
    BadInterface(String),
}

impl std::fmt::Display for IfaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IfaceError::DuplicateName(n) => write!(f, "interface name {n} is used twice"),
            IfaceError::DuplicatePortVlan(a, b) => write!(f, "interfaces {a} and {b} share a port and VLAN"),
            IfaceError::TooMany => write!(f, "too many interfaces"),
            IfaceError::BadAddress(s) => write!(f, "bad address or VLAN: {s}"),
            IfaceError::DuplicateAddress(a) => write!(f, "address {a} is configured twice"),
            IfaceError::BadInterface(s) => write!(f, "bad interface: {s}"),
        }
    }
}

impl std::error::Error for IfaceError {}

/// The router's interfaces, indexed by id (`u16`): at first an interface's position in the
/// configuration; one a reload adds takes the next id never used in the run, and one it
/// removes leaves its id empty for good ([`Interfaces::with_changes`]), so a route, a
/// neighbour or a queued packet that names an old id never leaves by a newer interface.
///
/// A clone shares the live MTUs with the original (they are the running router's).
#[derive(Clone, Debug, Default)]
pub struct Interfaces {
    /// By id; `None`: an id whose interface was removed.
    list: Vec<Option<Interface>>,
    /// The live IP MTU of each interface, by index.
    mtus: Arc<[AtomicU16]>,
    by_port_vlan: SortedMap<u32>,
    local_v4: SortedMap<u32>,
    local_v6: SortedMap<u128>,
}

/// A small sorted map (key → interface index) searched by bisection: no hashing on the fast
/// path, and a few cache lines for a router's handful of interfaces.
#[derive(Clone, Debug, Default)]
struct SortedMap<K: Ord + Copy> {
    v: Vec<(K, u16)>,
}

impl<K: Ord + Copy> SortedMap<K> {
    /// Inserts `k`; gives back the existing value (and changes nothing) if present.
    fn insert(&mut self, k: K, idx: u16) -> Option<u16> {
        match self.v.binary_search_by(|e| e.0.cmp(&k)) {
            Ok(i) => Some(self.v[i].1),
            Err(i) => {
                self.v.insert(i, (k, idx));
                None
            }
        }
    }

    #[inline(always)]
    fn get(&self, k: K) -> Option<u16> {
        self.v.binary_search_by(|e| e.0.cmp(&k)).ok().map(|i| self.v[i].1)
    }
}

#[inline(always)]
fn pv_key(port: u16, vlan: Option<u16>) -> u32 {
    (u32::from(port) << 16) | u32::from(vlan.unwrap_or(0xffff))
}

impl Interfaces {
    /// Checks and indexes a list of interfaces; an interface's index is its position.
    pub fn new(list: Vec<Interface>) -> Result<Interfaces, IfaceError> {
        Interfaces::of_slots(list.into_iter().map(Some).collect())
    }

    /// Checks and indexes interfaces by id (`None`: an id no longer used).
    fn of_slots(list: Vec<Option<Interface>>) -> Result<Interfaces, IfaceError> {
        if list.len() > usize::from(u16::MAX) {
            return Err(IfaceError::TooMany);
        }
        let mut s = Interfaces::default();
        let mut names = HashMap::new();
        for (i, it) in list.iter().enumerate() {
            let Some(it) = it else { continue };
            let idx = i as u16;
            if names.insert(it.name.clone(), idx).is_some() {
                return Err(IfaceError::DuplicateName(it.name.clone()));
            }
            if it.vlan.is_some_and(|v| v == 0 || v > 4094) {
                return Err(IfaceError::BadAddress(format!("{}: vlan {:?}", it.name, it.vlan)));
            }
            if is_group(&it.mac) {
                return Err(IfaceError::BadInterface(format!("{}: group MAC", it.name)));
            }
            it.check_mtu(u32::from(it.mtu)).map_err(IfaceError::BadInterface)?;
            if let Some(j) = s.by_port_vlan.insert(pv_key(it.port, it.vlan), idx) {
                let other = list[usize::from(j)].as_ref().map(|o| o.name.clone());
                return Err(IfaceError::DuplicatePortVlan(
                    other.unwrap_or_default(),
                    it.name.clone(),
                ));
            }
            for (a, l) in &it.v4 {
                if *l > 32 {
                    return Err(IfaceError::BadAddress(format!("{a}/{l}")));
                }
                if s.local_v4.insert(u32::from(*a), idx).is_some() {
                    return Err(IfaceError::DuplicateAddress(IpAddr::V4(*a)));
                }
            }
            for (a, l) in &it.v6 {
                if *l > 128 || a.is_multicast() || is_link_local(*a) {
                    return Err(IfaceError::BadAddress(format!("{a}/{l}")));
                }
                if s.local_v6.insert(u128::from(*a), idx).is_some() {
                    return Err(IfaceError::DuplicateAddress(IpAddr::V6(*a)));
                }
            }
        }
        s.mtus = list
            .iter()
            .map(|i| AtomicU16::new(i.as_ref().map_or(DEFAULT_MTU, |i| i.mtu)))
            .collect();
        s.list = list;
        Ok(s)
    }

    /// The same interfaces without those of ids `removed` (their ids stay unused) and with
    /// `added` at the next ids never used, checked as [`Interfaces::new`] checks them. The
    /// copy has live MTUs of its own, starting from the current ones (a new interface's from
    /// its configuration). Gives back the new interfaces and the ids `added` took.
    pub fn with_changes(&self, removed: &[u16], added: Vec<Interface>) -> Result<(Interfaces, Vec<u16>), IfaceError> {
        let mut list = self.list.clone();
        for &r in removed {
            match list.get_mut(usize::from(r)) {
                Some(slot @ Some(_)) => *slot = None,
                _ => return Err(IfaceError::BadInterface(format!("no interface {r} to remove"))),
            }
        }
        let first = list.len();
        let ids = (first..first + added.len()).map(|i| i as u16).collect();
        list.extend(added.into_iter().map(Some));
        let s = Interfaces::of_slots(list)?;
        for (i, m) in self.mtus.iter().enumerate() {
            s.mtus[i].store(m.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        Ok((s, ids))
    }

    /// The same interfaces with interface `idx`'s addresses replaced by `v4` and `v6`,
    /// checked as [`Interfaces::new`] checks them; the copy shares the live MTUs.
    pub fn with_addresses(
        &self,
        idx: u16,
        v4: Vec<(Ipv4Addr, u8)>,
        v6: Vec<(Ipv6Addr, u8)>,
    ) -> Result<Interfaces, IfaceError> {
        let mut list = self.list.clone();
        let it = list
            .get_mut(usize::from(idx))
            .and_then(Option::as_mut)
            .ok_or_else(|| IfaceError::BadInterface(format!("no interface {idx}")))?;
        it.v4 = v4;
        it.v6 = v6;
        let mut s = Interfaces::of_slots(list)?;
        s.mtus = self.mtus.clone();
        Ok(s)
    }

    /// The live IP MTU of interface `idx` ([`DEFAULT_MTU`] for an index that names none).
    #[inline(always)]
    pub fn mtu(&self, idx: u16) -> u16 {
        self.mtus
            .get(usize::from(idx))
            .map_or(DEFAULT_MTU, |m| m.load(Ordering::Relaxed))
    }

    /// Sets the live IP MTU of interface `idx` (checked as [`Interface::check_mtu`] does);
    /// returns the previous one. Packets forwarded after the store see the new value.
    pub fn set_mtu(&self, idx: u16, mtu: u32) -> Result<u16, String> {
        let it = self.get(idx).ok_or_else(|| format!("no interface {idx}"))?;
        let mtu = it.check_mtu(mtu)?;
        Ok(self.mtus[usize::from(idx)].swap(mtu, Ordering::Relaxed))
    }

    /// Number of ids: one more than the highest id used in the run (removed ones included,
    /// so `0..len()` holds every id that [`Interfaces::get`] can find).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are no ids at all.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The interface of id `idx` (`None` also for an interface removed).
    #[inline]
    pub fn get(&self, idx: u16) -> Option<&Interface> {
        self.list.get(usize::from(idx)).and_then(Option::as_ref)
    }

    /// All interfaces, in id order (removed ones left out: [`Interfaces::indexed`] gives
    /// their ids).
    pub fn iter(&self) -> impl Iterator<Item = &Interface> {
        self.list.iter().flatten()
    }

    /// All interfaces with their ids, in id order.
    pub fn indexed(&self) -> impl Iterator<Item = (u16, &Interface)> {
        self.list
            .iter()
            .enumerate()
            .filter_map(|(i, it)| it.as_ref().map(|it| (i as u16, it)))
    }

    /// The id of the interface named `name`.
    pub fn by_name(&self, name: &str) -> Option<u16> {
        self.indexed().find(|(_, i)| i.name == name).map(|(i, _)| i)
    }

    /// The interface on `(port, vlan)`.
    #[inline]
    pub fn by_port_vlan(&self, port: u16, vlan: Option<u16>) -> Option<u16> {
        self.by_port_vlan.get(pv_key(port, vlan))
    }

    /// The interface a frame arrived on: `(meta.in_port, outer tag of the frame)`.
    #[inline]
    pub fn ingress(&self, pkt: &Packet) -> Option<u16> {
        self.by_port_vlan(pkt.meta.in_port, outer_vid(pkt.data()))
    }

    /// The interface holding the IPv4 address `ip`.
    #[inline]
    pub fn local_v4(&self, ip: Ipv4Addr) -> Option<u16> {
        self.local_v4.get(u32::from(ip))
    }

    /// The interface holding the global IPv6 address `ip` (link-local addresses are
    /// per-interface: see [`Interfaces::is_local_v6`]).
    #[inline]
    pub fn local_v6(&self, ip: Ipv6Addr) -> Option<u16> {
        self.local_v6.get(u128::from(ip))
    }

    /// Whether `ip` is ours as seen from interface `iface`: any global address of the router,
    /// or the link-local address of that interface.
    #[inline]
    pub fn is_local_v6(&self, ip: Ipv6Addr, iface: u16) -> bool {
        if is_link_local(ip) {
            self.get(iface).is_some_and(|i| i.link_local() == ip)
        } else {
            self.local_v6.get(u128::from(ip)).is_some()
        }
    }

    /// The connected prefixes of every interface (IPv4 and global IPv6; link-local prefixes
    /// are never routed), host bits cleared, duplicates removed. Install them as routes with
    /// `gateway: None`.
    pub fn connected_prefixes(&self) -> Vec<ConnectedPrefix> {
        let mut v = Vec::new();
        for (i, it) in self.indexed() {
            let v4 = it
                .v4
                .iter()
                .map(|&(a, l)| (IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask4(l))), l));
            let v6 = it
                .v6
                .iter()
                .map(|&(a, l)| (IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask6(l))), l));
            for (prefix, len) in v4.chain(v6) {
                let p = ConnectedPrefix { iface: i, prefix, len };
                if !v.contains(&p) {
                    v.push(p);
                }
            }
        }
        v
    }

    /// Classifies a parsed frame for the bridge: see [`Wants`]. The interface is found by
    /// `(meta.in_port, outer tag)` ([`Interfaces::ingress`]); callers that know the interface
    /// another way (e.g. by the classified VLAN of an SVI) use [`Interfaces::wants_on`].
    #[inline]
    pub fn wants(&self, pkt: &Packet) -> Wants {
        self.wants_at(pkt.meta.in_port, pkt)
    }

    /// [`Interfaces::wants`] of a frame as if `meta.in_port` were `port` (a caller that
    /// sets that field afterwards).
    #[inline]
    pub fn wants_at(&self, port: u16, pkt: &Packet) -> Wants {
        match self.by_port_vlan(port, outer_vid(pkt.data())) {
            Some(i) => self.wants_on(i, pkt),
            None => Wants::NotOurs,
        }
    }

    /// Classifies a parsed frame as if it arrived on interface `iface`.
    pub fn wants_on(&self, iface: u16, pkt: &Packet) -> Wants {
        let Some(it) = self.get(iface) else {
            return Wants::NotOurs;
        };
        let f = pkt.data();
        if f.len() < 14 {
            return Wants::NotOurs;
        }
        let dst = &f[0..6];
        if dst == it.mac {
            return Wants::Ours;
        }
        if !is_group(dst) {
            return Wants::NotOurs;
        }
        let m = &pkt.meta;
        let l3 = usize::from(m.l3_off);
        if m.l3_off == NO_OFFSET {
            return Wants::NotOurs;
        }
        if dst == BROADCAST && m.ethertype == ETHERTYPE_ARP {
            // ARP body: sender protocol address at 14..18, target at 24..28 (Ethernet/IPv4).
            if let Some(b) = f.get(l3..l3 + 28) {
                if b[4] == 6 && b[5] == 4 {
                    let tpa = Ipv4Addr::new(b[24], b[25], b[26], b[27]);
                    let spa = Ipv4Addr::new(b[14], b[15], b[16], b[17]);
                    // A request for one of our addresses, or a gratuitous announcement of a
                    // neighbour on our subnet (sender = target: a host that moved or changed
                    // its MAC; the stage refreshes an existing entry only).
                    if it.has_v4(tpa) || (spa == tpa && it.v4_on_link(tpa) && !it.has_v4(spa)) {
                        return Wants::Copy(iface);
                    }
                }
            }
            return Wants::NotOurs;
        }
        if dst[0] == 0x33 && dst[1] == 0x33 && m.ethertype == ETHERTYPE_IPV6 && m.ip_proto == IPPROTO_ICMPV6 {
            let Some(h) = f.get(l3..l3 + 40) else {
                return Wants::NotOurs;
            };
            let mut g = [0u8; 16];
            g.copy_from_slice(&h[24..40]);
            let g = Ipv6Addr::from(g);
            if m.l4_off == NO_OFFSET || !it.listens_v6(g) {
                return Wants::NotOurs;
            }
            let ty = f.get(usize::from(m.l4_off)).copied().unwrap_or(0);
            // Echo request, router solicitation, neighbour solicitation and advertisement.
            if matches!(ty, 128 | 133 | 135 | 136) {
                return Wants::Copy(iface);
            }
        }
        Wants::NotOurs
    }
}

/// Route dumps name an interface by its name (`if3` for an index without one) and give a
/// connected IPv4 route the interface's address inside the prefix as its `src`.
impl freeway_route::rib::Ifaces for Interfaces {
    fn name(&self, iface: u16) -> String {
        self.get(iface).map_or_else(|| format!("if{iface}"), |x| x.name.clone())
    }

    fn prefsrc(&self, iface: u16, prefix: &freeway_route::Prefix) -> Option<IpAddr> {
        let i = self.get(iface)?;
        i.v4.iter()
            .map(|(a, _)| IpAddr::V4(*a))
            .chain(i.v6.iter().map(|(a, _)| IpAddr::V6(*a)))
            .find(|a| prefix.contains(*a))
    }
}

impl freeway_route::rib::Ifaces for &Interfaces {
    fn name(&self, iface: u16) -> String {
        freeway_route::rib::Ifaces::name(*self, iface)
    }

    fn prefsrc(&self, iface: u16, prefix: &freeway_route::Prefix) -> Option<IpAddr> {
        freeway_route::rib::Ifaces::prefsrc(*self, iface, prefix)
    }
}

/// The running router's interfaces as workers see them: one writer (the control thread)
/// publishes a whole new [`Interfaces`] (addresses changed by a reload) and bumps a
/// generation; each worker compares the generation with its own once per batch (one
/// `Acquire` load) and, only when it moved, takes the new version (an epoch pin and an `Arc`
/// clone). Nothing is locked or written on the fast path.
pub struct LiveInterfaces {
    cur: Published<Arc<Interfaces>>,
    gen: AtomicU64,
}

impl LiveInterfaces {
    /// The first version.
    pub fn new(ifaces: Arc<Interfaces>) -> LiveInterfaces {
        LiveInterfaces {
            cur: Published::new(ifaces),
            gen: AtomicU64::new(1),
        }
    }

    /// The generation of the current version (it grows with every publication).
    #[inline(always)]
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// The current version and its generation (a version at least as new as the generation
    /// says: a publication in between shows up again at the next comparison).
    pub fn current(&self) -> (u64, Arc<Interfaces>) {
        let gen = self.generation();
        let g = freeway_sync::reclaim::pin();
        (gen, self.cur.load(&g).clone())
    }

    /// Publishes `ifaces`. One writer at a time.
    pub fn publish(&self, ifaces: Arc<Interfaces>) {
        self.cur.publish(ifaces);
        // After the pointer: a worker that sees the new generation finds the new version.
        self.gen.fetch_add(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for LiveInterfaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveInterfaces")
            .field("gen", &self.generation())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_addresses_are_a_new_version_that_keeps_the_live_mtus() {
        let a = Interface::new("a", 1, Some(10), [2, 0, 0, 0, 0, 1]).with_v4(Ipv4Addr::new(10, 0, 0, 1), 24);
        let b = Interface::new("b", 1, Some(20), [2, 0, 0, 0, 0, 1]).with_v4(Ipv4Addr::new(10, 1, 0, 1), 24);
        let s = Arc::new(Interfaces::new(vec![a, b]).unwrap());
        let live = LiveInterfaces::new(s.clone());
        let (gen, _) = live.current();
        let more = vec![(Ipv4Addr::new(10, 1, 0, 1), 24), (Ipv4Addr::new(10, 3, 0, 1), 24)];
        let t = s.with_addresses(1, more, Vec::new()).unwrap();
        assert_eq!(t.local_v4(Ipv4Addr::new(10, 3, 0, 1)), Some(1));
        assert_eq!(
            s.local_v4(Ipv4Addr::new(10, 3, 0, 1)),
            None,
            "the old version is unchanged"
        );
        // An address another interface holds: refused, nothing changes.
        let taken = vec![(Ipv4Addr::new(10, 0, 0, 1), 24)];
        assert!(s.with_addresses(1, taken, Vec::new()).is_err());
        // One live MTU for both versions.
        s.set_mtu(1, 1400).unwrap();
        assert_eq!(t.mtu(1), 1400);
        live.publish(Arc::new(t));
        let (gen2, now) = live.current();
        assert!(gen2 > gen && live.generation() == gen2);
        assert_eq!(now.local_v4(Ipv4Addr::new(10, 3, 0, 1)), Some(1));
    }

    #[test]
    fn interfaces_added_take_new_ids_and_removed_ids_are_never_reused() {
        let mac = [2, 0, 0, 0, 0, 1];
        let a = Interface::new("a", 1, Some(10), mac).with_v4(Ipv4Addr::new(10, 0, 0, 1), 24);
        let b = Interface::new("b", 1, Some(20), mac).with_v4(Ipv4Addr::new(10, 1, 0, 1), 24);
        let s = Interfaces::new(vec![a, b]).unwrap();
        s.set_mtu(0, 1400).unwrap();
        // b removed, c added on b's VLAN and subnet: c takes id 2, id 1 stays empty.
        let c = Interface::new("c", 1, Some(20), mac).with_v4(Ipv4Addr::new(10, 1, 0, 1), 24);
        let (t, ids) = s.with_changes(&[1], vec![c]).unwrap();
        assert_eq!(ids, [2]);
        assert_eq!((t.len(), t.get(1), t.by_name("b")), (3, None, None));
        assert_eq!(t.by_port_vlan(1, Some(20)), Some(2));
        assert_eq!(t.local_v4(Ipv4Addr::new(10, 1, 0, 1)), Some(2));
        assert_eq!(t.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(t.indexed().map(|(i, _)| i).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(
            t.connected_prefixes().iter().map(|c| c.iface).collect::<Vec<_>>(),
            [0, 2]
        );
        assert_eq!(t.mtu(0), 1400, "the live MTU is kept");
        assert_eq!(s.by_port_vlan(1, Some(20)), Some(1), "the old version is unchanged");
        // Removing c too: its id is not given again; an empty id cannot be removed twice.
        let (u, _) = t.with_changes(&[2], vec![]).unwrap();
        let d = Interface::new("d", 1, Some(30), mac);
        assert_eq!(u.with_changes(&[], vec![d]).unwrap().1, [3]);
        assert!(u.with_changes(&[2], vec![]).is_err());
        // A name or an address already held: refused.
        let a2 = Interface::new("a", 1, Some(40), mac);
        assert!(matches!(
            t.with_changes(&[], vec![a2]),
            Err(IfaceError::DuplicateName(_))
        ));
    }

    #[test]
    fn eui64_and_solicited_node() {
        let ll = eui64_link_local([0x02, 0x00, 0x5e, 0x10, 0x20, 0x30]);
        assert_eq!(ll, "fe80::5eff:fe10:2030".parse::<Ipv6Addr>().unwrap());
        let ll = eui64_link_local([0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc]);
        assert_eq!(ll, "fe80::21b:21ff:feaa:bbcc".parse::<Ipv6Addr>().unwrap());
        let sn = solicited_node("2001:db8::1:2:3:4".parse().unwrap());
        assert_eq!(sn, "ff02::1:ff03:4".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v6_multicast_mac(sn), [0x33, 0x33, 0xff, 0x03, 0x00, 0x04]);
    }

    #[test]
    fn refuses_bad_sets_and_lists_connected_prefixes() {
        let a = Interface::new("a", 1, None, [2, 0, 0, 0, 0, 1])
            .with_v4(Ipv4Addr::new(10, 0, 0, 1), 24)
            .with_v6("2001:db8::1".parse().unwrap(), 64);
        let b = Interface::new("b", 1, Some(5), [2, 0, 0, 0, 0, 1]).with_v4(Ipv4Addr::new(10, 1, 0, 1), 16);
        let s = Interfaces::new(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(s.by_port_vlan(1, Some(5)), Some(1));
        assert_eq!(s.by_port_vlan(1, None), Some(0));
        assert_eq!(s.local_v4(Ipv4Addr::new(10, 1, 0, 1)), Some(1));
        assert!(s.is_local_v6(a.link_local(), 0));
        assert!(s.is_local_v6("2001:db8::1".parse().unwrap(), 1));
        let cp = s.connected_prefixes();
        assert_eq!(cp.len(), 3);
        assert!(cp.contains(&ConnectedPrefix {
            iface: 1,
            prefix: "10.1.0.0".parse().unwrap(),
            len: 16
        }));
        assert!(cp.contains(&ConnectedPrefix {
            iface: 0,
            prefix: "2001:db8::".parse().unwrap(),
            len: 64
        }));
        assert!(matches!(
            Interfaces::new(vec![a.clone(), a.clone()]),
            Err(IfaceError::DuplicateName(_))
        ));
        let mut c = b.clone();
        c.name = "c".into();
        c.v4.clear();
        assert!(matches!(
            Interfaces::new(vec![b.clone(), c]),
            Err(IfaceError::DuplicatePortVlan(..))
        ));
        let mut d = b.clone();
        d.name = "d".into();
        d.port = 9;
        assert!(matches!(
            Interfaces::new(vec![b, d]),
            Err(IfaceError::DuplicateAddress(_))
        ));
        assert!(a.is_v4_broadcast(Ipv4Addr::new(10, 0, 0, 255)));
        assert!(!a.is_v4_broadcast(Ipv4Addr::new(10, 0, 0, 254)));
    }
}
