//! `freeway bench nat`: what NAT costs the tracker, against plain tracking in the same run.
//!
//! * **New connections**: each worker creates connections from its own clients (UDP, one
//!   packet each, to one server; each client's source port is its own, spread over Linux's
//!   ephemeral range as real clients' are, [`client_port`]), doing per packet what the
//!   datapath does for a new connection's first packet under an nftables ruleset (NAT needs
//!   one): the ingress lookup without commit (`runtime/stateful.rs`), then either plainly the
//!   commit that the accepting filter hook makes (`track` again, with commit: a second
//!   lookup, one insert; `runtime/firewall.rs`) or, translated as postrouting does
//!   (`runtime/nat.rs`), from what the ingress lookup (`track_new`, as under nat chains)
//!   handed on in the packet's note ([`NewConn`], written as bytes and read back, its key
//!   hashed again): prerouting's tuple, then `nat::commit_seen` with a source translation to
//!   one public address: the client's own
//!   port when no other connection to the same server uses it, else a candidate from a
//!   pseudo-random point of the worker's blocks (seeded: every run the same), the rewrite,
//!   two inserts, the first of which tests the candidate. The ruleset's own judging is left
//!   out of both. The two variants alternate, each in a fresh table, at every worker count;
//!   the ratio is NAT over plain. Each variant is timed twice: in the fresh table, where
//!   every new connection's nodes (two for a translated one) and buckets are memory the
//!   kernel (and, in a virtual machine, the host) must first provide and zero, as while a
//!   datapath's table grows to its peak; then, the table flushed and its nodes recycled,
//!   the same connections again ("warm"), as in a datapath whose connections come and go:
//!   no fresh memory is touched.
//! * **Established packets**: `flows` connections per worker are created first, then each
//!   worker sends packets of them in turn in batches of 32 (`--directions`: by default both
//!   directions, each flow's original packet and its reply in turn, as a flow's traffic
//!   goes; or only one of them), either
//!   tracked (`track_each`, as the datapath's stage tracks a batch) or tracked and translated
//!   as the datapath does (`track_nat_each`, whose one lookup gives each packet's
//!   translation too, then the rewrite).
//!   Each packet is first copied from its template in both variants, so the copy cancels out.
//!   Each variant's timed loop is a function of its own (`established_plain`,
//!   `established_nat`), so that what is inlined into one does not change the other's code.
//! * **Fragment reassembly**: before the NAT table, the reassembly throughput of one worker
//!   (three-fragment UDP datagrams, alone and with refragmentation, as `bench frag` measures
//!   it), since translating a fragmented datagram first needs it whole; `--frag-seconds 0`
//!   leaves it out.
//!
//! Nothing here asserts timings; debug builds say nothing about speed.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use clap::Args;
use freeway_conntrack::frames;
use freeway_conntrack::nat::{self, NatPorts, SrcNat};
use freeway_conntrack::{extract, Conntrack, CtConfig, CtState, NatPlan, NewConn, TrackFlags};
use freeway_packet::bytes::{wr16, wr32};
use freeway_packet::{meta_flags, Packet};
use freeway_sync::Clock;
use serde::Serialize;

use crate::{median, write_report};

/// `bench nat`.
#[derive(Args, Clone)]
pub struct NatArgs {
    /// Worker counts, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// New connections per worker.
    #[arg(long, default_value_t = 1_000_000)]
    pub conns: usize,
    /// Established connections per worker for the per-packet part.
    #[arg(long, default_value_t = 4096)]
    pub flows: usize,
    /// Packets per worker for the per-packet part.
    #[arg(long, default_value_t = 5_000_000)]
    pub packets: usize,
    /// Which packets of the established flows are sent: both directions in turn, or one.
    #[arg(long, value_enum, default_value_t = Directions::Both)]
    pub directions: Directions,
    /// Runs per configuration (the median is shown).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Measured seconds of each fragment reassembly figure (0: leave reassembly out).
    #[arg(long, default_value_t = 1.0, value_parser = frag_seconds)]
    pub frag_seconds: f64,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// The packets of the established flows that `bench nat` sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Directions {
    /// Each flow's original-direction packet and its reply, in turn.
    Both,
    /// Original-direction packets only (the client's, translated at its source).
    Original,
    /// Replies only (the server's, to the translated address, translated back).
    Reply,
}

/// `--frag-seconds`: a duration, or 0 (no reassembly figures).
fn frag_seconds(s: &str) -> Result<f64, String> {
    if s.trim().parse::<f64>() == Ok(0.0) {
        return Ok(0.0);
    }
    freeway_datapath::config::parse_seconds(s)
}

/// One configuration's results.
#[derive(Clone, Debug, Serialize)]
pub struct NatRow {
    /// Workers.
    pub workers: usize,
    /// New connections per second per worker (slowest worker, median run): plain, NAT.
    pub new_plain: f64,
    /// See `new_plain`.
    pub new_nat: f64,
    /// New connections per second per worker as `new_plain`, in a table that held them
    /// before (flushed, its node memory recycled): no fresh memory touched.
    pub new_plain_warm: f64,
    /// See `new_plain_warm`.
    pub new_nat_warm: f64,
    /// Nanoseconds per established packet per worker: plain tracking, tracking + NAT.
    pub ns_plain: f64,
    /// See `ns_plain`.
    pub ns_nat: f64,
    /// Packets or connections that did not go as expected (must be 0).
    pub unexpected: u64,
}

const PUBLIC: u32 = 0xc000_0201; // 192.0.2.1
const SERVER: u32 = 0xc633_0000; // 198.51.0.0, and up
const PORT_SEED: u64 = 0x5eed;

fn table() -> Conntrack {
    let clock = Clock::manual();
    clock.set(1_000);
    let cfg = CtConfig {
        max: 16 << 20,
        expiry_queue: 1 << 22,
        ..CtConfig::default()
    };
    Conntrack::new(cfg, clock).expect("valid config").0
}

/// Client `i` of worker `id`: a distinct address per connection.
fn client(id: usize, i: usize) -> u32 {
    0x0a00_0000 | ((id as u32) << 20) | (i as u32 & 0xf_ffff)
}

/// Client `i`'s source port: a fixed pseudo-random one of Linux's ephemeral range
/// (32768-60999), as each real client picks its own. (With one port for all, every client
/// after the first to a server would find its port taken there and need a second candidate.)
fn client_port(id: usize, i: usize) -> u16 {
    let h = ((id as u64) << 32 | i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    (32_768 + h % 28_232) as u16
}

fn template() -> Packet {
    frames::udp(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::from(SERVER)),
        40_000,
        53,
        16,
    )
}

/// Sets the client address (and a port) of the UDP template, and the server: one of many, 256
/// connections each (one public address has at most 64,512 ports towards one server). Its
/// checksums are not kept (the benchmark marks the IPv4 header verified, and NAT's
/// incremental update does not care whether they were right).
fn set_client(p: &mut Packet, addr: u32, port: u16, i: usize) {
    let (l3, l4) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off));
    let d = p.data_mut();
    wr32(d, l3 + 12, addr);
    wr32(d, l3 + 16, SERVER + (i as u32 >> 8));
    wr16(d, l4, port);
}

/// One benchmark worker's tools: its tracker, its share of the ports, the translation, the
/// tracking flags.
struct Bw {
    ct: Conntrack,
    w: freeway_conntrack::CtWorker,
    ports: NatPorts,
    snat: SrcNat,
    flags: TrackFlags,
}

/// Runs `f` on `workers` threads over one fresh table, started together; returns each one's
/// result.
fn on_workers<R: Send + 'static>(
    workers: usize,
    f: impl Fn(usize, Bw, &Barrier) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let ct = table();
    let barrier = Arc::new(Barrier::new(workers));
    let f = Arc::new(f);
    let hs: Vec<_> = (0..workers)
        .map(|id| {
            let (ct, barrier, f) = (ct.clone(), barrier.clone(), f.clone());
            std::thread::spawn(move || {
                let bw = Bw {
                    w: ct.worker(),
                    ct,
                    ports: NatPorts::seeded(id, workers, PORT_SEED),
                    snat: SrcNat {
                        addr: (u128::from(PUBLIC), u128::from(PUBLIC)),
                        ports: None,
                    },
                    flags: TrackFlags {
                        commit: true,
                        l3_csum_verified: true,
                    },
                };
                f(id, bw, &barrier)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().expect("worker")).collect()
}

/// The tuple and transport state of a tracked packet.
fn tracked_of(p: &Packet) -> (freeway_conntrack::Tuple, extract::L4Info) {
    match extract::classify(p.data(), &p.meta, true) {
        extract::Class::Track(t, l4) => (t, l4),
        _ => unreachable!("a UDP frame"),
    }
}

/// One pass of `conns` new connections by worker `id` (see the module doc): `first(b, g, p)`
/// does what the datapath does with a new connection's first packet `p` and says how many
/// things did not go as expected; returns the connections per second and that count.
/// Always inlined into the two variants' own functions ([`new_plain_pass`],
/// [`new_nat_pass`]), so that neither's inlining shifts the other's count.
#[inline(always)]
fn new_conns_pass(
    id: usize,
    conns: usize,
    b: &mut Bw,
    mut first: impl FnMut(&mut Bw, &freeway_conntrack::Guard, &mut Packet) -> u64,
) -> (f64, u64) {
    let mut p = template();
    p.meta.flags |= meta_flags::IPV4_CSUM_OK;
    let mut bad = 0u64;
    let t0 = Instant::now();
    for start in (0..conns).step_by(32) {
        let g = b.w.pin();
        for i in start..(start + 32).min(conns) {
            set_client(&mut p, client(id, i), client_port(id, i), i);
            bad += first(b, &g, &mut p);
        }
    }
    (conns as f64 / t0.elapsed().as_secs_f64(), bad)
}

/// Whether a new connection's commit went as expected: created, in state new.
fn created(r: Result<freeway_conntrack::CtResult, nat::NatFail>) -> bool {
    r.is_ok_and(|r| r.state == CtState::New && !r.uncommitted)
}

/// [`new_conns_pass`] of plain tracking: the ingress lookup, which finds no connection and
/// creates none, then the accepting filter hook's commit.
#[inline(never)]
fn new_plain_pass(id: usize, conns: usize, b: &mut Bw) -> (f64, u64) {
    let ingress = TrackFlags {
        commit: false,
        ..b.flags
    };
    new_conns_pass(id, conns, b, |b, g, p| {
        let r = b.w.track(g, p.data(), &p.meta, 0, ingress);
        let made = b.w.track(g, p.data(), &p.meta, 0, b.flags);
        u64::from(!r.uncommitted) + u64::from(!created(Ok(made)))
    })
}

/// [`new_conns_pass`] translated: the ingress lookup under nat chains, which finds no
/// connection, creates none and hands on what the creation needs ([`NewConn`]), left in
/// the packet's note as bytes and read back (as `runtime/stateful.rs` and `runtime/nat.rs`
/// do); prerouting's tuple from it; postrouting's creation from it.
#[inline(never)]
fn new_nat_pass(id: usize, conns: usize, b: &mut Bw) -> (f64, u64) {
    let ingress = TrackFlags {
        commit: false,
        ..b.flags
    };
    let mut note = [0u8; NewConn::LEN];
    new_conns_pass(id, conns, b, |b, g, p| {
        let (r, _, new) = b.w.track_new(g, p.data(), &p.meta, 0, ingress);
        let Some(new) = new else { return 1 };
        new.write(&mut note);
        let Some(seen) = b.w.read_new(black_box(&note)) else {
            return 1;
        };
        let orig = seen.tuple();
        let made = nat::commit_seen(&mut b.w, &mut b.ports, g, p, &seen, &orig, orig, Some(b.snat));
        u64::from(!r.uncommitted) + u64::from(!created(made))
    })
}

/// New connections per second per worker (slowest worker): in a fresh table, then again in
/// the same table once flushed, its nodes recycled. Returns both rates and how many
/// connections did not go as expected.
fn new_conns(workers: usize, conns: usize, translate: bool) -> (f64, f64, u64) {
    let rs = on_workers(workers, move |id, mut b, barrier| {
        barrier.wait();
        let pass = if translate { new_nat_pass } else { new_plain_pass };
        let (fresh, mut bad) = pass(id, conns, &mut b);
        barrier.wait();
        if id == 0 {
            bad += (b.ct.flush() != conns * workers) as u64;
        }
        barrier.wait();
        // The flushed nodes' grace period: every thread pins and hands its deferred work on
        // until the recycling has run (the table frees them to its free-node store).
        for _ in 0..256 {
            freeway_sync::reclaim::flush();
        }
        barrier.wait();
        for _ in 0..256 {
            freeway_sync::reclaim::flush();
        }
        // The same connections again, with the worker's ports as they were at the start.
        b.ports = NatPorts::seeded(id, workers, PORT_SEED);
        barrier.wait();
        let (warm, more) = pass(id, conns, &mut b);
        (fresh, warm, bad + more)
    });
    let slowest = |f: fn(&(f64, f64, u64)) -> f64| rs.iter().map(f).fold(f64::INFINITY, f64::min);
    (slowest(|r| r.0), slowest(|r| r.1), rs.iter().map(|r| r.2).sum())
}

/// Nanoseconds per established packet per worker (slowest worker), the flows' packets sent
/// in `dirs`.
fn per_packet(workers: usize, flows: usize, packets: usize, translate: bool, dirs: Directions) -> (f64, u64) {
    let rs = on_workers(workers, move |id, mut b, barrier| {
        // The flows, each created (translated or not) and answered once.
        let mut bad = 0u64;
        let mut templates = Vec::with_capacity(2 * flows);
        {
            let g = b.w.pin();
            for i in 0..flows {
                let mut p = template();
                p.meta.flags |= meta_flags::IPV4_CSUM_OK;
                set_client(&mut p, client(id, i), client_port(id, i), i);
                let (orig, l4) = tracked_of(&p);
                let mut q = p.clone();
                if translate {
                    bad += u64::from(
                        nat::commit_new(&mut b.w, &mut b.ports, &g, &mut q, 0, &orig, orig, l4, Some(b.snat)).is_err(),
                    );
                } else {
                    let _ = b.w.track(&g, q.data(), &q.meta, 0, b.flags);
                }
                // The reply, so that the connection is established.
                let (t, _) = tracked_of(&q);
                let mut r = frames::udp(t.dst_ip(), t.src_ip(), t.dport, t.sport, 16);
                r.meta.flags |= meta_flags::IPV4_CSUM_OK;
                let _ = b.w.track(&g, r.data(), &r.meta, 0, b.flags);
                if dirs != Directions::Reply {
                    templates.push(p);
                }
                if dirs != Directions::Original {
                    templates.push(r);
                }
            }
        }
        barrier.wait();
        let (ns, more) = if translate {
            established_nat(&mut b, &templates, packets)
        } else {
            established_plain(&mut b, &templates, packets)
        };
        (ns, bad + more)
    });
    let slowest = rs.iter().map(|r| r.0).fold(0f64, f64::max);
    (slowest, rs.iter().map(|r| r.1).sum())
}

/// The timed loop of the established phase, plain: `packets` packets of the connections of
/// `templates` in turn, in batches of 32, each batch under one pin and tracked as the
/// datapath's stage tracks one (`CtWorker::track_each`). Returns the nanoseconds per packet
/// and how many packets were not established. Out of line, as [`established_nat`]: each
/// variant is compiled on its own, so that what is inlined into one does not change the
/// other's code.
#[inline(never)]
fn established_plain(b: &mut Bw, templates: &[Packet], packets: usize) -> (f64, u64) {
    let mut batch: Vec<Packet> = (0..32).map(|_| template()).collect();
    let flags = b.flags;
    let mut bad = 0u64;
    let t0 = Instant::now();
    let mut i = 0;
    while i < packets {
        let g = b.w.pin();
        i = refill(&mut batch, templates, i);
        b.w.track_each(
            &g,
            &mut batch,
            |_, _| (0, flags),
            |_, _, r| bad += u64::from(r.state != CtState::Established),
        );
        black_box(&batch);
    }
    (t0.elapsed().as_nanos() as f64 / i as f64, bad)
}

/// [`established_plain`] translated: each batch tracked with its plans
/// (`CtWorker::track_nat_each`, one lookup a packet), the plans kept, then applied over the
/// batch, as the datapath's NAT hooks apply the note tracking left (a large callback is not
/// inlined).
#[inline(never)]
fn established_nat(b: &mut Bw, templates: &[Packet], packets: usize) -> (f64, u64) {
    let mut batch: Vec<Packet> = (0..32).map(|_| template()).collect();
    let mut plans: [Option<NatPlan>; 32] = [None; 32];
    let flags = b.flags;
    let mut bad = 0u64;
    let t0 = Instant::now();
    let mut i = 0;
    while i < packets {
        let g = b.w.pin();
        i = refill(&mut batch, templates, i);
        b.w.track_nat_each(
            &g,
            &mut batch,
            |_, _| (0, flags),
            |i, _, r, plan| {
                bad += u64::from(r.state != CtState::Established);
                plans[i] = plan;
            },
        );
        for (p, plan) in batch.iter_mut().zip(plans.iter()) {
            match plan {
                Some(plan @ (NatPlan::Packet { .. } | NatPlan::Packet4(_))) => {
                    bad += u64::from(!nat::apply(p, plan));
                }
                _ => bad += 1,
            }
        }
        black_box(&batch);
    }
    (t0.elapsed().as_nanos() as f64 / i as f64, bad)
}

/// Copies the next packets, from the `i`-th on (the templates in turn), over the batch's;
/// returns the index after them. Both variants copy alike, so the copy cancels out.
#[inline(always)]
fn refill(batch: &mut [Packet], templates: &[Packet], mut i: usize) -> usize {
    for p in batch.iter_mut() {
        let tpl = &templates[i % templates.len()];
        p.data_mut().copy_from_slice(tpl.data());
        p.meta = tpl.meta;
        i += 1;
    }
    i
}

/// Runs `bench nat`.
pub fn nat_cmd(a: NatArgs) -> Result<(), String> {
    if a.workers.iter().any(|&n| n == 0 || n > 64) || a.conns == 0 || a.flows == 0 || a.packets == 0 {
        return Err("need workers 1..=64 and conns, flows, packets >= 1".into());
    }
    if a.conns > 1 << 20 {
        return Err("at most 1048576 new connections per worker (one client address each)".into());
    }
    let reassembly = if a.frag_seconds > 0.0 {
        let rep = crate::frag::run(&crate::frag::FragArgs {
            seconds: a.frag_seconds,
            forward_runs: 0,
            ..Default::default()
        })?;
        crate::frag::print_throughput("bench nat: fragment ", &rep);
        rep.throughput
    } else {
        Vec::new()
    };
    let dirs = match a.directions {
        Directions::Both => "both directions in turn",
        Directions::Original => "original direction",
        Directions::Reply => "replies",
    };
    println!("bench nat: new connections per second per worker, and ns per established packet per worker ({dirs})");
    println!("new: in a fresh table, and warm (again, the table flushed and its nodes recycled)");
    println!(
        "workers  new plain M/s  new NAT M/s  NAT/plain  warm plain  warm NAT  NAT/plain   plain ns/pkt  NAT ns/pkt  NAT/plain"
    );
    let mut rows = Vec::new();
    for &n in &a.workers {
        let (mut np, mut nn, mut pp, mut pn) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut wp, mut wn) = (Vec::new(), Vec::new());
        let mut unexpected = 0;
        for _ in 0..a.runs.max(1) {
            let (r, w, b) = new_conns(n, a.conns, false);
            np.push(r);
            wp.push(w);
            unexpected += b;
            let (r, w, b) = new_conns(n, a.conns, true);
            nn.push(r);
            wn.push(w);
            unexpected += b;
            let (r, b) = per_packet(n, a.flows, a.packets, false, a.directions);
            pp.push(r);
            unexpected += b;
            let (r, b) = per_packet(n, a.flows, a.packets, true, a.directions);
            pn.push(r);
            unexpected += b;
        }
        let row = NatRow {
            workers: n,
            new_plain: median(&np),
            new_nat: median(&nn),
            new_plain_warm: median(&wp),
            new_nat_warm: median(&wn),
            ns_plain: median(&pp),
            ns_nat: median(&pn),
            unexpected,
        };
        println!(
            "{n:>7}  {:>13.2}  {:>11.2}  {:>9.2}  {:>10.2}  {:>8.2}  {:>9.2}   {:>12.1}  {:>10.1}  {:>9.2}",
            row.new_plain / 1e6,
            row.new_nat / 1e6,
            row.new_nat / row.new_plain,
            row.new_plain_warm / 1e6,
            row.new_nat_warm / 1e6,
            row.new_nat_warm / row.new_plain_warm,
            row.ns_plain,
            row.ns_nat,
            row.ns_nat / row.ns_plain
        );
        if unexpected > 0 {
            return Err(format!(
                "nat: {unexpected} packets or connections did not go as expected"
            ));
        }
        rows.push(row);
    }
    // The rows where they always were; reassembly (one worker, alone and with
    // refragmentation; empty with `--frag-seconds 0`) beside them.
    match a.json.as_deref() {
        Some(path) => write_report(
            path,
            None,
            serde_json::json!({ "rows": rows, "reassembly": reassembly, "directions": a.directions }),
        ),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reports_reassembly_and_both_phases_with_nothing_unexpected() {
        let path = std::env::temp_dir().join(format!("freeway-bench-nat-{}.json", std::process::id()));
        nat_cmd(NatArgs {
            workers: vec![1],
            conns: 64,
            flows: 16,
            packets: 256,
            directions: Directions::Both,
            runs: 1,
            frag_seconds: 0.01,
            json: Some(path.clone()),
        })
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        let works: Vec<&str> = v["reassembly"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["work"].as_str().unwrap())
            .collect();
        assert_eq!(works, ["reassemble", "reassemble+refragment"], "{v}");
        assert_eq!(frag_seconds("0"), Ok(0.0));
        assert_eq!(frag_seconds("0.5"), Ok(0.5));
        assert!(frag_seconds("-1").is_err());
        for r in v["reassembly"].as_array().unwrap() {
            assert!(r["datagrams_per_s"].as_f64().unwrap() > 0.0, "{v}");
        }
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{v}");
        assert_eq!(rows[0]["unexpected"], 0, "{v}");
        assert_eq!(v["directions"], "both", "{v}");
        for k in [
            "new_plain",
            "new_nat",
            "new_plain_warm",
            "new_nat_warm",
            "ns_plain",
            "ns_nat",
        ] {
            assert!(rows[0][k].as_f64().unwrap() > 0.0, "{k}: {v}");
        }
    }

    /// Each direction of the established flows, alone and in turn, goes as expected: every
    /// packet found established and, translated, rewritten by the plan its lookup gave (a
    /// reply's, found under the reply node, made from its primary's rewrite reversed).
    #[test]
    fn each_direction_of_the_established_flows_goes_as_expected() {
        for dirs in [Directions::Original, Directions::Reply, Directions::Both] {
            for translate in [false, true] {
                let (ns, bad) = per_packet(2, 40, 640, translate, dirs);
                assert_eq!(bad, 0, "{dirs:?}, translated: {translate}");
                assert!(ns > 0.0);
            }
        }
    }
}
