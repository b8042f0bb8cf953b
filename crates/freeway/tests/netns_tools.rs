//! The daemon and its clients between namespaces: `freeway capture -c 10` on a running
//! Freeway ends the tap, never the forwarding (100 pings cross while it runs and none is
//! lost), and `freeway fdb`/`freeway neigh`-style clients read the daemon's tables.
//!
//! Needs root: see `netbed` (a loud skip elsewhere, a failure under CI).

#[macro_use]
mod netbed;

use std::process::Command;

use netbed::*;

#[test]
fn a_capture_of_ten_packets_on_the_daemon_loses_no_ping() {
    need_root!();
    let mut bed = Bed::bridged_ctl("cap10");
    let file = bed.dir.join("ten.pcap");
    let sock = bed.sock();
    let cap = bed.capture(&["-i", "h2", "-c", "10"], &file, "icmp");
    let o = bed.exec("h1", &["ping", "-q", "-c", "100", "-i", "0.02", "-W", "1", "10.0.0.2"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("100 received"),
        "no ping lost while the capture ran and ended: {text}"
    );
    let out = cap.wait_with_output().expect("the capture ends by itself at -c 10");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("10 packets captured"), "tcpdump's summary: {err}");
    if let Some(lines) = freeway_testkit::tcpdump(&file, &["-n"]) {
        assert_eq!(lines.lines().count(), 10, "{lines}");
        assert!(lines.lines().all(|l| l.contains("ICMP echo")), "{lines}");
    }
    // The tap is detached (listed as ended, as the daemon keeps a record of past taps); the
    // datapath still forwards.
    let taps = bed.ctl(&["capture", "list"]);
    let taps = taps["data"].as_array().unwrap();
    assert!(
        taps.iter().all(|t| t["state"].as_str().unwrap().starts_with("ended")),
        "{taps:?}"
    );
    assert!(bed.ping("h1", "10.0.0.2"));
    // The table clients read the daemon.
    let fdb = Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args(["fdb", "-j", "--ctl", sock.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(fdb.status.success(), "{}", String::from_utf8_lossy(&fdb.stderr));
    let j: serde_json::Value = serde_json::from_slice(&fdb.stdout).unwrap();
    assert!(j.as_array().is_some_and(|a| a.len() >= 2), "h1 and h2 learned: {j}");
    bed.stop();
}
