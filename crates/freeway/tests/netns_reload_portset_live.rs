//! `freeway ctl reload` of a file whose set of ports differs from the running one, on real
//! interfaces: hosts h1, h2, h3 on veths (`scripts/netns-testbed.sh`), Freeway bridging h1
//! and h2. A port added opens while the others forward: h1 and h3 ping each other through
//! it and h3's address is learned on it, and pings between h1 and h2 sent all through the
//! reload are all answered. A port removed stops: no frame leaves it afterwards (its peer's
//! receive counter stays), its FDB entries are flushed. A port of another setting is removed
//! and opened again. `--check` prints the plan and applies nothing, and a file with an error
//! changes nothing.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere the test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use netbed::*;

#[test]
fn ports_added_and_removed_by_reload_while_the_running_ones_lose_nothing() {
    need_root!();
    let mut bed = Bed::up("rpl");
    let two = ports(2, &[("h1", 1), ("h2", 1)]);
    let three = ports(2, &[("h1", 1), ("h2", 1), ("h3", 1)]);
    bed.start_ctl(&two);
    assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2 through the bridge");
    assert!(bed.unreachable("h1", "10.0.0.3"), "h3 has no port yet");

    // `--check` prints the plan and opens nothing.
    let plan = bed.reload_check(&three);
    assert!(plan.contains("would apply: port add h3 (afpacket)"), "{plan}");
    assert_eq!(bed.ctl(&["stats"])["data"]["ports"].as_array().unwrap().len(), 2);

    // The reload, while h1 pings h2: every ping of the stretch is answered.
    let (text, pings) = std::thread::scope(|s| {
        let pings = s.spawn(|| bed.exec("h1", &["ping", "-c", "40", "-i", "0.05", "-W", "2", "10.0.0.2"]));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let text = bed.reload(&three);
        (text, pings.join().unwrap())
    });
    assert!(text.contains("applied: port add h3 (afpacket)"), "{text}");
    assert!(!text.contains("FAILED") && !text.contains("waits"), "{text}");
    let out = String::from_utf8_lossy(&pings.stdout);
    assert!(pings.status.success() && out.contains(" 0% packet loss"), "{out}");

    // The new port forwards both ways and learns.
    assert!(bed.ping("h1", "10.0.0.3"), "h1 pings h3 through the added port");
    assert!(bed.ping("h3", "10.0.0.2"), "h3 pings h2");
    // Learned by the FDB's writer thread, which takes the workers' requests in rounds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let fdb = bed.ctl(&["fdb", "show"]);
        if fdb["text"].as_str().unwrap().contains("dev h3") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "h3 never learned on its port: {fdb}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(bed.tx("h3") > 0 && bed.rx("h3") > 0, "its counters count");

    // A port removed: no frame leaves it once the reload answered (its peer, h2's eth0,
    // receives nothing more: the switch side of the veth sends nothing of the kernel's own),
    // while h1 and h3 go on.
    let one_three = ports(2, &[("h1", 1), ("h3", 1)]);
    let text = bed.reload(&one_three);
    assert_eq!(text, "applied: port remove h2\n", "{text}");
    let h2_rx = || -> u64 {
        let out = bed.sh("h2", "cat /sys/class/net/eth0/statistics/rx_packets");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("a counter")
    };
    let before = h2_rx();
    assert!(bed.unreachable("h1", "10.0.0.2"), "h2's port is gone");
    assert!(bed.ping("h1", "10.0.0.3"), "h1 still pings h3");
    assert!(bed.ping("h3", "10.0.0.1"), "h3 still pings h1");
    assert_eq!(h2_rx(), before, "no frame left the removed port");
    let fdb = bed.ctl(&["fdb", "show"]);
    assert!(
        !fdb["text"].as_str().unwrap().contains("dev h2"),
        "its entries flushed: {fdb}"
    );

    // A port of another setting (its ring's block size): removed and added again.
    let ring = one_three.replace(
        "afpacket = { iface = \"h3\" }",
        "afpacket = { iface = \"h3\", block_size = 1048576 }",
    );
    assert_ne!(ring, one_three);
    let plan = bed.reload_check(&ring);
    assert_eq!(
        plan,
        "would apply: port remove h3\nwould apply: port add h3 (afpacket)\n"
    );
    let text = bed.reload(&ring);
    assert_eq!(text, "applied: port remove h3\napplied: port add h3 (afpacket)\n");
    assert!(bed.ping("h1", "10.0.0.3"), "h1 pings h3 through its port opened again");

    // A file with an error changes nothing, and forwarding goes on.
    bed.reload_refused(&format!("{ring}\n[[port]]\nname = "));
    assert!(bed.ping("h1", "10.0.0.3"), "a bad file changed nothing");

    // The file of the ports running now: nothing differs any more.
    let text = bed.reload(&ring);
    assert_eq!(text, "no live change\n", "{text}");
    bed.stop();
}
