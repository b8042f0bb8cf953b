//! NAT in the router: the firewall's `type nat` chains decide a new connection's translation
//! once, on its first packet, and the connection table carries it for every later packet of
//! both directions.
//!
//! # Where
//!
//! The L3 stage calls [`L3Out::nat`](freeway_l3::L3Out::nat) at two places, as Linux's NAT
//! hooks sit in its IP stack:
//!
//! * **prerouting**, before the local-address check and the route lookup: a new connection's
//!   first packet meets the `prerouting` nat chains (`dnat`, port forwards), and is rewritten
//!   so that the route lookup sends it where it now goes. A packet of a translated connection
//!   gets the destination half of its translation (an original-direction packet its new
//!   destination, a reply its original source as destination); an ICMP error about a
//!   translated connection is mapped whole (its addresses and the quoted packet);
//! * **postrouting**, right after the forward filter hook: the new connection's packet meets
//!   the `postrouting` nat chains (`snat`, `masquerade`, which takes the egress interface's
//!   address), its source port is chosen ([`freeway_conntrack::nat::ports`]) and its
//!   connection created with both tuples; a packet of a translated connection gets the source
//!   half of its translation.
//!
//! The stage handles one packet at a time from prerouting to postrouting (postrouting comes
//! before neighbour resolution, so before any queueing), so what prerouting learns for the
//! postrouting of the same packet waits in [`NatState`]: cleared at every prerouting, so a
//! packet dropped in between leaves nothing behind. (Packets the router sends itself, ICMP
//! errors and replies, meet neither hook.)
//!
//! A new connection is created at postrouting, with its translation, instead of at the
//! forward filter hook (where an untranslated one is created): Linux too confirms a
//! connection only once its first packet has passed every hook. A new connection that no
//! rule translates is created there too, untranslated.
//!
//! Threads: a [`NatState`] belongs to its worker's firewall hook.

use std::sync::Arc;

use freeway_conntrack::nat::{self, NatFail, NatPorts, PortRange, SrcNat};
use freeway_conntrack::{extract, CtState, CtWorker, NatPlan, Tuple};
use freeway_firewall::ast::{Hook, NatKind};
use freeway_firewall::{Action, Firewall, FwState, NatChoice};
use freeway_l3::Interfaces;
use freeway_packet::{meta_flags, Packet};
use freeway_sync::Tick;

/// Each router interface's own addresses, for masquerade: its first IPv4 address and its
/// first IPv6 address that is not link-local.
pub(crate) fn masquerade_addrs(ifaces: &Interfaces) -> Arc<[(Option<u128>, Option<u128>)]> {
    (0..ifaces.len())
        .map(|i| match ifaces.get(i as u16) {
            Some(it) => (
                it.v4.first().map(|(a, _)| u128::from(u32::from(*a))),
                it.v6
                    .iter()
                    .find(|(a, _)| !freeway_l3::iface::is_link_local(*a))
                    .map(|(a, _)| u128::from(*a)),
            ),
            None => (None, None),
        })
        .collect()
}

/// Where a destination translation `c` sends a new connection whose tuple is `orig`: an
/// address (and port) of its ranges, chosen by the original source.
pub(crate) fn dnat_target(orig: &Tuple, c: &NatChoice) -> Tuple {
    let h = nat::addr_hash(orig.src);
    Tuple {
        dst: c.addr.map_or(orig.dst, |a| nat::pick(a, h)),
        dport: c
            .port
            .map_or(orig.dport, |(lo, hi)| nat::pick((lo.into(), hi.into()), h) as u16),
        ..*orig
    }
}

/// The tuple of a tracked packet.
pub(crate) fn tuple_of(pkt: &Packet) -> Option<Tuple> {
    let l3_ok = pkt.meta.flags & meta_flags::IPV4_CSUM_OK != 0;
    match extract::classify(pkt.data(), &pkt.meta, l3_ok) {
        extract::Class::Track(t, _) => Some(t),
        _ => None,
    }
}

/// One worker's NAT: its share of the ports, and what prerouting left for postrouting.
pub(crate) struct NatState {
    ports: NatPorts,
    /// Masquerade addresses of each router interface.
    masq: Arc<[(Option<u128>, Option<u128>)]>,
    /// The source half of an established connection's translation, still to do.
    src_half: Option<(Tuple, Tuple)>,
    /// A new connection's tuple before any translation: it is created at postrouting.
    new_orig: Option<Tuple>,
}

/// What the NAT hooks of one worker work with: the ruleset and the worker's state of it, its
/// tracker, and where the packet is (interfaces, zone, the batch's time).
pub(crate) struct NatCx<'a> {
    /// The ruleset.
    pub fw: &'a Firewall,
    /// The worker's state of it.
    pub st: &'a mut FwState,
    /// The worker's tracker.
    pub ct: &'a mut CtWorker,
    /// The ingress router interface.
    pub iif: u16,
    /// The egress router interface (at prerouting, the ingress one).
    pub oif: u16,
    /// The ingress interface's conntrack zone.
    pub zone: u16,
    /// The batch's time.
    pub now: Tick,
}

impl NatCx<'_> {
    /// What the nat chains of `hook` say about `pkt`, leaving by `oif` (an id, or
    /// [`freeway_firewall::NO_IF`]).
    fn said(&mut self, hook: Hook, pkt: &Packet, oif: u32) -> Said {
        let f = super::firewall::fields_with(pkt, self.iif, oif, self.zone);
        if !self.fw.has_nat(f.nfproto, hook) {
            return Said::Nothing;
        }
        match self.fw.judge_nat(hook, &f, self.st, self.now).action {
            Action::Nat(c) => Said::Nat(c),
            Action::Accept => Said::Nothing,
            Action::Drop | Action::Reject(_) => Said::Drop,
        }
    }
}

/// Applies what prerouting does of an existing connection's translation `plan` to `pkt`: an
/// ICMP error's whole mapping, a packet's destination half. Returns whether the rewrite
/// succeeded, and the source half left for postrouting.
pub(crate) fn apply_prerouting(pkt: &mut Packet, plan: &NatPlan) -> (bool, Option<(Tuple, Tuple)>) {
    match *plan {
        NatPlan::Packet { from, to } => {
            let mid = Tuple {
                dst: to.dst,
                dport: to.dport,
                ..from
            };
            let later = (mid != to).then_some((mid, to));
            (nat::rewrite_pkt(pkt, &from, &mid), later)
        }
        NatPlan::IcmpError { from, to } => {
            let (l3, l4) = (usize::from(pkt.meta.l3_off), usize::from(pkt.meta.l4_off));
            (nat::rewrite_icmp_error(pkt.data_mut(), l3, l4, &from, &to), None)
        }
    }
}

/// What a NAT chain said.
enum Said {
    /// Drop the packet.
    Drop,
    /// Translate.
    Nat(NatChoice),
    /// No translation at this hook.
    Nothing,
}

impl NatState {
    /// Worker `index` of `workers`.
    pub fn new(index: usize, workers: usize, masq: Arc<[(Option<u128>, Option<u128>)]>) -> NatState {
        NatState {
            ports: NatPorts::new(index, workers),
            masq,
            src_half: None,
            new_orig: None,
        }
    }

    /// Whether a new connection's creation waits for postrouting (the forward filter hook
    /// does not create it).
    pub fn commits_later(&self) -> bool {
        self.new_orig.is_some()
    }

    /// The prerouting hook; `false` drops the packet.
    pub fn prerouting(&mut self, cx: &mut NatCx<'_>, pkt: &mut Packet) -> bool {
        self.src_half = None;
        self.new_orig = None;
        let flags = pkt.meta.flags;
        match flags & meta_flags::CT_MASK {
            meta_flags::CT_NEW if flags & meta_flags::CT_UNCOMMITTED != 0 => {
                let Some(orig) = tuple_of(pkt) else { return true };
                self.new_orig = Some(orig);
                match cx.said(Hook::Prerouting, pkt, freeway_firewall::NO_IF) {
                    Said::Drop => false,
                    Said::Nat(c) if c.kind == NatKind::Dnat => nat::rewrite_pkt(pkt, &orig, &dnat_target(&orig, &c)),
                    _ => true,
                }
            }
            meta_flags::CT_NEW | meta_flags::CT_ESTABLISHED | meta_flags::CT_RELATED => {
                let g = cx.ct.pin();
                let l3_ok = flags & meta_flags::IPV4_CSUM_OK != 0;
                match cx.ct.nat_of(&g, pkt.data(), &pkt.meta, cx.zone, l3_ok) {
                    Some(plan) => {
                        let (ok, later) = apply_prerouting(pkt, &plan);
                        self.src_half = later;
                        ok
                    }
                    None => true,
                }
            }
            _ => true,
        }
    }

    /// The postrouting hook; `false` drops the packet.
    pub fn postrouting(&mut self, cx: &mut NatCx<'_>, pkt: &mut Packet) -> bool {
        if let Some((from, to)) = self.src_half.take() {
            return nat::rewrite_pkt(pkt, &from, &to);
        }
        let Some(orig) = self.new_orig.take() else {
            return true;
        };
        let Some(cur) = tuple_of(pkt) else { return true };
        let (oif, now) = (cx.oif, cx.now);
        let snat = match cx.said(Hook::Postrouting, pkt, u32::from(oif)) {
            Said::Drop => return false,
            Said::Nat(c) => {
                let addr = match c.kind {
                    NatKind::Masquerade => {
                        let (v4, v6) = self.masq.get(usize::from(oif)).copied().unwrap_or((None, None));
                        let Some(a) = (if cur.v6 { v6 } else { v4 }) else {
                            // An interface without an address of the packet's family.
                            return false;
                        };
                        (a, a)
                    }
                    _ => c.addr.unwrap_or((cur.src, cur.src)),
                };
                (c.kind != NatKind::Dnat).then_some(SrcNat {
                    addr,
                    ports: c.port.map(|(lo, hi)| PortRange { lo, hi }),
                })
            }
            Said::Nothing => None,
        };
        let g = cx.ct.pin();
        match nat::commit_new(cx.ct, &mut self.ports, &g, pkt, cx.zone, &orig, cur, snat) {
            // A translated connection that could not be created (a limit) cannot be
            // translated back: its packet is dropped. An untranslated one passes, as it does
            // without NAT.
            Ok(r) => !matches!(r.state, CtState::Invalid(_)) || (snat.is_none() && orig == cur),
            Err(NatFail::Exhausted) => {
                if self.ports.exhausted(now) {
                    tracing::warn!(
                        target: "freeway::nat",
                        src = %cur.src_ip(),
                        dst = %cur.dst_ip(),
                        proto = cur.proto,
                        refused = self.ports.exhausted_count(),
                        "no free port for a new translated connection: refused"
                    );
                }
                false
            }
            Err(NatFail::Malformed) => false,
        }
    }
}
