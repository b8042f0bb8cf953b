//! The sink port: transmit queues count packets and bytes and give the buffers back to the
//! worker's pool; there are no receive queues.
//!
//! Threads: each [`SinkTx`] is owned by one worker, the only writer of its [`QueueStats`]
//! block (on its own cache line); the control thread reads the sums.
//!
//! [`QueueStats`]: crate::QueueStats

use freeway_packet::{Batch, PacketPool};

use crate::{Port, PortQueues, StatsBlock, Totals, TxQueue};

/// A transmit queue that counts and discards. Also the TX side of generator and read-only
/// pcap ports.
#[derive(Debug)]
pub struct SinkTx {
    stats: StatsBlock,
    idx: usize,
}

impl SinkTx {
    /// A sink queue counting into `stats.queue(idx)`.
    pub fn new(stats: StatsBlock, idx: usize) -> SinkTx {
        assert!(idx < stats.len(), "queue index out of range");
        SinkTx { stats, idx }
    }

    /// `workers` sink queues counting into a new block, returned with them (the port's
    /// totals).
    pub fn queues(workers: usize) -> (StatsBlock, Vec<Box<dyn TxQueue>>) {
        let stats = StatsBlock::new(workers);
        let tx = (0..workers)
            .map(|q| Box::new(SinkTx::new(stats.clone(), q)) as Box<dyn TxQueue>)
            .collect();
        (stats, tx)
    }
}

impl TxQueue for SinkTx {
    #[inline]
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize {
        let n = batch.len();
        let bytes: u64 = batch.as_slice().iter().map(|p| p.len() as u64).sum();
        pool.put_batch(batch);
        let s = self.stats.queue(self.idx);
        s.packets.add(n as u64);
        s.bytes.add(bytes);
        n
    }
}

/// The sink port.
#[derive(Debug, Default)]
pub struct SinkPort {
    stats: StatsBlock,
}

impl SinkPort {
    /// A sink port.
    pub fn new() -> SinkPort {
        SinkPort::default()
    }

    /// Packets and bytes discarded, summed over queues.
    pub fn totals(&self) -> Totals {
        self.stats.totals()
    }

    /// Packets and bytes discarded by each worker's queue.
    pub fn per_queue(&self) -> Vec<Totals> {
        self.stats.per_queue()
    }
}

impl Port for SinkPort {
    fn kind(&self) -> &'static str {
        "sink"
    }

    fn open(&mut self, workers: usize) -> std::io::Result<PortQueues> {
        let (stats, tx) = SinkTx::queues(workers.max(1));
        self.stats = stats;
        Ok(PortQueues { rx: Vec::new(), tx })
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let t = self.totals();
        vec![("sink_packets", t.packets), ("sink_bytes", t.bytes)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::Packet;

    #[test]
    fn sink_counts_per_queue_and_recycles() {
        let mut port = SinkPort::new();
        let mut q = port.open(2).unwrap();
        assert!(q.rx.is_empty());
        assert_eq!(q.tx.len(), 2);
        let mut pool = PacketPool::new(512, 0, 64);
        let mut b = Batch::new();
        for len in [60usize, 100, 200] {
            b.push(Packet::from_frame(&vec![0u8; len]).unwrap()).unwrap();
        }
        assert_eq!(q.tx[1].tx_burst(&mut b, &mut pool), 3);
        assert!(b.is_empty());
        let per = port.per_queue();
        assert_eq!(per[0].packets, 0);
        assert_eq!((per[1].packets, per[1].bytes), (3, 360));
        assert_eq!(port.totals().packets, 3);
        // The buffers went back to the pool: three gets allocate nothing.
        let before = pool.allocated();
        let _ = (pool.get(), pool.get(), pool.get());
        assert_eq!(pool.allocated(), before);
    }
}
