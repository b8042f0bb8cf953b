//! The thin layer over the kernel: AF_PACKET ABI constants and structures (from
//! `<linux/if_packet.h>`, stable kernel ABI, written out here so the crate does not depend on
//! which `libc` release exports them), and safe wrappers over the few syscalls we make.
//!
//! Threads: a [`Socket`] is shared (an `Arc`) by the worker that receives and transmits on it
//! and the control thread that reads its statistics; every method is one syscall on the file
//! descriptor, and the kernel serialises those. A [`Ring`] (the mapped RX ring) is owned by
//! exactly one RX queue and touched by its worker only.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

// Socket options (SOL_PACKET level).
pub(crate) const SOL_PACKET: libc::c_int = 263;
pub(crate) const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
pub(crate) const PACKET_STATISTICS: libc::c_int = 6;
pub(crate) const PACKET_VERSION: libc::c_int = 10;
pub(crate) const PACKET_RX_RING: libc::c_int = 5;
pub(crate) const PACKET_FANOUT: libc::c_int = 18;
pub(crate) const PACKET_QDISC_BYPASS: libc::c_int = 20;
pub(crate) const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
pub(crate) const PACKET_MR_PROMISC: u16 = 1;
pub(crate) const TPACKET_V2: libc::c_int = 1;

// Fanout modes and flags (the high 16 bits of the PACKET_FANOUT argument).
pub(crate) const PACKET_FANOUT_HASH: u32 = 0;
pub(crate) const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;

/// `ETH_P_ALL`: every protocol.
pub(crate) const ETH_P_ALL: u16 = 0x0003;
/// `sll_pkttype` of a frame this host sent.
pub(crate) const PACKET_OUTGOING: u8 = 4;

// Frame status (tpacket2_hdr::tp_status): who owns the slot, and what the kernel did.
pub(crate) const TP_STATUS_KERNEL: u32 = 0;
pub(crate) const TP_STATUS_USER: u32 = 1;
pub(crate) const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
pub(crate) const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
pub(crate) const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// `struct tpacket2_hdr`: the header at the start of each frame slot, followed at
/// `TPACKET_ALIGN(32) = 32` by a `struct sockaddr_ll`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tpacket2Hdr {
    pub tp_status: u32,
    pub tp_len: u32,
    pub tp_snaplen: u32,
    pub tp_mac: u16,
    pub tp_net: u16,
    pub tp_sec: u32,
    pub tp_nsec: u32,
    pub tp_vlan_tci: u16,
    pub tp_vlan_tpid: u16,
    pub tp_padding: [u8; 4],
}
const _: () = assert!(std::mem::size_of::<Tpacket2Hdr>() == 32);
/// `sll_pkttype` of the `sockaddr_ll` after the header (32 + 10).
pub(crate) const H_SLL_PKTTYPE: usize = 42;
/// Header bytes in front of the frame data at least (`tpacket2_hdr` + `sockaddr_ll`,
/// `TPACKET2_HDRLEN`).
pub(crate) const FRAME_HDR_LEN: usize = 52;
/// Where the kernel puts an Ethernet frame in its slot: `tp_mac` =
/// `TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14` = 80 - 14. A slot of `frame_size` bytes holds
/// a frame of at most `frame_size - 66` bytes (the kernel cuts longer ones).
pub(crate) const FRAME_MAC_OFF: usize = 66;

/// `struct tpacket_req` (TPACKET_V1/V2).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TpacketReq {
    pub tp_block_size: u32,
    pub tp_block_nr: u32,
    pub tp_frame_size: u32,
    pub tp_frame_nr: u32,
}

/// `struct tpacket_stats` (TPACKET_V1/V2).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TpacketStats {
    pub tp_packets: u32,
    pub tp_drops: u32,
}

/// `struct packet_mreq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: u16,
    mr_alen: u16,
    mr_address: [u8; 8],
}

/// `struct ifreq` as used by `SIOCGIFMTU`: the name, then an `int` in the union (padded to the
/// union's 24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
struct IfreqMtu {
    ifr_name: [u8; libc::IFNAMSIZ],
    ifr_mtu: libc::c_int,
    _pad: [u8; 20],
}

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Adds context to an OS error, keeping its kind and errno visible in the message.
pub(crate) fn ctx(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The first step of opening a port of `kind` on interface `iface`: refuses a second open,
/// then looks the interface up; the error names it.
pub(crate) fn open_iface(opened: bool, kind: &str, iface: &str) -> io::Result<u32> {
    if opened {
        return Err(io::Error::other(format!("{kind} port opened twice")));
    }
    if_index(iface).map_err(|e| ctx(e, format_args!("interface {iface:?}")))
}

/// The index of interface `name` in the calling thread's network namespace.
pub(crate) fn if_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// An AF_PACKET socket.
#[derive(Debug)]
pub(crate) struct Socket {
    fd: OwnedFd,
}

impl Socket {
    /// A raw, non-blocking, close-on-exec packet socket that receives nothing until bound
    /// (protocol 0), so that no frame of another interface can slip into the ring between
    /// `socket()` and `bind()`.
    pub(crate) fn new() -> io::Result<Socket> {
        // SAFETY: plain syscall with constant arguments.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
        Ok(Socket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `setsockopt(SOL_PACKET, opt, &val)`.
    pub(crate) fn set<T: Copy>(&self, opt: libc::c_int, val: &T) -> io::Result<()> {
        // SAFETY: `val` points to a live `T` of `size_of::<T>()` bytes for the whole call; the
        // kernel only reads it. `T` is one of our `repr(C)` ABI structs or an integer.
        cvt(unsafe {
            libc::setsockopt(
                self.raw(),
                SOL_PACKET,
                opt,
                (val as *const T).cast(),
                std::mem::size_of::<T>() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    /// `getsockopt(SOL_PACKET, opt)` into a `T`.
    pub(crate) fn get<T: Copy + Default>(&self, opt: libc::c_int) -> io::Result<T> {
        let mut v = T::default();
        let mut len = std::mem::size_of::<T>() as libc::socklen_t;
        // SAFETY: `v` is a live, writable `T` of `len` bytes; the kernel writes at most `len`
        // bytes and every bit pattern is valid for the integer/`repr(C)` integer structs used.
        cvt(unsafe { libc::getsockopt(self.raw(), SOL_PACKET, opt, (&mut v as *mut T).cast(), &mut len) })?;
        Ok(v)
    }

    /// Binds to `ifindex`, all protocols.
    pub(crate) fn bind(&self, ifindex: u32) -> io::Result<()> {
        self.bind_proto(ifindex, ETH_P_ALL)
    }

    /// Binds to `ifindex` for protocol `proto` (0: receive nothing, a transmit-only socket).
    pub(crate) fn bind_proto(&self, ifindex: u32, proto: u16) -> io::Result<()> {
        // SAFETY: all-zero is a valid `sockaddr_ll`.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto.to_be();
        sll.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `sll` is a valid `sockaddr_ll` living across the call, and the length given
        // is its size.
        cvt(unsafe {
            libc::bind(
                self.raw(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    /// Puts the interface in promiscuous mode for as long as this socket lives (the kernel
    /// counts the membership and drops it when the socket closes).
    pub(crate) fn add_promisc(&self, ifindex: u32) -> io::Result<()> {
        let m = PacketMreq {
            mr_ifindex: ifindex as libc::c_int,
            mr_type: PACKET_MR_PROMISC,
            ..PacketMreq::default()
        };
        self.set(PACKET_ADD_MEMBERSHIP, &m)
    }

    /// The interface MTU (`SIOCGIFMTU`).
    pub(crate) fn mtu(&self, iface: &str) -> io::Result<u32> {
        let mut r = IfreqMtu {
            ifr_name: [0; libc::IFNAMSIZ],
            ifr_mtu: 0,
            _pad: [0; 20],
        };
        let n = iface.len().min(libc::IFNAMSIZ - 1);
        r.ifr_name[..n].copy_from_slice(&iface.as_bytes()[..n]);
        // SAFETY: `r` is a writable ifreq-sized buffer with a NUL-terminated name; SIOCGIFMTU
        // writes the `int` field only.
        cvt(unsafe { libc::ioctl(self.raw(), libc::SIOCGIFMTU, &mut r as *mut IfreqMtu) })?;
        Ok(r.ifr_mtu.max(0) as u32)
    }

    /// Reads and resets the kernel's counters for this socket.
    pub(crate) fn stats(&self) -> io::Result<TpacketStats> {
        self.get(PACKET_STATISTICS)
    }

    /// Maps the RX ring set up with `req`.
    pub(crate) fn map_ring(&self, req: &TpacketReq) -> io::Result<Ring> {
        let len = req.tp_block_size as usize * req.tp_block_nr as usize;
        // SAFETY: a fresh shared mapping of the socket's ring: the kernel checks the length
        // against the ring it allocated and inserts its own pages; no existing memory is
        // affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.raw(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring {
            base: NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
            block_size: req.tp_block_size as usize,
            frame_size: req.tp_frame_size as usize,
            per_block: (req.tp_block_size / req.tp_frame_size) as usize,
            frames: req.tp_frame_nr as usize,
        })
    }

    /// Closes the socket, reporting the error `close(2)` returns (dropping ignores it).
    pub(crate) fn close(self) -> io::Result<()> {
        let fd = self.fd.into_raw_fd();
        // SAFETY: `fd` was owned by `self`, which is consumed; nobody else closes it.
        cvt(unsafe { libc::close(fd) }).map(|_| ())
    }
}

/// The memory-mapped TPACKET_V2 RX ring of one socket: `frames` slots of `frame_size` bytes,
/// `per_block` of them at the start of each block of `block_size` bytes (the kernel maps the
/// blocks one after another; a block's tail after its last slot is unused).
///
/// The mapping keeps the socket's ring alive even after the descriptor is closed; it is
/// unmapped on drop. Owned by one RX queue (one worker).
#[derive(Debug)]
pub(crate) struct Ring {
    base: NonNull<u8>,
    len: usize,
    pub(crate) block_size: usize,
    pub(crate) frame_size: usize,
    pub(crate) per_block: usize,
    pub(crate) frames: usize,
}

// SAFETY: the ring is plain shared memory with the kernel; it has no thread affinity. The
// owning `Ring` is moved to the worker that polls it and only that worker reads or writes it
// (it is not `Sync`, and no other handle to the mapping exists in the process).
unsafe impl Send for Ring {}

impl Ring {
    /// Start of frame slot `i` (16-aligned: blocks are page-aligned, `frame_size` a multiple
    /// of 16). Panics (debug) if out of range.
    #[inline(always)]
    pub(crate) fn slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.frames);
        let off = (i / self.per_block) * self.block_size + (i % self.per_block) * self.frame_size;
        debug_assert!(off + self.frame_size <= self.len);
        // SAFETY: `i < frames = per_block * blocks`, so the slot lies inside its block and the
        // block inside the mapping of `len` bytes.
        unsafe { self.base.as_ptr().add(off) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned; after this nobody touches the
        // memory (the `Ring` is gone, and all pointers into it were derived from it).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
