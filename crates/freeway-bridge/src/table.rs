//! The lock-free (MAC, VLAN) hash table under the forwarding database.
//!
//! # Design
//!
//! A fixed array of buckets (a power of two, sized once from the table's bound, so it never
//! resizes), each the head of a singly linked chain of heap-allocated [`Node`]s, in the manner
//! of the kernel's RCU hash lists:
//!
//! * **Readers** (workers, dumps) pin an epoch guard once per batch and walk chains with
//!   `Acquire` loads. They take no lock and write nothing shared, except the entry fields the
//!   packet's own flow demands: the timestamps (through [`Layout`], once per tick at most) and,
//!   on a MAC move, the port.
//! * **One writer** (the FDB writer thread, through [`crate::FdbWriter`], which is not `Clone`
//!   and takes `&mut self`) inserts at the head of a chain with a `Release` store of a fully
//!   initialised node, and unlinks nodes with a `Release` store of the successor into the
//!   predecessor's link. Unlinked nodes are freed only after every reader that might still see
//!   them has unpinned (crossbeam-epoch; under `--cfg loom` they are kept until the table drops).
//!
//! Why not a crate: papaya and flurry are general concurrent maps with multi-writer machinery and
//! per-lookup guards that cost more than this whole lookup; dashmap locks shards. The FDB has
//! exactly one writer, a hard size bound and 8-byte keys, which makes a fixed bucket array with
//! RCU-style chains both the simplest and the fastest design. Its publication protocol is
//! model-checked in `tests/loom_table.rs`.
//!
//! # Invariants
//!
//! 1. A node reachable from a bucket is fully initialised (published with `Release`).
//! 2. A node is freed only after it was unlinked *and* an epoch grace period passed.
//! 3. Only the writer modifies bucket heads and `next` links; `key` and `is_static` are
//!    immutable after publication.
//! 4. Keys are unique within the table (the writer checks before inserting).

use std::marker::PhantomData;

use freeway_sync::atomic::{AtomicPtr, AtomicU16, AtomicUsize, Ordering};
use freeway_sync::Tick;

use crate::layout::{Layout, Times};

use freeway_sync::chain::{self, Linked};
pub use freeway_sync::reclaim::Guard;
use freeway_sync::reclaim::Retired;

/// Enters a read-side critical section. Workers pin once per batch.
pub use freeway_sync::reclaim::pin;

/// Packs a MAC address and VLAN into the table key.
#[inline(always)]
pub fn key(mac: [u8; 6], vlan: u16) -> u64 {
    (u64::from(mac[0]) << 56)
        | (u64::from(mac[1]) << 48)
        | (u64::from(mac[2]) << 40)
        | (u64::from(mac[3]) << 32)
        | (u64::from(mac[4]) << 24)
        | (u64::from(mac[5]) << 16)
        | u64::from(vlan & 0x0fff)
}

/// The group (multicast/broadcast) bit of an address word from [`addr_words`]: the first
/// byte's lowest bit.
pub const GROUP_BIT: u64 = 1 << 56;

/// A frame's destination and source addresses (its first 12 bytes) as address words: each
/// address in the top 48 bits, big-endian, the low 16 bits zero, so that
/// [`key_of_word`]`(word, vlan) == `[`key`]`(mac, vlan)`. Each word is one 8-byte read of the
/// frame, never the address's bytes stored one by one and read back as a wider value: a
/// read that spans several smaller stores waits for them to reach the cache (a failed
/// store-to-load forward, about a dozen cycles), and the bridge stage paid two of those a
/// frame when its address array was spilled to the stack byte by byte (2026-11-25: about a
/// fifth of `bench bridge`'s time).
#[inline(always)]
pub fn addr_words(head: &[u8; 12]) -> (u64, u64) {
    let [d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5] = *head;
    let dst = u64::from_be_bytes([d0, d1, d2, d3, d4, d5, s0, s1]) & !0xffff;
    let src = u64::from_be_bytes([d4, d5, s0, s1, s2, s3, s4, s5]) << 16;
    (dst, src)
}

/// The table key of an address word from [`addr_words`] (low 16 bits zero) in `vlan`.
#[inline(always)]
pub fn key_of_word(word: u64, vlan: u16) -> u64 {
    debug_assert_eq!(word & 0xffff, 0, "an address word's low 16 bits are zero");
    word | u64::from(vlan & 0x0fff)
}

/// Unpacks a key into (MAC, VLAN).
#[inline]
pub fn unkey(k: u64) -> ([u8; 6], u16) {
    let b = k.to_be_bytes();
    ([b[0], b[1], b[2], b[3], b[4], b[5]], (k & 0x0fff) as u16)
}

/// One FDB entry. The first fields (read by every lookup) share a cache line; the
/// timestamps live wherever `L` puts them.
#[repr(C)]
pub struct Node<L: Layout> {
    key: u64,
    port: AtomicU16,
    is_static: bool,
    next: AtomicPtr<Node<L>>,
    hot: L::Hot,
}

impl<L: Layout> Node<L> {
    /// The packed (MAC, VLAN) key.
    #[inline(always)]
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The port the address was last seen on.
    #[inline(always)]
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    /// Whether the entry was configured (never ages, never moves).
    #[inline(always)]
    pub fn is_static(&self) -> bool {
        self.is_static
    }

    /// Moves a learned address to `port` (a MAC move seen by a worker). Compares first so a
    /// stable entry is never written. Static entries do not move; returns whether it moved.
    #[inline]
    pub fn move_to(&self, port: u16) -> bool {
        if self.is_static || self.port.load(Ordering::Relaxed) == port {
            return false;
        }
        self.port.store(port, Ordering::Relaxed);
        true
    }

    /// Records that the address was seen as a source.
    #[inline(always)]
    pub fn touch_updated(&self, now: Tick) {
        L::touch_updated(&self.hot, now)
    }

    /// Records that the address was used as a destination.
    #[inline(always)]
    pub fn touch_used(&self, now: Tick) {
        L::touch_used(&self.hot, now)
    }

    /// The timestamps.
    #[inline]
    pub fn times(&self) -> &Times {
        L::times(&self.hot)
    }
}

/// The table. Shared between readers (`&Table`) and one writer (methods marked *writer only*).
pub struct Table<L: Layout> {
    buckets: Box<[AtomicPtr<Node<L>>]>,
    mask: usize,
    seed: u64,
    len: AtomicUsize,
    retired: Retired<Node<L>>,
    _l: PhantomData<L>,
}

// SAFETY: nodes are only reached through atomics; the writer discipline (one writer, epoch
// reclamation) is what makes sharing sound, and `Node` contents are `Send + Sync`.
unsafe impl<L: Layout> Send for Table<L> {}
// SAFETY: as above.
unsafe impl<L: Layout> Sync for Table<L> {}

/// Keyed hash of a table key: one 64x64→128-bit multiply folded to 64 bits (the mixing step
/// of wyhash/aHash). `seed` is random per table, so chains cannot be aimed at from the wire.
#[inline(always)]
fn mix(key: u64, seed: u64) -> u64 {
    let full = u128::from(key ^ seed) * u128::from(0x9e37_79b9_7f4a_7c15_u64 ^ seed.rotate_left(32));
    (full as u64) ^ ((full >> 64) as u64)
}

impl<L: Layout> Table<L> {
    /// A table with at least `capacity` buckets (rounded up to a power of two, at least 16).
    pub fn new(capacity: usize, seed: u64) -> Self {
        let n = capacity.max(16).next_power_of_two();
        let buckets = (0..n)
            .map(|_| AtomicPtr::new(std::ptr::null_mut()))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Table {
            buckets,
            mask: n - 1,
            seed,
            len: AtomicUsize::new(0),
            retired: Retired::new(),
            _l: PhantomData,
        }
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Number of entries (maintained by the writer; may lag by one operation for readers).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bucket index of a key.
    #[inline(always)]
    pub fn bucket_of(&self, key: u64) -> usize {
        (mix(key, self.seed) as usize) & self.mask
    }

    /// Looks a key up. Lock-free; the reference lives as long as the guard.
    #[inline(always)]
    pub fn lookup<'g>(&'g self, key: u64, _guard: &'g Guard) -> Option<&'g Node<L>> {
        self.lookup_in(self.bucket_of(key), key, _guard)
    }

    /// Looks a key up in a bucket already computed with [`Table::bucket_of`].
    #[inline(always)]
    pub fn lookup_in<'g>(&'g self, bucket: usize, key: u64, _guard: &'g Guard) -> Option<&'g Node<L>> {
        // SAFETY: `mask` is `buckets.len() - 1` and the length is a power of two, so the
        // index is in bounds (this saves a bounds check on every lookup).
        let head = unsafe { self.buckets.get_unchecked(bucket & self.mask) };
        let mut p = head.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: `p` was reached from a bucket under a pinned guard; by invariants 1 and 2
            // it is initialised and cannot be freed before `_guard` is dropped.
            let n = unsafe { &*p };
            if n.key == key {
                return Some(n);
            }
            p = n.next.load(Ordering::Acquire);
        }
        None
    }

    /// Calls `f` on every entry of bucket `b` (for dumps and ageing scans).
    pub fn for_each_in_bucket<'g>(&'g self, b: usize, _guard: &'g Guard, mut f: impl FnMut(&'g Node<L>)) {
        let mut p = self.buckets[b & self.mask].load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: as in `lookup_in`.
            let n = unsafe { &*p };
            f(n);
            p = n.next.load(Ordering::Acquire);
        }
    }

    /// Calls `f` on every entry.
    pub fn for_each<'g>(&'g self, guard: &'g Guard, mut f: impl FnMut(&'g Node<L>)) {
        for b in 0..self.buckets.len() {
            self.for_each_in_bucket(b, guard, &mut f);
        }
    }

    /// *Writer only.* Inserts a new entry at the head of its chain. The caller has checked
    /// that `key` is absent (invariant 4).
    pub(crate) fn insert_new(&self, key: u64, port: u16, is_static: bool, now: Tick) {
        let b = &self.buckets[self.bucket_of(key)];
        let head = b.load(Ordering::Relaxed);
        let node = Box::into_raw(Box::new(Node::<L> {
            key,
            port: AtomicU16::new(port),
            is_static,
            next: AtomicPtr::new(head),
            hot: L::new_hot(now),
        }));
        // Release: the node's contents happen-before any reader that loads this pointer.
        b.store(node, Ordering::Release);
        self.len.store(self.len.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// *Writer only.* Replaces the entry for `key` by a new one (`port`, `is_static`, fresh
    /// timestamps) in one store, as the kernel's `hlist_replace_rcu` does: the new node takes
    /// the old one's place in its chain (same successor), so a reader finds the old entry or
    /// the new one, never none. Returns whether `key` was present (if not, nothing changes).
    pub(crate) fn replace(&self, key: u64, port: u16, is_static: bool, now: Tick, guard: &Guard) -> bool {
        let mut link: &AtomicPtr<Node<L>> = &self.buckets[self.bucket_of(key)];
        loop {
            let p = link.load(Ordering::Relaxed);
            if p.is_null() {
                return false;
            }
            // SAFETY: only the writer frees nodes, and it has not retired `p` (still linked).
            let n = unsafe { &*p };
            if n.key == key {
                let node = Box::into_raw(Box::new(Node::<L> {
                    key,
                    port: AtomicU16::new(port),
                    is_static,
                    // Only the writer changes links, so this is the current successor.
                    next: AtomicPtr::new(n.next.load(Ordering::Relaxed)),
                    hot: L::new_hot(now),
                }));
                // Release: the new node's contents happen-before any reader that loads it.
                link.store(node, Ordering::Release);
                // SAFETY: `p` is unlinked (its place taken by `node`); readers still holding it
                // are pinned and reach the same successor through it; the free waits for them.
                unsafe { self.retire(p, guard) };
                return true;
            }
            link = &n.next;
        }
    }

    /// *Writer only.* Unlinks the entries of bucket `b` for which `pred` is true and retires
    /// them. Returns how many were removed.
    pub(crate) fn remove_where(&self, b: usize, guard: &Guard, pred: impl FnMut(&Node<L>) -> bool) -> usize {
        // SAFETY: the caller is the writer; nodes are boxed, linked in this chain only, hold
        // plain data and atomics; `retired` is this table's (invariant 2).
        let removed = unsafe { chain::remove_where(&self.buckets[b & self.mask], &self.retired, guard, pred) };
        if removed > 0 {
            self.len
                .store(self.len.load(Ordering::Relaxed) - removed, Ordering::Relaxed);
        }
        removed
    }

    /// Frees `p` once no reader can hold it (under loom: when the table drops).
    ///
    /// # Safety
    /// `p` must be unlinked from the table, and must not be retired twice.
    unsafe fn retire(&self, p: *mut Node<L>, guard: &Guard) {
        // SAFETY: nodes are boxed; per the contract `p` is unlinked and retired once; node
        // contents are plain data and atomics, dropped on any thread.
        unsafe { self.retired.retire(p, guard) }
    }
}

impl<L: Layout> Drop for Table<L> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer remains; every linked node is boxed and
        // owned by the table, in one chain.
        unsafe { chain::free_chains(&self.buckets) };
    }
}

impl<L: Layout> Linked for Node<L> {
    #[inline(always)]
    fn next(&self) -> &AtomicPtr<Self> {
        &self.next
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::layout::{Naive, Padded};

    #[test]
    fn address_words_make_the_keys_of_both_addresses() {
        let head = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xef];
        let (d, s) = addr_words(&head);
        let dst = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];
        let src = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xef];
        for vlan in [0, 1, 100, 4094, 0xffff] {
            assert_eq!(key_of_word(d, vlan), key(dst, vlan));
            assert_eq!(key_of_word(s, vlan), key(src, vlan));
        }
        assert_ne!(d & GROUP_BIT, 0, "01:80:c2:… is a group address");
        assert_eq!(s & GROUP_BIT, 0, "02:aa:… is not");
        assert_eq!(unkey(d).0, dst);
        assert_eq!(unkey(s).0, src);
    }

    #[test]
    fn key_round_trips() {
        let mac = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
        assert_eq!(unkey(key(mac, 4094)), (mac, 4094));
        assert_ne!(key(mac, 1), key(mac, 2));
    }

    #[test]
    fn padded_node_keeps_times_off_the_key_line() {
        let t = Table::<Padded>::new(16, 1);
        let g = pin();
        t.insert_new(7, 1, false, 0);
        let n = t.lookup(7, &g).unwrap();
        let base = n as *const _ as usize;
        let times = n.times() as *const _ as usize;
        assert!(times - base >= 64, "timestamps share the key's cache line");
        let t2 = Table::<Naive>::new(16, 1);
        t2.insert_new(7, 1, false, 0);
        let n2 = t2.lookup(7, &g).unwrap();
        assert!((n2.times() as *const _ as usize) - (n2 as *const _ as usize) < 64);
    }

    #[test]
    fn insert_lookup_remove_in_one_chain() {
        // The smallest table (16 buckets), so chains are long.
        let t = Table::<Padded>::new(1, 42);
        let g = pin();
        for k in 0..100u64 {
            t.insert_new(k, k as u16, false, 0);
        }
        assert_eq!(t.len(), 100);
        for k in 0..100u64 {
            assert_eq!(t.lookup(k, &g).unwrap().port(), k as u16);
        }
        let mut removed = 0;
        for b in 0..t.buckets() {
            removed += t.remove_where(b, &g, |n| n.key() % 2 == 0);
        }
        assert_eq!(removed, 50);
        assert_eq!(t.len(), 50);
        for k in 0..100u64 {
            assert_eq!(t.lookup(k, &g).is_some(), k % 2 == 1);
        }
    }
}
