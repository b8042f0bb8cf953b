//! Running as a service: shell completions and manual pages generated from the command line,
//! and the systemd readiness notification (`Type=notify`) once the datapath forwards.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

mod common;
use common::{freeway, ok};

/// Every shell clap_complete knows gets a script that names the commands; an unknown shell
/// is refused with the list of the known ones.
#[test]
fn completions_cover_the_commands() {
    for (shell, marker) in [
        ("bash", "_freeway()"),
        ("zsh", "#compdef freeway"),
        ("fish", "complete -c freeway"),
    ] {
        let text = String::from_utf8(ok(&["completions", shell]).stdout).unwrap();
        assert!(text.contains(marker), "{shell}: no {marker:?}");
        for cmd in ["run", "capture", "ctl", "check", "bench"] {
            assert!(text.contains(cmd), "{shell}: the {cmd} command is missing");
        }
    }
    let o = freeway(&["completions", "tcsh"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bash") && err.contains("zsh"), "{err}");
}

/// `freeway manpages DIR` writes one roff page per command, and nothing else.
#[test]
fn manpages_are_written_per_command() {
    let dir = std::env::temp_dir().join(format!("freeway-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    ok(&["manpages", dir.to_str().unwrap()]);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    for page in [
        "freeway.1",
        "freeway-run.1",
        "freeway-capture.1",
        "freeway-ctl.1",
        "freeway-ctl-route-add.1",
    ] {
        assert!(names.iter().any(|n| n == page), "{page} missing from {names:?}");
    }
    assert!(
        names.iter().all(|n| n.starts_with("freeway") && n.ends_with(".1")),
        "{names:?}"
    );
    let run = std::fs::read_to_string(dir.join("freeway-run.1")).unwrap();
    assert!(
        run.starts_with(".ie") || run.contains(".TH freeway-run 1"),
        "not a roff page"
    );
    assert!(run.contains("\\-\\-config"), "the page documents --config");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Under a service manager (`NOTIFY_SOCKET` set, as systemd does for `Type=notify`), the
/// datapath says READY=1 once it runs, before it stops.
#[test]
fn the_datapath_notifies_readiness() {
    let sock = std::env::temp_dir().join(format!("freeway-notify-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let listener = UnixDatagram::bind(&sock).unwrap();
    listener.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args(["run", "--duration", "1", "--quiet"])
        .env("NOTIFY_SOCKET", &sock)
        .output()
        .unwrap();
    assert!(child.status.success(), "{}", String::from_utf8_lossy(&child.stderr));
    let mut buf = [0u8; 256];
    let n = listener.recv(&mut buf).expect("a notification within the run");
    let msg = String::from_utf8_lossy(&buf[..n]);
    assert!(msg.lines().any(|l| l == "READY=1"), "got {msg:?}");
    std::fs::remove_file(&sock).unwrap();
}
