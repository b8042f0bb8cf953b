//! pcap in → bridge → pcap out, read back and checked frame by frame against what a bridge
//! must do: VLAN classification and tagging, flooding, static entries, same-port drops, and
//! drops of malformed frames and multicast sources.

mod common;
use common::{access, csum, pcap_port, read_pcap, run, write_pcap, TempDir};

fn mac(last: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, last]
}

/// Ethernet (+802.1Q) / IPv4 / UDP frame, 60 bytes before any tag.
fn frame(src: [u8; 6], dst: [u8; 6], vlan: Option<u16>, id: u8) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0x45, 0, 0, 46, 0, id, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    let sum = csum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 26, 0, 0]);
    f.extend(std::iter::repeat_n(id, 18));
    f
}

fn untagged(f: &[u8]) -> Vec<u8> {
    let mut v = f[..12].to_vec();
    v.extend_from_slice(&f[16..]);
    v
}

#[test]
fn pcap_through_the_bridge_is_forwarded_as_a_bridge_must() {
    let dir = TempDir::new("pcap-bridge");
    let (a, b, c, x) = (mac(0xa), mac(0xb), mac(0xc), mac(0x99));
    let bcast = [0xff; 6];
    // Frames as they arrive on the trunk port p0 (VLANs 10 and 20).
    let f1 = frame(a, bcast, Some(10), 1); // flood VLAN 10: p1 untagged, p3 tagged
    let f2 = frame(b, a, Some(10), 2); // A was learned on p0: same-port drop
    let f3 = frame(c, x, Some(10), 3); // static X on p3: unicast to p3 only, tagged
    let f4 = frame(a, c, Some(20), 4); // VLAN 20: C unknown there, flood to p2 only
    let f5 = frame(a, bcast, None, 5); // untagged on a trunk without native VLAN: filtered
    let f6 = frame([0x01, 0, 0x5e, 0, 0, 1], b, Some(10), 6); // multicast source: dropped
    let f7 = f1[..20].to_vec(); // truncated inside the IPv4 header: parse drop
    let f8 = frame(c, b, Some(30), 8); // VLAN 30 not on the trunk: filtered
    let input = vec![f1.clone(), f2, f3.clone(), f4.clone(), f5, f6, f7, f8];
    let [inp, p1, p2, p3] = dir.files(["in.pcap", "p1.pcap", "p2.pcap", "p3.pcap"]);
    write_pcap(&inp, &input);

    let res = run(&[
        "workers = 1\n".to_string(),
        pcap_port("p0", r#"{ mode = "trunk", vlans = ["10", "20"] }"#, Some(&inp), None),
        pcap_port("p1", &access(10), None, Some(&p1)),
        pcap_port("p2", &access(20), None, Some(&p2)),
        pcap_port("p3", r#"{ mode = "trunk", vlans = ["10"] }"#, None, Some(&p3)),
        "[bridge]\nstatic = [{ mac = \"02:00:00:00:00:99\", vlan = 10, port = \"p3\" }]\n".to_string(),
    ]
    .concat());

    assert_eq!(read_pcap(&p1), vec![untagged(&f1)]);
    assert_eq!(read_pcap(&p2), vec![untagged(&f4)]);
    // p3 is a trunk: frames leave tagged, as they came in.
    assert_eq!(read_pcap(&p3), vec![f1.clone(), f3.clone()]);

    let s = &res.last;
    assert_eq!(s.ports[0].rx_packets, 8);
    assert_eq!(s.bridge["drop_same_port"], 1);
    assert_eq!(s.bridge["drop_src_multicast"], 1);
    assert_eq!(s.bridge["drop_vlan_filtered"], 2);
    assert_eq!(s.parse_drops.values().sum::<u64>(), 1);
    assert_eq!(s.bridge["forwarded"], 1);
    assert_eq!(s.bridge["flooded"], 2);

    // The FDB at the end: A in 10 and 20, B and C in 10 on p0, and the static X.
    let fdb: Vec<(String, u16, u16, bool)> = res
        .fdb
        .iter()
        .map(|e| (e.mac.to_string(), e.vlan, e.port, e.is_static))
        .collect();
    assert_eq!(
        fdb,
        vec![
            ("02:00:00:00:00:0a".into(), 10, 0, false),
            ("02:00:00:00:00:0b".into(), 10, 0, false),
            ("02:00:00:00:00:0c".into(), 10, 0, false),
            ("02:00:00:00:00:99".into(), 10, 3, true),
            ("02:00:00:00:00:0a".into(), 20, 0, false),
        ]
    );

    // tcpdump must open what we wrote.
    if let Some(text) = freeway_testkit::tcpdump(p3.as_ref(), &["-n", "-e"]) {
        assert_eq!(text.lines().count(), 2, "tcpdump output:\n{text}");
        assert!(text.contains("vlan 10"), "tcpdump output:\n{text}");
    }
}

#[test]
fn frames_from_a_group_source_are_dropped_before_conntrack_tracks_them() {
    let dir = TempDir::new("group-src");
    let [inp, p1] = dir.files(["in.pcap", "p1.pcap"]);
    let (a, b) = (mac(0xa), mac(0xb));
    let multicast_src = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01];
    let bcast = [0xff; 6];
    // Three frames from group sources, each a new UDP flow (`frame` gives 10.0.0.1 -> 10.0.0.2,
    // port 12345 -> 53), then one from a unicast source: only that one is a connection.
    let mut good = frame(a, b, None, 4);
    good[26..30].copy_from_slice(&[10, 0, 0, 9]);
    good[24..26].copy_from_slice(&[0, 0]);
    let ip_csum = csum(&good[14..34]);
    good[24..26].copy_from_slice(&ip_csum.to_be_bytes());
    write_pcap(
        &inp,
        &[
            frame(multicast_src, b, None, 1),
            frame(bcast, b, None, 2),
            frame(multicast_src, bcast, None, 3),
            good,
        ],
    );
    let res = run(&format!(
        "workers = 1\n{}{}[conntrack]\nmax = 100\n",
        pcap_port("p0", &access(10), Some(&inp), None),
        pcap_port("p1", &access(10), None, Some(&p1)),
    ));
    let s = &res.last;
    assert_eq!(s.ports[0].rx_packets, 4);
    assert_eq!(s.bridge["drop_src_multicast"], 3);
    assert_eq!(
        s.bridge["rx"], 4,
        "counted as frames that entered the bridge, as before"
    );
    assert_eq!(s.bridge["flooded"], 1);
    let ct = s.conntrack.as_ref().unwrap();
    assert_eq!((ct.connections, ct.created), (1, 1), "{ct:?}");
    let conns: Vec<String> = res.connections.iter().map(|c| c.orig.src.to_string()).collect();
    assert_eq!(conns, ["10.0.0.9"]);
    assert_eq!(read_pcap(&p1).len(), 1);
}

/// Isolated ports and IEEE link-local groups, pcap in to pcap out: from an isolated port a
/// broadcast reaches only the non-isolated port, unicast to a station behind another
/// isolated port is dropped (`bridge:isolated`), to one behind the non-isolated port it
/// goes; a frame to the STP group goes nowhere (`bridge:link_local`), and one to LLDP goes
/// only from a port whose `group_fwd_mask` allows it.
#[test]
fn isolated_ports_and_link_local_groups() {
    let dir = TempDir::new("pcap-isolated");
    let [in0, in2, out1, out2] = dir.files(["in0.pcap", "in2.pcap", "out1.pcap", "out2.pcap"]);
    let (a, b, c) = (mac(0xa), mac(0xb), mac(0xc));
    let (stp, lldp) = ([0x01, 0x80, 0xc2, 0, 0, 0], [0x01, 0x80, 0xc2, 0, 0, 0x0e]);
    let from_p0 = [
        frame(a, [0xff; 6], None, 1), // broadcast: p2 only (p1 is isolated too)
        frame(a, b, None, 2),         // to B, static on isolated p1: dropped
        frame(a, c, None, 3),         // to C, static on p2: forwarded
        frame(a, stp, None, 4),       // STP group: never forwarded
        frame(a, lldp, None, 5),      // LLDP: p0 has no group_fwd_mask: dropped
    ];
    let from_p2 = [frame(c, lldp, None, 6)]; // LLDP from p2 (mask 0x4000): to p1 and p0
    write_pcap(&in0, &from_p0);
    write_pcap(&in2, &from_p2);
    let text = format!(
        "{}isolated = true\n{}isolated = true\n{}group_fwd_mask = 0x4000\n[bridge]\nstatic = [\
         {{ mac = \"02:00:00:00:00:0b\", vlan = 1, port = \"p1\" }}, \
         {{ mac = \"02:00:00:00:00:0c\", vlan = 1, port = \"p2\" }}]\n",
        pcap_port("p0", "", Some(&in0), None),
        pcap_port("p1", "", None, Some(&out1)),
        pcap_port("p2", "", Some(&in2), Some(&out2)),
    );
    let res = run(&text);
    assert_eq!(read_pcap(&out2), vec![from_p0[0].clone(), from_p0[2].clone()]);
    assert_eq!(
        read_pcap(&out1),
        vec![from_p2[0].clone()],
        "only the LLDP frame p2 may forward"
    );
    let drops = res.last.drops();
    assert_eq!(drops.get("bridge:isolated"), Some(&1), "{drops:?}");
    assert_eq!(drops.get("bridge:link_local"), Some(&2), "{drops:?}");
}
