//! `freeway ctl reload` adding and removing router interfaces on real interfaces while
//! traffic flows: h1 on VLAN 10 (10.1.0.2), h2 on VLAN 20 (10.2.0.2), h3 on VLAN 30
//! (10.3.0.2), the router at first with interfaces on VLANs 10 and 20 only. An interface
//! added on VLAN 30 by a reload routes between h3's subnet and the others (pings both ways);
//! removed again, h3's subnet is unreachable (counted as no route) while h1 and h2 go on
//! pinging each other without losing a packet through both reloads. `--check` prints the plan
//! and applies nothing; a file with an error changes nothing.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere the test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use netbed::*;

/// h1, h2 and h3 on VLANs 10, 20 and 30; the router's interfaces v10 and v20, and with `v30`
/// one on VLAN 30 too.
fn config(v30: bool) -> String {
    let mut cfg = ports(2, &[("h1", 10), ("h2", 20), ("h3", 30)]);
    cfg.push_str(&router_v10_v20());
    if v30 {
        cfg.push_str("\n[[interface]]\nname = \"v30\"\nvlan = 30\naddr = [\"10.3.0.1/24\"]\n");
    }
    cfg
}

/// The router's drops for `reason` so far.
fn router_drops(bed: &Bed, reason: &str) -> u64 {
    bed.ctl(&["stats"])["data"]["router"]["l3"]["drops"][reason]
        .as_u64()
        .unwrap_or(0)
}

/// Runs `reloads` while h1 pings h2 (100 pings, 20 ms apart); the pings' summary line.
fn while_h1_pings_h2<T>(bed: &Bed, reloads: impl FnOnce() -> T) -> String {
    std::thread::scope(|s| {
        let pings = s.spawn(|| bed.exec("h1", &["ping", "-q", "-c", "100", "-i", "0.02", "-W", "2", "10.2.0.2"]));
        reloads();
        let out = pings.join().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .find(|l| l.contains("packet loss"))
            .unwrap_or(&text)
            .to_string()
    })
}

#[test]
fn an_interface_added_by_reload_routes_and_a_removed_one_stops_while_the_others_route() {
    need_root!();
    let mut bed = Bed::up("rli");
    two_subnets(&bed);
    bed.sh_ok(
        "h3",
        "ip addr flush dev eth0 && ip addr add 10.3.0.2/24 dev eth0 && ip route add default via 10.3.0.1",
    );
    let (one, two) = (config(false), config(true));
    bed.start_ctl(&one);
    let file = bed.dir.join("freeway.toml");
    assert!(bed.ping("h1", "10.2.0.2"), "h1 reaches h2 through the router");
    assert!(bed.unreachable("h1", "10.3.0.2"), "no interface on h3's VLAN yet");

    // --check: the plan, nothing applied.
    std::fs::write(&file, &two).unwrap();
    let text = bed.ctl(&["reload", "--check"])["text"].as_str().unwrap().to_string();
    assert!(
        text.contains(
            "would apply: router interfaces: v30 added (vlan 30 mac 02:fe:00:00:00:01 mtu 1500): v30 10.3.0.1/24"
        ),
        "{text}"
    );
    assert!(!text.contains("restart"), "nothing waits: {text}");
    assert!(bed.unreachable("h1", "10.3.0.2"), "--check applied nothing");

    // Added while h1 pings h2: h3's subnet is routed both ways, and no ping of h1's is lost.
    let loss = while_h1_pings_h2(&bed, || bed.reload_applies(&two, "router interfaces: v30 added"));
    assert!(loss.contains(" 0% packet loss"), "h1 and h2 kept routing: {loss}");
    assert!(bed.ping("h1", "10.3.0.2"), "h1 reaches h3 through the added interface");
    assert!(bed.ping("h3", "10.2.0.2"), "h3 reaches h2");
    assert!(bed.ping("h3", "10.3.0.1"), "the added interface answers");
    let routes = bed.ctl(&["route", "show"]);
    assert!(
        routes["text"].as_str().unwrap().contains("10.3.0.0/24 dev v30"),
        "{routes}"
    );

    // A file that does not parse changes nothing.
    bed.reload_refused(&format!("{one}\n[[interface]]\nname = "));
    assert!(bed.ping("h1", "10.3.0.2"), "a bad file changed nothing");

    // Removed while h1 pings h2: h3's subnet is unreachable, counted as no route.
    let loss = while_h1_pings_h2(&bed, || bed.reload_applies(&one, "router interfaces: v30 removed"));
    assert!(loss.contains(" 0% packet loss"), "h1 and h2 kept routing: {loss}");
    let no_route = router_drops(&bed, "no_route");
    assert!(bed.unreachable("h1", "10.3.0.2"), "h3's subnet is no longer routed");
    assert!(router_drops(&bed, "no_route") > no_route, "counted as no route");
    assert!(
        bed.unreachable("h3", "10.3.0.1"),
        "the removed interface answers no more"
    );
    let routes = bed.ctl(&["route", "show"]);
    assert!(!routes["text"].as_str().unwrap().contains("10.3.0.0/24"), "{routes}");
    assert!(bed.ping("h1", "10.2.0.2"), "h1 still reaches h2");
    bed.stop();
}

/// Forwarding only what the ruleset accepts by ingress interface: h3's interface (VLAN 30)
/// is named before it exists (`iifname "v30"` matches nothing until it does).
const RULESET: &str = r#"table inet filter {
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "v10" accept
		iifname "v30" accept
	}
}
"#;

/// With an nftables ruleset: an interface added by reload is judged by its name (the ruleset
/// is compiled again for the new interface ids), and after it is removed and added again
/// (a new id) too.
#[test]
fn the_ruleset_names_an_interface_added_by_reload() {
    need_root!();
    let mut bed = Bed::up("rlf");
    two_subnets(&bed);
    bed.sh_ok(
        "h3",
        "ip addr flush dev eth0 && ip addr add 10.3.0.2/24 dev eth0 && ip route add default via 10.3.0.1",
    );
    let rules = bed.dir.join("filter.nft");
    std::fs::write(&rules, RULESET).unwrap();
    let fw = format!("\n[firewall]\nruleset = \"{}\"\n", rules.display());
    let (one, two) = (config(false) + &fw, config(true) + &fw);
    bed.start_ctl(&one);
    assert!(bed.ping("h1", "10.2.0.2"), "v10 may open connections");
    assert!(bed.unreachable("h2", "10.1.0.2"), "v20 may not");

    bed.reload_applies(&two, "router interfaces: v30 added");
    assert!(bed.ping("h3", "10.2.0.2"), "iifname \"v30\" names the added interface");
    assert!(bed.unreachable("h2", "10.3.0.2"), "and v20 still opens nothing");

    bed.reload_applies(&one, "router interfaces: v30 removed");
    assert!(bed.unreachable("h3", "10.2.0.2"), "removed");
    bed.reload_applies(&two, "router interfaces: v30 added");
    assert!(bed.ping("h3", "10.2.0.2"), "added again, under a new id");
    assert!(bed.ping("h1", "10.2.0.2"), "v10 all along");
    bed.stop();
}
