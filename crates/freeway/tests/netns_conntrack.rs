//! conntrack-tools' and iproute2's conventions on a live Freeway: `freeway conntrack -L` with
//! conntrack(8)'s selectors, `-E` events, and golden comparisons with a kernel router's
//! `conntrack -L` and with `ip -s link` for the same flows and ports.
//!
//! Needs root (namespaces); the golden tests also need `conntrack` (conntrack-tools) and
//! `nft` for the kernel router. Each skips loudly without them (a failure under CI).

#[macro_use]
mod netbed;
use netbed::*;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The client's fixed source ports, so that both routers see the same tuples.
const TCP_SPORT: u16 = 40001;
const UDP_SPORT: u16 = 40002;
const TCP_PORT: u16 = 5002;
const UDP_PORT: u16 = 5353;

/// Runs `freeway ARGS` and returns its output.
fn freeway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args(args)
        .output()
        .expect("freeway runs")
}

/// `freeway conntrack -L -S SOCK EXTRA...`: its lines, which must come with conntrack's
/// closing line counting them.
fn listed(bed: &Bed, extra: &[&str]) -> Vec<String> {
    let sock = bed.sock();
    let mut args = vec!["conntrack", "-L", "-S", sock.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = freeway(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "conntrack -L {extra:?}: {err}");
    let lines: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().map(String::from).collect();
    let summary = format!(
        "freeway v{} (freeway conntrack): {} flow entries have been shown.",
        env!("CARGO_PKG_VERSION"),
        lines.len()
    );
    assert_eq!(err.trim_end(), summary, "conntrack -L {extra:?}");
    lines
}

/// A line with its timeout (the third field) masked: two listings differ only there.
fn masked(line: &str) -> String {
    let mut f: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
    if f.len() > 2 {
        f[2] = "T";
    }
    f.join(" ")
}

fn masked_all(lines: &[String]) -> Vec<String> {
    let mut v: Vec<String> = lines.iter().map(|l| masked(l)).collect();
    v.sort();
    v
}

/// The value of `key=` in the first (original) tuple of a conntrack line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// The value of `key=` in the second (reply) tuple.
fn reply_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .filter_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .nth(1)
}

/// Starts python3 running `code` in host `h`'s namespace.
fn python_in(bed: &Bed, h: &str, code: &str) -> Child {
    Command::new("ip")
        .args(["netns", "exec", &format!("fw-{h}{}", bed.suffix), "python3", "-c", code])
        .spawn()
        .expect("python3 runs")
}

/// One UDP datagram from `from` (source port `sport`) to `to`:`dport`; with `answer`, a
/// server there answers it and the client waits for the answer (retrying until then).
fn udp(bed: &Bed, from: &str, to: &str, sport: u16, dport: u16, answer: bool) {
    let dst = if to == "h2" { "10.2.0.2" } else { "10.1.0.2" };
    let srv = answer.then(|| {
        let code = format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',{dport}))\n\
             s.settimeout(10)\nd,a=s.recvfrom(100)\ns.sendto(b're '+d,a)\n"
        );
        python_in(bed, to, &code)
    });
    let wait = if answer {
        "s.settimeout(0.3)\nfor i in range(30):\n    s.sendto(b'hi',('DST',DPORT))\n    try:\n        s.recvfrom(100); break\n    except socket.timeout: pass\nelse: raise SystemExit(1)\n"
    } else {
        "s.sendto(b'hi',('DST',DPORT))\n"
    };
    let code = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',{sport}))\n{}",
        wait.replace("DST", dst).replace("DPORT", &dport.to_string())
    );
    let o = bed.exec(from, &["python3", "-c", &code]);
    assert!(
        o.status.success(),
        "UDP {from} -> {to}:{dport}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    if let Some(mut s) = srv {
        let _ = s.wait();
    }
}

/// A TCP connection from `from` (source port `sport`) to a server on `to`:`dport` that
/// takes a few bytes; both sides close.
fn tcp(bed: &Bed, from: &str, to: &str, sport: u16, dport: u16) {
    let dst = if to == "h2" { "10.2.0.2" } else { "10.1.0.2" };
    let server = format!(
        "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('0.0.0.0',{dport}))\ns.listen(1)\ns.settimeout(10)\nc,_=s.accept()\nc.recv(100)\nc.close()\n"
    );
    let mut srv = python_in(bed, to, &server);
    let client = format!(
        "import socket,time\nfor i in range(50):\n    try:\n        \
         s=socket.create_connection(('{dst}',{dport}),timeout=3,source_address=('0.0.0.0',{sport})); break\n    \
         except ConnectionRefusedError: time.sleep(0.1)\ns.sendall(b'hello')\ns.recv(10)\ns.close()\n"
    );
    let o = bed.exec(from, &["python3", "-c", &client]);
    assert!(
        o.status.success(),
        "TCP {from} -> {to}:{dport}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = srv.wait();
}

/// The routed bed: h1 (10.1.0.2, VLAN 10) and h2 (10.2.0.2, VLAN 20), Freeway routing with
/// a stateful firewall (new connections from h1 only) and a control socket.
fn routed_bed(tag: &str) -> Bed {
    let mut bed = Bed::two_subnets(tag);
    let mut cfg = routed_ports();
    cfg.push_str("\n[conntrack]\nmax = 10000\n\n[firewall]\nallow_new_from = [\"h1\"]\n");
    bed.start_ctl(&cfg);
    assert!(bed.ping("h1", "10.2.0.2"), "h1 pings h2 across the router");
    bed
}

/// `freeway conntrack -E` running, its lines gathered as they come.
struct Events {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Events {
    fn start(bed: &Bed, extra: &[&str]) -> Events {
        let mut child = Command::new(env!("CARGO_BIN_EXE_freeway"))
            .args(["conntrack", "-E", "-S", bed.sock().to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("freeway conntrack -E starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, l) = (child.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Events { child, lines }
    }

    /// Waits (10 s at most) for a line `want` accepts; returns it.
    fn wait_for(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| want(l)) {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {what} event; got:\n{}",
                self.lines.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ctrl-C: it must end cleanly with conntrack's closing line.
    fn stop(self) -> String {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let o = self.child.wait_with_output().expect("freeway conntrack -E exits");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "conntrack -E: {err}");
        assert!(err.contains("flow events have been shown."), "{err}");
        err
    }
}

/// Waits until the event stream is live: probe datagrams (each from a new source port) until
/// one shows up as NEW.
fn events_live(bed: &Bed, ev: &Events) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for sport in 41000.. {
        udp(bed, "h1", "h2", sport, 9, false);
        let tag = format!("sport={sport} dport=9 ");
        if ev.lines.lock().unwrap().iter().any(|l| l.contains(&tag)) {
            return;
        }
        assert!(Instant::now() < deadline, "conntrack -E shows no probe");
        std::thread::sleep(Duration::from_millis(200));
        if ev.lines.lock().unwrap().iter().any(|l| l.contains(&tag)) {
            return;
        }
    }
}

#[test]
fn conntrack_selectors_narrow_the_list_and_events_show_new_and_destroy() {
    need_root!();
    let bed = routed_bed("ct");
    let ev = Events::start(&bed, &[]);
    let evj = Events::start(&bed, &["-p", "tcp", "-j"]);
    events_live(&bed, &ev);
    tcp(&bed, "h1", "h2", TCP_SPORT, TCP_PORT);
    udp(&bed, "h1", "h2", UDP_SPORT, UDP_PORT, true);

    let all = listed(&bed, &[]);
    let has = |l: &String, w: &str| l.contains(w);
    let tcp_line = all
        .iter()
        .find(|l| l.starts_with("tcp ") && has(l, &format!("dport={TCP_PORT} ")))
        .unwrap_or_else(|| panic!("the TCP flow is listed: {all:#?}"))
        .clone();
    assert!(
        all.iter()
            .any(|l| l.starts_with("udp ") && has(l, &format!("dport={UDP_PORT} "))),
        "{all:#?}"
    );
    assert!(all.iter().any(|l| l.starts_with("icmp ")), "the pings' flow: {all:#?}");
    let state = tcp_line.split_whitespace().nth(3).unwrap().to_string();
    let other = if state == "ESTABLISHED" {
        "SYN_SENT"
    } else {
        "ESTABLISHED"
    };

    // Each selector: exactly the lines of the full list that it describes.
    let sport = TCP_SPORT.to_string();
    let tcp_port = TCP_PORT.to_string();
    type Pick = Box<dyn Fn(&String) -> bool>;
    // The lines whose original (or reply) tuple has `key=value`, or whose protocol or TCP state
    // is this.
    let orig = |k: &'static str, v: String| -> Pick { Box::new(move |l| field(l, k) == Some(v.as_str())) };
    let reply = |k: &'static str, v: String| -> Pick { Box::new(move |l| reply_field(l, k) == Some(v.as_str())) };
    let proto = |p: &'static str| -> Pick { Box::new(move |l| l.split(' ').next() == Some(p)) };
    let in_state = |s: String| -> Pick {
        Box::new(move |l| l.starts_with("tcp ") && l.split_whitespace().nth(3) == Some(s.as_str()))
    };
    let (h1, h2) = ("10.1.0.2".to_string(), "10.2.0.2".to_string());
    // (selectors, the lines they describe, whether some must be here)
    let cases: Vec<(Vec<&str>, Pick, bool)> = vec![
        (vec!["-p", "tcp"], proto("tcp"), true),
        (vec!["-p", "udp"], proto("udp"), true),
        (vec!["-p", "icmp"], proto("icmp"), true),
        (vec!["-s", "10.1.0.2"], orig("src", h1.clone()), true),
        (vec!["--orig-dst", "10.2.0.2"], orig("dst", h2.clone()), true),
        (vec!["-d", "10.1.0.2"], orig("dst", h1.clone()), false),
        (vec!["-r", "10.2.0.2"], reply("src", h2), true),
        (vec!["-q", "10.1.0.2"], reply("dst", h1), true),
        (vec!["--sport", &sport], orig("sport", sport.clone()), true),
        (vec!["--dport", &tcp_port], orig("dport", tcp_port.clone()), true),
        (
            vec!["--reply-port-src", &tcp_port],
            reply("sport", tcp_port.clone()),
            true,
        ),
        (vec!["-w", "0"], Box::new(|_| true), true),
        (vec!["--zone", "7"], Box::new(|_| false), false),
        (vec!["-p", "tcp", "--state", &state], in_state(state.clone()), true),
        (vec!["--state", other], in_state(other.to_string()), false),
        (vec!["-p", "udp", "--dport", &tcp_port], Box::new(|_| false), false),
    ];
    for (args, pick, some) in cases {
        // The full list again, taken right after: both are compared on this test's
        // connections (the probes are left out), timeouts masked.
        let got = listed(&bed, &args);
        let ours = |l: &String| !has(l, "dport=9 ");
        let want: Vec<String> = listed(&bed, &[]).into_iter().filter(|l| ours(l) && pick(l)).collect();
        let got: Vec<String> = got.into_iter().filter(|l| ours(l)).collect();
        assert_eq!(masked_all(&got), masked_all(&want), "conntrack -L {args:?}");
        assert!(!some || !got.is_empty(), "conntrack -L {args:?} selects something here");
    }

    // -j: conntrack -o xml's structure as JSON.
    let sock = bed.sock();
    let o = freeway(&[
        "conntrack",
        "-L",
        "-j",
        "-S",
        sock.to_str().unwrap(),
        "--dport",
        &tcp_port,
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &j[0];
    assert_eq!(f["original"]["src"], "10.1.0.2", "{j}");
    assert_eq!(f["original"]["sport"], TCP_SPORT, "{j}");
    assert_eq!(f["reply"]["src"], "10.2.0.2", "{j}");
    assert_eq!(f["reply"]["dport"], TCP_SPORT, "{j}");
    assert_eq!(
        (f["proto"].as_str(), f["protonum"].as_u64()),
        (Some("tcp"), Some(6)),
        "{j}"
    );
    assert_eq!(f["state"], state.as_str(), "{j}");
    for k in ["timeout", "mark", "zone", "use", "id", "assured", "unreplied"] {
        assert!(f.get(k).is_some(), "{k} in {j}");
    }
    // Bad selectors: clear errors, before anything is asked.
    let o = freeway(&["conntrack", "-L", "-S", sock.to_str().unwrap(), "--state", "OPEN"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unknown TCP state"));

    // Events: NEW for both flows; flushing the table destroys them.
    let tcp_tag = format!("sport={TCP_SPORT} dport={TCP_PORT} ");
    let udp_tag = format!("sport={UDP_SPORT} dport={UDP_PORT} ");
    let new_tcp = ev.wait_for("NEW tcp", |l| {
        l.starts_with("    [NEW] tcp      6 ") && l.contains(&tcp_tag)
    });
    assert!(new_tcp.contains("src=10.1.0.2 dst=10.2.0.2 "), "{new_tcp}");
    ev.wait_for("NEW udp", |l| {
        l.starts_with("    [NEW] udp      17 ") && l.contains(&udp_tag)
    });
    bed.ctl(&["conntrack", "flush"]);
    let gone = ev.wait_for("DESTROY tcp", |l| {
        l.starts_with("[DESTROY] tcp      6 src=") && l.contains(&tcp_tag)
    });
    assert!(
        gone.contains(&format!("src=10.2.0.2 dst=10.1.0.2 sport={TCP_PORT} dport={TCP_SPORT}")),
        "{gone}"
    );
    ev.wait_for("DESTROY udp", |l| {
        l.starts_with("[DESTROY] udp") && l.contains(&udp_tag)
    });
    // -p tcp -j: one JSON object per event, TCP only.
    let j = evj.wait_for("JSON DESTROY", |l| l.contains("\"DESTROY\""));
    let j: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(
        (j["type"].as_str(), j["proto"].as_str()),
        (Some("DESTROY"), Some("tcp")),
        "{j}"
    );
    assert!(evj
        .lines
        .lock()
        .unwrap()
        .iter()
        .all(|l| l.contains("\"proto\":\"tcp\"")));
    ev.stop();
    evj.stop();
}

/// Whether `tool` is installed.
fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The kernel router's namespace, removed on drop (also on failure).
struct KernelRouter(String);

impl Drop for KernelRouter {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The same two hosts behind a kernel router with nf_conntrack: namespace `fw-kr{suffix}`
/// between h1 and h2 (the bed's switch namespace is left alone); a forward chain with `ct
/// state` makes the kernel track the flows.
fn kernel_router(bed: &Bed) -> KernelRouter {
    let r = format!("fw-kr{}", bed.suffix);
    let guard = KernelRouter(r.clone());
    let s = &bed.suffix;
    let sh = |c: &str| {
        let o = Command::new("sh").args(["-c", c]).output().unwrap();
        assert!(o.status.success(), "{c}: {}", String::from_utf8_lossy(&o.stderr));
    };
    sh(&format!("ip netns add {r}"));
    for (h, net) in [("h1", 1), ("h2", 2)] {
        // Each host gets a second interface, eth1, on the kernel router's side, with the same
        // address (its eth0 goes down), so the flows carry the same addresses both ways.
        sh(&format!(
            "ip link add kr{h}{s} netns {r} type veth peer name eth1 netns fw-{h}{s} && \
             ip -n {r} addr add 10.{net}.0.1/24 dev kr{h}{s} && ip -n {r} link set kr{h}{s} up && \
             ip -n fw-{h}{s} link set eth0 down && ip -n fw-{h}{s} addr add 10.{net}.0.2/24 dev eth1 && \
             ip -n fw-{h}{s} link set eth1 up && ip -n fw-{h}{s} route replace default via 10.{net}.0.1 dev eth1"
        ));
    }
    sh(&format!(
        "ip netns exec {r} sysctl -qw net.ipv4.ip_forward=1 && \
         printf 'table inet kr {{ chain forward {{ type filter hook forward priority 0; ct state established,related accept; accept; }}; }}\\n' | ip netns exec {r} nft -f -"
    ));
    guard
}

/// Undoes [`kernel_router`]: h1 and h2 back on eth0 (Freeway's side).
fn kernel_router_down(bed: &Bed, r: KernelRouter) {
    let s = &bed.suffix;
    drop(r);
    for (h, net) in [("h1", 1), ("h2", 2)] {
        let _ = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "ip -n fw-{h}{s} link set eth0 up && ip -n fw-{h}{s} route replace default via 10.{net}.0.1 dev eth0"
                ),
            ])
            .status();
    }
}

/// A conntrack line for comparison: timeout masked, the ICMP echo id masked (each ping
/// picks its own).
fn golden_mask(line: &str) -> String {
    masked(line)
        .split(' ')
        .map(|w| if w.starts_with("id=") { "id=ID" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

/// This test's flows in a listing, masked, sorted.
fn our_flows(lines: &str) -> Vec<String> {
    let mut v: Vec<String> = lines
        .lines()
        .filter(|l| {
            l.contains(&format!("sport={TCP_SPORT} dport={TCP_PORT} "))
                || l.contains(&format!("sport={UDP_SPORT} dport={UDP_PORT} "))
                || (l.starts_with("icmp ") && l.contains("src=10.1.0.2 dst=10.2.0.2 "))
        })
        .map(golden_mask)
        .collect();
    v.sort();
    v
}

#[test]
fn conntrack_l_lines_match_the_kernels_for_the_same_flows() {
    need_root!();
    if !have("conntrack") || !have("nft") {
        freeway_testkit::skip("conntrack (conntrack-tools) and nft are needed for the kernel's side");
        return;
    }
    let bed = routed_bed("ctg");
    // The same flows through each router: a TCP connection opened and closed, an unanswered
    // UDP datagram, pings answered.
    let flows = |bed: &Bed| {
        tcp(bed, "h1", "h2", TCP_SPORT, TCP_PORT);
        udp(bed, "h1", "h2", UDP_SPORT, UDP_PORT, false);
        assert!(bed
            .exec("h1", &["ping", "-c", "1", "-W", "2", "10.2.0.2"])
            .status
            .success());
    };
    bed.ctl(&["conntrack", "flush"]);
    flows(&bed);
    let sock = bed.sock();
    let ours = freeway(&["conntrack", "-L", "-S", sock.to_str().unwrap()]);
    let ours = our_flows(&String::from_utf8_lossy(&ours.stdout));

    let r = kernel_router(&bed);
    flows(&bed);
    let k = Command::new("ip")
        .args(["netns", "exec", &r.0, "conntrack", "-L"])
        .output()
        .unwrap();
    kernel_router_down(&bed, r);
    let kernel = our_flows(&String::from_utf8_lossy(&k.stdout));
    assert_eq!(
        kernel.len(),
        3,
        "the kernel tracked the three flows: {}",
        String::from_utf8_lossy(&k.stdout)
    );
    assert_eq!(ours, kernel, "freeway conntrack -L and the kernel's conntrack -L");
    // The closing line: conntrack's shape in Freeway's words.
    let k_err = String::from_utf8_lossy(&k.stderr);
    assert!(
        k_err.contains("(conntrack-tools): ") && k_err.contains(" flow entries have been shown."),
        "{k_err}"
    );
}

/// The positions where the fields of a line end (numbers masked: only the layout counts).
fn field_ends(line: &str) -> Vec<usize> {
    let b = line.as_bytes();
    (0..b.len())
        .filter(|&i| b[i] != b' ' && (i + 1 == b.len() || b[i + 1] == b' '))
        .collect()
}

#[test]
fn link_show_s_lays_out_counters_as_ip_s_link() {
    need_root!();
    let bed = routed_bed("lk");
    let sock = bed.sock();
    let ours = freeway(&["link", "show", "-s", "dev", "h1", "-S", sock.to_str().unwrap()]);
    assert!(ours.status.success(), "{}", String::from_utf8_lossy(&ours.stderr));
    let ours = String::from_utf8(ours.stdout).unwrap();
    let ip = bed.exec("sw", &["ip", "-s", "link", "show", "dev", "h1"]);
    let ip = String::from_utf8(ip.stdout).unwrap();
    // The counters' four lines (after the link's own lines): the same headers, and the
    // numbers ending in the same columns (both counts are small, so the widths are ip's
    // defaults).
    let tail = |s: &str| -> Vec<String> {
        let l: Vec<String> = s.lines().map(String::from).collect();
        l[l.len() - 4..].to_vec()
    };
    let (o, k) = (tail(&ours), tail(&ip));
    assert!(ours.starts_with("1: h1: mtu 1500 "), "{ours}");
    assert_eq!((&o[0], &o[2]), (&k[0], &k[2]), "headers:\n{ours}\n{ip}");
    for i in [1, 3] {
        assert_eq!(field_ends(&o[i]), field_ends(&k[i]), "numbers:\n{ours}\n{ip}");
    }
    let rx: u64 = o[1].split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(rx > 0, "h1's pings were counted: {ours}");

    // -j: ip -j -s link's keys.
    let ours = freeway(&["link", "-s", "-j", "show", "h1", "-S", sock.to_str().unwrap()]);
    let ours: serde_json::Value = serde_json::from_slice(&ours.stdout).unwrap();
    let ip = bed.exec("sw", &["ip", "-j", "-s", "link", "show", "dev", "h1"]);
    let ip: serde_json::Value = serde_json::from_slice(&ip.stdout).unwrap();
    let keys = |v: &serde_json::Value, d: &str| -> Vec<String> {
        let mut k: Vec<String> = v[0]["stats64"][d].as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    for d in ["rx", "tx"] {
        assert_eq!(keys(&ours, d), keys(&ip, d), "stats64.{d}: {ours} vs {ip}");
    }
    assert_eq!(ours[0]["ifname"], "h1");
    // No such device: ip's words.
    let o = freeway(&["link", "show", "dev", "nope", "-S", sock.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("Device \"nope\" does not exist."));
}
