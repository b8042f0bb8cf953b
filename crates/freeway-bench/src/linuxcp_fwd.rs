//! `freeway bench linuxcp --forwarding N`: forwarding while the route mirror takes a flood.
//!
//! The router topology of `bench capture --topology router` (two generator hosts in two
//! VLANs, 64-byte UDP frames, one worker) with `[linux] punt` and `mirror`, in a fresh network
//! namespace: the router interfaces' twins are the kernel devices `v10` and `v20`, and each
//! host sends to a prefix that the kernel routes through the other host's twin (11.0.0.0/24,
//! 12.0.0.0/24), so every frame is forwarded on a route the mirror wrote. Two runs in the same
//! invocation: quiet, and while N more kernel routes (13.0.0.0/24 up) are written through
//! rtnetlink, so the mirror reads a notification for each and the RIB's owner publishes a new
//! FIB for each batch. The figure is the IPv4 packets forwarded per second over the same
//! window of both runs, and their ratio. A run lasts until its window is over and the kernel
//! holds the whole flood (a run that ended first would delete the twins under the writer).
//!
//! On a machine with a spare core, `--worker-cpu N` gives the worker CPU N to itself and
//! restricts every other thread of the run (the mirror, the RIB's owner `fw-ctl`, the route
//! writer, and so the kernel's work on its requests) to the other CPUs, as `taskset` would:
//! then the ratio measures what the mirror's work costs the worker through shared caches and
//! publications, not through a shared core. Each run reports the worker's time on a CPU and
//! waiting for one (`/proc` schedstat) over the window, and the CPU time the mirror and
//! `fw-ctl` spent per flood route.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions, Snapshot};
use freeway_linuxcp::kernel::{refusals_text, KernelRoute, Writer};
use freeway_route::Prefix;
use serde::Serialize;

use crate::cpus::{self, SchedStat};
use crate::linuxcp::{enter_netns, ifindex};

/// Seconds from the start of a run to its measurement window: the twins made, the two routes
/// mirrored, the route cache warm.
const FROM: f64 = 2.0;

/// Where the run's threads run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Placement {
    /// The worker's own CPU (`--worker-cpu`); `None`: the worker pinned as the datapath
    /// pins it (the first allowed CPU), every other thread anywhere.
    pub worker_cpu: Option<usize>,
    /// The CPUs of every other thread (with `worker_cpu`).
    pub other_cpus: Vec<usize>,
}

/// One run's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunFigures {
    /// Mpps forwarded over the window.
    pub mpps: f64,
    /// Share of the window the worker spent on a CPU.
    pub worker_on_cpu: f64,
    /// Share of the window the worker was runnable but waited for a CPU.
    pub worker_waiting: f64,
    /// CPU time of the mirror's thread (`fw-linuxcp`) over the whole run, ms.
    pub mirror_cpu_ms: f64,
    /// CPU time of the RIB's owner (`fw-ctl`) over the whole run, ms.
    pub rib_cpu_ms: f64,
}

/// One comparison.
#[derive(Clone, Debug, Serialize)]
pub struct ForwardingRow {
    /// Routes written during the flooded run.
    pub flood_routes: usize,
    /// Measurement window, seconds.
    pub seconds: f64,
    /// Where the threads ran.
    pub placement: Placement,
    /// Mpps forwarded, quiet.
    pub quiet_mpps: f64,
    /// Mpps forwarded while the kernel takes the flood.
    pub flood_mpps: f64,
    /// `flood_mpps / quiet_mpps`.
    pub ratio: f64,
    /// How long the kernel took to hold the flood, ms (from the window's start).
    pub kernel_write_ms: f64,
    /// The quiet run's figures.
    pub quiet: RunFigures,
    /// The flooded run's figures.
    pub flood: RunFigures,
    /// The flooded run's mirror CPU time per flood route (the quiet run's subtracted), ns.
    pub mirror_ns_per_route: f64,
    /// The same for the RIB's owner, ns.
    pub rib_ns_per_route: f64,
}

/// The i-th /24 from `base`.0.0.0 up, through the host of VLAN `vlan` on its twin `ifindex`.
fn route(base: u32, i: usize, vlan: u8, ifindex: u32) -> KernelRoute {
    KernelRoute {
        prefix: Prefix::new(IpAddr::V4(Ipv4Addr::from((base << 24) + ((i as u32) << 8))), 24).expect("aligned /24"),
        gateway: IpAddr::V4(Ipv4Addr::new(10, 0, vlan, 5)),
        ifindex,
        protocol: 12,
        table: 254,
    }
}

/// Writes `routes` (`replace`: over routes of the same prefix); an error names how many the
/// kernel refused and why.
fn write_all(
    w: &mut Writer,
    routes: impl IntoIterator<Item = KernelRoute>,
    replace: bool,
    what: &str,
) -> Result<(), String> {
    let refused = w.write(routes, replace).map_err(|e| e.to_string())?;
    if refused > 0 {
        return Err(format!(
            "the kernel refused {refused} of {what}: {}",
            refusals_text(w.refusals())
        ));
    }
    Ok(())
}

/// Beside the run: waits for the twins, routes the hosts' destinations through them, then
/// (with `flood`) writes the flood at the window's start. Returns the flood's kernel time.
fn drive(t0: Instant, flood: usize) -> Result<Duration, String> {
    let deadline = t0 + Duration::from_secs(10);
    while ifindex("v10").is_err() || ifindex("v20").is_err() {
        if Instant::now() > deadline {
            return Err("the twins v10 and v20 did not appear".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (v10, v20) = (ifindex("v10")?, ifindex("v20")?);
    let mut w = Writer::open().map_err(|e| e.to_string())?;
    // A twin gets its address (the gateway's subnet) just after it appears: until then the
    // kernel refuses a route through it (`ENETUNREACH`), so the writer tries again.
    while let Err(e) = write_all(
        &mut w,
        [route(11, 0, 20, v20), route(12, 0, 10, v10)],
        true,
        "the hosts' routes",
    ) {
        if Instant::now() > deadline {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if flood == 0 {
        return Ok(Duration::ZERO);
    }
    sleep_until(t0 + Duration::from_secs_f64(FROM));
    let t = Instant::now();
    write_all(
        &mut w,
        (0..flood).map(|i| route(13, i, 20, v20)),
        false,
        &format!("the flood's {flood} routes"),
    )?;
    Ok(t.elapsed())
}

fn sleep_until(t: Instant) {
    if let Some(d) = t.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

/// Mpps forwarded over the window `[FROM, FROM + seconds]`, and its first and last snapshot's
/// times.
fn forwarded_mpps(snaps: &[Snapshot], seconds: f64) -> Result<(f64, f64, f64), String> {
    let (first, last, _) = crate::window_from(snaps, FROM, seconds)?;
    let fwd = |s: &Snapshot| s.router.as_ref().map_or(0, |r| r.l3.forwarded_v4) as f64;
    let dt = last.elapsed_s - first.elapsed_s;
    Ok(((fwd(last) - fwd(first)) / dt / 1e6, first.elapsed_s, last.elapsed_s))
}

type Sample = (f64, BTreeMap<String, SchedStat>);

/// The run's figures from its snapshots and the thread samples taken with them.
fn figures(snaps: &[Snapshot], samples: &[Sample], seconds: f64) -> Result<RunFigures, String> {
    let (mpps, from, to) = forwarded_mpps(snaps, seconds)?;
    let at = |t: f64| samples.iter().find(|s| s.0 == t).map(|s| &s.1);
    let (Some(a), Some(b)) = (at(from), at(to)) else {
        return Err("no thread sample at the window's ends".into());
    };
    let worker = |m: &BTreeMap<String, SchedStat>| m.get("fw-worker-0").copied().unwrap_or_default();
    let (wa, wb) = (worker(a), worker(b));
    let window_ns = (to - from) * 1e9;
    let end = samples.last().map(|s| &s.1).ok_or("no thread sample")?;
    let cpu_ms = |name: &str| end.get(name).map_or(0.0, |s| s.run_ns as f64 / 1e6);
    Ok(RunFigures {
        mpps,
        worker_on_cpu: (wb.run_ns - wa.run_ns) as f64 / window_ns,
        worker_waiting: (wb.wait_ns - wa.wait_ns) as f64 / window_ns,
        mirror_cpu_ms: cpu_ms("fw-linuxcp"),
        rib_cpu_ms: cpu_ms("fw-ctl"),
    })
}

/// Gives the worker its CPU, and the run's other threads the others (see the module doc).
fn place(p: &Placement) -> Result<(), String> {
    match p.worker_cpu {
        Some(c) if cpus::pin_named("fw-worker", &[c])? == 1 => Ok(()),
        Some(_) => Err("bench linuxcp: the worker thread fw-worker-0 was not found to pin".into()),
        None => Ok(()),
    }
}

/// One run in a fresh namespace: its figures, the flood's kernel time.
fn run_one(flood: usize, seconds: f64, p: &Placement) -> Result<(RunFigures, Duration), String> {
    enter_netns()?;
    if p.worker_cpu.is_some() {
        // Every thread started from here on (the writer, the run's threads) inherits this.
        cpus::set(0, &p.other_cpus)?;
    }
    // The run ends when the driver says so; the duration is only a bound.
    let mut text = crate::capture::router_config(1, p.worker_cpu.is_none(), FROM + seconds + 600.0, true)
        .replace("dst_ip = \"10.0.20.5\"", "dst_ip = \"11.0.0.5\"")
        .replace("dst_ip = \"10.0.10.5\"", "dst_ip = \"12.0.0.5\"");
    text.push_str("\n[linux]\npunt = true\nmirror = true\n");
    let cfg = config::parse(&text, "<bench linuxcp>", None).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let r = drive(t0, flood);
            // The window over and the flood held, the mirror gets a second to catch up.
            sleep_until(t0 + Duration::from_secs_f64(FROM + seconds + 1.0));
            stop.store(true, Ordering::Relaxed);
            r
        })
    };
    let mut snaps: Vec<Snapshot> = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut cb = |s: &Snapshot| {
        samples.push((s.elapsed_s, cpus::sample()));
        snaps.push(s.clone());
    };
    let mut placed = Ok(());
    let mut ready = || placed = place(p);
    let res = runtime::run::<freeway_bridge::Padded>(
        &cfg,
        RunOptions {
            interval: Duration::from_millis(250),
            on_snapshot: Some(&mut cb),
            on_ready: Some(&mut ready),
            stop: Some(stop.clone()),
            ..Default::default()
        },
    );
    stop.store(true, Ordering::Relaxed);
    let written = driver.join().map_err(|_| "the route writer panicked".to_string())??;
    res.map_err(|e| e.to_string())?;
    placed?;
    Ok((figures(&snaps, &samples, seconds)?, written))
}

/// Where the threads go for `--worker-cpu`: the worker on `cpu`, the rest on every other
/// CPU this process may use.
pub fn placement(worker_cpu: Option<usize>) -> Result<Placement, String> {
    let Some(c) = worker_cpu else {
        return Ok(Placement::default());
    };
    let allowed = cpus::allowed()?;
    if !allowed.contains(&c) {
        return Err(format!("--worker-cpu {c}: not one of this process's CPUs {allowed:?}"));
    }
    let others: Vec<usize> = allowed.into_iter().filter(|&o| o != c).collect();
    if others.is_empty() {
        return Err(format!(
            "--worker-cpu {c}: no other CPU is left for the mirror and the writer"
        ));
    }
    Ok(Placement {
        worker_cpu: Some(c),
        other_cpus: others,
    })
}

/// Forwarding quiet and under a flood of `flood` routes, each run in a namespace of its own.
pub fn compare(flood: usize, seconds: f64, placement: Placement) -> Result<ForwardingRow, String> {
    let in_ns = |n: usize| {
        let p = placement.clone();
        std::thread::spawn(move || run_one(n, seconds, &p))
            .join()
            .map_err(|_| "the run panicked".to_string())?
    };
    let (quiet, _) = in_ns(0)?;
    let (flooded, written) = in_ns(flood)?;
    let per_route = |f: fn(&RunFigures) -> f64| (f(&flooded) - f(&quiet)).max(0.0) * 1e6 / flood as f64;
    Ok(ForwardingRow {
        flood_routes: flood,
        seconds,
        placement,
        quiet_mpps: quiet.mpps,
        flood_mpps: flooded.mpps,
        ratio: if quiet.mpps > 0.0 {
            flooded.mpps / quiet.mpps
        } else {
            0.0
        },
        kernel_write_ms: written.as_secs_f64() * 1e3,
        mirror_ns_per_route: per_route(|f| f.mirror_cpu_ms),
        rib_ns_per_route: per_route(|f| f.rib_cpu_ms),
        quiet,
        flood: flooded,
    })
}
