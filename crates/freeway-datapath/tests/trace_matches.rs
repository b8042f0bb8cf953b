//! `freeway ctl trace` runs the datapath's real stages and only renders what they did: for
//! each frame below, the trace's verdict (the ports it leaves by, tagged or not, or the drop
//! counter that moves) equals what the datapath itself does with the same frame on the same
//! tables: 802.1ad and QinQ tags, VLAN-filtered, flooded, bridged, routed, TTL-expired and
//! firewall-dropped frames.

use std::collections::BTreeSet;
use std::net::IpAddr;

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::runtime;
use freeway_packet::build::{build_frame, tcp_flags, FrameSpec, L4};
use freeway_packet::{parse, Packet, NO_VLAN};

mod common;
use common::{lan_neigh, lan_wan_interfaces, pcap_port, read_pcap, run, wan_neigh, write_pcap, TempDir};

const PORTS: [&str; 4] = ["h1", "h2", "trunk", "intruder"];
const ROUTER: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
const H1: [u8; 6] = [0x02, 0, 0, 0, 0x10, 0x05];
const H2: [u8; 6] = [0x02, 0, 0, 0, 0x20, 0x07];
const T1: [u8; 6] = [0x02, 0, 0, 0, 0x10, 0x33];

/// The ports (by name) a frame leaves by, each with the VLAN tag it leaves with, and the
/// drop counter that moved (if the original frame went nowhere).
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    outputs: BTreeSet<String>,
    dropped: Option<String>,
}

fn config_text(dir: &TempDir, input: Option<(&str, &str)>) -> String {
    let mut t = String::from("workers = 1\n");
    for (name, vlan) in [
        ("h1", r#"{ mode = "access", vlan = 10 }"#),
        ("h2", r#"{ mode = "access", vlan = 20 }"#),
        ("trunk", r#"{ mode = "trunk", vlans = ["10", "30"] }"#),
        ("intruder", r#"{ mode = "access", vlan = 20 }"#),
    ] {
        let read = input.filter(|(p, _)| *p == name).map(|(_, f)| f);
        t.push_str(&pcap_port(name, vlan, read, Some(&dir.file(&format!("{name}.pcap")))));
    }
    t.push_str(
        r#"
[bridge]
static = [
  { mac = "02:00:00:00:10:05", vlan = 10, port = "h1" },
  { mac = "02:00:00:00:20:07", vlan = 20, port = "h2" },
  { mac = "02:00:00:00:10:33", vlan = 10, port = "trunk" },
]
[router]
mac = "02:fe:00:00:00:01"
"#,
    );
    for part in [lan_wan_interfaces(), lan_neigh(), wan_neigh()] {
        t.push_str(&part);
    }
    t.push_str(
        r#"
[conntrack]
max = 1000
[firewall]
allow_new_from = ["h1", "trunk"]
"#,
    );
    t
}

/// `name` or `name (tagged V)`: a frame leaving a port, as trace names outputs.
fn output(port: &str, frame: &[u8]) -> String {
    let mut p = Packet::from_frame(frame).unwrap();
    parse(&mut p).unwrap();
    if p.meta.vlan_depth > 0 && p.meta.vlan != NO_VLAN {
        format!("{port} (tagged {})", p.meta.vlan)
    } else {
        port.to_string()
    }
}

/// What the datapath does with `frame` on `in_port`: an offline run over pcap files.
fn datapath(dir: &TempDir, in_port: &str, frame: &[u8]) -> Verdict {
    let input = dir.file("input.pcap");
    write_pcap(&input, &[frame.to_vec()]);
    let res = run(&config_text(dir, Some((in_port, &input))));
    let mut outputs = BTreeSet::new();
    for port in PORTS {
        for f in read_pcap(dir.file(&format!("{port}.pcap"))) {
            outputs.insert(output(port, &f));
        }
    }
    let drops = res.last.drops();
    assert!(drops.len() <= 1, "one frame, one drop at most: {drops:?}");
    Verdict {
        outputs,
        dropped: drops.into_keys().next(),
    }
}

/// What `freeway ctl trace` answers for `frame` on `in_port`, on the same tables.
fn trace(dir: &TempDir, in_port: &str, frame: &[u8]) -> Verdict {
    let cfg = config::parse(&config_text(dir, None), "test", None).unwrap();
    let port = PORTS.iter().position(|p| *p == in_port).unwrap() as u16;
    let t = runtime::trace_config::<Padded>(&cfg, port, frame.to_vec()).unwrap();
    Verdict {
        outputs: t.outputs.iter().cloned().collect(),
        dropped: t.dropped,
    }
}

fn udp(src: [u8; 6], dst: [u8; 6], vlan: Option<u16>, sip: &str, dip: &str, ttl: u8) -> Vec<u8> {
    build_frame(&FrameSpec {
        src_mac: src,
        dst_mac: dst,
        vlan,
        src_ip: sip.parse::<IpAddr>().unwrap(),
        dst_ip: dip.parse::<IpAddr>().unwrap(),
        proto: L4::Udp,
        src_port: 1024,
        dst_port: 53,
        ttl,
        ..FrameSpec::default()
    })
}

/// A UDP frame from host h1 (untagged, 10.0.10.5) to `dst` at `dip`.
fn from_h1(dst: [u8; 6], dip: &str) -> Vec<u8> {
    udp(H1, dst, None, "10.0.10.5", dip, 64)
}

/// A UDP frame from the trunk's host (10.0.10.33) to `dst` at `dip`, tagged `vid`.
fn from_trunk(dst: [u8; 6], vid: u16, dip: &str) -> Vec<u8> {
    udp(T1, dst, Some(vid), "10.0.10.33", dip, 64)
}

/// `f` with its 802.1Q tag's type changed to 802.1ad (0x88a8).
fn s_tagged(mut f: Vec<u8>) -> Vec<u8> {
    assert_eq!(f[12..14], [0x81, 0x00]);
    f[12..14].copy_from_slice(&[0x88, 0xa8]);
    f
}

/// `f` (tagged) with a second, inner 802.1Q tag `inner` under its outer tag.
fn qinq(f: Vec<u8>, inner: u16) -> Vec<u8> {
    let mut v = s_tagged(f);
    let mut tag = vec![0x81, 0x00];
    tag.extend_from_slice(&inner.to_be_bytes());
    v.splice(16..16, tag);
    v
}

/// A TCP SYN from `src` to `dst` (IP `sip` to `dip`, port 40000 to 22).
fn syn(src: [u8; 6], dst: [u8; 6], sip: &str, dip: &str) -> Vec<u8> {
    build_frame(&FrameSpec {
        src_mac: src,
        dst_mac: dst,
        src_ip: sip.parse::<IpAddr>().unwrap(),
        dst_ip: dip.parse::<IpAddr>().unwrap(),
        proto: L4::Tcp { flags: tcp_flags::SYN },
        src_port: 40000,
        dst_port: 22,
        ttl: 64,
        ..FrameSpec::default()
    })
}

/// The frames traced, each with what it shows and the port it comes in by.
fn cases() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let bcast = [0xff; 6];
    let unknown = [0x02, 0, 0, 0, 0x99, 0x99];
    vec![
        ("bridged to a known host", "h1", from_h1(T1, "10.0.10.33")),
        ("flooded (unknown destination)", "h1", from_h1(unknown, "10.0.10.9")),
        ("flooded (broadcast)", "trunk", from_trunk(bcast, 10, "10.0.10.255")),
        (
            "STP BPDU group (a link-local group, never forwarded)",
            "h1",
            from_h1([0x01, 0x80, 0xc2, 0, 0, 0], "10.0.10.9"),
        ),
        (
            "LLDP group on the trunk (not in its group_fwd_mask)",
            "trunk",
            from_trunk([0x01, 0x80, 0xc2, 0, 0, 0x0e], 10, "10.0.10.9"),
        ),
        (
            "802.1ad tag on the trunk",
            "trunk",
            s_tagged(from_trunk(H1, 10, "10.0.10.5")),
        ),
        ("QinQ on the trunk", "trunk", qinq(from_trunk(H1, 10, "10.0.10.5"), 77)),
        (
            "VLAN-filtered (20 not on the trunk)",
            "trunk",
            from_trunk(H1, 20, "10.0.10.5"),
        ),
        (
            "VLAN-filtered 802.1ad",
            "trunk",
            s_tagged(from_trunk(H1, 20, "10.0.10.5")),
        ),
        (
            "tagged on an access port",
            "h1",
            udp(H1, T1, Some(10), "10.0.10.5", "10.0.10.33", 64),
        ),
        (
            "same-port",
            "h1",
            udp([0x02, 0, 0, 0, 0x10, 0x44], H1, None, "10.0.10.44", "10.0.10.5", 64),
        ),
        (
            "multicast source",
            "h1",
            udp([0x01, 0, 0x5e, 0, 0, 1], T1, None, "10.0.10.5", "10.0.10.33", 64),
        ),
        (
            "multicast source on a port the firewall refuses new connections from",
            "intruder",
            syn([0x01, 0, 0x5e, 0, 0, 1], ROUTER, "10.0.20.66", "10.0.10.5"),
        ),
        (
            "bridged inside VLAN 20",
            "intruder",
            udp([0x02, 0, 0, 0, 0x20, 0x66], H2, None, "10.0.20.66", "10.0.20.7", 64),
        ),
        ("routed LAN to WAN", "h1", from_h1(ROUTER, "10.0.20.7")),
        ("routed from the trunk", "trunk", from_trunk(ROUTER, 10, "10.0.20.7")),
        (
            "routed 802.1ad from the trunk",
            "trunk",
            s_tagged(from_trunk(ROUTER, 10, "10.0.20.7")),
        ),
        ("TTL expired", "h1", udp(H1, ROUTER, None, "10.0.10.5", "10.0.20.7", 1)),
        ("no route", "h1", from_h1(ROUTER, "192.0.2.1")),
        (
            "firewall: new from the WAN",
            "intruder",
            syn([0x02, 0, 0, 0, 0x20, 0x66], ROUTER, "10.0.20.66", "10.0.10.5"),
        ),
        (
            "firewall: new from the LAN",
            "h1",
            syn(H1, ROUTER, "10.0.10.5", "10.0.20.7"),
        ),
    ]
}

#[test]
fn trace_verdicts_equal_the_datapaths() {
    let dir = TempDir::new("trace-matches");
    let mut failures = Vec::new();
    for (what, port, frame) in &cases() {
        let d = datapath(&dir, port, frame);
        let t = trace(&dir, port, frame);
        if d != t {
            failures.push(format!("{what}: datapath {d:?}, trace {t:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "trace differs from the datapath:\n{}",
        failures.join("\n")
    );
}
