//! The kernel route mirror (`[linux] mirror`) on real namespaces: routes of the kernel table
//! of Freeway's namespace, present at start or added and removed while it runs, are in
//! Freeway's RIB with their protocol, and traffic follows them; the kernel's neighbour
//! entries on the interfaces' devices, present at start or added later, are in Freeway's
//! neighbour table.
//!
//! The router interfaces' kernel devices are veths here, named after the interfaces (the
//! mirror matches devices by name).

#[macro_use]
mod netbed;
use netbed::*;

use std::time::{Duration, Instant};

/// Waits (bounded) until `route show` satisfies `ok`; returns the last text.
fn route_show_until(bed: &Bed, ok: impl Fn(&str) -> bool) -> String {
    show_until(bed, &["route", "show"], ok)
}

/// Waits (bounded) until the text of the request `words` satisfies `ok`; returns it.
fn show_until(bed: &Bed, words: &[&str], ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = bed.ctl(words);
        let text = r["text"].as_str().unwrap().to_string();
        if ok(&text) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kernel_routes_are_mirrored_and_forwarded() {
    need_root!();
    let mut bed = Bed::two_subnets("lcp");
    // h2 owns 10.9.0.1 and 10.8.0.1 (behind the router, via h2).
    bed.sh_ok("h2", "ip addr add 10.9.0.1/32 dev lo && ip addr add 10.8.0.1/32 dev lo");
    // The kernel side of Freeway's namespace: the interfaces' devices, and a route that is
    // there before Freeway starts (read by the start-up dump). The kernel must not answer
    // ARP for the router's addresses on the ports' devices (arp_ignore).
    bed.sh_ok(
        "sw",
        "sysctl -qw net.ipv4.conf.all.arp_ignore=1 && ip link add v10 type veth peer name v10p && ip link add v20 type veth peer name v20p \
         && ip link set v10p up && ip link set v20p up && ip link set v10 up && ip link set v20 up \
         && ip addr add 10.1.0.1/24 dev v10 && ip addr add 10.2.0.1/24 dev v20 \
         && ip route add 10.9.0.0/16 via 10.2.0.2 dev v20 proto bird \
         && ip route add 10.7.0.0/16 via 10.2.0.2 dev v20 proto static \
         && ip neigh add 10.1.0.66 lladdr 02:00:00:00:00:66 dev v10 nud permanent",
    );
    let mut cfg = routed_ports();
    cfg.push_str("\n[linux]\nmirror = true\nprotocols = [\"bird\", \"zebra\"]\n");
    bed.start_ctl(&cfg);
    let text = route_show_until(&bed, |t| t.contains("10.9.0.0/16"));
    assert!(
        text.contains("10.9.0.0/16 via 10.2.0.2 dev v20 proto bird\n"),
        "the start-up dump's route, with its protocol: {text}"
    );
    assert!(!text.contains("10.7.0.0/16"), "proto static is filtered out: {text}");
    assert!(text.contains("10.1.0.0/24 dev v10 proto kernel scope link"), "{text}");
    assert!(
        bed.ping("h1", "10.9.0.1"),
        "h1 reaches 10.9.0.1 through the mirrored route: {} {}",
        bed.ctl(&["stats"])["data"]["router"],
        bed.ctl(&["neigh", "show"])["text"]
    );

    // Kernel neighbours: the one there at start (dump), one added while running (notified).
    bed.sh_ok(
        "sw",
        "ip neigh add 10.2.0.77 lladdr 02:00:00:00:00:77 dev v20 nud permanent",
    );
    let neigh = show_until(&bed, &["neigh", "show"], |t| t.contains("10.2.0.77"));
    assert!(neigh.contains("10.1.0.66 dev v10 lladdr 02:00:00:00:00:66"), "{neigh}");
    assert!(neigh.contains("10.2.0.77 dev v20 lladdr 02:00:00:00:00:77"), "{neigh}");

    // A route added while running (a notification), ECMP over both subnets' gateways.
    bed.sh_ok(
        "sw",
        "ip route add 10.8.0.0/16 proto zebra nexthop via 10.2.0.2 dev v20 nexthop via 10.1.0.2 dev v10",
    );
    let text = route_show_until(&bed, |t| t.contains("10.8.0.0/16"));
    assert!(
        text.contains(
            "10.8.0.0/16 proto zebra\n\tnexthop via 10.1.0.2 dev v10 weight 1\n\tnexthop via 10.2.0.2 dev v20 weight 1"
        ),
        "{text}"
    );
    let j = bed.ctl(&["route", "show"]);
    let row = j["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["dst"] == "10.8.0.0/16")
        .cloned()
        .unwrap();
    assert_eq!(row["protocol"], "zebra", "{row}");
    assert_eq!(row["origin"], "linux", "{row}");

    // Replaced in the kernel: the mirror follows; deleted: gone, and traffic to it is
    // counted as having no route.
    bed.sh_ok("sw", "ip route replace 10.8.0.0/16 via 10.2.0.2 dev v20 proto zebra");
    let text = route_show_until(&bed, |t| t.contains("10.8.0.0/16 via 10.2.0.2 dev v20 proto zebra"));
    assert!(text.contains("10.8.0.0/16 via 10.2.0.2 dev v20 proto zebra"), "{text}");
    assert!(bed.ping("h1", "10.8.0.1"), "h1 reaches 10.8.0.1");
    bed.sh_ok("sw", "ip route del 10.9.0.0/16");
    let text = route_show_until(&bed, |t| !t.contains("10.9.0.0/16"));
    assert!(!text.contains("10.9.0.0/16"), "{text}");
    let no_route = || {
        let st = bed.ctl(&["stats"]);
        st["data"]["router"]["l3"]["drops"]["no_route"].as_u64().unwrap_or(0)
    };
    let before = no_route();
    let answered = bed
        .exec("h1", &["ping", "-c", "1", "-W", "1", "10.9.0.1"])
        .status
        .success();
    assert!(
        !answered && no_route() > before,
        "the withdrawn prefix is counted as no route"
    );
    bed.stop();
}

/// A TCP echo server in namespace `ns` on `port` (one connection), started in the background.
fn echo_server(ns: &str, port: u16) -> std::process::Child {
    let py = format!(
        "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('0.0.0.0',{port}))\ns.listen(1)\ns.settimeout(10)\nc,_=s.accept()\nc.sendall(c.recv(100).upper())\nc.close()\n"
    );
    std::process::Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", &py])
        .spawn()
        .expect("python3 runs")
}

#[test]
fn the_kernel_twin_answers_tcp_to_the_routers_address() {
    need_root!();
    let mut bed = Bed::two_subnets("punt");
    bed.start_ctl(&routed_ports_punted());
    // The twins exist with the interfaces' addresses.
    let o = bed.sh_ok("sw", "ip -br addr show dev v10; ip -br addr show dev v20");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("10.1.0.1/24") && text.contains("10.2.0.1/24"), "{text}");
    let mut srv = echo_server(&format!("fw-sw{}", bed.suffix), 7179);
    std::thread::sleep(Duration::from_millis(300));
    // h1 talks TCP to the router's address: the SYN is punted to the twin, the kernel's
    // answers are routed out by Freeway.
    let c = bed.exec(
        "h1",
        &[
            "python3",
            "-c",
            "import socket\ns=socket.create_connection(('10.1.0.1',7179),timeout=5)\ns.sendall(b'hello')\nprint(s.recv(100).decode())",
        ],
    );
    let _ = srv.wait();
    assert_eq!(
        String::from_utf8_lossy(&c.stdout).trim(),
        "HELLO",
        "{}",
        String::from_utf8_lossy(&c.stderr)
    );
    assert!(bed.ping("h1", "10.1.0.1"), "Freeway still answers pings itself");
    let st = bed.ctl(&["stats"]);
    let l3 = &st["data"]["router"]["l3"];
    assert!(l3["punted"].as_u64().unwrap() >= 3, "{l3}");
    assert!(l3["twin_tx"].as_u64().unwrap() >= 2, "{l3}");
    bed.stop();
}
