//! Golden output against iproute2: the same routes (single hop, ECMP, a default, one through a
//! device without a gateway), neighbours
//! and bridge FDB entries are put into a Linux network namespace (`ip route`, `ip neigh`,
//! `bridge fdb` on a scratch Linux bridge) and into a running Freeway (its configuration and
//! `freeway ctl`); then `ip -j route show`, `ip -j neigh show` and `bridge -j -s fdb show`
//! must equal `freeway route show -j`, `freeway neigh show -j` and `freeway fdb show -j` key
//! for key and value for value, and the text listings line for line. Where Freeway differs on
//! purpose, the test removes that one thing and says why:
//!
//! * routes: Freeway's `origin` key (who put the route in: `config`, `ctl`, `connected`,
//!   `linux`) has no kernel counterpart;
//! * neighbours: Freeway adds `ifindex` (its router interface's index, not a kernel one) and
//!   `updated_ms_ago`;
//! * FDB: the kernel names the bridge device a port belongs to (`master br0`); Freeway is the
//!   bridge and has no such device. Both give `used` and `updated` in seconds, as numbers
//!   (the kernel whole seconds, Freeway fractions), which are times and not compared.
//!   The scratch bridge filters VLANs (`vlan_filtering 1`) where the kernel can
//!   (`CONFIG_BRIDGE_VLAN_FILTERING`), and then each entry's VLAN is compared too. A kernel
//!   built without it refuses such a bridge ("Operation not supported"): the test then uses a
//!   plain bridge, adds the entries without `vlan`, and removes Freeway's `vlan` key (and the
//!   text's ` vlan N`) before comparing, since the kernel's entries have no VLAN to compare it
//!   with; it says so on standard error.
//!
//! Blackhole and unreachable routes are not compared: Freeway's RIB has no such route types.
//!
//! Needs root (see `netbed`: a loud skip elsewhere, a failure under CI); the FDB part also
//! needs a kernel with Linux bridge support (skipped loudly, a failure under CI, without).

#[macro_use]
mod netbed;

use std::process::Command;

use netbed::*;
use serde_json::Value;

/// The routes, the same in both: `ip route add` arguments and Freeway's `[[route]]`.
const KERNEL_ROUTES: &[&str] = &[
    "default via 10.0.20.254 proto static",
    "198.51.100.0/24 via 10.0.20.7 dev wan proto static",
    "10.9.0.0/24 proto static nexthop via 10.0.10.254 dev lan nexthop via 10.0.20.253 dev wan",
    "10.5.0.0/16 dev wan proto static",
];

const FREEWAY_ROUTES: &str = r#"
[[route]]
dst = "0.0.0.0/0"
via = "10.0.20.254"

[[route]]
dst = "198.51.100.0/24"
via = "10.0.20.7"

[[route]]
dst = "10.9.0.0/24"
via = ["10.0.10.254", "10.0.20.253"]

[[route]]
dst = "10.5.0.0/16"
dev = "wan"
"#;

/// An ECMP route added through the control socket (`freeway ctl route add` arguments) and
/// the same in the kernel, whose protocol number 77 (no name in `rt_protos`) stands for
/// Freeway's `proto ctl` in the comparison.
const CTL_ECMP: &str = "10.7.0.0/24 nexthop via 10.0.10.253 dev lan nexthop via 10.0.20.252 dev wan";
const CTL_PROTO: &str = "77";

/// Neighbours: (address, MAC, device). The first is configured, the second added with
/// `freeway ctl neigh add`.
const NEIGHS: &[(&str, &str, &str)] = &[
    ("10.0.20.9", "02:00:00:00:20:09", "wan"),
    ("10.0.10.5", "02:00:00:00:10:05", "lan"),
];

/// Static FDB entries: (MAC, port, VLAN). The first is configured, the second added with
/// `freeway ctl fdb add ... master static`.
const FDB: &[(&str, &str, u16)] = &[("02:00:00:00:00:99", "h1", 10), ("02:00:00:00:00:98", "h2", 20)];

/// A network namespace of the test's own, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(name: String) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run_ok(&["ip", "netns", "add", &name]);
        Netns(name)
    }

    /// Runs `cmd` in the namespace; returns whether it succeeded and its output.
    fn run(&self, cmd: &str) -> (bool, String) {
        let o = Command::new("ip")
            .args(["netns", "exec", &self.0, "sh", "-c", cmd])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (o.status.success(), text)
    }

    fn ok(&self, cmd: &str) -> String {
        let (ok, text) = self.run(cmd);
        assert!(ok, "{cmd}: {text}");
        text
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn run_ok(args: &[&str]) {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `freeway ARGS... --ctl SOCK`, which must succeed; its standard output.
fn freeway(bed: &Bed, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_freeway"))
        .args(args)
        .arg("--ctl")
        .arg(bed.sock())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "freeway {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json(text: &str) -> Vec<Value> {
    serde_json::from_str::<Value>(text)
        .unwrap_or_else(|e| panic!("{e}: {text}"))
        .as_array()
        .unwrap_or_else(|| panic!("a JSON array: {text}"))
        .clone()
}

/// The rows whose `key` is one of `keep`, sorted by it, with `drop` keys removed.
fn rows(v: Vec<Value>, key: &str, keep: &[&str], drop: &[&str]) -> Vec<Value> {
    let mut v: Vec<Value> = v
        .into_iter()
        .filter(|r| r[key].as_str().is_some_and(|k| keep.contains(&k)))
        .map(|mut r| {
            for d in drop {
                r.as_object_mut().unwrap().remove(*d);
            }
            r
        })
        .collect();
    v.sort_by_key(|r| r[key].as_str().unwrap().to_string());
    v
}

/// Text lines, without iproute2's trailing blanks, that start with one of `keep`, sorted.
fn lines(text: &str, keep: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .map(|l| l.trim_end().to_string())
        .filter(|l| keep.iter().any(|k| l.starts_with(&format!("{k} "))))
        .collect();
    v.sort();
    v
}

/// `line` without its ` vlan N` (the word `vlan` and the number after it), if it has one.
fn without_vlan(line: &str) -> String {
    match line.find(" vlan ") {
        Some(at) => {
            let rest = &line[at + " vlan ".len()..];
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            format!("{}{}", &line[..at], &rest[digits..])
        }
        None => line.to_string(),
    }
}

#[test]
fn routes_neighbours_and_fdb_entries_print_as_iproute2_prints_them() {
    need_root!();
    let mut bed = Bed::up("golden");
    let mut cfg = ports(1, &[("h1", 10), ("h2", 20)]);
    cfg.push_str(&format!(
        "\n[bridge]\nstatic = [{{ mac = \"{}\", vlan = {}, port = \"{}\" }}]\n",
        FDB[0].0, FDB[0].2, FDB[0].1
    ));
    cfg.push_str(
        "\n[router]\nmac = \"02:fe:00:00:00:01\"\n\n[[interface]]\nname = \"lan\"\nvlan = 10\naddr = [\"10.0.10.1/24\"]\n\n\
         [[interface]]\nname = \"wan\"\nvlan = 20\naddr = [\"10.0.20.1/24\"]\n",
    );
    cfg.push_str(FREEWAY_ROUTES);
    let (ip, mac, dev) = NEIGHS[0];
    cfg.push_str(&format!(
        "\n[[neigh]]\nip = \"{ip}\"\nmac = \"{mac}\"\ndev = \"{dev}\"\n"
    ));
    bed.start_ctl(&cfg);
    let mut add = vec!["route", "add"];
    add.extend(CTL_ECMP.split(' '));
    bed.ctl(&add);
    let (ip, mac, dev) = NEIGHS[1];
    bed.ctl(&["neigh", "add", ip, "lladdr", mac, "dev", dev]);
    let (mac, port, vlan) = FDB[1];
    bed.ctl(&[
        "fdb",
        "add",
        mac,
        "dev",
        port,
        "master",
        "static",
        "vlan",
        &vlan.to_string(),
    ]);

    // The kernel: the router's interfaces as veths of the same names and addresses.
    let k = Netns::new(format!("fw-gold-k{}", std::process::id()));
    for (d, a) in [("lan", "10.0.10.1/24"), ("wan", "10.0.20.1/24")] {
        k.ok(&format!(
            "ip link add {d} type veth peer name {d}-p && ip link set {d}-p up && ip link set {d} up && \
             ip addr add {a} dev {d}"
        ));
    }
    for r in KERNEL_ROUTES {
        k.ok(&format!("ip route add {r}"));
    }
    let (dst, hops) = CTL_ECMP.split_once(' ').unwrap();
    k.ok(&format!("ip route add {dst} proto {CTL_PROTO} {hops}"));
    for (ip, mac, dev) in NEIGHS {
        k.ok(&format!("ip neigh add {ip} lladdr {mac} dev {dev} nud permanent"));
    }

    // Routes: every one, in the same order, text line for line.
    let kernel = k.ok("ip route show");
    let fw = freeway(&bed, &["route", "show"]).replace(" proto ctl", &format!(" proto {CTL_PROTO}"));
    let trim = |t: &str| t.lines().map(|l| l.trim_end().to_string()).collect::<Vec<_>>();
    assert_eq!(trim(&fw), trim(&kernel), "freeway route show vs ip route show");
    let kj = json(&k.ok("ip -j route show"));
    let fj: Vec<Value> = json(&freeway(&bed, &["route", "show", "-j"]))
        .into_iter()
        .map(|mut r| {
            // Freeway's own key: who put the route in.
            r.as_object_mut().unwrap().remove("origin");
            if r["protocol"] == "ctl" {
                r["protocol"] = CTL_PROTO.into();
            }
            r
        })
        .collect();
    assert_eq!(fj, kj, "freeway route show -j vs ip -j route show");

    // Neighbours.
    let addrs: Vec<&str> = NEIGHS.iter().map(|n| n.0).collect();
    assert_eq!(
        lines(&freeway(&bed, &["neigh", "show"]), &addrs),
        lines(&k.ok("ip neigh show"), &addrs),
        "freeway neigh show vs ip neigh show"
    );
    let kj = rows(json(&k.ok("ip -j neigh show")), "dst", &addrs, &[]);
    let fj = rows(
        json(&freeway(&bed, &["neigh", "show", "-j"])),
        "dst",
        &addrs,
        &["ifindex", "updated_ms_ago"],
    );
    assert_eq!(kj.len(), NEIGHS.len(), "{kj:?}");
    assert_eq!(fj, kj, "freeway neigh show -j vs ip -j neigh show");

    // The FDB, on a scratch Linux bridge whose ports have Freeway's ports' names and VLANs.
    // Without VLAN filtering in the kernel, a plain bridge: entries without VLANs.
    let (vlans, why) = k.run("ip link add br0 type bridge vlan_filtering 1");
    if !vlans {
        let (bridge, plain_why) = k.run("ip link add br0 type bridge");
        if !bridge {
            freeway_testkit::skip(format!(
                "this kernel has no Linux bridge ({}): FDB not compared",
                plain_why.trim()
            ));
            bed.stop();
            return;
        }
        eprintln!(
            "this kernel's bridge does not filter VLANs ({}): FDB entries compared without their VLAN",
            why.trim()
        );
    }
    k.ok("ip link set br0 up");
    for (_, port, vlan) in FDB {
        let pvid = if vlans {
            format!(" && bridge vlan add dev {port} vid {vlan} pvid untagged")
        } else {
            String::new()
        };
        k.ok(&format!(
            "ip link add {port} type veth peer name {port}-p && ip link set {port} master br0 && \
             ip link set {port} up && ip link set {port}-p up{pvid}"
        ));
    }
    for (mac, port, vlan) in FDB {
        let vlan = if vlans { format!(" vlan {vlan}") } else { String::new() };
        k.ok(&format!("bridge fdb add {mac} dev {port} master static{vlan}"));
    }
    let macs: Vec<&str> = FDB.iter().map(|f| f.0).collect();
    // The kernel's `master br0`: Freeway is the bridge, it has no bridge device to name.
    let no_master = k.ok("bridge fdb show").replace(" master br0", "");
    let mut fw_lines = lines(&freeway(&bed, &["fdb", "show"]), &macs);
    if !vlans {
        fw_lines = fw_lines.iter().map(|l| without_vlan(l)).collect();
    }
    assert_eq!(
        fw_lines,
        lines(&no_master, &macs),
        "freeway fdb show vs bridge fdb show"
    );
    let times = |rows: &mut Vec<Value>| {
        for r in rows.iter_mut() {
            for t in ["used", "updated"] {
                assert!(r[t].is_number(), "{t} in seconds: {r}");
                r.as_object_mut().unwrap().remove(t);
            }
        }
    };
    let mut kj = rows(json(&k.ok("bridge -j -s fdb show")), "mac", &macs, &["master"]);
    let fw_drop: &[&str] = if vlans { &[] } else { &["vlan"] };
    let mut fj = rows(json(&freeway(&bed, &["fdb", "show", "-j"])), "mac", &macs, fw_drop);
    times(&mut kj);
    times(&mut fj);
    assert_eq!(kj.len(), FDB.len(), "{kj:?}");
    assert_eq!(fj, kj, "freeway fdb show -j vs bridge -j -s fdb show");
    bed.stop();
}
