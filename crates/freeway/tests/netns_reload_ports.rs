//! `freeway ctl reload` changing the router interfaces' addresses on real interfaces: h1 on
//! VLAN 10 (10.1.0.2, through the router's 10.1.0.1), h2 on VLAN 20 (10.2.0.2, and later
//! 10.3.0.2 too). An address added to the VLAN 20 interface by a reload answers pings and its
//! subnet is routed (its connected route); removed again, it answers no more, while the
//! addresses that stayed keep routing. `--check` lists the change and applies nothing.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere the test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use netbed::*;

#[test]
fn an_address_added_by_reload_answers_and_routes_and_a_removed_one_stops() {
    need_root!();
    let mut bed = Bed::two_subnets("rla");
    bed.sh_ok("h2", "ip addr add 10.3.0.2/24 dev eth0");
    let one = routed_ports();
    let two = one.replace("addr = [\"10.2.0.1/24\"]", "addr = [\"10.2.0.1/24\", \"10.3.0.1/24\"]");
    assert_ne!(one, two);
    bed.start_ctl(&one);
    assert!(bed.ping("h1", "10.2.0.2"), "h1 reaches h2 through the router");
    assert!(bed.unreachable("h1", "10.3.0.1"), "not yet the router's address");

    // --check: the plan, nothing applied.
    let text = bed.reload_check(&two);
    assert!(
        text.contains("would apply: interface addresses: v20 10.2.0.1/24 10.3.0.1/24"),
        "{text}"
    );
    assert!(bed.unreachable("h1", "10.3.0.1"), "--check applied nothing");

    // Applied: the new address answers, its subnet is routed, the old one still routes.
    bed.reload_applies(&two, "interface addresses: v20");
    assert!(bed.ping("h1", "10.3.0.1"), "the added address answers");
    assert!(bed.ping("h1", "10.3.0.2"), "its connected subnet is routed");
    assert!(bed.ping("h1", "10.2.0.2"), "the address that stayed still routes");
    let routes = bed.ctl(&["route", "show"]);
    assert!(routes["text"].as_str().unwrap().contains("10.3.0.0/24"), "{routes}");

    // Removed again: it answers no more and its subnet is no longer routed; the rest goes on.
    let text = bed.reload(&one);
    assert!(text.contains("applied: interface addresses: v20 10.2.0.1/24"), "{text}");
    assert!(bed.unreachable("h1", "10.3.0.1"), "the removed address answers no more");
    assert!(bed.unreachable("h1", "10.3.0.2"), "its subnet is no longer routed");
    assert!(bed.ping("h1", "10.2.0.2"), "h1 still reaches h2");
    let routes = bed.ctl(&["route", "show"]);
    assert!(!routes["text"].as_str().unwrap().contains("10.3.0.0/24"), "{routes}");

    // A file that does not parse changes nothing.
    bed.reload_refused(&format!("{two}\n[[interface]]\nname = "));
    assert!(bed.unreachable("h1", "10.3.0.1"), "a bad file changed nothing");
    assert!(bed.ping("h1", "10.2.0.2"), "and forwarding goes on");
    bed.stop();
}
