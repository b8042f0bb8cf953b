//! The code generator: [`Expr`] to classic BPF for DLT_EN10MB (Ethernet) frames.
//!
//! Three steps:
//! 1. **Lowering** walks the tree in the order it was written (so `vlan` can shift the link
//!    offsets of everything after it, like libpcap) and produces predicates (`P`): trees of
//!    and/or/not over *atoms* (straight-line statements, then one conditional jump). The
//!    atoms and their order follow libpcap's `gencode.c`, because on a truncated packet the
//!    first load past the end decides the verdict (it rejects the whole filter), so the order
//!    of loads is part of the meaning. Relations put every protocol check (`ip`, `tcp` and
//!    "first fragment" for `tcp[..]`) before the arithmetic, as libpcap does.
//! 2. **Emission** turns predicates into a flat control-flow graph with forward jumps only
//!    (`a and b`: a's true exit goes to b; `not`: exits swapped).
//! 3. **Optimisation** (semantics-preserving, verdicts identical on every packet, truncated or
//!    not): forward dataflow of what the accumulator and index register hold (the same packet
//!    word, a constant, `A == k` / `A != k` facts from jump edges), then jump threading
//!    through redundant loads and decided comparisons, removal of unreachable code and
//!    redundant loads. Then **layout**: jumps farther than 255 instructions go through `ja`
//!    trampolines.
//!
//! Threads: pure functions.

use std::ops::Range;

use super::ast::*;
use super::error::FilterError;
use crate::bpf::{op::*, Insn, MAX_INSNS, MEMWORDS};

const ETHERTYPE_IP: u32 = 0x0800;
const ETHERTYPE_IPV6: u32 = 0x86dd;
const ETHERTYPE_ARP: u32 = 0x0806;
const ETHERTYPE_RARP: u32 = 0x8035;
const IPPROTO_FRAGMENT: u32 = 44;

/// A predicate: boolean structure over atoms.
#[derive(Clone, Debug)]
pub(crate) enum P {
    True,
    /// Run `stmts`, then branch on `code` (a `JMP|op|src`) with `k`; `neg` swaps the exits.
    Atom {
        stmts: Vec<Insn>,
        code: u16,
        k: u32,
        neg: bool,
    },
    And(Vec<P>),
    Or(Vec<P>),
    Not(Box<P>),
}

fn ld(size: u16, off: u32) -> Insn {
    Insn::stmt(LD | size | ABS, off)
}

fn cmp(size: u16, off: u32, k: u32) -> P {
    P::Atom {
        stmts: vec![ld(size, off)],
        code: JMP | JEQ | K,
        k,
        neg: false,
    }
}

fn mcmp(size: u16, off: u32, k: u32, mask: u32) -> P {
    let full = match size {
        B => 0xff,
        H => 0xffff,
        _ => u32::MAX,
    };
    if mask == 0 {
        // libpcap's optimiser folds `and #0` and drops the dead load; do the same, so that a
        // truncated packet gets the same verdict.
        return P::True;
    }
    if mask & full == full {
        return cmp(size, off, k);
    }
    P::Atom {
        stmts: vec![ld(size, off), Insn::stmt(ALU | AND | K, mask)],
        code: JMP | JEQ | K,
        k: k & mask,
        neg: false,
    }
}

fn dircomb(dir: Dir, src: P, dst: P) -> P {
    match dir {
        Dir::Src => src,
        Dir::Dst => dst,
        Dir::SrcOrDst => P::Or(vec![src, dst]),
        Dir::SrcAndDst => P::And(vec![src, dst]),
    }
}

/// The value of an arithmetic expression: protocol checks that must hold, statements that
/// leave the value in A, and the value itself when constant.
struct Val {
    checks: Vec<P>,
    stmts: Vec<Insn>,
    konst: Option<u32>,
}

struct Lower<'a> {
    expr: &'a str,
    /// Extra link-layer bytes from `vlan` primitives written so far.
    shift: u32,
    /// Scratch words in use.
    mem: u32,
}

impl Lower<'_> {
    fn lt(&self) -> u32 {
        12 + self.shift
    }
    fn pl(&self) -> u32 {
        14 + self.shift
    }
    fn linktype(&self, et: u32) -> P {
        cmp(H, self.lt(), et)
    }
    fn ipproto4(&self, p: u32) -> P {
        P::And(vec![self.linktype(ETHERTYPE_IP), cmp(B, self.pl() + 9, p)])
    }
    fn ipproto6(&self, p: u32) -> P {
        let pl = self.pl();
        P::And(vec![
            self.linktype(ETHERTYPE_IPV6),
            P::Or(vec![
                cmp(B, pl + 6, p),
                P::And(vec![cmp(B, pl + 6, IPPROTO_FRAGMENT), cmp(B, pl + 40, p)]),
            ]),
        ])
    }
    /// "Not a fragment other than the first": `ip[6:2] & 0x1fff == 0`.
    fn ipfrag(&self) -> P {
        P::Atom {
            stmts: vec![ld(H, self.pl() + 6)],
            code: JMP | JSET | K,
            k: 0x1fff,
            neg: true,
        }
    }

    fn err(&self, span: &Range<usize>, msg: &str) -> FilterError {
        FilterError::new(self.expr, span.clone(), msg)
    }

    fn expr(&mut self, e: &Expr) -> Result<P, FilterError> {
        Ok(match e {
            Expr::And(a, b) => {
                let a = self.expr(a)?;
                P::And(vec![a, self.expr(b)?])
            }
            Expr::Or(a, b) => {
                let a = self.expr(a)?;
                P::Or(vec![a, self.expr(b)?])
            }
            Expr::Not(a) => P::Not(Box::new(self.expr(a)?)),
            Expr::Prim(p, span) => self.prim(p, span)?,
        })
    }

    fn proto_abbrev(&self, p: Proto) -> P {
        match p {
            Proto::Ether => P::True,
            Proto::Ip => self.linktype(ETHERTYPE_IP),
            Proto::Ip6 => self.linktype(ETHERTYPE_IPV6),
            Proto::Arp => self.linktype(ETHERTYPE_ARP),
            Proto::Rarp => self.linktype(ETHERTYPE_RARP),
            Proto::Tcp => P::Or(vec![self.ipproto4(6), self.ipproto6(6)]),
            Proto::Udp => P::Or(vec![self.ipproto4(17), self.ipproto6(17)]),
            Proto::Sctp => P::Or(vec![self.ipproto4(132), self.ipproto6(132)]),
            Proto::Icmp => self.ipproto4(1),
            Proto::Igmp => self.ipproto4(2),
            Proto::Icmp6 => self.ipproto6(58),
        }
    }

    fn prim(&mut self, p: &Prim, span: &Range<usize>) -> Result<P, FilterError> {
        let pl = self.pl();
        Ok(match p {
            Prim::Proto(p) => self.proto_abbrev(*p),
            Prim::Vlan(id) => {
                let lt = self.lt();
                let tpid = P::Or(vec![cmp(H, lt, 0x8100), cmp(H, lt, 0x88a8), cmp(H, lt, 0x9100)]);
                let r = match id {
                    None => tpid,
                    Some(id) => P::And(vec![tpid, mcmp(H, pl, *id as u32, 0x0fff)]),
                };
                self.shift += 4;
                r
            }
            Prim::EtherProto(et) => self.linktype(*et as u32),
            Prim::IpProto { v4, v6, proto } => {
                let mut v = Vec::new();
                if *v4 {
                    v.push(self.ipproto4(*proto as u32));
                }
                if *v6 {
                    v.push(self.ipproto6(*proto as u32));
                }
                P::Or(v)
            }
            Prim::Host { proto, dir, net } => match net {
                Net::V4(addr, mask) => {
                    let a = u32::from(*addr);
                    let hostop = |et: u32, so: u32, dof: u32| {
                        dircomb(
                            *dir,
                            P::And(vec![self.linktype(et), mcmp(W, pl + so, a, *mask)]),
                            P::And(vec![self.linktype(et), mcmp(W, pl + dof, a, *mask)]),
                        )
                    };
                    match proto {
                        HostProto::Ip => hostop(ETHERTYPE_IP, 12, 16),
                        HostProto::Arp => hostop(ETHERTYPE_ARP, 14, 24),
                        HostProto::Rarp => hostop(ETHERTYPE_RARP, 14, 24),
                        HostProto::Any => P::Or(vec![
                            hostop(ETHERTYPE_IP, 12, 16),
                            hostop(ETHERTYPE_ARP, 14, 24),
                            hostop(ETHERTYPE_RARP, 14, 24),
                        ]),
                        HostProto::Ip6 => return Err(self.err(span, "'ip6' modifier applied to ip host")),
                    }
                }
                Net::V6(addr, prefix) => {
                    let bits = u128::from(*addr);
                    let mask = if *prefix == 0 {
                        0
                    } else {
                        u128::MAX << (128 - *prefix as u32)
                    };
                    let words = |off: u32| {
                        P::And(
                            (0..4)
                                .map(|i| {
                                    let sh = 96 - 32 * i;
                                    mcmp(W, off + 4 * i, (bits >> sh) as u32, (mask >> sh) as u32)
                                })
                                .collect(),
                        )
                    };
                    P::And(vec![
                        self.linktype(ETHERTYPE_IPV6),
                        dircomb(*dir, words(pl + 8), words(pl + 24)),
                    ])
                }
            },
            Prim::EtherHost { dir, mac } => {
                let bcmp = |off: u32| {
                    P::And(vec![
                        cmp(W, off + 2, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]])),
                        cmp(H, off, u16::from_be_bytes([mac[0], mac[1]]) as u32),
                    ])
                };
                dircomb(*dir, bcmp(6), bcmp(0))
            }
            Prim::Port { l4, dir, lo, hi, range } => {
                let protos: Vec<u32> = match l4 {
                    Some(p) => vec![p.ip_proto().unwrap_or(0) as u32],
                    None => vec![6, 17, 132],
                };
                let (lo, hi) = (*lo as u32, *hi as u32);
                let test = |stmts: Vec<Insn>| -> P {
                    if !*range {
                        P::Atom {
                            stmts,
                            code: JMP | JEQ | K,
                            k: lo,
                            neg: false,
                        }
                    } else {
                        P::And(vec![
                            P::Atom {
                                stmts: stmts.clone(),
                                code: JMP | JGE | K,
                                k: lo,
                                neg: false,
                            },
                            P::Atom {
                                stmts,
                                code: JMP | JGT | K,
                                k: hi,
                                neg: true,
                            },
                        ])
                    }
                };
                let atom4 = |off: u32| test(vec![Insn::stmt(LDX | B | MSH, pl), Insn::stmt(LD | H | IND, pl + off)]);
                let atom6 = |off: u32| test(vec![ld(H, pl + 40 + off)]);
                // libpcap generates one port test per protocol and then merges the identical
                // blocks; testing "one of the protocols" once is the same program.
                let v6 = P::And(vec![
                    self.linktype(ETHERTYPE_IPV6),
                    P::Or(protos.iter().map(|&p| cmp(B, pl + 6, p)).collect()),
                    dircomb(*dir, atom6(0), atom6(2)),
                ]);
                let v4 = P::And(vec![
                    self.linktype(ETHERTYPE_IP),
                    P::Or(protos.iter().map(|&p| cmp(B, pl + 9, p)).collect()),
                    self.ipfrag(),
                    dircomb(*dir, atom4(0), atom4(2)),
                ]);
                P::Or(vec![v6, v4])
            }
            Prim::EtherBroadcast => P::And(vec![cmp(W, 2, u32::MAX), cmp(H, 0, 0xffff)]),
            Prim::EtherMulticast => P::Atom {
                stmts: vec![ld(B, 0)],
                code: JMP | JSET | K,
                k: 1,
                neg: false,
            },
            Prim::IpMulticast => P::And(vec![
                self.linktype(ETHERTYPE_IP),
                P::Atom {
                    stmts: vec![ld(B, pl + 16)],
                    code: JMP | JGE | K,
                    k: 224,
                    neg: false,
                },
            ]),
            // libpcap with netmask 0: the destination's host part (all of it) is all zeros
            // or all ones.
            Prim::IpBroadcast => P::And(vec![
                self.linktype(ETHERTYPE_IP),
                P::Or(vec![cmp(W, pl + 16, 0), cmp(W, pl + 16, u32::MAX)]),
            ]),
            Prim::Ip6Multicast => P::And(vec![self.linktype(ETHERTYPE_IPV6), cmp(B, pl + 24, 255)]),
            Prim::Rel { op, lhs, rhs } => {
                let l = self.value(lhs, span)?;
                let r = self.value(rhs, span)?;
                let (jop, neg) = match op {
                    RelOp::Eq => (JEQ, false),
                    RelOp::Ne => (JEQ, true),
                    RelOp::Gt => (JGT, false),
                    RelOp::Ge => (JGE, false),
                    RelOp::Lt => (JGE, true),
                    RelOp::Le => (JGT, true),
                };
                let mut checks = l.checks;
                checks.extend(r.checks);
                let atom = match r.konst {
                    Some(k) => P::Atom {
                        stmts: l.stmts,
                        code: JMP | jop | K,
                        k,
                        neg,
                    },
                    None => {
                        let m = self.alloc(span)?;
                        let mut s = l.stmts;
                        s.push(Insn::stmt(ST, m));
                        s.extend(r.stmts);
                        s.push(Insn::stmt(MISC | TAX, 0));
                        s.push(Insn::stmt(LD | W | MEM, m));
                        self.mem -= 1;
                        P::Atom {
                            stmts: s,
                            code: JMP | jop | X,
                            k: 0,
                            neg,
                        }
                    }
                };
                checks.push(atom);
                P::And(checks)
            }
        })
    }

    fn alloc(&mut self, span: &Range<usize>) -> Result<u32, FilterError> {
        if self.mem >= MEMWORDS {
            return Err(self.err(span, "expression too complex (needs more than 16 scratch words)"));
        }
        self.mem += 1;
        Ok(self.mem - 1)
    }

    fn value(&mut self, a: &Arith, span: &Range<usize>) -> Result<Val, FilterError> {
        Ok(match a {
            Arith::Num(k) => Val {
                checks: vec![],
                stmts: vec![Insn::stmt(LD | W | IMM, *k)],
                konst: Some(*k),
            },
            Arith::Len => Val {
                checks: vec![],
                stmts: vec![Insn::stmt(LD | W | LEN, 0)],
                konst: None,
            },
            Arith::Neg(e) => {
                let mut v = self.value(e, span)?;
                v.stmts.push(Insn::stmt(ALU | NEG, 0));
                v.konst = v.konst.map(u32::wrapping_neg);
                v
            }
            Arith::Bin(op, l, r) => {
                let lv = self.value(l, span)?;
                let rv = self.value(r, span)?;
                let code = match op {
                    ArOp::Add => ADD,
                    ArOp::Sub => SUB,
                    ArOp::Mul => MUL,
                    ArOp::Div => DIV,
                    ArOp::Mod => MOD,
                    ArOp::And => AND,
                    ArOp::Or => OR,
                    ArOp::Xor => XOR,
                    ArOp::Lsh => LSH,
                    ArOp::Rsh => RSH,
                };
                let mut checks = lv.checks;
                checks.extend(rv.checks);
                let mut stmts = lv.stmts;
                match rv.konst {
                    Some(k) => {
                        if matches!(op, ArOp::Div | ArOp::Mod) && k == 0 {
                            return Err(self.err(span, "division by zero"));
                        }
                        if matches!(op, ArOp::Lsh | ArOp::Rsh) && k > 31 {
                            return Err(self.err(span, "shift by more than 31 bits"));
                        }
                        stmts.push(Insn::stmt(ALU | code | K, k));
                    }
                    None => {
                        let m = self.alloc(span)?;
                        stmts.push(Insn::stmt(ST, m));
                        stmts.extend(rv.stmts);
                        stmts.push(Insn::stmt(MISC | TAX, 0));
                        stmts.push(Insn::stmt(LD | W | MEM, m));
                        stmts.push(Insn::stmt(ALU | code | X, 0));
                        self.mem -= 1;
                    }
                }
                let konst = match (lv.konst, rv.konst) {
                    (Some(a), Some(b)) => op.fold(a, b),
                    _ => None,
                };
                Val { checks, stmts, konst }
            }
            Arith::Load { proto, index, size } => {
                let sz = match size {
                    1 => B,
                    2 => H,
                    _ => W,
                };
                let idx = self.value(index, span)?;
                let mut checks = idx.checks;
                let pl = self.pl();
                let mut stmts = Vec::new();
                let based = |base: u32, stmts: &mut Vec<Insn>| match idx.konst {
                    Some(k) => stmts.push(ld(sz, base.wrapping_add(k))),
                    None => {
                        stmts.extend(idx.stmts.iter().copied());
                        stmts.push(Insn::stmt(MISC | TAX, 0));
                        stmts.push(Insn::stmt(LD | sz | IND, base));
                    }
                };
                match proto {
                    Proto::Ether => based(0, &mut stmts),
                    Proto::Ip | Proto::Ip6 | Proto::Arp | Proto::Rarp => {
                        checks.push(self.proto_abbrev(*proto));
                        based(pl, &mut stmts);
                    }
                    Proto::Icmp6 => {
                        checks.push(P::And(vec![self.linktype(ETHERTYPE_IPV6), cmp(B, pl + 6, 58)]));
                        based(pl + 40, &mut stmts);
                    }
                    Proto::Tcp | Proto::Udp | Proto::Icmp | Proto::Sctp | Proto::Igmp => {
                        checks.push(P::And(vec![
                            self.ipproto4(proto.ip_proto().unwrap_or(0) as u32),
                            self.ipfrag(),
                        ]));
                        match idx.konst {
                            Some(k) => {
                                stmts.push(Insn::stmt(LDX | B | MSH, pl));
                                stmts.push(Insn::stmt(LD | sz | IND, pl.wrapping_add(k)));
                            }
                            None => {
                                stmts.extend(idx.stmts.iter().copied());
                                stmts.push(Insn::stmt(LDX | B | MSH, pl));
                                stmts.push(Insn::stmt(ALU | ADD | X, 0));
                                stmts.push(Insn::stmt(MISC | TAX, 0));
                                stmts.push(Insn::stmt(LD | sz | IND, pl));
                            }
                        }
                    }
                }
                Val {
                    checks,
                    stmts,
                    konst: None,
                }
            }
        })
    }
}

// ------------------------------------------------------------------------------ emission

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum N {
    Stmt(Insn),
    /// Conditional jump; targets are node indices (labels before resolution).
    Cond {
        code: u16,
        k: u32,
        t: usize,
        f: usize,
    },
    Ja(usize),
    Ret(u32),
}

impl N {
    /// The node with its jump targets `i` replaced by `map[i]`.
    fn retarget(self, map: &[usize]) -> N {
        match self {
            N::Cond { code, k, t, f } => N::Cond {
                code,
                k,
                t: map[t],
                f: map[f],
            },
            N::Ja(t) => N::Ja(map[t]),
            other => other,
        }
    }
}

struct Emit {
    nodes: Vec<N>,
    labels: Vec<usize>,
}

impl Emit {
    fn label(&mut self) -> usize {
        self.labels.push(usize::MAX);
        self.labels.len() - 1
    }
    fn bind(&mut self, l: usize) {
        self.labels[l] = self.nodes.len();
    }
    fn emit(&mut self, p: &P, t: usize, f: usize) {
        match p {
            P::True => self.nodes.push(N::Ja(t)),
            P::Atom { stmts, code, k, neg } => {
                self.nodes.extend(stmts.iter().map(|s| N::Stmt(*s)));
                let (t, f) = if *neg { (f, t) } else { (t, f) };
                self.nodes.push(N::Cond {
                    code: *code,
                    k: *k,
                    t,
                    f,
                });
            }
            P::And(v) | P::Or(v) => {
                let and = matches!(p, P::And(_));
                if v.is_empty() {
                    self.nodes.push(N::Ja(if and { t } else { f }));
                    return;
                }
                for (i, q) in v.iter().enumerate() {
                    if i + 1 == v.len() {
                        self.emit(q, t, f);
                    } else {
                        let next = self.label();
                        if and {
                            self.emit(q, next, f);
                        } else {
                            self.emit(q, t, next);
                        }
                        self.bind(next);
                    }
                }
            }
            P::Not(q) => self.emit(q, f, t),
        }
    }
}

// ------------------------------------------------------------------------------ optimisation

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Av {
    Unknown,
    /// A holds the packet load `code`/`k` (absolute, or indexed with the current X).
    Load(u16, u32),
    Imm(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Xv {
    Unknown,
    Msh(u32),
    Imm(u32),
}

/// What is known about one absolute packet load (or the length) on every path to a point:
/// it was loaded (so loading it again cannot fail), and facts from the comparisons made on it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fact {
    code: u16,
    k: u32,
    eq: Option<u32>,
    ne: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct St {
    a: Av,
    x: Xv,
    /// Facts about the value in A.
    eq: Option<u32>,
    ne: Vec<u32>,
    /// Facts about packet loads, by (code, k); only absolute loads and the length.
    known: Vec<Fact>,
}

const MAX_FACTS: usize = 32;

fn tracked(code: u16) -> bool {
    class(code) == LD && matches!(mode(code), ABS | LEN)
}

impl St {
    fn unknown() -> St {
        St {
            a: Av::Unknown,
            x: Xv::Unknown,
            eq: None,
            ne: Vec::new(),
            known: Vec::new(),
        }
    }

    fn fact(&self, code: u16, k: u32) -> Option<&Fact> {
        self.known.iter().find(|f| f.code == code && f.k == k)
    }

    /// Copies the facts about A to the packet-load table when A holds a tracked load.
    fn save(&mut self) {
        if let Av::Load(code, k) = self.a {
            if tracked(code) {
                let (eq, ne) = (self.eq, self.ne.clone());
                if let Some(f) = self.known.iter_mut().find(|f| f.code == code && f.k == k) {
                    f.eq = eq;
                    f.ne = ne;
                } else if self.known.len() < MAX_FACTS {
                    self.known.push(Fact { code, k, eq, ne });
                }
            }
        }
    }

    fn set_a(&mut self, a: Av) {
        if self.a == a && a != Av::Unknown {
            return;
        }
        self.save();
        self.a = a;
        self.eq = None;
        self.ne.clear();
        match a {
            Av::Imm(k) => self.eq = Some(k),
            Av::Load(code, k) if tracked(code) => {
                if let Some((eq, ne)) = self.fact(code, k).map(|f| (f.eq, f.ne.clone())) {
                    self.eq = eq;
                    self.ne = ne;
                } else {
                    self.save();
                }
            }
            _ => {}
        }
    }

    fn set_x(&mut self, x: Xv) {
        if self.x != x || x == Xv::Unknown {
            self.x = x;
            if let Av::Load(code, _) = self.a {
                if mode(code) == IND {
                    self.set_a(Av::Unknown);
                }
            }
        }
    }

    /// Whether `s` would leave the state unchanged (a redundant reload).
    fn redundant(&self, s: &Insn) -> bool {
        match class(s.code) {
            LD => match mode(s.code) {
                ABS | IND | LEN => self.a == Av::Load(s.code, s.k),
                IMM => self.a == Av::Imm(s.k),
                _ => false,
            },
            LDX => match mode(s.code) {
                MSH => self.x == Xv::Msh(s.k),
                IMM => self.x == Xv::Imm(s.k),
                _ => false,
            },
            _ => false,
        }
    }

    /// Whether the walk may step over `s` (simulating it) without changing what the packet
    /// can do: reloads of packet words already loaded on every path, constants, the length.
    fn skippable(&self, s: &Insn) -> bool {
        class(s.code) == LD
            && match mode(s.code) {
                ABS => self.fact(s.code, s.k).is_some(),
                IMM | LEN => true,
                _ => false,
            }
    }

    fn apply(&mut self, s: &Insn) {
        match class(s.code) {
            LD => match mode(s.code) {
                ABS | IND | LEN => self.set_a(Av::Load(s.code, s.k)),
                IMM => self.set_a(Av::Imm(s.k)),
                _ => self.set_a(Av::Unknown),
            },
            LDX => match mode(s.code) {
                MSH => self.set_x(Xv::Msh(s.k)),
                IMM => self.set_x(Xv::Imm(s.k)),
                _ => self.set_x(Xv::Unknown),
            },
            ALU => self.set_a(Av::Unknown),
            MISC => {
                if s.code & 0xf8 == TAX {
                    self.set_x(Xv::Unknown)
                } else {
                    self.set_a(Av::Unknown)
                }
            }
            _ => {}
        }
    }

    /// The outcome of a conditional jump, if the state decides it.
    fn decide(&self, code: u16, k: u32) -> Option<bool> {
        if src(code) != K || self.a == Av::Unknown {
            return None;
        }
        if let Some(v) = self.eq {
            return Some(match aluop(code) {
                JEQ => v == k,
                JGT => v > k,
                JGE => v >= k,
                _ => v & k != 0,
            });
        }
        if aluop(code) == JEQ && self.ne.contains(&k) {
            return Some(false);
        }
        None
    }

    /// The state along one exit of a conditional jump.
    fn edge(&self, code: u16, k: u32, taken: bool) -> St {
        let mut s = self.clone();
        if src(code) == K && aluop(code) == JEQ && self.a != Av::Unknown {
            if taken {
                s.eq = Some(k);
                s.ne.clear();
            } else if s.eq.is_none() && !s.ne.contains(&k) && s.ne.len() < 16 {
                s.ne.push(k);
            }
            s.save();
        }
        s
    }

    fn meet(&mut self, o: &St) {
        if self.x != o.x {
            self.x = Xv::Unknown;
            if let Av::Load(code, _) = self.a {
                if mode(code) == IND {
                    self.a = Av::Unknown;
                }
            }
        }
        if self.a != o.a {
            self.a = Av::Unknown;
        }
        if self.a == Av::Unknown {
            self.eq = None;
            self.ne.clear();
        } else {
            if self.eq != o.eq {
                self.eq = None;
            }
            self.ne.retain(|k| o.ne.contains(k));
        }
        self.known.retain_mut(|f| match o.fact(f.code, f.k) {
            Some(g) => {
                if f.eq != g.eq {
                    f.eq = None;
                }
                f.ne.retain(|k| g.ne.contains(k));
                true
            }
            None => false,
        });
    }
}

/// The state on entry to each node (`None`: unreachable).
fn dataflow(nodes: &[N]) -> Vec<Option<St>> {
    fn merge(inn: &mut [Option<St>], i: usize, s: St) {
        match &mut inn[i] {
            Some(cur) => cur.meet(&s),
            slot @ None => *slot = Some(s),
        }
    }
    let mut inn: Vec<Option<St>> = vec![None; nodes.len()];
    if !nodes.is_empty() {
        inn[0] = Some(St::unknown());
    }
    for i in 0..nodes.len() {
        let Some(s) = inn[i].clone() else { continue };
        match nodes[i] {
            N::Stmt(insn) => {
                let mut o = s;
                o.apply(&insn);
                merge(&mut inn, i + 1, o);
            }
            N::Cond { code, k, t, f } => {
                merge(&mut inn, t, s.edge(code, k, true));
                merge(&mut inn, f, s.edge(code, k, false));
            }
            N::Ja(t) => merge(&mut inn, t, s),
            N::Ret(_) => {}
        }
    }
    inn
}

/// Follows `t` while the state `s` makes the nodes there redundant, skippable or decided;
/// returns the farthest node reached where nothing skipped is still needed.
fn walk(nodes: &[N], live: &[u32], mut t: usize, mut s: St) -> usize {
    let mut best = t;
    let mut skipped = 0u32;
    loop {
        if skipped & live[t] == 0 {
            best = t;
        }
        match nodes[t] {
            N::Stmt(insn) if s.redundant(&insn) => t += 1,
            N::Stmt(insn) if s.skippable(&insn) => {
                skipped |= use_def(&insn).1;
                s.apply(&insn);
                t += 1;
            }
            N::Ja(u) => t = u,
            N::Cond { code, k, t: ct, f: cf } => match s.decide(code, k) {
                Some(taken) => {
                    s = s.edge(code, k, taken);
                    t = if taken { ct } else { cf };
                }
                None => return best,
            },
            _ => return best,
        }
    }
}

/// Registers live on entry to each node (bit 0 = A, bit 1 = X, bits 2.. = scratch).
fn liveness(nodes: &[N]) -> Vec<u32> {
    let n = nodes.len();
    let mut live_in = vec![0u32; n + 1];
    for i in (0..n).rev() {
        live_in[i] = match nodes[i] {
            N::Stmt(s) => {
                let (u, d) = use_def(&s);
                u | (live_in[i + 1] & !d)
            }
            N::Cond { code, t, f, .. } => {
                let u = RA | if src(code) == X { RX } else { 0 };
                u | live_in[t] | live_in[f]
            }
            N::Ja(t) => live_in[t],
            N::Ret(_) => 0,
        };
    }
    live_in
}

/// Jump threading, last node first (so every node after the one being threaded is final
/// and the liveness used by [`walk`] is exact).
fn thread(nodes: &mut [N], inn: &[Option<St>]) -> bool {
    let mut changed = false;
    let mut live = liveness(nodes);
    for i in (0..nodes.len()).rev() {
        let Some(s) = &inn[i] else { continue };
        let before = nodes[i];
        match nodes[i] {
            N::Cond { code, k, t, f } => {
                let nt = walk(nodes, &live, t, s.edge(code, k, true));
                let nf = walk(nodes, &live, f, s.edge(code, k, false));
                nodes[i] = N::Cond { code, k, t: nt, f: nf };
            }
            N::Ja(t) => nodes[i] = N::Ja(walk(nodes, &live, t, s.clone())),
            _ => {}
        }
        if nodes[i] != before {
            changed = true;
            live = liveness(nodes);
        }
    }
    changed
}

/// Drops unreachable nodes, redundant loads, jumps to the next node; turns conditional jumps
/// with equal targets into `ja`. Returns whether anything changed.
fn compact(nodes: &mut Vec<N>) -> bool {
    let inn = dataflow(nodes);
    let n = nodes.len();
    let mut keep = vec![true; n];
    for i in 0..n {
        match (&inn[i], nodes[i]) {
            (None, _) => keep[i] = false,
            (Some(s), N::Stmt(insn)) if s.redundant(&insn) => keep[i] = false,
            (_, N::Cond { t, f, .. }) if t == f => nodes[i] = N::Ja(t),
            _ => {}
        }
        if nodes[i] == N::Ja(i + 1) {
            keep[i] = false;
        }
    }
    if keep.iter().all(|&k| k) {
        return false;
    }
    // new index of the first kept node at or after each old index
    let mut map = vec![0usize; n + 1];
    let mut next = keep.iter().filter(|&&k| k).count();
    map[n] = next;
    for i in (0..n).rev() {
        if keep[i] {
            next -= 1;
        }
        map[i] = next;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if !keep[i] {
            continue;
        }
        out.push(nodes[i].retarget(&map));
    }
    *nodes = out;
    true
}

/// Registers: bit 0 = A, bit 1 = X, bits 2.. = scratch words.
const RA: u32 = 1;
const RX: u32 = 2;
fn rm(k: u32) -> u32 {
    4 << (k & 15)
}

/// (uses, defs) of a statement.
fn use_def(s: &Insn) -> (u32, u32) {
    match class(s.code) {
        LD => match mode(s.code) {
            IND => (RX, RA),
            MEM => (rm(s.k), RA),
            _ => (0, RA),
        },
        LDX => match mode(s.code) {
            MEM => (rm(s.k), RX),
            _ => (0, RX),
        },
        ST => (RA, rm(s.k)),
        STX => (RX, rm(s.k)),
        ALU => {
            if aluop(s.code) == NEG || src(s.code) == K {
                (RA, RA)
            } else {
                (RA | RX, RA)
            }
        }
        MISC => {
            if s.code & 0xf8 == TAX {
                (RA, RX)
            } else {
                (RX, RA)
            }
        }
        _ => (0, 0),
    }
}

/// Whether a statement can end the program (a packet load past the end, a division by a
/// zero `x`): such a statement is kept even when its result is unused, so that every
/// packet, truncated or not, gets the verdict of the unoptimised program.
fn can_abort(s: &Insn) -> bool {
    match class(s.code) {
        LD => matches!(mode(s.code), ABS | IND),
        LDX => mode(s.code) == MSH,
        ALU => src(s.code) == X && matches!(aluop(s.code), DIV | MOD),
        _ => false,
    }
}

/// Removes statements whose result is never used and that cannot end the program.
/// (libpcap's optimiser also removes unused packet loads, which changes its verdict on some
/// truncated packets; we do not.)
fn dead_stores(nodes: &mut [N], reach: &[Option<St>]) -> bool {
    let n = nodes.len();
    let live_in = liveness(nodes);
    let mut changed = false;
    for i in 0..n {
        if reach[i].is_none() {
            continue;
        }
        if let N::Stmt(s) = nodes[i] {
            let (_, d) = use_def(&s);
            if d != 0 && d & live_in[i + 1] == 0 && !can_abort(&s) {
                nodes[i] = N::Ja(i + 1);
                changed = true;
            }
        }
    }
    changed
}

fn optimize(nodes: &mut Vec<N>) {
    for _ in 0..256 {
        let inn = dataflow(nodes);
        let threaded = thread(nodes, &inn);
        let inn = dataflow(nodes);
        let dead = dead_stores(nodes, &inn);
        let compacted = compact(nodes);
        if !threaded && !compacted && !dead {
            break;
        }
    }
}

/// Lays nodes out as instructions; conditional jumps farther than 255 go through `ja`.
fn layout(nodes: &[N]) -> Vec<Insn> {
    let n = nodes.len();
    let mut long = vec![(false, false); n];
    loop {
        let mut pos = vec![0usize; n + 1];
        for i in 0..n {
            let (lt, lf) = long[i];
            pos[i + 1] = pos[i] + 1 + lt as usize + lf as usize;
        }
        let mut grew = false;
        for i in 0..n {
            if let N::Cond { t, f, .. } = nodes[i] {
                let base = pos[i] + 1;
                if !long[i].0 && pos[t] - base > 255 {
                    long[i].0 = true;
                    grew = true;
                }
                if !long[i].1 && pos[f] - base > 255 {
                    long[i].1 = true;
                    grew = true;
                }
            }
        }
        if grew {
            continue;
        }
        let mut out = Vec::with_capacity(pos[n]);
        for i in 0..n {
            match nodes[i] {
                N::Stmt(s) => out.push(s),
                N::Ret(k) => out.push(Insn::stmt(RET | K, k)),
                N::Ja(t) => out.push(Insn::stmt(JMP | JA, (pos[t] - pos[i] - 1) as u32)),
                N::Cond { code, k, t, f } => {
                    let (lt, lf) = long[i];
                    let base = pos[i] + 1;
                    let jt = if lt { 0 } else { pos[t] - base };
                    let jf = if lf { lt as usize } else { pos[f] - base };
                    out.push(Insn::jump(code, k, jt as u8, jf as u8));
                    if lt {
                        out.push(Insn::stmt(JMP | JA, (pos[t] - (base + 1)) as u32));
                    }
                    if lf {
                        let at = base + lt as usize;
                        out.push(Insn::stmt(JMP | JA, (pos[f] - (at + 1)) as u32));
                    }
                }
            }
        }
        return out;
    }
}

/// Code-generation options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodegenOptions {
    /// The value returned for a match (bytes to keep), at least 1.
    pub snaplen: u32,
    /// Run the optimiser (jump threading, redundant-load removal). Verdicts are identical
    /// either way; only size and speed change.
    pub optimize: bool,
}

/// Generates a program for `expr` (`None`: match everything).
pub fn generate(src: &str, expr: Option<&Expr>, opts: CodegenOptions) -> Result<Vec<Insn>, FilterError> {
    let snaplen = opts.snaplen.max(1);
    let Some(expr) = expr else {
        return Ok(vec![Insn::stmt(RET | K, snaplen)]);
    };
    let mut lower = Lower {
        expr: src,
        shift: 0,
        mem: 0,
    };
    let p = lower.expr(expr)?;
    let mut e = Emit {
        nodes: Vec::new(),
        labels: Vec::new(),
    };
    let accept = e.label();
    let reject = e.label();
    e.emit(&p, accept, reject);
    e.bind(accept);
    e.nodes.push(N::Ret(snaplen));
    e.bind(reject);
    e.nodes.push(N::Ret(0));
    let labels = e.labels;
    let mut nodes: Vec<N> = e.nodes.into_iter().map(|n| n.retarget(&labels)).collect();
    if opts.optimize {
        optimize(&mut nodes);
    } else {
        // Still drop jumps to the very next node (from empty and/or and `True` atoms).
        compact_trivial(&mut nodes);
    }
    let prog = layout(&nodes);
    if prog.len() > MAX_INSNS {
        return Err(FilterError::new(
            src,
            0..src.len(),
            format!("expression too large: {} instructions (max {MAX_INSNS})", prog.len()),
        ));
    }
    Ok(prog)
}

fn compact_trivial(nodes: &mut Vec<N>) {
    loop {
        let Some(i) = (0..nodes.len()).find(|&i| nodes[i] == N::Ja(i + 1)) else {
            return;
        };
        nodes.remove(i);
        for n in nodes.iter_mut() {
            match n {
                N::Cond { t, f, .. } => {
                    if *t > i {
                        *t -= 1;
                    }
                    if *f > i {
                        *f -= 1;
                    }
                }
                N::Ja(t) if *t > i => *t -= 1,
                _ => {}
            }
        }
    }
}
