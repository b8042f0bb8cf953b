//! `freeway top` in a real terminal: tmux runs it at 80×24 against a running daemon (the
//! router demo), and the screen must show the ports with their rates, the drops by reason
//! (after `d`) and end on `q`.
//!
//! Needs tmux: without it the test prints a loud SKIPPED line, and fails under CI.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ok, spawn_run, stop};

/// Runs tmux on its own server socket (`-L`), so no user session is touched.
fn tmux(server: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .arg("-L")
        .arg(server)
        .args(args)
        .output()
        .expect("tmux runs")
}

/// The screen, once it shows every one of `want` (or after 20 s, whatever it shows).
fn screen_with(server: &str, want: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = String::from_utf8_lossy(&tmux(server, &["capture-pane", "-p", "-t", "top"]).stdout).to_string();
        if want.iter().all(|w| s.contains(w)) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn top_shows_ports_rates_and_drops_of_a_running_daemon() {
    if Command::new("tmux").arg("-V").stdout(Stdio::null()).status().is_err() {
        freeway_testkit::skip("tmux is not installed: freeway top not checked in a terminal");
        return;
    }
    let dir = std::env::temp_dir().join(format!("freeway-top-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("router.toml");
    let text = String::from_utf8(ok(&["default-config", "--router"]).stdout).unwrap();
    std::fs::write(&cfg, text.replace("duration_secs = 1", "duration_secs = 120")).unwrap();
    let sock = dir.join("ctl.sock");
    let daemon = spawn_run(&cfg, &sock, &[], Stdio::null());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let server = format!("freeway-top-{}", std::process::id());
    let cmd = format!("{} top --ctl {}", env!("CARGO_BIN_EXE_freeway"), sock.display());
    let o = tmux(
        &server,
        &["new-session", "-d", "-s", "top", "-x", "80", "-y", "24", &cmd],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // The ports and their rates (the generators send all the time: rates in k or M).
    let s = screen_with(&server, &["lan", "wan", "intruder", "rx pps", "bit/s", "k "]);
    for w in [
        "freeway top",
        "lan",
        "wan",
        "intruder",
        "rx pps",
        "tx bit/s",
        "workers",
        "conntrack",
    ] {
        assert!(s.contains(w), "{w:?} on the screen:\n{s}");
    }
    assert!(
        s.lines().count() <= 24 && s.lines().all(|l| l.chars().count() <= 80),
        "fits 80x24:\n{s}"
    );
    // The intruder's new connections are refused by the firewall: a drop reason, counted.
    tmux(&server, &["send-keys", "-t", "top", "d"]);
    let s = screen_with(&server, &["drops by reason", "firewall:new_not_allowed"]);
    assert!(s.contains("firewall:new_not_allowed"), "{s}");
    tmux(&server, &["send-keys", "-t", "top", "w"]);
    let s = screen_with(&server, &["worker", "pps", "sleeps"]);
    assert!(s.contains("sleeps"), "{s}");
    tmux(&server, &["send-keys", "-t", "top", "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux(&server, &["has-session", "-t", "top"]).status.success() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone = !tmux(&server, &["has-session", "-t", "top"]).status.success();
    let _ = tmux(&server, &["kill-server"]);
    assert!(gone, "q ends freeway top");
    stop(daemon, dir);
}
