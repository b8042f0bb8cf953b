//! `freeway bench capture`: what live capture costs forwarding (FreeBSD's lock-free BPF taps:
//! taps read under an epoch instead of behind a reader-writer lock).
//!
//! The bridge benchmark's topology (three generator hosts, 64-byte frames, every worker
//! receiving from every port), or with `--topology router` two hosts in two VLANs routed to
//! each other (tcpdump on a busy router), runs through the real pipeline while
//! taps are attached to port `h0`, both directions, in five scenarios:
//!
//! * `none`: no tap;
//! * `idle`: one tap (the `nomatch` filter, the same rings) on a port no frame crosses:
//!   what attaching costs by itself (the tap list is walked by nobody), so that `nomatch`
//!   can be told apart from the effect of the tap's allocations on the rest of the run;
//! * `nomatch`: one tap whose filter matches nothing (`host 198.18.0.1`, or `--filter`);
//! * `matchall`: one tap matching everything, written to a pcap file;
//! * `taps8`: eight taps, none matching (`host 198.18.0.1` .. `.8`);
//! * `swap`: one non-matching tap whose filter the control side replaces every millisecond.
//!
//! Each scenario runs with Freeway's epoch-published tap list ([`Taps`]) and with the
//! baseline, the same taps behind an `RwLock` ([`LockedTaps`]: the FreeBSD BPF path before
//! the lock-free change), interleaved run by run in one process.
//!
//! The table gives each cell's median Mpps per worker, its share of the no-tap median
//! (`vs none`) and the median of its per-round shares (`paired`: each run divided by the
//! no-tap run of the same round, run a few seconds before it; on a machine whose speed
//! drifts between rounds this is the steadier estimate of what the taps cost).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Args;
use freeway_bridge::Padded;
use freeway_capture::{Direction, Filter, LockedTaps, TapRegistry, TapSpec, TapStats, TapWriter, Taps, WriterOptions};
use serde::Serialize;

use crate::{bridge_config, check_runs, median, run_sampled, runs_text, two_host_router, window, Sweep, WARMUP};
use freeway_datapath::config;

/// The scenarios, in the order they run.
pub const SCENARIOS: &[&str] = &["none", "idle", "nomatch", "matchall", "taps8", "swap"];

/// The port of the `idle` scenario's tap: past every port of both topologies.
const IDLE_PORT: u16 = 63;

/// `bench capture` options.
#[derive(Args, Clone)]
pub struct CaptureArgs {
    /// Worker counts, runs and the JSON file.
    #[command(flatten)]
    pub sweep: Sweep,
    /// Scenarios: none, idle, nomatch, matchall, taps8, swap.
    #[arg(long, value_delimiter = ',', default_value = "none,nomatch,matchall,taps8,swap")]
    pub scenarios: Vec<String>,
    /// Tap registries: epoch (Freeway) and/or rwlock (the baseline).
    #[arg(long, value_delimiter = ',', default_value = "epoch,rwlock")]
    pub registry: Vec<String>,
    /// What forwards: `bridge` (the bridge benchmark's three hosts) or `router` (two hosts
    /// in two VLANs routed to each other through the L3 stage, as on a router running tcpdump).
    #[arg(long, value_delimiter = ',', default_value = "bridge")]
    pub topology: Vec<String>,
    /// Router topology: full FIB lookup for every packet (the route cache's baseline).
    #[arg(long)]
    pub no_route_cache: bool,
    /// Filter of the non-matching taps (`nomatch`, `swap`; `taps8` uses host 198.18.0.1-8).
    #[arg(long, default_value = "host 198.18.0.1")]
    pub filter: String,
    /// Filter replacements per second in the `swap` scenario.
    #[arg(long, default_value_t = 1000)]
    pub swap_rate: u32,
    /// Measured seconds per run (after a 0.5 s warm-up).
    #[arg(long, default_value_t = 2.0, value_parser = freeway_datapath::config::parse_seconds)]
    pub seconds: f64,
    /// Where the `matchall` tap writes its pcap (deleted after each run).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Do not pin workers to cores.
    #[arg(long)]
    pub no_pin: bool,
}

/// A configuration measured: what forwards, which registry, which taps, how many workers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Case {
    /// `bridge` or `router`.
    pub topology: String,
    /// `epoch` or `rwlock`.
    pub registry: String,
    /// Scenario name.
    pub scenario: String,
    /// Workers.
    pub workers: usize,
}

impl Case {
    /// The case of `topology`, `registry`, `scenario` and `workers`.
    fn new(topology: &str, registry: &str, scenario: &str, workers: usize) -> Case {
        Case {
            topology: topology.into(),
            registry: registry.into(),
            scenario: scenario.into(),
            workers,
        }
    }

    /// The same case with another scenario (its `none` baseline, say).
    fn with_scenario(&self, scenario: &str) -> Case {
        Case {
            scenario: scenario.into(),
            ..self.clone()
        }
    }
}

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureRun {
    /// What ran.
    #[serde(flatten)]
    pub case: Case,
    /// Which round of the interleaved runs (0-based): runs of one round ran back to back.
    pub round: usize,
    /// Mean Mpps per worker over the window.
    pub mpps_per_worker: f64,
    /// Packets the taps matched, wrote and dropped (ring full), summed over taps.
    pub matched: u64,
    /// Written to the file.
    pub written: u64,
    /// Dropped because a ring was full.
    pub dropped: u64,
    /// Filter replacements per second achieved.
    pub swaps_per_sec: f64,
}

/// A summary row.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureRow {
    /// What ran.
    #[serde(flatten)]
    pub case: Case,
    /// Median Mpps per worker.
    pub median_mpps_per_worker: f64,
    /// Each run's Mpps per worker.
    pub runs: Vec<f64>,
    /// Median relative to the same registry's `none` scenario at the same worker count.
    pub vs_no_tap: Option<f64>,
    /// Median over the rounds of this run's rate relative to the `none` run of the same
    /// round (same registry, topology and workers, run minutes apart at most): less
    /// sensitive than `vs_no_tap` to the machine drifting between rounds.
    pub paired_vs_no_tap: Option<f64>,
}

const SNAPLEN: u32 = 128;

fn spec(port: u16) -> TapSpec {
    TapSpec {
        port,
        dir: Direction::Both,
        snaplen: SNAPLEN,
        ring_slots: 4096,
        lossless: false,
    }
}

/// Attaches the scenario's taps with their writers; returns the tap ids and writer threads.
#[allow(clippy::type_complexity)]
fn attach<R: TapRegistry>(
    reg: &R,
    scenario: &str,
    nomatch: &str,
    file: &std::path::Path,
) -> Result<(Vec<u64>, Vec<JoinHandle<Result<TapStats, String>>>), String> {
    let filters: Vec<String> = match scenario {
        "none" => Vec::new(),
        "nomatch" | "swap" | "idle" => vec![nomatch.into()],
        "matchall" => vec![String::new()],
        "taps8" => (1..=8).map(|i| format!("host 198.18.0.{i}")).collect(),
        s => {
            return Err(format!(
                "--scenarios: unknown scenario {s:?} ({})",
                SCENARIOS.join(", ")
            ))
        }
    };
    let mut ids = Vec::new();
    let mut writers = Vec::new();
    for f in &filters {
        let filter = Filter::new(f, SNAPLEN).map_err(|e| e.to_string())?;
        let port = if scenario == "idle" { IDLE_PORT } else { 0 };
        let (id, reader) = reg.attach(spec(port), filter).map_err(|e| e.to_string())?;
        let out: Box<dyn std::io::Write + Send> = if scenario == "matchall" {
            let f = std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?;
            Box::new(std::io::BufWriter::new(f))
        } else {
            Box::new(std::io::sink())
        };
        let w = TapWriter::new(reader, out, WriterOptions::default()).map_err(|e| e.to_string())?;
        ids.push(id);
        writers.push(std::thread::spawn(move || w.run().map_err(|e| e.to_string())));
    }
    Ok((ids, writers))
}

/// The router topology: hosts `h0` (VLAN 10, 10.0.10.0/24) and `h1` (VLAN 20,
/// 10.0.20.0/24), each sending 64-byte UDP frames to the router MAC for the other's subnet,
/// with static neighbours, so every frame is routed (TTL, checksum, MAC rewrite).
pub fn router_config(workers: usize, pin: bool, secs: f64, route_cache: bool) -> String {
    two_host_router(
        workers,
        pin,
        secs,
        ["flows = 16", "flows = 16"],
        &format!("route_cache = {route_cache}\n"),
    )
}

fn measure<R: TapRegistry>(a: &CaptureArgs, case: &Case, round: usize) -> Result<CaptureRun, String> {
    let (topology, scenario, workers) = (case.topology.as_str(), case.scenario.as_str(), case.workers);
    let secs = WARMUP + a.seconds + 0.3;
    let text = if topology == "router" {
        router_config(workers, !a.no_pin, secs, !a.no_route_cache)
    } else {
        bridge_config(3, workers, 64, !a.no_pin, secs)
    };
    let cfg = config::parse(&text, "<bench capture>", None).map_err(|e| e.to_string())?;
    let reg = R::with_workers(workers);
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let file = dir.join(format!("freeway-bench-capture-{}.pcap", std::process::id()));
    let (ids, writers) = attach(&reg, scenario, &a.filter, &file)?;

    // The control side: replace the filter at the asked rate until the run ends.
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = (scenario == "swap" && a.swap_rate > 0).then(|| {
        let (reg, stop, id) = (reg.clone(), stop.clone(), ids[0]);
        let every = Duration::from_secs_f64(1.0 / f64::from(a.swap_rate));
        let alt = [
            Filter::new("host 198.18.0.2", SNAPLEN).expect("filter compiles"),
            Filter::new(&a.filter, SNAPLEN).expect("checked when the taps were attached"),
        ];
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut n = 0u64;
            let mut next = start;
            while !stop.load(Ordering::Relaxed) {
                next += every;
                if let Some(d) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                if reg.replace_filter(id, alt[(n % 2) as usize].clone()).is_ok() {
                    n += 1;
                }
            }
            n as f64 / start.elapsed().as_secs_f64()
        })
    });

    let res = run_sampled::<Padded, R>(&cfg, Some(reg.clone()));
    stop.store(true, Ordering::Relaxed);
    let swaps_per_sec = swapper.map_or(0.0, |h| h.join().unwrap_or(0.0));
    for id in &ids {
        reg.detach(*id);
    }
    let mut sum = TapStats::default();
    for w in writers {
        let s = w.join().map_err(|_| "tap writer panicked")??;
        sum.matched += s.matched;
        sum.written += s.written;
        sum.dropped += s.dropped;
    }
    let _ = std::fs::remove_file(&file);
    let snaps = res?;
    let (_, _, per) = window(&snaps, a.seconds)?;
    Ok(CaptureRun {
        case: case.clone(),
        round,
        mpps_per_worker: per.iter().sum::<f64>() / per.len().max(1) as f64,
        matched: sum.matched,
        written: sum.written,
        dropped: sum.dropped,
        swaps_per_sec,
    })
}

/// Runs `bench capture`.
pub fn capture(a: CaptureArgs) -> Result<(), String> {
    check_runs(&a.sweep, a.seconds)?;
    for s in &a.scenarios {
        if !SCENARIOS.contains(&s.as_str()) {
            return Err(format!(
                "--scenarios: unknown scenario {s:?} ({})",
                SCENARIOS.join(", ")
            ));
        }
    }
    for r in &a.registry {
        if r != "epoch" && r != "rwlock" {
            return Err(format!("--registry: unknown registry {r:?} (epoch or rwlock)"));
        }
    }
    for t in &a.topology {
        if t != "bridge" && t != "router" {
            return Err(format!("--topology: unknown topology {t:?} (bridge or router)"));
        }
    }
    // Each round runs the registries back to back, then the scenarios, worker counts and
    // topologies.
    let mut cases = Vec::new();
    for t in &a.topology {
        for &w in &a.sweep.workers {
            for s in &a.scenarios {
                cases.extend(a.registry.iter().map(|r| Case::new(t, r, s, w)));
            }
        }
    }
    let runs = a.sweep.interleaved(
        &cases,
        |c| format!("{} {} {}, {} workers", c.topology, c.registry, c.scenario, c.workers),
        |c, round| match c.registry.as_str() {
            "epoch" => measure::<Taps>(&a, c, round),
            _ => measure::<LockedTaps>(&a, c, round),
        },
    )?;
    let mut rows: Vec<CaptureRow> = Vec::new();
    for (t, r) in a.topology.iter().flat_map(|t| a.registry.iter().map(move |r| (t, r))) {
        for &w in &a.sweep.workers {
            for s in &a.scenarios {
                let case = Case::new(t, r, s, w);
                let v: Vec<f64> = runs
                    .iter()
                    .filter(|x| x.case == case)
                    .map(|x| x.mpps_per_worker)
                    .collect();
                rows.push(CaptureRow {
                    case,
                    median_mpps_per_worker: median(&v),
                    runs: v,
                    vs_no_tap: None,
                    paired_vs_no_tap: None,
                });
            }
        }
    }
    let base: Vec<(Case, f64)> = rows
        .iter()
        .filter(|r| r.case.scenario == "none")
        .map(|r| (r.case.clone(), r.median_mpps_per_worker))
        .collect();
    for row in &mut rows {
        let none = row.case.with_scenario("none");
        let ratios: Vec<f64> = runs
            .iter()
            .filter(|x| x.case == row.case)
            .filter_map(|x| {
                let b = runs.iter().find(|y| y.case == none && y.round == x.round)?;
                (b.mpps_per_worker > 0.0).then(|| x.mpps_per_worker / b.mpps_per_worker)
            })
            .collect();
        if !ratios.is_empty() {
            row.paired_vs_no_tap = Some(median(&ratios));
        }
        if let Some((_, b)) = base.iter().find(|(c, _)| *c == none) {
            if *b > 0.0 {
                row.vs_no_tap = Some(row.median_mpps_per_worker / b);
            }
        }
    }
    println!(
        "bench capture: 64-byte frames, taps on port h0 (both directions), {} s x {} runs, median Mpps per worker",
        a.seconds, a.sweep.runs
    );
    println!(
        "{:<8} {:<8} {:<9} {:>7} {:>12} {:>9} {:>8} {:>10} {:>10} {:>10} {:>8}  runs",
        "topology",
        "registry",
        "scenario",
        "workers",
        "Mpps/worker",
        "vs none",
        "paired",
        "matched",
        "written",
        "dropped",
        "swaps/s"
    );
    for row in &rows {
        let pick: Vec<&CaptureRun> = runs.iter().filter(|x| x.case == row.case).collect();
        let med = |f: fn(&CaptureRun) -> f64| median(&pick.iter().map(|x| f(x)).collect::<Vec<_>>());
        let rs = runs_text(row.runs.iter().copied(), 2);
        println!(
            "{:<8} {:<8} {:<9} {:>7} {:>12.2} {:>9} {:>8} {:>10.0} {:>10.0} {:>10.0} {:>8.0}  {}",
            row.case.topology,
            row.case.registry,
            row.case.scenario,
            row.case.workers,
            row.median_mpps_per_worker,
            row.vs_no_tap.map_or("-".into(), |v| format!("{:.1}%", v * 100.0)),
            row.paired_vs_no_tap
                .map_or("-".into(), |v| format!("{:.1}%", v * 100.0)),
            med(|x| x.matched as f64),
            med(|x| x.written as f64),
            med(|x| x.dropped as f64),
            med(|x| x.swaps_per_sec),
            rs
        );
    }
    for t in &a.topology {
        for &w in &a.sweep.workers {
            for s in &a.scenarios {
                let get = |g: &str| {
                    rows.iter()
                        .find(|r| {
                            r.case.topology == *t
                                && r.case.registry == g
                                && r.case.workers == w
                                && r.case.scenario == *s
                        })
                        .map(|r| r.median_mpps_per_worker)
                };
                if let (Some(e), Some(l)) = (get("epoch"), get("rwlock")) {
                    if l > 0.0 {
                        println!("{t}: epoch/rwlock, {s}, {w} workers: {:.2}x", e / l);
                    }
                }
            }
        }
    }
    if let Some(path) = &a.sweep.json {
        let v = serde_json::json!({
            "seconds": a.seconds,
            "swap_rate": a.swap_rate,
            "rows": rows,
            "runs": runs,
        });
        crate::write_report(path, Some("capture"), v)?;
    }
    Ok(())
}
