//! Capture's parts measured alone (the `capture_bench` example of this crate; library
//! functions, not timed tests):
//!
//! * [`vm_bench`]: ns/packet of the BPF VM for some filters over a fixed set of frames, and
//!   of libpcap's interpreter (`bpf_filter` through `pcap_offline_filter`) on libpcap's own
//!   program when the `libpcap-oracle` feature is on.
//! * [`tap_path_bench`]: the worker side of taps in isolation: `workers` threads each offer
//!   the same 32-packet batch in a loop for a duration, with `taps` taps attached, while the
//!   control plane replaces a filter every `swap_every` (or never); writers drain into
//!   `io::sink()`. Generic over [`TapRegistry`] so the epoch and `RwLock` variants run the
//!   same code.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use freeway_packet::Packet;

use freeway_capture::bpf::vm::LANES;
use freeway_capture::filter::DEFAULT_SNAPLEN;
use freeway_capture::samples::clean_frames;
use freeway_capture::{
    Direction, Filter, FilterError, Program, TapPoint, TapRegistry, TapSpec, TapStats, TapWriter, WriterOptions,
};

/// Filters measured by default.
pub const DEFAULT_FILTERS: &[&str] = &[
    "ip",
    "tcp port 80",
    "host 10.0.0.1 or host 192.168.1.1",
    "vlan and udp",
    "tcp[tcpflags] & tcp-syn != 0",
    "not arp and (udp port 53 or icmp6)",
    "ip6 net 2001:db8::/32 and tcp dst portrange 1-1024",
];

/// One filter's VM timing.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VmBenchResult {
    /// The expression.
    pub expr: String,
    /// Our program's length.
    pub insns: usize,
    /// Our VM, ns per packet, packet by packet.
    pub ns_per_packet: f64,
    /// Our VM, ns per packet, in batches of 32 ([`Program::run_batch`]).
    pub batch_ns_per_packet: f64,
    /// Packets matched out of `packets`.
    pub matched: usize,
    /// Frames per pass.
    pub packets: usize,
    /// libpcap's program length (with `libpcap-oracle`).
    pub libpcap_insns: Option<usize>,
    /// libpcap's interpreter on its own program, ns per packet (with `libpcap-oracle`).
    pub libpcap_ns_per_packet: Option<f64>,
    /// Our VM running libpcap's program, ns per packet (with `libpcap-oracle`).
    pub vm_on_libpcap_program_ns: Option<f64>,
}

fn time_per_packet(frames: &[Vec<u8>], passes: usize, mut f: impl FnMut(&[u8]) -> bool) -> (f64, usize) {
    let mut matched = 0;
    for fr in frames {
        matched += f(fr) as usize;
    }
    let start = Instant::now();
    for _ in 0..passes {
        for fr in frames {
            black_box(f(black_box(fr)));
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / (passes * frames.len()).max(1) as f64;
    (ns, matched)
}

/// ns per packet of [`Program::run_batch`] over `frames` in batches of 32.
fn time_batches(frames: &[Vec<u8>], passes: usize, prog: &Program) -> f64 {
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let mut out = [0u32; LANES];
    let start = Instant::now();
    for _ in 0..passes {
        for chunk in refs.chunks(LANES) {
            prog.run_batch(black_box(chunk), &mut out);
            black_box(&out);
        }
    }
    start.elapsed().as_nanos() as f64 / (passes * frames.len()).max(1) as f64
}

/// Times each filter over `n_frames` generated well-formed frames, `passes` times; each
/// result is the best of 3 runs.
pub fn vm_bench(filters: &[&str], n_frames: usize, passes: usize) -> Result<Vec<VmBenchResult>, FilterError> {
    let frames = clean_frames(7, n_frames);
    let mut out = Vec::new();
    for expr in filters {
        let f = Filter::new(expr, DEFAULT_SNAPLEN)?;
        let best = |g: &mut dyn FnMut(&[u8]) -> bool| {
            (0..3)
                .map(|_| time_per_packet(&frames, passes, &mut *g))
                .fold((f64::MAX, 0), |a, b| (a.0.min(b.0), b.1))
        };
        let (ns, matched) = best(&mut |p| f.matches(p));
        let batch_ns = (0..3)
            .map(|_| time_batches(&frames, passes, f.program()))
            .fold(f64::MAX, f64::min);
        #[allow(unused_mut)]
        let mut r = VmBenchResult {
            expr: expr.to_string(),
            insns: f.program().len(),
            ns_per_packet: ns,
            batch_ns_per_packet: batch_ns,
            matched,
            packets: frames.len(),
            libpcap_insns: None,
            libpcap_ns_per_packet: None,
            vm_on_libpcap_program_ns: None,
        };
        #[cfg(feature = "libpcap-oracle")]
        if let Ok(cap) = pcap::Capture::dead(pcap::Linktype::ETHERNET) {
            if let Ok(lp) = cap.compile(expr, true) {
                let insns: Vec<freeway_capture::Insn> = lp
                    .get_instructions()
                    .iter()
                    .filter_map(|i| {
                        let v: Vec<u32> = i
                            .to_string()
                            .split_whitespace()
                            .filter_map(|x| x.parse().ok())
                            .collect();
                        (v.len() == 4).then(|| freeway_capture::Insn {
                            code: v[0] as u16,
                            jt: v[1] as u8,
                            jf: v[2] as u8,
                            k: v[3],
                        })
                    })
                    .collect();
                r.libpcap_insns = Some(insns.len());
                r.libpcap_ns_per_packet = Some(best(&mut |p| lp.filter(p)).0);
                if let Ok(prog) = Program::new(&insns) {
                    r.vm_on_libpcap_program_ns = Some(best(&mut |p| prog.matches(p)).0);
                }
            }
        }
        out.push(r);
    }
    Ok(out)
}

/// Configuration of [`tap_path_bench`].
#[derive(Clone, Debug)]
pub struct TapBenchConfig {
    /// Worker threads.
    pub workers: usize,
    /// Taps attached (all on port 0, both directions).
    pub taps: usize,
    /// Filter of every tap.
    pub filter: String,
    /// Replace one tap's filter this often (`None`: never).
    pub swap_every: Option<Duration>,
    /// How long to run.
    pub duration: Duration,
    /// Ring slots per worker per tap.
    pub ring_slots: usize,
    /// Snap length of the taps.
    pub snaplen: u32,
}

impl Default for TapBenchConfig {
    fn default() -> Self {
        TapBenchConfig {
            workers: 1,
            taps: 1,
            filter: "tcp port 80".into(),
            swap_every: Some(Duration::from_millis(1)),
            duration: Duration::from_secs(1),
            ring_slots: 4096,
            snaplen: 128,
        }
    }
}

/// Result of [`tap_path_bench`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct TapBenchResult {
    /// Packets offered, per worker.
    pub packets_per_worker: Vec<u64>,
    /// Mpps per worker.
    pub mpps_per_worker: Vec<f64>,
    /// Sum of the workers' Mpps.
    pub mpps_total: f64,
    /// Filter replacements done.
    pub swaps: u64,
    /// Writer counters, one per tap.
    pub taps: Vec<TapStats>,
}

/// Runs the worker side of taps in isolation (see the module documentation).
pub fn tap_path_bench<R: TapRegistry>(cfg: &TapBenchConfig) -> Result<TapBenchResult, String> {
    let reg = R::with_workers(cfg.workers);
    let filter = Filter::new(&cfg.filter, cfg.snaplen).map_err(|e| e.to_string())?;
    let alt = Filter::new("udp port 53", cfg.snaplen).map_err(|e| e.to_string())?;
    let mut writers = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..cfg.taps {
        let spec = TapSpec {
            port: 0,
            dir: Direction::Both,
            snaplen: cfg.snaplen,
            ring_slots: cfg.ring_slots,
            lossless: false,
        };
        let (id, reader) = reg.attach(spec, filter.clone()).map_err(|e| e.to_string())?;
        let w = TapWriter::new(reader, std::io::sink(), WriterOptions::default()).map_err(|e| e.to_string())?;
        ids.push(id);
        writers.push(std::thread::spawn(move || w.run()));
    }
    let batch: Vec<Packet> = clean_frames(11, 32)
        .iter()
        .filter_map(|f| Packet::from_frame(f).ok())
        .collect::<Vec<_>>();
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(cfg.workers + 1));
    let mut handles = Vec::new();
    for i in 0..cfg.workers {
        let mut w = reg.worker(i).ok_or("worker handle already claimed")?;
        let batch = batch.clone();
        let stop = stop.clone();
        let barrier = barrier.clone();
        handles.push(std::thread::spawn(move || {
            barrier.wait();
            let start = Instant::now();
            let mut n = 0u64;
            let mut ts = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    ts += 1000;
                    // As a datapath worker does once per poll: its progress mark, then the batch.
                    w.progress(ts);
                    w.tap(0, Direction::Rx, &batch, ts);
                    n += batch.len() as u64;
                }
            }
            (n, start.elapsed())
        }));
    }
    barrier.wait();
    let start = Instant::now();
    let mut swaps = 0u64;
    while start.elapsed() < cfg.duration {
        match (cfg.swap_every, ids.first()) {
            (Some(every), Some(&id)) => {
                std::thread::sleep(every);
                let f = if swaps % 2 == 0 { alt.clone() } else { filter.clone() };
                reg.replace_filter(id, f).map_err(|e| e.to_string())?;
                swaps += 1;
            }
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut packets = Vec::new();
    let mut mpps = Vec::new();
    for h in handles {
        let (n, d) = h.join().map_err(|_| "worker panicked")?;
        packets.push(n);
        mpps.push(n as f64 / d.as_secs_f64() / 1e6);
    }
    for id in &ids {
        reg.detach(*id);
    }
    let mut taps = Vec::new();
    for w in writers {
        taps.push(w.join().map_err(|_| "writer panicked")?.map_err(|e| e.to_string())?);
    }
    Ok(TapBenchResult {
        mpps_total: mpps.iter().sum(),
        packets_per_worker: packets,
        mpps_per_worker: mpps,
        swaps,
        taps,
    })
}
