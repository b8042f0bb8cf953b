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
//! `!=` included. Identical bitmaps are stored once, and each has a summary: one bit per
//! 64-rule word that is not zero.
//!
//! Per packet and chain: one binary search per dimension (made once per packet, kept in
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
use crate::eval::{match_intervals, run_rule, CItem, CVerdict, Intervals, Program};
use crate::firewall::{FwState, Scratch};
use crate::packet::{max_value, value, Fields};

/// Rules at the head of a chain run linearly, before any lookup is made.
pub(crate) const LINEAR_PREFIX: usize = 4;

/// One dimension of a chain.
#[derive(Debug)]
struct Dim {
    field: Field,
    /// Where each elementary interval begins (the first at 0).
    bounds: Vec<u128>,
    /// The bitmap (offset into the pool) of each interval.
    bms: Vec<u32>,
    /// The bitmap of a packet without the field.
    absent: u32,
}

impl Dim {
    #[inline]
    fn lookup(&self, f: &Fields) -> u32 {
        match value(self.field, f) {
            None => self.absent,
            Some(v) => self.bms[self.bounds.partition_point(|&b| b <= v) - 1],
        }
    }
}

/// One chain's index.
#[derive(Debug)]
struct Index {
    n: usize,
    prefix: usize,
    words: usize,
    sum_words: usize,
    dims: Vec<Dim>,
    /// Bitmaps: each its summary words, then its rule words.
    pool: Vec<u64>,
    /// Per rule: how many leading items the bitmaps prove.
    skip: Vec<u16>,
    /// This chain's first slot in [`Scratch::offs`].
    base: usize,
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
            .map(|c| {
                let ix = build_index(p, &c.rules, prefix, slots);
                slots += ix.dims.len();
                ix
            })
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
                    + ix.pool.capacity() * 8
                    + ix.skip.capacity() * 2
                    + ix.dims
                        .iter()
                        .map(|d| std::mem::size_of::<Dim>() + d.bounds.capacity() * 16 + d.bms.capacity() * 4)
                        .sum::<usize>()
            })
            .sum()
    }

    /// The first rule of `chain` at or after `from` that ends with a verdict for `f` (other
    /// than `continue`), and that verdict: the linear evaluator's answer.
    #[inline]
    pub(crate) fn next_verdict(
        &self,
        p: &Program,
        chain: u32,
        from: usize,
        f: &Fields,
        st: &mut FwState,
        now_ms: u64,
    ) -> Option<(usize, CVerdict)> {
        let ix = &self.chains[chain as usize];
        let rules = &p.chains[chain as usize].rules;
        let mut r = from;
        while r < ix.prefix.min(ix.n) {
            if let Some(v) = run_rule(p, &rules[r], 0, f, st, now_ms) {
                return Some((r, v));
            }
            r += 1;
        }
        if r >= ix.n {
            return None;
        }
        let offs = ix.base..ix.base + ix.dims.len();
        let sc = &mut st.scratch;
        if sc.gen_of[chain as usize] != sc.gen {
            for (slot, d) in sc.offs[offs.clone()].iter_mut().zip(&ix.dims) {
                *slot = d.lookup(f);
            }
            sc.gen_of[chain as usize] = sc.gen;
        }
        loop {
            let cand = ix.next_candidate(&st.scratch.offs[offs.clone()], r)?;
            if let Some(v) = run_rule(p, &rules[cand], usize::from(ix.skip[cand]), f, st, now_ms) {
                return Some((cand, v));
            }
            r = cand + 1;
        }
    }
}

impl Index {
    /// The first rule at or after `from` set in every chosen bitmap.
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
            let mut bits = low;
            for &o in offs {
                bits &= pool[o as usize + self.sum_words + w];
            }
            if bits != 0 {
                let r = w * 64 + bits.trailing_zeros() as usize;
                return (r < self.n).then_some(r);
            }
            w += 1;
            low = !0;
        }
        None
    }
}

/// Builds one chain's index.
fn build_index(p: &Program, rules: &[crate::eval::CRule], prefix: usize, base: usize) -> Index {
    let n = rules.len();
    let words = n.div_ceil(64).max(1);
    let sum_words = words.div_ceil(64);
    // Each rule's conditions per field, and how many leading items they prove.
    let mut conds: BTreeMap<Field, Vec<(usize, Intervals)>> = BTreeMap::new();
    let mut skip = Vec::with_capacity(n);
    for (r, rule) in rules.iter().enumerate() {
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
        for (field, iv) in mine {
            conds.entry(field).or_default().push((r, iv));
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
            pool.extend_from_slice(bm);
            at
        })
    };
    let mut dims = Vec::with_capacity(conds.len());
    for (field, rs) in conds {
        let max = max_value(field);
        let mut wild = vec![0u64; words];
        for r in 0..n {
            wild[r / 64] |= 1 << (r % 64);
        }
        // (position, add?, rule): removals sort before additions at one position.
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
        bounds.shrink_to_fit();
        bms.shrink_to_fit();
        dims.push(Dim {
            field,
            bounds,
            bms,
            absent,
        });
    }
    pool.shrink_to_fit();
    Index {
        n,
        prefix,
        words,
        sum_words,
        dims,
        pool,
        skip,
        base,
    }
}
