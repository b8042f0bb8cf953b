//! Connection tracking and the stateful firewall in the datapath.
//!
//! Every parsed frame is tracked on ingress, in the conntrack zone of the port it arrived
//! on, before the bridge and the router see it (like Open vSwitch's `ct()` at the start of
//! a pipeline). With `[firewall]` the verdict decides: established and related pass, new
//! connections pass (and are created) only from the ports of `allow_new_from`, invalid ones
//! are dropped; without it, tracking only counts, and drops nothing but new connections
//! refused by a limit. Non-IP frames (ARP) and neighbour discovery are untracked and pass.
//!
//! With an nftables ruleset (`[firewall] ruleset`) tracking decides nothing here: it looks
//! the packet's connection up without creating it and records the state in the packet's
//! metadata (`meta_flags::CT_*`); the router's input and forward hooks judge the packet by
//! the ruleset and create the connection when they accept a new one
//! (`runtime/firewall.rs`), as Linux confirms a connection only once its first packet passed
//! every hook. Bridged frames are then not tracked into the table, as in Linux without
//! bridge netfilter.
//!
//! IP fragments are reassembled first, when `[conntrack.reassembly]` is on (the default):
//! each worker's [`Reassembler`] (`freeway-frag`) holds a datagram's fragments until it is
//! complete and hands the datagram on as one packet, keyed by the zone of the port its
//! fragments came in on. The packet is tracked, bridged, routed and judged whole, and the
//! transmit side (`runtime/tx.rs`) cuts it again into fragments no larger than the largest
//! it came in ([`freeway_packet::FragNote`], kept in the buffer's headroom, so `Packet` stays
//! 40 bytes). All fragments of a datagram reach one worker: every worker choice hashes a
//! fragment by its addresses and protocol (`freeway-frag`'s module doc).
//!
//! Threads: a [`CtStage`] per worker, on that worker's thread; the table is lock-free and
//! the expiry thread (`fw-ct-expiry`) removes expired connections in bounded chunks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use freeway_conntrack::{
    Conntrack, CtConfig, CtResult, CtState, CtWorker, ExpiryThread, Firewall, FirewallPolicy, FwWorker, Timeouts,
    TrackFlags, Verdict,
};
use freeway_frag::{Limits, Reassembler};
use freeway_packet::wire::ETHERTYPE_IPV4;
use freeway_packet::{meta_flags, Batch, Packet, PacketPool, MAX_BATCH};
use freeway_sync::{Clock, Tick};

use super::RunError;
use crate::config::stateful::{ConntrackSpec, FirewallSpec};

/// The shared side: the table, its expiry thread and the firewall policy.
pub(crate) struct Stateful {
    /// The connection table.
    pub ct: Conntrack,
    /// The firewall, when configured.
    pub fw: Option<Firewall>,
    /// Conntrack zone of each port (by port index; the router port is zone 0).
    pub zones: Arc<[u16]>,
    /// An nftables ruleset judges packets in the router: tracking only records states.
    pub record_only: bool,
    /// Each worker's reassembly bounds (`None`: fragments are not reassembled).
    pub reassembly: Option<Limits>,
    /// The ruleset has nat chains (set by the firewall's side whenever it publishes one):
    /// tracking then also reads each connection's translation for the NAT hooks.
    pub nat_on: Arc<AtomicBool>,
    expiry: Option<ExpiryThread>,
}

impl Stateful {
    /// Builds the table (and starts its expiry thread) and the firewall.
    pub fn start(
        ct: Option<&ConntrackSpec>,
        fw: Option<&FirewallSpec>,
        zones: Vec<u16>,
        clock: Clock,
    ) -> Result<Option<Stateful>, RunError> {
        if ct.is_none() && fw.is_none() {
            return Ok(None);
        }
        let mut cfg = CtConfig::default();
        let reassembly = ct.map_or(Some(Limits::default()), |s| s.reassembly);
        if let Some(s) = ct {
            cfg.max = s.max;
            cfg.zone_limits = s
                .zone_limits
                .iter()
                .map(|&(z, m)| (z, u32::try_from(m).unwrap_or(u32::MAX)))
                .collect();
            let mut t = Timeouts::default();
            for (name, secs) in &s.timeouts {
                t.set(name, *secs)
                    .map_err(|e| RunError(format!("conntrack timeouts: {e}")))?;
            }
            cfg.timeouts = t;
        }
        let (table, expirer) = Conntrack::new(cfg, clock).map_err(|e| RunError(format!("conntrack: {e}")))?;
        let record_only = fw.is_some_and(|f| f.ruleset.is_some());
        let fw = fw.filter(|_| !record_only).map(|f| {
            Firewall::new(&FirewallPolicy {
                allow_new_from: f.allow_new_from.clone(),
                allow_new_zones: Vec::new(),
            })
        });
        Ok(Some(Stateful {
            ct: table,
            fw,
            zones: zones.into(),
            record_only,
            reassembly,
            nat_on: Arc::new(AtomicBool::new(false)),
            expiry: Some(expirer.spawn()),
        }))
    }

    /// A worker's stage.
    pub fn worker(&self) -> CtStage {
        CtStage {
            ct: self.ct.worker(),
            fw: self.fw.as_ref().map(Firewall::worker),
            zones: self.zones.clone(),
            record_only: self.record_only,
            reasm: self.reassembly.map(Reassembler::new),
            scratch: Vec::with_capacity(freeway_packet::MAX_BATCH),
            nat_on: self.nat_on.clone(),
        }
    }

    /// Stops the expiry thread.
    pub fn stop(&mut self) {
        if let Some(t) = self.expiry.take() {
            t.stop();
        }
    }
}

impl Drop for Stateful {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One worker's tracking and firewall.
pub(crate) struct CtStage {
    ct: CtWorker,
    fw: Option<FwWorker>,
    zones: Arc<[u16]>,
    record_only: bool,
    /// The worker's reassembly table, when fragments are reassembled.
    pub(crate) reasm: Option<Reassembler>,
    /// The batch's packets while fragments are taken out of it (kept: no allocation).
    scratch: Vec<Packet>,
    /// See [`Stateful::nat_on`]; read once per batch.
    nat_on: Arc<AtomicBool>,
}

impl CtStage {
    /// Reassembles fragments (when configured), then tracks every frame of `batch` (one
    /// epoch pin for the batch) and removes, back to the pool, those the firewall (or a
    /// limit) drops. Drops are counted by the reassembler, the tracker and the firewall.
    #[inline]
    pub fn process(&mut self, batch: &mut Batch, pool: &mut PacketPool, now: Tick) {
        if let Some(r) = self.reasm.as_mut() {
            reassemble(r, &mut self.scratch, &self.zones, batch, pool, now);
        }
        if batch.is_empty() {
            return;
        }
        // Reads the tracker's clock once for the batch.
        let g = self.ct.pin();
        if self.record_only {
            let CtStage { ct, zones, nat_on, .. } = self;
            if nat_on.load(Ordering::Relaxed) {
                record_with_nat(ct, &g, zones, batch);
                return;
            }
            ct.track_each(
                &g,
                batch.as_mut_slice(),
                |_, p| args(zones, p, false),
                |_, p, r| record(p, &r),
            );
            return;
        }
        let CtStage { ct, fw, zones, .. } = self;
        // Tracked first, the whole batch (its lookups overlapped), then judged in order.
        // Each packet's zone and result, for its verdict.
        let mut zone_of = [0u16; MAX_BATCH];
        let mut res = [CtResult::orig(CtState::Untracked); MAX_BATCH];
        ct.track_each(
            &g,
            batch.as_mut_slice(),
            |i, p| {
                let (zone, flags) = args(zones, p, true);
                // A batch holds at most `MAX_BATCH` packets.
                zone_of[i] = zone;
                let commit = fw.as_ref().is_none_or(|f| f.allows_new(p.meta.in_port, zone));
                (zone, TrackFlags { commit, ..flags })
            },
            |i, p, r| {
                // The router trusts the checksum mark and does not verify the header again.
                record(p, &r);
                res[i] = r;
            },
        );
        let mut i = 0;
        batch.retain_or_recycle(pool, |p| {
            let (r, zone) = (res[i], zone_of[i]);
            i += 1;
            match fw {
                Some(f) => f.verdict(p.meta.in_port, zone, &r) == Verdict::Accept,
                None => !r.over_limit(),
            }
        });
    }
}

/// A packet's zone (its port's) and its tracking flags.
#[inline(always)]
fn args(zones: &[u16], p: &Packet, commit: bool) -> (u16, TrackFlags) {
    let zone = zones.get(usize::from(p.meta.in_port)).copied().unwrap_or(0);
    let flags = TrackFlags {
        commit,
        l3_csum_verified: p.meta.flags & meta_flags::IPV4_CSUM_OK != 0,
    };
    (zone, flags)
}

/// Tracking that only records, with nat chains in the ruleset: the same lookup also leaves
/// each packet's translation for the NAT hooks, and for a new connection's packet what its
/// creation needs (`runtime/nat.rs`, "One lookup per packet").
#[inline(never)]
fn record_with_nat(ct: &mut CtWorker, g: &freeway_conntrack::Guard, zones: &[u16], batch: &mut Batch) {
    ct.track_nat_new_each(
        g,
        batch.as_mut_slice(),
        |_, p| args(zones, p, false),
        |_, p, r, plan, new| {
            record(p, &r);
            if let Some(new) = new {
                super::nat::put_new_note(p, &new);
            } else if !r.uncommitted && matches!(r.state, CtState::New | CtState::Established | CtState::Related) {
                super::nat::put_note(p, plan);
            }
        },
    );
}

/// Takes the fragments out of `batch` into `r`, putting back in their place the datagrams
/// they complete; expires overdue datagrams. A batch without fragments costs one header
/// word per packet.
#[inline]
fn reassemble(
    r: &mut Reassembler,
    scratch: &mut Vec<Packet>,
    zones: &[u16],
    batch: &mut Batch,
    pool: &mut PacketPool,
    now: Tick,
) {
    r.expire(now, pool);
    if !batch.as_slice().iter().any(freeway_frag::classify::may_be_fragment) {
        return;
    }
    scratch.extend(batch.drain());
    for p in scratch.drain(..) {
        let zone = zones.get(usize::from(p.meta.in_port)).copied().unwrap_or(0);
        if let Some(p) = r.push(p, zone, now, pool) {
            // Cannot fail: at most one packet comes back for each taken out.
            let _ = batch.push(p);
        }
    }
}

/// Records in `p`'s metadata what tracking found (the state for `ct state`, and a verified
/// IPv4 header checksum).
#[inline]
pub(crate) fn record(p: &mut Packet, r: &CtResult) {
    if p.meta.ethertype == ETHERTYPE_IPV4 && r.ipv4_csum_checked() {
        p.meta.flags |= meta_flags::IPV4_CSUM_OK;
    }
    let state = match r.state {
        CtState::New => meta_flags::CT_NEW,
        CtState::Established => meta_flags::CT_ESTABLISHED,
        CtState::Related => meta_flags::CT_RELATED,
        CtState::Invalid(_) => meta_flags::CT_INVALID,
        CtState::Untracked => meta_flags::CT_UNTRACKED,
    };
    let uncommitted = if r.uncommitted { meta_flags::CT_UNCOMMITTED } else { 0 };
    p.meta.flags = (p.meta.flags & !(meta_flags::CT_MASK | meta_flags::CT_UNCOMMITTED | meta_flags::NAT_NOTE))
        | state
        | uncommitted;
}
