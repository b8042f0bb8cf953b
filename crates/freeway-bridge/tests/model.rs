//! The bridge checked against a simple reference model with property tests: learning, MAC
//! moves, ageing, static entries, the learning limit, VLAN filtering and isolation, flooding,
//! the IEEE 802.1D link-local groups (never flooded unless a port's group_fwd_mask says), and
//! the ports' flags (learning, flood, mcast_flood, bcast_flood, isolated).

use std::collections::{BTreeMap, HashMap};

use freeway_bridge::fdb::{new_seeded, FdbConfig};
use freeway_bridge::{
    Bridge, BridgeWorker, Fdb, FdbWriter, Learning, Mac, Padded, PortFlags, PortVlan, PortVlanConfig, StormControl,
};
use freeway_packet::{Batch, Packet, NO_VLAN};
use proptest::prelude::*;

mod common;
use common::{untag, Collect, Out};

const LEARN_LIMIT: usize = 5;
const STATIC_LIMIT: usize = 3;
const AGEING: u64 = 100_000;

fn ports() -> Vec<PortVlan> {
    let trunk = |v: &[&str], native: Option<u16>| {
        PortVlanConfig::Trunk {
            vlans: v.iter().map(|s| s.to_string()).collect(),
            native,
        }
        .build()
        .unwrap()
    };
    vec![
        PortVlan::Access(1),
        PortVlan::Access(1),
        PortVlan::Access(2),
        trunk(&["1", "2"], None),
        trunk(&["1-3"], Some(1)),
    ]
}

/// Per port: the link-local groups it forwards (port 3: 802.1X, port 4: LLDP).
const GROUP_FWD: [u16; 5] = [0, 0, 0, 1 << 3, 1 << 0xe];

fn mac(i: u8) -> Mac {
    match i {
        6 => Mac([0x01, 0x00, 0x5e, 0, 0, 1]),
        7 => Mac::BROADCAST,
        8 => Mac([0x01, 0x80, 0xc2, 0, 0, 0]),     // STP BPDU
        9 => Mac([0x01, 0x80, 0xc2, 0, 0, 0x0e]),  // LLDP
        10 => Mac([0x01, 0x80, 0xc2, 0, 0, 0x03]), // 802.1X
        11 => Mac([0x01, 0x80, 0xc2, 0, 0, 0x10]), // just past the reserved range: flooded
        _ => Mac([0x02, 0, 0, 0, 0, i]),
    }
}

fn frame(src: Mac, dst: Mac, tag: Option<u16>, payload: u8) -> Packet {
    let mut f = Vec::new();
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    if let Some(t) = tag {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&(0x2000 | t).to_be_bytes()); // PCP 1
    }
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    f.extend(std::iter::repeat_n(payload, 46));
    let mut p = Packet::from_frame(&f).unwrap();
    p.meta.vlan = tag.unwrap_or(NO_VLAN);
    p.meta.vlan_depth = tag.is_some() as u8;
    p
}

/// A bridge over [`ports`] with a fresh FDB, a worker context and a collecting emitter.
fn setup() -> (Fdb<Padded>, FdbWriter<Padded>, Bridge<Padded>, BridgeWorker, Collect) {
    setup_with(FdbConfig::default(), 1)
}

/// [`setup`] with the FDB configured by `cfg`, its hash seeded with `seed`.
fn setup_with(cfg: FdbConfig, seed: u64) -> (Fdb<Padded>, FdbWriter<Padded>, Bridge<Padded>, BridgeWorker, Collect) {
    let (fdb, w) = new_seeded::<Padded>(cfg, seed);
    let mut bridge = Bridge::new(fdb.clone(), ports());
    for (port, mask) in GROUP_FWD.iter().enumerate() {
        bridge.set_group_fwd_mask(port as u16, *mask).unwrap();
    }
    (fdb, w, bridge, BridgeWorker::default(), Collect::default())
}

/// Adds `p` to `b` as received on `port`.
fn push(b: &mut Batch, port: u16, mut p: Packet) {
    p.meta.in_port = port;
    b.push(p).unwrap();
}

impl Model {
    /// An empty model; with `with_flags`, the ports of it and of `bridge` get [`flag_set`].
    fn with_flags(bridge: &Bridge<Padded>, with_flags: bool) -> Model {
        let mut model = Model::default();
        if with_flags {
            model.flags = flag_set();
            for (p, f) in model.flags.iter().enumerate() {
                bridge.set_port_flags(p as u16, *f).unwrap();
            }
        }
        model
    }
}

/// Flags for the ports in the flags property test: 0 and 1 isolated (from each other, not
/// from the rest), 2 does not learn, 3 takes no unknown unicast, 4 no multicast or broadcast.
fn flag_set() -> Vec<PortFlags> {
    let d = PortFlags::default();
    vec![
        PortFlags { isolated: true, ..d },
        PortFlags { isolated: true, ..d },
        PortFlags { learning: false, ..d },
        PortFlags { flood: false, ..d },
        PortFlags {
            mcast_flood: false,
            bcast_flood: false,
            ..d
        },
    ]
}

#[derive(Default)]
struct Model {
    /// Per port (empty: every port has the default flags).
    flags: Vec<PortFlags>,
    fdb: HashMap<(Mac, u16), (u16, bool, u64)>,
    learned: usize,
    statics: usize,
    last_age: Option<u64>,
}

impl Model {
    #[allow(clippy::too_many_arguments)]
    fn frame(
        &mut self,
        ports: &[PortVlan],
        src: Mac,
        dst: Mac,
        inp: u16,
        tag: Option<u16>,
        now: u64,
        body: &[u8],
    ) -> Vec<Out> {
        if src.is_multicast() {
            return vec![];
        }
        let Some(vid) = ports[inp as usize].classify(tag) else {
            return vec![];
        };
        let flags = |p: u16| self.flags.get(p as usize).copied().unwrap_or_default();
        let (learns, isolated) = (flags(inp).learning, flags(inp).isolated);
        match self.fdb.get_mut(&(src, vid)) {
            _ if !learns => {}
            Some(e) => {
                if !e.1 {
                    e.0 = inp;
                }
                e.2 = now;
            }
            None => {
                if self.learned < LEARN_LIMIT {
                    self.fdb.insert((src, vid), (inp, false, now));
                    self.learned += 1;
                }
            }
        }
        let [a, b, c, d, e, low] = dst.0;
        if [a, b, c, d, e] == [0x01, 0x80, 0xc2, 0, 0] && low < 16 && GROUP_FWD[inp as usize] & (1 << low) == 0 {
            return vec![];
        }
        let flags = |p: u16| self.flags.get(p as usize).copied().unwrap_or_default();
        let floods = |p: u16| match dst {
            Mac::BROADCAST => flags(p).bcast_flood,
            d if d.is_multicast() => flags(p).mcast_flood,
            _ => flags(p).flood,
        };
        let targets: Vec<u16> = match (dst.is_multicast(), self.fdb.get(&(dst, vid))) {
            (false, Some(e)) if e.0 == inp => vec![],
            (false, Some(e)) if isolated && flags(e.0).isolated => vec![],
            // Egress filtering: an entry on a port outside the VLAN forwards nothing.
            (false, Some(e)) if !ports[e.0 as usize].is_member(vid) => vec![],
            (false, Some(e)) => vec![e.0],
            _ => (0..ports.len() as u16)
                .filter(|p| *p != inp && ports[*p as usize].is_member(vid))
                .filter(|p| floods(*p) && !(isolated && flags(*p).isolated))
                .collect(),
        };
        targets
            .into_iter()
            .map(|p| {
                let t = ports[p as usize].egress_tagged(vid).then_some(vid);
                (p, t, body.to_vec())
            })
            .collect()
    }

    fn add_static(&mut self, m: Mac, vid: u16, port: u16) -> bool {
        let existing = self.fdb.get(&(m, vid)).map(|e| e.1);
        if existing != Some(true) && self.statics >= STATIC_LIMIT {
            return false;
        }
        match existing {
            Some(true) => self.statics -= 1,
            Some(false) => self.learned -= 1,
            None => {}
        }
        self.fdb.insert((m, vid), (port, true, 0));
        self.statics += 1;
        true
    }

    fn delete(&mut self, m: Mac, vid: u16) -> bool {
        match self.fdb.remove(&(m, vid)) {
            Some((_, true, _)) => {
                self.statics -= 1;
                true
            }
            Some(_) => {
                self.learned -= 1;
                true
            }
            None => false,
        }
    }

    fn age(&mut self, now: u64) {
        if self.last_age.is_some_and(|l| now < l + 10) {
            return;
        }
        self.last_age = Some(now);
        let before = self.fdb.len();
        self.fdb.retain(|_, e| e.1 || now.saturating_sub(e.2) < AGEING);
        self.learned -= before - self.fdb.len();
    }
}

#[derive(Clone, Debug)]
enum Op {
    Frame {
        src: u8,
        dst: u8,
        port: u16,
        tag: Option<u16>,
    },
    Static {
        mac: u8,
        vlan: u16,
        port: u16,
    },
    Delete {
        mac: u8,
        vlan: u16,
    },
    Advance(u64),
    Age,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..8, 0u8..12, 0u16..5, prop_oneof![Just(None), Just(Some(0)), (1u16..4).prop_map(Some), Just(Some(7))])
            .prop_map(|(src, dst, port, tag)| Op::Frame { src, dst, port, tag }),
        1 => (0u8..6, 1u16..4, 0u16..5).prop_map(|(mac, vlan, port)| Op::Static { mac, vlan, port }),
        1 => (0u8..6, 1u16..4).prop_map(|(mac, vlan)| Op::Delete { mac, vlan }),
        2 => prop_oneof![0u64..50, 40_000u64..120_000].prop_map(Op::Advance),
        2 => Just(Op::Age),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn bridge_matches_reference_model(ops in proptest::collection::vec(op(), 1..120), with_flags in any::<bool>()) {
        let cfg = FdbConfig {
            learn_limit: LEARN_LIMIT,
            static_limit: STATIC_LIMIT,
            ageing_ms: AGEING,
            age_chunk_buckets: 1 << 20,
            ..Default::default()
        };
        let (fdb, mut writer, bridge, mut bw, mut em) = setup_with(cfg, 3);
        let ports = ports();
        let mut model = Model::with_flags(&bridge, with_flags);
        let mut now = 1u64;
        for (i, o) in ops.into_iter().enumerate() {
            match o {
                Op::Frame { src, dst, port, tag } => {
                    let p = frame(mac(src), mac(dst), tag, i as u8);
                    let body = untag(p.data()).1;
                    let mut b = Batch::new();
                    let mut p = p;
                    p.meta.in_port = port;
                    b.push(p).unwrap();
                    em.out.clear();
                    bridge.process(&mut bw, &mut b, now, &mut em, &mut Learning::Inline(&mut writer));
                    let mut got = em.out.clone();
                    let mut want = model.frame(&ports, mac(src), mac(dst), port, tag, now, &body);
                    got.sort();
                    want.sort();
                    prop_assert_eq!(got, want, "op {}: frame {:?}", i, (src, dst, port, tag));
                }
                Op::Static { mac: m, vlan, port } => {
                    let ok = writer.add_static(mac(m), vlan, port, now).is_ok();
                    prop_assert_eq!(ok, model.add_static(mac(m), vlan, port));
                }
                Op::Delete { mac: m, vlan } => {
                    prop_assert_eq!(writer.delete(mac(m), vlan), model.delete(mac(m), vlan));
                }
                Op::Advance(ms) => now += ms,
                Op::Age => {
                    writer.age(now);
                    model.age(now);
                }
            }
            // The tables agree entry by entry.
            let got: BTreeMap<(Mac, u16), (u16, bool)> =
                fdb.entries(now).into_iter().map(|e| ((e.mac, e.vlan), (e.port, e.is_static))).collect();
            let want: BTreeMap<(Mac, u16), (u16, bool)> =
                model.fdb.iter().map(|(k, v)| (*k, (v.0, v.1))).collect();
            prop_assert_eq!(got, want);
            prop_assert!(writer.learned_len() <= LEARN_LIMIT);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Frames decided together in one batch (the stage reuses its lookups and verdicts from
    /// frame to frame) fare as the reference model says they fare one at a time: stations
    /// that move, are learned or repeat within a batch included.
    #[test]
    fn batched_frames_match_the_model_frame_by_frame(
        batches in proptest::collection::vec(proptest::collection::vec(op(), 1..24), 1..20),
        with_flags in any::<bool>(),
    ) {
        let cfg = FdbConfig { learn_limit: LEARN_LIMIT, static_limit: STATIC_LIMIT, ..Default::default() };
        let (fdb, mut writer, bridge, mut bw, mut em) = setup_with(cfg, 5);
        let ports = ports();
        let mut model = Model::with_flags(&bridge, with_flags);
        for (now, ops) in (1u64..).zip(batches) {
            let mut b = Batch::new();
            let mut want = Vec::new();
            for (i, o) in ops.into_iter().enumerate() {
                // Frames only: the table changes only through them within a batch.
                let Op::Frame { src, dst, port, tag } = o else { continue };
                let p = frame(mac(src), mac(dst), tag, i as u8);
                want.extend(model.frame(&ports, mac(src), mac(dst), port, tag, now, &untag(p.data()).1));
                push(&mut b, port, p);
            }
            em.out.clear();
            bridge.process(&mut bw, &mut b, now, &mut em, &mut Learning::Inline(&mut writer));
            let mut got = em.out.clone();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want, "batch at {}", now);
            let got: BTreeMap<(Mac, u16), u16> =
                fdb.entries(now).into_iter().map(|e| ((e.mac, e.vlan), e.port)).collect();
            let want: BTreeMap<(Mac, u16), u16> = model.fdb.iter().map(|(k, v)| (*k, v.0)).collect();
            prop_assert_eq!(got, want);
        }
    }
}

#[test]
fn vlans_are_isolated() {
    let (_fdb, mut w, bridge, mut bw, mut em) = setup();
    // Host 1 in VLAN 2 (port 2) broadcasts: only VLAN 2 members (trunks 3 and 4) see it, tagged.
    let mut b = Batch::new();
    push(&mut b, 2, frame(mac(1), Mac::BROADCAST, None, 0));
    bridge.process(&mut bw, &mut b, 1, &mut em, &mut Learning::Inline(&mut w));
    let mut ports_seen: Vec<(u16, Option<u16>)> = em.out.iter().map(|o| (o.0, o.1)).collect();
    ports_seen.sort();
    assert_eq!(ports_seen, vec![(3, Some(2)), (4, Some(2))]);
    // The same MAC in VLAN 1 is a different entry: a frame to it from VLAN 1 is flooded.
    em.out.clear();
    push(&mut b, 0, frame(mac(2), mac(1), None, 0));
    bridge.process(&mut bw, &mut b, 2, &mut em, &mut Learning::Inline(&mut w));
    let mut seen: Vec<u16> = em.out.iter().map(|o| o.0).collect();
    seen.sort();
    assert_eq!(seen, vec![1, 3, 4], "unknown unicast floods VLAN 1 only");
    assert_eq!(bw.counters.unknown_unicast.get(), 1);
}

#[test]
fn queued_learning_reaches_the_table_through_the_writer() {
    let (fdb, mut w, bridge, mut bw, mut em) = setup();
    let mut b = Batch::new();
    for _ in 0..10 {
        push(&mut b, 0, frame(mac(1), mac(2), None, 0));
    }
    bridge.process(&mut bw, &mut b, 1, &mut em, &mut Learning::Queue);
    // Asked once, not once per frame.
    assert_eq!(bw.counters.learn_requests.get(), 1);
    assert!(fdb.is_empty());
    assert_eq!(w.drain_learn_queue(1, 100), 1);
    assert_eq!(fdb.lookup(mac(1), 1, &fdb.pin()).map(|n| n.port()), Some(0));
    // Now a reply to it is forwarded, not flooded.
    em.out.clear();
    push(&mut b, 1, frame(mac(2), mac(1), None, 0));
    bridge.process(&mut bw, &mut b, 2, &mut em, &mut Learning::Queue);
    assert_eq!(em.out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![0]);
}

#[test]
fn multicast_sources_and_filtered_vlans_are_dropped_and_counted() {
    let (fdb, mut w, bridge, mut bw, mut em) = setup();
    let mut b = Batch::new();
    push(&mut b, 0, frame(mac(6), mac(1), None, 0));
    push(&mut b, 3, frame(mac(1), mac(2), Some(9), 0));
    bridge.process(&mut bw, &mut b, 1, &mut em, &mut Learning::Inline(&mut w));
    assert!(em.out.is_empty());
    assert_eq!(bw.counters.drop_src_multicast.get(), 1);
    assert_eq!(bw.counters.drop_vlan_filtered.get(), 1);
    assert!(fdb.is_empty(), "dropped frames teach nothing");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whole batches (the stage decides all packets first, then dispatches, and hands a batch
    /// bound for one port over whole) give the same frames as the model, packet by packet.
    #[test]
    fn batches_match_reference_model(
        frames in proptest::collection::vec((0u8..8, 0u8..8, 0u16..5, prop_oneof![Just(None), (1u16..3).prop_map(Some)]), 1..200),
        sizes in proptest::collection::vec(1usize..=32, 1..50),
    ) {
        let cfg = FdbConfig { learn_limit: LEARN_LIMIT, static_limit: STATIC_LIMIT, ..Default::default() };
        let (_fdb, mut writer, bridge, mut bw, mut em) = setup_with(cfg, 5);
        let ports = ports();
        let mut model = Model::default();
        let mut rest = &frames[..];
        let mut k = 0;
        while !rest.is_empty() {
            let n = sizes[k % sizes.len()].min(rest.len());
            k += 1;
            let (chunk, tail) = rest.split_at(n);
            rest = tail;
            let mut b = Batch::new();
            let mut want = Vec::new();
            for (j, &(src, dst, port, tag)) in chunk.iter().enumerate() {
                let mut p = frame(mac(src), mac(dst), tag, j as u8);
                p.meta.in_port = port;
                want.extend(model.frame(&ports, mac(src), mac(dst), port, tag, 1, &untag(p.data()).1));
                b.push(p).unwrap();
            }
            em.out.clear();
            bridge.process(&mut bw, &mut b, 1, &mut em, &mut Learning::Inline(&mut writer));
            prop_assert!(b.is_empty());
            prop_assert_eq!(&em.out, &want);
        }
    }
}

/// A BPDU is never flooded, whatever a port's mask (bits 0-2 cannot be set); LLDP and 802.1X
/// go on only from the ports that forward them; all are counted when dropped.
#[test]
fn link_local_groups_stay_on_their_link() {
    let (_fdb, _w, mut bridge, mut bw, mut em) = setup();
    for (dst, port, floods) in [
        (8, 4, false),
        (8, 0, false),
        (9, 4, true),
        (9, 3, false),
        (10, 3, true),
        (10, 0, false),
        (11, 0, true),
    ] {
        let mut b = Batch::new();
        push(
            &mut b,
            port,
            frame(mac(1), mac(dst), if port >= 3 { Some(1) } else { None }, 0),
        );
        em.out.clear();
        bridge.process(&mut bw, &mut b, 1, &mut em, &mut Learning::ReadOnly);
        assert_eq!(!em.out.is_empty(), floods, "{} from port {port}", mac(dst));
    }
    assert_eq!(bw.counters.drop_link_local.get(), 4);
    let e = bridge.set_group_fwd_mask(0, 0x0001).unwrap_err();
    assert!(e.contains("never forwarded"), "{e}");
    assert!(bridge.set_group_fwd_mask(9, 0x4000).is_err(), "no port 9");
}

/// Runs one frame from `src` to `dst` in through `port` (untagged: ports 0-2), learning
/// inline, and returns the ports it left by.
fn one(
    bridge: &Bridge<Padded>,
    bw: &mut BridgeWorker,
    w: &mut FdbWriter<Padded>,
    port: u16,
    src: u8,
    dst: u8,
    now: u64,
) -> Vec<u16> {
    let mut em = Collect::default();
    let mut b = Batch::new();
    push(&mut b, port, frame(mac(src), mac(dst), None, 0));
    bridge.process(bw, &mut b, now, &mut em, &mut Learning::Inline(w));
    em.out.iter().map(|o| o.0).collect()
}

/// A BPDU on a guarded port disables it: nothing comes in or goes out by it (counted) until
/// it is enabled again; the same BPDU on an unguarded port is only dropped.
#[test]
fn bpdu_guard_disables_the_port_until_enabled() {
    let (_fdb, mut w, bridge, mut bw, _em) = setup();
    let d = PortFlags::default();
    bridge.set_port_flags(1, PortFlags { bpdu_guard: true, ..d }).unwrap();
    assert_eq!(
        one(&bridge, &mut bw, &mut w, 1, 2, 7, 1),
        vec![0, 3, 4],
        "a broadcast from port 1"
    );
    assert_eq!(
        one(&bridge, &mut bw, &mut w, 0, 1, 8, 2),
        Vec::<u16>::new(),
        "a BPDU on port 0"
    );
    assert!(!bridge.port_disabled(0), "port 0 has no guard");
    assert_eq!(one(&bridge, &mut bw, &mut w, 1, 2, 8, 3), Vec::<u16>::new());
    assert!(bridge.port_disabled(1));
    assert_eq!(bw.counters.bpdu_guard.get(), 1);
    // In: dropped. Out: a known station behind it is unreachable, and floods skip it.
    assert_eq!(one(&bridge, &mut bw, &mut w, 1, 2, 7, 4), Vec::<u16>::new());
    assert_eq!(
        one(&bridge, &mut bw, &mut w, 0, 1, 2, 5),
        Vec::<u16>::new(),
        "mac 2 lives on port 1"
    );
    assert_eq!(one(&bridge, &mut bw, &mut w, 0, 1, 7, 6), vec![3, 4]);
    assert_eq!(bw.counters.drop_port_disabled.get(), 2);
    assert_eq!(bridge.enable_port(1), Ok(true));
    assert_eq!(bridge.enable_port(1), Ok(false), "already enabled");
    assert_eq!(one(&bridge, &mut bw, &mut w, 0, 1, 2, 7), vec![1]);
    assert!(bridge.enable_port(9).is_err());
}

/// Storm control lets in a port's rate of each flooded class (a second's worth as burst),
/// counts the rest, refills with time, and never limits known unicast.
#[test]
fn storm_control_limits_each_flooded_class_per_port() {
    let (_fdb, mut w, mut bridge, mut bw, _em) = setup();
    let sc = StormControl {
        broadcast: 3,
        multicast: 0,
        unknown_unicast: 2,
    };
    bridge.set_storm_control(0, sc).unwrap();
    let passed = |bridge: &Bridge<Padded>, bw: &mut BridgeWorker, w: &mut FdbWriter<Padded>, src: u8, dst: u8, now| {
        (0..10)
            .filter(|_| !one(bridge, bw, w, 0, src, dst, now).is_empty())
            .count()
    };
    // Buckets start empty at time 0 and fill with time.
    assert_eq!(passed(&bridge, &mut bw, &mut w, 1, 7, 1000), 3, "broadcast: 3 a second");
    assert_eq!(passed(&bridge, &mut bw, &mut w, 1, 6, 1000), 10, "multicast: no limit");
    assert_eq!(
        passed(&bridge, &mut bw, &mut w, 1, 20, 1000),
        2,
        "unknown unicast: 2 a second"
    );
    assert_eq!(bw.counters.drop_storm.get(), 15);
    assert_eq!(
        passed(&bridge, &mut bw, &mut w, 1, 7, 1500),
        1,
        "half a second refills 1.5"
    );
    // Known unicast is never limited; other ports are not.
    one(&bridge, &mut bw, &mut w, 1, 2, 7, 3000);
    assert_eq!(passed(&bridge, &mut bw, &mut w, 1, 2, 3000), 10);
    assert!(bridge.set_storm_control(9, sc).is_err());
}

/// VLAN membership replaced while the bridge runs: floods follow the new members at once,
/// a learned entry of a port that left the VLAN forwards nothing (counted), and the list
/// must name every port.
#[test]
fn vlan_membership_changes_live() {
    let (_fdb, mut w, bridge, mut bw, _em) = setup();
    // Port 1 learns host 2 in VLAN 1; port 0 reaches it.
    assert_eq!(one(&bridge, &mut bw, &mut w, 1, 2, 7, 1), vec![0, 3, 4]);
    assert_eq!(one(&bridge, &mut bw, &mut w, 0, 1, 2, 2), vec![1]);
    // Port 1 moves to VLAN 2: VLAN 1's floods skip it, the stale entry forwards nothing.
    let mut moved = ports();
    moved[1] = PortVlan::Access(2);
    bridge.set_port_vlans(moved.clone()).unwrap();
    assert_eq!(bridge.port_vlan(1), Some(PortVlan::Access(2)));
    assert_eq!(bridge.members(2), vec![1, 2, 3, 4]);
    let before = bw.counters.drop_vlan_filtered.get();
    assert_eq!(one(&bridge, &mut bw, &mut w, 0, 1, 2, 3), Vec::<u16>::new());
    assert_eq!(bw.counters.drop_vlan_filtered.get(), before + 1);
    assert_eq!(one(&bridge, &mut bw, &mut w, 0, 1, 7, 4), vec![3, 4]);
    // Port 1's broadcasts now flood VLAN 2, untagged in, tagged out on the trunks.
    let mut seen = one(&bridge, &mut bw, &mut w, 1, 5, 7, 5);
    seen.sort();
    assert_eq!(seen, vec![2, 3, 4]);
    assert!(bridge.set_port_vlans(moved[..4].to_vec()).is_err(), "a port missing");
}

/// A worker forwards while another thread swaps VLAN membership back and forth: every flood
/// goes to the members of one version or the other, never a mix.
#[test]
fn vlan_membership_swaps_are_whole_for_each_batch() {
    let (_fdb, mut w, bridge, mut bw, _em) = setup();
    let bridge = std::sync::Arc::new(bridge);
    let mut b2 = ports();
    b2[0] = PortVlan::Access(2);
    b2[1] = PortVlan::Access(2);
    let versions = [ports(), b2];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (bridge, stop, versions) = (bridge.clone(), stop.clone(), versions.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                bridge.set_port_vlans(versions[i % 2].clone()).unwrap();
            }
            i
        })
    };
    // A broadcast from the trunk (port 4, native VLAN 1) floods VLAN 1: ports 0, 1 and 3 in
    // the first version, port 3 alone in the second.
    for now in 0..2000 {
        let mut seen = one(&bridge, &mut bw, &mut w, 4, 5, 7, now);
        seen.sort();
        assert!(seen == [0, 1, 3] || seen == [3], "{seen:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0);
}
