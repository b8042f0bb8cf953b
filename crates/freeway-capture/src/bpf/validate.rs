//! The validator: checks a classic BPF program once, before it may run.
//!
//! A program is accepted if and only if:
//! * it has 1 to [`MAX_INSNS`] instructions;
//! * every opcode is one the VM knows (the Linux/BSD classic set, no extensions);
//! * every jump is forward and lands inside the program (`jt`/`jf` are forward by encoding;
//!   a `ja` whose `k` read as `i32` is negative is reported as a backward jump);
//! * no `div`/`mod` by the constant 0 and no shift by a constant of 32 or more;
//! * every scratch-memory index (`ld M[k]`, `ldx M[k]`, `st`, `stx`) is below [`MEMWORDS`];
//! * the last instruction is a `ret`.
//!
//! Because every jump goes forward and the last instruction returns, every path ends in a
//! `ret` within `len` steps: the VM needs no step counter and cannot loop.
//!
//! Threads: pure function.

use std::fmt;

use super::insn::{op::*, Insn};

/// The longest program accepted (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;
/// Scratch memory words (`BPF_MEMWORDS`).
pub const MEMWORDS: u32 = 16;

/// Why a program was rejected; `pc` is the index of the offending instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValidateError {
    /// No instructions.
    Empty,
    /// More than [`MAX_INSNS`] instructions.
    TooLong(usize),
    /// An opcode the VM does not implement.
    UnknownOpcode {
        /// Index.
        pc: usize,
        /// The opcode.
        code: u16,
    },
    /// A `ja` with a negative distance.
    BackwardJump {
        /// Index.
        pc: usize,
    },
    /// A jump that lands past the last instruction.
    JumpOutOfRange {
        /// Index.
        pc: usize,
    },
    /// `div #0` or `mod #0`.
    DivisionByZero {
        /// Index.
        pc: usize,
    },
    /// `lsh #k` or `rsh #k` with `k >= 32`.
    ShiftTooLarge {
        /// Index.
        pc: usize,
    },
    /// A scratch-memory index of 16 or more.
    BadScratch {
        /// Index.
        pc: usize,
        /// The index used.
        index: u32,
    },
    /// The last instruction is not a `ret`.
    NoFinalRet,
}

impl fmt::Display for ValidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValidateError::Empty => write!(f, "empty program"),
            ValidateError::TooLong(n) => write!(f, "program has {n} instructions (max {MAX_INSNS})"),
            ValidateError::UnknownOpcode { pc, code } => write!(f, "({pc:03}): unknown opcode 0x{code:x}"),
            ValidateError::BackwardJump { pc } => write!(f, "({pc:03}): backward jump"),
            ValidateError::JumpOutOfRange { pc } => write!(f, "({pc:03}): jump out of range"),
            ValidateError::DivisionByZero { pc } => write!(f, "({pc:03}): division by constant zero"),
            ValidateError::ShiftTooLarge { pc } => write!(f, "({pc:03}): shift by 32 or more"),
            ValidateError::BadScratch { pc, index } => {
                write!(
                    f,
                    "({pc:03}): scratch memory index {index} out of range (max {})",
                    MEMWORDS - 1
                )
            }
            ValidateError::NoFinalRet => write!(f, "last instruction is not a ret"),
        }
    }
}

impl std::error::Error for ValidateError {}

/// Whether `code` is an opcode of the classic set.
pub fn known_opcode(code: u16) -> bool {
    match class(code) {
        LD => match mode(code) {
            ABS | IND => matches!(size(code), W | H | B) && code & !0xff == 0,
            IMM | MEM | LEN => size(code) == W && code & !0xff == 0,
            _ => false,
        },
        LDX => code == LDX | W | IMM || code == LDX | W | MEM || code == LDX | W | LEN || code == LDX | B | MSH,
        ST => code == ST,
        STX => code == STX,
        ALU => {
            if aluop(code) == NEG {
                code == ALU | NEG
            } else {
                matches!(aluop(code), ADD | SUB | MUL | DIV | OR | AND | LSH | RSH | MOD | XOR) && code & !0xff == 0
            }
        }
        JMP => match aluop(code) {
            JA => code == JMP | JA,
            JEQ | JGT | JGE | JSET => code & !0xff == 0,
            _ => false,
        },
        RET => code == RET | K || code == RET | A,
        MISC => code == MISC | TAX || code == MISC | TXA,
        _ => false,
    }
}

/// Validates `prog` (see the module documentation for the rules).
pub fn validate(prog: &[Insn]) -> Result<(), ValidateError> {
    if prog.is_empty() {
        return Err(ValidateError::Empty);
    }
    if prog.len() > MAX_INSNS {
        return Err(ValidateError::TooLong(prog.len()));
    }
    let len = prog.len();
    for (pc, i) in prog.iter().enumerate() {
        let code = i.code;
        if !known_opcode(code) {
            return Err(ValidateError::UnknownOpcode { pc, code });
        }
        match class(code) {
            LD | LDX if mode(code) == MEM && i.k >= MEMWORDS => {
                return Err(ValidateError::BadScratch { pc, index: i.k });
            }
            ST | STX if i.k >= MEMWORDS => return Err(ValidateError::BadScratch { pc, index: i.k }),
            ALU if src(code) == K => match aluop(code) {
                DIV | MOD if i.k == 0 => return Err(ValidateError::DivisionByZero { pc }),
                LSH | RSH if i.k >= 32 => return Err(ValidateError::ShiftTooLarge { pc }),
                _ => {}
            },
            JMP => {
                let remaining = (len - pc - 1) as u64;
                if aluop(code) == JA {
                    if (i.k as i32) < 0 {
                        return Err(ValidateError::BackwardJump { pc });
                    }
                    if i.k as u64 >= remaining {
                        return Err(ValidateError::JumpOutOfRange { pc });
                    }
                } else if i.jt as u64 >= remaining || i.jf as u64 >= remaining {
                    return Err(ValidateError::JumpOutOfRange { pc });
                }
            }
            _ => {}
        }
    }
    if class(prog[len - 1].code) != RET {
        return Err(ValidateError::NoFinalRet);
    }
    Ok(())
}
