//! The receive and transmit queues of an AF_XDP port: one socket per queue, frames copied
//! between the socket's UMEM and the worker's packet buffers.
//!
//! # Receive ([`AfXdpRx`])
//!
//! At start every RX chunk of the UMEM is put on the FILL ring. `rx_burst` takes up to a
//! batch of descriptors from the RX ring, copies each frame into a pool packet, writes the
//! chunks back on the FILL ring and publishes both rings once per burst: no syscall while
//! frames flow. When the kernel sets `XDP_RING_NEED_WAKEUP` on the FILL ring (zero-copy
//! drivers that ran out of chunks) the queue kicks it with an empty `recvfrom`. A frame that
//! does not fit a pool buffer is counted `too_big` and dropped, never truncated. An idle
//! worker sleeps in `poll()` on the socket ([`RxQueue::wait_fd`]), which is readable while
//! the RX ring holds a frame.
//!
//! # Transmit ([`AfXdpTx`])
//!
//! `tx_burst` first takes the chunks the kernel has finished with off the COMPLETION ring
//! (back on the queue's free list), then copies each packet into a free chunk and posts it on
//! the TX ring, and kicks the kernel with an empty `sendto` when the TX ring's
//! `XDP_RING_NEED_WAKEUP` flag asks for it (always in copy mode, where the kernel transmits
//! only from within that syscall). A kick that leaves frames on the ring (`EAGAIN`, `EBUSY`:
//! the kernel sends a bounded number per call) is repeated a few times; frames left after
//! that go out with the next burst's kick. A packet with no free chunk or no ring slot is
//! counted `busy`, one larger than a chunk `too_big`; both are transmit drops.
//!
//! Threads: each queue is owned by one worker, the only writer of its counters.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use freeway_packet::{Batch, PacketPool, MAX_BATCH};
use freeway_sync::{CachePadded, Counter, Tick};

use super::xsk::{Ring, Umem, XdpDesc, Xsk};
use crate::{RxQueue, StatsBlock, TxQueue};

/// Receive counters of one queue beyond packets/bytes. Single writer: the queue's worker.
#[derive(Debug, Default)]
pub struct RxCounters {
    /// Frames larger than a pool buffer; dropped.
    pub too_big: Counter,
    /// FILL ring wake-ups the kernel asked for (`recvfrom` calls).
    pub wakeups: Counter,
}

/// Transmit counters of one queue beyond packets/bytes. Single writer: the queue's worker.
#[derive(Debug, Default)]
pub struct TxCounters {
    /// Packets dropped for want of a free chunk or TX ring slot.
    pub busy: Counter,
    /// Packets larger than a UMEM chunk; dropped.
    pub too_big: Counter,
    /// `sendto` kicks made.
    pub kicks: Counter,
    /// Kicks that failed with an unexpected error.
    pub errors: Counter,
    /// The errno of the last such failure (0: none).
    pub last_errno: AtomicI32,
}

/// What a receive and a transmit queue both hold: the socket, its UMEM, and the queue's
/// counters (`C`: its extra ones, `idx`: its place in the port's arrays).
#[derive(Debug)]
struct Side<C> {
    xsk: Arc<Xsk>,
    umem: Arc<Umem>,
    /// Clears the offset within a chunk from an address (chunks are a power of two).
    chunk_mask: u64,
    stats: StatsBlock,
    extra: Arc<[CachePadded<C>]>,
    idx: usize,
}

impl<C> Side<C> {
    fn new(xsk: Arc<Xsk>, stats: StatsBlock, extra: Arc<[CachePadded<C>]>, idx: usize) -> Side<C> {
        assert!(idx < stats.len() && idx < extra.len(), "queue index out of range");
        let umem = xsk.umem.clone();
        let chunk_mask = !(u64::from(umem.frame_size) - 1);
        Side {
            xsk,
            umem,
            chunk_mask,
            stats,
            extra,
            idx,
        }
    }

    /// Address of chunk `i` of the UMEM.
    fn chunk(&self, i: u64) -> u64 {
        i * u64::from(self.umem.frame_size)
    }
}

/// One receive queue: the RX and FILL rings of one socket.
#[derive(Debug)]
#[repr(align(128))]
pub struct AfXdpRx {
    side: Side<RxCounters>,
    fill: Ring<u64>,
    rx: Ring<XdpDesc>,
}

impl AfXdpRx {
    /// The queue of `xsk`, with its RX chunks (the first `rx.size()` of the UMEM) all put on
    /// the FILL ring (twice as large, see [`super::xsk`]).
    pub(crate) fn new(
        xsk: Arc<Xsk>,
        (mut fill, rx): (Ring<u64>, Ring<XdpDesc>),
        stats: StatsBlock,
        extra: Arc<[CachePadded<RxCounters>]>,
        idx: usize,
    ) -> AfXdpRx {
        let side = Side::new(xsk, stats, extra, idx);
        let n = fill.free(rx.size());
        debug_assert_eq!(n, rx.size(), "a fresh FILL ring takes every RX chunk");
        for i in 0..n {
            fill.write(i, side.chunk(u64::from(i)));
        }
        fill.submit(n);
        AfXdpRx { side, fill, rx }
    }
}

impl RxQueue for AfXdpRx {
    fn rx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool, _now: Tick) -> usize {
        let x = &self.side.extra[self.side.idx];
        let mut n = self.rx.ready(batch.room() as u32);
        if n != 0 {
            // Take no frame whose chunk cannot go back on the FILL ring at once; with the
            // FILL ring twice the RX chunks this never holds a frame back.
            n = self.fill.free(n);
        }
        if n == 0 {
            if self.fill.needs_wakeup() {
                x.wakeups.inc();
                self.side.xsk.kick_rx();
            }
            return 0;
        }
        let ts = crate::wall_ns();
        let (mut got, mut bytes, mut dropped) = (0usize, 0u64, 0u64);
        for i in 0..n {
            let d = self.rx.read(i);
            // SAFETY: the kernel handed this chunk over on the RX ring; it is ours until we
            // put it back on the FILL ring below, after the slice is gone.
            match unsafe { self.side.umem.bytes(d.addr, d.len as usize) } {
                Some(data) => {
                    let mut p = pool.get_for(data.len());
                    if p.set_frame(data).is_ok() {
                        p.meta.ts_ns = ts;
                        bytes += data.len() as u64;
                        got += 1;
                        if let Err(p) = batch.push(p) {
                            pool.put(p);
                        }
                    } else {
                        x.too_big.inc();
                        dropped += 1;
                        pool.put(p);
                    }
                }
                None => {
                    debug_assert!(false, "RX descriptor {d:?} outside the UMEM");
                    dropped += 1;
                }
            }
            self.fill.write(i, d.addr & self.side.chunk_mask);
        }
        self.rx.release(n);
        self.fill.submit(n);
        if self.fill.needs_wakeup() {
            x.wakeups.inc();
            self.side.xsk.kick_rx();
        }
        self.side.stats.queue(self.side.idx).add(got as u64, bytes, dropped);
        got
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.side.xsk.raw())
    }
}

/// Kicks made at most per burst while the kernel leaves frames on the TX ring.
const MAX_KICKS: u32 = 4;

/// One transmit queue: the TX and COMPLETION rings of one socket.
#[derive(Debug)]
#[repr(align(128))]
pub struct AfXdpTx {
    side: Side<TxCounters>,
    tx: Ring<XdpDesc>,
    comp: Ring<u64>,
    /// Chunks free for transmission (the second half of the UMEM at start).
    free: Vec<u64>,
}

impl AfXdpTx {
    /// The queue of `xsk`; its chunks are the `tx.size()` after the RX ones.
    pub(crate) fn new(
        xsk: Arc<Xsk>,
        (tx, comp): (Ring<XdpDesc>, Ring<u64>),
        stats: StatsBlock,
        extra: Arc<[CachePadded<TxCounters>]>,
        idx: usize,
    ) -> AfXdpTx {
        let side = Side::new(xsk, stats, extra, idx);
        let n = u64::from(tx.size());
        let free = (n..2 * n).rev().map(|i| side.chunk(i)).collect();
        AfXdpTx { side, tx, comp, free }
    }

    /// Takes finished chunks off the COMPLETION ring.
    fn reap(&mut self) {
        let n = self.comp.ready(self.comp.size());
        for i in 0..n {
            self.free.push(self.comp.read(i) & self.side.chunk_mask);
        }
        self.comp.release(n);
    }

    /// Makes the kernel transmit what the TX ring holds, when it asks for it.
    fn kick(&mut self) {
        let x = &self.side.extra[self.side.idx];
        for _ in 0..MAX_KICKS {
            if !self.tx.needs_wakeup() || self.tx.drained() {
                return;
            }
            x.kicks.inc();
            match self.side.xsk.kick_tx() {
                Ok(()) => {}
                Err(libc::EAGAIN) | Err(libc::EBUSY) | Err(libc::EINTR) => {}
                // The device queue is full: what is left goes with the next burst.
                Err(libc::ENOBUFS) => return,
                Err(e) => {
                    x.errors.inc();
                    x.last_errno.store(e, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

impl TxQueue for AfXdpTx {
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize {
        let n = batch.len().min(MAX_BATCH);
        if n == 0 {
            self.kick();
            return 0;
        }
        self.reap();
        let x = &self.side.extra[self.side.idx];
        let fs = self.side.umem.frame_size as usize;
        let room = self.tx.free(n as u32).min(self.free.len() as u32);
        let (mut sent, mut bytes, mut dropped) = (0u32, 0u64, 0u64);
        for p in &batch.as_slice()[..n] {
            let len = p.len();
            if len > fs {
                x.too_big.inc();
                dropped += 1;
                continue;
            }
            if sent == room {
                x.busy.inc();
                dropped += 1;
                continue;
            }
            let Some(addr) = self.free.pop() else { break };
            // SAFETY: `addr` came off the free list: the kernel is done with this chunk and no
            // descriptor on the TX ring points at it; `len <= frame_size` keeps us inside it.
            if !unsafe { self.side.umem.write(addr, p.data()) } {
                debug_assert!(false, "TX chunk {addr} outside the UMEM");
                dropped += 1;
                continue;
            }
            self.tx.write(
                sent,
                XdpDesc {
                    addr,
                    len: len as u32,
                    options: 0,
                },
            );
            sent += 1;
            bytes += len as u64;
        }
        self.tx.submit(sent);
        self.kick();
        self.side
            .stats
            .queue(self.side.idx)
            .add(u64::from(sent), bytes, dropped);
        pool.put_batch(batch);
        sent as usize
    }
}
