//! ns per frame of the BPF filters on a batch of 32 identical IPv4/UDP frames (the uniform
//! traffic of one port): the JIT (`Program::run_batch` / `run` on a compiled program) against
//! the interpreter (`run_batch_interpreted` / `run_interpreted`), batched and frame by frame.
//! `cargo run --release -p freeway-capture --example vm_uniform`
use freeway_capture::samples::clean_frames;
use freeway_capture::Filter;
use std::hint::black_box;
use std::time::Instant;

fn ns_per_frame(n: usize, frames: usize, mut f: impl FnMut()) -> f64 {
    // Best of 3 timings.
    (0..3)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / (n * frames) as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let f0 = clean_frames(11, 64);
    let frame = f0
        .iter()
        .find(|f| f.len() >= 42 && f[12] == 8 && f[13] == 0 && f[23] == 17)
        .unwrap()
        .clone();
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
        let mut out = [0u32; 32];
        let n = 200_000;
        let jb = ns_per_frame(n, 32, || {
            p.run_batch(black_box(&refs), &mut out);
            black_box(&out);
        });
        let js = ns_per_frame(n, 32, || {
            let mut c = 0u32;
            for r in &refs {
                c = c.wrapping_add(p.run(black_box(r)));
            }
            black_box(c);
        });
        let ib = ns_per_frame(n, 32, || {
            p.run_batch_interpreted(black_box(&refs), &mut out);
            black_box(&out);
        });
        let is = ns_per_frame(n, 32, || {
            let mut c = 0u32;
            for r in &refs {
                c = c.wrapping_add(p.run_interpreted(black_box(r), r.len() as u32));
            }
            black_box(c);
        });
        println!("{e:<20} {jb:>9.2} {js:>9.2} {ib:>10.2} {is:>10.2}");
    }
}
