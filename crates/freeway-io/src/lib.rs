//! Freeway ports: where packets come from and go to.
//!
//! A [`Port`] is opened once for a given number of workers and hands out queues: receive
//! queues ([`RxQueue`]), each owned by exactly one worker, and one transmit queue
//! ([`TxQueue`]) per worker, so that no two workers ever touch the same queue and the fast
//! path needs no lock. Ports that need a background thread (a pcap writer) own it and stop
//! it in [`Port::close`].
//!
//! Ports here:
//! * [`gen`]: the built-in traffic generator (MACs, VLANs, 5-tuples, flow count, frame sizes,
//!   rate or as fast as possible, deterministic seed).
//! * [`pcap`]: read frames from a pcap file; write forwarded frames to a pcap file.
//! * [`sink`]: counts and discards.
//! * [`afpacket`]: a Linux interface through TPACKET_V2 rings, one socket per worker (fanout).
//! * [`afxdp`]: a Linux interface through AF_XDP sockets, one per interface queue, fed by a
//!   hand-assembled XDP program.
//!
//! Threads: a port is created and opened by the control thread, which then hands each queue to
//! one worker; from then on a queue is touched only by its worker. Statistics are kept per
//! queue in [`QueueStats`] blocks (one cache line each, single writer: the queue's worker) and
//! summed by whoever reads them ([`StatsBlock::totals`]). [`Port::close`] runs on the control
//! thread after every worker stopped.
#![warn(missing_docs)]

use std::os::fd::RawFd;
use std::sync::Arc;

use freeway_packet::{Batch, PacketPool};
use freeway_sync::{CachePadded, Counter, Tick};

pub mod afpacket;
pub mod afxdp;
mod frame;
pub mod gen;
pub mod pcap;
pub mod sink;
pub mod wait;

/// Wall-clock time in nanoseconds since the Unix epoch (0 if the clock is before it): the
/// receive timestamp live ports give their packets ([`freeway_packet::Meta::ts_ns`]), read
/// once per batch.
#[inline]
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Counters of one queue. Single writer: the worker that owns the queue; any thread may read.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Packets received (RX) or accepted for transmission (TX).
    pub packets: Counter,
    /// Bytes of those packets (frames without FCS).
    pub bytes: Counter,
    /// Packets dropped by the queue itself (frame too big for a buffer, output gone).
    pub dropped: Counter,
}

impl QueueStats {
    /// Counts one burst: `packets` of `bytes` in all, and `dropped` drops (only touched when
    /// not zero, the common case being no drop).
    #[inline]
    pub fn add(&self, packets: u64, bytes: u64, dropped: u64) {
        self.packets.add(packets);
        self.bytes.add(bytes);
        if dropped != 0 {
            self.dropped.add(dropped);
        }
    }
}

/// A snapshot of [`QueueStats`], or their sum over queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// Drops.
    pub dropped: u64,
}

/// One [`QueueStats`] per queue, each on its own cache line, shared between the queues (each
/// writes its own) and the port (which reads them all). Cloning is cheap (an `Arc`).
#[derive(Clone, Debug)]
pub struct StatsBlock(Arc<[CachePadded<QueueStats>]>);

impl StatsBlock {
    /// Counters for `queues` queues, all zero.
    pub fn new(queues: usize) -> StatsBlock {
        StatsBlock((0..queues).map(|_| CachePadded::new(QueueStats::default())).collect())
    }

    /// The counters of queue `q`. Panics if `q` is out of range.
    #[inline(always)]
    pub fn queue(&self, q: usize) -> &QueueStats {
        &self.0[q]
    }

    /// Number of queues.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no queues.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each queue's counters.
    pub fn per_queue(&self) -> Vec<Totals> {
        self.0
            .iter()
            .map(|s| Totals {
                packets: s.packets.get(),
                bytes: s.bytes.get(),
                dropped: s.dropped.get(),
            })
            .collect()
    }

    /// The counters summed over queues.
    pub fn totals(&self) -> Totals {
        self.per_queue().into_iter().fold(Totals::default(), |a, t| Totals {
            packets: a.packets + t.packets,
            bytes: a.bytes + t.bytes,
            dropped: a.dropped + t.dropped,
        })
    }
}

impl Default for StatsBlock {
    fn default() -> Self {
        StatsBlock::new(0)
    }
}

/// A receive queue, owned by one worker.
pub trait RxQueue: Send {
    /// Receives up to `batch.room()` packets into `batch`, taking buffers from `pool` and
    /// setting `meta.in_port`-independent fields only (the worker sets `in_port`): among
    /// them `meta.ts_ns`, the receive timestamp (the wall clock at receive, once per batch
    /// at most, or the source's own timestamp), and `meta.uncaptured` when the source
    /// stored less than the frame.
    /// `now` is the coarse clock. Returns how many packets were added.
    fn rx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool, now: Tick) -> usize;

    /// Whether this queue will never produce another packet (end of file, count reached).
    fn is_done(&self) -> bool {
        false
    }

    /// A descriptor that `poll(2)` reports readable (`POLLIN`) whenever `rx_burst` may have
    /// something to return, so that an idle worker can sleep until the next frame instead of
    /// polling ([`wait::Waiter`]). `None` (the default): the queue cannot say, as with the
    /// generator and pcap files, whose packets are always ready; a worker with such a queue
    /// never sleeps in `poll`.
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }
}

/// A transmit queue, owned by one worker.
pub trait TxQueue: Send {
    /// Transmits every packet in `batch`, leaving it empty. Buffers go back to `pool` (or are
    /// handed to a writer thread). Returns how many were accepted; the caller counts the rest
    /// as transmit drops.
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize;
}

/// The queues a port hands out for a run with `workers` workers.
pub struct PortQueues {
    /// Receive queues; `rx[i]` is polled by worker `i % workers`. May be empty (sink).
    pub rx: Vec<Box<dyn RxQueue>>,
    /// Exactly one transmit queue per worker; `tx[w]` is used by worker `w` only.
    pub tx: Vec<Box<dyn TxQueue>>,
}

/// A port.
pub trait Port: Send {
    /// Kind of port ("gen", "pcap", "sink"), for tables and JSON.
    fn kind(&self) -> &'static str;

    /// Opens the port for `workers` workers. Called once.
    fn open(&mut self, workers: usize) -> std::io::Result<PortQueues>;

    /// Stops background threads and flushes output. Called once, after every worker stopped.
    fn close(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// The port's own counters as `(name, value)` pairs (frames too big, frames written...),
    /// summed over queues. Read by the control thread at any time; empty by default.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Frames this port lost on receive before any worker saw them, by reason (`too_big`: a
    /// frame larger than its buffer; `kernel`: dropped by the kernel's ring), summed over
    /// queues. Each is also among [`counters`](Port::counters); the datapath adds these to its
    /// drop counters, so that every frame it loses is counted somewhere. Empty by default.
    fn rx_drops(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
