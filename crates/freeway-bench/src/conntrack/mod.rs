//! `freeway bench conntrack …`: the Open vSwitch `test-conntrack benchmark` workload, and the
//! churn and large-table benchmarks ([`workload`] does the work).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

pub mod workload;

use workload::{churn, large_table, ovs_workload, Teardown, Variant};

use crate::{median, runs_text, write_json, Sweep};

/// Which table runs the OVS workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Baseline {
    /// The "before": one global lock around lookup, update and insert.
    GlobalLock,
}

/// `bench conntrack N [PACKETS] [BATCH]`.
#[derive(Args, Clone)]
pub struct ConntrackArgs {
    /// Worker threads (N); a comma list runs each, e.g. 1,2,4,8.
    pub threads: String,
    /// Packets per worker.
    #[arg(default_value_t = 3_000_000)]
    pub packets: usize,
    /// Batch size.
    #[arg(default_value_t = 32)]
    pub batch: usize,
    /// Run the baseline instead of Freeway's table.
    #[arg(long, value_enum)]
    pub baseline: Option<Baseline>,
    /// Run both Freeway's table and the global-lock baseline, interleaved.
    #[arg(long, conflicts_with = "baseline")]
    pub compare: bool,
    /// Runs per configuration (each printed; the median is the result).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Do not pin worker i to core i (mod the core count), as Open vSwitch's test does not.
    #[arg(long)]
    pub no_pin: bool,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize)]
struct OvsRow {
    variant: &'static str,
    pinned: bool,
    threads: usize,
    packets: usize,
    batch: usize,
    runs_ms: Vec<f64>,
    median_ms: f64,
    ns_per_packet: f64,
}

/// Runs `bench conntrack`.
pub fn ovs(a: ConntrackArgs) -> Result<(), String> {
    let threads: Vec<usize> = a
        .threads
        .split(',')
        .map(|t| t.trim().parse::<usize>().ok().filter(|&n| (1..=1024).contains(&n)))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("thread counts must be a comma list of 1..=1024 (got {:?})", a.threads))?;
    if a.packets == 0 || a.batch == 0 || a.batch > a.packets {
        return Err("need packets >= batch >= 1".into());
    }
    let variants: Vec<Variant> = match (a.compare, a.baseline) {
        (true, _) => vec![Variant::Freeway, Variant::GlobalLock],
        (false, Some(Baseline::GlobalLock)) => vec![Variant::GlobalLock],
        (false, None) => vec![Variant::Freeway],
    };
    let mut rows = Vec::new();
    for &n in &threads {
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for _ in 0..a.runs.max(1) {
            for (i, &v) in variants.iter().enumerate() {
                let ms = ovs_workload(n, a.packets, a.batch, v, !a.no_pin).as_secs_f64() * 1e3;
                println!("conntrack {:<11} N={n}: {ms:.0} ms", v.name());
                runs[i].push(ms);
            }
        }
        for (i, &v) in variants.iter().enumerate() {
            let m = median(&runs[i]);
            rows.push(OvsRow {
                variant: v.name(),
                pinned: !a.no_pin,
                threads: n,
                packets: a.packets,
                batch: a.batch,
                runs_ms: runs[i].clone(),
                median_ms: m,
                ns_per_packet: m * 1e6 / a.packets as f64,
            });
        }
    }
    println!(
        "\nbench conntrack: {} packets per worker, batch {}, median of {} run(s), workers {}",
        a.packets,
        a.batch,
        a.runs.max(1),
        if a.no_pin { "not pinned" } else { "pinned" }
    );
    println!("variant      N   median ms  ns/packet/worker  runs");
    for r in &rows {
        let runs = runs_text(r.runs_ms.iter().copied(), 0);
        println!(
            "{:<11} {:>2}  {:>10.1}  {:>16.1}  {}",
            r.variant, r.threads, r.median_ms, r.ns_per_packet, runs
        );
    }
    write_json(a.json.as_deref(), &rows)
}

/// `bench conntrack-churn`.
#[derive(Args, Clone)]
pub struct ChurnArgs {
    /// Connections opened and closed per worker.
    #[arg(long, default_value_t = 1_000_000)]
    pub conns: usize,
    /// How connections end: fin (7 packets each) or rst (4).
    #[arg(long, default_value = "fin", value_parser = ["fin", "rst"])]
    pub teardown: String,
    /// Worker counts, runs and the JSON file.
    #[command(flatten)]
    pub sweep: Sweep,
}

/// Runs `bench conntrack-churn`.
pub fn churn_cmd(a: ChurnArgs) -> Result<(), String> {
    if a.sweep.workers.iter().any(|&n| n == 0 || n > 1024) || a.conns == 0 {
        return Err("need workers 1..=1024 and conns >= 1".into());
    }
    let td = if a.teardown == "rst" {
        Teardown::Rst
    } else {
        Teardown::Fin
    };
    println!(
        "bench conntrack-churn: TCP handshake + {} teardown, expiry thread running",
        a.teardown
    );
    println!("workers  median new conns/s/worker  runs (M/s/worker, per run the slowest worker)");
    let all = each_run(
        &a.sweep,
        |n| {
            let r = churn(n, a.conns, td, 65_536);
            if r.unexpected > 0 {
                return Err(format!("churn: {} packets were not tracked as expected", r.unexpected));
            }
            Ok(r)
        },
        |n, rs| {
            let per: Vec<f64> = rs.iter().map(|r| slowest(&r.conns_per_sec)).collect();
            let runs = runs_text(per.iter().map(|v| v / 1e6), 2);
            println!("{n:>7}  {:>22.2} M  {}", median(&per) / 1e6, runs);
        },
    )?;
    write_json(a.sweep.json.as_deref(), &all)
}

/// Runs `run(n)` `sweep.runs` times (once at least) for each worker count `n` of `sweep`, and
/// `line(n, results)` with that count's results after them; returns every result in order.
fn each_run<R>(
    sweep: &Sweep,
    mut run: impl FnMut(usize) -> Result<R, String>,
    mut line: impl FnMut(usize, &[R]),
) -> Result<Vec<R>, String> {
    let mut all = Vec::new();
    for &n in &sweep.workers {
        let first = all.len();
        for _ in 0..sweep.runs.max(1) {
            all.push(run(n)?);
        }
        line(n, &all[first..]);
    }
    Ok(all)
}

/// The slowest worker's rate of a run.
fn slowest(per_worker: &[f64]) -> f64 {
    per_worker.iter().copied().fold(f64::INFINITY, f64::min)
}

/// `bench conntrack-table`.
#[derive(Args, Clone)]
pub struct TableArgs {
    /// Established connections preloaded.
    #[arg(long, default_value_t = 1_000_000)]
    pub conns: usize,
    /// Packets per worker.
    #[arg(long, default_value_t = 5_000_000)]
    pub packets: usize,
    /// Worker counts, runs and the JSON file.
    #[command(flatten)]
    pub sweep: Sweep,
}

/// Runs `bench conntrack-table`.
pub fn table_cmd(a: TableArgs) -> Result<(), String> {
    if a.sweep.workers.iter().any(|&n| n == 0 || n > 1024) || a.conns == 0 || a.packets == 0 {
        return Err("need workers 1..=1024, conns >= 1, packets >= 1".into());
    }
    println!(
        "bench conntrack-table: {} established connections, random access",
        a.conns
    );
    println!("workers  median Mpps/worker  preload ms  runs");
    let all = each_run(
        &a.sweep,
        |n| {
            let r = large_table(n, a.conns, a.packets);
            if r.unexpected > 0 {
                return Err(format!("table: {} packets did not find their connection", r.unexpected));
            }
            Ok(r)
        },
        |n, rs| {
            let per: Vec<f64> = rs.iter().map(|r| slowest(&r.pps)).collect();
            let pre: Vec<f64> = rs.iter().map(|r| r.preload_ms).collect();
            let runs = runs_text(per.iter().map(|v| v / 1e6), 2);
            println!("{n:>7}  {:>18.2}  {:>10.0}  {}", median(&per) / 1e6, median(&pre), runs);
        },
    )?;
    write_json(a.sweep.json.as_deref(), &all)
}
