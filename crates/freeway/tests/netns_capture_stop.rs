//! `freeway capture -w FILE` on a running daemon, stopped as tcpdump is (Ctrl-C, or SIGTERM
//! from a service manager) while pings cross the bridge: the file is whole (tcpdump reads
//! every record, and there are as many as the summary's "captured"), the summary is printed
//! (captured, received by filter, dropped by the tap), the daemon no longer runs the tap,
//! and the traffic still crosses.
//!
//! Needs root: see `netbed` (a loud skip elsewhere, a failure under CI).

#[macro_use]
mod netbed;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netbed::*;

/// The number in the summary line that ends with `what` ("packets captured").
fn figure(summary: &str, what: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.strip_suffix(what))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no \"N {what}\" line in the summary: {summary}"))
}

/// The records of a pcap file; each must be whole, up to the end of the file.
fn records(bytes: &[u8]) -> usize {
    let mut r = pcap_file::pcap::PcapReader::new(bytes).expect("a pcap header");
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        p.expect("a whole pcap record");
        n += 1;
    }
    n
}

#[test]
fn sigint_and_sigterm_end_a_live_capture_whole_with_its_summary_and_no_tap_left() {
    need_root!();
    let mut bed = Bed::bridged_ctl("capstop");
    // Pings every 10 ms for as long as the test runs.
    let mut pinger = Command::new("ip")
        .args(["netns", "exec", &format!("fw-h1{}", bed.suffix)])
        .args(["ping", "-q", "-i", "0.01", "10.0.0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ping starts");
    for sig in ["INT", "TERM"] {
        let file = bed.dir.join(format!("{sig}.pcap"));
        let cap = bed.capture(&["-i", "h2"], &file, "icmp");
        // The client writes through a buffer: once the file has bytes, the tap has seen
        // packets (dozens of them) and more are on the way.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::metadata(&file).map_or(0, |m| m.len()) == 0 {
            assert!(Instant::now() < deadline, "SIG{sig}: the capture never wrote a record");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(Command::new("kill")
            .args([&format!("-{sig}"), &cap.id().to_string()])
            .status()
            .unwrap()
            .success());
        let out = cap.wait_with_output().expect("the capture ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "SIG{sig}: {err}");
        // The summary, as tcpdump prints it.
        let captured = figure(&err, " packets captured");
        let seen = figure(&err, " packets received by filter");
        let dropped = figure(&err, " packets dropped by tap");
        assert!(captured > 0, "SIG{sig}: {err}");
        assert!(seen >= captured + dropped, "SIG{sig}: {err}");
        // The file: every record whole, as many as captured, and tcpdump reads them all.
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(records(&bytes) as u64, captured, "SIG{sig}: {err}");
        if let Some(lines) = freeway_testkit::tcpdump(&file, &["-n"]) {
            assert_eq!(lines.lines().count() as u64, captured, "SIG{sig}: {lines}");
            assert!(lines.lines().all(|l| l.contains("ICMP echo")), "SIG{sig}: {lines}");
        }
        // The tap is gone from the daemon (listed as ended, never running).
        let taps = bed.ctl(&["capture", "list"]);
        let taps = taps["data"].as_array().unwrap();
        assert!(!taps.is_empty(), "SIG{sig}: the daemon keeps a record of past taps");
        assert!(
            taps.iter().all(|t| t["state"] != "running"),
            "SIG{sig}: no tap left running: {taps:?}"
        );
        // And the bridge still forwards.
        assert!(bed.ping("h3", "10.0.0.2"), "SIG{sig}: h3 pings h2 after the capture");
    }
    let _ = pinger.kill();
    let _ = pinger.wait();
    bed.stop();
}
