//! Every frame a port loses before a worker sees it is a drop the user can see: a frame too
//! big for its buffer, read from a pcap file, shows up in the stats table's drops, in the
//! snapshot's JSON (`freeway run -j`) and in the Prometheus text (`--metrics`).

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::report;
use freeway_datapath::runtime::{self, RunOptions};

mod common;
use common::write_pcap;

/// A broadcast Ethernet frame of `len` bytes.
fn frame(len: usize, id: u8) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, id]);
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype: bridged, not parsed further
    f.resize(len, id);
    f
}

#[test]
fn a_pcap_frame_too_big_for_its_buffer_is_a_visible_drop() {
    let dir = std::env::temp_dir().join(format!("freeway-port-drops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inp = dir.join("in.pcap");
    write_pcap(&inp, &[frame(60, 1), frame(9000, 2), frame(60, 3)]);
    let text = format!(
        r#"
workers = 1
[[port]]
name = "wan"
kind = "pcap"
pcap = {{ read = "{}" }}
[[port]]
name = "lan"
kind = "pcap"
pcap = {{ write = "{}" }}
"#,
        inp.display(),
        dir.join("out.pcap").display(),
    );
    let cfg = config::parse(&text, "test", None).unwrap();
    let res = runtime::run::<Padded>(&cfg, RunOptions::default()).unwrap();
    let s = &res.last;
    assert_eq!(s.ports[0].rx_packets, 2, "the two small frames reached the worker");
    assert_eq!(s.ports[0].rx_dropped, 1);
    assert_eq!(s.ports[0].rx_drops.get("too_big"), Some(&1));
    assert_eq!(s.ports[1].rx_dropped, 0);

    // The stats table (`freeway run`'s summary) and `ctl stats` read `drops()`.
    assert_eq!(s.drops().get("port:wan:too_big"), Some(&1), "{:?}", s.drops());
    let mut table = Vec::new();
    report::write_summary(&mut table, s).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(table.contains("port:wan:too_big 1"), "stats table:\n{table}");
    assert!(!table.contains("drops: none"), "stats table:\n{table}");

    // `-j`: the snapshot as JSON carries the drop, by port and in the drops map.
    let j = serde_json::to_value(s).unwrap();
    assert_eq!(j["drops"]["port:wan:too_big"], 1, "{j}");
    assert_eq!(j["ports"][0]["rx_dropped"], 1, "{j}");
    assert_eq!(j["ports"][0]["rx_drops"]["too_big"], 1, "{j}");
    assert_eq!(j["ports"][0]["counters"]["pcap_too_big"], 1, "{j}");

    // Prometheus.
    let m = runtime::metrics_text(s);
    assert!(
        m.lines()
            .any(|l| l.starts_with("freeway_drops_total{") && l.contains("port:wan:too_big") && l.ends_with(" 1")),
        "metrics:\n{m}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
