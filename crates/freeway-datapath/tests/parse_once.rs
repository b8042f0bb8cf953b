//! A routed packet is parsed once: the worker parses it on receive, the router trusts the
//! metadata it kept consistent through its rewrite (addresses, VLAN tag, TTL), and the bridge
//! after it trusts it too. Frames the router builds itself (ARP, ICMP) are parsed once, when
//! built.

use std::net::IpAddr;

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions};
use freeway_packet::build::{build_frame, FrameSpec, L4};

mod common;
use common::{read_pcap, write_pcap, LAN_WAN_INTERFACES, WAN_NEIGH};

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

fn run(dir: &std::path::Path, frames: &[Vec<u8>], conntrack: bool) -> (runtime::RunResult, usize) {
    let input = dir.join("lan-in.pcap");
    write_pcap(&input, frames);
    let text = format!(
        r#"
workers = 1
[[port]]
name = "lan"
kind = "pcap"
pcap = {{ read = "{}", write = "{}" }}
vlan = {{ mode = "access", vlan = 10 }}
[[port]]
name = "wan"
kind = "pcap"
pcap = {{ write = "{}" }}
vlan = {{ mode = "access", vlan = 20 }}
[router]
mac = "02:fe:00:00:00:01"
{LAN_WAN_INTERFACES}{WAN_NEIGH}
{}
"#,
        input.display(),
        dir.join("lan-out.pcap").display(),
        dir.join("wan.pcap").display(),
        if conntrack { "[conntrack]\nmax = 1000" } else { "" }
    );
    let cfg = config::parse(&text, "test", None).unwrap();
    let res = runtime::run::<Padded>(&cfg, RunOptions::default()).unwrap();
    let out = read_pcap(dir.join("wan.pcap")).len();
    (res, out)
}

#[test]
fn a_routed_packet_is_parsed_once() {
    let dir = std::env::temp_dir().join(format!("freeway-parse-once-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let frames: Vec<Vec<u8>> = (0..100).map(|i| routed(i, 64)).collect();
    for conntrack in [false, true] {
        let (res, forwarded) = run(&dir, &frames, conntrack);
        assert_eq!(forwarded, 100, "conntrack {conntrack}: every packet routed to the WAN");
        let parses: u64 = res.last.workers.iter().map(|w| w.parses).sum();
        assert_eq!(parses, 100, "conntrack {conntrack}: one parse per routed packet");
    }
    // A frame the router builds (an ICMP time exceeded) was parsed when built: the pipeline
    // does not parse it again on its way out.
    let (res, forwarded) = run(&dir, &[routed(0, 1)], false);
    assert_eq!(forwarded, 0);
    assert_eq!(res.last.ports[0].tx_packets, 1, "the ICMP error went back to the LAN");
    assert_eq!(res.last.workers.iter().map(|w| w.parses).sum::<u64>(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
