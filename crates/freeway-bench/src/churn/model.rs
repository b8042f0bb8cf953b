//! The churn run's world: ports and VLANs, hosts, gateways and their addresses, the keys of
//! the versioned history, the tag every generated frame carries, and how frames are read
//! back.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// LAN access ports (VLAN 10), by index.
pub(super) const LAN: [u16; 3] = [0, 1, 2];
/// The trunk: a tagged member of VLANs 10 and 20, no native VLAN.
pub(super) const TRUNK: u16 = 5;
/// Ports.
pub(super) const NPORTS: usize = 6;
/// Port names, by index.
pub(super) const PORT_NAMES: [&str; NPORTS] = ["lan0", "lan1", "lan2", "wan0", "wan1", "trunk0"];
/// The ports of VLAN 10 (hosts live on each).
pub(super) const V10_PORTS: [u16; 4] = [0, 1, 2, TRUNK];
/// The ports of VLAN 20 (the WAN side: `wan0`, `wan1` and the trunk).
pub(super) const V20_PORTS: [u16; 3] = [3, 4, TRUNK];
/// Hosts on each VLAN 10 port.
pub(super) const HOSTS_PER_PORT: usize = 4;
/// Hosts (those of the trunk last).
pub(super) const NHOSTS: usize = HOSTS_PER_PORT * V10_PORTS.len();
/// Static-entry targets (MACs that never send, VLAN 10).
pub const NT: usize = 8;
/// MACs the gateways' neighbour entries point at (VLAN 20, never send; static FDB entries).
pub const NM: usize = 6;
/// Gateways on the WAN side (each an IPv4 and an IPv6 address).
pub const NG: usize = 4;
/// Remote IPv4 prefixes (`10.100.j.0/24`).
pub const NX: usize = 8;
/// Remote IPv6 prefixes: four /64s inside the /48 of prefix 4, and four /48s.
pub const NX6: usize = 8;
/// The IPv6 prefix that covers the /64s below it.
pub(super) const X6_PARENT: usize = 4;
/// The router's MAC.
pub(super) const RMAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
/// Tag length.
pub(super) const TAG_LEN: usize = 26;
/// Tag magic.
const MAGIC: &[u8; 4] = b"CHRN";
/// Value of a key with no entry (FDB: no entry; neighbour: none usable).
pub(super) const NONE: u8 = 0xff;

/// A numbered pool of stations, each with a MAC and an IPv4 and an IPv6 address.
pub(super) struct Pool {
    /// Station `i`'s MAC is `02:00:00:MAC:00:i`.
    mac: u8,
    /// Station `i`'s IPv4 address is `10.0.NET.(BASE + i)`.
    net: u8,
    base: u8,
    /// Station `i`'s IPv6 address is `2001:db8:NET6::(BASE6 + i)`.
    net6: u16,
    base6: u16,
}

impl Pool {
    pub(super) fn mac(&self, i: usize) -> [u8; 6] {
        [2, 0, 0, self.mac, 0, i as u8]
    }
    pub(super) fn ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, self.net, self.base + i as u8)
    }
    pub(super) fn ip6(&self, i: usize) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, self.net6, 0, 0, 0, 0, self.base6 + i as u16)
    }
    /// Station `i`'s IPv6 or IPv4 address.
    pub(super) fn addr(&self, i: usize, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(self.ip6(i))
        } else {
            IpAddr::V4(self.ip(i))
        }
    }
}

/// The LAN hosts (VLAN 10).
pub(super) const HOSTS: Pool = Pool {
    mac: 0x01,
    net: 10,
    base: 10,
    net6: 0x10,
    base6: 0x10,
};
/// The WAN gateways' addresses (VLAN 20), and the pool of MACs their neighbour entries
/// point at.
pub(super) const GWS: Pool = Pool {
    mac: 0x0b,
    net: 20,
    base: 100,
    net6: 0x20,
    base6: 0x100,
};
pub(super) fn host_port(h: usize) -> u16 {
    V10_PORTS[h / HOSTS_PER_PORT]
}
pub(super) fn t_mac(t: usize) -> [u8; 6] {
    [2, 0, 0, 0x0a, 0, t as u8]
}
/// The router's IPv4 address on the WAN side (source of its ARP requests).
pub(super) const WAN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 20, 1);
/// Sender MAC of the WAN side on VLAN 20 port `q` (index in [`V20_PORTS`]).
pub(super) fn wan_mac(q: usize) -> [u8; 6] {
    [2, 0, 0, 0x0c, 0, q as u8]
}
pub(super) fn remote_ip(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 100, j as u8, 1)
}
/// IPv6 prefix `j` as `route` takes it.
pub(super) fn prefix6(j: usize) -> String {
    if j < X6_PARENT {
        format!("2001:db8:100:{j}::/64")
    } else {
        format!("2001:db8:{:x}::/48", 0x100 + j - X6_PARENT)
    }
}
/// The remote host in IPv6 prefix `j` (for the parent /48: outside its /64s).
pub(super) fn remote_ip6(j: usize) -> Ipv6Addr {
    if j < X6_PARENT {
        Ipv6Addr::new(0x2001, 0xdb8, 0x100, j as u16, 0, 0, 0, 1)
    } else if j == X6_PARENT {
        Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0xff, 0, 0, 0, 1)
    } else {
        Ipv6Addr::new(0x2001, 0xdb8, (0x100 + j - X6_PARENT) as u16, 0, 0, 0, 0, 1)
    }
}
pub(super) fn flow_port(h: usize, j: usize) -> u16 {
    20_000 + (h * NX + j) as u16
}
pub(super) fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}
/// Bit mask of the ports of `vlan` (10 or 20).
pub(super) fn vlan_mask(vlan: u16) -> u32 {
    let ports: &[u16] = if vlan == 10 { &V10_PORTS } else { &V20_PORTS };
    ports.iter().fold(0, |m, p| m | 1 << p)
}

/// History key of target `t`'s FDB entry (value: port).
pub(super) fn key_t(t: usize) -> usize {
    t
}
/// History key of pool MAC `m`'s FDB entry (value: port).
pub(super) fn key_m(m: usize) -> usize {
    NT + m
}
/// History key of IPv4 prefix `j`'s route (value: bit mask of gateways, 0 = no route).
pub(super) fn key_x(j: usize) -> usize {
    NT + NM + j
}
/// History key of IPv6 prefix `j`'s route (value: bit mask of gateways, 0 = no route).
pub(super) fn key_x6(j: usize) -> usize {
    NT + NM + NX + j
}
/// History key of gateway `a`'s neighbour entry, IPv4 or IPv6 (value: pool MAC index, or
/// [`NONE`] when no usable entry).
pub(super) fn key_n(a: usize, v6: bool) -> usize {
    NT + NM + NX + NX6 + a + if v6 { NG } else { 0 }
}
/// History key of IPv4 prefix `j`'s membership of the firewall's `blocked` set (value 1:
/// member, 0: not).
pub(super) fn key_b(j: usize) -> usize {
    NT + NM + NX + NX6 + 2 * NG + j
}
pub(super) const NKEYS: usize = NT + NM + NX + NX6 + 2 * NG + NX;

/// The generator's SplitMix64, with indexes.
#[derive(Clone, Debug)]
pub(super) struct Rng(pub(super) freeway_io::gen::Rng);

impl Rng {
    pub(super) fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

/// Traffic classes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Class {
    L2T = 1,
    L2H = 2,
    Fwd = 3,
    Reply = 4,
    Unsol = 5,
    Fwd6 = 6,
    Reply6 = 7,
    Unsol6 = 8,
}

impl Class {
    fn from_u8(v: u8) -> Option<Class> {
        Some(match v {
            1 => Class::L2T,
            2 => Class::L2H,
            3 => Class::Fwd,
            4 => Class::Reply,
            5 => Class::Unsol,
            6 => Class::Fwd6,
            7 => Class::Reply6,
            8 => Class::Unsol6,
            _ => return None,
        })
    }

    /// Routed towards a gateway (`FWD`, `FWD6`).
    pub(super) fn to_gateway(self) -> bool {
        matches!(self, Class::Fwd | Class::Fwd6)
    }

    pub(super) fn v6(self) -> bool {
        matches!(self, Class::Fwd6 | Class::Reply6 | Class::Unsol6)
    }

    /// The VLAN the frame enters on.
    pub(super) fn in_vlan(self) -> u16 {
        match self {
            Class::Reply | Class::Unsol | Class::Reply6 | Class::Unsol6 => 20,
            _ => 10,
        }
    }

    /// The VLAN the frame leaves on (if it may leave at all).
    pub(super) fn out_vlan(self) -> u16 {
        if self.to_gateway() {
            20
        } else {
            10
        }
    }
}

/// What a generated frame carries in its UDP payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tag {
    pub(super) worker: u16,
    pub(super) class: Class,
    pub(super) in_port: u16,
    /// Target, destination host or prefix (by class).
    pub(super) a: u8,
    /// Source or destination LAN host (by class).
    pub(super) b: u8,
    pub(super) seq: u64,
    /// `done` when the frame was generated.
    pub(super) lo: u64,
}

impl Tag {
    /// Writes the tag at `off` (the UDP payload).
    pub(super) fn write(&self, f: &mut [u8], off: usize) {
        let t = &mut f[off..off + TAG_LEN];
        t[0..4].copy_from_slice(MAGIC);
        t[4..6].copy_from_slice(&self.worker.to_be_bytes());
        t[6] = self.class as u8;
        t[7] = self.in_port as u8;
        t[8] = self.a;
        t[9] = self.b;
        t[10..18].copy_from_slice(&self.seq.to_be_bytes());
        t[18..26].copy_from_slice(&self.lo.to_be_bytes());
    }

    fn read_at(t: &[u8]) -> Option<Tag> {
        if &t[0..4] != MAGIC {
            return None;
        }
        Some(Tag {
            worker: u16::from_be_bytes([t[4], t[5]]),
            class: Class::from_u8(t[6])?,
            in_port: u16::from(t[7]),
            a: t[8],
            b: t[9],
            seq: u64::from_be_bytes(t[10..18].try_into().ok()?),
            lo: u64::from_be_bytes(t[18..26].try_into().ok()?),
        })
    }

    /// The tag of a harness frame (Ethernet, at most one 802.1Q tag, IPv4 with a 20-byte
    /// header or IPv6 without extension headers, UDP), with where its headers are.
    pub(super) fn read(f: &[u8]) -> Option<(Tag, Hdr)> {
        let (vid, et, l3) = l2(f)?;
        let (v6, payload) = match et {
            0x0800 if *f.get(l3)? == 0x45 && *f.get(l3 + 9)? == 17 => (false, l3 + 28),
            0x86dd if *f.get(l3)? >> 4 == 6 && *f.get(l3 + 6)? == 17 => (true, l3 + 48),
            _ => return None,
        };
        let tag = Tag::read_at(f.get(payload..payload + TAG_LEN)?)?;
        let ttl = if v6 { f[l3 + 7] } else { f[l3 + 8] };
        Some((tag, Hdr { vid, l3, v6, ttl }))
    }
}

/// Where a harness frame's headers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hdr {
    /// The 802.1Q VID, if tagged.
    pub(super) vid: Option<u16>,
    /// Offset of the IP header.
    pub(super) l3: usize,
    pub(super) v6: bool,
    /// TTL or hop limit.
    pub(super) ttl: u8,
}

/// `(VID if tagged, ethertype, offset of the L3 header)` of an Ethernet frame.
pub(super) fn l2(f: &[u8]) -> Option<(Option<u16>, u16, usize)> {
    let et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    if et == 0x8100 {
        let vid = u16::from_be_bytes([*f.get(14)?, *f.get(15)?]) & 0x0fff;
        let et = u16::from_be_bytes([*f.get(16)?, *f.get(17)?]);
        Some((Some(vid), et, 18))
    } else {
        Some((None, et, 14))
    }
}

/// The length of a harness frame and the offset of its tag.
pub(super) fn frame_layout(vlan: Option<u16>, v6: bool) -> (usize, usize) {
    let off = 14 + if vlan.is_some() { 4 } else { 0 } + if v6 { 40 } else { 20 } + 8;
    (off + TAG_LEN, off)
}

pub(super) fn ip_checksum_ok(f: &[u8], l3: usize) -> bool {
    let Some(ip) = f.get(l3..l3 + 20) else { return false };
    let mut s: u32 = ip.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

/// A neighbour solicitation the router sent for a gateway: `(gateway, IPv6, VID if tagged)`,
/// or why it is not one. An ARP request: broadcast, from the router's MAC and WAN address,
/// for a gateway's IPv4 address; an NS: to the target's solicited-node group, hop limit 255,
/// ICMPv6 type 135 for a gateway's IPv6 address.
pub(super) fn solicitation(f: &[u8]) -> Result<(usize, bool, Option<u16>), String> {
    let (vid, et, l3) = l2(f).ok_or("short frame")?;
    let src: [u8; 6] = f[6..12].try_into().map_err(|_| "short frame")?;
    if src != RMAC {
        return Err(format!("not from the router: {}", mac_text(src)));
    }
    match et {
        0x0806 => {
            let a = f.get(l3..l3 + 28).ok_or("short ARP")?;
            if a[0..8] != [0, 1, 8, 0, 6, 4, 0, 1] || a[8..14] != RMAC || a[14..18] != WAN_ADDR.octets() {
                return Err(format!("not the router's ARP request: {a:02x?}"));
            }
            if f[0..6] != [0xff; 6] {
                return Err(format!(
                    "ARP request to {}",
                    mac_text(f[0..6].try_into().unwrap_or([0; 6]))
                ));
            }
            let g = (0..NG)
                .find(|&g| a[24..28] == GWS.ip(g).octets())
                .ok_or_else(|| format!("ARP request for {:?}, no gateway", &a[24..28]))?;
            Ok((g, false, vid))
        }
        0x86dd => {
            let ip = f.get(l3..l3 + 64).ok_or("short NS")?;
            if ip[6] != 58 || ip[7] != 255 || ip[40] != 135 {
                return Err(format!(
                    "IPv6 next header {} hop limit {} type {}: not an NS",
                    ip[6], ip[7], ip[40]
                ));
            }
            let g = (0..NG)
                .find(|&g| ip[48..64] == GWS.ip6(g).octets())
                .ok_or("NS for no gateway")?;
            let t = GWS.ip6(g).octets();
            if f[0..6] != [0x33, 0x33, 0xff, t[13], t[14], t[15]] {
                return Err("NS not to the target's solicited-node group".into());
            }
            Ok((g, true, vid))
        }
        _ => Err(format!("ethertype {et:#06x}")),
    }
}
