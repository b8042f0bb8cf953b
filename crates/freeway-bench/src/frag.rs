//! `freeway bench frag`: what fragment reassembly costs.
//!
//! * **Reassembly throughput**, one worker's table on this thread: 3-fragment UDP datagrams
//!   (4,000 bytes of data cut at 1,480: fragments of 1500, 1500 and 1060 bytes of IP),
//!   datagrams cycling through `inflight` identifications as a port would deliver them:
//!   each fragment is copied into a pool buffer and parsed (a port's and the parser's work),
//!   then pushed into the [`Reassembler`]; the datagram is recycled, or, in the second
//!   measurement, refragmented first (the transmit side's work). Datagrams and fragments per
//!   second.
//! * **The unfragmented path**: the whole datapath (the router topology of `bench firewall`'s
//!   forwarding comparison, conntrack on, established 64-byte UDP) with reassembly enabled
//!   and disabled, alternating run by run; the paired ratio enabled / disabled (the check
//!   every packet pays: one header word). It should be about 1.0.
//!
//! [`run`] is a plain function returning a serializable [`FragReport`], for other benchmarks
//! to call.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use freeway_frag::build::{fragments, udp_payload, FragSpec};
use freeway_frag::{refragment, Limits, Reassembler};
use freeway_packet::{parse, PacketPool};
use serde::Serialize;

use crate::{median, write_json, WARMUP};

/// `bench frag`.
#[derive(Args, Clone, Debug)]
pub struct FragArgs {
    /// Measured seconds per measurement.
    #[arg(long, default_value_t = 1.0, value_parser = freeway_datapath::config::parse_seconds)]
    pub seconds: f64,
    /// Datagrams in flight at once (identifications cycled through).
    #[arg(long, default_value_t = 64)]
    pub inflight: u32,
    /// Rounds of the unfragmented-path comparison (0: skip it).
    #[arg(long, default_value_t = 3)]
    pub forward_runs: usize,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl Default for FragArgs {
    fn default() -> Self {
        FragArgs {
            seconds: 1.0,
            inflight: 64,
            forward_runs: 3,
            json: None,
        }
    }
}

/// Reassembly throughput of one worker.
#[derive(Clone, Debug, Serialize)]
pub struct ThroughputRow {
    /// `reassemble` or `reassemble+refragment`.
    pub work: &'static str,
    /// Datagrams per second.
    pub datagrams_per_s: f64,
    /// Fragments per second (3 per datagram).
    pub fragments_per_s: f64,
    /// Nanoseconds per fragment.
    pub ns_per_fragment: f64,
}

/// The unfragmented path with reassembly enabled and disabled.
#[derive(Clone, Debug, Serialize)]
pub struct UnfragmentedRow {
    /// Mpps per worker with reassembly enabled, per round.
    pub enabled_mpps: Vec<f64>,
    /// Mpps per worker with it disabled, per round.
    pub disabled_mpps: Vec<f64>,
    /// The median of the paired ratios enabled / disabled.
    pub ratio: f64,
}

/// What `bench frag` measured.
#[derive(Clone, Debug, Serialize)]
pub struct FragReport {
    /// The reassembly table's bounds.
    pub limits: Limits,
    /// Datagrams in flight.
    pub inflight: u32,
    /// Reassembly alone, then with refragmentation.
    pub throughput: Vec<ThroughputRow>,
    /// The unfragmented path (absent with `forward_runs = 0`).
    pub unfragmented: Option<UnfragmentedRow>,
}

/// Runs the benchmark (see the module doc).
pub fn run(a: &FragArgs) -> Result<FragReport, String> {
    let limits = Limits::default();
    let inflight = a.inflight.clamp(1, limits.max_datagrams as u32);
    let mut throughput = Vec::new();
    for refrag in [false, true] {
        throughput.push(throughput_row(limits, inflight, a.seconds, refrag)?);
    }
    let unfragmented = if a.forward_runs > 0 {
        let (mut on, mut off, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..a.forward_runs {
            let e = forward(true, a.seconds)?;
            let d = forward(false, a.seconds)?;
            on.push(e);
            off.push(d);
            if d > 0.0 {
                ratios.push(e / d);
            }
        }
        Some(UnfragmentedRow {
            enabled_mpps: on,
            disabled_mpps: off,
            ratio: median(&ratios),
        })
    } else {
        None
    };
    Ok(FragReport {
        limits,
        inflight,
        throughput,
        unfragmented,
    })
}

/// The fragments of `inflight` datagrams, by datagram.
fn datagrams(inflight: u32) -> Vec<Vec<Vec<u8>>> {
    (0..inflight)
        .map(|id| {
            let spec = FragSpec::udp(Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 1, 2).into(), id);
            fragments(&spec, &udp_payload(&spec, 1024, 5001, 4000), 1480)
        })
        .collect()
}

fn throughput_row(limits: Limits, inflight: u32, seconds: f64, refrag: bool) -> Result<ThroughputRow, String> {
    let dgrams = datagrams(inflight);
    let per = dgrams[0].len();
    let mut r = Reassembler::new(limits);
    let mut pool = PacketPool::default();
    let mut out = Vec::with_capacity(8);
    let mut done = 0u64;
    let mut round = |r: &mut Reassembler, pool: &mut PacketPool, done: &mut u64| -> Result<(), String> {
        // Every datagram's first two fragments, then every last one: `inflight` in flight.
        for k in 0..per {
            for d in &dgrams {
                let mut p = pool.get();
                p.set_frame(&d[k])
                    .map_err(|_| "a fragment does not fit a pool buffer")?;
                parse(&mut p).map_err(|e| format!("a built fragment does not parse: {e}"))?;
                if let Some(dg) = r.push(p, 0, 0, pool) {
                    *done += 1;
                    if refrag {
                        refragment(dg, None, pool, |q| out.push(q)).map_err(|e| e.to_string())?;
                        for q in out.drain(..) {
                            pool.put(black_box(q));
                        }
                    } else {
                        pool.put_huge(black_box(dg));
                    }
                }
            }
        }
        Ok(())
    };
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < WARMUP.min(seconds) {
        round(&mut r, &mut pool, &mut done)?;
    }
    done = 0;
    let t = Instant::now();
    while t.elapsed().as_secs_f64() < seconds {
        round(&mut r, &mut pool, &mut done)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let c = r.counters();
    if c.dropped() > 0 {
        return Err(format!("the benchmark's own datagrams were dropped: {}", c.dropped()));
    }
    let frags = (done * per as u64) as f64;
    Ok(ThroughputRow {
        work: if refrag { "reassemble+refragment" } else { "reassemble" },
        datagrams_per_s: done as f64 / secs,
        fragments_per_s: frags / secs,
        ns_per_fragment: secs * 1e9 / frags.max(1.0),
    })
}

/// Forwarding Mpps of one worker over established unfragmented traffic, conntrack on, with
/// reassembly enabled or not.
fn forward(enabled: bool, seconds: f64) -> Result<f64, String> {
    let mut text = crate::fw_forward::config_text("established", 0, 1, WARMUP + seconds + 0.3, true);
    text.push_str(&format!("\n[conntrack.reassembly]\nenabled = {enabled}\n"));
    crate::fw_forward::measure_text(&text, seconds)
}

/// Prints the reassembly throughput rows of `rep`, the heading behind `prefix`.
pub(crate) fn print_throughput(prefix: &str, rep: &FragReport) {
    println!(
        "{prefix}reassembly, 1 worker, 3-fragment UDP datagrams, {} in flight:",
        rep.inflight
    );
    for t in &rep.throughput {
        println!(
            "  {:<22} {:>10.0} datagrams/s {:>10.0} fragments/s  {:>6.1} ns/fragment",
            t.work, t.datagrams_per_s, t.fragments_per_s, t.ns_per_fragment
        );
    }
}

/// `freeway bench frag`: runs and prints.
pub fn frag(a: FragArgs) -> Result<(), String> {
    let rep = run(&a)?;
    print_throughput("", &rep);
    if let Some(u) = &rep.unfragmented {
        println!(
            "unfragmented forwarding (router + conntrack, established, 1 worker): enabled {:?} Mpps, disabled {:?} Mpps, paired ratio {:.3}",
            u.enabled_mpps, u.disabled_mpps, u.ratio
        );
    }
    write_json(a.json.as_deref(), &rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_datagrams_have_three_fragments_and_reassemble() {
        let row = throughput_row(Limits::default(), 4, 0.01, true).unwrap();
        assert!(row.datagrams_per_s > 0.0);
        assert_eq!(datagrams(2)[1].len(), 3);
        for on in [true, false] {
            let mut text = crate::fw_forward::config_text("established", 0, 1, 1.0, false);
            text.push_str(&format!("\n[conntrack.reassembly]\nenabled = {on}\n"));
            freeway_datapath::config::parse(&text, "t", None).unwrap();
        }
    }
}
