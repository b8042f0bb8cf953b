//! The classifier: which rules of a chain can match a packet, found with a cost nearly
//! constant in the number of rules.
//!
//! # Design: bit-vector intersection per chain
//!
//! For each chain, every field that some rule compares in a way a set of intervals can say
//! is a *dimension*. A rule's matches that come before its first statement are pure tests
//! (nothing happens unless they all pass), so the ones on a single field whose passing values
//! are intervals (a value, a prefix, a range, an anonymous or named set of them, their
//! negation, a bit test on an 8-bit field) become the rule's condition in that dimension
//! (several on one field: their intersection). Each dimension's value space is split into
//! elementary intervals at every rule's bounds; each interval points to the bitmap of the
//! rules its values satisfy (a rule without a condition in that dimension is in every
//! bitmap), and a packet that lacks the field (no transport header, another family) gets
//! the bitmap of the unconstrained rules only, because a match on a missing field fails,
//! `!=` included. Identical bitmaps are stored once, each as a summary (one bit per 64-rule
//! word that is not zero) followed by its non-zero words only: the bitmaps of a per-host
//! dimension hold a bit or two each, and stay small enough for the caches.
//!
//! Rules wildcard in a dimension are in every one of its bitmaps, so a few of them spread
//! over a chain (`ip saddr 172.16.0.0/24 drop` every fifty per-host rules) would make every
//! summary dense. So a chain's rules are first split into *groups* by the set of fields
//! they constrain (per-host rules in one, subnet blocks in another; at most
//! [`MAX_GROUPS`], the smallest merged into one mixed group beyond that), each group with
//! its own dimensions and bitmaps over its own members; a packet walks the groups'
//! candidates merged in rule order.
//!
//! Per packet and chain: one binary search per dimension of each group (made once per packet, kept in
//! the worker's scratch so that a `jump` back into a chain costs nothing more), then the AND
//! of the chosen summaries finds the words worth looking at and the AND of those words the
//! candidates, walked in rule order. Each candidate runs through [`crate::eval::run_rule`],
//! the same code the linear evaluator runs, from its first item the bitmaps did not already
//! prove: concatenations, wide masks, `limit`, matches after a statement, and the
//! statements themselves. A rule the bitmaps cannot narrow is simply a candidate for every
//! packet. The first few rules of a chain (the `ct state established,related accept` that
//! most packets stop at) run linearly before any lookup is made.
//!
//! Why this design: realistic rulesets compare few fields (interfaces, addresses, ports,
//! protocol, ct state) with values, prefixes and ranges, which is exactly what elementary
//! intervals hold; a packet costs a handful of binary searches plus a walk over the words
//! the summaries point at, and the rules' order and side effects (counters, limits, logs,
//! jumps) stay exactly the linear evaluator's because the residual evaluation is the same.
//! Memory is one bitmap per distinct interval: for per-host rules, the intervals between
//! hosts share one bitmap.
//!
//! Threads: built by the control plane, read by every worker; the per-packet lookups live
//! in the worker's [`crate::firewall::FwState`].

use std::collections::{BTreeMap, HashMap};

use crate::ast::Field;
use crate::eval::{match_intervals, run_rule, CItem, CRule, CVerdict, Ctx, Intervals, Program};
use crate::firewall::{FwState, Scratch};
use crate::packet::{max_value, value, Fields};

/// Rules at the head of a chain run linearly, before any lookup is made.
pub(crate) const LINEAR_PREFIX: usize = 4;

/// The most groups per chain.
pub(crate) const MAX_GROUPS: usize = 8;

/// Where a dimension's elementary intervals begin (the first at 0): 64-bit values with a
/// bucket index for the fields that fit, 128-bit values for IPv6 addresses.
#[derive(Debug)]
enum Bounds {
    Narrow(Narrow),
    Wide(Vec<u128>),
}

/// Sorted 64-bit bounds with a bucket index over `first..=last` (the second bound to the
/// last): bucket `k` covers `[first + (k << shift), first + ((k + 1) << shift))`, and
/// `starts[k]` counts the bounds below its start, so a lookup searches only the bounds of
/// one bucket (about one, for evenly spread values such as per-host rules).
#[derive(Debug)]
struct Narrow {
    bounds: Vec<u64>,
    first: u64,
    last: u64,
    shift: u32,
    starts: Vec<u32>,
}

impl Narrow {
    fn new(bounds: Vec<u64>) -> Narrow {
        let (first, last) = (bounds.get(1).copied().unwrap_or(0), bounds.last().copied().unwrap_or(0));
        let span = last - first;
        // About two buckets a bound.
        let want = (bounds.len() as u64 * 2).max(1);
        let mut shift = 0;
        while (span >> shift) >= want {
            shift += 1;
        }
        let buckets = (span >> shift) as usize + 2;
        let starts = (0..buckets)
            .map(|k| {
                let start = (u128::from(first) + ((k as u128) << shift)).min(u128::from(u64::MAX)) as u64;
                bounds.partition_point(|&b| b < start) as u32
            })
            .collect();
        Narrow {
            bounds,
            first,
            last,
            shift,
            starts,
        }
    }

    /// How many bounds are `<= v`.
    #[inline]
    fn rank(&self, v: u64) -> usize {
        if v < self.first {
            return 1.min(self.bounds.len());
        }
        if v >= self.last {
            return self.bounds.len();
        }
        let k = ((v - self.first) >> self.shift) as usize;
        let (lo, hi) = (self.starts[k] as usize, self.starts[k + 1] as usize);
        lo + self.bounds[lo..hi].partition_point(|&b| b <= v)
    }
}

/// One dimension of a group.
#[derive(Debug)]
struct Dim {
    field: Field,
    bounds: Bounds,
    /// The bitmap (offset into the group's pool) of each interval.
    bms: Vec<u32>,
    /// The bitmap of a packet without the field.
    absent: u32,
}

impl Dim {
    #[inline]
    fn lookup(&self, f: &Fields) -> u32 {
        match value(self.field, f) {
            None => self.absent,
            Some(v) => {
                let i = match &self.bounds {
                    // A narrow field's value fits 64 bits.
                    Bounds::Narrow(b) => b.rank(v as u64),
                    Bounds::Wide(b) => b.partition_point(|&x| x <= v),
                };
                self.bms[i - 1]
            }
        }
    }

    fn memory(&self) -> usize {
        std::mem::size_of::<Dim>()
            + self.bms.capacity() * 4
            + match &self.bounds {
                Bounds::Narrow(b) => b.bounds.capacity() * 8 + b.starts.capacity() * 4,
                Bounds::Wide(b) => b.capacity() * 16,
            }
    }
}

/// Rules of one chain that constrain the same fields, with their bitmaps.
#[derive(Debug)]
struct Group {
    /// The members' indexes in the chain, ascending; bit i of a bitmap is `members[i]`.
    members: Vec<u32>,
    words: usize,
    sum_words: usize,
    dims: Vec<Dim>,
    /// Bitmaps: each its summary words (bit `w`: member word `w` is not zero), then its
    /// member words that are not zero, in order (most bitmaps of a big group are sparse).
    pool: Vec<u64>,
    /// This group's first slot in [`Scratch::offs`].
    base: usize,
}

/// One chain's index.
#[derive(Debug)]
struct Index {
    n: usize,
    prefix: usize,
    /// Per rule: how many leading items the bitmaps prove.
    skip: Vec<u16>,
    /// Per rule: its verdict, when the bitmaps prove all its matches and nothing else comes
    /// before the verdict (a candidate then decides without its items being read).
    direct: Vec<Option<CVerdict>>,
    groups: Vec<Group>,
}

/// The classifier of a whole program: one index per chain.
#[derive(Debug)]
pub(crate) struct Classifier {
    chains: Vec<Index>,
    slots: usize,
}

impl Classifier {
    /// Builds the index of every chain of `p`, with `prefix` rules per chain run linearly
    /// (tests use 0 to try every rule through the bitmaps).
    pub(crate) fn with_prefix(p: &Program, prefix: usize) -> Classifier {
        let mut slots = 0;
        let chains = p
            .chains
            .iter()
            .map(|c| build_index(p, &c.rules, prefix, &mut slots))
            .collect();
        Classifier { chains, slots }
    }

    /// A worker's scratch for this classifier.
    pub(crate) fn scratch(&self) -> Scratch {
        Scratch {
            gen_of: vec![0; self.chains.len()],
            offs: vec![0; self.slots],
            gen: 0,
        }
    }

    /// Bytes held.
    pub(crate) fn memory(&self) -> usize {
        self.chains
            .iter()
            .map(|ix| {
                std::mem::size_of::<Index>()
                    + ix.skip.capacity() * 2
                    + ix.direct.capacity() * std::mem::size_of::<Option<CVerdict>>()
                    + ix.groups
                        .iter()
                        .map(|g| {
                            std::mem::size_of::<Group>()
                                + g.pool.capacity() * 8
                                + g.members.capacity() * 4
                                + g.dims.iter().map(Dim::memory).sum::<usize>()
                        })
                        .sum::<usize>()
            })
            .sum()
    }

    /// The first rule of `chain` at or after `from` that ends with a verdict for `f` (other
    /// than `continue`), and that verdict: the linear evaluator's answer.
    #[inline]
    pub(crate) fn next_verdict(
        &self,
        cx: &Ctx,
        chain: u32,
        from: usize,
        st: &mut FwState,
    ) -> Option<(usize, CVerdict)> {
        let (p, f, now_ms) = (cx.p, cx.f, cx.now_ms);
        let ix = &self.chains[chain as usize];
        let rules = &p.chains[chain as usize].rules;
        if from < ix.prefix {
            let hit = crate::linear::next_verdict(cx, chain, from, ix.prefix, st);
            if hit.is_some() {
                return hit;
            }
        }
        let r = from.max(ix.prefix);
        if r >= ix.n {
            return None;
        }
        let sc = &mut st.scratch;
        if sc.gen_of[chain as usize] != sc.gen {
            for g in &ix.groups {
                for (slot, d) in sc.offs[g.base..g.base + g.dims.len()].iter_mut().zip(&g.dims) {
                    *slot = d.lookup(f);
                }
            }
            sc.gen_of[chain as usize] = sc.gen;
        }
        // Each group's next candidate (its local index), merged in rule order.
        let mut next = [usize::MAX; MAX_GROUPS];
        for (n, g) in next.iter_mut().zip(&ix.groups) {
            // Usually the whole group lies ahead.
            let local = if g.members.first().is_some_and(|&m| m as usize >= r) {
                0
            } else {
                g.members.partition_point(|&m| (m as usize) < r)
            };
            *n = g
                .next_candidate(&sc.offs[g.base..g.base + g.dims.len()], local)
                .unwrap_or(usize::MAX);
        }
        loop {
            let (mut gi, mut cand) = (0, usize::MAX);
            for (i, (&n, g)) in next.iter().zip(&ix.groups).enumerate() {
                if n != usize::MAX && (g.members[n] as usize) < cand {
                    (gi, cand) = (i, g.members[n] as usize);
                }
            }
            if cand == usize::MAX {
                return None;
            }
            if let Some(v) = ix.direct[cand] {
                return Some((cand, v));
            }
            if let Some(v) = run_rule(p, &rules[cand], usize::from(ix.skip[cand]), f, st, now_ms) {
                return Some((cand, v));
            }
            let g = &ix.groups[gi];
            next[gi] = g
                .next_candidate(&st.scratch.offs[g.base..g.base + g.dims.len()], next[gi] + 1)
                .unwrap_or(usize::MAX);
        }
    }
}

impl Group {
    /// The first member (local index) at or after `from` set in every chosen bitmap.
    #[inline]
    fn next_candidate(&self, offs: &[u32], from: usize) -> Option<usize> {
        let pool = &self.pool[..];
        let mut w = from / 64;
        let mut low = !0u64 << (from % 64);
        while w < self.words {
            let s = w / 64;
            let mut agg = !0u64 << (w % 64);
            for &o in offs {
                agg &= pool[o as usize + s];
            }
            if agg == 0 {
                w = (s + 1) * 64;
                low = !0;
                continue;
            }
            let nw = s * 64 + agg.trailing_zeros() as usize;
            if nw != w {
                w = nw;
                low = !0;
            }
            // Every chosen bitmap has word `w` (its summary bit is set): its place among the
            // bitmap's stored words is the number of summary bits before it.
            let (below, bit) = (w / 64, w % 64);
            let mut bits = low;
            for &o in offs {
                let o = o as usize;
                let rank = pool[o..o + below]
                    .iter()
                    .map(|x| x.count_ones() as usize)
                    .sum::<usize>()
                    + (pool[o + below] & ((1u64 << bit) - 1)).count_ones() as usize;
                bits &= pool[o + self.sum_words + rank];
                if bits == 0 {
                    break;
                }
            }
            if bits != 0 {
                let r = w * 64 + bits.trailing_zeros() as usize;
                return (r < self.members.len()).then_some(r);
            }
            w += 1;
            low = !0;
        }
        None
    }
}

/// Builds one chain's index; `slots` counts the scratch slots of all chains so far.
fn build_index(p: &Program, rules: &[CRule], prefix: usize, slots: &mut usize) -> Index {
    let n = rules.len();
    // Each rule's conditions per field, and how many leading items they prove.
    let mut conds: Vec<BTreeMap<Field, Intervals>> = Vec::with_capacity(n);
    let mut skip = Vec::with_capacity(n);
    let mut direct = Vec::with_capacity(n);
    for rule in rules {
        let mut mine: BTreeMap<Field, Intervals> = BTreeMap::new();
        let mut proved = 0;
        let mut exact = true;
        for (k, it) in rule.items.iter().enumerate() {
            let CItem::Match(m) = it else { break };
            match match_intervals(p, m) {
                Some(iv) => {
                    let field = m.fields[0];
                    let iv = match mine.remove(&field) {
                        Some(old) => old.intersect(&iv),
                        None => iv,
                    };
                    mine.insert(field, iv);
                    if exact {
                        proved = k + 1;
                    }
                }
                None => exact = false,
            }
        }
        skip.push(u16::try_from(proved).unwrap_or(0));
        conds.push(mine);
        direct.push(match rule.items[proved..] {
            [CItem::Verdict(v)] if v != CVerdict::Continue => Some(v),
            _ => None,
        });
    }
    // Group the rules after the prefix by the fields they constrain; beyond MAX_GROUPS, the
    // smallest groups merge into one.
    let mut by_sig: BTreeMap<Vec<Field>, Vec<u32>> = BTreeMap::new();
    for (r, c) in conds.iter().enumerate().skip(prefix) {
        by_sig.entry(c.keys().copied().collect()).or_default().push(r as u32);
    }
    let mut sets: Vec<Vec<u32>> = by_sig.into_values().collect();
    sets.sort_by_key(|m| std::cmp::Reverse(m.len()));
    if sets.len() > MAX_GROUPS {
        let mut rest: Vec<u32> = sets.drain(MAX_GROUPS - 1..).flatten().collect();
        rest.sort_unstable();
        sets.push(rest);
    }
    let groups = sets
        .into_iter()
        .map(|members| {
            let g = build_group(&conds, members, *slots);
            *slots += g.dims.len();
            g
        })
        .collect();
    Index {
        n,
        prefix,
        skip,
        direct,
        groups,
    }
}

/// Builds the bitmaps of one group.
fn build_group(conds: &[BTreeMap<Field, Intervals>], members: Vec<u32>, base: usize) -> Group {
    let n = members.len();
    let words = n.div_ceil(64).max(1);
    let sum_words = words.div_ceil(64);
    let mut by_field: BTreeMap<Field, Vec<(usize, &Intervals)>> = BTreeMap::new();
    for (local, &r) in members.iter().enumerate() {
        for (field, iv) in &conds[r as usize] {
            by_field.entry(*field).or_default().push((local, iv));
        }
    }
    let mut pool = Vec::new();
    let mut interned: HashMap<Vec<u64>, u32> = HashMap::new();
    let mut intern = |bm: &[u64]| -> u32 {
        *interned.entry(bm.to_vec()).or_insert_with(|| {
            let at = pool.len() as u32;
            let mut summary = vec![0u64; sum_words];
            for (w, &x) in bm.iter().enumerate() {
                if x != 0 {
                    summary[w / 64] |= 1 << (w % 64);
                }
            }
            pool.extend_from_slice(&summary);
            pool.extend(bm.iter().filter(|&&x| x != 0));
            at
        })
    };
    let mut dims = Vec::with_capacity(by_field.len());
    for (field, rs) in by_field {
        let max = max_value(field);
        let mut wild = vec![0u64; words];
        for r in 0..n {
            wild[r / 64] |= 1 << (r % 64);
        }
        // (position, add?, member): removals sort before additions at one position.
        let mut events: Vec<(u128, bool, usize)> = Vec::new();
        for (r, iv) in &rs {
            wild[r / 64] &= !(1 << (r % 64));
            for &(lo, hi) in &iv.0 {
                events.push((lo, true, *r));
                if hi < max {
                    events.push((hi + 1, false, *r));
                }
            }
        }
        events.sort_unstable();
        let absent = intern(&wild);
        let mut cur = wild;
        let (mut bounds, mut bms) = (Vec::new(), Vec::new());
        let mut e = 0;
        let mut positions: Vec<u128> = std::iter::once(0).chain(events.iter().map(|ev| ev.0)).collect();
        positions.dedup();
        for pos in positions {
            while e < events.len() && events[e].0 == pos {
                let (_, add, r) = events[e];
                if add {
                    cur[r / 64] |= 1 << (r % 64);
                } else {
                    cur[r / 64] &= !(1 << (r % 64));
                }
                e += 1;
            }
            let id = intern(&cur);
            if bms.last() != Some(&id) {
                bounds.push(pos);
                bms.push(id);
            }
        }
        let bounds = if max <= u128::from(u64::MAX) {
            Bounds::Narrow(Narrow::new(bounds.iter().map(|&b| b as u64).collect()))
        } else {
            bounds.shrink_to_fit();
            Bounds::Wide(bounds)
        };
        bms.shrink_to_fit();
        dims.push(Dim {
            field,
            bounds,
            bms,
            absent,
        });
    }
    pool.shrink_to_fit();
    Group {
        members,
        words,
        sum_words,
        dims,
        pool,
        base,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{prop, proptest};

    use super::Narrow;

    proptest! {
        #[test]
        fn narrow_rank_is_a_binary_search(
            wide in proptest::bool::ANY,
            mut bounds in prop::collection::vec(0u64..5000, 0..60),
            probes in prop::collection::vec(0u64..6000, 1..40),
        ) {
            if wide {
                // 48-bit values (MAC addresses), spread thinly.
                bounds.iter_mut().for_each(|b| *b = b.wrapping_mul(0x9e37_79b9) & 0xffff_ffff_ffff);
            }
            bounds.push(0);
            bounds.sort_unstable();
            bounds.dedup();
            let n = Narrow::new(bounds.clone());
            let probes = probes.into_iter().map(|p| if wide { p.wrapping_mul(0x9e37_79b9) & 0xffff_ffff_ffff } else { p });
            for v in probes.chain([0, u64::MAX, *bounds.last().unwrap_or(&0)]) {
                assert_eq!(n.rank(v), bounds.partition_point(|&b| b <= v), "{v} in {bounds:?}");
            }
        }
    }
}
