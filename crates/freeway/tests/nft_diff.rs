//! The firewall against the Linux kernel's: `scripts/nft-diff.py` builds a kernel router and
//! a Freeway router in network namespaces, loads the same nftables ruleset into both, sends
//! both the same crafted packets and real flows and compares every packet's fate (delivered,
//! rejected with which ICMP error or TCP reset, dropped). The rulesets: the parser's corpus
//! (`crates/freeway-firewall/tests/rulesets/`), this crate's own (`tests/nft-diff/`) and 20
//! random ones the kernel accepts. The corpus's NAT rulesets are compared by the far host's
//! view instead, in `netns_nat_kernel.rs` (nft-diff says so and passes them over).
//!
//! Needs root (namespaces, veths, AF_PACKET), python3, ip, nft and conntrack: elsewhere the
//! test prints a loud SKIPPED line and passes; with `CI` set it fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why this machine cannot run the comparison, if it cannot.
fn missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    ["python3", "ip", "nft", "conntrack"]
        .into_iter()
        .find(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|tool| format!("{tool} is not installed"))
}

/// The `.nft` files of `dir`, sorted; none if it does not exist.
fn rulesets(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        eprintln!("nft_diff: no ruleset directory {}: left out", dir.display());
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "nft"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_firewall_judges_every_packet_as_the_kernel_does() {
    if let Some(why) = missing() {
        freeway_testkit::skip(format!(
            "{why}: the differential test against the kernel's nftables needs root, python3, ip, nft and conntrack"
        ));
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root");
    let mut files = rulesets(&root.join("crates/freeway-firewall/tests/rulesets"));
    files.extend(rulesets(&root.join("crates/freeway/tests/nft-diff")));
    let out = Command::new("python3")
        .arg(root.join("scripts/nft-diff.py"))
        .args([
            "--freeway",
            env!("CARGO_BIN_EXE_freeway"),
            "--random",
            "20",
            "--seed",
            "1",
            "--skip-unsupported",
        ])
        .args(&files)
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        out.status.success(),
        "nft-diff found mismatches or could not run ({}): its output is above",
        out.status
    );
}
