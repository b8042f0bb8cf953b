//! `freeway bench conntrack …`: the Open vSwitch `test-conntrack benchmark` workload, and the
//! churn and large-table benchmarks ([`workload`] does the work).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

pub mod workload;

use workload::{churn, large_table, ovs_workload, Teardown, Variant};

use crate::{median, runs_text, write_json};

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
    /// Worker counts, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Connections opened and closed per worker.
    #[arg(long, default_value_t = 1_000_000)]
    pub conns: usize,
    /// How connections end: fin (7 packets each) or rst (4).
    #[arg(long, default_value = "fin", value_parser = ["fin", "rst"])]
    pub teardown: String,
    /// Runs per configuration.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs `bench conntrack-churn`.
pub fn churn_cmd(a: ChurnArgs) -> Result<(), String> {
    if a.workers.iter().any(|&n| n == 0 || n > 1024) || a.conns == 0 {
        return Err("need workers 1..=1024 and conns >= 1".into());
    }
    let td = if a.teardown == "rst" {
        Teardown::Rst
    } else {
        Teardown::Fin
    };
    let mut all = Vec::new();
    println!(
        "bench conntrack-churn: TCP handshake + {} teardown, expiry thread running",
        a.teardown
    );
    println!("workers  median new conns/s/worker  runs (M/s/worker, per run the slowest worker)");
    for &n in &a.workers {
        let mut per = Vec::new();
        for _ in 0..a.runs.max(1) {
            let r = churn(n, a.conns, td, 65_536);
            if r.unexpected > 0 {
                return Err(format!("churn: {} packets were not tracked as expected", r.unexpected));
            }
            per.push(r.conns_per_sec.iter().cloned().fold(f64::INFINITY, f64::min));
            all.push(r);
        }
        let runs = runs_text(per.iter().map(|v| v / 1e6), 2);
        println!("{n:>7}  {:>22.2} M  {}", median(&per) / 1e6, runs);
    }
    write_json(a.json.as_deref(), &all)
}

/// `bench conntrack-table`.
#[derive(Args, Clone)]
pub struct TableArgs {
    /// Worker counts, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Established connections preloaded.
    #[arg(long, default_value_t = 1_000_000)]
    pub conns: usize,
    /// Packets per worker.
    #[arg(long, default_value_t = 5_000_000)]
    pub packets: usize,
    /// Runs per configuration.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Runs `bench conntrack-table`.
pub fn table_cmd(a: TableArgs) -> Result<(), String> {
    if a.workers.iter().any(|&n| n == 0 || n > 1024) || a.conns == 0 || a.packets == 0 {
        return Err("need workers 1..=1024, conns >= 1, packets >= 1".into());
    }
    let mut all = Vec::new();
    println!(
        "bench conntrack-table: {} established connections, random access",
        a.conns
    );
    println!("workers  median Mpps/worker  preload ms  runs");
    for &n in &a.workers {
        let mut per = Vec::new();
        let mut pre = Vec::new();
        for _ in 0..a.runs.max(1) {
            let r = large_table(n, a.conns, a.packets);
            if r.unexpected > 0 {
                return Err(format!("table: {} packets did not find their connection", r.unexpected));
            }
            per.push(r.pps.iter().cloned().fold(f64::INFINITY, f64::min));
            pre.push(r.preload_ms);
            all.push(r);
        }
        let runs = runs_text(per.iter().map(|v| v / 1e6), 2);
        println!("{n:>7}  {:>18.2}  {:>10.0}  {}", median(&per) / 1e6, median(&pre), runs);
    }
    write_json(a.json.as_deref(), &all)
}
