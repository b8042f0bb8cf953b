//! The README's namespace walk-throughs, taken from README.md and run as written (root).
//!
//! * "Between network namespaces": the `sh` block is run by bash, line for line, in a scratch
//!   directory where its relative paths resolve: `scripts/` is the repository's, and
//!   `./target/release/freeway` is this build's binary (the block's `cargo build --release`
//!   line is left out: cargo built it). Its fixed socket `/tmp/fw.sock` becomes one in the
//!   scratch directory, and `FW_SUFFIX` (which `scripts/netns-testbed.sh` reads) gives its
//!   namespaces names of their own, so that test beds can run side by side. Checked: every
//!   ping answered, tcpdump's 10 lines of the capture, both runs' summaries, nothing left.
//! * "A routing daemon drives the router": the `[linux]` block, as written, in a router's
//!   config, with BIRD 2 in Freeway's namespace exporting a static route to the kernel's main
//!   table: the route is learned (`proto bird`) and forwarded through. The upstream BIRD
//!   configuration of "Scaling out" is parsed by BIRD itself (`bird -p`); the two-node run it
//!   belongs to is `netns_scaleout.rs`.
//!
//! Needs root: see `netbed` (a loud skip elsewhere, a failure under CI); tcpdump and bird2
//! likewise.

#[macro_use]
mod netbed;

use std::process::Command;
use std::time::Duration;

use netbed::bird::{wait_for, Bird};
use netbed::*;

/// The README's text.
fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// The body of the first fenced block opened by a line starting with `fence` after the
/// first line starting with `after`.
fn block(text: &str, after: &str, fence: &str) -> String {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(after));
    assert!(lines.next().is_some(), "README.md has no {after:?}");
    let body: Vec<&str> = lines
        .skip_while(|l| !l.starts_with(fence))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(!body.is_empty(), "README.md: no {fence} block after {after:?}");
    body.join("\n") + "\n"
}

/// Whether `tool` is installed; if not, a loud skip (a failure under CI) saying `why`.
fn have_or_skip(tool: &str, why: &str) -> bool {
    let have = installed(tool);
    if !have {
        freeway_testkit::skip(format!("{tool} is not installed: {why}"));
    }
    have
}

/// A test bed that the README's own commands bring up and down: only its names (suffix) and
/// directory; dropped, it is torn down whatever the script did.
fn bed_for_readme(tag: &str) -> Bed {
    let suffix = format!("-{tag}{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("freeway-netns{suffix}"));
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    Bed {
        suffix,
        freeway: None,
        dir,
        mtu: 1500,
    }
}

#[test]
fn the_veth_test_bed_walk_through_runs_as_written() {
    need_root!();
    if !have_or_skip("tcpdump", "the walk-through pipes its capture into it") {
        return;
    }
    let block = block(&readme(), "### Between network namespaces", "```sh");
    let bed = bed_for_readme("rdme");
    let dir = &bed.dir;
    std::os::unix::fs::symlink(repo().join("scripts"), dir.join("scripts")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_freeway"), dir.join("target/release/freeway")).unwrap();
    let sock = dir.join("fw.sock");
    let mut script = String::from("set -e\n");
    for line in block.lines() {
        // Built already, by cargo: the binary is linked where the block looks for it.
        if line.starts_with("cargo build --release") {
            continue;
        }
        script.push_str(&line.replace("/tmp/fw.sock", sock.to_str().unwrap()));
        script.push('\n');
    }
    let out = Command::new("timeout")
        .args(["300", "bash", "-c", &script])
        .current_dir(dir)
        .env("FW_SUFFIX", &bed.suffix)
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the walk-through failed:\n{script}\n{text}");
    assert!(!text.contains("freeway: error"), "{text}");
    assert!(text.contains(" 3 received"), "the bridge answers: {text}");
    assert!(
        text.contains("10 packets transmitted, 10 received"),
        "no ping lost while the capture runs on the daemon: {text}"
    );
    let captured: Vec<&str> = text.lines().filter(|l| l.contains(": ICMP echo")).collect();
    assert_eq!(captured.len(), 10, "tcpdump prints the capture's 10 packets: {text}");
    assert!(text.contains("10 packets captured"), "the capture's summary: {text}");
    assert_eq!(
        text.matches("summary after").count(),
        2,
        "both runs stop on SIGINT: {text}"
    );
    // `down` ran: the namespaces are gone.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains(&bed.suffix),
        "the bed is down"
    );
}

#[test]
fn bird_drives_the_router_with_the_readme_s_linux_section() {
    need_root!();
    let bird2 = "BIRD 2 drives the router (Debian package bird2)";
    if !(have_or_skip("bird", bird2) && have_or_skip("birdc", bird2)) {
        return;
    }
    let text = readme();
    let linux = block(&text, "### A routing daemon drives the router", "```toml");
    assert!(linux.starts_with("[linux]"), "{linux}");

    // The upstream's configuration of "Scaling out", as BIRD reads it.
    let mut bed = Bed::up("rdbird");
    let upstream = bed.dir.join("upstream.conf");
    std::fs::write(&upstream, block(&text, "**Scaling out.**", "```")).unwrap();
    let parsed = Command::new("bird")
        .arg("-p")
        .arg("-c")
        .arg(&upstream)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&parsed.stderr);
    assert!(
        parsed.status.success(),
        "the README's upstream BIRD configuration: {err}"
    );
    // A router whose [linux] section is the README's; BIRD in its namespace exports a
    // static route through h2 to the kernel's main table.
    two_subnets(&bed);
    bed.sh_ok("h2", "ip addr add 172.20.0.1/32 dev lo");
    let mut cfg = ports(2, &[("h1", 10), ("h2", 20)]);
    cfg.push_str(&router_v10_v20());
    cfg.push('\n');
    cfg.push_str(&linux);
    bed.start_ctl(&cfg);
    let conf = "router id 10.2.0.1;\nprotocol device { scan time 1; }\n\
         protocol kernel { scan time 1; ipv4 { import none; export all; }; }\n\
         protocol static { ipv4; route 172.20.0.0/24 via 10.2.0.2; }\n";
    let _bird = Bird::start(&bed, "local", "sw", conf);
    let learned = wait_for(Duration::from_secs(30), || {
        bed.ctl(&["route", "show"])["text"]
            .as_str()
            .unwrap()
            .lines()
            .any(|l| l.starts_with("172.20.0.0/24 via 10.2.0.2 dev v20 proto bird"))
    });
    assert!(
        learned.is_some(),
        "BIRD's route learned: {}\nkernel: {}",
        bed.ctl(&["route", "show"])["text"],
        String::from_utf8_lossy(&bed.sh("sw", "ip route").stdout)
    );
    assert!(bed.ping("h1", "172.20.0.1"), "forwarded along BIRD's route");
    bed.stop();
}
