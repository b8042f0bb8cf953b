//! NAT in the tracker: a translated connection is found by both directions and rewrites
//! each to the other's view; its two nodes leave the table together; port choice avoids
//! taken tuples; translated packets keep valid checksums and translating back restores the
//! original (property tests); ICMP errors about a translated connection are mapped.
#![cfg(not(loom))]

use std::net::IpAddr;

use freeway_conntrack::frames::{self, Seg};
use freeway_conntrack::nat::{self, NatPorts, PortRange, SrcNat};
use freeway_conntrack::{extract, Conntrack, CtConfig, CtState, CtWorker, NatPlan, Tuple};
use freeway_packet::build::tcp_flags::{ACK, SYN};
use freeway_packet::bytes::rd16;
use freeway_packet::checksum::{fold, pseudo_v4, pseudo_v6, sum, verify};
use freeway_packet::Packet;
use freeway_sync::Clock;
use proptest::prelude::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn setup() -> (Conntrack, CtWorker, Clock) {
    let clock = Clock::manual();
    clock.set(1_000_000);
    let (ct, _exp) = Conntrack::new(CtConfig::default(), clock.clone()).unwrap();
    let w = ct.worker();
    (ct, w, clock)
}

/// The transport state of a tracked packet, as [`nat::commit_new`] takes it.
fn l4_of(p: &Packet) -> extract::L4Info {
    match extract::classify(p.data(), &p.meta, false) {
        extract::Class::Track(_, l4) => l4,
        other => panic!("not a tracked packet: {other:?}"),
    }
}

fn tuple_of(p: &Packet) -> Tuple {
    match extract::classify(p.data(), &p.meta, false) {
        extract::Class::Track(t, _) => t,
        other => panic!("not a tracked packet: {other:?}"),
    }
}

/// Whether every checksum of the IP packet in `p` is right.
fn checksums_ok(p: &Packet) -> bool {
    let f = p.data();
    let (l3, l4) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off));
    let v6 = f[l3] >> 4 == 6;
    let end = if v6 {
        l3 + 40 + usize::from(rd16(f, l3 + 4))
    } else {
        l3 + usize::from(rd16(f, l3 + 2))
    };
    if !v6 && !verify(&f[l3..l3 + usize::from(f[l3] & 0xf) * 4]) {
        return false;
    }
    let len = end - l4;
    let proto = p.meta.ip_proto;
    let pseudo = if v6 {
        pseudo_v6(
            f[l3 + 8..l3 + 24].try_into().unwrap(),
            f[l3 + 24..l3 + 40].try_into().unwrap(),
            proto,
            len as u32,
        )
    } else {
        pseudo_v4(
            f[l3 + 12..l3 + 16].try_into().unwrap(),
            f[l3 + 16..l3 + 20].try_into().unwrap(),
            proto,
            len as u16,
        )
    };
    match proto {
        17 if !v6 && rd16(f, l4 + 6) == 0 => true,
        6 | 17 | 58 => fold(sum(&f[l4..end], pseudo)) == 0,
        1 => fold(sum(&f[l4..end], 0)) == 0,
        _ => true,
    }
}

/// Creates the connection of 10.0.0.2:5000 -> 198.51.100.7:53 masqueraded to 192.0.2.1:
/// its packet as translated, its original tuple, its tracking result.
fn masquerade_one(w: &mut CtWorker, g: &freeway_conntrack::Guard) -> (Packet, Tuple, freeway_conntrack::CtResult) {
    let mut ports = NatPorts::new(0, 1);
    let mut p = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 20);
    let orig = tuple_of(&p);
    let snat = SrcNat {
        addr: (0xc000_0201, 0xc000_0201),
        ports: None,
    };
    let l4 = l4_of(&p);
    let r = nat::commit_new(w, &mut ports, g, &mut p, 0, &orig, orig, l4, Some(snat)).expect("translated");
    (p, orig, r)
}

/// A masqueraded UDP flow: 10.0.0.2:5000 -> 198.51.100.7:53 leaves as 192.0.2.1:PORT.
#[test]
fn a_translated_connection_is_found_both_ways_and_rewrites_each() {
    let (ct, mut w, _clock) = setup();
    let g = w.pin();
    let (p, orig, r) = masquerade_one(&mut w, &g);
    assert_eq!(r.state, CtState::New);
    let out = tuple_of(&p);
    assert_eq!(out.src_ip(), ip("192.0.2.1"));
    assert_eq!(out.sport, 5000, "the own port is kept when free");
    assert!(checksums_ok(&p));
    // The next packet of the original direction: rewritten the same way.
    let p2 = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 3);
    let plan = w.nat_of(&g, p2.data(), &p2.meta, 0, false);
    assert_eq!(plan, Some(NatPlan::Packet { from: orig, to: out }));
    // The reply arrives for 192.0.2.1:5000 and is de-translated to the inside host.
    let mut rep = frames::udp(ip("198.51.100.7"), ip("192.0.2.1"), 53, 5000, 7);
    let r = w.track_packet(&g, &rep, 0, false);
    assert_eq!((r.state, r.reply), (CtState::Established, true));
    let Some(NatPlan::Packet { from, to }) = w.nat_of(&g, rep.data(), &rep.meta, 0, false) else {
        panic!("reply not translated");
    };
    assert_eq!(to, orig.reversed());
    assert!(nat::rewrite_pkt(&mut rep, &from, &to));
    assert_eq!(tuple_of(&rep), orig.reversed());
    assert!(checksums_ok(&rep));
    // An already translated packet is not translated again.
    let again = frames::udp(ip("192.0.2.1"), ip("198.51.100.7"), 5000, 53, 3);
    assert_eq!(w.nat_of(&g, again.data(), &again.meta, 0, false), None);
    // conntrack -L: the original tuple, then the reply tuple with the translated address.
    let d = ct.dump();
    assert_eq!(d.len(), 1, "one record for both nodes");
    let line = d[0].to_string();
    assert!(
        line.contains(
            "src=10.0.0.2 dst=198.51.100.7 sport=5000 dport=53 src=198.51.100.7 dst=192.0.2.1 sport=53 dport=5000"
        ),
        "{line}"
    );
    assert_eq!(ct.stats().nat_created, 1);
    drop(g);
    // Both nodes leave together.
    assert_eq!(ct.flush(), 1);
    let g = w.pin();
    assert_eq!(w.nat_of(&g, rep.data(), &rep.meta, 0, false), None);
    assert!(!w.tuple_taken(&g, &out, 0) && !w.tuple_taken(&g, &orig, 0));
}

/// Two inside hosts with the same source port to the same server: the second gets another
/// port (the first's tuple is taken).
#[test]
fn a_taken_tuple_is_never_reused() {
    let (ct, mut w, _clock) = setup();
    let mut ports = NatPorts::new(0, 1);
    let snat = SrcNat {
        addr: (0xc000_0201, 0xc000_0201),
        ports: Some(PortRange { lo: 2000, hi: 2003 }),
    };
    let g = w.pin();
    let mut got = Vec::new();
    for host in 2..=5 {
        let mut p = frames::tcp(
            ip(&format!("10.0.0.{host}")),
            ip("198.51.100.7"),
            2001,
            80,
            Seg::new(SYN, 1, 0),
        );
        let orig = tuple_of(&p);
        let l4 = l4_of(&p);
        nat::commit_new(&mut w, &mut ports, &g, &mut p, 0, &orig, orig, l4, Some(snat)).expect("a port is free");
        assert!(checksums_ok(&p));
        got.push(tuple_of(&p).sport);
    }
    got.sort_unstable();
    assert_eq!(got, vec![2000, 2001, 2002, 2003]);
    let mut p = frames::tcp(ip("10.0.0.9"), ip("198.51.100.7"), 2001, 80, Seg::new(SYN, 1, 0));
    let orig = tuple_of(&p);
    let l4 = l4_of(&p);
    assert_eq!(
        nat::commit_new(&mut w, &mut ports, &g, &mut p, 0, &orig, orig, l4, Some(snat)),
        Err(nat::NatFail::Exhausted)
    );
    assert!(ports.exhausted(0));
    // Another destination may use the same ports.
    let mut p = frames::tcp(ip("10.0.0.9"), ip("198.51.100.8"), 2001, 80, Seg::new(SYN, 1, 0));
    let orig = tuple_of(&p);
    let l4 = l4_of(&p);
    assert!(nat::commit_new(&mut w, &mut ports, &g, &mut p, 0, &orig, orig, l4, Some(snat)).is_ok());
    assert_eq!(ct.len(), 5);
}

/// A port forward (destination translation) with a TCP handshake through it, expiry
/// removing both nodes, and an ICMP error about the translated connection mapped back.
#[test]
fn port_forward_handshake_expiry_and_icmp_error() {
    let (ct, mut w, clock) = setup();
    let mut ports = NatPorts::new(0, 1);
    let client = ip("198.51.100.7");
    let public = ip("192.0.2.1");
    let server = ip("10.0.10.5");
    let mut syn = frames::tcp(client, public, 40000, 8080, Seg::new(SYN, 100, 0));
    let orig = tuple_of(&syn);
    let dnat = Tuple {
        dst: 0x0a00_0a05,
        dport: 80,
        ..orig
    };
    let g = w.pin();
    assert!(nat::rewrite_pkt(&mut syn, &orig, &dnat));
    let l4 = l4_of(&syn);
    nat::commit_new(&mut w, &mut ports, &g, &mut syn, 0, &orig, dnat, l4, None).expect("created");
    assert_eq!(tuple_of(&syn), dnat);
    assert!(checksums_ok(&syn));
    // The server's SYN-ACK, de-translated.
    let mut sa = frames::tcp(server, client, 80, 40000, Seg::new(SYN | ACK, 500, 101));
    assert_eq!(w.track_packet(&g, &sa, 0, false).state, CtState::Established);
    let Some(NatPlan::Packet { from, to }) = w.nat_of(&g, sa.data(), &sa.meta, 0, false) else {
        panic!("reply not translated");
    };
    assert!(nat::rewrite_pkt(&mut sa, &from, &to));
    assert_eq!(tuple_of(&sa), orig.reversed());
    assert!(checksums_ok(&sa));
    // A router beyond the client reports the SYN-ACK it could not deliver: the error
    // quotes the reply as translated (public:8080 -> client) and goes to the public address.
    let err = frames::icmp_error(ip("203.0.113.1"), public, 3, 1, &sa);
    let mut err = err;
    let Some(NatPlan::IcmpError { from, to }) = w.nat_of(&g, err.data(), &err.meta, 0, false) else {
        panic!("error not matched to the translated connection");
    };
    assert_eq!(to, dnat.reversed(), "the quote goes back to the server's view");
    let (l3, l4) = (usize::from(err.meta.l3_off), usize::from(err.meta.l4_off));
    assert!(nat::rewrite_icmp_error(err.data_mut(), l3, l4, &from, &to));
    let f = err.data();
    assert_eq!(&f[l3 + 16..l3 + 20], &[10, 0, 10, 5], "the error goes to the server");
    assert!(verify(&f[l3..l3 + 20]));
    assert_eq!(fold(sum(&f[l4..], 0)), 0, "ICMP checksum");
    assert!(verify(&f[l4 + 8..l4 + 28]), "the quoted header's checksum");
    assert_eq!(
        &f[l4 + 8 + 12..l4 + 8 + 16],
        &[10, 0, 10, 5],
        "quoted source: the server"
    );
    drop(g);
    // Expiry removes the connection and its reply node.
    clock.set(1_000_000 + 10 * 24 * 3_600_000);
    assert_eq!(ct.expire_now(), 1);
    let g = w.pin();
    assert!(!w.tuple_taken(&g, &dnat, 0));
    assert!(!w.tuple_taken(&g, &orig, 0));
    assert!(ct.is_empty());
}

/// Echo: the identifier is translated, and the reply's identifier translated back.
#[test]
fn echo_identifier_is_translated() {
    let (_ct, mut w, _clock) = setup();
    let mut ports = NatPorts::new(0, 1);
    let g = w.pin();
    // Two hosts ping the same server with the same identifier.
    let mut ids = Vec::new();
    for host in ["10.0.0.2", "10.0.0.3"] {
        let mut p = frames::echo(ip(host), ip("198.51.100.7"), 77, 1, true);
        let orig = tuple_of(&p);
        let snat = SrcNat {
            addr: (0xc000_0201, 0xc000_0201),
            ports: None,
        };
        let l4 = l4_of(&p);
        nat::commit_new(&mut w, &mut ports, &g, &mut p, 0, &orig, orig, l4, Some(snat)).unwrap();
        assert!(checksums_ok(&p));
        ids.push(tuple_of(&p).sport);
    }
    assert_eq!(ids[0], 77);
    assert_ne!(ids[1], 77);
    let mut rep = frames::echo(ip("198.51.100.7"), ip("192.0.2.1"), ids[1], 1, false);
    let Some(NatPlan::Packet { from, to }) = w.nat_of(&g, rep.data(), &rep.meta, 0, false) else {
        panic!("echo reply not translated");
    };
    assert!(nat::rewrite_pkt(&mut rep, &from, &to));
    let t = tuple_of(&rep);
    assert_eq!((t.dst_ip(), t.dport), (ip("10.0.0.3"), 77));
    assert!(checksums_ok(&rep));
}

fn any_packet() -> impl Strategy<Value = Packet> {
    let v4 = any::<[u8; 4]>().prop_map(IpAddr::from);
    let v6 = any::<[u8; 16]>().prop_map(IpAddr::from);
    let pair = prop_oneof![(v4.clone(), v4), (v6.clone(), v6)];
    (pair, 0u8..4, any::<u16>(), any::<u16>(), 0usize..64).prop_map(|((a, b), kind, sp, dp, len)| match kind {
        0 => frames::udp(a, b, sp, dp, len),
        1 => frames::tcp(a, b, sp, dp, Seg::new(ACK, 1, 2).data(len)),
        2 => frames::echo(a, b, sp, dp, true),
        _ => frames::echo(a, b, sp, dp, false),
    })
}

proptest! {
    /// Any packet rewritten to any tuple of its family is well-formed with valid checksums,
    /// carries that tuple, and rewriting it back restores it byte for byte.
    #[test]
    fn rewrite_keeps_checksums_and_undoes(p in any_packet(), a in any::<u128>(), b in any::<u128>(),
                                          sp in any::<u16>(), dp in any::<u16>()) {
        let from = tuple_of(&p);
        let mask = if from.v6 { u128::MAX } else { u128::from(u32::MAX) };
        let echo = matches!(from.proto, 1 | 58);
        // An echo's tuple holds its identifier in one port and zero in the other.
        let (sp, dp) = if echo {
            if from.sport != 0 || from.dport == 0 { (sp, 0) } else { (0, dp) }
        } else {
            (sp, dp)
        };
        let to = Tuple { src: a & mask, dst: b & mask, sport: sp, dport: dp, ..from };
        let before = p.data().to_vec();
        let udp0 = from.proto == 17 && !from.v6 && rd16(&before, usize::from(p.meta.l4_off) + 6) == 0;
        let mut q = p.clone();
        prop_assert!(nat::rewrite_pkt(&mut q, &from, &to));
        prop_assert!(checksums_ok(&q));
        prop_assert_eq!(tuple_of(&q).src, to.src);
        prop_assert_eq!(tuple_of(&q).dst, to.dst);
        if !echo || sp | dp != 0 {
            prop_assert_eq!(tuple_of(&q), to);
        }
        if udp0 {
            prop_assert_eq!(rd16(q.data(), usize::from(q.meta.l4_off) + 6), 0, "a zero UDP checksum stays zero");
        }
        prop_assert!(nat::rewrite_pkt(&mut q, &to, &from));
        // A checksum may come back as the other zero (0x0000 vs 0xffff) only where both mean
        // the same; everything else is the original.
        prop_assert!(checksums_ok(&q));
        prop_assert_eq!(tuple_of(&q), from);
        let l4 = usize::from(p.meta.l4_off);
        let csum_at = match from.proto { 6 => l4 + 16, 17 => l4 + 6, _ => l4 + 2 };
        let (mut x, mut y) = (before.clone(), q.data().to_vec());
        x[csum_at..csum_at + 2].fill(0);
        y[csum_at..csum_at + 2].fill(0);
        prop_assert_eq!(x, y);
    }
}

/// The insert race: the connection exists by the time its translation is committed (another
/// worker created it). The published reply node becomes an orphan, removed at the next
/// sweep with its twin, and gives back no place under the limits.
#[test]
fn an_orphaned_reply_node_is_removed_with_its_twin() {
    let (ct, mut w, _clock) = setup();
    let mut p = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 4);
    let orig = tuple_of(&p);
    let g = w.pin();
    // The other worker's plain connection of the same tuple.
    assert_eq!(w.track_packet(&g, &p, 0, true).state, CtState::New);
    let out = Tuple {
        src: 0xc000_0201,
        ..orig
    };
    assert!(nat::rewrite_pkt(&mut p, &orig, &out));
    assert!(matches!(
        w.commit_nat(&g, p.data(), &p.meta, 0, &orig, false),
        freeway_conntrack::NatCommit::Done(_)
    ));
    assert!(
        w.tuple_taken(&g, &out, 0),
        "the orphan is linked until the remover runs"
    );
    assert_eq!(ct.len(), 1);
    drop(g);
    assert_eq!(ct.expire_now(), 0, "an orphan is not a connection");
    let g = w.pin();
    assert!(!w.tuple_taken(&g, &out, 0), "the orphan is gone");
    assert!(w.tuple_taken(&g, &orig, 0), "the connection stays");
    assert_eq!((ct.len(), ct.dump().len()), (1, 1));
    assert_eq!(ct.stats().insert_races, 1);
    // Another orphan, left linked: the table frees it and its twin when it drops.
    let mut q = frames::udp(ip("10.0.0.3"), ip("198.51.100.7"), 5000, 53, 4);
    let orig = tuple_of(&q);
    assert_eq!(w.track_packet(&g, &q, 0, true).state, CtState::New);
    assert!(nat::rewrite_pkt(
        &mut q,
        &orig,
        &Tuple {
            src: 0xc000_0202,
            ..orig
        }
    ));
    let _ = w.commit_nat(&g, q.data(), &q.meta, 0, &orig, false);
    drop((g, w));
    drop(ct);
}

/// `track_nat` tracks as `track` does and, from its one lookup, gives the plan `nat_of`
/// gives: both directions of a translated connection, an already translated packet, an
/// untranslated connection, and an ICMP error about the translated connection.
#[test]
fn track_nat_gives_the_plan_of_nat_of() {
    let (_ct, mut w, _clock) = setup();
    let flags = freeway_conntrack::TrackFlags {
        commit: false,
        l3_csum_verified: false,
    };
    let g = w.pin();
    masquerade_one(&mut w, &g);
    // An untranslated connection beside it.
    let plain = frames::udp(ip("10.0.0.9"), ip("198.51.100.7"), 6000, 53, 20);
    assert_eq!(w.track_packet(&g, &plain, 0, true).state, CtState::New);
    let rep = frames::udp(ip("198.51.100.7"), ip("192.0.2.1"), 53, 5000, 7);
    let again = frames::udp(ip("192.0.2.1"), ip("198.51.100.7"), 5000, 53, 3);
    let fwd = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 3);
    let err = frames::icmp_error(ip("203.0.113.1"), ip("192.0.2.1"), 3, 1, &again);
    let cases = [
        (&rep, CtState::Established, true, true),
        (&fwd, CtState::Established, false, true),
        (&again, CtState::Established, false, false),
        (&plain, CtState::New, false, false),
        (&err, CtState::Related, true, true),
    ];
    for (i, (q, state, reply, translated)) in cases.into_iter().enumerate() {
        let (r, plan) = w.track_nat(&g, q.data(), &q.meta, 0, flags);
        assert_eq!((r.state, r.reply), (state, reply), "case {i}");
        let looked_up = w.nat_of(&g, q.data(), &q.meta, 0, false);
        assert_eq!(plan.map(NatPlan::in_tuples), looked_up, "case {i}");
        // An IPv4 packet's rewrite comes with the checksum changes the connection keeps:
        // those of its tuples.
        if let Some(NatPlan::Packet4(rw)) = plan {
            let Some(NatPlan::Packet { from, to }) = looked_up else {
                panic!("case {i}: a packet's plan");
            };
            assert_eq!(Some(rw), nat::Rewrite4::new(&from, &to), "case {i}");
        }
        assert_eq!(plan.is_some(), translated, "case {i}");
    }
}

/// A translated connection whose first candidate tuples are taken gets the next free one,
/// and the tries reserve one place only: the table counts exactly its connections. The
/// replies of each, those whose reply node took another key before it was published
/// included, are translated back to their client by a stored IPv4 rewrite.
#[test]
fn taken_candidates_are_skipped_with_one_reservation() {
    let (ct, mut w, _clock) = setup();
    let mut ports = NatPorts::new(0, 1);
    let g = w.pin();
    let snat = SrcNat {
        addr: (0xc000_0201, 0xc000_0201),
        ports: Some(PortRange { lo: 7000, hi: 7003 }),
    };
    // Two connections take 7000 and 7001; a second set of ports (its cursor at the start)
    // finds them taken and goes on to 7002 and 7003.
    let mut fresh = NatPorts::new(0, 1);
    let mut outs = Vec::new();
    let mut flows = Vec::new();
    for i in 0..4 {
        let mut p = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000 + i, 53, 4);
        let orig = tuple_of(&p);
        let ports = if i < 2 { &mut ports } else { &mut fresh };
        let l4 = l4_of(&p);
        nat::commit_new(&mut w, ports, &g, &mut p, 0, &orig, orig, l4, Some(snat)).expect("a port is free");
        assert!(checksums_ok(&p));
        outs.push(tuple_of(&p).sport);
        flows.push((orig, tuple_of(&p)));
    }
    assert_eq!(outs, vec![7000, 7001, 7002, 7003], "every port once");
    let flags = freeway_conntrack::TrackFlags {
        commit: false,
        l3_csum_verified: false,
    };
    for (orig, out) in flows {
        let mut reply = frames::udp(out.dst_ip(), out.src_ip(), out.dport, out.sport, 4);
        let (r, plan) = w.track_nat(&g, reply.data(), &reply.meta, 0, flags);
        assert_eq!((r.state, r.reply), (CtState::Established, true), "{out:?}");
        let Some(plan @ NatPlan::Packet4(_)) = plan else {
            panic!("a stored IPv4 rewrite for the reply to {out:?}, got {plan:?}");
        };
        assert_eq!(plan.tuples(), (out.reversed(), orig.reversed()));
        assert!(nat::apply(&mut reply, &plan));
        assert_eq!(tuple_of(&reply), orig.reversed());
        assert!(checksums_ok(&reply));
    }
    let mut p = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5999, 53, 4);
    let orig = tuple_of(&p);
    let l4 = l4_of(&p);
    assert_eq!(
        nat::commit_new(&mut w, &mut ports, &g, &mut p, 0, &orig, orig, l4, Some(snat)),
        Err(nat::NatFail::Exhausted)
    );
    drop(g);
    drop(w);
    assert_eq!(ct.len(), 4, "no place kept by the refused connection");
    assert_eq!(ct.stats().nat_exhausted, 1);
}

/// An IPv4 packet of kind `kind` (0: UDP, 1: TCP, 2: echo request, 3: echo reply) with tuple
/// `t` (an echo's identifier is its tuple's nonzero port) and `len` payload bytes.
fn v4_packet(kind: u8, t: &Tuple, len: usize) -> Packet {
    let (a, b) = (t.src_ip(), t.dst_ip());
    match kind {
        0 => frames::udp(a, b, t.sport, t.dport, len),
        1 => frames::tcp(a, b, t.sport, t.dport, Seg::new(ACK, 1, 2).data(len)),
        2 => frames::echo(a, b, t.sport, 7, true),
        _ => frames::echo(a, b, t.dport, 7, false),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A translated IPv4 connection (source translation, with or without a destination
    /// translation) keeps the checksum changes of its rewrite: both directions' packets,
    /// rewritten with them as the datapath does (the destination half, then the source
    /// half), have the checksums of a full recomputation (they equal the packet built anew
    /// with the translated tuple), and equal what the rewrite of the tuples gives.
    #[test]
    fn stored_checksum_changes_give_the_full_recomputation(
        kind in 0u8..3, client in any::<u32>(), server in any::<u32>(), public in any::<u32>(),
        cport in 1u16.., sport in 1u16.., dnat in any::<Option<(u32, u16)>>(), lens in any::<[u8; 4]>(),
    ) {
        let (_ct, mut w, _clock) = setup();
        let mut ports = NatPorts::new(0, 1);
        let g = w.pin();
        let echo = kind == 2;
        // A translation that changes the source address (else it may change nothing).
        let public = if public == client { !client } else { public };
        let orig = Tuple { src: u128::from(client), dst: u128::from(server), sport: cport,
                           dport: if echo { 0 } else { sport }, proto: [17, 6, 1][usize::from(kind)], v6: false };
        let mut p = if kind == 1 {
            frames::tcp(orig.src_ip(), orig.dst_ip(), cport, sport, Seg::new(SYN, 1, 0))
        } else {
            v4_packet(kind, &orig, 8)
        };
        prop_assert_eq!(tuple_of(&p), orig);
        let cur = match dnat {
            Some((a, port)) => Tuple { dst: u128::from(a), dport: if echo { 0 } else { port }, ..orig },
            None => orig,
        };
        prop_assert!(nat::rewrite_pkt(&mut p, &orig, &cur));
        let snat = SrcNat { addr: (u128::from(public), u128::from(public)), ports: None };
        let l4 = l4_of(&p);
        let r = nat::commit_new(&mut w, &mut ports, &g, &mut p, 0, &orig, cur, l4, Some(snat));
        prop_assert!(r.is_ok());
        let out = tuple_of(&p);
        let flags = freeway_conntrack::TrackFlags { commit: false, l3_csum_verified: false };
        // Both directions: the original one, and the reply to its translated form.
        for (i, (from, to)) in [(orig, out), (out.reversed(), orig.reversed())].into_iter().enumerate() {
            let k = if echo { 2 + i as u8 } else { kind };
            let len = usize::from(lens[i]) % 64;
            let q = v4_packet(k, &from, len);
            let (_, plan) = w.track_nat(&g, q.data(), &q.meta, 0, flags);
            let Some(NatPlan::Packet4(rw)) = plan else {
                panic!("direction {i}: an IPv4 rewrite, got {plan:?}");
            };
            prop_assert_eq!(rw.tuples(nat::Half::Both), (from, to));
            let (l3, l4) = (usize::from(q.meta.l3_off), usize::from(q.meta.l4_off));
            let mut x = q.clone();
            for half in [nat::Half::Dst, nat::Half::Src] {
                if rw.changes(half) {
                    prop_assert!(nat::rewrite4(x.data_mut(), l3, l4, &rw, half));
                }
            }
            prop_assert!(checksums_ok(&x));
            let built = v4_packet(k, &to, len);
            prop_assert_eq!(x.data(), built.data(), "direction {}", i);
            let mut y = q.clone();
            prop_assert!(nat::rewrite_pkt(&mut y, &from, &to));
            prop_assert_eq!(x.data(), y.data());
        }
    }
}

/// The ingress lookup's hand-off: an uncommitted new packet's [`NewConn`] gives its tuple
/// and transport state, survives being written as bytes and read back (TCP with its
/// segment, UDP, echo; IPv4 and IPv6), and `commit_seen` creates from it what
/// `commit_new` creates from the parsed packet; a committed or known packet hands nothing
/// on.
#[test]
fn an_uncommitted_new_packet_hands_on_its_creation() {
    let (_ct, mut w, _clock) = setup();
    let g = w.pin();
    let ingress = freeway_conntrack::TrackFlags {
        commit: false,
        l3_csum_verified: false,
    };
    let syn = Seg {
        wscale: Some(7),
        ..Seg::new(SYN, 0x1234_5678, 0)
    };
    let pkts = [
        frames::tcp(ip("10.0.0.2"), ip("198.51.100.7"), 40000, 443, syn),
        frames::udp(ip("10.0.0.3"), ip("198.51.100.7"), 5000, 53, 20),
        frames::udp(ip("2001:db8::2"), ip("2001:db8:1::7"), 5000, 53, 20),
        frames::echo(ip("10.0.0.4"), ip("198.51.100.7"), 77, 1, true),
    ];
    for p in pkts {
        let (r, plan, new) = w.track_new(&g, p.data(), &p.meta, 3, ingress);
        assert!(r.uncommitted && r.state == CtState::New && plan.is_none(), "{r:?}");
        let new = new.expect("handed on");
        assert_eq!(new.tuple(), tuple_of(&p));
        assert_eq!(new.l4(), l4_of(&p));
        assert_eq!(new.zone(), 3);
        let mut b = [0u8; freeway_conntrack::NewConn::LEN];
        new.write(&mut b);
        assert_eq!(w.read_new(&b), Some(new), "read back as written");
        b[41] = 0xff;
        assert_eq!(w.read_new(&b), None, "an unknown transport kind");
    }
    // Created from the hand-off as from the parsed packet: translated, found both ways.
    let mut ports = NatPorts::new(0, 1);
    let snat = SrcNat {
        addr: (0xc000_0201, 0xc000_0201),
        ports: None,
    };
    let mut p = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 20);
    let (_, _, new) = w.track_new(&g, p.data(), &p.meta, 0, ingress);
    let new = new.expect("handed on");
    let orig = new.tuple();
    let r = nat::commit_seen(&mut w, &mut ports, &g, &mut p, &new, &orig, orig, Some(snat)).expect("translated");
    assert_eq!(r.state, CtState::New);
    let out = tuple_of(&p);
    assert_eq!(out.src_ip(), ip("192.0.2.1"));
    assert!(checksums_ok(&p));
    let commit = freeway_conntrack::TrackFlags {
        commit: true,
        l3_csum_verified: false,
    };
    let reply = frames::udp(out.dst_ip(), out.src_ip(), out.dport, out.sport, 20);
    let (r, plan) = w.track_nat(&g, reply.data(), &reply.meta, 0, commit);
    assert_eq!((r.state, r.reply), (CtState::Established, true));
    assert_eq!(plan.map(|p| p.tuples().1), Some(orig.reversed()));
    // A packet of a known connection, or one committed, hands nothing on.
    let q = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 20);
    assert!(w.track_new(&g, q.data(), &q.meta, 0, ingress).2.is_none());
    let q = frames::udp(ip("10.0.0.9"), ip("198.51.100.7"), 5000, 53, 20);
    let (r, _, new) = w.track_new(&g, q.data(), &q.meta, 0, commit);
    assert!(r.state == CtState::New && !r.uncommitted && new.is_none());
}
