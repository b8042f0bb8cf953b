use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;
use crate::build::{fragment, fragments, udp_payload, whole, FragSpec};
use crate::refragment;
use freeway_packet::{parse, PacketPool};

fn spec4(id: u32) -> FragSpec {
    FragSpec::udp(Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 1, 2).into(), id)
}

fn spec6(id: u32) -> FragSpec {
    FragSpec::udp(
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into(),
        Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2).into(),
        id,
    )
}

fn pkt(f: &[u8]) -> Packet {
    let mut p = Packet::from_frame(f).unwrap();
    parse(&mut p).unwrap();
    p
}

struct T {
    r: Reassembler,
    pool: PacketPool,
    now: Tick,
}

impl T {
    fn new(limits: Limits) -> T {
        T {
            r: Reassembler::new(limits),
            pool: PacketPool::new(2048, 0, 64),
            now: 0,
        }
    }

    fn push(&mut self, f: &[u8]) -> Option<Packet> {
        self.r.push(pkt(f), 0, self.now, &mut self.pool)
    }

    fn drops(&self, r: DropReason) -> u64 {
        self.r.counters().drops[r as usize].get()
    }
}

/// A fresh reassembler (default limits) and the data of a 2000-byte UDP datagram of `spec`
/// (ports 1 and 2) to cut into fragments.
fn fresh(spec: &FragSpec) -> (T, Vec<u8>) {
    (T::new(Limits::default()), udp_payload(spec, 1, 2, 2000))
}

fn check(out: &Packet, want: &[u8]) {
    assert_eq!(out.data(), want, "the reassembled frame is the whole datagram");
    let mut p = Packet::from_frame(want).unwrap();
    parse(&mut p).unwrap();
    assert_eq!(out.meta.l4_off, p.meta.l4_off);
    assert_eq!(
        out.meta.flow_hash, p.meta.flow_hash,
        "hashed like the unfragmented datagram"
    );
    assert_ne!(out.meta.flags & meta_flags::REASSEMBLED, 0);
}

#[test]
fn in_order_and_out_of_order_v4_and_v6() {
    for (v6, spec) in [(false, spec4(7)), (true, spec6(7))] {
        let data = udp_payload(&spec, 1000, 53, 3000);
        let frags = fragments(&spec, &data, 1232);
        assert_eq!(frags.len(), 3);
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
            let mut t = T::new(Limits::default());
            let mut out = None;
            for (n, &i) in order.iter().enumerate() {
                let r = t.push(&frags[i]);
                assert_eq!(r.is_some(), n == 2, "v6 {v6} order {order:?}");
                out = out.or(r);
            }
            let out = out.unwrap();
            check(&out, &whole(&spec, &data));
            let note = out.frag_note().unwrap();
            let hdr = if v6 { 48 } else { 20 };
            assert_eq!(note.max_size as usize, 1232 + hdr);
            assert_eq!((t.r.in_flight(), t.r.bytes_held()), (0, 0));
            assert_eq!(t.r.counters().reassembled.get(), 1);
            assert_eq!(t.r.counters().merged.get(), 3);
        }
    }
}

#[test]
fn unfragmented_packets_pass_untouched() {
    let mut t = T::new(Limits::default());
    let spec = spec4(1);
    let f = whole(&spec, &udp_payload(&spec, 1, 2, 100));
    let out = t.push(&f).unwrap();
    assert_eq!(out.data(), &f[..]);
    assert_eq!(t.r.counters().fragments.get(), 0);
}

#[test]
fn duplicates_are_dropped_alone() {
    for spec in [spec4(3), spec6(3)] {
        let (mut t, data) = fresh(&spec);
        let frags = fragments(&spec, &data, 800);
        assert!(t.push(&frags[0]).is_none());
        assert!(t.push(&frags[0]).is_none());
        assert!(t.push(&frags[2]).is_none());
        assert!(t.push(&frags[2]).is_none(), "a duplicate last fragment");
        let out = t.push(&frags[1]).unwrap();
        check(&out, &whole(&spec, &data));
        assert_eq!(t.drops(DropReason::Duplicate), 2);
    }
}

#[test]
fn overlaps_drop_the_whole_datagram() {
    for spec in [spec4(4), spec6(4)] {
        let (mut t, data) = fresh(&spec);
        assert!(t.push(&fragment(&spec, &data[..800], 0, true)).is_none());
        // Teardrop: starts inside the first fragment and runs past its end.
        assert!(t.push(&fragment(&spec, &data[400..1200], 400, true)).is_none());
        assert_eq!(t.drops(DropReason::Overlap), 2, "the held fragment and the new one");
        assert_eq!((t.r.in_flight(), t.r.bytes_held()), (0, 0));
        // The rest of the datagram starts a new one that never completes.
        assert!(t.push(&fragment(&spec, &data[800..], 800, false)).is_none());
        assert_eq!(t.r.in_flight(), 1);
    }
}

#[test]
fn inconsistent_last_fragments_drop_the_datagram() {
    let spec = spec4(5);
    let (mut t, data) = fresh(&spec);
    assert!(t.push(&fragment(&spec, &data[800..1600], 800, false)).is_none());
    // A second "last" fragment with another end.
    assert!(t.push(&fragment(&spec, &data[1600..], 1600, false)).is_none());
    assert_eq!(t.drops(DropReason::Inconsistent), 2);
    // A fragment beyond a known end.
    assert!(t.push(&fragment(&spec, &data[400..800], 400, false)).is_none());
    assert!(t.push(&fragment(&spec, &data[800..1600], 800, true)).is_none());
    assert_eq!(t.drops(DropReason::Inconsistent), 4);
    // MF clear on a fragment that ends before data already held.
    assert!(t.push(&fragment(&spec, &data[800..1600], 800, true)).is_none());
    assert!(t.push(&fragment(&spec, &data[400..800], 400, false)).is_none());
    assert_eq!(t.drops(DropReason::Inconsistent), 6);
    assert_eq!(t.r.in_flight(), 0);
}

#[test]
fn bad_shapes_are_dropped_on_arrival() {
    let spec = spec4(6);
    let (mut t, data) = fresh(&spec);
    assert!(t.push(&fragment(&spec, &data[..801], 0, true)).is_none());
    assert_eq!(
        t.drops(DropReason::BadLength),
        1,
        "a non-final length not a multiple of 8"
    );
    assert!(t.push(&fragment(&spec, &data[..800], 65_000, false)).is_none());
    assert_eq!(t.drops(DropReason::TooLong), 1);
    let tcp = FragSpec { proto: 6, ..spec };
    assert!(t.push(&fragment(&tcp, &data[..800], 8, true)).is_none());
    assert_eq!(t.drops(DropReason::Tiny), 1);
    let mut bad = fragment(&spec, &data[..800], 0, true);
    bad[14 + 10] ^= 0xff;
    assert!(t.push(&bad).is_none());
    assert_eq!(t.drops(DropReason::BadChecksum), 1);
    assert_eq!(t.r.in_flight(), 0);
}

#[test]
fn timeouts_drop_incomplete_datagrams() {
    let spec = spec6(8);
    let data = udp_payload(&spec, 1, 2, 2000);
    let mut t = T::new(Limits {
        timeout_ms: 1000,
        ..Limits::default()
    });
    assert!(t.push(&fragment(&spec, &data[..800], 0, true)).is_none());
    t.now = 600;
    assert!(t.push(&fragment(&spec4(9), &data[..800], 0, true)).is_none());
    t.r.expire(999, &mut t.pool);
    assert_eq!(t.r.in_flight(), 2);
    t.r.expire(1000, &mut t.pool);
    assert_eq!((t.r.in_flight(), t.drops(DropReason::Timeout)), (1, 1));
    t.r.expire(1600, &mut t.pool);
    assert_eq!(
        (t.r.in_flight(), t.r.bytes_held(), t.drops(DropReason::Timeout)),
        (0, 0, 2)
    );
}

#[test]
fn bounds_hold_under_a_flood() {
    let limits = Limits {
        max_datagrams: 16,
        max_bytes: 24 * 2048,
        max_fragments: 4,
        timeout_ms: 30_000,
    };
    let mut t = T::new(limits);
    let data = udp_payload(&spec4(0), 1, 2, 4000);
    // Never-completed datagrams: only first fragments.
    for id in 0..100 {
        assert!(t.push(&fragment(&spec4(id), &data[..8], 0, true)).is_none());
        assert!(t.r.in_flight() <= 16 && t.r.bytes_held() <= limits.max_bytes);
    }
    assert_eq!(t.drops(DropReason::TableFull), 84);
    // More bytes into the held ones: the memory bound stops them.
    for id in 0..16 {
        assert!(t.push(&fragment(&spec4(id), &data[8..16], 8, true)).is_none());
        assert!(t.r.bytes_held() <= limits.max_bytes);
    }
    assert_eq!(t.drops(DropReason::MemoryFull), 8);
    assert_eq!(t.r.bytes_held(), 24 * 2048);
    // Too many tiny fragments in one datagram.
    let mut t = T::new(limits);
    for i in 0..5u32 {
        assert!(t.push(&fragment(&spec4(1), &data[..8], i * 8, true)).is_none());
    }
    assert_eq!(t.drops(DropReason::TooManyFragments), 5);
    assert_eq!(t.r.in_flight(), 0);
    // Every fragment taken in is accounted for.
    let c = t.r.counters();
    assert_eq!(c.fragments.get(), c.dropped() + c.merged.get());
}

#[test]
fn a_reassembled_datagram_refragments_to_its_largest_fragment() {
    for spec in [spec4(11), spec6(11)] {
        let data = udp_payload(&spec, 1000, 53, 5000);
        let frags = fragments(&spec, &data, 1480);
        let mut t = T::new(Limits::default());
        let mut out = None;
        for f in &frags {
            out = out.or(t.push(f));
        }
        let out = out.unwrap();
        let mut got = Vec::new();
        let n = refragment(out, None, &mut t.pool, |p| got.push(p.data().to_vec())).unwrap();
        assert_eq!(n, frags.len());
        assert_eq!(got, frags, "the same fragments as the sender's");
        // Reassembling them again gives the same datagram.
        let mut again = None;
        for f in &got {
            again = again.or(t.push(f));
        }
        check(&again.unwrap(), &whole(&spec, &data));
    }
}
