//! The egress interface's MTU (live, `Interfaces::set_mtu`): IPv4 with DF gets ICMP
//! fragmentation needed carrying the MTU, rate limited; IPv4 without DF is fragmented and every
//! fragment forwarded; IPv6 gets packet too big. Every over-size drop is counted.

mod common;

use common::*;
use freeway_l3::{L3Config, L3Drop};
use freeway_packet::bytes::{rd16, wr16};
use freeway_packet::checksum::{checksum, verify};
use freeway_packet::fragment::{IPV4_DF, IPV4_MF, IPV4_OFFSET_MASK};
use freeway_packet::wire::{Icmpv4Message, Icmpv4Packet, Icmpv6Message, Icmpv6Packet, Ipv4Packet, Ipv6Packet};

fn with_statics(r: &mut Rig) {
    r.writer.add_static(ip("10.0.2.7"), 1, H2, 0).unwrap();
    r.writer.add_static(ip("2001:db8:2::7"), 1, H2, 0).unwrap();
}

/// H1's UDP frame of `len` bytes to 10.0.2.7 (out of p2, VLAN 20), with DF as `df` says and
/// a payload that counts.
fn udp_v4(len: usize, df: bool) -> Vec<u8> {
    let mut f = h1_to_h2(64, len);
    wr16(&mut f, 14 + 6, if df { IPV4_DF } else { 0 });
    for (i, b) in f[14 + 28..].iter_mut().enumerate() {
        *b = i as u8;
    }
    wr16(&mut f, 14 + 10, 0);
    let c = checksum(&f[14..34]);
    wr16(&mut f, 14 + 10, c);
    f
}

#[test]
fn df_over_the_live_mtu_gets_fragmentation_needed_with_the_mtu() {
    let mut r = Rig::new();
    with_statics(&mut r);
    // 1414 bytes: a 1400-byte datagram fits 1500 and is forwarded.
    r.rx(1, &udp_v4(1414, true));
    assert_eq!(r.sent(1)[0].0, 2);
    assert_eq!(r.w.interfaces().set_mtu(1, 1400), Ok(1500));
    r.rx(1, &udp_v4(1414, true));
    r.rx(1, &udp_v4(1415, true));
    let sent = r.sent(2);
    assert_eq!(sent[0].0, 2, "1400 bytes still fit a 1400 MTU");
    let (port, err) = &sent[1];
    assert_eq!(*port, 1, "the error goes back to the sender");
    let f = err.data();
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum());
    let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (Icmpv4Message::DstUnreachable, 4));
    assert_eq!(&icmp.as_ref()[6..8], &1400u16.to_be_bytes(), "the next-hop MTU");
    assert_eq!(r.out.dropped, vec![L3Drop::TooBig]);
    assert_eq!(r.stats().drop_count(L3Drop::TooBig), 1);
    // The bounds of an IPv4-and-IPv6 interface.
    assert!(r.w.interfaces().set_mtu(1, 1279).unwrap_err().contains("1280"));
    assert!(r.w.interfaces().set_mtu(1, 9217).is_err());
}

#[test]
fn fragmentation_needed_is_rate_limited_and_every_packet_counted() {
    let cfg = L3Config {
        icmp_burst: 2,
        ..L3Config::default()
    };
    let mut r = Rig::with_l3(cfg);
    with_statics(&mut r);
    r.rx_times(1, &udp_v4(1600, true), 5);
    let s = r.stats();
    assert_eq!((s.icmp_errors_tx, s.icmp_rate_limited), (2, 3));
    assert_eq!(s.drop_count(L3Drop::TooBig), 5);
}

#[test]
fn without_df_the_packet_is_fragmented_and_every_fragment_forwarded() {
    let mut r = Rig::new();
    with_statics(&mut r);
    let orig = udp_v4(3014, false);
    r.rx(1, &orig);
    let sent = r.sent(3);
    let mut payload = Vec::new();
    for (i, (port, p)) in sent.iter().enumerate() {
        assert_eq!(*port, 2);
        let f = p.data();
        assert_eq!(&f[0..6], &H2);
        assert_eq!(&f[6..12], &R2);
        assert_eq!(&f[12..16], &[0x81, 0, 0, 20], "p2's tag");
        let ip = &f[18..];
        assert!(ip.len() <= 1500);
        assert!(verify(&ip[..20]));
        assert_eq!(ip[8], 63, "the TTL went down by one in every fragment");
        assert_eq!(rd16(ip, 4), rd16(&orig, 14 + 4), "the identification");
        let word = rd16(ip, 6);
        assert_eq!(usize::from(word & IPV4_OFFSET_MASK) * 8, payload.len());
        assert_eq!(word & IPV4_MF != 0, i < 2);
        payload.extend_from_slice(&ip[20..]);
    }
    assert_eq!(payload, orig[34..], "the fragments carry the datagram");
    let s = r.stats();
    assert_eq!((s.fragmented_v4, s.fragments_v4, s.forwarded_v4), (1, 3, 3));
    assert!(r.out.dropped.is_empty());
}

#[test]
fn ipv6_over_the_mtu_gets_packet_too_big_never_fragments() {
    let mut r = Rig::new();
    with_statics(&mut r);
    r.w.interfaces().set_mtu(1, 1280).unwrap();
    r.rx(1, &udp(H1, R1, None, "2001:db8:1::5", "2001:db8:2::7", 64, 1400));
    let (port, p) = r.sent(1).pop().unwrap();
    assert_eq!(port, 1);
    let ip6 = Ipv6Packet::new_checked(&p.data()[14..]).unwrap();
    let icmp6 = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
    assert!(icmp6.verify_checksum(&ip6.src_addr(), &ip6.dst_addr()));
    assert_eq!(icmp6.msg_type(), Icmpv6Message::PktTooBig);
    assert_eq!(icmp6.pkt_too_big_mtu(), 1280);
    assert_eq!(r.stats().drop_count(L3Drop::TooBig), 1);
}
