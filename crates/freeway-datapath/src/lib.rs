//! The Freeway datapath: configuration, the runtime (workers, their pipeline, the background
//! services, the control socket), reports and packet decoding for capture output.
//!
//! The `freeway` binary is a thin CLI over this crate; the benchmarks and the churn oracle
//! (`freeway-bench`) drive it through the same entry points.
#![warn(missing_docs)]

pub mod config;
pub mod decode;
pub mod report;
pub mod runtime;

/// Writes to standard output, ignoring errors: a reader that goes away (`freeway ctl … | head`)
/// ends the output, not the process with a panic.
#[doc(hidden)]
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_fmt(args);
}

/// `print!` that ignores a closed standard output (see [`write_stdout`]).
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::write_stdout(format_args!($($t)*)) };
}

/// `println!` that ignores a closed standard output (see [`write_stdout`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::write_stdout(format_args!("\n")) };
    ($($t:tt)*) => { $crate::write_stdout(format_args!("{}\n", format_args!($($t)*))) };
}
