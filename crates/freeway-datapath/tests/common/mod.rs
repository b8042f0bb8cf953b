//! Helpers shared by the integration tests: a scratch directory (the test kit's), pcap files
//! in and out, the config text of ports and of the two-subnet router most tests route
//! through, and one offline run of a config.

#![allow(dead_code)]

use std::path::Path;

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions, RunResult};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

pub use freeway_testkit::TempDir;

/// The Internet checksum of `data` (RFC 1071), computed here independently of the datapath.
pub fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        let hi = c[0];
        let lo = c.get(1).copied().unwrap_or(0);
        s += u32::from(u16::from_be_bytes([hi, lo]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The port config value of an access port in VLAN `vlan`.
pub fn access(vlan: u16) -> String {
    format!(r#"{{ mode = "access", vlan = {vlan} }}"#)
}

/// A `[[port]]` of `kind`, with `vlan` (a port config value such as [`access`]'s, or "" for
/// the default) and the kind's own table `table` (without its braces, "" for none).
pub fn port(name: &str, kind: &str, vlan: &str, table: &str) -> String {
    let mut p = format!("[[port]]\nname = \"{name}\"\nkind = \"{kind}\"\n");
    if !table.is_empty() {
        p.push_str(&format!("{kind} = {{ {table} }}\n"));
    }
    if !vlan.is_empty() {
        p.push_str(&format!("vlan = {vlan}\n"));
    }
    p
}

/// A pcap `[[port]]` reading the file `read` and writing `write` (either may be absent).
pub fn pcap_port(name: &str, vlan: &str, read: Option<&str>, write: Option<&str>) -> String {
    let files: Vec<String> = [("read", read), ("write", write)]
        .into_iter()
        .filter_map(|(k, f)| f.map(|f| format!("{k} = \"{f}\"")))
        .collect();
    port(name, "pcap", vlan, &files.join(", "))
}

/// Parses `text` and runs it offline to the end; no port may fail to close.
pub fn run(text: &str) -> RunResult {
    let cfg = config::parse(text, "test.toml", None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let res = runtime::run::<Padded>(&cfg, RunOptions::default()).unwrap();
    assert!(res.close_errors.is_empty(), "{:?}", res.close_errors);
    res
}

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

/// A router `[[interface]]` on VLAN `vlan` with the addresses `addrs`.
pub fn interface(name: &str, vlan: u16, addrs: &[&str]) -> String {
    let addrs: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[[interface]]\nname = \"{name}\"\nvlan = {vlan}\naddr = [{}]\n",
        addrs.join(", ")
    )
}

/// The router's interfaces lan (VLAN 10, 10.0.10.1/24) and wan (VLAN 20, 10.0.20.1/24).
pub fn lan_wan_interfaces() -> String {
    interface("lan", 10, &["10.0.10.1/24"]) + &interface("wan", 20, &["10.0.20.1/24"])
}

/// A permanent neighbour `[[neigh]]`: `ip` at `mac` on the interface `dev`.
pub fn neigh(ip: &str, mac: &str, dev: &str) -> String {
    format!("[[neigh]]\nip = \"{ip}\"\nmac = \"{mac}\"\ndev = \"{dev}\"\n")
}

/// The LAN host 10.0.10.5 as a permanent neighbour.
pub fn lan_neigh() -> String {
    neigh("10.0.10.5", "02:00:00:00:10:05", "lan")
}

/// The WAN host 10.0.20.7 as a permanent neighbour.
pub fn wan_neigh() -> String {
    neigh("10.0.20.7", "02:00:00:00:20:07", "wan")
}
