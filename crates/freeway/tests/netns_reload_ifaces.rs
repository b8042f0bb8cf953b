//! `freeway ctl reload` changing the address masquerade translates to, on real interfaces:
//! h1 inside (10.1.0.2, router `lan` 10.1.0.1), h2 outside (203.0.113.2/24, router `wan`
//! 203.0.113.1, later 203.0.113.9) with no route to the inside, so that only translated
//! traffic reaches it and comes back. After a reload that changes `wan`'s address, a new
//! connection leaves masqueraded to the new address (the tracker lists its reply going to
//! it, and h2, its neighbour cache flushed, answers it); the connection translated before
//! keeps the address it had. `--check` prints the plan and applies nothing; a file that does
//! not parse changes nothing.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere the test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use netbed::*;

const RULESET: &str = r#"table ip nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "wan" masquerade
	}
}
table inet filter {
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "lan" accept
	}
}
"#;

/// The tracker's connections, as `conntrack -L` writes them.
fn conntrack(bed: &Bed) -> String {
    bed.ctl(&["conntrack", "list"])["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Whether `list` has a connection from h1 whose replies go to `to` (masqueraded to it).
fn h1_masqueraded_to(list: &str, to: &str) -> bool {
    let reply = format!("src=203.0.113.2 dst={to} ");
    list.lines()
        .any(|l| l.contains("src=10.1.0.2 dst=203.0.113.2 ") && l.contains(&reply))
}

#[test]
fn masquerade_takes_an_address_changed_by_reload_for_new_connections() {
    need_root!();
    let mut bed = Bed::up("rlm");
    bed.host_on("h1", "10.1.0.2/24", Some("10.1.0.1"));
    bed.host_on("h2", "203.0.113.2/24", None);
    let rules = bed.file("nat.nft", RULESET);
    let one = lan_wan_router(&[("lan", 10, "10.1.0.1/24"), ("wan", 20, "203.0.113.1/24")], &rules);
    let two = one.replace("203.0.113.1/24", "203.0.113.9/24");
    assert_ne!(one, two);
    bed.start_ctl(&one);
    assert!(bed.ping("h1", "203.0.113.2"), "h1 reaches h2 through masquerade");
    let before = conntrack(&bed);
    assert!(
        h1_masqueraded_to(&before, "203.0.113.1"),
        "masqueraded to wan's address: {before}"
    );

    // --check: the plan, nothing applied.
    let text = bed.reload_check(&two);
    assert!(
        text.contains("would apply: interface addresses: wan 203.0.113.9/24"),
        "{text}"
    );
    assert!(!text.contains("restart"), "nothing waits: {text}");
    assert!(bed.unreachable("h2", "203.0.113.9"), "--check applied nothing");

    // Applied: a new connection masquerades to the new address, and h2 (which has to ask for
    // it) answers it.
    bed.reload_applies(&two, "interface addresses: wan 203.0.113.9/24");
    bed.sh_ok("h2", "ip neigh flush dev eth0");
    assert!(bed.ping("h1", "203.0.113.2"), "h1 still reaches h2 through masquerade");
    let after = conntrack(&bed);
    assert!(
        h1_masqueraded_to(&after, "203.0.113.9"),
        "a new connection takes the new address: {after}"
    );
    assert!(
        h1_masqueraded_to(&after, "203.0.113.1"),
        "the connection translated before keeps its address: {after}"
    );
    assert!(bed.ping("h2", "203.0.113.9"), "the new address answers");
    assert!(bed.unreachable("h2", "203.0.113.1"), "the old one no longer does");

    // A file that does not parse changes nothing.
    bed.reload_refused(&format!("{one}\n[[interface]]\nname = "));
    assert!(bed.ping("h2", "203.0.113.9"), "a bad file changed nothing");
    assert!(bed.ping("h1", "203.0.113.2"), "and masquerade goes on");
    bed.stop();
}

/// The addresses of the kernel twin `dev` in Freeway's namespace, as `ip -br addr` lists them.
fn twin_addrs(bed: &Bed, dev: &str) -> String {
    let o = bed.sh_ok("sw", &format!("ip -br addr show dev {dev}"));
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// `[linux] punt`: a reload that changes an interface's addresses gives its kernel twin the
/// new ones (an added subnet, then its first address deleted while a second address of its
/// subnet stays), and forwarding goes on.
#[test]
fn the_kernel_twin_takes_the_addresses_a_reload_gives_its_interface() {
    need_root!();
    let mut bed = Bed::two_subnets("rlt");
    let one = routed_ports_punted();
    let two = one.replace(
        "addr = [\"10.2.0.1/24\"]",
        "addr = [\"10.2.0.1/24\", \"10.2.0.5/24\", \"10.3.0.1/24\"]",
    );
    let three = one.replace("addr = [\"10.2.0.1/24\"]", "addr = [\"10.2.0.5/24\"]");
    assert!(one != two && one != three);
    bed.start_ctl(&one);
    let text = twin_addrs(&bed, "v20");
    assert!(text.contains("10.2.0.1/24") && !text.contains("10.3.0.1/24"), "{text}");

    bed.reload_applies(&two, "interface addresses: v20 10.2.0.1/24 10.2.0.5/24 10.3.0.1/24");
    let text = twin_addrs(&bed, "v20");
    for a in ["10.2.0.1/24", "10.2.0.5/24", "10.3.0.1/24"] {
        assert!(text.contains(a), "the twin has {a}: {text}");
    }

    // The first address goes: the kernel would take the second of its subnet with it, which
    // the twin keeps.
    bed.reload_applies(&three, "interface addresses: v20 10.2.0.5/24");
    let text = twin_addrs(&bed, "v20");
    assert!(text.contains("10.2.0.5/24"), "{text}");
    assert!(!text.contains("10.2.0.1/") && !text.contains("10.3.0.1/"), "{text}");
    assert!(
        twin_addrs(&bed, "v10").contains("10.1.0.1/24"),
        "the other twin keeps its address"
    );
    assert!(bed.ping("h1", "10.2.0.5"), "the new first address answers");
    bed.sh_ok("h2", "ip route replace default via 10.2.0.5");
    assert!(
        bed.ping("h1", "10.2.0.2"),
        "and forwarding goes on (h2 through the new address)"
    );
    bed.stop();
}
