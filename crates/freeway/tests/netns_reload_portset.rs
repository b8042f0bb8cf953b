//! `freeway ctl reload` of a file whose set of ports differs from the running one, on real
//! interfaces: hosts h1, h2, h3 on veths (`scripts/netns-testbed.sh`), Freeway bridging h1
//! and h2. A port added, removed or of another kind or setting waits for a restart: the
//! answer (and `--check`'s plan) names each such port on a line of its own, the running ports
//! go on forwarding untouched through the reload, and a file with an error changes nothing.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere the test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use netbed::*;

#[test]
fn ports_added_or_removed_by_reload_are_named_and_the_running_ones_go_on() {
    need_root!();
    let mut bed = Bed::up("rps");
    let two = ports(2, &[("h1", 1), ("h2", 1)]);
    bed.start_ctl(&two);
    assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2 through the bridge");
    assert!(bed.unreachable("h1", "10.0.0.3"), "h3 has no port yet");

    // A port added: `--check` prints the plan, the reload names the port as waiting.
    let three = ports(2, &[("h1", 1), ("h2", 1), ("h3", 1)]);
    let plan = bed.reload_check(&three);
    assert!(plan.contains("not applied, waits for a restart: ports"), "{plan}");
    assert!(plan.contains("port h3 added (afpacket): waits for a restart"), "{plan}");
    let text = bed.reload(&three);
    assert!(text.contains("port h3 added (afpacket): waits for a restart"), "{text}");
    assert!(!text.contains("applied:") && !text.contains("FAILED"), "{text}");
    let before = bed.rx("h1");
    assert!(
        bed.ping("h1", "10.0.0.2"),
        "the running ports forward through the reload"
    );
    assert!(bed.rx("h1") > before, "the same port h1 still receives");
    assert!(bed.unreachable("h1", "10.0.0.3"), "h3's port opens at a restart only");

    // A port removed: named; it keeps forwarding until the restart.
    let text = bed.reload(&ports(2, &[("h1", 1)]));
    assert!(text.contains("port h2 removed: waits for a restart"), "{text}");
    assert!(bed.ping("h1", "10.0.0.2"), "h2's port stays until a restart");

    // A port of another setting (its ring's block size): named as changed.
    let ring = two.replace(
        "afpacket = { iface = \"h2\" }",
        "afpacket = { iface = \"h2\", block_size = 1048576 }",
    );
    assert_ne!(ring, two);
    let text = bed.reload_check(&ring);
    assert!(text.contains("port h2 changed (its kind or settings)"), "{text}");

    // A file with an error changes nothing, and forwarding goes on.
    bed.reload_refused(&format!("{two}\n[[port]]\nname = "));
    assert!(bed.ping("h1", "10.0.0.2"), "a bad file changed nothing");

    // The file the run started with: nothing differs any more.
    let text = bed.reload(&two);
    assert_eq!(text, "no live change\n", "{text}");
    bed.stop();
}
