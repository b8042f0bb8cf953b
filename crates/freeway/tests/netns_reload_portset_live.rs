//! `freeway ctl reload` of a file whose set of ports differs from the running one, on real
//! interfaces: hosts h1, h2, h3 on veths (`scripts/netns-testbed.sh`), Freeway bridging h1
//! and h2. A port added opens while the others forward: h1 and h3 ping each other through
//! it and h3's address is learned on it, and pings between h1 and h2 sent all through the
//! reload are all answered. A port removed or of another setting waits for a restart (the
//! answer names it on a line of its own), `--check` prints the plan and applies nothing, and
//! a file with an error changes nothing.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere the test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use netbed::*;

/// Sends a reload request; its answer's text (the request must succeed).
fn reload(bed: &Bed, words: &[&str]) -> String {
    let r = bed.ctl(words);
    r["text"].as_str().expect("a text answer").to_string()
}

#[test]
fn a_port_added_by_reload_forwards_and_the_running_ones_lose_nothing() {
    need_root!();
    let mut bed = Bed::up("rpl");
    let two = ports(2, &[("h1", 1), ("h2", 1)]);
    let three = ports(2, &[("h1", 1), ("h2", 1), ("h3", 1)]);
    bed.start_ctl(&two);
    let file = bed.dir.join("freeway.toml");
    assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2 through the bridge");
    assert!(bed.unreachable("h1", "10.0.0.3"), "h3 has no port yet");

    // `--check` prints the plan and opens nothing.
    std::fs::write(&file, &three).unwrap();
    let plan = reload(&bed, &["reload", "--check"]);
    assert!(plan.contains("would apply: port add h3 (afpacket)"), "{plan}");
    assert_eq!(bed.ctl(&["stats"])["data"]["ports"].as_array().unwrap().len(), 2);

    // The reload, while h1 pings h2: every ping of the stretch is answered.
    let (text, pings) = std::thread::scope(|s| {
        let pings = s.spawn(|| bed.exec("h1", &["ping", "-c", "40", "-i", "0.05", "-W", "2", "10.0.0.2"]));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let text = reload(&bed, &["reload"]);
        (text, pings.join().unwrap())
    });
    assert!(text.contains("applied: port add h3 (afpacket)"), "{text}");
    assert!(!text.contains("FAILED") && !text.contains("waits"), "{text}");
    let out = String::from_utf8_lossy(&pings.stdout);
    assert!(pings.status.success() && out.contains(" 0% packet loss"), "{out}");

    // The new port forwards both ways and learns.
    assert!(bed.ping("h1", "10.0.0.3"), "h1 pings h3 through the added port");
    assert!(bed.ping("h3", "10.0.0.2"), "h3 pings h2");
    let fdb = bed.ctl(&["fdb", "show"]);
    let fdb = fdb["text"].as_str().unwrap();
    assert!(fdb.contains("dev h3"), "h3 learned on its port: {fdb}");
    assert!(bed.tx("h3") > 0 && bed.rx("h3") > 0, "its counters count");

    // A port removed: named, and it keeps forwarding until the restart.
    std::fs::write(&file, &two).unwrap();
    let text = reload(&bed, &["reload"]);
    assert!(text.contains("port h3 removed: waits for a restart"), "{text}");
    assert!(bed.ping("h1", "10.0.0.3"), "h3's port stays until a restart");

    // A port of another setting (its ring's block size): named as changed.
    let ring = three.replace(
        "afpacket = { iface = \"h2\" }",
        "afpacket = { iface = \"h2\", block_size = 1048576 }",
    );
    assert_ne!(ring, three);
    std::fs::write(&file, &ring).unwrap();
    let text = reload(&bed, &["reload", "--check"]);
    assert!(text.contains("port h2 changed (its kind or settings)"), "{text}");

    // A file with an error changes nothing, and forwarding goes on.
    std::fs::write(&file, format!("{three}\n[[port]]\nname = ")).unwrap();
    let w: Vec<String> = ["reload"].iter().map(ToString::to_string).collect();
    let r = freeway_datapath::runtime::ctl_request(&bed.sock(), &w).expect("the control socket answers");
    assert_eq!(r["ok"], false, "{r}");
    assert!(bed.ping("h1", "10.0.0.2"), "a bad file changed nothing");

    // The file of the ports running now: nothing differs any more.
    std::fs::write(&file, &three).unwrap();
    let text = reload(&bed, &["reload"]);
    assert_eq!(text, "no live change\n", "{text}");
    bed.stop();
}
