//! Echo replies and ICMP errors through the stage, verified with smoltcp's parsers.

mod common;

use common::*;
use freeway_l3::icmp::{build_v4_error, L2};
use freeway_l3::{L3Config, L3Drop};
use freeway_packet::wire::{
    ChecksumCapabilities, Icmpv4Message, Icmpv4Packet, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, Ipv4Packet, Ipv6Packet,
};
use freeway_packet::Packet;

fn ipv4_of(p: &Packet) -> Ipv4Packet<&[u8]> {
    let f = p.data();
    let ip = Ipv4Packet::new_checked(&f[l3_of(f)..]).unwrap();
    assert!(ip.verify_checksum(), "IPv4 header checksum");
    ip
}

/// A fresh rig that received H1's UDP frames (hop limit 64) to the IPv4 then the IPv6
/// destination, each given as (address, frame length); the rig and what the stage emitted,
/// which must be two packets.
fn from_h1_v4_and_v6(to4: (&str, usize), to6: (&str, usize)) -> (Rig, Vec<(u16, Packet)>) {
    let mut r = Rig::new();
    r.rx(1, &udp(H1, R1, None, "10.0.1.5", to4.0, 64, to4.1));
    r.rx(1, &udp(H1, R1, None, "2001:db8:1::5", to6.0, 64, to6.1));
    let sent = r.sent(2);
    (r, sent)
}

/// The ICMP messages of `sent`, an ICMPv4 error then an ICMPv6 one, their checksums (and the
/// IPv4 header's) verified.
fn v4_and_v6_errors(sent: &[(u16, Packet)]) -> (Icmpv4Packet<&[u8]>, Icmpv6Packet<&[u8]>) {
    let icmp = Icmpv4Packet::new_checked(ipv4_of(&sent[0].1).payload()).unwrap();
    assert!(icmp.verify_checksum());
    let ip6 = Ipv6Packet::new_checked(&sent[1].1.data()[14..]).unwrap();
    let icmp6 = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
    assert!(icmp6.verify_checksum(&ip6.src_addr(), &ip6.dst_addr()));
    (icmp, icmp6)
}

#[test]
fn echo_v4_is_answered_from_the_address_pinged() {
    let mut r = Rig::new();
    // Ping the p2 address through p1 (weak host model: any of our addresses).
    let req = ping(H1, R1, None, "10.0.1.5", "10.0.2.1", 64);
    let (port, p) = &r.answer(1, &req);
    assert_eq!(*port, 1);
    assert_eq!(&p.data()[0..12], &[H1, R1].concat()[..]);
    let ip = ipv4_of(p);
    assert_eq!((ip.src_addr(), ip.dst_addr()), (v4("10.0.2.1"), v4("10.0.1.5")));
    assert_eq!(ip.hop_limit(), 64);
    let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!(icmp.msg_type(), Icmpv4Message::EchoReply);
    assert_eq!((icmp.echo_ident(), icmp.echo_seq_no()), (0x1234, 7));
    // Payload echoed unchanged.
    let req_ip = Ipv4Packet::new_checked(&req[14..]).unwrap();
    assert_eq!(icmp.data(), Icmpv4Packet::new_checked(req_ip.payload()).unwrap().data());
    assert_eq!(r.stats().echo_replies_v4, 1);
    // UDP to us: no local stack, counted drop. A corrupted echo: counted, no reply.
    r.rx(1, &udp(H1, R1, None, "10.0.1.5", "10.0.1.1", 64, 60));
    let mut bad = ping(H1, R1, None, "10.0.1.5", "10.0.1.1", 64);
    bad[14 + 20 + 8] ^= 0xff;
    r.rx(1, &bad);
    assert!(r.out.sent.is_empty());
    assert_eq!(r.out.dropped, vec![L3Drop::Local, L3Drop::BadIcmp]);
}

#[test]
fn echo_v6_is_answered_with_a_valid_checksum() {
    let mut r = Rig::new();
    let req = ping(H2, R2, Some(20), "2001:db8:2::7", "2001:db8:2::1", 64);
    let answer = r.answer(2, &req);
    let f = answer.1.data();
    assert_eq!(&f[12..16], &[0x81, 0, 0, 20]);
    let ip = Ipv6Packet::new_checked(&f[18..]).unwrap();
    assert_eq!(
        (ip.src_addr(), ip.dst_addr()),
        (v6("2001:db8:2::1"), v6("2001:db8:2::7"))
    );
    let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
    assert_eq!(icmp.msg_type(), Icmpv6Message::EchoReply);
    assert_eq!((icmp.echo_ident(), icmp.echo_seq_no()), (0x1234, 7));
    assert_eq!(r.stats().echo_replies_v6, 1);
}

#[test]
fn ttl_1_gets_time_exceeded_quoting_the_original() {
    let mut r = Rig::new();
    let orig = h1_to_h2(1, 200);
    let (port, p) = &r.answer(1, &orig);
    assert_eq!(*port, 1, "back out of the ingress interface");
    assert_eq!(&p.data()[0..12], &[H1, R1].concat()[..], "to the previous hop");
    let ip = ipv4_of(p);
    assert_eq!((ip.src_addr(), ip.dst_addr()), (v4("10.0.1.1"), v4("10.0.1.5")));
    assert_eq!(ip.next_header(), freeway_packet::wire::IpProtocol::Icmp);
    let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!(icmp.msg_type(), Icmpv4Message::TimeExceeded);
    assert_eq!(icmp.msg_code(), 0);
    // The whole original datagram (186 bytes < 548) is quoted, as received.
    assert_eq!(icmp.data(), &orig[14..]);
    assert_eq!(r.out.dropped, vec![L3Drop::TtlExpired]);
    // A big one is cut so that the error fits 576 bytes.
    r.rx(1, &h1_to_h2(0, 1400));
    let sent = r.out.take();
    let ip = ipv4_of(&sent[0].1);
    assert_eq!(ip.total_len(), 576);
    let s = r.stats();
    assert_eq!((s.icmp_errors_tx, s.drop_count(L3Drop::TtlExpired)), (2, 2));
}

#[test]
fn hop_limit_1_gets_time_exceeded_v6() {
    let mut r = Rig::new();
    let orig = udp(H1, R1, None, "2001:db8:1::5", "2001:db8:2::7", 1, 1500);
    let answer = r.answer(1, &orig);
    let f = answer.1.data();
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(
        (ip.src_addr(), ip.dst_addr()),
        (v6("2001:db8:1::1"), v6("2001:db8:1::5"))
    );
    assert_eq!(40 + ip.payload_len() as usize, 1280, "cut to the minimum MTU");
    let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
    match Icmpv6Repr::parse(&ip.src_addr(), &ip.dst_addr(), &icmp, &ChecksumCapabilities::default()).unwrap() {
        Icmpv6Repr::TimeExceeded { header, data, .. } => {
            assert_eq!(header.src_addr, v6("2001:db8:1::5"));
            assert_eq!(header.dst_addr, v6("2001:db8:2::7"));
            assert_eq!(header.hop_limit, 1);
            assert_eq!(data, &orig[14 + 40..14 + 1232]);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn errors_are_rate_limited_with_a_burst() {
    let mut r = Rig::with_l3(L3Config {
        icmp_rate: 10,
        icmp_burst: 5,
        ..Default::default()
    });
    r.rx_times(1, &h1_to_h2(1, 60), 20);
    let s = r.stats();
    assert_eq!((s.icmp_errors_tx, s.icmp_rate_limited), (5, 15));
    assert_eq!(s.drop_count(L3Drop::TtlExpired), 20, "every packet is still dropped");
    r.out.take();
    // 10/s: one more token after 100 ms.
    r.now += 100;
    r.rx_times(1, &udp(H1, R1, None, "2001:db8:1::5", "2001:db8:2::7", 1, 80), 3);
    let s = r.stats();
    assert_eq!((s.icmp_errors_tx, s.icmp_rate_limited), (6, 17));
}

#[test]
fn no_route_gets_net_unreachable_v4_and_v6() {
    let (r, sent) = from_h1_v4_and_v6(("172.16.0.1", 60), ("2001:db8:77::1", 80));
    let (icmp, icmp6) = v4_and_v6_errors(&sent);
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (Icmpv4Message::DstUnreachable, 0));
    assert_eq!((icmp6.msg_type(), icmp6.msg_code()), (Icmpv6Message::DstUnreachable, 0));
    assert_eq!(r.out.dropped, vec![L3Drop::NoRoute, L3Drop::NoRoute]);
}

#[test]
fn never_an_error_about_an_error_a_group_or_a_fragment() {
    let mut r = Rig::new();
    // An ICMP time-exceeded message (itself an error) with TTL 1, to be forwarded.
    let mut pkt = Packet::new();
    let l2 = L2 {
        dst: R1,
        src: H1,
        vlan: None,
    };
    let inner = udp(H1, R1, None, "10.0.2.7", "10.0.1.5", 5, 60);
    assert!(build_v4_error(
        &mut pkt,
        l2,
        v4("10.0.1.5"),
        v4("10.0.2.7"),
        11,
        0,
        0,
        &inner[14..]
    ));
    let mut f = pkt.data().to_vec();
    f[14 + 8] = 1; // TTL 1
    f[14 + 10] = 0;
    f[14 + 11] = 0;
    let c = freeway_packet::checksum::checksum(&f[14..34]);
    f[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    r.rx(1, &f);
    // A non-first fragment with TTL 1.
    let mut frag = h1_to_h2(1, 60);
    frag[14 + 6] = 0x00;
    frag[14 + 7] = 0x20;
    frag[14 + 10] = 0;
    frag[14 + 11] = 0;
    let c = freeway_packet::checksum::checksum(&frag[14..34]);
    frag[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    r.rx(1, &frag);
    // An echo request with TTL 1 does get one.
    r.rx(1, &ping(H1, R1, None, "10.0.1.5", "10.0.2.7", 1));
    let s = r.stats();
    assert_eq!(s.icmp_suppressed, 2);
    assert_eq!(s.icmp_errors_tx, 1);
    assert_eq!(r.out.sent.len(), 1);
    // ICMPv6 error about an ICMPv6 error: a v6 time-exceeded message arriving with hop limit 1.
    let mut r = Rig::new();
    r.rx(1, &udp(H1, R1, None, "2001:db8:2::7", "2001:db8:1::5", 1, 120));
    let err = r.out.take().pop().unwrap().1; // an error to 2001:db8:2::7 … reuse it as input
    let mut e = err.data().to_vec();
    e[0..6].copy_from_slice(&R1);
    e[6..12].copy_from_slice(&H1);
    e[14 + 7] = 1;
    r.rx(1, &e);
    assert_eq!(r.stats().icmp_suppressed, 1);
}

#[test]
fn too_big_gets_frag_needed_or_packet_too_big() {
    // The builder sets DF; 1600-byte frame = 1586-byte datagram > 1500.
    let (r, sent) = from_h1_v4_and_v6(("10.0.2.7", 1600), ("2001:db8:2::7", 1600));
    let (icmp, icmp6) = v4_and_v6_errors(&sent);
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (Icmpv4Message::DstUnreachable, 4));
    assert_eq!(&icmp.as_ref()[6..8], &1500u16.to_be_bytes());
    assert_eq!(icmp6.msg_type(), Icmpv6Message::PktTooBig);
    assert_eq!(icmp6.pkt_too_big_mtu(), 1500);
    assert_eq!(r.out.dropped, vec![L3Drop::TooBig, L3Drop::TooBig]);
}
