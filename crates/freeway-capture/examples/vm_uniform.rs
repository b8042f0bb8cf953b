//! ns per frame of the BPF filters on a batch of 32 identical IPv4/UDP frames (the uniform
//! traffic of one port): the JIT (`Program::run_batch` / `run` on a compiled program) against
//! the interpreter (`run_batch_interpreted` / `run_interpreted`), batched and frame by frame.
//! `cargo run --release -p freeway-capture --example vm_uniform`
mod common;

use freeway_capture::Filter;
use std::hint::black_box;

/// Calls of each timing (each the best of 3).
const REPS: usize = 200_000;

/// ns per frame of `run` over the batch `refs` at once.
fn batched(refs: &[&[u8]], run: impl Fn(&[&[u8]], &mut [u32])) -> f64 {
    let mut out = [0u32; 32];
    common::ns_per_frame(3, REPS, refs.len(), || {
        run(black_box(refs), &mut out);
        black_box(&out);
    })
}

/// ns per frame of `run` over the frames of `refs` one by one.
fn one_by_one(refs: &[&[u8]], run: impl Fn(&[u8]) -> u32) -> f64 {
    common::ns_per_frame(3, REPS, refs.len(), || {
        let mut c = 0u32;
        for r in refs {
            c = c.wrapping_add(run(black_box(r)));
        }
        black_box(c);
    })
}

fn main() {
    let frame = common::ipv4_udp_frame();
    let frames: Vec<Vec<u8>> = (0..32).map(|_| frame.clone()).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|v| v.as_slice()).collect();
    println!(
        "{:<20} {:>9} {:>9} {:>10} {:>10}   (ns/frame; jit: {})",
        "filter",
        "jit batch",
        "jit 1by1",
        "interp bat",
        "interp 1by1",
        Filter::new("ip", 128).unwrap().program().is_jitted()
    );
    for e in ["host 198.18.0.1", "ip", "tcp port 80", "udp"] {
        let f = Filter::new(e, 128).unwrap();
        let p = f.program();
        let jb = batched(&refs, |b, out| {
            p.run_batch(b, out);
        });
        let js = one_by_one(&refs, |r| p.run(r));
        let ib = batched(&refs, |b, out| p.run_batch_interpreted(b, out));
        let is = one_by_one(&refs, |r| p.run_interpreted(r, r.len() as u32));
        println!("{e:<20} {jb:>9.2} {js:>9.2} {ib:>10.2} {is:>10.2}");
    }
}
