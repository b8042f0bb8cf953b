//! The resolved program both evaluators run: a ruleset's chains with jump targets, named
//! sets, interface names, counters, limits and log statements turned into indexes, and the
//! evaluation of one rule's items against one packet ([`run_rule`]).
//!
//! Both strategies ([`crate::linear`] and [`crate::compile`]) call [`run_rule`] for every
//! rule they consider, so what a rule does to a packet is written once: the classifier only
//! decides which rules need not be run at all and which leading matches it already proved.
//!
//! Threads: the program is built once by the control plane and read by every worker;
//! [`run_rule`] writes only the worker's own state.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use crate::ast::{self, Atom, Elem, Field, Item, RejectWith, Rhs, Span, Stmt, Test, ValueType, Verdict};
use crate::firewall::{FwState, RuleRef};
use crate::packet::{max_value, value, Fields};

/// The most fields one concatenation may join.
pub const MAX_CONCAT: usize = 6;
/// The most nested `jump`s (nftables' jump stack holds 16).
pub const MAX_DEPTH: usize = 16;

/// Sorted, disjoint, non-adjacent inclusive intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Intervals(pub(crate) Vec<(u128, u128)>);

impl Intervals {
    /// Sorts and merges overlapping or adjacent intervals.
    pub(crate) fn new(mut v: Vec<(u128, u128)>) -> Intervals {
        v.retain(|&(lo, hi)| lo <= hi);
        v.sort_unstable();
        let mut out: Vec<(u128, u128)> = Vec::with_capacity(v.len());
        for (lo, hi) in v {
            match out.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        Intervals(out)
    }

    #[inline]
    pub(crate) fn contains(&self, v: u128) -> bool {
        let i = self.0.partition_point(|&(lo, _)| lo <= v);
        i > 0 && self.0[i - 1].1 >= v
    }

    /// Everything in `0..=max` not in `self`.
    pub(crate) fn complement(&self, max: u128) -> Intervals {
        let mut out = Vec::new();
        let mut next = Some(0u128);
        for &(lo, hi) in &self.0 {
            if let Some(n) = next {
                if lo > n {
                    out.push((n, lo - 1));
                }
            }
            next = hi.checked_add(1);
        }
        if let Some(n) = next {
            if n <= max {
                out.push((n, max));
            }
        }
        Intervals(out)
    }

    /// What both hold.
    pub(crate) fn intersect(&self, o: &Intervals) -> Intervals {
        let (mut i, mut j, mut out) = (0, 0, Vec::new());
        while i < self.0.len() && j < o.0.len() {
            let (a, b) = (self.0[i], o.0[j]);
            let (lo, hi) = (a.0.max(b.0), a.1.min(b.1));
            if lo <= hi {
                out.push((lo, hi));
            }
            if a.1 < b.1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        Intervals(out)
    }
}

/// A fast hasher for the exact elements of concatenated sets (FxHash's mixing step): keys are
/// numbers the ruleset's author wrote, not attacker-chosen.
#[derive(Default)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}

pub(crate) type Key = [u128; MAX_CONCAT];

/// A set of tuples: exact tuples in a hash table, tuples with a range among their parts in a
/// list scanned in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tuples {
    exact: HashSet<Key, BuildHasherDefault<FxHasher>>,
    ranges: Vec<Vec<(u128, u128)>>,
}

impl Tuples {
    fn contains(&self, k: &Key, n: usize) -> bool {
        self.exact.contains(k)
            || self
                .ranges
                .iter()
                .any(|r| r.iter().zip(&k[..n]).all(|(&(lo, hi), &v)| lo <= v && v <= hi))
    }

    fn heap_bytes(&self) -> usize {
        self.exact.capacity() * (std::mem::size_of::<Key>() + 8)
            + self.ranges.iter().map(|r| r.len() * 32 + 24).sum::<usize>()
    }
}

/// The values a match compares with.
#[derive(Clone, Debug)]
pub(crate) enum ValSet {
    /// One field: intervals.
    One(Intervals),
    /// A concatenation: tuples.
    Concat(Tuples),
}

/// A match's comparison, resolved.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CTest {
    In { set: u32, negate: bool },
    AnyBit { bits: u128, negate: bool },
    Masked { mask: u128, value: u128, negate: bool },
}

/// A match, resolved.
#[derive(Clone, Debug)]
pub(crate) struct CMatch {
    pub(crate) fields: Vec<Field>,
    pub(crate) test: CTest,
}

/// A verdict, with chains as indexes into [`Program::chains`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CVerdict {
    Accept,
    Drop,
    Reject(RejectWith),
    Continue,
    Return,
    Jump(u32),
    Goto(u32),
    /// A NAT statement: index into [`Program::nats`].
    Nat(u32),
}

/// One item of a rule, resolved.
#[derive(Clone, Debug)]
pub(crate) enum CItem {
    Match(CMatch),
    Counter(u32),
    Limit(u32),
    Log(u32),
    Verdict(CVerdict),
}

/// A rule, resolved.
#[derive(Clone, Debug)]
pub(crate) struct CRule {
    pub(crate) items: Vec<CItem>,
}

/// A chain, resolved.
#[derive(Clone, Debug)]
pub(crate) struct CChain {
    pub(crate) rules: Vec<CRule>,
    pub(crate) base: Option<ast::BaseChain>,
    pub(crate) table: u16,
    pub(crate) chain: u16,
}

/// A `limit` statement: a token bucket in credits; `limit.rate` credits are earned a
/// millisecond, one packet (or byte) costs `cost`, the bucket holds `cap` (full at first).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LimitSpec {
    pub(crate) limit: ast::Limit,
    pub(crate) cost: u64,
    pub(crate) cap: u64,
}

/// What one walk through the chains needs besides the worker's state: the program, the
/// packet, the time.
pub(crate) struct Ctx<'a> {
    pub(crate) p: &'a Program,
    pub(crate) f: &'a Fields,
    pub(crate) now_ms: u64,
}

/// The whole resolved ruleset.
#[derive(Clone, Debug, Default)]
pub(crate) struct Program {
    pub(crate) chains: Vec<CChain>,
    pub(crate) sets: Vec<ValSet>,
    pub(crate) limits: Vec<LimitSpec>,
    /// A `log` statement's prefix and rule.
    pub(crate) logs: Vec<(Option<String>, RuleRef)>,
    /// Counter slots.
    pub(crate) counters: usize,
    /// The first counter slot of each rule that has one.
    pub(crate) counter_of: HashMap<(usize, usize, usize), u32>,
    /// Index of each table's first chain in `chains`.
    pub(crate) table_base: Vec<usize>,
    /// NAT statements.
    pub(crate) nats: Vec<crate::nat::NatRule>,
}

impl Program {
    /// Bytes of memory held (approximate: the containers' capacities).
    pub(crate) fn memory(&self) -> usize {
        let sets: usize = self
            .sets
            .iter()
            .map(|s| match s {
                ValSet::One(i) => i.0.capacity() * 32,
                ValSet::Concat(t) => t.heap_bytes(),
            } + std::mem::size_of::<ValSet>())
            .sum();
        let rules: usize = self
            .chains
            .iter()
            .flat_map(|c| &c.rules)
            .map(|r| std::mem::size_of::<CRule>() + r.items.capacity() * (std::mem::size_of::<CItem>() + 16))
            .sum();
        sets + rules + self.chains.len() * std::mem::size_of::<CChain>() + self.limits.len() * 48 + self.logs.len() * 64
    }
}

fn err(span: Span, msg: impl Into<String>) -> ast::Error {
    ast::Error { span, msg: msg.into() }
}

/// Resolves `rs` against the interfaces `ifaces` for `workers` workers.
pub(crate) fn build(rs: &ast::Ruleset, ifaces: &[(String, u32)], workers: usize) -> Result<Program, ast::Error> {
    let mut p = Program::default();
    for t in &rs.tables {
        p.table_base.push(p.chains.len());
        p.chains.extend(t.chains.iter().map(|_| CChain {
            rules: Vec::new(),
            base: None,
            table: 0,
            chain: 0,
        }));
    }
    for (ti, t) in rs.tables.iter().enumerate() {
        let base = p.table_base[ti];
        let mut chain_ix: HashMap<&str, usize> = HashMap::new();
        for (ci, c) in t.chains.iter().enumerate() {
            if chain_ix.insert(&c.name, ci).is_some() {
                return Err(err(
                    c.span,
                    format!(
                        "chain \"{}\" declared twice in table {} {}",
                        c.name,
                        t.family.name(),
                        t.name
                    ),
                ));
            }
        }
        let mut sets: HashMap<&str, (u32, &ast::SetDecl)> = HashMap::new();
        for s in &t.sets {
            let vs = set_values(&s.key, &s.elements, ifaces, s.span)?;
            if sets.insert(&s.name, (p.sets.len() as u32, s)).is_some() {
                return Err(err(s.span, format!("set \"{}\" declared twice", s.name)));
            }
            p.sets.push(vs);
        }
        for (ci, c) in t.chains.iter().enumerate() {
            let mut rules = Vec::with_capacity(c.rules.len());
            for (ri, r) in c.rules.iter().enumerate() {
                let at = RuleRef {
                    table: ti as u16,
                    chain: ci as u16,
                    rule: ri as u32,
                };
                let mut items = Vec::with_capacity(r.items.len());
                for it in &r.items {
                    items.push(match it {
                        Item::Match(m) => CItem::Match(resolve_match(m, &sets, ifaces, &mut p.sets)?),
                        Item::Stmt(Stmt::Counter) => {
                            p.counter_of.entry((ti, ci, ri)).or_insert(p.counters as u32);
                            p.counters += 1;
                            CItem::Counter(p.counters as u32 - 1)
                        }
                        Item::Stmt(Stmt::Limit(l)) => {
                            p.limits.push(limit_spec(l, workers));
                            CItem::Limit(p.limits.len() as u32 - 1)
                        }
                        Item::Stmt(Stmt::Log { prefix }) => {
                            p.logs.push((prefix.clone(), at));
                            CItem::Log(p.logs.len() as u32 - 1)
                        }
                        Item::Stmt(Stmt::Nat(n)) => {
                            p.nats.push(crate::nat::NatRule::new(n, t.family));
                            CItem::Verdict(CVerdict::Nat(p.nats.len() as u32 - 1))
                        }
                        Item::Stmt(Stmt::Verdict(v)) => CItem::Verdict(match v {
                            Verdict::Accept => CVerdict::Accept,
                            Verdict::Drop => CVerdict::Drop,
                            Verdict::Reject(w) => CVerdict::Reject(*w),
                            Verdict::Continue => CVerdict::Continue,
                            Verdict::Return => CVerdict::Return,
                            Verdict::Jump(n) | Verdict::Goto(n) => {
                                let Some(&target) = chain_ix.get(n.as_str()) else {
                                    return Err(err(
                                        r.span,
                                        format!("unknown chain \"{n}\" in table {} {}", t.family.name(), t.name),
                                    ));
                                };
                                if t.chains[target].base.is_some() {
                                    return Err(err(r.span, format!("cannot jump to base chain \"{n}\"")));
                                }
                                let g = (base + target) as u32;
                                if matches!(v, Verdict::Jump(_)) {
                                    CVerdict::Jump(g)
                                } else {
                                    CVerdict::Goto(g)
                                }
                            }
                        }),
                    });
                }
                rules.push(CRule { items });
            }
            p.chains[base + ci] = CChain {
                rules,
                base: c.base,
                table: ti as u16,
                chain: ci as u16,
            };
        }
        check_jumps(t, &chain_ix)?;
    }
    Ok(p)
}

/// Rejects jump loops and more than [`MAX_DEPTH`] nested jumps in table `t`.
fn check_jumps(t: &ast::Table, ix: &HashMap<&str, usize>) -> Result<(), ast::Error> {
    // depth[c]: the most nested jumps from chain c; state 1 = being explored.
    fn visit(
        t: &ast::Table,
        ix: &HashMap<&str, usize>,
        c: usize,
        state: &mut [u8],
        depth: &mut [usize],
    ) -> Result<usize, ast::Error> {
        if state[c] == 2 {
            return Ok(depth[c]);
        }
        state[c] = 1;
        let mut d = 0;
        for r in &t.chains[c].rules {
            for it in &r.items {
                let (n, jump) = match it {
                    Item::Stmt(Stmt::Verdict(Verdict::Jump(n))) => (n, 1),
                    Item::Stmt(Stmt::Verdict(Verdict::Goto(n))) => (n, 0),
                    _ => continue,
                };
                let target = ix[n.as_str()];
                if state[target] == 1 {
                    return Err(err(
                        r.span,
                        format!("jump loop: chain \"{}\" reaches itself", t.chains[target].name),
                    ));
                }
                let sub = visit(t, ix, target, state, depth)?;
                if sub + jump > MAX_DEPTH {
                    return Err(err(
                        r.span,
                        format!("more than {MAX_DEPTH} nested jumps from chain \"{}\"", t.chains[c].name),
                    ));
                }
                d = d.max(sub + jump);
            }
        }
        state[c] = 2;
        depth[c] = d;
        Ok(d)
    }
    let mut state = vec![0u8; t.chains.len()];
    let mut depth = vec![0usize; t.chains.len()];
    for c in 0..t.chains.len() {
        visit(t, ix, c, &mut state, &mut depth)?;
    }
    Ok(())
}

fn limit_spec(l: &ast::Limit, workers: usize) -> LimitSpec {
    let w = workers.max(1) as u64;
    let per = l.per.ms();
    // Time t ms earns t * rate credits; one packet (byte) costs `per * workers` credits, so
    // each worker gets rate / workers per unit. The packet burst is split the same way
    // (rounded up, at least one packet); nftables' default is 5.
    let rate = l.rate.max(1);
    let cost = per.saturating_mul(w);
    let cap = if l.bytes {
        per.saturating_mul(rate.saturating_add(u64::from(l.burst)))
    } else {
        let burst = if l.burst == 0 { 5 } else { u64::from(l.burst) };
        cost.saturating_mul(burst.div_ceil(w).max(1))
    };
    LimitSpec {
        limit: ast::Limit { rate, ..*l },
        cost,
        cap,
    }
}

fn type_ok(key: ValueType, field: Field) -> bool {
    let ft = field.value_type();
    key == ft
        || matches!((key, ft), (ValueType::Integer { bits: a }, b) | (b, ValueType::Integer { bits: a }) if a == b.bits())
}

fn resolve_match(
    m: &ast::Match,
    sets: &HashMap<&str, (u32, &ast::SetDecl)>,
    ifaces: &[(String, u32)],
    all: &mut Vec<ValSet>,
) -> Result<CMatch, ast::Error> {
    if m.fields.is_empty() || m.fields.len() > MAX_CONCAT {
        return Err(err(
            m.span,
            format!("a match joins 1 to {MAX_CONCAT} fields, not {}", m.fields.len()),
        ));
    }
    let types: Vec<ValueType> = m.fields.iter().map(|f| f.value_type()).collect();
    let test = match &m.test {
        Test::In {
            rhs: Rhs::Set(name),
            negate,
        } => {
            let Some(&(ix, decl)) = sets.get(name.as_str()) else {
                return Err(err(m.span, format!("unknown set \"{name}\"")));
            };
            if decl.key.len() != m.fields.len() || !decl.key.iter().zip(&m.fields).all(|(&k, &f)| type_ok(k, f)) {
                let want: Vec<&str> = m.fields.iter().map(|f| f.name()).collect();
                return Err(err(
                    m.span,
                    format!(
                        "set \"{name}\" has type {:?}, which does not fit {}",
                        decl.key,
                        want.join(" . ")
                    ),
                ));
            }
            CTest::In {
                set: ix,
                negate: *negate,
            }
        }
        Test::In {
            rhs: Rhs::Elems(elems),
            negate,
        } => {
            all.push(set_values(&types, elems, ifaces, m.span)?);
            CTest::In {
                set: all.len() as u32 - 1,
                negate: *negate,
            }
        }
        Test::AnyBit { bits, negate } | Test::Masked { mask: bits, negate, .. }
            if m.fields.len() > 1 || types[0] == ValueType::Ifname =>
        {
            let _ = (bits, negate);
            return Err(err(
                m.span,
                format!("a bit test needs one numeric field, not {}", m.fields[0].name()),
            ));
        }
        Test::AnyBit { bits, negate } => CTest::AnyBit {
            bits: *bits,
            negate: *negate,
        },
        Test::Masked { mask, value, negate } => CTest::Masked {
            mask: *mask,
            value: *value,
            negate: *negate,
        },
    };
    Ok(CMatch {
        fields: m.fields.clone(),
        test,
    })
}

/// The ids of the interfaces an interface-name atom names.
fn iface_ids(name: &str, ifaces: &[(String, u32)]) -> Vec<(u128, u128)> {
    let (pfx, wild) = match name.strip_suffix('*') {
        Some(p) => (p, true),
        None => (name, false),
    };
    ifaces
        .iter()
        .filter(|(n, _)| if wild { n.starts_with(pfx) } else { n == pfx })
        .map(|&(_, id)| (u128::from(id), u128::from(id)))
        .collect()
}

/// The intervals one atom stands for in a part of type `t`.
fn atom_values(a: &Atom, t: ValueType, ifaces: &[(String, u32)], span: Span) -> Result<Vec<(u128, u128)>, ast::Error> {
    match (a, t) {
        (Atom::Name(n), ValueType::Ifname) => Ok(iface_ids(n, ifaces)),
        (Atom::Range(lo, hi), t) if t != ValueType::Ifname => {
            let max = match t.bits() {
                128 => u128::MAX,
                b => (1u128 << b) - 1,
            };
            if lo > hi || *hi > max {
                return Err(err(
                    span,
                    format!("value {lo}..{hi} does not fit a {}-bit field", t.bits()),
                ));
            }
            Ok(vec![(*lo, *hi)])
        }
        (Atom::Name(n), _) => Err(err(span, format!("\"{n}\" is not a value of this field"))),
        (Atom::Range(..), _) => Err(err(span, "an interface is named, not numbered")),
    }
}

/// The values of a set whose parts have types `key`.
fn set_values(key: &[ValueType], elems: &[Elem], ifaces: &[(String, u32)], span: Span) -> Result<ValSet, ast::Error> {
    if key.is_empty() || key.len() > MAX_CONCAT {
        return Err(err(
            span,
            format!("a set's key joins 1 to {MAX_CONCAT} types, not {}", key.len()),
        ));
    }
    for e in elems {
        if e.0.len() != key.len() {
            return Err(err(
                span,
                format!("an element has {} parts, the key {}", e.0.len(), key.len()),
            ));
        }
    }
    if key.len() == 1 {
        let mut v = Vec::new();
        for e in elems {
            v.extend(atom_values(&e.0[0], key[0], ifaces, span)?);
        }
        return Ok(ValSet::One(Intervals::new(v)));
    }
    let mut t = Tuples::default();
    for e in elems {
        // Each part's intervals; an interface wildcard may give several, so the element
        // becomes their product.
        let parts: Vec<Vec<(u128, u128)>> =
            e.0.iter()
                .zip(key)
                .map(|(a, &k)| atom_values(a, k, ifaces, span))
                .collect::<Result<_, _>>()?;
        let mut tuples: Vec<Vec<(u128, u128)>> = vec![Vec::new()];
        for part in &parts {
            tuples = tuples
                .iter()
                .flat_map(|t| part.iter().map(move |&iv| [t.as_slice(), &[iv]].concat()))
                .collect();
        }
        for tu in tuples {
            if tu.iter().all(|&(lo, hi)| lo == hi) {
                let mut k = [0u128; MAX_CONCAT];
                for (slot, &(lo, _)) in k.iter_mut().zip(&tu) {
                    *slot = lo;
                }
                t.exact.insert(k);
            } else {
                t.ranges.push(tu);
            }
        }
    }
    Ok(ValSet::Concat(t))
}

/// Whether packet `f` passes match `m`.
#[inline]
pub(crate) fn matches(p: &Program, m: &CMatch, f: &Fields) -> bool {
    match m.test {
        CTest::In { set, negate } => {
            let found = match &p.sets[set as usize] {
                ValSet::One(iv) => match value(m.fields[0], f) {
                    Some(v) => iv.contains(v),
                    None => return false,
                },
                ValSet::Concat(t) => {
                    let mut k = [0u128; MAX_CONCAT];
                    for (slot, &field) in k.iter_mut().zip(&m.fields) {
                        match value(field, f) {
                            Some(v) => *slot = v,
                            None => return false,
                        }
                    }
                    t.contains(&k, m.fields.len())
                }
            };
            found != negate
        }
        CTest::AnyBit { bits, negate } => match value(m.fields[0], f) {
            Some(v) => (v & bits != 0) != negate,
            None => false,
        },
        CTest::Masked {
            mask,
            value: want,
            negate,
        } => match value(m.fields[0], f) {
            Some(v) => (v & mask == want) != negate,
            None => false,
        },
    }
}

/// The values of `m`'s single field that pass it, when the match can be written as
/// intervals of one field (what the classifier's bitmaps hold); `None` otherwise.
pub(crate) fn match_intervals(p: &Program, m: &CMatch) -> Option<Intervals> {
    if m.fields.len() != 1 {
        return None;
    }
    let field = m.fields[0];
    let max = max_value(field);
    let small = |keep: &dyn Fn(u128) -> bool| -> Option<Intervals> {
        if max > 0xff {
            return None;
        }
        Some(Intervals::new((0..=max).filter(|&v| keep(v)).map(|v| (v, v)).collect()))
    };
    match m.test {
        CTest::In { set, negate } => match &p.sets[set as usize] {
            ValSet::One(iv) if negate => Some(iv.complement(max)),
            ValSet::One(iv) => Some(iv.clone()),
            ValSet::Concat(_) => None,
        },
        CTest::AnyBit { bits, negate } => small(&|v| (v & bits != 0) != negate),
        CTest::Masked { mask, value, negate } => small(&|v| (v & mask == value) != negate),
    }
}

/// Runs `rule`'s items from `from` on: `None` when a match fails or the rule ends without a
/// verdict (or with `continue`), else its verdict. Counters, limits and logs write `st`.
#[inline]
pub(crate) fn run_rule(
    p: &Program,
    rule: &CRule,
    from: usize,
    f: &Fields,
    st: &mut FwState,
    now_ms: u64,
) -> Option<CVerdict> {
    for it in &rule.items[from..] {
        match it {
            CItem::Match(m) => {
                if !matches(p, m, f) {
                    return None;
                }
            }
            CItem::Counter(slot) => st.count(*slot, f.length),
            CItem::Limit(ix) => {
                if !st.limit(*ix, &p.limits[*ix as usize], f.length, now_ms) {
                    return None;
                }
            }
            CItem::Log(ix) => st.log(*ix, f, now_ms),
            CItem::Verdict(CVerdict::Continue) => return None,
            CItem::Verdict(v) => return Some(*v),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_normalise_complement_intersect() {
        let a = Intervals::new(vec![(5, 9), (1, 2), (3, 4), (20, 30)]);
        assert_eq!(a.0, vec![(1, 9), (20, 30)]);
        assert!(a.contains(1) && a.contains(9) && a.contains(25) && !a.contains(0) && !a.contains(10));
        assert_eq!(a.complement(40).0, vec![(0, 0), (10, 19), (31, 40)]);
        assert_eq!(Intervals::new(vec![(0, 255)]).complement(255).0, vec![]);
        assert_eq!(Intervals(vec![]).complement(u128::MAX).0, vec![(0, u128::MAX)]);
        assert_eq!(Intervals::new(vec![(0, u128::MAX)]).complement(u128::MAX).0, vec![]);
        let b = Intervals::new(vec![(0, 4), (8, 22)]);
        assert_eq!(a.intersect(&b).0, vec![(1, 4), (8, 9), (20, 22)]);
    }
}
