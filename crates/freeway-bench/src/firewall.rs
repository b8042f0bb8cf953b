//! `freeway bench firewall`: classifications per second of one worker, the classifier
//! (`Strategy::Compiled`) against the linear evaluator (`Strategy::Linear`, the "before")
//! on the same generated rulesets and packets, in the same run.
//!
//! The rulesets are a server/office policy of the requested size: a leading `ct state
//! established,related accept`, `ct state invalid drop`, web access for a named set of
//! allowed clients, ICMP echo, then per-host service rules (`ip daddr H tcp dport P
//! accept`), DNS for office subnets, blocked subnets, all in one `inet` forward chain with
//! `policy drop`. The packets are new connections (`ct state new`) aimed at rules all over
//! the ruleset and at the policy. A second measurement judges established packets with a
//! 1,000-rule ruleset and with none, in alternating pairs, and reports the ratio.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use freeway_firewall::ast::{Elem, Family, Field, Hook, Policy, Ruleset, ValueType};
use freeway_firewall::build::*;
use freeway_firewall::{Action, Fields, Firewall, Strategy, NO_IF};
use serde::Serialize;

use crate::{median, write_json};

/// `bench firewall`.
#[derive(Args, Clone)]
pub struct FirewallArgs {
    /// Ruleset sizes (rules), e.g. 10,100,1000,10000.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
    pub rules: Vec<usize>,
    /// Measured seconds per strategy and size.
    #[arg(long, default_value_t = 1.0, value_parser = freeway_datapath::config::parse_seconds)]
    pub seconds: f64,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also forward through the whole datapath (router, conntrack) with a ruleset of this
    /// many rules and with none, alternating: the paired ratio for established and new
    /// traffic (0: skip).
    #[arg(long, default_value_t = 1000)]
    pub forward_rules: usize,
    /// Rounds of the forwarding comparison.
    #[arg(long, default_value_t = 3)]
    pub forward_runs: usize,
}

/// One size's result.
#[derive(Serialize, Clone, Debug)]
pub struct SizeRow {
    /// Rules in the ruleset.
    pub rules: usize,
    /// Million classifications per second, classifier.
    pub compiled_mpps: f64,
    /// Million classifications per second, linear.
    pub linear_mpps: f64,
    /// compiled / linear.
    pub speedup: f64,
    /// Bytes the compiled ruleset holds.
    pub compiled_memory: usize,
    /// Bytes the linear (resolved) ruleset holds.
    pub linear_memory: usize,
    /// Seconds to build the compiled ruleset.
    pub compile_s: f64,
    /// Share of the packets accepted (the rest hit a drop or the policy).
    pub accepted: f64,
}

/// The established-packet cost.
#[derive(Serialize, Clone, Debug)]
pub struct EstablishedRow {
    /// Rules in the ruleset.
    pub rules: usize,
    /// Nanoseconds per established packet with that ruleset (classifier).
    pub ns_with_rules: f64,
    /// Nanoseconds per packet with no ruleset.
    pub ns_without: f64,
    /// The median of the paired ratios.
    pub ratio: f64,
}

#[derive(Serialize)]
struct Report {
    sizes: Vec<SizeRow>,
    established: EstablishedRow,
    forward: Vec<crate::fw_forward::ForwardRun>,
    forward_paired: crate::fw_forward::Ratios,
}

/// Per-host service ports the generator uses.
const PORTS: [u128; 8] = [22, 25, 80, 443, 993, 3306, 5432, 8080];

fn host(i: usize) -> u128 {
    v4(10, 1 + (i / 62_500) as u8, ((i / 250) % 250) as u8, (i % 250 + 1) as u8)
}

/// A server/office policy of exactly `n` rules (at least 4).
pub fn ruleset(n: usize) -> Ruleset {
    let clients: Vec<Elem> = (0..256)
        .map(|i| Elem(vec![val(v4(192, 168, 10, 0) + i as u128)]))
        .collect();
    let mut rules = vec![
        rule(vec![any_bit(Field::CtState, 2 | 4, false), accept()]),
        rule(vec![any_bit(Field::CtState, 1, false), drop()]),
        rule(vec![
            in_set(&[Field::IpSaddr], "clients", false),
            is(Field::TcpDport, &[val(80), val(443)]),
            accept(),
        ]),
        rule(vec![is(Field::IcmpType, &[val(8)]), accept()]),
    ];
    let mut i = 0;
    while rules.len() < n {
        let h = host(i);
        rules.push(match i % 50 {
            49 => rule(vec![
                is(Field::IpSaddr, &[prefix4(v4(172, 16, (i / 50 % 256) as u8, 0), 24)]),
                counter(),
                drop(),
            ]),
            k if k % 10 == 9 => rule(vec![
                is(Field::IpSaddr, &[prefix4(v4(192, 168, (i / 10 % 256) as u8, 0), 24)]),
                is(Field::IpDaddr, &[val(h)]),
                is(Field::UdpDport, &[val(53)]),
                accept(),
            ]),
            _ => rule(vec![
                is(Field::IpDaddr, &[val(h)]),
                is(Field::TcpDport, &[val(PORTS[i % PORTS.len()])]),
                accept(),
            ]),
        });
        i += 1;
    }
    rules.truncate(n);
    Ruleset {
        tables: vec![table(
            Family::Inet,
            "filter",
            vec![set("clients", &[ValueType::Ipv4Addr], false, clients)],
            vec![base_chain("forward", Hook::Forward, 0, Policy::Drop, rules)],
        )],
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn tcp(saddr: u128, daddr: u128, dport: u16, ct_state: u8) -> Fields {
    Fields {
        ct_state,
        ..tcp4(saddr, daddr, dport)
    }
}

/// New-connection packets for an `n`-rule ruleset: aimed at host rules all over it (60%),
/// at hosts on ports no rule opens (20%), allowed clients' web traffic (10%), DNS and ICMP
/// (10%).
pub fn packets(n: usize, count: usize) -> Vec<Fields> {
    let hosts = n.saturating_sub(4).max(1);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..count)
        .map(|_| {
            let i = rng.below(hosts);
            let src = v4(198, 51, 100, rng.below(250) as u8);
            match rng.below(10) {
                0..=5 => tcp(src, host(i), PORTS[i % PORTS.len()] as u16, 8),
                6 | 7 => tcp(src, host(i), 1 + rng.below(1000) as u16, 8),
                8 => tcp(v4(192, 168, 10, rng.below(256) as u8), host(i), 443, 8),
                _ if rng.below(2) == 0 => Fields {
                    l4proto: 17,
                    saddr: v4(192, 168, (i / 10 % 256) as u8, 7),
                    ..tcp(src, host(i), 53, 8)
                },
                _ => Fields {
                    l4proto: 1,
                    icmp_type: 8,
                    dport: 0,
                    oif: NO_IF,
                    ..tcp(src, host(i), 0, 8)
                },
            }
        })
        .collect()
}

/// Judges `pkts` round and round for `seconds`: (classifications per second, accepted share).
fn measure(fw: &Firewall, pkts: &[Fields], seconds: f64) -> (f64, f64) {
    let mut st = fw.worker(0);
    let start = Instant::now();
    let (mut done, mut accepted) = (0u64, 0u64);
    loop {
        for f in pkts {
            if fw.judge(Hook::Forward, black_box(f), &mut st, 0).action == Action::Accept {
                accepted += 1;
            }
        }
        done += pkts.len() as u64;
        let el = start.elapsed().as_secs_f64();
        if el >= seconds {
            return (done as f64 / el, accepted as f64 / done as f64);
        }
    }
}

/// Runs `bench firewall`.
pub fn firewall(a: FirewallArgs) -> Result<(), String> {
    if a.rules.iter().any(|&n| !(4..=1_000_000).contains(&n)) {
        return Err("--rules: each size must be 4..=1000000".into());
    }
    let ifaces = [("eth0".to_string(), 1), ("eth1".to_string(), 2)];
    let mut rows = Vec::new();
    let title = format!(
        "bench firewall: one worker, new-connection packets, {} s per strategy and size",
        a.seconds
    );
    println!("{title}\n\n  rules  compiled M/s  linear M/s  speedup  compiled MiB  linear MiB  compile s  accepted");
    for &n in &a.rules {
        let rs = ruleset(n);
        let t = Instant::now();
        let comp = Firewall::new(rs.clone(), &ifaces, 1, Strategy::Compiled).map_err(|e| e.to_string())?;
        let compile_s = t.elapsed().as_secs_f64();
        let lin = Firewall::new(rs, &ifaces, 1, Strategy::Linear).map_err(|e| e.to_string())?;
        // Linear is slow on big rulesets: fewer packets, still spread over the whole ruleset.
        let pkts = packets(n, if n >= 1000 { 1024 } else { 4096 });
        let (mut sc, mut sl) = (comp.worker(0), lin.worker(0));
        for f in &pkts {
            let (dc, dl) = (
                comp.judge(Hook::Forward, f, &mut sc, 0),
                lin.judge(Hook::Forward, f, &mut sl, 0),
            );
            if dc != dl {
                return Err(format!(
                    "the strategies disagree on {f:?}: compiled {dc:?}, linear {dl:?}"
                ));
            }
        }
        let (cps, accepted) = measure(&comp, &pkts, a.seconds);
        let (lps, _) = measure(&lin, &pkts, a.seconds);
        let row = SizeRow {
            rules: n,
            compiled_mpps: cps / 1e6,
            linear_mpps: lps / 1e6,
            speedup: cps / lps,
            compiled_memory: comp.memory(),
            linear_memory: lin.memory(),
            compile_s,
            accepted,
        };
        println!(
            "{:>7}  {:>12.2}  {:>10.3}  {:>6.1}x  {:>12.2}  {:>10.2}  {:>9.3}  {:>7.0}%",
            n,
            row.compiled_mpps,
            row.linear_mpps,
            row.speedup,
            row.compiled_memory as f64 / (1 << 20) as f64,
            row.linear_memory as f64 / (1 << 20) as f64,
            compile_s,
            accepted * 100.0
        );
        rows.push(row);
    }
    let established = established(&ifaces, a.seconds)?;
    println!(
        "\nestablished packets: {:.1} ns with {} rules, {:.1} ns with none: ratio {:.2} (median of paired runs)",
        established.ns_with_rules, established.rules, established.ns_without, established.ratio
    );
    let (forward, forward_paired) = if a.forward_rules > 0 {
        println!(
            "\nforwarding through the datapath (router, conntrack, one worker, 64-byte frames): {} rules vs none, {} rounds of {} s",
            a.forward_rules, a.forward_runs, a.seconds.max(1.0)
        );
        let (runs, paired) = crate::fw_forward::compare(a.forward_rules, 1, a.seconds.max(1.0), a.forward_runs, true)?;
        for (traffic, ratio) in &paired {
            let mpps = |n: usize| {
                let v: Vec<f64> = runs
                    .iter()
                    .filter(|r| &r.traffic == traffic && r.rules == n)
                    .map(|r| r.mpps_per_worker)
                    .collect();
                median(&v)
            };
            println!(
                "  {traffic:<12} none {:.2} Mpps, ruleset {:.2} Mpps: paired ratio {ratio:.3}",
                mpps(0),
                mpps(a.forward_rules)
            );
        }
        (runs, paired)
    } else {
        (Vec::new(), Vec::new())
    };
    write_json(
        a.json.as_deref(),
        &Report {
            sizes: rows,
            established,
            forward,
            forward_paired,
        },
    )
}

/// Established packets: a 1,000-rule ruleset vs none, in alternating pairs.
fn established(ifaces: &[(String, u32)], seconds: f64) -> Result<EstablishedRow, String> {
    const RULES: usize = 1000;
    let with = Firewall::new(ruleset(RULES), ifaces, 1, Strategy::Compiled).map_err(|e| e.to_string())?;
    let without = Firewall::new(Ruleset::default(), ifaces, 1, Strategy::Compiled).map_err(|e| e.to_string())?;
    let pkts: Vec<Fields> = packets(RULES, 1024)
        .into_iter()
        .map(|f| Fields { ct_state: 2, ..f })
        .collect();
    let per = (seconds / 10.0).max(0.01);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..10 {
        let x = 1e9 / measure(&with, &pkts, per).0;
        let y = 1e9 / measure(&without, &pkts, per).0;
        a.push(x);
        b.push(y);
        ratios.push(x / y);
    }
    Ok(EstablishedRow {
        rules: RULES,
        ns_with_rules: median(&a),
        ns_without: median(&b),
        ratio: median(&ratios),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_ruleset_has_its_size_and_hits_its_rules() {
        for n in [4, 10, 1000] {
            let rs = ruleset(n);
            assert_eq!(rs.tables[0].chains[0].rules.len(), n);
            let comp = Firewall::new(rs.clone(), &[], 1, Strategy::Compiled).expect("builds");
            let lin = Firewall::new(rs, &[], 1, Strategy::Linear).expect("builds");
            let (mut sc, mut sl) = (comp.worker(0), lin.worker(0));
            let mut deep = 0;
            for f in packets(n, 500) {
                let d = comp.judge(Hook::Forward, &f, &mut sc, 0);
                assert_eq!(d, lin.judge(Hook::Forward, &f, &mut sl, 0));
                deep += usize::from(d.by.is_some_and(|r| r.rule as usize > n / 2));
            }
            if n >= 1000 {
                assert!(deep > 50, "packets reach the second half of the ruleset: {deep}");
            }
        }
    }
}
