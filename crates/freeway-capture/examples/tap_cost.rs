//! ns per frame of the worker side of a tap, in isolation, on one thread: a batch of 32
//! identical 60-byte IPv4/UDP frames offered to `TapPoint::tap` with no tap attached, with
//! one tap on another port, with one tap whose filter matches nothing (`host 198.18.0.1`), and the same filter's compiled
//! code alone on the same frames (`Program::run_batch`). The difference between the last two
//! is what the tap path adds around the filter (gathering the frames, the list walk, the
//! calls). With a second argument N, N threads (worker handles of one registry) each time
//! the tapped batch at once, and each prints its own rate: the workers share the tap list,
//! the filter and its code, and nothing they write.
//! `cargo run --release -p freeway-capture --example tap_cost [filter [threads]]`
use std::hint::black_box;
use std::time::Instant;

use freeway_capture::samples::clean_frames;
use freeway_capture::{Direction, Filter, TapPoint, TapRegistry, TapSpec, Taps};
use freeway_packet::Packet;

fn ns_per_frame(reps: usize, frames: usize, mut f: impl FnMut()) -> f64 {
    // Best of 5 timings.
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_nanos() as f64 / (reps * frames) as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn spec(port: u16) -> TapSpec {
    TapSpec {
        port,
        dir: Direction::Both,
        snaplen: 128,
        ring_slots: 1024,
    }
}

/// `threads` worker handles of one registry time the tapped batch at once.
fn threads_mode(expr: &str, frame: &[u8], threads: usize, reps: usize) {
    let reg = Taps::new(threads);
    let (_id, _reader) = reg
        .attach(spec(0), Filter::new(expr, 128).expect("compiles"))
        .expect("attach");
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (reg, barrier) = (&reg, &barrier);
            s.spawn(move || {
                let batch: Vec<Packet> = (0..32).map(|_| Packet::from_frame(frame).expect("fits")).collect();
                let mut w = reg.worker(t).expect("worker");
                barrier.wait();
                let ns = ns_per_frame(reps, 32, || w.tap(0, Direction::Rx, black_box(&batch), 1));
                println!("thread {t}: one tap {ns:6.3} ns/frame");
            });
        }
    });
}

fn main() {
    let expr = std::env::args().nth(1).unwrap_or_else(|| "host 198.18.0.1".into());
    let threads: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let frame = clean_frames(11, 64)
        .into_iter()
        .find(|f| f.len() >= 42 && f[12] == 8 && f[13] == 0 && f[23] == 17)
        .expect("an IPv4/UDP frame");
    let reps = 2_000_000;
    if threads > 1 {
        threads_mode(&expr, &frame, threads, reps);
        return;
    }
    let batch: Vec<Packet> = (0..32).map(|_| Packet::from_frame(&frame).expect("fits")).collect();
    let refs: Vec<&[u8]> = batch.iter().map(Packet::data).collect();

    let reg = Taps::new(1);
    let mut w = reg.worker(0).expect("worker 0");
    let none = ns_per_frame(reps, 32, || w.tap(0, Direction::Rx, black_box(&batch), 1));

    let filter = Filter::new(&expr, 128).expect("filter compiles");
    let prog = filter.program().clone();
    let (other, _r) = reg.attach(spec(1), filter.clone()).expect("attach");
    let elsewhere = ns_per_frame(reps, 32, || w.tap(0, Direction::Rx, black_box(&batch), 1));
    reg.detach(other);
    let (_id, _reader) = reg.attach(spec(0), filter).expect("attach");
    let tapped = ns_per_frame(reps, 32, || w.tap(0, Direction::Rx, black_box(&batch), 1));
    let mut out = [0u32; 32];
    let alone = ns_per_frame(reps, 32, || {
        black_box(prog.run_batch(black_box(&refs), &mut out));
    });
    println!("filter {expr:?} (jit: {})", prog.is_jitted());
    println!("no tap          {none:6.3} ns/frame");
    println!("tap elsewhere   {elsewhere:6.3} ns/frame (one tap on another port)");
    println!("one tap         {tapped:6.3} ns/frame");
    println!("filter alone    {alone:6.3} ns/frame");
    println!(
        "tap path adds   {:6.3} ns/frame around the filter",
        tapped - none - alone
    );
}
