//! The ruleset corpus (`tests/rulesets/*.nft`): every file parses, lists back to text that
//! parses to the same ruleset, and (where `nft` runs, as root) is accepted by the kernel's
//! own `nft -c` in a throwaway network namespace. Plus the same round trip over generated
//! rulesets.

use std::path::{Path, PathBuf};
use std::process::Command;

use freeway_firewall::ast::*;
use freeway_firewall::{list, list_json, parse};
use proptest::prelude::*;

fn corpus() -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rulesets");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "nft"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "only {} rulesets in {}", files.len(), dir.display());
    files
        .into_iter()
        .map(|p| {
            let t = std::fs::read_to_string(&p).unwrap();
            (p, t)
        })
        .collect()
}

fn no_counters(_: usize, _: usize, _: usize) -> Option<(u64, u64)> {
    None
}

/// `parse(list(rs)) == rs`, spans aside.
fn assert_round_trip(rs: &Ruleset, what: &str) {
    let text = list(rs, &no_counters);
    let again = parse(&text).unwrap_or_else(|e| panic!("{what}: listing does not parse: {e}\n{text}"));
    assert_eq!(
        again.without_spans(),
        rs.without_spans(),
        "{what}: listing parses to another ruleset:\n{text}"
    );
}

#[test]
fn corpus_parses() {
    for (p, text) in corpus() {
        let rs = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!rs.tables.is_empty(), "{}", p.display());
        assert!(rs.tables.iter().any(|t| !t.chains.is_empty()), "{}", p.display());
    }
}

#[test]
fn corpus_round_trips() {
    for (p, text) in corpus() {
        let rs = parse(&text).unwrap();
        assert_round_trip(&rs, &p.display().to_string());
        let j = list_json(&rs, &no_counters);
        let items = j["nftables"].as_array().unwrap();
        assert!(items[0].get("metainfo").is_some());
        let rules: usize = rs.tables.iter().flat_map(|t| &t.chains).map(|c| c.rules.len()).sum();
        assert_eq!(items.iter().filter(|i| i.get("rule").is_some()).count(), rules);
    }
}

#[test]
fn counters_are_printed() {
    let rs = parse("table ip t {\nchain c {\ncounter accept\n}\n}\n").unwrap();
    let text = list(&rs, &|t, c, r| ((t, c, r) == (0, 0, 0)).then_some((7, 700)));
    assert!(text.contains("counter packets 7 bytes 700 accept"), "{text}");
    let j = list_json(&rs, &|_, _, _| Some((3, 4)));
    let expr = &j["nftables"][3]["rule"]["expr"];
    assert_eq!(expr[0]["counter"]["packets"], 3);
    assert_eq!(expr[1], serde_json::json!({"accept": null}));
}

/// Where `nft` runs (as root), `nft -c -f` in a throwaway network namespace: the kernel's
/// own parser accepts `files`.
fn nft_check(files: &[PathBuf]) -> Result<(), String> {
    let ns = format!("fwp-{}", std::process::id());
    let ok = Command::new("ip").args(["netns", "add", &ns]).status();
    if !matches!(ok, Ok(s) if s.success()) {
        return Err("cannot create a network namespace (needs root and iproute2)".into());
    }
    let mut failed = Vec::new();
    for f in files {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "nft", "-c", "-f"])
            .arg(f)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => failed.push(format!("{}: {}", f.display(), String::from_utf8_lossy(&o.stderr))),
            Err(e) => failed.push(format!("{}: {e}", f.display())),
        }
    }
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    assert!(failed.is_empty(), "nft -c rejects:\n{}", failed.join("\n"));
    Ok(())
}

fn nft_runs() -> bool {
    Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn kernel_nft_accepts_corpus_and_listings() {
    if !nft_runs() {
        freeway_testkit::skip("nft is not installed or we are not root; corpus not checked by nft -c");
        return;
    }
    let files: Vec<PathBuf> = corpus().into_iter().map(|(p, _)| p).collect();
    let dir = std::env::temp_dir().join(format!("fwp-listings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut listed = Vec::new();
    for f in &files {
        let rs = parse(&std::fs::read_to_string(f).unwrap()).unwrap();
        let p = dir.join(f.file_name().unwrap());
        std::fs::write(&p, list(&rs, &no_counters)).unwrap();
        listed.push(p);
    }
    let all: Vec<PathBuf> = files.into_iter().chain(listed).collect();
    let r = nft_check(&all);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(why) = r {
        freeway_testkit::skip(why);
    }
}

// ---- generated rulesets ----

fn field_and_atom() -> impl Strategy<Value = (Field, Atom)> {
    prop_oneof![
        (any::<u32>(), 0u32..=32).prop_map(|(a, len)| {
            let host = if len == 0 {
                u32::MAX
            } else {
                (1u32 << (32 - len)).wrapping_sub(1)
            };
            let lo = a & !host;
            (Field::IpSaddr, Atom::Range(u128::from(lo), u128::from(lo | host)))
        }),
        (any::<u128>(), 0u32..=128).prop_map(|(a, len)| {
            let host = if len == 0 {
                u128::MAX
            } else {
                (1u128 << (128 - len)).wrapping_sub(1)
            };
            (Field::Ip6Daddr, Atom::Range(a & !host, (a & !host) | host))
        }),
        (any::<u16>(), any::<u16>())
            .prop_map(|(a, b)| { (Field::TcpDport, Atom::Range(u128::from(a.min(b)), u128::from(a.max(b)))) }),
        any::<u16>().prop_map(|a| (Field::UdpSport, Atom::value(u128::from(a)))),
        any::<u8>().prop_map(|a| (Field::L4Proto, Atom::value(u128::from(a)))),
        any::<u8>().prop_map(|a| (Field::IcmpType, Atom::value(u128::from(a)))),
        any::<u8>().prop_map(|a| (Field::Icmpv6Code, Atom::value(u128::from(a)))),
        (0u16..4096).prop_map(|a| (Field::VlanId, Atom::value(u128::from(a)))),
        any::<u32>().prop_map(|a| (Field::Mark, Atom::value(u128::from(a)))),
        (0u64..1 << 48).prop_map(|a| (Field::EtherSaddr, Atom::value(u128::from(a)))),
        "[a-z][a-z0-9]{0,13}\\*?".prop_map(|n| (Field::IifName, Atom::Name(n))),
        prop_oneof![Just(1u128), Just(2), Just(4), Just(8), Just(64)].prop_map(|v| (Field::CtState, Atom::value(v))),
    ]
}

fn item() -> impl Strategy<Value = Item> {
    let m = (prop::collection::vec(field_and_atom(), 1..3), any::<bool>(), 0u8..3).prop_map(|(fa, negate, kind)| {
        let field = fa[0].0;
        let atoms: Vec<Elem> = fa
            .iter()
            .filter(|(f, _)| *f == field)
            .map(|(_, a)| Elem(vec![a.clone()]))
            .collect();
        let test = match kind {
            0 if field == Field::CtState => Test::AnyBit {
                bits: 0x6,
                negate: false,
            },
            1 if field == Field::Mark => Test::Masked {
                mask: 0xff,
                value: 1,
                negate,
            },
            _ => Test::In {
                rhs: Rhs::Elems(atoms),
                negate,
            },
        };
        Item::Match(Match {
            fields: vec![field],
            test,
            span: Span::default(),
        })
    });
    prop_oneof![
        4 => m,
        1 => Just(Item::Stmt(Stmt::Counter)),
        1 => (1u64..1000, any::<bool>(), 1u32..20).prop_map(|(rate, over, burst)| Item::Stmt(
            Stmt::Limit(Limit { rate, per: Per::Minute, burst, bytes: false, over })
        )),
        1 => proptest::option::of("[a-z ]{1,10}").prop_map(|prefix| Item::Stmt(Stmt::Log { prefix })),
    ]
}

fn verdict() -> impl Strategy<Value = Option<Verdict>> {
    prop_oneof![
        Just(None),
        Just(Some(Verdict::Accept)),
        Just(Some(Verdict::Drop)),
        Just(Some(Verdict::Return)),
        Just(Some(Verdict::Continue)),
        Just(Some(Verdict::Jump("user".into()))),
        Just(Some(Verdict::Reject(RejectWith::Icmpx(3)))),
        Just(Some(Verdict::Reject(RejectWith::TcpReset))),
    ]
}

/// Whether the rule's matches imply two layer-3 or two layer-4 protocols (which `nft`
/// rejects as "conflicting protocols").
fn conflicting(items: &[Item]) -> bool {
    let mut l3 = None;
    let mut l4 = None;
    for i in items {
        let Item::Match(m) = i else { continue };
        let (a, b) = match m.fields[0] {
            Field::IpSaddr => (Some(4), None),
            Field::Ip6Daddr => (Some(6), None),
            Field::TcpDport => (None, Some(6)),
            Field::UdpSport => (None, Some(17)),
            Field::IcmpType => (Some(4), Some(1)),
            Field::Icmpv6Code => (Some(6), Some(58)),
            _ => (None, None),
        };
        for (slot, p) in [(&mut l3, a), (&mut l4, b)] {
            match (*slot, p) {
                (Some(q), Some(p)) if q != p => return true,
                (_, Some(p)) => *slot = Some(p),
                _ => {}
            }
        }
    }
    false
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        prop::collection::vec(item(), 0..4),
        verdict(),
        proptest::option::of("[a-z0-9 ]{1,20}"),
    )
        .prop_filter_map("empty rule", |(mut items, v, comment)| {
            if let Some(v) = v {
                items.push(Item::Stmt(Stmt::Verdict(v)));
            }
            (!items.is_empty() && !conflicting(&items)).then_some(Rule {
                items,
                comment,
                span: Span::default(),
            })
        })
}

fn ruleset() -> impl Strategy<Value = Ruleset> {
    (
        prop::collection::vec(rule(), 0..6),
        prop::collection::vec(rule(), 0..3),
        -400i32..400,
        any::<bool>(),
    )
        .prop_map(|(base_rules, user_rules, priority, drop)| {
            // Rules in the user chain must not jump to it.
            let user_rules = user_rules
                .into_iter()
                .filter(|r| !matches!(r.verdict(), Some(Verdict::Jump(_))))
                .collect();
            Ruleset {
                tables: vec![Table {
                    family: Family::Inet,
                    name: "t".into(),
                    sets: vec![],
                    chains: vec![
                        Chain {
                            name: "user".into(),
                            base: None,
                            rules: user_rules,
                            span: Span::default(),
                        },
                        Chain {
                            name: "fwd".into(),
                            base: Some(BaseChain {
                                kind: ChainType::Filter,
                                hook: Hook::Forward,
                                priority,
                                policy: if drop { Policy::Drop } else { Policy::Accept },
                            }),
                            rules: base_rules,
                            span: Span::default(),
                        },
                    ],
                    span: Span::default(),
                }],
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn generated_rulesets_round_trip(rs in ruleset()) {
        let text = list(&rs, &no_counters);
        let again = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(again.without_spans(), rs.without_spans(), "{}", text);
    }
}

/// The JSON of some rules, as `nft -j list ruleset` (nftables 1.0.6) prints the same rules.
#[test]
fn json_shapes_follow_nft() {
    let rs = parse(
        "table ip x {\nchain c {\ntype filter hook input priority 0;\n\
         tcp flags syn log accept\n\
         reject\n\
         limit rate 5/minute burst 10 packets accept\n\
         ip saddr . tcp dport { 10.1.0.0/24 . 22, 10.1.0.5 . 80 } accept\n\
         tcp flags & (syn|ack) == syn drop\n\
         ip daddr 10.0.0.1-10.0.0.9 jump u\n\
         }\nchain u {\n}\n}\n",
    )
    .unwrap();
    let j = list_json(&rs, &no_counters);
    let rules: Vec<&serde_json::Value> = j["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("rule"))
        .map(|r| &r["expr"])
        .collect();
    let want = [
        r#"[{"match":{"op":"in","left":{"payload":{"protocol":"tcp","field":"flags"}},"right":"syn"}},{"log":null},{"accept":null}]"#,
        r#"[{"reject":{"type":"icmp","expr":"port-unreachable"}}]"#,
        r#"[{"limit":{"rate":5,"burst":10,"per":"minute"}},{"accept":null}]"#,
        r#"[{"match":{"op":"==","left":{"concat":[{"payload":{"protocol":"ip","field":"saddr"}},{"payload":{"protocol":"tcp","field":"dport"}}]},"right":{"set":[{"concat":[{"prefix":{"addr":"10.1.0.0","len":24}},22]},{"concat":["10.1.0.5",80]}]}}},{"accept":null}]"#,
        r#"[{"match":{"op":"==","left":{"&":[{"payload":{"protocol":"tcp","field":"flags"}},["syn","ack"]]},"right":"syn"}},{"drop":null}]"#,
        r#"[{"match":{"op":"==","left":{"payload":{"protocol":"ip","field":"daddr"}},"right":{"range":["10.0.0.1","10.0.0.9"]}}},{"jump":{"target":"u"}}]"#,
    ];
    assert_eq!(rules.len(), want.len());
    for (got, want) in rules.iter().zip(want) {
        let want: serde_json::Value = serde_json::from_str(want).unwrap();
        assert_eq!(**got, want);
    }
    let chain = &j["nftables"][2]["chain"];
    assert_eq!(chain["hook"], "input");
    assert_eq!(chain["prio"], 0);
    assert_eq!(chain["policy"], "accept");
}

/// The NAT rulesets list as the real `nft list ruleset` and `nft -j list ruleset` (1.0.6)
/// list them once loaded (`tests/nft-listings/`, captured from the kernel): the text exactly,
/// and in the JSON every rule's expressions and every chain's type, hook and priority.
#[test]
fn nat_listings_match_nft() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    for name in ["40-nat-masquerade", "41-nat-inet"] {
        let src = std::fs::read_to_string(dir.join(format!("rulesets/{name}.nft"))).unwrap();
        let rs = parse(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = std::fs::read_to_string(dir.join(format!("nft-listings/{name}.txt"))).unwrap();
        assert_eq!(list(&rs, &no_counters), want, "{name}: text");
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("nft-listings/{name}.json"))).unwrap())
                .unwrap();
        let got = list_json(&rs, &no_counters);
        let pick = |v: &serde_json::Value| -> Vec<serde_json::Value> {
            v["nftables"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|i| {
                    if let Some(r) = i.get("rule") {
                        return Some(r["expr"].clone());
                    }
                    let c = i.get("chain")?;
                    Some(serde_json::json!([c["type"], c["hook"], c["prio"], c["policy"]]))
                })
                .collect()
        };
        assert_eq!(pick(&got), pick(&want), "{name}: JSON");
    }
}
