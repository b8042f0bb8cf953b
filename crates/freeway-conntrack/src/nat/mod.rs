//! Network address translation: rewriting packets ([`rewrite`](mod@rewrite)) and choosing
//! translated ports ([`ports`]). The table side (a translated connection's two nodes) is in
//! [`crate::table`], the tracker's NAT calls ([`CtWorker::commit_nat`](crate::CtWorker::commit_nat),
//! [`CtWorker::nat_of`](crate::CtWorker::nat_of)) in [`crate::ct`].

pub mod ports;
pub mod rewrite;

pub use ports::{NatPorts, PortRange};
pub use rewrite::{rewrite, rewrite4, rewrite_icmp_error, Half, Rewrite4};

use freeway_packet::Packet;

use crate::ct::{CtWorker, NewConn};
use crate::extract::L4Info;
use crate::key::{Key, Tuple};
use crate::table::Guard;
use crate::{CtResult, NatPlan};

/// A source translation for a new connection: the addresses to pick from (one, chosen by
/// the original source, so a host keeps its external address), and the ports (`None`: keep
/// the connection's own port if free, else one of its class, [`PortRange::default_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrcNat {
    /// Inclusive address range (IPv4 in the low 32 bits).
    pub addr: (u128, u128),
    /// Ports.
    pub ports: Option<PortRange>,
}

/// Why a new connection was not translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatFail {
    /// No free tuple among the candidates (counted in the tracker's statistics,
    /// `nat_exhausted`).
    Exhausted,
    /// The packet could not be rewritten (too short for its headers).
    Malformed,
}

/// The value of `range` that `h` picks (a stable choice per original source).
#[inline]
pub fn pick(range: (u128, u128), h: u64) -> u128 {
    let (lo, hi) = range;
    let span = hi - lo;
    if span == 0 {
        return lo;
    }
    // The common ranges (any IPv4 range) without a 128-bit division (a call of the
    // compiler's runtime): the same value, since `h < 2^64`.
    if span < u128::from(u64::MAX) {
        return lo + u128::from(h % (span as u64 + 1));
    }
    match span.checked_add(1) {
        Some(n) => lo + u128::from(h) % n,
        None => lo.wrapping_add(u128::from(h)),
    }
}

/// A small hash of an address, for [`pick`].
pub fn addr_hash(a: u128) -> u64 {
    let x = (a as u64) ^ ((a >> 64) as u64);
    x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17
}

/// Rewrites `pkt` (`l3`/`l4`/`proto` from its metadata) from tuple `from` to `to`.
pub fn rewrite_pkt(pkt: &mut Packet, from: &Tuple, to: &Tuple) -> bool {
    if from == to {
        return true;
    }
    let (l3, l4, proto) = (
        usize::from(pkt.meta.l3_off),
        usize::from(pkt.meta.l4_off),
        pkt.meta.ip_proto,
    );
    rewrite(pkt.data_mut(), l3, l4, proto, from, to)
}

/// Rewrites `pkt` as the whole of `plan` says (both halves of a packet's translation, or an
/// ICMP error's mapping).
#[inline]
pub fn apply(pkt: &mut Packet, plan: &NatPlan) -> bool {
    let (l3, l4) = (usize::from(pkt.meta.l3_off), usize::from(pkt.meta.l4_off));
    match plan {
        NatPlan::Packet4(rw) => rewrite4(pkt.data_mut(), l3, l4, rw, Half::Both),
        NatPlan::Packet { from, to } => rewrite_pkt(pkt, from, to),
        NatPlan::IcmpError { from, to } => rewrite_icmp_error(pkt.data_mut(), l3, l4, from, to),
    }
}

/// Creates the connection of a new packet with its translation: `orig` is its tuple before
/// any translation, `cur` its tuple now (after a destination translation, if any) and `l4`
/// its transport state, as [`crate::extract::classify`] gave them (the packet is not parsed
/// again); with `snat`, its source becomes a free address and port of it. The packet is
/// rewritten to the final tuple. Tries the candidates of [`NatPorts::candidates`] until the
/// table takes one (the table's insert is the test of a candidate: no lookup before it), with
/// the nodes and the place reserved once.
///
/// Always inlined into its caller (the datapath's postrouting hook): called, its tuples and
/// translation went through memory.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn commit_new(
    ct: &mut CtWorker,
    ports: &mut NatPorts,
    g: &Guard,
    pkt: &mut Packet,
    zone: u16,
    orig: &Tuple,
    cur: Tuple,
    l4: L4Info,
    snat: Option<SrcNat>,
) -> Result<CtResult, NatFail> {
    let (key, src_lo) = Key::new(orig, zone);
    let hash = ct.hash_of(&key);
    commit_seen(ct, ports, g, pkt, &NewConn { key, hash, src_lo, l4 }, orig, cur, snat)
}

/// [`commit_new`] of a packet whose ingress lookup gave `new` ([`CtWorker::track_new`]):
/// its key, hash and transport state are taken from it (the packet is not parsed, its key
/// not built and hashed again), in `new`'s zone; `orig` is `new`'s tuple
/// ([`NewConn::tuple`]), which the caller has.
///
/// Always inlined, as [`commit_new`] is.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn commit_seen(
    ct: &mut CtWorker,
    ports: &mut NatPorts,
    g: &Guard,
    pkt: &mut Packet,
    new: &NewConn,
    orig: &Tuple,
    cur: Tuple,
    snat: Option<SrcNat>,
) -> Result<CtResult, NatFail> {
    debug_assert_eq!(*orig, new.tuple());
    // The primary's bucket is fetched first: its miss overlaps the rewrite and the reply
    // node's preparation.
    ct.prefetch_bucket(new.hash);
    let (zone, l4) = (new.zone(), new.l4);
    // The candidates: one tuple (untranslated, or translated with the connection's own
    // port), then, only when that one is taken, the worker's ports: the walk of
    // `NatPorts::candidates` is not set up for a connection that keeps its port.
    let mut one = None;
    let mut walk = None;
    match snat {
        None => one = Some(cur),
        Some(s) => {
            let addr = pick(s.addr, addr_hash(orig.src));
            let echo = matches!(cur.proto, 1 | 58);
            if matches!(cur.proto, 6 | 17) || echo {
                // An echo request's identifier is its tuple's source port.
                let range = s.ports.unwrap_or(PortRange::default_for(cur.sport, echo));
                if range.contains(cur.sport) {
                    one = Some(Tuple { src: addr, ..cur });
                }
                walk = Some((addr, range));
            } else {
                one = Some(Tuple { src: addr, ..cur });
            }
        }
    }
    // The first candidate is tried without a call: the packet rewritten to it and its key
    // built here; the port walk (out of line) only when it is taken.
    let first = match one {
        Some(t) => Some(first_candidate(pkt, orig, &cur, t, zone)?),
        None => None,
    };
    let mut walk = walk.map(|(addr, range)| Walk {
        ports: Some(ports),
        cands: None,
        addr,
        range,
        at: first.map(|_| cur.sport),
    });
    let more = || match walk.as_mut() {
        Some(w) => w.next(pkt, &cur, zone),
        None => Ok(None),
    };
    match ct.create_translated(g, new.key, new.hash, new.src_lo, &l4, zone, first, more)? {
        Some(r) => Ok(r),
        None => {
            ct.note_nat_exhausted();
            Err(NatFail::Exhausted)
        }
    }
}

/// [`candidate`] for the first candidate `t` of a connection whose tuple was `orig` before
/// any translation, with the rewrite from `orig` to `t` ([`Rewrite4::new`]) for its
/// primary: an IPv4 packet not translated before (`cur` is `orig`) is rewritten with it, so
/// the checksum changes are computed once.
#[inline(always)]
fn first_candidate(
    pkt: &mut Packet,
    orig: &Tuple,
    cur: &Tuple,
    t: Tuple,
    zone: u16,
) -> Result<(Key, bool, Option<Rewrite4>), NatFail> {
    let rw = Rewrite4::new(orig, &t);
    let done = match rw {
        Some(rw) if orig == cur => {
            !rw.changes(Half::Both) || {
                let (l3, l4) = (usize::from(pkt.meta.l3_off), usize::from(pkt.meta.l4_off));
                rewrite4(pkt.data_mut(), l3, l4, &rw, Half::Both)
            }
        }
        _ => rewrite_pkt(pkt, cur, &t),
    };
    if !done {
        return Err(NatFail::Malformed);
    }
    let (k, lo) = Key::new(&t, zone);
    Ok((k, lo, rw))
}

/// Rewrites `pkt` from the tuple it carries (`at`) to the candidate `t` and gives `t`'s key
/// in `zone`.
#[inline(always)]
fn candidate(pkt: &mut Packet, at: &Tuple, t: Tuple, zone: u16) -> Result<(Key, bool), NatFail> {
    if !rewrite_pkt(pkt, at, &t) {
        return Err(NatFail::Malformed);
    }
    Ok(Key::new(&t, zone))
}

/// The port walk of a new connection whose first candidate (its own port) was taken or is
/// out of its range: the candidates of [`NatPorts::candidates`], each the connection's tuple
/// with source `addr` and the candidate's port.
struct Walk<'a> {
    /// The worker's ports, until the walk is set up.
    ports: Option<&'a mut NatPorts>,
    /// The walk, once set up.
    cands: Option<ports::Candidates<'a>>,
    addr: u128,
    range: PortRange,
    /// The source port of the candidate the packet carries (`None`: it carries its tuple
    /// before the source translation).
    at: Option<u16>,
}

impl Walk<'_> {
    /// Rewrites `pkt` (whose tuple before the source translation is `cur`) to the next
    /// candidate and gives its key in `zone`; `Ok(None)` when the candidates ran out.
    #[cold]
    #[inline(never)]
    fn next(&mut self, pkt: &mut Packet, cur: &Tuple, zone: u16) -> Result<Option<(Key, bool)>, NatFail> {
        if let Some(ports) = self.ports.take() {
            let mut c = ports.candidates(self.range, cur.sport);
            if self.range.contains(cur.sport) {
                // The own port, tried first: it counts as one of the tries.
                let _ = c.next();
            }
            self.cands = Some(c);
        }
        let Some(p) = self.cands.as_mut().and_then(Iterator::next) else {
            return Ok(None);
        };
        let at = match self.at {
            Some(sport) => Tuple {
                src: self.addr,
                sport,
                ..*cur
            },
            None => *cur,
        };
        let t = Tuple {
            src: self.addr,
            sport: p,
            ..*cur
        };
        let k = candidate(pkt, &at, t, zone)?;
        self.at = Some(p);
        Ok(Some(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_takes_the_remainder_of_the_hash_in_the_range() {
        let hs = [0u64, 1, 2, 0x9e37_79b9, u64::MAX - 1, u64::MAX];
        let ranges = [
            (5u128, 5u128),
            (10, 11),
            (0xc000_0200, 0xc000_02ff),
            (0, u128::from(u64::MAX) - 1),
            (7, u128::from(u64::MAX) + 7),
            (1 << 100, (1 << 100) + (1 << 80)),
            (0, u128::MAX),
        ];
        for &(lo, hi) in &ranges {
            for &h in &hs {
                let want = match (hi - lo).checked_add(1) {
                    Some(n) => lo + u128::from(h) % n,
                    None => lo.wrapping_add(u128::from(h)),
                };
                let got = pick((lo, hi), h);
                assert_eq!(got, want, "range {lo:#x}-{hi:#x}, hash {h:#x}");
                assert!((lo..=hi).contains(&got));
            }
        }
    }
}
