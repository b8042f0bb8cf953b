//! The built-in demo runs end to end on generator ports: the bridge learns the hosts,
//! forwards by the FDB and accounts for every frame.

use std::time::Duration;

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions};

#[test]
fn default_config_bridges_generator_traffic() {
    let cfg = config::parse(config::DEFAULT_CONFIG, "default", None).unwrap();
    let mut snaps = 0;
    let mut cb = |_: &runtime::Snapshot| snaps += 1;
    let res = runtime::run::<Padded>(
        &cfg,
        RunOptions {
            duration: Some(Duration::from_millis(800)),
            interval: Duration::from_millis(200),
            on_snapshot: Some(&mut cb),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(snaps >= 2, "snapshots were not delivered");
    let s = &res.last;
    let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
    assert!(rx > 1000, "generators sent too little: {rx}");
    // Three hosts learned, nothing else.
    assert_eq!(s.fdb_entries, 3, "{:?}", res.fdb);
    // Every frame was forwarded or flooded, none dropped.
    assert_eq!(s.bridge["rx"], rx);
    assert_eq!(s.bridge["forwarded"] + s.bridge["flooded"], rx);
    assert!(s.drops().is_empty(), "{:?}", s.drops());
    // Once learned, forwarding dominates; flooding only happens before learning.
    assert!(s.bridge["forwarded"] > 10 * s.bridge["flooded"], "{:?}", s.bridge);
    // The monitor sink saw exactly the flood copies that were for it.
    let monitor = s.ports.iter().find(|p| p.name == "monitor").unwrap();
    assert_eq!(monitor.rx_packets, 0);
    assert_eq!(monitor.tx_packets, s.bridge["flooded"]);
    // Transmitted = forwarded + flood copies.
    let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
    assert_eq!(tx, s.bridge["forwarded"] + s.bridge["flood_copies"]);
}

#[test]
fn a_mac_flood_stops_at_the_learning_limit() {
    let text = r#"
workers = 2
duration_secs = 0.6
[[port]]
name = "attacker"
kind = "gen"
gen = { src_mac_count = 100000, dst_macs = ["02:00:00:00:00:02"], flows = 100000 }
[[port]]
name = "victim"
kind = "sink"
[bridge]
learn_limit = 1000
"#;
    let cfg = config::parse(text, "flood", None).unwrap();
    let res = runtime::run::<Padded>(&cfg, RunOptions::default()).unwrap();
    let s = &res.last;
    assert_eq!(s.fdb_entries, 1000);
    assert!(s.fdb["limit_reached"] > 0, "{:?}", s.fdb);
}
