//! A routing daemon drives Freeway: BIRD 2 in Freeway's namespace speaks BGP through the
//! punt path (the interfaces' kernel twins) to a BIRD peer behind Freeway (in h2's namespace)
//! that announces 1,000 prefixes, and exports them to the kernel's main table, which Freeway
//! mirrors (`[linux] punt` and `mirror`).
//!
//! Checked: the 1,000 routes reach Freeway's RIB (and FIB) within 5 s of being in the kernel
//! table; traffic to an announced prefix flows through Freeway to the peer; a withdrawn
//! prefix stops being forwarded (counted as no route); the BGP session stays established,
//! never going down, through 60 s of TCP at the highest rate the bed carries (iperf3, four
//! streams through the router).

#[macro_use]
mod netbed;
use netbed::*;

use netbed::bird::{bird_installed, wait_for, Bird};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Sends TCP from `from` to `dst` (an address of `to`) for `secs` seconds with iperf3 (four
/// streams, as fast as they go); returns the bytes received.
fn iperf3(bed: &Bed, from: &str, to: &str, dst: &str, secs: u32) -> u64 {
    let ns = |h: &str| format!("fw-{h}{}", bed.suffix);
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &ns(to), "iperf3", "-s", "-1"])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3 -s starts");
    let listening = wait_for(Duration::from_secs(10), || {
        let o = bed.sh(to, "ss -Htln 'sport = :5201'");
        !o.stdout.is_empty()
    });
    assert!(listening.is_some(), "iperf3's server listens");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns(from), "iperf3", "-c", dst, "-P", "4", "-J", "-t"])
        .arg(secs.to_string())
        .output()
        .expect("iperf3 -c runs");
    let _ = srv.kill();
    let _ = srv.wait();
    assert!(out.status.success(), "iperf3: {}", String::from_utf8_lossy(&out.stdout));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3's JSON");
    j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0)
}

fn iperf3_installed() -> bool {
    Command::new("sh")
        .args(["-c", "command -v iperf3"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

const PREFIXES: usize = 1000;

fn bird_routes(bed: &Bed) -> usize {
    let r = bed.ctl(&["route", "show"]);
    r["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["protocol"] == "bird")
        .count()
}

#[test]
fn bird_announces_over_bgp_through_the_punt_path_and_freeway_forwards() {
    need_root!();
    if !bird_installed() || !iperf3_installed() {
        freeway_testkit::skip("bird2 (bird, birdc) or iperf3 is not installed");
        return;
    }
    let mut bed = Bed::two_subnets("bird");
    // h2 owns an address in an announced prefix and in the one that will be withdrawn.
    bed.sh_ok(
        "h2",
        "ip addr add 172.16.5.1/32 dev lo && ip addr add 172.31.0.1/32 dev lo",
    );
    let mut cfg = routed_ports();
    cfg.push_str("\n[linux]\npunt = true\nmirror = true\nprotocols = [\"bird\"]\n");
    bed.start_ctl(&cfg);

    // The peer: 999 prefixes in one static protocol, 1 in another (withdrawn later).
    let mut routes = String::new();
    for i in 0..PREFIXES - 1 {
        routes.push_str(&format!("  route 172.{}.{}.0/24 blackhole;\n", 16 + i / 256, i % 256));
    }
    let peer = format!(
        "router id 10.2.0.2;\nprotocol device {{ }}\n\
         protocol static s1 {{\n  ipv4;\n{routes}}}\n\
         protocol static wd {{\n  ipv4;\n  route 172.31.0.0/24 blackhole;\n}}\n\
         protocol bgp peer {{\n  local 10.2.0.2 as 65002;\n  neighbor 10.2.0.1 as 65001;\n  hold time 9;\n  \
         connect retry time 1;\n  ipv4 {{ import none; export all; }};\n}}\n"
    );
    // Freeway's side: BGP over the twin v20, the routes exported to the kernel's main table.
    let local = "router id 10.2.0.1;\nprotocol device { scan time 1; }\n\
         protocol kernel { scan time 5; ipv4 { import none; export all; }; }\n\
         protocol bgp peer {\n  local 10.2.0.1 as 65001;\n  neighbor 10.2.0.2 as 65002;\n  hold time 9;\n  \
         connect retry time 1;\n  ipv4 { import all; export none; };\n}\n";
    let b_peer = Bird::start(&bed, "peer", "h2", &peer);
    let b_local = Bird::start(&bed, "local", "sw", local);

    let up = wait_for(Duration::from_secs(30), || b_local.session().contains("Established"));
    assert!(
        up.is_some(),
        "BGP through the punt path: {}\n{}\n{}",
        b_local.session(),
        b_peer.session(),
        bed.ctl(&["stats"])["data"]["router"]
    );
    // In the kernel's table (BIRD's export), then in Freeway's RIB within 5 s of that.
    let kernel_count = || {
        let o = bed.sh("sw", "ip route show proto bird | wc -l");
        String::from_utf8_lossy(&o.stdout).trim().parse::<usize>().unwrap_or(0)
    };
    let exported = wait_for(Duration::from_secs(30), || kernel_count() == PREFIXES);
    assert!(
        exported.is_some(),
        "BIRD exported {} of {PREFIXES} routes",
        kernel_count()
    );
    let mirrored = wait_for(Duration::from_secs(5), || bird_routes(&bed) == PREFIXES);
    assert!(
        mirrored.is_some(),
        "Freeway mirrored {} of {PREFIXES} routes within 5 s",
        bird_routes(&bed)
    );
    println!(
        "BGP established after {:?}; kernel table full {:?} later; Freeway's RIB {:?} after that",
        up.unwrap(),
        exported.unwrap(),
        mirrored.unwrap()
    );
    let r = bed.ctl(&["route", "show"]);
    let text = r["text"].as_str().unwrap();
    assert!(
        text.contains("172.16.5.0/24 via 10.2.0.2 dev v20 proto bird metric 32"),
        "{text}"
    );

    // Traffic to an announced prefix flows through Freeway to the peer, at the highest rate
    // the bed carries (TCP, four streams) for 60 s, and the session stays up meanwhile: its
    // state line (state and since when) is the same after, so it never went down.
    // Each side's line once it has held for a second: at start-up both sides connect, and
    // the first session can be replaced by the other connection's within a second (a run
    // saw the local side's since-time move 282 ms after the routes were mirrored).
    let since = settled(|| b_local.session());
    let peer_since = settled(|| b_peer.session());
    assert!(bed.ping("h1", "172.16.5.1"), "h1 reaches an announced prefix");
    let got = iperf3(&bed, "h1", "h2", "172.16.5.1", 60);
    assert!(got > 1 << 20, "the stream flowed for 60 s: {got} bytes");
    bed.transfer_intact("h1", "h2", 5031, 4);
    assert!(since.contains("Established"), "{since}");
    let after = b_local.session();
    assert!(
        same_session(&since, &after),
        "the BGP session did not go down while traffic flowed: {since:?} then {after:?}"
    );
    let peer_after = b_peer.session();
    assert!(
        same_session(&peer_since, &peer_after),
        "nor on the peer's side: {peer_since:?} then {peer_after:?}"
    );
    println!(
        "60 s of iperf3 through Freeway: {} MB/s; BGP: {since}",
        got / 60 / 1_000_000
    );

    // Withdrawn at the peer: gone from Freeway, and traffic to it is counted as no route.
    assert!(
        bed.ping("h1", "172.31.0.1"),
        "h1 reaches the prefix before its withdrawal"
    );
    b_peer.cli("disable wd");
    let gone = wait_for(Duration::from_secs(10), || bird_routes(&bed) == PREFIXES - 1);
    assert!(gone.is_some(), "the withdrawal reached Freeway: {}", bird_routes(&bed));
    let before = bed.ctl(&["stats"])["data"]["router"]["l3"]["drops"]["no_route"]
        .as_u64()
        .unwrap_or(0);
    assert!(!bed
        .exec("h1", &["ping", "-c", "2", "-W", "1", "172.31.0.1"])
        .status
        .success());
    let after = bed.ctl(&["stats"])["data"]["router"]["l3"]["drops"]["no_route"]
        .as_u64()
        .unwrap_or(0);
    assert!(after >= before + 2, "no_route {before} -> {after}");
    assert!(bed.ping("h1", "172.16.5.1"), "the other prefixes still forward");
    let st = bed.ctl(&["stats"]);
    assert!(st["data"]["router"]["l3"]["punted"].as_u64().unwrap() > 0);
    drop(b_local);
    drop(b_peer);
    bed.stop();
}

/// Whether two of BIRD's protocol state lines (`peer BGP --- up 15:15:35.726 Established`)
/// show the same session: every field equal but the time it got to its state, which may
/// differ by a millisecond or two between two queries (BIRD prints it converted from its
/// monotonic clock). A session that went down and came back got there again seconds later
/// (BIRD waits before it reconnects), far beyond that.
/// The BGP state line `read` gives once two readings a second apart are the same session
/// ([`same_session`]); the last reading after 15 s if they never are.
fn settled(read: impl Fn() -> String) -> String {
    let mut last = read();
    for _ in 0..15 {
        std::thread::sleep(Duration::from_secs(1));
        let now = read();
        if same_session(&last, &now) {
            return now;
        }
        last = now;
    }
    last
}

fn same_session(before: &str, after: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (before.split_whitespace().collect(), after.split_whitespace().collect());
    if a.len() != b.len() || a.len() < 5 {
        return before == after;
    }
    let ms = |t: &str| -> Option<i64> {
        let (hms, frac) = t.split_once('.')?;
        let mut p = hms.split(':').map(|x| x.parse::<i64>().ok());
        let (h, m, s) = (p.next()??, p.next()??, p.next()??);
        Some(((h * 60 + m) * 60 + s) * 1000 + frac.parse::<i64>().ok()?)
    };
    let others_equal = a.iter().zip(&b).enumerate().all(|(i, (x, y))| i == 4 || x == y);
    match (ms(a[4]), ms(b[4])) {
        (Some(x), Some(y)) => others_equal && (x - y).abs() <= 5,
        _ => before == after,
    }
}

#[test]
fn bird_state_lines_compare_with_a_millisecond_of_rounding() {
    let a = "peer       BGP        ---        up     15:15:35.726  Established   ";
    assert!(same_session(
        a,
        "peer       BGP        ---        up     15:15:35.725  Established   "
    ));
    assert!(same_session(a, a));
    assert!(!same_session(
        a,
        "peer       BGP        ---        up     15:15:41.030  Established   "
    ));
    assert!(!same_session(
        a,
        "peer       BGP        ---        start  15:15:35.726  Active   "
    ));
    assert!(!same_session(a, ""));
}
