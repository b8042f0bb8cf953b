//! ARP and IPv6 neighbour discovery through the stage: replies checked field by field (and
//! with smoltcp's parsers and checksum verification), learning, DAD, classification.

mod common;

use common::*;
use freeway_l3::icmp::icmpv6_checksum;
use freeway_l3::iface::{solicited_node, v6_multicast_mac, ALL_NODES};
use freeway_l3::{nd, L3Drop, NeighState, Wants};
use freeway_packet::build::{build_arp_reply, build_arp_request};
use freeway_packet::wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumCapabilities, EthernetAddress, Icmpv6Packet, Icmpv6Repr, Ipv6Packet,
};
use freeway_packet::{parse, Packet};
use smoltcp::wire::{NdiscNeighborFlags, NdiscRepr};

#[test]
fn arp_request_for_our_address_gets_a_correct_reply_and_teaches_us_the_requester() {
    let mut r = Rig::new();
    let req = build_arp_request(H1, None, v4("10.0.1.5"), v4("10.0.1.1"));
    let (port, p) = &r.answer(1, &req);
    assert_eq!(*port, 1);
    let f = p.data();
    assert_eq!(&f[0..6], &H1, "unicast to the requester");
    assert_eq!(&f[6..12], &R1, "from the router MAC");
    assert_eq!(&f[12..14], &[0x08, 0x06]);
    let a = ArpPacket::new_checked(&f[14..]).unwrap();
    assert_eq!(
        &f[14..22],
        &[0, 1, 0x08, 0x00, 6, 4, 0, 2],
        "htype, ptype, hlen, plen, op=reply"
    );
    assert_eq!(a.operation(), ArpOperation::Reply);
    match ArpRepr::parse(&a).unwrap() {
        ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr,
            source_protocol_addr,
            target_hardware_addr,
            target_protocol_addr,
        } => {
            assert_eq!(operation, ArpOperation::Reply);
            assert_eq!(source_hardware_addr, EthernetAddress(R1));
            assert_eq!(source_protocol_addr, v4("10.0.1.1"));
            assert_eq!(target_hardware_addr, EthernetAddress(H1));
            assert_eq!(target_protocol_addr, v4("10.0.1.5"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(f.len() >= 60, "padded to the Ethernet minimum");
    assert_eq!(r.stats().arp_replies_tx, 1);
    // The requester is learned once the writer runs.
    r.service();
    let g = r.neigh.pin();
    let e = r.neigh.lookup(ip("10.0.1.5"), 0, &g).unwrap();
    assert_eq!((e.mac, e.state), (H1, NeighState::Reachable));
}

#[test]
fn arp_on_a_tagged_interface_keeps_the_tag_and_requests_for_others_get_nothing() {
    let mut r = Rig::new();
    let req = build_arp_request(H2, Some(20), v4("10.0.2.7"), v4("10.0.2.1"));
    let answer = r.answer(2, &req);
    let f = answer.1.data();
    assert_eq!(answer.0, 2);
    assert_eq!(&f[12..16], &[0x81, 0x00, 0x00, 20]);
    assert_eq!(&f[16..18], &[0x08, 0x06]);
    assert_eq!(&f[18 + 14..18 + 18], &[10, 0, 2, 1], "sender protocol address is ours");
    // For another host: no reply, counted.
    r.rx(1, &build_arp_request(H1, None, v4("10.0.1.5"), v4("10.0.1.9")));
    // For our p2 address but asked on p1: not ours there.
    r.rx(1, &build_arp_request(H1, None, v4("10.0.1.5"), v4("10.0.2.1")));
    // Wrong (port, VLAN): not a router interface.
    r.rx(1, &build_arp_request(H1, Some(99), v4("10.0.1.5"), v4("10.0.1.1")));
    assert!(r.out.sent.is_empty());
    assert_eq!(
        r.out.dropped,
        vec![L3Drop::ArpNotForUs, L3Drop::ArpNotForUs, L3Drop::NotRouterInterface]
    );
}

#[test]
fn arp_replies_are_learned_and_unsolicited_ones_only_refresh() {
    let mut r = Rig::new();
    // A reply addressed to us creates the entry.
    r.rx(1, &build_arp_reply(H1, R1, None, v4("10.0.1.5"), v4("10.0.1.1")));
    // A gratuitous ARP for an unknown host does not.
    r.rx(1, &build_arp_request(H1, None, v4("10.0.1.6"), v4("10.0.1.6")));
    // An off-subnet sender is never learned.
    r.rx(1, &build_arp_reply(H1, R1, None, v4("10.9.9.9"), v4("10.0.1.1")));
    r.service();
    let g = r.neigh.pin();
    assert_eq!(r.neigh.lookup(ip("10.0.1.5"), 0, &g).unwrap().mac, H1);
    assert!(r.neigh.lookup(ip("10.0.1.6"), 0, &g).is_none());
    assert!(r.neigh.lookup(ip("10.9.9.9"), 0, &g).is_none());
    assert_eq!(r.out.dropped.iter().filter(|d| **d == L3Drop::Consumed).count(), 2);
    // A gratuitous ARP with a new MAC for a known host updates it.
    let new_mac = [2, 0, 0, 0, 1, 0x55];
    r.now += 2_000;
    r.rx(1, &build_arp_request(new_mac, None, v4("10.0.1.5"), v4("10.0.1.5")));
    r.service();
    assert_eq!(r.neigh.lookup(ip("10.0.1.5"), 0, &g).unwrap().mac, new_mac);
}

fn ns_frame(src_mac: [u8; 6], src: &str, target: &str) -> Vec<u8> {
    let mut p = Packet::new();
    assert!(nd::build_ns(&mut p, src_mac, None, v6(src), v6(target), None));
    p.data().to_vec()
}

#[test]
fn neighbour_solicitation_gets_an_advertisement_with_a_valid_checksum() {
    let mut r = Rig::new();
    let ns = ns_frame(H1, "2001:db8:1::5", "2001:db8:1::1");
    assert_eq!(&ns[0..6], &v6_multicast_mac(solicited_node(v6("2001:db8:1::1"))));
    let mut probe = Packet::from_frame(&ns).unwrap();
    probe.meta.in_port = 1;
    parse(&mut probe).unwrap();
    assert_eq!(r.w.interfaces().wants(&probe), Wants::Copy(0));
    let answer = r.answer(1, &ns);
    let f = answer.1.data();
    assert_eq!(&f[0..6], &H1);
    assert_eq!(&f[6..12], &R1);
    let ip6 = Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip6.hop_limit(), 255);
    assert_eq!(ip6.src_addr(), v6("2001:db8:1::1"));
    assert_eq!(ip6.dst_addr(), v6("2001:db8:1::5"));
    let icmp = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
    assert!(icmp.verify_checksum(&ip6.src_addr(), &ip6.dst_addr()));
    match Icmpv6Repr::parse(
        &ip6.src_addr(),
        &ip6.dst_addr(),
        &icmp,
        &ChecksumCapabilities::default(),
    )
    .unwrap()
    {
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags,
            target_addr,
            lladdr,
        }) => {
            assert_eq!(target_addr, v6("2001:db8:1::1"));
            assert_eq!(
                flags,
                NdiscNeighborFlags::ROUTER | NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE
            );
            assert_eq!(lladdr.unwrap().as_bytes(), &R1);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(r.stats().na_tx, 1);
    r.service();
    let g = r.neigh.pin();
    assert_eq!(r.neigh.lookup(ip("2001:db8:1::5"), 0, &g).unwrap().mac, H1);
}

#[test]
fn link_local_solicitation_and_dad_are_handled_safely() {
    let mut r = Rig::new();
    let ll = r.w.interfaces().get(1).unwrap().link_local();
    // NS for our link-local on the tagged interface.
    let mut p = Packet::new();
    assert!(nd::build_ns(&mut p, H2, Some(20), v6("fe80::7"), ll, None));
    r.rx(2, p.data());
    let sent = r.sent(1);
    let f = sent[0].1.data();
    assert_eq!(&f[12..16], &[0x81, 0, 0, 20]);
    let ip6 = Ipv6Packet::new_checked(&f[18..]).unwrap();
    assert_eq!((ip6.src_addr(), ip6.dst_addr()), (ll, v6("fe80::7")));
    let icmp = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
    assert!(icmp.verify_checksum(&ip6.src_addr(), &ip6.dst_addr()));

    // DAD probe for our address: from ::, no SLLA, to the solicited-node group.
    let target = v6("2001:db8:1::1");
    let g = solicited_node(target);
    let mut f = vec![0u8; 14 + 40 + 24];
    f[0..6].copy_from_slice(&v6_multicast_mac(g));
    f[6..12].copy_from_slice(&H1);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&24u16.to_be_bytes());
    f[20] = 58;
    f[21] = 255;
    f[38..54].copy_from_slice(&g.octets());
    f[54] = 135;
    f[62..78].copy_from_slice(&target.octets());
    let c = icmpv6_checksum("::".parse().unwrap(), g, &f[54..]);
    f[56..58].copy_from_slice(&c.to_be_bytes());
    r.rx(1, &f);
    let sent = r.out.take();
    assert_eq!(sent.len(), 1, "we defend our address");
    let d = sent[0].1.data();
    assert_eq!(&d[0..6], &v6_multicast_mac(ALL_NODES));
    let ip6 = Ipv6Packet::new_checked(&d[14..]).unwrap();
    assert_eq!(ip6.dst_addr(), ALL_NODES);
    let icmp = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
    assert!(icmp.verify_checksum(&ip6.src_addr(), &ip6.dst_addr()));
    assert_eq!(icmp.msg_type(), freeway_packet::wire::Icmpv6Message::NeighborAdvert);
    assert_eq!(ip6.payload()[4] & nd::FLAG_SOLICITED, 0, "no S flag to all-nodes");
    r.service();
    assert_eq!(
        r.neigh.len(),
        1,
        "only the link-local solicitor was learned, never the DAD probe"
    );

    // An NS with a wrong hop limit (it was routed) is refused.
    let mut bad = ns_frame(H1, "2001:db8:1::5", "2001:db8:1::1");
    bad[21] = 64;
    r.rx(1, &bad);
    assert!(r.out.sent.is_empty());
    assert_eq!(*r.out.dropped.last().unwrap(), L3Drop::BadNd);
    // NS for somebody else's address goes to a group we do not listen to: never ours.
    r.rx(1, &ns_frame(H1, "2001:db8:1::5", "2001:db8:1::9"));
    assert!(r.out.sent.is_empty());
    assert_eq!(*r.out.dropped.last().unwrap(), L3Drop::NotForwardable);
}

#[test]
fn classifier_tells_the_bridge_what_is_ours() {
    let ifs = interfaces();
    let mk = |f: &[u8], port| {
        let mut p = Packet::from_frame(f).unwrap();
        p.meta.in_port = port;
        parse(&mut p).unwrap();
        p
    };
    let to_router = h1_to_h2(64, 60);
    assert_eq!(ifs.wants(&mk(&to_router, 1)), Wants::Ours);
    assert_eq!(ifs.wants(&mk(&to_router, 3)), Wants::NotOurs, "not a router port");
    let to_host = udp(H1, H2, None, "10.0.1.5", "10.0.2.7", 64, 60);
    assert_eq!(ifs.wants(&mk(&to_host, 1)), Wants::NotOurs);
    let arp_us = build_arp_request(H1, None, v4("10.0.1.5"), v4("10.0.1.1"));
    assert_eq!(ifs.wants(&mk(&arp_us, 1)), Wants::Copy(0));
    let arp_other = build_arp_request(H1, None, v4("10.0.1.5"), v4("10.0.1.77"));
    assert_eq!(ifs.wants(&mk(&arp_other, 1)), Wants::NotOurs);
    let arp_tagged = build_arp_request(H2, Some(20), v4("10.0.2.5"), v4("10.0.2.1"));
    assert_eq!(ifs.wants(&mk(&arp_tagged, 2)), Wants::Copy(1));
    assert_eq!(ifs.wants_on(1, &mk(&arp_tagged, 7)), Wants::Copy(1));
    let ns_other = ns_frame(H1, "2001:db8:1::5", "2001:db8:1::9");
    assert_eq!(ifs.wants(&mk(&ns_other, 1)), Wants::NotOurs);
}
