//! The integrated pipeline, end to end and deterministic: pcap in → parse → conntrack and
//! firewall → bridge → router → bridge → taps → pcap out, with one worker (offline: FDB and
//! neighbour learning apply inline). Every output is read back and checked byte by byte
//! against what a router, a stateful firewall and a capture tap must do.

use freeway_datapath::config;
use freeway_datapath::runtime::RunResult;
use pcap_file::pcapng::{Block, PcapNgReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod common;
use common::{access, csum, interface, lan_neigh, neigh, pcap_port, read_pcap, run, write_pcap, TempDir};

const ROUTER: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
const LAN_HOST: [u8; 6] = [0x02, 0, 0, 0, 0x10, 0x05];
const WAN_HOST: [u8; 6] = [0x02, 0, 0, 0, 0x20, 0x07];
const INTRUDER: [u8; 6] = [0x02, 0, 0, 0, 0x20, 0x66];
const BCAST: [u8; 6] = [0xff; 6];

const LAN_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 10, 5);
const WAN_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 20, 7);
const INTRUDER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 20, 66);
const LAN_GW: Ipv4Addr = Ipv4Addr::new(10, 0, 10, 1);

// ---- frames ----

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    // Ethernet minimum (without FCS).
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, ttl: u8, id: u16, l4: &[u8]) -> Vec<u8> {
    let tot = (20 + l4.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&tot.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&[0x40, 0]); // DF
    h.extend_from_slice(&[ttl, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(l4);
    h
}

/// A UDP or TCP segment with its checksum over `pseudo` (the pseudo header).
fn l4_checksummed(mut seg: Vec<u8>, pseudo: &[u8], at: usize) -> Vec<u8> {
    let mut all = pseudo.to_vec();
    all.extend_from_slice(&seg);
    let c = csum(&all);
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    seg
}

fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> Vec<u8> {
    let mut p = src.octets().to_vec();
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, proto]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p
}

fn udp_seg(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn payload(id: u16, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (id as u8).wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

/// The Ethernet and IPv4 ends of a frame: who sends it, to which MAC, from and to which address.
#[derive(Clone, Copy)]
struct Ends {
    smac: [u8; 6],
    dmac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
}

/// A LAN host's frame to the router, for `dst`.
const fn from_lan(dst: Ipv4Addr) -> Ends {
    Ends {
        smac: LAN_HOST,
        dmac: ROUTER,
        src: LAN_IP,
        dst,
    }
}

/// The WAN host's frame to the router, for the LAN host.
const WAN_TO_LAN: Ends = Ends {
    smac: WAN_HOST,
    dmac: ROUTER,
    src: WAN_IP,
    dst: LAN_IP,
};

/// Ethernet / IPv4 / `proto` around the segment `seg`, whose checksum (at `csum_at`) is set.
fn l4_v4(e: Ends, proto: u8, ttl: u8, id: u16, seg: Vec<u8>, csum_at: usize) -> Vec<u8> {
    let seg = l4_checksummed(seg.clone(), &pseudo_v4(e.src, e.dst, proto, seg.len()), csum_at);
    eth(e.dmac, e.smac, 0x0800, &ipv4(e.src, e.dst, proto, ttl, id, &seg))
}

/// Ethernet / IPv4 / UDP with a valid UDP checksum.
fn udp4(e: Ends, sport: u16, dport: u16, ttl: u8, id: u16) -> Vec<u8> {
    l4_v4(e, 17, ttl, id, udp_seg(sport, dport, &payload(id, 32)), 6)
}

/// Ethernet / IPv4 / TCP with `flags` (0x02 = SYN), valid checksum.
fn tcp4(e: Ends, sport: u16, dport: u16, flags: u8, id: u16) -> Vec<u8> {
    let mut t = sport.to_be_bytes().to_vec();
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&(1000u32 + u32::from(id)).to_be_bytes()); // seq
    t.extend_from_slice(&0u32.to_be_bytes()); // ack
    t.extend_from_slice(&[0x50, flags]);
    t.extend_from_slice(&64240u16.to_be_bytes()); // window
    t.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent
    l4_v4(e, 6, 64, id, t, 16)
}

/// Ethernet / IPv6 / UDP with a valid UDP checksum.
fn udp6(smac: [u8; 6], dmac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, hop: u8, id: u16) -> Vec<u8> {
    let u = udp_seg(4000 + id, 5001, &payload(id, 40));
    let mut pseudo = src.octets().to_vec();
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(u.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    let u = l4_checksummed(u, &pseudo, 6);
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(u.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[17, hop]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(&u);
    eth(dmac, smac, 0x86dd, &ip)
}

/// The 28-byte Ethernet/IPv4 ARP body: `op` 1 = request, 2 = reply.
fn arp_body(op: u8, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) -> Vec<u8> {
    let mut a = vec![0, 1, 0x08, 0, 6, 4, 0, op];
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa.octets());
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa.octets());
    a
}

/// A broadcast ARP request from `sha`/`spa` for `tpa`.
fn arp_request(sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    eth(BCAST, sha, 0x0806, &arp_body(1, sha, spa, [0; 6], tpa))
}

/// What the router must make of an IPv4 frame it forwards to a neighbour at `next_mac`:
/// new MACs, TTL - 1, the header checksum recomputed from scratch.
fn routed_v4(f: &[u8], next_mac: [u8; 6]) -> Vec<u8> {
    let mut g = f.to_vec();
    g[0..6].copy_from_slice(&next_mac);
    g[6..12].copy_from_slice(&ROUTER);
    g[14 + 8] -= 1;
    g[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let c = csum(&g[14..34]);
    g[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    g
}

fn routed_v6(f: &[u8], next_mac: [u8; 6]) -> Vec<u8> {
    let mut g = f.to_vec();
    g[0..6].copy_from_slice(&next_mac);
    g[6..12].copy_from_slice(&ROUTER);
    g[14 + 7] -= 1;
    g
}

/// `n` frames from the LAN host to the WAN host: every `every`-th a TCP SYN to port 80, the
/// others UDP to port 5001, each from its own source port.
fn udp_and_syns(n: u16, every: u16) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            if i % every == every - 1 {
                tcp4(from_lan(WAN_IP), 2000 + i, 80, 0x02, i)
            } else {
                udp4(from_lan(WAN_IP), 1024 + i, 5001, 64, i)
            }
        })
        .collect()
}

fn is_udp4(f: &[u8]) -> bool {
    f[12..14] == [0x08, 0x00] && f[14 + 9] == 17
}

// ---- pcap files ----

fn read_pcapng(path: &str) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut r = PcapNgReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(b) = r.next_block() {
        match b.unwrap() {
            Block::EnhancedPacket(p) => v.push(p.data.into_owned()),
            Block::SimplePacket(p) => v.push(p.data.into_owned()),
            _ => {}
        }
    }
    v
}

// ---- configs ----

/// The router part shared by the tests: SVIs lan (VLAN 10) and wan (VLAN 20), static
/// neighbours for the WAN host.
fn router_cfg() -> String {
    [
        "\n[router]\nmac = \"02:fe:00:00:00:01\"\n".to_string(),
        interface("lan", 10, &["10.0.10.1/24", "2001:db8:10::1/64"]),
        interface("wan", 20, &["10.0.20.1/24", "2001:db8:20::1/64"]),
        neigh("10.0.20.7", "02:00:00:00:20:07", "wan"),
        neigh("2001:db8:20::7", "02:00:00:00:20:07", "wan"),
    ]
    .concat()
}

/// A pcap `[[port]]` on an access VLAN.
fn port(name: &str, vlan: u16, read: Option<&str>, write: Option<&str>) -> String {
    pcap_port(name, &access(vlan), read, write)
}

/// Runs one worker with the pcap ports lan (VLAN 10) and wan (VLAN 20), each `[read, write]`,
/// the router of [`router_cfg`] and `extra` config text after it.
fn run_lan_wan(lan: [Option<&str>; 2], wan: [Option<&str>; 2], extra: &str) -> RunResult {
    run(&format!(
        "workers = 1\n{}{}{}{extra}",
        port("lan", 10, lan[0], lan[1]),
        port("wan", 20, wan[0], wan[1]),
        router_cfg(),
    ))
}

fn l3(res: &RunResult) -> &freeway_l3::L3Stats {
    &res.last.router.as_ref().expect("a router ran").l3
}

fn neigh_lines(res: &RunResult) -> Vec<String> {
    res.neighbours.iter().map(ToString::to_string).collect()
}

/// Asserts that `ip neigh`-style `line` is among the run's neighbours.
fn assert_neigh_line(res: &RunResult, line: &str) {
    assert!(
        neigh_lines(res).iter().any(|l| l == line),
        "{line}: {:?}",
        neigh_lines(res)
    );
}

/// The run's neighbour entry for `ip` (fails, listing them all, when there is none).
fn neighbour(res: &RunResult, ip: Ipv4Addr) -> &freeway_l3::NeighEntry {
    res.neighbours
        .iter()
        .find(|n| n.dst == IpAddr::V4(ip))
        .unwrap_or_else(|| panic!("{:?}", neigh_lines(res)))
}

/// Asserts that the run's route table has a line containing `route`.
fn assert_route(res: &RunResult, route: &str) {
    assert!(res.routes_text.contains(route), "{route}: {}", res.routes_text);
}

/// The counters of the run's tap `i` (fails with the tap's error when it has none).
fn tap_stats(res: &RunResult, i: usize) -> freeway_capture::TapStats {
    res.taps[i]
        .stats
        .unwrap_or_else(|| panic!("tap {i}: {:?}", res.taps[i].error))
}

// ---- tests ----

#[test]
fn ipv4_is_routed_byte_by_byte() {
    let d = TempDir::new("pipeline-route4");
    const N: u16 = 40; // more than one batch
    let input: Vec<Vec<u8>> = (0..N).map(|i| udp4(from_lan(WAN_IP), 1024 + i, 5001, 64, i)).collect();
    let [inp, lan_out, wan_out] = d.files(["lan-in.pcap", "lan-out.pcap", "wan-out.pcap"]);
    write_pcap(&inp, &input);
    let res = run_lan_wan([Some(&inp), Some(&lan_out)], [None, Some(&wan_out)], "");

    let out = read_pcap(&wan_out);
    assert_eq!(out.len(), usize::from(N));
    for (i, (o, f)) in out.iter().zip(&input).enumerate() {
        assert_eq!(o.len(), f.len(), "frame {i}");
        assert_eq!(o[0..6], WAN_HOST, "frame {i}: dst MAC = the neighbour");
        assert_eq!(o[6..12], ROUTER, "frame {i}: src MAC = the router");
        assert_eq!(o[12..14], [0x08, 0x00], "frame {i}: untagged IPv4 on the access port");
        assert_eq!(o[14 + 8], 63, "frame {i}: TTL");
        assert_eq!(csum(&o[14..34]), 0, "frame {i}: IPv4 header checksum must verify");
        assert_eq!(o[34..], f[34..], "frame {i}: payload unchanged");
        assert_eq!(*o, routed_v4(f, WAN_HOST), "frame {i}");
    }
    assert!(read_pcap(&lan_out).is_empty(), "nothing goes back out of lan");

    let s = l3(&res);
    assert_eq!(s.rx, u64::from(N));
    assert_eq!(s.forwarded_v4, u64::from(N));
    assert_eq!(s.forwarded_v6, 0);
    assert_eq!(s.icmp_errors_tx, 0);
    assert!(s.drops.is_empty(), "{:?}", s.drops);
    assert_eq!(res.last.ports[0].rx_packets, u64::from(N));
    assert_eq!(res.last.ports[1].tx_packets, u64::from(N));
    assert!(res.last.drops().is_empty(), "{:?}", res.last.drops());

    assert_route(&res, "10.0.20.0/24 dev wan proto kernel scope link");
    assert_route(&res, "10.0.10.0/24 dev lan proto kernel scope link");
    let n = neighbour(&res, WAN_IP);
    assert_eq!(n.dev, "wan");
    assert_eq!(n.lladdr.as_deref(), Some("02:00:00:00:20:07"));
    assert_eq!(n.state, vec![freeway_l3::neigh::NeighState::Permanent]);
    assert_neigh_line(&res, "10.0.20.7 dev wan lladdr 02:00:00:00:20:07 PERMANENT");
    // The host was learned by the bridge on lan, in VLAN 10.
    assert!(res
        .fdb
        .iter()
        .any(|e| e.mac.0 == LAN_HOST && e.vlan == 10 && e.port == 0 && !e.is_static));
}

#[test]
fn ipv6_is_routed_byte_by_byte() {
    let d = TempDir::new("pipeline-route6");
    const N: u16 = 5;
    let (src, dst): (Ipv6Addr, Ipv6Addr) = ("2001:db8:10::5".parse().unwrap(), "2001:db8:20::7".parse().unwrap());
    let input: Vec<Vec<u8>> = (0..N).map(|i| udp6(LAN_HOST, ROUTER, src, dst, 64, i)).collect();
    let [inp, wan_out] = d.files(["lan-in.pcap", "wan-out.pcap"]);
    write_pcap(&inp, &input);
    let res = run_lan_wan([Some(&inp), None], [None, Some(&wan_out)], "");

    let out = read_pcap(&wan_out);
    assert_eq!(out.len(), usize::from(N));
    for (i, (o, f)) in out.iter().zip(&input).enumerate() {
        assert_eq!(o[14 + 7], 63, "frame {i}: hop limit");
        assert_eq!(*o, routed_v6(f, WAN_HOST), "frame {i}");
    }
    let s = l3(&res);
    assert_eq!(s.forwarded_v6, u64::from(N));
    assert_eq!(s.forwarded_v4, 0);
    assert!(s.drops.is_empty(), "{:?}", s.drops);
    assert_route(&res, "2001:db8:20::/64 dev wan proto kernel");
    assert_neigh_line(&res, "2001:db8:20::7 dev wan lladdr 02:00:00:00:20:07 PERMANENT");
}

#[test]
fn ttl_expiry_sends_icmp_time_exceeded_back_to_the_sender() {
    let d = TempDir::new("pipeline-ttl");
    const N: u16 = 3;
    let input: Vec<Vec<u8>> = (0..N).map(|i| udp4(from_lan(WAN_IP), 1024, 5001, 1, 100 + i)).collect();
    let [inp, lan_out, wan_out] = d.files(["lan-in.pcap", "lan-out.pcap", "wan-out.pcap"]);
    write_pcap(&inp, &input);
    let res = run_lan_wan([Some(&inp), Some(&lan_out)], [None, Some(&wan_out)], "");

    assert!(
        read_pcap(&wan_out).is_empty(),
        "an expired packet must not be forwarded"
    );
    let out = read_pcap(&lan_out);
    assert_eq!(out.len(), usize::from(N));
    for (i, (o, f)) in out.iter().zip(&input).enumerate() {
        let orig = &f[14..14 + 20 + 8 + 32]; // the offending datagram, IP header onwards
        assert_eq!(o[0..6], LAN_HOST, "icmp {i}: back to the sender's MAC");
        assert_eq!(o[6..12], ROUTER, "icmp {i}: from the router MAC");
        assert_eq!(o[12..14], [0x08, 0x00], "icmp {i}: untagged IPv4");
        let ip = &o[14..];
        assert_eq!(ip[0], 0x45, "icmp {i}");
        let tot = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        assert_eq!(tot, 20 + 8 + orig.len(), "icmp {i}: quotes the whole (short) datagram");
        assert!(o.len() >= 14 + tot, "icmp {i}");
        assert_eq!(ip[9], 1, "icmp {i}: protocol ICMP");
        assert!(ip[8] > 1, "icmp {i}: TTL of the error");
        assert_eq!(
            ip[12..16],
            LAN_GW.octets(),
            "icmp {i}: from the lan interface's address"
        );
        assert_eq!(ip[16..20], LAN_IP.octets(), "icmp {i}: to the sender");
        assert_eq!(csum(&ip[..20]), 0, "icmp {i}: IPv4 header checksum");
        let icmp = &ip[20..tot];
        assert_eq!(icmp[0], 11, "icmp {i}: time exceeded");
        assert_eq!(icmp[1], 0, "icmp {i}: TTL exceeded in transit");
        assert_eq!(icmp[4..8], [0, 0, 0, 0], "icmp {i}: unused");
        assert_eq!(csum(icmp), 0, "icmp {i}: ICMP checksum");
        assert_eq!(icmp[8..], *orig, "icmp {i}: the quoted datagram, as it arrived");
    }
    let s = l3(&res);
    assert_eq!(s.forwarded_v4, 0);
    assert_eq!(s.icmp_errors_tx, u64::from(N));
    assert_eq!(s.drops.get("ttl_expired"), Some(&u64::from(N)), "{:?}", s.drops);
    assert_eq!(res.last.ports[1].tx_packets, 0);
}

#[test]
fn arp_requests_for_the_router_are_answered_and_flooded() {
    let d = TempDir::new("pipeline-arp");
    let other = Ipv4Addr::new(10, 0, 10, 9);
    let for_router = arp_request(LAN_HOST, LAN_IP, LAN_GW);
    let for_other = arp_request(LAN_HOST, LAN_IP, other);
    let [inp, lan_out, lan2_out, wan_out] = d.files(["lan-in.pcap", "lan-out.pcap", "lan2-out.pcap", "wan-out.pcap"]);
    write_pcap(&inp, &[for_router.clone(), for_other.clone()]);
    let text = format!(
        "workers = 1\n{}{}{}{}",
        port("lan", 10, Some(&inp), Some(&lan_out)),
        port("lan2", 10, None, Some(&lan2_out)),
        port("wan", 20, None, Some(&wan_out)),
        router_cfg(),
    );
    let res = run(&text);

    // Broadcasts are flooded in VLAN 10 (unchanged), never into VLAN 20.
    assert_eq!(read_pcap(&lan2_out), vec![for_router.clone(), for_other]);
    assert!(read_pcap(&wan_out).is_empty());

    // One reply, for the router's own address only.
    let out = read_pcap(&lan_out);
    assert_eq!(out.len(), 1, "{out:02x?}");
    let r = &out[0];
    let body = arp_body(2, ROUTER, LAN_GW, LAN_HOST, LAN_IP);
    assert_eq!(*r, eth(LAN_HOST, ROUTER, 0x0806, &body), "the whole reply");
    assert_eq!(r[0..6], LAN_HOST, "to the requester");
    assert_eq!(r[6..12], ROUTER, "from the router MAC");
    assert_eq!(r[12..14], [0x08, 0x06], "ARP, untagged");
    let a = &r[14..42];
    assert_eq!(a[0..8], [0, 1, 0x08, 0, 6, 4, 0, 2], "Ethernet/IPv4 reply");
    assert_eq!(a[8..14], ROUTER, "sender MAC");
    assert_eq!(a[14..18], LAN_GW.octets(), "sender IP");
    assert_eq!(a[18..24], LAN_HOST, "target MAC");
    assert_eq!(a[24..28], LAN_IP.octets(), "target IP");

    let s = l3(&res);
    // The request for another host is flooded, but the router port does not take it in
    // (`Wants::NotOurs`): the L3 stage only sees the one for its address.
    assert_eq!(s.rx, 1, "{s:?}");
    assert_eq!(s.arp_requests_rx, 1, "{s:?}");
    assert_eq!(s.arp_replies_tx, 1, "{s:?}");
    assert!(s.drops.is_empty(), "{:?}", s.drops);
    // The requester was learned as a neighbour on lan.
    let n = neighbour(&res, LAN_IP);
    assert_eq!(n.dev, "lan");
    assert_eq!(n.lladdr.as_deref(), Some("02:00:00:00:10:05"));
    assert_eq!(n.state, vec![freeway_l3::neigh::NeighState::Reachable], "{n}");
    assert!(!res.neighbours.iter().any(|n| n.dst == IpAddr::V4(other)));
}

#[test]
fn packets_wait_for_arp_resolution_and_then_go_out() {
    let d = TempDir::new("pipeline-resolve");
    // As many as the pending queue keeps per neighbour: all of them wait, then go out.
    let n = u16::try_from(freeway_l3::stage::L3Config::default().pending_per_neigh).unwrap();
    let target = Ipv4Addr::new(10, 0, 20, 8);
    let target_mac = [0x02, 0, 0, 0, 0x20, 0x08];
    let input: Vec<Vec<u8>> = (0..n).map(|i| udp4(from_lan(target), 1024, 5001, 64, i)).collect();
    // The neighbour's answer, read from wan after lan's first batch (lan is port 0).
    let body = arp_body(2, target_mac, target, ROUTER, Ipv4Addr::new(10, 0, 20, 1));
    let reply = eth(ROUTER, target_mac, 0x0806, &body);
    let [lan_in, wan_in, wan_out] = d.files(["lan-in.pcap", "wan-in.pcap", "wan-out.pcap"]);
    write_pcap(&lan_in, &input);
    write_pcap(&wan_in, &[reply]);
    let res = run_lan_wan([Some(&lan_in), None], [Some(&wan_in), Some(&wan_out)], "");

    let out = read_pcap(&wan_out);
    assert_eq!(out.len(), 1 + usize::from(n), "{out:02x?}");
    // First the broadcast request, from the wan interface's address.
    let req = arp_body(1, ROUTER, Ipv4Addr::new(10, 0, 20, 1), [0; 6], target);
    assert_eq!(out[0][0..6], BCAST);
    assert_eq!(out[0][6..12], ROUTER);
    assert_eq!(out[0][12..14], [0x08, 0x06]);
    assert_eq!(out[0][14..42], req[..]);
    // Then the packets that waited, to the MAC the reply taught.
    for (i, (o, f)) in out[1..].iter().zip(&input).enumerate() {
        assert_eq!(*o, routed_v4(f, target_mac), "frame {i}");
    }
    let s = l3(&res);
    assert_eq!(s.arp_requests_tx, 1, "{s:?}");
    assert_eq!(s.arp_replies_rx, 1, "{s:?}");
    assert_eq!(s.pending_queued, u64::from(n), "{s:?}");
    assert_eq!(s.pending_sent, u64::from(n), "{s:?}");
    assert_eq!(s.forwarded_v4, u64::from(n), "{s:?}");
    assert_neigh_line(&res, "10.0.20.8 dev wan lladdr 02:00:00:00:20:08 REACHABLE");
}

#[test]
fn firewall_lets_replies_in_and_keeps_intruders_out() {
    let d = TempDir::new("pipeline-fw");
    const REQ: u16 = 10;
    const SYN: u16 = 4;
    let requests: Vec<Vec<u8>> = (0..REQ).map(|i| udp4(from_lan(WAN_IP), 1024, 5001, 64, i)).collect();
    let replies: Vec<Vec<u8>> = (0..REQ).map(|i| udp4(WAN_TO_LAN, 5001, 1024, 64, 500 + i)).collect();
    let syns: Vec<Vec<u8>> = (0..SYN)
        .map(|i| {
            tcp4(
                Ends {
                    smac: INTRUDER,
                    dmac: ROUTER,
                    src: INTRUDER_IP,
                    dst: LAN_IP,
                },
                40000 + i,
                22,
                0x02,
                900 + i,
            )
        })
        .collect();
    // The wan file interleaves replies and SYNs: r, r, s, r, r, s, ...
    let mut wan_in_frames = Vec::new();
    let (mut r, mut s) = (replies.iter(), syns.iter());
    loop {
        let a = r.next();
        let b = r.next();
        let c = s.next();
        if a.is_none() && c.is_none() {
            break;
        }
        wan_in_frames.extend([a, b, c].into_iter().flatten().cloned());
    }
    assert_eq!(wan_in_frames.len(), usize::from(REQ + SYN));
    let [lan_in, lan_out, wan_in, wan_out] = d.files(["lan-in.pcap", "lan-out.pcap", "wan-in.pcap", "wan-out.pcap"]);
    write_pcap(&lan_in, &requests);
    write_pcap(&wan_in, &wan_in_frames);
    // lan is port 0, so with one worker its first batch (which creates the connection) is
    // processed before anything is read from wan: every reply finds the connection.
    let res = run_lan_wan(
        [Some(&lan_in), Some(&lan_out)],
        [Some(&wan_in), Some(&wan_out)],
        &format!(
            "{}\n[conntrack]\nmax = 1000\n\n[firewall]\nallow_new_from = [\"lan\"]\n",
            lan_neigh()
        ),
    );

    // The requests went out of wan, the replies out of lan, routed; no SYN anywhere.
    let wan: Vec<Vec<u8>> = requests.iter().map(|f| routed_v4(f, WAN_HOST)).collect();
    let lan: Vec<Vec<u8>> = replies.iter().map(|f| routed_v4(f, LAN_HOST)).collect();
    assert_eq!(read_pcap(&wan_out), wan);
    let lan_got = read_pcap(&lan_out);
    assert!(lan_got.iter().all(|f| f[14 + 9] != 6), "a SYN got through");
    assert_eq!(lan_got, lan);

    let fw = res.last.firewall.as_ref().expect("firewall stats");
    assert_eq!(fw.drop_new_not_allowed, u64::from(SYN), "{fw:?}");
    assert_eq!(fw.drop_invalid, 0, "{fw:?}");
    assert_eq!(fw.drop_limit, 0, "{fw:?}");
    // Before the first reply, every request is `new` (as in Linux conntrack); each reply is
    // `established`, since the connection existed before any of them was read.
    assert_eq!(fw.accept_new, u64::from(REQ), "{fw:?}");
    assert_eq!(fw.accept_established, u64::from(REQ), "{fw:?}");
    assert_eq!(fw.accept_related + fw.accept_untracked, 0, "{fw:?}");
    assert_eq!(res.last.drops().get("firewall:new_not_allowed"), Some(&u64::from(SYN)));
    assert_eq!(l3(&res).forwarded_v4, u64::from(2 * REQ));

    // One connection: the UDP flow from the LAN, replied; nothing from the intruder.
    let conns = &res.connections;
    assert_eq!(conns.len(), 1, "{conns:#?}");
    let c = &conns[0];
    assert_eq!(c.proto, "udp");
    assert_eq!(c.family, "ipv4");
    assert_eq!(c.orig.src, IpAddr::V4(LAN_IP));
    assert_eq!(c.orig.dst, IpAddr::V4(WAN_IP));
    assert_eq!((c.orig.sport, c.orig.dport), (Some(1024), Some(5001)));
    assert_eq!(c.reply.src, IpAddr::V4(WAN_IP));
    assert!(!c.unreplied, "{c}");
    assert!(!conns
        .iter()
        .any(|c| c.orig.src == IpAddr::V4(INTRUDER_IP) || c.reply.src == IpAddr::V4(INTRUDER_IP)));
}

#[test]
fn capture_taps_write_what_the_port_sends() {
    let d = TempDir::new("pipeline-taps");
    const N: u16 = 24;
    // Two in three UDP, the rest TCP (forwarded too: no firewall here).
    let input = udp_and_syns(N, 3);
    let [inp, wan_out] = d.files(["lan-in.pcap", "wan-out.pcap"]);
    let [t_pcap, t_ng, t_three, t_in] = d.files(["wan.pcap", "wan.pcapng", "three.pcap", "lan-rx.pcap"]);
    write_pcap(&inp, &input);
    let taps = format!(
        r#"
[[tap]]
port = "wan"
direction = "out"
filter = "udp"
write = "{t_pcap}"

[[tap]]
port = "wan"
direction = "out"
filter = "udp"
write = "{t_ng}"

[[tap]]
port = "wan"
direction = "out"
write = "{t_three}"
count = 3

[[tap]]
port = "lan"
direction = "in"
write = "{t_in}"
"#
    );
    let res = run_lan_wan([Some(&inp), None], [None, Some(&wan_out)], &taps);

    let wan = read_pcap(&wan_out);
    assert_eq!(wan.len(), usize::from(N));
    let expect: Vec<Vec<u8>> = input.iter().map(|f| routed_v4(f, WAN_HOST)).collect();
    assert_eq!(wan, expect);
    let udp: Vec<Vec<u8>> = wan.iter().filter(|f| is_udp4(f)).cloned().collect();
    assert_eq!(udp.len(), 16);

    assert_eq!(read_pcap(&t_pcap), udp, "pcap tap");
    assert_eq!(read_pcapng(&t_ng), udp, "pcapng tap");
    assert_eq!(read_pcap(&t_three), wan[..3].to_vec(), "count = 3 tap");
    assert_eq!(read_pcap(&t_in), input, "ingress tap sees frames as received");

    assert_eq!(res.taps.len(), 4);
    let st = |i: usize| tap_stats(&res, i);
    for i in 0..2 {
        assert_eq!(res.taps[i].tap.port, "wan");
        assert_eq!(res.taps[i].tap.direction, "out");
        assert_eq!(res.taps[i].tap.filter, "udp");
        assert_eq!(st(i).written, udp.len() as u64, "tap {i}: {:?}", st(i));
        assert_eq!(st(i).matched, udp.len() as u64, "tap {i}: {:?}", st(i));
        assert_eq!(st(i).dropped, 0, "tap {i}: {:?}", st(i));
    }
    assert_eq!(st(2).written, 3, "{:?}", st(2));
    assert_eq!(st(3).written, u64::from(N), "{:?}", st(3));
    assert_eq!(res.taps[3].tap.direction, "in");
}

#[test]
fn bad_router_and_tap_configs_name_the_line() {
    let d = TempDir::new("pipeline-cfg");
    let base = format!(
        "workers = 1\n{}{}",
        port("lan", 10, None, Some(&d.file("a.pcap"))),
        port("wan", 20, None, Some(&d.file("b.pcap"))),
    );
    let lines = |s: &str| s.lines().count();

    // A gateway on no interface's subnet: the error points at `via`.
    let text = format!(
        "{base}{}[[route]]\ndst = \"198.51.100.0/24\"\nvia = \"192.168.99.1\"\n",
        router_cfg()
    );
    let via_line = lines(&text);
    let e = config::parse(&text, "t.toml", None).expect_err("gateway on no subnet");
    assert_eq!(e.line, Some(via_line), "{e}");
    assert!(e.msg.contains("192.168.99.1"), "{e}");
    assert!(e.msg.contains("no interface's subnet"), "{e}");
    assert!(e.to_string().starts_with(&format!("t.toml:{via_line}:")), "{e}");

    // The same route with a gateway on wan is fine, and resolves to wan.
    let ok = text.replace("192.168.99.1", "10.0.20.7");
    let cfg = config::parse(&ok, "t.toml", None).unwrap();
    let r = cfg.router.as_ref().unwrap();
    assert_eq!(r.routes.len(), 1);
    assert_eq!(r.routes[0].hops[0].iface, 1);

    // A tap on an unknown port: the error points at `port`.
    let text = format!("{base}[[tap]]\nport = \"nope\"\nwrite = \"{}\"\n", d.file("t.pcap"));
    let e = config::parse(&text, "t.toml", None).expect_err("tap on no port");
    assert_eq!(e.line, Some(lines(&text) - 1), "{e}");
    assert!(e.msg.contains("no port named \"nope\""), "{e}");

    // A tap filter that does not compile: the error points at `filter`.
    let text = format!(
        "{base}[[tap]]\nport = \"wan\"\nfilter = \"udp and\"\nwrite = \"{}\"\n",
        d.file("t.pcap")
    );
    let e = config::parse(&text, "t.toml", None).expect_err("bad filter");
    assert_eq!(e.line, Some(lines(&text) - 1), "{e}");

    // A firewall naming an unknown port.
    let text = format!("{base}[firewall]\nallow_new_from = [\"lan\", \"dmz\"]\n");
    let e = config::parse(&text, "t.toml", None).expect_err("unknown firewall port");
    assert_eq!(e.line, Some(lines(&text)), "{e}");
    assert!(e.msg.contains("dmz"), "{e}");
}

#[test]
fn gratuitous_arp_moves_a_known_neighbour_to_its_new_mac() {
    let d = TempDir::new("pipeline-garp");
    let new_mac = [0x02, 0, 0, 0, 0x10, 0x99];
    // The host asks for the router (so the router learns it), then announces a new MAC
    // (failover: sender = target = its own address); then traffic comes for it.
    let req = arp_request(LAN_HOST, LAN_IP, LAN_GW);
    let garp = arp_request(new_mac, LAN_IP, LAN_IP);
    let pkt = udp4(WAN_TO_LAN, 5001, 1024, 64, 1);
    let [i, o, w] = d.files(["lan-in.pcap", "lan-out.pcap", "wan-in.pcap"]);
    write_pcap(&i, &[req, garp]);
    write_pcap(&w, std::slice::from_ref(&pkt));
    let res = run_lan_wan([Some(&i), Some(&o)], [Some(&w), None], "");
    let n = neighbour(&res, LAN_IP);
    assert_eq!(n.lladdr.as_deref(), Some("02:00:00:00:10:99"), "{n}");
    let out = read_pcap(&o);
    let routed: Vec<&Vec<u8>> = out.iter().filter(|f| is_udp4(f)).collect();
    assert_eq!(routed.len(), 1, "{out:02x?}");
    assert_eq!(*routed[0], routed_v4(&pkt, new_mac), "sent to the announced MAC");
    assert_eq!(l3(&res).rx, 3, "the request, the announcement and the packet");
}

/// Raw records of a classic pcap file: (header snap length, [(seconds, microseconds,
/// stored bytes, original length)]).
#[allow(clippy::type_complexity)]
fn read_pcap_raw(path: &str) -> (u32, Vec<(u32, u32, Vec<u8>, u32)>) {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_raw_packet() {
        let p = p.unwrap();
        v.push((p.ts_sec, p.ts_frac, p.data.into_owned(), p.orig_len));
    }
    (r.header().snaplen, v)
}

/// An offline run (one worker, pcap in) captures every packet, however many more than a tap
/// ring holds: the worker waits for the tap's writer instead of dropping. Records keep the
/// input's timestamps (in the capture and in the pcap output), the tap's snap length is in
/// the file header and a cut record keeps its original length; "received by filter" counts
/// every packet the filter saw.
#[test]
fn offline_capture_is_lossless_and_keeps_the_input_times() {
    let d = TempDir::new("pipeline-offline-capture");
    const N: u32 = 3410;
    let input = udp_and_syns(N as u16, 5);
    let time = |i: u32| (1_700_000_000 + i / 1000, (i % 1000) * 1000 + 7);
    let [inp, wan_out, tap_in, tap_udp] = d.files(["lan-in.pcap", "wan-out.pcap", "lan-rx.pcap", "wan-udp.pcap"]);
    {
        let mut w = pcap_file::pcap::PcapWriter::new(std::fs::File::create(&inp).unwrap()).unwrap();
        for (i, f) in input.iter().enumerate() {
            let (s, us) = time(i as u32);
            let ts = std::time::Duration::new(u64::from(s), us * 1000);
            w.write_packet(&pcap_file::pcap::PcapPacket::new(ts, f.len() as u32, f))
                .unwrap();
        }
    }
    let taps = format!(
        r#"
[[tap]]
port = "lan"
direction = "in"
snaplen = 64
write = "{tap_in}"

[[tap]]
port = "wan"
direction = "out"
filter = "udp"
write = "{tap_udp}"
"#
    );
    let res = run_lan_wan([Some(&inp), None], [None, Some(&wan_out)], &taps);
    let st = |i: usize| tap_stats(&res, i);
    let udp = input.iter().filter(|f| is_udp4(f)).count() as u64;
    assert_eq!(
        (st(0).seen, st(0).matched, st(0).written, st(0).dropped),
        (u64::from(N), u64::from(N), u64::from(N), 0),
        "ingress tap: {:?}",
        st(0)
    );
    assert_eq!(
        (st(1).seen, st(1).matched, st(1).written, st(1).dropped),
        (u64::from(N), udp, udp, 0),
        "udp tap: received by filter is every packet it saw: {:?}",
        st(1)
    );

    let (snap, recs) = read_pcap_raw(&tap_in);
    assert_eq!(snap, 64, "the tap's snap length, not 65535");
    assert_eq!(recs.len(), N as usize);
    for (i, (s, us, data, orig)) in recs.iter().enumerate() {
        assert_eq!((*s, *us), time(i as u32), "record {i}: the input's time");
        assert_eq!(data[..], input[i][..input[i].len().min(64)], "record {i}");
        assert_eq!(*orig as usize, input[i].len(), "record {i}: original length");
    }
    let (_, out) = read_pcap_raw(&wan_out);
    assert_eq!(out.len(), N as usize);
    for (i, (s, us, _, _)) in out.iter().enumerate() {
        assert_eq!((*s, *us), time(i as u32), "output record {i}: the input's time");
    }
    let (_, caps) = read_pcap_raw(&tap_udp);
    assert_eq!(caps.len() as u64, udp);
    assert!(
        caps.windows(2).all(|w| (w[0].0, w[0].1) <= (w[1].0, w[1].1)),
        "in time order"
    );
}
