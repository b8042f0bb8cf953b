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
//! window of both runs, and their ratio.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions, Snapshot};
use freeway_linuxcp::kernel::{KernelRoute, Writer};
use freeway_route::Prefix;
use serde::Serialize;

use crate::linuxcp::{enter_netns, ifindex};

/// Seconds from the start of a run to its measurement window: the twins made, the two routes
/// mirrored, the route cache warm.
const FROM: f64 = 2.0;

/// One comparison.
#[derive(Clone, Debug, Serialize)]
pub struct ForwardingRow {
    /// Routes written during the flooded run.
    pub flood_routes: usize,
    /// Measurement window, seconds.
    pub seconds: f64,
    /// Mpps forwarded, quiet.
    pub quiet_mpps: f64,
    /// Mpps forwarded while the kernel takes the flood.
    pub flood_mpps: f64,
    /// `flood_mpps / quiet_mpps`.
    pub ratio: f64,
    /// How long the kernel took to hold the flood, ms (from the window's start).
    pub kernel_write_ms: f64,
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
    let refused = w
        .write([route(11, 0, 20, v20), route(12, 0, 10, v10)], false)
        .map_err(|e| e.to_string())?;
    if refused > 0 {
        return Err("the kernel refused the hosts' routes".into());
    }
    if flood == 0 {
        return Ok(Duration::ZERO);
    }
    if let Some(d) = (t0 + Duration::from_secs_f64(FROM)).checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
    let t = Instant::now();
    let refused = w
        .write((0..flood).map(|i| route(13, i, 20, v20)), false)
        .map_err(|e| e.to_string())?;
    if refused > 0 {
        return Err(format!("the kernel refused {refused} of the flood's {flood} routes"));
    }
    Ok(t.elapsed())
}

/// Mpps forwarded over the window `[FROM, FROM + seconds]`.
fn forwarded_mpps(snaps: &[Snapshot], seconds: f64) -> Result<f64, String> {
    let (first, last, _) = crate::window_from(snaps, FROM, seconds)?;
    let fwd = |s: &Snapshot| s.router.as_ref().map_or(0, |r| r.l3.forwarded_v4) as f64;
    Ok((fwd(last) - fwd(first)) / (last.elapsed_s - first.elapsed_s) / 1e6)
}

/// One run in a fresh namespace: Mpps forwarded, the flood's kernel time.
fn run_one(flood: usize, seconds: f64) -> Result<(f64, Duration), String> {
    enter_netns()?;
    let mut text = crate::capture::router_config(1, true, FROM + seconds + 0.3, true)
        .replace("dst_ip = \"10.0.20.5\"", "dst_ip = \"11.0.0.5\"")
        .replace("dst_ip = \"10.0.10.5\"", "dst_ip = \"12.0.0.5\"");
    text.push_str("\n[linux]\npunt = true\nmirror = true\n");
    let cfg = config::parse(&text, "<bench linuxcp>", None).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let driver = std::thread::spawn(move || drive(t0, flood));
    let mut snaps: Vec<Snapshot> = Vec::new();
    let mut cb = |s: &Snapshot| snaps.push(s.clone());
    let res = runtime::run::<freeway_bridge::Padded>(
        &cfg,
        RunOptions {
            interval: Duration::from_millis(250),
            on_snapshot: Some(&mut cb),
            ..Default::default()
        },
    );
    let written = driver.join().map_err(|_| "the route writer panicked".to_string())??;
    res.map_err(|e| e.to_string())?;
    Ok((forwarded_mpps(&snaps, seconds)?, written))
}

/// Forwarding quiet and under a flood of `flood` routes, each run in a namespace of its own.
pub fn compare(flood: usize, seconds: f64) -> Result<ForwardingRow, String> {
    let in_ns = move |n: usize| {
        std::thread::spawn(move || run_one(n, seconds))
            .join()
            .map_err(|_| "the run panicked".to_string())?
    };
    let (quiet, _) = in_ns(0)?;
    let (flooded, written) = in_ns(flood)?;
    Ok(ForwardingRow {
        flood_routes: flood,
        seconds,
        quiet_mpps: quiet,
        flood_mpps: flooded,
        ratio: if quiet > 0.0 { flooded / quiet } else { 0.0 },
        kernel_write_ms: written.as_secs_f64() * 1e3,
    })
}
