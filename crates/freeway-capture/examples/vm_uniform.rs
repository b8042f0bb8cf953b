//! ns per frame of the BPF VM on a batch of 32 identical IPv4/UDP frames (the uniform traffic
//! of one port): `Program::run_batch` against `Program::run` frame by frame.
//! `cargo run --release -p freeway-capture --example vm_uniform`
use freeway_capture::samples::clean_frames;
use freeway_capture::Filter;
use std::time::Instant;
fn main() {
    let f0 = clean_frames(11, 64);
    let frame = f0
        .iter()
        .find(|f| f.len() >= 42 && f[12] == 8 && f[13] == 0 && f[23] == 17)
        .unwrap()
        .clone();
    let frames: Vec<Vec<u8>> = (0..32).map(|_| frame.clone()).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|v| v.as_slice()).collect();
    for e in ["host 198.18.0.1", "ip", "tcp port 80", "udp"] {
        let f = Filter::new(e, 128).unwrap();
        let p = f.program();
        let mut out = [0u32; 32];
        let n = 200_000;
        let t = Instant::now();
        for _ in 0..n {
            p.run_batch(std::hint::black_box(&refs), &mut out);
            std::hint::black_box(&out);
        }
        let b = t.elapsed().as_nanos() as f64 / (n * 32) as f64;
        let t = Instant::now();
        let mut c = 0u32;
        for _ in 0..n {
            for r in &refs {
                c = c.wrapping_add(p.run(std::hint::black_box(r)));
            }
        }
        std::hint::black_box(c);
        let s = t.elapsed().as_nanos() as f64 / (n * 32) as f64;
        println!("{e:<20} batch {b:.2} ns/pkt  single {s:.2} ns/pkt");
    }
}
