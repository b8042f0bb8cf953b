//! Next hops, next-hop groups (ECMP) and the table of groups the FIB points into.
//!
//! # Objects and lifetimes
//!
//! A [`NhGroup`] is an immutable, sorted, duplicate-free set of [`NextHop`]s plus a scalable
//! reference count ([`RcRef`]). Routes with the same set share one group, so a full table has
//! tens to hundreds of groups, not a million. FIB entries hold a group's *index* (22 bits fit in
//! an entry); the index leads to a slot of the [`NhTable`], an `AtomicPtr<NhGroup>`.
//!
//! References to a group:
//! * the table's own, taken at creation and put when the writer retires the group (after an
//!   epoch grace period);
//! * [`NhRef`]s, counted references taken by route caches *inside* an epoch section (so the
//!   group's memory is guaranteed while `get` runs) and kept across batches. `NhRef::drop` puts;
//!   whoever puts last frees, exactly once ([`freeway_sync::Put::Last`]).
//!
//! # Invariants
//! 1. A slot is non-null from the writer's `Release` store until the deferred retire clears it;
//!    an index is reused only after that (the retire closure pushes it to the free queue), so a
//!    reader that loaded a stale FIB entry still finds the group that entry meant.
//! 2. Only the writer ([`NhWriter`], `&mut self`) stores non-null pointers into slots; only the
//!    retire closure (any thread, once per retirement) clears them.
//! 3. A group is freed once: when the last of (table reference, `NhRef`s) is put.
//!
//! Threads: [`NhTable::get`] and [`NhGroup::pick`] run on workers; [`NhWriter`] on the one
//! control thread that owns the [`crate::Rib`]; retire closures on whichever thread crossbeam-epoch
//! picks. Model-checked in `tests/loom_nh.rs`.

use std::collections::HashMap;

/// The control side's hash maps (the RIB's prefixes, the groups by hops): foldhash, seeded at
/// random per map (several times cheaper than the default SipHash for these small keys).
/// Their keys may come from a routing daemon's peers, so the hash is never a fixed one an
/// outsider could aim collisions at.
pub(crate) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::fmt;
use std::net::IpAddr;
use std::ptr::NonNull;

use std::sync::Arc;

// Loom must see the synchronisation of the last drop of the table (which runs `Shared::drop`).
#[cfg(loom)]
use loom::sync::Arc as SharedArc;
#[cfg(not(loom))]
use std::sync::Arc as SharedArc;

use crossbeam_queue::SegQueue;
use freeway_sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use freeway_sync::{Put, RcRef};
use serde::Serialize;

use crate::epoch::{self, Guard};

/// Most next hops in one ECMP group.
pub const MAX_PATHS: usize = 64;

/// Where a packet goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NextHop {
    /// Output interface index (the caller's numbering).
    pub iface: u16,
    /// The gateway to resolve; `None`: directly connected, the neighbour is the destination.
    pub gateway: Option<IpAddr>,
}

impl NextHop {
    /// A hop through `gateway` on `iface`.
    pub fn via(gateway: IpAddr, iface: u16) -> Self {
        NextHop {
            iface,
            gateway: Some(gateway),
        }
    }

    /// A directly connected hop on `iface`.
    pub fn connected(iface: u16) -> Self {
        NextHop { iface, gateway: None }
    }

    /// The address whose link-layer address the packet needs: the gateway, or `dst` itself.
    #[inline]
    pub fn neighbour(&self, dst: IpAddr) -> IpAddr {
        self.gateway.unwrap_or(dst)
    }
}

/// Finaliser of MurmurHash3: spreads every input bit over the output, so that sequential or
/// poorly mixed flow hashes still split evenly.
#[inline(always)]
pub fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The index [`NhGroup::pick`] chooses among `n` canonical hops for a flow hash: the mixed
/// hash scaled to `0..n` (hash-threshold: each hop owns one contiguous range of hash space).
#[inline(always)]
pub fn pick_index(flow_hash: u32, n: usize) -> usize {
    ((u64::from(mix32(flow_hash)) * n as u64) >> 32) as usize
}

/// Creation and free counts of groups (shared by a table and its groups).
#[derive(Debug, Default)]
pub struct GroupStats {
    created: AtomicU64,
    freed: AtomicU64,
}

impl GroupStats {
    /// Groups created so far.
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    /// Groups freed so far (exactly once each: a double free would show as `freed > created`).
    pub fn freed(&self) -> u64 {
        self.freed.load(Ordering::Relaxed)
    }

    /// Groups alive (in the table or held by caches).
    pub fn alive(&self) -> u64 {
        self.created().saturating_sub(self.freed())
    }
}

/// An immutable set of equal-cost next hops.
pub struct NhGroup {
    hops: Box<[NextHop]>,
    index: u32,
    /// Set by the writer when the last route lets go (before the generation bump that
    /// publishes the change), so caches know to let go too.
    retired: AtomicBool,
    rc: RcRef,
    stats: Arc<GroupStats>,
}

impl fmt::Debug for NhGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NhGroup")
            .field("index", &self.index)
            .field("hops", &self.hops)
            .finish()
    }
}

impl Drop for NhGroup {
    fn drop(&mut self) {
        self.stats.freed.fetch_add(1, Ordering::Relaxed);
    }
}

impl NhGroup {
    /// The hops, sorted, without duplicates.
    pub fn hops(&self) -> &[NextHop] {
        &self.hops
    }

    /// The group's index in its table.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Chooses the hop for a flow: hash-threshold (RFC 2992) on the mixed hash, so one flow
    /// always takes one path and many flows spread evenly over the hops.
    #[inline]
    pub fn pick(&self, flow_hash: u32) -> &NextHop {
        let n = self.hops.len();
        if n == 1 {
            return &self.hops[0];
        }
        &self.hops[pick_index(flow_hash, n)]
    }

    /// Whether the table dropped the group (no route uses it any more).
    #[inline]
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// References currently held (approximate under concurrency).
    pub fn refs(&self) -> u64 {
        self.rc.count()
    }
}

/// Drops one reference of `p`, freeing the group if it was the last.
///
/// # Safety
/// The caller owns one reference of `p` (the table's or an `NhRef`'s) and never uses it again.
unsafe fn put(p: *const NhGroup) {
    // SAFETY: the caller's reference keeps `*p` alive until this put.
    let last = unsafe { (*p).rc.put() } == Put::Last;
    if last {
        // SAFETY: `Put::Last` is returned to exactly one caller, after every other reference
        // was put; `p` came from `Box::into_raw` in `NhWriter::acquire`.
        drop(unsafe { Box::from_raw(p as *mut NhGroup) });
    }
}

/// A counted reference to a group, kept beyond an epoch section (route caches).
pub struct NhRef {
    ptr: NonNull<NhGroup>,
}

// SAFETY: `NhGroup` is immutable apart from its atomic counter, and the count makes the pointer
// valid for as long as the `NhRef` lives, on any thread.
unsafe impl Send for NhRef {}
// SAFETY: as above; `&NhRef` only gives `&NhGroup`.
unsafe impl Sync for NhRef {}

impl NhRef {
    /// Takes a reference to a group found under `guard`. `None` if the group is already dead
    /// (cannot happen while the table holds it; callers then simply do not cache).
    #[inline]
    pub fn new(group: &NhGroup, _guard: &Guard) -> Option<NhRef> {
        if group.rc.get() {
            Some(NhRef {
                ptr: NonNull::from(group),
            })
        } else {
            None
        }
    }
}

impl std::ops::Deref for NhRef {
    type Target = NhGroup;
    #[inline(always)]
    fn deref(&self) -> &NhGroup {
        // SAFETY: this `NhRef` owns a reference, so the group is alive (invariant 3).
        unsafe { self.ptr.as_ref() }
    }
}

impl Clone for NhRef {
    fn clone(&self) -> Self {
        // A live reference exists (ours), so the count cannot be dead: `get` succeeds.
        let ok = self.rc.get();
        debug_assert!(ok);
        NhRef { ptr: self.ptr }
    }
}

impl Drop for NhRef {
    fn drop(&mut self) {
        // SAFETY: we own one reference and give it up here.
        unsafe { put(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for NhRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// Why the writer refused a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NhError {
    /// Every slot is in use (or waiting for its grace period).
    Full,
    /// No hops, or more than [`MAX_PATHS`].
    BadSize,
}

struct Shared {
    slots: Box<[AtomicPtr<NhGroup>]>,
    free: SegQueue<u32>,
    stats: Arc<GroupStats>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Every retire closure holds an `Arc<Shared>`, so all of them ran: the non-null slots
        // are the groups the table still references (under loom: also the retired ones, which
        // were never cleared).
        for s in self.slots.iter() {
            let p = s.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: the table's reference of `p`, put exactly once here.
                unsafe { put(p) };
            }
        }
    }
}

/// The workers' view of the groups: index -> group.
#[derive(Clone)]
pub struct NhTable {
    shared: SharedArc<Shared>,
}

impl fmt::Debug for NhTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NhTable")
            .field("capacity", &self.shared.slots.len())
            .finish()
    }
}

impl NhTable {
    /// The group at `index`, valid while `guard` is held. `None` for an unused index.
    #[inline(always)]
    pub fn get<'g>(&'g self, index: u32, _guard: &'g Guard) -> Option<&'g NhGroup> {
        let p = self.shared.slots.get(index as usize)?.load(Ordering::Acquire);
        // SAFETY: a non-null slot points to a group holding the table's reference; it is put
        // only by the retire closure, which runs after every guard pinned before the retirement
        // (ours included) is dropped (invariant 1).
        unsafe { p.as_ref() }
    }

    /// Creation/free counts.
    pub fn stats(&self) -> &GroupStats {
        &self.shared.stats
    }

    /// Creation/free counts, shareable beyond the table's life.
    pub fn stats_arc(&self) -> Arc<GroupStats> {
        self.shared.stats.clone()
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.shared.slots.len()
    }
}

/// The writer side: creates, shares and retires groups. Not `Clone`; one per table.
pub struct NhWriter {
    table: NhTable,
    by_hops: Map<Box<[NextHop]>, u32>,
    users: Vec<u32>,
    next_unused: u32,
}

impl fmt::Debug for NhWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NhWriter").field("groups", &self.by_hops.len()).finish()
    }
}

/// Sorts and deduplicates a hop list into its canonical form.
pub fn canonical(hops: &[NextHop]) -> Vec<NextHop> {
    let mut v = hops.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

impl NhWriter {
    /// A table of `capacity` slots (at most 2^22, the FIB's entry payload).
    pub fn new(capacity: u32) -> (NhWriter, NhTable) {
        let capacity = capacity.clamp(1, 1 << 22);
        let table = NhTable {
            shared: SharedArc::new(Shared {
                slots: (0..capacity).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
                free: SegQueue::new(),
                stats: Arc::new(GroupStats::default()),
            }),
        };
        let w = NhWriter {
            table: table.clone(),
            by_hops: Map::default(),
            users: vec![0; capacity as usize],
            next_unused: 0,
        };
        (w, table)
    }

    /// Takes a user of the group for `hops` (canonicalised), creating and publishing it if
    /// needed. Returns its index.
    pub fn acquire(&mut self, hops: &[NextHop]) -> Result<u32, NhError> {
        self.acquire_canonical(canonical(hops))
    }

    /// [`NhWriter::acquire`] of hops already canonical (sorted, deduplicated).
    pub(crate) fn acquire_canonical(&mut self, hops: Vec<NextHop>) -> Result<u32, NhError> {
        debug_assert!(hops.windows(2).all(|w| w[0] < w[1]), "canonical hops");
        if hops.is_empty() || hops.len() > MAX_PATHS {
            return Err(NhError::BadSize);
        }
        if let Some(&i) = self.by_hops.get(hops.as_slice()) {
            self.users[i as usize] += 1;
            return Ok(i);
        }
        let index = epoch::retry(|| self.alloc_index())?;
        let sh = &self.table.shared;
        let hops: Box<[NextHop]> = hops.into_boxed_slice();
        let g = Box::new(NhGroup {
            hops: hops.clone(),
            index,
            retired: AtomicBool::new(false),
            rc: RcRef::new(),
            stats: sh.stats.clone(),
        });
        sh.stats.created.fetch_add(1, Ordering::Relaxed);
        // Release: the group's contents happen-before any reader that loads the pointer (and
        // the FIB entries naming `index` are stored after this, also with Release).
        sh.slots[index as usize].store(Box::into_raw(g), Ordering::Release);
        self.by_hops.insert(hops, index);
        self.users[index as usize] = 1;
        Ok(index)
    }

    fn alloc_index(&mut self) -> Result<u32, NhError> {
        let sh = &self.table.shared;
        match sh.free.pop() {
            Some(i) => Ok(i),
            None if (self.next_unused as usize) < sh.slots.len() => {
                self.next_unused += 1;
                Ok(self.next_unused - 1)
            }
            None => Err(NhError::Full),
        }
    }

    /// Drops a user of group `index`. The last user retires the group: the table's reference
    /// is put, and the index recycled, after an epoch grace period. The caller has already
    /// removed every FIB entry naming `index`.
    pub fn release(&mut self, index: u32, guard: &Guard) {
        let u = &mut self.users[index as usize];
        assert!(*u > 0, "release of an unused next-hop group {index}");
        *u -= 1;
        if *u > 0 {
            return;
        }
        let sh = &self.table.shared;
        let p = sh.slots[index as usize].load(Ordering::Relaxed);
        // SAFETY: only the writer (us) publishes slots, and this one is live (users > 0 until now).
        let g = unsafe { &*p };
        // Seen by any reader that sees the generation bump following this release.
        g.retired.store(true, Ordering::Relaxed);
        self.by_hops.remove(&g.hops);
        let sh = sh.clone();
        epoch::defer(guard, move || {
            let p = sh.slots[index as usize].swap(std::ptr::null_mut(), Ordering::Relaxed);
            // SAFETY: the grace period passed: no reader holds `p` without a counted reference.
            // This is the table's reference, put once (the slot is cleared by this swap).
            unsafe { put(p) };
            sh.free.push(index);
        });
    }

    /// Users of group `index` (routes pointing at it).
    pub fn users(&self, index: u32) -> u32 {
        self.users.get(index as usize).copied().unwrap_or(0)
    }

    /// Groups currently in the table (not counting those waiting for a grace period).
    pub fn len(&self) -> usize {
        self.by_hops.len()
    }

    /// Whether no group is in use.
    pub fn is_empty(&self) -> bool {
        self.by_hops.is_empty()
    }

    /// The readers' table.
    pub fn table(&self) -> &NhTable {
        &self.table
    }

    /// The hops of group `index` (writer side).
    pub fn hops(&self, index: u32) -> Option<&[NextHop]> {
        if self.users(index) == 0 {
            return None;
        }
        let p = self.table.shared.slots[index as usize].load(Ordering::Relaxed);
        // SAFETY: a used group's slot is live and only the writer (us) could retire it.
        unsafe { p.as_ref() }.map(|g| &*g.hops)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn hop(i: u8) -> NextHop {
        NextHop::via(IpAddr::V4(Ipv4Addr::new(192, 0, 2, i)), u16::from(i))
    }

    #[test]
    fn pick_is_deterministic_and_even() {
        let (mut w, t) = NhWriter::new(16);
        let i = w.acquire(&[hop(4), hop(1), hop(3), hop(2), hop(1)]).unwrap();
        let g = epoch::pin();
        let grp = t.get(i, &g).unwrap();
        assert_eq!(grp.hops().len(), 4, "canonical: sorted and deduplicated");
        let mut counts = [0u32; 4];
        for f in 0..100_000u32 {
            let a = grp.pick(f);
            assert_eq!(a, grp.pick(f));
            counts[usize::from(a.iface) - 1] += 1;
        }
        let exp = 25_000.0;
        let chi2: f64 = counts.iter().map(|&c| (f64::from(c) - exp).powi(2) / exp).sum();
        // 3 degrees of freedom: p = 0.001 at 16.3.
        assert!(chi2 < 16.3, "uneven ECMP spread {counts:?} chi2 {chi2}");
    }

    #[test]
    fn groups_are_shared_and_freed_once() {
        let (mut w, t) = NhWriter::new(4);
        let a = w.acquire(&[hop(1)]).unwrap();
        assert_eq!(w.acquire(&[hop(1)]).unwrap(), a);
        assert_eq!(w.users(a), 2);
        let b = w.acquire(&[hop(1), hop(2)]).unwrap();
        assert_ne!(a, b);
        let held = {
            let g = epoch::pin();
            NhRef::new(t.get(a, &g).unwrap(), &g).unwrap()
        };
        let g = epoch::pin();
        w.release(a, &g);
        w.release(a, &g);
        w.release(b, &g);
        drop(g);
        assert!(w.is_empty());
        let t0 = std::time::Instant::now();
        while t.stats().freed() < 1 && t0.elapsed().as_secs() < 10 {
            epoch::flush();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(t.stats().freed(), 1, "b freed; a still held by the cache reference");
        assert_eq!(held.hops(), &[hop(1)]);
        drop(held);
        assert_eq!(t.stats().freed(), 2);
        assert_eq!(t.stats().created(), 2);
    }

    #[test]
    fn full_and_bad_size() {
        let (mut w, _t) = NhWriter::new(1);
        assert_eq!(w.acquire(&[]), Err(NhError::BadSize));
        w.acquire(&[hop(1)]).unwrap();
        assert_eq!(w.acquire(&[hop(2)]), Err(NhError::Full));
    }
}

#[cfg(all(test, not(loom)))]
mod drop_tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn table_drop_puts_its_references() {
        let hop = |i: u8| NextHop::via(IpAddr::V4(Ipv4Addr::new(192, 0, 2, i)), 1);
        let (mut w, t) = NhWriter::new(4);
        let _a = w.acquire(&[hop(1)]).unwrap();
        let b = w.acquire(&[hop(2)]).unwrap();
        let stats = t.stats_arc();
        let r = {
            let g = epoch::pin();
            NhRef::new(t.get(b, &g).unwrap(), &g).unwrap()
        };
        drop(w);
        drop(t);
        assert_eq!(stats.freed(), 1, "a freed with the table");
        assert_eq!(r.refs(), 1);
        drop(r);
        assert_eq!(stats.freed(), 2);
    }
}
