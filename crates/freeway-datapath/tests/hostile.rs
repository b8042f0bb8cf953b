//! Hostile traffic through the whole pipeline: a flood of a million source MACs against the
//! FDB's learning limit and a SYN flood of a million connections against a 64k connection
//! table, each while known hosts keep talking, and a flood of malformed and TTL-expiring
//! frames at the router. Everything is counted, memory stays bounded, the good traffic flows.

mod common;
use common::{access, csum, lan_neigh, lan_wan_interfaces, pcap_port, port, run, wan_neigh, write_pcap, TempDir};

/// The router, its ICMP errors limited to a burst of 50 then 100 per second, with the
/// interfaces lan and wan and both hosts as neighbours.
fn router() -> String {
    format!(
        "\n[router]\nmac = \"02:fe:00:00:00:01\"\nicmp_rate = 100\nicmp_burst = 50\n{}{}{}",
        lan_wan_interfaces(),
        lan_neigh(),
        wan_neigh()
    )
}

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s.split_whitespace().nth(1).and_then(|x| x.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Memory the run may add to the process (buffer pools, rings, preallocated tables); a table
/// that grew with the attack would need far more (a million FDB entries or connections).
const RSS_BOUND: u64 = 160 << 20;

#[test]
fn a_mac_flood_of_a_million_sources_stops_at_the_learning_limit_and_known_hosts_keep_forwarding() {
    const FLOOD: u64 = 1_000_000;
    const GOOD: u64 = 50_000;
    const LIMIT: u64 = 4096;
    // One worker, ports polled in order: the two known hosts' first frames (and so their
    // learn requests) come before the flood's.
    let host_a = format!(r#"src_macs = ["02:00:00:00:00:0a"], dst_macs = ["02:00:00:00:00:0b"], count = {GOOD}"#);
    let host_b = format!(r#"src_macs = ["02:00:00:00:00:0b"], dst_macs = ["02:00:00:00:00:0a"], count = {GOOD}"#);
    let attacker = format!(
        r#"src_macs = ["06:00:00:00:00:00"], src_mac_count = {FLOOD}, dst_macs = ["02:00:00:00:00:0a"], flows = 1024, count = {FLOOD}"#
    );
    let text = [
        "workers = 1\n".to_string(),
        port("host-a", "gen", "", &host_a),
        port("host-b", "gen", "", &host_b),
        port("attacker", "gen", "", &attacker),
        format!("[bridge]\nlearn_limit = {LIMIT}\n"),
    ]
    .concat();
    let before = rss();
    let res = run(&text);
    let grew = rss().saturating_sub(before);
    let s = &res.last;
    assert_eq!(s.fdb_entries as u64, LIMIT, "the FDB stays at its limit: {:?}", s.fdb);
    // Every source the table could not take is counted: refused at the limit or dropped
    // from a full learn queue (the workers' recent-learn filter spares repeats).
    let refused = s.fdb["limit_reached"] + s.bridge["learn_queue_full"];
    assert!(refused >= FLOOD - LIMIT - 2 * 1024, "{:?} {:?}", s.fdb, s.bridge);
    let port = |n: &str| s.ports.iter().find(|p| p.name == n).unwrap();
    assert_eq!(port("attacker").rx_packets, FLOOD);
    // The known hosts kept each other: each of host-a's frames reached host-b once (and
    // host-b saw nothing else but the few flood frames flooded before host-a was learned);
    // host-a got host-b's frames and the flood (addressed to it), each exactly once.
    assert_eq!(port("host-a").tx_packets, GOOD + FLOOD);
    let b = port("host-b").tx_packets;
    assert!(b >= GOOD && b - GOOD <= s.bridge["flooded"], "{b} {:?}", s.bridge);
    assert!(
        s.bridge["forwarded"] >= FLOOD,
        "the flood itself was forwarded, not flooded: {:?}",
        s.bridge
    );
    assert!(
        res.fdb.iter().any(|e| e.mac.to_string() == "02:00:00:00:00:0a")
            && res.fdb.iter().any(|e| e.mac.to_string() == "02:00:00:00:00:0b"),
        "both known hosts are in the FDB"
    );
    assert!(grew < RSS_BOUND, "memory grew by {} MiB", grew >> 20);
    eprintln!(
        "MAC flood: {FLOOD} sources, FDB {} entries, {} refused at the limit, {} learn requests dropped (queue full), RSS +{} MiB",
        s.fdb_entries,
        s.fdb["limit_reached"],
        s.bridge["learn_queue_full"],
        grew >> 20
    );
}

#[test]
fn a_syn_flood_fills_the_table_to_its_limit_and_established_traffic_keeps_flowing() {
    const GOOD: u64 = 100_000;
    const SYNS: u64 = 1_000_000;
    const MAX: u64 = 65_536;
    // One worker: the ports are polled in order, so the LAN host's flow is established
    // (its first request, then the server's first reply) before the flood fills the table.
    let lan = format!(
        r#"src_macs = ["02:00:00:00:10:05"], dst_macs = ["02:fe:00:00:00:01"], src_ip = "10.0.10.5", dst_ip = "10.0.20.7", src_port = 1024, dst_port = 5001, count = {GOOD}"#
    );
    let wan = format!(
        r#"src_macs = ["02:00:00:00:20:07"], dst_macs = ["02:fe:00:00:00:01"], src_ip = "10.0.20.7", dst_ip = "10.0.10.5", src_port = 5001, dst_port = 1024, count = {GOOD}"#
    );
    let flood = format!(
        r#"src_macs = ["02:00:00:00:20:66"], dst_macs = ["02:fe:00:00:00:01"], src_ip = "10.0.30.1", dst_ip = "10.0.10.5", proto = "tcp", dst_port = 80, flows = {SYNS}, count = {SYNS}"#
    );
    let text = [
        "workers = 1\n".to_string(),
        port("lan", "gen", &access(10), &lan),
        port("wan", "gen", &access(20), &wan),
        port("flood", "gen", &access(20), &flood),
        router(),
        format!(
            r#"
[[route]]
dst = "10.0.30.0/24"
via = "10.0.20.7"

[conntrack]
max = {MAX}

[firewall]
allow_new_from = ["lan", "flood"]
"#
        ),
    ]
    .concat();
    let before = rss();
    let res = run(&text);
    let grew = rss().saturating_sub(before);
    assert!(grew < RSS_BOUND, "memory grew by {} MiB", grew >> 20);
    eprintln!("SYN flood: {SYNS} SYNs, table max {MAX}, RSS +{} MiB", grew >> 20);
    let s = &res.last;
    let ct = s.conntrack.as_ref().unwrap();
    let fw = s.firewall.as_ref().unwrap();
    assert_eq!(ct.connections as u64, MAX, "the table stops at its limit: {ct:?}");
    assert_eq!(ct.max as u64, MAX);
    assert_eq!(res.connections.len() as u64, MAX);
    // The flood created the rest of the table and nothing more; every SYN was either
    // tracked (new: created, or a repeat of one created) or refused by the limit, counted.
    assert_eq!(ct.created as u64, MAX, "{ct:?}");
    assert!(fw.drop_limit > SYNS / 2, "{fw:?}");
    assert_eq!(
        ct.invalid_by_reason.get("limit_global").copied(),
        Some(fw.drop_limit),
        "{ct:?}"
    );
    let lan_new = 2 * GOOD - ct.established; // every wan reply is established
    assert_eq!(ct.new - lan_new + fw.drop_limit, SYNS, "{ct:?}");
    // The established flow never noticed: every request reached wan, every reply lan.
    let port = |n: &str| s.ports.iter().find(|p| p.name == n).unwrap();
    assert_eq!(port("lan").rx_packets, GOOD);
    assert_eq!(port("wan").tx_packets, GOOD, "requests routed to the server");
    let syns_accepted = ct.new - lan_new;
    assert_eq!(
        port("lan").tx_packets,
        GOOD + syns_accepted,
        "the replies, and the SYNs the table took, routed to the client"
    );
    assert_eq!(fw.accept_established, ct.established);
    assert_eq!(fw.accept_new, ct.new);
    assert!(res
        .connections
        .iter()
        .any(|c| c.proto == "udp" && c.orig.src == "10.0.10.5".parse::<std::net::IpAddr>().unwrap()));
}

fn ipv4(ttl: u8, ihl: u8, total_len: u16, good_csum: bool) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x02, 0xfe, 0, 0, 0, 1, 0x02, 0, 0, 0, 0x10, 0x05, 0x08, 0x00]);
    let mut ip = vec![
        0x40 | ihl,
        0,
        (total_len >> 8) as u8,
        total_len as u8,
        0,
        1,
        0,
        0,
        ttl,
        17,
        0,
        0,
        10,
        0,
        10,
        5,
        10,
        0,
        20,
        7,
    ];
    let c = if good_csum { csum(&ip) } else { csum(&ip) ^ 0x5555 };
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x04, 0x00, 0x13, 0x89, 0, 26, 0, 0]);
    f.extend(std::iter::repeat_n(0xab, 18));
    f
}

#[test]
fn malformed_and_ttl_expiring_floods_are_counted_rate_limited_and_never_forwarded() {
    const EACH: usize = 2_000;
    let dir = TempDir::new("hostile");
    let good = ipv4(64, 5, 46, true);
    let kinds: Vec<(&str, Vec<u8>)> = vec![
        ("ttl 1", ipv4(1, 5, 46, true)),
        ("ttl 0", ipv4(0, 5, 46, true)),
        ("bad checksum", ipv4(64, 5, 46, false)),
        ("ihl 4", ipv4(64, 4, 46, true)),
        ("ihl 15 past the end", ipv4(64, 15, 46, true)),
        ("total length past the frame", ipv4(64, 5, 1400, true)),
        ("total length below the header", ipv4(64, 5, 12, true)),
        ("truncated in the IP header", good[..24].to_vec()),
        ("runt", good[..10].to_vec()),
    ];
    let mut frames = Vec::new();
    for i in 0..EACH {
        for (_, f) in &kinds {
            frames.push(f.clone());
        }
        if i % 10 == 0 {
            frames.push(good.clone());
        }
    }
    let [input, wan_out, lan_out] = dir.files(["in.pcap", "wan.pcap", "lan.pcap"]);
    write_pcap(&input, &frames);
    let text = format!(
        "workers = 1\n{}{}{}",
        pcap_port("lan", &access(10), Some(&input), Some(&lan_out)),
        pcap_port("wan", &access(20), None, Some(&wan_out)),
        router()
    );
    let t = std::time::Instant::now();
    let res = run(&text);
    let secs = t.elapsed().as_secs_f64();
    let s = &res.last;
    let l3 = &s.router.as_ref().unwrap().l3;
    let good_n = EACH.div_ceil(10) as u64;
    // Only the good frames leave on wan.
    assert_eq!(s.ports[1].tx_packets, good_n, "{:?}", l3);
    assert_eq!(l3.forwarded_v4, good_n);
    // Every bad frame is accounted for, by the parser or by the router.
    let parse: u64 = s.parse_drops.values().sum();
    let routed_drops: u64 = l3.drops.values().sum();
    let bad = (kinds.len() * EACH) as u64;
    assert_eq!(
        parse + routed_drops,
        bad,
        "parser {:?}, router {:?}",
        s.parse_drops,
        l3.drops
    );
    // TTL 1 and 0 expire: 2 × EACH of them, but ICMP errors stay within the bucket
    // (burst 50, then 100 per second).
    assert_eq!(l3.drops.get("ttl_expired").copied(), Some(2 * EACH as u64), "{l3:?}");
    let allowed = 50 + (100.0 * secs).ceil() as u64 + 1;
    assert!(
        l3.icmp_errors_tx <= allowed,
        "{} ICMP errors in {secs:.2} s",
        l3.icmp_errors_tx
    );
    assert!(l3.icmp_errors_tx >= 1, "some time-exceeded went out");
    assert_eq!(
        s.ports[0].tx_packets, l3.icmp_errors_tx,
        "nothing else goes back to lan"
    );
}
