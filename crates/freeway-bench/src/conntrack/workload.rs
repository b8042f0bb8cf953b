//! The conntrack workloads behind `freeway bench conntrack`, `conntrack-churn` and
//! `conntrack-table`. They return numbers; nothing here asserts timings.
//!
//! * [`ovs_workload`]: the Open vSwitch `test-conntrack benchmark N 3000000 32` workload of
//!   Open vSwitch's `test-conntrack benchmark` (see `ovs_workload`), with a [`Variant::GlobalLock`] baseline (lookup, update and insert behind one
//!   global mutex: the shape of OVS conntrack before its scalability series).
//! * [`churn`]: new TCP connections per second per worker, each with a full handshake and a
//!   teardown (FIN both ways, or RST), while the expiry thread removes closed connections.
//! * [`large_table`]: random access over a preloaded table of established connections.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use freeway_packet::build::{build_frame, tcp_flags as tf, FrameSpec, L4};
use freeway_packet::bytes::{wr16, wr32};
use freeway_packet::{parse, Packet};
use freeway_sync::Clock;
use serde::Serialize;

use freeway_conntrack::frames::{self, Seg};
use freeway_conntrack::{pin, Conntrack, CtConfig, CtState, InvalidReason, TimeoutClass, TrackFlags};

/// Which conntrack to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Variant {
    /// The lock-free table with per-connection updates.
    Freeway,
    /// The same work behind one global mutex (the "before").
    GlobalLock,
}

impl Variant {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Freeway => "freeway",
            Variant::GlobalLock => "global-lock",
        }
    }
}

/// The 42-byte frame of worker `id`: Ethernet/IPv4/UDP, 10.1.1.1:(1+id) → 10.1.1.2:2, UDP
/// checksum 0, TTL 0, valid IPv4 header checksum, no payload.
pub fn ovs_frame(id: usize) -> Packet {
    let spec = FrameSpec {
        src_ip: IpAddr::V4(Ipv4Addr::new(10, 1, 1, 1)),
        dst_ip: IpAddr::V4(Ipv4Addr::new(10, 1, 1, 2)),
        proto: L4::Udp,
        src_port: 1 + id as u16,
        dst_port: 2,
        len: 42,
        ttl: 0,
        l4_checksum: false,
        ..FrameSpec::default()
    };
    let mut p = Packet::from_frame(&build_frame(&spec)).expect("42 bytes fit");
    parse(&mut p).expect("valid frame");
    p
}

/// The conntrack workload of Open vSwitch's `test-conntrack benchmark N 3000000 32`: `threads` workers each track `packets` packets (their
/// `batch` frames, `packets / batch` times) of one UDP flow in zone 0 with commit; an expiry
/// thread runs but has nothing to do. Returns the wall time from the first worker's start to
/// the last worker's end, each read by the worker itself: the spawning thread's own clock
/// reads would count the time it waits for a core (on a small machine every core runs a
/// pinned worker, and a start read late made a run of 3,000,000 packets read 6 ms).
///
/// With `pin_cores`, worker `i` is pinned to core `i % cores` before it builds its frames (the
/// datapath pins its workers the same way): on a small machine an unpinned worker may share
/// a core with another for the first milliseconds of a 30 ms run, until the scheduler
/// spreads them, which shows up as noise in the N = 2 time.
pub fn ovs_workload(threads: usize, packets: usize, batch: usize, variant: Variant, pin_cores: bool) -> Duration {
    let threads = threads.max(1);
    let cores = if pin_cores {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let batch = batch.clamp(1, freeway_packet::MAX_BATCH);
    let clock = Clock::manual();
    clock.set(1_000);
    let mut cfg = CtConfig {
        global_lock: variant == Variant::GlobalLock,
        ..CtConfig::default()
    };
    cfg.timeouts.set_ms(TimeoutClass::UdpSingle, 60_000);
    let (ct, exp) = Conntrack::new(cfg, clock.clone()).expect("valid config");
    let _expiry = exp.spawn();
    let barrier = Arc::new(Barrier::new(threads));
    let passes = packets / batch;
    let handles: Vec<_> = (0..threads)
        .map(|id| {
            let ct = ct.clone();
            let barrier = barrier.clone();
            let clock = clock.clone();
            let core = (!cores.is_empty()).then(|| cores[id % cores.len()]);
            std::thread::spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                let mut w = ct.worker();
                let mut pkts: Vec<Packet> = (0..batch).map(|_| ovs_frame(id)).collect();
                // Read by the batch's classification, written by its results.
                let verified = vec![std::cell::Cell::new(false); batch];
                // "now" is read once.
                w.set_now(clock.now());
                barrier.wait();
                let start = Instant::now();
                let mut new = 0u64;
                for _ in 0..passes {
                    let g = pin();
                    // The batch as the datapath's stage tracks one (`CtWorker::track_each`).
                    w.track_each(
                        &g,
                        &mut pkts,
                        |i, _| {
                            let flags = TrackFlags {
                                commit: true,
                                l3_csum_verified: verified[i].get(),
                            };
                            (0, flags)
                        },
                        |i, _, r| {
                            verified[i].set(r.state != CtState::Invalid(InvalidReason::IpChecksum));
                            new += u64::from(r.state == CtState::New);
                        },
                    );
                }
                let end = Instant::now();
                (black_box(new), start, end)
            })
        })
        .collect();
    let mut span: Option<(Instant, Instant)> = None;
    for h in handles {
        let (new, start, end) = h.join().expect("worker");
        debug_assert_eq!(new as usize, passes * batch);
        span = Some(span.map_or((start, end), |(s, e)| (s.min(start), e.max(end))));
    }
    span.map_or(Duration::ZERO, |(s, e)| e - s)
}

/// How churned connections end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Teardown {
    /// FIN/ACK from each side (7 packets per connection).
    Fin,
    /// RST from the client after the handshake (4 packets per connection).
    Rst,
}

/// Result of [`churn`].
#[derive(Clone, Debug, Serialize)]
pub struct ChurnResult {
    /// Workers.
    pub threads: usize,
    /// Connections opened and closed per worker.
    pub conns_per_worker: usize,
    /// New connections per second, per worker.
    pub conns_per_sec: Vec<f64>,
    /// Packets per connection.
    pub packets_per_conn: usize,
    /// Wall time of the whole run.
    pub elapsed_ms: f64,
    /// Packets that were not tracked as expected (must be 0).
    pub unexpected: u64,
    /// Connections refused by a limit or a full queue.
    pub refused: u64,
    /// Connections removed by the expiry thread during the run.
    pub expired: u64,
    /// Connections still in the table at the end (closed ones not yet expired).
    pub left: usize,
}

/// Connection churn: each of `threads` workers opens and closes `conns_per_worker` TCP
/// connections (handshake, teardown) with the expiry thread running and a ticking clock.
/// Closed connections (TIME_WAIT, CLOSE) get a 0 ms timeout, so expiry removes them on its
/// next round; `expiry_chunk` bounds each round.
pub fn churn(threads: usize, conns_per_worker: usize, teardown: Teardown, expiry_chunk: usize) -> ChurnResult {
    let threads = threads.max(1);
    let (clock, _ticker) = Clock::start();
    let mut cfg = CtConfig {
        max: 8 << 20,
        expiry_chunk: expiry_chunk.max(1),
        expiry_queue: 1 << 20,
        ..CtConfig::default()
    };
    cfg.timeouts.set_ms(TimeoutClass::TcpTimeWait, 0);
    cfg.timeouts.set_ms(TimeoutClass::TcpClose, 0);
    let (ct, exp) = Conntrack::new(cfg, clock).expect("valid config");
    let expiry = exp.spawn();
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|id| {
            let ct = ct.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || churn_worker(&ct, id, conns_per_worker, teardown, &barrier))
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    let mut res = ChurnResult {
        threads,
        conns_per_worker,
        conns_per_sec: Vec::new(),
        packets_per_conn: if teardown == Teardown::Fin { 7 } else { 4 },
        elapsed_ms: 0.0,
        unexpected: 0,
        refused: 0,
        expired: 0,
        left: 0,
    };
    for h in handles {
        let (d, unexpected) = h.join().expect("worker");
        res.conns_per_sec.push(conns_per_worker as f64 / d.as_secs_f64());
        res.unexpected += unexpected;
    }
    res.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    drop(expiry);
    let st = ct.stats();
    res.refused = InvalidReason::ALL
        .iter()
        .filter(|r| r.is_limit())
        .map(|r| st.invalid_by_reason.get(r.name()).copied().unwrap_or(0))
        .sum();
    res.expired = st.expired;
    res.left = ct.len();
    res
}

fn churn_worker(ct: &Conntrack, id: usize, n: usize, teardown: Teardown, barrier: &Barrier) -> (Duration, u64) {
    let mut w = ct.worker();
    let cli = IpAddr::V4(Ipv4Addr::new(10, 2, id as u8, 1));
    let srv = IpAddr::V4(Ipv4Addr::new(10, 3, 0, 1));
    let (c, s) = (1000u32, 5000u32);
    // (packet, from client, expected state)
    let seg = |from_cli: bool, flags: u8, seq: u32, ack: u32, want: CtState| {
        let (a, b) = if from_cli { (cli, srv) } else { (srv, cli) };
        (frames::tcp(a, b, 1, 1, Seg::new(flags, seq, ack)), from_cli, want)
    };
    let mut script: Vec<(Packet, bool, CtState)> = vec![
        seg(true, tf::SYN, c, 0, CtState::New),
        seg(false, tf::SYN | tf::ACK, s, c + 1, CtState::Established),
        seg(true, tf::ACK, c + 1, s + 1, CtState::Established),
    ];
    match teardown {
        Teardown::Fin => script.extend([
            seg(true, tf::FIN | tf::ACK, c + 1, s + 1, CtState::Established),
            seg(false, tf::ACK, s + 1, c + 2, CtState::Established),
            seg(false, tf::FIN | tf::ACK, s + 1, c + 2, CtState::Established),
            seg(true, tf::ACK, c + 2, s + 2, CtState::Established),
        ]),
        Teardown::Rst => script.push(seg(true, tf::RST | tf::ACK, c + 1, s + 1, CtState::Established)),
    }
    let flags = TrackFlags {
        commit: true,
        l3_csum_verified: true,
    };
    barrier.wait();
    let t0 = Instant::now();
    let mut unexpected = 0u64;
    let mut i = 0usize;
    while i < n {
        let g = w.pin();
        // One batch: a few connections, all their packets (a handshake takes round trips, so
        // a real batch holds packets of many connections; this keeps the tracker's order).
        for _ in 0..4 {
            if i == n {
                break;
            }
            let sport = 1024 + (i % 64_000) as u16;
            let dport = 1 + (i / 64_000) as u16;
            for (p, from_cli, want) in script.iter_mut() {
                let l4 = usize::from(p.meta.l4_off);
                let (a, b) = if *from_cli { (sport, dport) } else { (dport, sport) };
                let d = p.data_mut();
                wr16(d, l4, a);
                wr16(d, l4 + 2, b);
                let r = w.track(&g, p.data(), &p.meta, 0, flags);
                unexpected += u64::from(r.state != *want);
            }
            i += 1;
        }
    }
    (t0.elapsed(), unexpected)
}

/// Result of [`large_table`].
#[derive(Clone, Debug, Serialize)]
pub struct LargeResult {
    /// Workers.
    pub threads: usize,
    /// Connections preloaded.
    pub conns: usize,
    /// Time to preload them (two packets each, one worker per thread).
    pub preload_ms: f64,
    /// Packets per second per worker during random access.
    pub pps: Vec<f64>,
    /// Packets not found established (must be 0).
    pub unexpected: u64,
}

fn large_frame() -> Packet {
    frames::udp(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)),
        IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
        1000,
        53,
        0,
    )
}

fn set_client(p: &mut Packet, i: u32, reply: bool) {
    let l3 = usize::from(p.meta.l3_off);
    let at = if reply { l3 + 16 } else { l3 + 12 };
    wr32(p.data_mut(), at, 0x0a00_0000 | i);
}

/// Random access over a large table: `conns` UDP connections (client 10.x.y.z:1000 →
/// 192.168.0.1:53, each replied, so established) are preloaded, then each of `threads`
/// workers tracks `packets` packets of uniformly random connections. Frames are rewritten in
/// place per packet, so the IPv4 checksum is treated as verified.
pub fn large_table(threads: usize, conns: usize, packets: usize) -> LargeResult {
    let threads = threads.max(1);
    let conns = conns.clamp(1, 1 << 24);
    let clock = Clock::manual();
    clock.set(1_000);
    let cfg = CtConfig {
        max: conns + 1024,
        expiry_queue: conns + 1024,
        ..CtConfig::default()
    };
    let (ct, exp) = Conntrack::new(cfg, clock).expect("valid config");
    let _expiry = exp.spawn();
    let flags = TrackFlags {
        commit: true,
        l3_csum_verified: true,
    };
    let t0 = Instant::now();
    let loaders: Vec<_> = (0..threads)
        .map(|t| {
            let ct = ct.clone();
            std::thread::spawn(move || {
                let mut w = ct.worker();
                let mut orig = large_frame();
                let mut reply = frames::udp(
                    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)),
                    53,
                    1000,
                    0,
                );
                let mut g = w.pin();
                for i in (t..conns).step_by(threads) {
                    if i % 32 == 0 {
                        g = w.pin();
                    }
                    set_client(&mut orig, i as u32, false);
                    set_client(&mut reply, i as u32, true);
                    w.track(&g, orig.data(), &orig.meta, 0, flags);
                    w.track(&g, reply.data(), &reply.meta, 0, flags);
                }
            })
        })
        .collect();
    for h in loaders {
        h.join().expect("loader");
    }
    let preload_ms = t0.elapsed().as_secs_f64() * 1e3;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let ct = ct.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut w = ct.worker();
                let mut p = large_frame();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                let mut unexpected = 0u64;
                barrier.wait();
                let t0 = Instant::now();
                let mut done = 0;
                while done < packets {
                    let g = w.pin();
                    for _ in 0..32 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = (((x >> 32) * conns as u64) >> 32) as u32;
                        set_client(&mut p, i, false);
                        let r = w.track(&g, p.data(), &p.meta, 0, flags);
                        unexpected += u64::from(r.state != CtState::Established);
                    }
                    done += 32;
                }
                (done as f64 / t0.elapsed().as_secs_f64(), unexpected)
            })
        })
        .collect();
    let mut res = LargeResult {
        threads,
        conns,
        preload_ms,
        pps: Vec::new(),
        unexpected: 0,
    };
    for h in handles {
        let (pps, u) = h.join().expect("worker");
        res.pps.push(pps);
        res.unexpected += u;
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ovs_workload_spans_its_workers() {
        for v in [Variant::Freeway, Variant::GlobalLock] {
            // Two workers, two batches each: the span runs from the first worker's start to
            // the last one's end, so it is never empty.
            assert!(ovs_workload(2, 64, 32, v, false) > Duration::ZERO);
        }
    }
}
