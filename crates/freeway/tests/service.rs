//! Running as a service: shell completions and manual pages generated from the command line,
//! the systemd readiness notification (`Type=notify`) once the datapath forwards, and the
//! control socket opened to operators' groups (`--ctl-group`, `--ctl-read-group`).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;
use common::{ctl, freeway, ok, spawn_run, stop};

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

/// `freeway ctl -s SOCK WORDS...` run as user `uid` with primary group `gid` and no
/// supplementary groups.
fn ctl_as(bin: &std::path::Path, uid: u32, gid: u32, sock: &std::path::Path, words: &[&str]) -> Output {
    Command::new(bin)
        .args(["ctl", "-s", sock.to_str().unwrap()])
        .args(words)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap()
}

/// With `--ctl-group` and `--ctl-read-group`, a member of the first may change tables, a
/// member of the second may read stats but not change anything, and anyone else is refused;
/// each refusal is counted in `ctl clients`. The users are made up (uid 65534 with chosen
/// group ids), so the test needs root to run its clients as them.
#[test]
fn the_control_socket_admits_its_groups_only() {
    if euid() != 0 {
        freeway_testkit::skip("needs root to run clients as other users");
        return;
    }
    let dir = std::env::temp_dir().join(format!("freeway-ctl-group-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A copy of the binary that the other users can run, wherever the build tree is.
    let bin = dir.join("freeway");
    std::fs::copy(env!("CARGO_BIN_EXE_freeway"), &bin).unwrap();
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        String::from_utf8(ok(&["default-config"]).stdout)
            .unwrap()
            .replace("duration_secs = 5", "duration_secs = 60"),
    )
    .unwrap();
    let sock = dir.join("ctl.sock");
    let child = spawn_run(
        &cfg,
        &sock,
        &["--ctl-group", "4242", "--ctl-read-group", "4243"],
        Stdio::null(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !sock.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "a read group opens the file; the check is per connection");

    let admin = ctl_as(&bin, 65534, 4242, &sock, &["fdb", "flush"]);
    assert!(
        admin.status.success(),
        "admin: {}",
        String::from_utf8_lossy(&admin.stderr)
    );
    let reader = ctl_as(&bin, 65534, 4243, &sock, &["stats"]);
    assert!(
        reader.status.success(),
        "reader: {}",
        String::from_utf8_lossy(&reader.stderr)
    );
    assert!(
        String::from_utf8_lossy(&reader.stdout).contains("rx"),
        "stats were printed"
    );
    let denied = ctl_as(&bin, 65534, 4243, &sock, &["fdb", "flush"]);
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(
        !denied.status.success() && err.contains("fdb_flush") && err.contains("4242"),
        "{err}"
    );
    let stranger = ctl_as(&bin, 65534, 65534, &sock, &["stats"]);
    let err = String::from_utf8_lossy(&stranger.stderr);
    assert!(!stranger.status.success() && err.contains("not allowed"), "{err}");

    let clients = ctl(&sock, &["clients"]);
    assert_eq!(clients["data"]["forbidden"], 2, "{clients}");
    stop(child, dir);
}

/// The effective user id, without a libc dependency in the tests.
fn euid() -> u32 {
    unsafe extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() }
}
