//! The frame builders, checked with smoltcp's views (which also exercises the re-exported
//! header views on valid and truncated frames).

use std::net::{IpAddr, Ipv4Addr};

use freeway_packet::build::*;
use freeway_packet::wire::*;
use freeway_packet::MAX_FRAME;
use proptest::prelude::*;

fn ip(a: IpAddr) -> IpAddress {
    match a {
        IpAddr::V4(a) => IpAddress::Ipv4(a),
        IpAddr::V6(a) => IpAddress::Ipv6(a),
    }
}

/// Parses `f` with smoltcp's views according to `s` and checks every field and checksum.
fn verify(s: &FrameSpec, f: &[u8]) {
    assert_eq!(f.len(), frame_len(s));
    assert!(f.len() >= header_len(s));
    let eth = EthernetFrame::new_checked(f).expect("ethernet");
    assert_eq!(eth.src_addr(), EthernetAddress(s.src_mac));
    assert_eq!(eth.dst_addr(), EthernetAddress(s.dst_mac));
    let (ethertype, l3) = match s.vlan {
        Some(vid) => {
            assert_eq!(u16::from(eth.ethertype()), ETHERTYPE_VLAN);
            let tag = VlanTag::new_checked(eth.payload()).expect("vlan");
            assert_eq!((tag.vid(), tag.pcp(), tag.dei()), (vid & 0xfff, 0, false));
            (tag.ethertype(), tag.payload())
        }
        None => (u16::from(eth.ethertype()), eth.payload()),
    };
    let (src, dst, proto, l4): (IpAddress, IpAddress, u8, &[u8]) = match (s.src_ip, s.dst_ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            assert_eq!(ethertype, ETHERTYPE_IPV4);
            let p = Ipv4Packet::new_checked(l3).expect("ipv4");
            assert!(p.verify_checksum(), "ipv4 header checksum");
            assert_eq!(usize::from(p.total_len()), l3.len());
            assert_eq!((p.src_addr(), p.dst_addr(), p.hop_limit()), (a, b, s.ttl));
            assert!(p.dont_frag() && !p.more_frags() && p.frag_offset() == 0);
            let r = Ipv4Repr::parse(&p, &smoltcp::phy::ChecksumCapabilities::default()).expect("ipv4 repr");
            assert_eq!(r.payload_len, l3.len() - 20);
            (
                IpAddress::Ipv4(a),
                IpAddress::Ipv4(b),
                u8::from(p.next_header()),
                p.payload(),
            )
        }
        (a, b) => {
            let map = |x: IpAddr| match x {
                IpAddr::V4(x) => x.to_ipv6_mapped(),
                IpAddr::V6(x) => x,
            };
            assert_eq!(ethertype, ETHERTYPE_IPV6);
            let p = Ipv6Packet::new_checked(l3).expect("ipv6");
            assert_eq!(usize::from(p.payload_len()) + 40, l3.len());
            assert_eq!((p.src_addr(), p.dst_addr(), p.hop_limit()), (map(a), map(b), s.ttl));
            Ipv6Repr::parse(&p).expect("ipv6 repr");
            (
                ip(map(a).into()),
                ip(map(b).into()),
                u8::from(p.next_header()),
                p.payload(),
            )
        }
    };
    match s.proto {
        L4::Udp => {
            assert_eq!(proto, IPPROTO_UDP);
            let u = UdpPacket::new_checked(l4).expect("udp");
            assert_eq!(
                (u.src_port(), u.dst_port(), usize::from(u.len())),
                (s.src_port, s.dst_port, l4.len())
            );
            if s.l4_checksum {
                assert!(u.checksum() != 0 && u.verify_checksum(&src, &dst), "udp checksum");
            } else {
                assert_eq!(u.checksum(), 0);
            }
        }
        L4::Tcp { flags } => {
            assert_eq!(proto, IPPROTO_TCP);
            let t = TcpPacket::new_checked(l4).expect("tcp");
            assert_eq!(
                (t.src_port(), t.dst_port(), t.header_len()),
                (s.src_port, s.dst_port, 20)
            );
            assert_eq!(t.syn(), flags & tcp_flags::SYN != 0);
            assert_eq!(t.ack(), flags & tcp_flags::ACK != 0);
            assert_eq!(t.fin(), flags & tcp_flags::FIN != 0);
            assert_eq!(t.rst(), flags & tcp_flags::RST != 0);
            assert_eq!(t.payload().len(), l4.len() - 20);
            if s.l4_checksum {
                assert!(t.verify_checksum(&src, &dst), "tcp checksum");
            }
        }
        L4::Icmp if matches!(src, IpAddress::Ipv4(_)) => {
            assert_eq!(proto, IPPROTO_ICMP);
            let i = Icmpv4Packet::new_checked(l4).expect("icmp");
            assert!(i.verify_checksum(), "icmp checksum");
            assert_eq!(i.msg_type(), Icmpv4Message::EchoRequest);
            assert_eq!((i.echo_ident(), i.echo_seq_no()), (s.src_port, s.dst_port));
        }
        L4::Icmp => {
            assert_eq!(proto, IPPROTO_ICMPV6);
            let i = Icmpv6Packet::new_checked(l4).expect("icmpv6");
            let (IpAddress::Ipv6(a), IpAddress::Ipv6(b)) = (src, dst) else {
                unreachable!()
            };
            if s.l4_checksum {
                assert!(i.verify_checksum(&a, &b), "icmpv6 checksum");
            }
            assert_eq!(i.msg_type(), Icmpv6Message::EchoRequest);
            assert_eq!((i.echo_ident(), i.echo_seq_no()), (s.src_port, s.dst_port));
        }
    }
}

#[test]
fn defaults_give_a_60_byte_udp_frame() {
    let s = FrameSpec::default();
    let f = build_frame(&s);
    assert_eq!(f.len(), ETH_MIN_FRAME);
    verify(&s, &f);
}

#[test]
fn every_protocol_family_and_tagging() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let v4 = (ip("10.1.1.1"), ip("10.1.1.2"));
    let v6 = (ip("2001:db8::1"), ip("fe80::2"));
    for (src_ip, dst_ip) in [v4, v6, (v4.0, v6.1)] {
        for proto in [
            L4::Udp,
            L4::Icmp,
            L4::Tcp { flags: tcp_flags::SYN },
            L4::Tcp { flags: 0x3f },
        ] {
            for vlan in [None, Some(1), Some(4095), Some(0xffff)] {
                for len in [0, 42, 60, 61, 64, 1514, MAX_FRAME + 5] {
                    let s = FrameSpec {
                        src_ip,
                        dst_ip,
                        proto,
                        vlan,
                        len,
                        src_port: 7,
                        dst_port: 9,
                        ..Default::default()
                    };
                    verify(&s, &build_frame(&s));
                }
            }
        }
    }
}

#[test]
fn conntrack_benchmark_frame() {
    // The conntrack benchmark's frame: 42-byte Ethernet/IPv4/UDP, no payload, UDP checksum 0, TTL 0.
    let s = FrameSpec {
        src_ip: Ipv4Addr::new(10, 1, 1, 1).into(),
        dst_ip: Ipv4Addr::new(10, 1, 1, 2).into(),
        src_port: 1,
        dst_port: 2,
        len: 42,
        ttl: 0,
        l4_checksum: false,
        ..Default::default()
    };
    let f = build_frame(&s);
    assert_eq!(f.len(), 42);
    verify(&s, &f);
    assert_eq!(&f[40..42], &[0, 0]);
}

#[test]
fn build_into_a_buffer() {
    let s = FrameSpec {
        len: 128,
        ..Default::default()
    };
    let mut buf = [0xaau8; 200];
    assert_eq!(build_frame_into(&s, &mut buf), Some(128));
    verify(&s, &buf[..128]);
    assert!(buf[128..].iter().all(|&b| b == 0xaa), "nothing written past the frame");
    let mut small = [0u8; 127];
    assert_eq!(build_frame_into(&s, &mut small), None);
    assert!(small.iter().all(|&b| b == 0));
}

#[test]
fn arp_frames() {
    let mac = [2, 0, 0, 0, 0, 0x11];
    let (a, b) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
    for vlan in [None, Some(33)] {
        let f = build_arp_request(mac, vlan, a, b);
        assert_eq!(f.len(), 60);
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(eth.dst_addr(), EthernetAddress::BROADCAST);
        let body = match vlan {
            Some(v) => {
                let t = VlanTag::new_checked(eth.payload()).unwrap();
                assert_eq!((t.vid(), t.ethertype()), (v, ETHERTYPE_ARP));
                t.payload()
            }
            None => eth.payload(),
        };
        let r = ArpRepr::parse(&ArpPacket::new_checked(body).unwrap()).unwrap();
        assert_eq!(
            r,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Request,
                source_hardware_addr: EthernetAddress(mac),
                source_protocol_addr: a,
                target_hardware_addr: EthernetAddress([0; 6]),
                target_protocol_addr: b,
            }
        );
    }
    let peer = [2, 0, 0, 0, 0, 0x22];
    let f = build_arp_reply(mac, peer, None, a, b);
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(eth.dst_addr(), EthernetAddress(peer));
    let r = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert!(
        matches!(r, ArpRepr::EthernetIpv4 { operation: ArpOperation::Reply, target_hardware_addr, .. }
        if target_hardware_addr == EthernetAddress(peer))
    );
}

#[test]
fn views_refuse_truncated_headers() {
    let s = FrameSpec {
        proto: L4::Tcp { flags: 0 },
        ..Default::default()
    };
    let f = build_frame(&s);
    for n in 0..14 {
        assert!(EthernetFrame::new_checked(&f[..n]).is_err());
    }
    let ip = &f[14..];
    for n in 0..ip.len() {
        // The IPv4 total length covers the whole rest of the frame.
        assert!(Ipv4Packet::new_checked(&ip[..n]).is_err(), "ipv4 cut at {n}");
    }
    let tcp = &ip[20..];
    for n in 0..20 {
        assert!(TcpPacket::new_checked(&tcp[..n]).is_err(), "tcp cut at {n}");
    }
    for n in 0..8 {
        assert!(UdpPacket::new_checked(&tcp[..n]).is_err(), "udp cut at {n}");
        assert!(Icmpv4Packet::new_checked(&tcp[..n]).is_err(), "icmp cut at {n}");
    }
    for n in 0..40 {
        assert!(Ipv6Packet::new_checked(&[0x60u8; 40][..n]).is_err(), "ipv6 cut at {n}");
    }
    for n in 0..28 {
        let arp = build_arp_request([2; 6], None, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
        assert!(ArpPacket::new_checked(&arp[14..14 + n]).is_err(), "arp cut at {n}");
    }
}

#[test]
fn views_rewrite_in_place() {
    // What the router will do: TTL decrement with an incremental checksum, MAC rewrite.
    let s = FrameSpec::default();
    let mut f = build_frame(&s);
    {
        let mut eth = EthernetFrame::new_checked(&mut f[..]).unwrap();
        eth.set_src_addr(EthernetAddress([2, 0, 0, 0, 0, 0x77]));
        let mut ip = Ipv4Packet::new_checked(eth.payload_mut()).unwrap();
        let old = u16::from_be_bytes([ip.hop_limit(), 17]);
        ip.set_hop_limit(ip.hop_limit() - 1);
        let new = u16::from_be_bytes([ip.hop_limit(), 17]);
        let c = freeway_packet::checksum::update16(ip.checksum(), old, new);
        ip.set_checksum(c);
        assert!(ip.verify_checksum());
    }
    let expect = FrameSpec {
        src_mac: [2, 0, 0, 0, 0, 0x77],
        ttl: 63,
        ..s
    };
    assert_eq!(f, build_frame(&expect));
}

proptest! {
    #[test]
    fn built_frames_always_verify(
        v6: bool, a: [u8; 16], b: [u8; 16], proto in 0u8..3, flags: u8, vlan: Option<u16>,
        sp: u16, dp: u16, len in 0usize..2000, ttl: u8, l4_checksum: bool,
    ) {
        let (src_ip, dst_ip) = if v6 {
            (IpAddr::from(a), IpAddr::from(b))
        } else {
            (IpAddr::from([a[0], a[1], a[2], a[3]]), IpAddr::from([b[0], b[1], b[2], b[3]]))
        };
        let proto = match proto { 0 => L4::Udp, 1 => L4::Tcp { flags }, _ => L4::Icmp };
        let s = FrameSpec { src_mac: [2; 6], dst_mac: [4; 6], vlan, src_ip, dst_ip, proto, src_port: sp, dst_port: dp, len, ttl, l4_checksum };
        verify(&s, &build_frame(&s));
    }
}
