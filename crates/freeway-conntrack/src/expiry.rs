//! Background expiry: the only place connections leave the table.
//!
//! # Who does what
//!
//! * Workers push a pointer to each connection they create onto their own bounded lock-free
//!   queue (never waiting; a full queue refuses the new connection, see `ct`).
//! * The **remover** state (`shared::Remover`, behind a mutex that only the expiry thread and the
//!   control plane's flushes take — never a worker) holds the list of every live connection.
//!   Each round it drains the queues into the list, then examines at most `expiry_chunk`
//!   connections from a rotating cursor and unlinks those whose expiry tick has passed.
//! * [`Expirer::run`] repeats rounds at least `expiry_interval_ms` apart until stopped.
//!
//! # Invariants
//!
//! 1. A pointer in the list is a connection that is linked in the table: only the remover
//!    unlinks, and it drops the pointer from the list in the same step. So dereferencing it
//!    under the remover mutex is sound.
//! 2. Each linked connection appears at most once in the list and the queues together (it is
//!    pushed once, by its creator, right after its insert).
//! 3. Removal gives back the connection's place under the global and zone limits (summed, by
//!    the end of the sweep or flush that removed it).
//! 4. A translated connection is listed by its primary node; removing it unlinks its reply
//!    node too. A listed reply node is an orphan (its connection was created by another
//!    worker first): it is removed alone, with its never-published twin, and gives back no
//!    place.
//!
//! A connection whose expiry a worker extends while the remover decides to remove it is
//! removed anyway (the worker's write lands in a node that is being retired); its next
//! packet creates a new connection. That is the same race Linux and Open vSwitch accept.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use freeway_sync::Tick;

use crate::shared::{Remover, Shared};
use crate::table::{pin, Conn, Guard, RetireBatch};

/// The remover's operations (its state, [`Remover`], is part of [`Shared`]).
impl Remover {
    /// Moves new connections from the workers' queues to the list.
    pub(crate) fn drain(&mut self, s: &Shared) {
        let queues = s.queues.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for q in queues {
            while let Some(p) = q.pop() {
                self.list.push(p);
            }
        }
    }

    /// Unlinks list entry `i` (swap-removing it from the list) into `batch`; its place under
    /// the limits goes to `rel`.
    /// Returns whether it was a connection (not an orphaned reply node).
    fn remove_at(&mut self, s: &Shared, i: usize, g: &Guard, batch: &mut RetireBatch, rel: &mut Releases) -> bool {
        let p = self.list.swap_remove(i);
        // SAFETY: invariant 1: `p` is linked; we are the only remover (mutex held).
        let c = unsafe { &*p.0 };
        let zone = c.key().zone();
        let twin = c.twin().map(|t| t as *const Conn);
        // SAFETY: as above; `p` is dropped from the list, so it is removed once; the batch is
        // retired in this table by the caller.
        let linked = unsafe { s.table.unlink(p.0, g, batch) };
        debug_assert!(linked, "a listed connection was not linked");
        match twin {
            // An orphaned reply node (only primaries are listed otherwise): its twin was never
            // published and held no place under the limits.
            Some(t) if c.is_reply_node() => {
                // SAFETY: the twin of an orphan was never linked; it is retired once, here.
                unsafe { s.table.retire_unpublished(t, batch) };
                return false;
            }
            Some(t) => {
                // SAFETY: a listed primary's reply node is linked with it (table invariant 5)
                // and unlinked only here, with it.
                let linked = unsafe { s.table.unlink(t, g, batch) };
                debug_assert!(linked, "a translated connection's reply node was not linked");
            }
            None => {}
        }
        rel.add(s, zone);
        true
    }

    /// Drains the queues, then examines up to `budget` connections and removes the expired
    /// ones. Returns how many were removed.
    pub(crate) fn sweep(&mut self, s: &Shared, now: Tick, budget: usize) -> usize {
        self.drain(s);
        let g = pin();
        let mut batch = RetireBatch::default();
        let mut rel = Releases::default();
        let mut removed = 0;
        let n = self.list.len().min(budget);
        if n == self.list.len() {
            // A full pass: from the start, every connection is examined exactly once.
            self.cursor = 0;
        }
        let mut i = self.cursor;
        for _ in 0..n {
            if i >= self.list.len() {
                i = 0;
            }
            // SAFETY: invariant 1.
            let c = unsafe { &*self.list[i].0 };
            if c.expires() <= now {
                removed += usize::from(self.remove_at(s, i, &g, &mut batch, &mut rel));
            } else {
                i += 1;
            }
        }
        self.cursor = i;
        rel.finish(s);
        s.table.retire_batch(batch, &g);
        s.expired.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// Removes every connection (of `zone`, if given). Returns how many.
    pub(crate) fn flush(&mut self, s: &Shared, zone: Option<u16>) -> usize {
        self.drain(s);
        let g = pin();
        let mut batch = RetireBatch::default();
        let mut rel = Releases::default();
        let mut removed = 0;
        let mut i = 0;
        while i < self.list.len() {
            // SAFETY: invariant 1.
            let c = unsafe { &*self.list[i].0 };
            if zone.is_none_or(|z| c.key().zone() == z) {
                removed += usize::from(self.remove_at(s, i, &g, &mut batch, &mut rel));
            } else {
                i += 1;
            }
        }
        self.cursor = 0;
        rel.finish(s);
        s.table.retire_batch(batch, &g);
        s.flushed.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// Connections known to the remover (listed, not counting queued ones).
    pub(crate) fn listed(&self) -> usize {
        self.list.len()
    }
}

/// Places under the limits given back by one sweep or flush, summed: one atomic subtraction
/// per run of connections of the same zone and one on the global count per sweep, instead of
/// two per connection on the lines every new connection's reservation writes. Until
/// [`Releases::finish`] the counts over-state the table (invariant 1 of `ct` still holds: a
/// limit can only refuse early, never admit too many).
#[derive(Default)]
struct Releases {
    /// Zone of the current run, and connections removed in it.
    zone: u16,
    run: u32,
    /// Connections removed, all zones.
    total: usize,
}

impl Releases {
    #[inline]
    fn add(&mut self, s: &Shared, zone: u16) {
        if zone != self.zone && self.run != 0 {
            s.release_many(self.zone, self.run, 0);
            self.run = 0;
        }
        self.zone = zone;
        self.run += 1;
        self.total += 1;
    }

    fn finish(self, s: &Shared) {
        s.release_many(self.zone, self.run, self.total);
    }
}

/// The expiry thread's body. Exactly one per [`Conntrack`](crate::Conntrack); not `Clone`.
pub struct Expirer {
    s: Arc<Shared>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Expirer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expirer").finish_non_exhaustive()
    }
}

impl Expirer {
    pub(crate) fn new(s: Arc<Shared>) -> Expirer {
        Expirer {
            s,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The flag that stops [`Expirer::run`] (set it to true).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// One round: drain the workers' queues, examine one chunk. Returns how many connections
    /// were removed.
    pub fn step(&self) -> usize {
        let s = &self.s;
        let now = s.clock.now();
        s.lock_remover().sweep(s, now, s.chunk)
    }

    /// Connections known to the expiry thread (not counting those still in queues).
    pub fn listed(&self) -> usize {
        self.s.lock_remover().listed()
    }

    /// Runs rounds at least `expiry_interval_ms` apart until the stop flag is set.
    pub fn run(self) {
        let interval = Duration::from_millis(self.s.interval_ms.max(1));
        while !self.stop.load(Ordering::Relaxed) {
            self.step();
            std::thread::sleep(interval);
        }
    }

    /// Runs on a new thread named `fw-ct-expiry`; the returned handle stops and joins it when
    /// dropped.
    pub fn spawn(self) -> ExpiryThread {
        let stop = self.stop.clone();
        let handle = std::thread::Builder::new()
            .name("fw-ct-expiry".into())
            .spawn(move || self.run())
            .expect("spawning the conntrack expiry thread");
        ExpiryThread {
            stop,
            handle: Some(handle),
        }
    }
}

/// A running expiry thread; stops and joins on drop.
#[derive(Debug)]
pub struct ExpiryThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl ExpiryThread {
    /// Stops and joins the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for ExpiryThread {
    fn drop(&mut self) {
        self.shutdown();
    }
}
