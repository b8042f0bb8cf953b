//! The longest-prefix-match structure: a multibit trie with a wide first level (DIR-24-8 for
//! IPv4, 16/8/8/... for IPv6), atomic 32-bit entries updated in place.
//!
//! # Layout
//!
//! Level 0 is a flat array of `2^F` entries indexed by the first `F` bits of the address
//! (`F = 24` for IPv4: DPDK `rte_lpm`'s tbl24; `F = 16` for IPv6). Every further level consumes 8
//! bits: a *group* of 256 entries in one preallocated pool (`tbl8`). An entry is one `u32`:
//!
//! ```text
//!  bit 31     VALID
//!  bit 30     EXT: bits 0..22 are a group index (go one level down)
//!  bits 22..30 depth: the length of the prefix this leaf came from (0..=128)
//!  bits 0..22 payload: next-hop group index (leaf) or tbl8 group index (EXT)
//! ```
//!
//! An IPv4 lookup is one load, or two for addresses under a prefix longer than /24. IPv6 takes
//! one load per 8 bits past the first 16 (a /48 leaf: 5 dependent loads; most share cache lines).
//! The depth in leaves lets updates run without consulting the RIB (DPDK's algorithm): an add of
//! a /L overwrites the leaves in its range whose depth is <= L; a delete rewrites the leaves of
//! depth exactly L with the covering prefix (supplied by the RIB) and collapses groups that
//! became uniform back into their parent entry.
//!
//! Why not a crate: `rte_lpm` is C; the Rust LPM crates (`ip_network_table`, `treebitmap`,
//! `prefix-trie`, `iprange`) are pointer tries or tree bitmaps with no concurrent-update story
//! (`&mut self` to insert), so they would need a copy of 1M prefixes per change or a lock. This
//! structure is the bar itself, and in-place atomic entries publish a change without copying.
//!
//! # Concurrency and invariants
//!
//! One writer (the [`crate::Rib`], `&mut`) and any number of lock-free readers:
//! 1. Every store an update makes is a final value: for any address, the entry that decides it
//!    holds the answer of the version before or after the update, never anything else.
//! 2. A new group is filled completely (with its parent's old leaf) before the `Release` store of
//!    the EXT entry that publishes it; readers load with `Acquire`.
//! 3. A group unlinked by a collapse is recycled only after an epoch grace period (its index is
//!    pushed to the free queue by a deferred closure), so a reader that saw the old EXT entry
//!    reads a group that still holds the old (or the new, identical-answer) leaves. Under loom,
//!    unlinked groups are simply never reused.
//! 4. An EXT entry never appears at the last level; payloads of EXT entries are `< groups`.
//! 5. The pool is bounded (`groups` × 1 KiB); an add that would need more groups than are free
//!    is refused *before* any entry changes ([`DirFull`]).

use std::sync::Arc;

use crossbeam_queue::SegQueue;
use freeway_sync::atomic::{AtomicU32, Ordering};

use crate::epoch::{self, Guard};

pub(crate) const VALID: u32 = 1 << 31;
pub(crate) const EXT: u32 = 1 << 30;
const DEPTH_SHIFT: u32 = 22;
pub(crate) const PAYLOAD: u32 = (1 << DEPTH_SHIFT) - 1;
const STRIDE: u32 = 8;
const GROUP: usize = 1 << STRIDE;

/// A leaf entry for a prefix of length `depth` pointing at next-hop group `nh`.
#[inline]
pub(crate) fn leaf(depth: u32, nh: u32) -> u32 {
    debug_assert!(depth <= 128 && nh <= PAYLOAD);
    VALID | (depth << DEPTH_SHIFT) | nh
}

#[inline]
fn depth(e: u32) -> u32 {
    (e >> DEPTH_SHIFT) & 0xff
}

/// The pool of groups has too few free groups for this add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirFull;

/// Allocates `n` zeroed atomics. Zero pages come lazily from the allocator (`calloc`), so a
/// large, mostly unused pool costs address space, not memory.
#[cfg(not(loom))]
fn zeroed(n: usize) -> Box<[AtomicU32]> {
    const _: () = assert!(std::mem::size_of::<AtomicU32>() == std::mem::size_of::<u32>());
    const _: () = assert!(std::mem::align_of::<AtomicU32>() == std::mem::align_of::<u32>());
    let b: Box<[u32]> = vec![0u32; n].into_boxed_slice();
    huge_pages(b.as_ptr() as usize, n * 4);
    // SAFETY: `AtomicU32` has the same size, alignment (asserted above) and bit validity as
    // `u32`, so the allocation is a valid `[AtomicU32]` of the same length and layout.
    unsafe { Box::from_raw(Box::into_raw(b) as *mut [AtomicU32]) }
}

/// Asks for transparent huge pages on the 2 MiB-aligned interior of a large, still untouched
/// allocation: a random lookup in the 64 MiB tbl24 then misses the TLB far less often.
#[cfg(all(not(loom), target_os = "linux"))]
fn huge_pages(addr: usize, len: usize) {
    const HUGE: usize = 2 << 20;
    let start = addr.next_multiple_of(HUGE);
    let end = (addr + len) & !(HUGE - 1);
    if end > start {
        // SAFETY: madvise only changes paging advice for whole pages inside our own live
        // allocation; it does not change the contents. Failure is harmless and ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(all(not(loom), not(target_os = "linux")))]
fn huge_pages(_addr: usize, _len: usize) {}

#[cfg(loom)]
fn zeroed(n: usize) -> Box<[AtomicU32]> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

/// A DIR-style multibit trie over left-aligned 128-bit keys (IPv4 keys are shifted up by 96).
pub(crate) struct Dir {
    first: Box<[AtomicU32]>,
    groups: Box<[AtomicU32]>,
    first_bits: u32,
    width: u32,
    ngroups: u32,
    /// Writer only: groups never used yet start here.
    next_unused: AtomicU32,
    /// Writer only: groups linked into the trie.
    used: AtomicU32,
    free: Arc<SegQueue<u32>>,
}

impl Dir {
    /// A trie for `width`-bit keys with a `first_bits` first level and a pool of `ngroups`.
    pub(crate) fn new(width: u32, first_bits: u32, ngroups: u32) -> Dir {
        assert!((width - first_bits) % STRIDE == 0 && first_bits <= 24);
        let ngroups = ngroups.min(PAYLOAD + 1);
        Dir {
            first: zeroed(1 << first_bits),
            groups: zeroed(ngroups as usize * GROUP),
            first_bits,
            width,
            ngroups,
            next_unused: AtomicU32::new(0),
            used: AtomicU32::new(0),
            free: Arc::new(SegQueue::new()),
        }
    }

    /// Groups linked into the trie.
    pub(crate) fn groups_used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }

    /// Capacity of the group pool.
    pub(crate) fn groups_capacity(&self) -> u32 {
        self.ngroups
    }

    /// Bytes of the first level, and of the groups in use.
    pub(crate) fn bytes(&self) -> (usize, usize) {
        (self.first.len() * 4, self.groups_used() as usize * GROUP * 4)
    }

    /// IPv4 lookup (F = 24): the leaf deciding `ip`, or 0 (not VALID).
    #[inline(always)]
    pub(crate) fn lookup32(&self, ip: u32) -> u32 {
        debug_assert_eq!(self.first_bits, 24);
        // SAFETY: `first` has 2^24 entries and `ip >> 8 < 2^24`.
        let e = unsafe { self.first.get_unchecked((ip >> 8) as usize) }.load(Ordering::Acquire);
        if e & EXT == 0 {
            return e;
        }
        let i = (((e & PAYLOAD) as usize) << STRIDE) | (ip & 0xff) as usize;
        // Bounds-checked: cheap next to the memory access, and keeps a corrupt entry from UB.
        self.groups[i].load(Ordering::Acquire)
    }

    /// IPv4 lookups of a batch: all first-level loads are issued before any is used, so their
    /// cache misses overlap (memory-level parallelism) instead of queueing one after another.
    #[inline]
    pub(crate) fn lookup32_batch(&self, ips: &[u32], out: &mut [u32]) {
        debug_assert_eq!(self.first_bits, 24);
        for (o, &ip) in out.iter_mut().zip(ips) {
            // SAFETY: `first` has 2^24 entries and `ip >> 8 < 2^24`.
            *o = unsafe { self.first.get_unchecked((ip >> 8) as usize) }.load(Ordering::Acquire);
        }
        for (o, &ip) in out.iter_mut().zip(ips) {
            if *o & EXT != 0 {
                let i = (((*o & PAYLOAD) as usize) << STRIDE) | (ip & 0xff) as usize;
                *o = self.groups[i].load(Ordering::Acquire);
            }
        }
    }

    /// Generic lookup of a left-aligned key: the leaf deciding it, or 0.
    #[inline(always)]
    pub(crate) fn lookup128(&self, key: u128) -> u32 {
        let mut shift = 128 - self.first_bits;
        let mut e = self.first[(key >> shift) as usize].load(Ordering::Acquire);
        while e & EXT != 0 && shift >= STRIDE {
            shift -= STRIDE;
            let i = (((e & PAYLOAD) as usize) << STRIDE) | ((key >> shift) as usize & (GROUP - 1));
            e = self.groups[i].load(Ordering::Acquire);
        }
        e
    }

    /// Start bit of level `l`.
    #[inline]
    fn start(&self, l: u32) -> u32 {
        if l == 0 {
            0
        } else {
            self.first_bits + STRIDE * (l - 1)
        }
    }

    /// End bit (exclusive) of level `l`.
    #[inline]
    fn end(&self, l: u32) -> u32 {
        self.first_bits + STRIDE * l
    }

    /// The level where a prefix of length `len` ends.
    #[inline]
    fn level_of(&self, len: u32) -> u32 {
        if len <= self.first_bits {
            0
        } else {
            (len - self.first_bits).div_ceil(STRIDE)
        }
    }

    /// The index of `key` in a level-`l` table.
    #[inline]
    fn index(&self, key: u128, l: u32) -> usize {
        let bits = if l == 0 { self.first_bits } else { STRIDE };
        ((key << self.start(l)) >> (128 - bits)) as usize
    }

    #[inline]
    fn group(&self, g: u32) -> &[AtomicU32] {
        &self.groups[g as usize * GROUP..(g as usize + 1) * GROUP]
    }

    /// Free groups (writer's view: retired groups still in their grace period do not count).
    fn free_groups(&self) -> u32 {
        (self.ngroups - self.next_unused.load(Ordering::Relaxed)) + self.free.len() as u32
    }

    fn alloc(&self) -> u32 {
        self.used
            .store(self.used.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if let Some(g) = self.free.pop() {
            return g;
        }
        let g = self.next_unused.load(Ordering::Relaxed);
        assert!(g < self.ngroups, "group pool exhausted after the capacity check");
        self.next_unused.store(g + 1, Ordering::Relaxed);
        g
    }

    fn retire(&self, g: u32, guard: &Guard) {
        self.used
            .store(self.used.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        let free = self.free.clone();
        epoch::defer(guard, move || free.push(g));
    }

    /// The leaves of the prefix (`key`, `len`) on level `lvl` (its `level_of`): the slots its
    /// range covers in the first table, or in the group reached by following `key` down.
    /// `step(slot, l)` is called for each entry on the way down (`slot` on level `l - 1`) and
    /// gives the group of level `l` that it leads to, or `None` to stop (the result is then
    /// `None`).
    #[inline]
    fn leaves<'a>(
        &'a self,
        key: u128,
        len: u32,
        lvl: u32,
        mut step: impl FnMut(&'a AtomicU32, u32) -> Option<u32>,
    ) -> Option<&'a [AtomicU32]> {
        let table: &[AtomicU32] = if lvl == 0 {
            &self.first
        } else {
            let mut slot = &self.first[self.index(key, 0)];
            let mut g = 0;
            for l in 1..=lvl {
                g = step(slot, l)?;
                if l < lvl {
                    slot = &self.group(g)[self.index(key, l)];
                }
            }
            self.group(g)
        };
        let at = self.index(key, lvl);
        Some(&table[at..at + (1usize << (self.end(lvl) - len))])
    }

    /// *Writer only.* Adds or replaces the prefix (`key`, `len`) with next-hop group `nh`.
    ///
    /// Call it unpinned: if the pool looks full it pushes the epoch along to get retired
    /// groups back, which a guard held by the caller would prevent.
    pub(crate) fn insert(&self, key: u128, len: u32, nh: u32) -> Result<(), DirFull> {
        debug_assert!(len <= self.width);
        let new = leaf(len, nh);
        let lvl = self.level_of(len);
        // Count the groups the path needs, and refuse before touching anything (invariant 5).
        let mut need = 0;
        self.leaves(key, len, lvl, |slot, l| {
            let e = slot.load(Ordering::Relaxed);
            if e & EXT == 0 {
                need = lvl - l + 1;
                return None;
            }
            Some(e & PAYLOAD)
        });
        // Retired groups come back after their grace period: push it along before refusing.
        epoch::retry(|| {
            if need > self.free_groups() {
                Err(DirFull)
            } else {
                Ok(())
            }
        })?;
        let leaves = self.leaves(key, len, lvl, |slot, _| {
            let e = slot.load(Ordering::Relaxed);
            if e & EXT != 0 {
                return Some(e & PAYLOAD);
            }
            let g = self.alloc();
            // Invariant 2: fill with the old leaf, then publish.
            for x in self.group(g) {
                x.store(e, Ordering::Relaxed);
            }
            slot.store(VALID | EXT | g, Ordering::Release);
            Some(g)
        });
        for slot in leaves.expect("every step of the walk gives a group") {
            self.set_covering(slot, len, new);
        }
        Ok(())
    }

    /// Stores `new` into every leaf under `slot` that a /`len` beats (depth <= len).
    fn set_covering(&self, slot: &AtomicU32, len: u32, new: u32) {
        let e = slot.load(Ordering::Relaxed);
        if e & EXT != 0 {
            for x in self.group(e & PAYLOAD) {
                self.set_covering(x, len, new);
            }
        } else if (e & VALID == 0 || depth(e) <= len) && e != new {
            slot.store(new, Ordering::Release);
        }
    }

    /// *Writer only.* Removes the prefix (`key`, `len`): its leaves become `repl` (the leaf of
    /// the longest covering prefix, or 0), and groups left uniform collapse.
    pub(crate) fn remove(&self, key: u128, len: u32, repl: u32, guard: &Guard) {
        let lvl = self.level_of(len);
        let mut path: Vec<(&AtomicU32, u32)> = Vec::new();
        let leaves = self.leaves(key, len, lvl, |slot, l| {
            let e = slot.load(Ordering::Relaxed);
            if e & EXT == 0 {
                return None; // the prefix was never expanded here: not present
            }
            path.push((slot, l));
            Some(e & PAYLOAD)
        });
        let Some(leaves) = leaves else { return };
        for slot in leaves {
            self.clear_exact(slot, len, repl, lvl, guard);
        }
        for &(slot, l) in path.iter().rev() {
            self.try_collapse(slot, l, guard);
        }
    }

    /// Rewrites the leaves of depth `len` under `slot` (a level-`l` entry) to `repl`.
    fn clear_exact(&self, slot: &AtomicU32, len: u32, repl: u32, l: u32, guard: &Guard) {
        let e = slot.load(Ordering::Relaxed);
        if e & EXT != 0 {
            for x in self.group(e & PAYLOAD) {
                self.clear_exact(x, len, repl, l + 1, guard);
            }
            self.try_collapse(slot, l + 1, guard);
        } else if e & VALID != 0 && depth(e) == len {
            slot.store(repl, Ordering::Release);
        }
    }

    /// If the level-`l` group under the EXT entry `slot` holds 256 equal leaves no longer than
    /// the group's start bit, store that leaf in `slot` and retire the group.
    fn try_collapse(&self, slot: &AtomicU32, l: u32, guard: &Guard) {
        let e = slot.load(Ordering::Relaxed);
        if e & EXT == 0 {
            return;
        }
        let g = self.group(e & PAYLOAD);
        let e0 = g[0].load(Ordering::Relaxed);
        if e0 & EXT != 0 || (e0 & VALID != 0 && depth(e0) > self.start(l)) {
            return;
        }
        if g.iter().any(|x| x.load(Ordering::Relaxed) != e0) {
            return;
        }
        slot.store(e0, Ordering::Release);
        self.retire(e & PAYLOAD, guard);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn k4(ip: u32) -> u128 {
        u128::from(ip) << 96
    }

    #[test]
    fn dir24_8_basics_and_collapse() {
        let d = Dir::new(32, 24, 16);
        let g = epoch::pin();
        d.insert(k4(0x0a00_0000), 8, 1).unwrap();
        d.insert(k4(0x0a01_0200), 26, 2).unwrap();
        assert_eq!(d.groups_used(), 1);
        assert_eq!(d.lookup32(0x0a01_0201), leaf(26, 2));
        assert_eq!(d.lookup32(0x0a01_0241), leaf(8, 1));
        assert_eq!(d.lookup32(0x0b00_0000), 0);
        // A covering /16 added later does not override the /26.
        d.insert(k4(0x0a01_0000), 16, 3).unwrap();
        assert_eq!(d.lookup32(0x0a01_0201), leaf(26, 2));
        assert_eq!(d.lookup32(0x0a01_0241), leaf(16, 3));
        // Deleting the /26 restores the /16 and collapses the group.
        d.remove(k4(0x0a01_0200), 26, leaf(16, 3), &g);
        assert_eq!(d.lookup32(0x0a01_0201), leaf(16, 3));
        assert_eq!(d.groups_used(), 0);
        assert_eq!(d.lookup128(k4(0x0a01_0201)), leaf(16, 3));
    }

    #[test]
    fn full_pool_refuses_before_changing() {
        let d = Dir::new(32, 24, 1);
        d.insert(k4(0x0a00_0000), 32, 1).unwrap();
        assert_eq!(d.insert(k4(0x0b00_0000), 32, 2), Err(DirFull));
        assert_eq!(d.lookup32(0x0b00_0000), 0);
        // Same group: no new one needed.
        d.insert(k4(0x0a00_0001), 32, 3).unwrap();
        assert_eq!(d.lookup32(0x0a00_0001), leaf(32, 3));
    }

    #[test]
    fn v6_deep_prefixes() {
        let d = Dir::new(128, 16, 64);
        let g = epoch::pin();
        let p: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0000;
        d.insert(p, 32, 1).unwrap();
        d.insert(p | 1, 128, 2).unwrap();
        assert_eq!(d.lookup128(p | 1), leaf(128, 2));
        assert_eq!(d.lookup128(p | 2), leaf(32, 1));
        assert_eq!(d.groups_used(), 14);
        d.remove(p | 1, 128, leaf(32, 1), &g);
        assert_eq!(d.lookup128(p | 1), leaf(32, 1));
        assert_eq!(d.groups_used(), 2, "the /32 still needs the groups for bits 16..32");
        d.remove(p, 32, 0, &g);
        assert_eq!(d.groups_used(), 0);
        assert_eq!(d.lookup128(p), 0);
    }
}
