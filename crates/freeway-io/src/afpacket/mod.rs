//! AF_PACKET ports: receive from and transmit to a Linux network interface through
//! memory-mapped TPACKET_V2 rings, one socket per worker.
//!
//! # Sockets
//!
//! [`Port::open`] with `workers` workers opens one packet socket per worker, each set up as:
//! `socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, 0)` (protocol 0 receives nothing, so no frame
//! of another interface enters the ring before `bind`), `PACKET_VERSION` = TPACKET_V2,
//! `PACKET_IGNORE_OUTGOING` (kernel ≥ 4.20; without it the RX queue skips outgoing frames
//! itself), `PACKET_QDISC_BYPASS` (if configured), `PACKET_RX_RING` with a `tpacket_req`
//! (`ring_blocks` × `block_size`, cut into slots of `frame_size`), `mmap` of the ring,
//! `bind` to the interface index with protocol `ETH_P_ALL`, then, with more than one worker
//! (or an explicit `fanout_group`), `PACKET_FANOUT` in mode `PACKET_FANOUT_HASH`: the
//! kernel hashes each frame's flow (addresses and ports, direction-independent; an IP
//! fragment, first or not, by its addresses and protocol only, since the flow dissector reads
//! no ports of a fragment) and delivers it to one socket of the
//! group, so each worker gets whole flows, and all the fragments of a datagram. Not
//! `PACKET_FANOUT_FLAG_DEFRAG`: with it the kernel hands the group each IPv4 datagram
//! reassembled, a frame larger than the link's MTU that no ring slot holds and no transmit
//! queue sends; the workers reassemble fragments themselves where they need whole datagrams
//! (conntrack, `freeway-frag`). The group id is `fanout_group` if set, else a
//! fresh id chosen by the kernel (`PACKET_FANOUT_FLAG_UNIQUEID`), one group per port. The
//! first socket also puts the interface in promiscuous mode (`PACKET_ADD_MEMBERSHIP`
//! `PACKET_MR_PROMISC`; undone by the kernel when the socket closes) and reads its MTU
//! (`SIOCGIFMTU`, reported as `afpacket_mtu`).
//!
//! Worker `w` gets RX queue `w` ([`AfPacketRx`], see [`rx`] for the ring walk, VLAN tag
//! re-insertion, checksum completion and too-big frames) and TX queue `w` ([`AfPacketTx`],
//! `sendmmsg` on the same socket, see [`tx`]).
//!
//! # Why TPACKET_V2: a lone frame goes through at once
//!
//! A TPACKET_V3 ring hands frames to user space a *block* at a time: the kernel packs frames
//! into the current block and gives the block over (`TP_STATUS_USER` in the block descriptor)
//! only when it is full or when the block-retire timer fires (every `tp_retire_blk_tov`
//! milliseconds, at least 1; 0 lets the kernel derive a period from the link speed). It also wakes `poll()` only when it retires a block. Reading the
//! frames of a block the kernel still owns is not part of the ABI: the kernel counts a frame
//! into the open block's `num_pkts` before it copies the frame in, and writes the frame's
//! header with no barrier user space could pair with (only retiring the block publishes
//! them), so a reader of an open block cannot tell a complete frame from one being written,
//! or from a stale header left in the block by its previous round.
//! At low rates every frame therefore waited for the timer: on the veth test bed
//! (`scripts/netns-testbed.sh`, h1 → Freeway bridging on AF_PACKET → h2, 2 workers, 200 pings
//! 10 ms apart, `scripts/e2e-bench.sh`) a ping through Freeway with the former default timer
//! of 2 ms averaged 2.05 ms, against 0.053 ms through the Linux bridge (medians of 3 runs;
//! `benchmarks/afpacket-latency-2026-11-24.md`).
//!
//! A TPACKET_V2 ring has one status word per frame slot: the kernel sets `TP_STATUS_USER` as
//! soon as a frame is in its slot and wakes `poll()` for it, so a lone frame is readable at
//! once and a sleeping worker wakes for it. The cost is a fixed slot per frame (`frame_size`
//! bytes whatever the frame's length: the default 8 MiB ring holds 4,096 frames, where a V3
//! ring of the same size held as many 64-byte frames as fit its blocks) and one status load
//! and store per frame instead of per block; frames are copied out either way. On the same
//! test bed with TPACKET_V2 and sleeping workers (below) the ping averages 0.21 ms, and the
//! idle process uses 2.2% of a core instead of 15.8% (medians of 3 runs; throughput moved
//! within the noise of that shared 2-core machine).
//!
//! # Idle workers sleep
//!
//! [`AfPacketRx`] gives its socket as [`RxQueue::wait_fd`]: a worker whose queues all give
//! one sleeps in `poll()` on them after a short spin without frames ([`crate::wait`]), and
//! wakes on the next frame. Under load it never gets there: `rx_burst` stays syscall-free.
//!
//! # Offloads
//!
//! Frames are copied out of the ring (zero-copy is out of scope). The kernel hands AF_PACKET
//! what the stack sees: with GRO or LRO on the interface, coalesced super-frames larger than
//! the MTU (counted `too_big` when they do not fit a buffer); from a local sender with TX
//! checksum offload, partial checksums (completed by the RX queue). The test bed
//! (`scripts/netns-testbed.sh`) turns GRO/GSO/TSO and checksum offloads off on its veths.
//!
//! # Invariants
//!
//! * A ring slot is read only while its status has `TP_STATUS_USER` (acquire) and handed back
//!   with a release store of `TP_STATUS_KERNEL` after the last read; slots are consumed in
//!   ring order.
//! * Every delivered packet is a whole frame as it was on the wire (VLAN tag included); a frame
//!   that does not fit is counted and dropped, never truncated.
//! * `tx_burst` and `rx_burst` never block and never allocate in steady state (buffers come
//!   from and return to the worker's pool).
//!
//! # Threads
//!
//! The control thread creates, opens and closes the port and reads its counters (including
//! the kernel's `PACKET_STATISTICS`, which only it reads: reading resets them, so the port
//! accumulates them under a mutex nobody on the fast path takes). Each RX and TX queue is owned
//! by one worker, the single writer of its counters. A socket is shared (`Arc`) by the queues
//! of one worker and the port; it is closed when the last of them lets go.

use std::io;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use freeway_sync::CachePadded;

use crate::{Port, PortQueues, RxQueue, StatsBlock, Totals, TxQueue};

pub mod rx;
pub(crate) mod sys;
pub mod tx;

/// One queue's place in its port's counters: the packets and bytes of every port kind
/// ([`StatsBlock`]) and the AF_PACKET counters `C` of its direction, both indexed by the
/// queue. Written only by the queue's worker.
#[derive(Debug)]
pub(crate) struct QueueSlot<C> {
    stats: StatsBlock,
    extra: Arc<[CachePadded<C>]>,
    idx: usize,
}

impl<C> QueueSlot<C> {
    /// Queue `idx` of both blocks.
    pub(crate) fn new(stats: StatsBlock, extra: Arc<[CachePadded<C>]>, idx: usize) -> QueueSlot<C> {
        assert!(idx < stats.len() && idx < extra.len(), "queue index out of range");
        QueueSlot { stats, extra, idx }
    }

    /// The queue's packets and bytes.
    #[inline]
    pub(crate) fn stats(&self) -> &crate::QueueStats {
        self.stats.queue(self.idx)
    }

    /// The queue's AF_PACKET counters.
    #[inline]
    pub(crate) fn extra(&self) -> &C {
        &self.extra[self.idx]
    }
}

pub use rx::{AfPacketRx, RxCounters};
pub use tx::{AfPacketTx, TxCounters};

/// Smallest `block_size`.
pub const MIN_BLOCK_SIZE: u32 = 4096;
/// Largest `block_size`.
pub const MAX_BLOCK_SIZE: u32 = 1 << 24;
/// Largest ring per socket (`ring_blocks * block_size`).
pub const MAX_RING_BYTES: u64 = 1 << 30;
/// Bytes of a ring slot in front of an Ethernet frame (the slot's header, its `sockaddr_ll`
/// and the kernel's alignment): a slot holds a frame of at most `frame_size - 66` bytes.
pub const FRAME_OVERHEAD: u32 = sys::FRAME_MAC_OFF as u32;

fn d_ring_blocks() -> u32 {
    64
}
fn d_block_size() -> u32 {
    1 << 17
}
fn d_frame_size() -> u32 {
    2048
}
fn d_true() -> bool {
    true
}

/// Configuration of an AF_PACKET port (the `afpacket` table of a `[[port]]` with
/// `kind = "afpacket"`): `afpacket = { iface = "veth0" }`.
///
/// Memory: `ring_blocks * block_size` bytes per worker (default 64 × 128 KiB = 8 MiB).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfPacketConfig {
    /// The interface name (required), e.g. "veth0"; at most 15 bytes.
    pub iface: String,
    /// PACKET_FANOUT group id shared by this port's sockets. Default: a fresh id chosen by the
    /// kernel when the port has more than one worker, none with one worker. Set it to share
    /// a group with another process (same mode: hash).
    #[serde(default)]
    pub fanout_group: Option<u16>,
    /// Blocks in each RX ring (2..=65536). Default 64.
    #[serde(default = "d_ring_blocks")]
    pub ring_blocks: u32,
    /// Bytes per ring block (the unit the kernel allocates the ring in): a power of two from
    /// 4 KiB to 16 MiB, at least the page size. Default 128 KiB.
    #[serde(default = "d_block_size")]
    pub block_size: u32,
    /// Bytes per frame slot: a multiple of 16 from 128 to `block_size`. A slot holds a frame
    /// of up to `frame_size - 66` bytes; the kernel cuts longer ones, which are then counted
    /// too big. The ring holds `ring_blocks * (block_size / frame_size)` frames. Default 2048
    /// (frames up to 1982 bytes, more than the datapath's buffers take).
    #[serde(default = "d_frame_size")]
    pub frame_size: u32,
    /// Put the interface in promiscuous mode while the port is open. Default true.
    #[serde(default = "d_true")]
    pub promisc: bool,
    /// Transmit straight to the driver, bypassing the qdisc layer (`PACKET_QDISC_BYPASS`;
    /// also hides our frames from other packet sockets such as tcpdump). Default true.
    #[serde(default = "d_true")]
    pub qdisc_bypass: bool,
}

impl AfPacketConfig {
    /// A configuration for `iface` with every other field at its default.
    pub fn new(iface: &str) -> AfPacketConfig {
        AfPacketConfig {
            iface: iface.to_string(),
            fanout_group: None,
            ring_blocks: d_ring_blocks(),
            block_size: d_block_size(),
            frame_size: d_frame_size(),
            promisc: true,
            qdisc_bypass: true,
        }
    }

    /// Checks the configuration; the error names the field and the bad value.
    pub fn validate(&self) -> Result<(), String> {
        let i = &self.iface;
        if i.is_empty() {
            return Err("iface: missing interface name".into());
        }
        if i.len() >= libc::IFNAMSIZ || i.contains(['/', '\0']) || i.chars().any(char::is_whitespace) {
            return Err(format!(
                "iface: {i:?} is not an interface name (at most {} bytes, no '/', NUL or spaces)",
                libc::IFNAMSIZ - 1
            ));
        }
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
            return Err(format!(
                "block_size: {bs} must be a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
            ));
        }
        if !(2..=65536).contains(&self.ring_blocks) {
            return Err(format!("ring_blocks: {} is out of range 2..=65536", self.ring_blocks));
        }
        let ring = u64::from(self.ring_blocks) * u64::from(bs);
        if ring > MAX_RING_BYTES {
            return Err(format!(
                "ring_blocks * block_size = {ring} bytes per worker, more than {MAX_RING_BYTES}"
            ));
        }
        let fs = self.frame_size;
        if fs % 16 != 0 || fs < 128 || fs > bs {
            return Err(format!(
                "frame_size: {fs} must be a multiple of 16 from 128 to block_size ({bs})"
            ));
        }
        Ok(())
    }

    /// The largest frame a ring slot holds (longer frames reach us cut and are dropped).
    pub fn max_frame_len(&self) -> usize {
        self.frame_size.saturating_sub(FRAME_OVERHEAD) as usize
    }

    fn req(&self) -> sys::TpacketReq {
        sys::TpacketReq {
            tp_block_size: self.block_size,
            tp_block_nr: self.ring_blocks,
            tp_frame_size: self.frame_size,
            tp_frame_nr: (self.block_size / self.frame_size) * self.ring_blocks,
        }
    }
}

/// All counters of a port, summed over its queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Frames delivered to workers.
    pub rx_packets: u64,
    /// Bytes delivered (VLAN tags included).
    pub rx_bytes: u64,
    /// Frames dropped as too big (buffer or ring slot).
    pub rx_too_big: u64,
    /// Frames whose stripped VLAN tag was put back.
    pub rx_vlan_restored: u64,
    /// Partial checksums completed.
    pub rx_csum_completed: u64,
    /// Partial checksums left as they were (not TCP/UDP).
    pub rx_csum_partial: u64,
    /// Outgoing frames skipped on the ring (kernels without `PACKET_IGNORE_OUTGOING`).
    pub rx_outgoing_skipped: u64,
    /// Frames handed to the kernel for transmission.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames dropped on transmit because a queue was full (`EAGAIN`/`ENOBUFS`).
    pub tx_busy: u64,
    /// Frames refused on transmit for another reason (e.g. larger than the MTU).
    pub tx_errors: u64,
    /// `sendmmsg` calls.
    pub tx_syscalls: u64,
    /// Frames the kernel's sockets saw (`tp_packets`, drops included), since open.
    pub kernel_packets: u64,
    /// Frames the kernel dropped because a ring was full (`tp_drops`).
    pub kernel_drops: u64,
}

/// Kernel statistics of one socket, accumulated across reads (each read resets them).
#[derive(Clone, Copy, Debug, Default)]
struct KernelTotals {
    packets: u64,
    drops: u64,
}

/// An AF_PACKET port on one interface.
#[derive(Debug)]
pub struct AfPacketPort {
    cfg: AfPacketConfig,
    opened: bool,
    ifindex: u32,
    mtu: Option<u32>,
    fanout_group: Option<u16>,
    ignore_outgoing: Option<bool>,
    socks: Vec<Arc<sys::Socket>>,
    rx_stats: StatsBlock,
    tx_stats: StatsBlock,
    rx_extra: Arc<[CachePadded<RxCounters>]>,
    tx_extra: Arc<[CachePadded<TxCounters>]>,
    kernel: Mutex<Vec<KernelTotals>>,
}

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, m)
}

impl AfPacketPort {
    /// A port for `cfg` (validated here; the interface is looked up by [`Port::open`]).
    pub fn new(cfg: AfPacketConfig) -> io::Result<AfPacketPort> {
        cfg.validate().map_err(invalid)?;
        Ok(AfPacketPort {
            cfg,
            opened: false,
            ifindex: 0,
            mtu: None,
            fanout_group: None,
            ignore_outgoing: None,
            socks: Vec::new(),
            rx_stats: StatsBlock::default(),
            tx_stats: StatsBlock::default(),
            rx_extra: Arc::new([]),
            tx_extra: Arc::new([]),
            kernel: Mutex::new(Vec::new()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AfPacketConfig {
        &self.cfg
    }

    /// The interface's MTU, read when the port was opened.
    pub fn mtu(&self) -> Option<u32> {
        self.mtu
    }

    /// The interface index, once open (0 before).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The fanout group the port's sockets joined, if any.
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout_group
    }

    /// Whether the kernel accepted `PACKET_IGNORE_OUTGOING` (`None` before open).
    pub fn ignore_outgoing(&self) -> Option<bool> {
        self.ignore_outgoing
    }

    /// Delivered packets/bytes and too-big drops of each RX queue.
    pub fn rx_per_queue(&self) -> Vec<Totals> {
        self.rx_stats.per_queue()
    }

    /// Sent packets/bytes and drops of each TX queue.
    pub fn tx_per_queue(&self) -> Vec<Totals> {
        self.tx_stats.per_queue()
    }

    /// Reads the kernel's counters of every open socket into the accumulators.
    fn poll_kernel(&self) -> io::Result<Vec<KernelTotals>> {
        let mut k = self.kernel.lock().unwrap_or_else(|e| e.into_inner());
        let mut err = None;
        for (s, t) in self.socks.iter().zip(k.iter_mut()) {
            match s.stats() {
                Ok(st) => {
                    // tp_packets already includes tp_drops (the kernel adds them on read).
                    t.packets += u64::from(st.tp_packets);
                    t.drops += u64::from(st.tp_drops);
                }
                Err(e) => {
                    err.get_or_insert(sys::ctx(e, "PACKET_STATISTICS"));
                }
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(k.clone()),
        }
    }

    /// Every counter, summed over queues; reads the kernel's statistics.
    pub fn stats(&self) -> AfPacketStats {
        let k = self
            .poll_kernel()
            .unwrap_or_else(|_| self.kernel.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let rx = self.rx_stats.totals();
        let tx = self.tx_stats.totals();
        let mut s = AfPacketStats {
            rx_packets: rx.packets,
            rx_bytes: rx.bytes,
            tx_packets: tx.packets,
            tx_bytes: tx.bytes,
            ..AfPacketStats::default()
        };
        for x in self.rx_extra.iter() {
            s.rx_too_big += x.too_big.get();
            s.rx_vlan_restored += x.vlan_restored.get();
            s.rx_csum_completed += x.csum_completed.get();
            s.rx_csum_partial += x.csum_partial.get();
            s.rx_outgoing_skipped += x.outgoing_skipped.get();
        }
        for x in self.tx_extra.iter() {
            s.tx_busy += x.busy.get();
            s.tx_errors += x.errors.get();
            s.tx_syscalls += x.syscalls.get();
        }
        for t in &k {
            s.kernel_packets += t.packets;
            s.kernel_drops += t.drops;
        }
        s
    }

    /// Opens and configures the socket of queue `q`; returns it with its mapped ring.
    fn open_socket(&mut self, q: usize, fanout: bool) -> io::Result<(sys::Socket, sys::Ring)> {
        let iface = &self.cfg.iface;
        let s = sys::Socket::new().map_err(|e| sys::ctx(e, "socket(AF_PACKET)"))?;
        s.set(sys::PACKET_VERSION, &sys::TPACKET_V2)
            .map_err(|e| sys::ctx(e, "PACKET_VERSION TPACKET_V2"))?;
        match s.set(sys::PACKET_IGNORE_OUTGOING, &1 as &libc::c_int) {
            Ok(()) => self.ignore_outgoing = Some(true),
            // Before Linux 4.20: the RX queue skips outgoing frames itself.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT) | Some(libc::EINVAL)) => {
                self.ignore_outgoing = Some(false)
            }
            Err(e) => return Err(sys::ctx(e, "PACKET_IGNORE_OUTGOING")),
        }
        if self.cfg.qdisc_bypass {
            s.set(sys::PACKET_QDISC_BYPASS, &1 as &libc::c_int)
                .map_err(|e| sys::ctx(e, "PACKET_QDISC_BYPASS"))?;
        }
        let req = self.cfg.req();
        s.set(sys::PACKET_RX_RING, &req).map_err(|e| {
            sys::ctx(
                e,
                format_args!(
                    "PACKET_RX_RING ({} blocks of {} bytes, slots of {}; block_size must be a multiple of the page size)",
                    req.tp_block_nr, req.tp_block_size, req.tp_frame_size
                ),
            )
        })?;
        let ring = s.map_ring(&req).map_err(|e| sys::ctx(e, "mmap of the RX ring"))?;
        s.bind(self.ifindex)
            .map_err(|e| sys::ctx(e, format_args!("bind to {iface}")))?;
        if q == 0 {
            self.mtu = Some(
                s.mtu(iface)
                    .map_err(|e| sys::ctx(e, format_args!("SIOCGIFMTU {iface}")))?,
            );
            if self.cfg.promisc {
                s.add_promisc(self.ifindex)
                    .map_err(|e| sys::ctx(e, format_args!("promiscuous mode on {iface}")))?;
            }
        }
        if fanout {
            self.join_fanout(&s)?;
        }
        Ok((s, ring))
    }

    fn join_fanout(&mut self, s: &sys::Socket) -> io::Result<()> {
        let mode = sys::PACKET_FANOUT_HASH << 16;
        let id = match self.fanout_group.or(self.cfg.fanout_group) {
            Some(id) => id,
            None => {
                // First socket of a port without a configured group: let the kernel pick a
                // free id, then read it back for the other sockets.
                match s.set(sys::PACKET_FANOUT, &(mode | (sys::PACKET_FANOUT_FLAG_UNIQUEID << 16))) {
                    Ok(()) => {
                        let v: u32 = s
                            .get(sys::PACKET_FANOUT)
                            .map_err(|e| sys::ctx(e, "reading the PACKET_FANOUT group id"))?;
                        self.fanout_group = Some(v as u16);
                        return Ok(());
                    }
                    // Kernels before 4.4 have no UNIQUEID: derive an id from pid and ifindex.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        (std::process::id()
                            .wrapping_mul(31)
                            .wrapping_add(self.ifindex.wrapping_mul(7919))) as u16
                    }
                    Err(e) => return Err(sys::ctx(e, "PACKET_FANOUT")),
                }
            }
        };
        s.set(sys::PACKET_FANOUT, &(mode | u32::from(id))).map_err(|e| {
            sys::ctx(
                e,
                format_args!("PACKET_FANOUT group {id} (in use with another mode or interface?)"),
            )
        })?;
        self.fanout_group = Some(id);
        Ok(())
    }
}

impl Port for AfPacketPort {
    fn kind(&self) -> &'static str {
        "afpacket"
    }

    fn open(&mut self, workers: usize) -> io::Result<PortQueues> {
        self.ifindex = sys::open_iface(self.opened, "afpacket", &self.cfg.iface)?;
        let workers = workers.max(1);
        self.rx_stats = StatsBlock::new(workers);
        self.tx_stats = StatsBlock::new(workers);
        self.rx_extra = (0..workers).map(|_| CachePadded::new(RxCounters::default())).collect();
        self.tx_extra = (0..workers).map(|_| CachePadded::new(TxCounters::default())).collect();
        let fanout = workers > 1 || self.cfg.fanout_group.is_some();
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::with_capacity(workers);
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::with_capacity(workers);
        let mut socks = Vec::with_capacity(workers);
        for q in 0..workers {
            // On error, the sockets opened so far close when `rx`/`tx`/`socks` drop.
            let (s, ring) = self.open_socket(q, fanout)?;
            let s = Arc::new(s);
            socks.push(s.clone());
            let rx_slot = QueueSlot::new(self.rx_stats.clone(), self.rx_extra.clone(), q);
            rx.push(Box::new(AfPacketRx::new(ring, s.clone(), rx_slot)));
            tx.push(Box::new(AfPacketTx::new(
                s,
                QueueSlot::new(self.tx_stats.clone(), self.tx_extra.clone(), q),
            )));
        }
        self.socks = socks;
        *self.kernel.lock().unwrap_or_else(|e| e.into_inner()) = vec![KernelTotals::default(); workers];
        self.opened = true;
        Ok(PortQueues { rx, tx })
    }

    /// Takes the kernel's final statistics and lets go of the sockets: a socket whose queues
    /// are already gone is closed here and a `close(2)` error is returned; the others close
    /// when their queues are dropped.
    fn close(&mut self) -> io::Result<()> {
        let stats = if self.socks.is_empty() {
            Ok(Vec::new())
        } else {
            self.poll_kernel()
        };
        let mut res = stats.map(|_| ());
        for s in std::mem::take(&mut self.socks) {
            if let Ok(s) = Arc::try_unwrap(s) {
                let r = s.close().map_err(|e| sys::ctx(e, "close of an AF_PACKET socket"));
                res = res.and(r);
            }
        }
        res
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("afpacket_rx_packets", s.rx_packets),
            ("afpacket_rx_bytes", s.rx_bytes),
            ("afpacket_rx_too_big", s.rx_too_big),
            ("afpacket_rx_vlan_restored", s.rx_vlan_restored),
            ("afpacket_rx_csum_completed", s.rx_csum_completed),
            ("afpacket_rx_csum_partial", s.rx_csum_partial),
            ("afpacket_rx_outgoing_skipped", s.rx_outgoing_skipped),
            ("afpacket_tx_packets", s.tx_packets),
            ("afpacket_tx_bytes", s.tx_bytes),
            ("afpacket_tx_busy", s.tx_busy),
            ("afpacket_tx_errors", s.tx_errors),
            ("afpacket_tx_syscalls", s.tx_syscalls),
            ("afpacket_kernel_packets", s.kernel_packets),
            ("afpacket_kernel_drops", s.kernel_drops),
            ("afpacket_mtu", u64::from(self.mtu.unwrap_or(0))),
            ("afpacket_queues", self.rx_stats.len() as u64),
        ]
    }

    fn rx_drops(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![("too_big", s.rx_too_big), ("kernel", s.kernel_drops)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_deserialize() {
        let c: AfPacketConfig = toml::from_str(r#"iface = "veth0""#).unwrap();
        assert_eq!(c, AfPacketConfig::new("veth0"));
        assert!(c.validate().is_ok());
        assert!(c.promisc && c.qdisc_bypass);
        assert_eq!(c.fanout_group, None);
        assert_eq!(c.max_frame_len(), 2048 - 66);
        let r = c.req();
        assert_eq!(r.tp_frame_nr, 64 * 64);
        let c: AfPacketConfig = toml::from_str(
            r#"iface = "eth1"
               fanout_group = 7
               ring_blocks = 8
               block_size = 65536
               frame_size = 4096
               promisc = false
               qdisc_bypass = false"#,
        )
        .unwrap();
        assert!(c.validate().is_ok());
        assert_eq!((c.fanout_group, c.ring_blocks, c.block_size), (Some(7), 8, 65536));
        assert!(!c.promisc && !c.qdisc_bypass);
    }

    #[test]
    fn unknown_or_missing_fields_are_rejected() {
        let e = toml::from_str::<AfPacketConfig>(
            r#"iface = "a"
            ring = 3"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = toml::from_str::<AfPacketConfig>("promisc = true")
            .unwrap_err()
            .to_string();
        assert!(e.contains("iface"), "{e}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let base = AfPacketConfig::new("veth0");
        let cases: Vec<(AfPacketConfig, &str)> = vec![
            (AfPacketConfig::new(""), "iface"),
            (AfPacketConfig::new("a-very-long-interface"), "iface"),
            (AfPacketConfig::new("a/b"), "iface"),
            (
                AfPacketConfig {
                    block_size: 3000,
                    ..base.clone()
                },
                "block_size",
            ),
            (
                AfPacketConfig {
                    block_size: 1 << 25,
                    ..base.clone()
                },
                "block_size",
            ),
            (
                AfPacketConfig {
                    ring_blocks: 1,
                    ..base.clone()
                },
                "ring_blocks",
            ),
            (
                AfPacketConfig {
                    ring_blocks: 65536,
                    block_size: 1 << 24,
                    ..base.clone()
                },
                "ring_blocks * block_size",
            ),
            (
                AfPacketConfig {
                    frame_size: 100,
                    ..base.clone()
                },
                "frame_size",
            ),
            (
                AfPacketConfig {
                    frame_size: 2056,
                    ..base.clone()
                },
                "frame_size",
            ),
            (
                AfPacketConfig {
                    block_size: 4096,
                    frame_size: 8192,
                    ..base.clone()
                },
                "frame_size",
            ),
        ];
        for (c, field) in cases {
            let e = c.validate().unwrap_err();
            assert!(e.starts_with(field), "{c:?}: {e}");
            assert!(AfPacketPort::new(c).is_err());
        }
    }

    #[test]
    fn opening_a_missing_interface_fails_cleanly() {
        let mut p = AfPacketPort::new(AfPacketConfig::new("fw-nonexist0")).unwrap();
        let e = p.open(1).err().expect("no such interface");
        assert!(e.to_string().contains("fw-nonexist0"), "{e}");
        assert!(p.close().is_ok());
        assert_eq!(p.stats(), AfPacketStats::default());
    }
}
