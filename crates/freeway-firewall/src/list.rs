//! A ruleset written back: as `nft list ruleset` prints it (text the parser reads again to
//! the same ruleset), and as `nft -j list ruleset` shapes its JSON.

use std::fmt::Write;

use serde_json::{json, Map, Value};

use crate::ast::*;
use crate::parse::names::{self, Dt};

/// The packets and bytes a rule's `counter` has counted: `(table, chain, rule)` indexes into
/// the ruleset; `None` prints zeros.
pub type Counters<'a> = &'a dyn Fn(usize, usize, usize) -> Option<(u64, u64)>;

/// Prints the ruleset as `nft list ruleset` does (tabs, nft's spellings).
pub fn list(rs: &Ruleset, counters: Counters<'_>) -> String {
    let mut out = String::new();
    for (ti, t) in rs.tables.iter().enumerate() {
        let _ = writeln!(out, "table {} {} {{", t.family.name(), t.name);
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !first {
                out.push('\n');
            }
            first = false;
        };
        for s in &t.sets {
            sep(&mut out);
            let _ = writeln!(out, "\tset {} {{", s.name);
            let _ = writeln!(out, "\t\t{}", set_key(&s.key));
            if s.interval {
                out.push_str("\t\tflags interval\n");
            }
            if !s.elements.is_empty() {
                let dts: Vec<Dt> = s.key.iter().map(|k| Dt::Plain(*k)).collect();
                let elems: Vec<String> = s.elements.iter().map(|e| elem(&dts, e)).collect();
                let _ = writeln!(out, "\t\telements = {{ {} }}", elems.join(", "));
            }
            out.push_str("\t}\n");
        }
        for (ci, c) in t.chains.iter().enumerate() {
            sep(&mut out);
            let _ = writeln!(out, "\tchain {} {{", c.name);
            if let Some(b) = &c.base {
                let _ = writeln!(
                    out,
                    "\t\ttype {} hook {} priority {}; policy {};",
                    match b.kind {
                        ChainType::Filter => "filter",
                        ChainType::Nat => "nat",
                    },
                    b.hook.name(),
                    priority(t.family, b.hook, b.priority),
                    policy(b.policy)
                );
            }
            for (ri, r) in c.rules.iter().enumerate() {
                let _ = writeln!(out, "\t\t{}", rule(r, counters(ti, ci, ri)));
            }
            out.push_str("\t}\n");
        }
        out.push_str("}\n");
    }
    out
}

fn policy(p: Policy) -> &'static str {
    match p {
        Policy::Accept => "accept",
        Policy::Drop => "drop",
    }
}

/// A base chain's priority as nft writes it: a standard name, or one with an offset of at
/// most 10 (`srcnat + 10`), where that name suits the hook (`dstnat` prerouting and output,
/// `srcnat` postrouting and input; bridge names any hook); otherwise the number.
fn priority(f: Family, hook: Hook, p: i32) -> String {
    let named: &[(&str, i32)] = if f == Family::Bridge {
        &[("dstnat", -300), ("filter", -200), ("out", 100), ("srcnat", 300)]
    } else {
        &[
            ("raw", -300),
            ("mangle", -150),
            ("dstnat", -100),
            ("filter", 0),
            ("security", 50),
            ("srcnat", 100),
        ]
    };
    let suits = |n: &str| {
        f == Family::Bridge
            || match n {
                "dstnat" => matches!(hook, Hook::Prerouting | Hook::Output),
                "srcnat" => matches!(hook, Hook::Postrouting | Hook::Input),
                _ => true,
            }
    };
    match named.iter().find(|(n, v)| (p - v).abs() <= 10 && suits(n)) {
        Some((n, v)) if p == *v => n.to_string(),
        Some((n, v)) if p > *v => format!("{n} + {}", p - v),
        Some((n, v)) => format!("{n} - {}", v - p),
        None => p.to_string(),
    }
}

/// A set's `type …` line, or `typeof …` where a part is a plain number.
fn set_key(key: &[ValueType]) -> String {
    if key.iter().any(|k| matches!(k, ValueType::Integer { .. })) {
        let parts: Vec<&str> = key.iter().map(|k| typeof_field(*k).name()).collect();
        format!("typeof {}", parts.join(" . "))
    } else {
        let parts: Vec<&str> = key.iter().map(|k| names::type_name(*k)).collect();
        format!("type {}", parts.join(" . "))
    }
}

/// A field whose values have type `t`, for `typeof`.
fn typeof_field(t: ValueType) -> Field {
    use Field::*;
    match t {
        ValueType::Ipv4Addr => IpSaddr,
        ValueType::Ipv6Addr => Ip6Saddr,
        ValueType::EtherAddr => EtherSaddr,
        ValueType::InetProto => L4Proto,
        ValueType::InetService => ThDport,
        ValueType::Ifname => IifName,
        ValueType::Mark => Mark,
        ValueType::CtState => CtState,
        ValueType::TcpFlags => TcpFlags,
        ValueType::IcmpType => IcmpType,
        ValueType::Icmpv6Type => Icmpv6Type,
        ValueType::IcmpCode => IcmpCode,
        ValueType::EtherType => EtherType,
        ValueType::NfProto => NfProto,
        ValueType::Integer { bits: 8 } => IpTtl,
        ValueType::Integer { .. } => Length,
    }
}

/// One value as a single token: flag values with more than one bit as a number.
fn value(dt: Dt, v: u128) -> String {
    if dt.value_type().is_flags() && v.count_ones() != 1 {
        format!("0x{v:x}")
    } else {
        dt.show(v)
    }
}

/// The length of the prefix `lo..=hi` covers, if it is one.
fn prefix_len(dt: Dt, lo: u128, hi: u128) -> Option<u32> {
    let bits = u32::from(dt.value_type().bits());
    let host = hi.wrapping_sub(lo);
    if hi < lo || host & host.wrapping_add(1) != 0 || lo & host != 0 {
        return None;
    }
    bits.checked_sub(host.count_ones())
}

fn atom(dt: Dt, a: &Atom) -> String {
    match a {
        Atom::Name(n) => format!("\"{n}\""),
        Atom::Range(l, h) if l == h => value(dt, *l),
        Atom::Range(l, h) => match prefix_len(dt, *l, *h).filter(|_| dt.is_addr()) {
            Some(len) if dt.value_type() != ValueType::EtherAddr => {
                format!("{}/{len}", dt.show(*l))
            }
            _ if dt.is_addr() => format!("{}-{}", dt.show(*l), dt.show(*h)),
            _ => format!("{l}-{h}"),
        },
    }
}

fn elem(dts: &[Dt], e: &Elem) -> String {
    let parts: Vec<String> = dts.iter().zip(&e.0).map(|(d, a)| atom(*d, a)).collect();
    parts.join(" . ")
}

fn flags_expr(dt: Dt, v: u128) -> String {
    let s = dt.show_flags(v);
    if s.contains(',') {
        format!("({})", s.replace(',', "|"))
    } else {
        s
    }
}

fn a_match(m: &Match) -> String {
    let dts: Vec<Dt> = m.fields.iter().map(|f| Dt::of_field(*f)).collect();
    let names: Vec<&str> = m.fields.iter().map(|f| f.name()).collect();
    let left = names.join(" . ");
    let ne = |n: bool| if n { "!= " } else { "" };
    let Some(&dt) = dts.first() else {
        return String::new();
    };
    match &m.test {
        Test::In { rhs, negate } => match rhs {
            Rhs::Set(s) => format!("{left} {}@{s}", ne(*negate)),
            // A flag field's range goes in braces: after `==` a flag value is bits.
            Rhs::Elems(es)
                if es.len() == 1
                    && !(dts.len() == 1
                        && dt.value_type().is_flags()
                        && matches!(es[0].0.first(), Some(Atom::Range(l, h)) if l != h)) =>
            {
                let op = if *negate {
                    "!= "
                } else if dts.len() == 1 && dt.value_type().is_flags() {
                    "== "
                } else {
                    ""
                };
                format!("{left} {op}{}", elem(&dts, &es[0]))
            }
            Rhs::Elems(es) => {
                let items: Vec<String> = es.iter().map(|e| elem(&dts, e)).collect();
                format!("{left} {}{{ {} }}", ne(*negate), items.join(", "))
            }
        },
        Test::AnyBit { bits, negate: false } => format!("{left} {}", dt.show_flags(*bits)),
        Test::AnyBit { bits, negate: true } => {
            format!("{left} & {} == 0x0", flags_expr(dt, *bits))
        }
        Test::Masked { mask, value: v, negate } => {
            if dt.value_type().is_flags() && !negate {
                format!("{left} {} / {}", dt.show_flags(*v), dt.show_flags(*mask))
            } else if dt.value_type().is_flags() {
                format!("{left} & {} != {}", flags_expr(dt, *mask), flags_expr(dt, *v))
            } else {
                let op = if *negate { "!=" } else { "==" };
                format!("{left} & {} {op} {}", dt.show(*mask), dt.show(*v))
            }
        }
    }
}

fn code_name(table: &[(&'static str, u32)], c: u8) -> String {
    table
        .iter()
        .find(|(_, v)| *v == u32::from(c))
        .map(|(n, _)| n.to_string())
        .unwrap_or_else(|| c.to_string())
}

fn limit(l: &Limit) -> String {
    let over = if l.over { "over " } else { "" };
    if !l.bytes {
        let burst = if l.burst == 5 {
            String::new()
        } else {
            format!(" burst {} packets", l.burst)
        };
        return format!("limit rate {over}{}/{}{burst}", l.rate, l.per.name());
    }
    let (n, unit) = if l.rate % (1 << 20) == 0 {
        (l.rate >> 20, "mbytes")
    } else if l.rate % (1 << 10) == 0 {
        (l.rate >> 10, "kbytes")
    } else {
        (l.rate, "bytes")
    };
    let burst = if l.burst == 0 {
        String::new()
    } else {
        format!(" burst {} bytes", l.burst)
    };
    format!("limit rate {over}{n} {unit}/{}{burst}", l.per.name())
}

fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Continue => "continue".into(),
        Verdict::Return => "return".into(),
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
        Verdict::Reject(r) => match r {
            RejectWith::Default => "reject".into(),
            RejectWith::TcpReset => "reject with tcp reset".into(),
            RejectWith::Icmp(c) => format!("reject with icmp {}", code_name(names::ICMP_CODES, *c)),
            RejectWith::Icmpv6(c) => {
                format!("reject with icmpv6 {}", code_name(names::ICMPV6_CODES, *c))
            }
            RejectWith::Icmpx(c) => {
                format!("reject with icmpx {}", code_name(names::ICMPX_CODES, *c))
            }
        },
    }
}

fn nat_addr_dt(n: &Nat) -> Dt {
    Dt::Plain(if n.v6 { ValueType::Ipv6Addr } else { ValueType::Ipv4Addr })
}

/// `ADDR[-ADDR][:PORT[-PORT]]` as nft writes it (IPv6 addresses in brackets before a port).
fn nat_target(n: &Nat, addr: Option<(u128, u128)>, port: Option<(u16, u16)>) -> String {
    let dt = nat_addr_dt(n);
    let br = |v: u128| {
        if n.v6 && port.is_some() {
            format!("[{}]", dt.show(v))
        } else {
            dt.show(v)
        }
    };
    let mut s = match addr {
        Some((l, h)) if l == h => br(l),
        Some((l, h)) => format!("{}-{}", br(l), br(h)),
        None => String::new(),
    };
    match port {
        Some((l, h)) if l == h => s.push_str(&format!(":{l}")),
        Some((l, h)) => s.push_str(&format!(":{l}-{h}")),
        None => {}
    }
    s
}

fn nat(n: &Nat) -> String {
    let mut s = n.kind.name().to_string();
    if let Some(f) = n.family {
        s.push(' ');
        s.push_str(f.name());
    }
    match &n.to {
        NatTo::Range { addr: None, port: None } => {}
        NatTo::Range { addr, port } => {
            s.push_str(" to ");
            s.push_str(&nat_target(n, *addr, *port));
        }
        NatTo::Map { key, elems } => {
            let dt = Dt::of_field(*key);
            let adt = nat_addr_dt(n);
            let es: Vec<String> = elems
                .iter()
                .map(|(k, a, p)| match p {
                    Some(p) => format!("{} : {} . {p}", atom(dt, k), adt.show(*a)),
                    None => format!("{} : {}", atom(dt, k), adt.show(*a)),
                })
                .collect();
            s.push_str(&format!(" to {} map {{ {} }}", key.name(), es.join(", ")));
        }
    }
    s
}

fn rule(r: &Rule, counter: Option<(u64, u64)>) -> String {
    let (p, b) = counter.unwrap_or((0, 0));
    let mut parts: Vec<String> = r
        .items
        .iter()
        .map(|i| match i {
            Item::Match(m) => a_match(m),
            Item::Stmt(Stmt::Counter) => format!("counter packets {p} bytes {b}"),
            Item::Stmt(Stmt::Limit(l)) => limit(l),
            Item::Stmt(Stmt::Log { prefix: None }) => "log".into(),
            Item::Stmt(Stmt::Log { prefix: Some(x) }) => format!("log prefix \"{x}\""),
            Item::Stmt(Stmt::Verdict(v)) => verdict(v),
            Item::Stmt(Stmt::Nat(n)) => nat(n),
        })
        .collect();
    if let Some(c) = &r.comment {
        parts.push(format!("comment \"{c}\""));
    }
    parts.join(" ")
}

// ---- JSON ----

fn json_value(dt: Dt, v: u128) -> Value {
    match dt.value_type() {
        ValueType::Ipv4Addr | ValueType::Ipv6Addr | ValueType::EtherAddr => json!(dt.show(v)),
        t if t.is_flags() && v.count_ones() == 1 => json!(dt.show(v)),
        _ => match dt.name_of(v) {
            Some(n) if !dt.value_type().is_flags() => json!(n),
            _ => json!(v as u64),
        },
    }
}

fn json_atom(dt: Dt, a: &Atom) -> Value {
    match a {
        Atom::Name(n) => json!(n),
        Atom::Range(l, h) if l == h => json_value(dt, *l),
        Atom::Range(l, h) => match prefix_len(dt, *l, *h)
            .filter(|_| matches!(dt.value_type(), ValueType::Ipv4Addr | ValueType::Ipv6Addr))
        {
            Some(len) => json!({"prefix": {"addr": dt.show(*l), "len": len}}),
            None => json!({"range": [json_value(dt, *l), json_value(dt, *h)]}),
        },
    }
}

fn json_elem(dts: &[Dt], e: &Elem) -> Value {
    if dts.len() == 1 {
        return e.0.first().map_or(Value::Null, |a| json_atom(dts[0], a));
    }
    let parts: Vec<Value> = dts.iter().zip(&e.0).map(|(d, a)| json_atom(*d, a)).collect();
    json!({ "concat": parts })
}

fn json_field(f: Field) -> Value {
    let name = f.name();
    match name.split_once(' ') {
        None => json!({"meta": {"key": name}}),
        Some(("meta", k)) => json!({"meta": {"key": k}}),
        Some(("ct", k)) => json!({"ct": {"key": k}}),
        Some((p, k)) => json!({"payload": {"protocol": p, "field": k}}),
    }
}

fn json_flags(dt: Dt, v: u128) -> Value {
    let s = dt.show_flags(v);
    if s.starts_with("0x") {
        json!(v as u64)
    } else if s.contains(',') {
        Value::Array(s.split(',').map(|x| json!(x)).collect())
    } else {
        json!(s)
    }
}

fn json_match(m: &Match) -> Value {
    let dts: Vec<Dt> = m.fields.iter().map(|f| Dt::of_field(*f)).collect();
    let left = if let [f] = m.fields[..] {
        json_field(f)
    } else {
        json!({"concat": m.fields.iter().map(|f| json_field(*f)).collect::<Vec<_>>()})
    };
    let Some(&dt) = dts.first() else {
        return Value::Null;
    };
    let opn = |n: bool| if n { "!=" } else { "==" };
    let (op, left, right) = match &m.test {
        Test::In {
            rhs: Rhs::Set(s),
            negate,
        } => (opn(*negate), left, json!(format!("@{s}"))),
        Test::In {
            rhs: Rhs::Elems(es),
            negate,
        } => {
            let right = if es.len() == 1 {
                json_elem(&dts, &es[0])
            } else {
                json!({"set": es.iter().map(|e| json_elem(&dts, e)).collect::<Vec<_>>()})
            };
            (opn(*negate), left, right)
        }
        Test::AnyBit { bits, negate } => {
            let op = if *negate { "!=" } else { "in" };
            (op, left, json_flags(dt, *bits))
        }
        Test::Masked { mask, value, negate } => {
            let (mask, value) = if dt.value_type().is_flags() {
                (json_flags(dt, *mask), json_flags(dt, *value))
            } else {
                (json_value(dt, *mask), json_value(dt, *value))
            };
            (opn(*negate), json!({"&": [left, mask]}), value)
        }
    };
    json!({"match": {"op": op, "left": left, "right": right}})
}

fn json_nat(n: &Nat) -> Value {
    let adt = nat_addr_dt(n);
    let mut o = Map::new();
    if let Some(f) = n.family {
        o.insert("family".into(), json!(f.name()));
    }
    let range = |l: u128, h: u128, show: &dyn Fn(u128) -> Value| {
        if l == h {
            show(l)
        } else {
            json!({"range": [show(l), show(h)]})
        }
    };
    match &n.to {
        NatTo::Range { addr, port } => {
            if let Some((l, h)) = addr {
                o.insert("addr".into(), range(*l, *h, &|v| json!(adt.show(v))));
            }
            if let Some((l, h)) = port {
                o.insert(
                    "port".into(),
                    range(u128::from(*l), u128::from(*h), &|v| json!(v as u64)),
                );
            }
        }
        NatTo::Map { key, elems } => {
            let dt = Dt::of_field(*key);
            let set: Vec<Value> = elems
                .iter()
                .map(|(k, a, p)| {
                    let data = match p {
                        Some(p) => json!({"concat": [adt.show(*a), p]}),
                        None => json!(adt.show(*a)),
                    };
                    json!([json_atom(dt, k), data])
                })
                .collect();
            o.insert(
                "addr".into(),
                json!({"map": {"key": json_field(*key), "data": {"set": set}}}),
            );
        }
    }
    let mut outer = Map::new();
    outer.insert(
        n.kind.name().into(),
        if o.is_empty() { Value::Null } else { Value::Object(o) },
    );
    Value::Object(outer)
}

fn json_stmt(s: &Stmt, family: Family, counter: Option<(u64, u64)>) -> Value {
    match s {
        Stmt::Nat(n) => json_nat(n),
        Stmt::Counter => {
            let (p, b) = counter.unwrap_or((0, 0));
            json!({"counter": {"packets": p, "bytes": b}})
        }
        Stmt::Limit(l) => {
            let mut o = Map::new();
            o.insert("rate".into(), json!(l.rate));
            o.insert("burst".into(), json!(l.burst));
            o.insert("per".into(), json!(l.per.name()));
            if l.over {
                o.insert("inv".into(), json!(true));
            }
            if l.bytes {
                o.insert("rate_unit".into(), json!("bytes"));
                o.insert("burst_unit".into(), json!("bytes"));
            }
            json!({ "limit": o })
        }
        Stmt::Log { prefix: None } => json!({"log": null}),
        Stmt::Log { prefix: Some(p) } => json!({"log": {"prefix": p}}),
        Stmt::Verdict(v) => match v {
            Verdict::Accept => json!({"accept": null}),
            Verdict::Drop => json!({"drop": null}),
            Verdict::Continue => json!({"continue": null}),
            Verdict::Return => json!({"return": null}),
            Verdict::Jump(c) => json!({"jump": {"target": c}}),
            Verdict::Goto(c) => json!({"goto": {"target": c}}),
            Verdict::Reject(r) => match r {
                // What a plain `reject` means in the table's family, as nft spells it out.
                RejectWith::Default => {
                    let kind = match family {
                        Family::Ip => "icmp",
                        Family::Ip6 => "icmpv6",
                        Family::Inet | Family::Bridge => "icmpx",
                    };
                    json!({"reject": {"type": kind, "expr": "port-unreachable"}})
                }
                RejectWith::TcpReset => json!({"reject": {"type": "tcp reset"}}),
                RejectWith::Icmp(c) => json!({"reject": {"type": "icmp",
                    "expr": code_name(names::ICMP_CODES, *c)}}),
                RejectWith::Icmpv6(c) => json!({"reject": {"type": "icmpv6",
                    "expr": code_name(names::ICMPV6_CODES, *c)}}),
                RejectWith::Icmpx(c) => json!({"reject": {"type": "icmpx",
                    "expr": code_name(names::ICMPX_CODES, *c)}}),
            },
        },
    }
}

/// The members every object of a table has in nft's JSON: family, table, its own name (under
/// `key`) and handle.
fn head(family: &str, table: &str, (key, name): (&str, &str), handle: usize) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("family".into(), json!(family));
    o.insert("table".into(), json!(table));
    o.insert(key.into(), json!(name));
    o.insert("handle".into(), json!(handle));
    o
}

/// The ruleset as `nft -j list ruleset` shapes it: `{"nftables": [metainfo, tables, sets,
/// chains, rules]}`, with handles numbered per table in that order.
pub fn list_json(rs: &Ruleset, counters: Counters<'_>) -> Value {
    let mut out = vec![json!({"metainfo": {
        "version": env!("CARGO_PKG_VERSION"),
        "release_name": "freeway",
        "json_schema_version": 1
    }})];
    for (ti, t) in rs.tables.iter().enumerate() {
        let fam = t.family.name();
        out.push(json!({"table": {"family": fam, "name": t.name, "handle": ti + 1}}));
        let mut handle = 0usize;
        let mut next = || {
            handle += 1;
            handle
        };
        for s in &t.sets {
            let dts: Vec<Dt> = s.key.iter().map(|k| Dt::Plain(*k)).collect();
            let ty: Value = if s.key.len() == 1 {
                json!(names::type_name(s.key[0]))
            } else {
                json!(s.key.iter().map(|k| names::type_name(*k)).collect::<Vec<_>>())
            };
            let mut o = head(fam, &t.name, ("name", &s.name), next());
            o.insert("type".into(), ty);
            if s.interval {
                o.insert("flags".into(), json!(["interval"]));
            }
            if !s.elements.is_empty() {
                let e: Vec<Value> = s.elements.iter().map(|e| json_elem(&dts, e)).collect();
                o.insert("elem".into(), Value::Array(e));
            }
            out.push(json!({ "set": o }));
        }
        for c in &t.chains {
            let mut o = head(fam, &t.name, ("name", &c.name), next());
            if let Some(b) = &c.base {
                let kind = match b.kind {
                    ChainType::Filter => "filter",
                    ChainType::Nat => "nat",
                };
                o.insert("type".into(), json!(kind));
                o.insert("hook".into(), json!(b.hook.name()));
                o.insert("prio".into(), json!(b.priority));
                o.insert("policy".into(), json!(policy(b.policy)));
            }
            out.push(json!({ "chain": o }));
        }
        for (ci, c) in t.chains.iter().enumerate() {
            for (ri, r) in c.rules.iter().enumerate() {
                let counter = counters(ti, ci, ri);
                let expr: Vec<Value> = r
                    .items
                    .iter()
                    .map(|i| match i {
                        Item::Match(m) => json_match(m),
                        Item::Stmt(s) => json_stmt(s, t.family, counter),
                    })
                    .collect();
                let mut o = head(fam, &t.name, ("chain", &c.name), next());
                if let Some(cm) = &r.comment {
                    o.insert("comment".into(), json!(cm));
                }
                o.insert("expr".into(), Value::Array(expr));
                out.push(json!({ "rule": o }));
            }
        }
    }
    json!({ "nftables": out })
}
