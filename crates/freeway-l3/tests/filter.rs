//! The firewall's hooks in the stage: where they are asked, and what drop and reject do.

mod common;

use common::*;
use freeway_l3::{FilterHook, FilterVerdict, L3Drop, Reject};
use freeway_packet::build::{build_frame, FrameSpec, L4};
use freeway_packet::wire::{Icmpv4Message, Icmpv4Packet, Icmpv6Message, Icmpv6Packet, Ipv4Packet, Ipv6Packet};
use freeway_packet::Packet;

fn ready() -> Rig {
    let mut r = Rig::new();
    r.writer.add_static(ip("10.0.2.7"), 1, H2, 0).unwrap();
    r.writer.add_static(ip("2001:db8:2::7"), 1, H2, 0).unwrap();
    r
}

fn tcp_syn(src: &str, dst: &str) -> Vec<u8> {
    build_frame(&FrameSpec {
        src_mac: H1,
        dst_mac: R1,
        src_ip: ip(src),
        dst_ip: ip(dst),
        proto: L4::Tcp { flags: 0x02 },
        src_port: 40000,
        dst_port: 22,
        len: 0,
        ..FrameSpec::default()
    })
}

#[test]
fn forward_is_asked_with_both_interfaces_and_input_with_the_ingress_one() {
    let mut r = ready();
    r.rx(1, &h1_to_h2(64, 100));
    r.sent(1);
    r.rx(1, &ping(H1, R1, None, "10.0.1.5", "10.0.1.1", 64));
    r.sent(1);
    r.rx(1, &ping(H1, R1, None, "2001:db8:1::5", "2001:db8:1::1", 64));
    r.sent(1);
    assert_eq!(
        r.out.judged,
        vec![
            (FilterHook::Forward, 0, 1),
            (FilterHook::Input, 0, 0),
            (FilterHook::Input, 0, 0)
        ]
    );
}

#[test]
fn a_dropped_packet_is_counted_as_filtered_and_nothing_answers() {
    let mut r = ready();
    r.out.filter = Some(|_, _| FilterVerdict::Drop);
    r.rx(1, &h1_to_h2(64, 100));
    r.rx(1, &ping(H1, R1, None, "10.0.1.5", "10.0.1.1", 64));
    r.sent(0);
    assert_eq!(r.out.dropped, vec![L3Drop::Filtered, L3Drop::Filtered]);
    assert_eq!(r.stats().drop_count(L3Drop::Filtered), 2);
}

#[test]
fn reject_sends_the_unreachable_code_asked_for_in_both_families() {
    let mut r = ready();
    r.out.filter = Some(|_, _| FilterVerdict::Reject(Reject::Unreachable { v4: 13, v6: 1 }));
    r.rx(1, &h1_to_h2(64, 100));
    r.rx(1, &udp(H1, R1, None, "2001:db8:1::5", "2001:db8:2::7", 64, 100));
    let sent = r.sent(2);
    let ip4 = Ipv4Packet::new_checked(&sent[0].1.data()[14..]).unwrap();
    assert_eq!(ip4.dst_addr(), v4("10.0.1.5"));
    let icmp = Icmpv4Packet::new_checked(ip4.payload()).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (Icmpv4Message::DstUnreachable, 13));
    let ip6 = Ipv6Packet::new_checked(&sent[1].1.data()[14..]).unwrap();
    let icmp6 = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
    assert!(icmp6.verify_checksum(&ip6.src_addr(), &ip6.dst_addr()));
    assert_eq!((icmp6.msg_type(), icmp6.msg_code()), (Icmpv6Message::DstUnreachable, 1));
    assert_eq!(r.out.dropped, vec![L3Drop::Filtered, L3Drop::Filtered]);
}

#[test]
fn tcp_reset_answers_tcp_from_the_destination_and_anything_else_with_port_unreachable() {
    let mut r = ready();
    r.out.filter = Some(|_, _| FilterVerdict::Reject(Reject::TcpReset));
    r.rx(1, &tcp_syn("10.0.1.5", "10.0.2.7"));
    let (port, p) = r.sent(1).pop().unwrap();
    assert_eq!(port, 1);
    assert_eq!(&p.data()[0..12], &[H1, R1].concat()[..]);
    let ip4 = Ipv4Packet::new_checked(&p.data()[14..]).unwrap();
    assert_eq!((ip4.src_addr(), ip4.dst_addr()), (v4("10.0.2.7"), v4("10.0.1.5")));
    assert_eq!(ip4.payload()[13], 0x14, "RST|ACK");
    assert_eq!(r.stats().tcp_resets_tx, 1);
    r.rx(1, &h1_to_h2(64, 100));
    let (_, p): (u16, Packet) = r.sent(1).pop().unwrap();
    let ip4 = Ipv4Packet::new_checked(&p.data()[14..]).unwrap();
    let icmp = Icmpv4Packet::new_checked(ip4.payload()).unwrap();
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (Icmpv4Message::DstUnreachable, 3));
}

#[test]
fn the_input_hook_can_refuse_pings_to_the_router() {
    let mut r = ready();
    r.out.filter = Some(|h, _| match h {
        FilterHook::Input => FilterVerdict::Drop,
        FilterHook::Forward => FilterVerdict::Accept,
    });
    r.rx(1, &ping(H1, R1, None, "10.0.1.5", "10.0.1.1", 64));
    r.rx(1, &ping(H1, R1, None, "10.0.1.5", "10.0.2.7", 64));
    let sent = r.sent(1);
    assert_eq!(sent[0].0, 2, "the forwarded ping only");
    assert_eq!(r.stats().echo_replies_v4, 0);
}

/// A reject at the input hook answers from the address the packet was sent to, as Linux
/// answers for its own addresses; no error ever answers a router advertisement or
/// solicitation.
#[test]
fn input_rejects_answer_from_the_address_asked_and_router_discovery_gets_nothing() {
    let mut r = ready();
    r.out.filter = Some(|_, _| FilterVerdict::Reject(Reject::Unreachable { v4: 3, v6: 4 }));
    // To p2's address, arriving on p1.
    r.rx(1, &ping(H1, R1, None, "10.0.1.5", "10.0.2.1", 64));
    r.rx(1, &ping(H1, R1, None, "2001:db8:1::5", "2001:db8:2::1", 64));
    let sent = r.sent(2);
    let ip4 = Ipv4Packet::new_checked(&sent[0].1.data()[14..]).unwrap();
    assert_eq!((ip4.src_addr(), ip4.dst_addr()), (v4("10.0.2.1"), v4("10.0.1.5")));
    let ip6 = Ipv6Packet::new_checked(&sent[1].1.data()[14..]).unwrap();
    assert_eq!(ip6.src_addr(), v6("2001:db8:2::1"));
    // A router advertisement (type 9) forwarded and rejected: dropped, unanswered.
    let mut adv = ping(H1, R1, None, "10.0.1.5", "10.0.2.7", 64);
    adv[34] = 9;
    r.rx(1, &adv);
    r.sent(0);
}
