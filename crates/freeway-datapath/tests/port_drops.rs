//! Every frame a port loses before a worker sees it is a drop the user can see: a frame too
//! big for its buffer, read from a pcap file, shows up in the stats table's drops, in the
//! snapshot's JSON (`freeway run -j`) and in the Prometheus text (`--metrics`).

use freeway_datapath::report;
use freeway_datapath::runtime;

mod common;
use common::{pcap_port, run, write_pcap, TempDir};

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
    let dir = TempDir::new("port-drops");
    let [inp, out] = dir.files(["in.pcap", "out.pcap"]);
    write_pcap(&inp, &[frame(60, 1), frame(9000, 2), frame(60, 3)]);
    let res = run(&format!(
        "workers = 1\n{}{}",
        pcap_port("wan", "", Some(&inp), None),
        pcap_port("lan", "", None, Some(&out)),
    ));
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
}
