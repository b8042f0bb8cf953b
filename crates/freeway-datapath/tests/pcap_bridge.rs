//! pcap in → bridge → pcap out, read back and checked frame by frame against what a bridge
//! must do: VLAN classification and tagging, flooding, static entries, same-port drops, and
//! drops of malformed frames and multicast sources.

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions};

mod common;
use common::{read_pcap, write_pcap};

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
    let sum = {
        let mut s: u32 = 0;
        for c in ip.chunks(2) {
            s += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    };
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
    let dir = std::env::temp_dir().join(format!("freeway-pcap-bridge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
    let inp = dir.join("in.pcap");
    write_pcap(&inp, &input);

    let text = format!(
        r#"
workers = 1
[[port]]
name = "p0"
kind = "pcap"
pcap = {{ read = "{}" }}
vlan = {{ mode = "trunk", vlans = ["10", "20"] }}
[[port]]
name = "p1"
kind = "pcap"
pcap = {{ write = "{}" }}
vlan = {{ mode = "access", vlan = 10 }}
[[port]]
name = "p2"
kind = "pcap"
pcap = {{ write = "{}" }}
vlan = {{ mode = "access", vlan = 20 }}
[[port]]
name = "p3"
kind = "pcap"
pcap = {{ write = "{}" }}
vlan = {{ mode = "trunk", vlans = ["10"] }}
[bridge]
static = [{{ mac = "02:00:00:00:00:99", vlan = 10, port = "p3" }}]
"#,
        inp.display(),
        dir.join("p1.pcap").display(),
        dir.join("p2.pcap").display(),
        dir.join("p3.pcap").display()
    );
    let cfg = config::parse(&text, "test", None).unwrap();
    let res = runtime::run::<Padded>(&cfg, RunOptions::default()).unwrap();
    assert!(res.close_errors.is_empty(), "{:?}", res.close_errors);

    assert_eq!(read_pcap(dir.join("p1.pcap")), vec![untagged(&f1)]);
    assert_eq!(read_pcap(dir.join("p2.pcap")), vec![untagged(&f4)]);
    // p3 is a trunk: frames leave tagged, as they came in.
    assert_eq!(read_pcap(dir.join("p3.pcap")), vec![f1.clone(), f3.clone()]);

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
    match std::process::Command::new("tcpdump")
        .args(["-n", "-e", "-r"])
        .arg(dir.join("p3.pcap"))
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "tcpdump failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(text.lines().count(), 2, "tcpdump output:\n{text}");
            assert!(text.contains("vlan 10"), "tcpdump output:\n{text}");
        }
        Err(e) => freeway_testkit::skip(format!(
            "tcpdump cannot run ({e}); pcap output not checked with tcpdump"
        )),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn frames_from_a_group_source_are_dropped_before_conntrack_tracks_them() {
    let dir = std::env::temp_dir().join(format!("freeway-group-src-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inp = dir.join("in.pcap");
    let (a, b) = (mac(0xa), mac(0xb));
    let multicast_src = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01];
    let bcast = [0xff; 6];
    // Three frames from group sources, each a new UDP flow (`frame` gives 10.0.0.1 -> 10.0.0.2,
    // port 12345 -> 53), then one from a unicast source: only that one is a connection.
    let mut good = frame(a, b, None, 4);
    good[26..30].copy_from_slice(&[10, 0, 0, 9]);
    let ip_csum = {
        good[24..26].copy_from_slice(&[0, 0]);
        let mut s: u32 = good[14..34]
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    };
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
    let text = format!(
        r#"
workers = 1
[[port]]
name = "p0"
kind = "pcap"
pcap = {{ read = "{}" }}
vlan = {{ mode = "access", vlan = 10 }}
[[port]]
name = "p1"
kind = "pcap"
pcap = {{ write = "{}" }}
vlan = {{ mode = "access", vlan = 10 }}
[conntrack]
max = 100
"#,
        inp.display(),
        dir.join("p1.pcap").display()
    );
    let cfg = config::parse(&text, "test", None).unwrap();
    let res = runtime::run::<Padded>(&cfg, RunOptions::default()).unwrap();
    assert!(res.close_errors.is_empty(), "{:?}", res.close_errors);
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
    assert_eq!(read_pcap(dir.join("p1.pcap")).len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
