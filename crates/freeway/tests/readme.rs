//! The README's "Using it" examples, run as written against the demo they name.
//!
//! The test reads the block from README.md and holds a table with one row per command in it:
//! run as written, run in its concrete forms (a line with `[-j]`, `PORT` or `a | b` choices),
//! or not run, with the reason (benchmarks that take minutes, the reader's own `my.toml`, a
//! terminal UI). A command added to or changed in the README without its row here fails the
//! test, and so does a row whose command left the README: README and test cannot drift.
//!
//! The commands run with `sh -c` in a scratch directory, `freeway` being the binary under
//! test. The daemon's line (`freeway run --config r.toml ... --ctl /run/freeway.sock &`)
//! starts the daemon the clients ask; each client is pointed at its socket (`--ctl SOCK`,
//! `ctl -s SOCK`) in place of the default /run/freeway.sock, which a test cannot own. Every
//! command must exit with success (a pipeline: its last command).
//!
//! Needs no root: the demos run on generator ports. `tcpdump` reads one example's output
//! (a loud skip without it, a failure under CI).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the test does with one README command.
enum How {
    /// Runs it as written.
    Run,
    /// Runs these concrete forms of it.
    As(&'static [&'static str]),
    /// Starts the daemon the other commands talk to.
    Daemon,
    /// Does not run it, for this reason.
    Skip(&'static str),
}

use How::*;

const BENCH: &str = "a benchmark: minutes of work, run by hand (BENCHMARKS.md)";
const MY: &str = "my.toml is the reader's own configuration";

/// Every command of the block, in its order, and how the test treats it.
const USING_IT: &[(&str, How)] = &[
    ("freeway run", Run),
    ("freeway run --config my.toml -d 10 -w 2", Skip(MY)),
    ("freeway run -j", Run),
    ("freeway check my.toml", Skip(MY)),
    ("freeway default-config --router > r.toml", Run),
    ("freeway run --config r.toml -d 3600 --ctl /run/freeway.sock &", Daemon),
    ("freeway fdb [-j]", As(&["freeway fdb", "freeway fdb -j"])),
    ("freeway route [-j]", As(&["freeway route", "freeway route -j"])),
    ("freeway neigh [-j]", As(&["freeway neigh", "freeway neigh -j"])),
    ("freeway conntrack [-j]", As(&["freeway conntrack", "freeway conntrack -j"])),
    ("freeway conntrack -L -p tcp --state ESTABLISHED -s 10.0.10.5", Run),
    (
        "freeway conntrack -E [-p udp] [-j]",
        Skip("streams events until Ctrl-C: tests/netns_conntrack.rs runs it"),
    ),
    (
        "freeway link show -s [dev wan] [-j]",
        As(&["freeway link show -s", "freeway link show -s dev wan -j"]),
    ),
    ("freeway stats [-j]", As(&["freeway stats", "freeway stats -j"])),
    (
        "freeway top",
        Skip("a full-screen view until q: tests/top.rs runs it in a terminal"),
    ),
    // Needs wan.pcap, which a later line writes: run in the order of `ORDER`.
    ("freeway capture -i wan -c 100 -w - udp | tcpdump -nr -", Run),
    ("freeway capture -n -e -i lan -c 5 'udp or icmp'", Run),
    ("freeway capture -D", Run),
    ("freeway capture -r wan.pcap -c 5 'udp port 5001'", Run),
    ("freeway capture -d 'tcp[tcpflags] & tcp-syn != 0'", Run),
    ("freeway fdb --config my.toml", Skip(MY)),
    (
        "freeway conntrack --config r.toml; freeway neigh --config r.toml; freeway route --config r.toml",
        Run,
    ),
    (
        "freeway capture --config r.toml -i wan -Q out -c 100 -w wan.pcap udp port 5001",
        Run,
    ),
    ("freeway ctl route add 10.9.0.0/24 via 10.0.20.7", Run),
    (
        "freeway ctl route replace 10.9.0.0/24 nexthop via 10.0.10.254 dev lan nexthop via 10.0.20.253 dev wan",
        Run,
    ),
    ("freeway ctl route del 10.9.0.0/24", Run),
    (
        "freeway ctl fdb add 02:00:00:00:00:99 dev lan [vlan 10]; freeway ctl fdb del 02:00:00:00:00:99 vlan 10",
        As(&[
            "freeway ctl fdb add 02:00:00:00:00:99 dev lan; freeway ctl fdb del 02:00:00:00:00:99 vlan 10",
            "freeway ctl fdb add 02:00:00:00:00:99 dev lan vlan 10; freeway ctl fdb del 02:00:00:00:00:99 vlan 10",
        ]),
    ),
    (
        "freeway ctl neigh add 10.0.20.9 lladdr 02:00:00:00:20:09 dev wan; freeway ctl neigh del 10.0.20.9 dev wan",
        Run,
    ),
    (
        "freeway ctl [-j] stats | fdb show | route show | neigh show | conntrack list | conntrack flush",
        As(&[
            "freeway ctl stats",
            "freeway ctl -j stats",
            "freeway ctl fdb show",
            "freeway ctl -j fdb show",
            "freeway ctl route show",
            "freeway ctl -j route show",
            "freeway ctl neigh show",
            "freeway ctl -j neigh show",
            "freeway ctl conntrack list",
            "freeway ctl -j conntrack list",
            "freeway ctl conntrack flush",
            "freeway ctl -j conntrack flush",
        ]),
    ),
    (
        "freeway ctl reload [--check] [FILE]",
        As(&[
            "freeway ctl reload",
            "freeway ctl reload --check",
            "freeway ctl reload r.toml",
            "freeway ctl reload --check r.toml",
        ]),
    ),
    ("freeway ctl route get 198.51.100.5", Run),
    ("freeway ctl help", Run),
    ("freeway ctl clients", Run),
    (
        "freeway ctl firewall list; freeway ctl firewall load rules.nft; freeway ctl set add admins 10.1.0.3",
        Skip("runs against the daemon with the README's ruleset: see `the_firewall_examples_run`"),
    ),
    (
        "freeway ctl link show; freeway ctl link set dev PORT up",
        As(&["freeway ctl link show; freeway ctl link set dev wan up"]),
    ),
    (
        "freeway ctl link set dev NAME mtu 1400",
        As(&["freeway ctl link set dev wan mtu 1400", "freeway ctl link set dev intruder mtu 1400"]),
    ),
    ("freeway ctl mdb show", Run),
    (
        "freeway ctl capture start -i wan -Q out -w /var/tmp/wan.pcap udp port 5001",
        Run,
    ),
    // ID: the one `capture start` printed.
    ("freeway ctl capture list; freeway ctl capture stop ID", Run),
    (
        "freeway ctl trace in_port=lan dl_src=02:00:00:00:10:05 dl_dst=02:fe:00:00:00:01 nw_dst=10.0.20.7 tcp tp_dst=22",
        Run,
    ),
    (
        "freeway --log-level info --log-format json run ...",
        As(&["freeway --log-level info --log-format json run -d 1"]),
    ),
    (
        "freeway run --config r.toml --metrics 127.0.0.1:9477",
        Skip("listens on a fixed TCP port; cli.rs's metrics test serves the same on a free one"),
    ),
    (
        "freeway bench bridge --workers 1,2 --layout padded,naive --runs 5 --json out.json",
        Skip(BENCH),
    ),
    ("freeway bench refcount --threads 1,2", Skip(BENCH)),
    ("freeway bench route", Skip(BENCH)),
    ("freeway bench conntrack 1,2 3000000 32 --compare", Skip(BENCH)),
    ("freeway bench capture --topology bridge,router", Skip(BENCH)),
    ("freeway bench firewall --rules 10,100,1000,10000", Skip(BENCH)),
    ("freeway bench nat --workers 1,2", Skip(BENCH)),
    ("scripts/e2e-bench.sh -s 4", Skip("root and iperf3, minutes: a benchmark")),
    (
        "freeway stress churn --duration 300s",
        Skip("five minutes; the churn oracle's own tests run short forms"),
    ),
];

/// The rows run before the others (their output is read by later rows), by their command.
const FIRST: &[&str] = &[
    "freeway default-config --router > r.toml",
    "freeway run --config r.toml -d 3600 --ctl /run/freeway.sock &",
    "freeway capture --config r.toml -i wan -Q out -c 100 -w wan.pcap udp port 5001",
    "freeway ctl capture start -i wan -Q out -w /var/tmp/wan.pcap udp port 5001",
];

/// The commands of the README's shell block that follows `heading`: one per line, without
/// the comments, blank and comment-only lines left out.
fn block(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let at = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README.md has no {heading:?}"));
    let open = at + readme[at..].find("```sh\n").expect("a shell block") + 6;
    let close = open + readme[open..].find("```").expect("the block's end");
    readme[open..close]
        .lines()
        .map(|l| l.split(" # ").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// A scratch directory, removed on drop, with the daemon (if started) stopped first.
struct Scratch {
    dir: PathBuf,
    daemon: Option<Child>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("freeway-readme-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir, daemon: None }
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }

    /// `cmd` pointed at this directory's daemon: each `freeway` client gets its socket.
    fn localize(&self, cmd: &str) -> String {
        let sock = self.sock().display().to_string();
        cmd.split("; ")
            .map(|part| {
                let part = part.replace("/run/freeway.sock", &sock);
                if part.starts_with("freeway ctl ") {
                    return part.replacen("freeway ctl ", &format!("freeway ctl -s {sock} "), 1);
                }
                let client = ["fdb", "route", "neigh", "conntrack", "stats", "capture", "link"]
                    .iter()
                    .find(|c| part.starts_with(&format!("freeway {c}")));
                match client {
                    Some(c) if !part.contains("--config") && !part.contains(" -r ") => {
                        part.replacen(&format!("freeway {c}"), &format!("freeway {c} --ctl {sock}"), 1)
                    }
                    _ => part,
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Runs `cmd` with `sh -c` here (`freeway` being the binary under test); it must succeed
    /// within two minutes. Returns its standard output.
    fn run(&self, cmd: &str) -> String {
        let bin = Path::new(env!("CARGO_BIN_EXE_freeway")).parent().unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let local = self.localize(cmd);
        let (out, err) = (self.dir.join("stdout"), self.dir.join("stderr"));
        let mut child = Command::new("sh")
            .args(["-c", &format!("set -e\n{local}")])
            .current_dir(&self.dir)
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("README: `{cmd}` (run as `{local}`) did not end within two minutes");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err).unwrap_or_default();
        assert!(
            status.success(),
            "README: `{cmd}` (run as `{local}`) failed ({status}): {stderr}{stdout}"
        );
        stdout
    }

    /// Starts `freeway run ...` (the README's daemon line, without its `&`) and waits for its
    /// socket.
    fn daemon(&mut self, cmd: &str) {
        let local = self.localize(cmd.trim_end_matches('&').trim());
        let args: Vec<&str> = local.split_whitespace().skip(1).collect();
        let child = Command::new(env!("CARGO_BIN_EXE_freeway"))
            .args(&args)
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.sock().exists() {
            assert!(Instant::now() < deadline, "README: `{cmd}` did not open its socket");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn have_tcpdump() -> bool {
    Command::new("tcpdump").arg("--version").output().is_ok()
}

#[test]
fn every_command_of_using_it_runs_as_written_against_the_router_demo() {
    let readme = block("## Using it");
    let listed: Vec<&str> = USING_IT.iter().map(|r| r.0).collect();
    assert_eq!(
        readme, listed,
        "README.md's \"Using it\" block and this test's table differ: give each README command its row"
    );
    let mut s = Scratch::new("using");
    let mut rows: Vec<&(&str, How)> = FIRST
        .iter()
        .map(|f| USING_IT.iter().find(|r| r.0 == *f).expect("FIRST names README rows"))
        .collect();
    rows.extend(USING_IT.iter().filter(|r| !FIRST.contains(&r.0)));
    let mut tap = None;
    for (cmd, how) in rows {
        match how {
            Skip(why) => eprintln!("README: not run: `{cmd}`: {why}"),
            Daemon => s.daemon(cmd),
            As(forms) => {
                for f in forms.iter() {
                    s.run(f);
                }
            }
            Run if cmd.contains("tcpdump") && !have_tcpdump() => {
                freeway_testkit::skip(format!("tcpdump is not installed: `{cmd}` not run"));
            }
            Run if cmd.contains("capture stop ID") => {
                let id: &String = tap.as_ref().expect("capture start ran first");
                s.run(&cmd.replace("ID", id));
            }
            Run => {
                let out = s.run(cmd);
                if cmd.starts_with("freeway ctl capture start") {
                    // "tap 3 writing /var/tmp/wan.pcap (stop it with ...)"
                    tap = out.split_whitespace().nth(1).map(str::to_string);
                }
                if cmd.contains("| tcpdump") {
                    assert_eq!(out.lines().count(), 100, "{cmd}: {out}");
                }
                if cmd.starts_with("freeway capture -n -e") {
                    assert_eq!(out.lines().count(), 5, "{cmd}: {out}");
                    assert!(out.lines().all(|l| l.contains("ethertype IPv4")), "{out}");
                }
            }
        }
    }
    let _ = std::fs::remove_file("/var/tmp/wan.pcap");
}

/// The firewall line, against the router demo with the README's ruleset in place of its
/// one-knob policy, as the line's comment says.
#[test]
fn the_firewall_examples_run() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let at = readme
        .find("The firewall speaks nftables")
        .expect("the ruleset's section");
    let open = at + readme[at..].find("```\n").expect("the ruleset block") + 4;
    let close = open + readme[open..].find("```").expect("its end");
    let mut s = Scratch::new("nft");
    std::fs::write(s.dir.join("rules.nft"), &readme[open..close]).unwrap();
    s.run("freeway default-config --router > r.toml");
    let cfg = std::fs::read_to_string(s.dir.join("r.toml")).unwrap();
    assert!(cfg.contains("allow_new_from = [\"lan\"]"), "{cfg}");
    std::fs::write(
        s.dir.join("r.toml"),
        cfg.replace("allow_new_from = [\"lan\"]", "ruleset = \"rules.nft\""),
    )
    .unwrap();
    s.daemon("freeway run --config r.toml -d 3600 --ctl /run/freeway.sock &");
    let line = USING_IT
        .iter()
        .find(|r| r.0.starts_with("freeway ctl firewall list"))
        .expect("the firewall row")
        .0;
    let out = s.run(line);
    assert!(out.contains("table inet filter"), "{out}");
}
