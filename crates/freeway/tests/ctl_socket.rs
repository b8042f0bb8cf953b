//! The control socket against a running datapath, through real Unix sockets: the typed
//! protocol's refusals, clients that trickle, idle or do not read (others are still served),
//! the router's own entries protected, and `--ctl PATH` never deleting what is not a stale
//! socket of its own.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use freeway_datapath::runtime::control::protocol::{encode_request, Request};
use serde_json::{json, Value};

mod common;
use common::{ctl, freeway, interrupt, raw, reply_line, spawn_run, stop};

/// A fresh directory for one test.
fn test_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("freeway-ctlsock-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The router demo, running for up to a minute (plus `extra` appended to its config), with
/// a control socket; returns its directory, the socket and the process.
fn running(tag: &str, extra: &str) -> (PathBuf, PathBuf, Child) {
    running_with(tag, &[], |text| format!("{text}\n{extra}"))
}

/// [`running`], with `files` (name, content) written next to the config first and the
/// config's text changed by `edit`.
fn running_with(tag: &str, files: &[(&str, &str)], edit: impl Fn(String) -> String) -> (PathBuf, PathBuf, Child) {
    let dir = test_dir(tag);
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
    }
    let o = freeway(&["default-config", "--router"]);
    let text = String::from_utf8(o.stdout)
        .unwrap()
        .replace("duration_secs = 5", "duration_secs = 60");
    let cfg = dir.join("router.toml");
    std::fs::write(&cfg, edit(text)).unwrap();
    let sock = dir.join("ctl.sock");
    let child = spawn_run(&cfg, &sock, &[], Stdio::null());
    // Ready when it answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    while freeway_datapath::runtime::ctl_request(&sock, &["stats".to_string()]).is_err() {
        assert!(Instant::now() < deadline, "the datapath did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (dir, sock, child)
}

/// Polls `ctl clients` until `f` holds of its data (up to a minute).
fn wait_clients(sock: &Path, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = ctl(sock, &["clients"]);
        if r["ok"] == true && f(&r["data"]) {
            return r["data"].clone();
        }
        assert!(Instant::now() < deadline, "{what}: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn requests_of_another_version_or_an_unknown_command_get_typed_errors_and_change_nothing() {
    let (dir, sock, child) = running("proto", "");
    let before = ctl(&sock, &["route", "show"])["text"].clone();
    // A well-formed request of this version is served.
    let r = raw(&sock, encode_request(&Request::Stats).as_bytes());
    assert!(r["ok"]["data"]["ports"].is_array(), "{r}");
    assert_eq!(r["version"], 1);
    // Another version, even of a known command: refused, typed.
    let r = raw(
        &sock,
        b"{\"version\":2,\"request\":{\"cmd\":\"route_add\",\"prefix\":\"10.9.0.0/24\",\"hops\":{\"dev\":\"wan\"}}}\n",
    );
    assert_eq!(r["error"]["kind"], "unsupported_version", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("version 2"), "{r}");
    // An unknown command.
    let r = raw(&sock, b"{\"version\":1,\"request\":{\"cmd\":\"reboot\"}}\n");
    assert_eq!(r["error"]["kind"], "unknown_command", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("reboot"), "{r}");
    // The old protocol's word array: malformed.
    let r = raw(&sock, b"[\"route\",\"del\",\"10.0.20.0/24\"]\n");
    assert_eq!(r["error"]["kind"], "malformed", "{r}");
    // A known command with a field too many.
    let r = raw(
        &sock,
        b"{\"version\":1,\"request\":{\"cmd\":\"route_del\",\"prefix\":\"10.0.20.0/24\",\"force\":true}}\n",
    );
    assert_eq!(r["error"]["kind"], "malformed", "{r}");
    // Server-side refusals are typed too.
    let r = ctl(&sock, &["route", "del", "10.6.0.0/16"]);
    assert_eq!(
        (r["ok"].clone(), r["kind"].clone()),
        (false.into(), "not_found".into()),
        "{r}"
    );
    assert_eq!(ctl(&sock, &["route", "show"])["text"], before, "nothing changed");
    stop(child, dir);
}

#[test]
fn a_client_trickling_its_request_delays_no_one_and_is_timed_out() {
    let (dir, sock, child) = running("trickle", "");
    // One byte every half second, never a whole line: each read is quick, the request never
    // completes.
    let s = UnixStream::connect(&sock).unwrap();
    let w = s.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        let mut w = w;
        for _ in 0..120 {
            if w.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    // Others are served meanwhile.
    for _ in 0..3 {
        assert_eq!(ctl(&sock, &["stats"])["ok"], true);
    }
    // The trickler gets a timeout error (its request did not arrive whole in time).
    let r = reply_line(&s);
    assert_eq!(r["error"]["kind"], "timeout", "{r}");
    drop(s);
    trickler.join().unwrap();
    wait_clients(&sock, "the timeout is counted", |d| d["timed_out"].as_u64() >= Some(1));
    stop(child, dir);
}

#[test]
fn idle_clients_delay_no_one_and_those_beyond_the_limit_are_told_busy_at_once() {
    let (dir, sock, child) = running("idle", "");
    // Eight idle clients (one at a time, each would hold the socket for its whole timeout).
    let idle: Vec<UnixStream> = (0..8).map(|_| UnixStream::connect(&sock).unwrap()).collect();
    let r = ctl(&sock, &["stats"]);
    assert_eq!(r["ok"], true, "{r}");
    // Each idle client is timed out in the end.
    for s in &idle {
        assert_eq!(reply_line(s)["error"]["kind"], "timeout");
    }
    drop(idle);
    // Many more than the limit at once: those beyond it are refused as busy, at once, with a
    // clear error; the others are timed out as before.
    let max = freeway_datapath::runtime::control::MAX_CLIENTS;
    let flood: Vec<UnixStream> = (0..max + 8).map(|_| UnixStream::connect(&sock).unwrap()).collect();
    let kinds: Vec<String> = flood
        .iter()
        .map(|s| reply_line(s)["error"]["kind"].as_str().unwrap().to_string())
        .collect();
    let busy = kinds.iter().filter(|k| *k == "busy").count();
    assert!(busy >= 8, "{kinds:?}");
    assert!(kinds.iter().all(|k| k == "busy" || k == "timeout"), "{kinds:?}");
    let d = wait_clients(&sock, "busy refusals counted", |d| d["busy"].as_u64() >= Some(8));
    assert!(d["timed_out"].as_u64().unwrap() >= 8, "{d}");
    // Once they are answered, the socket serves again.
    let r = raw(&sock, encode_request(&Request::Stats).as_bytes());
    assert!(r["ok"].is_object(), "{r}");
    drop(flood);
    stop(child, dir);
}

#[test]
fn a_client_that_does_not_read_its_big_reply_is_dropped_while_others_are_served() {
    // 20,000 routes: `route show` is megabytes, far more than a socket buffer holds.
    let mut extra = String::new();
    for i in 0..20_000u32 {
        extra.push_str(&format!(
            "[[route]]\ndst = \"172.{}.{}.0/24\"\nvia = \"10.0.20.7\"\n",
            16 + i / 256,
            i % 256
        ));
    }
    let (dir, sock, child) = running("noread", &extra);
    let big = ctl(&sock, &["route", "show"]);
    assert!(big["text"].as_str().unwrap().len() > 1_000_000, "a big reply");
    // Asks for it and never reads.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(encode_request(&Request::RouteShow).as_bytes()).unwrap();
    // Others are served meanwhile, changes included.
    for _ in 0..3 {
        assert_eq!(ctl(&sock, &["stats"])["ok"], true);
    }
    assert_eq!(
        ctl(&sock, &["route", "add", "10.9.0.0/24", "via", "10.0.20.7"])["ok"],
        true
    );
    // The reader is dropped in the end, and counted.
    wait_clients(&sock, "the non-reading client is dropped", |d| {
        d["dropped"].as_u64() >= Some(1)
    });
    // What it gets when it finally reads: less than the reply, then the end.
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.read_to_end(&mut got);
    assert!(got.len() < big["text"].as_str().unwrap().len(), "{} bytes", got.len());
    assert_eq!(ctl(&sock, &["stats"])["ok"], true);
    stop(child, dir);
}

#[test]
fn the_router_s_own_mac_and_addresses_cannot_be_taken_by_static_entries() {
    let (dir, sock, child) = running("own", "");
    let router_entry = |sock: &Path| {
        ctl(sock, &["fdb", "show"])["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["mac"] == "02:fe:00:00:00:01" && e["vlan"] == 10 && e["ifname"] == "(router)")
    };
    assert!(router_entry(&sock));
    for (kind, msg, requests) in [
        (
            "refused",
            "router's own MAC",
            &["fdb del 02:fe:00:00:00:01 vlan 10", "fdb add 02:fe:00:00:00:01 dev lan"][..],
        ),
        (
            "invalid",
            "not a unicast",
            &[
                "fdb add 00:00:00:00:00:00 dev lan",
                "fdb add ff:ff:ff:ff:ff:ff dev lan",
                "fdb add 01:00:5e:00:00:01 dev lan",
            ],
        ),
        (
            "refused",
            "router's own address",
            &[
                "route add 10.9.0.0/24 via 10.0.20.1",
                "route replace 10.9.0.0/24 via 10.0.20.7,10.0.20.1",
                "route add 2001:db8:9::/48 via 2001:db8:20::1",
                "neigh add 10.0.20.1 lladdr 02:00:00:00:20:01 dev wan",
                "neigh add 10.0.10.1 lladdr 02:00:00:00:20:01 dev wan",
            ],
        ),
    ] {
        for request in requests {
            let w: Vec<&str> = request.split(' ').collect();
            let r = ctl(&sock, &w);
            assert_eq!(r["ok"], false, "{w:?}: {r}");
            assert_eq!(r["kind"], kind, "{w:?}: {r}");
            assert!(r["error"].as_str().unwrap().contains(msg), "{w:?}: {r}");
        }
    }
    // Nothing changed.
    assert!(router_entry(&sock));
    let fdb = ctl(&sock, &["fdb", "show"])["text"].as_str().unwrap().to_string();
    assert!(
        !fdb.contains("00:00:00:00:00:00") && !fdb.contains("ff:ff:ff:ff:ff:ff"),
        "{fdb}"
    );
    assert!(!ctl(&sock, &["route", "show"])["text"]
        .as_str()
        .unwrap()
        .contains("10.9.0.0"));
    let neigh = ctl(&sock, &["neigh", "show"])["text"].as_str().unwrap().to_string();
    assert!(
        !neigh.contains("10.0.20.1 ") && !neigh.contains("10.0.10.1 "),
        "{neigh}"
    );
    // The same words for other addresses are fine.
    assert_eq!(
        ctl(&sock, &["route", "add", "10.9.0.0/24", "via", "10.0.20.7"])["ok"],
        true
    );
    assert_eq!(
        ctl(&sock, &["fdb", "add", "02:00:00:00:00:99", "dev", "lan"])["ok"],
        true
    );
    stop(child, dir);
}

/// `freeway run` of the bridge demo for a short while with `--ctl path`.
fn run_with_ctl(path: &Path) -> Output {
    freeway(&["run", "-q", "--duration", "1", "--ctl", path.to_str().unwrap()])
}

#[test]
fn run_refuses_a_ctl_path_that_is_not_a_stale_socket_and_leaves_it_alone() {
    let dir = test_dir("path");
    // A regular file: refused, named, untouched.
    let file = dir.join("precious.txt");
    std::fs::write(&file, "keep me").unwrap();
    let o = run_with_ctl(&file);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(file.to_str().unwrap()) && err.contains("regular file"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // A directory.
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let o = run_with_ctl(&sub);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("directory"));
    assert!(sub.is_dir());
    // A live socket (someone listens): refused, left in place.
    let live = dir.join("live.sock");
    let l = UnixListener::bind(&live).unwrap();
    let o = run_with_ctl(&live);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("listening there"), "{err}");
    assert!(live.exists());
    drop(l);
    // Now stale (nobody listens): replaced, and removed at exit.
    let o = run_with_ctl(&live);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!live.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn at_exit_only_the_socket_this_run_created_is_removed() {
    let (dir, sock, child) = running("exit", "");
    // Someone replaces the socket file while the datapath runs.
    std::fs::remove_file(&sock).unwrap();
    std::fs::write(&sock, "not yours").unwrap();
    interrupt(child);
    assert_eq!(std::fs::read_to_string(&sock).unwrap(), "not yours");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The router demo with an nftables ruleset in place of `allow_new_from`: listed with its
/// counters, a named set changed live, a bad file refused with its line and nothing changed,
/// and `trace` naming the chain and the line of the rule that decided.
#[test]
fn an_nftables_ruleset_is_listed_changed_and_traced_through_the_socket() {
    let rules = "table inet filter {\n\
         \tset blocked {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t}\n\
         \tchain forward {\n\
         \t\ttype filter hook forward priority filter; policy drop;\n\
         \t\tct state established,related accept\n\
         \t\tip saddr @blocked counter drop\n\
         \t\tiifname \"lan\" accept\n\
         \t\tiifname \"wan\" tcp dport 22 counter drop\n\
         \t}\n}\n";
    let (dir, sock, child) = running_with("nft", &[("rules.nft", rules)], |text| {
        text.replace("allow_new_from = [\"lan\"]", "ruleset = \"rules.nft\"")
    });
    // The intruder's SSH attempts meet the counted drop rule.
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let r = ctl(&sock, &["firewall", "list"]);
        assert_eq!(r["ok"], true, "{r}");
        let t = r["text"].as_str().unwrap().to_string();
        if !t.contains("tcp dport 22 counter packets 0 ") {
            break t;
        }
        assert!(Instant::now() < deadline, "the SSH drop rule never counted: {t}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(listed.contains("table inet filter {"), "{listed}");
    assert!(
        listed.contains("iifname \"wan\" tcp dport 22 counter packets"),
        "{listed}"
    );

    // The LAN host's replies pass; blocking its address stops its new connections: the
    // established flow keeps going (the rule sits after `ct state established`).
    let r = ctl(&sock, &["set", "add", "blocked", "10.0.10.0/24"]);
    assert_eq!(r["ok"], true, "{r}");
    let l = ctl(&sock, &["firewall", "list"]);
    assert!(l["text"].as_str().unwrap().contains("10.0.10.0/24"), "{l}");
    let r = ctl(&sock, &["set", "del", "blocked", "10.9.9.9"]);
    assert_eq!(r["kind"], "not_found", "{r}");
    let r = ctl(&sock, &["set", "add", "nosuchset", "10.0.0.1"]);
    assert_eq!(r["kind"], "not_found", "{r}");
    let r = ctl(&sock, &["set", "add", "blocked", "not-an-address"]);
    assert_eq!(r["kind"], "invalid", "{r}");

    // A file with an error: refused, with its line; the ruleset stays.
    std::fs::write(
        dir.join("bad.nft"),
        "table inet filter {\n\tchain forward {\n\t\tjump nowhere\n\t}\n}\n",
    )
    .unwrap();
    let before = ctl(&sock, &["firewall", "list"])["data"]["nftables"]
        .as_array()
        .map(Vec::len);
    let r = ctl(&sock, &["firewall", "load", dir.join("bad.nft").to_str().unwrap()]);
    assert_eq!(r["kind"], "invalid", "{r}");
    assert!(r["error"].as_str().unwrap().contains("bad.nft:3:"), "{r}");
    let after = ctl(&sock, &["firewall", "list"])["data"]["nftables"]
        .as_array()
        .map(Vec::len);
    assert_eq!(before, after);
    assert!(before.is_some_and(|n| n > 3), "JSON shaped as nft -j: {before:?}");

    // Trace: the intruder's SSH packet is dropped by the forward chain's rule at line 11.
    let words: Vec<String> = [
        "trace",
        "in_port=intruder,dl_src=02:00:00:00:20:66,dl_dst=02:fe:00:00:00:01",
        "nw_src=10.0.20.66",
        "nw_dst=10.0.10.5",
        "tcp",
        "tp_src=40000",
        "tp_dst=22",
        "tcp_flags=syn",
    ]
    .map(String::from)
    .to_vec();
    let r = freeway_datapath::runtime::ctl_request(&sock, &words).unwrap();
    let steps: Vec<String> = r["data"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{}: {}", s["stage"].as_str().unwrap(), s["result"].as_str().unwrap()))
        .collect();
    assert!(
        steps.iter().any(|s| s
            .starts_with("firewall: forward from wan to lan: drop by rule 4 of chain inet filter forward (line 11)")),
        "{steps:#?}"
    );
    assert_eq!(r["data"]["dropped"], "router:filtered", "{r}");
    interrupt(child);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `link set dev PORT FLAG on|off` changes a port's flags while it forwards (`link show`
/// says so at once), bad words are refused before anything is sent, and `mdb show` answers
/// in `bridge mdb show`'s shape (its JSON: `mdb` rows and `router` ports).
#[test]
fn port_flags_change_while_forwarding_and_the_mdb_is_shown() {
    let (dir, sock, child) = running("lan", "");
    let lan = |sock: &Path| {
        let r = ctl(sock, &["link", "show"]);
        r["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["ifname"] == "lan")
            .cloned()
            .unwrap()
    };
    assert_eq!(lan(&sock)["learning"], true);
    let r = ctl(
        &sock,
        &[
            "link", "set", "dev", "lan", "learning", "off", "isolated", "on", "guard", "on",
        ],
    );
    assert_eq!(r["ok"], true, "{r}");
    let p = lan(&sock);
    assert_eq!(
        (&p["learning"], &p["isolated"], &p["guard"], &p["flood"]),
        (&json!(false), &json!(true), &json!(true), &json!(true)),
        "{p}"
    );
    let t = ctl(&sock, &["link", "show"])["text"].as_str().unwrap().to_string();
    assert!(
        t.contains("lan: mtu 1500 state forwarding learning off flood on"),
        "{t}"
    );
    for (words, kind) in [
        (&["link", "set", "dev", "lan", "learning", "maybe"][..], "usage"),
        (&["link", "set", "dev", "lan", "hairpin", "on"], "usage"),
        (&["link", "set", "dev", "nosuch", "flood", "off"], "not_found"),
    ] {
        let r = ctl(&sock, words);
        assert_eq!(
            (r["ok"].clone(), r["kind"].clone()),
            (json!(false), json!(kind)),
            "{words:?}: {r}"
        );
    }
    let r = ctl(&sock, &["mdb", "show"]);
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["data"][0]["mdb"].is_array(), "{r}");
    assert!(r["data"][0]["router"]["br0"].is_array(), "{r}");
    let s = ctl(&sock, &["stats"]);
    assert!(s["data"]["mdb"]["groups"].is_u64(), "{s}");
    stop(child, dir);
}

/// ECMP through the socket in `ip route`'s words: `nexthop via GW dev IFACE [weight 1]` per
/// hop, shown as `ip route` and `ip -j route` show such a route, replaced, deleted; a hop that
/// cannot be is refused with its reason and changes nothing.
#[test]
fn an_ecmp_route_is_added_shown_replaced_and_deleted_in_ip_route_s_words() {
    let (dir, sock, child) = running("ecmp", "");
    let route = |sock: &Path| -> (Vec<String>, Option<Value>) {
        let r = ctl(sock, &["route", "show"]);
        let text = r["text"].as_str().unwrap();
        let mut lines = Vec::new();
        let mut on = false;
        for l in text.lines() {
            if !l.starts_with('\t') {
                on = l.starts_with("10.8.0.0/24 ");
            }
            if on {
                lines.push(l.trim_end().to_string());
            }
        }
        let rows = r["data"].as_array().cloned().unwrap_or_default();
        let json = rows.into_iter().find(|x| x["dst"] == "10.8.0.0/24");
        (lines, json)
    };
    let add = ctl(
        &sock,
        &[
            "route",
            "add",
            "10.8.0.0/24",
            "nexthop",
            "via",
            "10.0.10.254",
            "dev",
            "lan",
            "nexthop",
            "via",
            "10.0.20.253",
            "dev",
            "wan",
            "weight",
            "1",
        ],
    );
    assert_eq!(add["ok"], true, "{add}");
    let (text, json) = route(&sock);
    assert_eq!(
        text,
        [
            "10.8.0.0/24 proto ctl",
            "\tnexthop via 10.0.10.254 dev lan weight 1",
            "\tnexthop via 10.0.20.253 dev wan weight 1",
        ],
        "as `ip route` prints it"
    );
    assert_eq!(
        json.unwrap(),
        json!({
            "dst": "10.8.0.0/24", "protocol": "ctl", "origin": "ctl", "flags": [],
            "nexthops": [
                {"gateway": "10.0.10.254", "dev": "lan", "weight": 1, "flags": []},
                {"gateway": "10.0.20.253", "dev": "wan", "weight": 1, "flags": []},
            ]
        }),
        "as `ip -j route` prints it (and Freeway's origin)"
    );
    // `route get` names both hops.
    let get = ctl(&sock, &["route", "get", "10.8.0.9"]);
    assert_eq!(
        get["text"], "10.8.0.9\n\tnexthop via 10.0.10.254 dev lan\n\tnexthop via 10.0.20.253 dev wan\n",
        "{get}"
    );
    // Added twice: refused, as `ip route add` refuses.
    let again = ctl(&sock, &["route", "add", "10.8.0.0/24", "nexthop", "via", "10.0.20.7"]);
    assert_eq!(again["kind"], "conflict", "{again}");

    // Bad hops: refused with the reason, nothing changed.
    // Each: the error's kind | the words after `route replace 10.8.0.0/24` | its message.
    let bad = r#"invalid | nexthop via 10.0.10.254 dev wan nexthop via 10.0.20.7 | via 10.0.10.254 dev wan: 10.0.10.254 is not on wan's subnet
not_found | nexthop via 10.0.20.7 dev dmz nexthop via 10.0.10.7 | dev "dmz": no such interface
invalid | nexthop via 10.0.20.7 weight 2 nexthop via 10.0.10.7 weight 1 | weight 2: the router's ECMP spreads flows equally
refused | nexthop via 10.0.20.1 nexthop via 10.0.10.7 | via 10.0.20.1: that is the router's own address
invalid | nexthop via 192.0.2.1 nexthop via 10.0.10.7 | via 192.0.2.1: on no interface's subnet
usage | nexthop via 10.0.20.7 bogus 1 | "bogus"
usage | nexthop dev | dev: which?"#;
    for row in bad.lines() {
        let f: Vec<&str> = row.split(" | ").collect();
        let (kind, words, msg) = (f[0], f[1], f[2]);
        let mut w = vec!["route", "replace", "10.8.0.0/24"];
        w.extend(words.split(' '));
        let r = ctl(&sock, &w);
        assert_eq!(r["ok"], false, "{words}: {r}");
        assert_eq!(r["kind"], kind, "{words}: {r}");
        assert!(r["error"].as_str().unwrap().contains(msg), "{words}: {r}");
    }
    assert_eq!(route(&sock).0.len(), 3, "the bad hops changed nothing");

    // Replaced: a hop through a gateway and a connected one; then one hop with its device.
    let r = ctl(
        &sock,
        &[
            "route",
            "replace",
            "10.8.0.0/24",
            "nexthop",
            "via",
            "10.0.20.7",
            "nexthop",
            "dev",
            "lan",
        ],
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        route(&sock).0,
        [
            "10.8.0.0/24 proto ctl",
            "\tnexthop dev lan weight 1",
            "\tnexthop via 10.0.20.7 dev wan weight 1",
        ]
    );
    let r = ctl(
        &sock,
        &["route", "replace", "10.8.0.0/24", "via", "10.0.20.7", "dev", "wan"],
    );
    assert_eq!(r["ok"], true, "{r}");
    let (text, json) = route(&sock);
    assert_eq!(text, ["10.8.0.0/24 via 10.0.20.7 dev wan proto ctl"]);
    assert_eq!(json.unwrap()["gateway"], "10.0.20.7");

    // Deleted.
    assert_eq!(ctl(&sock, &["route", "del", "10.8.0.0/24"])["ok"], true);
    assert_eq!(route(&sock), (Vec::new(), None));
    stop(child, dir);
}
