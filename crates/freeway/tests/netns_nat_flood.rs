//! A SYN flood that exhausts a source NAT's ports, on real interfaces: h1 sends 2,000 SYNs
//! from 2,000 source ports (`scripts/nat-probe.py syn-flood`, a raw socket) through
//! `snat to 203.0.113.1:20000-20063` towards a port h2 silently drops, so every translated connection stays half-open and holds its port.
//! After the first 64, new connections find no free port: each is refused and counted
//! (`conntrack.nat_exhausted` in `freeway stats -j`) and dropped as `router:nat_exhausted`, the connection table holds no more than
//! the range allows, a TCP connection h3 opened before the flood (through masquerade) keeps
//! passing, and the daemon answers its control socket throughout.
//!
//! Needs root (namespaces, veths, AF_PACKET): see `netbed`'s `need_root!`.

#[macro_use]
mod netbed;

use std::process::{Command, Stdio};

use netbed::*;

/// The flood's port range: 64 ports.
const RULESET: &str = r#"table ip nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "wan" ip saddr 10.1.0.2 meta l4proto tcp snat to 203.0.113.1:20000-20063
		oifname "wan" masquerade
	}
}
"#;

/// h3's long-lived connection to h2's line echo server: one line before, one after `go`
/// exists; prints what came back.
const CLIENT: &str = r#"
import os, socket, sys, time
s = socket.create_connection(("203.0.113.2", 7100), timeout=5)
f = s.makefile("rw")
def ask(x):
    f.write(x + "\n"); f.flush(); return f.readline().strip()
print(ask("before"), flush=True)
for _ in range(600):
    if os.path.exists(sys.argv[1]): break
    time.sleep(0.1)
print(ask("after"), flush=True)
"#;

const SERVER: &str = r#"
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", 7100)); l.listen(1); l.settimeout(30)
c, _ = l.accept(); c.settimeout(70); f = c.makefile("rw")
for line in f:
    f.write("echo " + line); f.flush()
"#;

/// `freeway stats -j` of the running daemon (asked from h1's namespace: any will do).
fn stats_j(bed: &Bed) -> serde_json::Value {
    let cmd = format!(
        "{} stats -j --ctl {}",
        env!("CARGO_BIN_EXE_freeway"),
        bed.sock().display()
    );
    serde_json::from_slice(&bed.sh_ok("h1", &cmd).stdout).expect("freeway stats -j prints JSON")
}

/// Starts `python3 -c script args` in node `n`, its output piped.
fn python(bed: &Bed, n: &str, script: &str, args: &[&str]) -> std::process::Child {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("fw-{n}{}", bed.suffix),
            "python3",
            "-c",
            script,
        ])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs")
}

#[test]
fn a_syn_flood_exhausting_the_nat_ports_is_counted_and_stalls_nothing() {
    need_root!();
    let mut bed = Bed::up("natflood");
    bed.host_on("h1", "10.1.0.2/24", Some("10.1.0.1"));
    bed.host_on("h3", "10.1.0.3/24", Some("10.1.0.1"));
    bed.host_on("h2", "203.0.113.2/24", None);
    // h2 drops the flood silently: its half-open connections hold their ports.
    bed.sh_ok(
        "h2",
        "nft add table ip f && nft add chain ip f in '{ type filter hook input priority 0; }' \
         && nft add rule ip f in tcp dport 9 drop",
    );
    let rules = bed.file("nat.nft", RULESET);
    bed.start_ctl(&lan_wan_router(
        &[("lan", 10, "10.1.0.1/24"), ("wan", 20, "203.0.113.1/24")],
        &rules,
    ));
    assert!(bed.ping("h3", "203.0.113.2"), "h3 pings h2 through masquerade");

    // The established flow, opened before the flood.
    let server = python(&bed, "h2", SERVER, &[]);
    bed.wait_listening("h2", 7100);
    let go = bed.dir.join("go");
    let client = python(&bed, "h3", CLIENT, &[go.to_str().unwrap()]);

    let probe = repo().join("scripts/nat-probe.py");
    let flood = format!(
        "python3 {} syn-flood 10.1.0.2 203.0.113.2 9 10000 2000",
        probe.display()
    );
    bed.sh_ok("h1", &flood);
    // The flood has been sent; the daemon answers while its SYNs are worked through, and
    // until every one has been seen (each is translated or refused).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut st = stats_j(&bed);
    let handled = |st: &serde_json::Value| {
        let c = &st["conntrack"];
        c["nat_created"].as_u64().unwrap_or(0) + c["nat_exhausted"].as_u64().unwrap_or(0)
    };
    while handled(&st) < 1990 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        st = stats_j(&bed);
    }
    let exhausted = st["conntrack"]["nat_exhausted"].as_u64().unwrap_or(0);
    assert!(exhausted > 0, "refused SYNs are counted as exhausted: {st}");

    // The table: at most the range's 64 half-open translations of the flood.
    let ct = bed.ctl(&["conntrack", "list"]);
    let text = ct["text"].as_str().unwrap();
    let flood = text.lines().filter(|l| l.contains("dport=9 ")).count();
    assert!(
        (1..=64).contains(&flood),
        "{flood} flood connections in the table:\n{text}"
    );
    // Every SYN that reached a worker was translated or refused, and counted.
    let lost: u64 = st["drops"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("port:h1:"))
        .filter_map(|(_, v)| v.as_u64())
        .sum();
    println!(
        "{exhausted} SYNs refused (conntrack.nat_exhausted), {flood} translated, {lost} lost; drops: {}",
        st["drops"]
    );
    assert!(
        exhausted + flood as u64 + lost >= 2000,
        "{exhausted} refused, {flood} translated, {lost} lost: {st}"
    );
    // Each refused SYN is dropped under its own reason, not the firewall's: read once the
    // count stands still, so that both numbers are of the same packets.
    let mut prev = u64::MAX;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while st["conntrack"]["nat_exhausted"].as_u64() != Some(prev) && std::time::Instant::now() < deadline {
        prev = st["conntrack"]["nat_exhausted"].as_u64().unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(200));
        st = stats_j(&bed);
    }
    assert_eq!(
        st["drops"]["router:nat_exhausted"].as_u64(),
        st["conntrack"]["nat_exhausted"].as_u64(),
        "refused SYNs are dropped as router:nat_exhausted: {}",
        st["drops"]
    );
    assert_eq!(
        st["drops"]["router:filtered"].as_u64().unwrap_or(0),
        0,
        "none as the firewall's: {}",
        st["drops"]
    );
    assert!(
        text.lines()
            .filter(|l| l.contains("dport=9 "))
            .all(|l| l.contains("dst=203.0.113.1 sport=9 dport=20")),
        "every translated SYN got a port of the range:\n{text}"
    );

    // The established flow still passes.
    std::fs::write(&go, "").unwrap();
    let out = client.wait_with_output().expect("the client ends");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "echo before\necho after\n",
        "h3's connection passed before and after the flood"
    );
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
    bed.stop();
}
