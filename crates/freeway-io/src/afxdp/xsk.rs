//! The AF_XDP socket of one queue: its UMEM, its four rings, and the few syscalls on it.
//! ABI structures from `<linux/if_xdp.h>` (stable kernel ABI), written out here as in
//! [`crate::afpacket`].
//!
//! # Rings
//!
//! Each ring is a power-of-two array of descriptors in memory shared with the kernel, with a
//! producer and a consumer index (free-running `u32`s; a slot is `index & (size - 1)`) and a
//! flags word. One side produces (writes descriptors, then publishes them with a release store
//! of the producer index), the other consumes (reads the producer index with an acquire load,
//! reads the descriptors, then hands the slots back with a release store of the consumer
//! index). User space produces on the FILL and TX rings and consumes the RX and COMPLETION
//! rings. Each side caches the other side's index and reloads it only when the cache says
//! the ring is empty (or full), as libxdp does.
//!
//! # UMEM
//!
//! One anonymous mapping of `frames` chunks of `frame_size` bytes per socket, registered with
//! `XDP_UMEM_REG`. The first half of the chunks belongs to the receive side (they circulate
//! between the FILL ring, the kernel and the RX ring), the second half to the transmit side
//! (a free list, the TX ring, the kernel, the COMPLETION ring): the RX and TX queues of a
//! socket never touch the same chunk or the same ring, so each needs no lock even if they
//! were driven by different threads.
//!
//! The FILL ring has twice as many slots as there are RX chunks. The kernel publishes how far
//! it has read the FILL ring lazily: it reads the producer index, takes those entries one by
//! one, and stores its consumer index only when it has used them all up. A chunk can thus come
//! back on the RX ring, and be put on the FILL ring again, while its old entry still counts
//! as unread: the unread window is at most the chunks the kernel last saw plus the ones it
//! has handed back since, twice the RX chunks at most, so a received chunk always has a slot.
//! (With a FILL ring only as large as the RX chunks, the ring looks full after the first
//! frame.) The receive side still never takes a frame off the RX ring without a FILL slot
//! for its chunk.
//!
//! Threads: an [`Xsk`] is shared (`Arc`) by the queue(s) using it and the port (statistics);
//! each [`Ring`] is owned by one queue.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::afpacket::sys::{ctx, cvt};

const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_OPTIONS: libc::c_int = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

const XDP_PGOFF_RX_RING: i64 = 0;
const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

/// `sxdp_flags`: copy mode.
pub(crate) const XDP_COPY: u16 = 1 << 1;
/// `sxdp_flags`: zero-copy mode (the driver DMAs into the UMEM).
pub(crate) const XDP_ZEROCOPY: u16 = 1 << 2;
/// `sxdp_flags`: the kernel says through a ring flag when it needs a syscall to go on.
pub(crate) const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// A ring's flags word: the kernel needs a wake-up.
pub(crate) const XDP_RING_NEED_WAKEUP: u32 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct SockaddrXdp {
    sxdp_family: u16,
    sxdp_flags: u16,
    sxdp_ifindex: u32,
    sxdp_queue_id: u32,
    sxdp_shared_umem_fd: u32,
}

/// `struct xdp_statistics`: the kernel's counters of one socket (not reset by reading).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Frames dropped for other reasons (no free chunk in the FILL ring, too big).
    pub rx_dropped: u64,
    /// Frames dropped because of an invalid FILL descriptor.
    pub rx_invalid_descs: u64,
    /// TX descriptors refused as invalid.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the FILL ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty.
    pub tx_ring_empty_descs: u64,
}

/// `struct xdp_desc`: a frame in the UMEM (RX and TX rings).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// A shared mapping, unmapped on drop.
#[derive(Debug)]
struct Map {
    base: NonNull<u8>,
    len: usize,
}

impl Map {
    /// Maps `len` bytes of `fd` at page offset `off` (`fd` < 0: anonymous private memory).
    fn new(fd: RawFd, len: usize, off: i64) -> io::Result<Map> {
        let (flags, fd) = if fd < 0 {
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1)
        } else {
            (libc::MAP_SHARED | libc::MAP_POPULATE, fd)
        };
        // SAFETY: a fresh mapping at an address the kernel chooses; no existing memory is
        // affected. For a socket the kernel checks `len` and `off` against the ring it made.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map {
            base: NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
        })
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are what mmap returned; nothing uses the memory after this
        // (every pointer into it was derived from the owner being dropped).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// One mapped ring of `T` descriptors (`u64` for FILL/COMPLETION, [`XdpDesc`] for RX/TX).
#[derive(Debug)]
pub(crate) struct Ring<T> {
    _map: Map,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    desc: NonNull<T>,
    mask: u32,
    /// Producer side: our producer index. Consumer side: our consumer index.
    local: u32,
    /// Producer side: the consumer index plus `size` as last read. Consumer side: the
    /// producer index as last read.
    cached: u32,
}

// SAFETY: the ring is memory shared with the kernel, with no thread affinity; a `Ring` is
// owned by one queue, moved to its worker and used by that worker only (it is not `Sync`).
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    fn new(map: Map, off: &RingOffset, size: u32, producer_side: bool) -> Ring<T> {
        let at = |o: u64| {
            debug_assert!((o as usize) < map.len);
            // SAFETY: the kernel's offsets lie inside the mapping it sized for this ring.
            unsafe { NonNull::new_unchecked(map.base.as_ptr().add(o as usize)) }
        };
        let producer = at(off.producer).cast::<AtomicU32>();
        let consumer = at(off.consumer).cast::<AtomicU32>();
        let mut r = Ring {
            producer,
            consumer,
            flags: at(off.flags).cast::<AtomicU32>(),
            desc: at(off.desc).cast::<T>(),
            mask: size - 1,
            local: 0,
            cached: 0,
            _map: map,
        };
        if producer_side {
            r.local = r.prod().load(Ordering::Relaxed);
            r.cached = r.cons().load(Ordering::Acquire).wrapping_add(size);
        } else {
            r.local = r.cons().load(Ordering::Relaxed);
            r.cached = r.prod().load(Ordering::Acquire);
        }
        r
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: a 4-aligned word of the live mapping, accessed atomically by both sides.
        unsafe { self.producer.as_ref() }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as `prod`.
        unsafe { self.consumer.as_ref() }
    }

    /// Whether the kernel asks for a wake-up (`XDP_RING_NEED_WAKEUP`).
    #[inline]
    pub(crate) fn needs_wakeup(&self) -> bool {
        // SAFETY: as `prod`.
        unsafe { self.flags.as_ref() }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Ring size.
    pub(crate) fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Producer side: how many slots are free (up to `want`), reloading the consumer index
    /// only when the cached one shows fewer than `want`.
    #[inline]
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let n = self.cached.wrapping_sub(self.local);
        if n >= want {
            return want;
        }
        self.cached = self.cons().load(Ordering::Acquire).wrapping_add(self.size());
        self.cached.wrapping_sub(self.local).min(want)
    }

    /// Producer side: writes `v` into the `i`-th free slot (`i` < what [`Ring::free`] said).
    #[inline]
    pub(crate) fn write(&mut self, i: u32, v: T) {
        let slot = self.local.wrapping_add(i) & self.mask;
        // SAFETY: `slot <= mask`, inside the descriptor array of the mapping; the slot is free
        // (the consumer is past it), so the kernel does not read it until we publish it.
        unsafe { self.desc.as_ptr().add(slot as usize).write_volatile(v) }
    }

    /// Producer side: publishes `n` written slots.
    #[inline]
    pub(crate) fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // Release: the descriptors are visible before the index that hands them over.
        self.prod().store(self.local, Ordering::Release);
    }

    /// Producer side: whether the kernel has consumed everything we published.
    pub(crate) fn drained(&self) -> bool {
        self.cons().load(Ordering::Acquire) == self.local
    }

    /// Consumer side: how many descriptors are ready (up to `want`).
    #[inline]
    pub(crate) fn ready(&mut self, want: u32) -> u32 {
        let n = self.cached.wrapping_sub(self.local);
        if n >= want {
            return want;
        }
        self.cached = self.prod().load(Ordering::Acquire);
        self.cached.wrapping_sub(self.local).min(want)
    }

    /// Consumer side: the `i`-th ready descriptor (`i` < what [`Ring::ready`] said).
    #[inline]
    pub(crate) fn read(&self, i: u32) -> T {
        let slot = self.local.wrapping_add(i) & self.mask;
        // SAFETY: `slot <= mask`, inside the descriptor array; the kernel published it
        // (acquire in `ready`) and does not rewrite it until we release it.
        unsafe { self.desc.as_ptr().add(slot as usize).read_volatile() }
    }

    /// Consumer side: hands `n` read slots back.
    #[inline]
    pub(crate) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // Release: our reads of the slots happen before the kernel may reuse them.
        self.cons().store(self.local, Ordering::Release);
    }
}

/// The UMEM of one socket.
#[derive(Debug)]
pub(crate) struct Umem {
    map: Map,
    pub(crate) frame_size: u32,
}

// SAFETY: plain memory. The RX and TX queues of a socket each own half of the chunks and only
// touch their own (see the module documentation), so sharing it (`Arc`) between them is sound.
unsafe impl Send for Umem {}
// SAFETY: as above.
unsafe impl Sync for Umem {}

impl Umem {
    /// Whether `len` bytes at `addr` lie inside the UMEM.
    fn fits(&self, addr: u64, len: usize) -> bool {
        usize::try_from(addr)
            .ok()
            .and_then(|a| a.checked_add(len))
            .is_some_and(|end| end <= self.map.len)
    }

    /// The `len` bytes at `addr`; `None` if out of range.
    ///
    /// # Safety
    /// The chunk holding them must belong to the caller (received and not yet put back on
    /// the FILL ring) for as long as the slice lives: the kernel does not write it then.
    #[inline]
    pub(crate) unsafe fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.fits(addr, len) {
            return None;
        }
        // SAFETY: in bounds (checked); not written by anyone while the caller owns the chunk.
        Some(unsafe { std::slice::from_raw_parts(self.map.base.as_ptr().add(addr as usize), len) })
    }

    /// Copies `data` to `addr`; `false` (nothing written) if out of range.
    ///
    /// # Safety
    /// The chunk at `addr` must belong to the caller (free for transmission: on no ring and
    /// not in the kernel's hands), so that nobody else reads or writes it meanwhile.
    #[inline]
    pub(crate) unsafe fn write(&self, addr: u64, data: &[u8]) -> bool {
        if !self.fits(addr, data.len()) {
            return false;
        }
        // SAFETY: in bounds (checked); the chunk is exclusively the caller's; `data` is
        // ordinary process memory, not inside the UMEM's chunk, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.base.as_ptr().add(addr as usize), data.len());
        }
        true
    }
}

/// Ring sizes and UMEM geometry of one socket.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    /// Chunks in the UMEM (a power of two); half for RX, half for TX.
    pub frames: u32,
    /// Bytes per chunk (2048 or 4096).
    pub frame_size: u32,
}

/// An AF_XDP socket bound to one queue, with its UMEM and rings (taken out by the queues).
#[derive(Debug)]
pub(crate) struct Xsk {
    fd: OwnedFd,
    pub(crate) umem: std::sync::Arc<Umem>,
    pub(crate) zerocopy: bool,
}

/// What [`Xsk::open`] hands out besides the socket.
pub(crate) struct Rings {
    pub fill: Ring<u64>,
    pub comp: Ring<u64>,
    pub rx: Ring<XdpDesc>,
    pub tx: Ring<XdpDesc>,
}

impl Xsk {
    fn set<T: Copy>(&self, opt: libc::c_int, v: &T) -> io::Result<()> {
        // SAFETY: `v` is a live `T` of the size passed, only read by the kernel; `T` is one of
        // the `repr(C)` ABI structures above or an integer.
        cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                SOL_XDP,
                opt,
                (v as *const T).cast(),
                std::mem::size_of::<T>() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    fn get<T: Copy + Default>(&self, opt: libc::c_int) -> io::Result<T> {
        let mut v = T::default();
        let mut len = std::mem::size_of::<T>() as libc::socklen_t;
        // SAFETY: `v` is a live, writable `T` of `len` bytes; the kernel writes at most `len`
        // bytes, and every bit pattern is a valid value of these integer structures.
        cvt(unsafe { libc::getsockopt(self.fd.as_raw_fd(), SOL_XDP, opt, (&mut v as *mut T).cast(), &mut len) })?;
        Ok(v)
    }

    /// Creates a socket with its UMEM and rings and binds it to `queue` of `ifindex` with
    /// `bind_flags` (`XDP_COPY` or `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP` is added; `None`:
    /// zero-copy, falling back to copy if the driver refuses it). Each failing step is named.
    pub(crate) fn open(ifindex: u32, queue: u32, g: Geometry, copy: Option<bool>) -> io::Result<(Xsk, Rings)> {
        // SAFETY: plain syscall with constant arguments.
        let fd = cvt(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) }).map_err(|e| {
            ctx(
                e,
                "socket(AF_XDP) (kernel without CONFIG_XDP_SOCKETS, or not allowed: needs CAP_NET_RAW)",
            )
        })?;
        // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = g.frames as usize * g.frame_size as usize;
        let map = Map::new(-1, len, 0).map_err(|e| ctx(e, format_args!("mmap of a UMEM of {len} bytes")))?;
        let reg = UmemReg {
            addr: map.base.as_ptr() as u64,
            len: len as u64,
            chunk_size: g.frame_size,
            ..UmemReg::default()
        };
        let mut x = Xsk {
            fd,
            umem: std::sync::Arc::new(Umem {
                map,
                frame_size: g.frame_size,
            }),
            zerocopy: false,
        };
        x.set(XDP_UMEM_REG, &reg).map_err(|e| {
            ctx(
                e,
                format_args!(
                    "XDP_UMEM_REG ({} chunks of {} bytes; the UMEM is locked memory: without CAP_IPC_LOCK it counts against RLIMIT_MEMLOCK, `ulimit -l`; or lower `frames`)",
                    g.frames, g.frame_size
                ),
            )
        })?;
        let half = g.frames / 2;
        // The FILL ring holds twice the RX chunks (see the module documentation).
        let fill_size = g.frames;
        x.set(XDP_UMEM_FILL_RING, &fill_size)
            .map_err(|e| ctx(e, "XDP_UMEM_FILL_RING"))?;
        x.set(XDP_UMEM_COMPLETION_RING, &half)
            .map_err(|e| ctx(e, "XDP_UMEM_COMPLETION_RING"))?;
        x.set(XDP_RX_RING, &half).map_err(|e| ctx(e, "XDP_RX_RING"))?;
        x.set(XDP_TX_RING, &half).map_err(|e| ctx(e, "XDP_TX_RING"))?;
        let off: MmapOffsets = x.get(XDP_MMAP_OFFSETS).map_err(|e| ctx(e, "XDP_MMAP_OFFSETS"))?;
        let raw = x.fd.as_raw_fd();
        let map_ring = |o: &RingOffset, size: u32, desc: usize, pgoff: i64, what: &str| {
            Map::new(raw, o.desc as usize + size as usize * desc, pgoff)
                .map_err(|e| ctx(e, format_args!("mmap of the {what} ring")))
        };
        let rings = Rings {
            fill: Ring::new(
                map_ring(&off.fr, fill_size, 8, XDP_UMEM_PGOFF_FILL_RING, "FILL")?,
                &off.fr,
                fill_size,
                true,
            ),
            comp: Ring::new(
                map_ring(&off.cr, half, 8, XDP_UMEM_PGOFF_COMPLETION_RING, "COMPLETION")?,
                &off.cr,
                half,
                false,
            ),
            rx: Ring::new(
                map_ring(&off.rx, half, std::mem::size_of::<XdpDesc>(), XDP_PGOFF_RX_RING, "RX")?,
                &off.rx,
                half,
                false,
            ),
            tx: Ring::new(
                map_ring(&off.tx, half, std::mem::size_of::<XdpDesc>(), XDP_PGOFF_TX_RING, "TX")?,
                &off.tx,
                half,
                true,
            ),
        };
        let tries: &[u16] = match copy {
            Some(true) => &[XDP_COPY],
            Some(false) => &[XDP_ZEROCOPY],
            None => &[XDP_ZEROCOPY, XDP_COPY],
        };
        let mut last = None;
        for &mode in tries {
            match x.bind(ifindex, queue, mode | XDP_USE_NEED_WAKEUP) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) => last = Some((mode, e)),
            }
        }
        if let Some((mode, e)) = last {
            let m = if mode == XDP_ZEROCOPY {
                "zero-copy (the driver has no AF_XDP zero-copy support on this queue: try zerocopy = false or \"auto\")"
            } else {
                "copy mode"
            };
            return Err(ctx(
                e,
                format_args!("bind of the AF_XDP socket to queue {queue} in {m}"),
            ));
        }
        // Ask the kernel which mode it bound in (Linux 5.3; older: assume what we asked).
        x.zerocopy = match x.get::<u32>(XDP_OPTIONS) {
            Ok(o) => o & XDP_OPTIONS_ZEROCOPY != 0,
            Err(_) => copy == Some(false),
        };
        Ok((x, rings))
    }

    fn bind(&self, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
        let sa = SockaddrXdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `sa` is a live `sockaddr_xdp` and the length passed is its size.
        cvt(unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sa as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The kernel's counters of this socket.
    pub(crate) fn stats(&self) -> io::Result<XdpStatistics> {
        self.get(XDP_STATISTICS)
    }

    /// Kicks the kernel to transmit what the TX ring holds (`sendto` with no data). Returns
    /// the errno when it fails (`EAGAIN`/`EBUSY`: try again later; `ENOBUFS`: the device
    /// queue is full; anything else: a real error).
    #[inline]
    pub(crate) fn kick_tx(&self) -> Result<(), i32> {
        // SAFETY: a zero-length send with no buffer and no address: the kernel reads nothing.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r >= 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
        }
    }

    /// Kicks the kernel to refill from the FILL ring (`recvfrom` with no buffer).
    #[inline]
    pub(crate) fn kick_rx(&self) {
        // SAFETY: a zero-length receive with no buffer and no address: the kernel writes
        // nothing into our memory.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
    }
}

/// `struct ethtool_channels` (`ETHTOOL_GCHANNELS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// `struct ifreq` with the `ifr_data` pointer of `SIOCETHTOOL`, padded to the union's size.
#[repr(C)]
struct IfreqData {
    ifr_name: [u8; libc::IFNAMSIZ],
    ifr_data: *mut libc::c_void,
    _pad: [u8; 16],
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// The receive queues of `iface` as its driver reports them (`ETHTOOL_GCHANNELS`:
/// dedicated RX channels plus combined ones), looked up in the calling thread's network
/// namespace. Fails for drivers that do not report channels (`EOPNOTSUPP`).
pub(crate) fn rx_channels(iface: &str) -> io::Result<u32> {
    // SAFETY: plain syscall with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let mut r = IfreqData {
        ifr_name: [0; libc::IFNAMSIZ],
        ifr_data: (&mut ch as *mut EthtoolChannels).cast(),
        _pad: [0; 16],
    };
    let n = iface.len().min(libc::IFNAMSIZ - 1);
    r.ifr_name[..n].copy_from_slice(&iface.as_bytes()[..n]);
    // SAFETY: `r` is an ifreq-sized buffer with a NUL-terminated name whose data pointer
    // points to a live, writable `ethtool_channels` (the kernel writes only that).
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut r as *mut IfreqData) })?;
    Ok(ch.rx_count + ch.combined_count)
}
