//! Classic BPF: the instruction encoding ([`Insn`], `tcpdump -d` rendering), the validator
//! ([`validate()`]), the VM ([`Program`]) and the x86-64 JIT ([`jit`]).
//!
//! A program is validated once when it is built ([`Program::new`]); running it afterwards
//! cannot fail, loop or panic, whatever the packet.

pub mod insn;
pub mod jit;
pub mod validate;
pub mod vm;

pub use insn::{dump, dump_c, dump_decimal, op, Insn};
pub use validate::{validate, ValidateError, MAX_INSNS, MEMWORDS};
pub use vm::Program;
