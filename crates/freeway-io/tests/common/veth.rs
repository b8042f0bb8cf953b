//! A veth pair in a fresh network namespace for port tests (AF_PACKET, AF_XDP).
//!
//! These helpers need root (CAP_NET_ADMIN, CAP_NET_RAW) and `ip` (iproute2). Without them
//! [`netns`] prints a loud `*** SKIPPED ...` line (shown by plain `cargo test`) and the test
//! passes, except when the environment variable `CI` is set: then it fails.
//!
//! Each test creates a named namespace `fw-t<pid>-<n>` (deleted by a guard, even when the test
//! panics; deleting it deletes its veths), runs its body on a thread that `setns`es into it
//! (so the sockets live there), creates a veth pair `fwa` <-> `fwb`, opens a port on `fwa`,
//! and injects or captures frames on `fwb` with a plain raw packet socket ([`Raw`]) written
//! independently of the ports. IPv6 is disabled on the veths so the kernel sends nothing of
//! its own.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use freeway_io::wait::{Waiter, Woken};
use freeway_io::RxQueue;
use freeway_packet::build::{build_frame, FrameSpec};
use freeway_packet::{Batch, PacketPool};

/// A named network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// A skip (see `freeway_testkit::skip`: loud, a failure under CI).
pub fn skip(why: &str) -> Option<Netns> {
    freeway_testkit::skip(format!("veth test: {why}"));
    None
}

/// A fresh namespace, or `None` (after a skip) when this machine cannot make one.
pub fn netns() -> Option<Netns> {
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
pub fn in_netns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
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
pub fn ip(ns: &str, args: &[&str]) -> String {
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
pub fn promiscuity(ns: &str, dev: &str) -> u32 {
    let out = ip(ns, &["-d", "link", "show", dev]);
    let mut words = out.split_whitespace();
    words.find(|w| *w == "promiscuity");
    words
        .next()
        .and_then(|w| w.parse().ok())
        .expect("promiscuity in ip -d link show")
}

/// MAC addresses of the veth ends.
pub const FWA_MAC: &str = "02:00:00:00:0a:01";
pub const FWB_MAC: &str = "02:00:00:00:0b:01";

/// Creates the veth pair `fwa` <-> `fwb` with `queues` queues each and MTU `mtu`, both up,
/// without IPv6 (so the kernel stays silent on them). Called from inside the namespace.
pub fn veth(ns: &str, queues: usize, mtu: u32) {
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
pub fn on_veth(queues: usize, mtu: u32, f: impl FnOnce(&str) + Send + 'static) {
    let Some(ns) = netns() else { return };
    let name = ns.name.clone();
    in_netns(&ns, move || {
        veth(&name, queues, mtu);
        f(&name)
    });
}

/// A plain raw packet socket bound to one interface: the independent end of the pair.
pub struct Raw {
    fd: OwnedFd,
}

impl Raw {
    pub fn new(iface: &str) -> Raw {
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

    pub fn send(&self, f: &[u8]) {
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
    pub fn recv(&self, n: usize, wait: Duration) -> Vec<Vec<u8>> {
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
pub fn drain(
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

pub fn frames_of(got: &[(usize, Vec<u8>)]) -> Vec<Vec<u8>> {
    got.iter().map(|(_, f)| f.clone()).collect()
}

pub fn udp4(sport: u16, len: usize, tag: u8) -> Vec<u8> {
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

pub const WAIT: Duration = Duration::from_secs(5);
pub const LINGER: Duration = Duration::from_millis(100);

/// Sends three lone frames on `peer`, one at a time, and checks that each wakes a [`Waiter`]
/// on the `rx` queues, is readable at once from one of them, and leaves nothing behind.
pub fn lone_frames_wake(rx: &mut [Box<dyn RxQueue>], peer: &Raw) {
    let mut waiter = Waiter::new(rx.iter().map(|r| r.as_ref())).expect("the queues give a descriptor");
    let mut pool = PacketPool::default();
    let mut b = Batch::new();
    assert_eq!(waiter.wait(Duration::from_millis(1)).unwrap(), Woken::Timeout);
    for i in 0..3u8 {
        let f = udp4(5000 + u16::from(i), 80, i);
        peer.send(&f);
        assert_eq!(waiter.wait(WAIT).unwrap(), Woken::Ready, "frame {i} wakes the waiter");
        let n: usize = rx.iter_mut().map(|r| r.rx_burst(&mut b, &mut pool, 0)).sum();
        assert_eq!(n, 1, "frame {i} is readable at once");
        assert_eq!(b.as_slice()[0].data(), &f[..]);
        pool.put_batch(&mut b);
        assert_eq!(
            waiter.wait(Duration::from_millis(1)).unwrap(),
            Woken::Timeout,
            "nothing left after frame {i}"
        );
    }
}
