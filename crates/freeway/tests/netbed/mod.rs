//! The network-namespace test bed shared by the namespace tests: hosts h1, h2, h3 joined to a
//! switch namespace by veth pairs (`scripts/netns-testbed.sh`), Freeway started in the switch
//! namespace, and helpers to run commands, ping, move bytes over TCP and read counters.
//!
//! Needs root (namespaces, veths, AF_PACKET): see [`need_root`], which skips loudly (a
//! failure under CI) elsewhere. Each bed has a unique suffix and is torn down on drop, also
//! on failure.

#![allow(dead_code)]

pub mod bird;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn can_run() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        return Err("not root".into());
    }
    for tool in ["ip", "ping", "python3"] {
        if !installed(tool) {
            return Err(format!("{tool} not installed"));
        }
    }
    Ok(())
}

/// Whether the command `tool` is on the path.
pub fn installed(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Returns from the test, after a skip (see `freeway_testkit::skip`: loud, a failure under
/// CI), when this machine cannot run namespace tests.
#[macro_export]
macro_rules! need_root {
    () => {
        if let Err(why) = $crate::netbed::can_run() {
            freeway_testkit::skip(format!(
                "{why}: network namespace tests need root, ip, ping and python3"
            ));
            return;
        }
    };
}

/// A test bed; torn down on drop.
pub struct Bed {
    pub suffix: String,
    pub freeway: Option<Child>,
    pub dir: PathBuf,
    /// The veths' MTU.
    pub mtu: u32,
}

impl Bed {
    pub fn up(tag: &str) -> Bed {
        Bed::up_mtu(tag, 1500)
    }

    /// A bed whose h1 and h2 sit in two subnets behind a router yet to start
    /// ([`two_subnets`]).
    pub fn two_subnets(tag: &str) -> Bed {
        let bed = Bed::up(tag);
        two_subnets(&bed);
        bed
    }

    /// A bed with Freeway bridging h1, h2 and h3 (two workers), h1 -> h2 checked.
    pub fn bridged(tag: &str) -> Bed {
        Bed::bridged_with(tag, Bed::start)
    }

    /// [`Bed::bridged`], Freeway with a control socket ([`Bed::start_ctl`]).
    pub fn bridged_ctl(tag: &str) -> Bed {
        Bed::bridged_with(tag, Bed::start_ctl)
    }

    fn bridged_with(tag: &str, start: fn(&mut Bed, &str)) -> Bed {
        let mut bed = Bed::up(tag);
        start(&mut bed, &ports(2, &[("h1", 1), ("h2", 1), ("h3", 1)]));
        assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2 through the bridge");
        bed
    }

    /// Starts `freeway capture --ctl SOCKET ARGS... -w FILE FILTER` on the Freeway of
    /// [`Bed::start_ctl`], its standard output discarded and its standard error (the
    /// summary) piped.
    pub fn capture(&self, args: &[&str], file: &Path, filter: &str) -> Child {
        Command::new(env!("CARGO_BIN_EXE_freeway"))
            .arg("capture")
            .arg("--ctl")
            .arg(self.sock())
            .args(args)
            .arg("-w")
            .arg(file)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("freeway capture starts")
    }

    /// A bed whose veths have this MTU.
    pub fn up_mtu(tag: &str, mtu: u32) -> Bed {
        let suffix = format!("-{tag}{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("freeway-netns{suffix}"));
        std::fs::create_dir_all(&dir).unwrap();
        let bed = Bed {
            suffix,
            freeway: None,
            dir,
            mtu,
        };
        let o = bed.script(&["up"]);
        assert!(
            o.status.success(),
            "test bed up failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        bed
    }

    pub fn script(&self, args: &[&str]) -> Output {
        Command::new("bash")
            .arg(repo().join("scripts/netns-testbed.sh"))
            .args(args)
            .env("FW_SUFFIX", &self.suffix)
            .env("FW_QUEUES", "2")
            .env("FW_MTU", self.mtu.to_string())
            .output()
            .expect("bash runs")
    }

    /// Runs a command in node `n` (h1, h2, h3, sw).
    pub fn exec(&self, n: &str, cmd: &[&str]) -> Output {
        let mut args = vec!["exec", n];
        args.extend_from_slice(cmd);
        self.script(&args)
    }

    pub fn sh(&self, n: &str, cmd: &str) -> Output {
        self.exec(n, &["sh", "-c", cmd])
    }

    /// Starts Freeway in the switch namespace with `config`.
    pub fn start(&mut self, config: &str) {
        self.start_with(config, &[]);
    }

    /// The control socket of a Freeway started with [`Bed::start_ctl`].
    pub fn sock(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }

    /// Starts Freeway with a control socket ([`Bed::sock`]).
    pub fn start_ctl(&mut self, config: &str) {
        let s = self.sock();
        self.start_with(config, &["--ctl", s.to_str().unwrap()]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !s.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a control request; panics unless it succeeds.
    pub fn ctl(&self, words: &[&str]) -> serde_json::Value {
        let w: Vec<String> = words.iter().map(|x| x.to_string()).collect();
        let r = freeway_datapath::runtime::ctl_request(&self.sock(), &w).expect("the control socket answers");
        assert_eq!(r["ok"], true, "freeway ctl {words:?}: {r}");
        r
    }

    /// Writes `text` (a file with an error) as the run's configuration and asks for a reload,
    /// which must be refused.
    pub fn reload_refused(&self, text: &str) -> serde_json::Value {
        std::fs::write(self.dir.join("freeway.toml"), text).unwrap();
        let w = vec!["reload".to_string()];
        let r = freeway_datapath::runtime::ctl_request(&self.sock(), &w).expect("the control socket answers");
        assert_eq!(r["ok"], false, "a reload of a bad file: {r}");
        r
    }

    /// Writes `text` as the run's configuration and sends `ctl reload` with `flags` (`--check`);
    /// the answer's text (the request must succeed).
    pub fn reload_with(&self, text: &str, flags: &[&str]) -> String {
        std::fs::write(self.dir.join("freeway.toml"), text).unwrap();
        let mut words = vec!["reload"];
        words.extend_from_slice(flags);
        let r = self.ctl(&words);
        r["text"].as_str().expect("a text answer").to_string()
    }

    /// Writes `text` as the run's configuration and reloads it; the answer's text.
    pub fn reload(&self, text: &str) -> String {
        self.reload_with(text, &[])
    }

    /// Writes `text` as the run's configuration and asks for `reload --check`'s plan.
    pub fn reload_check(&self, text: &str) -> String {
        self.reload_with(text, &["--check"])
    }

    /// Reloads `text` as the run's configuration: it applies `change`, nothing fails and
    /// nothing waits for a restart. The answer's text.
    pub fn reload_applies(&self, text: &str, change: &str) -> String {
        let said = self.reload(text);
        assert!(said.contains(&format!("applied: {change}")), "{said}");
        assert!(!said.contains("FAILED") && !said.contains("restart"), "{said}");
        said
    }

    /// Writes `text` to the file `name` in the bed's directory; its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Gives host `h` the one address `cidr` (address/length) on its link and, with `gw`, a
    /// default route through it.
    pub fn host_on(&self, h: &str, cidr: &str, gw: Option<&str>) {
        let mut cmd = format!("ip addr flush dev eth0 && ip addr add {cidr} dev eth0");
        if let Some(gw) = gw {
            cmd.push_str(&format!(" && ip route add default via {gw}"));
        }
        self.sh_ok(h, &cmd);
    }

    /// Frames sent so far on the port named `port`.
    pub fn tx(&self, port: &str) -> u64 {
        self.port_counter(port, "tx_packets")
    }

    /// Frames received so far on the port named `port`.
    pub fn rx(&self, port: &str) -> u64 {
        self.port_counter(port, "rx_packets")
    }

    /// The counter `field` of the port named `port` (`stats`).
    pub fn port_counter(&self, port: &str, field: &str) -> u64 {
        let r = self.ctl(&["stats"]);
        r["data"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port)
            .and_then(|p| p[field].as_u64())
            .unwrap()
    }

    pub fn start_with(&mut self, config: &str, extra: &[&str]) {
        let path = self.dir.join("freeway.toml");
        std::fs::write(&path, config).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &format!("fw-sw{}", self.suffix)])
            .arg(env!("CARGO_BIN_EXE_freeway"))
            .args(["run", "-q", "-j", "--config"])
            .arg(&path)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("freeway starts");
        self.freeway = Some(child);
        // The sockets are up within a few ms; give the workers a moment.
        std::thread::sleep(Duration::from_millis(300));
    }

    /// Stops Freeway with SIGINT and returns its final JSON statistics.
    pub fn stop(&mut self) -> serde_json::Value {
        let child = self.freeway.take().expect("running");
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        let out = child.wait_with_output().expect("freeway exits");
        assert!(
            out.status.success(),
            "freeway failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// Whether `from` gets no answer from `to` (two pings of a second each).
    pub fn unreachable(&self, from: &str, to: &str) -> bool {
        !self.exec(from, &["ping", "-c", "2", "-W", "1", to]).status.success()
    }

    pub fn ping(&self, from: &str, to: &str) -> bool {
        // Retry for a while: the first packets may wait for ARP on both sides.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.exec(from, &["ping", "-c", "1", "-W", "1", to]).status.success() {
                return true;
            }
        }
        false
    }

    /// Sends `mb` MiB of deterministic bytes from `from` to `to`:`port` over TCP; the
    /// receiver hashes what it got. Returns whether both hashes agree (None: connect failed).
    pub fn tcp_transfer(&self, from: &str, to: &str, port: u16, mb: usize) -> Option<bool> {
        self.tcp_transfer_via(from, to, port, &self.addr_of(to), port, mb)
    }

    /// [`Bed::tcp_transfer`] to a server listening on `port` in `to`, reached by the client
    /// at `dst`:`dport` (through a translation, say).
    pub fn tcp_transfer_via(&self, from: &str, to: &str, port: u16, dst: &str, dport: u16, mb: usize) -> Option<bool> {
        let server = format!(
            "import hashlib,socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             s.bind(('0.0.0.0',{port}))\ns.listen(1)\ns.settimeout(10)\nc,_=s.accept()\nh=hashlib.sha256()\n\
             while True:\n    b=c.recv(65536)\n    if not b: break\n    h.update(b)\nprint(h.hexdigest())\n"
        );
        let srv = Command::new("ip")
            .args(["netns", "exec", &format!("fw-{to}{}", self.suffix)])
            .args(["python3", "-c", &server])
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        self.wait_listening(to, port);
        let client = format!(
            "import hashlib,socket,sys\nh=hashlib.sha256()\ns=socket.create_connection(('{dst}',{dport}),timeout=3)\n\
             for i in range({n}):\n    b=bytes([(i*7+j)%251 for j in range(256)])*64\n    h.update(b)\n    s.sendall(b)\n\
             s.close()\nprint(h.hexdigest())\n",
            n = mb * 64
        );
        let c = self.exec(from, &["python3", "-c", &client]);
        if !c.status.success() {
            let mut srv = srv;
            let _ = srv.kill();
            let _ = srv.wait();
            return None;
        }
        let s = srv.wait_with_output().ok()?;
        Some(!c.stdout.is_empty() && c.stdout == s.stdout)
    }

    /// Waits (at most 10 s) until a TCP socket listens on `port` in node `n` (`ss -ltnH`), so
    /// a client started next finds it however loaded the machine is.
    pub fn wait_listening(&self, n: &str, port: u16) {
        let cmd = format!("ss -ltnH 'sport = :{port}' | grep -q .");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.sh(n, &cmd).status.success() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Bed::tcp_transfer`], which must connect and deliver every byte intact.
    pub fn transfer_intact(&self, from: &str, to: &str, port: u16, mb: usize) {
        assert_eq!(
            self.tcp_transfer(from, to, port, mb),
            Some(true),
            "{mb} MiB intact {from} -> {to}"
        );
    }

    /// Runs `cmd` with `sh -c` in the namespace of `n`; it must succeed.
    pub fn sh_ok(&self, n: &str, cmd: &str) -> Output {
        let o = self.sh(n, cmd);
        assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
        o
    }

    pub fn addr_of(&self, h: &str) -> String {
        let o = self.sh(h, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1");
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut c) = self.freeway.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.script(&["down"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The router between the test bed's subnets: interfaces v10 (VLAN 10, 10.1.0.1/24) and v20
/// (VLAN 20, 10.2.0.1/24).
/// Moves h1 to 10.1.0.2/24 and h2 to 10.2.0.2/24, each routing through the router's
/// address in its subnet (.1): the hosts of [`router_v10_v20`].
pub fn two_subnets(bed: &Bed) {
    for (h, net) in [("h1", 1), ("h2", 2)] {
        bed.host_on(h, &format!("10.{net}.0.2/24"), Some(&format!("10.{net}.0.1")));
    }
}

pub fn router_v10_v20() -> String {
    let mut s = String::from("\n[router]\nmac = \"02:fe:00:00:00:01\"\n");
    for n in [1, 2] {
        s.push_str(&format!(
            "\n[[interface]]\nname = \"v{n}0\"\nvlan = {n}0\naddr = [\"10.{n}.0.1/24\"]\n"
        ));
    }
    s
}

/// A two-worker router between [`two_subnets`]' hosts: ports h1 (VLAN 10) and h2 (VLAN 20)
/// and [`router_v10_v20`]'s interfaces; a test adds its own sections.
pub fn routed_ports() -> String {
    let mut cfg = ports(2, &[("h1", 10), ("h2", 20)]);
    cfg.push_str(&router_v10_v20());
    cfg
}

/// [`routed_ports`] with `[linux] punt`: each router interface has a kernel twin.
pub fn routed_ports_punted() -> String {
    let mut cfg = routed_ports();
    cfg.push_str("\n[linux]\npunt = true\n");
    cfg
}

/// The `[firewall]` section that loads the nftables ruleset in the file `ruleset`.
pub fn firewall_ruleset(ruleset: &Path) -> String {
    format!("\n[firewall]\nruleset = \"{}\"\n", ruleset.display())
}

pub fn ports(workers: usize, vlans: &[(&str, u16)]) -> String {
    ports_of("afpacket", workers, vlans)
}

/// [`ports`] of `kind` ("afpacket" or "afxdp"), each on the switch end of its name.
pub fn ports_of(kind: &str, workers: usize, vlans: &[(&str, u16)]) -> String {
    let mut s = format!("workers = {workers}\n");
    for (p, v) in vlans {
        s.push_str(&format!(
            "\n[[port]]\nname = \"{p}\"\nkind = \"{kind}\"\n{kind} = {{ iface = \"{p}\" }}\nvlan = {{ mode = \"access\", vlan = {v} }}\n"
        ));
    }
    s
}

/// A router between h1, h3 (VLAN 10) and h2 (VLAN 20), two workers: interfaces `(name, VLAN,
/// address/len)`, and `[firewall] ruleset` from `ruleset`.
pub fn lan_wan_router(ifaces: &[(&str, u16, &str)], ruleset: &Path) -> String {
    let mut cfg = ports(2, &[("h1", 10), ("h3", 10), ("h2", 20)]);
    cfg.push_str("\n[router]\nmac = \"02:fe:00:00:00:01\"\n");
    for (n, v, a) in ifaces {
        cfg.push_str(&format!(
            "\n[[interface]]\nname = \"{n}\"\nvlan = {v}\naddr = [\"{a}\"]\n"
        ));
    }
    cfg.push_str(&firewall_ruleset(ruleset));
    cfg
}
