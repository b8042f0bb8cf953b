//! Freeway's benchmarks and stress harness (`publish = false`): `freeway bench …` and
//! `freeway stress churn` are thin CLI wrappers over this crate. Each benchmark runs its
//! "before" variant in the same binary (the naive FDB layout, the `RwLock` tap registry, the
//! global-lock connection table), so a result is a ratio from one run; the product crates carry
//! those variants only as the generics the benchmarks instantiate.
//!
//! `bench bridge` reproduces the Linux bridge FDB experiment: a few hosts (3 by default), each
//! behind its own generator port, each sending to the next; every worker receives from every
//! port, so all workers hit the same few FDB entries. Frames go through the real pipeline
//! (parse, learn, lookup, forward) to the destination port's transmit queue, which discards
//! them. Both entry layouts run in the same process, so the padded/naive ratio comes from one
//! run: `padded` keeps the timestamps on their own cache line and writes them once per tick;
//! `naive` keeps them next to the key and writes them on every packet.

use std::time::Duration;

pub mod capture;
pub mod capture_parts;
mod cas_ref;
pub mod churn;
pub mod conntrack;
pub mod cpus;
pub mod firewall;
pub mod frag;
pub mod fw_forward;
pub mod linuxcp;
pub mod linuxcp_fwd;
pub mod nat;
pub mod route;

use clap::{Args, Subcommand};
use freeway_bridge::{Layout, Naive, Padded};
use serde::Serialize;

use freeway_capture::{TapRegistry, Taps};
use freeway_datapath::config::{self, Checked};
use freeway_datapath::runtime::{self, RunOptions, Snapshot};

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCmd {
    /// Bridge forwarding Mpps per worker, padded vs naive FDB entry layout.
    Bridge(BridgeArgs),
    /// Contended get/put pairs per second per thread: scalable refcount vs a CAS loop.
    Refcount(RefcountArgs),
    /// The Open vSwitch `test-conntrack benchmark N PACKETS BATCH` workload (ms; --baseline global-lock).
    Conntrack(conntrack::ConntrackArgs),
    /// New TCP connections per second per worker (handshake + teardown, expiry running).
    ConntrackChurn(conntrack::ChurnArgs),
    /// Packets per second per worker over 1M established connections, random access.
    ConntrackTable(conntrack::TableArgs),
    /// FIB lookups on a synthetic full BGP table: FIB alone vs the per-worker route cache.
    Route(route::RouteArgs),
    /// Forwarding Mpps per worker with capture taps attached: epoch taps vs taps behind an RwLock.
    Capture(capture::CaptureArgs),
    /// Firewall classifications per second per worker by ruleset size: classifier vs linear.
    Firewall(firewall::FirewallArgs),
    /// Fragment reassembly: datagrams and fragments per second of one worker, and the
    /// unfragmented path's cost with reassembly enabled vs disabled.
    Frag(frag::FragArgs),
    /// NAT: new translated connections per second per worker and the per-packet cost of a
    /// translated flow, each against plain tracking in the same run.
    Nat(nat::NatArgs),
    /// Kernel route mirror convergence: start-up dump, notifications, one change (root).
    Linuxcp(linuxcp::LinuxcpArgs),
}

/// `bench refcount` options.
#[derive(Args, Clone)]
pub struct RefcountArgs {
    /// Thread counts to measure, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 1.0, value_parser = freeway_datapath::config::parse_seconds)]
    pub seconds: f64,
    /// Runs per configuration; the table shows the median.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// One refcount measurement: (million get/put pairs per second per thread, CAS retries per get).
fn refcount_run(kind: &str, threads: usize, seconds: f64) -> (f64, f64) {
    use crate::cas_ref::CasRef;
    use freeway_sync::refcount::{Put, RcRef};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    let rc = Arc::new(RcRef::new());
    let cas = Arc::new(CasRef::new());
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (rc, cas, stop, barrier) = (rc.clone(), cas.clone(), stop.clone(), barrier.clone());
            let core = cores.get(t % cores.len().max(1)).copied();
            let naive = kind == "cas";
            std::thread::spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                barrier.wait();
                let (mut pairs, mut retries) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..1024 {
                        if naive {
                            let (ok, r) = cas.get();
                            retries += u64::from(r);
                            assert!(ok && !cas.put(), "the creator's reference keeps the object alive");
                        } else {
                            assert!(
                                rc.get() && rc.put() == Put::Alive,
                                "the creator's reference keeps the object alive"
                            );
                        }
                    }
                    pairs += 1024;
                }
                (pairs, retries)
            })
        })
        .collect();
    barrier.wait();
    let t0 = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let res: Vec<(u64, u64)> = handles.into_iter().map(|h| h.join().expect("bench thread")).collect();
    let dt = t0.elapsed().as_secs_f64();
    let pairs: u64 = res.iter().map(|r| r.0).sum();
    let retries: u64 = res.iter().map(|r| r.1).sum();
    (
        pairs as f64 / dt / threads as f64 / 1e6,
        retries as f64 / pairs.max(1) as f64,
    )
}

/// Runs `bench refcount`.
pub fn refcount(a: RefcountArgs) -> Result<(), String> {
    if a.threads.is_empty() || a.threads.iter().any(|t| *t == 0 || *t > 1024) {
        return Err("--threads must list counts between 1 and 1024".into());
    }
    if a.runs == 0 || a.seconds.is_nan() || a.seconds <= 0.0 {
        return Err("--runs and --seconds must be positive".into());
    }
    let kinds = ["rcref", "cas"];
    let mut results: Vec<(String, usize, Vec<f64>, Vec<f64>)> = Vec::new();
    for k in kinds {
        for &t in &a.threads {
            results.push((k.to_string(), t, Vec::new(), Vec::new()));
        }
    }
    let bar = indicatif::ProgressBar::new((results.len() * a.runs) as u64);
    for _ in 0..a.runs {
        for r in results.iter_mut() {
            let (m, retries) = refcount_run(&r.0, r.1, a.seconds);
            r.2.push(m);
            r.3.push(retries);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    println!(
        "bench refcount: one shared object, get+put pairs, {} s x {} runs, median",
        a.seconds, a.runs
    );
    println!(
        "{:<6} {:>7} {:>16} {:>14}  runs",
        "kind", "threads", "Mpairs/s/thread", "CAS retries/get"
    );
    let mut rows = Vec::new();
    for (k, t, m, r) in &results {
        let runs = runs_text(m.iter().copied(), 1);
        println!("{:<6} {:>7} {:>16.2} {:>14.3}  {}", k, t, median(m), median(r), runs);
        rows.push(serde_json::json!({"kind": k, "threads": t, "median_mpairs_per_thread": median(m), "runs": m, "median_cas_retries_per_get": median(r)}));
    }
    for &t in &a.threads {
        let get = |k: &str| results.iter().find(|r| r.0 == k && r.1 == t).map(|r| median(&r.2));
        if let (Some(x), Some(y)) = (get("rcref"), get("cas")) {
            if y > 0.0 {
                println!("rcref/cas at {t} threads: {:.2}x", x / y);
            }
        }
    }
    if let Some(path) = &a.json {
        write_report(path, Some("refcount"), serde_json::json!({ "rows": rows }))?;
    }
    Ok(())
}

/// `bench bridge` options.
#[derive(Args, Clone)]
pub struct BridgeArgs {
    /// Worker counts, runs and the JSON file.
    #[command(flatten)]
    pub sweep: Sweep,
    /// FDB entries (hosts, one per port).
    #[arg(long, default_value_t = 3)]
    pub entries: usize,
    /// Layouts to measure: padded, naive, and lan (padded with every port's LAN protections
    /// on: BPDU guard, storm control of every flooded class, multicast flooding off, IGMP/MLD
    /// snooping on), any of them.
    #[arg(long, value_delimiter = ',', default_value = "padded,naive")]
    pub layout: Vec<String>,
    /// Measured seconds per run (after a warm-up).
    #[arg(long, default_value_t = 2.0, value_parser = freeway_datapath::config::parse_seconds)]
    pub seconds: f64,
    /// Frame size in bytes on the wire, FCS included (64 = the smallest Ethernet frame).
    #[arg(long, default_value_t = 64)]
    pub frame_size: usize,
    /// Do not pin workers to cores.
    #[arg(long)]
    pub no_pin: bool,
}

/// What every benchmark that measures a list of worker counts takes: the counts, the runs
/// of each configuration and where its results go as JSON.
#[derive(Args, Clone, Debug)]
pub struct Sweep {
    /// Worker counts to measure, e.g. 1,2.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Runs per configuration; the table shows the median.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

impl Sweep {
    /// Measures every configuration of `configs` once a round for `runs` rounds, interleaved
    /// so that slow drift on a noisy machine hits them all alike, under a progress bar that
    /// names the configuration running (`describe`). `measure` gets the configuration and
    /// the round; the results come back in the order they were measured.
    pub(crate) fn interleaved<C, R>(
        &self,
        configs: &[C],
        describe: impl Fn(&C) -> String,
        mut measure: impl FnMut(&C, usize) -> Result<R, String>,
    ) -> Result<Vec<R>, String> {
        let bar = indicatif::ProgressBar::new((configs.len() * self.runs) as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {msg} (eta {eta})")
                .expect("template")
                .progress_chars("=> "),
        );
        let mut runs = Vec::with_capacity(configs.len() * self.runs);
        for round in 0..self.runs {
            for c in configs {
                bar.set_message(format!("{}, run {}", describe(c), round + 1));
                runs.push(measure(c, round)?);
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        Ok(runs)
    }
}

/// One measured run.
#[derive(Clone, Debug, Serialize)]
pub struct BridgeRun {
    /// Layout name.
    pub layout: String,
    /// Workers.
    pub workers: usize,
    /// Mpps of each worker.
    pub mpps_per_worker: Vec<f64>,
    /// Sum over workers.
    pub mpps_total: f64,
    /// Share of frames forwarded by an FDB hit (the rest flooded or dropped).
    pub forwarded_share: f64,
}

/// The summary row of a (layout, workers) pair.
#[derive(Clone, Debug, Serialize)]
pub struct BridgeRow {
    /// Layout name.
    pub layout: String,
    /// Workers.
    pub workers: usize,
    /// Median over runs of the mean Mpps per worker.
    pub median_mpps_per_worker: f64,
    /// Every run's mean Mpps per worker.
    pub runs_mpps_per_worker: Vec<f64>,
    /// Median per-worker rate relative to the same layout at the smallest worker count.
    pub scaling: f64,
}

/// Each run's value with `decimals` digits after the point, separated by spaces (the
/// `runs` column of the benches' tables).
pub(crate) fn runs_text(runs: impl IntoIterator<Item = f64>, decimals: usize) -> String {
    let runs: Vec<String> = runs.into_iter().map(|x| format!("{x:.decimals$}")).collect();
    runs.join(" ")
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

/// The router topology of the routed benchmarks: hosts `h0` (VLAN 10, 10.0.10.0/24) and
/// `h1` (VLAN 20, 10.0.20.0/24), each a generator of 64-byte UDP frames to the router MAC for
/// the other's subnet (`flows[i]`: host i's ports and flow count, in the `gen` table's
/// words), and the router with static neighbours, so every frame is routed; `router` is
/// more of the `[router]` section.
pub(crate) fn two_host_router(workers: usize, pin: bool, secs: f64, flows: [&str; 2], router: &str) -> String {
    let mut s = format!("workers = {workers}\nduration_secs = {secs}\npin_workers = {pin}\n");
    for (i, (me, peer)) in [(10, 20), (20, 10)].into_iter().enumerate() {
        s.push_str(&format!(
            "\n[[port]]\nname = \"h{i}\"\nkind = \"gen\"\nvlan = {{ mode = \"access\", vlan = {me} }}\n\
             gen = {{ src_macs = [\"02:00:00:00:00:{me}\"], dst_macs = [\"02:fe:00:00:00:01\"], src_ip = \"10.0.{me}.5\", \
             dst_ip = \"10.0.{peer}.5\", {}, frame_size = [64], seed = {} }}\n",
            flows[i],
            i + 1
        ));
    }
    s.push_str(&format!("\n[router]\nmac = \"02:fe:00:00:00:01\"\n{router}"));
    for v in [10, 20] {
        s.push_str(&format!(
            "\n[[interface]]\nname = \"v{v}\"\nvlan = {v}\naddr = [\"10.0.{v}.1/24\"]\n\
             \n[[neigh]]\nip = \"10.0.{v}.5\"\nmac = \"02:00:00:00:00:{v}\"\ndev = \"v{v}\"\n"
        ));
    }
    s
}

/// The config text for a bridge bench run.
pub fn bridge_config(entries: usize, workers: usize, frame_size: usize, pin: bool, secs: f64) -> String {
    let mut s = format!("workers = {workers}\nduration_secs = {secs}\npin_workers = {pin}\n");
    for i in 0..entries {
        let j = (i + 1) % entries;
        s.push_str(&format!(
            "\n[[port]]\nname = \"h{i}\"\nkind = \"gen\"\ngen = {{ src_macs = [\"02:00:00:00:01:{i:02x}\"], dst_macs = [\"02:00:00:00:01:{j:02x}\"], src_ip = \"10.1.0.{}\", dst_ip = \"10.1.0.{}\", flows = 16, frame_size = [{frame_size}], seed = {} }}\n",
            i + 1,
            j + 1,
            i + 1
        ));
    }
    s
}

/// Checks the worker counts, runs and seconds of a forwarding benchmark.
pub(crate) fn check_runs(sweep: &Sweep, seconds: f64) -> Result<(), String> {
    let Sweep { workers, runs, .. } = sweep;
    if workers.is_empty() || workers.iter().any(|w| *w == 0 || *w > config::MAX_WORKERS) {
        return Err(format!(
            "--workers must list counts between 1 and {}",
            config::MAX_WORKERS
        ));
    }
    if *runs == 0 || seconds.is_nan() || seconds <= 0.0 {
        return Err("--runs and --seconds must be positive".into());
    }
    Ok(())
}

/// Warm-up of a forwarding benchmark run, seconds.
pub(crate) const WARMUP: f64 = 0.5;

/// Runs `cfg` (with the tap registry `taps`, if any) and returns its snapshots, one every
/// 250 ms: what [`window`] measures.
pub(crate) fn run_sampled<L: Layout, R: TapRegistry>(cfg: &Checked, taps: Option<R>) -> Result<Vec<Snapshot>, String> {
    let mut snaps: Vec<Snapshot> = Vec::new();
    let mut cb = |s: &Snapshot| snaps.push(s.clone());
    runtime::run_with::<L, R>(
        cfg,
        RunOptions {
            interval: Duration::from_millis(250),
            on_snapshot: Some(&mut cb),
            ..Default::default()
        },
        taps,
    )
    .map_err(|e| e.to_string())?;
    Ok(snaps)
}

/// The snapshots of the measurement window (after the warm-up, `seconds` long) and each
/// worker's Mpps over it.
pub(crate) fn window(snaps: &[Snapshot], seconds: f64) -> Result<(&Snapshot, &Snapshot, Vec<f64>), String> {
    window_from(snaps, WARMUP, seconds)
}

/// [`window`] starting `from` seconds into the run.
pub(crate) fn window_from(
    snaps: &[Snapshot],
    from: f64,
    seconds: f64,
) -> Result<(&Snapshot, &Snapshot, Vec<f64>), String> {
    let first = snaps
        .iter()
        .find(|s| s.elapsed_s >= from)
        .ok_or("run too short to measure")?;
    let last = snaps
        .iter()
        .rev()
        .find(|s| s.elapsed_s <= from + seconds + 0.05)
        .ok_or("run too short to measure")?;
    let dt = last.elapsed_s - first.elapsed_s;
    if dt <= 0.1 {
        return Err("measurement window too short".into());
    }
    let per = first
        .workers
        .iter()
        .zip(&last.workers)
        .map(|(f, l)| (l.packets - f.packets) as f64 / dt / 1e6)
        .collect();
    Ok((first, last, per))
}

/// The LAN protections the `lan` variant turns on for every port.
const LAN_PORT: &str = "bpdu_guard = true\nmcast_flood = false\nstorm_control = { broadcast = 1000, multicast = 1000, unknown_unicast = 1000 }\n";

fn measure<L: Layout>(a: &BridgeArgs, workers: usize, lan: bool) -> Result<BridgeRun, String> {
    let mut text = bridge_config(a.entries, workers, a.frame_size, !a.no_pin, WARMUP + a.seconds + 0.3);
    if lan {
        text = text.replace("kind = \"gen\"\n", &format!("kind = \"gen\"\n{LAN_PORT}"));
        text.push_str("\n[bridge]\nmulticast_snooping = true\n");
    }
    let cfg = config::parse(&text, "<bench bridge>", None).map_err(|e| e.to_string())?;
    let snaps = run_sampled::<L, Taps>(&cfg, None)?;
    let (first, last, per) = window(&snaps, a.seconds)?;
    let b = |s: &Snapshot, k: &str| s.bridge.get(k).copied().unwrap_or(0) as f64;
    let rx = b(last, "rx") - b(first, "rx");
    let fwd = b(last, "forwarded") - b(first, "forwarded");
    Ok(BridgeRun {
        layout: if lan { "lan".into() } else { L::NAME.into() },
        workers,
        mpps_total: per.iter().sum(),
        mpps_per_worker: per,
        forwarded_share: if rx > 0.0 { fwd / rx } else { 0.0 },
    })
}

pub(crate) fn machine() -> serde_json::Value {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    serde_json::json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}

/// Runs `bench bridge`.
pub fn bridge(a: BridgeArgs) -> Result<(), String> {
    if a.entries < 2 || a.entries > 250 {
        return Err(format!("--entries must be between 2 and 250 (got {})", a.entries));
    }
    check_runs(&a.sweep, a.seconds)?;
    if !(60..=1514).contains(&a.frame_size) {
        return Err(format!(
            "--frame-size must be between 60 and 1514 (got {})",
            a.frame_size
        ));
    }
    for l in &a.layout {
        if l != "padded" && l != "naive" && l != "lan" {
            return Err(format!("--layout: unknown layout {l:?} (padded, naive or lan)"));
        }
    }
    let configs: Vec<(usize, &str)> = (a.sweep.workers.iter())
        .flat_map(|&w| a.layout.iter().map(move |l| (w, l.as_str())))
        .collect();
    let runs = a.sweep.interleaved(
        &configs,
        |(w, l)| format!("{l} layout, {w} workers"),
        |&(w, l), _| match l {
            "padded" => measure::<Padded>(&a, w, false),
            "lan" => measure::<Padded>(&a, w, true),
            _ => measure::<Naive>(&a, w, false),
        },
    )?;

    let mut rows: Vec<BridgeRow> = Vec::new();
    for l in &a.layout {
        let mut base = None;
        for &w in &a.sweep.workers {
            let per: Vec<f64> = runs
                .iter()
                .filter(|r| &r.layout == l && r.workers == w)
                .map(|r| r.mpps_total / w as f64)
                .collect();
            let m = median(&per);
            let b = *base.get_or_insert(m);
            rows.push(BridgeRow {
                layout: l.clone(),
                workers: w,
                median_mpps_per_worker: m,
                runs_mpps_per_worker: per,
                scaling: if b > 0.0 { m / b } else { 0.0 },
            });
        }
    }
    println!(
        "bench bridge: {} FDB entries, {}-byte frames, {} s x {} runs, median Mpps per worker",
        a.entries, a.frame_size, a.seconds, a.sweep.runs
    );
    println!(
        "{:<8} {:>7} {:>12} {:>9}  runs",
        "layout", "workers", "Mpps/worker", "scaling"
    );
    for r in &rows {
        let rs = runs_text(r.runs_mpps_per_worker.iter().copied(), 2);
        println!(
            "{:<8} {:>7} {:>12.2} {:>8.0}%  {}",
            r.layout,
            r.workers,
            r.median_mpps_per_worker,
            r.scaling * 100.0,
            rs
        );
    }
    let mut ratios = Vec::new();
    for &w in &a.sweep.workers {
        let get = |l: &str| {
            rows.iter()
                .find(|r| r.layout == l && r.workers == w)
                .map(|r| r.median_mpps_per_worker)
        };
        if let (Some(p), Some(n)) = (get("padded"), get("naive")) {
            if n > 0.0 {
                println!("padded/naive at {w} workers: {:.2}x", p / n);
                ratios.push(serde_json::json!({"workers": w, "padded_over_naive": p / n}));
            }
        }
        if let (Some(l), Some(p)) = (get("lan"), get("padded")) {
            if p > 0.0 {
                println!("lan/padded at {w} workers: {:.3}x", l / p);
                ratios.push(serde_json::json!({"workers": w, "lan_over_padded": l / p}));
            }
        }
    }
    let low = runs.iter().filter(|r| r.forwarded_share < 0.99).count();
    if low > 0 {
        println!("warning: {low} runs forwarded less than 99% of frames by FDB hit (learning not settled?)");
    }
    if let Some(path) = &a.sweep.json {
        let v = serde_json::json!({
            "entries": a.entries,
            "frame_size": a.frame_size,
            "seconds": a.seconds,
            "rows": rows,
            "ratios": ratios,
            "runs": runs,
        });
        write_report(path, Some("bridge"), v)?;
    }
    Ok(())
}

/// Dispatches a bench subcommand.
pub fn main(cmd: BenchCmd) -> Result<(), String> {
    match cmd {
        BenchCmd::Bridge(a) => bridge(a),
        BenchCmd::Refcount(a) => refcount(a),
        BenchCmd::Conntrack(a) => conntrack::ovs(a),
        BenchCmd::ConntrackChurn(a) => conntrack::churn_cmd(a),
        BenchCmd::ConntrackTable(a) => conntrack::table_cmd(a),
        BenchCmd::Route(a) => route::route(a),
        BenchCmd::Capture(a) => capture::capture(a),
        BenchCmd::Firewall(a) => firewall::firewall(a),
        BenchCmd::Frag(a) => frag::frag(a),
        BenchCmd::Nat(a) => nat::nat_cmd(a),
        BenchCmd::Linuxcp(a) => linuxcp::linuxcp(a),
    }
}

/// Writes `rows` with the command line and the machine as JSON, when a path is given.
pub(crate) fn write_json<T: Serialize>(path: Option<&std::path::Path>, rows: &T) -> Result<(), String> {
    match path {
        Some(path) => write_report(path, None, serde_json::json!({ "rows": rows })),
        None => Ok(()),
    }
}

/// Writes a benchmark's JSON file: `bench` (when given), the command line and the machine,
/// then the members of `fields` (an object) in their order.
pub(crate) fn write_report(
    path: &std::path::Path,
    bench: Option<&str>,
    fields: serde_json::Value,
) -> Result<(), String> {
    let mut v = serde_json::Map::new();
    if let Some(b) = bench {
        v.insert("bench".into(), b.into());
    }
    v.insert("command".into(), std::env::args().collect::<Vec<_>>().join(" ").into());
    v.insert("machine".into(), machine());
    if let serde_json::Value::Object(m) = fields {
        v.extend(m);
    }
    std::fs::write(path, serde_json::to_string_pretty(&v).expect("json"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_text_rounds_each_run_and_separates_them_by_spaces() {
        assert_eq!(super::runs_text([1.0, 2.345, 10.0], 2), "1.00 2.35 10.00");
        assert_eq!(super::runs_text([1.4, 2.6], 0), "1 3");
        assert_eq!(super::runs_text([], 1), "");
    }

    #[test]
    fn a_report_carries_its_name_the_command_the_machine_and_its_fields() {
        let path = std::env::temp_dir().join(format!("freeway-bench-report-{}.json", std::process::id()));
        super::write_report(&path, Some("demo"), serde_json::json!({ "rows": [1, 2], "seconds": 3 })).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(v["bench"], "demo");
        assert!(v["command"].is_string());
        assert!(v["machine"]["cores"].is_number());
        assert_eq!(v["rows"], serde_json::json!([1, 2]));
        assert_eq!(v["seconds"], 3);
        let path = std::env::temp_dir().join(format!("freeway-bench-rows-{}.json", std::process::id()));
        super::write_json(Some(&path), &vec![7]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(v.get("bench").is_none());
        assert_eq!(v["rows"], serde_json::json!([7]));
    }
}
