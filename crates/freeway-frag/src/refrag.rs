//! Refragmentation: a reassembled datagram leaves as fragments again.
//!
//! After the verdict, a datagram the [`crate::Reassembler`] built is split again into
//! fragments of at most its largest original fragment's size ([`FragNote::max_size`]), as
//! Linux does for a datagram its conntrack defragmented (`ip_fragment` with `frag_max_size`,
//! `ip6_fragment`). IPv4 fragments copy the first header, with the options not marked
//! "copied" replaced by NOPs after the first fragment (`ip_options_fragment`); IPv6 fragments
//! are the unfragmentable part, a Fragment header carrying the original identification, and
//! the data.
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
//! Threads: pure functions of the packets they are given, on the caller's thread.

use freeway_packet::bytes::{rd16, wr16, wr32};
use freeway_packet::checksum;
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use freeway_packet::{meta_flags, Packet, PacketPool, HEADROOM, NO_OFFSET};

use crate::classify::ext_len;

/// Why a reassembled datagram could not be fragmented again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefragError {
    /// The packet carries no [`FragNote`] (not reassembled, or its headers grew into it).
    NoNote,
    /// Its IP headers are not what the reassembler built.
    Malformed,
    /// The remembered size leaves no room for 8 bytes of data after the headers.
    SizeTooSmall,
}

impl std::fmt::Display for RefragError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefragError::NoNote => "the packet carries no reassembly note",
            RefragError::Malformed => "the reassembled IP headers are malformed",
            RefragError::SizeTooSmall => "the largest fragment size leaves no room for data",
        })
    }
}

impl std::error::Error for RefragError {}

/// Splits the reassembled `pkt` into fragments of at most its note's `max_size` IP bytes
/// (or `limit`, when smaller: an egress MTU), handing each to `emit` in order, and gives
/// `pkt`'s buffer back to `pool`. A datagram that fits is emitted whole (unmarked). Returns
/// the number of packets emitted; on `Err` nothing was emitted and `pkt` is in the pool.
pub fn refragment(
    pkt: Packet,
    limit: Option<u16>,
    pool: &mut PacketPool,
    mut emit: impl FnMut(Packet),
) -> Result<usize, RefragError> {
    let r = split(&pkt, limit, pool, &mut emit);
    match r {
        Ok(0) => {
            let mut p = pkt;
            p.meta.flags &= !meta_flags::REASSEMBLED;
            emit(p);
            Ok(1)
        }
        r => {
            pool.put_large(pkt);
            r
        }
    }
}

/// Emits the fragments; `Ok(0)`: the datagram fits whole.
fn split(
    pkt: &Packet,
    limit: Option<u16>,
    pool: &mut PacketPool,
    emit: &mut impl FnMut(Packet),
) -> Result<usize, RefragError> {
    let note = pkt.frag_note().ok_or(RefragError::NoNote)?;
    let size = usize::from(limit.map_or(note.max_size, |l| l.min(note.max_size)));
    let m = pkt.meta;
    if m.l3_off == NO_OFFSET {
        return Err(RefragError::Malformed);
    }
    let l3 = usize::from(m.l3_off);
    let f = pkt.data();
    match m.ethertype {
        ETHERTYPE_IPV4 => {
            if f.len() < l3 + 20 {
                return Err(RefragError::Malformed);
            }
            let hl = usize::from(f[l3] & 0x0f) * 4;
            let tot = usize::from(rd16(f, l3 + 2));
            if hl < 20 || tot < hl || l3 + tot > f.len() {
                return Err(RefragError::Malformed);
            }
            if tot <= size {
                return Ok(0);
            }
            let chunk = size.saturating_sub(hl) & !7;
            if chunk == 0 {
                return Err(RefragError::SizeTooSmall);
            }
            let df = rd16(f, l3 + 6) & 0x4000;
            let data = &f[l3 + hl..l3 + tot];
            let mut n = 0;
            for (i, part) in data.chunks(chunk).enumerate() {
                let off = i * chunk;
                let more = off + part.len() < data.len();
                let mut q = buffer(pool, l3 + hl + part.len());
                let o = q.data_mut();
                o[..l3 + hl].copy_from_slice(&f[..l3 + hl]);
                o[l3 + hl..].copy_from_slice(part);
                if i > 0 {
                    options_fragment(&mut o[l3 + 20..l3 + hl]);
                }
                wr16(o, l3 + 2, (hl + part.len()) as u16);
                wr16(o, l3 + 6, df | if more { 0x2000 } else { 0 } | (off / 8) as u16);
                wr16(o, l3 + 10, 0);
                let c = checksum::checksum(&o[l3..l3 + hl]);
                wr16(o, l3 + 10, c);
                finish(&mut q, m, i == 0);
                emit(q);
                n += 1;
            }
            Ok(n)
        }
        ETHERTYPE_IPV6 => {
            let unfrag = usize::from(note.unfrag_len);
            if f.len() < l3 + 40 || unfrag < 40 {
                return Err(RefragError::Malformed);
            }
            let end = l3 + 40 + usize::from(rd16(f, l3 + 4));
            if end > f.len() || l3 + unfrag > end {
                return Err(RefragError::Malformed);
            }
            if end - l3 <= size {
                return Ok(0);
            }
            // The byte naming the first fragmentable header: the last one of the
            // unfragmentable part's next-header fields.
            let mut nh_at = l3 + 6;
            let mut off = l3 + 40;
            while off < l3 + unfrag {
                let n = ext_len(f, off, l3 + unfrag, f[nh_at]).ok_or(RefragError::Malformed)?;
                nh_at = off;
                off += n;
            }
            if off != l3 + unfrag {
                return Err(RefragError::Malformed);
            }
            let chunk = size.saturating_sub(unfrag + 8) & !7;
            if chunk == 0 {
                return Err(RefragError::SizeTooSmall);
            }
            let next = f[nh_at];
            let head = l3 + unfrag;
            let data = &f[head..end];
            let mut n = 0;
            for (i, part) in data.chunks(chunk).enumerate() {
                let off = i * chunk;
                let more = off + part.len() < data.len();
                let mut q = buffer(pool, head + 8 + part.len());
                let o = q.data_mut();
                o[..head].copy_from_slice(&f[..head]);
                o[nh_at] = 44;
                o[head] = next;
                o[head + 1] = 0;
                wr16(o, head + 2, off as u16 | u16::from(more));
                wr32(o, head + 4, note.id);
                o[head + 8..].copy_from_slice(part);
                wr16(o, l3 + 4, (unfrag - 40 + 8 + part.len()) as u16);
                finish(&mut q, m, i == 0);
                emit(q);
                n += 1;
            }
            Ok(n)
        }
        _ => Err(RefragError::Malformed),
    }
}

/// A packet whose frame is `len` bytes: from the pool when its buffers hold it, else a
/// buffer of its own (a fragment larger than a pool buffer: jumbo fragments).
fn buffer(pool: &mut PacketPool, len: usize) -> Packet {
    let mut q = if HEADROOM + len <= pool.buf_size() {
        pool.get()
    } else {
        Packet::with_capacity(HEADROOM + len)
    };
    // Cannot fail: the buffer holds `len` after the headroom (a reassembled frame is at
    // most a buffer's size, so `len` is too).
    let _ = q.fill(len);
    q
}

/// The metadata of a fragment cut from a datagram with metadata `m`: the datagram's, less
/// the reassembly mark, and no L4 header but in the first fragment.
fn finish(q: &mut Packet, m: freeway_packet::Meta, first: bool) {
    q.meta = m;
    q.meta.flags &= !meta_flags::REASSEMBLED;
    if !first {
        q.meta.l4_off = NO_OFFSET;
    }
}

/// Replaces the IPv4 options not marked "copied" with NOPs (Linux's `ip_options_fragment`),
/// for every fragment after the first.
fn options_fragment(opts: &mut [u8]) {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            t => {
                let Some(&l) = opts.get(i + 1) else { break };
                let l = usize::from(l);
                if l < 2 || i + l > opts.len() {
                    break;
                }
                if t & 0x80 == 0 {
                    opts[i..i + l].fill(1);
                }
                i += l;
            }
        }
    }
}
