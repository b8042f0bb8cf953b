//! Packet buffers, metadata, batches and the per-worker buffer pool.
//!
//! A [`Packet`] owns one fixed-size heap buffer. The frame lives at `buf[start..start + len]`;
//! the bytes before `start` are headroom, so a VLAN tag (or any header) can be pushed without
//! moving the frame. Buffers are recycled through a per-worker [`PacketPool`], so the steady
//! state allocates nothing.
//!
//! Threads: a packet is owned by one thread at a time (moved, never shared); nothing here is
//! synchronised.
//!
//! # Invariant
//!
//! `start + len <= capacity` for every packet, at all times: every method that moves
//! `start` or `len` keeps it (and a buffer never changes size). [`Packet::data`] relies on it
//! to slice without a bounds check, and so may unsafe code that reads a frame through
//! [`Packet::frame_layout`] (the BPF JIT's batch loop).
//!
//! # Why a raw buffer pointer and a packed `Meta`
//!
//! Packets are moved by value between batches several times on their way from a receive
//! queue to a transmit queue, and each move copies the whole `Packet`; at tens of millions of
//! packets per second per core its size shows in the forwarding rate (56 bytes forwarded
//! about 8% fewer frames than 40 in the bridge benchmark). So a `Packet` is exactly 40 bytes:
//! the buffer is one pointer (its capacity lives in a [`PREFIX`]-byte header in front of
//! the buffer, read only where a frame longer than [`MIN_BUF_SIZE`] leaves room for is
//! written whole, on drop and on clone, not by [`Packet::data`]), and [`Meta`] is 28 bytes (`repr(C, packed(4))`, the bytes a pcap record did
//! not store in 24 bits). A `Box<[u8]>` would take two words and no crate offers a thin
//! owned byte buffer with a header that fits this better.
//!
//! # Cache lines a small frame touches
//!
//! A worker cycles through a few hundred buffers (its receive batch, each port's pending
//! transmit batch, the free list's top), and each line of them it touches per packet competes
//! for the first-level cache. So a buffer's first byte is cache-line aligned (the capacity
//! sits in the last bytes of a line of its own in front of it, [`BUF_ALIGN`]), which puts a
//! received frame (at [`HEADROOM`], a multiple of the line) at the start of a line: a
//! minimum-size frame fills one line, not two. And no buffer is smaller than
//! [`MIN_BUF_SIZE`], so writing a frame that fits that ([`Packet::fill`], [`Packet::set_frame`])
//! needs no look at the capacity's line: a small frame's buffer costs one line per packet.

use std::alloc::Layout;
use std::ptr::NonNull;

/// Default buffer size: a 1518-byte frame plus two VLAN tags plus headroom fits.
pub const DEFAULT_BUF_SIZE: usize = 2048;
/// Largest buffer a packet may have (offsets are 16-bit).
pub const MAX_BUF_SIZE: usize = 65_535;
/// Smallest buffer a packet has ([`Packet::with_capacity`] rounds up to it): any frame of up
/// to `MIN_BUF_SIZE - HEADROOM` (128) bytes fits every buffer, so writing one needs no look at
/// the buffer's capacity (see the module doc).
pub const MIN_BUF_SIZE: usize = HEADROOM + 128;
/// Alignment of a buffer's first byte: a cache line (see the module doc). The allocation
/// starts one `BUF_ALIGN` before it, and the capacity is in that line's last [`PREFIX`] bytes.
pub const BUF_ALIGN: usize = 64;
/// Bytes a frame has beyond its L2 MTU at most: the Ethernet header and two VLAN tags.
pub const L2_OVERHEAD: usize = 14 + 8;

/// The longest frame of a port whose L2 MTU is `mtu`: `mtu` bytes of payload behind an
/// Ethernet header and up to two VLAN tags.
#[inline]
pub const fn max_frame_for_mtu(mtu: usize) -> usize {
    mtu + L2_OVERHEAD
}
/// Headroom reserved in front of a received frame.
pub const HEADROOM: usize = 128;
/// The most idle [`MAX_BUF_SIZE`] buffers a [`PacketPool`] keeps ([`PacketPool::get_huge`]).
pub const MAX_HUGE_FREE: usize = 8;
/// The most packets a [`Batch`] holds.
pub const MAX_BATCH: usize = 32;
/// `Meta::vlan` value for a frame that carries no 802.1Q tag.
pub const NO_VLAN: u16 = 0xffff;
/// `Meta::l3_off`/`l4_off` value when that layer is absent or was not parsed.
pub const NO_OFFSET: u16 = 0xffff;

/// Per-packet metadata filled by the port (ingress) and the parser.
///
/// `repr(C)` in this field order, packed to 4-byte alignment, so that it is 28 bytes and a [`Packet`] 40 (see the module
/// doc): read and write its fields by value (`p.meta.ts_ns`), a reference to `ts_ns` is not
/// allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct Meta {
    /// Index of the port the packet arrived on.
    pub in_port: u16,
    /// VLAN the packet belongs to after ingress classification. The parser stores the outer
    /// 802.1Q VID here ([`NO_VLAN`] if untagged); the bridge replaces it with the port's VLAN.
    pub vlan: u16,
    /// The innermost ethertype (after any VLAN tags).
    pub ethertype: u16,
    /// Offset of the L3 header from the start of the frame, or [`NO_OFFSET`].
    pub l3_off: u16,
    /// Offset of the L4 header from the start of the frame, or [`NO_OFFSET`].
    pub l4_off: u16,
    /// IP protocol / IPv6 next header of the L4 payload (0 if none).
    pub ip_proto: u8,
    /// Number of 802.1Q/802.1ad tags present in the frame.
    pub vlan_depth: u8,
    /// Symmetric flow hash (same for both directions of a flow).
    pub flow_hash: u32,
    /// What is known about the frame beyond its bytes ([`meta_flags`]): set by the stage that
    /// established it, trusted by the stages after it, so no stage repeats another's work.
    pub flags: u8,
    /// Bytes of the frame as it was on the wire that the source did not store (a pcap record
    /// cut to its file's snap length), little-endian in 24 bits: read and set through
    /// [`Meta::uncaptured`] and [`Meta::set_uncaptured`].
    uncaptured: [u8; 3],
    /// When the packet was received, in nanoseconds since the Unix epoch (0: unknown). Set
    /// by the receiving port (a pcap record's own timestamp, the wall clock at receive for
    /// live ports); capture taps and the pcap output write it.
    pub ts_ns: u64,
}

/// Bits of [`Meta::flags`].
pub mod meta_flags {
    /// The metadata describes the frame as it is now: set by the parser; a stage that changes
    /// the frame's layout keeps the metadata consistent (as `vlan_push`/`vlan_pop` do) or
    /// builds a new packet (whose metadata is reset). A stage that finds it set need not parse
    /// again.
    pub const PARSED: u8 = 1;
    /// The IPv4 header checksum was verified on this buffer, and every change since kept it
    /// valid (the TTL decrement's incremental update does).
    pub const IPV4_CSUM_OK: u8 = 2;
    /// The connection tracking state the tracker found for this packet (bits 2–4): one of
    /// the `CT_*` values below under this mask, 0 when the packet was not tracked. Set on
    /// ingress by the tracker; the firewall's `ct state` reads it.
    pub const CT_MASK: u8 = 0b111 << 2;
    /// A packet that would start a connection not yet in the table.
    pub const CT_NEW: u8 = 1 << 2;
    /// A packet of an established connection.
    pub const CT_ESTABLISHED: u8 = 2 << 2;
    /// An ICMP error about a tracked connection.
    pub const CT_RELATED: u8 = 3 << 2;
    /// A packet the tracker found invalid.
    pub const CT_INVALID: u8 = 4 << 2;
    /// A packet the tracker does not track (not IP, neighbour discovery).
    pub const CT_UNTRACKED: u8 = 5 << 2;
    /// With [`CT_NEW`]: the connection is not in the table yet (tracked without creating
    /// it); whoever lets the packet through creates it.
    pub const CT_UNCOMMITTED: u8 = 1 << 5;
    /// The packet is an IP datagram reassembled from fragments: its buffer's headroom holds a
    /// [`super::FragNote`] (read by [`super::Packet::frag_note`]) that says how to fragment it
    /// again on its way out. Set by the reassembler (`freeway-frag`); a stage that builds a
    /// new frame in the buffer resets the metadata, and with it this mark.
    pub const REASSEMBLED: u8 = 1 << 6;
    /// The buffer's headroom holds what the tracker's ingress lookup found of the packet's
    /// connection's translation (NAT), so that the NAT hooks need not look it up again. Set
    /// and read by `freeway-datapath`'s NAT (its module doc says where the note lies); a
    /// stage that builds a new frame in the buffer resets the metadata, and with it this mark.
    pub const NAT_NOTE: u8 = 1 << 7;
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            in_port: 0,
            vlan: NO_VLAN,
            ethertype: 0,
            l3_off: NO_OFFSET,
            l4_off: NO_OFFSET,
            ip_proto: 0,
            vlan_depth: 0,
            flow_hash: 0,
            flags: 0,
            uncaptured: [0; 3],
            ts_ns: 0,
        }
    }
}

impl Meta {
    /// The most [`Meta::uncaptured`] can hold: 16 MiB, far beyond any frame on a wire.
    pub const MAX_UNCAPTURED: u32 = (1 << 24) - 1;

    /// Bytes of the frame as it was on the wire that the source did not store (a pcap record
    /// cut to its file's snap length): the length on the wire is `len() + uncaptured()`
    /// ([`Packet::wire_len`]). 0 for a whole frame. Set by the receiving port; kept when
    /// headers are pushed or pulled, so the wire length follows the frame's edits.
    #[inline(always)]
    pub fn uncaptured(&self) -> u32 {
        let [a, b, c] = self.uncaptured;
        u32::from_le_bytes([a, b, c, 0])
    }

    /// Sets [`Meta::uncaptured`], saturating at [`Meta::MAX_UNCAPTURED`].
    #[inline(always)]
    pub fn set_uncaptured(&mut self, n: u32) {
        let [a, b, c, _] = n.min(Self::MAX_UNCAPTURED).to_le_bytes();
        self.uncaptured = [a, b, c];
    }
}

/// Bytes in front of every buffer that hold its capacity (a `usize`), so that a `Packet`
/// keeps one pointer instead of a pointer and a length.
pub const PREFIX: usize = std::mem::size_of::<usize>();

/// A frame in an owned buffer with headroom, plus metadata.
pub struct Packet {
    /// The buffer's first byte, aligned to [`BUF_ALIGN`]. The allocation is `BUF_ALIGN +
    /// capacity` bytes, aligned to `BUF_ALIGN`, and starts `BUF_ALIGN` bytes before this; the
    /// capacity is stored in the `PREFIX` bytes right before this. It is owned by this packet
    /// alone (allocated in `with_capacity`/`clone`, freed in `drop`).
    buf: NonNull<u8>,
    // u16 keeps `Packet` small (it is moved between batches several times per packet);
    // buffers are at most `MAX_BUF_SIZE` bytes, so both always fit.
    start: u16,
    len: u16,
    /// Metadata; reset by [`Packet::reset`].
    pub meta: Meta,
}

// SAFETY: a `Packet` owns its buffer exclusively (no other pointer to it exists), like a
// `Box<[u8]>`; moving it to another thread moves that ownership.
unsafe impl Send for Packet {}
// SAFETY: through `&Packet` the buffer is only read, as through `&Box<[u8]>`.
unsafe impl Sync for Packet {}

impl Clone for Packet {
    fn clone(&self) -> Packet {
        let buf = alloc_buf(self.capacity());
        // SAFETY: both buffers are `capacity` bytes long and distinct allocations; every
        // byte of the source was initialised when it was allocated (zeroed).
        unsafe { std::ptr::copy_nonoverlapping(self.buf.as_ptr(), buf.as_ptr(), self.capacity()) };
        Packet {
            buf,
            start: self.start,
            len: self.len,
            meta: self.meta,
        }
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        let cap = self.capacity();
        // SAFETY: the allocation starts `BUF_ALIGN` bytes before `buf` and was made by
        // `alloc_buf` with `buf_layout(cap)`; this packet owns it and drops it once.
        unsafe { std::alloc::dealloc(self.buf.as_ptr().sub(BUF_ALIGN), buf_layout(cap)) }
    }
}

/// The allocation of a buffer of `cap` bytes and the line in front of it.
fn buf_layout(cap: usize) -> Layout {
    // `cap <= MAX_BUF_SIZE`, so the size cannot overflow.
    Layout::from_size_align(BUF_ALIGN + cap, BUF_ALIGN).expect("buffer layout")
}

/// A zeroed buffer of `cap` bytes (`MIN_BUF_SIZE <= cap <= MAX_BUF_SIZE`) with its
/// capacity stored in front of it; returns its first byte (aligned to [`BUF_ALIGN`]).
fn alloc_buf(cap: usize) -> NonNull<u8> {
    let layout = buf_layout(cap);
    // SAFETY: the layout's size is at least `BUF_ALIGN + MIN_BUF_SIZE`, not zero.
    let base = unsafe { std::alloc::alloc_zeroed(layout) };
    let Some(base) = NonNull::new(base) else {
        std::alloc::handle_alloc_error(layout)
    };
    // SAFETY: the allocation is `BUF_ALIGN + cap` bytes aligned to `BUF_ALIGN` (a multiple
    // of a `usize`'s alignment): `base + BUF_ALIGN - PREFIX` holds one aligned `usize` inside
    // the first line, and `base + BUF_ALIGN` is inside the allocation (`cap > 0`).
    unsafe {
        base.add(BUF_ALIGN - PREFIX).cast::<usize>().write(cap);
        base.add(BUF_ALIGN)
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("len", &self.len)
            .field("meta", &self.meta)
            .finish()
    }
}

/// Byte offsets inside a [`Packet`] of what locates its frame, from
/// [`Packet::frame_layout`]: the frame of the packet at address `p` starts at
/// `*(p + ptr) as *const u8` plus the `u16` at `p + start`, and is the `u16` at `p + len`
/// bytes long; the next packet of a slice is at `p + size`. Valid for the build that
/// produced it, and only while the module invariant holds (always, for a live packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLayout {
    /// `size_of::<Packet>()`: the stride of a `[Packet]`.
    pub size: usize,
    /// Offset of the buffer's data pointer (a `*const u8`).
    pub ptr: usize,
    /// Offset of the frame's start in the buffer (a `u16`).
    pub start: usize,
    /// Offset of the frame's length (a `u16`).
    pub len: usize,
}

/// The frame does not fit the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooBig;

impl Packet {
    /// An empty packet with a buffer of `size` bytes (clamped to `MIN_BUF_SIZE ..=
    /// MAX_BUF_SIZE`).
    pub fn with_capacity(size: usize) -> Packet {
        let size = size.clamp(MIN_BUF_SIZE, MAX_BUF_SIZE);
        Packet {
            buf: alloc_buf(size),
            start: HEADROOM as u16,
            len: 0,
            meta: Meta::default(),
        }
    }

    /// An empty packet with the default buffer size.
    pub fn new() -> Packet {
        Packet::with_capacity(DEFAULT_BUF_SIZE)
    }

    /// A packet holding a copy of `frame` (allocates; for tests and slow paths).
    pub fn from_frame(frame: &[u8]) -> Result<Packet, TooBig> {
        let mut p = Packet::with_capacity((HEADROOM + frame.len()).max(DEFAULT_BUF_SIZE));
        p.set_frame(frame)?;
        Ok(p)
    }

    /// Empties the packet and resets metadata, keeping the buffer.
    #[inline]
    pub fn reset(&mut self) {
        self.start = HEADROOM as u16;
        self.len = 0;
        self.meta = Meta::default();
    }

    /// Replaces the contents with a copy of `frame`, placed after the headroom.
    #[inline]
    pub fn set_frame(&mut self, frame: &[u8]) -> Result<(), TooBig> {
        let dst = self.fill(frame.len())?;
        dst.copy_from_slice(frame);
        Ok(())
    }

    /// Makes the frame `len` bytes long, starting after the headroom, and returns it for
    /// filling in place (contents are whatever the buffer held). A frame that fits the
    /// smallest buffer ([`MIN_BUF_SIZE`]) is not checked against this one's capacity, which
    /// lies on a cache line of its own (see the module doc).
    #[inline]
    pub fn fill(&mut self, len: usize) -> Result<&mut [u8], TooBig> {
        if len > MIN_BUF_SIZE - HEADROOM && len > self.capacity() - HEADROOM {
            return Err(TooBig);
        }
        self.start = HEADROOM as u16;
        self.len = len as u16;
        Ok(self.data_mut())
    }

    /// The frame.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        let s = usize::from(self.start);
        let e = s + usize::from(self.len);
        debug_assert!(e <= self.capacity());
        // SAFETY: `s <= e <= capacity` (the module invariant): the bytes are inside the
        // buffer, initialised, and borrowed with `self`.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().add(s), e - s) }
    }

    /// The frame, mutable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let s = usize::from(self.start);
        let e = s + usize::from(self.len);
        debug_assert!(e <= self.capacity());
        // SAFETY: as in `data`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_ptr().add(s), e - s) }
    }

    /// Where a `Packet` keeps its frame, for code that reads frames straight from an array
    /// of packets (the BPF JIT's batch loop, [`FrameLayout`]). Always `Some` in this build
    /// (the buffer pointer is a plain field); an `Option` so such code keeps its fallback
    /// through [`Packet::data`].
    pub fn frame_layout() -> Option<FrameLayout> {
        Some(FrameLayout {
            size: std::mem::size_of::<Packet>(),
            ptr: std::mem::offset_of!(Packet, buf),
            start: std::mem::offset_of!(Packet, start),
            len: std::mem::offset_of!(Packet, len),
        })
    }

    /// Frame length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Length of the frame on the wire: [`Packet::len`] plus the bytes its source did not
    /// store ([`Meta::uncaptured`]); what a capture records as the original length and what
    /// a filter's `len` sees.
    #[inline(always)]
    pub fn wire_len(&self) -> u32 {
        (self.len as u32).saturating_add(self.meta.uncaptured())
    }

    /// Whether the frame is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of headroom available in front of the frame.
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.start)
    }

    /// Grows the frame by `n` bytes at the front (into the headroom) and returns the frame.
    /// `None` if the headroom is too small.
    #[inline]
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > usize::from(self.start) {
            return None;
        }
        self.start -= n as u16;
        self.len += n as u16;
        Some(self.data_mut())
    }

    /// Removes `n` bytes from the front. `false` (and no change) if the frame is shorter.
    #[inline]
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > usize::from(self.len) {
            return false;
        }
        self.start += n as u16;
        self.len -= n as u16;
        true
    }

    /// Shortens the frame to `len` bytes (no-op if already shorter).
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        if len < usize::from(self.len) {
            self.len = len as u16;
        }
    }

    /// Total buffer size (headroom + room for a frame).
    #[inline]
    pub fn capacity(&self) -> usize {
        // SAFETY: the prefix in front of `buf` holds the capacity, written once when the
        // buffer was allocated (`alloc_buf`) and never changed; it is aligned like a `usize`.
        unsafe { self.buf.as_ptr().sub(PREFIX).cast::<usize>().read() }
    }
}

impl Default for Packet {
    fn default() -> Self {
        Packet::new()
    }
}

/// What a reassembled datagram remembers of its fragments, kept in the first
/// [`FragNote::LEN`] bytes of its buffer's headroom (not in [`Meta`], which stays 28 bytes):
/// valid while [`meta_flags::REASSEMBLED`] is set and the headroom was never pushed into that
/// far (a frame's headers grow by a few tags at most, and [`HEADROOM`] is 128 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragNote {
    /// The largest fragment's IP length (IPv4 total length; IPv6 40 + payload length): the
    /// size the datagram is fragmented to again, as Linux's `frag_max_size`.
    pub max_size: u16,
    /// The fragments' identification (IPv4: 16 bits; IPv6: 32).
    pub id: u32,
}

impl FragNote {
    /// Bytes of headroom the note takes.
    pub const LEN: usize = 8;
}

impl Packet {
    /// Marks the packet reassembled ([`meta_flags::REASSEMBLED`]) and keeps `note` in the
    /// first bytes of its buffer. `false` (and nothing changed) if the frame starts too close
    /// to the buffer's start to leave room for it.
    pub fn set_frag_note(&mut self, note: FragNote) -> bool {
        let h = self.headroom();
        if h < FragNote::LEN {
            return false;
        }
        let Some(f) = self.push_front(h) else { return false };
        f[0..2].copy_from_slice(&note.max_size.to_le_bytes());
        f[4..8].copy_from_slice(&note.id.to_le_bytes());
        self.pull_front(h);
        self.meta.flags |= meta_flags::REASSEMBLED;
        true
    }

    /// The note of a reassembled packet; `None` for any other packet, or when its headers
    /// grew into the note's bytes.
    #[inline]
    pub fn frag_note(&self) -> Option<FragNote> {
        if self.meta.flags & meta_flags::REASSEMBLED == 0 || self.headroom() < FragNote::LEN {
            return None;
        }
        // SAFETY: the buffer's first `FragNote::LEN` bytes lie before `start` (checked
        // above), inside the allocation and initialised (zeroed when allocated).
        let b = unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), FragNote::LEN) };
        Some(FragNote {
            max_size: u16::from_le_bytes([b[0], b[1]]),
            id: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        })
    }
}

/// Up to [`MAX_BATCH`] packets processed together.
#[derive(Debug, Default)]
pub struct Batch {
    pkts: Vec<Packet>,
}

impl Batch {
    /// An empty batch with room for [`MAX_BATCH`] packets.
    pub fn new() -> Batch {
        Batch {
            pkts: Vec::with_capacity(MAX_BATCH),
        }
    }

    /// Number of packets.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// Whether the batch is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Whether the batch holds [`MAX_BATCH`] packets.
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.pkts.len() >= MAX_BATCH
    }

    /// Room left before the batch is full.
    #[inline(always)]
    pub fn room(&self) -> usize {
        MAX_BATCH.saturating_sub(self.pkts.len())
    }

    /// Adds a packet. Gives it back if the batch is full.
    #[inline]
    pub fn push(&mut self, p: Packet) -> Result<(), Packet> {
        if self.is_full() {
            return Err(p);
        }
        self.pkts.push(p);
        Ok(())
    }

    /// The packets.
    #[inline(always)]
    pub fn as_slice(&self) -> &[Packet] {
        &self.pkts
    }

    /// The packets, mutable.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [Packet] {
        &mut self.pkts
    }

    /// Keeps the packets for which `keep` returns true, in order; the others go back to
    /// `pool`.
    #[inline]
    pub fn retain_or_recycle(&mut self, pool: &mut PacketPool, mut keep: impl FnMut(&mut Packet) -> bool) {
        let mut i = 0;
        while i < self.pkts.len() {
            if keep(&mut self.pkts[i]) {
                i += 1;
            } else {
                pool.put(self.pkts.remove(i));
            }
        }
    }

    /// Removes all packets, in order.
    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, Packet> {
        self.pkts.drain(..)
    }
}

/// A per-worker free list of packet buffers.
///
/// `get` reuses a buffer when one is free and allocates otherwise; `put` keeps at most
/// `max_free` buffers and frees the rest, so the pool is bounded.
///
/// # Two sizes: jumbo frames without slowing small ones
///
/// Every buffer of the main list is `buf_size` bytes ([`DEFAULT_BUF_SIZE`]: a 1518-byte
/// frame and its tags fit). A datapath with a port whose MTU needs more turns on a second
/// list of larger buffers ([`PacketPool::with_large`]): a receiving port takes one only for a
/// frame that does not fit a small buffer ([`PacketPool::get_for`], [`PacketPool::get_large`]),
/// so small frames keep small buffers (fewer cache lines, less memory) on every port, and a
/// pool without the large list does exactly what it did before (one well-predicted branch
/// in `put`). With the large list on, `put` sends each buffer back to its own list by its
/// capacity.
#[derive(Debug)]
pub struct PacketPool {
    free: Vec<Packet>,
    /// Idle [`MAX_BUF_SIZE`] buffers (reassembled datagrams), at most [`MAX_HUGE_FREE`].
    huge: Vec<Packet>,
    buf_size: usize,
    max_free: usize,
    allocated: u64,
    /// The large buffers' size; 0: no large list.
    large_size: usize,
    large: Vec<Packet>,
    max_large: usize,
}

impl PacketPool {
    /// A pool of `buf_size`-byte buffers, pre-filled with `prefill` buffers, keeping at most
    /// `max_free` idle.
    pub fn new(buf_size: usize, prefill: usize, max_free: usize) -> PacketPool {
        let mut free = Vec::with_capacity(max_free.max(prefill));
        for _ in 0..prefill {
            free.push(Packet::with_capacity(buf_size));
        }
        PacketPool {
            free,
            huge: Vec::new(),
            buf_size,
            max_free: max_free.max(prefill),
            allocated: prefill as u64,
            large_size: 0,
            large: Vec::new(),
            max_large: 0,
        }
    }

    /// Turns on the list of `size`-byte buffers for frames larger than the main ones hold
    /// (see the type's doc), keeping at most a quarter of `max_free` of them idle (at least
    /// two batches' worth). A `size` no larger than the main buffers turns nothing on.
    pub fn with_large(mut self, size: usize) -> PacketPool {
        let size = size.min(MAX_BUF_SIZE);
        if size > self.buf_size {
            self.large_size = size;
            self.max_large = (self.max_free / 4).max(2 * MAX_BATCH);
            self.large = Vec::with_capacity(self.max_large);
        }
        self
    }

    /// The large buffers' size (0: the pool has none).
    pub fn large_size(&self) -> usize {
        self.large_size
    }

    /// The most frame bytes a buffer of this pool holds: a large one's if the pool has them.
    pub fn max_frame(&self) -> usize {
        self.large_size.max(self.buf_size).saturating_sub(HEADROOM)
    }

    /// A reset packet.
    #[inline]
    pub fn get(&mut self) -> Packet {
        reuse_or_alloc(&mut self.free, &mut self.allocated, self.buf_size)
    }

    /// A reset packet with room for a frame of `len` bytes when the pool has one: a main
    /// buffer when it fits one, else a large one (if the pool has them; else a main buffer,
    /// which the caller then finds too small).
    #[inline]
    pub fn get_for(&mut self, len: usize) -> Packet {
        if len > self.buf_size.saturating_sub(HEADROOM) && self.large_size != 0 {
            return self.take_large();
        }
        self.get()
    }

    /// A reset packet with a large buffer; `None` if the pool has no large list.
    #[inline]
    pub fn get_large(&mut self) -> Option<Packet> {
        if self.large_size == 0 {
            return None;
        }
        Some(self.take_large())
    }

    #[cold]
    fn take_large(&mut self) -> Packet {
        reuse_or_alloc(&mut self.large, &mut self.allocated, self.large_size)
    }

    /// Returns a packet's buffer to the pool.
    #[inline]
    pub fn put(&mut self, p: Packet) {
        if self.large_size != 0 && p.capacity() > self.buf_size {
            return self.put_large(p);
        }
        if self.free.len() < self.max_free {
            self.free.push(p);
        }
    }

    #[cold]
    fn put_large(&mut self, p: Packet) {
        if self.large.len() < self.max_large {
            self.large.push(p);
        }
    }

    /// Returns every packet of a batch to the pool, leaving the batch empty. Moves the
    /// packets in bulk (one by one when the pool has large buffers, each to its list);
    /// buffers beyond `max_free` are freed.
    #[inline]
    pub fn put_batch(&mut self, b: &mut Batch) {
        if self.large_size != 0 {
            for p in b.pkts.drain(..) {
                if p.capacity() > self.buf_size {
                    self.put_large(p);
                } else if self.free.len() < self.max_free {
                    self.free.push(p);
                }
            }
            return;
        }
        let room = self.max_free.saturating_sub(self.free.len());
        if b.pkts.len() > room {
            b.pkts.truncate(room);
        }
        self.free.append(&mut b.pkts);
    }

    /// Appends `n` reset packets to `b` (fewer if the batch has less room), moving them from the
    /// free list in bulk and allocating only when it runs dry. Returns how many were added.
    #[inline]
    pub fn get_into(&mut self, b: &mut Batch, n: usize) -> usize {
        let n = n.min(b.room());
        let take = n.min(self.free.len());
        let first = b.pkts.len();
        let rest = self.free.len() - take;
        b.pkts.reserve(take);
        // SAFETY: the free list's last `take` packets are initialised; shortening the list
        // first makes it forget them, and each one's buffer goes to exactly one new, reset
        // packet written into the batch's spare capacity (reserved above: `first + take` is
        // within it), after which the batch's length covers them. So every buffer keeps one
        // owner, and none is read twice or leaked; the two vectors do not overlap.
        unsafe {
            self.free.set_len(rest);
            let from = self.free.as_ptr().add(rest);
            let to = b.pkts.as_mut_ptr().add(first);
            for k in 0..take {
                let buf = (*from.add(k)).buf;
                to.add(k).write(Packet {
                    buf,
                    start: HEADROOM as u16,
                    len: 0,
                    meta: Meta::default(),
                });
            }
            b.pkts.set_len(first + take);
        }
        for _ in take..n {
            self.allocated += 1;
            b.pkts.push(Packet::with_capacity(self.buf_size));
        }
        n
    }

    /// A reset packet with a [`MAX_BUF_SIZE`] buffer (for a reassembled datagram): reused
    /// from the huge free list, allocated when it is empty.
    pub fn get_huge(&mut self) -> Packet {
        reuse_or_alloc(&mut self.huge, &mut self.allocated, MAX_BUF_SIZE)
    }

    /// Returns a packet to the pool's list that fits it: a [`MAX_BUF_SIZE`] buffer to the
    /// huge list (at most [`MAX_HUGE_FREE`] kept), any other to [`PacketPool::put`].
    pub fn put_huge(&mut self, p: Packet) {
        if p.capacity() < MAX_BUF_SIZE {
            self.put(p);
        } else if self.huge.len() < MAX_HUGE_FREE {
            self.huge.push(p);
        }
    }

    /// Buffers allocated over the pool's life (a steady state shows this flat).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Buffer size of this pool.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }
}

/// A reset packet from `free`, or a new one of `size` bytes (counted in `allocated`).
#[inline(always)]
fn reuse_or_alloc(free: &mut Vec<Packet>, allocated: &mut u64, size: usize) -> Packet {
    match free.pop() {
        Some(mut p) => {
            p.reset();
            p
        }
        None => {
            *allocated += 1;
            Packet::with_capacity(size)
        }
    }
}

/// The buffer size a pool needs for frames of a port whose L2 MTU is `mtu`: 0 when the
/// [`DEFAULT_BUF_SIZE`] buffers hold them, else enough for the frame, its tags and the
/// headroom, in whole cache lines.
pub fn large_buf_size_for_mtu(mtu: usize) -> usize {
    let need = HEADROOM + max_frame_for_mtu(mtu);
    if need <= DEFAULT_BUF_SIZE {
        0
    } else {
        need.next_multiple_of(64).min(MAX_BUF_SIZE)
    }
}

impl Default for PacketPool {
    fn default() -> Self {
        PacketPool::new(DEFAULT_BUF_SIZE, 4 * MAX_BATCH, 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout found by `frame_layout` locates every packet's frame: read through it, an
    /// array of packets at various starts and lengths gives what `data` gives.
    #[test]
    fn frame_layout_locates_the_frame() {
        let l = Packet::frame_layout().expect("the layout of this build is found");
        assert_eq!(l.size, std::mem::size_of::<Packet>());
        let mut pkts = Vec::new();
        for i in 0..20usize {
            let frame: Vec<u8> = (0..i * 7).map(|b| b as u8).collect();
            let mut p = Packet::from_frame(&frame).unwrap();
            if i % 3 == 0 {
                p.push_front(i).unwrap();
            } else {
                p.pull_front(i.min(p.len()));
            }
            pkts.push(p);
        }
        let base = pkts.as_ptr().cast::<u8>();
        for (i, p) in pkts.iter().enumerate() {
            // SAFETY: reads inside element `i` of `pkts` at the offsets the layout gives (a
            // data pointer and two u16), then the frame within its length (the invariant).
            let got = unsafe {
                let at = base.add(i * l.size);
                let ptr = at.add(l.ptr).cast::<*const u8>().read_unaligned();
                let start = at.add(l.start).cast::<u16>().read_unaligned();
                let len = at.add(l.len).cast::<u16>().read_unaligned();
                std::slice::from_raw_parts(ptr.add(usize::from(start)), usize::from(len))
            };
            assert_eq!(got, p.data(), "packet {i}");
        }
    }

    /// A packet is 40 bytes and its metadata 28 (the module doc says why); a field added
    /// to either must pay for itself in the forwarding benchmarks.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_packet_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<Meta>(), 28);
        assert_eq!(std::mem::size_of::<Packet>(), 40);
    }

    /// The uncaptured byte count saturates at 24 bits instead of wrapping.
    #[test]
    fn uncaptured_saturates() {
        let mut m = Meta::default();
        for n in [0, 1, 1158, 65_535, 262_144, Meta::MAX_UNCAPTURED] {
            m.set_uncaptured(n);
            assert_eq!(m.uncaptured(), n);
        }
        m.set_uncaptured(u32::MAX);
        assert_eq!(m.uncaptured(), Meta::MAX_UNCAPTURED);
    }

    /// A clone owns a copy of the buffer: writing one leaves the other as it was.
    #[test]
    fn a_clone_owns_its_buffer() {
        let mut a = Packet::from_frame(&[1, 2, 3, 4]).unwrap();
        let b = a.clone();
        a.data_mut()[0] = 9;
        assert_eq!((a.data(), b.data()), (&[9, 2, 3, 4][..], &[1, 2, 3, 4][..]));
        assert_eq!(a.capacity(), b.capacity());
    }

    /// The wire length is the frame plus what the source did not store, and follows header
    /// edits; parsing (even a failed parse) keeps the receive metadata.
    #[test]
    fn wire_len_follows_the_frame_and_survives_parsing() {
        let mut p = Packet::from_frame(&[0u8; 42]).unwrap();
        assert_eq!(p.wire_len(), 42, "a whole frame is as long on the wire as in memory");
        p.meta.set_uncaptured(1158);
        p.meta.ts_ns = 1_700_000_000_123_456_789;
        assert_eq!(p.wire_len(), 1200);
        p.push_front(4).unwrap();
        assert_eq!(p.wire_len(), 1204, "a pushed tag lengthens the frame on the wire too");
        let _ = crate::parse(&mut p);
        assert_eq!((p.meta.uncaptured(), p.meta.ts_ns), (1158, 1_700_000_000_123_456_789));
        p.reset();
        assert_eq!((p.wire_len(), p.meta.ts_ns), (0, 0));
    }

    #[test]
    fn headroom_push_and_pull() {
        let mut p = Packet::from_frame(&[1, 2, 3, 4]).unwrap();
        assert_eq!(p.headroom(), HEADROOM);
        let d = p.push_front(2).unwrap();
        d[0] = 9;
        d[1] = 8;
        assert_eq!(p.data(), &[9, 8, 1, 2, 3, 4]);
        assert!(p.pull_front(3));
        assert_eq!(p.data(), &[2, 3, 4]);
        assert!(!p.pull_front(4));
        assert!(p.push_front(HEADROOM + 100).is_none());
        p.truncate(1);
        assert_eq!(p.data(), &[2]);
    }

    #[test]
    fn a_received_frame_starts_a_cache_line_and_small_ones_fit_every_buffer() {
        for size in [0, MIN_BUF_SIZE, 300, DEFAULT_BUF_SIZE, 9216, MAX_BUF_SIZE] {
            let mut p = Packet::with_capacity(size);
            assert_eq!(p.capacity(), size.clamp(MIN_BUF_SIZE, MAX_BUF_SIZE));
            let frame = [7u8; MIN_BUF_SIZE - HEADROOM];
            p.set_frame(&frame).unwrap();
            assert_eq!(p.data().as_ptr() as usize % BUF_ALIGN, 0);
            assert_eq!(p.data(), &frame);
            let q = p.clone();
            assert_eq!((q.data(), q.capacity()), (p.data(), p.capacity()));
            assert_eq!(q.data().as_ptr() as usize % BUF_ALIGN, 0);
        }
        // One byte more than the smallest buffer holds: checked against the capacity.
        let mut small = Packet::with_capacity(0);
        assert_eq!(small.set_frame(&[0u8; MIN_BUF_SIZE - HEADROOM + 1]), Err(TooBig));
        assert!(small.is_empty());
    }

    #[test]
    fn too_big_frames_are_refused() {
        let mut p = Packet::with_capacity(256);
        assert_eq!(p.set_frame(&[0u8; 200]), Err(TooBig));
        assert!(p.set_frame(&[0u8; 100]).is_ok());
        assert_eq!(p.len(), 100);
    }

    #[test]
    fn batch_is_bounded_and_pool_recycles() {
        let mut pool = PacketPool::new(512, 0, 8);
        let mut b = Batch::new();
        for _ in 0..MAX_BATCH {
            b.push(pool.get()).unwrap();
        }
        assert!(b.is_full());
        assert!(b.push(pool.get()).is_err());
        let before = pool.allocated();
        pool.put_batch(&mut b);
        assert!(b.is_empty());
        for _ in 0..8 {
            let p = pool.get();
            pool.put(p);
        }
        assert_eq!(pool.allocated(), before, "a warm pool must not allocate");
        // Bulk paths: get_into fills up to the room, put_batch returns all, bounded by max_free.
        let mut b = Batch::new();
        assert_eq!(pool.get_into(&mut b, 40), MAX_BATCH);
        assert!(b.as_slice().iter().all(|p| p.is_empty() && p.meta == Meta::default()));
        pool.put_batch(&mut b);
        assert!(b.is_empty());
        let mut b = Batch::new();
        pool.get_into(&mut b, 5);
        assert_eq!(b.len(), 5);
    }

    /// A pool with a large list hands a large buffer only to a frame that needs one, and
    /// each buffer goes back to its own list; a pool without one has no large buffers.
    #[test]
    fn large_buffers_are_for_large_frames_only() {
        let mut small_only = PacketPool::new(DEFAULT_BUF_SIZE, 0, 64);
        assert!(small_only.get_large().is_none());
        assert_eq!(small_only.get_for(9000).capacity(), DEFAULT_BUF_SIZE);
        assert_eq!(large_buf_size_for_mtu(1500), 0);
        let big = large_buf_size_for_mtu(9000);
        assert!(big >= HEADROOM + 9000 + L2_OVERHEAD && big % 64 == 0);
        let mut pool = PacketPool::new(DEFAULT_BUF_SIZE, 0, 64).with_large(big);
        assert_eq!(pool.max_frame(), big - HEADROOM);
        let small = pool.get_for(1514);
        let large = pool.get_for(9014);
        assert_eq!((small.capacity(), large.capacity()), (DEFAULT_BUF_SIZE, big));
        let mut large = large;
        assert!(large.set_frame(&[7u8; 9014]).is_ok());
        pool.put(large);
        pool.put(small);
        let before = pool.allocated();
        let mut b = Batch::new();
        b.push(pool.get_for(9014)).unwrap();
        b.push(pool.get()).unwrap();
        assert_eq!(pool.allocated(), before, "each came back to its own list");
        assert!(b.as_slice()[0].is_empty(), "a reused large buffer is reset");
        pool.put_batch(&mut b);
        assert_eq!((pool.free.len(), pool.large.len()), (1, 1));
    }
}
