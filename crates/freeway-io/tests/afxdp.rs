//! AF_XDP ports on veth pairs, each test in a fresh network namespace of its own
//! (`common::veth`; root needed, a loud skip elsewhere and a failure under `CI`): frames
//! injected on the peer `fwb` arrive through the XDP program and the sockets of `fwa`, in
//! native and in generic (skb) mode; frames sent by the port arrive on the peer; a lone frame
//! wakes a sleeping worker; and every way an open can fail leaves no XDP program behind.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::veth::*;
use freeway_io::afxdp::{AfXdpConfig, AfXdpPort, XdpMode, ZeroCopy};
use freeway_io::{Port, PortQueues};
use freeway_packet::{Batch, Packet, PacketPool};

/// A port on "fwa" with the default configuration changed by `f`.
fn fwa(f: impl FnOnce(&mut AfXdpConfig)) -> AfXdpPort {
    let mut c = AfXdpConfig::new("fwa");
    f(&mut c);
    AfXdpPort::new(c).unwrap()
}

/// What `ip -d link show` says of the XDP program on `dev`: "xdp" (native), "xdpgeneric"
/// (skb mode) or "" (none).
fn xdp_on(ns: &str, dev: &str) -> &'static str {
    let out = ip(ns, &["-d", "link", "show", dev]);
    if !out.contains("prog/xdp") {
        ""
    } else if out.contains("xdpgeneric") {
        "xdpgeneric"
    } else {
        "xdp"
    }
}

/// Injects `n` distinct frames of various sizes on the peer and checks that the port's
/// queues deliver each exactly once, byte for byte; then sends `n` through the port and
/// checks that the peer gets them.
fn round_trip(q: &mut PortQueues, n: u16) {
    let peer = Raw::new("fwb");
    let mut pool = PacketPool::default();
    let sent: Vec<Vec<u8>> = (0..n)
        .map(|i| udp4(6000 + i, 60 + usize::from(i) * 23 % 1400, i as u8))
        .collect();
    for f in &sent {
        peer.send(f);
    }
    let got = frames_of(&drain(&mut q.rx, &mut pool, sent.len(), WAIT, LINGER));
    assert_eq!(got.len(), sent.len(), "each frame once");
    let want: HashSet<_> = sent.iter().collect();
    assert_eq!(got.iter().collect::<HashSet<_>>(), want, "byte-identical");

    let out: Vec<Vec<u8>> = (0..n).map(|i| udp4(7000 + i, 100 + usize::from(i), i as u8)).collect();
    let mut b = Batch::new();
    for chunk in out.chunks(16) {
        for f in chunk {
            let mut p = Packet::new();
            p.set_frame(f).unwrap();
            b.push(p).unwrap();
        }
        assert_eq!(q.tx[0].tx_burst(&mut b, &mut pool), chunk.len());
        assert!(b.is_empty());
    }
    let recv = peer.recv(out.len(), WAIT);
    assert_eq!(
        recv.iter().collect::<HashSet<_>>(),
        out.iter().collect::<HashSet<_>>(),
        "the peer gets what the port sent"
    );
}

#[test]
fn native_xdp_delivers_and_sends_frames_on_every_queue_wakes_idle_workers_and_detaches_on_close() {
    on_veth(2, 1500, |ns| {
        let mut port = fwa(|_| ());
        let mut q = port.open(1).unwrap();
        assert_eq!(xdp_on(ns, "fwa"), "xdp", "veths run native XDP");
        let a = port.attached();
        assert!(a.native && a.queues == 2 && a.zerocopy_queues == 0, "{a:?}");
        assert_eq!((q.rx.len(), q.tx.len()), (2, 1));
        round_trip(&mut q, 64);
        // An idle worker sleeping in poll() on the sockets wakes for a lone frame.
        lone_frames_wake(&mut q.rx, &Raw::new("fwb"));
        let s = port.stats();
        assert_eq!((s.rx_packets, s.tx_packets), (64 + 3, 64), "{s:?}");
        assert_eq!(s.kernel_rx_drops(), 0, "{s:?}");
        port.close().unwrap();
        assert_eq!(xdp_on(ns, "fwa"), "", "close detaches the program");
    });
}

/// With the smallest UMEM (32 RX chunks) frames keep arriving after every chunk went round
/// the FILL and RX rings many times: no chunk is lost on its way back.
#[test]
fn chunks_go_round_the_fill_ring_many_times() {
    on_veth(1, 1500, |_| {
        let mut port = fwa(|c| c.frames = 64);
        let mut q = port.open(1).unwrap();
        let peer = Raw::new("fwb");
        let mut pool = PacketPool::default();
        for round in 0..40u16 {
            let sent: Vec<Vec<u8>> = (0..16).map(|i| udp4(round * 16 + i, 100, i as u8)).collect();
            for f in &sent {
                peer.send(f);
            }
            let got = frames_of(&drain(&mut q.rx, &mut pool, sent.len(), WAIT, Duration::ZERO));
            assert_eq!(got, sent, "round {round}");
        }
        let s = port.stats();
        assert_eq!((s.rx_packets, s.kernel_rx_drops()), (640, 0), "{s:?}");
    });
}

#[test]
fn skb_mode_works_and_native_mode_is_refused_where_the_driver_has_none() {
    on_veth(1, 1500, |ns| {
        let mut port = fwa(|c| c.mode = XdpMode::Skb);
        let mut q = port.open(2).unwrap();
        assert_eq!(xdp_on(ns, "fwa"), "xdpgeneric");
        // Two workers, one queue: worker 1 transmits through the AF_PACKET fallback.
        assert_eq!((q.rx.len(), q.tx.len()), (1, 2));
        round_trip(&mut q, 16);
        drop(q);
        port.close().unwrap();
        assert_eq!(xdp_on(ns, "fwa"), "");

        // The loopback device has no native XDP.
        let mut port = AfXdpPort::new(AfXdpConfig::new("lo")).unwrap();
        let e = port.open(1).err().expect("no native XDP on lo").to_string();
        assert!(e.contains("native") && e.contains("mode = \"auto\""), "{e}");
        assert_eq!(xdp_on(ns, "lo"), "");
        let mut port = AfXdpPort::new(AfXdpConfig {
            iface: "lo".into(),
            mode: XdpMode::Auto,
            ..AfXdpConfig::new("lo")
        })
        .unwrap();
        let _q = port.open(1).expect("auto falls back to skb mode");
        assert!(!port.attached().native);
        assert_eq!(xdp_on(ns, "lo"), "xdpgeneric");
        drop(port);
        assert_eq!(xdp_on(ns, "lo"), "", "dropping the port detaches the program");
    });
}

#[test]
fn failed_opens_name_the_step_and_leave_no_program() {
    on_veth(2, 1500, |ns| {
        // A queue the interface does not have: refused before anything is attached.
        let mut p = fwa(|c| c.queues = Some(3));
        let e = p.open(1).err().expect("fwa has 2 queues").to_string();
        assert!(e.contains("queues = 3") && e.contains("has 2 RX queues"), "{e}");
        assert_eq!(xdp_on(ns, "fwa"), "");

        // veth has no zero-copy AF_XDP: the bind fails after the program was attached, which
        // the error path detaches again.
        let mut p = fwa(|c| c.zerocopy = ZeroCopy::On);
        let e = p.open(1).err().expect("no zero-copy on veth").to_string();
        assert!(e.contains("queue 0") && e.contains("zero-copy"), "{e}");
        assert_eq!(xdp_on(ns, "fwa"), "");

        // A second port on the same interface does not replace the first one's program.
        let mut first = fwa(|_| ());
        let mut q = first.open(1).unwrap();
        let mut second = fwa(|_| ());
        let e = second.open(1).err().expect("the interface is taken").to_string();
        assert!(e.contains("another XDP program"), "{e}");
        drop(second);
        assert_eq!(xdp_on(ns, "fwa"), "xdp", "the first port's program stays");
        round_trip(&mut q, 8);
        drop(q);
        drop(first);
        assert_eq!(xdp_on(ns, "fwa"), "");
    });
}
