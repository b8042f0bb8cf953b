//! Fuzzes the BPF validator and VM: arbitrary instructions, arbitrary packets.
//!
//! Input layout: see `fuzz/src/bpf_input.rs` (byte 0 = number of instructions, then 8 bytes
//! per instruction, then the packet).
//!
//! Invariants checked (beyond "no panic, no hang"):
//! - the VM is deterministic and never reads past the packet (a program that validates runs
//!   on the packet and on every prefix of it);
//! - a program that validates ends in a `ret` and has only forward, in-range jumps (checked
//!   independently here);
//! - the batch interpreter (`run_batch`) gives every packet of a batch the verdict the
//!   per-packet one gives (the batch: the packet's prefixes, so its lanes part ways).

#![no_main]

use freeway_capture::bpf::op::{class, JA, JMP, RET};
use freeway_capture::bpf::Program;
use libfuzzer_sys::fuzz_target;

#[path = "../src/bpf_input.rs"]
mod bpf_input;

fuzz_target!(|data: &[u8]| {
    let Some((insns, pkt)) = bpf_input::decode(data) else { return };
    let n = insns.len();
    let Ok(p) = Program::new(&insns) else { return };
    assert_eq!(class(insns[n - 1].code), RET);
    for (pc, i) in insns.iter().enumerate() {
        if class(i.code) == JMP {
            let far = if i.code & 0xf0 == JA { i.k as usize } else { i.jt.max(i.jf) as usize };
            assert!(pc + 1 + far < n);
        }
    }
    let r = p.run(pkt);
    assert_eq!(r, p.run(pkt));
    for cut in 0..pkt.len().min(80) {
        let _ = p.run(&pkt[..cut]);
    }
    let cuts: Vec<&[u8]> = (0..=pkt.len()).rev().step_by(pkt.len() / 31 + 1).take(32).map(|c| &pkt[..c]).collect();
    let mut out = [0u32; 32];
    p.run_batch(&cuts, &mut out);
    for (i, c) in cuts.iter().enumerate() {
        assert_eq!(out[i], p.run(c), "lane {i}");
    }
});
