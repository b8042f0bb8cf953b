//! AF_PACKET ports on veth pairs, each test in a fresh network namespace of its own.
//!
//! These tests need root (CAP_NET_ADMIN, CAP_NET_RAW) and `ip` (iproute2). Without them they
//! print a loud `*** SKIPPED ...` line (shown by plain `cargo test`) and pass, except when the
//! environment variable `CI` is set: then they fail.
//!
//! Each test runs in a fresh namespace with a veth pair `fwa` <-> `fwb` (`common::veth`),
//! opens an `AfPacketPort` on `fwa`, and injects or captures frames on `fwb` with a plain raw
//! packet socket written independently of the port.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use common::veth::*;
use freeway_io::afpacket::{AfPacketConfig, AfPacketPort};
use freeway_io::Port;
use freeway_packet::build::{build_frame, FrameSpec, L4};
use freeway_packet::{Batch, Packet, PacketPool};

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// Frames injected on the peer arrive once and byte-identical (VLAN tags restored, 802.1ad
/// included), frames sent by the port arrive on the peer, nobody sees its own transmissions,
/// and the counters add up.
#[test]
fn rx_tx_vlan_and_counters() {
    on_veth(1, 1500, |name| {
        let mut port = AfPacketPort::new(AfPacketConfig::new("fwa")).unwrap();
        let mut q = port.open(1).unwrap();
        assert_eq!(port.mtu(), Some(1500));
        assert_eq!(port.fanout_group(), None, "one worker: no fanout");
        assert_eq!(promiscuity(name, "fwa"), 1, "promiscuous while open");
        let peer = Raw::new("fwb");

        // What we inject: untagged IPv4 and IPv6, a tagged frame with PCP and DEI bits, a
        // QinQ frame (802.1ad outer, 802.1Q inner), ARP, a full-size frame, a short runt-ish
        // frame of 60 bytes with a private ethertype.
        let mut sent = Vec::new();
        sent.push(udp4(1000, 60, 1));
        sent.push(build_frame(&FrameSpec {
            src_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            dst_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            proto: L4::Tcp { flags: 0x02 },
            len: 120,
            ..FrameSpec::default()
        }));
        let mut tagged = build_frame(&FrameSpec {
            vlan: Some(100),
            len: 90,
            ..FrameSpec::default()
        });
        tagged[14] |= 0xb0; // PCP 5, DEI 1
        sent.push(tagged);
        let mut qinq = build_frame(&FrameSpec {
            vlan: Some(20),
            len: 80,
            ..FrameSpec::default()
        });
        let mut outer = qinq[..12].to_vec();
        outer.extend_from_slice(&[0x88, 0xa8, 0x00, 0x0a]);
        outer.extend_from_slice(&qinq[12..]);
        qinq = outer;
        sent.push(qinq);
        sent.push(freeway_packet::build::build_arp_request(
            [2, 0, 0, 0, 0, 9],
            None,
            Ipv4Addr::new(10, 0, 0, 9),
            Ipv4Addr::new(10, 0, 0, 1),
        ));
        sent.push(udp4(1001, 1514, 2));
        let mut private = vec![0x5au8; 60];
        private[..6].copy_from_slice(&[0xff; 6]);
        private[12..14].copy_from_slice(&[0x88, 0xb5]);
        sent.push(private);
        for f in &sent {
            peer.send(f);
        }
        let mut pool = PacketPool::default();
        let got = drain(&mut q.rx, &mut pool, sent.len(), WAIT, LINGER);
        assert_eq!(
            frames_of(&got),
            sent,
            "every frame exactly once, in order, byte-identical"
        );
        let s = port.stats();
        let bytes: u64 = sent.iter().map(|f| f.len() as u64).sum();
        assert_eq!((s.rx_packets, s.rx_bytes), (sent.len() as u64, bytes));
        assert_eq!(s.rx_vlan_restored, 2, "the 802.1Q and the 802.1ad frame");
        assert_eq!((s.rx_too_big, s.rx_csum_partial, s.rx_outgoing_skipped), (0, 0, 0));
        assert_eq!(port.rx_per_queue()[0].packets, sent.len() as u64);
        assert_eq!(s.kernel_packets, sent.len() as u64, "the kernel queued each frame once");
        assert_eq!(s.kernel_drops, 0);

        // TX: frames sent by the port arrive on the peer, one syscall per batch, and the port
        // does not receive them back.
        let out: Vec<Vec<u8>> = (0..5).map(|i| udp4(2000 + i, 64 + usize::from(i) * 100, 3)).collect();
        let mut b = Batch::new();
        for f in &out {
            b.push(Packet::from_frame(f).unwrap()).unwrap();
        }
        assert_eq!(q.tx[0].tx_burst(&mut b, &mut pool), out.len());
        assert!(b.is_empty());
        assert_eq!(peer.recv(out.len(), WAIT), out);
        let s = port.stats();
        let out_bytes: u64 = out.iter().map(|f| f.len() as u64).sum();
        assert_eq!((s.tx_packets, s.tx_bytes, s.tx_busy, s.tx_errors), (5, out_bytes, 0, 0));
        assert_eq!(s.tx_syscalls, 1, "one sendmmsg for the batch");
        assert_eq!(port.tx_per_queue()[0].packets, 5);

        // A second port on the same interface that goes through the qdisc (so packet taps see
        // its frames): the first port must not receive them (PACKET_IGNORE_OUTGOING, or the
        // pkttype check on older kernels), while the peer does.
        let mut other = AfPacketPort::new(AfPacketConfig {
            qdisc_bypass: false,
            promisc: false,
            ..AfPacketConfig::new("fwa")
        })
        .unwrap();
        let mut oq = other.open(1).unwrap();
        let more: Vec<Vec<u8>> = (0..3).map(|i| udp4(3000 + i, 70, 4)).collect();
        for f in &more {
            b.push(Packet::from_frame(f).unwrap()).unwrap();
        }
        assert_eq!(oq.tx[0].tx_burst(&mut b, &mut pool), 3);
        assert_eq!(peer.recv(3, WAIT), more);
        let echo = drain(&mut q.rx, &mut pool, 1, Duration::from_millis(300), LINGER);
        assert!(echo.is_empty(), "received our own transmissions: {} frames", echo.len());
        let s = port.stats();
        assert_eq!(s.rx_packets, sent.len() as u64, "nothing received twice");
        if port.ignore_outgoing() == Some(true) {
            assert_eq!(s.rx_outgoing_skipped, 0, "the kernel filtered them");
        } else {
            eprintln!("note: kernel without PACKET_IGNORE_OUTGOING; fallback filter used");
        }

        // A frame larger than the MTU is refused by the kernel: counted, not sent.
        b.push(Packet::from_frame(&udp4(4000, 1600, 5)).unwrap()).unwrap();
        b.push(Packet::from_frame(&udp4(4001, 100, 5)).unwrap()).unwrap();
        assert_eq!(q.tx[0].tx_burst(&mut b, &mut pool), 1);
        let s = port.stats();
        assert_eq!((s.tx_packets, s.tx_errors), (6, 1));
        assert_eq!(peer.recv(1, WAIT), vec![udp4(4001, 100, 5)]);

        let counters: HashMap<&str, u64> = port.counters().into_iter().collect();
        assert_eq!(counters["afpacket_rx_packets"], sent.len() as u64);
        assert_eq!(counters["afpacket_mtu"], 1500);
        assert_eq!(counters["afpacket_queues"], 1);
        port.close().unwrap();
        other.close().unwrap();
        drop((q, oq));
        assert_eq!(promiscuity(name, "fwa"), 0, "promiscuous mode left with the sockets");
    });
}

/// Two workers on one interface: the fanout group hands each flow to exactly one queue, and
/// every frame is accounted for.
#[test]
fn fanout_keeps_flows_on_one_queue() {
    on_veth(2, 1500, |_| {
        let mut port = AfPacketPort::new(AfPacketConfig::new("fwa")).unwrap();
        let mut q = port.open(2).unwrap();
        assert_eq!((q.rx.len(), q.tx.len()), (2, 2));
        assert!(port.fanout_group().is_some());
        let peer = Raw::new("fwb");
        const FLOWS: u16 = 64;
        const PER_FLOW: u8 = 4;
        let mut sent = HashSet::new();
        for round in 0..PER_FLOW {
            for flow in 0..FLOWS {
                let f = udp4(5000 + flow, 60 + usize::from(round), round);
                peer.send(&f);
                sent.insert(f);
            }
        }
        let total = usize::from(FLOWS) * usize::from(PER_FLOW);
        let mut pool = PacketPool::default();
        let got = drain(&mut q.rx, &mut pool, total, WAIT, LINGER);
        assert_eq!(got.len(), total, "every frame once");
        let unique: HashSet<Vec<u8>> = got.iter().map(|(_, f)| f.clone()).collect();
        assert_eq!(unique, sent, "the frames sent, none twice");
        let mut queue_of: HashMap<u16, usize> = HashMap::new();
        let mut per_queue = [0u64; 2];
        for (qi, f) in &got {
            per_queue[*qi] += 1;
            let sport = common::parse(f).sport;
            let first = *queue_of.entry(sport).or_insert(*qi);
            assert_eq!(first, *qi, "flow {sport} seen on two queues");
        }
        assert_eq!(queue_of.len(), usize::from(FLOWS));
        assert!(
            per_queue.iter().all(|&n| n > 0),
            "64 flows all on one queue: {per_queue:?}"
        );
        let per = port.rx_per_queue();
        assert_eq!([per[0].packets, per[1].packets], per_queue);
        let s = port.stats();
        assert_eq!(s.rx_packets, total as u64);
        assert_eq!(s.kernel_packets, total as u64);
        // Both TX queues send.
        let mut b = Batch::new();
        for w in 0..2 {
            b.push(Packet::from_frame(&udp4(6000 + w as u16, 60, 6)).unwrap())
                .unwrap();
            assert_eq!(q.tx[w].tx_burst(&mut b, &mut pool), 1);
        }
        assert_eq!(peer.recv(2, WAIT).len(), 2);
        assert_eq!(
            port.tx_per_queue().iter().map(|t| t.packets).collect::<Vec<_>>(),
            [1, 1]
        );
        port.close().unwrap();
    });
}

/// A queue with nothing to read lets its worker sleep in `poll()` on its socket; one frame
/// wakes it, and that frame alone is readable at once (a ring slot is handed over per frame,
/// with no block to fill or timer to wait for). Once it is taken the socket stops being
/// readable, so an idle worker does not spin through `poll()`.
#[test]
fn a_lone_frame_wakes_a_sleeping_queue_and_is_readable_at_once() {
    on_veth(1, 1500, |_| {
        let mut port = AfPacketPort::new(AfPacketConfig::new("fwa")).unwrap();
        let mut q = port.open(1).unwrap();
        lone_frames_wake(&mut q.rx, &Raw::new("fwb"));
        port.close().unwrap();
    });
}

/// Frames larger than a buffer, or than a ring slot, are counted and dropped, never delivered
/// cut short; the frames around them still arrive.
#[test]
fn oversized_frames_are_counted_not_truncated() {
    on_veth(1, 9000, |_| {
        let cfg = AfPacketConfig {
            block_size: 8192,
            frame_size: 8192,
            ring_blocks: 8,
            ..AfPacketConfig::new("fwa")
        };
        assert_eq!(cfg.max_frame_len(), 8192 - 66);
        let mut port = AfPacketPort::new(cfg).unwrap();
        let mut q = port.open(1).unwrap();
        assert_eq!(port.mtu(), Some(9000));
        let peer = Raw::new("fwb");

        // Default pool: 2048-byte buffers. 4000 bytes fit a slot but not a buffer.
        let mut small = PacketPool::default();
        let (big, ok) = (udp4(7000, 4000, 1), udp4(7001, 100, 1));
        peer.send(&big);
        peer.send(&ok);
        let got = drain(&mut q.rx, &mut small, 1, WAIT, LINGER);
        assert_eq!(frames_of(&got), vec![ok.clone()]);
        let s = port.stats();
        assert_eq!((s.rx_packets, s.rx_too_big), (1, 1));
        assert_eq!(port.rx_per_queue()[0].dropped, 1);

        // Large buffers: the 4000-byte frame now arrives whole, but 8500 bytes exceed the
        // ring slot and the kernel cuts them: dropped, not delivered truncated.
        let mut large = PacketPool::new(16384, 0, 64);
        let huge = udp4(7002, 8500, 2);
        peer.send(&big);
        peer.send(&huge);
        peer.send(&ok);
        let got = drain(&mut q.rx, &mut large, 2, WAIT, LINGER);
        assert_eq!(frames_of(&got), vec![big, ok]);
        let s = port.stats();
        assert_eq!((s.rx_packets, s.rx_too_big), (3, 2));
        assert_eq!(s.kernel_packets, 5);
        port.close().unwrap();
    });
}

/// A datagram from the local stack through a veth with TX checksum offload reaches the ring
/// with a partial checksum; the port completes it.
#[test]
fn partial_checksums_from_the_local_stack_are_completed() {
    on_veth(1, 1500, |name| {
        ip(name, &["addr", "add", "10.9.0.2/24", "dev", "fwb"]);
        ip(
            name,
            &[
                "neigh",
                "replace",
                "10.9.0.1",
                "lladdr",
                FWA_MAC,
                "dev",
                "fwb",
                "nud",
                "permanent",
            ],
        );
        let mut port = AfPacketPort::new(AfPacketConfig::new("fwa")).unwrap();
        let mut q = port.open(1).unwrap();
        let sock = std::net::UdpSocket::bind("10.9.0.2:0").unwrap();
        sock.send_to(&[0x42; 32], "10.9.0.1:9999").unwrap();
        let mut pool = PacketPool::default();
        let got = drain(&mut q.rx, &mut pool, 1, WAIT, LINGER);
        assert_eq!(got.len(), 1);
        let p = common::parse(&got[0].1);
        assert_eq!((p.proto, p.dport), (17, 9999));
        assert!(p.ip_csum_ok && p.l4_csum_ok, "checksums must be valid: {p:?}");
        let s = port.stats();
        assert_eq!(s.rx_csum_completed + s.rx_csum_partial, s.rx_csum_completed);
        if s.rx_csum_completed == 0 {
            eprintln!("note: this kernel delivered a complete checksum (no CHECKSUM_PARTIAL on veth)");
        }
        port.close().unwrap();
    });
}
