//! The command line end to end: the router demo's routes, connection table and neighbours,
//! and the tcpdump-shaped capture command writing pcap to a file and to standard output.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;
use common::{assert_contains_all, ctl, freeway, ok, raw, signal, spawn_run, stop};

/// The arguments of `freeway capture --config CFG ARGS...`.
fn capture_args<'a>(cfg: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    [&["capture", "--config", cfg][..], args].concat()
}

/// The router demo written to a temporary file, with a short duration.
fn router_config(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("freeway-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = ok(&["default-config", "--router"]);
    let text = String::from_utf8(o.stdout)
        .unwrap()
        .replace("duration_secs = 5", "duration_secs = 1");
    let path = dir.join("router.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// The router demo running for up to a minute with a control socket; returns its directory,
/// the socket and the process (stop it with SIGINT).
fn running_with_ctl(tag: &str) -> (PathBuf, PathBuf, std::process::Child) {
    running_with_ctl_args(tag, &[])
}

/// [`running_with_ctl`] with more arguments for `freeway run`.
fn running_with_ctl_args(tag: &str, extra: &[&str]) -> (PathBuf, PathBuf, std::process::Child) {
    let (dir, cfg) = router_config(tag);
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("duration_secs = 1", "duration_secs = 60");
    std::fs::write(&cfg, text).unwrap();
    let sock = dir.join("ctl.sock");
    let child = spawn_run(&cfg, &sock, extra, std::process::Stdio::piped());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sock.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (dir, sock, child)
}

fn pcap_frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(bytes).expect("a pcap header");
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.expect("a whole pcap record").data.into_owned());
    }
    v
}

/// `freeway capture` from `source` (`--config FILE` or `--ctl SOCKET`) with `args`; it must
/// succeed.
fn capture(source: [&str; 2], args: &[&str]) -> Output {
    ok(&[&["capture"][..], &source, args].concat())
}

#[test]
fn route_prints_connected_and_static_routes_like_ip_route() {
    let (dir, cfg) = router_config("route");
    let cfg = cfg.to_str().unwrap();
    let text = String::from_utf8(ok(&["route", "--config", cfg]).stdout).unwrap();
    assert_eq!(
        text,
        "10.0.10.0/24 dev lan proto kernel scope link src 10.0.10.1\n\
         10.0.20.0/24 dev wan proto kernel scope link src 10.0.20.1\n\
         198.51.100.0/24 via 10.0.20.7 dev wan proto static\n\
         2001:db8:10::/64 dev lan proto kernel\n\
         2001:db8:20::/64 dev wan proto kernel\n"
    );
    let j: serde_json::Value = serde_json::from_slice(&ok(&["route", "--config", cfg, "-j"]).stdout).unwrap();
    let rows = j.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[2]["dst"], "198.51.100.0/24");
    assert_eq!(rows[2]["gateway"], "10.0.20.7");
    assert_eq!(rows[2]["dev"], "wan");
    assert_eq!(rows[2]["protocol"], "static");
    // The bridge demo has no router: a clear error, not an empty table.
    let demo = demo_config(&dir);
    let o = freeway(&["route", "--config", demo.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no router"));
    // Without --config the tools ask the daemon; none listens here: say so, and how to run one.
    for table in ["route", "fdb", "neigh", "conntrack"] {
        let sock = dir.join("nobody.sock");
        let o = freeway(&[table, "--ctl", sock.to_str().unwrap()]);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("nobody.sock") && err.contains("--config"),
            "{table}: {err}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn conntrack_lists_the_one_allowed_connection_and_neigh_the_static_entries() {
    let (dir, cfg) = router_config("ct");
    let cfg = cfg.to_str().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&ok(&["conntrack", "--config", cfg, "-j"]).stdout).unwrap();
    // The LAN host's UDP flow, answered by the server: one assured connection. The
    // intruder's SYNs come from a port where new connections may not start: none created.
    assert_eq!(j.as_array().map(Vec::len), Some(1), "{j}");
    let c = &j[0];
    assert_eq!(c["proto"], "udp");
    assert_eq!(c["original"]["src"], "10.0.10.5");
    assert_eq!(c["original"]["dport"], 5001);
    assert_eq!(c["reply"]["sport"], 5001);
    assert_eq!(c["assured"], true);

    let text = String::from_utf8(ok(&["conntrack", "--config", cfg]).stdout).unwrap();
    assert!(
        text.starts_with("udp      17 "),
        "conntrack -L style line expected, got {text:?}"
    );
    assert!(text.contains(
        "src=10.0.10.5 dst=10.0.20.7 sport=1024 dport=5001 src=10.0.20.7 dst=10.0.10.5 sport=5001 dport=1024 [ASSURED]"
    ));

    let text = String::from_utf8(ok(&["neigh", "--config", cfg]).stdout).unwrap();
    assert_eq!(
        text,
        "10.0.10.5 dev lan lladdr 02:00:00:00:10:05 PERMANENT\n10.0.20.7 dev wan lladdr 02:00:00:00:20:07 PERMANENT\n"
    );

    // The run's own summary counts the intruder's packets as firewall drops.
    let j: serde_json::Value = serde_json::from_slice(&ok(&["run", "--config", cfg, "-j"]).stdout).unwrap();
    let fw = &j["firewall"];
    assert!(fw["drop_new_not_allowed"].as_u64().unwrap() > 0, "{fw}");
    assert_eq!(fw["drop_invalid"], 0);
    assert!(j["router"]["l3"]["forwarded_v4"].as_u64().unwrap() > 0);
    assert!(j["router"]["route_cache_hits"].as_u64().unwrap() > 0);
    assert_eq!(j["router"]["route_uncached"], 0);
    // The baseline switch: every routed packet takes a full FIB lookup.
    let j: serde_json::Value =
        serde_json::from_slice(&ok(&["run", "--config", cfg, "-j", "--no-route-cache"]).stdout).unwrap();
    assert_eq!(j["router"]["route_cache_hits"], 0);
    assert!(j["router"]["route_uncached"].as_u64().unwrap() > 0);
    let o = freeway(&["run", "--no-route-cache"]);
    assert!(!o.status.success(), "the bridge demo has no router to switch");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn capture_writes_what_tcpdump_reads_to_a_file_and_to_stdout() {
    let (dir, cfg) = router_config("cap");
    let cfg = cfg.to_str().unwrap();
    // To a file: the routed UDP frames leaving on wan, rewritten by the router.
    let file = dir.join("wan.pcap");
    let o = capture(
        ["--config", cfg],
        &[
            "-i",
            "wan",
            "-Q",
            "out",
            "-c",
            "5",
            "-w",
            file.to_str().unwrap(),
            "udp",
            "and",
            "dst",
            "port",
            "5001",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("5 packets captured"), "{err}");
    let frames = pcap_frames(&std::fs::read(&file).unwrap());
    assert_eq!(frames.len(), 5);
    for f in &frames {
        assert_eq!(&f[0..6], &[0x02, 0, 0, 0, 0x20, 0x07], "to the server's MAC");
        assert_eq!(&f[6..12], &[0x02, 0xfe, 0, 0, 0, 0x01], "from the router MAC");
        assert_eq!(f[22], 63, "TTL decremented once");
        assert_eq!(&f[26..30], &[10, 0, 10, 5]);
    }
    // To standard output, as `freeway capture ... -w - | tcpdump -r -` uses it.
    let o = capture(
        ["--config", cfg],
        &["-i", "lan", "-c", "3", "-w", "-", "udp src port 5001"],
    );
    let frames = pcap_frames(&o.stdout);
    assert_eq!(frames.len(), 3);
    for f in &frames {
        assert_eq!(&f[26..30], &[10, 0, 20, 7], "the server's replies");
    }
    // pcapng by extension.
    let file = dir.join("lan.pcapng");
    capture(
        ["--config", cfg],
        &["-i", "lan", "-c", "2", "-w", file.to_str().unwrap()],
    );
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[0..4], &[0x0a, 0x0d, 0x0d, 0x0a], "a pcapng section header block");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn capture_dumps_programs_and_rejects_bad_requests_clearly() {
    let o = ok(&["capture", "-d", "ip"]);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "(000) ldh      [12]\n(001) jeq      #0x800           jt 2\tjf 3\n(002) ret      #262144\n(003) ret      #0\n"
    );
    let dir = std::env::temp_dir().join(format!("freeway-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let demo = demo_config(&dir);
    let demo = demo.to_str().unwrap();
    // Each bad request names what is wrong.
    for (args, says) in [
        (&["-i", "nope", "-w", "/dev/null"][..], "-i nope: no such port"),
        (&["-i", "host-a", "-w", "/dev/null", "tcp", "port", "eighty"], "filter"),
        (
            &["-i", "host-a", "-Q", "sideways", "-w", "/dev/null"],
            "in, out or inout",
        ),
    ] {
        let o = freeway(&capture_args(demo, args));
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        if says.starts_with("-i nope") {
            assert!(err.contains("host-a"), "the ports are listed: {err}");
        }
    }
    // Without --config, a capture is a tap on the daemon: none listens here.
    let sock = dir.join("nobody.sock");
    let o = freeway(&["capture", "--ctl", sock.to_str().unwrap(), "-i", "host-a"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nobody.sock"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// The built-in demo configuration (`freeway default-config`), written into `dir`.
fn demo_config(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("demo.toml");
    std::fs::write(&path, ok(&["default-config"]).stdout).unwrap();
    path
}

#[test]
fn sigterm_stops_a_run_cleanly_with_final_statistics_and_a_whole_capture_file() {
    let (dir, cfg) = router_config("term");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("duration_secs = 1", "duration_secs = 60");
    std::fs::write(&cfg, text).unwrap();
    let file = dir.join("wan.pcap");
    let child = Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args(["capture", "--config", cfg.to_str().unwrap(), "-i", "wan", "-w"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let t0 = std::time::Instant::now();
    signal(&child, "TERM");
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed().as_secs() < 10, "stopped promptly");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("packets captured"), "final report printed: {err}");
    // Every record of the file is whole: the writer drained and flushed before exiting.
    let frames = pcap_frames(&std::fs::read(&file).unwrap());
    assert!(frames.len() > 100, "{} frames", frames.len());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_control_socket_changes_routes_live_and_refuses_bad_requests() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, sock, mut child) = running_with_ctl("ctl");
    let s = sock.to_str().unwrap();
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);
    let ctl = |w: &[&str]| {
        let mut a = vec!["ctl", "-s", s];
        a.extend_from_slice(w);
        freeway(&a)
    };
    let stat = |name: &str| -> u64 {
        let o = ctl(&["-j", "stats"]);
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if name == "wan_tx" {
            return j["ports"][1]["tx_packets"].as_u64().unwrap();
        }
        let l3 = &j["router"]["l3"];
        l3[name].as_u64().or(l3["drops"][name].as_u64()).unwrap_or(0)
    };
    let pause = || std::thread::sleep(std::time::Duration::from_millis(300));

    // The LAN host's traffic to 10.0.20.7 is routed; delete the connected route and it is
    // not any more (no route: counted); put it back and it flows again.
    pause();
    assert!(stat("wan_tx") > 0);
    assert!(ctl(&["route", "del", "10.0.20.0/24"]).status.success());
    pause();
    let (n1, f1) = (stat("no_route"), stat("wan_tx"));
    pause();
    let (n2, f2) = (stat("no_route"), stat("wan_tx"));
    assert!(n2 > n1, "packets without a route are counted: {n1} -> {n2}");
    assert_eq!(f2, f1, "nothing leaves on wan while the route is gone");
    let text = String::from_utf8(ctl(&["route", "show"]).stdout).unwrap();
    assert!(!text.contains("10.0.20.0/24"), "{text}");
    let o = ctl(&["route", "get", "10.0.20.7"]);
    assert!(!o.status.success(), "no route: route get fails");
    assert!(String::from_utf8_lossy(&o.stderr).contains("unreachable"));
    assert!(ctl(&["route", "add", "10.0.20.0/24", "dev", "wan"]).status.success());
    // `ip route get`'s shape, text and JSON (-j after the words, as iproute2 allows before).
    let text = String::from_utf8(ctl(&["route", "get", "10.0.20.7"]).stdout).unwrap();
    assert_eq!(text, "10.0.20.7 dev wan\n");
    let j: serde_json::Value = serde_json::from_slice(&ctl(&["route", "get", "10.0.20.7", "-j"]).stdout).unwrap();
    assert_eq!(
        (j[0]["dst"].as_str(), j[0]["dev"].as_str()),
        (Some("10.0.20.7"), Some("wan")),
        "{j}"
    );
    pause();
    let f3 = stat("wan_tx");
    pause();
    assert!(
        stat("wan_tx") > f3,
        "forwarding to wan resumed after the route came back"
    );

    // ECMP route added and shown like `ip route`.
    assert!(ctl(&["route", "add", "10.8.0.0/16", "via", "10.0.20.7,10.0.20.8"])
        .status
        .success());
    let text = String::from_utf8(ctl(&["route", "show"]).stdout).unwrap();
    assert!(
        text.contains(
            "10.8.0.0/16 proto ctl\n\tnexthop via 10.0.20.7 dev wan weight 1\n\tnexthop via 10.0.20.8 dev wan weight 1"
        ),
        "{text}"
    );

    // Connections listed and flushed.
    let text = String::from_utf8(ctl(&["conntrack", "list"]).stdout).unwrap();
    assert!(text.contains("src=10.0.10.5 dst=10.0.20.7"), "{text}");
    let o = ctl(&["-j", "conntrack", "flush"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["deleted"].as_u64().unwrap() >= 1, "{j}");
    let j: serde_json::Value = serde_json::from_slice(&ctl(&["-j", "fdb", "show"]).stdout).unwrap();
    assert!(
        j.as_array()
            .unwrap()
            .iter()
            .any(|e| e["ifname"] == "(router)" && e["state"] == "static"),
        "{j}"
    );

    // FDB and neighbour entries added and deleted through the tables' writer threads.
    assert!(ctl(&["fdb", "add", "02:00:00:00:00:99", "dev", "lan"]).status.success());
    let text = String::from_utf8(ctl(&["fdb", "show"]).stdout).unwrap();
    assert!(text.contains("02:00:00:00:00:99 dev lan vlan 10 static"), "{text}");
    assert!(ctl(&["fdb", "del", "02:00:00:00:00:99", "vlan", "10"]).status.success());
    // bridge(8)'s words: `master static`; `del` with `dev` defaults to the port's VLAN, as `add`.
    assert!(
        ctl(&["fdb", "add", "02:00:00:00:00:97", "dev", "lan", "master", "static"])
            .status
            .success()
    );
    let text = String::from_utf8(ctl(&["fdb", "show"]).stdout).unwrap();
    assert!(text.contains("02:00:00:00:00:97 dev lan vlan 10 static"), "{text}");
    assert!(ctl(&["fdb", "del", "02:00:00:00:00:97", "dev", "lan"]).status.success());
    let text = String::from_utf8(ctl(&["fdb", "show"]).stdout).unwrap();
    assert!(!text.contains("02:00:00:00:00:97"), "{text}");
    let o = ctl(&["fdb", "del", "02:00:00:00:00:97"]);
    assert!(!o.status.success(), "fdb del without dev or vlan is refused");
    let text = String::from_utf8(ctl(&["fdb", "show"]).stdout).unwrap();
    assert!(!text.contains("02:00:00:00:00:99"), "{text}");
    let o = ctl(&["fdb", "add", "02:00:00:00:00:98", "dev", "lan", "vlan", "20"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a member of vlan 20"));
    assert!(
        ctl(&["neigh", "add", "10.0.20.9", "lladdr", "02:00:00:00:20:09", "dev", "wan"])
            .status
            .success()
    );
    let text = String::from_utf8(ctl(&["neigh", "show"]).stdout).unwrap();
    assert!(
        text.contains("10.0.20.9 dev wan lladdr 02:00:00:00:20:09 PERMANENT"),
        "{text}"
    );
    assert!(ctl(&["neigh", "del", "10.0.20.9", "dev", "wan"]).status.success());
    let text = String::from_utf8(ctl(&["neigh", "show"]).stdout).unwrap();
    assert!(!text.contains("10.0.20.9"), "{text}");

    // Bad requests: a clear error, nothing changed, the datapath goes on.
    for (words, msg) in [
        (vec!["route", "add", "1.2.3.0/40", "via", "10.0.20.7"], "prefix length"),
        (
            vec!["route", "add", "10.7.0.0/16", "via", "192.168.1.1"],
            "on no interface's subnet",
        ),
        (vec!["route", "del", "10.6.0.0/16"], "no route"),
        (vec!["bogus"], "unknown command"),
    ] {
        let o = ctl(&words);
        assert!(!o.status.success(), "{words:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(msg),
            "{words:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let r = raw(&sock, b"{\"not\": \"a request\"}\n");
    assert_eq!(r["error"]["kind"], "malformed", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("malformed request"),
        "{r}"
    );
    let mut big = vec![b'['; freeway_datapath::runtime::MAX_REQUEST + 10];
    big.push(b'\n');
    let r = raw(&sock, &big);
    assert_eq!(r["error"]["kind"], "too_long", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("longer than"), "{r}");
    let text = String::from_utf8(ctl(&["route", "show"]).stdout).unwrap();
    assert_eq!(text.lines().count(), 8, "5 routes + the ECMP route's 3 lines: {text}");

    signal(&child, "INT");
    let out = std::mem::replace(&mut child, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!sock.exists(), "the socket file is removed at exit");
    let _ = child.wait();
    std::fs::remove_dir_all(dir).unwrap();
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn prometheus_metrics_are_served_while_running() {
    use std::io::BufRead;
    let (dir, cfg) = router_config("metrics");
    let mut child = Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args([
            "run",
            "-q",
            "--config",
            cfg.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("freeway: metrics on http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = http_get(&addr, "/metrics");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("Content-Type: application/openmetrics-text"), "{r}");
    for m in [
        "freeway_port_rx_packets_total{port=\"lan\"} ",
        "freeway_worker_packets_total{worker=\"0\"} ",
        "freeway_router_forwarded_total{family=\"ipv4\"} ",
        "freeway_route_cache_lookups_total{outcome=\"hit\"} ",
        "freeway_conntrack_connections 1\n",
        "freeway_firewall_verdicts_total{verdict=\"drop_new_not_allowed\"} ",
        "freeway_drops_total{reason=\"firewall:new_not_allowed\"} ",
    ] {
        assert!(r.contains(m), "{m} missing from\n{r}");
    }
    assert!(r.trim_end().ends_with("# EOF"), "{r}");
    let v = |r: &str| -> u64 {
        let l = r
            .lines()
            .find(|l| l.starts_with("freeway_port_rx_packets_total{port=\"lan\"}"))
            .unwrap();
        l.rsplit(' ').next().unwrap().parse().unwrap()
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(v(&http_get(&addr, "/metrics")) > v(&r), "counters move between scrapes");
    assert!(http_get(&addr, "/other").starts_with("HTTP/1.1 404"));
    assert!(child.wait().unwrap().success());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn capture_attaches_to_a_running_datapath_through_the_control_socket() {
    let (dir, sock, child) = running_with_ctl("livecap");
    let s = sock.to_str().unwrap();
    // To a file, with a count: the routed requests leaving on wan.
    let file = dir.join("live.pcap");
    capture(
        ["--ctl", s],
        &["-i", "wan", "-Q", "out", "-c", "5", "-w", file.to_str().unwrap(), "udp"],
    );
    let frames = pcap_frames(&std::fs::read(&file).unwrap());
    assert_eq!(frames.len(), 5);
    assert!(frames.iter().all(|f| f[22] == 63 && f[26..30] == [10, 0, 10, 5]));
    // To standard output.
    let o = capture(["--ctl", s], &["-i", "lan", "-c", "3", "-w", "-", "udp src port 5001"]);
    let frames = pcap_frames(&o.stdout);
    assert_eq!(frames.len(), 3);
    // Refusals are clear and leave the datapath serving.
    let o = freeway(&["capture", "--ctl", s, "-i", "nope", "-w", "-"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no port named \"nope\""));
    let o = freeway(&["capture", "--ctl", s, "-i", "lan", "-w", "-", "tcp", "port", "eighty"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("filter"));
    // A client that goes away mid-capture detaches its tap; the datapath goes on.
    let mut c = Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args(["capture", "--ctl", s, "-i", "wan", "-w", "-"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    c.kill().unwrap();
    let _ = c.wait();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(ok(&["ctl", "-s", s, "stats"]).status.success());
    stop(child, dir);
}

/// Ctrl-C of `freeway capture --ctl -w FILE`, as tcpdump behaves: the file is whole, the
/// summary is printed, and the tap is gone from the datapath, also when nothing matched.
#[test]
fn ctrl_c_ends_a_live_capture_with_a_whole_file_a_summary_and_no_tap_left() {
    let (dir, sock, child) = running_with_ctl("capint");
    let s = sock.to_str().unwrap();
    for (name, filter, some) in [("busy.pcap", "udp", true), ("idle.pcap", "tcp port 9", false)] {
        let file = dir.join(name);
        let c = Command::new(env!("CARGO_BIN_EXE_freeway"))
            .args(["capture", "--ctl", s, "-i", "wan", "-w", file.to_str().unwrap(), filter])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        signal(&c, "INT");
        let o = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        let frames = pcap_frames(&std::fs::read(&file).unwrap());
        assert_eq!(frames.is_empty(), !some, "{name}: {} frames", frames.len());
        assert!(
            err.contains(&format!("{} packets captured", frames.len())),
            "{name}: the summary counts what the file holds: {err}"
        );
        assert!(
            err.contains("packets received by filter") && err.contains("packets dropped by tap"),
            "{err}"
        );
        assert!(
            !err.contains("? packets"),
            "{name}: the tap's final counters are known: {err}"
        );
        if some {
            assert!(
                !err.contains("\n0 packets received by filter"),
                "the tap saw the traffic: {err}"
            );
        }
    }
    let list = freeway_datapath::runtime::ctl_request(&sock, &["capture".to_string(), "list".to_string()]).unwrap();
    let rows = list["data"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{list}");
    assert!(
        rows.iter().all(|r| r["state"] != "running"),
        "no tap left running: {list}"
    );
    stop(child, dir);
}

#[test]
fn many_control_clients_at_once_are_all_answered() {
    let (dir, sock, child) = running_with_ctl("ctlmany");
    // Eight clients, twenty requests each, at the same time: one changes routes, the others
    // read; every request gets its answer, and the changes all land.
    let handles: Vec<_> = (0..8)
        .map(|c| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                for i in 0..20 {
                    let words: Vec<String> = if c == 0 {
                        ["route", "add", &format!("10.{}.0.0/16", 100 + i), "via", "10.0.20.7"]
                            .map(String::from)
                            .to_vec()
                    } else {
                        vec!["route".into(), "show".into()]
                    };
                    let r = freeway_datapath::runtime::ctl_request(&sock, &words).unwrap();
                    assert_eq!(r["ok"], true, "{r}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let r = freeway_datapath::runtime::ctl_request(&sock, &["route".to_string(), "show".to_string()]).unwrap();
    let text = r["text"].as_str().unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("via 10.0.20.7 dev wan proto ctl"))
            .count(),
        20,
        "{text}"
    );
    stop(child, dir);
}

#[test]
fn trace_shows_each_stage_and_changes_nothing() {
    let (dir, sock, child) = running_with_ctl("trace");
    let trace = |w: &[&str]| -> serde_json::Value {
        let mut words = vec!["trace".to_string()];
        words.extend(w.iter().map(|s| s.to_string()));
        let r = freeway_datapath::runtime::ctl_request(&sock, &words).unwrap();
        assert_eq!(r["ok"], true, "{r}");
        r
    };
    let stages = |r: &serde_json::Value| -> Vec<String> {
        r["data"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!("{}: {}", s["stage"].as_str().unwrap(), s["result"].as_str().unwrap()))
            .collect()
    };
    std::thread::sleep(std::time::Duration::from_millis(300));

    // The LAN host's flow to the WAN server: established, bridged to the router, routed by
    // the connected route, rewritten (TTL 63, the server's MAC, VLAN 20) and bridged to wan.
    let r = trace(&[
        "in_port=lan,dl_src=02:00:00:00:10:05,dl_dst=02:fe:00:00:00:01",
        "nw_src=10.0.10.5",
        "nw_dst=10.0.20.7",
        "udp",
        "tp_src=1024",
        "tp_dst=5001",
    ]);
    let s = stages(&r);
    assert_eq!(r["data"]["outputs"], serde_json::json!(["wan"]), "{s:#?}");
    assert!(s[1].starts_with("conntrack: established"), "{s:#?}");
    assert!(s[2].starts_with("firewall: accept"), "{s:#?}");
    assert!(s[3].contains("→ (router) (static)"), "{s:#?}");
    assert!(
        s[4].contains("forwarded") && s[4].contains("route 10.0.20.0/24 dev wan"),
        "{s:#?}"
    );
    assert!(
        s[5].contains("> 02:00:00:00:20:07, ") && s[5].contains("vlan 20, p 0") && s[5].contains("ttl 63"),
        "{s:#?}"
    );
    assert!(s[6].contains("→ wan (learned)"), "{s:#?}");
    let text = r["text"].as_str().unwrap();
    assert!(text.ends_with("Datapath actions: output to wan\n"), "{text}");

    // The intruder's new TCP connection: the firewall drops it.
    let r = trace(&[
        "in_port=intruder",
        "dl_src=02:00:00:00:20:66",
        "dl_dst=02:fe:00:00:00:01",
        "nw_src=10.0.20.66",
        "nw_dst=10.0.10.5",
        "tcp",
        "tp_dst=22",
    ]);
    assert_eq!(r["data"]["dropped"], "firewall:new_not_allowed", "{r}");
    assert_eq!(r["data"]["outputs"], serde_json::json!([]));

    // TTL 1 from the LAN: dropped by the router, which sends time-exceeded back to lan.
    let r = trace(&[
        "in_port=lan",
        "dl_src=02:00:00:00:10:05",
        "dl_dst=02:fe:00:00:00:01",
        "nw_src=10.0.10.5",
        "nw_dst=10.0.20.7",
        "nw_ttl=1",
        "udp",
        "tp_dst=4000",
    ]);
    let s = stages(&r);
    assert_eq!(r["data"]["dropped"], "router:ttl_expired", "{s:#?}");
    assert!(s.iter().any(|l| l.contains("ICMP time exceeded in-transit")), "{s:#?}");
    assert_eq!(r["data"]["outputs"], serde_json::json!(["lan"]), "{s:#?}");

    // An unknown host behind a new MAC on the LAN: flooded in VLAN 10 only; and nothing was
    // learned or created by any trace.
    let r = trace(&[
        "in_port=lan",
        "dl_src=02:00:00:00:10:77",
        "dl_dst=02:00:00:00:10:78",
        "udp",
    ]);
    assert_eq!(
        r["data"]["outputs"],
        serde_json::json!([]),
        "lan is VLAN 10's only port: {r}"
    );
    assert_eq!(r["data"]["dropped"], "no output");
    let fdb = freeway_datapath::runtime::ctl_request(&sock, &["fdb".into(), "show".into()]).unwrap();
    assert!(!fdb["text"].as_str().unwrap().contains("02:00:00:00:10:77"), "{fdb}");
    let ct = freeway_datapath::runtime::ctl_request(&sock, &["conntrack".into(), "list".into()]).unwrap();
    let ct = ct["text"].as_str().unwrap();
    assert!(!ct.contains("dport=4000") && !ct.contains("dport=22 "), "{ct}");

    // Bad requests: clear errors.
    for (w, e) in [
        (vec!["trace"], "in_port"),
        (vec!["trace", "in_port=nope"], "no such port"),
        (vec!["trace", "in_port=lan", "dl_vlan=5000"], "1..=4094"),
        (vec!["trace", "in_port=lan", "bogus=1"], "unknown field"),
        (vec!["trace", "in_port=lan", "hex=0102"], "14-byte"),
    ] {
        let words: Vec<String> = w.iter().map(|s| s.to_string()).collect();
        let r = freeway_datapath::runtime::ctl_request(&sock, &words).unwrap();
        assert_eq!(r["ok"], false, "{w:?}");
        assert!(r["error"].as_str().unwrap().contains(e), "{w:?}: {r}");
    }
    // A malformed frame given as bytes: the parser's verdict.
    let r = trace(&["in_port=lan", "hex=02000000100902000000100508004500002e"]);
    assert_eq!(r["data"]["dropped"], "parse:truncated_ipv4", "{r}");

    stop(child, dir);
}

/// The row of the tap `id` in a `ctl capture list` reply (it must be listed).
fn tap_row(list: &serde_json::Value, id: u64) -> serde_json::Value {
    let rows = list["data"].as_array().unwrap();
    rows.iter()
        .find(|x| x["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("tap {id} is not listed: {list}"))
}

#[test]
fn captures_are_started_listed_and_stopped_through_the_control_socket() {
    let (dir, sock, child) = running_with_ctl("ctlcap");
    let ctl = |w: &[&str]| ctl(&sock, w);
    let file = dir.join("wan.pcap");
    let f = file.to_str().unwrap();
    let r = ctl(&[
        "capture", "start", "-i", "wan", "-Q", "out", "-w", f, "udp", "and", "dst", "port", "5001",
    ]);
    assert_eq!(r["ok"], true, "{r}");
    let id = r["data"]["id"].as_u64().unwrap();
    let list = ctl(&["capture", "list"]);
    let row = tap_row(&list, id);
    assert_eq!(row["port"], "wan");
    assert_eq!(row["direction"], "out");
    assert_eq!(row["filter"], "udp and dst port 5001");
    assert_eq!(row["state"], "running");
    assert!(list["text"].as_str().unwrap().contains(f), "{list}");
    std::thread::sleep(std::time::Duration::from_millis(400));
    let r = ctl(&["capture", "stop", &id.to_string()]);
    assert_eq!(r["ok"], true, "{r}");
    let written = r["data"]["written"].as_u64().unwrap();
    assert!(written > 0, "the routed flow to the server was captured: {r}");
    // The file is complete: every record whole, each one the routed flow, TTL 63.
    let frames = pcap_frames(&std::fs::read(&file).unwrap());
    assert_eq!(frames.len() as u64, written);
    assert!(frames
        .iter()
        .all(|x| x[0..6] == [2, 0, 0, 0, 0x20, 7] && x[22] == 63 && x[36..38] == [0x13, 0x89]));
    let row = tap_row(&ctl(&["capture", "list"]), id);
    assert!(row["state"].as_str().unwrap().starts_with("stopped"), "{row}");

    // Bad requests change nothing.
    for (w, e) in [
        (vec!["capture", "start", "-i", "wan", "-w", "rel.pcap"], "absolute"),
        (vec!["capture", "start", "-i", "nope", "-w", "/tmp/x.pcap"], "no port"),
        (vec!["capture", "start", "-w", "/tmp/x.pcap"], "-i PORT"),
        (vec!["capture", "start", "-i", "wan"], "-w FILE"),
        (
            vec!["capture", "start", "-i", "wan", "-w", "/tmp/x.pcap", "port", "99999"],
            "filter",
        ),
        (
            vec!["capture", "start", "-i", "wan", "-w", "/nonexistent-dir/x.pcap"],
            "/nonexistent-dir/x.pcap",
        ),
        (vec!["capture", "stop", "12345"], "no running tap"),
        (vec!["capture", "stop", &id.to_string()], "no running tap"),
    ] {
        let r = ctl(&w);
        assert_eq!(r["ok"], false, "{w:?}: {r}");
        assert!(r["error"].as_str().unwrap().contains(e), "{w:?}: {r}");
    }
    assert_eq!(ctl(&["capture", "list"])["data"].as_array().unwrap().len(), 1);

    stop(child, dir);
}

#[test]
fn a_capture_whose_disk_is_full_stops_with_a_logged_error_while_forwarding_goes_on() {
    // /dev/full: every write fails with ENOSPC, as on a full disk.
    let (dir, sock, child) = running_with_ctl_args("devfull", &["--log-level", "info", "--log-format", "json"]);
    let ctl = |w: &[&str]| ctl(&sock, w);
    let wan_tx = || ctl(&["stats"])["data"]["ports"][1]["tx_packets"].as_u64().unwrap();
    let r = ctl(&["capture", "start", "-i", "wan", "-w", "/dev/full"]);
    assert_eq!(r["ok"], true, "{r}");
    let id = r["data"]["id"].as_u64().unwrap();
    // The writer fails at its first flush; the tap ends and says why.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let state = loop {
        let row = tap_row(&ctl(&["capture", "list"]), id);
        let st = row["state"].as_str().unwrap().to_string();
        if st != "running" || std::time::Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        state.starts_with("failed") && state.contains("No space left on device"),
        "{state}"
    );
    // Forwarding went on.
    let a = wan_tx();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(wan_tx() > a, "forwarding goes on after the tap failed");
    assert_eq!(ctl(&["route", "add", "10.77.0.0/16", "via", "10.0.20.7"])["ok"], true);
    assert_eq!(ctl(&["route", "add", "10.77.0.0/16", "via", "10.0.20.7"])["ok"], false);

    signal(&child, "TERM");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    // Structured logs: one JSON object per line, with the events that matter.
    let events: Vec<serde_json::Value> = String::from_utf8(out.stderr)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("each log line is JSON"))
        .collect();
    let find = |msg: &'static str| events.iter().filter(move |e| e["fields"]["message"] == msg);
    assert_eq!(find("datapath starting").count(), 1, "{events:#?}");
    let failed: Vec<_> = find("capture tap stopped: its output failed; forwarding goes on").collect();
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(failed[0]["level"], "ERROR");
    assert_eq!(failed[0]["fields"]["output"], "/dev/full");
    assert!(find("control request applied").any(|e| e["fields"]["request"] == "route add 10.77.0.0/16 via 10.0.20.7"));
    assert!(find("control request refused").any(|e| e["level"] == "WARN"));
    assert_eq!(find("stop requested: draining and shutting down").count(), 1);
    assert_eq!(find("datapath stopped").count(), 1);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn capture_without_w_prints_one_tcpdump_style_line_per_packet() {
    let (dir, cfg) = router_config("text");
    let o = ok(&capture_args(
        cfg.to_str().unwrap(),
        &["-i", "wan", "-Q", "out", "-c", "3", "udp"],
    ));
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for l in lines {
        // 11:23:17.355379 IP 10.0.10.5.1024 > 10.0.20.7.5001: UDP, length 18
        let (ts, rest) = l.split_once(' ').unwrap();
        assert_eq!(ts.len(), 15, "{l}");
        assert!(ts.as_bytes()[2] == b':' && ts.as_bytes()[8] == b'.', "{l}");
        assert_eq!(rest, "IP 10.0.10.5.1024 > 10.0.20.7.5001: UDP, length 18");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_duration_flag_takes_one_syntax_and_refuses_unrepresentable_durations_clearly() {
    let flags: [&[&str]; 7] = [
        &["run", "-q", "-d"],
        &["run", "-q", "--duration"],
        &["fdb", "-d"],
        &["neigh", "-d"],
        &["conntrack", "--duration"],
        &["capture", "-i", "host-a", "-w", "/dev/null", "--duration"],
        &["stress", "churn", "-d"],
    ];
    for flag in flags {
        for (v, want) in [
            ("inf", "not a finite duration"),
            ("1e300", "too long (max 1 year"),
            ("1.85e19", "too long"),
            ("9000h", "too long"),
            ("0", "must be positive"),
            ("NaN", "not a finite duration"),
            ("soon", "not a duration"),
        ] {
            let args: Vec<&str> = flag.iter().copied().chain([v]).collect();
            let o = freeway(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "freeway {args:?}: {err}");
            assert!(err.contains(want) && err.contains(v), "freeway {args:?}: {err}");
        }
    }
    for flag in [
        &["bench", "refcount", "--seconds"][..],
        &["bench", "bridge", "--seconds"],
    ] {
        let args: Vec<&str> = flag.iter().copied().chain(["inf"]).collect();
        let o = freeway(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "freeway {args:?}: {err}");
        assert!(err.contains("not a finite duration"), "freeway {args:?}: {err}");
    }
    // Units and plain seconds both run.
    let (dir, cfg) = router_config("durations");
    for d in ["300ms", "0.3", "0.005m"] {
        ok(&["run", "-q", "--config", cfg.to_str().unwrap(), "-d", d]);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn capture_on_any_port_sees_every_port() {
    let dir = std::env::temp_dir().join(format!("freeway-cli-any-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let demo = demo_config(&dir);
    // Frames received from host-b and from host-c: two ports, one tap on `any`.
    for src in ["02:00:00:00:00:0b", "02:00:00:00:00:0c"] {
        let args = ["-i", "any", "-Q", "in", "-c", "5", "-w", "-", "ether", "src", src];
        let o = ok(&capture_args(demo.to_str().unwrap(), &args));
        let frames = pcap_frames(&o.stdout);
        assert_eq!(frames.len(), 5, "{src}");
        assert!(frames.iter().all(|f| f[6..12] == common::mac_bytes(src)), "{src}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reload_applies_the_changed_tables_live_and_a_bad_file_changes_nothing() {
    let (dir, sock, child) = running_with_ctl("reload");
    let cfg = dir.join("router.toml");
    let s = sock.to_str().unwrap();
    let ctl = |w: &[&str]| {
        let mut a = vec!["ctl", "-s", s];
        a.extend_from_slice(w);
        freeway(&a)
    };
    let original = std::fs::read_to_string(&cfg).unwrap();
    let added = format!(
        "{}\n[[route]]\ndst = \"203.0.113.0/24\"\nvia = \"10.0.20.7\"\n\n[[neigh]]\nip = \"10.0.20.9\"\nmac = \"02:00:00:00:20:09\"\ndev = \"wan\"\n",
        original.replace("workers = 2", "workers = 1")
    );
    std::fs::write(&cfg, &added).unwrap();
    // --check says what would change and what waits for a restart, and changes nothing.
    let text = String::from_utf8(ctl(&["reload", "--check"]).stdout).unwrap();
    assert_contains_all(
        &text,
        &[
            "would apply: route replace 203.0.113.0/24 via 10.0.20.7",
            "would apply: neigh add 10.0.20.9 lladdr 02:00:00:00:20:09 dev wan",
            "waits for a restart: workers",
        ],
    );
    let routes = String::from_utf8(ctl(&["route", "show"]).stdout).unwrap();
    assert!(!routes.contains("203.0.113.0/24"), "{routes}");
    // reload applies it while forwarding goes on.
    let j: serde_json::Value = serde_json::from_slice(&ctl(&["-j", "reload"]).stdout).unwrap();
    assert_eq!(j["changes"].as_array().unwrap().len(), 2, "{j}");
    assert!(j["changes"].as_array().unwrap().iter().all(|c| c["ok"] == true), "{j}");
    let routes = String::from_utf8(ctl(&["route", "show"]).stdout).unwrap();
    assert!(routes.contains("203.0.113.0/24 via 10.0.20.7 dev wan"), "{routes}");
    let neigh = String::from_utf8(ctl(&["neigh", "show"]).stdout).unwrap();
    assert!(neigh.contains("10.0.20.9"), "{neigh}");
    // A file with an error changes nothing, and says where the error is.
    std::fs::write(
        &cfg,
        format!("{original}\n[[route]]\ndst = \"203.0.113.0/33\"\nvia = \"10.0.20.7\"\n"),
    )
    .unwrap();
    let o = ctl(&["reload"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("router.toml:") && err.contains("nothing changed"), "{err}");
    let routes = String::from_utf8(ctl(&["route", "show"]).stdout).unwrap();
    assert!(routes.contains("203.0.113.0/24"), "{routes}");
    // SIGHUP applies the file as reload does: back to the original, the route goes.
    std::fs::write(&cfg, &original).unwrap();
    signal(&child, "HUP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut routes = String::new();
    while std::time::Instant::now() < deadline {
        routes = String::from_utf8(ctl(&["route", "show"]).stdout).unwrap();
        if !routes.contains("203.0.113.0/24") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!routes.contains("203.0.113.0/24"), "SIGHUP removed the route: {routes}");
    let neigh = String::from_utf8(ctl(&["neigh", "show"]).stdout).unwrap();
    assert!(!neigh.contains("10.0.20.9"), "{neigh}");
    stop(child, dir);
}
