//! The per-worker route cache (validated by a generation number, never invalidated by
//! another thread; OpenBSD's per-softnet route cache).
//!
//! A direct-mapped table per family, destination address -> counted reference ([`NhRef`]) to
//! the next-hop group, tagged with the FIB generation loaded *before* the FIB lookup that
//! filled it. An entry is valid only while its tag equals the FIB's current generation: a
//! change anywhere in the table makes every entry refill on its next lookup. Nobody ever
//! invalidates another thread's cache; the worker notices by itself, with one load of the
//! generation (its own cache line, read-mostly) per lookup. Negative answers (no route) are
//! cached the same way.
//!
//! References are counted per worker and group, not per entry: the cache holds one [`NhRef`]
//! for each group its entries point to (`held`, indexed by group index), and entries keep a
//! plain pointer. A miss therefore costs the FIB lookup and a few local stores; the shared
//! counter of a group is touched once when a worker first uses the group and once when it lets
//! go, never per packet or per refill (no shared write on the fast path; a per-entry get/put
//! made two threads' caches bounce the counters of the few popular groups, the `dst_entry`
//! contention of the Linux rcuref series, and ran slower on 2 threads than on 1).
//!
//! Invariant: an entry tagged with the generation the cache last saw, and pointing to a group,
//! has that group's reference in `held`. When a lookup first sees a newer generation, every
//! entry is stale (it will be refilled before use), so the cache drops the held references of
//! groups the table no longer publishes (a sweep over `held`: groups in use, tens to hundreds).
//! A counted reference keeps a group alive after the table dropped it until that sweep, or
//! [`RouteCache::clear`], or the cache's drop.
//!
//! Generations of different FIBs never coincide, so a cache used with another FIB simply
//! misses everywhere and its first sweep lets go of the old FIB's groups.
//!
//! `enabled: false` is the `--no-route-cache` baseline: every lookup goes to the FIB.
//!
//! Threads: a `RouteCache` belongs to one worker (`&mut self`); its counters are single-writer
//! [`Counter`]s that any thread may read through [`RouteCache::counters`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use freeway_sync::{CachePadded, Counter};
use serde::Serialize;

use crate::epoch::{self, Guard};
use crate::fib::Fib;
use crate::nh::{NextHop, NhGroup, NhRef};

/// Default entries per family.
pub const DEFAULT_ENTRIES: usize = 4096;

/// The cache's counters (written by the owning worker only).
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Lookups answered from the cache.
    pub hits: Counter,
    /// Lookups that found another destination (or nothing) in their slot.
    pub misses: Counter,
    /// Lookups that found their destination tagged with an old generation.
    pub refills: Counter,
    /// Lookups done without the cache (cache disabled).
    pub uncached: Counter,
}

/// A copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Slot held another destination or nothing.
    pub misses: u64,
    /// Slot held this destination from an older generation.
    pub refills: u64,
    /// Lookups with the cache disabled.
    pub uncached: u64,
}

impl CacheCounters {
    /// A snapshot.
    pub fn snapshot(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            refills: self.refills.get(),
            uncached: self.uncached.get(),
        }
    }
}

struct Slot<K> {
    key: K,
    /// 0: empty (FIB generations are never 0).
    gen: u64,
    /// Null: no route. Otherwise valid while `gen` is the current generation (see invariant).
    group: *const NhGroup,
}

impl<K: Default> Default for Slot<K> {
    fn default() -> Self {
        Slot {
            key: K::default(),
            gen: 0,
            group: std::ptr::null(),
        }
    }
}

impl<K> Slot<K> {
    #[inline(always)]
    fn answer(&self, flow_hash: u32) -> Option<NextHop> {
        // SAFETY: only called for an entry tagged with the current generation, whose group
        // reference is in `held` (module invariant), so the group is alive.
        unsafe { self.group.as_ref() }.map(|g| *g.pick(flow_hash))
    }
}

/// A per-worker route cache (see the module docs).
pub struct RouteCache {
    enabled: bool,
    bits: u32,
    v4: Box<[Slot<u32>]>,
    v6: Box<[Slot<u128>]>,
    /// One counted reference per group that entries point to, by group index.
    held: Vec<Option<NhRef>>,
    /// The generation the last miss saw.
    seen: u64,
    counters: Arc<CachePadded<CacheCounters>>,
}

// SAFETY: the raw group pointers in slots are covered by the `NhRef`s in `held`, which are
// `Send`; the cache is used by one thread at a time (`&mut self`).
unsafe impl Send for RouteCache {}

impl std::fmt::Debug for RouteCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteCache")
            .field("enabled", &self.enabled)
            .field("entries", &self.v4.len())
            .field("stats", &self.stats())
            .finish()
    }
}

/// What the lookup needs to know of an address family: its key, slot index, slots and FIB.
trait Family {
    type Addr: Copy;
    type Key: Copy + Eq;
    fn key(a: Self::Addr) -> Self::Key;
    fn idx(key: Self::Key, bits: u32) -> usize;
    fn slots(c: &RouteCache) -> &[Slot<Self::Key>];
    fn slots_mut(c: &mut RouteCache) -> &mut [Slot<Self::Key>];
    fn fib_lookup<'g>(fib: &'g Fib, a: Self::Addr, guard: &'g Guard) -> Option<&'g NhGroup>;
}

struct V4;
struct V6;

/// `impl Family` for a family: its marker, address and key types, the cache's slot field,
/// the FIB lookup and the slot index of a key (`|key, bits| index`).
macro_rules! family {
    ($fam:ident, $addr:ty, $key:ty, $slots:ident, $lookup:ident, |$k:ident, $bits:ident| $idx:expr) => {
        impl Family for $fam {
            type Addr = $addr;
            type Key = $key;
            #[inline(always)]
            fn key(a: $addr) -> $key {
                <$key>::from(a)
            }
            #[inline(always)]
            fn idx($k: $key, $bits: u32) -> usize {
                $idx
            }
            #[inline(always)]
            fn slots(c: &RouteCache) -> &[Slot<$key>] {
                &c.$slots
            }
            #[inline(always)]
            fn slots_mut(c: &mut RouteCache) -> &mut [Slot<$key>] {
                &mut c.$slots
            }
            #[inline(always)]
            fn fib_lookup<'g>(fib: &'g Fib, a: $addr, guard: &'g Guard) -> Option<&'g NhGroup> {
                fib.$lookup(a, guard)
            }
        }
    };
}

family!(V4, Ipv4Addr, u32, v4, lookup_v4, |key, bits| {
    (key.wrapping_mul(0x9e37_79b1) >> (32 - bits)) as usize
});
family!(V6, Ipv6Addr, u128, v6, lookup_v6, |key, bits| {
    let f = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
    (f.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
});

impl RouteCache {
    /// A cache of `entries` slots per family (rounded up to a power of two, 16 ..= 2^20).
    /// `enabled: false` gives the no-cache baseline.
    pub fn new(entries: usize, enabled: bool) -> RouteCache {
        let n = entries.clamp(16, 1 << 20).next_power_of_two();
        let (v4, v6) = if enabled { (n, n) } else { (1, 1) };
        RouteCache {
            enabled,
            bits: n.trailing_zeros(),
            v4: (0..v4).map(|_| Slot::default()).collect(),
            v6: (0..v6).map(|_| Slot::default()).collect(),
            held: Vec::new(),
            seen: 0,
            counters: Arc::new(CachePadded::new(CacheCounters::default())),
        }
    }

    /// Whether the cache is used (false: the baseline).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Slots per family.
    pub fn entries(&self) -> usize {
        if self.enabled {
            self.v4.len()
        } else {
            0
        }
    }

    /// The counters, shareable with a statistics thread.
    pub fn counters(&self) -> Arc<CachePadded<CacheCounters>> {
        self.counters.clone()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        self.counters.snapshot()
    }

    /// Drops every entry and every held reference (an idle worker can let groups go).
    pub fn clear(&mut self) {
        for s in self.v4.iter_mut() {
            *s = Slot::default();
        }
        for s in self.v6.iter_mut() {
            *s = Slot::default();
        }
        self.held.clear();
    }

    /// Counted group references held (distinct groups the entries point to, or pointed to
    /// before the last generation change).
    pub fn held(&self) -> usize {
        self.held.iter().filter(|h| h.is_some()).count()
    }

    /// First miss under a new generation: every entry is stale, so let go of the groups the
    /// table no longer publishes.
    #[cold]
    fn sweep(&mut self, fib: &Fib, guard: &Guard) {
        for (i, h) in self.held.iter_mut().enumerate() {
            if let Some(r) = h {
                let live = !r.is_retired() && fib.nh.get(i as u32, guard).is_some_and(|g| std::ptr::eq(g, &**r));
                if !live {
                    *h = None;
                }
            }
        }
    }

    /// Makes sure `held` covers `g` and returns the pointer an entry may keep (`None`: do not
    /// cache this answer).
    #[inline]
    fn hold(held: &mut Vec<Option<NhRef>>, g: &NhGroup, guard: &Guard) -> Option<*const NhGroup> {
        let i = g.index() as usize;
        if i >= held.len() {
            held.resize_with(i + 1, || None);
        }
        match &held[i] {
            Some(r) if std::ptr::eq(&**r, g) => {}
            // A new group reusing the index of a retired one we still hold: entries of the
            // current generation may point to the old one (our generation may lag the
            // lookup), so keep it until the next sweep and do not cache this answer.
            Some(_) => return None,
            None => held[i] = Some(NhRef::new(g, guard)?),
        }
        Some(g as *const NhGroup)
    }

    /// The slow path shared by both families: sweep if the generation moved, look up, fill.
    #[inline]
    fn fill(&mut self, fib: &Fib, guard: &Guard, gen: u64, grp: Option<&NhGroup>) -> Option<*const NhGroup> {
        if gen != self.seen {
            self.sweep(fib, guard);
            self.seen = gen;
        }
        match grp {
            None => Some(std::ptr::null()),
            Some(g) => Self::hold(&mut self.held, g, guard),
        }
    }

    /// The next hop for an IPv4 destination and flow; pins an epoch only on a miss.
    #[inline]
    pub fn lookup_v4(&mut self, fib: &Fib, dst: Ipv4Addr, flow_hash: u32) -> Option<NextHop> {
        self.lookup_pinning::<V4>(fib, dst, flow_hash)
    }

    /// The next hop for an IPv4 destination, with the worker's per-batch guard.
    #[inline]
    pub fn lookup_v4_in(&mut self, fib: &Fib, guard: &Guard, dst: Ipv4Addr, flow_hash: u32) -> Option<NextHop> {
        self.lookup_family::<V4>(fib, guard, dst, flow_hash)
    }

    /// The next hop for an IPv6 destination and flow; pins an epoch only on a miss.
    #[inline]
    pub fn lookup_v6(&mut self, fib: &Fib, dst: Ipv6Addr, flow_hash: u32) -> Option<NextHop> {
        self.lookup_pinning::<V6>(fib, dst, flow_hash)
    }

    /// The next hop for an IPv6 destination, with the worker's per-batch guard.
    #[inline]
    pub fn lookup_v6_in(&mut self, fib: &Fib, guard: &Guard, dst: Ipv6Addr, flow_hash: u32) -> Option<NextHop> {
        self.lookup_family::<V6>(fib, guard, dst, flow_hash)
    }

    /// A hit answered without pinning; a miss pins an epoch and goes to [`Self::lookup_family`].
    #[inline(always)]
    fn lookup_pinning<F: Family>(&mut self, fib: &Fib, dst: F::Addr, flow_hash: u32) -> Option<NextHop> {
        if self.enabled {
            let key = F::key(dst);
            let s = &F::slots(self)[F::idx(key, self.bits)];
            if s.gen == fib.generation() && s.key == key {
                self.counters.hits.inc();
                return s.answer(flow_hash);
            }
        }
        let g = epoch::pin();
        self.lookup_family::<F>(fib, &g, dst, flow_hash)
    }

    /// The lookup of either family under `guard`: the cache, then on a miss the FIB.
    #[inline(always)]
    fn lookup_family<F: Family>(&mut self, fib: &Fib, guard: &Guard, dst: F::Addr, flow_hash: u32) -> Option<NextHop> {
        if !self.enabled {
            self.counters.uncached.inc();
            return F::fib_lookup(fib, dst, guard).map(|g| *g.pick(flow_hash));
        }
        // Load the generation before the lookup (see `crate::fib`).
        let gen = fib.generation();
        let key = F::key(dst);
        let i = F::idx(key, self.bits);
        let s = &F::slots(self)[i];
        if s.gen == gen && s.key == key {
            self.counters.hits.inc();
            return s.answer(flow_hash);
        }
        if s.key == key && s.gen != 0 {
            self.counters.refills.inc();
        } else {
            self.counters.misses.inc();
        }
        let grp = F::fib_lookup(fib, dst, guard);
        let hop = grp.map(|g| *g.pick(flow_hash));
        let s_gen = match self.fill(fib, guard, gen, grp) {
            Some(p) => {
                F::slots_mut(self)[i].group = p;
                gen
            }
            None => 0,
        };
        let s = &mut F::slots_mut(self)[i];
        s.key = key;
        s.gen = s_gen;
        hop
    }

    /// Either family, pinning only on a miss.
    #[inline]
    pub fn lookup(&mut self, fib: &Fib, dst: IpAddr, flow_hash: u32) -> Option<NextHop> {
        match dst {
            IpAddr::V4(a) => self.lookup_v4(fib, a, flow_hash),
            IpAddr::V6(a) => self.lookup_v6(fib, a, flow_hash),
        }
    }

    /// Either family, with the worker's per-batch guard.
    #[inline]
    pub fn lookup_in(&mut self, fib: &Fib, guard: &Guard, dst: IpAddr, flow_hash: u32) -> Option<NextHop> {
        match dst {
            IpAddr::V4(a) => self.lookup_v4_in(fib, guard, a, flow_hash),
            IpAddr::V6(a) => self.lookup_v6_in(fib, guard, a, flow_hash),
        }
    }
}
