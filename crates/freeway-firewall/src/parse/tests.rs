#[allow(unused_imports)]
use super::*;

/// The first match of the only rule of `rule`, placed in an inet table's input chain.
fn first_match(rule: &str) -> Match {
    let rs = parse(&format!(
        "table inet t {{\n chain c {{\n type filter hook input priority 0;\n {rule}\n }}\n}}\n"
    ))
    .unwrap_or_else(|e| panic!("{rule}: {e}"));
    let items = &rs.tables[0].chains[0].rules[0].items;
    match &items[0] {
        Item::Match(m) => m.clone(),
        other => panic!("{rule}: {other:?}"),
    }
}

fn one(rule: &str) -> Vec<Elem> {
    match first_match(rule).test {
        Test::In {
            rhs: Rhs::Elems(e),
            negate: false,
        } => e,
        t => panic!("{rule}: {t:?}"),
    }
}

fn r(lo: u128, hi: u128) -> Elem {
    Elem(vec![Atom::Range(lo, hi)])
}

/// A match and the one interval it compares with, `lo hi` in decimal or `0x` hexadecimal.
const VALUES: &str = "
    tcp dport ssh                       22 22
    tcp dport 1024-65535                1024 65535
    tcp dport 1024 - 2048               1024 2048
    tcp dport > 1024                    1025 65535
    tcp dport < 1024                    0 1023
    tcp dport <= 10                     0 10
    tcp dport ge 10                     10 65535
    ip saddr 10.0.0.1/8                 0x0a000000 0x0affffff
    ip saddr 10.0.0.1-10.0.0.9          0x0a000001 0x0a000009
    ip saddr 0.0.0.0/0                  0 0xffffffff
    ip6 saddr ::/0                      0 0xffffffffffffffffffffffffffffffff
    ip6 daddr 2001:db8::/32             0x20010db8000000000000000000000000 0x20010db8ffffffffffffffffffffffff
    ether saddr aa:bb:cc:dd:ee:ff       0xaabbccddeeff 0xaabbccddeeff
    meta l4proto icmpv6                 58 58
    icmpv6 type nd-neighbor-solicit     135 135
    icmpv6 code port-unreachable        4 4
    icmp code port-unreachable          3 3
    ether type ip6                      0x86dd 0x86dd
    meta nfproto ipv6                   10 10
    meta mark 0x10                      16 16
    mark 0x10                           16 16
    vlan id 4095                        4095 4095
";

#[test]
fn values_are_normalised() {
    for line in VALUES.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let n = words.len();
        let num = |w: &str| names::parse_number(w).unwrap();
        let rule = words[..n - 2].join(" ");
        assert_eq!(one(&rule), vec![r(num(words[n - 2]), num(words[n - 1]))], "{rule}");
    }
    let name = |n: &str| vec![Elem(vec![Atom::Name(n.into())])];
    assert_eq!(one("iifname \"eth*\""), name("eth*"));
    assert_eq!(one("meta iifname lan"), name("lan"));
    let set = one("tcp dport { 22, 80, 8000-8080 }");
    assert_eq!(set, vec![r(22, 22), r(80, 80), r(8000, 8080)]);
}

#[test]
fn flag_fields() {
    let t = |s: &str| first_match(s).test;
    assert_eq!(t("tcp flags syn"), Test::AnyBit { bits: 2, negate: false });
    assert_eq!(
        t("tcp flags syn,ack"),
        Test::AnyBit {
            bits: 0x12,
            negate: false
        }
    );
    assert_eq!(
        t("ct state established,related"),
        Test::AnyBit { bits: 6, negate: false }
    );
    let exact = |v, negate| Test::In {
        rhs: Rhs::Elems(vec![r(v, v)]),
        negate,
    };
    assert_eq!(t("tcp flags == syn"), exact(2, false));
    assert_eq!(t("tcp flags == syn,ack"), exact(0x12, false));
    assert_eq!(t("tcp flags != syn"), exact(2, true));
    assert_eq!(t("ct state != invalid"), exact(1, true));
    let masked = Test::Masked {
        mask: 0x12,
        value: 2,
        negate: false,
    };
    assert_eq!(t("tcp flags & (syn|ack) == syn"), masked);
    assert_eq!(t("tcp flags syn / syn,ack"), masked);
    assert_eq!(
        t("meta mark & 0xff != 0x1"),
        Test::Masked {
            mask: 0xff,
            value: 1,
            negate: true
        }
    );
    assert_eq!(
        t("ct state { established, related }"),
        Test::In {
            rhs: Rhs::Elems(vec![r(2, 2), r(4, 4)]),
            negate: false
        }
    );
    assert_eq!(
        t("tcp flags { syn, syn|ack }"),
        Test::In {
            rhs: Rhs::Elems(vec![r(2, 2), r(0x12, 0x12)]),
            negate: false
        }
    );
}

#[test]
fn concatenations_sets_and_negation() {
    let m = first_match("ip saddr . tcp dport { 10.0.0.1 . 22, 10.0.0.2 . 80 } accept");
    assert_eq!(m.fields, vec![Field::IpSaddr, Field::TcpDport]);
    assert_eq!(
        m.test,
        Test::In {
            rhs: Rhs::Elems(vec![
                Elem(vec![Atom::value(0x0a00_0001), Atom::value(22)]),
                Elem(vec![Atom::value(0x0a00_0002), Atom::value(80)]),
            ]),
            negate: false
        }
    );
    let m = first_match("tcp dport != { 22, 80 }");
    assert!(matches!(m.test, Test::In { negate: true, .. }));
    assert_eq!(m.span, Span { line: 4, col: 2 });
}

#[test]
fn statements() {
    let rs = parse(
        "define PORTS = { 22, 80 }\n\
         table ip t {\n\
         chain u {\n return\n}\n\
         chain c {\n type filter hook forward priority filter + 10; policy drop;\n\
         tcp dport $PORTS counter packets 3 bytes 4 limit rate over 1 mbytes/second log prefix \"x \" level info jump u comment \"hi\"\n\
         limit rate 10 / minute burst 20 packets reject with icmp type admin-prohibited\n\
         reject with tcp reset\n\
         }\n}\n",
    )
    .unwrap();
    let c = &rs.tables[0].chains[1];
    assert_eq!(
        c.base,
        Some(BaseChain {
            kind: ChainType::Filter,
            hook: Hook::Forward,
            priority: 10,
            policy: Policy::Drop
        })
    );
    let r0 = &c.rules[0];
    assert_eq!(r0.comment.as_deref(), Some("hi"));
    assert_eq!(r0.span, Span { line: 8, col: 1 });
    assert_eq!(r0.items[1], Item::Stmt(Stmt::Counter));
    assert_eq!(
        r0.items[2],
        Item::Stmt(Stmt::Limit(Limit {
            rate: 1 << 20,
            per: Per::Second,
            burst: 0,
            bytes: true,
            over: true
        }))
    );
    assert_eq!(
        r0.items[3],
        Item::Stmt(Stmt::Log {
            prefix: Some("x ".into())
        })
    );
    assert_eq!(r0.verdict(), Some(&Verdict::Jump("u".into())));
    let r1 = &c.rules[1];
    assert_eq!(
        r1.items[0],
        Item::Stmt(Stmt::Limit(Limit {
            rate: 10,
            per: Per::Minute,
            burst: 20,
            bytes: false,
            over: false
        }))
    );
    assert_eq!(r1.verdict(), Some(&Verdict::Reject(RejectWith::Icmp(13))));
    assert_eq!(c.rules[2].verdict(), Some(&Verdict::Reject(RejectWith::TcpReset)));
}

#[test]
fn priorities_and_families() {
    let prio = |fam: &str, p: &str| {
        let rs = parse(&format!(
            "table {fam} t {{\nchain c {{\ntype filter hook forward priority {p}\n}}\n}}\n"
        ))
        .unwrap();
        rs.tables[0].chains[0].base.unwrap().priority
    };
    assert_eq!(prio("ip", "raw"), -300);
    assert_eq!(prio("ip", "-300"), -300);
    assert_eq!(prio("ip6", "mangle"), -150);
    assert_eq!(prio("inet", "dstnat"), -100);
    assert_eq!(prio("inet", "security"), 50);
    assert_eq!(prio("inet", "srcnat"), 100);
    assert_eq!(prio("inet", "filter - 5"), -5);
    assert_eq!(prio("bridge", "filter"), -200);
    let rs = parse("table t {\n}\nflush ruleset\ntable ip6 u\n").unwrap();
    assert_eq!(rs.tables.len(), 1);
    assert_eq!(rs.tables[0].family, Family::Ip6);
}

#[test]
fn add_commands_build_a_table() {
    let rs = parse(
        "add table inet f\n\
         add chain inet f c { type filter hook input priority 0; policy drop; }\n\
         add set inet f s { type inet_service; flags interval; }\n\
         add element inet f s { 22, 1000-2000 }\n\
         add rule inet f c tcp dport @s accept\n",
    )
    .unwrap();
    let t = &rs.tables[0];
    assert_eq!(t.sets[0].elements, vec![r(22, 22), r(1000, 2000)]);
    assert_eq!(t.chains[0].rules.len(), 1);
}

/// Bad inputs: where the error is and what it says.
#[test]
fn errors_name_their_place() {
    let wrap =
        |rule: &str| format!("table inet t {{\n chain c {{\n type filter hook input priority 0;\n {rule}\n }}\n}}\n");
    // NAT statements, in a nat chain of a table's family and hook: `("FAMILY HOOK", rule,
    // where, what)`.
    let nat_cases = [
        ("ip postrouting", "dnat to 10.0.0.1", "4:2", "prerouting or output"),
        (
            "inet postrouting",
            "snat to 10.0.0.1",
            "4:2",
            "ip or ip6 must be specified",
        ),
        (
            "ip postrouting",
            "snat to 10.0.0.1:80",
            "4:19",
            "transport protocol mapping",
        ),
        (
            "ip postrouting",
            "masquerade to :1024-2000",
            "4:17",
            "transport protocol mapping",
        ),
        ("ip postrouting", "snat ip6 to fd00::1", "4:7", "conflicting protocols"),
        (
            "ip postrouting",
            "snat to 10.0.0.9-10.0.0.1",
            "4:10",
            "start is above its end",
        ),
        (
            "ip postrouting",
            "masquerade to 10.0.0.1",
            "4:16",
            "masquerade takes ports only",
        ),
        (
            "ip prerouting",
            "dnat to tcp dport map { 80 : 10.0.0.1 . 8080, 81 : 10.0.0.2 }",
            "4:51",
            "every element",
        ),
        ("ip prerouting", "redirect to :80", "4:2", "unsupported: redirect"),
    ];
    let nat = nat_cases.iter().map(|(fh, rule, at, msg)| {
        let (family, hook) = fh.split_once(' ').expect("family and hook");
        let text = format!("table {family} t {{\n chain c {{\n type nat hook {hook} priority 0;\n {rule}\n }}\n}}\n");
        (text, *at, *msg)
    });
    let cases: Vec<(String, &str, &str)> = nat
        .chain([
            ("table inet t {\n chain c {\n".into(), "3:1", "unexpected end of file"),
            ("table inet t {\n bogus\n}\n".into(), "2:2", "unexpected \"bogus\""),
            ("tables ip t\n".into(), "1:1", "unexpected \"tables\", expecting table"),
            (wrap("jump nowhere"), "4:7", "unknown chain \"nowhere\""),
            (wrap("tcp dport @nope"), "4:2", "unknown set \"nope\""),
            (wrap("tcp dport 70000"), "4:12", "exceeds valid range 0-65535"),
            (wrap("vlan id 4096"), "4:10", "exceeds valid range 0-4095"),
            (wrap("tcp dport bogus"), "4:12", "unknown inet_service \"bogus\""),
            (wrap("ip saddr 10.0.0.256"), "4:11", "IPv4 address"),
            (wrap("ip saddr 10.0.0.0/33"), "4:11", "invalid prefix length"),
            (wrap("tcp dport 90-80"), "4:12", "start is above its end"),
            (wrap("accept counter"), "4:9", "statement after terminal statement"),
            (wrap("snat ip to 10.0.0.1"), "4:2", "snat is only valid in a nat chain"),
            (wrap("ct mark 1"), "4:5", "unsupported: the match ct mark"),
            (
                wrap("tcp dport 22 udp dport 53"),
                "4:15",
                "conflicting protocols specified: tcp dport vs. udp dport",
            ),
            (wrap("iifname \"abcdefghijklmnop\""), "4:10", "invalid interface name"),
            (wrap("tcp dport < 0"), "4:14", "no value satisfies"),
            (wrap("tcp dport 22 }"), "6:1", "unexpected '}'"),
            (wrap("ip saddr $NOPE"), "4:11", "unknown variable $NOPE"),
            (wrap("limit rate 0/second"), "4:13", "invalid rate"),
            (wrap("log prefix \"x\" group 1"), "4:17", "unsupported: log options"),
            (wrap("tcp dport { }"), "4:14", "at least one element"),
            (wrap("\"unterminated"), "4:2", "unterminated string"),
            (
                "table ip6 t {\n chain c {\n  ip saddr 10.0.0.1\n }\n}\n".into(),
                "3:3",
                "conflicting protocols specified: ip saddr in a table of family ip6",
            ),
            (
                "table ip t {\n chain c {\n  reject with icmpv6 type no-route\n }\n}\n".into(),
                "3:15",
                "reject with icmpv6 in a table of family ip",
            ),
            (
                "table ip t {\n set s { type ipv4_addr; }\n chain c {\n  tcp dport @s\n }\n}\n".into(),
                "4:3",
                "set \"s\" has type ipv4_addr, the match gives inet_service",
            ),
            (
                "table ip t {\n set s { type ipv4_addr; elements = { 10.0.0.0/8 } }\n}\n".into(),
                "2:39",
                "flags interval",
            ),
            (
                "table ip t {\n set s { flags interval; }\n}\n".into(),
                "2:2",
                "set \"s\" has no type",
            ),
            (
                "table ip t {\n chain a {\n  jump b\n }\n chain b {\n  goto a\n }\n}\n".into(),
                "6:8",
                "jump loop: a -> b -> a",
            ),
            (
                "table ip t {\n chain a {\n  jump a\n }\n}\n".into(),
                "3:8",
                "jump loop: a -> a",
            ),
            (
                "table ip t {\n chain a {\n type filter hook input priority 0;\n }\n chain b {\n  jump a\n }\n}\n"
                    .into(),
                "6:8",
                "cannot jump to base chain \"a\"",
            ),
            (
                "table bridge t {\n chain c {\n  type nat hook input priority 0;\n }\n}\n".into(),
                "3:8",
                "not available in bridge tables",
            ),
            (
                "table ip t {\n chain c {\n  type nat hook forward priority 0;\n }\n}\n".into(),
                "3:17",
                "forward hook",
            ),
            (
                "table ip t {\n chain c {\n  type filter hook ingress priority 0;\n }\n}\n".into(),
                "3:20",
                "unsupported: the ingress hook",
            ),
            (
                "table ip t {\n chain c {\n  type filter hook input priority bogus;\n }\n}\n".into(),
                "3:35",
                "unknown priority \"bogus\"",
            ),
            (
                "table ip t {\n chain c {\n  policy drop;\n }\n}\n".into(),
                "3:3",
                "a policy needs a base chain",
            ),
            ("table netdev t\n".into(), "1:7", "unsupported: tables of family netdev"),
            ("add rule ip nope c accept\n".into(), "1:13", "unknown table \"nope\""),
            (
                "table ip t\nadd rule ip t c accept\n".into(),
                "2:15",
                "unknown chain \"c\"",
            ),
            ("include \"x.nft\"\n".into(), "1:1", "unsupported: the include command"),
            ("table ip t ~\n".into(), "1:12", "unexpected character"),
        ])
        .collect();
    let mut wrong = Vec::new();
    for (text, at, msg) in &cases {
        match parse(text) {
            Ok(_) => wrong.push(format!("accepted: {text}")),
            Err(e) if e.span.to_string() != *at || !e.msg.contains(msg) => {
                wrong.push(format!("{text}wanted {at}: {msg:?}, got {e}"))
            }
            Err(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn no_panic_on_deep_or_odd_input() {
    let deep = format!(
        "table ip t {{\nchain c {{\ntcp dport {}22{}\n}}\n}}\n",
        "{ ".repeat(100),
        " }".repeat(100)
    );
    assert!(parse(&deep).unwrap_err().msg.contains("nested too deeply"));
    let mut blowup = String::from("define A0 = { 1, 2 }\n");
    for i in 1..40 {
        blowup.push_str(&format!("define A{i} = {{ $A{}, $A{} }}\n", i - 1, i - 1));
    }
    assert!(parse(&blowup).is_err());
    for s in [
        "",
        "\n\n;;",
        "#only a comment",
        "table",
        "table ip",
        "table ip t {",
        "}",
        "$",
        "@",
        "define",
        "define X",
        "define X =",
    ] {
        let _ = parse(s);
    }
}
