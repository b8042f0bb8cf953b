//! The churn oracle, short form (the long one is `freeway stress churn --duration 300s`): two
//! workers forward tagged IPv4 and IPv6 traffic over access and trunk ports through the
//! bridge, the router and the firewall while the control side changes FDB entries, routes of
//! both families, gateway neighbours, taps and connections through the control socket and the
//! tap registry; every output frame (tagging and next-hop MAC included) is checked against the
//! table versions of its flight, every frame is accounted for (delivered, possibly after
//! waiting for its next hop, or dropped and counted), and the router's ARP requests and
//! neighbour solicitations are checked too.

use std::time::Duration;

use freeway_bench::churn::{self, ChurnOptions};

#[test]
fn every_frame_is_right_while_every_table_churns() {
    let r = churn::run(&ChurnOptions {
        duration: Duration::from_secs(2),
        // Enough operations that every kind happens, however slow the machine.
        min_ops: 400,
        workers: 2,
        seed: 7,
        warmup: Duration::from_secs(1),
        rss_limit_kib: None,
        progress: None,
        reload: false,
    })
    .unwrap();
    let mut text = Vec::new();
    churn::print_report(&r, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert_eq!(r.violations, 0, "{text}");
    assert!(r.ops.total() >= 400, "{text}");
    let o = &r.ops;
    for (what, n) in [
        ("fdb add", o.fdb_add),
        ("fdb del", o.fdb_del),
        ("route replace", o.route_replace),
        ("route del", o.route_del),
        ("IPv6 route replace", o.route6_replace),
        ("IPv6 route del", o.route6_del),
        ("neigh add", o.neigh_add),
        ("neigh replace", o.neigh_replace),
        ("neigh del", o.neigh_del),
        ("settle", o.settles),
        ("conntrack flush", o.ct_flush),
        ("tap attach", o.tap_attach),
        ("set add", o.set_add),
        ("set del", o.set_del),
        ("firewall load", o.fw_load),
    ] {
        assert!(n > 0, "no {what} operation: {text}");
    }
    assert_eq!(o.tap_attach, o.tap_detach, "every tap detached: {text}");
    // Every frame closed, and the three outcomes all happened.
    assert!(r.generated > 1000, "{text}");
    assert_eq!(r.frames_closed, r.generated, "{text}");
    assert_eq!(r.delivered + r.dropped, r.generated, "{text}");
    assert!(r.outputs_checked >= r.delivered, "{text}");
    assert!(r.flooded > 0 && r.dropped > 0, "{text}");
    // Drops are the kinds the traffic asks for, and they add up to the frames that reached
    // no port (also checked inside, as a violation).
    assert_eq!(r.drops_counted.values().sum::<u64>(), r.dropped, "{text}");
    // The ruleset's drops: unsolicited frames, replies without their connection, frames to
    // blocked prefixes.
    assert!(r.drops_counted.contains_key("router:filtered"), "{text}");
    assert!(r.route_cache_refills > 0, "{text}");
    // The new coverage happened: tagged frames out of the trunk, routed IPv6, unresolved next
    // hops (solicited for, frames parked, some dropped by the router for it and some sent
    // once resolved).
    assert!(r.trunk_frames > 0 && r.routed_v6 > 0, "{text}");
    assert!(r.arp_requests > 0 && r.neighbour_solicitations > 0, "{text}");
    assert!(r.parked > 0 && r.pending_queued > 0 && r.pending_sent > 0, "{text}");
    assert!(r.drops_counted.contains_key("router:pending_overflow"), "{text}");
}

/// The same traffic while the targets' static FDB entries, the IPv4 routes and the firewall's
/// `blocked` set change only by reloading new configuration files (`ctl reload`), beside the
/// other tables' churn through the socket: every output frame is right for some version of
/// its window (a reload's changes land one by one, each key old or new), and the connections
/// the rulesets still accept survive every reload (a reply dropped without a flush or a block
/// in its window is a violation).
#[test]
fn every_frame_is_right_while_reloads_change_the_configuration() {
    let r = churn::run(&ChurnOptions {
        duration: Duration::from_secs(2),
        min_ops: 300,
        seed: 11,
        reload: true,
        ..ChurnOptions::default()
    })
    .unwrap();
    let mut text = Vec::new();
    churn::print_report(&r, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert_eq!(r.violations, 0, "{text}");
    let o = &r.ops;
    assert!(o.reload > 10, "{text}");
    // Those tables change only by reloads now.
    assert_eq!(
        (o.set_add, o.set_del, o.fw_load, o.route_replace),
        (0, 0, 0, 0),
        "{text}"
    );
    assert!(o.route6_replace > 0 && o.neigh_replace > 0 && o.ct_flush > 0, "{text}");
    assert_eq!(r.frames_closed, r.generated, "{text}");
    assert!(r.delivered > 0 && r.dropped > 0, "{text}");
    assert!(r.drops_counted.contains_key("router:filtered"), "{text}");
}
