//! The evaluators' tests: every match kind and verdict on both strategies, limits with a fake
//! clock, counters over two workers, logs, the checks `Firewall::new` makes, and a property
//! test that the classifier and the linear evaluator always decide alike.

use proptest::prelude::{any, prop, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig};
use proptest::strategy::Strategy as _;

use crate::ast::{Elem, Family, Field, Hook, Item, Policy, RejectWith, Rule, Ruleset, ValueType, Verdict};
use crate::build::*;
use crate::firewall::{Action, Decision, Firewall, RuleRef, Strategy};
use crate::packet::{Fields, NFPROTO_IPV4, NFPROTO_IPV6, NO_IF};

fn ifaces() -> Vec<(String, u32)> {
    vec![("eth0".into(), 1), ("eth1".into(), 2), ("wan0".into(), 3)]
}

/// The same ruleset three ways: linear, compiled with every rule through the bitmaps,
/// compiled as in production.
fn all_ways(rs: &Ruleset) -> [Firewall; 3] {
    let i = ifaces();
    [
        Firewall::new(rs.clone(), &i, 1, Strategy::Linear).expect("builds"),
        Firewall::with_prefix(rs.clone(), &i, 1, Strategy::Compiled, 0).expect("builds"),
        Firewall::new(rs.clone(), &i, 1, Strategy::Compiled).expect("builds"),
    ]
}

fn one_chain(policy: Policy, rules: Vec<crate::ast::Rule>) -> Ruleset {
    Ruleset {
        tables: vec![table(
            Family::Inet,
            "t",
            vec![],
            vec![base_chain("fwd", Hook::Forward, 0, policy, rules)],
        )],
    }
}

fn judge_all(rs: &Ruleset, f: &Fields) -> Decision {
    let ds: Vec<Decision> = all_ways(rs)
        .iter()
        .map(|fw| {
            let mut st = fw.worker(0);
            fw.judge(Hook::Forward, f, &mut st, 0)
        })
        .collect();
    assert_eq!(ds[0], ds[1], "linear vs compiled (bitmaps only)");
    assert_eq!(ds[0], ds[2], "linear vs compiled");
    ds[0]
}

/// Whether a rule `items… accept` in a drop-policy chain accepts `f`, on every strategy.
fn hits(items: Vec<crate::ast::Item>, f: &Fields) -> bool {
    let mut items = items;
    items.push(accept());
    let rs = one_chain(Policy::Drop, vec![rule(items)]);
    judge_all(&rs, f).action == Action::Accept
}

fn at(table: u16, chain: u16, rule: u32) -> Option<RuleRef> {
    Some(RuleRef { table, chain, rule })
}

#[test]
fn address_and_port_matches() {
    let f = tcp4(v4(10, 0, 0, 5), v4(192, 168, 1, 1), 22);
    assert!(hits(vec![is(Field::IpSaddr, &[prefix4(v4(10, 0, 0, 0), 8)])], &f));
    assert!(!hits(vec![is(Field::IpSaddr, &[prefix4(v4(10, 1, 0, 0), 16)])], &f));
    assert!(hits(vec![not(Field::IpSaddr, &[prefix4(v4(10, 1, 0, 0), 16)])], &f));
    assert!(hits(
        vec![
            is(Field::IpDaddr, &[val(v4(192, 168, 1, 1))]),
            is(Field::TcpDport, &[val(22), val(80)])
        ],
        &f
    ));
    assert!(hits(vec![is(Field::TcpDport, &[range(20, 23)])], &f));
    assert!(!hits(vec![is(Field::UdpDport, &[val(22)])], &f));
    assert!(
        !hits(vec![not(Field::UdpDport, &[val(22)])], &f),
        "!= on an absent protocol does not match"
    );
    assert!(hits(vec![is(Field::ThDport, &[val(22)])], &f));
    assert!(hits(vec![is(Field::TcpSport, &[range(1024, 65535)])], &f));
    assert!(!hits(vec![is(Field::Ip6Saddr, &[range(0, u128::MAX)])], &f));
    assert!(!hits(vec![not(Field::Ip6Saddr, &[val(1)])], &f));
    assert!(hits(vec![is(Field::L4Proto, &[val(6)])], &f));
    assert!(hits(vec![is(Field::IpProtocol, &[val(6)])], &f));
    assert!(!hits(vec![is(Field::Ip6Nexthdr, &[val(6)])], &f));
    assert!(hits(vec![is(Field::NfProto, &[val(2)])], &f));
    assert!(hits(vec![is(Field::IpTtl, &[val(64)])], &f));
    assert!(hits(vec![is(Field::Length, &[range(0, 100)])], &f));
    assert!(hits(vec![is(Field::Mark, &[val(0)])], &f));
    // Two matches on one field: both must pass.
    assert!(hits(
        vec![is(Field::TcpDport, &[range(0, 100)]), not(Field::TcpDport, &[val(80)])],
        &f
    ));
    assert!(!hits(
        vec![is(Field::TcpDport, &[range(0, 100)]), not(Field::TcpDport, &[val(22)])],
        &f
    ));
    // A fragment has no ports.
    let frag = Fields { frag: true, ..f };
    assert!(!hits(vec![is(Field::TcpDport, &[val(22)])], &frag));
    assert!(!hits(vec![not(Field::TcpDport, &[val(23)])], &frag));
    assert!(hits(vec![is(Field::L4Proto, &[val(6)])], &frag));
    // IPv6.
    let f6 = Fields {
        nfproto: 10,
        saddr: 0x2001_0db8 << 96 | 7,
        ..f
    };
    assert!(hits(
        vec![is(
            Field::Ip6Saddr,
            &[range(0x2001_0db8 << 96, (0x2001_0db8 << 96) | u128::from(u64::MAX))]
        )],
        &f6
    ));
    assert!(!hits(vec![is(Field::IpSaddr, &[range(0, u128::from(u32::MAX))])], &f6));
    assert!(hits(
        vec![is(Field::Ip6Nexthdr, &[val(6)]), is(Field::TcpDport, &[val(22)])],
        &f6
    ));
}

#[test]
fn icmp_vlan_ether_ct_flag_matches() {
    let icmp = Fields {
        l4proto: 1,
        icmp_type: 8,
        icmp_code: 0,
        ..tcp4(1, 2, 0)
    };
    assert!(hits(vec![is(Field::IcmpType, &[val(8)])], &icmp));
    assert!(hits(vec![is(Field::IcmpCode, &[val(0)])], &icmp));
    assert!(!hits(vec![is(Field::Icmpv6Type, &[val(8)])], &icmp));
    assert!(!hits(vec![is(Field::TcpDport, &[val(0)])], &icmp));
    let icmp6 = Fields {
        nfproto: 10,
        l4proto: 58,
        icmp_type: 135,
        ..icmp
    };
    assert!(hits(vec![is(Field::Icmpv6Type, &[val(135)])], &icmp6));
    assert!(!hits(vec![is(Field::IcmpType, &[val(135)])], &icmp6));
    let mut f = tcp4(1, 2, 443);
    assert!(!hits(vec![is(Field::VlanId, &[range(0, 4095)])], &f), "untagged");
    f.vlan = 100;
    assert!(hits(vec![is(Field::VlanId, &[val(100)])], &f));
    f.ether_saddr = 0x0200_0000_0001;
    assert!(hits(vec![is(Field::EtherSaddr, &[val(0x0200_0000_0001)])], &f));
    assert!(hits(vec![is(Field::EtherType, &[val(0x0800)])], &f));
    // ct state: a flag field, any bit; 0 = not tracked matches nothing.
    f.ct_state = 2;
    assert!(hits(vec![any_bit(Field::CtState, 2 | 4, false)], &f));
    assert!(!hits(vec![any_bit(Field::CtState, 8, false)], &f));
    assert!(hits(vec![any_bit(Field::CtState, 8, true)], &f));
    assert!(hits(vec![is(Field::CtZone, &[val(0)])], &f));
    f.ct_state = 0;
    assert!(!hits(vec![any_bit(Field::CtState, 0xff, true)], &f));
    assert!(!hits(vec![is(Field::CtZone, &[val(0)])], &f));
    // tcp flags & (syn|ack) == syn.
    f.tcp_flags = 0x02;
    assert!(hits(vec![masked(Field::TcpFlags, 0x12, 0x02, false)], &f));
    f.tcp_flags = 0x12;
    assert!(!hits(vec![masked(Field::TcpFlags, 0x12, 0x02, false)], &f));
    assert!(hits(vec![masked(Field::TcpFlags, 0x12, 0x02, true)], &f));
    // A wide mask (not in the bitmaps).
    f.mark = 0xabcd_0001;
    assert!(hits(vec![masked(Field::Mark, 0xffff, 1, false)], &f));
    assert!(!hits(vec![masked(Field::Mark, 0xffff_0000, 1, false)], &f));
}

#[test]
fn interface_names() {
    let f = tcp4(1, 2, 3); // iif 1 (eth0), oif 2 (eth1)
    assert!(hits(vec![is(Field::IifName, &[name("eth0")])], &f));
    assert!(!hits(vec![is(Field::IifName, &[name("eth1")])], &f));
    assert!(hits(vec![is(Field::OifName, &[name("eth*")])], &f));
    assert!(!hits(vec![is(Field::OifName, &[name("wan*")])], &f));
    assert!(!hits(vec![is(Field::IifName, &[name("nosuch")])], &f));
    assert!(hits(vec![not(Field::IifName, &[name("nosuch")])], &f));
    let none = Fields { oif: NO_IF, ..f };
    assert!(
        !hits(vec![not(Field::OifName, &[name("eth0")])], &none),
        "no output interface: no match"
    );
}

#[test]
fn concatenations_and_named_sets() {
    let f = tcp4(v4(10, 0, 0, 5), v4(192, 168, 1, 1), 22);
    let pair = |a: u128, p: u128| Elem(vec![val(a), val(p)]);
    let c = [Field::IpDaddr, Field::TcpDport];
    assert!(hits(vec![concat(&c, vec![pair(v4(192, 168, 1, 1), 22)], false)], &f));
    assert!(!hits(vec![concat(&c, vec![pair(v4(192, 168, 1, 1), 80)], false)], &f));
    assert!(hits(vec![concat(&c, vec![pair(v4(192, 168, 1, 1), 80)], true)], &f));
    assert!(hits(
        vec![concat(
            &c,
            vec![Elem(vec![prefix4(v4(192, 168, 0, 0), 16), range(1, 1023)])],
            false
        )],
        &f
    ));
    assert!(!hits(
        vec![concat(
            &[Field::IpDaddr, Field::UdpDport],
            vec![pair(v4(192, 168, 1, 1), 22)],
            true
        )],
        &f
    ));
    assert!(hits(
        vec![concat(
            &[Field::IifName, Field::TcpDport],
            vec![Elem(vec![name("eth*"), val(22)])],
            false
        )],
        &f
    ));

    let sets = vec![
        set(
            "clients",
            &[ValueType::Ipv4Addr],
            true,
            vec![Elem(vec![prefix4(v4(10, 0, 0, 0), 24)])],
        ),
        set(
            "svc",
            &[ValueType::Ipv4Addr, ValueType::InetService],
            false,
            vec![pair(v4(192, 168, 1, 1), 22)],
        ),
    ];
    let rs = |items: Vec<crate::ast::Item>| Ruleset {
        tables: vec![table(
            Family::Ip,
            "t",
            sets.clone(),
            vec![base_chain(
                "fwd",
                Hook::Forward,
                0,
                Policy::Drop,
                vec![rule([items, vec![accept()]].concat())],
            )],
        )],
    };
    let ok = |items| judge_all(&rs(items), &f).action == Action::Accept;
    assert!(ok(vec![in_set(&[Field::IpSaddr], "clients", false)]));
    assert!(!ok(vec![in_set(&[Field::IpDaddr], "clients", false)]));
    assert!(ok(vec![in_set(&[Field::IpDaddr], "clients", true)]));
    assert!(ok(vec![in_set(&c, "svc", false)]));
    assert!(!ok(vec![in_set(&[Field::IpSaddr, Field::TcpDport], "svc", false)]));
}

#[test]
fn jump_goto_return_continue_policy() {
    let rs = Ruleset {
        tables: vec![table(
            Family::Inet,
            "t",
            vec![],
            vec![
                base_chain(
                    "fwd",
                    Hook::Forward,
                    0,
                    Policy::Drop,
                    vec![
                        rule(vec![is(Field::TcpDport, &[val(1)]), jump("a")]),
                        rule(vec![is(Field::TcpDport, &[val(2)]), goto("a")]),
                        rule(vec![is(Field::TcpDport, &[range(1, 3)]), accept()]),
                        rule(vec![is(Field::TcpDport, &[val(4)]), verdict(Verdict::Return)]),
                        rule(vec![is(Field::TcpDport, &[val(5)]), verdict(Verdict::Continue)]),
                        rule(vec![
                            is(Field::TcpDport, &[val(5)]),
                            verdict(Verdict::Reject(RejectWith::TcpReset)),
                        ]),
                    ],
                ),
                chain(
                    "a",
                    vec![
                        rule(vec![is(Field::IpSaddr, &[val(9)]), drop()]),
                        rule(vec![is(Field::IpSaddr, &[val(8)]), verdict(Verdict::Return)]),
                        rule(vec![is(Field::IpSaddr, &[val(7)]), accept()]),
                    ],
                ),
            ],
        )],
    };
    let d = |saddr, dport| judge_all(&rs, &tcp4(saddr, 2, dport));
    // jump, drop inside.
    assert_eq!((d(9, 1).action, d(9, 1).by), (Action::Drop, at(0, 1, 0)));
    // jump, return: back to rule 2 of the base chain.
    assert_eq!((d(8, 1).action, d(8, 1).by), (Action::Accept, at(0, 0, 2)));
    // jump, end of chain: the same.
    assert_eq!(d(1, 1).by, at(0, 0, 2));
    // goto, return: back to the base chain's caller, i.e. its policy.
    let g = d(8, 2);
    assert_eq!((g.action, g.by, g.policy_of), (Action::Drop, None, Some((0, 0))));
    assert_eq!(d(7, 2).by, at(0, 1, 2));
    // return in a base chain: its policy.
    assert_eq!((d(1, 4).action, d(1, 4).policy_of), (Action::Drop, Some((0, 0))));
    // continue: the next rule.
    assert_eq!(
        (d(1, 5).action, d(1, 5).by),
        (Action::Reject(RejectWith::TcpReset), at(0, 0, 5))
    );
}

#[test]
fn base_chains_in_priority_order() {
    let rs = Ruleset {
        tables: vec![
            table(
                Family::Ip,
                "late",
                vec![],
                vec![base_chain(
                    "f",
                    Hook::Forward,
                    10,
                    Policy::Accept,
                    vec![rule(vec![is(Field::TcpDport, &[val(22)]), drop()])],
                )],
            ),
            table(
                Family::Inet,
                "early",
                vec![],
                vec![
                    base_chain("f", Hook::Forward, -5, Policy::Accept, vec![rule(vec![accept()])]),
                    base_chain(
                        "g",
                        Hook::Forward,
                        10,
                        Policy::Accept,
                        vec![rule(vec![is(Field::TcpDport, &[val(80)]), drop()])],
                    ),
                    base_chain("i", Hook::Input, 0, Policy::Drop, vec![]),
                ],
            ),
            table(
                Family::Ip6,
                "v6",
                vec![],
                vec![base_chain("f", Hook::Forward, 0, Policy::Drop, vec![])],
            ),
            table(
                Family::Bridge,
                "br",
                vec![],
                vec![base_chain("f", Hook::Forward, 0, Policy::Drop, vec![])],
            ),
        ],
    };
    for fw in all_ways(&rs) {
        let mut st = fw.worker(0);
        // Accepted early, dropped by a later base chain.
        let d = fw.judge(Hook::Forward, &tcp4(1, 2, 22), &mut st, 0);
        assert_eq!((d.action, d.by), (Action::Drop, at(0, 0, 0)));
        // Equal priority 10: "late" is declared first, so its drop decides first; for port
        // 80 it passes and "early g" drops.
        let d = fw.judge(Hook::Forward, &tcp4(1, 2, 80), &mut st, 0);
        assert_eq!(d.by, at(1, 1, 0));
        // Accepted by every chain: the last one's policy.
        let d = fw.judge(Hook::Forward, &tcp4(1, 2, 443), &mut st, 0);
        assert_eq!((d.action, d.by, d.policy_of), (Action::Accept, None, Some((1, 1))));
        // IPv6: only the inet and ip6 tables; the ip6 chain's policy drops.
        let f6 = Fields {
            nfproto: 10,
            ..tcp4(1, 2, 22)
        };
        let d = fw.judge(Hook::Forward, &f6, &mut st, 0);
        assert_eq!((d.action, d.policy_of), (Action::Drop, Some((2, 0))));
        // Input: its own chain; not IP: no chain.
        assert_eq!(fw.judge(Hook::Input, &tcp4(1, 2, 22), &mut st, 0).action, Action::Drop);
        assert_eq!(
            fw.judge(Hook::Output, &tcp4(1, 2, 22), &mut st, 0),
            Decision {
                action: Action::Accept,
                by: None,
                policy_of: None
            }
        );
        assert_eq!(
            fw.judge(Hook::Forward, &Fields::default(), &mut st, 0).action,
            Action::Accept
        );
        // Bridge tables only for bridged frames.
        assert_eq!(
            fw.judge_bridge(Hook::Forward, &Fields::default(), &mut st, 0).policy_of,
            Some((3, 0))
        );
        assert!(fw.has_hook(2, Hook::Input) && fw.has_hook(10, Hook::Forward) && !fw.has_hook(10, Hook::Output));
        assert!(fw.has_hook(crate::NFPROTO_BRIDGE, Hook::Forward) && !fw.has_hook(0, Hook::Forward));
    }
}

#[test]
fn limit_burst_and_refill_with_a_fake_clock() {
    let rs = one_chain(Policy::Drop, vec![rule(vec![limit_per_second(10, 5, false), accept()])]);
    for fw in all_ways(&rs) {
        let mut st = fw.worker(0);
        let f = tcp4(1, 2, 3);
        let passed = |st: &mut _, now| {
            (0..20)
                .filter(|_| fw.judge(Hook::Forward, &f, st, now).action == Action::Accept)
                .count()
        };
        assert_eq!(passed(&mut st, 1000), 5, "the burst");
        assert_eq!(passed(&mut st, 1000), 0);
        assert_eq!(passed(&mut st, 1100), 1, "one packet per 100 ms");
        assert_eq!(passed(&mut st, 1350), 2);
        assert_eq!(passed(&mut st, 60_000), 5, "refilled to the burst, no more");
    }
    // `over`: matches while the rate is exceeded.
    let rs = one_chain(Policy::Accept, vec![rule(vec![limit_per_second(10, 2, true), drop()])]);
    let fw = Firewall::new(rs.clone(), &[], 1, Strategy::Compiled).expect("builds");
    let mut st = fw.worker(0);
    let acts: Vec<Action> = (0..4)
        .map(|_| fw.judge(Hook::Forward, &tcp4(1, 2, 3), &mut st, 0).action)
        .collect();
    assert_eq!(acts, [Action::Accept, Action::Accept, Action::Drop, Action::Drop]);
    // Two workers: each gets half the rate and half the burst (rounded up).
    let rs = one_chain(Policy::Drop, vec![rule(vec![limit_per_second(10, 5, false), accept()])]);
    let fw = Firewall::new(rs, &[], 2, Strategy::Compiled).expect("builds");
    let mut a = fw.worker(0);
    let f = tcp4(1, 2, 3);
    assert_eq!(
        (0..10)
            .filter(|_| fw.judge(Hook::Forward, &f, &mut a, 0).action == Action::Accept)
            .count(),
        3
    );
    assert_eq!(
        (0..10)
            .filter(|_| fw.judge(Hook::Forward, &f, &mut a, 200).action == Action::Accept)
            .count(),
        1
    );
}

#[test]
fn counters_sum_over_workers() {
    let rs = one_chain(
        Policy::Accept,
        vec![
            rule(vec![counter(), is(Field::TcpDport, &[val(22)]), counter(), drop()]),
            rule(vec![is(Field::TcpDport, &[val(80)]), accept()]),
        ],
    );
    for fw in all_ways(&rs) {
        let mut sts = [fw.worker(0), fw.worker(1)];
        for (w, dport) in [(0, 22), (1, 22), (1, 80), (0, 443)] {
            fw.judge(Hook::Forward, &tcp4(1, 2, dport), &mut sts[w], 0);
        }
        // Every packet reaches the first counter (60 bytes each).
        assert_eq!(fw.counters(0, 0, 0), Some((4, 240)));
        assert_eq!(fw.counters(0, 0, 1), None, "no counter");
        assert_eq!(fw.counters(0, 0, 9), None);
    }
    // The second counter of rule 0 (after the match) is not what `counters` reports, but
    // counts only the matching packets: check it through a rule that has only it.
    let rs = one_chain(
        Policy::Accept,
        vec![rule(vec![is(Field::TcpDport, &[val(22)]), counter(), drop()])],
    );
    for fw in all_ways(&rs) {
        let (mut a, mut b) = (fw.worker(0), fw.worker(1));
        fw.judge(Hook::Forward, &tcp4(1, 2, 22), &mut a, 0);
        fw.judge(Hook::Forward, &tcp4(1, 2, 22), &mut b, 0);
        fw.judge(Hook::Forward, &tcp4(1, 2, 23), &mut b, 0);
        assert_eq!(fw.counters(0, 0, 0), Some((2, 120)));
    }
}

#[test]
fn logs_are_rate_limited() {
    let rs = one_chain(
        Policy::Accept,
        vec![rule(vec![is(Field::TcpDport, &[val(22)]), log(Some("ssh: "))])],
    );
    let fw = Firewall::new(rs, &[], 1, Strategy::Compiled).expect("builds");
    let mut st = fw.worker(0);
    for _ in 0..25 {
        fw.judge(Hook::Forward, &tcp4(1, 2, 22), &mut st, 5_000);
    }
    let mut out = Vec::new();
    st.take_logs(&mut out);
    assert_eq!(out.len(), crate::LOG_LINES_PER_SEC);
    assert_eq!(st.logs_suppressed(), 25 - crate::LOG_LINES_PER_SEC as u64);
    assert_eq!(
        out[0].rule,
        RuleRef {
            table: 0,
            chain: 0,
            rule: 0
        }
    );
    let line = out[0].to_string();
    assert!(line.starts_with("ssh: IIF=1 OIF=2 SRC=0.0.0.1 DST=0.0.0.2"), "{line}");
    assert!(line.ends_with("DPT=22 RULE=0/0/0"), "{line}");
    // The next second: more lines.
    fw.judge(Hook::Forward, &tcp4(1, 2, 22), &mut st, 6_000);
    out.clear();
    st.take_logs(&mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn a_state_from_another_ruleset_is_remade() {
    let old = Firewall::new(one_chain(Policy::Drop, vec![]), &[], 1, Strategy::Compiled).expect("builds");
    let new = Firewall::new(
        one_chain(
            Policy::Accept,
            vec![rule(vec![counter(), limit_per_second(1, 1, false)])],
        ),
        &[],
        1,
        Strategy::Compiled,
    )
    .expect("builds");
    let mut st = old.worker(0);
    assert_eq!(
        new.judge(Hook::Forward, &tcp4(1, 2, 3), &mut st, 0).action,
        Action::Accept
    );
    assert_eq!(new.counters(0, 0, 0), Some((1, 60)));
}

#[test]
fn errors_name_the_span() {
    use crate::ast::Span;
    let sp = Span { line: 3, col: 7 };
    let with_span = |mut r: crate::ast::Rule| {
        r.span = sp;
        r
    };
    let build = |chains: Vec<crate::ast::Chain>| {
        Firewall::new(
            Ruleset {
                tables: vec![table(Family::Inet, "t", vec![], chains)],
            },
            &[],
            1,
            Strategy::Compiled,
        )
        .map(|_| ())
        .expect_err("fails")
    };
    let e = build(vec![base_chain(
        "f",
        Hook::Forward,
        0,
        Policy::Accept,
        vec![with_span(rule(vec![jump("nosuch")]))],
    )]);
    assert_eq!(
        (e.span, e.msg.as_str()),
        (sp, "unknown chain \"nosuch\" in table inet t")
    );
    let e = build(vec![
        base_chain("f", Hook::Forward, 0, Policy::Accept, vec![rule(vec![jump("a")])]),
        chain("a", vec![rule(vec![jump("b")])]),
        chain("b", vec![with_span(rule(vec![goto("a")]))]),
    ]);
    assert_eq!(e.span, sp);
    assert!(e.msg.contains("loop"), "{}", e.msg);
    // n nested jumps: f → c0 → … → c(n-1).
    let nest = |n: usize| {
        let mut chains = vec![base_chain(
            "f",
            Hook::Forward,
            0,
            Policy::Accept,
            vec![rule(vec![jump("c0")])],
        )];
        for i in 0..n - 1 {
            chains.push(chain(&format!("c{i}"), vec![rule(vec![jump(&format!("c{}", i + 1))])]));
        }
        chains.push(chain(&format!("c{}", n - 1), vec![]));
        Ruleset {
            tables: vec![table(Family::Inet, "t", vec![], chains)],
        }
    };
    let e = Firewall::new(nest(17), &[], 1, Strategy::Linear).expect_err("too deep");
    assert!(e.msg.contains("nested jumps"), "{}", e.msg);
    let fw = Firewall::new(nest(16), &[], 1, Strategy::Compiled).expect("16 nested jumps are fine");
    assert_eq!(
        fw.judge(Hook::Forward, &tcp4(1, 2, 3), &mut fw.worker(0), 0).policy_of,
        Some((0, 0))
    );
    let e = build(vec![base_chain(
        "f",
        Hook::Forward,
        0,
        Policy::Accept,
        vec![rule(vec![in_set(&[Field::IpSaddr], "s", false)])],
    )]);
    assert!(e.msg.contains("unknown set \"s\""), "{}", e.msg);
    let rs = Ruleset {
        tables: vec![table(
            Family::Inet,
            "t",
            vec![set("s", &[ValueType::InetService], false, vec![])],
            vec![base_chain(
                "f",
                Hook::Forward,
                0,
                Policy::Accept,
                vec![rule(vec![in_set(&[Field::IpSaddr], "s", false)])],
            )],
        )],
    };
    let e = Firewall::new(rs, &[], 1, Strategy::Linear).expect_err("type mismatch");
    assert!(e.msg.contains("does not fit ip saddr"), "{}", e.msg);
    let e = build(vec![base_chain(
        "f",
        Hook::Forward,
        0,
        Policy::Accept,
        vec![rule(vec![is(Field::TcpDport, &[val(70000)])])],
    )]);
    assert!(e.msg.contains("16-bit"), "{}", e.msg);
}

#[test]
fn memory_is_reported() {
    let rules = (0..200)
        .map(|i| {
            rule(vec![
                is(Field::IpDaddr, &[val(i)]),
                is(Field::TcpDport, &[val(22)]),
                accept(),
            ])
        })
        .collect();
    let rs = one_chain(Policy::Drop, rules);
    let lin = Firewall::new(rs.clone(), &[], 1, Strategy::Linear).expect("builds");
    let comp = Firewall::new(rs, &[], 1, Strategy::Compiled).expect("builds");
    assert!(lin.memory() > 0 && comp.memory() > lin.memory());
}

// The property: for random rulesets and packets, the classifier decides as the linear
// evaluator does (action and rule), and leaves the same counters.

const FIELDS: [Field; 10] = [
    Field::IpSaddr,
    Field::Ip6Saddr,
    Field::IpDaddr,
    Field::TcpDport,
    Field::UdpDport,
    Field::ThDport,
    Field::L4Proto,
    Field::CtState,
    Field::IifName,
    Field::Mark,
];

fn small_value(field: Field) -> impl proptest::strategy::Strategy<Value = crate::ast::Atom> {
    let names = prop_oneof![Just("eth0"), Just("eth1"), Just("eth*"), Just("wan0"), Just("x")].prop_map(name);
    let nums = (0u128..8, 0u128..4).prop_map(|(lo, w)| range(lo, lo + w));
    if field == Field::IifName {
        names.boxed()
    } else {
        nums.boxed()
    }
}

fn arb_match() -> impl proptest::strategy::Strategy<Value = crate::ast::Item> {
    let single = (0..FIELDS.len(), any::<bool>()).prop_flat_map(|(fi, neg)| {
        let field = FIELDS[fi];
        prop::collection::vec(small_value(field), 1..3).prop_map(move |atoms| {
            if neg {
                not(field, &atoms)
            } else {
                is(field, &atoms)
            }
        })
    });
    let bits = (0u128..16, any::<bool>(), any::<bool>()).prop_map(|(b, neg, masked_)| {
        if masked_ {
            masked(Field::CtState, b, b & 0x6, neg)
        } else {
            any_bit(Field::CtState, b, neg)
        }
    });
    let pair = (0u128..6, 0u128..6, any::<bool>()).prop_map(|(a, p, neg)| {
        concat(
            &[Field::IpSaddr, Field::ThDport],
            vec![Elem(vec![val(a), val(p)]), Elem(vec![range(0, 2), val(p + 1)])],
            neg,
        )
    });
    let sets = (any::<bool>(), any::<bool>()).prop_map(|(pairs, neg)| {
        if pairs {
            in_set(&[Field::IpSaddr, Field::ThDport], "pairs", neg)
        } else {
            in_set(&[Field::IpDaddr], "hosts", neg)
        }
    });
    prop_oneof![6 => single, 1 => bits, 1 => pair, 1 => sets, 1 => Just(masked(Field::Mark, 0x5, 0x1, false))]
}

fn arb_rule(chains: usize) -> impl proptest::strategy::Strategy<Value = crate::ast::Rule> {
    let stmt = prop_oneof![Just(counter()), Just(limit_per_second(1, 2, false)), Just(log(None))];
    let verdict = prop_oneof![
        3 => Just(accept()),
        3 => Just(drop()),
        1 => Just(verdict(Verdict::Reject(RejectWith::Default))),
        1 => Just(verdict(Verdict::Continue)),
        1 => Just(verdict(Verdict::Return)),
        2 => (0..chains).prop_map(|c| jump(&format!("u{c}"))),
        1 => (0..chains).prop_map(|c| goto(&format!("u{c}"))),
    ];
    (
        prop::collection::vec(arb_match(), 0..4),
        prop::option::of(stmt),
        prop::collection::vec(arb_match(), 0..2),
        prop::option::of(verdict),
    )
        .prop_map(|(mut items, stmt, after, v)| {
            items.extend(stmt);
            items.extend(after);
            items.extend(v);
            rule(items)
        })
}

/// A base chain and three user chains; user chain `uK` jumps only to higher ones (no loops).
fn arb_ruleset() -> impl proptest::strategy::Strategy<Value = Ruleset> {
    (
        // Up to three 64-rule words, so that sparse bitmaps span several words.
        prop::collection::vec(arb_rule(3), 0..180),
        prop::collection::vec(prop::collection::vec(arb_rule(3), 0..8), 3),
        any::<bool>(),
    )
        .prop_map(|(base, users, pol)| {
            let mut chains = vec![base_chain(
                "f",
                Hook::Forward,
                0,
                if pol { Policy::Accept } else { Policy::Drop },
                base,
            )];
            for (k, mut rules) in users.into_iter().enumerate() {
                for r in &mut rules {
                    for it in &mut r.items {
                        if let crate::ast::Item::Stmt(crate::ast::Stmt::Verdict(Verdict::Jump(t) | Verdict::Goto(t))) =
                            it
                        {
                            let target: usize = t[1..].parse().expect("uN");
                            if target <= k {
                                *it = accept();
                            }
                        }
                    }
                }
                chains.push(chain(&format!("u{k}"), rules));
            }
            let sets = vec![
                set(
                    "hosts",
                    &[ValueType::Ipv4Addr],
                    true,
                    vec![Elem(vec![range(2, 4)]), Elem(vec![val(7)])],
                ),
                set(
                    "pairs",
                    &[ValueType::Ipv4Addr, ValueType::InetService],
                    true,
                    vec![Elem(vec![val(1), val(3)]), Elem(vec![range(4, 6), range(0, 2)])],
                ),
            ];
            Ruleset {
                tables: vec![table(Family::Inet, "t", sets, chains)],
            }
        })
}

fn arb_fields() -> impl proptest::strategy::Strategy<Value = Fields> {
    (
        (0u32..5, prop_oneof![Just(2u8), Just(10), Just(0)], 0u128..9, 0u128..9),
        (
            prop_oneof![Just(6u8), Just(17), Just(1), Just(132)],
            0u16..9,
            any::<bool>(),
        ),
        (prop_oneof![Just(0u8), Just(1), Just(2), Just(4), Just(8)], 0u32..4),
    )
        .prop_map(
            |((iif, nfproto, saddr, daddr), (l4proto, dport, frag), (ct_state, mark))| Fields {
                iif: if iif == 4 { NO_IF } else { iif },
                oif: NO_IF,
                nfproto,
                saddr,
                daddr,
                l4proto,
                sport: 1000,
                dport,
                length: 100,
                ct_state,
                mark,
                frag,
                ether_type: 0x0800,
                ..Fields::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn compiled_decides_as_linear(rs in arb_ruleset(), pkts in prop::collection::vec(arb_fields(), 1..24)) {
        let [lin, bits, comp] = all_ways(&rs);
        let (mut a, mut b, mut c) = (lin.worker(0), bits.worker(0), comp.worker(0));
        for (i, f) in pkts.iter().enumerate() {
            let now = i as u64 * 300;
            let want = lin.judge(Hook::Forward, f, &mut a, now);
            prop_assert_eq!(bits.judge(Hook::Forward, f, &mut b, now), want, "bitmaps only, packet {:?}", f);
            prop_assert_eq!(comp.judge(Hook::Forward, f, &mut c, now), want, "packet {:?}", f);
        }
        for (ci, ch) in rs.tables[0].chains.iter().enumerate() {
            for ri in 0..ch.rules.len() {
                prop_assert_eq!(bits.counters(0, ci, ri), lin.counters(0, ci, ri));
                prop_assert_eq!(comp.counters(0, ci, ri), lin.counters(0, ci, ri));
            }
        }
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        a.take_logs(&mut la);
        b.take_logs(&mut lb);
        prop_assert_eq!(la, lb);
    }
}

/// Many rules of one shape: one group of several 64-rule words, whose bitmaps are sparse.
fn arb_big_group() -> impl proptest::strategy::Strategy<Value = Ruleset> {
    let r = (0u128..40, 0u128..6, any::<bool>(), 0u8..4).prop_map(|(d, p, neg, v)| {
        let port = if neg {
            not(Field::TcpDport, &[val(p)])
        } else {
            is(Field::TcpDport, &[val(p)])
        };
        let v = match v {
            0 => drop(),
            1 => verdict(Verdict::Continue),
            _ => accept(),
        };
        rule(vec![is(Field::IpDaddr, &[val(d)]), port, v])
    });
    prop::collection::vec(r, 64..400).prop_map(|rules| one_chain(Policy::Drop, rules))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn compiled_decides_as_linear_on_big_groups(rs in arb_big_group(), pkts in prop::collection::vec((0u128..42, 0u16..7), 1..64)) {
        let [lin, bits, comp] = all_ways(&rs);
        let (mut a, mut b, mut c) = (lin.worker(0), bits.worker(0), comp.worker(0));
        for (daddr, dport) in pkts {
            let f = tcp4(1, daddr, dport);
            let want = lin.judge(Hook::Forward, &f, &mut a, 0);
            prop_assert_eq!(bits.judge(Hook::Forward, &f, &mut b, 0), want);
            prop_assert_eq!(comp.judge(Hook::Forward, &f, &mut c, 0), want);
        }
    }
}

#[test]
fn a_firewall_is_shared_and_a_state_moves() {
    fn shared<T: Send + Sync>() {}
    fn moves<T: Send>() {}
    shared::<Firewall>();
    moves::<crate::FwState>();
}

/// A leading bare `ct state established,related accept` in every base chain of a hook lets
/// the caller skip judging such packets; anything else in that rule, or a chain that starts
/// otherwise, turns the shortcut off. Where it is on, judging gives the same verdict.
#[test]
fn a_leading_ct_state_accept_is_a_shortcut_only_when_exact() {
    let lead = |extra: Vec<Item>| {
        let mut items = vec![any_bit(Field::CtState, 2 | 4, false)];
        items.extend(extra);
        items.push(accept());
        rule(items)
    };
    let rs = |first: Rule, second_chain: bool| {
        let mut chains = vec![base_chain(
            "f",
            Hook::Forward,
            0,
            Policy::Drop,
            vec![first, rule(vec![is(Field::TcpDport, &[val(22)]), accept()])],
        )];
        if second_chain {
            chains.push(base_chain(
                "g",
                Hook::Forward,
                5,
                Policy::Accept,
                vec![rule(vec![drop()])],
            ));
        }
        Ruleset {
            tables: vec![table(Family::Inet, "t", vec![], chains)],
        }
    };
    let ifaces: Vec<(String, u32)> = Vec::new();
    let fw = Firewall::new(rs(lead(vec![]), false), &ifaces, 1, Strategy::Compiled).unwrap();
    for (state, fast) in [(2, true), (4, true), (8, false), (1, false), (0, false)] {
        assert_eq!(
            fw.accepts_state(NFPROTO_IPV4, Hook::Forward, state),
            fast,
            "state {state}"
        );
        assert_eq!(
            fw.accepts_state(NFPROTO_IPV6, Hook::Forward, state),
            fast,
            "state {state}"
        );
    }
    assert!(!fw.accepts_state(NFPROTO_IPV4, Hook::Input, 2), "no chain on input");
    let mut st = fw.worker(0);
    let f = Fields {
        ct_state: 2,
        ..tcp4(v4(10, 0, 0, 1), v4(10, 0, 0, 2), 80)
    };
    assert_eq!(fw.judge(Hook::Forward, &f, &mut st, 0).action, Action::Accept);
    for off in [
        rs(lead(vec![counter()]), false),
        rs(lead(vec![is(Field::TcpDport, &[val(80)])]), false),
        rs(lead(vec![]), true),
        rs(rule(vec![any_bit(Field::CtState, 2, true), accept()]), false),
    ] {
        let fw = Firewall::new(off, &ifaces, 1, Strategy::Compiled).unwrap();
        assert!(!fw.accepts_state(NFPROTO_IPV4, Hook::Forward, 2));
    }
}

/// NAT chains: the first NAT statement that applies decides, on every strategy; a map
/// misses or a statement of the other family lets the chain go on; filter chains never see
/// NAT statements.
#[test]
fn nat_chains_decide_once() {
    use crate::ast::NatKind;
    use crate::nat::NatChoice;
    let rs = crate::parse(
        "table inet n {\n chain pre {\n  type nat hook prerouting priority dstnat;\n  \
         iifname \"wan0\" dnat ip to tcp dport map { 8080 : 10.0.10.5 . 80, 9000-9009 : 10.0.10.6 . 22 }\n  \
         iifname \"wan0\" dnat ip6 to fd00::1\n  iifname \"wan0\" tcp dport 53 drop\n }\n \
         chain post {\n  type nat hook postrouting priority srcnat;\n  oifname \"wan0\" meta l4proto tcp masquerade to :2000-2999\n  \
         oifname \"eth1\" snat ip to 192.0.2.1-192.0.2.3\n }\n}\n",
    )
    .expect("parses");
    for fw in all_ways(&rs) {
        let mut st = fw.worker(0);
        let mut f = crate::build::tcp4(v4(10, 0, 0, 1), v4(192, 0, 2, 1), 8080);
        f.iif = 3;
        let d = |f: &Fields, h: Hook, st: &mut crate::FwState| fw.judge_nat(h, f, st, 0).action;
        let dnat = |a: u128, p: u16| {
            Action::Nat(NatChoice {
                kind: NatKind::Dnat,
                addr: Some((a, a)),
                port: Some((p, p)),
            })
        };
        assert_eq!(d(&f, Hook::Prerouting, &mut st), dnat(v4(10, 0, 10, 5), 80));
        f.dport = 9005;
        assert_eq!(d(&f, Hook::Prerouting, &mut st), dnat(v4(10, 0, 10, 6), 22));
        f.dport = 7;
        assert_eq!(
            d(&f, Hook::Prerouting, &mut st),
            Action::Accept,
            "map miss, ip6 rule skipped"
        );
        f.dport = 53;
        assert_eq!(d(&f, Hook::Prerouting, &mut st), Action::Drop);
        assert!(fw.has_nat(NFPROTO_IPV4, Hook::Prerouting) && fw.any_nat());
        assert!(!fw.has_hook(NFPROTO_IPV4, Hook::Prerouting), "no filter chain there");
        f.oif = 3;
        assert_eq!(
            d(&f, Hook::Postrouting, &mut st),
            Action::Nat(NatChoice {
                kind: NatKind::Masquerade,
                addr: None,
                port: Some((2000, 2999)),
            })
        );
        f.oif = 2;
        assert_eq!(
            d(&f, Hook::Postrouting, &mut st),
            Action::Nat(NatChoice {
                kind: NatKind::Snat,
                addr: Some((v4(192, 0, 2, 1), v4(192, 0, 2, 3))),
                port: None,
            })
        );
        assert_eq!(fw.judge(Hook::Forward, &f, &mut st, 0).action, Action::Accept);
    }
    let bad = crate::parse(
        "table ip t {\n chain f {\n  type filter hook forward priority 0;\n  jump n\n }\n chain n {\n  snat to 10.0.0.1\n }\n}\n",
    )
    .expect("parses");
    let e = Firewall::new(bad, &ifaces(), 1, Strategy::Compiled).expect_err("NAT reached from a filter chain");
    assert_eq!((e.span.line, e.span.col), (7, 3));
    assert!(e.msg.contains("which a filter chain reaches"), "{e}");
}
