//! IP fragments through the stateful pipeline: a fragmented datagram is reassembled, tracked,
//! routed and judged whole, and leaves fragmented as it came; hostile fragments (a flood of
//! datagrams never completed, overlapping, tiny and teardrop-shaped ones) are counted and
//! keep the reassembler within its bounds while an established flow goes on.

mod common;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::{access, interface, neigh, pcap_port, read_pcap, run, write_pcap, TempDir};
use freeway_frag::build::{fragment, fragments, udp_payload, whole, FragSpec};
use freeway_frag::{Limits, Reassembler};
use freeway_packet::{parse, Packet, PacketPool};

const ROUTER: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
const LAN_HOST: [u8; 6] = [2, 0, 0, 0, 0x10, 5];
const WAN_HOST: [u8; 6] = [2, 0, 0, 0, 0x20, 7];

/// One worker, pcap ports lan (VLAN 10) and wan (VLAN 20), a router between them with both
/// hosts as neighbours, a firewall letting connections start from lan only, and `extra`.
fn config(lan: [Option<&str>; 2], wan: [Option<&str>; 2], extra: &str) -> String {
    [
        "workers = 1\n".to_string(),
        pcap_port("lan", &access(10), lan[0], lan[1]),
        pcap_port("wan", &access(20), wan[0], wan[1]),
        "\n[router]\nmac = \"02:fe:00:00:00:01\"\n".to_string(),
        interface("lan", 10, &["10.0.10.1/24", "2001:db8:10::1/64"]),
        interface("wan", 20, &["10.0.20.1/24", "2001:db8:20::1/64"]),
        neigh("10.0.10.5", "02:00:00:00:10:05", "lan"),
        neigh("2001:db8:10::5", "02:00:00:00:10:05", "lan"),
        neigh("10.0.20.7", "02:00:00:00:20:07", "wan"),
        neigh("2001:db8:20::7", "02:00:00:00:20:07", "wan"),
        "\n[firewall]\nallow_new_from = [\"lan\"]\n".to_string(),
        extra.to_string(),
    ]
    .concat()
}

fn spec(v6: bool, from_lan: bool, id: u32) -> FragSpec {
    let (lan, wan): (IpAddr, IpAddr) = if v6 {
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0x10, 0, 0, 0, 0, 5).into(),
            Ipv6Addr::new(0x2001, 0xdb8, 0x20, 0, 0, 0, 0, 7).into(),
        )
    } else {
        (Ipv4Addr::new(10, 0, 10, 5).into(), Ipv4Addr::new(10, 0, 20, 7).into())
    };
    let (src_mac, src, dst) = if from_lan {
        (LAN_HOST, lan, wan)
    } else {
        (WAN_HOST, wan, lan)
    };
    FragSpec {
        src_mac,
        dst_mac: ROUTER,
        src,
        dst,
        id,
        proto: 17,
    }
}

/// The datagrams `frames` make, reassembled (frames that are no fragment come out as
/// they are).
fn reassemble(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut r = Reassembler::new(Limits::default());
    let mut pool = PacketPool::default();
    let mut out = Vec::new();
    for f in frames {
        let mut p = Packet::from_frame(f).unwrap();
        parse(&mut p).unwrap();
        if let Some(d) = r.push(p, 0, 0, &mut pool) {
            out.push(d.data().to_vec());
        }
    }
    out
}

/// The L3 part of a frame, with the TTL / hop limit and the IPv4 checksum left out (what a
/// router changes).
fn l3_body(f: &[u8]) -> Vec<u8> {
    let mut v = f[14..].to_vec();
    if f[12..14] == [0x08, 0x00] {
        v[8] = 0;
        v[10] = 0;
        v[11] = 0;
    } else {
        v[7] = 0;
    }
    v
}

#[test]
fn fragmented_datagrams_cross_the_firewall_both_ways_and_leave_as_they_came() {
    let d = TempDir::new("frag-route");
    let [lan_in, lan_out, wan_in, wan_out] = d.files(["lan-in.pcap", "lan-out.pcap", "wan-in.pcap", "wan-out.pcap"]);
    let mut lan_frames = Vec::new();
    let mut wan_frames = Vec::new();
    let mut requests = Vec::new();
    let mut replies = Vec::new();
    for v6 in [false, true] {
        for (i, len) in [5008usize, 20_000].into_iter().enumerate() {
            let (q, a) = (spec(v6, true, 100 + i as u32), spec(v6, false, 200 + i as u32));
            let port = 4000 + i as u16;
            let qd = udp_payload(&q, port, 5001, len);
            let ad = udp_payload(&a, 5001, port, len);
            // Out of order from lan.
            // Fragments of 1500 and 1280 bytes (IPv4), 1280 and 1496 (IPv6): within the MTU.
            let (qc, ac) = if v6 { (1232, 1448) } else { (1480, 1232) };
            let mut qf = fragments(&q, &qd, qc);
            qf.reverse();
            lan_frames.extend(qf);
            wan_frames.extend(fragments(&a, &ad, ac));
            requests.push(whole(&q, &qd));
            replies.push(whole(&a, &ad));
        }
    }
    write_pcap(&lan_in, &lan_frames);
    write_pcap(&wan_in, &wan_frames);
    let res = run(&config(
        [Some(&lan_in), Some(&lan_out)],
        [Some(&wan_in), Some(&wan_out)],
        "",
    ));
    let s = &res.last;
    let r = s.reassembly.as_ref().expect("reassembly runs with the firewall");
    assert_eq!(r.reassembled, 8, "{r:?}");
    assert_eq!(r.fragments, (lan_frames.len() + wan_frames.len()) as u64);
    assert_eq!(r.merged, r.fragments);
    assert!(r.drops.is_empty(), "{r:?}");
    assert_eq!((r.in_flight, r.bytes_held), (0, 0));
    assert!(s.drops().is_empty(), "{:?}", s.drops());

    let to_wan = read_pcap(&wan_out);
    let to_lan = read_pcap(&lan_out);
    // Cut again at the sizes they came in at.
    let sizes = |v: &[Vec<u8>]| {
        let mut l: Vec<usize> = v.iter().map(Vec::len).collect();
        l.sort_unstable();
        l
    };
    assert_eq!(sizes(&to_wan), sizes(&lan_frames));
    assert_eq!(sizes(&to_lan), sizes(&wan_frames));
    for (got, want, to) in [(&to_wan, &requests, WAN_HOST), (&to_lan, &replies, LAN_HOST)] {
        let got = reassemble(got);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want.iter()) {
            assert_eq!(g[0..6], to, "to the neighbour");
            assert_eq!(g[6..12], ROUTER);
            assert_eq!(l3_body(g), l3_body(w), "the datagram arrives intact");
        }
    }
    let fw = s.firewall.as_ref().unwrap();
    assert_eq!((fw.accept_new, fw.accept_established), (4, 4), "{fw:?}");
}

#[test]
fn hostile_fragments_are_counted_and_bounded_while_an_established_flow_passes() {
    const FLOOD: u32 = 3000;
    let d = TempDir::new("frag-hostile");
    let [lan_in, lan_out, wan_in, wan_out] = d.files(["lan-in.pcap", "lan-out.pcap", "wan-in.pcap", "wan-out.pcap"]);
    let data = udp_payload(&spec(false, true, 0), 1, 2, 4000);
    let small = |from_lan: bool, port: u16| {
        let s = spec(false, from_lan, 0);
        let (a, b) = if from_lan { (port, 5001) } else { (5001, port) };
        whole(&s, &udp_payload(&s, a, b, 64))
    };
    // lan opens a flow; wan answers it, then floods.
    let lan_frames = vec![small(true, 7000)];
    let mut wan_frames = vec![small(false, 7000)];
    let mut flow = 1;
    let mut expect_drops = 0u64;
    for id in 0..FLOOD {
        let s = spec(false, false, id);
        match id % 4 {
            // A datagram never completed.
            0 | 1 => wan_frames.push(fragment(&s, &data[..1480], 0, true)),
            // Teardrop: the second fragment starts inside the first and runs past it.
            2 => {
                wan_frames.push(fragment(&s, &data[..64], 0, true));
                wan_frames.push(fragment(&s, &data[32..120], 32, false));
            }
            // A tiny TCP fragment at offset 8, and a zero-length one.
            _ => {
                let tcp = FragSpec { proto: 6, ..s };
                wan_frames.push(fragment(&tcp, &data[..8], 8, true));
                wan_frames.push(fragment(&s, &[], 16, true));
                expect_drops += 2;
            }
        }
        // The established flow goes on in the middle of it.
        if id % 100 == 0 {
            wan_frames.push(small(false, 7000));
            flow += 1;
        }
    }
    write_pcap(&lan_in, &lan_frames);
    write_pcap(&wan_in, &wan_frames);
    let limits = "\n[conntrack.reassembly]\nmax_datagrams = 256\nmax_bytes = 1048576\n";
    let res = run(&config(
        [Some(&lan_in), Some(&lan_out)],
        [Some(&wan_in), Some(&wan_out)],
        limits,
    ));
    let s = &res.last;
    let r = s.reassembly.as_ref().unwrap();
    assert!(r.in_flight <= 256 && r.bytes_held <= 1 << 20, "bounded: {r:?}");
    assert_eq!(r.reassembled, 0, "{r:?}");
    let dropped: u64 = r.drops.values().sum();
    // Every fragment is either held (at most 256 datagrams) or counted as dropped.
    assert!(r.fragments - dropped <= 256 * 2, "{r:?}");
    assert!(r.drops.get("overlap").copied().unwrap_or(0) > 0, "{r:?}");
    assert!(r.drops.get("table_full").copied().unwrap_or(0) > 0, "{r:?}");
    assert!(
        r.drops.get("tiny").copied().unwrap_or(0) + r.drops.get("bad_length").copied().unwrap_or(0) >= expect_drops
    );
    for (k, v) in &r.drops {
        assert_eq!(s.drops().get(&format!("reassembly:{k}")), Some(v), "in the drop list");
    }
    // The established flow: every one of wan's small replies reached lan.
    let to_lan = read_pcap(&lan_out);
    assert_eq!(to_lan.len(), flow, "the established flow's packets passed");
    assert_eq!(read_pcap(&wan_out).len(), 1, "lan's one packet");
}

#[test]
fn a_reassembled_datagram_flooded_by_the_bridge_reaches_every_port_as_it_came() {
    let d = TempDir::new("frag-flood");
    let [a_in, b_out, c_out] = d.files(["a-in.pcap", "b-out.pcap", "c-out.pcap"]);
    let mut frames = Vec::new();
    for v6 in [false, true] {
        // To a MAC nobody has learned: flooded to b and c.
        let s = FragSpec {
            dst_mac: [2, 0, 0, 0, 0, 0x99],
            ..spec(v6, true, 300)
        };
        frames.extend(fragments(&s, &udp_payload(&s, 4000, 5001, 20_000), 1448));
    }
    write_pcap(&a_in, &frames);
    let text = [
        "workers = 1\n".to_string(),
        pcap_port("a", "", Some(&a_in), None),
        pcap_port("b", "", None, Some(&b_out)),
        pcap_port("c", "", None, Some(&c_out)),
        "\n[firewall]\nallow_new_from = [\"a\"]\n".to_string(),
    ]
    .concat();
    let res = run(&text);
    let r = res.last.reassembly.as_ref().unwrap();
    assert_eq!((r.reassembled, r.refragmented), (2, 4), "{r:?}");
    for out in [&b_out, &c_out] {
        assert_eq!(read_pcap(out), frames, "{out}: the fragments as they came");
    }
}
