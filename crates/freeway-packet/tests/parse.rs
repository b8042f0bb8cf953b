//! The fast-path parser on valid, malformed and arbitrary frames.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use freeway_packet::build::{build_arp_request, build_frame, tcp_flags, FrameSpec, L4};
use freeway_packet::flow_hash::hash_macs;
use freeway_packet::wire::*;
use freeway_packet::{hash_5tuple_v4, hash_5tuple_v6, parse, parse_frame, Meta, Packet, ParseError, MAX_FRAME};
use freeway_packet::{NO_OFFSET, NO_VLAN};
use proptest::prelude::*;

const V4A: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
const V4B: Ipv4Addr = Ipv4Addr::new(10, 9, 8, 7);
const V6A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const V6B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 2);

fn spec(src: IpAddr, dst: IpAddr, proto: L4) -> FrameSpec {
    FrameSpec {
        src_ip: src,
        dst_ip: dst,
        proto,
        src_port: 40000,
        dst_port: 53,
        ..FrameSpec::default()
    }
}

fn v4(proto: L4) -> FrameSpec {
    spec(V4A.into(), V4B.into(), proto)
}

fn v6(proto: L4) -> FrameSpec {
    spec(V6A.into(), V6B.into(), proto)
}

fn parsed(frame: &[u8]) -> Result<Meta, ParseError> {
    let mut p = Packet::from_frame(frame).unwrap();
    p.meta.in_port = 7;
    let r = parse(&mut p);
    assert_eq!(p.meta.in_port, 7, "parse must not touch in_port");
    r.map(|()| p.meta)
}

fn ok(frame: &[u8]) -> Meta {
    parsed(frame).unwrap_or_else(|e| panic!("{e:?} on {frame:02x?}"))
}

fn err(frame: &[u8]) -> ParseError {
    let mut p = Packet::from_frame(frame).unwrap();
    let e = parse(&mut p).expect_err("frame should be dropped");
    let d = Meta::default();
    assert_eq!(
        (p.meta.l3_off, p.meta.l4_off, p.meta.vlan, p.meta.flow_hash),
        (d.l3_off, d.l4_off, d.vlan, d.flow_hash),
        "a dropped frame leaves the parser's fields at their defaults"
    );
    e
}

#[test]
fn ipv4_udp() {
    let f = build_frame(&v4(L4::Udp));
    assert_eq!(f.len(), 60);
    let m = ok(&f);
    assert_eq!(m.vlan, NO_VLAN);
    assert_eq!(m.vlan_depth, 0);
    assert_eq!(m.ethertype, ETHERTYPE_IPV4);
    assert_eq!((m.l3_off, m.l4_off, m.ip_proto), (14, 34, IPPROTO_UDP));
    assert_eq!(m.flow_hash, hash_5tuple_v4(V4A.octets(), V4B.octets(), 17, 40000, 53));
}

#[test]
fn ipv4_tcp_and_icmp() {
    let m = ok(&build_frame(&v4(L4::Tcp { flags: tcp_flags::SYN })));
    assert_eq!((m.l3_off, m.l4_off, m.ip_proto), (14, 34, IPPROTO_TCP));
    assert_eq!(m.flow_hash, hash_5tuple_v4(V4A.octets(), V4B.octets(), 6, 40000, 53));
    let m = ok(&build_frame(&v4(L4::Icmp)));
    assert_eq!((m.l3_off, m.l4_off, m.ip_proto), (14, 34, IPPROTO_ICMP));
    assert_eq!(m.flow_hash, hash_5tuple_v4(V4A.octets(), V4B.octets(), 1, 0, 0));
}

#[test]
fn ipv6_tcp_udp_and_icmpv6() {
    let m = ok(&build_frame(&v6(L4::Tcp { flags: tcp_flags::ACK })));
    assert_eq!(m.ethertype, ETHERTYPE_IPV6);
    assert_eq!((m.l3_off, m.l4_off, m.ip_proto), (14, 54, IPPROTO_TCP));
    assert_eq!(m.flow_hash, hash_5tuple_v6(V6A.octets(), V6B.octets(), 6, 40000, 53));
    let m = ok(&build_frame(&v6(L4::Udp)));
    assert_eq!((m.l4_off, m.ip_proto), (54, IPPROTO_UDP));
    let m = ok(&build_frame(&v6(L4::Icmp)));
    assert_eq!((m.l4_off, m.ip_proto), (54, IPPROTO_ICMPV6));
    assert_eq!(m.flow_hash, hash_5tuple_v6(V6A.octets(), V6B.octets(), 58, 0, 0));
}

#[test]
fn arp() {
    let f = build_arp_request([2, 0, 0, 0, 0, 9], None, V4A, V4B);
    let m = ok(&f);
    assert_eq!(
        (m.ethertype, m.l3_off, m.l4_off, m.ip_proto),
        (ETHERTYPE_ARP, 14, NO_OFFSET, 0)
    );
    assert_eq!(m.flow_hash, hash_macs([0xff; 6], [2, 0, 0, 0, 0, 9]));
    let f = build_arp_request([2, 0, 0, 0, 0, 9], Some(5), V4A, V4B);
    let m = ok(&f);
    assert_eq!((m.vlan, m.l3_off), (5, 18));
    // Shorter than the 28-byte body.
    assert_eq!(err(&f[..18 + 27]), ParseError::TruncatedArp);
}

#[test]
fn single_vlan() {
    let mut s = v4(L4::Udp);
    s.vlan = Some(100);
    let f = build_frame(&s);
    let m = ok(&f);
    assert_eq!((m.vlan, m.vlan_depth, m.ethertype), (100, 1, ETHERTYPE_IPV4));
    assert_eq!((m.l3_off, m.l4_off), (18, 38));
    // Same flow hash as the untagged frame.
    assert_eq!(m.flow_hash, ok(&build_frame(&v4(L4::Udp))).flow_hash);
}

/// Inserts a tag with `tpid`/`vid` as the outer tag.
fn add_tag(f: &[u8], tpid: u16, vid: u16) -> Vec<u8> {
    let mut o = f[..12].to_vec();
    o.extend_from_slice(&tpid.to_be_bytes());
    o.extend_from_slice(&vid.to_be_bytes());
    o.extend_from_slice(&f[12..]);
    o
}

#[test]
fn double_vlan_qinq() {
    let mut s = v6(L4::Tcp { flags: 0 });
    s.vlan = Some(20);
    let f = add_tag(&build_frame(&s), ETHERTYPE_QINQ, 0xe000 | 300);
    let m = ok(&f);
    assert_eq!((m.vlan, m.vlan_depth, m.ethertype), (300, 2, ETHERTYPE_IPV6));
    assert_eq!((m.l3_off, m.l4_off), (22, 62));
    // Two 0x8100 tags are accepted too.
    let f = add_tag(&build_frame(&s), ETHERTYPE_VLAN, 301);
    assert_eq!(ok(&f).vlan, 301);
}

#[test]
fn three_vlan_tags_are_too_many() {
    let mut s = v4(L4::Udp);
    s.vlan = Some(1);
    let f = add_tag(&add_tag(&build_frame(&s), ETHERTYPE_VLAN, 2), ETHERTYPE_QINQ, 3);
    assert_eq!(err(&f), ParseError::VlanStack);
}

#[test]
fn vlan_push_then_parse_matches_parse_then_push() {
    let f = build_frame(&v4(L4::Tcp { flags: tcp_flags::SYN }));
    let mut p = Packet::from_frame(&f).unwrap();
    parse(&mut p).unwrap();
    assert!(vlan_push(&mut p, 42));
    let pushed = p.meta;
    parse(&mut p).unwrap();
    assert_eq!(
        (p.meta.l3_off, p.meta.l4_off, p.meta.vlan_depth),
        (pushed.l3_off, pushed.l4_off, 1)
    );
    assert_eq!(p.meta.vlan, 42);
    assert!(vlan_pop(&mut p));
    assert_eq!(p.data(), &f[..]);
}

#[test]
fn unknown_ethertype_is_not_an_error() {
    let mut f = build_frame(&v4(L4::Udp));
    f[12..14].copy_from_slice(&0x88ccu16.to_be_bytes()); // LLDP
    let m = ok(&f);
    assert_eq!((m.ethertype, m.l3_off, m.l4_off), (0x88cc, NO_OFFSET, NO_OFFSET));
    assert_eq!(m.flow_hash, hash_macs([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]));
    // A bare 14-byte Ethernet header is fine too.
    assert!(parsed(&f[..14]).is_ok());
}

#[test]
fn ieee_802_3_length_field() {
    let mut f = vec![0u8; 60];
    f[12..14].copy_from_slice(&46u16.to_be_bytes());
    assert_eq!(ok(&f).l3_off, NO_OFFSET);
    f[12..14].copy_from_slice(&47u16.to_be_bytes());
    assert_eq!(err(&f), ParseError::TruncatedEthernet);
}

#[test]
fn runt_and_oversized() {
    for n in 0..14 {
        assert_eq!(err(&[0u8; 14][..n]), ParseError::Runt);
    }
    let mut s = v4(L4::Udp);
    s.len = MAX_FRAME;
    let f = build_frame(&s);
    assert_eq!(f.len(), MAX_FRAME);
    assert_eq!(ok(&f).l4_off, 34);
    let mut big = f.clone();
    big.push(0);
    assert_eq!(err(&big), ParseError::Oversized);
}

#[test]
fn short_frames_and_trailing_padding_are_fine() {
    // A 42-byte Ethernet/IPv4/UDP frame with no payload (below the 60-byte wire minimum).
    let mut s = v4(L4::Udp);
    s.len = 0;
    let f = build_frame(&s);
    assert_eq!(f.len(), 42);
    assert_eq!(ok(&f).l4_off, 34);
    // Ethernet padding after the IP datagram.
    let mut padded = f.clone();
    padded.extend_from_slice(&[0xee; 18]);
    assert_eq!(ok(&padded).flow_hash, ok(&f).flow_hash);
}

#[test]
fn bad_ipv4_headers() {
    let f = build_frame(&v4(L4::Udp));
    for (byte, e) in [
        (0x44, ParseError::BadIpv4Header), // IHL 4
        (0x40, ParseError::BadIpv4Header), // IHL 0
        (0x65, ParseError::BadIpv4Header), // version 6
        (0x55, ParseError::BadIpv4Header), // version 5
        (0x4f, ParseError::BadIpv4Length), // IHL 15 = 60 bytes > total length 46
    ] {
        let mut g = f.clone();
        g[14] = byte;
        assert_eq!(err(&g), e, "first byte {byte:#x}");
    }
    let set_total = |t: u16| {
        let mut g = f.clone();
        g[16..18].copy_from_slice(&t.to_be_bytes());
        g
    };
    assert_eq!(err(&set_total(19)), ParseError::BadIpv4Length);
    assert_eq!(err(&set_total(47)), ParseError::BadIpv4Length); // frame holds 46
    assert_eq!(err(&set_total(0xffff)), ParseError::BadIpv4Length);
    assert_eq!(err(&set_total(27)), ParseError::TruncatedL4); // UDP needs 8
    assert_eq!(ok(&set_total(28)).l4_off, 34);
    // IPv4 options: IHL 6 moves the L4 header.
    let mut g = f.clone();
    g[14] = 0x46;
    assert_eq!(ok(&g).l4_off, 38);
}

#[test]
fn bad_tcp_data_offset() {
    let f = build_frame(&v4(L4::Tcp { flags: 0 }));
    let mut g = f.clone();
    g[34 + 12] = 4 << 4;
    assert_eq!(err(&g), ParseError::BadTcpHeader);
    g[34 + 12] = 7 << 4; // 28 bytes, but the IP payload holds only 60 - 34 = 26
    assert_eq!(err(&g), ParseError::BadTcpHeader);
    g[34 + 12] = 6 << 4;
    assert_eq!(ok(&g).l4_off, 34);
}

#[test]
fn ipv4_fragments() {
    let f = build_frame(&v4(L4::Udp));
    let addr_hash = hash_5tuple_v4(V4A.octets(), V4B.octets(), 17, 0, 0);
    // First fragment (MF, offset 0): L4 present, hashed on addresses like the others.
    let mut g = f.clone();
    g[20..22].copy_from_slice(&0x2000u16.to_be_bytes());
    let m = ok(&g);
    assert_eq!((m.l4_off, m.ip_proto, m.flow_hash), (34, 17, addr_hash));
    // Non-first fragment: no L4 header, even when its bytes would be too short for one.
    g[20..22].copy_from_slice(&0x0001u16.to_be_bytes());
    g[16..18].copy_from_slice(&21u16.to_be_bytes());
    let m = ok(&g);
    assert_eq!(
        (m.l3_off, m.l4_off, m.ip_proto, m.flow_hash),
        (14, NO_OFFSET, 17, addr_hash)
    );
}

#[test]
fn bad_ipv6() {
    let f = build_frame(&v6(L4::Udp));
    let mut g = f.clone();
    g[14] = 0x40;
    assert_eq!(err(&g), ParseError::BadIpv6Header);
    let mut g = f.clone();
    let plen = u16::from_be_bytes([g[18], g[19]]);
    g[18..20].copy_from_slice(&(plen + 1).to_be_bytes());
    assert_eq!(err(&g), ParseError::BadIpv6Length);
    g[18..20].copy_from_slice(&7u16.to_be_bytes());
    assert_eq!(err(&g), ParseError::TruncatedL4);
    assert_eq!(err(&f[..14 + 39]), ParseError::TruncatedIpv6);
}

/// An IPv6 frame with the given extension headers (each `(type, bytes)`) before a UDP header.
fn v6_with_ext(exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let base = build_frame(&v6(L4::Udp));
    let udp = &base[54..];
    let mut payload = Vec::new();
    for (i, (_, body)) in exts.iter().enumerate() {
        let mut h = body.clone();
        h[0] = exts.get(i + 1).map_or(IPPROTO_UDP, |e| e.0);
        payload.extend_from_slice(&h);
    }
    payload.extend_from_slice(udp);
    let mut f = base[..54].to_vec();
    f[18..20].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    f[20] = exts.first().map_or(IPPROTO_UDP, |e| e.0);
    f.extend_from_slice(&payload);
    f
}

fn opts(len8: u8) -> Vec<u8> {
    let mut h = vec![0u8; (usize::from(len8) + 1) * 8];
    h[1] = len8;
    h
}

#[test]
fn ipv6_extension_headers() {
    let f = v6_with_ext(&[(0, opts(0)), (43, opts(1)), (60, opts(0))]);
    let m = ok(&f);
    assert_eq!((m.l4_off, m.ip_proto), (54 + 8 + 16 + 8, IPPROTO_UDP));
    assert_eq!(m.flow_hash, hash_5tuple_v6(V6A.octets(), V6B.octets(), 17, 40000, 53));
    // Fragment header, offset 0 (first fragment): L4 found, hashed on addresses.
    let f = v6_with_ext(&[(44, vec![0, 0, 0, 1, 0, 0, 0, 9])]);
    let m = ok(&f);
    assert_eq!((m.l4_off, m.ip_proto), (62, IPPROTO_UDP));
    assert_eq!(m.flow_hash, hash_5tuple_v6(V6A.octets(), V6B.octets(), 17, 0, 0));
    // Non-first fragment: no L4.
    let f = v6_with_ext(&[(44, vec![0, 0, 0, 0x10, 0, 0, 0, 9])]);
    assert_eq!(ok(&f).l4_off, NO_OFFSET);
    // Too many extension headers.
    let chain: Vec<_> = (0..9).map(|_| (60, opts(0))).collect();
    assert_eq!(err(&v6_with_ext(&chain)), ParseError::BadIpv6ExtHeader);
    let chain: Vec<_> = (0..8).map(|_| (60, opts(0))).collect();
    assert_eq!(ok(&v6_with_ext(&chain)).l4_off, 54 + 64);
    // An extension header whose length runs past the payload.
    let mut f = v6_with_ext(&[(60, opts(0))]);
    f[54 + 1] = 3;
    assert_eq!(err(&f), ParseError::BadIpv6ExtHeader);
    // No next header.
    let mut f = v6_with_ext(&[(60, opts(0))]);
    f[54] = 59;
    let m = ok(&f);
    assert_eq!((m.l4_off, m.ip_proto), (NO_OFFSET, 59));
}

/// Cuts `f` at every length and checks the parse: a cut before the end of a layer, the first
/// `(end, error)` of `layers` whose `end` is past the cut, fails with that layer's error; a cut
/// past them all gives `rest` (`None`: parses). It never panics.
fn check_truncations(f: &[u8], layers: &[(usize, ParseError)], rest: Option<ParseError>) {
    for n in 0..f.len() {
        let r = parsed(&f[..n]);
        match layers.iter().find(|(end, _)| n < *end).map(|(_, e)| *e).or(rest) {
            Some(e) => assert_eq!(r, Err(e), "cut at {n}"),
            None => assert!(r.is_ok(), "cut at {n}: {r:?}"),
        }
    }
}

#[test]
fn truncated_at_every_offset() {
    use ParseError::*;
    // A length field that exceeds the cut frame is a length error for IP.
    let f = build_frame(&v4(L4::Udp));
    check_truncations(&f, &[(14, Runt), (34, TruncatedIpv4)], Some(BadIpv4Length));
    let mut s = v4(L4::Tcp { flags: 0 });
    s.vlan = Some(9);
    let f = add_tag(&build_frame(&s), ETHERTYPE_QINQ, 10);
    check_truncations(
        &f,
        &[(14, Runt), (22, TruncatedVlan), (42, TruncatedIpv4)],
        Some(BadIpv4Length),
    );
    let f = build_frame(&v6(L4::Icmp));
    check_truncations(&f, &[(14, Runt), (54, TruncatedIpv6)], Some(BadIpv6Length));
    let f = build_arp_request([2, 0, 0, 0, 0, 1], None, V4A, V4B);
    check_truncations(&f, &[(14, Runt), (42, TruncatedArp)], None);
}

#[test]
fn truncated_l4_with_consistent_lengths() {
    // Cut the frame *and* shrink the IP length to match: the L4 check must catch it.
    let f = build_frame(&v4(L4::Tcp { flags: 0 }));
    for n in 34..f.len() {
        let mut g = f[..n].to_vec();
        g[16..18].copy_from_slice(&((n - 14) as u16).to_be_bytes());
        let r = parsed(&g);
        if n < 54 {
            assert_eq!(r, Err(ParseError::TruncatedL4), "cut at {n}");
        } else {
            assert!(r.is_ok(), "cut at {n}");
        }
    }
    let f = build_frame(&v6(L4::Udp));
    for n in 54..f.len() {
        let mut g = f[..n].to_vec();
        g[18..20].copy_from_slice(&((n - 54) as u16).to_be_bytes());
        assert_eq!(parsed(&g).is_ok(), n >= 62, "cut at {n}");
    }
}

#[test]
fn parse_frame_matches_parse() {
    let f = build_frame(&v6(L4::Udp));
    let mut m = Meta::default();
    parse_frame(&f, &mut m).unwrap();
    assert_eq!(m, ok(&f).clone_with_port(0));
}

trait WithPort {
    fn clone_with_port(self, p: u16) -> Meta;
}
impl WithPort for Meta {
    fn clone_with_port(mut self, p: u16) -> Meta {
        self.in_port = p;
        self
    }
}

#[test]
fn error_names_are_unique_snake_case_and_indexable() {
    let mut names = std::collections::HashSet::new();
    for (i, e) in ParseError::ALL.iter().enumerate() {
        assert_eq!(*e as usize, i);
        let n = e.name();
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
            "{n}"
        );
        assert!(names.insert(n), "duplicate {n}");
        assert_eq!(e.to_string(), n);
    }
    for n in [
        "truncated_ethernet",
        "truncated_vlan",
        "vlan_stack_too_deep",
        "bad_ipv4_header",
        "runt",
        "oversized",
    ] {
        assert!(names.contains(n), "{n}");
    }
}

fn check_invariants(bytes: &[u8]) -> Result<(), TestCaseError> {
    let mut p = Packet::from_frame(bytes).unwrap();
    if parse(&mut p).is_ok() {
        let m = p.meta;
        let len = bytes.len();
        prop_assert!(m.vlan_depth <= 2);
        if m.l3_off != NO_OFFSET {
            prop_assert!(usize::from(m.l3_off) < len);
            prop_assert!(usize::from(m.l3_off) >= 14);
        }
        if m.l4_off != NO_OFFSET {
            prop_assert!(m.l3_off != NO_OFFSET);
            prop_assert!(m.l4_off > m.l3_off);
            prop_assert!(usize::from(m.l4_off) < len);
        }
        if m.vlan_depth == 0 {
            prop_assert_eq!(m.vlan, NO_VLAN);
        } else {
            prop_assert!(m.vlan <= 0x0fff);
        }
    }
    Ok(())
}

/// Frames that start like real ones, so that mutations reach deep into the parser.
fn near_valid() -> impl Strategy<Value = Vec<u8>> {
    let base = prop_oneof![
        Just(build_frame(&v4(L4::Udp))),
        Just(build_frame(&v4(L4::Tcp { flags: 2 }))),
        Just(build_frame(&v6(L4::Tcp { flags: 2 }))),
        Just(v6_with_ext(&[(0, opts(0)), (44, vec![0, 0, 0, 1, 0, 0, 0, 9])])),
        Just(add_tag(&build_frame(&v4(L4::Icmp)), ETHERTYPE_VLAN, 3)),
        Just(build_arp_request([2, 0, 0, 0, 0, 1], None, V4A, V4B)),
    ];
    (
        base,
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut f, edits, cut)| {
            for (i, b) in edits {
                let i = i.index(f.len());
                f[i] = b;
            }
            let n = cut.index(f.len() + 1);
            f.truncate(n.max(f.len() / 2));
            f
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_invariants(&bytes)?;
    }

    #[test]
    fn never_panics_on_mutated_frames(bytes in near_valid()) {
        check_invariants(&bytes)?;
    }

    #[test]
    fn both_directions_hash_alike(a: [u8; 4], b: [u8; 4], sp: u16, dp: u16, tcp: bool, vlan in proptest::option::of(0u16..4096)) {
        let proto = if tcp { L4::Tcp { flags: 0 } } else { L4::Udp };
        let mut s = spec(Ipv4Addr::from(a).into(), Ipv4Addr::from(b).into(), proto);
        s.src_port = sp;
        s.dst_port = dp;
        s.vlan = vlan;
        let fwd = ok(&build_frame(&s));
        std::mem::swap(&mut s.src_ip, &mut s.dst_ip);
        std::mem::swap(&mut s.src_port, &mut s.dst_port);
        std::mem::swap(&mut s.src_mac, &mut s.dst_mac);
        let rev = ok(&build_frame(&s));
        prop_assert_eq!(fwd.flow_hash, rev.flow_hash);
    }
}

/// Prints the parser's cost per packet (the best of 50 runs, so that other load on the
/// machine does not count); run with
/// `cargo test --release -p freeway-packet --test parse -- --ignored --nocapture parse_speed`.
#[test]
#[ignore = "measurement, not a test"]
fn parse_speed() {
    use std::hint::black_box;
    use std::time::Instant;
    let mut s6 = v6(L4::Tcp { flags: 0 });
    s6.len = 74;
    let mut s4 = v4(L4::Udp);
    s4.len = 64;
    for (name, f) in [
        ("eth/ipv4/udp 64B", build_frame(&s4)),
        ("eth/ipv6/tcp 74B", build_frame(&s6)),
    ] {
        let mut pkts: Vec<Packet> = (0..32).map(|_| Packet::from_frame(&f).unwrap()).collect();
        let rounds = 100_000u32;
        let mut best = f64::MAX;
        for _ in 0..50 {
            let t = Instant::now();
            let mut acc = 0u32;
            for _ in 0..rounds {
                for p in black_box(&mut pkts).iter_mut() {
                    if parse(p).is_ok() {
                        acc = acc.wrapping_add(p.meta.flow_hash);
                    }
                }
            }
            black_box(acc);
            best = best.min(t.elapsed().as_nanos() as f64 / f64::from(rounds) / 32.0);
        }
        println!("parse {name}: {best:.2} ns/packet (batches of 32, best of 50 runs)");
    }
}
