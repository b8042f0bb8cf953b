//! Helpers that write rulesets as [`ast`] values, for tests and benchmarks that need a
//! ruleset without its text: `rule(vec![is(Field::TcpDport, &[val(22)]), accept()])` is
//! `tcp dport 22 accept`. Spans are left at their default.

use crate::ast::{
    self, Atom, BaseChain, Chain, ChainType, Elem, Family, Field, Hook, Item, Match, Policy, Rhs, Rule, SetDecl, Stmt,
    Table, Test, ValueType, Verdict,
};
use crate::packet::Fields;

/// A table.
pub fn table(family: Family, name: &str, sets: Vec<SetDecl>, chains: Vec<Chain>) -> Table {
    Table {
        family,
        name: name.into(),
        sets,
        chains,
        span: ast::Span::default(),
    }
}

/// A `type filter` base chain.
pub fn base_chain(name: &str, hook: Hook, priority: i32, policy: Policy, rules: Vec<Rule>) -> Chain {
    Chain {
        name: name.into(),
        base: Some(BaseChain {
            kind: ChainType::Filter,
            hook,
            priority,
            policy,
        }),
        rules,
        span: ast::Span::default(),
    }
}

/// A user chain.
pub fn chain(name: &str, rules: Vec<Rule>) -> Chain {
    Chain {
        name: name.into(),
        base: None,
        rules,
        span: ast::Span::default(),
    }
}

/// A rule of these items.
pub fn rule(items: Vec<Item>) -> Rule {
    Rule {
        items,
        comment: None,
        span: ast::Span::default(),
    }
}

/// A single value.
pub fn val(v: u128) -> Atom {
    Atom::value(v)
}

/// An inclusive range.
pub fn range(lo: u128, hi: u128) -> Atom {
    Atom::Range(lo, hi)
}

/// An IPv4 address as a number.
pub fn v4(a: u8, b: u8, c: u8, d: u8) -> u128 {
    u128::from(u32::from_be_bytes([a, b, c, d]))
}

/// An IPv4 prefix `addr/len` as a range.
pub fn prefix4(addr: u128, len: u8) -> Atom {
    let host = if len >= 32 { 0 } else { (1u128 << (32 - len)) - 1 };
    Atom::Range(addr & !host & 0xffff_ffff, (addr | host) & 0xffff_ffff)
}

/// An interface name (`"eth*"` for a wildcard).
pub fn name(n: &str) -> Atom {
    Atom::Name(n.into())
}

fn m(fields: &[Field], test: Test) -> Item {
    Item::Match(Match {
        fields: fields.to_vec(),
        test,
        span: ast::Span::default(),
    })
}

/// `field { a, b, … }` (or `field a`).
pub fn is(field: Field, atoms: &[Atom]) -> Item {
    m(
        &[field],
        Test::In {
            rhs: Rhs::Elems(atoms.iter().map(|a| Elem(vec![a.clone()])).collect()),
            negate: false,
        },
    )
}

/// `field != { a, b, … }`.
pub fn not(field: Field, atoms: &[Atom]) -> Item {
    m(
        &[field],
        Test::In {
            rhs: Rhs::Elems(atoms.iter().map(|a| Elem(vec![a.clone()])).collect()),
            negate: true,
        },
    )
}

/// `f1 . f2 [!=] { e1, e2, … }`.
pub fn concat(fields: &[Field], elems: Vec<Elem>, negate: bool) -> Item {
    m(
        fields,
        Test::In {
            rhs: Rhs::Elems(elems),
            negate,
        },
    )
}

/// `f1 [. f2] [!=] @set`.
pub fn in_set(fields: &[Field], set: &str, negate: bool) -> Item {
    m(
        fields,
        Test::In {
            rhs: Rhs::Set(set.into()),
            negate,
        },
    )
}

/// `field bits` (any of them set; `negate`: none).
pub fn any_bit(field: Field, bits: u128, negate: bool) -> Item {
    m(&[field], Test::AnyBit { bits, negate })
}

/// `field & mask [!=] value`.
pub fn masked(field: Field, mask: u128, value: u128, negate: bool) -> Item {
    m(&[field], Test::Masked { mask, value, negate })
}

/// A named set.
pub fn set(name: &str, key: &[ValueType], interval: bool, elements: Vec<Elem>) -> SetDecl {
    SetDecl {
        name: name.into(),
        key: key.to_vec(),
        interval,
        elements,
        span: ast::Span::default(),
    }
}

/// A verdict statement.
pub fn verdict(v: Verdict) -> Item {
    Item::Stmt(Stmt::Verdict(v))
}

/// `accept`.
pub fn accept() -> Item {
    verdict(Verdict::Accept)
}

/// `drop`.
pub fn drop() -> Item {
    verdict(Verdict::Drop)
}

/// `jump NAME`.
pub fn jump(name: &str) -> Item {
    verdict(Verdict::Jump(name.into()))
}

/// `goto NAME`.
pub fn goto(name: &str) -> Item {
    verdict(Verdict::Goto(name.into()))
}

/// `counter`.
pub fn counter() -> Item {
    Item::Stmt(Stmt::Counter)
}

/// `limit rate [over] N/second burst B packets`.
pub fn limit_per_second(rate: u64, burst: u32, over: bool) -> Item {
    Item::Stmt(Stmt::Limit(ast::Limit {
        rate,
        per: ast::Per::Second,
        burst,
        bytes: false,
        over,
    }))
}

/// `log [prefix "…"]`.
pub fn log(prefix: Option<&str>) -> Item {
    Item::Stmt(Stmt::Log {
        prefix: prefix.map(Into::into),
    })
}

/// A new TCP SYN over IPv4 from interface 1 to interface 2 (`ct state new`, 60 bytes).
pub fn tcp4(saddr: u128, daddr: u128, dport: u16) -> Fields {
    Fields {
        iif: 1,
        oif: 2,
        nfproto: 2,
        saddr,
        daddr,
        l4proto: 6,
        sport: 40_000,
        dport,
        tcp_flags: 0x02,
        ttl: 64,
        length: 60,
        ct_state: 8,
        ether_type: 0x0800,
        ..Fields::default()
    }
}
