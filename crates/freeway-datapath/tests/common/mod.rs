//! Helpers shared by the integration tests: pcap files in and out, and the config text of
//! the two-subnet router most tests route through.

#![allow(dead_code)]

use std::path::Path;

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

/// Writes `frames` as a classic pcap file, one millisecond apart.
pub fn write_pcap(path: impl AsRef<Path>, frames: &[Vec<u8>]) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(f).unwrap();
    for (i, fr) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(
            std::time::Duration::from_millis(i as u64),
            fr.len() as u32,
            fr,
        ))
        .unwrap();
    }
}

/// The frames of a classic pcap file.
pub fn read_pcap(path: impl AsRef<Path>) -> Vec<Vec<u8>> {
    let path = path.as_ref();
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = PcapReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.into_owned());
    }
    v
}

/// The router's interfaces lan (VLAN 10, 10.0.10.1/24) and wan (VLAN 20, 10.0.20.1/24).
pub const LAN_WAN_INTERFACES: &str = r#"
[[interface]]
name = "lan"
vlan = 10
addr = ["10.0.10.1/24"]
[[interface]]
name = "wan"
vlan = 20
addr = ["10.0.20.1/24"]
"#;

/// The LAN host 10.0.10.5 as a permanent neighbour.
pub const LAN_NEIGH: &str = r#"
[[neigh]]
ip = "10.0.10.5"
mac = "02:00:00:00:10:05"
dev = "lan"
"#;

/// The WAN host 10.0.20.7 as a permanent neighbour.
pub const WAN_NEIGH: &str = r#"
[[neigh]]
ip = "10.0.20.7"
mac = "02:00:00:00:20:07"
dev = "wan"
"#;
