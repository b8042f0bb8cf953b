//! NAT through Freeway on real interfaces: h1 and h3 inside (10.1.0.0/24, router `lan`
//! 10.1.0.1), h2 outside (203.0.113.2/24, router `wan` 203.0.113.1) with no route to the
//! inside, so that only translated traffic can reach it and come back. Masquerade out of
//! `wan` (TCP with a content check, UDP both ways, ping), a port forward from the outside to
//! an inside server, and hairpin NAT (an inside host reaching that server by the router's
//! public address).

#[macro_use]
mod netbed;

use netbed::*;

const RULESET: &str = r#"table ip nat {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 203.0.113.1 tcp dport 8022 dnat to 10.1.0.3:22
		ip daddr 203.0.113.1 dnat to udp dport map { 5353 : 10.1.0.3 . 53 }
	}

	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "wan" masquerade
		iifname "lan" oifname "lan" ip saddr 10.1.0.0/24 masquerade
	}
}
table inet filter {
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "lan" accept
		iifname "wan" ip daddr 10.1.0.3 tcp dport 22 accept
		iifname "wan" ip daddr 10.1.0.3 udp dport 53 accept
	}
}
"#;

/// The bed: h1, h3 inside on VLAN 10, h2 outside on VLAN 20; Freeway routing between them
/// with [`RULESET`], a control socket, two workers.
fn nat_bed() -> Bed {
    let mut bed = Bed::up("nat");
    bed.host_on("h1", "10.1.0.2/24", Some("10.1.0.1"));
    bed.host_on("h3", "10.1.0.3/24", Some("10.1.0.1"));
    // No route to the inside: replies can only go to the router's public address.
    bed.host_on("h2", "203.0.113.2/24", None);
    let rules = bed.file("nat.nft", RULESET);
    let cfg = lan_wan_router(&[("lan", 10, "10.1.0.1/24"), ("wan", 20, "203.0.113.1/24")], &rules);
    bed.start_ctl(&cfg);
    bed
}

/// A UDP exchange: `server` (in node `srv`) answers one datagram on `port` with its peer's
/// address; the client in `cli` sends to `dst`:`dport` and returns what came back.
fn udp_exchange(bed: &Bed, srv: &str, port: u16, cli: &str, dst: &str, dport: u16) -> String {
    let server = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',{port}))\n\
         s.settimeout(10)\nb,a=s.recvfrom(100)\ns.sendto(b'seen '+a[0].encode()+b' '+b,a)\n"
    );
    let child = std::process::Command::new("ip")
        .args(["netns", "exec", &format!("fw-{srv}{}", bed.suffix)])
        .args(["python3", "-c", &server])
        .spawn()
        .expect("python3 runs");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let client = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(3)\n\
         for _ in range(3):\n    s.sendto(b'hello',('{dst}',{dport}))\n    try:\n        print(s.recv(100).decode()); break\n    except socket.timeout: pass\n"
    );
    let out = bed.exec(cli, &["python3", "-c", &client]);
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The port forwards, used from `client`: 1 MiB over TCP to h3's port 22 through
/// 203.0.113.1:8022, intact, and a UDP datagram to its port 53 through 203.0.113.1:5353,
/// which h3 sees coming from `seen_from`.
fn forwarded(bed: &Bed, client: &str, seen_from: &str) {
    assert_eq!(
        bed.tcp_transfer_via(client, "h3", 22, "203.0.113.1", 8022, 1),
        Some(true),
        "1 MiB intact from {client} through the port forward"
    );
    assert_eq!(
        udp_exchange(bed, "h3", 53, client, "203.0.113.1", 5353),
        format!("seen {seen_from} hello"),
        "UDP from {client} through the port forward"
    );
}

#[test]
fn masquerade_port_forward_and_hairpin() {
    need_root!();
    let bed = nat_bed();

    // Masquerade: the inside reaches the outside, which sees the router's address.
    assert!(bed.ping("h1", "203.0.113.2"), "h1 pings h2 through masquerade");
    bed.transfer_intact("h1", "h2", 5001, 2);
    assert_eq!(
        udp_exchange(&bed, "h2", 9999, "h1", "203.0.113.2", 9999),
        "seen 203.0.113.1 hello",
        "UDP out, seen from the router's address, and its answer back in"
    );
    let ct = bed.ctl(&["conntrack", "list"]);
    let text = ct["text"].as_str().unwrap();
    assert!(
        text.lines().any(|l| l.contains("src=10.1.0.2 dst=203.0.113.2 sport=")
            && l.contains("dport=5001 src=203.0.113.2 dst=203.0.113.1 sport=5001")),
        "conntrack -L shows the reply tuple to the router's address:\n{text}"
    );

    // A port forward: the outside reaches h3's port 22 as 203.0.113.1:8022, and UDP 5353 as
    // its port 53.
    forwarded(&bed, "h2", "203.0.113.2");
    // `ctl trace` shows the translation, and follows the packet to where it now goes.
    let r = bed.ctl(&[
        "trace",
        "in_port=h2,dl_dst=02:fe:00:00:00:01",
        "nw_src=203.0.113.2",
        "nw_dst=203.0.113.1",
        "tcp",
        "tp_src=40000",
        "tp_dst=8022",
    ]);
    let text = r["text"].as_str().unwrap();
    assert!(
        text.contains("nat prerouting from wan: dnat to 203.0.113.2:40000 -> 10.1.0.3:22 by rule 1 of chain ip nat prerouting (line 4)"),
        "{text}"
    );
    assert!(
        text.contains("destination 10.1.0.3: route 10.1.0.0/24 dev lan"),
        "{text}"
    );
    assert!(text.contains("nat postrouting to lan: not translated"), "{text}");

    // Other ports of the public address are not forwarded.
    assert_eq!(bed.tcp_transfer_via("h2", "h3", 23, "203.0.113.1", 8023, 1), None);

    // Hairpin: h1 reaches the forwarded service by the public address; h3 sees the router's
    // inside address, so its replies come back through the router.
    forwarded(&bed, "h1", "10.1.0.1");
    // In JSON too: translated connections are those whose replies go elsewhere than their
    // originator.
    let d = bed.ctl(&["conntrack", "list"]);
    let translated = d["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["reply"]["dst"] != r["original"]["src"] || r["reply"]["src"] != r["original"]["dst"])
        .count();
    assert!(translated >= 5, "translated connections listed: {d}");
}
