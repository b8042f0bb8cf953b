//! Refragmentation: a reassembled datagram leaves as fragments again.
//!
//! After the verdict, a datagram the [`crate::Reassembler`] built is split again into
//! fragments of at most its largest original fragment's size ([`FragNote::max_size`]), as
//! Linux does for a datagram its conntrack defragmented (`ip_fragment` with `frag_max_size`,
//! `ip6_fragment`). IPv4 fragments after the first carry only the options marked "copied";
//! IPv6 fragments are the unfragmentable part, a Fragment header carrying the original
//! identification, and the data.
//!
//! # Why refragment rather than forward the original fragments
//!
//! Forwarding the fragments as they came would need them kept until the verdict and then
//! rewritten one by one by every later stage (the router's TTL and MAC rewrite, NAT's
//! address and port rewrite in the first fragment's L4 header, whose checksum covers the
//! whole datagram), and would hand the ruleset a packet it cannot see whole. One packet
//! through the pipeline keeps every stage unchanged; cutting it at the largest original size
//! keeps the path MTU the sender discovered (no fragment is larger than one that already
//! crossed the previous hop), which is why Linux remembers `frag_max_size`. The cost is one
//! copy of the data on the way in and one on the way out, for fragmented traffic only.
//!
//! The splitting itself is `freeway_packet::fragment` (the router's output fragmenter):
//! fragments are also no larger than the worker's pool buffers hold. A reassembled IPv4
//! datagram whose fragments all had DF is fragmented anyway (Linux's defrag sets
//! `ignore_df`): its fragments leave without DF.
//!
//! Threads: pure functions of the packets they are given, on the caller's thread.

use freeway_packet::bytes::{rd16, wr16};
use freeway_packet::fragment::{fragment_v4, fragment_v6, FragError, IPV4_DF};
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use freeway_packet::{meta_flags, Packet, PacketPool, NO_OFFSET};

/// Why a reassembled datagram could not be fragmented again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefragError {
    /// The packet carries no [`freeway_packet::FragNote`] (not reassembled, or its headers
    /// grew into it).
    NoNote,
    /// The fragmenter refused it.
    Fragment(FragError),
}

impl std::fmt::Display for RefragError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefragError::NoNote => f.write_str("the packet carries no reassembly note"),
            RefragError::Fragment(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RefragError {}

/// Splits the reassembled `pkt` into fragments of at most its note's `max_size` IP bytes
/// (or `limit`, when smaller: an egress MTU), handing each to `emit` in order, and gives
/// `pkt`'s buffer back to `pool`. A datagram that fits is emitted whole (unmarked). Returns
/// the number of packets emitted; on `Err` nothing was emitted and `pkt` is in the pool.
pub fn refragment(
    mut pkt: Packet,
    limit: Option<u16>,
    pool: &mut PacketPool,
    mut emit: impl FnMut(Packet),
) -> Result<usize, RefragError> {
    let Some(note) = pkt.frag_note() else {
        pool.put_huge(pkt);
        return Err(RefragError::NoNote);
    };
    let size = usize::from(limit.map_or(note.max_size, |l| l.min(note.max_size)));
    let l3 = usize::from(pkt.meta.l3_off);
    let ip_len = match (pkt.meta.ethertype, pkt.meta.l3_off != NO_OFFSET) {
        (ETHERTYPE_IPV4, true) => pkt.data().get(l3 + 2..l3 + 4).map(|b| usize::from(rd16(b, 0))),
        (ETHERTYPE_IPV6, true) => pkt.data().get(l3 + 4..l3 + 6).map(|b| 40 + usize::from(rd16(b, 0))),
        _ => None,
    };
    if ip_len.is_some_and(|n| n <= size) {
        pkt.meta.flags &= !meta_flags::REASSEMBLED;
        emit(pkt);
        return Ok(1);
    }
    let r = if pkt.meta.ethertype == ETHERTYPE_IPV6 {
        fragment_v6(&pkt, size, note.id, pool, |mut q| {
            q.meta.flags &= !meta_flags::REASSEMBLED;
            emit(q)
        })
    } else {
        if let Some(w) = pkt.data().get(l3 + 6..l3 + 8) {
            let w = rd16(w, 0);
            if w & IPV4_DF != 0 {
                // The fragmenter recomputes each fragment's checksum.
                wr16(pkt.data_mut(), l3 + 6, w & !IPV4_DF);
            }
        }
        fragment_v4(&pkt, size, pool, |mut q| {
            q.meta.flags &= !meta_flags::REASSEMBLED;
            emit(q)
        })
    };
    pool.put_huge(pkt);
    r.map_err(RefragError::Fragment)
}
