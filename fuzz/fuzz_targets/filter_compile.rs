//! Fuzzes the tcpdump filter compiler (lexer, parser, code generator, optimiser) on
//! arbitrary text.
//!
//! Invariants checked (beyond "no panic"):
//! - a compiled program always passes the validator;
//! - a compile error's span lies inside the expression (on char boundaries) and renders;
//! - the optimised and unoptimised programs give the same return value on a fixed set of
//!   frames (well-formed, VLAN, IPv6, truncated, random).

#![no_main]

use std::sync::OnceLock;

use freeway_capture::bpf::Program;
use freeway_capture::filter::{compile_with, CodegenOptions};
use freeway_capture::samples::frames;
use libfuzzer_sys::fuzz_target;

fn sample() -> &'static [Vec<u8>] {
    static F: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    F.get_or_init(|| frames(1, 64))
}

fuzz_target!(|data: &[u8]| {
    let Ok(expr) = std::str::from_utf8(data) else { return };
    let opt = compile_with(expr, CodegenOptions { snaplen: 1000, optimize: true });
    let plain = compile_with(expr, CodegenOptions { snaplen: 1000, optimize: false });
    match (opt, plain) {
        (Ok(o), Ok(p)) => {
            let o = Program::new(&o).expect("optimised program must validate");
            let p = Program::new(&p).expect("plain program must validate");
            for f in sample() {
                assert_eq!(o.run(f), p.run(f), "optimiser changed a verdict for {expr:?}");
            }
        }
        (Err(e), Err(_)) => {
            assert!(e.span.start <= e.span.end && e.span.end <= expr.len(), "span out of range");
            assert!(expr.is_char_boundary(e.span.start) && expr.is_char_boundary(e.span.end));
            let _ = e.to_string();
        }
        (Err(e), Ok(_)) => {
            // Only size limits may differ between the two.
            assert!(e.msg.contains("too large"), "{e}");
        }
        (Ok(_), Err(e)) => assert!(e.msg.contains("too large"), "{e}"),
    }
});
