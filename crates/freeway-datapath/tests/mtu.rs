//! MTUs: `mtu = N` on ports and router interfaces is range checked with a clear error;
//! frames up to a port's MTU get buffers that hold them (jumbo frames through pcap ports);
//! the bridge drops a frame larger than its egress port's MTU, counted in the drops.

use freeway_datapath::config;

mod common;
use common::{pcap_port, read_pcap, run, write_pcap, TempDir};

/// A broadcast Ethernet frame of `len` bytes (a local experimental ethertype: bridged, not
/// parsed further).
fn frame(len: usize, id: u8) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, id]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.resize(len, id);
    f
}

fn refused(text: &str, line: usize, names: &[&str]) {
    let e = config::parse(text, "t.toml", None).expect_err("config should be refused");
    assert_eq!(e.line, Some(line), "{e}");
    for n in names {
        assert!(e.to_string().contains(n), "{n}: {e}");
    }
}

#[test]
fn port_and_interface_mtus_are_range_checked() {
    let port = |extra: &str| format!("[[port]]\nname = \"a\"\nkind = \"sink\"\n{extra}");
    let c = config::parse(&port(""), "t.toml", None).unwrap();
    assert_eq!(c.ports[0].mtu, 1500, "the default");
    let c = config::parse(&port("mtu = 9000\n"), "t.toml", None).unwrap();
    assert_eq!(c.ports[0].mtu, 9000);
    refused(&port("mtu = 9217\n"), 4, &["port \"a\"", "mtu 9217", "68..=9216"]);
    refused(&port("mtu = 40\n"), 4, &["mtu 40"]);
    let xdp = |mtu: u32| {
        format!("[[port]]\nname = \"x\"\nkind = \"afxdp\"\nafxdp = {{ iface = \"eth0\", frame_size = 4096 }}\nmtu = {mtu}\n")
    };
    assert!(config::parse(&xdp(3818), "t.toml", None).is_ok());
    refused(&xdp(9000), 5, &["does not fit an AF_XDP chunk", "at most 3818"]);
    let pkt = config::parse(
        "[[port]]\nname = \"p\"\nkind = \"afpacket\"\nafpacket = { iface = \"eth0\" }\nmtu = 9000\n",
        "t.toml",
        None,
    )
    .unwrap();
    let a = pkt.ports[0].afpacket.as_ref().unwrap();
    assert!(
        a.max_frame_len() >= 9000 + 22,
        "ring slots grow with the MTU: {}",
        a.frame_size
    );

    let iface = |addr: &str, mtu: u32| {
        format!(
            "[[port]]\nname = \"a\"\nkind = \"sink\"\nvlan = {{ mode = \"access\", vlan = 10 }}\n\
             [[interface]]\nname = \"v10\"\nvlan = 10\naddr = [\"{addr}\"]\nmtu = {mtu}\n"
        )
    };
    let c = config::parse(&iface("10.0.0.1/24", 1400), "t.toml", None).unwrap();
    assert_eq!(c.router.unwrap().interfaces[0].mtu, 1400);
    assert!(config::parse(&iface("10.0.0.1/24", 68), "t.toml", None).is_ok());
    refused(&iface("10.0.0.1/24", 67), 9, &["v10", "mtu 67", "68..=9216"]);
    refused(&iface("2001:db8::1/64", 1000), 9, &["mtu 1000", "1280"]);
    refused(&iface("10.0.0.1/24", 10000), 9, &["mtu 10000"]);
}

#[test]
fn jumbo_frames_cross_a_bridge_of_jumbo_ports() {
    let dir = TempDir::new("mtu-jumbo");
    let [inp, out] = dir.files(["in.pcap", "out.pcap"]);
    let frames = vec![frame(60, 1), frame(9014, 2), frame(1514, 3), frame(4000, 4)];
    write_pcap(&inp, &frames);
    let res = run(&format!(
        "workers = 1\n{}mtu = 9000\n{}mtu = 9000\n",
        pcap_port("wan", "", Some(&inp), None),
        pcap_port("lan", "", None, Some(&out)),
    ));
    assert_eq!(
        read_pcap(&out),
        frames,
        "every frame, jumbo ones included, whole and in order"
    );
    assert!(res.last.drops().is_empty(), "{:?}", res.last.drops());
}

#[test]
fn the_bridge_drops_frames_over_the_egress_ports_mtu() {
    let dir = TempDir::new("mtu-egress");
    let [inp, out] = dir.files(["in.pcap", "out.pcap"]);
    // 1514 bytes: a 1500-byte payload, the most a 1500 port sends; 1515 is one too many.
    write_pcap(&inp, &[frame(1514, 1), frame(1515, 2), frame(9014, 3), frame(60, 4)]);
    let res = run(&format!(
        "workers = 1\n{}mtu = 9000\n{}",
        pcap_port("wan", "", Some(&inp), None),
        pcap_port("lan", "", None, Some(&out)),
    ));
    assert_eq!(read_pcap(&out), vec![frame(1514, 1), frame(60, 4)]);
    let s = &res.last;
    assert_eq!(s.ports[1].tx_over_mtu, 2);
    assert_eq!(s.drops().get("bridge:egress_over_mtu"), Some(&2), "{:?}", s.drops());
}
