//! A routed packet is parsed once: the worker parses it on receive, the router trusts the
//! metadata it kept consistent through its rewrite (addresses, VLAN tag, TTL), and the bridge
//! after it trusts it too. Frames the router builds itself (ARP, ICMP) are parsed once, when
//! built.

use std::net::IpAddr;

use freeway_datapath::runtime::RunResult;
use freeway_packet::build::{build_frame, FrameSpec, L4};

mod common;
use common::{access, lan_wan_interfaces, pcap_port, read_pcap, run, wan_neigh, write_pcap, TempDir};

fn routed(i: u16, ttl: u8) -> Vec<u8> {
    build_frame(&FrameSpec {
        src_mac: [0x02, 0, 0, 0, 0x10, 0x05],
        dst_mac: [0x02, 0xfe, 0, 0, 0, 1],
        vlan: None,
        src_ip: "10.0.10.5".parse::<IpAddr>().unwrap(),
        dst_ip: "10.0.20.7".parse::<IpAddr>().unwrap(),
        proto: L4::Udp,
        src_port: 1000 + i,
        dst_port: 53,
        ttl,
        ..FrameSpec::default()
    })
}

/// Runs `frames` from lan through the router, with conntrack or without; the result and the
/// number of frames that left on wan.
fn run_lan(dir: &TempDir, frames: &[Vec<u8>], conntrack: bool) -> (RunResult, usize) {
    let [input, lan_out, wan_out] = dir.files(["lan-in.pcap", "lan-out.pcap", "wan.pcap"]);
    write_pcap(&input, frames);
    let res = run(&format!(
        "workers = 1\n{}{}[router]\nmac = \"02:fe:00:00:00:01\"\n{}{}\n{}\n",
        pcap_port("lan", &access(10), Some(&input), Some(&lan_out)),
        pcap_port("wan", &access(20), None, Some(&wan_out)),
        lan_wan_interfaces(),
        wan_neigh(),
        if conntrack { "[conntrack]\nmax = 1000" } else { "" }
    ));
    let out = read_pcap(&wan_out).len();
    (res, out)
}

#[test]
fn a_routed_packet_is_parsed_once() {
    let dir = TempDir::new("parse-once");
    let frames: Vec<Vec<u8>> = (0..100).map(|i| routed(i, 64)).collect();
    for conntrack in [false, true] {
        let (res, forwarded) = run_lan(&dir, &frames, conntrack);
        assert_eq!(forwarded, 100, "conntrack {conntrack}: every packet routed to the WAN");
        let parses: u64 = res.last.workers.iter().map(|w| w.parses).sum();
        assert_eq!(parses, 100, "conntrack {conntrack}: one parse per routed packet");
    }
    // A frame the router builds (an ICMP time exceeded) was parsed when built: the pipeline
    // does not parse it again on its way out.
    let (res, forwarded) = run_lan(&dir, &[routed(0, 1)], false);
    assert_eq!(forwarded, 0);
    assert_eq!(res.last.ports[0].tx_packets, 1, "the ICMP error went back to the LAN");
    assert_eq!(res.last.workers.iter().map(|w| w.parses).sum::<u64>(), 1);
}
