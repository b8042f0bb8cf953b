//! What the firewall reads of one packet ([`Fields`]), filled once per packet from the parsed
//! frame, and the value of each [`Field`] a rule can name ([`value`]), shared by both
//! evaluators so that they cannot disagree on what a packet holds.
//!
//! A field whose protocol the packet lacks has no value (`None`): `tcp dport` of a UDP packet,
//! `ip saddr` of an IPv6 one, `icmp type` of a non-first fragment. As in nftables (where the
//! payload load fails and ends the rule), a match on such a field fails whatever it compares,
//! `!=` included.
//!
//! Threads: pure functions of their arguments.

use freeway_packet::bytes::{rd128, rd16, rd32};
use freeway_packet::wire::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP,
};
use freeway_packet::{Meta, NO_OFFSET, NO_VLAN};

use crate::ast::Field;

/// An interface id meaning "none" (no input or no output interface known).
pub const NO_IF: u32 = u32::MAX;

/// `meta nfproto` of IPv4.
pub const NFPROTO_IPV4: u8 = 2;
/// `meta nfproto` of IPv6.
pub const NFPROTO_IPV6: u8 = 10;

const IPPROTO_DCCP: u8 = 33;
const IPPROTO_NONXT: u8 = 59;
const IPPROTO_UDPLITE: u8 = 136;

/// What the firewall reads of one packet: filled once per packet from the parsed frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// The input interface's id ([`NO_IF`]: none or unknown).
    pub iif: u32,
    /// The output interface's id ([`NO_IF`]: none or unknown).
    pub oif: u32,
    /// 0 not IP, 2 IPv4, 10 IPv6 (the kernel's `NFPROTO_*` values).
    pub nfproto: u8,
    /// Source address (IPv4 in the low 32 bits).
    pub saddr: u128,
    /// Destination address (IPv4 in the low 32 bits).
    pub daddr: u128,
    /// The transport protocol (IPv6 extension headers skipped).
    pub l4proto: u8,
    /// Bytes 0-1 of the transport header: the source port of TCP, UDP, UDP-Lite, SCTP and
    /// DCCP (`th sport` reads them for any protocol).
    pub sport: u16,
    /// Bytes 2-3 of the transport header: the destination port where there are ports.
    pub dport: u16,
    /// TCP flag bits.
    pub tcp_flags: u8,
    /// ICMP or ICMPv6 type.
    pub icmp_type: u8,
    /// ICMP or ICMPv6 code.
    pub icmp_code: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// The IP packet's length in bytes (what `counter` counts).
    pub length: u16,
    /// One of the kernel's ct state bits (invalid 1, established 2, related 4, new 8,
    /// untracked 64), 0 if the packet was not looked up in a connection table: then `ct state`
    /// and `ct zone` match nothing.
    pub ct_state: u8,
    /// The connection's zone.
    pub ct_zone: u16,
    /// The packet mark.
    pub mark: u32,
    /// The outer VLAN id; 0 = untagged (no `vlan id` match).
    pub vlan: u16,
    /// Source MAC address (48 bits).
    pub ether_saddr: u64,
    /// Destination MAC address (48 bits).
    pub ether_daddr: u64,
    /// The innermost EtherType; 0 = no Ethernet header (no `ether …` match).
    pub ether_type: u16,
    /// No transport header: a non-first fragment, or fewer than four bytes of one (ports,
    /// flags and ICMP types never match).
    pub frag: bool,
}

fn mac_at(b: &[u8], i: usize) -> u64 {
    b[i..i + 6].iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

impl Fields {
    /// Fills what the frame gives from the parser's metadata (`l3_off`, `l4_off`,
    /// `ip_proto`, `vlan`, `ethertype`); `iif`, `oif` (set to [`NO_IF`]), `ct_*` and `mark`
    /// are left for the caller. A frame the parser did not describe (offsets out of the
    /// frame) gives what could be read, never a panic.
    pub fn from_packet(frame: &[u8], meta: &Meta) -> Fields {
        let mut x = Fields {
            iif: NO_IF,
            oif: NO_IF,
            ..Fields::default()
        };
        if frame.len() < 14 {
            return x;
        }
        x.ether_daddr = mac_at(frame, 0);
        x.ether_saddr = mac_at(frame, 6);
        x.ether_type = meta.ethertype;
        x.vlan = if meta.vlan == NO_VLAN { 0 } else { meta.vlan };
        let l3 = usize::from(meta.l3_off);
        if meta.l3_off == NO_OFFSET {
            return x;
        }
        match meta.ethertype {
            ETHERTYPE_IPV4 if frame.len() >= l3 + 20 => {
                x.nfproto = NFPROTO_IPV4;
                x.length = rd16(frame, l3 + 2);
                x.ttl = frame[l3 + 8];
                x.saddr = u128::from(rd32(frame, l3 + 12));
                x.daddr = u128::from(rd32(frame, l3 + 16));
                x.frag = rd16(frame, l3 + 6) & 0x1fff != 0;
            }
            ETHERTYPE_IPV6 if frame.len() >= l3 + 40 => {
                x.nfproto = NFPROTO_IPV6;
                x.length = rd16(frame, l3 + 4).saturating_add(40);
                x.ttl = frame[l3 + 7];
                x.saddr = rd128(frame, l3 + 8);
                x.daddr = rd128(frame, l3 + 24);
                // The parser leaves no L4 offset for a non-first fragment (and for "no next
                // header", which has no transport either).
                x.frag = meta.l4_off == NO_OFFSET && meta.ip_proto != IPPROTO_NONXT;
            }
            _ => return x,
        }
        x.l4proto = meta.ip_proto;
        let l4 = usize::from(meta.l4_off);
        if meta.l4_off == NO_OFFSET {
            x.frag = true;
            return x;
        }
        let has = |n: usize| frame.len() >= l4 + n;
        if !has(4) {
            // Too short to read a transport header from: as a fragment, nothing of it matches.
            x.frag = true;
            return x;
        }
        // The first four bytes, whatever the protocol: `th sport`/`th dport` read them raw
        // (an ICMP header's type and code, and its checksum), as nftables does.
        x.sport = rd16(frame, l4);
        x.dport = rd16(frame, l4 + 2);
        match x.l4proto {
            IPPROTO_TCP if has(14) => {
                x.tcp_flags = frame[l4 + 13];
            }
            IPPROTO_ICMP | IPPROTO_ICMPV6 => {
                x.icmp_type = frame[l4];
                x.icmp_code = frame[l4 + 1];
            }
            _ => {}
        }
        x
    }
}

/// The value of `field` in the packet, or `None` when the packet lacks its protocol (then
/// every match on it fails, `!=` included).
#[inline]
pub fn value(field: Field, f: &Fields) -> Option<u128> {
    use Field::*;
    let v4 = f.nfproto == NFPROTO_IPV4;
    let v6 = f.nfproto == NFPROTO_IPV6;
    let ip = v4 || v6;
    let l4 = ip && !f.frag;
    let (ok, v): (bool, u128) = match field {
        IifName => (f.iif != NO_IF, f.iif.into()),
        OifName => (f.oif != NO_IF, f.oif.into()),
        L4Proto => (ip, f.l4proto.into()),
        NfProto => (true, f.nfproto.into()),
        Mark => (true, f.mark.into()),
        Length => (ip, f.length.into()),
        IpSaddr => (v4, f.saddr),
        IpDaddr => (v4, f.daddr),
        IpProtocol => (v4, f.l4proto.into()),
        IpTtl => (v4, f.ttl.into()),
        Ip6Saddr => (v6, f.saddr),
        Ip6Daddr => (v6, f.daddr),
        Ip6Nexthdr => (v6, f.l4proto.into()),
        Ip6Hoplimit => (v6, f.ttl.into()),
        TcpSport => (l4 && f.l4proto == IPPROTO_TCP, f.sport.into()),
        TcpDport => (l4 && f.l4proto == IPPROTO_TCP, f.dport.into()),
        TcpFlags => (l4 && f.l4proto == IPPROTO_TCP, f.tcp_flags.into()),
        UdpSport => (l4 && f.l4proto == IPPROTO_UDP, f.sport.into()),
        UdpDport => (l4 && f.l4proto == IPPROTO_UDP, f.dport.into()),
        // Raw bytes 0-1 and 2-3 of any transport header, with no protocol implied.
        ThSport => (l4, f.sport.into()),
        ThDport => (l4, f.dport.into()),
        IcmpType => (l4 && v4 && f.l4proto == IPPROTO_ICMP, f.icmp_type.into()),
        IcmpCode => (l4 && v4 && f.l4proto == IPPROTO_ICMP, f.icmp_code.into()),
        Icmpv6Type => (l4 && v6 && f.l4proto == IPPROTO_ICMPV6, f.icmp_type.into()),
        Icmpv6Code => (l4 && v6 && f.l4proto == IPPROTO_ICMPV6, f.icmp_code.into()),
        CtState => (f.ct_state != 0, f.ct_state.into()),
        CtZone => (f.ct_state != 0, f.ct_zone.into()),
        VlanId => (f.vlan != 0, f.vlan.into()),
        EtherSaddr => (f.ether_type != 0, f.ether_saddr.into()),
        EtherDaddr => (f.ether_type != 0, f.ether_daddr.into()),
        EtherType => (f.ether_type != 0, f.ether_type.into()),
    };
    ok.then_some(v)
}

/// Whether a transport protocol has 16-bit ports at the start of its header (`th sport`).
pub fn has_ports(l4proto: u8) -> bool {
    matches!(
        l4proto,
        IPPROTO_TCP | IPPROTO_UDP | IPPROTO_UDPLITE | IPPROTO_SCTP | IPPROTO_DCCP
    )
}

/// The largest value a field can hold (an interface id's for interface names).
pub fn max_value(field: Field) -> u128 {
    match field.value_type().bits() {
        0 => u128::from(u32::MAX),
        128 => u128::MAX,
        b => (1u128 << b) - 1,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use freeway_packet::build::{build_frame, tcp_flags, FrameSpec, L4};
    use freeway_packet::{parse_frame, Meta};

    use super::*;

    fn fields(frame: &[u8]) -> Fields {
        let mut m = Meta::default();
        parse_frame(frame, &mut m).expect("parses");
        Fields::from_packet(frame, &m)
    }

    #[test]
    fn ipv4_tcp() {
        let spec = FrameSpec {
            proto: L4::Tcp { flags: tcp_flags::SYN },
            src_port: 40000,
            dst_port: 22,
            ttl: 9,
            ..FrameSpec::default()
        };
        let f = fields(&build_frame(&spec));
        assert_eq!(f.nfproto, 2);
        assert_eq!(f.saddr, 0x0a00_0001);
        assert_eq!(f.daddr, 0x0a00_0002);
        assert_eq!((f.l4proto, f.sport, f.dport, f.tcp_flags), (6, 40000, 22, 2));
        assert_eq!((f.ttl, f.length, f.frag), (9, 46, false));
        assert_eq!((f.iif, f.oif), (NO_IF, NO_IF));
        assert_eq!(f.ether_saddr, 0x0200_0000_0001);
        assert_eq!(f.ether_daddr, 0x0200_0000_0002);
        assert_eq!((f.ether_type, f.vlan), (0x0800, 0));
        assert_eq!(value(Field::TcpDport, &f), Some(22));
        assert_eq!(value(Field::UdpDport, &f), None);
        assert_eq!(value(Field::ThDport, &f), Some(22));
        assert_eq!(value(Field::Ip6Saddr, &f), None);
        assert_eq!(value(Field::VlanId, &f), None);
    }

    #[test]
    fn ipv4_udp_vlan() {
        let spec = FrameSpec {
            vlan: Some(42),
            src_port: 53,
            dst_port: 5353,
            ..FrameSpec::default()
        };
        let f = fields(&build_frame(&spec));
        assert_eq!((f.l4proto, f.sport, f.dport), (17, 53, 5353));
        assert_eq!(f.vlan, 42);
        assert_eq!(f.ether_type, 0x0800);
        assert_eq!(value(Field::VlanId, &f), Some(42));
        assert_eq!(value(Field::UdpDport, &f), Some(5353));
        assert_eq!(value(Field::TcpDport, &f), None);
    }

    #[test]
    fn icmp_both_families() {
        let spec = FrameSpec {
            proto: L4::Icmp,
            ..FrameSpec::default()
        };
        let f = fields(&build_frame(&spec));
        assert_eq!((f.l4proto, f.icmp_type, f.icmp_code), (1, 8, 0));
        assert_eq!(value(Field::IcmpType, &f), Some(8));
        assert_eq!(value(Field::Icmpv6Type, &f), None);
        let spec = FrameSpec {
            proto: L4::Icmp,
            src_ip: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            dst_ip: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
            ttl: 3,
            ..FrameSpec::default()
        };
        let f = fields(&build_frame(&spec));
        assert_eq!(f.nfproto, 10);
        assert_eq!(f.saddr, 0x2001_0db8_0000_0000_0000_0000_0000_0001);
        assert_eq!((f.l4proto, f.icmp_type, f.ttl), (58, 128, 3));
        assert_eq!(value(Field::Icmpv6Type, &f), Some(128));
        assert_eq!(value(Field::IcmpType, &f), None);
        assert_eq!(value(Field::Ip6Hoplimit, &f), Some(3));
    }

    #[test]
    fn ipv6_tcp() {
        let spec = FrameSpec {
            proto: L4::Tcp { flags: tcp_flags::ACK },
            src_ip: IpAddr::V6(Ipv6Addr::LOCALHOST),
            dst_ip: IpAddr::V6(Ipv6Addr::LOCALHOST),
            dst_port: 443,
            ..FrameSpec::default()
        };
        let f = fields(&build_frame(&spec));
        assert_eq!((f.nfproto, f.l4proto, f.dport, f.tcp_flags), (10, 6, 443, 0x10));
        assert_eq!(f.length, 60);
        assert_eq!(value(Field::IpSaddr, &f), None);
        assert_eq!(value(Field::Ip6Saddr, &f), Some(1));
    }

    #[test]
    fn fragments_have_no_transport() {
        let spec = FrameSpec {
            proto: L4::Tcp { flags: 0 },
            src_ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            ..FrameSpec::default()
        };
        let mut frame = build_frame(&spec);
        // A non-first fragment: offset 8 (in 8-byte units), checksum not checked here.
        frame[14 + 6] = 0x00;
        frame[14 + 7] = 0x08;
        let f = fields(&frame);
        assert!(f.frag);
        assert_eq!(f.l4proto, 6);
        assert_eq!(value(Field::TcpDport, &f), None);
        assert_eq!(value(Field::L4Proto, &f), Some(6));
        assert_eq!(value(Field::IpSaddr, &f), Some(0xc000_0201));
        // A first fragment (more fragments, offset 0) keeps its transport header.
        frame[14 + 6] = 0x20;
        frame[14 + 7] = 0x00;
        let f = fields(&frame);
        assert!(!f.frag);
        assert_eq!(value(Field::TcpDport, &f), Some(80));
    }

    #[test]
    fn short_or_non_ip_frames() {
        let f = Fields::from_packet(&[0u8; 10], &Meta::default());
        assert_eq!(f.nfproto, 0);
        assert_eq!(f.ether_type, 0);
        let arp = freeway_packet::build::build_arp_request(
            [2, 0, 0, 0, 0, 9],
            None,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
        );
        let f = fields(&arp);
        assert_eq!((f.nfproto, f.ether_type), (0, 0x0806));
        assert_eq!(value(Field::L4Proto, &f), None);
        assert_eq!(value(Field::EtherType, &f), Some(0x0806));
    }
}
