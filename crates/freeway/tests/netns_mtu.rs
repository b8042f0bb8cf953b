//! MTUs end to end through Linux network namespaces (the shared test bed, AF_PACKET ports):
//! jumbo frames over MTU-9000 veths, bridged and routed (ping with DF and a TCP transfer with
//! content check); a router interface's smaller MTU answering a DF packet with ICMP
//! fragmentation needed (the sender learns the MTU), and changed live through the control
//! socket; a large packet without DF fragmented by the router from a 9000 side to a 1500
//! side, and answered.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere every test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use std::time::{Duration, Instant};

use netbed::*;

/// `cfg` with `mtu = N` on the `[[port]]` or `[[interface]]` named `name`.
fn with_mtu(cfg: &str, name: &str, mtu: u32) -> String {
    let key = format!("name = \"{name}\"\n");
    assert!(cfg.contains(&key), "no {name} in {cfg}");
    cfg.replacen(&key, &format!("{key}mtu = {mtu}\n"), 1)
}

/// Runs `ping` with `args` from `from` until it gets an answer (the first may wait for ARP)
/// or a few seconds pass; returns whether one came and ping's output.
fn ping_with(bed: &Bed, from: &str, args: &[&str]) -> (bool, String) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut cmd = vec!["ping", "-c", "1", "-W", "1"];
    cmd.extend_from_slice(args);
    loop {
        let o = bed.exec(from, &cmd);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        if o.status.success() || Instant::now() >= deadline {
            return (o.status.success(), text);
        }
    }
}

/// The router's counter `name` (`router.l3`) in a final JSON snapshot.
fn l3(j: &serde_json::Value, name: &str) -> u64 {
    j["router"]["l3"][name].as_u64().unwrap_or(0)
}

#[test]
fn jumbo_frames_cross_the_bridge_and_the_router() {
    need_root!();
    let mut bed = Bed::up_mtu("jumbo", 9000);
    let mut cfg = ports(2, &[("h1", 1), ("h2", 1)]);
    for p in ["h1", "h2"] {
        cfg = with_mtu(&cfg, p, 9000);
    }
    bed.start_ctl(&cfg);
    assert!(bed.ping("h1", "10.0.0.2"));
    let (ok, out) = ping_with(&bed, "h1", &["-M", "do", "-s", "8000", "10.0.0.2"]);
    assert!(ok, "an 8,028-byte ping crosses the bridge whole: {out}");
    let shown = bed.ctl(&["link", "show"]);
    assert_eq!(shown["data"][0]["mtu"], 9000, "{shown}");
    bed.transfer_intact("h1", "h2", 5101, 4);
    let j = bed.stop();
    assert!(j["drops"].get("port:h1:too_big").is_none(), "{j}");

    // The same hosts in two subnets, the router between them on 9000-byte interfaces.
    two_subnets(&bed);
    let mut cfg = routed_ports();
    for p in ["h1", "h2", "v10", "v20"] {
        cfg = with_mtu(&cfg, p, 9000);
    }
    bed.start(&cfg);
    assert!(bed.ping("h1", "10.2.0.2"), "h1 pings h2 across the router");
    let (ok, out) = ping_with(&bed, "h1", &["-M", "do", "-s", "8000", "10.2.0.2"]);
    assert!(ok, "an 8,028-byte ping is routed whole: {out}");
    bed.transfer_intact("h1", "h2", 5102, 4);
    let j = bed.stop();
    assert_eq!(l3(&j, "fragmented_v4"), 0, "nothing needed fragmenting: {j}");
    assert!(l3(&j, "forwarded_v4") > 100, "{j}");
}

#[test]
fn a_df_packet_over_the_egress_mtu_gets_fragmentation_needed() {
    need_root!();
    let mut bed = Bed::two_subnets("fragneeded");
    let cfg = with_mtu(&routed_ports(), "v20", 1400);
    bed.start_ctl(&cfg);
    assert!(bed.ping("h1", "10.2.0.2"), "h1 pings h2 across the router");
    // 1,500 bytes with DF through a 1,400-byte interface.
    let o = bed.exec(
        "h1",
        &["ping", "-c", "2", "-W", "1", "-M", "do", "-s", "1472", "10.2.0.2"],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "no 1,500-byte DF ping passes: {text}");
    let route = String::from_utf8(bed.exec("h1", &["ip", "route", "get", "10.2.0.2"]).stdout).unwrap();
    assert!(
        text.contains("mtu = 1400") || text.contains("mtu=1400") || route.contains("mtu 1400"),
        "h1 learned the MTU from fragmentation needed: ping said {text}, ip route get said {route}"
    );
    let st = bed.ctl(&["stats"]);
    assert!(
        st["data"]["drops"]["router:too_big"].as_u64().unwrap_or(0) >= 1,
        "the drop is counted: {st}"
    );
    assert!(
        st["data"]["router"]["l3"]["icmp_errors_tx"].as_u64().unwrap_or(0) >= 1,
        "{st}"
    );

    // Live: the interface back to 1,500, the host's learned MTU forgotten, and it passes.
    let set = bed.ctl(&["link", "set", "dev", "v20", "mtu", "1500"]);
    assert_eq!(set["data"]["was"], 1400, "{set}");
    let shown = bed.ctl(&["link", "show"]);
    let named = |n: &str| {
        shown["data"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["ifname"] == n)
    };
    assert_eq!(named("v20").map(|l| &l["mtu"]), Some(&1500.into()), "{shown}");
    bed.sh_ok("h1", "ip route flush cache");
    let (ok, out) = ping_with(&bed, "h1", &["-M", "do", "-s", "1472", "10.2.0.2"]);
    assert!(ok, "after the change the same ping passes: {out}");
    bed.stop();
}

#[test]
fn a_large_ping_without_df_is_fragmented_by_the_router_and_answered() {
    need_root!();
    let mut bed = Bed::up_mtu("frag", 9000);
    two_subnets(&bed);
    // h2's link is a 1,500-byte one; h1's stays at 9,000.
    bed.sh_ok("h2", "ip link set dev eth0 mtu 1500");
    bed.sh_ok("sw", "ip link set dev h2 mtu 1500");
    // One worker: with a fanout group the kernel would reassemble the fragments h2 sends
    // back (PACKET_FANOUT_FLAG_DEFRAG) into a frame larger than h2's port takes.
    let mut cfg = ports(1, &[("h1", 10), ("h2", 20)]);
    cfg.push_str(&router_v10_v20());
    for p in ["h1", "v10"] {
        cfg = with_mtu(&cfg, p, 9000);
    }
    bed.start(&cfg);
    assert!(bed.ping("h1", "10.2.0.2"), "h1 pings h2 across the router");
    let (ok, out) = ping_with(&bed, "h1", &["-M", "dont", "-s", "3000", "10.2.0.2"]);
    assert!(
        ok,
        "a 3,028-byte ping without DF reaches h2 in fragments and is answered: {out}"
    );
    let j = bed.stop();
    assert!(l3(&j, "fragmented_v4") >= 1, "the router fragmented it: {j}");
    assert!(l3(&j, "fragments_v4") >= 3, "{j}");
}
