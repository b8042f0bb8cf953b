//! Freeway's NAT against the Linux kernel's, on real interfaces, and ICMP errors through NAT.
//!
//! Two beds with the same addressing, side by side:
//!
//! ```text
//!  h1 10.1.0.2 ─┐                                  h2 (a kernel router)      h4 198.18.0.2
//!               ├─ lan 10.1.0.1 ─ R ─ wan 203.0.113.1 ── 203.0.113.2 │ 198.18.0.1 ── (far host)
//!  h3 10.1.0.3 ─┘   (10.0.10.5-7 too, routed via h3)
//! ```
//!
//! R is the router under test: in the kernel bed, Linux in the switch namespace (a bridge `lan`
//! over h1 and h3, the veth to h2 renamed `wan`, the ruleset loaded with `nft -f`); in the
//! Freeway bed, Freeway with the same interfaces, routes and ruleset file. h2 forwards (and
//! answers a packet whose TTL runs out with ICMP time exceeded) and routes everything else
//! back to R, so untranslated traffic comes back too. h4 and h3 run `scripts/nat-probe.py
//! serve`, which logs what they see (source address and port after translation, the address
//! and port a port forward delivered to) and answers; h1, h3 and h4 run the same probes in the
//! same order in both beds (R's default route is h2): TCP connects and UDP exchanges from fixed source ports (two inside
//! hosts with the same source port to the same destination), ICMP echo with a fixed
//! identifier, port forwards from the outside, and UDP and echo probes with TTL 2, which expire
//! at h2 so that a time-exceeded comes back through the NAT.
//!
//! Compared, per probe, in [`differences`]: the outcome at the client (answered or not), what
//! the far host saw, and the whole parsed ICMP error at the inside host. Where Linux and
//! Freeway may legitimately differ, the property is compared rather than the value:
//! - the translated source address: equal, or, for `snat to A-B`, both inside the pool (Linux
//!   picks the address by a hash of the connection; Freeway by its own choice);
//! - the translated source port (or echo identifier): whether it was kept must be the same
//!   (both keep it when it is free and inside the rule's range), and a port that was changed
//!   must lie in the rule's port range (1024-65535 without one, as Linux's default for an
//!   unprivileged port); the exact replacement port is not compared;
//! - two inside hosts' flows with the same source port to the same destination must appear at
//!   the far host as two different (address, port) sources.
//!
//! Everything else is compared exactly: the port forward's target address and port, the
//! client's outcome, and in the ICMP error the outer source, type, code, the checksums'
//! validity and the quoted header's addresses, protocol, ports or identifier and TTL.
//!
//! The rulesets: this crate's `tests/nat-diff/`, and every `type nat` ruleset of the nft-diff
//! corpus (`crates/freeway-firewall/tests/rulesets/`, `tests/nft-diff/`), which
//! `scripts/nft-diff.py` leaves to this test (it compares fates by original addresses).
//!
//! Needs root (namespaces, veths, AF_PACKET), python3, nft and conntrack: elsewhere every
//! test prints a loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use netbed::*;
use serde_json::{json, Value};

/// The far host, beyond the kernel router h2.
const FAR: &str = "198.18.0.2";
/// The router's public address.
const PUBLIC: &str = "203.0.113.1";

/// Why this machine cannot run the kernel's side, beyond `need_root!`'s reasons.
fn missing_tools() -> Option<String> {
    ["nft", "conntrack", "ss"].into_iter().find_map(|tool| {
        let ok = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        (!ok).then(|| format!("{tool} is not installed"))
    })
}

/// The namespace of the far host h4, behind h2; removed on drop.
struct Far {
    ns: String,
}

impl Drop for Far {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

fn run_ok(args: &[&str]) {
    let o = Command::new(args[0]).args(&args[1..]).output().expect("runs");
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// The hosts' addressing (the same in both beds) and the far host h4.
fn hosts(bed: &Bed) -> Far {
    bed.sh_ok(
        "h1",
        "ip addr flush dev eth0 && ip addr add 10.1.0.2/24 dev eth0 && ip route add default via 10.1.0.1",
    );
    bed.sh_ok(
        "h3",
        "ip addr flush dev eth0 && ip addr add 10.1.0.3/24 dev eth0 && ip route add default via 10.1.0.1 \
         && for a in 5 6 7; do ip addr add 10.0.10.$a/32 dev eth0; done",
    );
    let far = Far {
        ns: format!("fw-h4{}", bed.suffix),
    };
    let h2 = format!("fw-h2{}", bed.suffix);
    let _ = Command::new("ip")
        .args(["netns", "del", &far.ns])
        .stderr(Stdio::null())
        .status();
    run_ok(&["ip", "netns", "add", &far.ns]);
    run_ok(&[
        "ip", "link", "add", "eth1", "netns", &h2, "type", "veth", "peer", "name", "eth0", "netns", &far.ns,
    ]);
    bed.sh_ok(
        "h2",
        "ip addr flush dev eth0 && ip addr add 203.0.113.2/24 dev eth0 && ip route add default via 203.0.113.1 \
         && ip addr add 198.18.0.1/24 dev eth1 && ip link set eth1 up && sysctl -qw net.ipv4.ip_forward=1 \
         && sysctl -qw net.ipv4.icmp_ratelimit=0",
    );
    run_ok(&[
        "ip", "netns", "exec", &far.ns, "sh", "-c",
        "ip link set lo up && ip addr add 198.18.0.2/24 dev eth0 && ip link set eth0 up && ip route add default via 198.18.0.1",
    ]);
    far
}

/// Makes the switch namespace a Linux router with `lan` (a bridge over h1 and h3) and `wan`.
fn kernel_router(bed: &Bed) {
    bed.sh_ok(
        "sw",
        "ip link add lan type bridge && ip link set h1 master lan && ip link set h3 master lan \
         && ip link set lan up && ip addr add 10.1.0.1/24 dev lan \
         && ip link set h2 down && ip link set h2 name wan && ip link set wan up \
         && ip addr add 203.0.113.1/24 dev wan && sysctl -qw net.ipv4.ip_forward=1 \
         && ip route add 10.0.10.0/24 via 10.1.0.3 && ip route add default via 203.0.113.2",
    );
}

/// Freeway's configuration for the same router, with `ruleset`.
fn freeway_config(ruleset: &Path) -> String {
    let mut cfg = lan_wan_router(&[("lan", 10, "10.1.0.1/24"), ("wan", 20, "203.0.113.1/24")], ruleset);
    for (dst, via) in [("10.0.10.0/24", "10.1.0.3"), ("default", "203.0.113.2")] {
        cfg.push_str(&format!("\n[[route]]\ndst = \"{dst}\"\nvia = \"{via}\"\n"));
    }
    cfg
}

/// Starts `nat-probe.py serve` in namespace `ns` and waits until it listens.
fn serve(ns: &str, tcp: &str, udp: &str) -> Child {
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "python3"])
        .arg(repo().join("scripts/nat-probe.py"))
        .args(["serve", "--tcp", tcp, "--udp", udp])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let last: u16 = tcp.rsplit(',').next().unwrap().parse().unwrap();
    let cmd = format!("ss -ltnH 'sport = :{last}' | grep -q .");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ready = || {
        Command::new("ip")
            .args(["netns", "exec", ns, "sh", "-c", &cmd])
            .status()
            .is_ok_and(|s| s.success())
    };
    while !ready() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

/// Stops a server and returns what it saw, by tag.
fn seen(mut child: Child) -> BTreeMap<String, Value> {
    let _ = child.kill();
    let out = child.wait_with_output().expect("the server ends");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| (v["tag"].as_str().unwrap_or_default().to_string(), v))
        .collect()
}

/// Runs `plan` with `nat-probe.py probe` in namespace `ns`; the results by tag.
fn probe(dir: &Path, ns: &str, plan: &Value) -> BTreeMap<String, Value> {
    let file = dir.join(format!("plan-{ns}.json"));
    std::fs::write(&file, plan.to_string()).unwrap();
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "python3"])
        .arg(repo().join("scripts/nat-probe.py"))
        .arg("probe")
        .arg(&file)
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "probe in {ns}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .map(|v| (v["tag"].as_str().unwrap().to_string(), v))
        .collect()
}

/// The probes, with source ports offset by `off` (each ruleset its own, so that no run meets
/// the previous one's TIME_WAIT): `(node, plan)` in the order they run.
fn plans(off: u16) -> Vec<(&'static str, Value)> {
    let p = |base: u16| base + off;
    vec![
        (
            "h1",
            json!([
                {"kind": "tcp", "tag": "tcp-h1", "dst": FAR, "dport": 7001, "sport": p(40001)},
                {"kind": "udp", "tag": "udp-h1", "dst": FAR, "dport": 7001, "sport": p(40002)},
                {"kind": "udp", "tag": "udp-h1-low", "dst": FAR, "dport": 7001, "sport": p(2050)},
                {"kind": "ping", "tag": "ping-h1", "dst": FAR, "id": p(0x1200)},
                {"kind": "ttl-udp", "tag": "ttl-udp-h1", "dst": FAR, "dport": 33434, "sport": p(40003), "ttl": 2},
                {"kind": "ttl-ping", "tag": "ttl-ping-h1", "dst": FAR, "id": p(0x2300), "ttl": 2},
            ]),
        ),
        (
            "h3",
            json!([
                {"kind": "udp", "tag": "udp-h3", "dst": FAR, "dport": 7001, "sport": p(40002)},
                {"kind": "tcp", "tag": "tcp-h3", "dst": FAR, "dport": 7001, "sport": p(40004)},
            ]),
        ),
        (
            "h4",
            json!([
                {"kind": "tcp", "tag": "fwd-8080", "dst": PUBLIC, "dport": 8080, "sport": p(45001)},
                {"kind": "tcp", "tag": "fwd-8443", "dst": PUBLIC, "dport": 8443, "sport": p(45002)},
                {"kind": "tcp", "tag": "fwd-2222", "dst": PUBLIC, "dport": 2222, "sport": p(45003)},
                {"kind": "udp", "tag": "fwd-5353", "dst": PUBLIC, "dport": 5353, "sport": p(45004)},
                {"kind": "udp", "tag": "fwd-53", "dst": PUBLIC, "dport": 53, "sport": p(45005)},
            ]),
        ),
    ]
}

/// What one bed observed: per tag, the client's result and the far side's view.
#[derive(Debug, Default)]
struct Observed {
    client: BTreeMap<String, Value>,
    server: BTreeMap<String, Value>,
    /// Each probe's original source port or identifier.
    orig: BTreeMap<String, u64>,
}

/// Runs every probe in a bed whose router is up with its ruleset.
fn observe(bed: &Bed, far: &Far, off: u16) -> Observed {
    let h3 = format!("fw-h3{}", bed.suffix);
    let far_srv = serve(&far.ns, "7001", "7001");
    let in_srv = serve(&h3, "22,80,443", "53");
    let mut o = Observed::default();
    for (node, plan) in plans(off) {
        let ns = if node == "h4" {
            far.ns.clone()
        } else {
            format!("fw-{node}{}", bed.suffix)
        };
        for p in plan.as_array().unwrap() {
            let orig = p.get("sport").or_else(|| p.get("id")).and_then(Value::as_u64).unwrap();
            o.orig.insert(p["tag"].as_str().unwrap().to_string(), orig);
        }
        o.client.extend(probe(&bed.dir, &ns, &plan));
    }
    o.server.extend(seen(far_srv));
    o.server.extend(seen(in_srv));
    o
}

/// A source NAT pool: its first and last address, and its ports if it names some.
type Pool = (Ipv4Addr, Ipv4Addr, Option<(u16, u16)>);

/// The IPv4 source NAT pools a ruleset names (`snat [ip] to A[-B][:P[-Q]]`).
fn pools(text: &str) -> Vec<Pool> {
    let mut out = Vec::new();
    for part in text.split("snat").skip(1) {
        let words: Vec<&str> = part.split_whitespace().take(3).collect();
        let spec = match words.as_slice() {
            ["to", s, ..] | ["ip", "to", s] => *s,
            _ => continue,
        };
        let (addrs, ports) = match spec.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (spec, None),
        };
        let ports = ports.and_then(|p| {
            let (lo, hi) = p.split_once('-').unwrap_or((p, p));
            Some((lo.parse().ok()?, hi.parse().ok()?))
        });
        let (lo, hi) = addrs.split_once('-').unwrap_or((addrs, addrs));
        if let (Ok(lo), Ok(hi)) = (lo.parse(), hi.parse()) {
            out.push((lo, hi, ports));
        }
    }
    out
}

/// Where the two beds' observations differ in a way Linux and Freeway may not (the module doc
/// says which properties are compared).
fn differences(text: &str, k: &Observed, f: &Observed) -> Vec<String> {
    let pools = pools(text);
    let mut diffs = Vec::new();
    let tags: Vec<&String> = k.orig.keys().collect();
    for tag in tags {
        let (kc, fc) = (&k.client[tag], &f.client[tag]);
        if kc["ok"] != fc["ok"] {
            diffs.push(format!("{tag}: kernel {kc}, Freeway {fc}"));
        }
        if tag.starts_with("ttl-") {
            for part in ["error", "inner"] {
                if kc[part] != fc[part] {
                    diffs.push(format!("{tag}: ICMP {part}: kernel {}, Freeway {}", kc[part], fc[part]));
                }
            }
            continue;
        }
        let (ks, fs) = (k.server.get(tag), f.server.get(tag));
        let (Some(ks), Some(fs)) = (ks, fs) else {
            if ks.is_some() != fs.is_some() {
                diffs.push(format!("{tag}: far host saw: kernel {ks:?}, Freeway {fs:?}"));
            }
            continue;
        };
        for field in ["dst", "dport", "proto"] {
            if ks[field] != fs[field] {
                diffs.push(format!("{tag}: far host's {field}: kernel {ks}, Freeway {fs}"));
            }
        }
        let addr = |s: &Value| s["src"].as_str().and_then(|a| a.parse::<Ipv4Addr>().ok());
        let (ka, fa) = (addr(ks), addr(fs));
        let pool = ka.and_then(|a| pools.iter().find(|(lo, hi, _)| *lo != *hi && (*lo..=*hi).contains(&a)));
        let same_pool = pool.is_some_and(|(lo, hi, _)| fa.is_some_and(|a| (*lo..=*hi).contains(&a)));
        if ka != fa && !same_pool {
            diffs.push(format!("{tag}: source address: kernel {ks}, Freeway {fs}"));
        }
        let orig = k.orig[tag];
        let port = |s: &Value| s.get("sport").or_else(|| s.get("id")).and_then(Value::as_u64);
        let (kp, fp) = (port(ks), port(fs));
        if (kp == Some(orig)) != (fp == Some(orig)) {
            diffs.push(format!(
                "{tag}: source port {orig} kept by one side only: kernel {ks}, Freeway {fs}"
            ));
        } else if fp != Some(orig) && fs["proto"] != "icmp" {
            // The port range of the rule that translated it: the pool's, else Linux's default.
            let range = pools
                .iter()
                .find(|(lo, hi, _)| fa.is_some_and(|a| (*lo..=*hi).contains(&a)))
                .and_then(|(_, _, r)| *r)
                .unwrap_or(if orig < 1024 { (1, 1023) } else { (1024, 65535) });
            if !fp.is_some_and(|p| (u64::from(range.0)..=u64::from(range.1)).contains(&p)) {
                diffs.push(format!("{tag}: Freeway's new source port outside {range:?}: {fs}"));
            }
        }
    }
    diffs
}

/// In one bed: the two inside hosts' UDP flows from one source port to one destination must
/// reach the far host as different sources.
fn collisions(bed: &str, o: &Observed) -> Vec<String> {
    let src = |tag: &str| o.server.get(tag).map(|s| (s["src"].clone(), s["sport"].clone()));
    match (src("udp-h1"), src("udp-h3")) {
        (Some(a), Some(b)) if a == b => vec![format!("{bed}: h1's and h3's flows share the source {a:?}")],
        _ => Vec::new(),
    }
}

/// What the far hosts saw, in short: `tag src:port` for each probe that reached one.
fn sources(o: &Observed) -> String {
    let one = |(tag, s): (&String, &Value)| {
        let port = s.get("sport").or_else(|| s.get("id")).cloned().unwrap_or_default();
        format!("{tag} {}:{port}", s["src"].as_str().unwrap_or("?"))
    };
    o.server.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// Every `type nat` ruleset of the nft-diff corpus and this test's own, sorted.
fn nat_rulesets() -> Vec<PathBuf> {
    let root = repo();
    let mut files = Vec::new();
    for dir in [
        "crates/freeway/tests/nat-diff",
        "crates/freeway-firewall/tests/rulesets",
        "crates/freeway/tests/nft-diff",
    ] {
        let mut here: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "nft"))
            .filter(|p| {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                text.split_whitespace()
                    .collect::<Vec<_>>()
                    .windows(2)
                    .any(|w| w == ["type", "nat"])
            })
            .collect();
        here.sort();
        files.extend(here);
    }
    files
}

#[test]
fn freeway_nat_agrees_with_the_kernels() {
    need_root!();
    if let Some(why) = missing_tools() {
        freeway_testkit::skip(format!("{why}: the kernel NAT comparison needs nft, conntrack and ss"));
        return;
    }
    let kbed = Bed::up("knat");
    let kfar = hosts(&kbed);
    kernel_router(&kbed);
    let mut fbed = Bed::up("fnat");
    let ffar = hosts(&fbed);
    let files = nat_rulesets();
    assert!(files.len() >= 5, "the rulesets: {files:?}");
    let mut report = Vec::new();
    let mut failed = false;
    for (i, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file).unwrap();
        let off = 10 * i as u16;
        kbed.sh_ok(
            "sw",
            &format!(
                "nft flush ruleset && nft -f {} && conntrack -F 2>/dev/null; true",
                file.display()
            ),
        );
        fbed.start_ctl(&freeway_config(file));
        let (k, f) = std::thread::scope(|s| {
            let k = s.spawn(|| observe(&kbed, &kfar, off));
            let f = observe(&fbed, &ffar, off);
            (k.join().expect("the kernel bed's probes"), f)
        });
        fbed.stop();
        let mut diffs = differences(&text, &k, &f);
        diffs.extend(collisions("kernel", &k));
        diffs.extend(collisions("Freeway", &f));
        let answered = k.client.values().filter(|c| c["ok"] == true).count();
        let name = file.strip_prefix(repo()).unwrap_or(file).display().to_string();
        report.push(format!(
            "{name}: {} probes, {answered} answered by the kernel, {} differences",
            k.client.len(),
            diffs.len()
        ));
        for (bed, o) in [("kernel", &k), ("Freeway", &f)] {
            report.push(format!("    {bed}: {}", sources(o)));
        }
        for d in &diffs {
            report.push(format!("    {d}"));
        }
        failed |= !diffs.is_empty();
    }
    let report = report.join("\n");
    println!("{report}");
    assert!(!failed, "Freeway's NAT differs from the kernel's:\n{report}");
}

/// h1 (inside, private addresses) -> Freeway with masquerade -> h2, a kernel router -> h4: a
/// UDP datagram and an ICMP echo request sent with TTL 2 expire at h2, whose time-exceeded
/// goes to the router's public address; Freeway translates it back, so h1 receives it with
/// the quoted header as h1 sent it (its private source, its UDP source port or echo
/// identifier, valid checksums), parsed from a raw socket by `scripts/nat-probe.py`.
#[test]
fn a_ttl_expiring_probe_comes_back_through_masquerade_translated() {
    need_root!();
    let mut bed = Bed::up("nttl");
    let _far = hosts(&bed);
    let rules = repo().join("crates/freeway/tests/nat-diff/01-masquerade-forwards.nft");
    bed.start_ctl(&freeway_config(&rules));
    let plan = json!([
        {"kind": "ttl-udp", "tag": "u", "dst": FAR, "dport": 33434, "sport": 41000, "ttl": 2},
        {"kind": "ttl-ping", "tag": "p", "dst": FAR, "id": 0x4242, "ttl": 2},
    ]);
    let got = probe(&bed.dir, &format!("fw-h1{}", bed.suffix), &plan);
    let (u, p) = (&got["u"], &got["p"]);
    for r in [u, p] {
        assert_eq!(r["ok"], true, "h1 received the time-exceeded: {r}");
        // From h2 (not translated: only the quoted header is), time exceeded in transit.
        assert_eq!(
            r["error"],
            json!({"src": "203.0.113.2", "type": 11, "code": 0, "csum_ok": true}),
            "{r}"
        );
        assert_eq!(r["inner"]["src"], "10.1.0.2", "the quoted source translated back: {r}");
        assert_eq!(r["inner"]["dst"], FAR, "{r}");
        assert_eq!(r["inner"]["ip_csum_ok"], true, "{r}");
        assert_eq!(r["inner"]["ttl"], 1, "quoted as h2 received it: {r}");
    }
    assert_eq!(u["inner"]["sport"], 41000, "{u}");
    assert_eq!(u["inner"]["dport"], 33434, "{u}");
    assert_eq!(
        u["inner"]["udp_csum_ok"], true,
        "the quoted UDP checksum updated too: {u}"
    );
    assert_eq!(
        p["inner"]["id"], 0x4242,
        "the quoted echo identifier translated back: {p}"
    );
    // And the probes did leave masqueraded: their connections reply to the public address.
    let ct = bed.ctl(&["conntrack", "list"]);
    let text = ct["text"].as_str().unwrap();
    for want in [
        "dport=33434 [UNREPLIED] src=198.18.0.2 dst=203.0.113.1 sport=33434 dport=41000",
        "src=198.18.0.2 dst=203.0.113.1 type=0 code=0 id=16962",
    ] {
        assert!(text.contains(want), "conntrack shows {want}:\n{text}");
    }
    bed.stop();
}
