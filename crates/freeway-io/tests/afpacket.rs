//! AF_PACKET ports on veth pairs, each test in a fresh network namespace of its own.
//!
//! These tests need root (CAP_NET_ADMIN, CAP_NET_RAW) and `ip` (iproute2). Without them they
//! print a loud `*** SKIPPED ...` line (shown by plain `cargo test`) and pass, except when the
//! environment variable `CI` is set: then they fail.
//!
//! Each test creates a named namespace `fw-t<pid>-<n>` (deleted by a guard, even when the test
//! panics; deleting it deletes its veths), runs its body on a thread that `setns`es into it
//! (so the sockets live there), creates a veth pair `fwa` <-> `fwb`, opens an `AfPacketPort`
//! on `fwa`, and injects or captures frames on `fwb` with a plain raw packet socket written
//! independently of the port. IPv6 is disabled on the veths so the kernel sends nothing of
//! its own.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use freeway_io::afpacket::{AfPacketConfig, AfPacketPort};
use freeway_io::wait::{Waiter, Woken};
use freeway_io::{Port, RxQueue};
use freeway_packet::build::{build_frame, FrameSpec, L4};
use freeway_packet::{Batch, Packet, PacketPool};

// ---------------------------------------------------------------------------------------------
// Test bed
// ---------------------------------------------------------------------------------------------

/// A named network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// A skip (see `freeway_testkit::skip`: loud, a failure under CI).
fn skip(why: &str) -> Option<Netns> {
    freeway_testkit::skip(format!("AF_PACKET test: {why}"));
    None
}

/// A fresh namespace, or `None` (after a skip) when this machine cannot make one.
fn netns() -> Option<Netns> {
    static N: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("not root (needs CAP_NET_ADMIN to create namespaces and veths)");
    }
    let name = format!("fw-t{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    match Command::new("ip").args(["netns", "add", &name]).output() {
        Ok(o) if o.status.success() => Some(Netns { name }),
        Ok(o) => skip(&format!(
            "`ip netns add {name}` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => skip(&format!("cannot run `ip`: {e}")),
    }
}

/// Runs `f` on a thread that lives in namespace `ns`; a panic in `f` fails the test (after the
/// namespace guard has run, since the caller owns it).
fn in_netns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{}", ns.name);
    let h = std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: `file` is an open namespace file; setns changes only this thread's netns.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    });
    match h.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Runs `ip -n <ns> <args>`, asserts success and returns its output.
fn ip(ns: &str, args: &[&str]) -> String {
    let o = Command::new("ip")
        .arg("-n")
        .arg(ns)
        .args(args)
        .output()
        .expect("run ip");
    assert!(
        o.status.success(),
        "ip -n {ns} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The promiscuity count of `dev` (how many holders want promiscuous mode).
fn promiscuity(ns: &str, dev: &str) -> u32 {
    let out = ip(ns, &["-d", "link", "show", dev]);
    let mut words = out.split_whitespace();
    words.find(|w| *w == "promiscuity");
    words
        .next()
        .and_then(|w| w.parse().ok())
        .expect("promiscuity in ip -d link show")
}

/// MAC addresses of the veth ends.
const FWA_MAC: &str = "02:00:00:00:0a:01";
const FWB_MAC: &str = "02:00:00:00:0b:01";

/// Creates the veth pair `fwa` <-> `fwb` with `queues` queues each and MTU `mtu`, both up,
/// without IPv6 (so the kernel stays silent on them). Called from inside the namespace.
fn veth(ns: &str, queues: usize, mtu: u32) {
    let q = queues.to_string();
    ip(
        ns,
        &[
            "link",
            "add",
            "fwa",
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            "fwb",
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ],
    );
    for (d, mac) in [("fwa", FWA_MAC), ("fwb", FWB_MAC)] {
        // /proc/sys/net belongs to the namespace of the thread that opens it.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{d}/disable_ipv6"), "1");
        ip(ns, &["link", "set", d, "addrgenmode", "none"]);
        ip(ns, &["link", "set", d, "address", mac]);
        ip(ns, &["link", "set", d, "mtu", &mtu.to_string()]);
        ip(ns, &["link", "set", d, "up"]);
    }
}

/// Runs `f` in a fresh namespace (skipped, see [`netns`], where none can be made) on a thread
/// inside it, after [`veth`] made the pair there with `queues` queues and MTU `mtu`; `f` gets
/// the namespace's name.
fn on_veth(queues: usize, mtu: u32, f: impl FnOnce(&str) + Send + 'static) {
    let Some(ns) = netns() else { return };
    let name = ns.name.clone();
    in_netns(&ns, move || {
        veth(&name, queues, mtu);
        f(&name)
    });
}

/// A plain raw packet socket bound to one interface: the independent end of the pair.
struct Raw {
    fd: OwnedFd,
}

impl Raw {
    fn new(iface: &str) -> Raw {
        let idx = {
            let c = std::ffi::CString::new(iface).unwrap();
            // SAFETY: valid C string.
            unsafe { libc::if_nametoindex(c.as_ptr()) }
        };
        assert_ne!(idx, 0, "no interface {iface}");
        // SAFETY: plain syscall.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                i32::from(0x0003u16.to_be()),
            )
        };
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: all-zero sockaddr_ll is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = 0x0003u16.to_be();
        sll.sll_ifindex = idx as i32;
        // SAFETY: valid address of the given length.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
        Raw { fd }
    }

    fn send(&self, f: &[u8]) {
        for _ in 0..1000 {
            // SAFETY: `f` is a readable buffer of f.len() bytes.
            let r = unsafe { libc::send(self.fd.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
            if r == f.len() as isize {
                return;
            }
            let e = std::io::Error::last_os_error();
            assert!(
                matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)),
                "send of {} bytes: {e}",
                f.len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("send kept failing");
    }

    /// Frames received within `wait` (outgoing ones excluded), stopping early at `n`.
    fn recv(&self, n: usize, wait: Duration) -> Vec<Vec<u8>> {
        let end = Instant::now() + wait;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        while out.len() < n && Instant::now() < end {
            // SAFETY: all-zero sockaddr_ll is valid.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: `buf` is writable for its length; `sll`/`len` describe a valid address.
            let r = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut sll as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if r < 0 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            if sll.sll_pkttype != libc::PACKET_OUTGOING {
                out.push(buf[..r as usize].to_vec());
            }
        }
        out
    }
}

/// Polls every queue until `n` frames arrived (then `linger` longer, to catch duplicates) or
/// `wait` passed. Returns (queue index, frame) pairs in arrival order per queue.
fn drain(
    rx: &mut [Box<dyn RxQueue>],
    pool: &mut PacketPool,
    n: usize,
    wait: Duration,
    linger: Duration,
) -> Vec<(usize, Vec<u8>)> {
    let start = Instant::now();
    let mut reached: Option<Instant> = None;
    let mut out = Vec::new();
    let mut b = Batch::new();
    loop {
        let mut got = 0;
        for (q, r) in rx.iter_mut().enumerate() {
            got += r.rx_burst(&mut b, pool, 0);
            for p in b.drain() {
                out.push((q, p.data().to_vec()));
                pool.put(p);
            }
        }
        if out.len() >= n && reached.is_none() {
            reached = Some(Instant::now());
        }
        match reached {
            Some(t) if t.elapsed() >= linger => break,
            None if start.elapsed() >= wait => break,
            _ => {}
        }
        if got == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    out
}

fn frames_of(got: &[(usize, Vec<u8>)]) -> Vec<Vec<u8>> {
    got.iter().map(|(_, f)| f.clone()).collect()
}

fn udp4(sport: u16, len: usize, tag: u8) -> Vec<u8> {
    let mut f = build_frame(&FrameSpec {
        src_mac: [2, 0, 0, 0, 0xaa, 1],
        dst_mac: [2, 0, 0, 0, 0xbb, 1],
        src_port: sport,
        len,
        l4_checksum: false,
        ..FrameSpec::default()
    });
    let n = f.len();
    f[n - 1] = tag;
    f
}

const WAIT: Duration = Duration::from_secs(5);
const LINGER: Duration = Duration::from_millis(100);

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
        let mut waiter = Waiter::new(q.rx.iter().map(|r| r.as_ref())).expect("afpacket queues give a descriptor");
        let peer = Raw::new("fwb");
        let mut pool = PacketPool::default();
        let mut b = Batch::new();
        assert_eq!(waiter.wait(Duration::from_millis(1)).unwrap(), Woken::Timeout);
        for i in 0..3u8 {
            let f = udp4(5000 + u16::from(i), 80, i);
            peer.send(&f);
            assert_eq!(waiter.wait(WAIT).unwrap(), Woken::Ready, "frame {i} wakes the waiter");
            assert_eq!(
                q.rx[0].rx_burst(&mut b, &mut pool, 0),
                1,
                "frame {i} is readable at once"
            );
            assert_eq!(b.as_slice()[0].data(), &f[..]);
            pool.put_batch(&mut b);
            assert_eq!(
                waiter.wait(Duration::from_millis(1)).unwrap(),
                Woken::Timeout,
                "nothing left after frame {i}"
            );
        }
        drop(waiter);
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
