//! Forwarding cost of the L3 stage on one core: IPv4 and IPv6 UDP frames between two
//! interfaces with resolved (static) neighbours, batches of 32, a map-based route lookup.
//!
//! `cargo run --release -p freeway-bench --example l3_forward [packets]`

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Instant;

use freeway_l3::neigh::{new_seeded, NeighConfig};
use freeway_l3::{Interface, Interfaces, L3Config, L3Out, L3Worker, NextHop, PrefixList};
use freeway_packet::build::{build_frame, FrameSpec};
use freeway_packet::{parse, Batch, Packet, PacketPool, MAX_BATCH};

struct Loop {
    pool: PacketPool,
    back: Vec<Packet>,
}

impl L3Out for Loop {
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }
    fn emit(&mut self, _port: u16, pkt: Packet) {
        self.back.push(pkt);
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000_000);
    let r1 = [2, 0xfe, 0, 0, 0, 1];
    let r2 = [2, 0xfe, 0, 0, 0, 2];
    let ifs = Interfaces::new(vec![
        Interface::new("p1", 1, None, r1)
            .with_v4(Ipv4Addr::new(10, 0, 1, 1), 24)
            .with_v6("2001:db8:1::1".parse().unwrap(), 64),
        Interface::new("p2", 2, Some(20), r2)
            .with_v4(Ipv4Addr::new(10, 0, 2, 1), 24)
            .with_v6("2001:db8:2::1".parse().unwrap(), 64),
    ])
    .unwrap();
    let (neigh, mut w) = new_seeded(NeighConfig::default(), 1);
    w.add_static(IpAddr::V4(Ipv4Addr::new(10, 0, 2, 7)), 1, [2, 0, 0, 0, 2, 7], 0)
        .unwrap();
    let v6n: Ipv6Addr = "2001:db8:2::7".parse().unwrap();
    w.add_static(IpAddr::V6(v6n), 1, [2, 0, 0, 0, 2, 7], 0).unwrap();
    let mut routes = PrefixList::new();
    let hop = vec![NextHop {
        iface: 1,
        gateway: None,
    }];
    routes.add("10.0.2.0".parse().unwrap(), 24, hop.clone());
    routes.add("2001:db8:2::".parse().unwrap(), 64, hop);
    for v6 in [false, true] {
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            ("2001:db8:1::5".parse().unwrap(), IpAddr::V6(v6n))
        } else {
            ("10.0.1.5".parse().unwrap(), "10.0.2.7".parse().unwrap())
        };
        let frame = build_frame(&FrameSpec {
            src_mac: [2, 0, 0, 0, 1, 5],
            dst_mac: r1,
            src_ip: src,
            dst_ip: dst,
            ttl: 255,
            len: 64,
            ..Default::default()
        });
        let mut l3 = L3Worker::new(Arc::new(ifs.clone()), neigh.clone(), L3Config::default());
        let mut out = Loop {
            pool: PacketPool::default(),
            back: Vec::with_capacity(MAX_BATCH),
        };
        let mut batch = Batch::new();
        let mut done = 0u64;
        let t = Instant::now();
        while done < n {
            // Re-arm: untag, restore the router MAC and TTL (not timed separately; part of the loop).
            for _ in 0..MAX_BATCH {
                let mut p = out.back.pop().unwrap_or_default();
                p.set_frame(&frame).unwrap();
                p.meta.in_port = 1;
                let _ = parse(&mut p);
                let _ = batch.push(p);
            }
            l3.process(&mut batch, &mut routes, 0, &mut out);
            done += MAX_BATCH as u64;
        }
        let ns = t.elapsed().as_nanos() as f64 / done as f64;
        let s = l3.counters().snapshot();
        println!(
            "{}: {done} packets, {ns:.1} ns/packet incl. frame copy + parse (forwarded {})",
            if v6 { "ipv6" } else { "ipv4" },
            s.forwarded_v4 + s.forwarded_v6
        );
    }
}
