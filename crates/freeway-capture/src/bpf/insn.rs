//! Classic BPF instructions in the Linux/BSD `sock_filter` encoding, and their `tcpdump -d`
//! rendering.
//!
//! An [`Insn`] is exactly the kernel's `struct sock_filter` (`code`, `jt`, `jf`, `k`), so a
//! program built here can be compared with libpcap's `pcap_compile` output instruction by
//! instruction, and [`dump`] prints it the way `tcpdump -d` does.
//!
//! Threads: plain data, no shared state.

use std::fmt;

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Insn {
    /// Opcode: class | size | mode (loads), class | op | source (ALU, jumps), class | rval (ret).
    pub code: u16,
    /// Conditional jumps: instructions to skip when the condition holds.
    pub jt: u8,
    /// Conditional jumps: instructions to skip when it does not.
    pub jf: u8,
    /// The generic operand (constant, offset, scratch index, `ja` distance).
    pub k: u32,
}

impl Insn {
    /// A non-jump instruction.
    pub const fn stmt(code: u16, k: u32) -> Insn {
        Insn { code, jt: 0, jf: 0, k }
    }

    /// A conditional jump.
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code, jt, jf, k }
    }
}

/// Opcode fields and values (the `BPF_*` macros of `<linux/filter.h>` / `<net/bpf.h>`).
#[allow(missing_docs)]
pub mod op {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;

    pub const W: u16 = 0x00;
    pub const H: u16 = 0x08;
    pub const B: u16 = 0x10;

    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const MEM: u16 = 0x60;
    pub const LEN: u16 = 0x80;
    pub const MSH: u16 = 0xa0;

    pub const ADD: u16 = 0x00;
    pub const SUB: u16 = 0x10;
    pub const MUL: u16 = 0x20;
    pub const DIV: u16 = 0x30;
    pub const OR: u16 = 0x40;
    pub const AND: u16 = 0x50;
    pub const LSH: u16 = 0x60;
    pub const RSH: u16 = 0x70;
    pub const NEG: u16 = 0x80;
    pub const MOD: u16 = 0x90;
    pub const XOR: u16 = 0xa0;

    pub const JA: u16 = 0x00;
    pub const JEQ: u16 = 0x10;
    pub const JGT: u16 = 0x20;
    pub const JGE: u16 = 0x30;
    pub const JSET: u16 = 0x40;

    pub const K: u16 = 0x00;
    pub const X: u16 = 0x08;
    /// `ret` source: the accumulator.
    pub const A: u16 = 0x10;

    pub const TAX: u16 = 0x00;
    pub const TXA: u16 = 0x80;

    /// The instruction class of `code`.
    pub const fn class(code: u16) -> u16 {
        code & 0x07
    }
    /// The load size of `code`.
    pub const fn size(code: u16) -> u16 {
        code & 0x18
    }
    /// The addressing mode of `code`.
    pub const fn mode(code: u16) -> u16 {
        code & 0xe0
    }
    /// The ALU or jump operation of `code`.
    pub const fn aluop(code: u16) -> u16 {
        code & 0xf0
    }
    /// The operand source (`K` or `X`) of `code`.
    pub const fn src(code: u16) -> u16 {
        code & 0x08
    }
    /// The return-value source of a `ret`.
    pub const fn rval(code: u16) -> u16 {
        code & 0x18
    }
}

/// The mnemonic and operand of `insn` at index `n`, as libpcap's `bpf_image` writes them.
fn image(insn: &Insn, n: usize) -> (String, String, Option<(usize, usize)>) {
    use op::*;
    let k = insn.k;
    let c = insn.code;
    let sz = |c: u16| match size(c) {
        W => "",
        H => "h",
        B => "b",
        _ => "?",
    };
    let cond = |name: &str| -> (String, String, Option<(usize, usize)>) {
        let operand = if src(c) == X {
            "x".to_string()
        } else {
            format!("#0x{k:x}")
        };
        let t = n + 1 + insn.jt as usize;
        let f = n + 1 + insn.jf as usize;
        (name.to_string(), operand, Some((t, f)))
    };
    let plain = |name: &str, operand: String| (name.to_string(), operand, None);
    match class(c) {
        LD => match mode(c) {
            IMM => plain("ld", format!("#0x{k:x}")),
            LEN => plain("ld", "#pktlen".into()),
            ABS => plain(&format!("ld{}", sz(c)), format!("[{k}]")),
            IND => plain(&format!("ld{}", sz(c)), format!("[x + {k}]")),
            MEM => plain("ld", format!("M[{k}]")),
            _ => plain("unimp", format!("0x{c:x}")),
        },
        LDX => match mode(c) {
            IMM => plain("ldx", format!("#0x{k:x}")),
            LEN => plain("ldx", "#pktlen".into()),
            MEM => plain("ldx", format!("M[{k}]")),
            MSH => plain("ldxb", format!("4*([{k}]&0xf)")),
            _ => plain("unimp", format!("0x{c:x}")),
        },
        ST => plain("st", format!("M[{k}]")),
        STX => plain("stx", format!("M[{k}]")),
        ALU => {
            let name = match aluop(c) {
                ADD => "add",
                SUB => "sub",
                MUL => "mul",
                DIV => "div",
                MOD => "mod",
                AND => "and",
                OR => "or",
                XOR => "xor",
                LSH => "lsh",
                RSH => "rsh",
                NEG => return plain("neg", String::new()),
                _ => return plain("unimp", format!("0x{c:x}")),
            };
            let operand = if src(c) == X {
                "x".to_string()
            } else if matches!(aluop(c), AND | OR | XOR) {
                format!("#0x{k:x}")
            } else {
                format!("#{k}")
            };
            plain(name, operand)
        }
        JMP => match aluop(c) {
            JA => plain("ja", format!("{}", (n as u64) + 1 + k as u64)),
            JEQ => cond("jeq"),
            JGT => cond("jgt"),
            JGE => cond("jge"),
            JSET => cond("jset"),
            _ => plain("unimp", format!("0x{c:x}")),
        },
        RET => match rval(c) {
            A => plain("ret", "a".into()),
            X => plain("ret", "x".into()),
            _ => plain("ret", format!("#{k}")),
        },
        MISC => match c & 0xf8 {
            TAX => plain("tax", String::new()),
            TXA => plain("txa", String::new()),
            _ => plain("unimp", format!("0x{c:x}")),
        },
        _ => plain("unimp", format!("0x{c:x}")),
    }
}

/// Renders instruction `n` of a program like one line of `tcpdump -d`.
pub fn image_line(insn: &Insn, n: usize) -> String {
    let (name, operand, jumps) = image(insn, n);
    match jumps {
        Some((t, f)) => format!("({n:03}) {name:<8} {operand:<16} jt {t}\tjf {f}"),
        None => format!("({n:03}) {name:<8} {operand}"),
    }
}

/// Renders a whole program like `tcpdump -d` (one line per instruction, newline-terminated).
pub fn dump(prog: &[Insn]) -> String {
    let mut s = String::new();
    for (n, i) in prog.iter().enumerate() {
        s.push_str(&image_line(i, n));
        s.push('\n');
    }
    s
}

/// Renders a program like `tcpdump -dd` (C array initialisers).
pub fn dump_c(prog: &[Insn]) -> String {
    let mut s = String::new();
    for i in prog {
        s.push_str(&format!("{{ 0x{:x}, {}, {}, 0x{:08x} }},\n", i.code, i.jt, i.jf, i.k));
    }
    s
}

/// Renders a program like `tcpdump -ddd`: the number of instructions, then one line of
/// decimal numbers (`code jt jf k`) per instruction.
pub fn dump_decimal(prog: &[Insn]) -> String {
    let mut s = format!("{}\n", prog.len());
    for i in prog {
        s.push_str(&format!("{} {} {} {}\n", i.code, i.jt, i.jf, i.k));
    }
    s
}

impl fmt::Display for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, operand, jumps) = image(self, 0);
        match jumps {
            Some(_) => write!(f, "{name} {operand} jt +{} jf +{}", self.jt, self.jf),
            None => write!(f, "{name} {operand}"),
        }
    }
}
