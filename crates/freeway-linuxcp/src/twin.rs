//! The interfaces' kernel twins: one tap device per router interface, in Freeway's network
//! namespace, with the interface's name, MAC address, MTU and addresses, so the kernel (and a
//! routing daemon on it) sees the router's interfaces and speaks through them.
//!
//! * **Punt** (Freeway → kernel): a worker's L3 stage hands a packet for the router that it
//!   does not answer itself to [`Twins::send`], which writes it to the twin (one non-blocking
//!   `writev` of the untagged frame; a full tap queue is a counted drop). These are a router's
//!   control packets (BGP, BFD, SSH): rare next to forwarded traffic, and written by the
//!   worker that received them, so nothing is queued or allocated.
//! * **Output** (kernel → Freeway): a thread (`fw-punt`, [`Twins::serve`]) waits on the taps
//!   and queues what the kernel sends ([`Twins::pop`], a bounded queue: full is a counted
//!   drop); one worker takes it between its batches and routes it out through its L3 stage,
//!   so ARP and neighbour discovery are Freeway's. A thread, not the workers' poll: the taps'
//!   descriptors then never join a worker's `poll()` set and a busy worker pays one queue
//!   check per batch, not a `read()` per tap.
//!
//! The twins are `IFF_NOARP`: the kernel resolves nothing on them (it sends every frame to the
//! twin's own MAC and Freeway routes it by its IP destination), and IPv6 addresses skip
//! duplicate detection. The taps are not persistent: they go with the run (their descriptors
//! close).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::netlink::Netlink;

/// One twin to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TwinSpec {
    /// Device name (at most 15 bytes): the interface's.
    pub name: String,
    /// The interface's MAC address.
    pub mac: [u8; 6],
    /// MTU.
    pub mtu: u32,
    /// IPv4 addresses with prefix lengths.
    pub v4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 addresses with prefix lengths.
    pub v6: Vec<(Ipv6Addr, u8)>,
}

/// An interface's addresses: IPv4 and IPv6, with prefix lengths.
pub type Addresses<'a> = (&'a [(Ipv4Addr, u8)], &'a [(Ipv6Addr, u8)]);

struct Tap {
    fd: OwnedFd,
    name: String,
}

/// Counters of the twins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TwinStats {
    /// Frames written to twins (punted).
    pub punted: u64,
    /// Frames not written: the tap's queue was full or the write failed.
    pub punt_failed: u64,
    /// Frames the kernel sent through twins, queued for a worker.
    pub sent: u64,
    /// Frames the kernel sent, dropped: the queue to the workers was full.
    pub sent_dropped: u64,
}

/// The twins of a run, by router interface index.
pub struct Twins {
    taps: Vec<Option<Tap>>,
    up: ArrayQueue<(u16, Vec<u8>)>,
    punted: AtomicU64,
    punt_failed: AtomicU64,
    sent: AtomicU64,
    sent_dropped: AtomicU64,
}

impl std::fmt::Debug for Twins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.taps.iter().flatten().map(|t| t.name.as_str()).collect();
        f.debug_struct("Twins").field("taps", &names).finish()
    }
}

/// Frames from the kernel waiting for a worker, at most.
const UP_QUEUE: usize = 1024;
/// The largest frame read from a twin.
const MAX_FRAME: usize = 65536 + 14;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?}: not a possible device name (1 to 15 bytes, no '/' or space)"),
        ));
    }
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

fn ioctl(fd: libc::c_int, req: libc::c_ulong, r: &mut libc::ifreq, what: &str, name: &str) -> io::Result<()> {
    // SAFETY: `r` is a valid ifreq for these requests, and lives across the call.
    if unsafe { libc::ioctl(fd, req as _, r as *mut libc::ifreq) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("twin {name}: {what}: {e}")));
    }
    Ok(())
}

fn open_tap(s: &TwinSpec) -> io::Result<OwnedFd> {
    let path = c"/dev/net/tun";
    // SAFETY: a valid NUL-terminated path and flags.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("twin {}: /dev/net/tun: {e}", s.name)));
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut r = ifreq(&s.name)?;
    r.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    ioctl(
        fd.as_raw_fd(),
        TUNSETIFF,
        &mut r,
        "TUNSETIFF (does a device of that name exist?)",
        &s.name,
    )?;
    // The device's settings, through an ordinary socket.
    // SAFETY: plain socket creation.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created, owned here.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    let sfd = sock.as_raw_fd();
    let mut r = ifreq(&s.name)?;
    r.ifr_ifru.ifru_hwaddr.sa_family = libc::ARPHRD_ETHER;
    // SAFETY: writing the sockaddr's data bytes of the union member just selected.
    unsafe {
        for (d, m) in r.ifr_ifru.ifru_hwaddr.sa_data.iter_mut().zip(s.mac) {
            *d = m as libc::c_char;
        }
    }
    ioctl(sfd, libc::SIOCSIFHWADDR, &mut r, "setting its MAC address", &s.name)?;
    let mut r = ifreq(&s.name)?;
    r.ifr_ifru.ifru_mtu = s.mtu as libc::c_int;
    ioctl(sfd, libc::SIOCSIFMTU, &mut r, "setting its MTU", &s.name)?;
    let mut r = ifreq(&s.name)?;
    ioctl(sfd, libc::SIOCGIFFLAGS, &mut r, "reading its flags", &s.name)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member.
    let flags = unsafe { r.ifr_ifru.ifru_flags };
    r.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_NOARP) as libc::c_short;
    ioctl(sfd, libc::SIOCSIFFLAGS, &mut r, "setting it up", &s.name)?;
    Ok(fd)
}

fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid NUL-terminated name.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// The netlink message of address `ip`/`len` on device `index`.
fn address_message(index: u32, ip: IpAddr, len: u8) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.prefix_len = len;
    m.header.index = index;
    m.attributes.push(AddressAttribute::Local(ip));
    m.attributes.push(AddressAttribute::Address(ip));
    if ip.is_ipv6() {
        m.header.flags = AddressHeaderFlags::Nodad;
        m.attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
    }
    m
}

fn add_address(nl: &mut Netlink, index: u32, ip: IpAddr, len: u8, name: &str) -> io::Result<()> {
    let m = address_message(index, ip, len);
    nl.change(RouteNetlinkMessage::NewAddress(m), NLM_F_CREATE | NLM_F_REPLACE)
        .map_err(|e| io::Error::new(e.kind(), format!("twin {name}: adding {ip}/{len}: {e}")))
}

/// Deletes address `ip`/`len` from device `index`; one already gone is no error.
fn del_address(nl: &mut Netlink, index: u32, ip: IpAddr, len: u8, name: &str) -> io::Result<()> {
    let m = address_message(index, ip, len);
    match nl.change(RouteNetlinkMessage::DelAddress(m), 0) {
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(()),
        r => r.map_err(|e| io::Error::new(e.kind(), format!("twin {name}: deleting {ip}/{len}: {e}"))),
    }
}

/// An interface's addresses, both families, as `IpAddr`s with prefix lengths.
fn all_addresses(v4: &[(Ipv4Addr, u8)], v6: &[(Ipv6Addr, u8)]) -> Vec<(IpAddr, u8)> {
    let v4 = v4.iter().map(|(a, l)| (IpAddr::V4(*a), *l));
    v4.chain(v6.iter().map(|(a, l)| (IpAddr::V6(*a), *l))).collect()
}

impl Twins {
    /// Creates the twins: `specs[i]` is router interface `i`'s (`None`: no twin). A device of
    /// the same name must not exist.
    pub fn create(specs: &[Option<TwinSpec>]) -> io::Result<Twins> {
        let mut nl = Netlink::open_with(false)?;
        let mut taps = Vec::with_capacity(specs.len());
        for s in specs {
            let Some(s) = s else {
                taps.push(None);
                continue;
            };
            let fd = open_tap(s)?;
            let index = ifindex(&s.name)?;
            for (a, l) in all_addresses(&s.v4, &s.v6) {
                add_address(&mut nl, index, a, l, &s.name)?;
            }
            tracing::info!(twin = %s.name, index, "kernel twin created");
            taps.push(Some(Tap {
                fd,
                name: s.name.clone(),
            }));
        }
        Ok(Twins {
            taps,
            up: ArrayQueue::new(UP_QUEUE),
            punted: AtomicU64::new(0),
            punt_failed: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            sent_dropped: AtomicU64::new(0),
        })
    }

    /// Gives the twin of `iface` new addresses: those of `old` that `new` lacks are deleted
    /// (the kernel deletes their connected routes), then every address of `new` is added
    /// (again: deleting an IPv4 address can take the secondary addresses of its subnet with
    /// it). `old` and `new` are (IPv4, IPv6) lists with prefix lengths. An interface without
    /// a twin changes nothing.
    pub fn set_addresses(&self, iface: u16, old: Addresses<'_>, new: Addresses<'_>) -> io::Result<()> {
        let Some(Some(tap)) = self.taps.get(usize::from(iface)) else {
            return Ok(());
        };
        let mut nl = Netlink::open_with(false)?;
        let index = ifindex(&tap.name)?;
        let (old, new) = (all_addresses(old.0, old.1), all_addresses(new.0, new.1));
        for (a, l) in old.iter().filter(|x| !new.contains(x)) {
            del_address(&mut nl, index, *a, *l, &tap.name)?;
        }
        for (a, l) in &new {
            add_address(&mut nl, index, *a, *l, &tap.name)?;
        }
        tracing::info!(twin = %tap.name, "kernel twin's addresses changed");
        Ok(())
    }

    /// Whether interface `iface` has a twin.
    pub fn has(&self, iface: u16) -> bool {
        self.taps.get(usize::from(iface)).is_some_and(Option::is_some)
    }

    /// Writes a frame, given in parts (the MAC addresses, then from the EtherType on: the
    /// frame without its VLAN tag), to the twin of `iface`. `None`: no twin; `Some(false)`:
    /// not written (full queue; counted).
    pub fn send(&self, iface: u16, parts: [&[u8]; 2]) -> Option<bool> {
        let tap = self.taps.get(usize::from(iface))?.as_ref()?;
        let iov = parts.map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        });
        // SAFETY: two iovecs over live slices; the descriptor is open for `self`'s life.
        let n = unsafe { libc::writev(tap.fd.as_raw_fd(), iov.as_ptr(), 2) };
        let ok = n >= 0;
        if ok {
            self.punted.fetch_add(1, Ordering::Relaxed);
        } else {
            self.punt_failed.fetch_add(1, Ordering::Relaxed);
        }
        Some(ok)
    }

    /// The next frame the kernel sent, with the interface of its twin.
    #[inline]
    pub fn pop(&self) -> Option<(u16, Vec<u8>)> {
        self.up.pop()
    }

    /// Whether frames from the kernel wait.
    #[inline]
    pub fn pending(&self) -> bool {
        !self.up.is_empty()
    }

    /// The counters.
    pub fn stats(&self) -> TwinStats {
        TwinStats {
            punted: self.punted.load(Ordering::Relaxed),
            punt_failed: self.punt_failed.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            sent_dropped: self.sent_dropped.load(Ordering::Relaxed),
        }
    }

    /// Reads what the kernel sends through the twins into the queue, until `stop` (the
    /// `fw-punt` thread's body).
    pub fn serve(&self, stop: &AtomicBool) {
        let mut pfds: Vec<(u16, libc::pollfd)> = self
            .taps
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                t.as_ref().map(|t| {
                    (
                        i as u16,
                        libc::pollfd {
                            fd: t.fd.as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        },
                    )
                })
            })
            .collect();
        let mut fds: Vec<libc::pollfd> = pfds.iter().map(|p| p.1).collect();
        let mut buf = vec![0u8; MAX_FRAME];
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: a valid array of pollfds and its length; bounded timeout.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
            if r <= 0 {
                continue;
            }
            for (k, p) in fds.iter_mut().enumerate() {
                if p.revents == 0 {
                    continue;
                }
                p.revents = 0;
                let iface = pfds[k].0;
                // Drain this tap (bounded: at most a queue's worth per round).
                for _ in 0..UP_QUEUE {
                    // SAFETY: reads into a live buffer of its length.
                    let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
                    if n <= 0 {
                        break;
                    }
                    let frame = buf[..n as usize].to_vec();
                    if self.up.push((iface, frame)).is_ok() {
                        self.sent.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.sent_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        pfds.clear();
    }
}
