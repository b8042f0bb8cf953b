//! AF_XDP ports: receive from and transmit to a Linux network interface through AF_XDP
//! sockets, one per interface queue, fed by a small XDP program.
//!
//! # Design
//!
//! [`Port::open`] for an interface with queues `0..queues`:
//!
//! 1. Checks the interface exists and has those RX queues ([`rx_queue_count`]).
//! 2. Creates an `XSKMAP` with one entry per queue and loads the XDP program that redirects
//!    each frame to the map entry of its RX queue, passing frames of queues without a socket
//!    to the kernel stack ([`bpf`]).
//! 3. Attaches the program to the interface as a BPF link, in native (driver) mode, or in
//!    generic (skb) mode when `mode = "skb"`, or when `mode = "auto"` and the driver has no
//!    native XDP.
//! 4. Per queue: an AF_XDP socket with its own UMEM (`frames` chunks of `frame_size` bytes)
//!    and FILL, COMPLETION, RX and TX rings, bound to the queue with `XDP_USE_NEED_WAKEUP`,
//!    in zero-copy mode where the driver supports it (`zerocopy`), else copy mode; then the
//!    socket goes into the map (module `xsk`).
//!
//! Every step that fails names itself and what to try. Whatever was set up before the
//! failure is undone when its owner drops on the error path; in particular the link, whose
//! drop detaches the program, so no XDP program is left on the interface. The link also
//! dies with the process, however it ends.
//!
//! Receive queue `q` reads socket `q` and goes to worker `q % workers` (with
//! `rx_worker = "other"`, worker `(q + workers - 1) % workers`: the port hands its queues to
//! the runtime in that order, see [`RxWorker`]); worker `w` transmits on socket `w` (the
//! kernel keeps a socket's RX and TX rings apart, so its two sides may belong to two
//! workers), or, when the
//! port has fewer queues than there are workers, on a transmit-only AF_PACKET socket of its
//! own: an AF_XDP socket's rings are single-producer, so two workers cannot share one, and
//! each queue takes one socket at most. See [`queue`] for the ring walks.
//!
//! # Veth
//!
//! veth runs XDP natively: a frame the peer transmits reaches the program of the receiving
//! end on that end's NAPI path, and the program's redirect puts it on the socket. Nothing
//! is needed on the peer: a peer XDP program (or GRO) is only required when frames are
//! redirected *into* a veth with `ndo_xdp_xmit`, which AF_XDP in copy mode does not do (its
//! transmissions go through the ordinary transmit path, `veth_xmit`). veth has no zero-copy
//! AF_XDP: `zerocopy = "auto"` binds in copy mode there. Native XDP on a veth wants at least
//! as many RX queues on it as its peer has TX queues, and an MTU that fits a page.
//!
//! Where the time goes on veth (profiled with `perf record` on the test bed of
//! `scripts/e2e-bench.sh`, 64-byte frames from a generator on h1): the forwarding worker
//! spends about 95% of its CPU in the kernel and about 5% in Freeway (its one copy each way
//! is about 2%). The kernel part is the copy-mode transmission (`sendto`: an skb allocated
//! and filled per frame, `veth_xmit`) and the receiving host's whole network stack, which
//! runs in the softirq of whoever transmits to it. On the sender's core, native XDP on veth
//! copies each frame once more than AF_PACKET does: veth hands XDP a frame in a page of its
//! own, copying it out of the sender's skb (whose head is not a page fragment and has less
//! than 256 bytes of headroom), before the socket's copy into the UMEM. Also, a veth delivers a
//! frame on the RX queue numbered like the peer's TX queue it was sent on, so a sender that
//! uses one TX queue reaches one socket, hence one worker, where AF_PACKET's fanout spreads
//! flows over all workers; when that worker cannot keep up, the kernel drops at the FILL ring
//! (`afxdp_kernel_rx_fill_ring_empty`), its batches being full (32 frames per kick).
//! A sender on AF_PACKET (Freeway's generator in `scripts/e2e-bench.sh`) transmits on the
//! TX queue numbered like its CPU (`cpu % queues`), and the runtime hands RX queue `q` to
//! worker `q`: with `pin_workers = true` and as many cores as workers, the generator on
//! CPU 0 reaches worker 0 on core 0, so the sender, the XDP copy in its softirq and the one
//! busy worker share one core while the other worker idles (counted: every frame on the
//! worker of the generator's CPU, whichever CPU that is). On a quiet 2-vCPU VM that held the
//! AF_XDP bridge at 0.70x the Linux bridge's 64-byte rate, and unpinned workers reached 1.74x
//! (journal, 2026-11-25 11:43), which is why `pin_workers = "auto"`, the default, does not
//! pin when a port is on a Linux interface and no core is left over. Keeping the pinned busy
//! worker off that core instead (`rx_worker = "other"`) did not raise the rate on a loaded
//! 2-vCPU VM (journal, 2026-11-25 10:30). The
//! rings themselves cost little: no syscall on receive (in copy mode the kernel never asks
//! for a FILL wake-up), one `sendto` per transmitted batch.
//!
//! # A lone frame (latency)
//!
//! What a ping through an idle bridge of two AF_XDP ports costs (counted on the test bed of
//! `scripts/e2e-bench.sh`, 200 pings 10 ms apart, counts that do not depend on the load):
//! one wake-up of one worker, which sleeps in `poll()` on its sockets: the redirect's flush
//! makes the socket readable, so a frame wakes the worker, which never sleeps to its
//! timeout. Two batches: the request, then the reply, which the far host's stack sends
//! inside the worker's own transmit kick (veth runs the receiver's stack in the sender's
//! softirq) and which is on the other port's RX ring when the kick returns, so no second
//! wake-up. One `sendto` per forwarded frame (copy mode always asks for the TX wake-up), no
//! FILL wake-up, no kernel drop after idle (`rx_fill_ring_empty` 0: every RX chunk is on the
//! FILL ring while the worker sleeps), completions reaped at the next transmit (the chunk
//! is not needed before). That is AF_PACKET's cost too (one `sendmmsg` per frame), and with
//! both at real-time priority on a loaded machine (so that no other process's time slice
//! is measured) the two ping alike, at two and a half times the Linux bridge, which forwards
//! in the sender's softirq with no wake-up at all. The difference is the wake-up of the
//! worker (an IPI when it is pinned to another core than the sender's, the context switch),
//! its first batch after the sleep and the two syscalls; busy polling (`SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`) or a longer spin would
//! remove the wake-up only by keeping a core busy while idle.
//!
//! # Why hand-written
//!
//! The usual stack (libbpf or libxdp, with the program compiled by clang) needs system
//! libraries and a BPF compiler at build time. The program here is five instructions, the
//! map and link three `bpf(2)` commands, and the socket a handful of `setsockopt`s and
//! `mmap`s of a stable ABI, so the port is written against the kernel directly, like the
//! AF_PACKET port, and `cargo build` needs nothing but Rust.
//!
//! # Offloads and limits
//!
//! Frames are copied in and out of the UMEM (also in zero-copy mode, where the copy is from
//! the driver's DMA area), since the datapath's buffers live in its own pool. XDP sees
//! frames before GRO, so there are no super-frames, but a frame longer than a chunk minus
//! the kernel's headroom (256 bytes) is dropped by the kernel (counted `kernel`). Partial
//! checksums from a local sender cannot be completed (AF_XDP does not say which frames have
//! them): the test bed turns TX checksum offload off on its veths. Likewise a VLAN tag that
//! the driver strips on receive (`rx-vlan-offload`) is not in the frame the program sees and
//! cannot be put back (AF_PACKET reads it from the kernel's metadata; AF_XDP has none): on a
//! trunk port, turn that offload off (`ethtool -K IFACE rxvlan off`).
//!
//! Threads: the control thread opens and closes the port and reads its counters (the
//! kernel's `XDP_STATISTICS` through `getsockopt`); each queue is owned by one worker.

use std::io;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use freeway_sync::{CachePadded, Counter};

use crate::afpacket::sys::{ctx, open_iface};
use crate::{Port, PortQueues, RxQueue, StatsBlock, TxQueue};

pub mod bpf;
pub mod queue;
mod xsk;

pub use queue::{AfXdpRx, AfXdpTx, RxCounters, TxCounters};
pub use xsk::XdpStatistics;

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver (native XDP); an error if the driver has none. The default.
    #[default]
    Native,
    /// Generic XDP on the skb, after the driver: any interface, slower, copy mode only.
    Skb,
    /// Native where the driver supports it, else generic.
    Auto,
}

/// Whether sockets bind in zero-copy mode: `true`, `false` or `"auto"` (zero-copy where the
/// driver supports it, else copy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "ZeroCopyRepr")]
pub enum ZeroCopy {
    /// Zero-copy if the driver supports it, else copy. The default.
    #[default]
    Auto,
    /// Zero-copy or fail.
    On,
    /// Copy mode.
    Off,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ZeroCopyRepr {
    Bool(bool),
    Str(String),
}

impl TryFrom<ZeroCopyRepr> for ZeroCopy {
    type Error = String;
    fn try_from(r: ZeroCopyRepr) -> Result<ZeroCopy, String> {
        match r {
            ZeroCopyRepr::Bool(true) => Ok(ZeroCopy::On),
            ZeroCopyRepr::Bool(false) => Ok(ZeroCopy::Off),
            ZeroCopyRepr::Str(s) if s == "auto" => Ok(ZeroCopy::Auto),
            ZeroCopyRepr::Str(s) => Err(format!("zerocopy: {s:?} is not true, false or \"auto\"")),
        }
    }
}

fn d_frames() -> u32 {
    4096
}
fn d_frame_size() -> u32 {
    2048
}

/// Headroom the kernel keeps in front of a received frame in its chunk (`XDP_PACKET_HEADROOM`).
pub const XDP_HEADROOM: u32 = 256;

/// Which worker polls a receive queue (see the module's "Veth" section).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RxWorker {
    /// Receive queue `q` goes to worker `q % workers`, as for every other kind of port. The
    /// default.
    #[default]
    Same,
    /// Receive queue `q` goes to the worker before `q`'s, `(q + workers - 1) % workers`, so
    /// that with pinned workers (worker `w` on core `w`) no queue's worker runs on the core
    /// numbered like the queue, where its frames arrive (a veth: the sender's CPU; a NIC: its
    /// interrupt, often set to that CPU), and the XDP program and the socket's copy run in
    /// the kernel. With one worker or one queue the same as `Same`. Measured on a loaded
    /// 2-vCPU VM (journal, 2026-11-25 10:30): not better there; to be measured quietly.
    Other,
}

/// Configuration of an AF_XDP port (the `afxdp` table of a `[[port]]` with
/// `kind = "afxdp"`): `afxdp = { iface = "eth0", queues = 1, mode = "native", zerocopy = "auto" }`.
///
/// Memory: `frames * frame_size` bytes per queue (default 4096 × 2 KiB = 8 MiB).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfXdpConfig {
    /// The interface name (required); at most 15 bytes.
    pub iface: String,
    /// Use RX queues `0..queues`, one socket each. Default: every RX queue of the interface.
    /// Frames arriving on other queues go to the kernel stack.
    #[serde(default)]
    pub queues: Option<u32>,
    /// Where the XDP program runs. Default native.
    #[serde(default)]
    pub mode: XdpMode,
    /// Zero-copy sockets. Default "auto".
    #[serde(default)]
    pub zerocopy: ZeroCopy,
    /// UMEM chunks per queue, a power of two from 64 to 65536: half for receiving, half for
    /// transmitting. Default 4096.
    #[serde(default = "d_frames")]
    pub frames: u32,
    /// Bytes per UMEM chunk: 2048 or 4096. A received frame fits in `frame_size - 256`
    /// bytes. Default 2048.
    #[serde(default = "d_frame_size")]
    pub frame_size: u32,
    /// Which worker polls each receive queue: `"same"` (default) or `"other"` ([`RxWorker`]).
    #[serde(default)]
    pub rx_worker: RxWorker,
}

/// Largest number of queues a port takes.
pub const MAX_QUEUES: u32 = 1024;

impl AfXdpConfig {
    /// A configuration for `iface` with every other field at its default.
    pub fn new(iface: &str) -> AfXdpConfig {
        AfXdpConfig {
            iface: iface.to_string(),
            queues: None,
            mode: XdpMode::Native,
            zerocopy: ZeroCopy::Auto,
            frames: d_frames(),
            frame_size: d_frame_size(),
            rx_worker: RxWorker::Same,
        }
    }

    /// Checks the configuration; the error names the field and the bad value.
    pub fn validate(&self) -> Result<(), String> {
        crate::afpacket::AfPacketConfig::new(&self.iface).validate()?;
        if let Some(q) = self.queues {
            if !(1..=MAX_QUEUES).contains(&q) {
                return Err(format!("queues: {q} is out of range 1..={MAX_QUEUES}"));
            }
        }
        if !self.frames.is_power_of_two() || !(64..=65536).contains(&self.frames) {
            return Err(format!(
                "frames: {} must be a power of two from 64 to 65536",
                self.frames
            ));
        }
        if !matches!(self.frame_size, 2048 | 4096) {
            return Err(format!("frame_size: {} must be 2048 or 4096", self.frame_size));
        }
        if self.mode == XdpMode::Skb && self.zerocopy == ZeroCopy::On {
            return Err("zerocopy: true needs native XDP (mode = \"native\"); generic (skb) mode only copies".into());
        }
        Ok(())
    }

    /// The largest frame a socket receives (longer ones are dropped by the kernel).
    pub fn max_frame_len(&self) -> usize {
        (self.frame_size - XDP_HEADROOM) as usize
    }
}

/// The RX queues interface `iface` has: what its driver reports (`ETHTOOL_GCHANNELS`, in the
/// calling thread's network namespace), else the `rx-N` entries of
/// `/sys/class/net/IFACE/queues/` if that directory describes the interface with index
/// `ifindex` (sysfs shows the namespace it was mounted in, which need not be the thread's);
/// `None` if neither says.
pub fn rx_queue_count(iface: &str, ifindex: u32) -> Option<u32> {
    if let Ok(n) = xsk::rx_channels(iface) {
        if n > 0 {
            return Some(n);
        }
    }
    let dir = format!("/sys/class/net/{iface}");
    let idx = std::fs::read_to_string(format!("{dir}/ifindex")).ok()?;
    if idx.trim().parse::<u32>().ok()? != ifindex {
        return None;
    }
    let d = std::fs::read_dir(format!("{dir}/queues")).ok()?;
    Some(
        d.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
            .count() as u32,
    )
}

/// All counters of a port, summed over its queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfXdpStats {
    /// Frames delivered to workers.
    pub rx_packets: u64,
    /// Bytes delivered.
    pub rx_bytes: u64,
    /// Frames too big for a pool buffer; dropped.
    pub rx_too_big: u64,
    /// FILL ring wake-ups.
    pub rx_wakeups: u64,
    /// Frames posted for transmission.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Packets dropped on transmit: no free chunk or ring slot, or a full AF_PACKET queue.
    pub tx_busy: u64,
    /// Packets dropped on transmit as larger than a chunk.
    pub tx_too_big: u64,
    /// Transmit kicks (`sendto`).
    pub tx_kicks: u64,
    /// Kicks or AF_PACKET sends that failed with an unexpected error.
    pub tx_errors: u64,
    /// The kernel's socket counters, summed.
    pub kernel: XdpStatistics,
}

impl AfXdpStats {
    /// Frames the kernel dropped on receive before any worker saw them.
    pub fn kernel_rx_drops(&self) -> u64 {
        self.kernel.rx_dropped + self.kernel.rx_ring_full + self.kernel.rx_invalid_descs
    }
}

/// What [`Port::open`] set up, for the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attached {
    /// The program runs in the driver (native XDP), not on the skb.
    pub native: bool,
    /// Sockets bound in zero-copy mode.
    pub zerocopy_queues: u32,
    /// Sockets (queues).
    pub queues: u32,
}

/// An AF_XDP port on one interface.
#[derive(Debug)]
pub struct AfXdpPort {
    cfg: AfXdpConfig,
    opened: bool,
    ifindex: u32,
    attached: Attached,
    link: Option<bpf::XdpLink>,
    socks: Vec<Arc<xsk::Xsk>>,
    rx_stats: StatsBlock,
    tx_stats: StatsBlock,
    rx_extra: Arc<[CachePadded<RxCounters>]>,
    tx_extra: Arc<[CachePadded<TxCounters>]>,
    pk_extra: Arc<[CachePadded<crate::afpacket::TxCounters>]>,
    /// The kernel's counters as read when the sockets were let go (close).
    kernel_final: Mutex<XdpStatistics>,
}

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, m)
}

fn add(a: &mut XdpStatistics, b: &XdpStatistics) {
    a.rx_dropped += b.rx_dropped;
    a.rx_invalid_descs += b.rx_invalid_descs;
    a.tx_invalid_descs += b.tx_invalid_descs;
    a.rx_ring_full += b.rx_ring_full;
    a.rx_fill_ring_empty_descs += b.rx_fill_ring_empty_descs;
    a.tx_ring_empty_descs += b.tx_ring_empty_descs;
}

impl AfXdpPort {
    /// A port for `cfg` (validated here; the interface is looked up by [`Port::open`]).
    pub fn new(cfg: AfXdpConfig) -> io::Result<AfXdpPort> {
        cfg.validate().map_err(invalid)?;
        Ok(AfXdpPort {
            cfg,
            opened: false,
            ifindex: 0,
            attached: Attached::default(),
            link: None,
            rx_stats: StatsBlock::default(),
            rx_extra: Arc::new([]),
            tx_stats: StatsBlock::default(),
            tx_extra: Arc::new([]),
            pk_extra: Arc::new([]),
            socks: Vec::new(),
            kernel_final: Mutex::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AfXdpConfig {
        &self.cfg
    }

    /// What was attached and bound, once open.
    pub fn attached(&self) -> Attached {
        self.attached
    }

    /// Every counter, summed over queues; reads the kernel's statistics.
    pub fn stats(&self) -> AfXdpStats {
        fn sum<C>(xs: &[CachePadded<C>], f: impl Fn(&C) -> &Counter) -> u64 {
            xs.iter().map(|x| f(x).get()).sum()
        }
        let (rx, tx) = (self.rx_stats.totals(), self.tx_stats.totals());
        let mut kernel = *self.kernel_final.lock().unwrap_or_else(|e| e.into_inner());
        for st in self.socks.iter().filter_map(|k| k.stats().ok()) {
            add(&mut kernel, &st);
        }
        let (rxx, txx, pkx) = (&self.rx_extra[..], &self.tx_extra[..], &self.pk_extra[..]);
        AfXdpStats {
            rx_packets: rx.packets,
            rx_bytes: rx.bytes,
            rx_too_big: sum(rxx, |x| &x.too_big),
            rx_wakeups: sum(rxx, |x| &x.wakeups),
            tx_packets: tx.packets,
            tx_bytes: tx.bytes,
            tx_busy: sum(txx, |x| &x.busy) + sum(pkx, |x| &x.busy),
            tx_too_big: sum(txx, |x| &x.too_big),
            tx_kicks: sum(txx, |x| &x.kicks),
            tx_errors: sum(txx, |x| &x.errors) + sum(pkx, |x| &x.errors),
            kernel,
        }
    }

    /// Loads the program and attaches it in the configured mode.
    fn attach(&mut self, map: &bpf::XskMap) -> io::Result<bpf::XdpLink> {
        let iface = &self.cfg.iface;
        let prog = bpf::XdpProg::load(map).map_err(|e| {
            ctx(
                e,
                "loading the XDP program (needs CAP_BPF/CAP_SYS_ADMIN and a kernel with XDP, 5.9 or later)",
            )
        })?;
        let tries: &[u32] = match self.cfg.mode {
            XdpMode::Native => &[bpf::XDP_FLAGS_DRV_MODE],
            XdpMode::Skb => &[bpf::XDP_FLAGS_SKB_MODE],
            XdpMode::Auto => &[bpf::XDP_FLAGS_DRV_MODE, bpf::XDP_FLAGS_SKB_MODE],
        };
        let mut last = None;
        for &flags in tries {
            match bpf::XdpLink::attach(&prog, self.ifindex, flags) {
                Ok(link) => {
                    self.attached.native = flags == bpf::XDP_FLAGS_DRV_MODE;
                    return Ok(link);
                }
                Err(e) => last = Some((flags, e)),
            }
        }
        let (flags, e) = last.expect("at least one mode is tried");
        let native = flags == bpf::XDP_FLAGS_DRV_MODE;
        let hint = match e.raw_os_error() {
            Some(libc::EBUSY) | Some(libc::EEXIST) => format!(
                "another XDP program is attached to {iface} (see `ip -d link show dev {iface}`; remove it with `ip link set dev {iface} xdp off`)"
            ),
            Some(libc::EOPNOTSUPP) if native => {
                format!("the driver of {iface} has no native XDP: try mode = \"auto\" or \"skb\"")
            }
            Some(libc::EINVAL) => format!(
                "the kernel refused the attachment (kernels before 5.9 have no XDP links; with native XDP the driver may refuse the MTU or the queue setup{})",
                if native { ": try mode = \"skb\"" } else { "" }
            ),
            _ if native => "try mode = \"auto\" or \"skb\"".to_string(),
            _ => String::new(),
        };
        Err(ctx(
            e,
            format_args!(
                "attaching the XDP program to {iface} in {} mode ({hint})",
                if native { "native" } else { "skb" }
            ),
        ))
    }
}

impl Port for AfXdpPort {
    fn kind(&self) -> &'static str {
        "afxdp"
    }

    fn open(&mut self, workers: usize) -> io::Result<PortQueues> {
        self.ifindex = open_iface(self.opened, "afxdp", &self.cfg.iface)?;
        let workers = workers.max(1);
        let iface = self.cfg.iface.clone();
        let have = rx_queue_count(&iface, self.ifindex);
        let queues = match (self.cfg.queues, have) {
            (Some(q), Some(h)) if q > h => {
                return Err(invalid(format!(
                    "queues = {q}, but interface {iface:?} has {h} RX queue{} (0..={}, as the driver or /sys/class/net/{iface}/queues/ report): set queues to at most {h}",
                    if h == 1 { "" } else { "s" },
                    h.saturating_sub(1)
                )))
            }
            (Some(q), _) => q,
            (None, Some(h)) if h > 0 => h.min(MAX_QUEUES),
            (None, _) => 1,
        };
        let map = bpf::XskMap::new(queues)?;
        // On any error below, `link` drops and detaches the program, and the sockets close.
        let link = self.attach(&map)?;
        let copy = match (self.attached.native, self.cfg.zerocopy) {
            (false, ZeroCopy::On) => {
                return Err(invalid(format!(
                    "zerocopy = true, but the driver of {iface} has no native XDP (the program runs in skb mode): set zerocopy = \"auto\" or false"
                )))
            }
            (false, _) | (true, ZeroCopy::Off) => Some(true),
            (true, ZeroCopy::On) => Some(false),
            (true, ZeroCopy::Auto) => None,
        };
        let geo = xsk::Geometry {
            frames: self.cfg.frames,
            frame_size: self.cfg.frame_size,
        };
        self.rx_stats = StatsBlock::new(queues as usize);
        self.tx_stats = StatsBlock::new(workers);
        self.rx_extra = (0..queues).map(|_| CachePadded::new(RxCounters::default())).collect();
        self.tx_extra = (0..workers).map(|_| CachePadded::new(TxCounters::default())).collect();
        self.pk_extra = (0..workers)
            .map(|_| CachePadded::new(crate::afpacket::TxCounters::default()))
            .collect();
        let mut rx: Vec<Box<dyn RxQueue>> = Vec::with_capacity(queues as usize);
        let mut tx: Vec<Box<dyn TxQueue>> = Vec::with_capacity(workers);
        let mut socks = Vec::with_capacity(queues as usize);
        let mut zc = 0;
        for q in 0..queues {
            let (s, r) = xsk::Xsk::open(self.ifindex, q, geo, copy)
                .map_err(|e| ctx(e, format_args!("AF_XDP socket for queue {q} of {iface}")))?;
            zc += u32::from(s.zerocopy);
            let s = Arc::new(s);
            map.set(q, s.raw())?;
            socks.push(s.clone());
            let qi = q as usize;
            rx.push(Box::new(AfXdpRx::new(
                s.clone(),
                (r.fill, r.rx),
                self.rx_stats.clone(),
                self.rx_extra.clone(),
                qi,
            )));
            if qi < workers {
                tx.push(Box::new(AfXdpTx::new(
                    s,
                    (r.tx, r.comp),
                    self.tx_stats.clone(),
                    self.tx_extra.clone(),
                    qi,
                )));
            }
        }
        for w in tx.len()..workers {
            let s = crate::afpacket::sys::Socket::new()
                .and_then(|s| {
                    s.set(crate::afpacket::sys::PACKET_QDISC_BYPASS, &1 as &libc::c_int)?;
                    s.bind_proto(self.ifindex, 0)?;
                    Ok(s)
                })
                .map_err(|e| {
                    ctx(
                        e,
                        format_args!("transmit-only AF_PACKET socket on {iface} for worker {w}"),
                    )
                })?;
            let slot = crate::afpacket::QueueSlot::new(self.tx_stats.clone(), self.pk_extra.clone(), w);
            tx.push(Box::new(crate::afpacket::AfPacketTx::new(Arc::new(s), slot)));
        }
        if self.cfg.rx_worker == RxWorker::Other {
            // `rx[i]` goes to worker `i % workers`: socket `i + 1` there, socket 0 last.
            rx.rotate_left(1);
        }
        self.attached.queues = queues;
        self.attached.zerocopy_queues = zc;
        self.socks = socks;
        self.link = Some(link);
        self.opened = true;
        Ok(PortQueues { rx, tx })
    }

    /// Detaches the XDP program and lets go of the sockets (they close when their queues,
    /// dropped after the workers stop, let go too), keeping their final kernel counters.
    fn close(&mut self) -> io::Result<()> {
        let res = match self.link.take() {
            Some(mut l) => l.detach(),
            None => Ok(()),
        };
        let mut k = XdpStatistics::default();
        for s in std::mem::take(&mut self.socks) {
            if let Ok(st) = s.stats() {
                add(&mut k, &st);
            }
        }
        *self.kernel_final.lock().unwrap_or_else(|e| e.into_inner()) = k;
        res
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("afxdp_queues", u64::from(self.attached.queues)),
            ("afxdp_native", u64::from(self.attached.native)),
            ("afxdp_zerocopy_queues", u64::from(self.attached.zerocopy_queues)),
            ("afxdp_rx_packets", s.rx_packets),
            ("afxdp_rx_bytes", s.rx_bytes),
            ("afxdp_rx_too_big", s.rx_too_big),
            ("afxdp_rx_wakeups", s.rx_wakeups),
            ("afxdp_tx_packets", s.tx_packets),
            ("afxdp_tx_bytes", s.tx_bytes),
            ("afxdp_tx_busy", s.tx_busy),
            ("afxdp_tx_too_big", s.tx_too_big),
            ("afxdp_tx_kicks", s.tx_kicks),
            ("afxdp_tx_errors", s.tx_errors),
            ("afxdp_kernel_rx_dropped", s.kernel.rx_dropped),
            ("afxdp_kernel_rx_ring_full", s.kernel.rx_ring_full),
            ("afxdp_kernel_rx_invalid_descs", s.kernel.rx_invalid_descs),
            ("afxdp_kernel_tx_invalid_descs", s.kernel.tx_invalid_descs),
            ("afxdp_kernel_rx_fill_ring_empty", s.kernel.rx_fill_ring_empty_descs),
        ]
    }

    fn rx_drops(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![("too_big", s.rx_too_big), ("kernel", s.kernel_rx_drops())]
    }
}

#[cfg(test)]
mod tests;
