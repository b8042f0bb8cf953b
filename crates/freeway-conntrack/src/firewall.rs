//! A stateful firewall policy over conntrack results.
//!
//! Rules, in order:
//! 1. **Invalid** packets are dropped (including new connections refused by a limit).
//! 2. **Established** and **Related** packets are accepted everywhere.
//! 3. **Untracked** packets (non-IP, ICMPv6 neighbour discovery/MLD) are accepted.
//! 4. **New** packets are accepted only if they arrived on a port of
//!    [`FirewallPolicy::allow_new_from`] or in a zone of [`FirewallPolicy::allow_new_zones`];
//!    otherwise dropped. Use [`FwWorker::allows_new`] as the commit condition so that refused
//!    connections are never created (see [`crate::CtWorker::track`]).
//!
//! Every verdict is counted by reason in per-worker counters, summed by [`Firewall::stats`].
//!
//! Threads: the policy is immutable and shared; each worker owns an [`FwWorker`] (single
//! writer of its counters).

use std::sync::{Arc, Mutex};

use freeway_sync::{CachePadded, Counter};
use serde::Serialize;

use crate::{CtResult, CtState, InvalidReason};

/// Which new connections are allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FirewallPolicy {
    /// Ports (indexes) on which new connections may start.
    pub allow_new_from: Vec<u16>,
    /// Zones in which new connections may start from any port.
    pub allow_new_zones: Vec<u16>,
}

/// A firewall decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Verdict {
    /// Forward the packet.
    Accept,
    /// Drop the packet.
    Drop,
}

/// Verdict reasons (counter indexes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Reason {
    AcceptNew = 0,
    AcceptEstablished,
    AcceptRelated,
    AcceptUntracked,
    DropInvalid,
    DropLimit,
    DropNewNotAllowed,
}

const N_REASONS: usize = 7;

#[derive(Default)]
struct FwCounters {
    c: [Counter; N_REASONS],
}

struct Bits(Box<[u64]>);

impl Bits {
    fn new(items: &[u16]) -> Bits {
        let mut b = vec![0u64; 1 << 10].into_boxed_slice();
        for &i in items {
            b[usize::from(i) >> 6] |= 1 << (i & 63);
        }
        Bits(b)
    }

    #[inline(always)]
    fn has(&self, i: u16) -> bool {
        self.0[usize::from(i) >> 6] & (1 << (i & 63)) != 0
    }
}

struct Policy {
    ports: Bits,
    zones: Bits,
}

/// The shared firewall (cheap to clone).
#[derive(Clone)]
pub struct Firewall {
    policy: Arc<Policy>,
    workers: Arc<Mutex<Vec<Arc<CachePadded<FwCounters>>>>>,
}

impl std::fmt::Debug for Firewall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Firewall").finish_non_exhaustive()
    }
}

/// Verdict counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FwStats {
    /// New connections accepted.
    pub accept_new: u64,
    /// Established packets accepted.
    pub accept_established: u64,
    /// Related packets accepted.
    pub accept_related: u64,
    /// Untracked packets accepted.
    pub accept_untracked: u64,
    /// Invalid packets dropped.
    pub drop_invalid: u64,
    /// New connections dropped because a conntrack limit refused them.
    pub drop_limit: u64,
    /// New connections dropped because they came from a port/zone not allowed to start them.
    pub drop_new_not_allowed: u64,
}

impl Firewall {
    /// A firewall with `policy`.
    pub fn new(policy: &FirewallPolicy) -> Firewall {
        Firewall {
            policy: Arc::new(Policy {
                ports: Bits::new(&policy.allow_new_from),
                zones: Bits::new(&policy.allow_new_zones),
            }),
            workers: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A worker's context (one per worker thread).
    pub fn worker(&self) -> FwWorker {
        let c = Arc::new(CachePadded::new(FwCounters::default()));
        self.workers.lock().unwrap_or_else(|e| e.into_inner()).push(c.clone());
        FwWorker {
            policy: self.policy.clone(),
            c,
        }
    }

    /// Verdict counts over all workers.
    pub fn stats(&self) -> FwStats {
        let mut t = [0u64; N_REASONS];
        for w in self.workers.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for (a, c) in t.iter_mut().zip(w.c.iter()) {
                *a += c.get();
            }
        }
        FwStats {
            accept_new: t[Reason::AcceptNew as usize],
            accept_established: t[Reason::AcceptEstablished as usize],
            accept_related: t[Reason::AcceptRelated as usize],
            accept_untracked: t[Reason::AcceptUntracked as usize],
            drop_invalid: t[Reason::DropInvalid as usize],
            drop_limit: t[Reason::DropLimit as usize],
            drop_new_not_allowed: t[Reason::DropNewNotAllowed as usize],
        }
    }
}

/// A worker's firewall context.
pub struct FwWorker {
    policy: Arc<Policy>,
    c: Arc<CachePadded<FwCounters>>,
}

impl std::fmt::Debug for FwWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FwWorker").finish_non_exhaustive()
    }
}

impl FwWorker {
    /// Whether a new connection may start from `in_port` in `zone` (use it as the commit flag).
    #[inline(always)]
    pub fn allows_new(&self, in_port: u16, zone: u16) -> bool {
        self.policy.ports.has(in_port) || self.policy.zones.has(zone)
    }

    /// The verdict for a packet with conntrack result `r`, counted.
    #[inline]
    pub fn verdict(&mut self, in_port: u16, zone: u16, r: &CtResult) -> Verdict {
        let (reason, v) = match r.state {
            CtState::Established => (Reason::AcceptEstablished, Verdict::Accept),
            CtState::Related => (Reason::AcceptRelated, Verdict::Accept),
            CtState::Untracked => (Reason::AcceptUntracked, Verdict::Accept),
            CtState::New if self.allows_new(in_port, zone) => (Reason::AcceptNew, Verdict::Accept),
            CtState::New => (Reason::DropNewNotAllowed, Verdict::Drop),
            CtState::Invalid(InvalidReason::LimitGlobal | InvalidReason::LimitZone | InvalidReason::QueueFull) => {
                (Reason::DropLimit, Verdict::Drop)
            }
            CtState::Invalid(_) => (Reason::DropInvalid, Verdict::Drop),
        };
        self.c.c[reason as usize].inc();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_and_counts() {
        let fw = Firewall::new(&FirewallPolicy {
            allow_new_from: vec![1, 64, 65535],
            allow_new_zones: vec![7],
        });
        let mut w = fw.worker();
        let new = CtResult::orig(CtState::New);
        assert_eq!(w.verdict(1, 0, &new), Verdict::Accept);
        assert_eq!(w.verdict(65535, 0, &new), Verdict::Accept);
        assert_eq!(w.verdict(2, 0, &new), Verdict::Drop);
        assert_eq!(w.verdict(2, 7, &new), Verdict::Accept, "zone-wide permission");
        assert_eq!(w.verdict(2, 0, &CtResult::orig(CtState::Established)), Verdict::Accept);
        assert_eq!(w.verdict(2, 0, &CtResult::orig(CtState::Related)), Verdict::Accept);
        assert_eq!(w.verdict(2, 0, &CtResult::orig(CtState::Untracked)), Verdict::Accept);
        let bad = CtResult::orig(CtState::Invalid(InvalidReason::TcpWindow));
        assert_eq!(w.verdict(1, 0, &bad), Verdict::Drop);
        let full = CtResult::orig(CtState::Invalid(InvalidReason::LimitZone));
        assert_eq!(w.verdict(1, 0, &full), Verdict::Drop);
        let s = fw.stats();
        assert_eq!(
            s,
            FwStats {
                accept_new: 3,
                accept_established: 1,
                accept_related: 1,
                accept_untracked: 1,
                drop_invalid: 1,
                drop_limit: 1,
                drop_new_not_allowed: 1,
            }
        );
    }
}
