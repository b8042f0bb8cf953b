//! Growing past one box: two Freeway nodes, each with its own BIRD speaking BGP through the
//! punt path, announce the same prefix to an upstream BIRD, whose kernel protocol merges the
//! two routes into one ECMP route (`merge paths`). The upstream's flows (many source ports,
//! hashed on layer 4) spread over both nodes; when one node stops, the upstream's BGP hold
//! time (3 s) runs out, the route loses that path and every flow goes through the other.
//!
//! Two beds: bed `a` gives the upstream (its h1: the flows' source and the upstream BIRD), the
//! server (its h2: 192.0.2.1 behind both nodes) and node A (its switch namespace); bed `b`
//! gives node B (its switch namespace), joined to the upstream and the server by one more
//! veth each.
//!
//! ```text
//!                 eth0 10.1.0.2 -- [h1 A port] node A [h2 A port] -- 10.2.0.2 eth0
//!   upstream (h1a)                                                             server (h2a)
//!                 eth1 10.3.0.2 -- [uplink] node B [downlink] -- 10.4.0.2 eth1
//! ```

#[macro_use]
mod netbed;
use netbed::bird::{bird_installed, wait_for, Bird};
use netbed::*;

use std::time::Duration;

const HOLD: u32 = 3;

/// A node's configuration: ports (`up`, `down`) on VLANs 10 and 20, router interfaces v10
/// (`up_net`.1) and v20 (`down_net`.1), the announced prefix routed to the server, the punt
/// path for BGP.
fn node(mac: u8, up: &str, down: &str, up_net: &str, down_net: &str) -> String {
    let mut cfg = ports(2, &[(up, 10), (down, 20)]);
    cfg.push_str(&format!("\n[router]\nmac = \"02:fe:00:00:00:{mac:02x}\"\n"));
    for (n, net) in [(1, up_net), (2, down_net)] {
        cfg.push_str(&format!(
            "\n[[interface]]\nname = \"v{n}0\"\nvlan = {n}0\naddr = [\"{net}.1/24\"]\n"
        ));
    }
    cfg.push_str(&format!(
        "\n[[route]]\ndst = \"192.0.2.0/24\"\nvia = \"{down_net}.2\"\n\n[linux]\npunt = true\n"
    ));
    cfg
}

/// A node's BIRD: announces 192.0.2.0/24 to the upstream at `up_net`.2.
fn node_bird(up_net: &str) -> String {
    format!(
        "router id {up_net}.1;\nprotocol device {{ scan time 1; }}\n\
         protocol static ann {{ ipv4; route 192.0.2.0/24 blackhole; }}\n\
         protocol bgp up {{\n  local {up_net}.1 as 65001;\n  neighbor {up_net}.2 as 65000;\n  hold time {HOLD};\n  \
         keepalive time 1;\n  connect retry time 1;\n  ipv4 {{ import none; export all; }};\n}}\n"
    )
}

/// The upstream's BIRD: a session to each node, the routes merged into ECMP in the kernel.
fn upstream_bird() -> String {
    let mut s = String::from(
        "router id 10.1.0.2;\nprotocol device { scan time 1; }\n\
         protocol kernel { merge paths yes; ipv4 { import none; export all; }; }\n",
    );
    for (name, net) in [("a", "10.1.0"), ("b", "10.3.0")] {
        s.push_str(&format!(
            "protocol bgp {name} {{\n  local {net}.2 as 65000;\n  neighbor {net}.1 as 65001;\n  hold time {HOLD};\n  \
             keepalive time 1;\n  connect retry time 1;\n  ipv4 {{ import all; export none; }};\n}}\n"
        ));
    }
    s
}

/// Sends `per_flow` UDP datagrams to 192.0.2.1 from each of `flows` source ports.
fn flows(bed: &Bed, flows: u16, per_flow: u16) {
    let py = format!(
        "import socket\nfor sp in range(20000, 20000 + {flows}):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    \
         s.bind(('0.0.0.0', sp))\n    for _ in range({per_flow}):\n        s.sendto(b'x' * 64, ('192.0.2.1', 9))\n    s.close()\n"
    );
    bed.exec("h1", &["python3", "-c", &py]);
}

#[test]
fn two_nodes_share_flows_by_bgp_ecmp_and_one_takes_over() {
    need_root!();
    if !bird_installed() {
        freeway_testkit::skip("bird2 (bird, birdc) is not installed");
        return;
    }
    let mut a = Bed::up("soa");
    let mut b = Bed::up("sob");
    two_subnets(&a);
    let (up, srv, swb) = (
        format!("fw-h1{}", a.suffix),
        format!("fw-h2{}", a.suffix),
        format!("fw-sw{}", b.suffix),
    );
    // Node B's links: upstream eth1 <-> B's port `uplink`, server eth1 <-> B's port `downlink`.
    for (host, port, net) in [(&up, "uplink", "10.3.0"), (&srv, "downlink", "10.4.0")] {
        let sh = format!(
            "ip link add eth1 netns {host} type veth peer name {port} netns {swb} \
             && ip netns exec {host} ethtool -K eth1 tx off sg off tso off gso off gro off \
             && ip netns exec {swb} ethtool -K {port} tx off sg off tso off gso off gro off \
             && ip -n {host} addr add {net}.2/24 dev eth1 && ip -n {host} link set eth1 up \
             && ip -n {swb} link set dev {port} up"
        );
        let o = std::process::Command::new("sh").args(["-c", &sh]).output().unwrap();
        assert!(o.status.success(), "{sh}: {}", String::from_utf8_lossy(&o.stderr));
    }
    // The server answers nothing; it owns 192.0.2.1. The upstream hashes flows on ports.
    a.sh_ok("h2", "ip addr add 192.0.2.1/32 dev lo");
    a.sh_ok("h1", "sysctl -qw net.ipv4.fib_multipath_hash_policy=1");
    a.start_ctl(&node(1, "h1", "h2", "10.1.0", "10.2.0"));
    b.start_ctl(&node(2, "uplink", "downlink", "10.3.0", "10.4.0"));

    let up_bird = Bird::start(&a, "upstream", "h1", &upstream_bird());
    let _bird_a = Bird::start(&a, "node", "sw", &node_bird("10.1.0"));
    let _bird_b = Bird::start(&b, "node", "sw", &node_bird("10.3.0"));
    let both = wait_for(Duration::from_secs(30), || {
        up_bird.session_of("a").contains("Established") && up_bird.session_of("b").contains("Established")
    });
    assert!(
        both.is_some(),
        "both sessions up: {} / {}",
        up_bird.session_of("a"),
        up_bird.session_of("b")
    );
    let route = || String::from_utf8_lossy(&a.sh("h1", "ip route show 192.0.2.0/24").stdout).to_string();
    let ecmp = wait_for(Duration::from_secs(10), || {
        let r = route();
        r.contains("nexthop via 10.1.0.1") && r.contains("nexthop via 10.3.0.1")
    });
    assert!(
        ecmp.is_some(),
        "the upstream's kernel route has both nodes: {}",
        route()
    );

    // Flows from 64 source ports spread over both nodes.
    assert!(
        a.ping("h1", "10.1.0.1") && a.ping("h1", "10.3.0.1"),
        "the upstream reaches both nodes"
    );
    let (a0, b0) = (a.rx("h1"), b.rx("uplink"));
    flows(&a, 64, 10);
    let (da, db) = (a.rx("h1") - a0, b.rx("uplink") - b0);
    assert!(da > 0 && db > 0, "flows spread over both nodes: A {da}, B {db}");
    assert!(da + db >= 640, "every datagram went through a node: A {da}, B {db}");
    println!("640 datagrams in 64 flows: node A {da}, node B {db}");

    // Node B stops: the upstream's hold time runs out, the route keeps only A.
    b.stop();
    let moved = wait_for(Duration::from_secs(u64::from(HOLD) * 4), || {
        let r = route();
        !r.contains("10.3.0.1") && r.contains("via 10.1.0.1")
    });
    assert!(moved.is_some(), "the upstream dropped node B's path: {}", route());
    println!(
        "node B stopped: its path gone from the upstream after {:?} (hold time {HOLD} s)",
        moved.unwrap()
    );
    let a1 = a.rx("h1");
    flows(&a, 64, 10);
    let da = a.rx("h1") - a1;
    assert!(da >= 640, "every flow goes through node A now: {da} of 640");
    a.stop();
}
