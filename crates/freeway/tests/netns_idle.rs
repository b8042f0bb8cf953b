//! An idle Freeway sleeps: its workers wait in `poll()` on their sockets and the run's stop
//! signal, with a timeout only as long as nothing is due (no packet waiting for a neighbour, no
//! fragment to expire), so each wakes at most ten times a second without traffic. Counted by
//! the workers' own statistics (`sleeps`: waits begun; `wakeups`: waits a frame or the stop
//! signal ended), not timed: a loaded machine only makes fewer timeouts.
//!
//! Needs root (namespaces, veths, AF_PACKET): CI runs as root. Elsewhere every test prints a
//! loud SKIPPED line and passes; with `CI` set it fails instead.

#[macro_use]
mod netbed;

use std::time::{Duration, Instant};

use netbed::*;

/// Over a whole run (started, one ping, idle, stopped), each worker's waits that ended by
/// their timeout number at most one per 100 ms of the run (plus one for the wait the stop
/// signal or a signal cut short); with the former 5 ms timeout they were 20 times as many.
#[test]
fn an_idle_worker_wakes_at_most_ten_times_a_second() {
    need_root!();
    let t0 = Instant::now();
    let mut bed = Bed::bridged("idlew");
    // Any length does: the bound scales with the run's length.
    std::thread::sleep(Duration::from_secs(1));
    let j = bed.stop();
    let secs = t0.elapsed().as_secs_f64();
    let workers = j["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{j}");
    for w in workers {
        let (sleeps, wakeups) = (w["sleeps"].as_u64().unwrap(), w["wakeups"].as_u64().unwrap());
        let timeouts = sleeps - wakeups;
        assert!(
            timeouts as f64 <= secs * 10.0 + 2.0,
            "{timeouts} waits timed out in {secs:.2} s (at most 10 a second): {w}"
        );
    }
}
