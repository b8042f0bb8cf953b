//! `freeway ctl reload` and SIGHUP on real interfaces: hosts h1, h2, h3 on AF_PACKET ports of
//! a Freeway bridge (`scripts/netns-testbed.sh`); the configuration file moves ports between
//! VLANs while the hosts' own stacks ping, and the bridge follows without a restart (a host
//! that left a VLAN is unreachable from it at once, even through the FDB entry learned
//! before).
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere the test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use netbed::*;

#[test]
fn reload_and_sighup_move_ports_between_vlans_while_hosts_ping() {
    need_root!();
    let mut bed = Bed::up("rld");
    let all_one = ports(2, &[("h1", 1), ("h2", 1), ("h3", 1)]);
    bed.start_ctl(&all_one);
    let file = bed.dir.join("freeway.toml");
    assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2 on VLAN 1");
    assert!(bed.ping("h1", "10.0.0.3"), "h1 pings h3 on VLAN 1");

    // h2 moves to VLAN 2: h1 (whose ARP cache and whose bridge's FDB know h2) reaches it no
    // more; h3 still answers.
    let text = bed.reload_applies(&ports(2, &[("h1", 1), ("h2", 2), ("h3", 1)]), "vlan membership:");
    assert!(text.contains("h2 access vlan 2"), "{text}");
    assert!(bed.unreachable("h1", "10.0.0.2"), "h2 left VLAN 1");
    assert!(bed.ping("h1", "10.0.0.3"), "h3 is still on VLAN 1");
    let drops = bed.ctl(&["stats"]);
    assert!(drops["text"].as_str().unwrap().contains("vlan_filtered"), "{drops}");

    // SIGHUP: h3 joins h2 on VLAN 2; they reach each other, h1 reaches neither.
    std::fs::write(&file, ports(2, &[("h1", 1), ("h2", 2), ("h3", 2)])).unwrap();
    let pid = bed.freeway.as_ref().expect("running").id().to_string();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(hup.success());
    assert!(bed.ping("h2", "10.0.0.3"), "h2 and h3 share VLAN 2 after SIGHUP");
    assert!(bed.unreachable("h1", "10.0.0.3"), "h3 left VLAN 1");

    // Back to one VLAN: everyone reaches everyone again, and the run never restarted.
    bed.reload(&all_one);
    assert!(
        bed.ping("h1", "10.0.0.2") && bed.ping("h1", "10.0.0.3"),
        "all on VLAN 1 again"
    );
    bed.stop();
}
