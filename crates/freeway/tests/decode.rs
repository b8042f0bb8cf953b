//! `freeway capture -r FILE` against tcpdump itself: the same files, the same flags, the same
//! lines. The corpus is `tests/decode/real.pcap` (traffic between two namespaces' own stacks:
//! ARP, ping and a fragmented ping, IPv6 neighbour discovery and MLD, TCP over IPv4 and IPv6
//! with their options, UDP, port unreachables, a reset, a fragmented UDP datagram; recorded by
//! `scripts/decode-corpus.sh`) and `tests/decode/synthetic.pcap` (every ICMP and ICMPv6
//! error, codes tcpdump does not name, timestamp replies, router advertisements, Mobile
//! IPv6's and router renumbering's messages, VLAN and QinQ tags, IPv6 extension headers and fragments, IGMP, MLD, STP, cut and
//! malformed frames; written by `scripts/decode-corpus.py`).
//!
//! Needs tcpdump: without it each test prints a loud SKIPPED line, and fails under CI.

mod common;

use std::path::{Path, PathBuf};

use common::ok;

fn corpus(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/decode").join(name)
}

fn freeway_lines(file: &Path, args: &[&str]) -> String {
    let mut a = vec!["capture", "-r", file.to_str().unwrap()];
    a.extend_from_slice(args);
    String::from_utf8(ok(&a).stdout).unwrap()
}

/// Compares line by line, naming the first difference.
fn same(file: &Path, args: &[&str]) {
    let Some(want) = freeway_testkit::tcpdump(file, args) else {
        return;
    };
    let got = freeway_lines(file, args);
    for (n, (w, g)) in want.lines().zip(got.lines()).enumerate() {
        assert_eq!(
            g,
            w,
            "{} {args:?}: line {} differs from tcpdump's",
            file.display(),
            n + 1
        );
    }
    assert_eq!(
        got.lines().count(),
        want.lines().count(),
        "{} {args:?}: as many lines as tcpdump",
        file.display()
    );
    assert!(want.lines().count() > 0);
}

#[test]
fn real_traffic_decodes_as_tcpdump_decodes_it() {
    same(&corpus("real.pcap"), &["-n"]);
    same(&corpus("real.pcap"), &["-n", "-e"]);
}

#[test]
fn unusual_frames_decode_as_tcpdump_decodes_them() {
    same(&corpus("synthetic.pcap"), &["-n"]);
    same(&corpus("synthetic.pcap"), &["-n", "-e"]);
}

#[test]
fn a_filter_and_a_count_pick_the_packets_tcpdump_picks() {
    same(&corpus("real.pcap"), &["-n", "-c", "3", "icmp or icmp6"]);
    same(&corpus("real.pcap"), &["-n", "tcp[tcpflags] & tcp-syn != 0"]);
    same(&corpus("synthetic.pcap"), &["-n", "vlan"]);
}

#[test]
fn matches_written_with_w_are_what_tcpdump_selects() {
    let dir = std::env::temp_dir().join(format!("freeway-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("udp.pcap");
    ok(&[
        "capture",
        "-r",
        corpus("real.pcap").to_str().unwrap(),
        "-w",
        out.to_str().unwrap(),
        "-s",
        "200",
        "udp",
    ]);
    if let (Some(want), Some(got)) = (
        freeway_testkit::tcpdump(&corpus("real.pcap"), &["-n", "udp"]),
        freeway_testkit::tcpdump(&out, &["-n"]),
    ) {
        assert_eq!(got, want);
        let head = std::fs::read(&out).unwrap();
        assert_eq!(
            u32::from_ne_bytes(head[16..20].try_into().unwrap()),
            200,
            "-s is the file's snap length"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_that_is_not_a_capture_is_a_clear_error() {
    let bad = std::env::temp_dir().join(format!("freeway-decode-bad-{}", std::process::id()));
    std::fs::write(&bad, b"hello, not a pcap").unwrap();
    let o = common::freeway(&["capture", "-r", bad.to_str().unwrap()]);
    let _ = std::fs::remove_file(&bad);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(bad.to_str().unwrap()), "{err}");
}

#[test]
fn bpf_dumps_have_tcpdumps_three_forms() {
    let d = String::from_utf8(ok(&["capture", "-d", "tcp"]).stdout).unwrap();
    let dd = String::from_utf8(ok(&["capture", "-dd", "tcp"]).stdout).unwrap();
    let ddd = String::from_utf8(ok(&["capture", "-ddd", "tcp"]).stdout).unwrap();
    let n = d.lines().count();
    assert!(n > 2, "{d}");
    assert_eq!(dd.lines().count(), n);
    assert!(dd.lines().all(|l| l.starts_with("{ 0x") && l.ends_with(" },")), "{dd}");
    assert_eq!(ddd.lines().next().unwrap(), n.to_string());
    assert_eq!(ddd.lines().count(), n + 1);
    // The -ddd numbers are the -dd ones in decimal.
    let first_dd = dd.lines().next().unwrap();
    let code = u16::from_str_radix(first_dd.trim_start_matches("{ 0x").split(',').next().unwrap(), 16).unwrap();
    assert!(ddd.lines().nth(1).unwrap().starts_with(&format!("{code} ")));
}

#[test]
fn d_upper_lists_the_ports_of_the_config() {
    let dir = std::env::temp_dir().join(format!("freeway-decode-d-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let demo = dir.join("demo.toml");
    std::fs::write(&demo, ok(&["default-config"]).stdout).unwrap();
    let out = String::from_utf8(ok(&["capture", "-D", "--config", demo.to_str().unwrap()]).stdout).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let first = out.lines().next().unwrap_or_default();
    assert!(first.starts_with("1."), "{out}");
}
