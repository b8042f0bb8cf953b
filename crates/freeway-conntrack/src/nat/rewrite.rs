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
#[inline]
pub fn rewrite(f: &mut [u8], l3: usize, l4: usize, proto: u8, from: &Tuple, to: &Tuple) -> bool {
    if !from.v6 {
        let done = match proto {
            IPPROTO_TCP => rewrite_v4_ports::<18>(f, l3, l4, false, from, to),
            IPPROTO_UDP => rewrite_v4_ports::<8>(f, l3, l4, true, from, to),
            _ => None,
        };
        if let Some(done) = done {
            return done;
        }
    }
    let Some(end) = ip_end(f, l3, from.v6) else {
        return false;
    };
    rewrite_packet(f, l3, l4, end, proto, from, to)
}

/// The sum of the two 16-bit words of `x` (a term of a one's complement sum).
#[inline(always)]
fn words(x: u32) -> u32 {
    (x >> 16) + (x & 0xffff)
}

/// [`rewrite_packet`] for the common case, a whole TCP (`N` = 18: its header up to the
/// checksum) or UDP (`N` = 8, `udp`) header over IPv4, on 32-bit words of fixed-size views
/// (one bounds check per header) instead of byte arrays: the same checks, the same checksums
/// (a one's complement sum may be folded once at the end, RFC 1071). `None` for any packet
/// that it does not fit (the general code handles it).
#[inline(always)]
fn rewrite_v4_ports<const N: usize>(
    f: &mut [u8],
    l3: usize,
    l4: usize,
    udp: bool,
    from: &Tuple,
    to: &Tuple,
) -> Option<bool> {
    let len = f.len();
    let ip: &mut [u8; 20] = f.get_mut(l3..)?.first_chunk_mut()?;
    let end = (l3 + usize::from(u16::from_be_bytes([ip[2], ip[3]]))).min(len);
    // The transport header after the IP header (as parsing makes it), whole before `end`.
    if l4 < l3 + 20 || l4 > end || end - l4 < N {
        return None;
    }
    let rd = |b: &[u8; 20], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let (os, od, ns, nd) = (from.src as u32, from.dst as u32, to.src as u32, to.dst as u32);
    // The packet must carry `from`: a stale plan (or a forged quote) changes nothing.
    if rd(ip, 12) != os || rd(ip, 16) != od {
        return Some(false);
    }
    let addrs = words(!os) + words(!od) + words(ns) + words(nd);
    let c = u16::from_be_bytes([ip[10], ip[11]]);
    ip[10..12].copy_from_slice(&fold(u32::from(!c) + addrs).to_be_bytes());
    ip[12..16].copy_from_slice(&ns.to_be_bytes());
    ip[16..20].copy_from_slice(&nd.to_be_bytes());
    let t: &mut [u8; N] = f[l4..].first_chunk_mut()?;
    let c = u16::from_be_bytes([t[N - 2], t[N - 1]]);
    if !(udp && c == 0) {
        let old = u32::from_be_bytes([t[0], t[1], t[2], t[3]]);
        let ports = words(!old) + u32::from(to.sport) + u32::from(to.dport);
        let mut nc = fold(u32::from(!c) + addrs + ports);
        if udp && nc == 0 {
            nc = 0xffff;
        }
        t[N - 2..].copy_from_slice(&nc.to_be_bytes());
    }
    t[0..2].copy_from_slice(&to.sport.to_be_bytes());
    t[2..4].copy_from_slice(&to.dport.to_be_bytes());
    Some(true)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::{classify, Class};
    use crate::frames::{self, Seg};
    use freeway_packet::Packet;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn v4_packet(tcp: bool, a: u32, b: u32, sp: u16, dp: u16, len: usize, zero_csum: bool) -> Packet {
        let (a, b) = (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)));
        let mut p = if tcp {
            frames::tcp(a, b, sp, dp, Seg::new(0x10, 1, 2).data(len))
        } else {
            frames::udp(a, b, sp, dp, len)
        };
        if zero_csum && !tcp {
            let l4 = usize::from(p.meta.l4_off);
            wr16(p.data_mut(), l4 + 6, 0);
        }
        p
    }

    proptest! {
        /// The 32-bit path for TCP and UDP over IPv4 writes exactly the bytes the general
        /// code writes, and refuses what it refuses.
        #[test]
        fn the_v4_path_writes_what_the_general_code_writes(
            tcp in any::<bool>(), a in any::<u32>(), b in any::<u32>(), sp in any::<u16>(),
            dp in any::<u16>(), len in 0usize..40, zero in any::<bool>(), to in any::<(u32, u32, u16, u16)>(),
            stale in any::<bool>(),
        ) {
            let p = v4_packet(tcp, a, b, sp, dp, len, zero);
            let Class::Track(mut from, _) = classify(p.data(), &p.meta, false) else {
                panic!("a tracked packet");
            };
            let to = Tuple { src: u128::from(to.0), dst: u128::from(to.1), sport: to.2, dport: to.3, ..from };
            if stale {
                from.src ^= 1;
            }
            let (l3, l4, proto) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off), p.meta.ip_proto);
            let (mut x, mut y) = (p.data().to_vec(), p.data().to_vec());
            let end = ip_end(&x, l3, false).expect("an IP header");
            let fast = if tcp {
                rewrite_v4_ports::<18>(&mut x, l3, l4, false, &from, &to)
            } else {
                rewrite_v4_ports::<8>(&mut x, l3, l4, true, &from, &to)
            };
            prop_assert!(fast.is_some());
            let general = rewrite_packet(&mut y, l3, l4, end, proto, &from, &to);
            prop_assert_eq!(fast, Some(general));
            prop_assert_eq!(general, !stale);
            prop_assert_eq!(x, y);
        }
    }
}
