//! Shared fixtures for the L3 integration tests: two router interfaces, a route list, an
//! `L3Out` that records what the stage emits and drops, and frame builders.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use freeway_l3::neigh::{new_seeded, NeighConfig};
use freeway_l3::{
    FilterHook, FilterVerdict, Interface, Interfaces, L3Config, L3Drop, L3Out, L3Worker, Neigh, NeighWriter, NextHop,
    PrefixList,
};
use freeway_packet::build::{build_frame, FrameSpec, L4};
use freeway_packet::{parse, Batch, Packet, PacketPool};

/// Router MAC on p1 (port 1, untagged).
pub const R1: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 0x01];
/// Router MAC on p2 (port 2, VLAN 20).
pub const R2: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 0x02];
/// A host on p1.
pub const H1: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x05];
/// A host on p2.
pub const H2: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x07];
/// The gateway on p2.
pub const GW: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0xfe];

pub fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
pub fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn interfaces() -> Interfaces {
    Interfaces::new(vec![
        Interface::new("p1", 1, None, R1)
            .with_v4(v4("10.0.1.1"), 24)
            .with_v6(v6("2001:db8:1::1"), 64),
        Interface::new("p2", 2, Some(20), R2)
            .with_v4(v4("10.0.2.1"), 24)
            .with_v6(v6("2001:db8:2::1"), 64),
    ])
    .unwrap()
}

pub fn routes() -> PrefixList {
    let d = |i| {
        vec![NextHop {
            iface: i,
            gateway: None,
        }]
    };
    let mut r = PrefixList::new();
    r.add(ip("10.0.1.0"), 24, d(0))
        .add(ip("10.0.2.0"), 24, d(1))
        .add(
            ip("192.0.2.0"),
            24,
            vec![NextHop {
                iface: 1,
                gateway: Some(ip("10.0.2.254")),
            }],
        )
        .add(ip("2001:db8:1::"), 64, d(0))
        .add(ip("2001:db8:2::"), 64, d(1))
        .add(
            ip("2001:db8:99::"),
            48,
            vec![NextHop {
                iface: 1,
                gateway: Some(ip("2001:db8:2::fe")),
            }],
        );
    r
}

/// Records emitted and dropped packets.
#[derive(Default)]
pub struct Sink {
    pub pool: PacketPool,
    pub sent: Vec<(u16, Packet)>,
    pub dropped: Vec<L3Drop>,
    /// The firewall: `None` accepts everything; otherwise its verdicts, and every call seen
    /// as (hook, ingress interface, egress interface).
    pub filter: Option<fn(FilterHook, &Packet) -> FilterVerdict>,
    pub judged: Vec<(FilterHook, u16, u16)>,
}

impl L3Out for Sink {
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }
    fn emit(&mut self, port: u16, pkt: Packet) {
        self.sent.push((port, pkt));
    }
    fn drop(&mut self, pkt: Packet, reason: L3Drop) {
        self.dropped.push(reason);
        self.pool.put(pkt);
    }
    fn filter(&mut self, hook: FilterHook, pkt: &Packet, iif: u16, oif: u16) -> FilterVerdict {
        self.judged.push((hook, iif, oif));
        self.filter.map_or(FilterVerdict::Accept, |f| f(hook, pkt))
    }
}

impl Sink {
    pub fn take(&mut self) -> Vec<(u16, Packet)> {
        std::mem::take(&mut self.sent)
    }
}

pub struct Rig {
    pub w: L3Worker,
    pub neigh: Neigh,
    pub writer: NeighWriter,
    pub routes: PrefixList,
    pub out: Sink,
    pub now: u64,
}

impl Rig {
    /// What the stage emitted since the last look, which must be `n` packets.
    #[track_caller]
    pub fn sent(&mut self, n: usize) -> Vec<(u16, Packet)> {
        let sent = self.out.take();
        assert_eq!(sent.len(), n, "emitted {n}? dropped: {:?}", self.out.dropped);
        sent
    }

    /// [`Rig::rx`] of `frame` on `port`, which must make the stage emit exactly one packet:
    /// that packet and its output port.
    #[track_caller]
    pub fn answer(&mut self, port: u16, frame: &[u8]) -> (u16, Packet) {
        self.rx(port, frame);
        self.sent(1).pop().unwrap()
    }

    pub fn new() -> Rig {
        Rig::with_l3(L3Config::default())
    }

    /// A rig whose router has `cfg`, with the default neighbour table.
    pub fn with_l3(cfg: L3Config) -> Rig {
        Rig::with(cfg, NeighConfig::default())
    }

    pub fn with(cfg: L3Config, ncfg: NeighConfig) -> Rig {
        let (neigh, writer) = new_seeded(ncfg, 5);
        let w = L3Worker::new(Arc::new(interfaces()), neigh.clone(), cfg);
        Rig {
            w,
            neigh,
            writer,
            routes: routes(),
            out: Sink::default(),
            now: 1_000,
        }
    }

    /// Runs one frame (arriving on `port`) through the stage.
    /// [`Rig::rx`] of the same `frame` on `port`, `n` times.
    pub fn rx_times(&mut self, port: u16, frame: &[u8], n: usize) {
        for _ in 0..n {
            self.rx(port, frame);
        }
    }

    pub fn rx(&mut self, port: u16, frame: &[u8]) {
        let mut p = Packet::from_frame(frame).unwrap();
        p.meta.in_port = port;
        let _ = parse(&mut p);
        let mut b = Batch::new();
        b.push(p).unwrap();
        self.w.process(&mut b, &mut self.routes, self.now, &mut self.out);
    }

    /// Lets the neighbour writer apply what the workers asked.
    pub fn service(&mut self) {
        self.writer.service(self.now);
    }

    pub fn stats(&self) -> freeway_l3::L3Stats {
        self.w.counters().snapshot()
    }
}

/// A UDP frame from a host to the router MAC.
pub fn udp(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    vlan: Option<u16>,
    src: &str,
    dst: &str,
    ttl: u8,
    len: usize,
) -> Vec<u8> {
    build_frame(&FrameSpec {
        len,
        ..udp_spec(src_mac, dst_mac, vlan, src, dst, ttl)
    })
}

/// A UDP frame of `len` bytes from H1 (10.0.1.5, untagged) to 10.0.2.7 behind R1, with `ttl`:
/// the datagram most tests route.
pub fn h1_to_h2(ttl: u8, len: usize) -> Vec<u8> {
    udp(H1, R1, None, "10.0.1.5", "10.0.2.7", ttl, len)
}

/// A UDP (port 1234 to 53) frame's description, with a checksum; `len` left at 0.
fn udp_spec(src_mac: [u8; 6], dst_mac: [u8; 6], vlan: Option<u16>, src: &str, dst: &str, ttl: u8) -> FrameSpec {
    FrameSpec {
        src_mac,
        dst_mac,
        vlan,
        src_ip: ip(src),
        dst_ip: ip(dst),
        proto: L4::Udp,
        src_port: 1234,
        dst_port: 53,
        len: 0,
        ttl,
        l4_checksum: true,
    }
}

/// An ICMP (v4 or v6) echo request.
pub fn ping(src_mac: [u8; 6], dst_mac: [u8; 6], vlan: Option<u16>, src: &str, dst: &str, ttl: u8) -> Vec<u8> {
    build_frame(&FrameSpec {
        proto: L4::Icmp,
        src_port: 0x1234,
        dst_port: 7,
        len: 98,
        ..udp_spec(src_mac, dst_mac, vlan, src, dst, ttl)
    })
}

/// Offset of the L3 header of a frame (after at most one tag).
pub fn l3_of(f: &[u8]) -> usize {
    if f[12] == 0x81 && f[13] == 0x00 {
        18
    } else {
        14
    }
}
