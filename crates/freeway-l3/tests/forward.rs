//! Forwarding through the stage: MAC and VLAN rewrite, TTL / hop limit, incremental checksum,
//! neighbour resolution with the pending queue.

mod common;

use common::*;
use freeway_l3::neigh::NeighConfig;
use freeway_l3::{L3Config, L3Drop, NeighState};
use freeway_packet::build::build_arp_reply;
use freeway_packet::checksum::checksum;
use freeway_packet::wire::{ArpPacket, Icmpv4Packet, Ipv6Packet};
use freeway_packet::Packet;
use proptest::prelude::*;
use std::sync::Arc;

fn with_statics(r: &mut Rig) {
    r.writer.add_static(ip("10.0.2.7"), 1, H2, 0).unwrap();
    r.writer.add_static(ip("10.0.1.5"), 0, H1, 0).unwrap();
    r.writer.add_static(ip("2001:db8:2::7"), 1, H2, 0).unwrap();
    r.writer.add_static(ip("2001:db8:1::5"), 0, H1, 0).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn forwarding_rewrites_macs_vlan_ttl_and_keeps_the_checksum_valid(
        to_p2 in any::<bool>(),
        v6 in any::<bool>(),
        ttl in 2u8..=255,
        tos in any::<u8>(),
        id in any::<u16>(),
        len in 60usize..1400,
    ) {
        let mut r = Rig::new();
        with_statics(&mut r);
        let (in_port, src_mac, rmac, vlan, src, dst, out_port, out_vlan, nh_mac, out_rmac) = match (to_p2, v6) {
            (true, false) => (1, H1, R1, None, "10.0.1.5", "10.0.2.7", 2u16, Some(20u16), H2, R2),
            (false, false) => (2, H2, R2, Some(20), "10.0.2.7", "10.0.1.5", 1, None, H1, R1),
            (true, true) => (1, H1, R1, None, "2001:db8:1::5", "2001:db8:2::7", 2, Some(20), H2, R2),
            (false, true) => (2, H2, R2, Some(20), "2001:db8:2::7", "2001:db8:1::5", 1, None, H1, R1),
        };
        let mut f = udp(src_mac, rmac, vlan, src, dst, ttl, len);
        let l3 = l3_of(&f);
        if !v6 {
            f[l3 + 1] = tos;
            f[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
            f[l3 + 10] = 0;
            f[l3 + 11] = 0;
            let c = checksum(&f[l3..l3 + 20]);
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        r.rx(in_port, &f);
        let sent = r.out.take();
        prop_assert_eq!(sent.len(), 1, "dropped: {:?}", r.out.dropped);
        let (port, p) = &sent[0];
        prop_assert_eq!(*port, out_port);
        let o = p.data();
        prop_assert_eq!(&o[0..6], &nh_mac[..]);
        prop_assert_eq!(&o[6..12], &out_rmac[..]);
        let ol3 = l3_of(o);
        match out_vlan {
            Some(v) => prop_assert_eq!(&o[12..16], &[0x81, 0x00, 0, v as u8][..]),
            None => prop_assert_eq!(ol3, 14),
        }
        prop_assert_eq!(p.meta.l3_off as usize, ol3, "meta follows the retag");
        if v6 {
            prop_assert_eq!(o[ol3 + 7], ttl - 1);
            // Everything but the hop limit is unchanged.
            let mut a = o[ol3..].to_vec();
            a[7] = ttl;
            prop_assert_eq!(&a[..], &f[l3..]);
        } else {
            prop_assert_eq!(o[ol3 + 8], ttl - 1);
            let mut h = o[ol3..ol3 + 20].to_vec();
            let incremental = u16::from_be_bytes([h[10], h[11]]);
            h[10] = 0;
            h[11] = 0;
            prop_assert_eq!(incremental, checksum(&h), "incremental == full recompute");
            prop_assert_eq!(&o[ol3 + 20..], &f[l3 + 20..], "payload untouched");
        }
        let s = r.stats();
        prop_assert_eq!(s.forwarded_v4 + s.forwarded_v6, 1);
    }
}

#[test]
fn unresolved_neighbour_is_resolved_by_arp_then_the_packet_goes_out() {
    let mut r = Rig::new();
    let f = h1_to_h2(64, 100);
    r.rx(1, &f);
    let sent = r.out.take();
    assert_eq!(sent.len(), 1, "only the ARP request");
    let (port, req) = &sent[0];
    assert_eq!(*port, 2);
    let d = req.data();
    assert_eq!(&d[0..6], &[0xff; 6]);
    assert_eq!(&d[6..12], &R2);
    assert_eq!(&d[12..18], &[0x81, 0, 0, 20, 0x08, 0x06]);
    let a = ArpPacket::new_checked(&d[18..]).unwrap();
    assert_eq!(a.source_hardware_addr(), &R2);
    assert_eq!(a.source_protocol_addr(), &[10, 0, 2, 1]);
    assert_eq!(a.target_protocol_addr(), &[10, 0, 2, 7]);
    assert_eq!(r.w.pending_len(), 1);
    r.service();
    {
        let g = r.neigh.pin();
        let v = r.neigh.lookup(ip("10.0.2.7"), 1, &g).unwrap();
        assert_eq!(v.state, NeighState::Incomplete);
    }
    // The reply arrives; the writer applies it; the next poll sends the packet.
    r.now += 5;
    r.rx(2, &build_arp_reply(H2, R2, Some(20), v4("10.0.2.7"), v4("10.0.2.1")));
    assert!(r.out.sent.is_empty());
    r.service();
    r.w.poll(r.now, &mut r.out);
    let sent = r.sent(1);
    let o = sent[0].1.data();
    assert_eq!(&o[0..12], &[H2, R2].concat()[..]);
    assert_eq!(o[18 + 8], 63);
    assert_eq!(r.w.pending_len(), 0);
    let s = r.stats();
    assert_eq!((s.pending_queued, s.pending_sent, s.arp_requests_tx), (1, 1, 1));
}

#[test]
fn unresolved_v6_gateway_is_resolved_by_ns_then_na() {
    let mut r = Rig::new();
    r.rx(1, &udp(H1, R1, None, "2001:db8:1::5", "2001:db8:99::1", 64, 100));
    let sent = r.sent(1);
    let d = sent[0].1.data();
    assert_eq!(
        &d[0..6],
        &[0x33, 0x33, 0xff, 0, 0, 0xfe],
        "solicited-node group of the gateway"
    );
    let ip6 = Ipv6Packet::new_checked(&d[18..]).unwrap();
    assert_eq!(ip6.dst_addr(), v6("ff02::1:ff00:fe"));
    assert_eq!(ip6.src_addr(), v6("2001:db8:2::1"));
    assert_eq!(ip6.hop_limit(), 255);
    // The gateway answers with a solicited NA (built with the crate's NS builder's mirror).
    let ns = freeway_l3::nd::parse(&d[18..18 + 40 + 32], 40).unwrap();
    let mut na = Packet::new();
    let mut ns_as_from_us = ns;
    ns_as_from_us.target = v6("2001:db8:2::fe");
    assert!(freeway_l3::nd::build_na_reply(
        &mut na,
        &ns_as_from_us,
        GW,
        Some(20),
        R2
    ));
    r.rx(2, na.data());
    r.service();
    r.now += 1;
    r.w.poll(r.now, &mut r.out);
    let sent = r.sent(1);
    let o = sent[0].1.data();
    assert_eq!(&o[0..12], &[GW, R2].concat()[..]);
    assert_eq!(o[18 + 7], 63);
}

#[test]
fn pending_queue_is_bounded_and_times_out() {
    let mut r = Rig::with_l3(L3Config {
        pending_per_neigh: 3,
        pending_total: 5,
        ..Default::default()
    });
    r.rx_times(1, &h1_to_h2(64, 60), 4);
    assert_eq!(r.w.pending_len(), 3);
    assert_eq!(r.out.dropped, vec![L3Drop::PendingOverflow], "oldest made room");
    r.rx_times(1, &udp(H1, R1, None, "10.0.1.5", "10.0.2.8", 64, 60), 3);
    assert_eq!(r.w.pending_len(), 5, "total bound");
    assert_eq!(r.stats().drop_count(L3Drop::PendingOverflow), 2);
    let reqs = r.out.take().len();
    assert_eq!(reqs, 2, "one ARP request per neighbour, not per packet");
    // Retransmission after retrans_ms, then the timeout drops everything with host unreachable.
    r.now += 1_000;
    r.w.poll(r.now, &mut r.out);
    assert_eq!(r.out.take().len(), 2, "requests re-sent");
    r.now += 2_000;
    r.w.poll(r.now, &mut r.out);
    assert_eq!(r.w.pending_len(), 0);
    let s = r.stats();
    assert_eq!(s.drop_count(L3Drop::PendingTimeout), 5);
    let errs = r.out.take();
    assert_eq!(errs.len(), 5);
    let f = errs[0].1.data();
    let icmp = Icmpv4Packet::new_checked(&f[34..]).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!(
        (icmp.msg_type().into(), icmp.msg_code()),
        (3u8, 1u8),
        "host unreachable"
    );
}

#[test]
fn failed_neighbour_gets_host_unreachable_and_stale_is_probed() {
    let ncfg = NeighConfig {
        age_chunk_buckets: 1 << 20,
        ..Default::default()
    };
    let mut r = Rig::with(L3Config::default(), ncfg.clone());
    // Resolution fails: the writer marks the entry FAILED after incomplete_ms.
    r.rx(1, &h1_to_h2(64, 60));
    r.service();
    r.out.take();
    r.now += ncfg.incomplete_ms;
    r.service();
    r.w.poll(r.now, &mut r.out);
    assert_eq!(r.stats().drop_count(L3Drop::HostUnreachable), 1);
    r.out.take();
    r.rx(1, &h1_to_h2(64, 60));
    assert_eq!(r.stats().drop_count(L3Drop::HostUnreachable), 2, "FAILED drops at once");
    assert_eq!(r.out.take().len(), 1, "the ICMP error");
    // A learned neighbour goes STALE; using it sends one unicast probe per retrans_ms.
    r.writer.learn(ip("10.0.2.8"), 1, H2, true, r.now);
    r.now += ncfg.reachable_ms;
    r.service();
    r.rx_times(1, &udp(H1, R1, None, "10.0.1.5", "10.0.2.8", 64, 60), 3);
    let sent = r.out.take();
    assert_eq!(sent.len(), 4, "three forwarded + one probe");
    let probes: Vec<_> = sent.iter().filter(|(_, p)| p.data()[16..18] == [0x08, 0x06]).collect();
    assert_eq!(probes.len(), 1);
    assert_eq!(&probes[0].1.data()[0..6], &H2, "unicast probe");
    assert_eq!(r.stats().probes_tx, 1);
}

#[test]
fn packets_pending_on_an_interface_removed_are_dropped_and_counted() {
    let mut r = Rig::new();
    r.rx_times(1, &h1_to_h2(64, 60), 2);
    assert_eq!(r.w.pending_len(), 2, "waiting for 10.0.2.7 on p2");
    r.out.take();
    // A reload removes p2 (id 1): the worker takes the new version between batches.
    let (next, _) = interfaces().with_changes(&[1], Vec::new()).unwrap();
    r.w.set_interfaces(Arc::new(next));
    r.w.poll(r.now, &mut r.out);
    assert_eq!(r.w.pending_len(), 0);
    assert_eq!(r.stats().drop_count(L3Drop::IfaceRemoved), 2);
    assert!(r.out.take().is_empty(), "no ICMP error from an interface that is gone");
}
