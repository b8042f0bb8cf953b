//! Fuzzes the x86-64 BPF JIT against the interpreter: arbitrary instructions, arbitrary
//! packets.
//!
//! Input layout: as `bpf_vm` (`fuzz/src/bpf_input.rs`).
//!
//! Invariants checked: for a program that validates, the compiled code gives the
//! interpreter's result on the packet, on every prefix of it (loads past the end), with a wire
//! length other than the captured one, and in a batch of prefixes (the batch entry points,
//! over slices and over packets);
//! `emit` refuses exactly the programs the validator refuses.

#![no_main]

use freeway_capture::bpf::jit::emit;
use freeway_capture::bpf::{validate, Program};
use libfuzzer_sys::fuzz_target;

#[path = "../src/bpf_input.rs"]
mod bpf_input;

fuzz_target!(|data: &[u8]| {
    let Some((insns, pkt)) = bpf_input::decode(data) else { return };
    assert_eq!(emit(&insns).is_some(), validate(&insns).is_ok());
    let Ok(p) = Program::new(&insns) else { return };
    assert!(p.is_jitted(), "the JIT is available on the fuzzing target");
    for cut in (0..=pkt.len()).rev().take(100) {
        let c = &pkt[..cut];
        assert_eq!(p.run(c), p.run_interpreted(c, c.len() as u32), "prefix {cut}");
    }
    let wl = (pkt.len() as u32).wrapping_mul(5).wrapping_add(3);
    assert_eq!(p.run_wirelen(pkt, wl), p.run_interpreted(pkt, wl));
    let cuts: Vec<&[u8]> = (0..=pkt.len()).rev().step_by(pkt.len() / 31 + 1).take(32).map(|c| &pkt[..c]).collect();
    let mut out = [0u32; 32];
    let any = p.run_batch(&cuts, &mut out);
    for (i, c) in cuts.iter().enumerate() {
        assert_eq!(out[i], p.run_interpreted(c, c.len() as u32), "lane {i}");
    }
    assert_eq!(any, out[..cuts.len()].iter().any(|&r| r != 0), "batch summary");
    // The same prefixes in packets, at varying places in their buffers (the packets entry).
    let packets: Vec<freeway_packet::Packet> = cuts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut framed = vec![0u8; i % 5];
            framed.extend_from_slice(c);
            let mut p = freeway_packet::Packet::from_frame(&framed).expect("fits");
            assert!(p.pull_front(i % 5));
            p
        })
        .collect();
    let mut out_p = [0u32; 32];
    let any_p = p.run_packets(&packets, &mut out_p);
    assert_eq!(&out_p[..cuts.len()], &out[..cuts.len()], "packets entry");
    assert_eq!(any_p, any, "packets summary");
});
