//! A ruleset ready for workers ([`Firewall`]), each worker's own state ([`FwState`]), and the
//! walk through a hook's base chains that gives a packet's [`Decision`].
//!
//! # Semantics (nftables')
//!
//! At a hook, the base chains of every table whose family sees the packet (`ip`: IPv4,
//! `ip6`: IPv6, `inet`: both; `bridge` tables only through [`Firewall::judge_bridge`]) run in
//! priority order, equal priorities in declaration order. `accept` ends that base chain only
//! (the next base chain still sees the packet); `drop` and `reject` end everything; the end
//! of a base chain (or a `return` in it) applies its policy. `jump` runs a chain and comes
//! back to the next rule, `goto` runs a chain and does not come back, `return` goes back to
//! the rule after the last `jump`, `continue` (and a rule without a verdict) goes on with
//! the next rule. [`Firewall::judge`] runs the `type filter` base chains;
//! [`Firewall::judge_nat`] the `type nat` ones, for a new connection's first packet, where
//! the first NAT statement that applies ends the walk (see [`crate::nat`]).
//!
//! # Per-worker state
//!
//! Counters are per worker: each worker writes only its own block of cache lines (a relaxed
//! load and store, a single writer per slot), and [`Firewall::counters`] sums the blocks.
//! `limit` buckets are per worker too, each with the rate (and the burst, rounded up to at
//! least one packet) divided evenly among the workers, so the total rate is the rule's when
//! the traffic spreads evenly. Log lines wait in a per-worker buffer of
//! [`LOG_LINES_PER_SEC`] lines; beyond that many in one second (or while the buffer is full)
//! they are counted as suppressed.
//!
//! Threads: a [`Firewall`] is immutable and shared (`Arc`); [`Firewall::judge`] writes only
//! the caller's [`FwState`], without allocation or lock.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::ast::{self, Hook, Policy, RejectWith};
use crate::compile::Classifier;
use crate::eval::{self, CVerdict, Ctx, LimitSpec, Program, MAX_DEPTH};
use crate::packet::{Fields, NFPROTO_IPV4, NFPROTO_IPV6};

/// `meta nfproto` of bridged frames (for [`Firewall::has_hook`]).
pub const NFPROTO_BRIDGE: u8 = 7;

/// Log lines one worker keeps per second; more are counted as suppressed.
pub const LOG_LINES_PER_SEC: usize = 10;

/// What happens to the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// It goes on.
    Accept,
    /// It is dropped.
    Drop,
    /// It is dropped and its sender told so.
    Reject(RejectWith),
    /// It goes on, translated (only from `type nat` chains, [`Firewall::judge_nat`]).
    Nat(crate::nat::NatChoice),
}

/// A rule, as indexes into the [`ast::Ruleset`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleRef {
    /// The table's index.
    pub table: u16,
    /// The chain's index in its table.
    pub chain: u16,
    /// The rule's index in its chain.
    pub rule: u32,
}

/// A packet's verdict, and what gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// What happens to the packet.
    pub action: Action,
    /// The rule whose verdict decided; `None` when a chain's policy decided or no chain saw
    /// the packet. With several base chains accepting, the last one's.
    pub by: Option<RuleRef>,
    /// The (table, chain) whose policy decided, if one did.
    pub policy_of: Option<(u16, u16)>,
}

impl Decision {
    const NO_CHAIN: Decision = Decision {
        action: Action::Accept,
        by: None,
        policy_of: None,
    };
}

/// How the rules are searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The classifier ([`crate::compile`]): a cost nearly constant in the number of rules.
    Compiled,
    /// Every rule in order ([`crate::linear`]): the reference.
    Linear,
}

/// Eight counters on their own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Line([AtomicU64; 8]);

/// Which base chains run for one (family class, hook), in order.
type HookLists = [[Vec<u32>; 5]; 3];

fn hook_ix(h: Hook) -> usize {
    match h {
        Hook::Prerouting => 0,
        Hook::Input => 1,
        Hook::Forward => 2,
        Hook::Output => 3,
        Hook::Postrouting => 4,
    }
}

struct Inner {
    rs: ast::Ruleset,
    prog: Program,
    classifier: Option<Classifier>,
    /// [v4, v6, bridge][hook]: global chain indexes.
    hooks: HookLists,
    /// The same for `type nat` base chains (the bridge row stays empty).
    nat_hooks: HookLists,
    /// Whether `nat_hooks` has any chain (asked for every routed packet).
    any_nat: bool,
    /// [v4, v6][hook]: the `ct state` bits the first rule of every base chain of the hook
    /// accepts outright (see [`Firewall::accepts_state`]).
    fast: [[u8; 5]; 2],
    /// One block of counter lines per worker.
    counters: Vec<Arc<[Line]>>,
}

/// A ruleset ready for workers: immutable, `Send + Sync`, shared behind an `Arc`.
#[derive(Clone)]
pub struct Firewall {
    inner: Arc<Inner>,
}

impl fmt::Debug for Firewall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Firewall")
            .field("tables", &self.inner.rs.tables.len())
            .field("chains", &self.inner.prog.chains.len())
            .field("compiled", &self.inner.classifier.is_some())
            .finish()
    }
}

impl Firewall {
    /// Resolves and compiles `rs` for `workers` workers. Interface names resolve through
    /// `ifaces` (name, id): `iifname "x"` matches the ids whose names equal `x` (`"x*"`: that
    /// begin with `x`); an unknown name matches nothing. Errors (unknown chain or set, a
    /// jump loop, more than 16 nested jumps, a set whose type does not fit its match, a
    /// value too wide for its field) name the span.
    pub fn new(
        rs: ast::Ruleset,
        ifaces: &[(String, u32)],
        workers: usize,
        strategy: Strategy,
    ) -> Result<Firewall, ast::Error> {
        Firewall::with_prefix(rs, ifaces, workers, strategy, crate::compile::LINEAR_PREFIX)
    }

    /// [`Firewall::new`] with `prefix` rules of each chain run linearly before the
    /// classifier's lookups (tests use 0 so that every rule goes through the bitmaps).
    pub(crate) fn with_prefix(
        rs: ast::Ruleset,
        ifaces: &[(String, u32)],
        workers: usize,
        strategy: Strategy,
        prefix: usize,
    ) -> Result<Firewall, ast::Error> {
        let workers = workers.max(1);
        let prog = eval::build(&rs, ifaces, workers)?;
        let classifier = match strategy {
            Strategy::Compiled => Some(Classifier::with_prefix(&prog, prefix)),
            Strategy::Linear => None,
        };
        check_nat_reach(&rs, &prog)?;
        let mut hooks: HookLists = Default::default();
        let mut nat_hooks: HookLists = Default::default();
        for (ix, c) in prog.chains.iter().enumerate() {
            let Some(b) = c.base else {
                continue;
            };
            let hooks = match b.kind {
                ast::ChainType::Filter => &mut hooks,
                ast::ChainType::Nat => &mut nat_hooks,
            };
            let classes: &[usize] = match rs.tables[usize::from(c.table)].family {
                ast::Family::Ip => &[0],
                ast::Family::Ip6 => &[1],
                ast::Family::Inet => &[0, 1],
                ast::Family::Bridge => &[2],
            };
            for &k in classes {
                hooks[k][hook_ix(b.hook)].push(ix as u32);
            }
        }
        // Priority order; a stable sort keeps declaration order among equals.
        for list in hooks.iter_mut().chain(nat_hooks.iter_mut()).flatten() {
            list.sort_by_key(|&c| prog.chains[c as usize].base.map_or(0, |b| b.priority));
        }
        let fast = first_rules_accept(&rs, &prog, &hooks);
        let lines = prog.counters.div_ceil(4).max(1);
        let counters = (0..workers)
            .map(|_| (0..lines).map(|_| Line::default()).collect())
            .collect();
        Ok(Firewall {
            inner: Arc::new(Inner {
                rs,
                prog,
                classifier,
                hooks,
                any_nat: nat_hooks.iter().flatten().any(|l| !l.is_empty()),
                nat_hooks,
                fast,
                counters,
            }),
        })
    }

    /// Whether an IP packet of `nfproto` whose connection is in the state `ct_state` (one of
    /// the kernel's bits) is accepted at `hook` by the first rule of every base chain there,
    /// a bare `ct state established,related accept` (nothing counted, logged or limited): the
    /// caller may then skip building its [`Fields`] and judging it, and the verdict is the
    /// same. This is how established traffic pays nothing for the rules after that one.
    #[inline]
    pub fn accepts_state(&self, nfproto: u8, hook: Hook, ct_state: u8) -> bool {
        match class(nfproto) {
            Some(k) if k < 2 => self.inner.fast[k][hook_ix(hook)] & ct_state != 0,
            _ => false,
        }
    }

    /// The ruleset it was built from.
    pub fn ruleset(&self) -> &ast::Ruleset {
        &self.inner.rs
    }

    /// The strategy it was built with.
    pub fn strategy(&self) -> Strategy {
        if self.inner.classifier.is_some() {
            Strategy::Compiled
        } else {
            Strategy::Linear
        }
    }

    /// Whether any filter base chain of a family that sees `nfproto` (2 IPv4, 10 IPv6,
    /// [`NFPROTO_BRIDGE`] bridged frames) is attached to `hook`.
    pub fn has_hook(&self, nfproto: u8, hook: Hook) -> bool {
        class(nfproto).is_some_and(|k| !self.inner.hooks[k][hook_ix(hook)].is_empty())
    }

    /// Per-worker state for worker `index` (counters, limit buckets, logs). One state per
    /// index: each is its counters' single writer. An index beyond the worker count given to
    /// [`Firewall::new`] shares the block of `index % workers`.
    pub fn worker(&self, index: usize) -> FwState {
        let i = &self.inner;
        let block = i.counters[index % i.counters.len()].clone();
        FwState {
            owner: Arc::as_ptr(i) as usize,
            index,
            block,
            buckets: vec![Bucket::default(); i.prog.limits.len()],
            scratch: i.classifier.as_ref().map_or_else(Default::default, Classifier::scratch),
            logs: Vec::with_capacity(LOG_LINES_PER_SEC),
            log_second: u64::MAX,
            log_count: 0,
            suppressed: 0,
            log_info: i.prog.logs.clone(),
        }
    }

    /// A state whose counters are its own, summed nowhere: judging with it changes nothing
    /// that [`Firewall::counters`] reports (what `freeway ctl trace` needs).
    pub fn scratch_state(&self) -> FwState {
        let mut st = self.worker(0);
        st.block = (0..st.block.len()).map(|_| Line::default()).collect();
        st
    }

    /// Judges one IP packet at `hook`: the base chains of the `ip`/`ip6`/`inet` tables that
    /// see its family. A packet that is neither IPv4 nor IPv6 is accepted (no chain).
    /// `now_ms` drives `limit`.
    pub fn judge(&self, hook: Hook, f: &Fields, st: &mut FwState, now_ms: u64) -> Decision {
        match class(f.nfproto) {
            Some(k) if k < 2 => self.run_hook(k, hook, f, st, now_ms),
            _ => Decision::NO_CHAIN,
        }
    }

    /// Whether any `type nat` base chain sees IP packets of `nfproto` at `hook`.
    pub fn has_nat(&self, nfproto: u8, hook: Hook) -> bool {
        class(nfproto).is_some_and(|k| k < 2 && !self.inner.nat_hooks[k][hook_ix(hook)].is_empty())
    }

    /// Whether the ruleset has any `type nat` base chain.
    #[inline]
    pub fn any_nat(&self) -> bool {
        self.inner.any_nat
    }

    /// Runs the `type nat` base chains of `hook` on the first packet of a new connection, in
    /// priority order: the first NAT statement that applies decides ([`Action::Nat`]); a
    /// `drop` drops; otherwise [`Action::Accept`] (no translation at this hook).
    pub fn judge_nat(&self, hook: Hook, f: &Fields, st: &mut FwState, now_ms: u64) -> Decision {
        let k = match class(f.nfproto) {
            Some(k) if k < 2 => k,
            _ => return Decision::NO_CHAIN,
        };
        self.run_lists(&self.inner.nat_hooks[k][hook_ix(hook)], f, st, now_ms)
    }

    /// Judges one bridged frame at `hook`: the base chains of the `bridge` tables.
    pub fn judge_bridge(&self, hook: Hook, f: &Fields, st: &mut FwState, now_ms: u64) -> Decision {
        self.run_hook(2, hook, f, st, now_ms)
    }

    /// Per-rule counter sums over all workers: (packets, bytes) of the rule's first `counter`;
    /// `None` if there is no such rule or it has no counter.
    pub fn counters(&self, table: usize, chain: usize, rule: usize) -> Option<(u64, u64)> {
        let slot = *self.inner.prog.counter_of.get(&(table, chain, rule))? as usize;
        let (line, at) = (slot / 4, (slot % 4) * 2);
        Some(self.inner.counters.iter().fold((0, 0), |(p, b), blk| {
            (
                p + blk[line].0[at].load(Ordering::Relaxed),
                b + blk[line].0[at + 1].load(Ordering::Relaxed),
            )
        }))
    }

    /// Bytes of memory the compiled form holds: the resolved rules and sets, the classifier,
    /// the counter blocks.
    pub fn memory(&self) -> usize {
        let i = &self.inner;
        i.prog.memory()
            + i.classifier.as_ref().map_or(0, Classifier::memory)
            + i.counters.iter().map(|b| b.len() * 64).sum::<usize>()
    }

    fn run_hook(&self, k: usize, hook: Hook, f: &Fields, st: &mut FwState, now_ms: u64) -> Decision {
        self.run_lists(&self.inner.hooks[k][hook_ix(hook)], f, st, now_ms)
    }

    /// Runs the base chains of `list` in order until one does not accept (drops, rejects or
    /// translates).
    fn run_lists(&self, list: &[u32], f: &Fields, st: &mut FwState, now_ms: u64) -> Decision {
        if list.is_empty() {
            return Decision::NO_CHAIN;
        }
        if st.owner != Arc::as_ptr(&self.inner) as usize {
            // A state made for another ruleset (after a reload): start afresh, once.
            *st = self.worker(st.index);
        }
        st.scratch.next_packet();
        let mut last = Decision::NO_CHAIN;
        for &c in list {
            let d = self.run_base(c, f, st, now_ms);
            if d.action != Action::Accept {
                return d;
            }
            last = d;
        }
        last
    }

    /// Runs base chain `base` to its verdict or policy.
    fn run_base(&self, base: u32, f: &Fields, st: &mut FwState, now_ms: u64) -> Decision {
        let p = &self.inner.prog;
        let cx = Ctx { p, f, now_ms };
        let mut stack = [(0u32, 0u32); MAX_DEPTH];
        let mut sp = 0;
        let (mut chain, mut from) = (base, 0u32);
        loop {
            let hit = match &self.inner.classifier {
                Some(c) => c.next_verdict(&cx, chain, from as usize, st),
                None => crate::linear::next_verdict(&cx, chain, from as usize, usize::MAX, st),
            };
            let ret = match hit {
                None => true,
                Some((r, v)) => {
                    let c = &p.chains[chain as usize];
                    let at = Some(RuleRef {
                        table: c.table,
                        chain: c.chain,
                        rule: r as u32,
                    });
                    match v {
                        CVerdict::Accept => return decided(Action::Accept, at),
                        CVerdict::Drop => return decided(Action::Drop, at),
                        CVerdict::Reject(w) => return decided(Action::Reject(w), at),
                        CVerdict::Nat(ix) => match p.nats[ix as usize].choose(f) {
                            Some(n) => return decided(Action::Nat(n), at),
                            // Not for this packet: the chain goes on with the next rule.
                            None => {
                                from = r as u32 + 1;
                                false
                            }
                        },
                        CVerdict::Return | CVerdict::Continue => true,
                        CVerdict::Jump(t) => {
                            if sp == MAX_DEPTH {
                                // Checked when the ruleset was built; never happens.
                                return decided(Action::Drop, at);
                            }
                            stack[sp] = (chain, r as u32 + 1);
                            sp += 1;
                            (chain, from) = (t, 0);
                            false
                        }
                        CVerdict::Goto(t) => {
                            (chain, from) = (t, 0);
                            false
                        }
                    }
                }
            };
            if ret {
                if sp == 0 {
                    let c = &p.chains[base as usize];
                    let action = match c.base.map_or(Policy::Accept, |b| b.policy) {
                        Policy::Accept => Action::Accept,
                        Policy::Drop => Action::Drop,
                    };
                    return Decision {
                        action,
                        by: None,
                        policy_of: Some((c.table, c.chain)),
                    };
                }
                sp -= 1;
                (chain, from) = stack[sp];
            }
        }
    }
}

/// Refuses a NAT statement in a chain that a `type filter` base chain reaches (by jumps and
/// gotos): NAT decides once per connection, in `type nat` chains only.
fn check_nat_reach(rs: &ast::Ruleset, prog: &Program) -> Result<(), ast::Error> {
    let mut seen = vec![false; prog.chains.len()];
    let mut stack: Vec<usize> = prog
        .chains
        .iter()
        .enumerate()
        .filter(|(_, c)| c.base.is_some_and(|b| b.kind == ast::ChainType::Filter))
        .map(|(i, _)| i)
        .collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        let c = &prog.chains[i];
        for (ri, r) in c.rules.iter().enumerate() {
            for it in &r.items {
                match it {
                    eval::CItem::Verdict(CVerdict::Jump(t) | CVerdict::Goto(t)) => stack.push(*t as usize),
                    eval::CItem::Verdict(CVerdict::Nat(_)) => {
                        let t = &rs.tables[usize::from(c.table)];
                        let ch = &t.chains[usize::from(c.chain)];
                        return Err(ast::Error {
                            span: ch.rules[ri].span,
                            msg: format!(
                                "NAT statement in chain \"{}\", which a filter chain reaches: NAT is only valid in type nat chains",
                                ch.name
                            ),
                        });
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

fn decided(action: Action, by: Option<RuleRef>) -> Decision {
    Decision {
        action,
        by,
        policy_of: None,
    }
}

/// Per [v4, v6][hook], the `ct state` bits that every base chain of the hook accepts with
/// its first rule alone (0 when a chain starts otherwise, or when the hook has no chain).
fn first_rules_accept(rs: &ast::Ruleset, prog: &Program, hooks: &HookLists) -> [[u8; 5]; 2] {
    use ast::{Atom, Item, Rhs, Stmt, Test};
    let bits_of = |c: &crate::eval::CChain| -> u8 {
        let Some(rule) = rs
            .tables
            .get(usize::from(c.table))
            .and_then(|t| t.chains.get(usize::from(c.chain)))
            .and_then(|ch| ch.rules.first())
        else {
            return 0;
        };
        let [Item::Match(m), Item::Stmt(Stmt::Verdict(ast::Verdict::Accept))] = rule.items.as_slice() else {
            return 0;
        };
        if m.fields.as_slice() != [ast::Field::CtState] {
            return 0;
        }
        match &m.test {
            Test::AnyBit { bits, negate: false } => (*bits & 0xff) as u8,
            Test::In {
                rhs: Rhs::Elems(elems),
                negate: false,
            } => elems.iter().fold(0u8, |acc, e| match e.0.as_slice() {
                [Atom::Range(lo, hi)] if lo == hi && *lo < 256 => acc | *lo as u8,
                _ => acc,
            }),
            _ => 0,
        }
    };
    let mut fast = [[0u8; 5]; 2];
    for (k, row) in fast.iter_mut().enumerate() {
        for (h, cell) in row.iter_mut().enumerate() {
            let list = &hooks[k][h];
            if list.is_empty() {
                continue;
            }
            *cell = list
                .iter()
                .fold(0xff, |acc, &c| acc & bits_of(&prog.chains[c as usize]));
        }
    }
    fast
}

fn class(nfproto: u8) -> Option<usize> {
    match nfproto {
        NFPROTO_IPV4 => Some(0),
        NFPROTO_IPV6 => Some(1),
        NFPROTO_BRIDGE => Some(2),
        _ => None,
    }
}

/// A `limit` statement's bucket in one worker.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    credits: u64,
    last_ms: u64,
    started: bool,
}

/// One log line: the `log` statement's prefix, the rule, what the packet held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// The statement's prefix (empty if none).
    pub prefix: String,
    /// The rule holding the `log` statement.
    pub rule: RuleRef,
    /// The packet's fields.
    pub fields: Fields,
    /// When (the `now_ms` given to `judge`).
    pub now_ms: u64,
}

impl fmt::Display for LogLine {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let f = &self.fields;
        let addr = |a: u128| -> String {
            if f.nfproto == NFPROTO_IPV6 {
                std::net::Ipv6Addr::from(a).to_string()
            } else {
                std::net::Ipv4Addr::from(a as u32).to_string()
            }
        };
        write!(out, "{}", self.prefix)?;
        if f.iif != crate::packet::NO_IF {
            write!(out, "IIF={} ", f.iif)?;
        }
        if f.oif != crate::packet::NO_IF {
            write!(out, "OIF={} ", f.oif)?;
        }
        if f.nfproto == NFPROTO_IPV4 || f.nfproto == NFPROTO_IPV6 {
            write!(
                out,
                "SRC={} DST={} LEN={} PROTO={}",
                addr(f.saddr),
                addr(f.daddr),
                f.length,
                f.l4proto
            )?;
            if !f.frag && crate::packet::has_ports(f.l4proto) {
                write!(out, " SPT={} DPT={}", f.sport, f.dport)?;
            }
        } else {
            write!(out, "ETHERTYPE=0x{:04x}", f.ether_type)?;
        }
        let r = self.rule;
        write!(out, " RULE={}/{}/{}", r.table, r.chain, r.rule)
    }
}

/// Per-worker scratch of the classifier (see [`crate::compile`]).
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Per chain: the packet generation its lookups were made for.
    pub(crate) gen_of: Vec<u64>,
    /// Per chain, from its base offset: the bitmap chosen in each dimension.
    pub(crate) offs: Vec<u32>,
    pub(crate) gen: u64,
}

impl Scratch {
    fn next_packet(&mut self) {
        self.gen = self.gen.wrapping_add(1);
    }
}

/// One worker's state: its counters, its `limit` buckets, its log buffer, the classifier's
/// scratch. Made by [`Firewall::worker`]; a state from another `Firewall` is remade on the
/// first packet it judges.
pub struct FwState {
    owner: usize,
    index: usize,
    block: Arc<[Line]>,
    buckets: Vec<Bucket>,
    pub(crate) scratch: Scratch,
    logs: Vec<(u32, Fields, u64)>,
    log_second: u64,
    log_count: usize,
    suppressed: u64,
    log_info: Vec<(Option<String>, RuleRef)>,
}

impl fmt::Debug for FwState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FwState")
            .field("index", &self.index)
            .field("pending_logs", &self.logs.len())
            .field("suppressed", &self.suppressed)
            .finish()
    }
}

impl FwState {
    /// Moves the waiting log lines to `out`.
    pub fn take_logs(&mut self, out: &mut Vec<LogLine>) {
        for (ix, fields, now_ms) in self.logs.drain(..) {
            let (prefix, rule) = &self.log_info[ix as usize];
            out.push(LogLine {
                prefix: prefix.clone().unwrap_or_default(),
                rule: *rule,
                fields,
                now_ms,
            });
        }
    }

    /// Log lines not kept (over [`LOG_LINES_PER_SEC`] in a second, or the buffer full).
    pub fn logs_suppressed(&self) -> u64 {
        self.suppressed
    }

    #[inline]
    pub(crate) fn count(&mut self, slot: u32, bytes: u16) {
        let (line, at) = (slot as usize / 4, (slot as usize % 4) * 2);
        let l = &self.block[line].0;
        // Single writer: this worker's block.
        l[at].store(l[at].load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        l[at + 1].store(l[at + 1].load(Ordering::Relaxed) + u64::from(bytes), Ordering::Relaxed);
    }

    /// Whether `limit` statement `ix` matches now (nftables' token bucket: a packet that finds
    /// enough credits takes them and is under the rate).
    #[inline]
    pub(crate) fn limit(&mut self, ix: u32, spec: &LimitSpec, len: u16, now_ms: u64) -> bool {
        let b = &mut self.buckets[ix as usize];
        if !b.started {
            *b = Bucket {
                credits: spec.cap,
                last_ms: now_ms,
                started: true,
            };
        }
        let earned = now_ms.saturating_sub(b.last_ms).saturating_mul(spec.limit.rate);
        b.last_ms = b.last_ms.max(now_ms);
        let credits = b.credits.saturating_add(earned).min(spec.cap);
        let cost = if spec.limit.bytes {
            spec.cost.saturating_mul(u64::from(len))
        } else {
            spec.cost
        };
        if credits >= cost {
            b.credits = credits - cost;
            !spec.limit.over
        } else {
            b.credits = credits;
            spec.limit.over
        }
    }

    #[inline]
    pub(crate) fn log(&mut self, ix: u32, f: &Fields, now_ms: u64) {
        let sec = now_ms / 1000;
        if sec != self.log_second {
            self.log_second = sec;
            self.log_count = 0;
        }
        if self.log_count < LOG_LINES_PER_SEC && self.logs.len() < self.logs.capacity() {
            self.log_count += 1;
            self.logs.push((ix, *f, now_ms));
        } else {
            self.suppressed += 1;
        }
    }
}
