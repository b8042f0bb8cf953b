//! Differential test against libpcap: the same expression compiled by both compilers must
//! give the same verdict on every generated packet (well-formed, VLAN/QinQ, fragments,
//! truncated, corrupted, random bytes). Also runs libpcap's own programs through this
//! crate's VM and checks the verdicts against libpcap's interpreter.
//!
//! Run with `cargo test -p freeway-capture --features libpcap-oracle --test libpcap_diff`.
#![cfg(feature = "libpcap-oracle")]

mod common;

use freeway_capture::bpf::{Insn, Program};
use freeway_capture::filter::compile;
use freeway_capture::samples::frames;
use pcap::{Capture, Linktype};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// libpcap's program as our instructions (via the `Display` of `BpfInstruction`).
fn insns(p: &pcap::BpfProgram) -> Vec<Insn> {
    p.get_instructions()
        .iter()
        .map(|i| {
            let s = i.to_string();
            let v: Vec<u32> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
            Insn {
                code: v[0] as u16,
                jt: v[1] as u8,
                jf: v[2] as u8,
                k: v[3],
            }
        })
        .collect()
}

/// Expressions where libpcap 1.10 is wrong and we are not: in `a - b` where both sides carry
/// protocol checks, libpcap keeps only the left side's (here the `tcp` and first-fragment
/// checks of `tcp[12]` are lost). Tested on their own in `tests/filters.rs`.
const LIBPCAP_BUGS: &[&str] = &["ip[2:2] - ((ip[0]&0xf)<<2) - ((tcp[12]&0xf0)>>2) != 0"];

#[test]
fn verdicts_match_libpcap() {
    let cap = Capture::dead(Linktype::ETHERNET).expect("pcap_open_dead");
    let exprs = common::corpus(600);
    let pkts = frames(42, 3000);
    let mut compared = 0usize;
    let mut evaluations = 0usize;
    let mut order_dependent = 0usize;
    let mut differs_from_plain = 0usize;
    let mut skipped = Vec::new();
    let mut failures = Vec::new();
    for e in &exprs {
        if LIBPCAP_BUGS.contains(&e.as_str()) {
            continue;
        }
        let lib = match cap.compile(e, true) {
            Ok(p) => p,
            Err(err) => {
                skipped.push(format!("{e}: {err}"));
                continue;
            }
        };
        let lib_plain = cap
            .compile(e, false)
            .expect("libpcap compiles it optimised but not plain");
        let mine = match compile(e, 65535) {
            Ok(p) => Program::new(&p).unwrap_or_else(|v| panic!("{e}: generated program invalid: {v}")),
            Err(err) => {
                failures.push(format!("{e}: libpcap compiles it, we do not: {err}"));
                continue;
            }
        };
        let lib_in_our_vm = Program::new(&insns(&lib)).unwrap_or_else(|v| panic!("{e}: libpcap program invalid: {v}"));
        let plain_in_our_vm =
            Program::new(&insns(&lib_plain)).unwrap_or_else(|v| panic!("{e}: libpcap program invalid: {v}"));
        compared += 1;
        let mut bad = 0;
        for p in &pkts {
            evaluations += 1;
            let want = lib.filter(p);
            let plain = lib_plain.filter(p);
            // Our VM must agree with libpcap's interpreter on libpcap's own programs, always.
            let vm = lib_in_our_vm.matches(p);
            let vm_plain = plain_in_our_vm.matches(p);
            let got = mine.matches(p);
            if got != plain {
                differs_from_plain += 1;
            }
            let ok = if want != plain {
                // libpcap's own verdict depends on its optimiser (a packet cut inside the
                // headers, where the order of loads decides): accept either.
                order_dependent += 1;
                got == want || got == plain
            } else {
                got == want
            };
            if !ok || vm != want || vm_plain != plain {
                bad += 1;
                if bad <= 3 {
                    failures.push(format!(
                        "{e}: libpcap {want} (unoptimised {plain}), ours {got}, libpcap's programs in our VM \
                         {vm}/{vm_plain}, packet {}",
                        hex(p)
                    ));
                }
            }
        }
        if bad > 3 {
            failures.push(format!("{e}: ... {bad} packets disagree in all"));
        }
    }
    eprintln!(
        "libpcap diff: {compared} expressions x {} packets = {evaluations} verdicts compared; {order_dependent} \
         verdicts where libpcap's optimised and unoptimised programs disagree (either accepted); {} expressions \
         skipped (libpcap rejects them)",
        pkts.len(),
        skipped.len()
    );
    eprintln!("verdicts that differ from libpcap's unoptimised program: {differs_from_plain}");
    assert!(
        compared >= 300,
        "too few expressions compared: {compared}; skipped: {skipped:#?}"
    );
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn libpcap_rejects_what_we_reject() {
    // Expressions both compilers must refuse.
    let cap = Capture::dead(Linktype::ETHERNET).expect("pcap_open_dead");
    for e in [
        "tcp port 99999",
        "net 10.1.2.3/8",
        "vlan 5000",
        "ip[0] / 0 = 1",
        "ip[0] % 0 = 1",
        "ip[0] << 40 = 0",
        "ip[1:3] = 1",
        "tcp host 1.2.3.4",
        "ip port 80",
        "ip6 host 1.2.3.4",
        "ip host ::1",
        "port 80 and",
        "(tcp",
        "net 10.0.0.0/33",
        "ip6 net ::/129",
        "tcp and 80",
        "ip6 broadcast",
        "arp broadcast",
    ] {
        assert!(cap.compile(e, true).is_err(), "libpcap accepted {e}");
        assert!(compile(e, 65535).is_err(), "we accepted {e}");
    }
}

#[test]
fn ip_broadcast_is_libpcap_s_with_netmask_0() {
    // `pcap_compile` here gets netmask 0, as tcpdump passes for a file or an interface whose
    // netmask it does not know: `ip broadcast` is then IPv4 destination 0.0.0.0 or
    // 255.255.255.255. Checked on its own so that a libpcap refusing it cannot make the
    // corpus comparison skip it silently.
    let cap = Capture::dead(Linktype::ETHERNET).expect("pcap_open_dead");
    let pkts = frames(7, 2000);
    for e in ["ip broadcast", "vlan and ip broadcast", "not ip broadcast or udp"] {
        let lib = cap
            .compile(e, true)
            .unwrap_or_else(|err| panic!("libpcap refuses {e}: {err}"));
        let mine = compile(e, 65535).unwrap_or_else(|err| panic!("{e}: {err}"));
        if e == "ip broadcast" {
            assert_eq!(mine, insns(&lib), "{e}: not libpcap's program");
        }
        let mine = Program::new(&mine).unwrap();
        for p in &pkts {
            assert_eq!(mine.matches(p), lib.filter(p), "{e} on {}", hex(p));
        }
    }
}
