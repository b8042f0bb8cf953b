//! A writer thread's mailbox: a bounded queue of requests from the fast path, with a one-slot
//! doorbell that tells the writer there is work, without writing shared memory on each ring.
//!
//! Workers queue requests for a table's writer (learn this address, resolve that neighbour);
//! the writer's thread waits on the bell between rounds instead of napping out its full idle
//! period. The bell is a channel of capacity one: the first ring after the writer took the
//! last one stores a message; every further ring finds the channel full and returns after a
//! few loads, writing nothing shared. The writer takes the message *before* it drains the
//! queue, so that a request queued after the drain rings again.
//!
//! Why not a condition variable or an eventfd: a ring must never block and must cost nothing
//! when the bell is already rung, and the writer's thread already waits on channels (its
//! control operations) with `select`, which a crossbeam channel joins directly.

use crossbeam_channel::{Receiver, Sender};
use crossbeam_queue::ArrayQueue;

/// A bounded request queue with a one-slot doorbell (module doc).
#[derive(Debug)]
pub struct Mailbox<T> {
    queue: ArrayQueue<T>,
    bell: (Sender<()>, Receiver<()>),
}

impl<T> Mailbox<T> {
    /// An empty mailbox for up to `capacity` requests (at least one), its bell not rung.
    pub fn new(capacity: usize) -> Self {
        Mailbox {
            queue: ArrayQueue::new(capacity.max(1)),
            bell: crossbeam_channel::bounded(1),
        }
    }

    /// Queues a request and rings the bell. Never blocks; `false` (and no ring) if the queue
    /// is full.
    #[inline]
    pub fn push(&self, req: T) -> bool {
        let queued = self.queue.push(req).is_ok();
        if queued {
            self.ring();
        }
        queued
    }

    /// Rings the bell without a request (a caller that set the writer thread's stop flag does,
    /// so that the thread sees the flag at once). A bell already rung and not yet taken stays
    /// as it is: the full channel refuses the send without writing. The receiver lives as long
    /// as the sender, in `self`, so the channel is never disconnected.
    #[inline]
    pub fn ring(&self) {
        let _ = self.bell.0.try_send(());
    }

    /// The oldest request, for the writer.
    #[inline]
    pub fn pop(&self) -> Option<T> {
        self.queue.pop()
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// What the writer's thread waits on: holds one message from the first ring until it is
    /// taken.
    pub fn bell(&self) -> &Receiver<()> {
        &self.bell.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_ring_once_until_taken_and_a_full_queue_neither_takes_nor_rings() {
        let m = Mailbox::new(2);
        assert!(m.bell().is_empty());
        assert!(m.push(1) && m.push(2));
        assert_eq!(m.bell().len(), 1);
        assert!(m.bell().try_recv().is_ok());
        assert!(!m.push(3), "full");
        assert!(m.bell().is_empty(), "a refused request rang");
        assert_eq!((m.pop(), m.pop(), m.pop()), (Some(1), Some(2), None));
        m.ring();
        m.ring();
        assert_eq!(m.bell().len(), 1);
    }
}
