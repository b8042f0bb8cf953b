//! Rewriting a packet for NAT: addresses, ports (TCP, UDP) and the ICMP echo identifier,
//! with every checksum updated incrementally (RFC 1624: `HC' = ~(~HC + ~m + m')` over the
//! changed words), and ICMP errors whose quoted packet belongs to a translated connection.
//!
//! * IPv4 header checksum: for the address words.
//! * TCP and UDP checksums: for the address words (they are in the pseudo header) and the
//!   ports. A UDP datagram over IPv4 sent without a checksum (zero) keeps zero; a computed
//!   zero is sent as `0xffff`, which means the same in one's complement.
//! * ICMP echo: the identifier; ICMPv4's checksum has no pseudo header, ICMPv6's has.
//! * Other protocols: the addresses only.
//! * ICMP errors: the quoted packet's addresses and ports are mapped (its IPv4 header
//!   checksum too, and its transport checksum when the quote holds it), the error's own
//!   addresses follow (its destination is the quoted packet's source, its source the quoted
//!   destination when that host sent it), and the ICMP checksum, which covers the quote, is
//!   computed anew over the message (errors are rare; the quote is short).
//!
//! A packet too short for what it claims is left alone (`false`); nothing here panics.
//!
//! Threads: pure functions of the buffer.

use freeway_packet::bytes::{rd16, wr16};
use freeway_packet::checksum::{fold, pseudo_v6, sum};
use freeway_packet::wire::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP};

use crate::key::Tuple;

/// The address `a` as the bytes a header holds (4 for IPv4, 16 for IPv6).
fn addr_bytes(a: u128, v6: bool) -> ([u8; 16], usize) {
    if v6 {
        (a.to_be_bytes(), 16)
    } else {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&(a as u32).to_be_bytes());
        (b, 4)
    }
}

/// The change of a checksum when the 16-bit words `old` become `new` (same length, even).
#[inline]
fn adjust(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    let mut acc = u32::from(!csum);
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += u32::from(!u16::from_be_bytes([o[0], o[1]])) + u32::from(u16::from_be_bytes([n[0], n[1]]));
        // At most 16 words: no overflow, but keep the sum small anyway.
        acc = (acc & 0xffff) + (acc >> 16);
    }
    fold(acc)
}

/// The offsets of an IP header's source and destination addresses.
fn addr_offsets(v6: bool) -> (usize, usize) {
    if v6 {
        (8, 24)
    } else {
        (12, 16)
    }
}

/// Where an IP packet starting at `l3` ends (its length field, within the frame).
fn ip_end(f: &[u8], l3: usize, v6: bool) -> Option<usize> {
    let end = if v6 {
        l3 + 40 + usize::from(rd16(f.get(l3..l3 + 40)?, 4))
    } else {
        l3 + usize::from(rd16(f.get(l3..l3 + 20)?, 2))
    };
    Some(end.min(f.len()))
}

/// Rewrites the IP packet at `l3` (transport header at `l4`, protocol `proto`) of `f`, which
/// ends at `end`, from tuple `from` to tuple `to`. The transport checksum is updated only
/// when it lies before `end` (a quoted packet may be cut short).
fn rewrite_packet(f: &mut [u8], l3: usize, l4: usize, end: usize, proto: u8, from: &Tuple, to: &Tuple) -> bool {
    let v6 = from.v6;
    let (so, dso) = addr_offsets(v6);
    let (os, n) = addr_bytes(from.src, v6);
    let (od, _) = addr_bytes(from.dst, v6);
    let (ns, _) = addr_bytes(to.src, v6);
    let (nd, _) = addr_bytes(to.dst, v6);
    if f.len() < l3 + if v6 { 40 } else { 20 } || l4 > end || end > f.len() {
        return false;
    }
    // The packet must carry `from`: a stale plan (or a forged quote) changes nothing.
    if f[l3 + so..l3 + so + n] != os[..n] || f[l3 + dso..l3 + dso + n] != od[..n] {
        return false;
    }
    let mut old_words = [0u8; 36];
    let mut new_words = [0u8; 36];
    old_words[..n].copy_from_slice(&os[..n]);
    old_words[n..2 * n].copy_from_slice(&od[..n]);
    new_words[..n].copy_from_slice(&ns[..n]);
    new_words[n..2 * n].copy_from_slice(&nd[..n]);
    let addrs = 2 * n;
    let t = &f[l4..end];
    match proto {
        IPPROTO_TCP | IPPROTO_UDP if t.len() >= 4 => {
            let (csum_at, zero_means_none) = if proto == IPPROTO_TCP { (16, false) } else { (6, !v6) };
            old_words[addrs..addrs + 4].copy_from_slice(&t[0..4]);
            new_words[addrs..addrs + 2].copy_from_slice(&to.sport.to_be_bytes());
            new_words[addrs + 2..addrs + 4].copy_from_slice(&to.dport.to_be_bytes());
            if t.len() >= csum_at + 2 {
                let c = rd16(t, csum_at);
                if !(zero_means_none && c == 0) {
                    let mut nc = adjust(c, &old_words[..addrs + 4], &new_words[..addrs + 4]);
                    if proto == IPPROTO_UDP && nc == 0 {
                        nc = 0xffff;
                    }
                    wr16(&mut f[l4..end], csum_at, nc);
                }
            }
            let t = &mut f[l4..end];
            wr16(t, 0, to.sport);
            wr16(t, 2, to.dport);
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 if t.len() >= 8 && proto == if v6 { IPPROTO_ICMPV6 } else { IPPROTO_ICMP } => {
            // An echo (the only ICMP messages that are connections): the identifier.
            let id = to.sport | to.dport;
            old_words[addrs..addrs + 2].copy_from_slice(&t[4..6]);
            new_words[addrs..addrs + 2].copy_from_slice(&id.to_be_bytes());
            // ICMPv6's checksum covers the pseudo header; ICMPv4's does not.
            let (lo, hi) = if v6 { (0, addrs + 2) } else { (addrs, addrs + 2) };
            let c = adjust(rd16(t, 2), &old_words[lo..hi], &new_words[lo..hi]);
            let t = &mut f[l4..end];
            wr16(t, 2, c);
            wr16(t, 4, id);
        }
        _ => {}
    }
    if !v6 {
        let c = adjust(rd16(f, l3 + 10), &old_words[..8], &new_words[..8]);
        wr16(f, l3 + 10, c);
    }
    f[l3 + so..l3 + so + n].copy_from_slice(&ns[..n]);
    f[l3 + dso..l3 + dso + n].copy_from_slice(&nd[..n]);
    true
}

/// Rewrites the packet at `l3`/`l4` (transport protocol `proto`) of `f` from its tuple
/// `from` to `to`. `false`, and nothing changed, if the packet does not carry `from` or is
/// too short.
pub fn rewrite(f: &mut [u8], l3: usize, l4: usize, proto: u8, from: &Tuple, to: &Tuple) -> bool {
    let Some(end) = ip_end(f, l3, from.v6) else {
        return false;
    };
    rewrite_packet(f, l3, l4, end, proto, from, to)
}

/// Rewrites an ICMP error (IP header at `l3`, ICMP header at `l4`) whose quoted packet
/// carries `from`, so that it quotes `to`, and maps the error's own addresses the same way.
/// `false`, and nothing changed, if it is malformed or does not quote `from`.
pub fn rewrite_icmp_error(f: &mut [u8], l3: usize, l4: usize, from: &Tuple, to: &Tuple) -> bool {
    let v6 = from.v6;
    let Some(end) = ip_end(f, l3, v6) else {
        return false;
    };
    let il3 = l4 + 8;
    if end < il3 + if v6 { 40 } else { 20 } {
        return false;
    }
    // The quoted header's own length and transport protocol.
    let (il4, iproto) = if v6 {
        (il3 + 40, f[il3 + 6])
    } else {
        (il3 + usize::from(f[il3] & 0x0f) * 4, f[il3 + 9])
    };
    if il4 > end {
        return false;
    }
    let (so, dso) = addr_offsets(v6);
    let (_, n) = addr_bytes(0, v6);
    let read = |f: &[u8], at: usize| -> u128 { f[at..at + n].iter().fold(0u128, |a, b| (a << 8) | u128::from(*b)) };
    let outer_src = read(f, l3 + so);
    let outer_dst = read(f, l3 + dso);
    if outer_dst != from.src {
        return false;
    }
    // The quote ends where the error does (its own length field may claim more).
    if !rewrite_packet(f, il3, il4, end, iproto, from, to) {
        return false;
    }
    let outer_from = Tuple {
        src: outer_src,
        dst: outer_dst,
        sport: 0,
        dport: 0,
        proto: 0,
        v6,
    };
    let outer_to = Tuple {
        src: if outer_src == from.dst { to.dst } else { outer_src },
        dst: to.src,
        ..outer_from
    };
    // The outer header: addresses only (protocol 0 touches no transport header).
    rewrite_packet(f, l3, l4, end, 0, &outer_from, &outer_to);
    // The ICMP checksum covers the quote: computed anew.
    wr16(f, l4 + 2, 0);
    let c = if v6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&f[l3 + 8..l3 + 24]);
        d.copy_from_slice(&f[l3 + 24..l3 + 40]);
        fold(sum(&f[l4..end], pseudo_v6(s, d, IPPROTO_ICMPV6, (end - l4) as u32)))
    } else {
        fold(sum(&f[l4..end], 0))
    };
    wr16(f, l4 + 2, c);
    true
}
