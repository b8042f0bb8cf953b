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
//! # One lookup per packet
//!
//! With nat chains in the ruleset, the conntrack stage's ingress lookup also reads the
//! connection's translation ([`CtWorker::track_nat`]) and leaves it in the packet's buffer,
//! in the headroom right after the reassembler's [`FragNote`] ([`put_note`], marked by
//! [`meta_flags::NAT_NOTE`]): prerouting takes it from there ([`take_note`]) instead of
//! looking the connection up again, and an untranslated connection's packet costs it a
//! byte. A packet without the mark (nat chains added since, headroom too short) is looked up
//! as before. A note can be stale only if the packet changed in between, and a rewrite
//! checks that the packet carries the tuple it rewrites from.
//!
//! A new connection's first packet, which the ingress lookup did not commit, gets a note of
//! another kind ([`put_new_note`]): what its creation needs ([`NewConn`]: its key, direction
//! and transport state). Prerouting takes it ([`take_new_note`]) instead of parsing the
//! packet again, and postrouting creates the connection from it
//! ([`nat::commit_seen`]) without building and hashing its key again (the hash is computed
//! again from the note's key: bytes changed on the way could give a wrong tuple, never a key
//! in the wrong bucket). A note of another zone than the ingress interface's is not used.
//!
//! Threads: a [`NatState`] belongs to its worker's firewall hook.

use std::sync::Arc;

use freeway_conntrack::extract::L4Info;
use freeway_conntrack::nat::{self, Half, NatFail, NatPorts, PortRange, Rewrite4, SrcNat};
use freeway_conntrack::{extract, CtState, CtWorker, NatPlan, NewConn, Tuple};
use freeway_firewall::ast::{Hook, NatKind};
use freeway_firewall::{Action, Firewall, FwState, NatChoice};
use freeway_l3::{Interfaces, L3Drop};
use freeway_packet::{meta_flags, FragNote, Packet};
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
    tracked_of(pkt).map(|(t, _)| t)
}

/// The tuple and transport state of a tracked packet.
fn tracked_of(pkt: &Packet) -> Option<(Tuple, L4Info)> {
    let l3_ok = pkt.meta.flags & meta_flags::IPV4_CSUM_OK != 0;
    match extract::classify(pkt.data(), &pkt.meta, l3_ok) {
        extract::Class::Track(t, l4) => Some((t, l4)),
        _ => None,
    }
}

/// Where a NAT note starts in a buffer: after the reassembler's note.
const NOTE_AT: usize = FragNote::LEN;
/// Bytes of one tuple in a note.
const TUPLE_LEN: usize = 38;
/// Bytes of a note: a kind (0: untranslated, 1: a packet's plan, 2: an ICMP error's, 3: an
/// IPv4 packet's [`Rewrite4`], 4: a new connection's [`NewConn`]) and the plan's two tuples
/// (or the [`REWRITE4_LEN`] bytes of the rewrite, or the [`NewConn::LEN`] of the new
/// connection).
const NOTE_LEN: usize = 1 + 2 * TUPLE_LEN;
const _: () = assert!(NewConn::LEN < NOTE_LEN && REWRITE4_LEN < NOTE_LEN);
/// The kind of a new connection's note.
const NEW_NOTE: u8 = 4;
/// Bytes of a [`Rewrite4`] in a note.
const REWRITE4_LEN: usize = Rewrite4::LEN;

fn put_tuple(b: &mut [u8], t: &Tuple) {
    b[0..16].copy_from_slice(&t.src.to_le_bytes());
    b[16..32].copy_from_slice(&t.dst.to_le_bytes());
    b[32..34].copy_from_slice(&t.sport.to_le_bytes());
    b[34..36].copy_from_slice(&t.dport.to_le_bytes());
    b[36] = t.proto;
    b[37] = u8::from(t.v6);
}

fn get_tuple(b: &[u8]) -> Tuple {
    let u128_at = |i: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[i..i + 16]);
        u128::from_le_bytes(a)
    };
    Tuple {
        src: u128_at(0),
        dst: u128_at(16),
        sport: u16::from_le_bytes([b[32], b[33]]),
        dport: u16::from_le_bytes([b[34], b[35]]),
        proto: b[36],
        v6: b[37] != 0,
    }
}

/// Takes a marked packet's note: unmarks the packet and reads the note's bytes with `f`.
/// `None` without a mark, without room for a note (the frame grew into it), or when `f`
/// finds none of its kind.
#[inline(always)]
fn take_with<R>(pkt: &mut Packet, f: impl FnOnce(&[u8]) -> Option<R>) -> Option<R> {
    if pkt.meta.flags & meta_flags::NAT_NOTE == 0 {
        return None;
    }
    pkt.meta.flags &= !meta_flags::NAT_NOTE;
    let h = pkt.headroom();
    if h < NOTE_AT + NOTE_LEN {
        return None;
    }
    let b = pkt.push_front(h)?;
    let r = f(&b[NOTE_AT..NOTE_AT + NOTE_LEN]);
    pkt.pull_front(h);
    r
}

// The two writers below open the headroom themselves rather than through a closure like
// `take_with`'s: a closure writing the plan made the compiler copy the whole plan (112
// bytes) to the stack first, on every packet of the ingress lookup under nat chains.

/// Leaves in `pkt`'s headroom what its connection's ingress lookup found of its translation
/// (`None`: not translated) and marks it ([`meta_flags::NAT_NOTE`]). Without room for the
/// note, nothing is marked (prerouting looks the connection up).
#[inline]
pub(crate) fn put_note(pkt: &mut Packet, plan: Option<NatPlan>) {
    let h = pkt.headroom();
    if h < NOTE_AT + NOTE_LEN {
        return;
    }
    let Some(b) = pkt.push_front(h) else { return };
    let n = &mut b[NOTE_AT..NOTE_AT + NOTE_LEN];
    match plan {
        None => n[0] = 0,
        Some(NatPlan::Packet4(r)) => {
            n[0] = 3;
            if let Some(b) = n[1..].first_chunk_mut::<REWRITE4_LEN>() {
                *b = r.to_bytes();
            }
        }
        Some(NatPlan::Packet { from, to } | NatPlan::IcmpError { from, to }) => {
            n[0] = if matches!(plan, Some(NatPlan::Packet { .. })) {
                1
            } else {
                2
            };
            put_tuple(&mut n[1..], &from);
            put_tuple(&mut n[1 + TUPLE_LEN..], &to);
        }
    }
    pkt.pull_front(h);
    pkt.meta.flags |= meta_flags::NAT_NOTE;
}

/// Takes the note [`put_note`] left: `Some(plan)` when there is one (and unmarks the packet),
/// `None` when the connection must be looked up.
#[inline]
pub(crate) fn take_note(pkt: &mut Packet) -> Option<Option<NatPlan>> {
    take_with(pkt, |n| match n[0] {
        0 => Some(None),
        3 => Some(n[1..].first_chunk().map(|b| NatPlan::Packet4(Rewrite4::from_bytes(b)))),
        k @ (1 | 2) => {
            let (from, to) = (get_tuple(&n[1..]), get_tuple(&n[1 + TUPLE_LEN..]));
            Some(Some(if k == 1 {
                NatPlan::Packet { from, to }
            } else {
                NatPlan::IcmpError { from, to }
            }))
        }
        // A new connection's note ([`put_new_note`]) is no plan: look the connection up.
        _ => None,
    })
}

/// Leaves in `pkt`'s headroom what its new connection's creation needs, from its ingress
/// lookup ([`NewConn`]), and marks it ([`meta_flags::NAT_NOTE`]). Without room for the
/// note, nothing is marked (prerouting parses the packet).
#[inline]
pub(crate) fn put_new_note(pkt: &mut Packet, new: &NewConn) {
    let h = pkt.headroom();
    if h < NOTE_AT + NOTE_LEN {
        return;
    }
    let Some(b) = pkt.push_front(h) else { return };
    let n = &mut b[NOTE_AT..NOTE_AT + NOTE_LEN];
    n[0] = NEW_NOTE;
    if let Some(b) = n[1..].first_chunk_mut() {
        new.write(b);
    }
    pkt.pull_front(h);
    pkt.meta.flags |= meta_flags::NAT_NOTE;
}

/// Takes the note [`put_new_note`] left (and unmarks the packet): `None` without one.
#[inline]
pub(crate) fn take_new_note(pkt: &mut Packet, ct: &CtWorker) -> Option<NewConn> {
    take_with(pkt, |n| match n[0] {
        NEW_NOTE => n[1..].first_chunk().and_then(|b| ct.read_new(b)),
        _ => None,
    })
}

/// One worker's NAT: its share of the ports, and what prerouting left for postrouting.
pub(crate) struct NatState {
    ports: NatPorts,
    /// Masquerade addresses of each router interface, of the interfaces' version the worker
    /// routes with ([`NatState::set_masquerade`]).
    masq: Arc<[(Option<u128>, Option<u128>)]>,
    /// The source half of an established connection's translation, still to do.
    src_half: Option<SrcHalf>,
    /// A new connection's tuple before any translation, its tuple after prerouting's
    /// destination translation (the same without one) and its transport state: it is
    /// created at postrouting, without parsing the packet again.
    new_orig: Option<(Tuple, Tuple, L4Info)>,
    /// The new connection as its ingress lookup left it ([`take_new_note`]), when it did:
    /// created from it at postrouting.
    new_seen: Option<NewConn>,
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

/// The source half of an existing connection's translation, which prerouting leaves for
/// postrouting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SrcHalf {
    /// From the first tuple to the second.
    Tuples(Tuple, Tuple),
    /// The source half of an IPv4 packet's rewrite.
    V4(Rewrite4),
}

impl SrcHalf {
    /// The tuple the packet carries after it.
    pub(crate) fn to(&self) -> Tuple {
        match self {
            SrcHalf::Tuples(_, to) => *to,
            SrcHalf::V4(rw) => rw.tuples(Half::Src).1,
        }
    }

    /// Rewrites `pkt`; `false` if it could not.
    #[inline]
    pub(crate) fn apply(&self, pkt: &mut Packet) -> bool {
        match self {
            SrcHalf::Tuples(from, to) => nat::rewrite_pkt(pkt, from, to),
            SrcHalf::V4(rw) => {
                let (l3, l4) = (usize::from(pkt.meta.l3_off), usize::from(pkt.meta.l4_off));
                nat::rewrite4(pkt.data_mut(), l3, l4, rw, Half::Src)
            }
        }
    }
}

/// Applies what prerouting does of an existing connection's translation `plan` to `pkt`: an
/// ICMP error's whole mapping, a packet's destination half. Returns whether the rewrite
/// succeeded, and the source half left for postrouting.
pub(crate) fn apply_prerouting(pkt: &mut Packet, plan: &NatPlan) -> (bool, Option<SrcHalf>) {
    match *plan {
        NatPlan::Packet4(rw) => {
            let ok = !rw.changes(Half::Dst) || {
                let (l3, l4) = (usize::from(pkt.meta.l3_off), usize::from(pkt.meta.l4_off));
                nat::rewrite4(pkt.data_mut(), l3, l4, &rw, Half::Dst)
            };
            (ok, rw.changes(Half::Src).then_some(SrcHalf::V4(rw)))
        }
        NatPlan::Packet { from, to } => {
            let mid = Tuple {
                dst: to.dst,
                dport: to.dport,
                ..from
            };
            let later = (mid != to).then_some(SrcHalf::Tuples(mid, to));
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
    /// Worker `index` of `workers`. Its ports are searched from random points (a seed per
    /// run), as Linux's are, so that a translated port reveals nothing.
    pub fn new(index: usize, workers: usize, masq: Arc<[(Option<u128>, Option<u128>)]>) -> NatState {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(index);
        NatState {
            ports: NatPorts::seeded(index, workers, seed),
            masq,
            src_half: None,
            new_orig: None,
            new_seen: None,
        }
    }

    /// Takes up the masquerade addresses of a new version of the interfaces (a reload changed
    /// their addresses): from the next new connection on, masquerade translates to them.
    /// Connections already translated keep the address they have until they expire, as
    /// Linux's do.
    pub fn set_masquerade(&mut self, masq: Arc<[(Option<u128>, Option<u128>)]>) {
        self.masq = masq;
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
        self.new_seen = None;
        let flags = pkt.meta.flags;
        match flags & meta_flags::CT_MASK {
            meta_flags::CT_NEW if flags & meta_flags::CT_UNCOMMITTED != 0 => {
                // The ingress lookup's note (of the ingress interface's zone), else the packet
                // parsed again.
                let seen = take_new_note(pkt, cx.ct).filter(|n| n.zone() == cx.zone);
                let (orig, l4) = match seen {
                    Some(n) => (n.tuple(), n.l4()),
                    None => {
                        let Some(t) = tracked_of(pkt) else { return true };
                        t
                    }
                };
                self.new_seen = seen;
                match cx.said(Hook::Prerouting, pkt, freeway_firewall::NO_IF) {
                    Said::Drop => false,
                    Said::Nat(c) if c.kind == NatKind::Dnat => {
                        let cur = dnat_target(&orig, &c);
                        self.new_orig = Some((orig, cur, l4));
                        nat::rewrite_pkt(pkt, &orig, &cur)
                    }
                    _ => {
                        self.new_orig = Some((orig, orig, l4));
                        true
                    }
                }
            }
            meta_flags::CT_NEW | meta_flags::CT_ESTABLISHED | meta_flags::CT_RELATED => {
                let plan = match take_note(pkt) {
                    Some(plan) => plan,
                    None => {
                        let g = cx.ct.pin();
                        let l3_ok = flags & meta_flags::IPV4_CSUM_OK != 0;
                        cx.ct.nat_of(&g, pkt.data(), &pkt.meta, cx.zone, l3_ok)
                    }
                };
                match plan {
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

    /// The postrouting hook; `Err` drops the packet, for the reason it gives.
    pub fn postrouting(&mut self, cx: &mut NatCx<'_>, pkt: &mut Packet) -> Result<(), L3Drop> {
        if let Some(half) = self.src_half.take() {
            return ok_or_filtered(half.apply(pkt));
        }
        // The packet's tuple and transport state as prerouting left them (a destination
        // translation changes addresses and ports only; nothing between the hooks changes
        // either).
        let Some((orig, cur, l4)) = self.new_orig.take() else {
            return Ok(());
        };
        let seen = self.new_seen.take();
        let (oif, now) = (cx.oif, cx.now);
        let snat = match cx.said(Hook::Postrouting, pkt, u32::from(oif)) {
            Said::Drop => return Err(L3Drop::Filtered),
            Said::Nat(c) => {
                let addr = match c.kind {
                    NatKind::Masquerade => {
                        let (v4, v6) = self.masq.get(usize::from(oif)).copied().unwrap_or((None, None));
                        let Some(a) = (if cur.v6 { v6 } else { v4 }) else {
                            // An interface without an address of the packet's family.
                            return Err(L3Drop::Filtered);
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
        let made = match seen {
            Some(n) => nat::commit_seen(cx.ct, &mut self.ports, &g, pkt, &n, &orig, cur, snat),
            None => nat::commit_new(cx.ct, &mut self.ports, &g, pkt, cx.zone, &orig, cur, l4, snat),
        };
        match made {
            // A translated connection that could not be created (a limit) cannot be
            // translated back: its packet is dropped. An untranslated one passes, as it does
            // without NAT.
            Ok(r) => ok_or_filtered(!matches!(r.state, CtState::Invalid(_)) || (snat.is_none() && orig == cur)),
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
                Err(L3Drop::NatExhausted)
            }
            Err(NatFail::Malformed) => Err(L3Drop::Filtered),
        }
    }
}

/// `Ok` for `true`, a drop counted as `filtered` for `false`.
fn ok_or_filtered(ok: bool) -> Result<(), L3Drop> {
    ok.then_some(()).ok_or(L3Drop::Filtered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_conntrack::frames;
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_note_carries_the_plan_once_and_leaves_the_frame_alone() {
        // An IPv4 packet, and a v6 tuple in its note: the note holds any plan.
        let mut p = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 8);
        let frame = p.data().to_vec();
        let from = tuple_of(&p).expect("tracked");
        let to = Tuple {
            src: u128::MAX - 7,
            sport: 4242,
            v6: true,
            ..from
        };
        assert_eq!(take_note(&mut p), None, "no mark, no note");
        for plan in [
            None,
            Some(NatPlan::Packet { from, to }),
            Some(NatPlan::IcmpError { from: to, to: from }),
            Some(NatPlan::Packet4(
                Rewrite4::new(
                    &Tuple {
                        src: 1,
                        dst: 2,
                        sport: 3,
                        dport: 4,
                        proto: 17,
                        v6: false,
                    },
                    &Tuple {
                        src: u128::from(u32::MAX),
                        dst: 5,
                        sport: 0xfedc,
                        dport: 0xba98,
                        proto: 17,
                        v6: false,
                    },
                )
                .expect("IPv4"),
            )),
        ] {
            put_note(&mut p, plan);
            assert_ne!(p.meta.flags & meta_flags::NAT_NOTE, 0);
            assert_eq!(p.data(), &frame[..], "the frame is untouched");
            assert_eq!(take_note(&mut p), Some(plan));
            assert_eq!(take_note(&mut p), None, "taken once");
        }
        // A frame whose headers grew into the note's bytes has none.
        let h = p.headroom();
        assert!(p.push_front(h - NOTE_AT - NOTE_LEN + 1).is_some());
        put_note(&mut p, None);
        assert_eq!(take_note(&mut p), None);
    }

    /// A tracker, one of its workers and an uncommitted new UDP packet (with a copy of its
    /// frame) whose creation the worker handed on.
    fn new_udp_conn() -> (
        freeway_conntrack::Conntrack,
        freeway_conntrack::Expirer,
        freeway_conntrack::CtWorker,
        Packet,
        Vec<u8>,
        freeway_conntrack::NewConn,
    ) {
        let (ct, exp) = freeway_conntrack::Conntrack::new(Default::default(), freeway_sync::Clock::manual()).unwrap();
        let mut w = ct.worker();
        let g = w.pin();
        let p = frames::udp(ip("10.0.0.2"), ip("198.51.100.7"), 5000, 53, 8);
        let frame = p.data().to_vec();
        let flags = freeway_conntrack::TrackFlags::default();
        let (_, _, new) = w.track_new(&g, p.data(), &p.meta, 2, flags);
        let new = new.expect("an uncommitted new packet hands its creation on");
        drop(g);
        (ct, exp, w, p, frame, new)
    }

    #[test]
    fn a_new_connections_note_carries_its_creation_and_is_no_plan() {
        let (_ct, _exp, w, mut p, frame, new) = new_udp_conn();
        assert_eq!(take_new_note(&mut p, &w), None, "no mark, no note");
        put_new_note(&mut p, &new);
        assert_ne!(p.meta.flags & meta_flags::NAT_NOTE, 0);
        assert_eq!(p.data(), &frame[..], "the frame is untouched");
        assert_eq!(take_new_note(&mut p, &w), Some(new));
        assert_eq!(take_new_note(&mut p, &w), None, "taken once");
        // Taken as a plan's note, it is none: the connection is looked up.
        put_new_note(&mut p, &new);
        assert_eq!(take_note(&mut p), None);
        // A plan's note is no new connection's.
        put_note(&mut p, None);
        assert_eq!(take_new_note(&mut p, &w), None);
    }

    #[test]
    fn a_damaged_or_overgrown_note_is_none_and_unmarks() {
        let (_ct, _exp, w, mut p, frame, new) = new_udp_conn();
        let marked = |p: &Packet| p.meta.flags & meta_flags::NAT_NOTE != 0;
        // Sets byte `i` of the note in `p`'s headroom.
        let damage = |p: &mut Packet, i: usize, v: u8| {
            let h = p.headroom();
            p.push_front(h).expect("the headroom")[NOTE_AT + i] = v;
            assert!(p.pull_front(h));
        };
        // A kind no writer writes: no note of either kind, and the mark is gone.
        put_note(&mut p, None);
        damage(&mut p, 0, NEW_NOTE + 1);
        assert_eq!(take_note(&mut p), None);
        assert!(!marked(&p));
        put_new_note(&mut p, &new);
        damage(&mut p, 0, NEW_NOTE + 1);
        assert_eq!(take_new_note(&mut p, &w), None);
        assert!(!marked(&p));
        // A new connection's note whose transport kind (the byte after its key and
        // direction) is none: no note.
        put_new_note(&mut p, &new);
        damage(&mut p, 1 + 41, 0xff);
        assert_eq!(take_new_note(&mut p, &w), None);
        assert!(!marked(&p));
        assert_eq!(p.data(), &frame[..], "the frame is untouched");
        // A marked packet whose frame grew into its note since: no note, and unmarked.
        for plan_note in [true, false] {
            let mut q = p.clone();
            if plan_note {
                put_note(&mut q, None);
            } else {
                put_new_note(&mut q, &new);
            }
            let h = q.headroom();
            assert!(q.push_front(h - NOTE_AT - NOTE_LEN + 1).is_some());
            assert!(marked(&q));
            if plan_note {
                assert_eq!(take_note(&mut q), None);
            } else {
                assert_eq!(take_new_note(&mut q, &w), None);
            }
            assert!(!marked(&q));
        }
        // Without room, a new connection's note is not written: no mark.
        let h = p.headroom();
        assert!(p.push_front(h - NOTE_AT - NOTE_LEN + 1).is_some());
        put_new_note(&mut p, &new);
        assert!(!marked(&p));
        assert_eq!(take_new_note(&mut p, &w), None);
    }
}
