//! The BPF virtual machine: runs a validated program, pre-decoded into one enum per
//! instruction with absolute jump targets.
//!
//! Semantics (those of the BSD/libpcap `bpf_filter` and the BPF specification):
//! * a packet load (absolute or `x`-indexed, or the `ldxb 4*([k]&0xf)` header-length load)
//!   that reaches past the end of the packet ends the program with 0 ("no match");
//! * `div`/`mod` by a runtime zero in `x` ends the program with 0;
//! * shifts by `x >= 32` give 0 (libpcap would shift by `x & 31` on x86; a compiled filter
//!   never shifts by a register, and 0 is the portable answer);
//! * arithmetic wraps modulo 2^32, comparisons are unsigned;
//! * scratch memory starts zeroed on every run;
//! * the return value is the number of bytes to keep (0 = drop).
//!
//! Nothing here can panic on any packet: [`Program::new`] validated jump targets and scratch
//! indices once, and every packet access is bounds-checked.
//!
//! On x86-64 Unix, [`Program::new`] also compiles the program to machine code
//! ([`super::jit`]); [`Program::run`], [`Program::run_wirelen`] and [`Program::run_batch`]
//! then run that code, which gives the same results (the interpreter stays reachable through
//! [`Program::run_interpreted`] and [`Program::run_batch_interpreted`], and is what runs when
//! the JIT is unavailable or switched off with `FREEWAY_BPF_JIT=0` in the environment).
//!
//! Threads: a [`Program`] is immutable and `Sync`; any number of workers may run it at once.

use std::sync::{Arc, OnceLock};

use super::insn::{op::*, Insn};
use super::jit::JitCode;
use super::validate::{validate, ValidateError};

/// Whether [`Program::new`] compiles programs to machine code: yes unless the environment
/// variable `FREEWAY_BPF_JIT` is `0` (read once, at the first program built).
pub fn jit_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("FREEWAY_BPF_JIT").is_none_or(|v| v != "0"))
}

/// One decoded instruction; jump targets are absolute instruction indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    LdW(u32),
    LdH(u32),
    LdB(u32),
    LdIndW(u32),
    LdIndH(u32),
    LdIndB(u32),
    LdLen,
    LdImm(u32),
    LdMem(u8),
    LdxImm(u32),
    LdxMem(u8),
    LdxLen,
    LdxMsh(u32),
    St(u8),
    Stx(u8),
    AddK(u32),
    SubK(u32),
    MulK(u32),
    DivK(u32),
    ModK(u32),
    AndK(u32),
    OrK(u32),
    XorK(u32),
    LshK(u32),
    RshK(u32),
    AddX,
    SubX,
    MulX,
    DivX,
    ModX,
    AndX,
    OrX,
    XorX,
    LshX,
    RshX,
    Neg,
    Ja(u16),
    JeqK(u32, u16, u16),
    JgtK(u32, u16, u16),
    JgeK(u32, u16, u16),
    JsetK(u32, u16, u16),
    JeqX(u16, u16),
    JgtX(u16, u16),
    JgeX(u16, u16),
    JsetX(u16, u16),
    RetK(u32),
    RetA,
    Tax,
    Txa,
    /// `ld{,h,b} [k]` fused with the `jeq #v` after it (the `jeq` stays at the next index
    /// for jumps that land on it).
    LdHJeq(u32, u32, u16, u16),
    LdBJeq(u32, u32, u16, u16),
    LdWJeq(u32, u32, u16, u16),
}

/// Most packets [`Program::run_batch`] takes at once.
pub const LANES: usize = 32;

/// A validated, decoded classic BPF program.
#[derive(Clone, Debug)]
pub struct Program {
    insns: Box<[Insn]>,
    ops: Box<[Op]>,
    /// Whether any instruction touches scratch memory (if none does, runs skip zeroing it).
    uses_mem: bool,
    /// Whether any instruction loads the packet's length on the wire (`len`).
    uses_len: bool,
    /// The program compiled to machine code, when available (shared by clones; unmapped
    /// with the last of them).
    jit: Option<Arc<JitCode>>,
}

fn decode(pc: usize, i: &Insn) -> Op {
    let k = i.k;
    let t = (pc + 1 + i.jt as usize) as u16;
    let f = (pc + 1 + i.jf as usize) as u16;
    let c = i.code;
    match class(c) {
        LD => match (mode(c), size(c)) {
            (ABS, W) => Op::LdW(k),
            (ABS, H) => Op::LdH(k),
            (ABS, _) => Op::LdB(k),
            (IND, W) => Op::LdIndW(k),
            (IND, H) => Op::LdIndH(k),
            (IND, _) => Op::LdIndB(k),
            (LEN, _) => Op::LdLen,
            (IMM, _) => Op::LdImm(k),
            _ => Op::LdMem(k as u8),
        },
        LDX => match mode(c) {
            IMM => Op::LdxImm(k),
            MEM => Op::LdxMem(k as u8),
            LEN => Op::LdxLen,
            _ => Op::LdxMsh(k),
        },
        ST => Op::St(k as u8),
        STX => Op::Stx(k as u8),
        ALU => match (aluop(c), src(c)) {
            (ADD, K) => Op::AddK(k),
            (SUB, K) => Op::SubK(k),
            (MUL, K) => Op::MulK(k),
            (DIV, K) => Op::DivK(k),
            (MOD, K) => Op::ModK(k),
            (AND, K) => Op::AndK(k),
            (OR, K) => Op::OrK(k),
            (XOR, K) => Op::XorK(k),
            (LSH, K) => Op::LshK(k),
            (RSH, K) => Op::RshK(k),
            (ADD, _) => Op::AddX,
            (SUB, _) => Op::SubX,
            (MUL, _) => Op::MulX,
            (DIV, _) => Op::DivX,
            (MOD, _) => Op::ModX,
            (AND, _) => Op::AndX,
            (OR, _) => Op::OrX,
            (XOR, _) => Op::XorX,
            (LSH, _) => Op::LshX,
            (RSH, _) => Op::RshX,
            _ => Op::Neg,
        },
        JMP => match (aluop(c), src(c)) {
            (JA, _) => Op::Ja((pc + 1 + k as usize) as u16),
            (JEQ, K) => Op::JeqK(k, t, f),
            (JGT, K) => Op::JgtK(k, t, f),
            (JGE, K) => Op::JgeK(k, t, f),
            (JSET, K) => Op::JsetK(k, t, f),
            (JEQ, _) => Op::JeqX(t, f),
            (JGT, _) => Op::JgtX(t, f),
            (JGE, _) => Op::JgeX(t, f),
            _ => Op::JsetX(t, f),
        },
        RET => {
            if rval(c) == A {
                Op::RetA
            } else {
                Op::RetK(k)
            }
        }
        _ => {
            if c & 0xf8 == TXA {
                Op::Txa
            } else {
                Op::Tax
            }
        }
    }
}

#[inline(always)]
fn load_w(p: &[u8], off: u64) -> Option<u32> {
    if off.checked_add(4)? > p.len() as u64 {
        return None;
    }
    let off = off as usize;
    // SAFETY: off + 4 <= p.len() was checked just above.
    Some(u32::from_be(unsafe {
        p.as_ptr().add(off).cast::<u32>().read_unaligned()
    }))
}

#[inline(always)]
fn load_h(p: &[u8], off: u64) -> Option<u32> {
    if off.checked_add(2)? > p.len() as u64 {
        return None;
    }
    let off = off as usize;
    // SAFETY: off + 2 <= p.len() was checked just above.
    Some(u16::from_be(unsafe { p.as_ptr().add(off).cast::<u16>().read_unaligned() }) as u32)
}

#[inline(always)]
fn load_b(p: &[u8], off: u64) -> Option<u32> {
    if off >= p.len() as u64 {
        return None;
    }
    // SAFETY: off < p.len() was checked just above.
    Some(unsafe { *p.get_unchecked(off as usize) } as u32)
}

/// Batch form of an absolute load of `W` bytes at `off` into `a`, for the lanes of `m`
/// (out of the first `n`): every lane is visited in order (no serial walk over the mask's
/// bits, so lanes overlap in the pipeline); inactive lanes keep their `a`. Returns the
/// lanes whose packet was too short (they end with 0).
#[inline(always)]
fn dense_load<const W: usize>(pkts: &[&[u8]], m: u32, off: u32, a: &mut [u32; LANES]) -> u32 {
    let mut short = 0u32;
    for (l, (p, al)) in pkts.iter().zip(a.iter_mut()).enumerate() {
        let v = match W {
            4 => load_w(p, u64::from(off)),
            2 => load_h(p, u64::from(off)),
            _ => load_b(p, u64::from(off)),
        };
        let active = m >> l & 1 != 0;
        match v {
            Some(v) if active => *al = v,
            None => short |= u32::from(active) << l,
            _ => {}
        }
    }
    short
}

/// The lanes (of the first `pkts.len()`) whose `a` passes `cond`, as a mask; branch-free, so
/// the compiler can vectorise it.
#[inline(always)]
fn dense_mask(n: usize, a: &[u32; LANES], cond: impl Fn(u32) -> bool) -> u32 {
    let mut t = 0u32;
    for (l, &v) in a[..n].iter().enumerate() {
        t |= u32::from(cond(v)) << l;
    }
    t
}

impl Program {
    /// Validates and decodes `insns`, and compiles them to machine code where the JIT is
    /// available and enabled ([`jit_enabled`]).
    pub fn new(insns: &[Insn]) -> Result<Program, ValidateError> {
        let mut p = Program::new_interpreted(insns)?;
        if jit_enabled() {
            p.jit = JitCode::compile(insns).map(Arc::new);
        }
        Ok(p)
    }

    /// Validates and decodes `insns`, without compiling them: every run interprets.
    pub fn new_interpreted(insns: &[Insn]) -> Result<Program, ValidateError> {
        validate(insns)?;
        let mut ops: Vec<Op> = insns.iter().enumerate().map(|(pc, i)| decode(pc, i)).collect();
        for i in 0..ops.len().saturating_sub(1) {
            if let Op::JeqK(v, t, f) = ops[i + 1] {
                ops[i] = match ops[i] {
                    Op::LdH(k) => Op::LdHJeq(k, v, t, f),
                    Op::LdB(k) => Op::LdBJeq(k, v, t, f),
                    Op::LdW(k) => Op::LdWJeq(k, v, t, f),
                    other => other,
                };
            }
        }
        let uses_mem = ops
            .iter()
            .any(|o| matches!(o, Op::LdMem(_) | Op::LdxMem(_) | Op::St(_) | Op::Stx(_)));
        let uses_len = ops.iter().any(|o| matches!(o, Op::LdLen | Op::LdxLen));
        Ok(Program {
            insns: insns.into(),
            ops: ops.into(),
            uses_mem,
            uses_len,
            jit: None,
        })
    }

    /// A program that accepts every packet, keeping up to `snaplen` bytes (`ret #snaplen`).
    pub fn accept_all(snaplen: u32) -> Program {
        let insn = Insn::stmt(RET | K, snaplen);
        Program {
            insns: Box::new([insn]),
            ops: Box::new([Op::RetK(snaplen)]),
            uses_mem: false,
            uses_len: false,
            jit: None,
        }
    }

    /// Whether runs execute compiled machine code (see [`super::jit`]).
    pub fn is_jitted(&self) -> bool {
        self.jit.is_some()
    }

    /// Bytes of machine code, if compiled.
    pub fn jit_code_len(&self) -> Option<usize> {
        self.jit.as_ref().map(|j| j.code_len())
    }

    /// The instructions, as given to [`Program::new`].
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The number of instructions.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Always false: a valid program has at least one instruction.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// The program rendered like `tcpdump -d`.
    pub fn dump(&self) -> String {
        super::insn::dump(&self.insns)
    }

    /// Runs the program on a whole packet: the return value (bytes to keep, 0 = no match).
    #[inline]
    pub fn run(&self, pkt: &[u8]) -> u32 {
        self.run_wirelen(pkt, pkt.len() as u32)
    }

    /// Whether the program accepts `pkt` (returns non-zero).
    #[inline]
    pub fn matches(&self, pkt: &[u8]) -> bool {
        self.run(pkt) != 0
    }

    /// Runs the program on up to [`LANES`] whole packets at once, writing each one's return
    /// value to `out[i]` (the same values [`Program::run`] gives, packet by packet).
    ///
    /// The batch form interprets each instruction once for all the packets that reach it,
    /// instead of once per packet: BPF jumps only forward, so the packets' program counters
    /// can be advanced together, lowest first, the packets at one counter held as a bit mask.
    /// On a batch whose packets take the same path (the common case: a port's traffic, a
    /// non-matching filter), the per-instruction dispatch is paid once per batch and what is
    /// left per packet is the load and the compare. Programs that use scratch memory run
    /// packet by packet.
    ///
    /// With compiled code, the batch is one call into it (a loop over the packets).
    ///
    /// Returns whether any packet's result is non-zero (so a caller whose filter matched
    /// nothing need not look at `out`).
    ///
    /// # Panics
    /// Never for any packet; `pkts.len()` beyond [`LANES`] or beyond `out.len()` is a caller
    /// error and panics.
    #[inline]
    pub fn run_batch(&self, pkts: &[&[u8]], out: &mut [u32]) -> bool {
        assert!(
            pkts.len() <= LANES && pkts.len() <= out.len(),
            "batch of at most {LANES}"
        );
        match &self.jit {
            Some(j) => j.run_batch(pkts, out),
            None => {
                self.run_batch_interpreted(pkts, out);
                out[..pkts.len()].iter().any(|&k| k != 0)
            }
        }
    }

    /// [`Program::run_batch`] on the frames of up to [`LANES`] packets. Compiled code reads
    /// them straight from the packets; otherwise the frames are gathered first. `len` is
    /// each packet's length on the wire ([`freeway_packet::Packet::wire_len`]), as libpcap
    /// gives a filter the original length of a cut packet: a batch with a cut packet, run
    /// by a program that reads `len`, goes packet by packet through
    /// [`Program::run_wirelen`].
    ///
    /// # Panics
    /// As [`Program::run_batch`].
    #[inline]
    pub fn run_packets(&self, pkts: &[freeway_packet::Packet], out: &mut [u32]) -> bool {
        assert!(
            pkts.len() <= LANES && pkts.len() <= out.len(),
            "batch of at most {LANES}"
        );
        if self.uses_len && pkts.iter().any(|p| p.meta.uncaptured() != 0) {
            let mut any = 0;
            for (o, p) in out.iter_mut().zip(pkts) {
                *o = self.run_wirelen(p.data(), p.wire_len());
                any |= *o;
            }
            return any != 0;
        }
        if let Some(any) = self.jit.as_ref().and_then(|j| j.run_packets(pkts, out)) {
            return any;
        }
        let mut buf = [const { std::mem::MaybeUninit::<&[u8]>::uninit() }; LANES];
        for (f, p) in buf.iter_mut().zip(pkts) {
            f.write(p.data());
        }
        // SAFETY: the first `pkts.len()` (at most `LANES`) elements were written just above,
        // and `MaybeUninit<&[u8]>` has the layout of `&[u8]`.
        let frames: &[&[u8]] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<&[u8]>(), pkts.len()) };
        self.run_batch(frames, out)
    }

    /// [`Program::run_batch`] with the batch interpreter, even if the program is compiled.
    ///
    /// # Panics
    /// As [`Program::run_batch`].
    pub fn run_batch_interpreted(&self, pkts: &[&[u8]], out: &mut [u32]) {
        assert!(
            pkts.len() <= LANES && pkts.len() <= out.len(),
            "batch of at most {LANES}"
        );
        if self.uses_mem {
            for (o, p) in out.iter_mut().zip(pkts) {
                *o = self.run_interpreted(p, p.len() as u32);
            }
            return;
        }
        let n = pkts.len();
        if n == 0 {
            return;
        }
        let ops = &*self.ops;
        let mut a = [0u32; LANES];
        let mut x = [0u32; LANES];
        // The frontier: (pc, lanes at that pc), at most one entry per lane.
        let mut f_pc = [0u16; LANES];
        let mut f_m = [0u32; LANES];
        let mut f_n = 1usize;
        let full = if n == LANES { u32::MAX } else { (1u32 << n) - 1 };
        f_m[0] = full;
        macro_rules! lanes {
            ($m:expr, |$l:ident| $body:expr) => {{
                let mut mm: u32 = $m;
                while mm != 0 {
                    let $l = mm.trailing_zeros() as usize;
                    mm &= mm - 1;
                    $body;
                }
            }};
        }
        while f_n > 0 {
            // Take the lowest pc (jumps go forward only, so nothing can join it later).
            let mut k = 0;
            for i in 1..f_n {
                if f_pc[i] < f_pc[k] {
                    k = i;
                }
            }
            let mut pc = usize::from(f_pc[k]);
            let mut m = f_m[k];
            f_n -= 1;
            f_pc[k] = f_pc[f_n];
            f_m[k] = f_m[f_n];
            // Run this group straight on while it stays together.
            loop {
                // SAFETY: validation keeps every reachable pc in range (as in `exec`).
                let op = unsafe { *ops.get_unchecked(pc) };
                pc += 1;
                // A load that falls off the end of a packet ends that packet with 0.
                macro_rules! load {
                    ($f:ident, $off:expr, $dst:ident) => {
                        lanes!(m, |l| match $f(pkts[l], $off(l)) {
                            Some(v) => $dst[l] = v,
                            None => {
                                out[l] = 0;
                                m &= !(1 << l);
                            }
                        })
                    };
                }
                // Ends the lanes of `short` (their load fell off the packet) with 0.
                macro_rules! end_short {
                    ($short:expr) => {{
                        let short: u32 = $short;
                        lanes!(short, |l| out[l] = 0);
                        m &= !short;
                    }};
                }
                // When at least half the batch is in the group, visit every lane (cheaper per
                // lane, no serial walk over the mask); otherwise only the group's lanes.
                let dense = m.count_ones() as usize * 2 >= n;
                // An absolute load into `a`.
                macro_rules! ld_abs {
                    ($w:literal, $f:ident, $k:expr) => {
                        if dense {
                            end_short!(dense_load::<$w>(pkts, m, $k, &mut a))
                        } else {
                            load!($f, |_| $k as u64, a)
                        }
                    };
                }
                // Splits the group on a condition of `a`; returns (true target, true lanes,
                // false target, false lanes).
                macro_rules! dsplit {
                    ($t:expr, $f:expr, $cond:expr) => {{
                        let cond = $cond;
                        let yes = if dense {
                            dense_mask(n, &a, cond)
                        } else {
                            let mut y = 0u32;
                            lanes!(m, |l| y |= u32::from(cond(a[l])) << l);
                            y
                        };
                        ($t, m & yes, $f, m & !yes)
                    }};
                }
                // Splits the group on a condition; returns the (true, false) masks.
                macro_rules! split {
                    (|$l:ident| $cond:expr) => {{
                        let mut t: u32 = 0;
                        lanes!(m, |$l| if $cond {
                            t |= 1 << $l
                        });
                        (t, m & !t)
                    }};
                }
                let mut jump: Option<(u16, u32, u16, u32)> = None;
                match op {
                    Op::LdW(k) => ld_abs!(4, load_w, k),
                    Op::LdH(k) => ld_abs!(2, load_h, k),
                    Op::LdB(k) => ld_abs!(1, load_b, k),
                    Op::LdIndW(k) => load!(load_w, |l: usize| x[l] as u64 + k as u64, a),
                    Op::LdIndH(k) => load!(load_h, |l: usize| x[l] as u64 + k as u64, a),
                    Op::LdIndB(k) => load!(load_b, |l: usize| x[l] as u64 + k as u64, a),
                    Op::LdLen => lanes!(m, |l| a[l] = pkts[l].len() as u32),
                    Op::LdImm(k) => lanes!(m, |l| a[l] = k),
                    Op::LdxImm(k) => lanes!(m, |l| x[l] = k),
                    Op::LdxLen => lanes!(m, |l| x[l] = pkts[l].len() as u32),
                    Op::LdxMsh(k) => {
                        load!(load_b, |_| k as u64, x);
                        lanes!(m, |l| x[l] = (x[l] & 0xf) << 2);
                    }
                    // Programs with scratch memory take the per-packet path.
                    Op::LdMem(_) | Op::LdxMem(_) | Op::St(_) | Op::Stx(_) => {}
                    Op::AddK(k) => lanes!(m, |l| a[l] = a[l].wrapping_add(k)),
                    Op::SubK(k) => lanes!(m, |l| a[l] = a[l].wrapping_sub(k)),
                    Op::MulK(k) => lanes!(m, |l| a[l] = a[l].wrapping_mul(k)),
                    Op::DivK(k) => lanes!(m, |l| a[l] = a[l].checked_div(k).unwrap_or(0)),
                    Op::ModK(k) => lanes!(m, |l| a[l] = a[l].checked_rem(k).unwrap_or(0)),
                    Op::AndK(k) => lanes!(m, |l| a[l] &= k),
                    Op::OrK(k) => lanes!(m, |l| a[l] |= k),
                    Op::XorK(k) => lanes!(m, |l| a[l] ^= k),
                    Op::LshK(k) => lanes!(m, |l| a[l] = a[l].checked_shl(k).unwrap_or(0)),
                    Op::RshK(k) => lanes!(m, |l| a[l] = a[l].checked_shr(k).unwrap_or(0)),
                    Op::AddX => lanes!(m, |l| a[l] = a[l].wrapping_add(x[l])),
                    Op::SubX => lanes!(m, |l| a[l] = a[l].wrapping_sub(x[l])),
                    Op::MulX => lanes!(m, |l| a[l] = a[l].wrapping_mul(x[l])),
                    Op::DivX | Op::ModX => lanes!(m, |l| {
                        let r = if matches!(op, Op::DivX) {
                            a[l].checked_div(x[l])
                        } else {
                            a[l].checked_rem(x[l])
                        };
                        match r {
                            Some(v) => a[l] = v,
                            None => {
                                out[l] = 0;
                                m &= !(1 << l);
                            }
                        }
                    }),
                    Op::AndX => lanes!(m, |l| a[l] &= x[l]),
                    Op::OrX => lanes!(m, |l| a[l] |= x[l]),
                    Op::XorX => lanes!(m, |l| a[l] ^= x[l]),
                    Op::LshX => lanes!(m, |l| a[l] = a[l].checked_shl(x[l]).unwrap_or(0)),
                    Op::RshX => lanes!(m, |l| a[l] = a[l].checked_shr(x[l]).unwrap_or(0)),
                    Op::Neg => lanes!(m, |l| a[l] = a[l].wrapping_neg()),
                    Op::Tax => lanes!(m, |l| x[l] = a[l]),
                    Op::Txa => lanes!(m, |l| a[l] = x[l]),
                    Op::Ja(t) => pc = usize::from(t),
                    Op::JeqK(k, t, f) => jump = Some(dsplit!(t, f, |v| v == k)),
                    Op::JgtK(k, t, f) => jump = Some(dsplit!(t, f, |v| v > k)),
                    Op::JgeK(k, t, f) => jump = Some(dsplit!(t, f, |v| v >= k)),
                    Op::JsetK(k, t, f) => jump = Some(dsplit!(t, f, |v| v & k != 0)),
                    Op::JeqX(t, f) => {
                        let (mt, mf) = split!(|l| a[l] == x[l]);
                        jump = Some((t, mt, f, mf));
                    }
                    Op::JgtX(t, f) => {
                        let (mt, mf) = split!(|l| a[l] > x[l]);
                        jump = Some((t, mt, f, mf));
                    }
                    Op::JgeX(t, f) => {
                        let (mt, mf) = split!(|l| a[l] >= x[l]);
                        jump = Some((t, mt, f, mf));
                    }
                    Op::JsetX(t, f) => {
                        let (mt, mf) = split!(|l| a[l] & x[l] != 0);
                        jump = Some((t, mt, f, mf));
                    }
                    Op::LdHJeq(k, v, t, f) => {
                        ld_abs!(2, load_h, k);
                        jump = Some(dsplit!(t, f, |x| x == v));
                    }
                    Op::LdBJeq(k, v, t, f) => {
                        ld_abs!(1, load_b, k);
                        jump = Some(dsplit!(t, f, |x| x == v));
                    }
                    Op::LdWJeq(k, v, t, f) => {
                        ld_abs!(4, load_w, k);
                        jump = Some(dsplit!(t, f, |x| x == v));
                    }
                    Op::RetK(k) => {
                        if m == full {
                            out[..n].fill(k);
                        } else {
                            lanes!(m, |l| out[l] = k);
                        }
                        m = 0;
                    }
                    Op::RetA => {
                        lanes!(m, |l| out[l] = a[l]);
                        m = 0;
                    }
                }
                if let Some((t, mt, fl, mf)) = jump {
                    // Continue with whichever side has lanes, parking the other (merged
                    // with lanes already waiting there).
                    let (go, gm, park, pm) = if mt != 0 { (t, mt, fl, mf) } else { (fl, mf, t, mt) };
                    if pm != 0 {
                        match f_pc[..f_n].iter().position(|&p| p == park) {
                            Some(i) => f_m[i] |= pm,
                            None => {
                                f_pc[f_n] = park;
                                f_m[f_n] = pm;
                                f_n += 1;
                            }
                        }
                    }
                    pc = usize::from(go);
                    m = gm;
                }
                if m == 0 {
                    break;
                }
                // Lanes parked at the pc we move to join us now.
                if let Some(i) = f_pc[..f_n].iter().position(|&p| usize::from(p) == pc) {
                    m |= f_m[i];
                    f_n -= 1;
                    f_pc[i] = f_pc[f_n];
                    f_m[i] = f_m[f_n];
                }
                // A parked group with a lower pc must run first (it may jump to ours).
                if f_pc[..f_n].iter().any(|&p| usize::from(p) < pc) {
                    f_pc[f_n] = pc as u16;
                    f_m[f_n] = m;
                    f_n += 1;
                    break;
                }
            }
        }
    }

    /// Runs the program on the captured bytes `pkt` of a packet whose length on the wire
    /// was `wirelen` (what `len`/`ld #pktlen` sees).
    #[inline]
    pub fn run_wirelen(&self, pkt: &[u8], wirelen: u32) -> u32 {
        match &self.jit {
            Some(j) => j.run(pkt, wirelen),
            None => self.run_interpreted(pkt, wirelen),
        }
    }

    /// [`Program::run_wirelen`] with the interpreter, even if the program is compiled.
    #[inline]
    pub fn run_interpreted(&self, pkt: &[u8], wirelen: u32) -> u32 {
        if self.uses_mem {
            self.exec::<true>(pkt, wirelen)
        } else {
            self.exec::<false>(pkt, wirelen)
        }
    }

    /// The interpreter. With `MEM = false` (no instruction touches scratch memory, checked
    /// in [`Program::new`]) the scratch memory is never read or written, so the compiler
    /// drops its zeroing from every run.
    fn exec<const MEM: bool>(&self, pkt: &[u8], wirelen: u32) -> u32 {
        let ops = &*self.ops;
        let mut a: u32 = 0;
        let mut x: u32 = 0;
        let mut mem = [0u32; 16];
        let mut pc: usize = 0;
        macro_rules! ld {
            ($e:expr) => {
                match $e {
                    Some(v) => v,
                    None => return 0,
                }
            };
        }
        loop {
            debug_assert!(pc < ops.len());
            // SAFETY: validation guarantees `pc` stays in range: every jump target (absolute,
            // decoded from validated forward offsets) is inside the program, and the last
            // instruction is a `ret`, so falling through never passes the end.
            let op = unsafe { *ops.get_unchecked(pc) };
            pc += 1;
            match op {
                Op::LdW(k) => a = ld!(load_w(pkt, k as u64)),
                Op::LdH(k) => a = ld!(load_h(pkt, k as u64)),
                Op::LdB(k) => a = ld!(load_b(pkt, k as u64)),
                Op::LdIndW(k) => a = ld!(load_w(pkt, x as u64 + k as u64)),
                Op::LdIndH(k) => a = ld!(load_h(pkt, x as u64 + k as u64)),
                Op::LdIndB(k) => a = ld!(load_b(pkt, x as u64 + k as u64)),
                Op::LdLen => a = wirelen,
                Op::LdImm(k) => a = k,
                Op::LdMem(i) => a = if MEM { mem[i as usize & 15] } else { 0 },
                Op::LdxImm(k) => x = k,
                Op::LdxMem(i) => x = if MEM { mem[i as usize & 15] } else { 0 },
                Op::LdxLen => x = wirelen,
                Op::LdxMsh(k) => x = (ld!(load_b(pkt, k as u64)) & 0xf) << 2,
                Op::St(i) => {
                    if MEM {
                        mem[i as usize & 15] = a;
                    }
                }
                Op::Stx(i) => {
                    if MEM {
                        mem[i as usize & 15] = x;
                    }
                }
                Op::AddK(k) => a = a.wrapping_add(k),
                Op::SubK(k) => a = a.wrapping_sub(k),
                Op::MulK(k) => a = a.wrapping_mul(k),
                Op::DivK(k) => a = a.checked_div(k).unwrap_or(0),
                Op::ModK(k) => a = a.checked_rem(k).unwrap_or(0),
                Op::AndK(k) => a &= k,
                Op::OrK(k) => a |= k,
                Op::XorK(k) => a ^= k,
                Op::LshK(k) => a = a.checked_shl(k).unwrap_or(0),
                Op::RshK(k) => a = a.checked_shr(k).unwrap_or(0),
                Op::AddX => a = a.wrapping_add(x),
                Op::SubX => a = a.wrapping_sub(x),
                Op::MulX => a = a.wrapping_mul(x),
                Op::DivX => match a.checked_div(x) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::ModX => match a.checked_rem(x) {
                    Some(v) => a = v,
                    None => return 0,
                },
                Op::AndX => a &= x,
                Op::OrX => a |= x,
                Op::XorX => a ^= x,
                Op::LshX => a = a.checked_shl(x).unwrap_or(0),
                Op::RshX => a = a.checked_shr(x).unwrap_or(0),
                Op::Neg => a = a.wrapping_neg(),
                Op::Ja(t) => pc = t as usize,
                Op::JeqK(k, t, f) => pc = if a == k { t } else { f } as usize,
                Op::JgtK(k, t, f) => pc = if a > k { t } else { f } as usize,
                Op::JgeK(k, t, f) => pc = if a >= k { t } else { f } as usize,
                Op::JsetK(k, t, f) => pc = if a & k != 0 { t } else { f } as usize,
                Op::JeqX(t, f) => pc = if a == x { t } else { f } as usize,
                Op::JgtX(t, f) => pc = if a > x { t } else { f } as usize,
                Op::JgeX(t, f) => pc = if a >= x { t } else { f } as usize,
                Op::JsetX(t, f) => pc = if a & x != 0 { t } else { f } as usize,
                Op::LdHJeq(k, v, t, f) => {
                    a = ld!(load_h(pkt, k as u64));
                    pc = if a == v { t } else { f } as usize;
                }
                Op::LdBJeq(k, v, t, f) => {
                    a = ld!(load_b(pkt, k as u64));
                    pc = if a == v { t } else { f } as usize;
                }
                Op::LdWJeq(k, v, t, f) => {
                    a = ld!(load_w(pkt, k as u64));
                    pc = if a == v { t } else { f } as usize;
                }
                Op::RetK(k) => return k,
                Op::RetA => return a,
                Op::Tax => x = a,
                Op::Txa => a = x,
            }
        }
    }
}
