//! Freeway's L3 stage: router interfaces, ARP and IPv6 neighbour discovery, ICMP, TTL and MAC
//! rewrite.
//!
//! * [`iface`]: router interfaces (port, VLAN, router MAC, addresses, EUI-64 link-local), the
//!   [`Interfaces`] set and the classifier that tells the bridge which frames are the router's.
//! * [`neigh`]: the neighbour table (ARP and ND entries, iproute2 states, ageing, bound): lock-free
//!   reads by workers, one writer fed by a bounded lock-free update queue.
//! * [`arp`], [`nd`], [`icmp`]: the protocol pieces (ARP replies and requests, Neighbour
//!   Solicitation / Advertisement, echo replies, ICMP errors and their rate limiter).
//! * [`stage`]: the per-worker [`L3Worker`] that validates, routes (through [`RouteLookup`]),
//!   resolves neighbours, rewrites and emits a batch of frames.
//!
//! Locking context: [`Interfaces`] is immutable after construction and shared read-only;
//! [`Neigh`] (the read side) and [`L3Worker`] run on worker threads and never block;
//! [`NeighWriter`] runs on the one neighbour writer thread (or on a worker that owns it in
//! offline runs and tests).
#![warn(missing_docs)]

pub mod arp;
pub mod filter;
pub mod frame;
pub mod icmp;
pub mod iface;
pub mod nd;
pub mod neigh;
pub mod stage;

use freeway_route::prefix::{mask4, mask6};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use filter::{FilterHook, FilterVerdict, NatHook, Reject};
pub use icmp::TokenBucket;
pub use iface::{ConnectedPrefix, IfaceError, Interface, Interfaces, LiveInterfaces, Wants};
pub use neigh::{
    Neigh, NeighConfig, NeighEntry, NeighError, NeighState, NeighStats, NeighUpdate, NeighView, NeighWriter,
};
pub use stage::{L3Config, L3Counters, L3Drop, L3Out, L3Stats, L3Worker, Punt};

/// Where a routed packet goes next: the router's next hop (`iface` indexes [`Interfaces`]).
pub use freeway_route::NextHop;

/// Longest-prefix lookup as the L3 stage sees it (a per-worker route cache in production; a
/// map in tests).
pub trait RouteLookup {
    /// The next hop for an IPv4 destination; `flow_hash` picks among equal-cost paths.
    fn lookup_v4(&mut self, dst: Ipv4Addr, flow_hash: u32) -> Option<NextHop>;
    /// The next hop for an IPv6 destination; `flow_hash` picks among equal-cost paths.
    fn lookup_v6(&mut self, dst: Ipv6Addr, flow_hash: u32) -> Option<NextHop>;
}

/// A simple longest-prefix-match list implementing [`RouteLookup`] (tests, examples, tiny
/// configurations). Linear in the number of routes; the first next hop of the longest match
/// wins, or `next_hops[flow_hash % n]` when a route has several (ECMP).
#[derive(Clone, Debug, Default)]
pub struct PrefixList {
    routes: Vec<(IpAddr, u8, Vec<NextHop>)>,
}

impl PrefixList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a route to `prefix/len` (host bits are ignored) via `hops` (one or more).
    pub fn add(&mut self, prefix: IpAddr, len: u8, hops: Vec<NextHop>) -> &mut Self {
        self.routes.push((prefix, len, hops));
        self
    }

    fn best(&self, dst: IpAddr, flow_hash: u32) -> Option<NextHop> {
        let mut best: Option<(u8, &Vec<NextHop>)> = None;
        for (p, len, hops) in &self.routes {
            if hops.is_empty() || !prefix_contains(*p, *len, dst) {
                continue;
            }
            if best.is_none_or(|(l, _)| *len > l) {
                best = Some((*len, hops));
            }
        }
        best.map(|(_, h)| h[flow_hash as usize % h.len()])
    }
}

impl RouteLookup for PrefixList {
    fn lookup_v4(&mut self, dst: Ipv4Addr, flow_hash: u32) -> Option<NextHop> {
        self.best(IpAddr::V4(dst), flow_hash)
    }

    fn lookup_v6(&mut self, dst: Ipv6Addr, flow_hash: u32) -> Option<NextHop> {
        self.best(IpAddr::V6(dst), flow_hash)
    }
}

/// Whether `addr` lies in `prefix/len` (same family; `len` is clamped to the family's width).
pub fn prefix_contains(prefix: IpAddr, len: u8, addr: IpAddr) -> bool {
    match (prefix, addr) {
        (IpAddr::V4(p), IpAddr::V4(a)) => (u32::from(p) ^ u32::from(a)) & mask4(len) == 0,
        (IpAddr::V6(p), IpAddr::V6(a)) => (u128::from(p) ^ u128::from(a)) & mask6(len) == 0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_list_picks_the_longest_match_and_spreads_ecmp() {
        let h = |i| NextHop {
            iface: i,
            gateway: None,
        };
        let mut r = PrefixList::new();
        r.add("10.0.0.0".parse().unwrap(), 8, vec![h(1)])
            .add("10.1.0.0".parse().unwrap(), 16, vec![h(2), h(3)])
            .add("::".parse().unwrap(), 0, vec![h(4)]);
        assert_eq!(r.lookup_v4(Ipv4Addr::new(10, 2, 0, 1), 0), Some(h(1)));
        assert_eq!(r.lookup_v4(Ipv4Addr::new(10, 1, 0, 1), 0), Some(h(2)));
        assert_eq!(r.lookup_v4(Ipv4Addr::new(10, 1, 0, 1), 1), Some(h(3)));
        assert_eq!(r.lookup_v4(Ipv4Addr::new(11, 1, 0, 1), 1), None);
        assert_eq!(r.lookup_v6("2001:db8::1".parse().unwrap(), 7), Some(h(4)));
        assert!(prefix_contains(
            "0.0.0.0".parse().unwrap(),
            0,
            "1.2.3.4".parse().unwrap()
        ));
        assert!(!prefix_contains("::".parse().unwrap(), 0, "1.2.3.4".parse().unwrap()));
    }
}
