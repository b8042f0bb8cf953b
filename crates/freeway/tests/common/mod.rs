//! Helpers shared by the command-line tests: running the binary, stopping a running
//! datapath, and talking to its control socket.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// Asserts that `text` holds each of `wants`, naming the missing one and showing `text`.
pub fn assert_contains_all(text: &str, wants: &[&str]) {
    for w in wants {
        assert!(text.contains(w), "no {w:?} in:\n{text}");
    }
}

/// Runs the `freeway` binary with `args`.
pub fn freeway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args(args)
        .output()
        .expect("the freeway binary runs")
}

/// [`freeway`], which must succeed.
pub fn ok(args: &[&str]) -> Output {
    let o = freeway(args);
    assert!(
        o.status.success(),
        "freeway {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Starts `freeway run -q --config CFG --ctl SOCK EXTRA...`, its standard output discarded.
pub fn spawn_run(cfg: &Path, sock: &Path, extra: &[&str], stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args([
            "run",
            "-q",
            "--config",
            cfg.to_str().unwrap(),
            "--ctl",
            sock.to_str().unwrap(),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// Sends the signal `sig` (`INT`, `TERM`) to `child`.
pub fn signal(child: &Child, sig: &str) {
    assert!(Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success());
}

/// Stops a running datapath with SIGINT and checks it exits cleanly.
pub fn interrupt(mut child: Child) {
    signal(&child, "INT");
    assert!(child.wait().unwrap().success());
}

/// Stops a running datapath with SIGINT, checks it exits cleanly and removes its directory.
pub fn stop(child: Child, dir: PathBuf) {
    interrupt(child);
    std::fs::remove_dir_all(dir).unwrap();
}

/// One request as `freeway ctl` words; the reply object (`ok`, `text`, `data` / `kind`, `error`).
pub fn ctl(sock: &Path, w: &[&str]) -> Value {
    let words: Vec<String> = w.iter().map(|s| s.to_string()).collect();
    freeway_datapath::runtime::ctl_request(sock, &words).expect("the datapath answers")
}

/// Sends raw bytes (a failed write is the datapath refusing early: its reply still comes)
/// and returns the reply line as JSON (waiting up to 30 s).
pub fn raw(sock: &Path, bytes: &[u8]) -> Value {
    let mut s = UnixStream::connect(sock).unwrap();
    let _ = s.write_all(bytes);
    reply_line(&s)
}

/// Reads one reply line from a connection, as JSON (waiting up to 30 s).
pub fn reply_line(s: &UnixStream) -> Value {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// The six bytes of a MAC address written `aa:bb:cc:dd:ee:ff`.
pub fn mac_bytes(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    v.try_into().unwrap()
}
