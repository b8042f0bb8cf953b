//! The transmit side of a worker, and the pipeline's next-stage edges.
//!
//! What a stage emits for a bridge port follows that port's edge ([`Next`], in the manner of
//! VPP's next nodes): a real port's frames gather in its transmit batch, go through the egress
//! taps and out by its queue; the router port's frames gather on the edge to the router stage,
//! which runs after the bridge pass (`RouterWorker::run`) and feeds the bridge again.
//!
//! A datagram the reassembler built (`meta_flags::REASSEMBLED`) is cut into fragments again
//! as it enters a real port's transmit batch ([`freeway_frag::refragment`], to its largest
//! original fragment's size); on the router's edge it stays whole.

use std::sync::Arc;

use super::mtu::{over_mtu, PortMtus, ETH_HEADER};
use super::stats::WorkerStats;
use freeway_bridge::Emit;
use freeway_capture::{Direction, TapPoint};
use freeway_frag::FragCounters;
use freeway_io::TxQueue;
use freeway_packet::{meta_flags, Batch, Packet, PacketPool};
use freeway_sync::CachePadded;

/// Where the frames emitted for one bridge port go next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The port's transmit batch, then its queue.
    Tx,
    /// The router stage (the bridge's router port).
    Router,
}

/// Wall-clock time in nanoseconds: a worker's poll time while a tap is attached (its
/// progress mark, and the capture timestamp of frames the datapath made). Packets carry
/// their own receive timestamps (`Meta::ts_ns`, set by the ports).
pub(crate) use freeway_io::wall_ns;

/// The emit side of the pipeline: the next-stage edge of every bridge port, per-port transmit
/// batches and queues, egress taps, the frames on the edge to the router, and the pool.
pub(crate) struct Tx<T: TapPoint> {
    /// One per port.
    pub(crate) queues: Vec<Box<dyn TxQueue>>,
    /// One per port.
    pub(crate) pending: Vec<Batch>,
    pub(crate) pool: PacketPool,
    pub(crate) stats: Arc<CachePadded<WorkerStats>>,
    pub(crate) taps: T,
    /// The worker's latest poll time while a tap is attached (ns since the epoch): the
    /// capture timestamp of transmitted frames that have no receive timestamp.
    pub(crate) poll_ns: u64,
    /// The edge of each bridge port: the ports', then the router port's (with a router).
    pub(crate) next: Box<[Next]>,
    /// Frames on the edge to the router stage, waiting for it.
    pub(crate) to_router: Vec<Packet>,
    /// The reassembler's counters, when fragments are reassembled (reassembled datagrams
    /// are then refragmented here).
    pub(crate) refrag: Option<Arc<CachePadded<FragCounters>>>,
    /// The fragments of one datagram on their way to a transmit batch (kept: no
    /// allocation once grown).
    pub(crate) refrag_out: Vec<Packet>,
    /// The ports' MTUs: a frame larger than its port's is dropped here, counted.
    pub(crate) mtus: Arc<PortMtus>,
}

impl<T: TapPoint> Tx<T> {
    #[inline]
    pub(crate) fn flush(&mut self, port: usize) {
        let b = &mut self.pending[port];
        if b.is_empty() {
            return;
        }
        // One pass for the byte count and a bound of the longest frame: the lengths OR-ed,
        // at least the longest (and under twice it). Only a frame longer than the MTU with an
        // untagged Ethernet header may be over it (a tagged frame may be 4 bytes longer a
        // tag): then, rarely, each frame's own limit is checked.
        let mtu = self.mtus.mtu(port);
        let mut bytes = 0usize;
        let mut longest = 0usize;
        for p in b.as_slice() {
            bytes += p.len();
            longest |= p.len();
        }
        if longest > usize::from(mtu) + ETH_HEADER && b.as_slice().iter().any(|p| over_mtu(p, mtu)) {
            bytes = self.drop_over_mtu(port, mtu);
        }
        let b = &mut self.pending[port];
        if b.is_empty() {
            return;
        }
        if self.taps.any() {
            self.taps.tap(port as u16, Direction::Tx, b.as_slice(), self.poll_ns);
        }
        let n = b.len() as u64;
        let sent = self.queues[port].tx_burst(b, &mut self.pool) as u64;
        let pc = &self.stats.ports[port];
        pc.tx_packets.add(sent);
        pc.tx_bytes.add(if sent == n {
            bytes as u64
        } else {
            bytes as u64 * sent / n.max(1)
        });
        if sent < n {
            pc.tx_dropped.add(n - sent);
        }
    }

    /// Drops the frames of port `port`'s batch larger than its MTU, counted; returns the
    /// bytes of the frames left.
    #[cold]
    fn drop_over_mtu(&mut self, port: usize, mtu: u16) -> usize {
        let mut dropped = 0u64;
        self.pending[port].retain_or_recycle(&mut self.pool, |p| {
            let over = over_mtu(p, mtu);
            dropped += u64::from(over);
            !over
        });
        self.stats.ports[port].tx_over_mtu.add(dropped);
        self.pending[port].as_slice().iter().map(Packet::len).sum()
    }

    /// Drops `pkt`, emitted for an index this worker has no port at (one added that it has
    /// not taken yet), counted as that index's transmit drop.
    #[cold]
    fn unknown_port(&mut self, port: usize, pkt: Packet) {
        if let Some(c) = self.stats.ports.get(port) {
            c.tx_dropped.inc();
        }
        self.pool.put(pkt);
    }

    /// Takes the transmit queue of the port added at `index` (between batches): its queue,
    /// batch and edge; indexes skipped on the way (the router's has its edge) get none.
    pub(crate) fn add_port(&mut self, index: u16, queue: Box<dyn TxQueue>) {
        let i = usize::from(index);
        while self.queues.len() <= i {
            self.queues.push(Box::new(super::portset::Absent));
        }
        self.queues[i] = queue;
        while self.pending.len() <= i {
            self.pending.push(Batch::new());
        }
        let mut next = self.next.to_vec();
        if next.len() <= i {
            next.resize(i + 1, Next::Tx);
        }
        next[i] = Next::Tx;
        self.next = next.into_boxed_slice();
    }

    /// Drops the transmit queue of the port removed at `index` (between batches: its batch
    /// goes out first); what is emitted there from now on is a counted transmit drop.
    pub(crate) fn remove_port(&mut self, index: u16) {
        let i = usize::from(index);
        if i < self.queues.len() {
            self.flush(i);
            self.queues[i] = Box::new(super::portset::Absent);
        }
    }

    pub(crate) fn flush_all(&mut self) {
        for p in 0..self.pending.len() {
            self.flush(p);
        }
    }

    /// Queues `pkt` on `port`'s transmit batch (flushed first when full).
    #[inline(always)]
    fn queue(&mut self, port: usize, pkt: Packet) {
        if self.pending[port].is_full() {
            self.flush(port);
        }
        // Cannot fail: flushed above when full.
        let _ = self.pending[port].push(pkt);
    }

    /// Queues the fragments of the reassembled `pkt` on `port`; counted in the
    /// reassembler's counters (a datagram that cannot be cut is a counted drop).
    #[cold]
    fn emit_refragmented(&mut self, port: usize, pkt: Packet) {
        let Some(c) = self.refrag.clone() else {
            // Not reassembled here: the mark is stale.
            let mut pkt = pkt;
            pkt.meta.flags &= !meta_flags::REASSEMBLED;
            return self.queue(port, pkt);
        };
        let mut frags = std::mem::take(&mut self.refrag_out);
        match freeway_frag::refragment(pkt, None, &mut self.pool, |q| frags.push(q)) {
            Ok(n) => {
                c.refragmented.inc();
                c.fragments_out.add(n as u64);
            }
            Err(_) => c.refrag_failed.inc(),
        }
        for q in frags.drain(..) {
            self.queue(port, q);
        }
        self.refrag_out = frags;
    }
}

impl<T: TapPoint> Emit for Tx<T> {
    #[inline(always)]
    fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }

    #[inline(always)]
    fn emit(&mut self, port: u16, pkt: Packet) {
        let port = usize::from(port);
        match self.next.get(port) {
            Some(Next::Tx) => {}
            Some(Next::Router) => return self.to_router.push(pkt),
            None => return self.unknown_port(port, pkt),
        }
        if pkt.meta.flags & meta_flags::REASSEMBLED != 0 {
            return self.emit_refragmented(port, pkt);
        }
        self.queue(port, pkt);
    }

    #[inline]
    fn emit_batch(&mut self, port: u16, batch: &mut Batch) {
        let port = usize::from(port);
        match self.next.get(port) {
            Some(Next::Tx) => {}
            Some(Next::Router) => return self.to_router.extend(batch.drain()),
            None => {
                for p in batch.drain() {
                    self.unknown_port(port, p);
                }
                return;
            }
        }
        if self.refrag.is_some()
            && batch
                .as_slice()
                .iter()
                .any(|p| p.meta.flags & meta_flags::REASSEMBLED != 0)
        {
            for p in batch.drain() {
                self.emit(port as u16, p);
            }
            return;
        }
        if !self.pending[port].is_empty() {
            self.flush(port);
        }
        // The whole batch becomes the port's transmit batch; the caller gets the empty one.
        std::mem::swap(&mut self.pending[port], batch);
    }
}
