//! Behaviour of the tracker through the public API: TCP state machine and windows, UDP,
//! ICMP, zones, limits, expiry, flushes, dumps and the firewall.
#![cfg(not(loom))]

use std::net::IpAddr;

use freeway_conntrack::frames::{self, Seg};
use freeway_conntrack::{
    Conntrack, CtConfig, CtState, CtWorker, Firewall, FirewallPolicy, InvalidReason, TimeoutClass, TrackFlags, Tuple,
    Verdict,
};
use freeway_packet::build::tcp_flags::{ACK, FIN, PSH, RST, SYN};
use freeway_packet::Packet;
use freeway_sync::Clock;

const NEW: CtState = CtState::New;
const EST: CtState = CtState::Established;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn setup(cfg: CtConfig) -> (Conntrack, CtWorker, Clock) {
    let clock = Clock::manual();
    clock.set(1_000_000);
    let (ct, _exp) = Conntrack::new(cfg, clock.clone()).unwrap();
    let w = ct.worker();
    (ct, w, clock)
}

/// Tracks one packet with commit; returns (state, reply).
fn go(w: &mut CtWorker, p: &Packet, zone: u16) -> (CtState, bool) {
    let g = w.pin();
    let r = w.track_packet(&g, p, zone, true);
    (r.state, r.reply)
}

struct Tcp {
    a: IpAddr,
    b: IpAddr,
    ap: u16,
    bp: u16,
}

impl Tcp {
    fn v4() -> Tcp {
        Tcp {
            a: ip("10.0.0.1"),
            b: ip("10.0.0.2"),
            ap: 40000,
            bp: 80,
        }
    }
    fn c(&self, s: Seg) -> Packet {
        frames::tcp(self.a, self.b, self.ap, self.bp, s)
    }
    fn s(&self, s: Seg) -> Packet {
        frames::tcp(self.b, self.a, self.bp, self.ap, s)
    }
    fn tuple(&self) -> Tuple {
        let (IpAddr::V4(a), IpAddr::V4(b)) = (self.a, self.b) else {
            let (IpAddr::V6(a), IpAddr::V6(b)) = (self.a, self.b) else {
                panic!()
            };
            return Tuple::v6(a, b, 6, self.ap, self.bp);
        };
        Tuple::v4(a, b, 6, self.ap, self.bp)
    }
}

fn tcp_state(ct: &Conntrack, t: &Tcp) -> &'static str {
    ct.get(&t.tuple(), 0).expect("connection").state.unwrap()
}

fn handshake(w: &mut CtWorker, t: &Tcp) {
    assert_eq!(go(w, &t.c(Seg::new(SYN, 100, 0)), 0), (NEW, false));
    assert_eq!(go(w, &t.s(Seg::new(SYN | ACK, 9000, 101)), 0), (EST, true));
    assert_eq!(go(w, &t.c(Seg::new(ACK, 101, 9001)), 0), (EST, false));
}

#[test]
fn tcp_full_lifecycle_with_fin_teardown() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let t = Tcp::v4();
    assert_eq!(go(&mut w, &t.c(Seg::new(SYN, 100, 0)), 0), (NEW, false));
    assert_eq!(tcp_state(&ct, &t), "SYN_SENT");
    // Retransmitted SYN: still new, still one connection.
    assert_eq!(go(&mut w, &t.c(Seg::new(SYN, 100, 0)), 0), (NEW, false));
    assert_eq!(go(&mut w, &t.s(Seg::new(SYN | ACK, 9000, 101)), 0), (EST, true));
    assert_eq!(tcp_state(&ct, &t), "SYN_RECV");
    // Retransmitted SYN-ACK is accepted (ignored by the state machine).
    assert_eq!(go(&mut w, &t.s(Seg::new(SYN | ACK, 9000, 101)), 0), (EST, true));
    assert_eq!(go(&mut w, &t.c(Seg::new(ACK, 101, 9001)), 0), (EST, false));
    let r = ct.get(&t.tuple(), 0).unwrap();
    assert_eq!(r.state, Some("ESTABLISHED"));
    assert!(r.assured && !r.unreplied);
    assert_eq!(r.timeout_secs, 432_000);
    // Data both ways, including a retransmission.
    assert_eq!(
        go(&mut w, &t.c(Seg::new(ACK | PSH, 101, 9001).data(500)), 0),
        (EST, false)
    );
    assert_eq!(
        go(&mut w, &t.c(Seg::new(ACK | PSH, 101, 9001).data(500)), 0),
        (EST, false)
    );
    assert_eq!(
        go(&mut w, &t.s(Seg::new(ACK | PSH, 9001, 601).data(100)), 0),
        (EST, true)
    );
    // Teardown.
    assert_eq!(go(&mut w, &t.c(Seg::new(FIN | ACK, 601, 9101)), 0), (EST, false));
    assert_eq!(tcp_state(&ct, &t), "FIN_WAIT");
    assert_eq!(go(&mut w, &t.s(Seg::new(ACK, 9101, 602)), 0), (EST, true));
    assert_eq!(tcp_state(&ct, &t), "CLOSE_WAIT");
    assert_eq!(go(&mut w, &t.s(Seg::new(FIN | ACK, 9101, 602)), 0), (EST, true));
    assert_eq!(tcp_state(&ct, &t), "LAST_ACK");
    assert_eq!(go(&mut w, &t.c(Seg::new(ACK, 602, 9102)), 0), (EST, false));
    let r = ct.get(&t.tuple(), 0).unwrap();
    assert_eq!((r.state, r.timeout_secs), (Some("TIME_WAIT"), 120));
    // A new SYN re-opens the connection as new.
    assert_eq!(go(&mut w, &t.c(Seg::new(SYN, 50_000, 0)), 0), (NEW, false));
    assert_eq!(tcp_state(&ct, &t), "SYN_SENT");
    assert_eq!(ct.len(), 1);
    let st = ct.stats();
    assert_eq!((st.created, st.reopened, st.invalid), (1, 1, 0));
}

#[test]
fn tcp_out_of_window_and_bad_flags_are_invalid_and_change_nothing() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let t = Tcp::v4();
    handshake(&mut w, &t);
    let inv = |r: InvalidReason| CtState::Invalid(r);
    // Sequence far beyond the receiver's window.
    assert_eq!(
        go(&mut w, &t.c(Seg::new(ACK, 101 + 10_000_000, 9001)), 0).0,
        inv(InvalidReason::TcpWindow)
    );
    // Acknowledging data the server never sent.
    assert_eq!(
        go(&mut w, &t.c(Seg::new(ACK, 101, 9001 + 500_000)), 0).0,
        inv(InvalidReason::TcpWindow)
    );
    // Data far in the past (more than a window behind).
    assert_eq!(
        go(&mut w, &t.c(Seg::new(ACK, 101u32.wrapping_sub(3_000_000), 9001)), 0).0,
        inv(InvalidReason::TcpWindow)
    );
    // Flag combinations no stack sends.
    assert_eq!(
        go(&mut w, &t.c(Seg::new(SYN | FIN, 101, 0)), 0).0,
        inv(InvalidReason::TcpFlags)
    );
    assert_eq!(go(&mut w, &t.c(Seg::new(0, 101, 0)), 0).0, inv(InvalidReason::TcpFlags));
    assert_eq!(
        go(&mut w, &t.c(Seg::new(FIN, 101, 0)), 0).0,
        inv(InvalidReason::TcpFlags)
    );
    // A SYN-ACK from the client in ESTABLISHED makes no sense.
    assert_eq!(
        go(&mut w, &t.c(Seg::new(SYN | ACK, 101, 9001)), 0).0,
        inv(InvalidReason::TcpState)
    );
    assert_eq!(tcp_state(&ct, &t), "ESTABLISHED");
    // Out-of-window RST is ignored (invalid); in-window RST closes.
    assert_eq!(
        go(&mut w, &t.s(Seg::new(RST, 9001 + 5_000_000, 0)), 0).0,
        inv(InvalidReason::TcpWindow)
    );
    assert_eq!(tcp_state(&ct, &t), "ESTABLISHED");
    assert_eq!(go(&mut w, &t.s(Seg::new(RST, 9001, 0)), 0), (EST, true));
    let r = ct.get(&t.tuple(), 0).unwrap();
    assert_eq!((r.state, r.timeout_secs), (Some("CLOSE"), 10));
    let st = ct.stats();
    assert_eq!(st.invalid, 8);
    assert_eq!(st.invalid_by_reason["tcp_window"], 4);
    assert_eq!(st.invalid_by_reason["tcp_flags"], 3);
}

#[test]
fn tcp_without_syn_needs_pickup_and_synack_alone_is_invalid() {
    let cfg = CtConfig {
        tcp_loose: false,
        ..CtConfig::default()
    };
    let (ct, mut w, _c) = setup(cfg);
    let t = Tcp::v4();
    let nc = CtState::Invalid(InvalidReason::NoConnection);
    assert_eq!(go(&mut w, &t.c(Seg::new(ACK, 5, 5)), 0).0, nc);
    assert_eq!(go(&mut w, &t.s(Seg::new(SYN | ACK, 5, 5)), 0).0, nc);
    assert_eq!(go(&mut w, &t.c(Seg::new(RST, 5, 0)), 0).0, nc);
    assert!(ct.is_empty());
    // With pickup (the default), a mid-stream ACK creates an established connection.
    let (ct, mut w, _c) = setup(CtConfig::default());
    assert_eq!(go(&mut w, &t.c(Seg::new(ACK, 5000, 7000).data(10)), 0), (NEW, false));
    assert_eq!(tcp_state(&ct, &t), "ESTABLISHED");
    assert_eq!(go(&mut w, &t.s(Seg::new(ACK, 7000, 5010)), 0), (EST, true));
}

#[test]
fn tcp_rst_answering_syn_and_window_scaling() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let t = Tcp::v4();
    assert_eq!(go(&mut w, &t.c(Seg::new(SYN, 100, 0)), 0), (NEW, false));
    // Connection refused: RST+ACK acknowledging the SYN.
    assert_eq!(go(&mut w, &t.s(Seg::new(RST | ACK, 0, 101)), 0), (EST, true));
    assert_eq!(tcp_state(&ct, &t), "CLOSE");

    // Window scaling: both sides offer it; a 64 KiB raw window scaled by 2^7 allows data
    // 5 MB ahead, which an unscaled window would refuse.
    let t2 = Tcp { ap: 40001, ..Tcp::v4() };
    let mut syn = Seg::new(SYN, 1, 0);
    syn.wscale = Some(7);
    let mut synack = Seg::new(SYN | ACK, 1, 2);
    synack.wscale = Some(7);
    assert_eq!(go(&mut w, &t2.c(syn), 0).0, NEW);
    assert_eq!(go(&mut w, &t2.s(synack), 0).0, EST);
    assert_eq!(go(&mut w, &t2.c(Seg::new(ACK, 2, 2)), 0).0, EST);
    // The server's first scaled window opens the client's send window.
    assert_eq!(go(&mut w, &t2.s(Seg::new(ACK, 2, 2)), 0).0, EST);
    assert_eq!(go(&mut w, &t2.c(Seg::new(ACK, 2 + 5_000_000, 2).data(100)), 0).0, EST);
    // Without scaling on one side, the same jump is out of window.
    let t3 = Tcp { ap: 40002, ..Tcp::v4() };
    assert_eq!(go(&mut w, &t3.c(syn), 0).0, NEW);
    assert_eq!(go(&mut w, &t3.s(Seg::new(SYN | ACK, 1, 2)), 0).0, EST);
    assert_eq!(go(&mut w, &t3.c(Seg::new(ACK, 2, 2)), 0).0, EST);
    assert_eq!(go(&mut w, &t3.s(Seg::new(ACK, 2, 2)), 0).0, EST);
    assert_eq!(
        go(&mut w, &t3.c(Seg::new(ACK, 2 + 5_000_000, 2).data(100)), 0).0,
        CtState::Invalid(InvalidReason::TcpWindow)
    );
}

#[test]
fn tcp_over_ipv6() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let t = Tcp {
        a: ip("2001:db8::1"),
        b: ip("2001:db8::2"),
        ap: 5555,
        bp: 443,
    };
    handshake(&mut w, &t);
    assert_eq!(tcp_state(&ct, &t), "ESTABLISHED");
    let line = ct.dump()[0].to_string();
    assert!(
        line.starts_with("tcp      6 432000 ESTABLISHED src=2001:db8::1 dst=2001:db8::2 sport=5555 dport=443 "),
        "{line}"
    );
}

#[test]
fn both_directions_map_to_one_connection_and_udp_states() {
    let (ct, mut w, clock) = setup(CtConfig::default());
    let a = ip("10.1.1.1");
    let b = ip("10.1.1.2");
    let fwd = frames::udp(a, b, 1, 2, 0);
    let rev = frames::udp(b, a, 2, 1, 0);
    assert_eq!(go(&mut w, &fwd, 0), (NEW, false));
    assert_eq!(go(&mut w, &fwd, 0), (NEW, false));
    let r = &ct.dump()[0];
    assert_eq!(
        r.to_string(),
        "udp      17 30 src=10.1.1.1 dst=10.1.1.2 sport=1 dport=2 [UNREPLIED] src=10.1.1.2 dst=10.1.1.1 sport=2 dport=1 mark=0 use=1"
    );
    clock.advance(1000);
    assert_eq!(go(&mut w, &rev, 0), (EST, true));
    let r = &ct.dump()[0];
    assert!(!r.unreplied && !r.assured);
    assert_eq!(r.timeout_secs, 120);
    assert_eq!(go(&mut w, &fwd, 0), (EST, false));
    let r = &ct.dump()[0];
    assert!(r.assured);
    assert_eq!(
        r.to_string(),
        "udp      17 120 src=10.1.1.1 dst=10.1.1.2 sport=1 dport=2 src=10.1.1.2 dst=10.1.1.1 sport=2 dport=1 [ASSURED] mark=0 use=1"
    );
    let json = serde_json::to_value(r).unwrap();
    assert_eq!(json["proto"], "udp");
    assert_eq!(json["original"]["src"], "10.1.1.1");
    assert_eq!(json["reply"]["sport"], 2);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.state_counts()["udp ASSURED"], 1);
    // The reverse tuple finds the same connection, original direction first.
    let rt = Tuple::v4("10.1.1.2".parse().unwrap(), "10.1.1.1".parse().unwrap(), 17, 2, 1);
    assert_eq!(ct.get(&rt, 0).unwrap().orig.src, a);
}

#[test]
fn zones_are_isolated() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let p = frames::udp(ip("10.0.0.1"), ip("10.0.0.2"), 7, 8, 0);
    let back = frames::udp(ip("10.0.0.2"), ip("10.0.0.1"), 8, 7, 0);
    assert_eq!(go(&mut w, &p, 1), (NEW, false));
    assert_eq!(
        go(&mut w, &back, 2),
        (NEW, false),
        "a reply in another zone is another connection"
    );
    assert_eq!(go(&mut w, &back, 1), (EST, true));
    assert_eq!((ct.len(), ct.zone_len(1), ct.zone_len(2)), (2, 1, 1));
    assert_eq!(ct.stats().zones.len(), 2);
    assert_eq!(ct.flush_zone(2), 1);
    assert_eq!((ct.len(), ct.zone_len(1), ct.zone_len(2)), (1, 1, 0));
    assert_eq!(ct.dump()[0].zone, 1);
    assert_eq!(ct.flush(), 1);
    assert!(ct.is_empty() && ct.dump().is_empty());
    assert_eq!(ct.stats().flushed, 2);
}

#[test]
fn global_and_zone_limits_drop_new_but_established_flow() {
    let cfg = CtConfig {
        max: 4,
        zone_limits: vec![(1, 2)],
        ..CtConfig::default()
    };
    let (ct, mut w, clock) = setup(cfg);
    let a = ip("10.0.0.1");
    let b = ip("10.0.0.2");
    for port in 0..2 {
        assert_eq!(go(&mut w, &frames::udp(a, b, port, 9, 0), 1).0, NEW);
    }
    let full_zone = CtState::Invalid(InvalidReason::LimitZone);
    assert_eq!(go(&mut w, &frames::udp(a, b, 2, 9, 0), 1).0, full_zone);
    // Established connections of the full zone keep flowing.
    assert_eq!(go(&mut w, &frames::udp(b, a, 9, 0, 0), 1), (EST, true));
    for port in 10..12 {
        assert_eq!(go(&mut w, &frames::udp(a, b, port, 9, 0), 0).0, NEW);
    }
    let full = CtState::Invalid(InvalidReason::LimitGlobal);
    let g = w.pin();
    let r = w.track_packet(&g, &frames::udp(a, b, 12, 9, 0), 0, true);
    assert!(r.over_limit());
    assert_eq!(r.state, full);
    drop(g);
    assert_eq!(
        go(&mut w, &frames::udp(a, b, 10, 9, 0), 0).0,
        NEW,
        "existing connection still tracked"
    );
    assert_eq!(ct.len(), 4);
    let st = ct.stats();
    assert_eq!(
        (st.invalid_by_reason["limit_zone"], st.invalid_by_reason["limit_global"]),
        (1, 1)
    );
    // Without commit, a new connection is reported but not created (and never refused).
    let g = w.pin();
    let r = w.track_packet(&g, &frames::udp(a, b, 13, 9, 0), 0, false);
    assert_eq!(r.state, NEW);
    drop(g);
    assert_eq!(ct.len(), 4);
    // After expiry, room again.
    clock.advance(31_000);
    assert_eq!(
        ct.expire_now(),
        3,
        "the replied connection has the longer udp_multiple timeout"
    );
    assert_eq!(go(&mut w, &frames::udp(a, b, 12, 9, 0), 0).0, NEW);
    assert_eq!(ct.zone_limit(1), Some(2));
    ct.set_zone_limit(1, None);
    assert_eq!(ct.zone_limit(1), None);
}

#[test]
fn places_reserved_ahead_keep_counts_exact_and_the_limit_hard() {
    // max = 8 * 4096: each worker reserves 8 places of the global count at a time.
    let max = 8 * 4096;
    let cfg = CtConfig {
        max,
        ..CtConfig::default()
    };
    let (ct, mut w1, _clock) = setup(cfg);
    let mut w2 = ct.worker();
    let a = ip("10.0.0.1");
    let (mut created, mut refused) = (0usize, [false; 2]);
    let mut i = 0u32;
    // Two workers alternate until both are refused; zone 7 has no limit (reserved ahead).
    while !(refused[0] && refused[1]) {
        let w = if i % 2 == 0 { &mut w1 } else { &mut w2 };
        let b = IpAddr::from(std::net::Ipv4Addr::from(0x0a80_0000 + i));
        match go(w, &frames::udp(a, b, 1, 9, 0), 7).0 {
            NEW => created += 1,
            CtState::Invalid(InvalidReason::LimitGlobal) => refused[(i % 2) as usize] = true,
            other => panic!("unexpected {other:?}"),
        }
        // Counts never include spare places, at any point.
        if i % 1000 == 0 {
            assert_eq!(ct.len(), created);
            assert_eq!(ct.zone_len(7), created);
        }
        i += 1;
    }
    assert!(created <= max, "the limit is hard: {created} > {max}");
    assert!(
        created >= max - 7,
        "at most one chunk less one refused early: {created}"
    );
    assert_eq!(ct.len(), created);
    assert_eq!(ct.zone_len(7), created);
    assert_eq!(ct.stats().zones[&7], created);
    // A limit set on a zone with places reserved ahead applies at once: counted exactly.
    assert_eq!(ct.flush(), created);
    assert_eq!((ct.len(), ct.zone_len(7)), (0, 0));
    for port in 0..3 {
        assert_eq!(go(&mut w1, &frames::udp(a, a, port, 9, 0), 7).0, NEW);
    }
    ct.set_zone_limit(7, Some(5));
    for port in 3..5 {
        assert_eq!(go(&mut w1, &frames::udp(a, a, port, 9, 0), 7).0, NEW);
    }
    let full_zone = CtState::Invalid(InvalidReason::LimitZone);
    assert_eq!(go(&mut w1, &frames::udp(a, a, 5, 9, 0), 7).0, full_zone);
    assert_eq!(go(&mut w2, &frames::udp(a, a, 6, 9, 0), 7).0, full_zone);
    assert_eq!((ct.len(), ct.zone_len(7)), (5, 5));
    // Dropped workers give their spare places back.
    drop(w1);
    drop(w2);
    assert_eq!((ct.len(), ct.zone_len(7)), (5, 5));
    ct.set_zone_limit(7, None);
    let mut w3 = ct.worker();
    assert_eq!(go(&mut w3, &frames::udp(a, a, 7, 9, 0), 7).0, NEW);
    assert_eq!((ct.len(), ct.zone_len(7)), (6, 6));
}

#[test]
fn expiry_follows_the_manual_clock_and_timeout_policies() {
    let mut cfg = CtConfig::default();
    cfg.timeouts.set("udp_single", 5).unwrap();
    let mut z7 = cfg.timeouts;
    z7.set_ms(TimeoutClass::UdpSingle, 1_000);
    cfg.zone_timeouts = vec![(7, z7)];
    let clock = Clock::manual();
    let (ct, exp) = Conntrack::new(cfg, clock.clone()).unwrap();
    let mut w = ct.worker();
    let p = frames::udp(ip("10.0.0.1"), ip("10.0.0.2"), 1, 2, 0);
    assert_eq!(go(&mut w, &p, 0).0, NEW);
    assert_eq!(go(&mut w, &p, 7).0, NEW);
    assert_eq!(ct.timeouts(7).ms(TimeoutClass::UdpSingle), 1000);
    clock.set(999);
    assert_eq!(exp.step(), 0);
    assert_eq!(exp.listed(), 2);
    clock.set(1000);
    assert_eq!(exp.step(), 1, "zone 7's policy expires first");
    assert_eq!(ct.zone_len(7), 0);
    // Traffic refreshes the timeout.
    clock.set(4000);
    assert_eq!(go(&mut w, &p, 0).0, NEW);
    clock.set(8999);
    assert_eq!(exp.step(), 0);
    clock.set(9000);
    assert_eq!(exp.step(), 1);
    assert!(ct.is_empty());
    assert_eq!(ct.stats().expired, 2);
    // A packet after expiry starts a new connection.
    assert_eq!(go(&mut w, &p, 0).0, NEW);
    assert_eq!(ct.stats().created, 3);
}

/// Timeout policies replaced while connections exist: a connection keeps its expiry until
/// its next packet, which takes the new policy; a zone that loses its policy takes the
/// default.
#[test]
fn timeouts_change_live_from_each_connections_next_packet() {
    let mut cfg = CtConfig::default();
    cfg.timeouts.set_ms(TimeoutClass::UdpSingle, 5_000);
    let mut z7 = cfg.timeouts;
    z7.set_ms(TimeoutClass::UdpSingle, 1_000);
    cfg.zone_timeouts = vec![(7, z7)];
    let clock = Clock::manual();
    let (ct, exp) = Conntrack::new(cfg.clone(), clock.clone()).unwrap();
    let mut w = ct.worker();
    let p = frames::udp(ip("10.0.0.1"), ip("10.0.0.2"), 1, 2, 0);
    assert_eq!(go(&mut w, &p, 0).0, NEW);
    assert_eq!(go(&mut w, &p, 7).0, NEW);
    // Zone 7 loses its policy; the default becomes 2 s.
    let mut d = cfg.timeouts;
    d.set_ms(TimeoutClass::UdpSingle, 2_000);
    ct.set_timeouts(d, &[]).unwrap();
    assert_eq!(ct.timeouts(7).ms(TimeoutClass::UdpSingle), 2_000);
    assert_eq!(ct.timeouts(0).ms(TimeoutClass::UdpSingle), 2_000);
    // The zone 7 connection keeps its 1 s expiry; the other's next packet takes 2 s.
    clock.set(1_000);
    assert_eq!(exp.step(), 1);
    assert_eq!(ct.zone_len(7), 0);
    let _ = go(&mut w, &p, 0);
    clock.set(2_999);
    assert_eq!(exp.step(), 0);
    clock.set(3_000);
    assert_eq!(exp.step(), 1);
    assert!(ct.is_empty());
    let too_many: Vec<(u16, _)> = (0..256).map(|z| (z, d)).collect();
    assert!(ct.set_timeouts(d, &too_many).is_err());
}

#[test]
fn expiry_and_flush_give_back_each_zones_places() {
    // The remover sums the places it gives back per run of same-zone connections: interleave
    // zones so that runs are short, expire part of them, then flush the rest.
    let cfg = CtConfig {
        max: 64,
        zone_limits: vec![(1, 8), (2, 8)],
        ..CtConfig::default()
    };
    let (ct, mut w, clock) = setup(cfg);
    let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
    for port in 0..8u16 {
        for zone in [1, 2, 3] {
            assert_eq!(go(&mut w, &frames::udp(a, b, port, 9, 0), zone).0, NEW);
        }
    }
    assert_eq!(
        (ct.len(), ct.zone_len(1), ct.zone_len(2), ct.zone_len(3)),
        (24, 8, 8, 8)
    );
    // Zone 2's connections get a reply (the longer udp_multiple timeout) and survive.
    for port in 0..8u16 {
        assert_eq!(go(&mut w, &frames::udp(b, a, 9, port, 0), 2), (EST, true));
    }
    clock.advance(31_000);
    assert_eq!(ct.expire_now(), 16);
    assert_eq!((ct.len(), ct.zone_len(1), ct.zone_len(2), ct.zone_len(3)), (8, 0, 8, 0));
    assert_eq!(ct.stats().zones.into_iter().collect::<Vec<_>>(), vec![(2, 8)]);
    // The zone limits count again from zero: zone 1 takes 8 new connections, not a 9th.
    for port in 100..108u16 {
        assert_eq!(go(&mut w, &frames::udp(a, b, port, 9, 0), 1).0, NEW);
    }
    let full_zone = CtState::Invalid(InvalidReason::LimitZone);
    assert_eq!(go(&mut w, &frames::udp(a, b, 108, 9, 0), 1).0, full_zone);
    assert_eq!(ct.flush(), 16);
    assert!(ct.is_empty());
    assert!(ct.stats().zones.is_empty());
    assert_eq!((ct.zone_len(1), ct.zone_len(2)), (0, 0));
}

#[test]
fn expiry_thread_runs_in_the_background() {
    let cfg = CtConfig {
        expiry_interval_ms: 1,
        ..CtConfig::default()
    };
    let clock = Clock::manual();
    let (ct, exp) = Conntrack::new(cfg, clock.clone()).unwrap();
    let th = exp.spawn();
    let mut w = ct.worker();
    for port in 0..100 {
        go(&mut w, &frames::udp(ip("10.0.0.1"), ip("10.0.0.2"), port, 2, 0), 0);
    }
    assert_eq!(ct.len(), 100);
    clock.advance(30_000);
    let t0 = std::time::Instant::now();
    while !ct.is_empty() && t0.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(ct.is_empty());
    th.stop();
}

#[test]
fn icmp_echo_and_errors_are_related() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let a = ip("10.0.0.1");
    let b = ip("10.0.0.2");
    let router = ip("192.0.2.1");
    // Echo keyed by identifier.
    assert_eq!(go(&mut w, &frames::echo(a, b, 77, 1, true), 0), (NEW, false));
    assert_eq!(go(&mut w, &frames::echo(b, a, 77, 1, false), 0), (EST, true));
    assert_eq!(
        go(&mut w, &frames::echo(b, a, 78, 1, false), 0).0,
        CtState::Invalid(InvalidReason::NoConnection),
        "a reply without a request"
    );
    let line = ct.dump().iter().find(|r| r.proto == "icmp").unwrap().to_string();
    assert_eq!(
        line,
        "icmp     1 30 src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=77 src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=77 mark=0 use=1"
    );
    // A UDP flow, then errors about it.
    let out = frames::udp(a, b, 1000, 53, 0);
    assert_eq!(go(&mut w, &out, 0).0, NEW);
    let unreach = frames::icmp_error(b, a, 3, 3, &out);
    assert_eq!(go(&mut w, &unreach, 0), (CtState::Related, true));
    let ttl = frames::icmp_error(router, a, 11, 0, &out);
    assert_eq!(go(&mut w, &ttl, 0), (CtState::Related, true));
    // Error about an unknown flow, or in another zone.
    let other = frames::udp(a, b, 1001, 53, 0);
    assert_eq!(
        go(&mut w, &frames::icmp_error(b, a, 3, 3, &other), 0).0,
        CtState::Invalid(InvalidReason::NoConnection)
    );
    assert_eq!(go(&mut w, &unreach, 5).0, CtState::Invalid(InvalidReason::NoConnection));
    // An error about the echo.
    let req = frames::echo(a, b, 77, 2, true);
    assert_eq!(
        go(&mut w, &frames::icmp_error(router, a, 3, 1, &req), 0).0,
        CtState::Related
    );
    // TCP over IPv6 with an ICMPv6 error (packet too big), and ND untracked.
    let t = Tcp {
        a: ip("2001:db8::1"),
        b: ip("2001:db8::2"),
        ap: 1,
        bp: 2,
    };
    let syn = t.c(Seg::new(SYN, 1, 0));
    assert_eq!(go(&mut w, &syn, 0).0, NEW);
    assert_eq!(
        go(&mut w, &frames::icmp_error(t.b, t.a, 2, 0, &syn), 0),
        (CtState::Related, true)
    );
    let mut ns = frames::echo(t.a, t.b, 1, 1, true);
    let l4 = usize::from(ns.meta.l4_off);
    ns.data_mut()[l4] = 135;
    assert_eq!(go(&mut w, &ns, 0).0, CtState::Untracked);
    // Each packet counted once, under its state.
    let st = ct.stats();
    assert_eq!((st.new, st.established, st.related, st.untracked), (3, 1, 4, 1));
    assert_eq!((st.invalid, st.invalid_by_reason["no_connection"]), (3, 3));
    assert_eq!(st.invalid_by_reason.len(), 1);
    assert_eq!(st.packets, 12);
}

#[test]
fn malformed_packets_are_invalid() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let mut p = frames::udp(ip("10.0.0.1"), ip("10.0.0.2"), 1, 2, 8);
    let l3 = usize::from(p.meta.l3_off);
    p.data_mut()[l3 + 10] ^= 0xff;
    assert_eq!(go(&mut w, &p, 0).0, CtState::Invalid(InvalidReason::IpChecksum));
    // The caller may vouch for the checksum (already verified once).
    let g = w.pin();
    let flags = TrackFlags {
        commit: true,
        l3_csum_verified: true,
    };
    assert_eq!(w.track(&g, p.data(), &p.meta, 0, flags).state, NEW);
    drop(g);
    let mut p = frames::udp(ip("10.0.0.1"), ip("10.0.0.2"), 1, 3, 8);
    let l4 = usize::from(p.meta.l4_off);
    p.data_mut()[l4 + 4..l4 + 6].copy_from_slice(&100u16.to_be_bytes());
    assert_eq!(go(&mut w, &p, 0).0, CtState::Invalid(InvalidReason::L4Length));
    let arp = arp_request();
    assert_eq!(go(&mut w, &arp, 0).0, CtState::Untracked);
    assert_eq!(ct.len(), 1);
    let st = ct.stats();
    assert_eq!((st.new, st.established, st.related, st.untracked), (1, 0, 0, 1));
    assert_eq!(
        (
            st.invalid,
            st.invalid_by_reason["ip_checksum"],
            st.invalid_by_reason["l4_length"]
        ),
        (2, 1, 1)
    );
    assert_eq!(st.packets, 4);
}

#[test]
fn firewall_allows_new_only_from_chosen_ports() {
    let (ct, mut w, _c) = setup(CtConfig::default());
    let fw = Firewall::new(&FirewallPolicy {
        allow_new_from: vec![1],
        allow_new_zones: vec![],
    });
    let mut f = fw.worker();
    let inside = ip("192.168.1.10");
    let outside = ip("203.0.113.5");
    let mut run = |p: &Packet, in_port: u16| {
        let g = w.pin();
        let commit = f.allows_new(in_port, 0);
        let r = w.track_packet(&g, p, 0, commit);
        f.verdict(in_port, 0, &r)
    };
    // From outside: dropped and not committed.
    assert_eq!(run(&frames::udp(outside, inside, 53, 5000, 0), 2), Verdict::Drop);
    assert!(ct.is_empty());
    // From inside: allowed; the reply from outside is established.
    assert_eq!(run(&frames::udp(inside, outside, 5000, 53, 0), 1), Verdict::Accept);
    assert_eq!(run(&frames::udp(outside, inside, 53, 5000, 0), 2), Verdict::Accept);
    // Related error from outside is allowed, invalid is dropped.
    let q = frames::udp(inside, outside, 5000, 53, 0);
    assert_eq!(run(&frames::icmp_error(outside, inside, 3, 3, &q), 2), Verdict::Accept);
    assert_eq!(run(&frames::echo(outside, inside, 9, 9, false), 2), Verdict::Drop);
    let s = fw.stats();
    assert_eq!(
        (
            s.accept_new,
            s.accept_established,
            s.accept_related,
            s.drop_invalid,
            s.drop_new_not_allowed
        ),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(ct.len(), 1);
}

/// `frame` with its IPv4 header changed by `edit` (checksum recomputed) and parsed again.
fn edited(mut p: Packet, edit: impl FnOnce(&mut [u8])) -> Packet {
    let f = p.data_mut();
    edit(f);
    f[24] = 0;
    f[25] = 0;
    let c = freeway_packet::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    freeway_packet::parse(&mut p).unwrap();
    p
}

/// As Linux tracks them: the ICMP queries besides echo (timestamp, information, address
/// mask) start connections that their replies establish; an SCTP packet starts one only
/// with an INIT (or COOKIE ECHO, HEARTBEAT) first chunk, a DATA chunk alone is invalid.
#[test]
fn icmp_queries_and_sctp_starts_as_linux_tracks_them() {
    let (_ct, mut w, _c) = setup(CtConfig::default());
    let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
    for (req, rep) in [(13u8, 14u8), (15, 16), (17, 18)] {
        let id = u16::from(req);
        let q = edited(frames::echo(a, b, id, 1, true), |f| f[34] = req);
        assert_eq!(go(&mut w, &q, 0), (NEW, false), "type {req}");
        let r = edited(frames::echo(b, a, id, 1, false), |f| f[34] = rep);
        assert_eq!(go(&mut w, &r, 0), (EST, true), "type {rep}");
    }
    let router_adv = edited(frames::echo(a, b, 5, 1, true), |f| f[34] = 9);
    assert!(matches!(go(&mut w, &router_adv, 0).0, CtState::Invalid(_)));
    let sctp = |chunk: u8, sport: u16| {
        edited(frames::udp(a, b, sport, 9899, 16), |f| {
            f[23] = 132;
            f[34 + 12] = chunk;
        })
    };
    assert_eq!(
        go(&mut w, &sctp(0, 4000), 0).0,
        CtState::Invalid(InvalidReason::NoConnection),
        "DATA first"
    );
    assert_eq!(go(&mut w, &sctp(1, 4001), 0).0, NEW, "INIT");
    assert_eq!(go(&mut w, &sctp(0, 4001), 0).0, NEW, "then DATA of that association");
}

/// A mixed batch longer than one prefetch group (32): connections created and then answered
/// inside the batch, in the same group and across groups, a TCP handshake, ICMP, an ICMP
/// error, a bad checksum, a non-IP frame, two zones, packets that may not create.
fn mixed_batch() -> Vec<(Packet, u16, TrackFlags)> {
    let (a, b, c6, d6) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("2001:db8::1"), ip("2001:db8::2"));
    let commit = TrackFlags {
        commit: true,
        l3_csum_verified: false,
    };
    let probe = TrackFlags {
        commit: false,
        l3_csum_verified: false,
    };
    let mut bad = frames::udp(a, b, 7, 7, 0);
    let l3 = usize::from(bad.meta.l3_off);
    bad.data_mut()[l3 + 10] ^= 0xff;
    let arp = arp_request();
    let quoted = frames::udp(a, b, 1000, 53, 0);
    let mut v = vec![
        (frames::tcp(a, b, 40000, 80, Seg::new(SYN, 100, 0)), 0, commit),
        (frames::udp(a, b, 1000, 53, 0), 0, commit),
        (frames::udp(b, a, 53, 1000, 0), 0, commit),
        (frames::tcp(b, a, 80, 40000, Seg::new(SYN | ACK, 500, 101)), 0, commit),
        (frames::udp(a, b, 1000, 53, 0), 1, probe),
        (frames::udp(a, b, 1000, 53, 0), 1, commit),
        (frames::tcp(a, b, 40000, 80, Seg::new(ACK, 101, 501)), 0, commit),
        (frames::echo(a, b, 9, 1, true), 0, commit),
        (frames::echo(b, a, 9, 1, false), 0, commit),
        (frames::echo(b, a, 10, 1, false), 0, commit),
        (frames::icmp_error(b, a, 3, 3, &quoted), 0, commit),
        (bad, 0, commit),
        (arp, 0, commit),
        (frames::udp(c6, d6, 5, 6, 0), 0, commit),
        (frames::udp(d6, c6, 6, 5, 0), 0, commit),
    ];
    // Connections opened at the end of the first group and answered in the second.
    for i in 0..20u16 {
        v.push((frames::udp(a, b, 2000 + i, 53, 0), i % 2, commit));
    }
    for i in 0..20u16 {
        v.push((frames::udp(b, a, 53, 2000 + i, 0), i % 2, commit));
    }
    v.push((
        frames::tcp(a, b, 40000, 80, Seg::new(ACK, 101, 501).data(10)),
        0,
        commit,
    ));
    v
}

/// Fills a table with `n` answered UDP connections of their own addresses.
fn preload(w: &mut CtWorker, n: u32) {
    let g = w.pin();
    let flags = TrackFlags {
        commit: true,
        l3_csum_verified: false,
    };
    for i in 0..n {
        let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a80_0000 | i));
        let b = ip("10.255.0.1");
        for p in [frames::udp(a, b, 5000, 53, 0), frames::udp(b, a, 53, 5000, 0)] {
            w.track(&g, p.data(), &p.meta, 0, flags);
        }
    }
}

#[test]
fn a_batch_is_tracked_as_its_packets_one_by_one() {
    // A small table (tracked packet by packet) and a larger one (prefetched).
    for n in [0, 3000] {
        batch_as_one_by_one(n);
    }
}

fn batch_as_one_by_one(preloaded: u32) {
    let batch = mixed_batch();
    assert!(batch.len() > 32, "two prefetch groups");
    // One by one.
    let (ct1, mut w1, _c1) = setup(CtConfig::default());
    preload(&mut w1, preloaded);
    let g = w1.pin();
    let one: Vec<_> = batch
        .iter()
        .map(|(p, z, f)| w1.track(&g, p.data(), &p.meta, *z, *f))
        .collect();
    drop(g);
    // As a batch, plain and with NAT plans.
    for nat in [false, true] {
        let (ct2, mut w2, _c2) = setup(CtConfig::default());
        preload(&mut w2, preloaded);
        let mut pkts: Vec<Packet> = batch.iter().map(|(p, _, _)| p.clone()).collect();
        let mut got = Vec::new();
        let g = w2.pin();
        let args = |i: usize, p: &Packet| {
            assert_eq!(p.data(), batch[i].0.data());
            (batch[i].1, batch[i].2)
        };
        if nat {
            w2.track_nat_each(&g, &mut pkts, args, |i, _, r, plan| {
                assert_eq!(plan, None, "no connection is translated");
                got.push((i, r));
            });
        } else {
            w2.track_each(&g, &mut pkts, args, |i, _, r| got.push((i, r)));
        }
        drop(g);
        let idx: Vec<_> = got.iter().map(|x| x.0).collect();
        assert_eq!(idx, (0..batch.len()).collect::<Vec<_>>(), "in order, each once");
        let res: Vec<_> = got.iter().map(|x| x.1).collect();
        assert_eq!(res, one);
        assert_eq!(ct2.len(), ct1.len());
        // Whether a worker's slab was prepared in time depends on the preparer thread.
        let tracked = |ct: &Conntrack| freeway_conntrack::CtStats {
            slab_sync_maps: 0,
            ..ct.stats()
        };
        assert_eq!(tracked(&ct2), tracked(&ct1));
        assert_eq!(ct2.state_counts(), ct1.state_counts());
    }
    // The batch saw its own connections: answers established, the error related.
    assert_eq!(one[2].state, EST);
    assert_eq!(one[3].state, EST);
    assert_eq!(one[8].state, EST);
    assert_eq!(one[10].state, CtState::Related);
    assert!(one[35..55].iter().all(|r| r.state == EST && r.reply));
}

/// An ARP request, parsed: a packet conntrack does not track.
fn arp_request() -> Packet {
    let mut arp = Packet::from_frame(&freeway_packet::build::build_arp_request(
        [2, 0, 0, 0, 0, 1],
        None,
        "10.0.0.1".parse().unwrap(),
        "10.0.0.2".parse().unwrap(),
    ))
    .unwrap();
    freeway_packet::parse(&mut arp).unwrap();
    arp
}
