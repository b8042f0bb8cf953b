//! The transmit side of a worker: per-port transmit batches, egress taps, and the frames the
//! bridge hands to the router.

use std::sync::Arc;

use super::stats::WorkerStats;
use freeway_bridge::Emit;
use freeway_capture::{Direction, TapPoint};
use freeway_io::TxQueue;
use freeway_packet::{Batch, Packet, PacketPool};
use freeway_sync::CachePadded;

/// No router port.
pub(crate) const NO_ROUTER: usize = usize::MAX;

/// Wall-clock time in nanoseconds (capture timestamps: read only when a tap matches).
pub(crate) fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The emit side of the pipeline: per-port transmit batches and queues, egress taps, the
/// frames bridged to the router port, and the pool.
pub(crate) struct Tx<T: TapPoint> {
    pub(crate) queues: Vec<Box<dyn TxQueue>>,
    /// One per port, plus one for the router port when there is a router.
    pub(crate) pending: Vec<Batch>,
    pub(crate) pool: PacketPool,
    pub(crate) stats: Arc<CachePadded<WorkerStats>>,
    pub(crate) taps: T,
    /// Index of the router port (`NO_ROUTER` without a router).
    pub(crate) router_port: usize,
    /// Frames the bridge delivered to the router port, waiting for the L3 stage.
    pub(crate) router_inbox: Vec<Packet>,
}

impl<T: TapPoint> Tx<T> {
    #[inline]
    pub(crate) fn flush(&mut self, port: usize) {
        let b = &mut self.pending[port];
        if b.is_empty() {
            return;
        }
        if port == self.router_port {
            self.router_inbox.extend(b.drain());
            return;
        }
        if self.taps.any() {
            self.taps
                .tap_lazy(port as u16, Direction::Tx, b.as_slice(), &mut wall_ns);
        }
        let n = b.len() as u64;
        let bytes: usize = b.as_slice().iter().map(Packet::len).sum();
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

    pub(crate) fn flush_all(&mut self) {
        for p in 0..self.pending.len() {
            self.flush(p);
        }
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
        if self.pending[port].is_full() {
            self.flush(port);
        }
        // Cannot fail: flushed above when full.
        let _ = self.pending[port].push(pkt);
    }

    #[inline]
    fn emit_batch(&mut self, port: u16, batch: &mut Batch) {
        let port = usize::from(port);
        if !self.pending[port].is_empty() {
            self.flush(port);
        }
        // The whole batch becomes the port's transmit batch; the caller gets the empty one.
        std::mem::swap(&mut self.pending[port], batch);
    }
}
