//! IPv6 fragments and path MTU through a Freeway router guarded by an nftables ruleset, on
//! real interfaces: h1 (fd01::2, on `v10`) and h2 (fd02::2, on `v20`), two workers.
//! - `ping -6 -s 5000`: h1's stack fragments each echo request (and h2's each reply); Freeway
//!   reassembles them before tracking and the ruleset, and refragments them on transmit;
//!   every echo comes back intact.
//! - An IPv6 packet over the egress interface's smaller MTU (routers never fragment IPv6) is
//!   answered with ICMPv6 packet too big carrying that MTU, which the sender's stack learns.
//!
//! Needs root (namespaces, veths, AF_PACKET): see `netbed`'s `need_root!`.

#[macro_use]
mod netbed;

use netbed::*;

/// Neighbour discovery and the router's own ICMPv6 pass; the inside (h1, on v10) may start
/// connections, the outside only answers them.
const POLICY: &str = r#"table ip6 filter {
	chain input {
		type filter hook input priority filter; policy drop;
		meta l4proto ipv6-icmp accept
		ct state established,related accept
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state invalid drop
		ct state established,related accept
		iifname "v10" ct state new accept
	}
}
"#;

/// Freeway routing h1 and h2 over IPv6 under [`POLICY`], with a control socket; `v20` has
/// MTU `mtu`. `tag` names the bed.
fn v6_bed(tag: &str, mtu: u32) -> Bed {
    let mut bed = Bed::up(tag);
    for (h, net) in [("h1", 1), ("h2", 2)] {
        bed.sh_ok(
            h,
            &format!(
                "ip -6 addr flush dev eth0 scope global && ip -6 addr add fd0{net}::2/64 dev eth0 nodad \
                 && ip -6 route add default via fd0{net}::1"
            ),
        );
    }
    let mut cfg = ports(2, &[("h1", 10), ("h2", 20)]);
    cfg.push_str("\n[router]\nmac = \"02:fe:00:00:00:01\"\n");
    for n in [1, 2] {
        cfg.push_str(&format!(
            "\n[[interface]]\nname = \"v{n}0\"\nvlan = {n}0\naddr = [\"10.{n}.0.1/24\", \"fd0{n}::1/64\"]\n"
        ));
    }
    cfg.push_str(&format!("mtu = {mtu}\n"));
    cfg.push_str(&firewall_ruleset(&bed.file("policy.nft", POLICY)));
    bed.start_ctl(&cfg);
    assert!(bed.ping("h1", "fd02::2"), "a small ping -6 crosses the router");
    bed
}

/// `ping -6` from h1 to h2 with `args`; its output (stdout and stderr) and whether it succeeded.
fn ping6(bed: &Bed, args: &[&str]) -> (bool, String) {
    let mut cmd = vec!["ping", "-6", "-c", "3", "-W", "2"];
    cmd.extend_from_slice(args);
    cmd.push("fd02::2");
    let o = bed.exec("h1", &cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
fn a_fragmented_ipv6_ping_is_reassembled_judged_and_refragmented() {
    need_root!();
    let bed = v6_bed("f6ping", 1500);
    let (ok, out) = ping6(&bed, &["-s", "5000"]);
    assert!(ok, "5000-byte pings h1 -> h2 over IPv6: {out}");
    assert!(!out.contains("wrong data"), "the echoes came back intact: {out}");
    assert!(out.contains("3 received"), "{out}");
    let r = bed.ctl(&["stats"])["data"]["reassembly"].clone();
    // Each ping and each reply: 4 fragments of at most 1,500 bytes.
    assert!(r["reassembled"].as_u64().unwrap() >= 6, "{r}");
    assert!(r["refragmented"].as_u64().unwrap() >= 6, "{r}");
    assert_eq!(r["drops"], serde_json::json!({}), "{r}");
    // The outside may not start anything: its fragmented ping is reassembled and dropped.
    let o = bed.exec("h2", &["ping", "-6", "-c", "1", "-W", "1", "-s", "5000", "fd01::2"]);
    assert!(!o.status.success(), "h2 cannot ping h1");
}

#[test]
fn an_ipv6_packet_over_the_egress_mtu_gets_packet_too_big_with_that_mtu() {
    need_root!();
    let bed = v6_bed("f6ptb", 1400);
    // 1,500 bytes (40 + 8 + 1,452) towards a 1,400-byte interface.
    let (ok, out) = ping6(&bed, &["-M", "do", "-s", "1452"]);
    assert!(!ok, "no 1,500-byte ping passes whole: {out}");
    let route = bed.exec("h1", &["ip", "-6", "route", "get", "fd02::2"]);
    let route = String::from_utf8_lossy(&route.stdout);
    let learned = [out.as_str(), &route]
        .iter()
        .any(|t| t.contains("mtu=1400") || t.contains("mtu 1400"));
    assert!(
        learned,
        "h1 learned the MTU from packet too big: ping said {out}, ip route get said {route}"
    );
    let drops = bed.ctl(&["stats"])["data"]["drops"].clone();
    assert!(
        drops["router:too_big"].as_u64() >= Some(1),
        "the drop is counted: {drops}"
    );
    // Knowing the MTU, h1's stack fragments the same ping itself, and it passes.
    let (ok, out) = ping6(&bed, &["-s", "1452"]);
    assert!(ok, "the ping, fragmented by h1 to 1,400 bytes, passes: {out}");
}
