//! IP fragments through a Freeway router guarded by an nftables ruleset, on real interfaces:
//! the hosts' own stacks fragment a 5000-byte ping and a 20,000-byte UDP datagram; Freeway
//! reassembles them before tracking, the ruleset lets the inside start connections and the
//! replies back in, and every datagram arrives whole and intact, both ways. Two workers, so
//! the AF_PACKET fanout must keep each datagram's fragments on one worker.
//!
//! Needs root (namespaces, veths, AF_PACKET): see `netbed`'s `need_root!`.

#[macro_use]
mod netbed;

use std::process::{Command, Stdio};
use std::time::Duration;

use netbed::*;

/// The inside (h1, on v10) may start connections; the outside only answers them.
const POLICY: &str = r#"table inet filter {
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		ct state invalid drop
		iifname "v10" ct state new accept
	}
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iifname "v10" accept
	}
}
"#;

/// Freeway routing h1 (10.1.0.2) and h2 (10.2.0.2) under [`POLICY`], with a control socket.
/// `tag` names the bed (unique per test: the tests of a file run at once).
fn frag_bed(tag: &str) -> Bed {
    let mut bed = Bed::two_subnets(tag);
    let mut cfg = routed_ports();
    cfg.push_str(&firewall_ruleset(&bed.file("policy.nft", POLICY)));
    bed.start_ctl(&cfg);
    assert!(bed.ping("h1", "10.2.0.2"), "a small ping crosses the router");
    bed
}

/// The reassembly counters from `ctl stats`.
fn reassembly(bed: &Bed) -> serde_json::Value {
    bed.ctl(&["stats"])["data"]["reassembly"].clone()
}

#[test]
fn a_fragmented_ping_crosses_the_firewall_both_ways() {
    need_root!();
    let bed = frag_bed("fping");
    let o = bed.exec("h1", &["ping", "-c", "3", "-W", "2", "-s", "5000", "10.2.0.2"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "5000-byte pings h1 -> h2: {out}");
    assert!(!out.contains("wrong data"), "the echo came back intact: {out}");
    assert!(out.contains("3 received"), "{out}");
    let r = reassembly(&bed);
    // Each ping and each reply: 4 fragments of at most 1500 bytes.
    assert!(r["reassembled"].as_u64().unwrap() >= 6, "{r}");
    assert!(r["refragmented"].as_u64().unwrap() >= 6, "{r}");
    // The outside may not start anything: its fragmented ping is reassembled and dropped.
    let o = bed.exec("h2", &["ping", "-c", "1", "-W", "1", "-s", "5000", "10.1.0.2"]);
    assert!(!o.status.success(), "h2 cannot ping h1");
}

#[test]
fn a_20000_byte_udp_datagram_crosses_the_firewall_both_ways_intact() {
    need_root!();
    let bed = frag_bed("fudp");
    // h2 answers every datagram with a 20,000-byte one of its own, until idle for 4 s.
    let server = "import hashlib,socket\n\
        s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',5555))\ns.settimeout(4)\n\
        r=bytes((i*13+5)%251 for i in range(20000))\n\
        while True:\n    try:\n        d,a=s.recvfrom(65535)\n    except socket.timeout:\n        break\n\
        \x20   print(len(d),hashlib.sha256(d).hexdigest(),flush=True)\n    s.sendto(r,a)\n";
    let srv = Command::new("ip")
        .args(["netns", "exec", &format!("fw-h2{}", bed.suffix)])
        .args(["python3", "-c", server])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    std::thread::sleep(Duration::from_millis(300));
    let client = "import hashlib,socket\n\
        s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(2)\n\
        d=bytes((i*7+3)%251 for i in range(20000))\nwant=bytes((i*13+5)%251 for i in range(20000))\n\
        got=None\nfor _ in range(3):\n    s.sendto(d,('10.2.0.2',5555))\n    try:\n        got,_=s.recvfrom(65535)\n        break\n    except socket.timeout:\n        pass\n\
        print(hashlib.sha256(d).hexdigest())\nprint('intact' if got==want else 'reply %s' % (None if got is None else len(got)))\n";
    let c = bed.exec("h1", &["python3", "-c", client]);
    let s = srv.wait_with_output().expect("the server ends");
    let cout = String::from_utf8_lossy(&c.stdout);
    let sout = String::from_utf8_lossy(&s.stdout);
    let mut lines = cout.lines();
    let sent = lines.next().unwrap_or_default();
    assert_eq!(lines.next(), Some("intact"), "h2's reply reached h1 intact: {cout}");
    assert!(
        sout.lines().any(|l| l == format!("20000 {sent}")),
        "h1's datagram reached h2 intact: {sout} (sent {sent})"
    );
    let r = reassembly(&bed);
    assert!(r["reassembled"].as_u64().unwrap() >= 2, "{r}");
    assert_eq!(r["drops"], serde_json::json!({}), "{r}");
}
