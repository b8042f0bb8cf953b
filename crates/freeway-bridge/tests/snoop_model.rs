//! The bridge's LAN protections checked against a reference model with property tests: a
//! random sequence of frames (IGMP and MLD reports, leaves and queries, multicast data, link-
//! local groups, broadcasts, STP BPDUs) and control changes (port flags set while forwarding,
//! ports enabled again after their BPDU guard, time passing, the writer's rounds), and the
//! stage's decisions equal the model's: snooping (members, router ports, queriers, ageing,
//! leaves, fast leave, the table's bound), the ports' flags and isolation, BPDU guard and
//! storm control.

use std::collections::BTreeMap;
use std::net::IpAddr;

use freeway_bridge::fdb::{new_seeded, FdbConfig};
use freeway_bridge::mdb::{self, McastRouter, MdbConfig};
use freeway_bridge::{
    Bridge, BridgeWorker, FdbWriter, Learning, Padded, PortFlags, PortVlan, PortVlanConfig, StormControl,
};
use freeway_packet::{parse, Batch, Packet};
use proptest::prelude::*;

mod common;
use common::Collect;

/// Ports 0-2: access VLAN 1; 3: trunk of VLANs 1 and 2 (tagged); 4: access VLAN 2.
fn ports() -> Vec<PortVlan> {
    let trunk = PortVlanConfig::Trunk {
        vlans: vec!["1-2".into()],
        native: None,
    }
    .build()
    .unwrap();
    vec![
        PortVlan::Access(1),
        PortVlan::Access(1),
        PortVlan::Access(1),
        trunk,
        PortVlan::Access(2),
    ]
}

/// Per port: `multicast_router` and fast leave.
const ROUTER: [(McastRouter, bool); 5] = [
    (McastRouter::Learn, false),
    (McastRouter::Learn, true),
    (McastRouter::Disabled, false),
    (McastRouter::Permanent, false),
    (McastRouter::Learn, false),
];
/// Port 0 takes in at most this many multicast frames a second, port 1 this many broadcasts.
const STORM_MCAST: u32 = 20;
const STORM_BCAST: u32 = 5;
const HASH_MAX: usize = 4;
const MI: u64 = 1_000;
const QI: u64 = 800;
const LMI: u64 = 100;
const LMC: u32 = 2;

fn mdb_config() -> MdbConfig {
    MdbConfig {
        multicast_hash_max: HASH_MAX,
        multicast_membership_interval_ms: MI,
        multicast_querier_interval_ms: QI,
        multicast_last_member_interval_ms: LMI,
        multicast_last_member_count: LMC,
        ..Default::default()
    }
}

fn groups() -> [IpAddr; 3] {
    [
        "239.1.1.1".parse().unwrap(),
        "239.1.1.2".parse().unwrap(),
        "ff0e::101".parse().unwrap(),
    ]
}

/// What a frame says, for building it and for the model.
#[derive(Clone, Copy, Debug)]
enum Msg {
    /// A report for group `g`, as IGMPv2/MLDv1 (`v3` false) or an IGMPv3/MLDv2 TO_EX record.
    Report {
        g: usize,
        v3: bool,
    },
    /// A leave: IGMPv2 leave/MLDv1 done, or a TO_IN {} record.
    Leave {
        g: usize,
        v3: bool,
    },
    /// A general query, IPv4 or IPv6, from a querier (`zero`: from 0.0.0.0/::, no querier).
    Query {
        v6: bool,
        zero: bool,
    },
    /// UDP to a group.
    Data {
        g: usize,
    },
    /// UDP to 224.0.0.251 (never snooped).
    LinkLocal,
    Broadcast,
    Bpdu,
}

fn eth(dst: [u8; 6], port: u8, tag: Option<u16>, ethertype: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend([0x02, 0, 0, 0, 0, 0x10 + port]);
    if let Some(t) = tag {
        f.extend([0x81, 0x00]);
        f.extend(t.to_be_bytes());
    }
    f.extend(ethertype.to_be_bytes());
    f
}

fn ip4(dst: [u8; 4], src: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let len = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 1, proto, 0, 0];
    h[2..4].copy_from_slice(&len.to_be_bytes());
    h.extend(src);
    h.extend(dst);
    h.extend(payload);
    h
}

/// An IPv6 packet; ICMPv6 (MLD) goes behind a hop-by-hop header with a router alert, as
/// hosts send it.
fn ip6(dst: [u8; 16], zero_src: bool, nh: u8, payload: &[u8]) -> Vec<u8> {
    let hbh = nh == 58;
    let plen = (payload.len() + if hbh { 8 } else { 0 }) as u16;
    let mut h = vec![0x60, 0, 0, 0];
    h.extend(plen.to_be_bytes());
    h.extend([if hbh { 0 } else { nh }, 1]);
    let mut src = [0u8; 16];
    if !zero_src {
        src[..2].copy_from_slice(&[0xfe, 0x80]);
        src[15] = 1;
    }
    h.extend(src);
    h.extend(dst);
    if hbh {
        h.extend([58, 0, 5, 2, 0, 0, 1, 0]);
    }
    h.extend(payload);
    h
}

fn mac_of(g: IpAddr) -> [u8; 6] {
    match g {
        IpAddr::V4(a) => {
            let o = a.octets();
            [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            [0x33, 0x33, o[12], o[13], o[14], o[15]]
        }
    }
}

fn frame(msg: Msg, port: u8, tag: Option<u16>, seq: u8) -> Packet {
    let gs = groups();
    let v4 = |g: IpAddr| match g {
        IpAddr::V4(a) => Some(a.octets()),
        _ => None,
    };
    let v6 = |g: IpAddr| match g {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
    };
    let host = [10, 0, 0, 1 + port];
    let to = |g: IpAddr, f: Vec<u8>| {
        let mut e = eth(mac_of(g), port, tag, if g.is_ipv4() { 0x0800 } else { 0x86dd });
        e.extend(f);
        e
    };
    let bytes = match msg {
        Msg::Report { g, v3 } | Msg::Leave { g, v3 } => {
            let join = matches!(msg, Msg::Report { .. });
            let grp = gs[g];
            match (v4(grp), v3) {
                (Some(a), false) => {
                    let (t, dst) = if join {
                        (0x16, grp)
                    } else {
                        (0x17, "224.0.0.2".parse().unwrap())
                    };
                    let mut m = vec![t, 0, 0, 0];
                    m.extend(a);
                    to(dst, ip4(v4(dst).unwrap(), host, 2, &m))
                }
                (Some(a), true) => {
                    let mut m = vec![0x22, 0, 0, 0, 0, 0, 0, 1, if join { 4 } else { 3 }, 0, 0, 0];
                    m.extend(a);
                    let dst: IpAddr = "224.0.0.22".parse().unwrap();
                    to(dst, ip4(v4(dst).unwrap(), host, 2, &m))
                }
                (None, false) => {
                    let (t, dst) = if join {
                        (131, grp)
                    } else {
                        (132, "ff02::2".parse().unwrap())
                    };
                    let mut m = vec![t, 0, 0, 0, 0, 0, 0, 0];
                    m.extend(v6(grp));
                    to(dst, ip6(v6(dst), false, 58, &m))
                }
                (None, true) => {
                    let mut m = vec![143, 0, 0, 0, 0, 0, 0, 1, if join { 4 } else { 3 }, 0, 0, 0];
                    m.extend(v6(grp));
                    let dst: IpAddr = "ff02::16".parse().unwrap();
                    to(dst, ip6(v6(dst), false, 58, &m))
                }
            }
        }
        Msg::Query { v6: false, zero } => {
            let dst: IpAddr = "224.0.0.1".parse().unwrap();
            let src = if zero { [0; 4] } else { host };
            to(dst, ip4(v4(dst).unwrap(), src, 2, &[0x11, 100, 0, 0, 0, 0, 0, 0]))
        }
        Msg::Query { v6: true, zero } => {
            let dst: IpAddr = "ff02::1".parse().unwrap();
            let mut m = vec![130, 0, 0, 0, 0, 100, 0, 0];
            m.extend([0; 16]);
            to(dst, ip6(v6(dst), zero, 58, &m))
        }
        Msg::Data { g } => {
            let grp = gs[g];
            let udp = [0x13, 0x88, 0x13, 0x88, 0, 9, 0, 0, seq];
            match v4(grp) {
                Some(a) => to(grp, ip4(a, host, 17, &udp)),
                None => to(grp, ip6(v6(grp), false, 17, &udp)),
            }
        }
        Msg::LinkLocal => {
            let dst: IpAddr = "224.0.0.251".parse().unwrap();
            to(
                dst,
                ip4(v4(dst).unwrap(), host, 17, &[0x14, 0xe9, 0x14, 0xe9, 0, 9, 0, 0, seq]),
            )
        }
        Msg::Broadcast => {
            let mut e = eth([0xff; 6], port, tag, 0x0806);
            e.extend([seq; 28]);
            e
        }
        Msg::Bpdu => {
            let mut e = eth([0x01, 0x80, 0xc2, 0, 0, 0], port, tag, 38);
            e.extend([0x42, 0x42, 0x03, 0, 0, 0, 0, seq]);
            e
        }
    };
    let mut b = bytes;
    b.resize(b.len().max(60), 0);
    let mut p = Packet::from_frame(&b).unwrap();
    parse(&mut p).unwrap();
    p.meta.in_port = u16::from(port);
    p
}

/// What left a port: (port, the frame's VLAN tag).
type Sent = (u16, Option<u16>);

/// The reference: what the documentation says, written plainly.
#[derive(Default)]
struct Model {
    flags: [PortFlags; 5],
    disabled: [bool; 5],
    /// (VLAN, group) → port → expiry.
    groups: BTreeMap<(u16, usize), BTreeMap<u16, u64>>,
    /// (VLAN, MLD, port) → expiry.
    routers: BTreeMap<(u16, bool, u16), u64>,
    /// (VLAN, MLD) → expiry.
    queriers: BTreeMap<(u16, bool), u64>,
    /// Storm buckets (thousandths of a frame, last refill), made at first use.
    storm: BTreeMap<(u16, bool), (u64, u64)>,
}

impl Model {
    fn storm_ok(&mut self, port: u16, bcast: bool, now: u64) -> bool {
        let rate = match (port, bcast) {
            (0, false) => STORM_MCAST,
            (1, true) => STORM_BCAST,
            _ => return true,
        };
        let cap = u64::from(rate) * 1000;
        let (milli, last) = self.storm.entry((port, bcast)).or_insert((0, 0));
        if now > *last {
            *milli = (*milli + (now - *last) * u64::from(rate)).min(cap);
            *last = now;
        }
        if *milli >= 1000 {
            *milli -= 1000;
            true
        } else {
            false
        }
    }

    fn frame(&mut self, ports: &[PortVlan], msg: Msg, inp: u16, tag: Option<u16>, now: u64) -> Vec<Sent> {
        if self.disabled[inp as usize] {
            return vec![];
        }
        let Some(vid) = ports[inp as usize].classify(tag) else {
            return vec![];
        };
        if let Msg::Bpdu = msg {
            if self.flags[inp as usize].bpdu_guard {
                self.disabled[inp as usize] = true;
            }
            return vec![];
        }
        let bcast = matches!(msg, Msg::Broadcast);
        if !self.storm_ok(inp, bcast, now) {
            return vec![];
        }
        match msg {
            Msg::Report { g, .. } => {
                let full = self.groups.len() >= HASH_MAX;
                match self.groups.get_mut(&(vid, g)) {
                    Some(m) => {
                        m.insert(inp, now + MI);
                    }
                    None if full => {}
                    None => {
                        self.groups.insert((vid, g), BTreeMap::from([(inp, now + MI)]));
                    }
                }
            }
            Msg::Leave { g, .. } => {
                if let Some(m) = self.groups.get_mut(&(vid, g)) {
                    if ROUTER[inp as usize].1 {
                        m.remove(&inp);
                        if m.is_empty() {
                            self.groups.remove(&(vid, g));
                        }
                    } else if let Some(e) = m.get_mut(&inp) {
                        *e = (*e).min(now + u64::from(LMC) * LMI);
                    }
                }
            }
            Msg::Query { zero: false, v6 } => {
                self.queriers.insert((vid, v6), now + QI);
                if ROUTER[inp as usize].0 == McastRouter::Learn {
                    self.routers.insert((vid, v6, inp), now + QI);
                }
            }
            _ => {}
        }
        // IGMP and MLD apart: the family of the message's group.
        let v6 = match msg {
            Msg::Report { g, .. } | Msg::Leave { g, .. } | Msg::Data { g } => groups()[g].is_ipv6(),
            _ => false,
        };
        let querier = self.queriers.contains_key(&(vid, v6));
        let router =
            |p: u16| ROUTER[p as usize].0 == McastRouter::Permanent || self.routers.contains_key(&(vid, v6, p));
        let snooped: Option<Vec<u16>> = match msg {
            Msg::Report { .. } | Msg::Leave { .. } if querier => Some((0..5).filter(|p| router(*p)).collect()),
            Msg::Data { g } if querier => self
                .groups
                .get(&(vid, g))
                .map(|m| (0..5).filter(|p| m.contains_key(p) || router(*p)).collect()),
            _ => None,
        };
        let iso = self.flags[inp as usize].isolated;
        (0..5u16)
            .filter(|&p| p != inp && ports[p as usize].is_member(vid) && !self.disabled[p as usize])
            .filter(|&p| !(iso && self.flags[p as usize].isolated))
            .filter(|&p| match &snooped {
                Some(s) => s.contains(&p),
                None if bcast => self.flags[p as usize].bcast_flood,
                None => self.flags[p as usize].mcast_flood,
            })
            .map(|p| (p, ports[p as usize].egress_tagged(vid).then_some(vid)))
            .collect()
    }

    /// The writer's round at `now` (at least the ageing interval after the previous one).
    fn service(&mut self, now: u64) {
        self.groups.retain(|_, m| {
            m.retain(|_, e| *e > now);
            !m.is_empty()
        });
        self.routers.retain(|_, e| *e > now);
        self.queriers.retain(|_, e| *e > now);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Frame { msg: Msg, port: u16, vlan2: bool },
    SetFlags { port: u16, bits: u8 },
    Enable { port: u16 },
    Advance(u64),
    Service,
}

fn msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        4 => (0usize..3, any::<bool>()).prop_map(|(g, v3)| Msg::Report { g, v3 }),
        2 => (0usize..3, any::<bool>()).prop_map(|(g, v3)| Msg::Leave { g, v3 }),
        2 => (any::<bool>(), prop::bool::weighted(0.2)).prop_map(|(v6, zero)| Msg::Query { v6, zero }),
        6 => (0usize..3).prop_map(|g| Msg::Data { g }),
        1 => Just(Msg::LinkLocal),
        1 => Just(Msg::Broadcast),
        1 => Just(Msg::Bpdu),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (msg(), 0u16..5, any::<bool>()).prop_map(|(msg, port, vlan2)| Op::Frame { msg, port, vlan2 }),
        1 => (0u16..5, any::<u8>()).prop_map(|(port, bits)| Op::SetFlags { port, bits }),
        1 => (0u16..5).prop_map(|port| Op::Enable { port }),
        3 => prop_oneof![0u64..60, 200u64..1_200].prop_map(Op::Advance),
        2 => Just(Op::Service),
    ]
}

fn setup() -> (FdbWriter<Padded>, Bridge<Padded>) {
    let (fdb, mut w) = new_seeded::<Padded>(FdbConfig::default(), 9);
    let (mdb, mut mw) = mdb::new(mdb_config(), 9);
    for (p, (r, fast)) in ROUTER.iter().enumerate() {
        mw.set_port(p as u16, *r, *fast);
    }
    mw.publish();
    w.attach_mdb(mw);
    let mut bridge = Bridge::new(fdb, ports());
    bridge.set_mdb(mdb);
    let storm = |broadcast, multicast| StormControl {
        broadcast,
        multicast,
        unknown_unicast: 0,
    };
    bridge.set_storm_control(0, storm(0, STORM_MCAST)).unwrap();
    bridge.set_storm_control(1, storm(STORM_BCAST, 0)).unwrap();
    (w, bridge)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn snooping_flags_and_storms_match_the_model(ops in proptest::collection::vec(op(), 1..150)) {
        let (mut w, bridge) = setup();
        let ports = ports();
        let mut bw = BridgeWorker::default();
        let mut model = Model::default();
        let mut now = 1_000u64;
        for (i, o) in ops.into_iter().enumerate() {
            match o {
                Op::Frame { msg, port, vlan2 } => {
                    let tag = (port == 3).then_some(if vlan2 { 2 } else { 1 });
                    let mut b = Batch::new();
                    b.push(frame(msg, port as u8, tag, i as u8)).unwrap();
                    let mut em = Collect::default();
                    bridge.process(&mut bw, &mut b, now, &mut em, &mut Learning::Inline(&mut w));
                    let mut got: Vec<Sent> = em.out.into_iter().map(|o| (o.0, o.1)).collect();
                    let mut want = model.frame(&ports, msg, port, tag, now);
                    got.sort();
                    want.sort();
                    prop_assert_eq!(got, want, "op {}: {:?} from port {} at {}", i, msg, port, now);
                }
                Op::SetFlags { port, bits } => {
                    let f = PortFlags::from_bits(bits);
                    bridge.set_port_flags(port, f).unwrap();
                    prop_assert_eq!(bridge.port_flags(port), f);
                    model.flags[port as usize] = f;
                }
                Op::Enable { port } => {
                    let was = bridge.enable_port(port).unwrap();
                    prop_assert_eq!(was, model.disabled[port as usize]);
                    model.disabled[port as usize] = false;
                }
                Op::Advance(ms) => now += ms,
                Op::Service => {
                    now += mdb::AGE_INTERVAL_MS;
                    w.service(now);
                    model.service(now);
                }
            }
            prop_assert!(w.mdb_mut().unwrap().len() <= HASH_MAX);
        }
    }
}

/// The plain story: without a querier everything floods; once a querier speaks, a stream
/// reaches only its members and the router ports, and reports reach only the router ports.
#[test]
fn a_stream_reaches_members_and_router_ports_once_a_querier_speaks() {
    let (mut w, bridge) = setup();
    let mut bw = BridgeWorker::default();
    let run = |bw: &mut BridgeWorker, w: &mut FdbWriter<Padded>, msg, port: u8, now| {
        let mut b = Batch::new();
        b.push(frame(msg, port, (port == 3).then_some(1), 0)).unwrap();
        let mut em = Collect::default();
        bridge.process(bw, &mut b, now, &mut em, &mut Learning::Inline(w));
        let mut v: Vec<u16> = em.out.iter().map(|o| o.0).collect();
        v.sort();
        v
    };
    let data = Msg::Data { g: 0 };
    let q = Msg::Query { v6: false, zero: false };
    let (r0, r1) = (Msg::Report { g: 0, v3: false }, Msg::Report { g: 1, v3: true });
    for (msg, port, want, why) in [
        (r0, 1, &[0, 2, 3][..], "no querier: a report floods"),
        (data, 0, &[1, 2, 3], "no querier: flooded"),
        (q, 0, &[1, 2, 3], "a query from port 0 (a router port now) floods"),
        (data, 2, &[0, 1, 3], "member 1, routers 0 and 3"),
        (r1, 2, &[0, 3], "reports go to router ports"),
        (Msg::Data { g: 1 }, 0, &[2, 3], "member 2, router 3"),
        (Msg::LinkLocal, 0, &[1, 2, 3], "224.0.0.x floods"),
        (Msg::Data { g: 2 }, 0, &[1, 2, 3], "an unknown group floods"),
    ] {
        assert_eq!(run(&mut bw, &mut w, msg, port, 1_000), want, "{why}");
    }
    assert!(bw.counters.mcast_snooped.get() >= 3);
    assert!(bw.counters.mdb_requests.get() >= 3);
    // Fast leave on port 1: its group is gone at once.
    assert_eq!(
        run(&mut bw, &mut w, Msg::Leave { g: 0, v3: false }, 1, 1_001),
        vec![0, 3]
    );
    assert_eq!(
        run(&mut bw, &mut w, data, 2, 1_001),
        vec![0, 1, 3],
        "unknown again: flooded"
    );
}

/// Through the queue (live runs): events reach the writer only when it services, and a full
/// queue is counted, not waited on.
#[test]
fn queued_events_wait_for_the_writer_and_a_full_queue_is_counted() {
    let (fdb, mut w) = new_seeded::<Padded>(FdbConfig::default(), 9);
    let (mdb, mw) = mdb::new(
        MdbConfig {
            multicast_queue: 2,
            ..mdb_config()
        },
        9,
    );
    w.attach_mdb(mw);
    let mut bridge = Bridge::new(fdb, ports());
    bridge.set_mdb(mdb.clone());
    let mut bw = BridgeWorker::default();
    let mut b = Batch::new();
    for g in 0..3 {
        b.push(frame(Msg::Report { g, v3: false }, 1, None, 0)).unwrap();
    }
    bridge.process(&mut bw, &mut b, 5, &mut Collect::default(), &mut Learning::Queue);
    assert_eq!(bw.counters.mdb_requests.get(), 2);
    assert_eq!(bw.counters.mdb_queue_full.get(), 1);
    assert!(mdb.with_view(|v| v.entries().is_empty()));
    w.service(5);
    assert_eq!(mdb.stats().reports.get(), 2);
    assert_eq!(mdb.with_view(|v| v.entries().len()), 2);
}
