//! A one-slot doorbell: how a fast-path thread tells a writer thread "there is work" without
//! writing shared memory each time.
//!
//! Workers queue requests for a table's writer (learn this address, resolve that neighbour)
//! and ring; the writer's thread waits on the bell between rounds instead of napping out its
//! full idle period. The bell is a channel of capacity one: the first ring after the writer
//! took the last one stores a message; every further ring finds the channel full and returns
//! after a few loads, writing nothing shared. The writer takes the message *before* it drains
//! its queue, so that a request queued after the drain rings again.
//!
//! Why not a condition variable or an eventfd: a ring must never block and must cost nothing
//! when the bell is already rung, and the writer's thread already waits on channels (its
//! control operations) with `select`, which a crossbeam channel joins directly.

use crossbeam_channel::{Receiver, Sender};

/// A one-slot doorbell (module doc): [`Doorbell::ring`] from any thread, the writer's thread
/// waits on [`Doorbell::waiter`].
#[derive(Debug)]
pub struct Doorbell {
    tx: Sender<()>,
    rx: Receiver<()>,
}

impl Default for Doorbell {
    fn default() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(1);
        Doorbell { tx, rx }
    }
}

impl Doorbell {
    /// A bell not rung.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rings the bell. Never blocks; a bell already rung and not yet taken stays as it is (the
    /// full channel refuses the send without writing). The receiver lives as long as the
    /// sender, in `self`, so the channel is never disconnected.
    #[inline]
    pub fn ring(&self) {
        let _ = self.tx.try_send(());
    }

    /// What the writer's thread waits on: holds one message from the first ring until it is
    /// taken.
    pub fn waiter(&self) -> &Receiver<()> {
        &self.rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bell_holds_one_ring_until_taken() {
        let b = Doorbell::new();
        assert!(b.waiter().is_empty());
        b.ring();
        b.ring();
        assert_eq!(b.waiter().len(), 1);
        assert!(b.waiter().try_recv().is_ok());
        assert!(b.waiter().is_empty());
        b.ring();
        assert_eq!(b.waiter().len(), 1);
    }
}
