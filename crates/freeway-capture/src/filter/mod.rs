//! The tcpdump filter language, compiled to classic BPF for Ethernet (DLT_EN10MB) frames.
//!
//! [`lexer`] → [`parser`] (an [`ast::Expr`]) → [`codegen`] (a [`Vec`] of [`Insn`]) →
//! [`Filter`] (validated and decoded, ready to run). See the crate documentation for the
//! supported syntax and what is not supported.
//!
//! Threads: compilation is a pure function; a [`Filter`] is immutable and `Sync`.

pub mod ast;
pub mod codegen;
pub mod error;
pub mod lexer;
pub mod parser;

pub use codegen::CodegenOptions;
pub use error::FilterError;

use crate::bpf::{Insn, Program};

/// The snap length libpcap and tcpdump use by default (the value a match returns).
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// Compiles `expr` to classic BPF; a match returns `snaplen`. An empty expression matches
/// everything. The optimiser is on.
pub fn compile(expr: &str, snaplen: u32) -> Result<Vec<Insn>, FilterError> {
    compile_with(
        expr,
        CodegenOptions {
            snaplen,
            optimize: true,
        },
    )
}

/// [`compile`] with explicit options.
pub fn compile_with(expr: &str, opts: CodegenOptions) -> Result<Vec<Insn>, FilterError> {
    let ast = parser::parse(expr)?;
    codegen::generate(expr, ast.as_ref(), opts)
}

/// A compiled, validated filter.
#[derive(Clone, Debug)]
pub struct Filter {
    expr: String,
    prog: Program,
}

impl Filter {
    /// Compiles `expr`; a match returns `snaplen` (use [`DEFAULT_SNAPLEN`] or the tap's).
    pub fn new(expr: &str, snaplen: u32) -> Result<Filter, FilterError> {
        let insns = compile(expr, snaplen)?;
        let prog = Program::new(&insns).map_err(|e| {
            // The code generator only emits valid programs; this is a bug if it happens.
            FilterError::new(
                expr,
                0..expr.len(),
                format!("internal error: generated program is invalid: {e}"),
            )
        })?;
        Ok(Filter {
            expr: expr.to_string(),
            prog,
        })
    }

    /// A filter that matches every packet.
    pub fn match_all(snaplen: u32) -> Filter {
        Filter {
            expr: String::new(),
            prog: Program::accept_all(snaplen.max(1)),
        }
    }

    /// The expression it was compiled from.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// Whether `frame` matches.
    #[inline]
    pub fn matches(&self, frame: &[u8]) -> bool {
        self.prog.run(frame) != 0
    }

    /// The program's return value for `frame` (bytes to keep, 0 = no match).
    #[inline]
    pub fn run(&self, frame: &[u8]) -> u32 {
        self.prog.run(frame)
    }
}
