//! The FIB: what workers read. A cheap, cloneable handle on the IPv4 and IPv6 tries
//! (`dir`), the next-hop group table ([`crate::nh`]) and the route generation.
//!
//! # Threads
//! Workers call the `lookup*` functions and [`Fib::generation`]: lock-free, no shared write.
//! Only the [`crate::Rib`] that created the FIB changes it. After a change is fully visible
//! (every entry stored), the RIB bumps the generation with a `Release` increment; the counter
//! sits alone on its cache line, since every worker reads it for every packet (route cache).
//!
//! # The generation protocol
//! A reader that loads generation `g` (Acquire) and then looks up sees every change up to `g`;
//! it may also see parts of later ones, which is why a cache entry filled then is tagged `g`
//! (the generation loaded *before* the lookup) and refilled once the generation moves.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use freeway_sync::atomic::{AtomicU64, Ordering};
use freeway_sync::CachePadded;
use serde::Serialize;

use crate::dir::{Dir, EXT, PAYLOAD, VALID};
use crate::epoch::{self, Guard};
use crate::nh::{GroupStats, NextHop, NhGroup, NhTable};

/// Sizes of the bounded pools, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FibConfig {
    /// IPv4 tbl8 groups (1 KiB each, one per /24 holding prefixes longer than /24).
    pub v4_groups: u32,
    /// IPv6 groups (1 KiB each, one per (8-bit boundary, prefix path) below /16).
    pub v6_groups: u32,
    /// Next-hop groups (distinct ECMP sets in use, plus those in their grace period).
    pub nh_groups: u32,
}

impl Default for FibConfig {
    /// 65 536 IPv4 groups (64 MiB reserved), 262 144 IPv6 groups (256 MiB reserved), 65 536
    /// next-hop groups. Only touched pages become resident.
    fn default() -> Self {
        FibConfig {
            v4_groups: 1 << 16,
            v6_groups: 1 << 18,
            nh_groups: 1 << 16,
        }
    }
}

pub(crate) struct FibShared {
    pub(crate) generation: CachePadded<AtomicU64>,
    pub(crate) v4: Dir,
    pub(crate) v6: Dir,
    pub(crate) id: u64,
}

/// The workers' handle on the forwarding table. `Clone` is an `Arc` clone.
#[derive(Clone)]
pub struct Fib {
    pub(crate) shared: Arc<FibShared>,
    pub(crate) nh: NhTable,
}

impl std::fmt::Debug for Fib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fib")
            .field("generation", &self.generation())
            .field("memory", &self.memory())
            .finish()
    }
}

/// Memory used by the FIB's structures, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FibMemory {
    /// IPv4 tbl24 (always 64 MiB of address space; resident where touched).
    pub v4_tbl24: usize,
    /// IPv4 tbl8 groups in use.
    pub v4_tbl8: usize,
    /// IPv4 tbl8 groups in use (count).
    pub v4_groups: u32,
    /// IPv6 first level (256 KiB).
    pub v6_first: usize,
    /// IPv6 groups in use.
    pub v6_groups_bytes: usize,
    /// IPv6 groups in use (count).
    pub v6_groups: u32,
    /// Next-hop groups alive (in the table or held by caches).
    pub nh_groups: u64,
    /// Total of the byte fields.
    pub total: usize,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Fib {
    pub(crate) fn new(config: FibConfig, nh: NhTable) -> Fib {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Fib {
            shared: Arc::new(FibShared {
                // Generations of different FIBs never coincide (2^40 changes each), so a cache
                // entry filled from one FIB can never pass for current in another.
                generation: CachePadded::new(AtomicU64::new(id << 40)),
                v4: Dir::new(32, 24, config.v4_groups),
                v6: Dir::new(128, 16, config.v6_groups),
                id,
            }),
            nh,
        }
    }

    /// Enters a read-side section; workers pin once per batch and pass the guard down.
    #[inline]
    pub fn pin() -> Guard {
        epoch::pin()
    }

    /// The route generation: starts at a value unique to this FIB (never 0), grows by one after
    /// every change (or every [`crate::Rib::batch`] of changes), once it is fully visible.
    #[inline(always)]
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// A number unique to this FIB (caches check they are used with one FIB only).
    #[inline(always)]
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    #[inline(always)]
    fn group<'g>(&'g self, e: u32, guard: &'g Guard) -> Option<&'g NhGroup> {
        if e & VALID == 0 {
            return None;
        }
        debug_assert!(e & EXT == 0);
        self.nh.get(e & PAYLOAD, guard)
    }

    /// Longest-prefix match for an IPv4 destination: the route's next-hop group.
    #[inline(always)]
    pub fn lookup_v4<'g>(&'g self, dst: Ipv4Addr, guard: &'g Guard) -> Option<&'g NhGroup> {
        let e = self.shared.v4.lookup32(u32::from(dst));
        self.group(e, guard)
    }

    /// Longest-prefix match for a batch of IPv4 destinations (`out[i]` for `dsts[i]`; extra
    /// elements of the longer slice are left alone). Faster than one by one on tables bigger
    /// than the CPU caches: the tbl24 misses of the batch overlap.
    #[inline]
    pub fn lookup_v4_batch<'g>(&'g self, dsts: &[Ipv4Addr], guard: &'g Guard, out: &mut [Option<&'g NhGroup>]) {
        let mut ips = [0u32; 32];
        let mut es = [0u32; 32];
        for (d, o) in dsts.chunks(32).zip(out.chunks_mut(32)) {
            let n = d.len().min(o.len());
            for (ip, a) in ips.iter_mut().zip(&d[..n]) {
                *ip = u32::from(*a);
            }
            self.shared.v4.lookup32_batch(&ips[..n], &mut es[..n]);
            for (o, &e) in o[..n].iter_mut().zip(&es[..n]) {
                *o = self.group(e, guard);
            }
        }
    }

    /// Longest-prefix match for an IPv6 destination.
    #[inline(always)]
    pub fn lookup_v6<'g>(&'g self, dst: Ipv6Addr, guard: &'g Guard) -> Option<&'g NhGroup> {
        let e = self.shared.v6.lookup128(u128::from(dst));
        self.group(e, guard)
    }

    /// Longest-prefix match for either family.
    #[inline]
    pub fn lookup<'g>(&'g self, dst: IpAddr, guard: &'g Guard) -> Option<&'g NhGroup> {
        match dst {
            IpAddr::V4(a) => self.lookup_v4(a, guard),
            IpAddr::V6(a) => self.lookup_v6(a, guard),
        }
    }

    /// Convenience: pins, looks up, picks the hop for `flow_hash`. Workers use a
    /// [`crate::RouteCache`] or [`Fib::lookup`] with a per-batch guard instead.
    pub fn next_hop(&self, dst: IpAddr, flow_hash: u32) -> Option<NextHop> {
        let g = epoch::pin();
        self.lookup(dst, &g).map(|grp| *grp.pick(flow_hash))
    }

    /// Next-hop group creation/free counts (shared with the groups: valid after the FIB drops).
    pub fn group_stats(&self) -> Arc<GroupStats> {
        self.nh.stats_arc()
    }

    /// The memory the structures use.
    pub fn memory(&self) -> FibMemory {
        let (a, b) = self.shared.v4.bytes();
        let (c, d) = self.shared.v6.bytes();
        FibMemory {
            v4_tbl24: a,
            v4_tbl8: b,
            v4_groups: self.shared.v4.groups_used(),
            v6_first: c,
            v6_groups_bytes: d,
            v6_groups: self.shared.v6.groups_used(),
            nh_groups: self.nh.stats().alive(),
            total: a + b + c + d,
        }
    }

    /// Capacities of the IPv4 and IPv6 group pools.
    pub fn group_capacity(&self) -> (u32, u32) {
        (self.shared.v4.groups_capacity(), self.shared.v6.groups_capacity())
    }
}
