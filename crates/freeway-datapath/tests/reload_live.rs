//! `freeway ctl reload` while generator traffic flows: VLAN membership, port flags, MTUs and
//! conntrack timeouts change live; `--check` changes nothing; a file with an error changes
//! nothing; a port added opens and forwards, ports removed or changed are named and wait for a restart. Frames are counted on sink ports; "nothing more reached a port" is judged after
//! the generator's port received several more batches than a worker can hold at once (one
//! worker: every batch started after a change was published sees it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use freeway_bridge::Padded;
use freeway_datapath::config;
use freeway_datapath::runtime::{self, control, RunOptions};
use serde_json::Value;

/// A broadcaster on VLAN 10, sink `a` on VLAN 10, sink `b` on `b_vlan`; `a`'s broadcast
/// flooding and MTU, and the UDP timeout, as given.
fn config_text(b_vlan: &str, a_bcast: bool, a_mtu: u16, udp_single: u64) -> String {
    format!(
        r#"workers = 1

[[port]]
name = "src"
kind = "gen"
vlan = {{ mode = "access", vlan = 10 }}
gen = {{ src_macs = ["02:00:00:00:00:01"], dst_macs = ["ff:ff:ff:ff:ff:ff"] }}

[[port]]
name = "a"
kind = "sink"
vlan = {{ mode = "access", vlan = 10 }}
bcast_flood = {a_bcast}
mtu = {a_mtu}

[[port]]
name = "b"
kind = "sink"
vlan = {b_vlan}

[conntrack]
timeouts = {{ udp_single = {udp_single} }}
"#
    )
}

const ORIGINAL: (&str, bool, u16, u64) = (r#"{ mode = "access", vlan = 20 }"#, true, 1500, 30);
const CHANGED: (&str, bool, u16, u64) = (
    r#"{ mode = "trunk", vlans = ["10", "20"], native = 10 }"#,
    false,
    1400,
    5,
);

fn write(path: &Path, c: (&str, bool, u16, u64)) {
    std::fs::write(path, config_text(c.0, c.1, c.2, c.3)).unwrap();
}

fn ask(sock: &Path, words: &[&str]) -> Value {
    let words: Vec<String> = words.iter().map(ToString::to_string).collect();
    control::request(sock, &words).unwrap()
}

/// Per port (src, a, b): frames received, frames transmitted.
fn counts(sock: &Path) -> [(u64, u64); 3] {
    let s = ask(sock, &["stats"]);
    let p = &s["data"]["ports"];
    std::array::from_fn(|i| {
        (
            p[i]["rx_packets"].as_u64().unwrap(),
            p[i]["tx_packets"].as_u64().unwrap(),
        )
    })
}

/// Waits until `cond` holds on the counters (bounded: a run that stopped forwarding fails).
fn wait_for(sock: &Path, what: &str, cond: impl Fn(&[(u64, u64); 3]) -> bool) -> [(u64, u64); 3] {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = counts(sock);
        if cond(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "{what}: {c:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Returns once the generator's port received 256 more frames (eight batches or more): every
/// batch since began after the moment of the call.
fn settle(sock: &Path) -> [(u64, u64); 3] {
    let rx = counts(sock)[0].0;
    wait_for(sock, "traffic flows", |c| c[0].0 >= rx + 256)
}

/// Whether port `i` received nothing in a settled stretch of traffic.
fn silent(sock: &Path, i: usize) -> bool {
    let before = settle(sock)[i].1;
    settle(sock)[i].1 == before
}

struct Run {
    dir: PathBuf,
    sock: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Run {
    fn start(tag: &str) -> Run {
        Run::start_with(tag, &config_text(ORIGINAL.0, ORIGINAL.1, ORIGINAL.2, ORIGINAL.3))
    }

    /// A run of the configuration `text` (its file is `cfg.toml` in the run's directory).
    fn start_with(tag: &str, text: &str) -> Run {
        let dir = std::env::temp_dir().join(format!("freeway-reload-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cfg.toml");
        std::fs::write(&file, text).unwrap();
        let sock = dir.join("ctl.sock");
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (file, sock, stop) = (file.clone(), sock.clone(), stop.clone());
            std::thread::spawn(move || {
                let cfg = config::load(&file).unwrap();
                runtime::run::<Padded>(
                    &cfg,
                    RunOptions {
                        control: Some(sock),
                        stop: Some(stop),
                        // Until the test stops it: a generator run without a duration ends
                        // after 5 s, which a loaded machine can reach mid-test.
                        duration: Some(Duration::from_secs(600)),
                        config_path: Some(file),
                        ..Default::default()
                    },
                )
                .unwrap();
            })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !sock.exists() {
            assert!(Instant::now() < deadline, "the control socket never appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        Run {
            dir,
            sock,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The row of a reply's data list whose `key` is `value`.
fn row(reply: &Value, key: &str, value: &str) -> Value {
    let rows = reply["data"].as_array().unwrap();
    rows.iter()
        .find(|x| x[key] == value)
        .cloned()
        .unwrap_or_else(|| panic!("no {key} {value} in {reply}"))
}

fn link(sock: &Path, name: &str) -> Value {
    row(&ask(sock, &["link", "show"]), "ifname", name)
}

/// A run of the original file, forwarding: the run and its file.
fn forwarding(tag: &str) -> (Run, PathBuf) {
    let run = Run::start(tag);
    wait_for(&run.sock, "a receives", |c| c[1].1 > 0);
    let file = run.dir.join("cfg.toml");
    (run, file)
}

#[test]
fn vlan_membership_flags_mtu_and_timeouts_change_while_traffic_flows() {
    // Traffic flows: `a` (VLAN 10) gets the broadcasts, `b` (VLAN 20) nothing.
    let (run, file) = forwarding("live");
    let sock = &run.sock;
    assert!(silent(sock, 2), "b is on VLAN 20");

    // --check lists the plan and applies nothing.
    write(&file, CHANGED);
    let r = ask(sock, &["reload", "--check"]);
    let text = r["text"].as_str().unwrap();
    for want in [
        "would apply: vlan membership: src access vlan 10; a access vlan 10; b trunk vlans 10,20 native 10",
        "would apply: link set dev a learning on flood on mcast_flood on bcast_flood off",
        "would apply: link set dev a mtu 1400",
        "would apply: conntrack timeouts: udp_single 5",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    assert!(!text.contains("restart"), "{text}");
    assert!(silent(sock, 2), "--check changed nothing");
    assert_eq!(link(sock, "a")["mtu"], 1500);

    // reload applies all of it while the generator sends.
    let r = ask(sock, &["reload"]);
    assert_eq!(r["ok"], true, "{r}");
    let changes = r["data"]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 4, "{r}");
    assert!(changes.iter().all(|c| c["ok"] == true), "{r}");
    wait_for(sock, "b joined VLAN 10", |c| c[2].1 > 0);
    assert!(silent(sock, 1), "a floods no broadcast any more");
    assert_eq!(link(sock, "a")["mtu"], 1400);

    // A file with an error changes nothing.
    std::fs::write(
        &file,
        config_text(r#"{ mode = "access", vlan = 5000 }"#, true, 1500, 30),
    )
    .unwrap();
    let r = ask(sock, &["reload"]);
    assert_eq!(r["ok"], false, "{r}");
    let err = r["error"].as_str().unwrap();
    assert!(err.contains("cfg.toml:") && err.contains("nothing changed"), "{err}");
    let before = settle(sock)[2].1;
    assert!(settle(sock)[2].1 > before, "b is still on VLAN 10");
    assert!(silent(sock, 1), "a's flags stayed");

    // Back to the original: b leaves VLAN 10, a floods again.
    write(&file, ORIGINAL);
    let r = ask(sock, &["reload"]);
    assert_eq!(r["data"]["changes"].as_array().unwrap().len(), 4, "{r}");
    assert!(silent(sock, 2), "b left VLAN 10");
    let before = settle(sock)[1].1;
    assert!(settle(sock)[1].1 > before, "a floods broadcasts again");
    assert_eq!(link(sock, "a")["mtu"], 1500);
}

#[test]
fn a_port_of_another_kind_is_removed_and_added_again_and_the_others_keep_their_changes() {
    let (run, file) = forwarding("ports");
    let sock = &run.sock;
    // b becomes a generator on VLAN 10: removed, added again; a's MTU changes live.
    let text = config_text(ORIGINAL.0, ORIGINAL.1, 1400, ORIGINAL.3).replace(
        "name = \"b\"\nkind = \"sink\"\nvlan = { mode = \"access\", vlan = 20 }",
        "name = \"b\"\nkind = \"gen\"\nvlan = { mode = \"access\", vlan = 10 }",
    );
    std::fs::write(&file, text).unwrap();
    let r = ask(sock, &["reload"]);
    assert_eq!(
        r["text"], "applied: port remove b\napplied: port add b (gen)\napplied: link set dev a mtu 1400\n",
        "{r}"
    );
    assert_eq!(link(sock, "a")["mtu"], 1400);
    // The new b generates on VLAN 10: its frames reach a.
    let ports = ask(sock, &["stats"])["data"]["ports"].as_array().unwrap().len();
    assert_eq!(ports, 4, "the old b's counters stay, the new b after them");
    counts_some(sock, 3, "rx_packets", "the new b receives from its generator");
}

/// Waits until the counter `field` of the `i`-th port of `stats` is not 0 (bounded).
fn counts_some(sock: &Path, i: usize, field: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while ask(sock, &["stats"])["data"]["ports"][i][field].as_u64().unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Frames port `name` transmitted (0 while the run has no such port).
fn tx_of(sock: &Path, name: &str) -> u64 {
    let s = ask(sock, &["stats"]);
    let ports = s["data"]["ports"].as_array().unwrap().clone();
    ports
        .iter()
        .find(|p| p["name"] == name)
        .map_or(0, |p| p["tx_packets"].as_u64().unwrap())
}

#[test]
fn a_port_added_forwards_and_one_removed_stops() {
    let (run, file) = forwarding("portset");
    let sock = &run.sock;
    let original = config_text(ORIGINAL.0, ORIGINAL.1, ORIGINAL.2, ORIGINAL.3);
    // A sink `c` on VLAN 10 added, `a` (VLAN 10, getting the broadcasts) and `b` removed.
    let a = format!(
        "\n[[port]]\nname = \"a\"\nkind = \"sink\"\nvlan = {{ mode = \"access\", vlan = 10 }}\nbcast_flood = {}\nmtu = {}\n",
        ORIGINAL.1, ORIGINAL.2
    );
    let b = "\n[[port]]\nname = \"b\"\nkind = \"sink\"\nvlan = { mode = \"access\", vlan = 20 }\n";
    assert!(original.contains(&a) && original.contains(b), "{original}");
    let c = "\n[[port]]\nname = \"c\"\nkind = \"sink\"\nvlan = { mode = \"access\", vlan = 10 }\n";
    let new = original.replace(&a, "\n").replace(b, c);
    std::fs::write(&file, &new).unwrap();
    let r = ask(sock, &["reload", "--check"]);
    assert_eq!(
        r["text"], "would apply: port add c (sink)\nwould apply: port remove a\nwould apply: port remove b\n",
        "{r}"
    );
    assert_eq!(
        ask(sock, &["stats"])["data"]["ports"].as_array().unwrap().len(),
        3,
        "--check adds nothing"
    );
    // A file with an error changes nothing.
    std::fs::write(&file, new.replace("kind = \"sink\"", "kind = \"nope\"")).unwrap();
    assert_eq!(ask(sock, &["reload"])["ok"], false, "a bad file is refused");
    assert_eq!(ask(sock, &["stats"])["data"]["ports"].as_array().unwrap().len(), 3);
    std::fs::write(&file, &new).unwrap();
    let r = ask(sock, &["reload"]);
    assert_eq!(
        r["text"], "applied: port add c (sink)\napplied: port remove a\napplied: port remove b\n",
        "{r}"
    );
    // `c` is the broadcasts' new member; `a` gets none from the moment the reload answered.
    let a_tx = tx_of(sock, "a (removed)");
    assert!(a_tx > 0, "a's counters stay, under its name in stats");
    counts_some(sock, 3, "tx_packets", "c gets the broadcasts");
    let c_tx = tx_of(sock, "c");
    settle(sock);
    assert!(tx_of(sock, "c") > c_tx, "c receives");
    assert_eq!(tx_of(sock, "a (removed)"), a_tx, "nothing left a after its removal");
    // The removed ports: no link, no static entry may name them; their counters stay.
    let links = ask(sock, &["link", "show"]);
    assert!(
        links["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["ifname"] != "a" && l["ifname"] != "b"),
        "{links}"
    );
    let r = ask(sock, &["fdb", "add", "02:00:00:00:00:09", "dev", "a", "vlan", "10"]);
    assert_eq!(r["ok"], false, "{r}");
    // A capture on the added port sees its frames; none may start on a removed one.
    let pcap = run.dir.join("c.pcap");
    let w = pcap.display().to_string();
    let r = ask(
        sock,
        &["capture", "start", "-i", "c", "-Q", "out", "-s", "128", "-w", &w],
    );
    assert_eq!(r["ok"], true, "{r}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&pcap).map_or(0, |m| m.len()) < 16 * 1024 {
        assert!(Instant::now() < deadline, "the capture on the added port wrote nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
    let id = r["data"]["id"].as_u64().unwrap().to_string();
    assert_eq!(ask(sock, &["capture", "stop", &id])["ok"], true);
    let r = ask(sock, &["capture", "start", "-i", "a", "-Q", "out", "-w", &w]);
    assert_eq!(r["ok"], false, "{r}");
    assert!(!r.to_string().contains("a (removed)"), "{r}");
    let names: Vec<Value> = ask(sock, &["stats"])["data"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(
        names,
        ["src", "a (removed)", "b (removed)", "c"],
        "the added port after the others, kept until a restart"
    );
    // Reloaded again, nothing differs; `a` added back takes a new index and forwards.
    assert_eq!(ask(sock, &["reload"])["text"], "no live change\n");
    assert_eq!(link(sock, "c")["state"], "forwarding");
    std::fs::write(&file, format!("{new}{a}")).unwrap();
    assert_eq!(ask(sock, &["reload"])["text"], "applied: port add a (sink)\n");
    counts_some(sock, 4, "tx_packets", "a, added back, gets the broadcasts");
}

#[test]
fn a_tap_added_to_the_file_starts_and_one_removed_stops() {
    let (run, file) = forwarding("taps");
    let sock = &run.sock;
    let pcap = run.dir.join("a.pcap");
    let base = config_text(ORIGINAL.0, ORIGINAL.1, ORIGINAL.2, ORIGINAL.3);
    let with_tap = format!(
        "{base}\n[[tap]]\nport = \"a\"\ndirection = \"out\"\nsnaplen = 128\nwrite = \"{}\"\n",
        pcap.display()
    );
    std::fs::write(&file, &with_tap).unwrap();
    let r = ask(sock, &["reload"]);
    let text = r["text"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "applied: capture start -i a -Q out -s 128 -w {}",
            pcap.display()
        )),
        "{text}"
    );
    let running = |l: &Value| {
        l["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["state"] == "running" && t["port"] == "a")
    };
    assert!(running(&ask(sock, &["capture", "list"])));
    // The tap writes while traffic flows (its writer's buffer reaches the file).
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&pcap).map_or(0, |m| m.len()) < 16 * 1024 {
        assert!(Instant::now() < deadline, "the tap wrote nothing");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Reloading the same file changes nothing; without the tap, it stops.
    let r = ask(sock, &["reload"]);
    assert!(r["text"].as_str().unwrap().contains("no live change"), "{r}");
    std::fs::write(&file, &base).unwrap();
    let r = ask(sock, &["reload"]);
    let text = r["text"].as_str().unwrap();
    assert!(text.contains("applied: capture stop -i a -Q out"), "{text}");
    let l = ask(sock, &["capture", "list"]);
    assert!(!running(&l), "{l}");
    let ended = row(&l, "port", "a");
    let written = ended["stats"]["written"].as_u64().unwrap();
    assert!(written > 0, "{ended}");
    // Every frame it wrote is in the file (a 24-byte header, then 16 + 60 bytes a frame).
    assert_eq!(
        std::fs::metadata(&pcap).unwrap().len(),
        24 + written * (16 + 60),
        "{ended}"
    );
}

/// A generator on VLAN 10 pinging 10.3.0.1 through the router (MAC 02:fe:00:00:00:01), sinks
/// on VLANs 10 and 20; the VLAN 20 interface has the addresses `v20`.
fn pinging_router(v20: &str) -> String {
    let ping = r#"{ src_macs = ["02:00:00:00:00:01"], dst_macs = ["02:fe:00:00:00:01"], proto = "icmp", src_ip = "10.1.0.2", dst_ip = "10.3.0.1" }"#;
    let access = |v: u16| format!(r#"{{ mode = "access", vlan = {v} }}"#);
    format!(
        "workers = 1\nport = [\n  {{ name = \"src\", kind = \"gen\", vlan = {}, gen = {ping} }},\n  \
         {{ name = \"a\", kind = \"sink\", vlan = {} }},\n  {{ name = \"b\", kind = \"sink\", vlan = {} }},\n]\n\
         interface = [\n  {{ name = \"v10\", vlan = 10, addr = [\"10.1.0.1/24\"] }},\n  \
         {{ name = \"v20\", vlan = 20, addr = [{v20}] }},\n]\n\n[router]\nmac = \"02:fe:00:00:00:01\"\n",
        access(10),
        access(10),
        access(20),
    )
}

/// The router's echo replies so far.
fn echo_replies(sock: &Path) -> u64 {
    ask(sock, &["stats"])["data"]["router"]["l3"]["echo_replies_v4"]
        .as_u64()
        .unwrap()
}

#[test]
fn an_interface_address_added_by_reload_answers_and_a_removed_one_stops() {
    let one = pinging_router(r#""10.2.0.1/24""#);
    let two = pinging_router(r#""10.2.0.1/24", "10.3.0.1/24""#);
    let run = Run::start_with("addrs", &one);
    let (sock, file) = (&run.sock, run.dir.join("cfg.toml"));
    settle(sock);
    assert_eq!(echo_replies(sock), 0, "10.3.0.1 is no address of the router yet");

    // --check: the plan, nothing applied.
    std::fs::write(&file, &two).unwrap();
    let r = ask(sock, &["reload", "--check"]);
    let text = r["text"].as_str().unwrap();
    assert!(
        text.contains("would apply: interface addresses: v20 10.2.0.1/24 10.3.0.1/24"),
        "{text}"
    );
    settle(sock);
    assert_eq!(echo_replies(sock), 0, "--check applied nothing");

    // Applied: the worker takes the new interfaces up at its next batch and answers.
    let r = ask(sock, &["reload"]);
    let text = r["text"].as_str().unwrap();
    assert!(text.contains("applied: interface addresses: v20"), "{text}");
    assert!(!text.contains("FAILED") && !text.contains("restart"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while echo_replies(sock) == 0 {
        assert!(Instant::now() < deadline, "the added address never answered");
        std::thread::sleep(Duration::from_millis(5));
    }
    let routes = ask(sock, &["route", "show"]);
    assert!(routes["text"].as_str().unwrap().contains("10.3.0.0/24"), "{routes}");

    // Removed: once every batch began after the reload, no more replies.
    std::fs::write(&file, &one).unwrap();
    ask(sock, &["reload"]);
    settle(sock);
    let before = echo_replies(sock);
    settle(sock);
    assert_eq!(echo_replies(sock), before, "the removed address answers no more");
    let routes = ask(sock, &["route", "show"]);
    assert!(!routes["text"].as_str().unwrap().contains("10.3.0.0/24"), "{routes}");
}

/// A generator on VLAN 10 sending UDP to 10.3.0.2 through the router (MAC
/// 02:fe:00:00:00:01), sink `a` on VLAN 10 and `b` on VLAN 30; the router has `v10`, and with
/// `v30` also an interface on VLAN 30 (10.3.0.1/24) and 10.3.0.2's neighbour entry there.
fn routing_to_vlan30(v30: bool) -> String {
    let udp = r#"{ src_macs = ["02:00:00:00:00:01"], dst_macs = ["02:fe:00:00:00:01"], src_ip = "10.1.0.2", dst_ip = "10.3.0.2", src_port = 1024, dst_port = 5001 }"#;
    let access = |v: u16| format!(r#"{{ mode = "access", vlan = {v} }}"#);
    let mut text = format!(
        "workers = 1\nport = [\n  {{ name = \"src\", kind = \"gen\", vlan = {}, gen = {udp} }},\n  \
         {{ name = \"a\", kind = \"sink\", vlan = {} }},\n  {{ name = \"b\", kind = \"sink\", vlan = {} }},\n]\n\n\
         [router]\nmac = \"02:fe:00:00:00:01\"\n\n[[interface]]\nname = \"v10\"\nvlan = 10\naddr = [\"10.1.0.1/24\"]\n",
        access(10),
        access(10),
        access(30),
    );
    if v30 {
        text.push_str(
            "\n[[interface]]\nname = \"v30\"\nvlan = 30\naddr = [\"10.3.0.1/24\"]\n\n\
             [[neigh]]\nip = \"10.3.0.2\"\nmac = \"02:00:00:00:30:02\"\ndev = \"v30\"\n",
        );
    }
    text
}

/// The router's drops for `reason` so far.
fn router_drops(sock: &Path, reason: &str) -> u64 {
    ask(sock, &["stats"])["data"]["router"]["l3"]["drops"][reason]
        .as_u64()
        .unwrap_or(0)
}

/// Reloads the run's file (now `text`): the reply's text, which must say `applied: {change}`
/// with nothing failed and nothing waiting.
fn reload_applies(sock: &Path, file: &Path, text: &str, change: &str) -> String {
    std::fs::write(file, text).unwrap();
    let said = ask(sock, &["reload"])["text"].as_str().unwrap().to_string();
    assert!(said.contains(&format!("applied: {change}")), "{said}");
    assert!(!said.contains("FAILED") && !said.contains("restart"), "{said}");
    said
}

#[test]
fn a_router_interface_added_by_reload_routes_and_a_removed_one_stops() {
    let (one, two) = (routing_to_vlan30(false), routing_to_vlan30(true));
    let run = Run::start_with("ifaces", &one);
    let (sock, file) = (&run.sock, run.dir.join("cfg.toml"));
    settle(sock);
    assert!(silent(sock, 2), "nothing routes to VLAN 30 yet");
    assert!(router_drops(sock, "no_route") > 0);

    // --check: the plan, nothing applied.
    std::fs::write(&file, &two).unwrap();
    let text = ask(sock, &["reload", "--check"])["text"].as_str().unwrap().to_string();
    assert!(
        text.contains(
            "would apply: router interfaces: v30 added (vlan 30 mac 02:fe:00:00:00:01 mtu 1500): v30 10.3.0.1/24"
        ),
        "{text}"
    );
    assert!(text.contains("would apply: neigh add 10.3.0.2"), "{text}");
    assert!(silent(sock, 2), "--check applied nothing");

    // Added: routed to VLAN 30 from the next batch on; its connected route is there.
    reload_applies(sock, &file, &two, "router interfaces: v30 added");
    wait_for(sock, "b receives what is routed through v30", |c| c[2].1 > 0);
    let routes = ask(sock, &["route", "show"])["text"].as_str().unwrap().to_string();
    assert!(routes.contains("10.3.0.0/24 dev v30"), "{routes}");
    let links = ask(sock, &["link", "show"])["text"].as_str().unwrap().to_string();
    assert!(links.contains("v30: router interface vlan 30"), "{links}");

    // A file with an error changes nothing: routing goes on.
    std::fs::write(&file, format!("{two}\n[[interface]]\nname = ")).unwrap();
    let bad = ask(sock, &["reload"]);
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(!silent(sock, 2), "a bad file changed nothing");

    // Removed: its route and neighbour go with it; what it routed is now without a route.
    reload_applies(sock, &file, &one, "router interfaces: v30 removed");
    settle(sock);
    assert!(silent(sock, 2), "nothing is routed through the removed interface");
    let no_route = router_drops(sock, "no_route");
    settle(sock);
    assert!(router_drops(sock, "no_route") > no_route, "counted as no route");
    let routes = ask(sock, &["route", "show"])["text"].as_str().unwrap().to_string();
    assert!(!routes.contains("10.3.0.0/24"), "{routes}");
    let neighs = ask(sock, &["neigh", "show"])["text"].as_str().unwrap().to_string();
    assert!(!neighs.contains("10.3.0.2"), "{neighs}");

    // Added again: a new interface (a new id), routing again.
    let before = counts(sock)[2].1;
    reload_applies(sock, &file, &two, "router interfaces: v30 added");
    wait_for(sock, "b receives again", |c| c[2].1 > before);
}
