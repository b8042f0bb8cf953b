//! ns per frame of the worker side of a tap, in isolation, on one thread: a batch of 32
//! identical 60-byte IPv4/UDP frames offered to `TapPoint::tap` with no tap attached, with
//! one tap on another port, with one tap whose filter matches nothing (`host 198.18.0.1`), and the same filter's compiled
//! code alone on the same frames (`Program::run_batch`). The difference between the last two
//! is what the tap path adds around the filter (gathering the frames, the list walk, the
//! calls). With a second argument N, N threads (worker handles of one registry) each time
//! the tapped batch at once, and each prints its own rate: the workers share the tap list,
//! the filter and its code, and nothing they write.
//!
//! With `--copy`, the cost of a match-all tap instead (what `bench capture`'s `matchall`
//! scenario costs a worker), in two parts: every frame dropped at a full ring (no writer),
//! and every frame offered while a [`TapWriter`] on another thread drains the rings into a
//! pcap file in the temporary directory, as the benchmark's writer does; the timestamp is
//! read as the runtime reads it (once per batch with a match). From the two it derives the
//! cost of one copied frame, so a forwarding loss can be checked against "the copy's cost".
//! With `--copy SECS sink` the writer formats into `io::sink()` instead of a file: the
//! ring's own cost, without the kernel's file writes limiting how fast the writer drains.
//!
//! `cargo run --release -p freeway-capture --example tap_cost [filter [threads]]`
//! `cargo run --release -p freeway-capture --example tap_cost -- --copy [seconds [sink]]`
mod common;

use std::hint::black_box;
use std::time::Instant;

use freeway_capture::{Direction, Filter, TapPoint, TapRegistry, TapSpec, TapWriter, Taps, WriterOptions};
use freeway_packet::Packet;

/// The best of 5 timings (see [`common::ns_per_frame`]).
fn ns_per_frame(reps: usize, frames: usize, f: impl FnMut()) -> f64 {
    common::ns_per_frame(5, reps, frames, f)
}

fn spec(port: u16) -> TapSpec {
    TapSpec {
        port,
        dir: Direction::Both,
        snaplen: 128,
        ring_slots: 1024,
        lossless: false,
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

fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The match-all tap of `bench capture` (snap length 128, 4096 slots per ring).
fn copy_spec() -> TapSpec {
    TapSpec {
        port: 0,
        dir: Direction::Both,
        snaplen: 128,
        ring_slots: 4096,
        lossless: false,
    }
}

/// `--copy`: a match-all tap, first with nobody draining (every frame past the first ring
/// full is dropped), then with a writer thread draining into a file for `secs` seconds.
fn copy_mode(frame: &[u8], secs: f64, sink: bool) {
    let batch: Vec<Packet> = (0..32).map(|_| Packet::from_frame(frame).expect("fits")).collect();
    let all = || Filter::new("", 128).expect("the empty filter compiles");

    // Drops only: the ring fills with the first 4096 frames, then every push is a drop.
    let reg = Taps::new(1);
    let mut w = reg.worker(0).expect("worker 0");
    let (_id, reader) = reg.attach(copy_spec(), all()).expect("attach");
    let drop_ns = ns_per_frame(200_000, 32, || {
        let t = wall_ns();
        w.progress(t);
        w.tap(0, Direction::Rx, black_box(&batch), t)
    });
    let (matched, dropped) = (reader.tap().matched(), reader.tap().dropped());
    reader.detach();
    drop(w);

    // With a writer draining into a file on its own thread.
    let reg = Taps::new(1);
    let mut w = reg.worker(0).expect("worker 0");
    let (id, reader) = reg.attach(copy_spec(), all()).expect("attach");
    let path = std::env::temp_dir().join(format!("freeway-tap-cost-{}.pcap", std::process::id()));
    let out: Box<dyn std::io::Write + Send> = if sink {
        Box::new(std::io::sink())
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(&path).expect("temporary file"),
        ))
    };
    let writer = TapWriter::new(reader, out, WriterOptions::default()).expect("writer");
    let drain = std::thread::spawn(move || writer.run());
    let t = Instant::now();
    let mut batches = 0u64;
    while t.elapsed().as_secs_f64() < secs {
        for _ in 0..1000 {
            let t = wall_ns();
            w.progress(t);
            w.tap(0, Direction::Rx, black_box(&batch), t);
        }
        batches += 1000;
    }
    let ns = t.elapsed().as_nanos() as f64 / (batches * 32) as f64;
    reg.detach(id);
    let st = drain.join().expect("writer thread").expect("writer");
    if !sink {
        let _ = std::fs::remove_file(&path);
    }
    let offered = batches * 32;
    let copied = offered - st.dropped;
    let p_copy = copied as f64 / offered as f64;
    // ns = p_copy * copy + (1 - p_copy) * drop
    let copy_ns = (ns - (1.0 - p_copy) * drop_ns) / p_copy;
    println!(
        "match-all tap, snap length 128, rings of 4096, 32-frame batches of 60-byte frames, writer into {}",
        if sink { "io::sink()" } else { "a file" }
    );
    println!("drops only      {drop_ns:6.3} ns/frame ({matched} matched, {dropped} dropped, no writer)");
    println!(
        "with a writer   {ns:6.3} ns/frame over {secs} s ({offered} offered, {copied} copied = {:.1}%, {} dropped, {} written)",
        100.0 * p_copy,
        st.dropped,
        st.written
    );
    println!(
        "one copy        {copy_ns:6.3} ns/frame (derived: (with a writer - dropped share x drops only) / copied share)"
    );
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--copy") {
        let secs: f64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(2.0);
        let frame = common::ipv4_udp_frame();
        copy_mode(&frame, secs, std::env::args().nth(3).as_deref() == Some("sink"));
        return;
    }
    let expr = std::env::args().nth(1).unwrap_or_else(|| "host 198.18.0.1".into());
    let threads: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let frame = common::ipv4_udp_frame();
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
