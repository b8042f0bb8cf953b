//! `freeway bench linuxcp`: how fast the kernel route mirror converges.
//!
//! Each run enters a fresh network namespace of its own (`unshare(CLONE_NEWNET)`: root only)
//! with one kernel twin (`lcp0`, 10.0.0.1/24) and measures, on the real mirror
//! (`freeway_linuxcp::run`, its thread) feeding a RIB owned by a second thread, as the control
//! thread owns it in a datapath:
//!
//! * **dump**: N IPv4 /24 routes already in the kernel's main table when the mirror starts:
//!   from its start until the RIB holds all N;
//! * **notify**: N more routes written to the kernel while the mirror runs (streamed through
//!   rtnetlink, as a routing daemon does): from the first write until the RIB holds all 2N
//!   (the kernel's own insertion time is shown apart);
//! * **change**: one `ip route replace` (a new gateway for one prefix), repeated: from the
//!   request until the FIB (what workers read) answers the new next hop for an address in
//!   the prefix: median, 99th percentile and maximum.
//!
//! The mirror's full resyncs (its socket overran) are shown: with large N they are part of
//! the notification figure.
//!
//! `--forwarding N` adds forwarding quiet and while N routes are written (`linuxcp_fwd`).
//! On a machine with a core to spare, give the worker its own CPU and keep the mirror, the
//! RIB's owner and the route writer off it:
//! `freeway bench linuxcp --routes 1000 --changes 10 --forwarding 1000000 --seconds 10 --worker-cpu 1`
//! (the line before the figures says where the threads ran).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use freeway_linuxcp::kernel::{KernelRoute, Writer};
use freeway_linuxcp::{Change, Filter, MirrorConfig, TwinSpec, Twins};
use freeway_route::{FibConfig, NextHop, Prefix, Rib};
use serde::Serialize;

/// `bench linuxcp` options.
#[derive(Args, Clone)]
pub struct LinuxcpArgs {
    /// Route counts to measure, e.g. 1000,100000,1000000.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000")]
    pub routes: Vec<usize>,
    /// Single route changes timed per run.
    #[arg(long, default_value_t = 200)]
    pub changes: usize,
    /// Also measure forwarding (one worker, the router topology on mirrored routes) quiet
    /// and while this many kernel routes are written; 0: not.
    #[arg(long, default_value_t = 0)]
    pub forwarding: usize,
    /// With `--forwarding`: the forwarding worker's own CPU; every other thread of the run
    /// (the mirror, the RIB's owner, the route writer) is kept off it, on the other CPUs
    /// this process may use. Default: the worker pinned to the first CPU, the rest anywhere.
    #[arg(long)]
    pub worker_cpu: Option<usize>,
    /// The forwarding measurement's window, seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Write results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// One run's figures.
#[derive(Clone, Debug, Serialize)]
pub struct LinuxcpRow {
    /// Routes per phase.
    pub routes: usize,
    /// Start-up dump: mirror start to RIB complete, ms.
    pub dump_ms: f64,
    /// Writing the N notified routes into the kernel, ms.
    pub kernel_write_ms: f64,
    /// Notifications: first write to RIB complete, ms.
    pub notify_ms: f64,
    /// Full resyncs the mirror did (the start-up dump is one).
    pub resyncs: u64,
    /// One route change to the FIB answering it: median, µs.
    pub change_p50_us: f64,
    /// 99th percentile, µs.
    pub change_p99_us: f64,
    /// Maximum, µs.
    pub change_max_us: f64,
}

const IFACE: &str = "lcp0";
const GW_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const GW_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);

/// The i-th benchmark prefix: /24s from 11.0.0.0 up.
fn prefix(i: usize) -> Prefix {
    let a = (11u32 << 24) + ((i as u32) << 8);
    Prefix::new(IpAddr::V4(Ipv4Addr::from(a)), 24).expect("aligned /24")
}

fn route(i: usize, gw: Ipv4Addr, ifindex: u32) -> KernelRoute {
    KernelRoute {
        prefix: prefix(i),
        gateway: IpAddr::V4(gw),
        ifindex,
        protocol: 12,
        table: 254,
    }
}

/// The index of the kernel device `name`.
pub(crate) fn ifindex(name: &str) -> Result<u32, String> {
    let c = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: a valid NUL-terminated name.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(format!("{name}: {}", std::io::Error::last_os_error())),
        i => Ok(i),
    }
}

fn wait_until(limit: Duration, mut ok: impl FnMut() -> bool) -> Result<Duration, String> {
    let t0 = Instant::now();
    while !ok() {
        if t0.elapsed() > limit {
            return Err(format!("not converged within {limit:?}"));
        }
        // Yields rather than spins: the mirror's and the RIB's threads need the cores.
        std::thread::yield_now();
    }
    Ok(t0.elapsed())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Moves the calling thread (and the threads it starts from now on) into a new network
/// namespace.
pub(crate) fn enter_netns() -> Result<(), String> {
    // SAFETY: unshare has no memory preconditions.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "bench linuxcp: cannot enter a new network namespace ({}): run it as root",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// One run in a fresh namespace.
fn run_one(n: usize, changes: usize) -> Result<LinuxcpRow, String> {
    enter_netns()?;
    let twins = Twins::create(&[Some(TwinSpec {
        name: IFACE.into(),
        mac: [0x02, 0, 0, 0, 0, 0x01],
        mtu: 1500,
        v4: vec![(Ipv4Addr::new(10, 0, 0, 1), 24)],
        v6: vec![],
    })])
    .map_err(|e| e.to_string())?;
    let idx = ifindex(IFACE)?;
    let mut w = Writer::open().map_err(|e| e.to_string())?;
    let refused = w
        .write((0..n).map(|i| route(i, GW_A, idx)), false)
        .map_err(|e| e.to_string())?;
    if refused > 0 {
        return Err(format!("the kernel refused {refused} of {n} routes"));
    }

    // The RIB's owner: applies the mirror's batches, publishes the RIB's size.
    let (tx, rx) = crossbeam_channel::bounded::<Vec<Change>>(64);
    let (rib, fib) = Rib::new(FibConfig::default());
    let len = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let owner = {
        let (len, stop) = (len.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rib = rib;
            let mut n = freeway_linuxcp::Applied::default();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(c) = rx.recv_timeout(Duration::from_millis(10)) {
                    freeway_linuxcp::apply(&mut rib, c, &mut n);
                    len.store(rib.len(), Ordering::Release);
                }
            }
        })
    };
    let t0 = Instant::now();
    let mirror = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let cfg = MirrorConfig {
                filter: Filter::default(),
                ifaces: vec![IFACE.into()],
                notify_buffer: MirrorConfig::NOTIFY_BUFFER,
            };
            freeway_linuxcp::run(&cfg, &stop, |b| tx.send(b).is_ok())
        })
    };
    let limit = Duration::from_secs(600);
    wait_until(limit, || len.load(Ordering::Acquire) == n)?;
    let dump = t0.elapsed();

    let t1 = Instant::now();
    let refused = w
        .write((n..2 * n).map(|i| route(i, GW_A, idx)), false)
        .map_err(|e| e.to_string())?;
    let kernel_write = t1.elapsed();
    if refused > 0 {
        return Err(format!("the kernel refused {refused} of {n} routes"));
    }
    wait_until(limit, || len.load(Ordering::Acquire) == 2 * n)?;
    let notify = t1.elapsed();

    // The mirror may still work through a backlog of notifications (or resync after an
    // overrun): a first change, waited for without a clock, lets it settle.
    let settle = IpAddr::V4(Ipv4Addr::from((11u32 << 24) + 1));
    w.write([route(0, GW_B, idx)], true).map_err(|e| e.to_string())?;
    wait_until(limit, || {
        fib.next_hop(settle, 0) == Some(NextHop::via(IpAddr::V4(GW_B), 0))
    })?;
    let mut lat = Vec::with_capacity(changes);
    for k in 0..changes {
        let i = (k * 7919) % (2 * n);
        let gw = if k % 2 == 0 { GW_B } else { GW_A };
        let want = Some(NextHop::via(IpAddr::V4(gw), 0));
        let probe = IpAddr::V4(Ipv4Addr::from((11u32 << 24) + ((i as u32) << 8) + 1));
        // Each prefix is first moved off its start-up gateway, so every change is a change.
        let before = fib.next_hop(probe, 0);
        let t = Instant::now();
        w.write([route(i, gw, idx)], true).map_err(|e| e.to_string())?;
        if before == want {
            continue;
        }
        wait_until(Duration::from_secs(10), || fib.next_hop(probe, 0) == want)?;
        lat.push(t.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    let stats = mirror
        .join()
        .map_err(|_| "the mirror panicked".to_string())?
        .map_err(|e| format!("the mirror failed: {e}"))?;
    owner.join().map_err(|_| "the RIB's thread panicked".to_string())?;
    drop(twins);
    lat.sort();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat[i].as_secs_f64() * 1e6
    };
    Ok(LinuxcpRow {
        routes: n,
        dump_ms: ms(dump),
        kernel_write_ms: ms(kernel_write),
        notify_ms: ms(notify),
        resyncs: stats.resyncs,
        change_p50_us: pct(0.5),
        change_p99_us: pct(0.99),
        change_max_us: pct(1.0),
    })
}

/// `freeway bench linuxcp`.
pub fn linuxcp(a: LinuxcpArgs) -> Result<(), String> {
    if a.forwarding > 1 << 20 {
        return Err(format!("--forwarding {}: at most {}", a.forwarding, 1 << 20));
    }
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        return Err(format!("--seconds {}: more than 0, at most 600", a.seconds));
    }
    println!(
        "{:>9} {:>10} {:>12} {:>11} {:>8} {:>11} {:>11} {:>11}",
        "routes", "dump ms", "kernel ms", "notify ms", "resyncs", "change p50", "change p99", "change max"
    );
    let mut rows = Vec::new();
    for &n in &a.routes {
        if n == 0 || n > 1 << 20 {
            return Err(format!("--routes {n}: 1 to {} per run", 1 << 20));
        }
        // Each run in a thread of its own: its namespace goes with it.
        let changes = a.changes;
        let r = std::thread::spawn(move || run_one(n, changes))
            .join()
            .map_err(|_| "the run panicked".to_string())??;
        println!(
            "{:>9} {:>10.1} {:>12.1} {:>11.1} {:>8} {:>9.0}µs {:>9.0}µs {:>9.0}µs",
            r.routes,
            r.dump_ms,
            r.kernel_write_ms,
            r.notify_ms,
            r.resyncs,
            r.change_p50_us,
            r.change_p99_us,
            r.change_max_us
        );
        rows.push(r);
    }
    if a.forwarding == 0 {
        return crate::write_json(a.json.as_deref(), &rows);
    }
    let placement = crate::linuxcp_fwd::placement(a.worker_cpu)?;
    let f = crate::linuxcp_fwd::compare(a.forwarding, a.seconds, placement)?;
    match f.placement.worker_cpu {
        Some(c) => println!(
            "the worker on CPU {c}, every other thread on CPUs {:?}",
            f.placement.other_cpus
        ),
        None => println!("the worker pinned to the first CPU, the other threads on any (--worker-cpu: apart)"),
    }
    println!(
        "forwarding (1 worker, routes mirrored from the kernel), {:.1} s: quiet {:.2} Mpps, \
         while {} routes are written {:.2} Mpps ({:.2}x); the kernel held them after {:.0} ms",
        f.seconds, f.quiet_mpps, f.flood_routes, f.flood_mpps, f.ratio, f.kernel_write_ms
    );
    if f.kernel_write_ms < f.seconds * 1e3 {
        println!(
            "  (the kernel held the flood {:.1} s before the window's end: widen --forwarding or narrow --seconds)",
            f.seconds - f.kernel_write_ms / 1e3
        );
    }
    println!(
        "  worker on a CPU {:.0}% of the window quiet, {:.0}% flooded (waiting for one {:.0}%, {:.0}%); \
         CPU per flood route: mirror {:.0} ns, RIB's owner {:.0} ns",
        f.quiet.worker_on_cpu * 100.0,
        f.flood.worker_on_cpu * 100.0,
        f.quiet.worker_waiting * 100.0,
        f.flood.worker_waiting * 100.0,
        f.mirror_ns_per_route,
        f.rib_ns_per_route
    );
    crate::write_json(
        a.json.as_deref(),
        &serde_json::json!({ "convergence": rows, "forwarding": f }),
    )
}
