//! `RunOptions::on_ready` comes once every worker's thread runs under its name, so a caller
//! can find the workers by name then (a benchmark pins `fw-worker-0` to a CPU of its own).
//! A thread names itself as it starts: a ready signal given right after spawning can find a
//! worker still under its creator's name. One test in this file: its process holds no other
//! datapath's threads.
#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::runtime::{self, RunOptions};

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|c| c.trim_end().to_string())
        .collect()
}

#[test]
fn every_worker_runs_under_its_name_when_ready() {
    const WORKERS: usize = 4;
    let text = format!(
        r#"
workers = {WORKERS}
pin_workers = false
duration_secs = 60
[[port]]
name = "a"
kind = "gen"
gen = {{ dst_macs = ["02:00:00:00:00:02"] }}
[[port]]
name = "b"
kind = "sink"
"#
    );
    let cfg = config::parse(&text, "ready", None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut seen = Vec::new();
    let mut ready = || {
        seen = thread_names();
        stop.store(true, Ordering::Relaxed);
    };
    runtime::run::<Padded>(
        &cfg,
        RunOptions {
            interval: Duration::from_millis(100),
            stop: Some(stop.clone()),
            on_ready: Some(&mut ready),
            ..Default::default()
        },
    )
    .unwrap();
    for id in 0..WORKERS {
        let name = format!("fw-worker-{id}");
        let n = seen.iter().filter(|s| **s == name).count();
        assert_eq!(
            n, 1,
            "{name}: {n} threads of that name when ready; the threads: {seen:?}"
        );
    }
}
