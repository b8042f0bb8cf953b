//! Frame builders for tests and the traffic generator.
//!
//! [`build_frame`] writes Ethernet (+ optional 802.1Q tag) / IPv4 or IPv6 / UDP, TCP or ICMP
//! echo request frames with a valid IPv4 header checksum and valid L4 checksums;
//! [`build_arp_request`] and [`build_arp_reply`] write ARP frames. The payload is zeros.
//!
//! These run on the control path (building templates), not per packet; they never panic.
//!
//! Threads: pure functions of their arguments.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::{wr16, wr32};
use crate::checksum::{fold, pseudo_v4, pseudo_v6, sum};
use crate::parse::MAX_FRAME;
use crate::wire::{
    ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP,
    IPPROTO_UDP, VID_MASK,
};

/// The minimum Ethernet frame length without FCS (what goes on a real wire).
pub const ETH_MIN_FRAME: usize = 60;

/// TCP flag bits for [`L4::Tcp`].
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
}

/// The L4 part of a built frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// UDP, ports from the spec.
    Udp,
    /// TCP with these flags ([`tcp_flags`]), ports from the spec, sequence number 1,
    /// acknowledgment 1 if ACK is set (else 0), window 65535, no options.
    Tcp {
        /// Flag bits.
        flags: u8,
    },
    /// ICMP echo request (ICMPv6 echo request over IPv6); identifier = `src_port`,
    /// sequence number = `dst_port`.
    Icmp,
}

/// Everything that goes into one frame built by [`build_frame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameSpec {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// An 802.1Q tag (TPID 0x8100, PCP 0) with this VID (masked to 12 bits), or untagged.
    pub vlan: Option<u16>,
    /// Source address. If the two addresses differ in family, the IPv4 one is used in its
    /// IPv4-mapped IPv6 form and the frame is IPv6.
    pub src_ip: IpAddr,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// L4 protocol.
    pub proto: L4,
    /// Source port (ICMP: echo identifier).
    pub src_port: u16,
    /// Destination port (ICMP: echo sequence number).
    pub dst_port: u16,
    /// Total frame length without FCS. Raised to [`header_len`] if smaller and capped at
    /// [`MAX_FRAME`]; the rest is zero payload inside the L4 segment (the IP length covers it,
    /// so there is no Ethernet padding). Use at least [`ETH_MIN_FRAME`] for frames that go to
    /// a real wire; shorter values (e.g. the 42-byte UDP frames of the conntrack benchmark)
    /// are allowed.
    pub len: usize,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
    /// Whether to compute the L4 checksum. `false` writes 0 (for UDP over IPv4: "no
    /// checksum"; ICMPv4 always gets its checksum).
    pub l4_checksum: bool,
}

impl Default for FrameSpec {
    /// 02:00:00:00:00:01 → 02:00:00:00:00:02, untagged, 10.0.0.1:1024 → 10.0.0.2:80 UDP,
    /// 60 bytes, TTL 64, checksums on.
    fn default() -> Self {
        FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            src_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            proto: L4::Udp,
            src_port: 1024,
            dst_port: 80,
            len: ETH_MIN_FRAME,
            ttl: 64,
            l4_checksum: true,
        }
    }
}

enum Addrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

fn addrs(spec: &FrameSpec) -> Addrs {
    match (spec.src_ip, spec.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Addrs::V4(s, d),
        (s, d) => Addrs::V6(to_v6(s), to_v6(d)),
    }
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

fn l4_header_len(proto: L4) -> usize {
    match proto {
        L4::Udp | L4::Icmp => 8,
        L4::Tcp { .. } => 20,
    }
}

/// The length of all headers of `spec`'s frame: the smallest frame [`build_frame`] writes.
pub fn header_len(spec: &FrameSpec) -> usize {
    let l2 = if spec.vlan.is_some() { 18 } else { 14 };
    let l3 = match addrs(spec) {
        Addrs::V4(..) => 20,
        Addrs::V6(..) => 40,
    };
    l2 + l3 + l4_header_len(spec.proto)
}

/// The length [`build_frame`] will produce for `spec`.
pub fn frame_len(spec: &FrameSpec) -> usize {
    spec.len.clamp(header_len(spec), MAX_FRAME)
}

/// Builds the frame described by `spec`.
pub fn build_frame(spec: &FrameSpec) -> Vec<u8> {
    let mut v = vec![0u8; frame_len(spec)];
    let n = build_frame_into(spec, &mut v);
    v.truncate(n.unwrap_or(0));
    v
}

/// Writes an Ethernet header (with an 802.1Q tag, TPID 0x8100 and PCP 0, when `vlan` is set;
/// the VID is masked to 12 bits) at the front of `buf` and returns its length (14 or 18).
/// Panics if `buf` is shorter than that.
#[inline]
pub fn write_l2(buf: &mut [u8], dst: [u8; 6], src: [u8; 6], vlan: Option<u16>, ethertype: u16) -> usize {
    buf[0..6].copy_from_slice(&dst);
    buf[6..12].copy_from_slice(&src);
    match vlan {
        Some(vid) => {
            wr16(buf, 12, ETHERTYPE_VLAN);
            wr16(buf, 14, vid & VID_MASK);
            wr16(buf, 16, ethertype);
            18
        }
        None => {
            wr16(buf, 12, ethertype);
            14
        }
    }
}

/// Builds the frame described by `spec` into the front of `buf` (zeroing the payload) and
/// returns its length ([`frame_len`]), or `None` (and writes nothing) if `buf` is too short.
pub fn build_frame_into(spec: &FrameSpec, buf: &mut [u8]) -> Option<usize> {
    let total = frame_len(spec);
    let buf = buf.get_mut(..total)?;
    buf.fill(0);
    let a = addrs(spec);
    let ethertype = match a {
        Addrs::V4(..) => ETHERTYPE_IPV4,
        Addrs::V6(..) => ETHERTYPE_IPV6,
    };
    let l3 = write_l2(buf, spec.dst_mac, spec.src_mac, spec.vlan, ethertype);
    // The IP protocol number of the L4 part; ICMP's depends on the family.
    let ip_proto = |icmp: u8| match spec.proto {
        L4::Udp => IPPROTO_UDP,
        L4::Tcp { .. } => IPPROTO_TCP,
        L4::Icmp => icmp,
    };
    let (l4, ip_proto) = match a {
        Addrs::V4(s, d) => {
            let proto = ip_proto(IPPROTO_ICMP);
            let h = &mut buf[l3..l3 + 20];
            h[0] = 0x45;
            wr16(h, 2, (total - l3) as u16);
            wr16(h, 6, 0x4000); // DF
            h[8] = spec.ttl;
            h[9] = proto;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = fold(sum(h, 0));
            wr16(h, 10, c);
            (l3 + 20, proto)
        }
        Addrs::V6(s, d) => {
            let proto = ip_proto(IPPROTO_ICMPV6);
            let h = &mut buf[l3..l3 + 40];
            h[0] = 0x60;
            wr16(h, 4, (total - l3 - 40) as u16);
            h[6] = proto;
            h[7] = spec.ttl;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            (l3 + 40, proto)
        }
    };
    let seg_len = total - l4;
    let seg = &mut buf[l4..];
    let csum_at = match spec.proto {
        L4::Udp => {
            wr16(seg, 0, spec.src_port);
            wr16(seg, 2, spec.dst_port);
            wr16(seg, 4, seg_len as u16);
            6
        }
        L4::Tcp { flags } => {
            wr16(seg, 0, spec.src_port);
            wr16(seg, 2, spec.dst_port);
            wr32(seg, 4, 1u32);
            let ack = if flags & tcp_flags::ACK != 0 { 1u32 } else { 0 };
            wr32(seg, 8, ack);
            seg[12] = 5 << 4;
            seg[13] = flags;
            wr16(seg, 14, 0xffff);
            16
        }
        L4::Icmp => {
            seg[0] = if ip_proto == IPPROTO_ICMP { 8 } else { 128 };
            wr16(seg, 4, spec.src_port);
            wr16(seg, 6, spec.dst_port);
            2
        }
    };
    let csum = if ip_proto == IPPROTO_ICMP {
        Some(fold(sum(seg, 0)))
    } else if spec.l4_checksum {
        let pseudo = match a {
            Addrs::V4(s, d) => pseudo_v4(s.octets(), d.octets(), ip_proto, seg_len as u16),
            Addrs::V6(s, d) => pseudo_v6(s.octets(), d.octets(), ip_proto, seg_len as u32),
        };
        let c = fold(sum(seg, pseudo));
        // UDP transmits a computed 0 as all-ones (0 means "no checksum").
        Some(if c == 0 && ip_proto == IPPROTO_UDP { 0xffff } else { c })
    } else {
        None
    };
    if let Some(c) = csum {
        wr16(seg, csum_at, c);
    }
    Some(total)
}

/// ARP operation codes.
const ARP_REQUEST: u16 = 1;
const ARP_REPLY: u16 = 2;

fn build_arp(
    eth_dst: [u8; 6],
    src_mac: [u8; 6],
    vlan: Option<u16>,
    op: u16,
    target_mac: [u8; 6],
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let l2 = if vlan.is_some() { 18 } else { 14 };
    let mut f = vec![0u8; (l2 + 28).max(ETH_MIN_FRAME)];
    let o = write_l2(&mut f, eth_dst, src_mac, vlan, ETHERTYPE_ARP);
    let a = &mut f[o..o + 28];
    wr16(a, 0, 1); // Ethernet
    wr16(a, 2, ETHERTYPE_IPV4);
    a[4] = 6;
    a[5] = 4;
    wr16(a, 6, op);
    a[8..14].copy_from_slice(&src_mac);
    a[14..18].copy_from_slice(&sender_ip.octets());
    a[18..24].copy_from_slice(&target_mac);
    a[24..28].copy_from_slice(&target_ip.octets());
    f
}

/// A broadcast ARP request "who has `target_ip`? tell `sender_ip`" from `src_mac`, padded to
/// [`ETH_MIN_FRAME`] bytes.
pub fn build_arp_request(src_mac: [u8; 6], vlan: Option<u16>, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Vec<u8> {
    build_arp([0xff; 6], src_mac, vlan, ARP_REQUEST, [0; 6], sender_ip, target_ip)
}

/// A unicast ARP reply "`sender_ip` is at `src_mac`" to `dst_mac`/`target_ip`, padded to
/// [`ETH_MIN_FRAME`] bytes.
pub fn build_arp_reply(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    vlan: Option<u16>,
    sender_ip: Ipv4Addr,
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    build_arp(dst_mac, src_mac, vlan, ARP_REPLY, dst_mac, sender_ip, target_ip)
}
