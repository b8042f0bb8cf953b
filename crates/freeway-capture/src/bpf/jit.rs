//! An x86-64 JIT for validated classic BPF programs.
//!
//! [`JitCode::compile`] translates a program into x86-64 machine code with three entry points:
//!
//! * **one packet** (`extern "sysv64" fn(pkt, caplen, wirelen, mem) -> u32`), used by
//!   [`crate::Program::run_wirelen`];
//! * **a batch of slices** (`extern "sysv64" fn(slices, n, out, mem) -> u32`), used by
//!   [`crate::Program::run_batch`]: the loop over the batch is in the generated code, the
//!   program body inlined in it, so a batch costs one indirect call and each packet only
//!   the program's own instructions plus a few of loop control. It returns the bitwise OR
//!   of the results, so a caller learns "nothing matched" without scanning them.
//! * **a batch of packets** (`extern "sysv64" fn(packets, n, out, mem) -> u32`), used by
//!   [`crate::Program::run_packets`]: the same loop, reading each frame's address and
//!   length straight from the `freeway_packet::Packet`s at the offsets of
//!   `Packet::frame_layout` (found at run time; without it this entry is not emitted), so
//!   the taps need not gather an array of slices first.
//!
//! # Semantics
//!
//! Exactly those of the interpreter ([`super::vm`]), checked by the differential tests in
//! `tests/jit.rs` and the `bpf_jit` fuzz target: every packet load (`ld`/`ldh`/`ldb` absolute
//! and `x`-indexed, `ldxb 4*([k]&0xf)`) is bounds-checked against the captured length with
//! 64-bit arithmetic (`x + k` cannot wrap) and ends the run with 0 when it reaches past the
//! end; `div`/`mod` by `x == 0` end the run with 0; shifts by `x >= 32` give 0 (x86 would
//! shift by `x & 31`: the generated code tests and selects 0); arithmetic wraps, comparisons
//! are unsigned; A, X and (for programs that use it) the 16-word scratch memory start at 0.
//!
//! Code shape: every `ret` (and the fail path) is emitted in place with what follows it in
//! its entry (`ret`, or store the result, step to the next packet and loop), and a jump to
//! a `ret` is replaced by that copy, so a packet that falls through its program takes one
//! branch, the loop's; A and X are zeroed only if the program may read them before writing them
//! (liveness, one backward pass: jumps only go forward); when the program has absolute loads,
//! one comparison of the captured length with the furthest of them selects a copy of the
//! body without per-load bounds checks (else the copy with them runs); an `ld`/`ldh [k]`
//! whose value only feeds the `jeq`/`jset #c` right after it is compared unswapped with the
//! byte-swapped constant.
//!
//! Register use inside the generated code: `eax` = A, `ecx` = X (so `shl eax, cl` shifts by
//! X), `rdi` = packet, `rsi` = captured length, `r9d` = wire length, `r8` = scratch memory,
//! `edx`/`r10`/`r11` temporaries; a batch loop keeps the current descriptor in `rbx`, the
//! count up to 0 in `r12`, the end of `out` in `r13` and the OR of the results in `r14`
//! (callee-saved, pushed and popped). No stack beyond that, no calls out.
//!
//! # Why hand-written
//!
//! The instruction set is small (about 40 encodings, all listed below with their bytes), so
//! a tiny assembler emitting fixed encodings is less code and fewer assumptions than pulling
//! in an assembler crate (`dynasmrt` needs a proc-macro for its syntax and brings its own
//! executable-memory management, which we would still have to audit); the code pages come
//! from `memmap2` (an anonymous mapping, then `make_exec`: read + execute, no longer writable).
//!
//! # Safety invariants
//!
//! * **Only validated programs are compiled**: [`JitCode::compile`] runs
//!   [`super::validate()`] itself and refuses anything else. Validation gives what the
//!   generated code relies on to stay inside itself: every jump goes forward to an
//!   instruction of the program, the last instruction is a `ret`, scratch indices are below
//!   16, no division or modulo by the constant 0, no constant shift of 32 or more.
//! * **W^X**: the code is written into an anonymous private mapping that is readable and
//!   writable only, then `mprotect`ed to read + execute before any pointer to it is handed
//!   out. It is never writable and executable at once, and never written again.
//! * **Lifetime**: the mapping belongs to its [`JitCode`], which [`crate::Program`] holds in
//!   an `Arc`; it is unmapped when the last `Program` sharing it is dropped. A tap's program
//!   lives in its [`crate::Filter`], itself in a tap list that workers hold by `Arc` (see
//!   [`crate::tap`]): a worker running the old list's code holds that list, so the list,
//!   the filter, the program and its code are freed only after every worker let go of it.
//! * **Memory accessed** by the generated code: the packet bytes `[pkt, pkt + caplen)` (each
//!   access checked), the 64-byte scratch buffer passed in, and for a batch entry the
//!   `n` slice descriptors or packets and `n` output words passed in. Nothing else. (The
//!   packets entry trusts `Packet`'s invariant, `start + len` inside the buffer.)
//!
//! On targets other than x86-64 Unix, or when mapping executable memory fails (a policy such
//! as SELinux `execmem` may forbid it), [`JitCode::compile`] returns `None` and the program
//! is interpreted.
//!
//! Threads: a [`JitCode`] is immutable once built; any number of threads may run it at once.

use super::insn::{op::*, Insn};

/// Machine code emitted for a program (not yet executable): the bytes and the offsets of the
/// two entry points.
#[derive(Clone, Debug)]
pub struct Emitted {
    /// The code.
    pub code: Vec<u8>,
    /// Offset of the one-packet entry.
    pub one: usize,
    /// Offset of the batch entry over `&[u8]` slices.
    pub batch: usize,
    /// Offset of the batch entry over `freeway_packet::Packet`s (`None` if their layout is
    /// not known: [`freeway_packet::Packet::frame_layout`]).
    pub packets: Option<usize>,
}

/// A label: an index into [`Asm::labels`].
type Label = usize;

/// How a `ret` (and the fail path) leaves the program body.
#[derive(Clone, Copy)]
enum Exit {
    /// The one-packet entry: the value in `eax`, then `ret`.
    Return,
    /// A batch entry: store the value in `out[i]`, OR it into `r14d`, step to the next
    /// descriptor (`stride` bytes on) and loop (`top`) or leave the loop (`exit`). Emitted at
    /// every return site (tail duplication), so a packet costs one taken branch (the
    /// loop's) on any path that falls through to its `ret`.
    Batch { top: Label, exit: Label, stride: u32 },
}

/// The assembler: bytes, label positions and rel32 fixups.
struct Asm {
    code: Vec<u8>,
    labels: Vec<Option<usize>>,
    /// (position of a rel32 field, label it points to)
    fixups: Vec<(usize, Label)>,
}

// Condition codes (second byte of `0F 8x` jcc).
const JB: u8 = 0x82;
const JAE: u8 = 0x83;
const JE: u8 = 0x84;
const JNE: u8 = 0x85;
const JBE: u8 = 0x86;
const JA_: u8 = 0x87;

// The registers A and X live in (ModRM numbers).
const EAX: u8 = 0;
const ECX: u8 = 1;

impl Asm {
    fn new() -> Asm {
        Asm {
            code: Vec::with_capacity(1024),
            labels: Vec::new(),
            fixups: Vec::new(),
        }
    }

    fn label(&mut self) -> Label {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn labels(&mut self, n: usize) -> Label {
        let first = self.labels.len();
        self.labels.resize(first + n, None);
        first
    }

    fn bind(&mut self, l: Label) {
        debug_assert!(self.labels[l].is_none());
        self.labels[l] = Some(self.code.len());
    }

    fn b(&mut self, bytes: &[u8]) {
        self.code.extend_from_slice(bytes);
    }

    fn u32(&mut self, v: u32) {
        self.code.extend_from_slice(&v.to_le_bytes());
    }

    fn rel32(&mut self, l: Label) {
        self.fixups.push((self.code.len(), l));
        self.u32(0);
    }

    /// `jmp rel32`.
    fn jmp(&mut self, l: Label) {
        self.b(&[0xE9]);
        self.rel32(l);
    }

    /// `jcc rel32`.
    fn jcc(&mut self, cc: u8, l: Label) {
        self.b(&[0x0F, cc]);
        self.rel32(l);
    }

    /// Leaves the body with `val` (a constant, or A when `None`) as `exit` says.
    fn ret(&mut self, exit: Exit, val: Option<u32>) {
        match (exit, val) {
            (Exit::Return, Some(k)) => {
                if k == 0 {
                    // xor eax, eax
                    self.b(&[0x31, 0xC0]);
                } else {
                    // mov eax, imm32
                    self.b(&[0xB8]);
                    self.u32(k);
                }
                self.b(&[0xC3]);
            }
            (Exit::Return, None) => self.b(&[0xC3]),
            (Exit::Batch { top, exit, stride }, v) => {
                match v {
                    Some(k) => {
                        // mov dword [r13 + r12*4], imm32
                        self.b(&[0x43, 0xC7, 0x44, 0xA5, 0x00]);
                        self.u32(k);
                        if k != 0 {
                            // or r14d, imm32
                            self.b(&[0x41, 0x81, 0xCE]);
                            self.u32(k);
                        }
                    }
                    // mov [r13 + r12*4], eax ; or r14d, eax
                    None => self.b(&[0x43, 0x89, 0x44, 0xA5, 0x00, 0x41, 0x09, 0xC6]),
                }
                // add rbx, imm32 ; add r12, 1 ; jnz top ; jmp exit
                self.b(&[0x48, 0x81, 0xC3]);
                self.u32(stride);
                self.b(&[0x49, 0x83, 0xC4, 0x01]);
                self.jcc(JNE, top);
                self.jmp(exit);
            }
        }
    }

    /// Resolves the fixups; every label used must be bound.
    fn finish(mut self) -> Vec<u8> {
        for &(pos, l) in &self.fixups {
            let target = self.labels[l].expect("unbound label") as i64;
            let rel = target - (pos as i64 + 4);
            let rel = i32::try_from(rel).expect("code larger than 2 GiB");
            self.code[pos..pos + 4].copy_from_slice(&rel.to_le_bytes());
        }
        self.code
    }

    /// Fails (jumps to `fail`) unless `end <= caplen` (`rsi`).
    fn check_end_const(&mut self, end: u64, fail: Label) {
        if end <= i32::MAX as u64 {
            // cmp rsi, imm32
            self.b(&[0x48, 0x81, 0xFE]);
            self.u32(end as u32);
        } else {
            // mov r10, imm64 ; cmp rsi, r10
            self.b(&[0x49, 0xBA]);
            self.code.extend_from_slice(&end.to_le_bytes());
            self.b(&[0x4C, 0x39, 0xD6]);
        }
        // jb fail  (caplen < end)
        self.jcc(JB, fail);
    }

    /// Loads `size` (W, H or B) bytes at the constant offset `k` into `dst` (EAX or ECX),
    /// big-endian, zero-extended; bounds-checked.
    ///
    /// Without `check`, the caller guarantees the bytes are in the packet; without `swap`,
    /// the bytes are left in memory order.
    fn load_abs(&mut self, size: u16, k: u32, dst: u8, fail: Label, check: bool, swap: bool) {
        let w = width(size);
        if check {
            self.check_end_const(u64::from(k) + w, fail);
        }
        let op: &[u8] = load_opcode(size);
        if k <= i32::MAX as u32 {
            // op dst, [rdi + disp32]
            self.b(op);
            self.b(&[0x80 | dst << 3 | 7]);
            self.u32(k);
        } else {
            // mov r10d, imm32 (zero-extends) ; op dst, [rdi + r10]
            self.b(&[0x41, 0xBA]);
            self.u32(k);
            self.load_rdi_r10(op, dst);
        }
        if swap {
            self.fix_endian(size, dst);
        }
    }

    /// `op dst, [rdi + r10]`.
    fn load_rdi_r10(&mut self, op: &[u8], dst: u8) {
        // REX.X for the r10 index, before the opcode (and before any 0F escape).
        self.b(&[0x42]);
        self.b(op);
        self.b(&[dst << 3 | 4, 0x17]);
    }

    fn fix_endian(&mut self, size: u16, dst: u8) {
        match size {
            // bswap dst
            W => self.b(&[0x0F, 0xC8 + dst]),
            // rol dst16, 8 (the upper half stays zero from movzx)
            H => self.b(&[0x66, 0xC1, 0xC0 + dst, 0x08]),
            _ => {}
        }
    }

    /// Loads `size` bytes at `x + k` into A; bounds-checked in 64 bits.
    fn load_ind(&mut self, size: u16, k: u32, fail: Label) {
        let w = width(size) as u8;
        // mov r10d, ecx (zero-extends X)
        self.b(&[0x41, 0x89, 0xCA]);
        if k != 0 {
            if k <= i32::MAX as u32 {
                // add r10, imm32
                self.b(&[0x49, 0x81, 0xC2]);
                self.u32(k);
            } else {
                // mov r11d, imm32 ; add r10, r11
                self.b(&[0x41, 0xBB]);
                self.u32(k);
                self.b(&[0x4D, 0x01, 0xDA]);
            }
        }
        // lea r11, [r10 + w] ; cmp r11, rsi ; ja fail
        self.b(&[0x4D, 0x8D, 0x5A, w]);
        self.b(&[0x49, 0x39, 0xF3]);
        self.jcc(JA_, fail);
        self.load_rdi_r10(load_opcode(size), EAX);
        self.fix_endian(size, EAX);
    }
}

fn width(size: u16) -> u64 {
    match size {
        W => 4,
        H => 2,
        _ => 1,
    }
}

/// `mov r32, r/m32` / `movzx r32, r/m16` / `movzx r32, r/m8`.
fn load_opcode(size: u16) -> &'static [u8] {
    match size {
        W => &[0x8B],
        H => &[0x0F, 0xB7],
        _ => &[0x0F, 0xB6],
    }
}

/// What the code generator knows about a program beyond its instructions.
struct Facts {
    /// Whether any instruction touches scratch memory.
    uses_mem: bool,
    /// Whether any instruction reads the wire length (`ld`/`ldx #pktlen`).
    uses_len: bool,
    /// Per instruction: registers live before it (bit 0 = A, bit 1 = X).
    live_in: Vec<u8>,
    /// Per instruction: whether some jump lands on it.
    target: Vec<bool>,
    /// The furthest end (offset + width) of any absolute packet load, if there is one.
    max_abs_end: Option<u64>,
}

const LIVE_A: u8 = 1;
const LIVE_X: u8 = 2;

impl Facts {
    /// Analyses a validated program. Jumps only go forward, so one backward pass computes
    /// liveness exactly.
    fn of(prog: &[Insn]) -> Facts {
        let n = prog.len();
        let mut live_in = vec![0u8; n];
        let mut target = vec![false; n];
        let mut max_abs_end = None::<u64>;
        let mut uses_mem = false;
        let mut uses_len = false;
        for (pc, i) in prog.iter().enumerate().rev() {
            let c = i.code;
            let next = |d: usize| live_in.get(pc + 1 + d).copied().unwrap_or(0);
            // (uses, defs, live after)
            let (uses, defs, out) = match class(c) {
                LD => {
                    if matches!(mode(c), ABS) {
                        let end = u64::from(i.k) + width(size(c));
                        max_abs_end = Some(max_abs_end.map_or(end, |m| m.max(end)));
                    }
                    uses_mem |= mode(c) == MEM;
                    uses_len |= mode(c) == LEN;
                    (if mode(c) == IND { LIVE_X } else { 0 }, LIVE_A, next(0))
                }
                LDX => {
                    if mode(c) == MSH {
                        let end = u64::from(i.k) + 1;
                        max_abs_end = Some(max_abs_end.map_or(end, |m| m.max(end)));
                    }
                    uses_mem |= mode(c) == MEM;
                    uses_len |= mode(c) == LEN;
                    (0, LIVE_X, next(0))
                }
                ST => {
                    uses_mem = true;
                    (LIVE_A, 0, next(0))
                }
                STX => {
                    uses_mem = true;
                    (LIVE_X, 0, next(0))
                }
                ALU => {
                    let x = if aluop(c) != NEG && src(c) == X { LIVE_X } else { 0 };
                    (LIVE_A | x, LIVE_A, next(0))
                }
                JMP => {
                    if aluop(c) == JA {
                        (0, 0, next(i.k as usize))
                    } else {
                        let x = if src(c) == X { LIVE_X } else { 0 };
                        (LIVE_A | x, 0, next(i.jt as usize) | next(i.jf as usize))
                    }
                }
                RET => (if rval(c) == A { LIVE_A } else { 0 }, 0, 0),
                _ => {
                    if c & 0xf8 == TXA {
                        (LIVE_X, LIVE_A, next(0))
                    } else {
                        (LIVE_A, LIVE_X, next(0))
                    }
                }
            };
            live_in[pc] = uses | (out & !defs);
        }
        for (pc, i) in prog.iter().enumerate() {
            if class(i.code) == JMP {
                if aluop(i.code) == JA {
                    target[pc + 1 + i.k as usize] = true;
                } else {
                    target[pc + 1 + i.jt as usize] = true;
                    target[pc + 1 + i.jf as usize] = true;
                }
            }
        }
        Facts {
            uses_mem,
            uses_len,
            live_in,
            target,
            max_abs_end,
        }
    }

    /// Whether A is live after the conditional jump at `pc`.
    fn a_live_after_jump(&self, prog: &[Insn], pc: usize) -> bool {
        let i = prog[pc];
        (self.live_in[pc + 1 + i.jt as usize] | self.live_in[pc + 1 + i.jf as usize]) & LIVE_A != 0
    }
}

/// Emits the program. Entered with `rdi` = packet, `rsi` = captured length, `r9d` = wire
/// length (if the program reads it), `r8` = scratch memory; every `ret`, and every failed
/// load or division (through the fail path, with 0), leaves as `exit` says.
///
/// A and X are zeroed first if the program may read them before writing them, the scratch
/// memory if the program uses it. When the program has absolute loads, one comparison of
/// the captured length with the furthest of them picks between two copies of the body: one
/// without bounds checks on absolute loads (every one of them is in bounds) and one with.
fn program(a: &mut Asm, prog: &[Insn], facts: &Facts, exit: Exit) {
    if facts.uses_mem {
        // xor eax, eax, then 8 × mov [r8 + 8i], rax
        a.b(&[0x31, 0xC0]);
        for i in 0..8u8 {
            a.b(&[0x49, 0x89, 0x40, i * 8]);
        }
    } else if facts.live_in[0] & LIVE_A != 0 {
        // xor eax, eax
        a.b(&[0x31, 0xC0]);
    }
    if facts.live_in[0] & LIVE_X != 0 {
        // xor ecx, ecx
        a.b(&[0x31, 0xC9]);
    }
    match facts.max_abs_end {
        Some(end) if end <= i32::MAX as u64 => {
            let checked = a.label();
            // cmp rsi, imm32 ; jb checked
            a.b(&[0x48, 0x81, 0xFE]);
            a.u32(end as u32);
            a.jcc(JB, checked);
            body(a, prog, facts, false, exit);
            a.bind(checked);
            body(a, prog, facts, true, exit);
        }
        _ => body(a, prog, facts, true, exit),
    }
}

/// Emits one copy of the body; with `checked` false, absolute loads are not bounds-checked
/// (the caller has checked the packet is long enough for all of them).
fn body(a: &mut Asm, prog: &[Insn], facts: &Facts, checked: bool, exit: Exit) {
    let n = prog.len();
    let at = a.labels(n);
    let fail = a.label();
    // The value a `ret` returns: a constant, or A (`None`).
    let ret_val = |i: &Insn| if rval(i.code) != A { Some(i.k) } else { None };
    // Goes to instruction `t`: a jump, or when `t` is a `ret`, its exit emitted in place
    // (A is the same here as there: a jump does not change it).
    let goto = |a: &mut Asm, t: usize| {
        if class(prog[t].code) == RET {
            a.ret(exit, ret_val(&prog[t]));
        } else {
            a.jmp(at + t);
        }
    };
    // Set when a load was emitted without its byte swap, the jump after it comparing with a
    // swapped constant instead.
    let mut raw_load = false;
    for (pc, i) in prog.iter().enumerate() {
        a.bind(at + pc);
        let c = i.code;
        let k = i.k;
        let was_raw = std::mem::take(&mut raw_load);
        match class(c) {
            LD => match mode(c) {
                ABS => {
                    // `ld`/`ldh [k]` feeding only the `jeq`/`jset #k` right after it (no other
                    // path reaches that jump, A is dead after it): compare the loaded bytes as
                    // they are with the constant byte-swapped, saving the swap.
                    let j = prog.get(pc + 1);
                    raw_load = matches!(size(c), W | H)
                        && j.is_some_and(|j| {
                            class(j.code) == JMP && src(j.code) == K && matches!(aluop(j.code), JEQ | JSET)
                        })
                        && !facts.target[pc + 1]
                        && !facts.a_live_after_jump(prog, pc + 1);
                    a.load_abs(size(c), k, EAX, fail, checked, !raw_load);
                }
                IND => a.load_ind(size(c), k, fail),
                // mov eax, r9d
                LEN => a.b(&[0x44, 0x89, 0xC8]),
                IMM => {
                    // mov eax, imm32
                    a.b(&[0xB8]);
                    a.u32(k);
                }
                // mov eax, [r8 + 4k]
                _ => a.b(&[0x41, 0x8B, 0x40, (k * 4) as u8]),
            },
            LDX => match mode(c) {
                IMM => {
                    // mov ecx, imm32
                    a.b(&[0xB9]);
                    a.u32(k);
                }
                // mov ecx, [r8 + 4k]
                MEM => a.b(&[0x41, 0x8B, 0x48, (k * 4) as u8]),
                // mov ecx, r9d
                LEN => a.b(&[0x44, 0x89, 0xC9]),
                _ => {
                    // ldxb 4*([k]&0xf): movzx ecx, byte [k] ; and ecx, 0xf ; shl ecx, 2
                    a.load_abs(B, k, ECX, fail, checked, true);
                    a.b(&[0x83, 0xE1, 0x0F, 0xC1, 0xE1, 0x02]);
                }
            },
            // mov [r8 + 4k], eax
            ST => a.b(&[0x41, 0x89, 0x40, (k * 4) as u8]),
            // mov [r8 + 4k], ecx
            STX => a.b(&[0x41, 0x89, 0x48, (k * 4) as u8]),
            ALU => alu(a, c, k, fail),
            JMP => {
                let next = pc + 1;
                if aluop(c) == JA {
                    if k != 0 {
                        goto(a, next + k as usize);
                    }
                    continue;
                }
                let t = next + i.jt as usize;
                let f = next + i.jf as usize;
                if t == f {
                    if t != next {
                        goto(a, t);
                    }
                    continue;
                }
                let x = src(c) == X;
                // The constant to compare with: byte-swapped after a raw load (of a word or
                // a half-word, whose upper half is zero).
                let kk = if !was_raw {
                    k
                } else if size(prog[pc - 1].code) == W {
                    k.swap_bytes()
                } else if aluop(c) == JSET || k <= 0xffff {
                    (k as u16).swap_bytes() as u32
                } else {
                    // jeq with a constant over 0xffff after a half-word load: never equal,
                    // swapped or not.
                    k
                };
                // The compare; `cc` holds when the BPF condition does.
                // `test` (jset) or `cmp` (the others) of eax with ecx (X) or with imm32 (K).
                let (with_x, with_k, cc) = match aluop(c) {
                    JSET => ([0x85, 0xC8], 0xA9, JNE),
                    JEQ => ([0x39, 0xC8], 0x3D, JE),
                    JGT => ([0x39, 0xC8], 0x3D, JA_),
                    _ => ([0x39, 0xC8], 0x3D, JAE),
                };
                if x {
                    a.b(&with_x);
                } else {
                    a.b(&[with_k]);
                    a.u32(kk);
                }
                // The inverse condition flips the low bit of the x86 condition code.
                let inv = cc ^ 1;
                debug_assert!(matches!((cc, inv), (JE, JNE) | (JNE, JE) | (JA_, JBE) | (JAE, JB)));
                if t == next {
                    a.jcc(inv, at + f);
                } else if f == next {
                    a.jcc(cc, at + t);
                } else if class(prog[t].code) == RET && class(prog[f].code) != RET {
                    a.jcc(inv, at + f);
                    goto(a, t);
                } else {
                    a.jcc(cc, at + t);
                    goto(a, f);
                }
            }
            RET => a.ret(exit, ret_val(i)),
            _ => {
                if c & 0xf8 == TXA {
                    // mov eax, ecx
                    a.b(&[0x89, 0xC8]);
                } else {
                    // mov ecx, eax
                    a.b(&[0x89, 0xC1]);
                }
            }
        }
    }
    a.bind(fail);
    a.ret(exit, Some(0));
}

fn alu(a: &mut Asm, c: u16, k: u32, fail: Label) {
    let x = src(c) == X;
    match aluop(c) {
        // neg eax
        NEG => a.b(&[0xF7, 0xD8]),
        DIV | MOD => {
            if x {
                // test ecx, ecx ; jz fail ; xor edx, edx ; div ecx
                a.b(&[0x85, 0xC9]);
                a.jcc(JE, fail);
                a.b(&[0x31, 0xD2, 0xF7, 0xF1]);
            } else {
                // xor edx, edx ; mov r10d, imm32 ; div r10d   (k != 0: validated)
                a.b(&[0x31, 0xD2, 0x41, 0xBA]);
                a.u32(k);
                a.b(&[0x41, 0xF7, 0xF2]);
            }
            if aluop(c) == MOD {
                // mov eax, edx
                a.b(&[0x89, 0xD0]);
            }
        }
        LSH | RSH => {
            let ext = if aluop(c) == LSH { 0xE0 } else { 0xE8 };
            if x {
                // shl/shr eax, cl ; xor edx, edx ; cmp ecx, 32 ; cmovae eax, edx
                a.b(&[0xD3, ext, 0x31, 0xD2, 0x83, 0xF9, 0x20, 0x0F, 0x43, 0xC2]);
            } else {
                // shl/shr eax, imm8   (k < 32: validated)
                a.b(&[0xC1, ext, k as u8]);
            }
        }
        MUL => {
            if x {
                // imul eax, ecx
                a.b(&[0x0F, 0xAF, 0xC1]);
            } else {
                // imul eax, eax, imm32
                a.b(&[0x69, 0xC0]);
                a.u32(k);
            }
        }
        op => {
            // add/sub/and/or/xor: `OP eax, ecx` is (opcode, C8); `OP eax, imm32` is the
            // short accumulator form.
            let (rr, imm) = match op {
                ADD => (0x01, 0x05),
                SUB => (0x29, 0x2D),
                AND => (0x21, 0x25),
                OR => (0x09, 0x0D),
                _ => (0x31, 0x35),
            };
            if x {
                a.b(&[rr, 0xC8]);
            } else {
                a.b(&[imm]);
                a.u32(k);
            }
        }
    }
}

/// Emits the machine code of a program, or `None` if it does not validate.
pub fn emit(prog: &[Insn]) -> Option<Emitted> {
    super::validate(prog).ok()?;
    let facts = Facts::of(prog);
    let mut a = Asm::new();

    // Batch entry over `&[u8]` slices (pointer, length).
    let batch = batch_entry(&mut a, prog, &facts, SLICES);
    // Batch entry over packets, where their layout is known.
    let packets = freeway_packet::Packet::frame_layout().and_then(|l| {
        let d = Desc {
            stride: u32::try_from(l.size).ok()?,
            ptr: u32::try_from(l.ptr).ok()?,
            start: Some(u32::try_from(l.start).ok()?),
            len: u32::try_from(l.len).ok()?,
            len_wide: false,
        };
        Some(batch_entry(&mut a, prog, &facts, d))
    });

    // One-packet entry: (rdi = pkt, rsi = caplen, edx = wirelen, rcx = mem) -> eax.
    let one = a.code.len();
    // mov r9d, edx ; mov r8, rcx
    a.b(&[0x41, 0x89, 0xD1, 0x49, 0x89, 0xC8]);
    program(&mut a, prog, &facts, Exit::Return);

    Some(Emitted {
        code: a.finish(),
        one,
        batch,
        packets,
    })
}

/// Where a batch entry finds each packet: descriptors `stride` bytes apart, the data
/// pointer (8 bytes) at `ptr`, optionally a 16-bit offset to add to it at `start`, the
/// captured length at `len` (8 bytes if `len_wide`, else 2).
#[derive(Clone, Copy)]
struct Desc {
    stride: u32,
    ptr: u32,
    start: Option<u32>,
    len: u32,
    len_wide: bool,
}

/// `&[u8]` as (pointer, length); checked at run time before use (`slices_are_ptr_len`).
const SLICES: Desc = Desc {
    stride: 16,
    ptr: 0,
    start: None,
    len: 8,
    len_wide: true,
};

/// Emits a batch entry `(rdi = descriptors, rsi = n, rdx = out, rcx = mem) -> eax` over
/// descriptors laid out as `d` says; returns its offset. `rbx` walks the descriptors, `r12`
/// runs from -n up to 0, `out[i]` is at `[r13 + r12*4]` with `r13 = out + 4n`; `r14d`
/// collects the OR of the results, returned.
fn batch_entry(a: &mut Asm, prog: &[Insn], facts: &Facts, d: Desc) -> usize {
    let entry = a.code.len();
    let top = a.label();
    let exit = a.label();
    // push rbx ; push r12 ; push r13 ; push r14 ; mov r8, rcx ; xor r14d, r14d
    a.b(&[
        0x53, 0x41, 0x54, 0x41, 0x55, 0x41, 0x56, 0x49, 0x89, 0xC8, 0x45, 0x31, 0xF6,
    ]);
    // test rsi, rsi ; jz exit
    a.b(&[0x48, 0x85, 0xF6]);
    a.jcc(JE, exit);
    // mov rbx, rdi ; lea r13, [rdx + rsi*4] ; mov r12, rsi ; neg r12
    a.b(&[
        0x48, 0x89, 0xFB, 0x4C, 0x8D, 0x2C, 0xB2, 0x49, 0x89, 0xF4, 0x49, 0xF7, 0xDC,
    ]);
    a.bind(top);
    // mov rdi, [rbx + ptr]
    a.b(&[0x48, 0x8B, 0xBB]);
    a.u32(d.ptr);
    if let Some(start) = d.start {
        // movzx eax, word [rbx + start] ; add rdi, rax   (the program's prologue zeroes
        // eax, A, if the program may read A before writing it)
        a.b(&[0x0F, 0xB7, 0x83]);
        a.u32(start);
        a.b(&[0x48, 0x01, 0xC7]);
    }
    if d.len_wide {
        // mov rsi, [rbx + len]
        a.b(&[0x48, 0x8B, 0xB3]);
    } else {
        // movzx esi, word [rbx + len]
        a.b(&[0x0F, 0xB7, 0xB3]);
    }
    a.u32(d.len);
    if facts.uses_len {
        // mov r9d, esi
        a.b(&[0x41, 0x89, 0xF1]);
    }
    // Every path of the body ends in an exit (the program ends in a `ret`, validated), which
    // stores out[i], ORs it into r14d and loops.
    program(
        a,
        prog,
        facts,
        Exit::Batch {
            top,
            exit,
            stride: d.stride,
        },
    );
    a.bind(exit);
    // mov eax, r14d ; pop r14 ; pop r13 ; pop r12 ; pop rbx ; ret
    a.b(&[0x44, 0x89, 0xF0, 0x41, 0x5E, 0x41, 0x5D, 0x41, 0x5C, 0x5B, 0xC3]);
    entry
}

pub use imp::JitCode;

#[cfg(all(target_arch = "x86_64", unix))]
mod imp {
    use std::fmt;

    use freeway_packet::Packet;

    use super::emit;
    use crate::bpf::insn::Insn;

    type OneFn = unsafe extern "sysv64" fn(*const u8, usize, u32, *mut u32) -> u32;
    type BatchFn = unsafe extern "sysv64" fn(*const [usize; 2], usize, *mut u32, *mut u32) -> u32;
    type PacketsFn = unsafe extern "sysv64" fn(*const Packet, usize, *mut u32, *mut u32) -> u32;

    /// A program compiled to x86-64 machine code, in read + execute memory it owns.
    pub struct JitCode {
        /// The code pages (read + execute); unmapped when dropped.
        map: memmap2::Mmap,
        one: OneFn,
        batch: BatchFn,
        packets: Option<PacketsFn>,
        code_len: usize,
    }

    // `JitCode` is `Send + Sync` without an `unsafe impl`: the mapping (`memmap2::Mmap`) is
    // immutable (read + execute) for its whole life, and the generated functions keep no
    // state between calls (their scratch memory is the caller's), so any number of threads
    // may call them at once.

    impl fmt::Debug for JitCode {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("JitCode")
                .field("base", &self.map.as_ptr())
                .field("code_len", &self.code_len)
                .finish()
        }
    }

    /// Whether `&[u8]` is laid out as (pointer, length), the layout the batch entry reads
    /// its slice descriptors in. Rust does not promise it, so it is checked (at run time,
    /// folded to a constant by the optimiser); if it ever fails the batch entry is not used.
    #[inline(always)]
    fn slices_are_ptr_len() -> bool {
        let buf = [0u8; 3];
        let s: &[u8] = &buf[1..];
        // SAFETY: `&[u8]` and `[usize; 2]` have the same size (`transmute` checks it at
        // compile time) and every bit pattern is a valid `[usize; 2]`; reading a pointer's
        // address as an integer is allowed.
        let w: [usize; 2] = unsafe { std::mem::transmute::<&[u8], [usize; 2]>(s) };
        w[0] == s.as_ptr() as usize && w[1] == s.len()
    }

    impl JitCode {
        /// Compiles `prog`; `None` if it does not validate or executable memory cannot be
        /// mapped.
        pub fn compile(prog: &[Insn]) -> Option<JitCode> {
            let e = emit(prog)?;
            let mut map = memmap2::MmapMut::map_anon(e.code.len()).ok()?;
            map[..e.code.len()].copy_from_slice(&e.code);
            // Read + execute, no longer writable (W^X): `make_exec` is one mprotect system
            // call, so the writes above are complete and visible to every core before it
            // returns, and no core has executed from these fresh pages before. If the
            // policy forbids executable memory, the mapping is dropped (unmapped) here.
            let map = map.make_exec().ok()?;
            let base = map.as_ptr();
            // SAFETY: `one` and `batch` are the offsets of the two entry points emitted by
            // `emit`, inside the mapping, with exactly these signatures (sysv64 ABI:
            // arguments in rdi, rsi, rdx, rcx, result in eax; callee-saved registers
            // restored), emitted from a validated program (see the module doc).
            let (one, batch) = unsafe {
                (
                    std::mem::transmute::<*const u8, OneFn>(base.add(e.one)),
                    std::mem::transmute::<*const u8, BatchFn>(base.add(e.batch)),
                )
            };
            // SAFETY: as above; the packets entry reads each `Packet` at the offsets of
            // `Packet::frame_layout()`, which `emit` used.
            let packets = e
                .packets
                .map(|off| unsafe { std::mem::transmute::<*const u8, PacketsFn>(base.add(off)) });
            Some(JitCode {
                map,
                one,
                batch,
                packets,
                code_len: e.code.len(),
            })
        }

        /// Bytes of machine code.
        pub fn code_len(&self) -> usize {
            self.code_len
        }

        /// Runs on the captured bytes `pkt` of a packet `wirelen` bytes long on the wire.
        #[inline]
        pub fn run(&self, pkt: &[u8], wirelen: u32) -> u32 {
            let mut mem = [0u32; 16];
            // SAFETY: the code reads only `pkt[..pkt.len()]` (every access checked against
            // `pkt.len()`) and writes only the 16 words of `mem`; it returns (every path ends
            // in a `ret`, validated) without touching anything else (module doc).
            unsafe { (self.one)(pkt.as_ptr(), pkt.len(), wirelen, mem.as_mut_ptr()) }
        }

        /// Runs on each packet of `pkts` (whole packets), writing the results to
        /// `out[..pkts.len()]`; returns whether any result is non-zero.
        ///
        /// # Panics
        /// If `out` is shorter than `pkts`.
        #[inline]
        pub fn run_batch(&self, pkts: &[&[u8]], out: &mut [u32]) -> bool {
            let out = &mut out[..pkts.len()];
            if !slices_are_ptr_len() {
                let mut any = 0;
                for (o, p) in out.iter_mut().zip(pkts) {
                    *o = self.run(p, p.len() as u32);
                    any |= *o;
                }
                return any != 0;
            }
            let mut mem = [0u32; 16];
            // SAFETY: `pkts` is `pkts.len()` slice descriptors laid out as (ptr, len) (checked
            // just above); the code reads each packet only within its length, writes
            // `out[..pkts.len()]` (in bounds: `out` was sliced to that length) and the 16
            // words of `mem`, and returns the OR of what it wrote.
            let any = unsafe {
                (self.batch)(
                    pkts.as_ptr().cast::<[usize; 2]>(),
                    pkts.len(),
                    out.as_mut_ptr(),
                    mem.as_mut_ptr(),
                )
            };
            any != 0
        }

        /// [`JitCode::run_batch`] on the frames of `pkts`, read straight from the packets
        /// (no array of slices gathered first). `None` if this build's `Packet` layout is not
        /// known ([`Packet::frame_layout`]); the caller then gathers the frames itself.
        ///
        /// # Panics
        /// If `out` is shorter than `pkts`.
        #[inline]
        pub fn run_packets(&self, pkts: &[Packet], out: &mut [u32]) -> Option<bool> {
            let f = self.packets?;
            let out = &mut out[..pkts.len()];
            let mut mem = [0u32; 16];
            // SAFETY: the code reads the `pkts.len()` packets at the offsets of
            // `Packet::frame_layout()` (the layout of this build, found when the code was
            // emitted), and each one's frame only within its length (`start + len` is inside
            // the buffer: `Packet`'s invariant); it writes `out[..pkts.len()]` (in bounds:
            // sliced to that length) and the 16 words of `mem`, and returns the OR of what
            // it wrote.
            let any = unsafe { f(pkts.as_ptr(), pkts.len(), out.as_mut_ptr(), mem.as_mut_ptr()) };
            Some(any != 0)
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", unix)))]
mod imp {
    use crate::bpf::insn::Insn;

    /// Never built on this target: programs are interpreted.
    #[derive(Debug)]
    pub enum JitCode {}

    impl JitCode {
        /// Always `None` on this target.
        pub fn compile(_prog: &[Insn]) -> Option<JitCode> {
            None
        }

        /// Bytes of machine code.
        pub fn code_len(&self) -> usize {
            match *self {}
        }

        /// Unreachable (no value exists).
        pub fn run(&self, _pkt: &[u8], _wirelen: u32) -> u32 {
            match *self {}
        }

        /// Unreachable (no value exists).
        pub fn run_batch(&self, _pkts: &[&[u8]], _out: &mut [u32]) -> bool {
            match *self {}
        }

        /// Never called: no value exists.
        pub fn run_packets(&self, _pkts: &[freeway_packet::Packet], _out: &mut [u32]) -> Option<bool> {
            match *self {}
        }
    }
}
