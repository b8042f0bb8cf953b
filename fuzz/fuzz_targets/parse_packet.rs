//! Fuzzes the fast-path parser, the header views it is checked against and the VLAN
//! push/pop helpers on arbitrary bytes.
//!
//! Invariants checked (beyond "no panic"):
//! - `parse` and `parse_frame` agree;
//! - on `Ok`, the offsets lie inside the frame, in order, and the headers the parser promises
//!   are accepted by the smoltcp views (IPv4/IPv6 header, TCP/UDP/ICMP header lengths);
//! - IPv4 total length / IPv6 payload length fit the frame when the parser accepted them;
//! - `vlan_push` then `vlan_pop` restores the frame byte for byte and re-parses the same way;
//! - the flow hash is the same after a push/pop round trip.

#![no_main]

use freeway_packet::wire::*;
use freeway_packet::{parse, parse_frame, Meta, Packet, NO_OFFSET, NO_VLAN};
use libfuzzer_sys::fuzz_target;

fn check_views(f: &[u8], m: &Meta) {
    let l3 = usize::from(m.l3_off);
    let l4 = usize::from(m.l4_off);
    // Always-safe views: constructing them must never panic; accessors after Ok must not either.
    if let Ok(eth) = EthernetFrame::new_checked(f) {
        let _ = (eth.src_addr(), eth.dst_addr(), eth.ethertype(), eth.payload().len());
        if let Ok(tag) = VlanTag::new_checked(eth.payload()) {
            let _ = (tag.pcp(), tag.dei(), tag.vid(), tag.ethertype(), tag.payload().len());
        }
    }
    if m.l3_off == NO_OFFSET {
        assert_eq!(m.l4_off, NO_OFFSET);
        return;
    }
    assert!(l3 >= 14 && l3 < f.len());
    let l3b = &f[l3..];
    match m.ethertype {
        ETHERTYPE_IPV4 => {
            let ip = Ipv4Packet::new_checked(l3b).expect("parser accepted an IPv4 header smoltcp refuses");
            assert_eq!(ip.version(), 4);
            assert!(ip.header_len() >= 20);
            assert_eq!(u8::from(ip.next_header()), m.ip_proto);
            let _ = ip.verify_checksum();
            let _ = Ipv4Repr::parse(&ip, &smoltcp_caps());
        }
        ETHERTYPE_IPV6 => {
            let ip = Ipv6Packet::new_checked(l3b).expect("parser accepted an IPv6 header smoltcp refuses");
            assert_eq!(ip.version(), 6);
            let _ = Ipv6Repr::parse(&ip);
        }
        ETHERTYPE_ARP => {
            assert!(l3b.len() >= 28);
            if let Ok(arp) = ArpPacket::new_checked(l3b) {
                let _ = ArpRepr::parse(&arp);
            }
        }
        other => panic!("l3_off set for ethertype {other:#06x}"),
    }
    if m.l4_off == NO_OFFSET {
        return;
    }
    assert!(l4 > l3 && l4 < f.len());
    let seg = &f[l4..];
    match m.ip_proto {
        IPPROTO_TCP => {
            let t = TcpPacket::new_checked(seg).expect("parser accepted a TCP header smoltcp refuses");
            assert!(usize::from(t.header_len()) >= 20);
            let _ = (
                t.src_port(),
                t.dst_port(),
                t.seq_number(),
                t.options().len(),
                t.payload().len(),
            );
        }
        IPPROTO_UDP => {
            assert!(seg.len() >= 8);
            if let Ok(u) = UdpPacket::new_checked(seg) {
                let _ = (u.src_port(), u.dst_port(), u.payload().len());
            }
        }
        IPPROTO_ICMP => {
            let i = Icmpv4Packet::new_checked(seg).expect("parser accepted an ICMP header smoltcp refuses");
            let _ = (i.msg_type(), i.msg_code(), i.verify_checksum());
        }
        IPPROTO_ICMPV6 => {
            assert!(seg.len() >= 8);
            if let Ok(i) = Icmpv6Packet::new_checked(seg) {
                let _ = (i.msg_type(), i.msg_code());
            }
        }
        _ => {}
    }
}

fn smoltcp_caps() -> freeway_packet::wire::ChecksumCapabilities {
    freeway_packet::wire::ChecksumCapabilities::default()
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut p) = Packet::from_frame(data) else { return };
    let r = parse(&mut p);
    let mut m2 = Meta::default();
    assert_eq!(parse_frame(data, &mut m2), r);
    m2.in_port = p.meta.in_port;
    assert_eq!(m2, p.meta);
    let meta = p.meta;
    match r {
        Ok(()) => {
            assert!(meta.vlan_depth <= 2);
            assert_eq!(meta.vlan == NO_VLAN, meta.vlan_depth == 0);
            check_views(data, &meta);
        }
        Err(e) => {
            assert!(!e.name().is_empty());
            assert_eq!(meta.l3_off, NO_OFFSET);
            assert_eq!(meta.l4_off, NO_OFFSET);
        }
    }
    // VLAN push/pop round trip.
    let mut q = p.clone();
    if vlan_push(&mut q, u16::from(data.first().copied().unwrap_or(0)) << 4) {
        assert_eq!(q.len(), data.len() + 4);
        if r.is_ok() {
            assert_eq!(
                q.meta.l3_off,
                meta.l3_off.wrapping_add(if meta.l3_off == NO_OFFSET { 0 } else { 4 })
            );
            // A tagged frame with one more tag parses alike, unless that made the stack too deep.
            let mut t = q.clone();
            if parse(&mut t).is_ok() {
                assert_eq!(t.meta.l3_off, q.meta.l3_off);
                assert_eq!(t.meta.l4_off, q.meta.l4_off);
                assert_eq!(t.meta.ethertype, meta.ethertype);
                if meta.l3_off != NO_OFFSET {
                    assert_eq!(t.meta.flow_hash, meta.flow_hash);
                }
            }
        }
        assert!(vlan_pop(&mut q));
        assert_eq!(q.data(), data);
        assert_eq!(q.meta.l3_off, meta.l3_off);
        assert_eq!(q.meta.l4_off, meta.l4_off);
    } else {
        assert!(data.len() < 14);
    }
    // Popping whatever tag the input has never panics, and leaves a frame 4 bytes shorter.
    let mut q = p.clone();
    if vlan_pop(&mut q) {
        assert_eq!(q.len() + 4, data.len());
        let _ = parse(&mut q);
    }
});
