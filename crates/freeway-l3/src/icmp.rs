//! ICMP and ICMPv6: echo replies (in place), error messages (time exceeded, destination
//! unreachable, fragmentation needed / packet too big), the rules that forbid an error, and the
//! per-worker token bucket that limits them.
//!
//! Errors quote as much of the offending datagram as the RFCs allow: IPv4 keeps the whole error
//! within 576 bytes (RFC 1812 4.3.2.3, at least the IP header + 8 bytes), IPv6 within the
//! minimum MTU of 1280 (RFC 4443 2.4 c). No error is sent about an ICMP error, a packet sent to
//! a broadcast or multicast address (IP or link layer), a packet whose source does not name one
//! host, or a non-first fragment (RFC 1812 4.3.2.7, RFC 4443 2.4 e).
//!
//! Threads: pure functions of the buffers they are given; a [`TokenBucket`] belongs to one
//! worker.

use std::net::{Ipv4Addr, Ipv6Addr};

use freeway_packet::bytes::{rd16, wr16, wr32};
use freeway_packet::checksum::{checksum, fold, pseudo_v6, sum, update16, verify};
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6};
use freeway_packet::Packet;

pub use crate::frame::L2;
use crate::frame::{finish_frame, start_frame};

/// The largest IPv4 ICMP error datagram (RFC 1812 4.3.2.3).
pub const V4_ERROR_MAX: usize = 576;
/// The largest IPv6 ICMP error packet (the IPv6 minimum MTU).
pub const V6_ERROR_MAX: usize = 1280;

/// ICMPv4 types and codes used here.
pub mod v4 {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACH: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Unreachable code: network.
    pub const CODE_NET: u8 = 0;
    /// Unreachable code: host.
    pub const CODE_HOST: u8 = 1;
    /// Unreachable code: port.
    pub const CODE_PORT: u8 = 3;
    /// Unreachable code: fragmentation needed and DF set.
    pub const CODE_FRAG_NEEDED: u8 = 4;
    /// Time exceeded code: TTL expired in transit.
    pub const CODE_TTL: u8 = 0;
}

/// ICMPv6 types and codes used here.
pub mod v6 {
    /// Destination unreachable.
    pub const DEST_UNREACH: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbour solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbour advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
    /// Unreachable code: no route to destination.
    pub const CODE_NO_ROUTE: u8 = 0;
    /// Unreachable code: address unreachable.
    pub const CODE_ADDR: u8 = 3;
    /// Unreachable code: port unreachable.
    pub const CODE_PORT: u8 = 4;
    /// Time exceeded code: hop limit exceeded in transit.
    pub const CODE_HOP_LIMIT: u8 = 0;
}

pub use freeway_sync::TokenBucket;

/// Whether an ICMPv4 type may not be answered with an error: the error messages, and as
/// Linux counts them the other types but the queries and their replies (echo, timestamp,
/// information, address mask): router advertisement and solicitation, the unassigned and
/// the unknown ones.
#[inline]
pub fn is_v4_error_type(ty: u8) -> bool {
    !matches!(ty, 0 | 8 | 13..=18)
}

/// Whether an IPv4 source names one host (not 0/8, loopback, multicast, class E, broadcast).
#[inline]
pub fn v4_unicast_source(a: Ipv4Addr) -> bool {
    let o = a.octets();
    o[0] != 0 && o[0] != 127 && o[0] < 224
}

/// Whether RFC 1812 4.3.2.7 allows an ICMP error about the IPv4 datagram `ip` (header at
/// offset 0). The caller also refuses frames sent to a link-layer group address and to a
/// directed broadcast address.
pub fn v4_error_allowed(ip: &[u8]) -> bool {
    if ip.len() < 20 {
        return false;
    }
    let hl = usize::from(ip[0] & 0x0f) * 4;
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    if !v4_unicast_source(src) || dst.is_multicast() || dst.is_broadcast() {
        return false;
    }
    let frag = rd16(ip, 6);
    if frag & 0x1fff != 0 {
        return false;
    }
    if ip[9] == IPPROTO_ICMP {
        // Unreadable ICMP header: assume the worst (an error).
        return match ip.get(hl) {
            Some(&ty) => !is_v4_error_type(ty),
            None => false,
        };
    }
    true
}

/// The upper layer of an IPv6 packet after its extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V6Upper {
    /// Final next-header value.
    pub proto: u8,
    /// Offset of the upper-layer header from the start of the IPv6 header.
    pub off: usize,
    /// Whether the packet carries a fragment header (first fragment or not).
    pub fragment: bool,
    /// Whether the packet is a fragment with a non-zero offset.
    pub non_first_fragment: bool,
}

/// Walks the extension headers of the IPv6 packet `ip` (header at offset 0, `ip` bounded by
/// the payload length). `None` if a header overruns the packet or the chain is longer than 8.
pub fn v6_upper(ip: &[u8]) -> Option<V6Upper> {
    if ip.len() < 40 {
        return None;
    }
    let mut nh = ip[6];
    let mut off = 40;
    let mut non_first = false;
    let mut fragment = false;
    for _ in 0..8 {
        match nh {
            0 | 43 | 60 => {
                let h = ip.get(off..off + 2)?;
                nh = h[0];
                off += (usize::from(h[1]) + 1) * 8;
            }
            51 => {
                let h = ip.get(off..off + 2)?;
                nh = h[0];
                off += (usize::from(h[1]) + 2) * 4;
            }
            44 => {
                let h = ip.get(off..off + 8)?;
                nh = h[0];
                fragment = true;
                non_first |= rd16(h, 2) & 0xfff8 != 0;
                off += 8;
            }
            _ => {
                if off > ip.len() {
                    return None;
                }
                return Some(V6Upper {
                    proto: nh,
                    off,
                    fragment,
                    non_first_fragment: non_first,
                });
            }
        }
    }
    None
}

/// Whether RFC 4443 2.4 (e) allows an ICMPv6 error about the IPv6 packet `ip`. The caller
/// also refuses frames sent to a link-layer group address.
pub fn v6_error_allowed(ip: &[u8]) -> bool {
    if ip.len() < 40 {
        return false;
    }
    let src = addr6(&ip[8..24]);
    let dst = addr6(&ip[24..40]);
    if src.is_unspecified() || src.is_multicast() || src.is_loopback() || dst.is_multicast() {
        return false;
    }
    match v6_upper(ip) {
        None => false,
        Some(u) if u.non_first_fragment => false,
        Some(u) if u.proto == IPPROTO_ICMPV6 => ip.get(u.off).is_some_and(|&ty| ty >= 128),
        Some(_) => true,
    }
}

/// Reads an IPv6 address from 16 bytes.
#[inline]
pub fn addr6(b: &[u8]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[..16]);
    Ipv6Addr::from(o)
}

/// Builds an ICMPv4 error (`ty`/`code`, `rest` = the 4 bytes after the checksum, e.g. the
/// next-hop MTU) from `src` to `dst` quoting `orig` (the offending datagram from its IP header,
/// bounded by its total length), cut so that the whole datagram fits [`V4_ERROR_MAX`].
#[allow(clippy::too_many_arguments)]
pub fn build_v4_error(
    pkt: &mut Packet,
    l2: L2,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ty: u8,
    code: u8,
    rest: u32,
    orig: &[u8],
) -> bool {
    let quote = orig.len().min(V4_ERROR_MAX - 28);
    let tot = 28 + quote;
    let Some(l3) = start_frame(pkt, l2, ETHERTYPE_IPV4, tot) else {
        return false;
    };
    let f = pkt.data_mut();
    let h = &mut f[l3..l3 + 20];
    h[0] = 0x45;
    h[1] = 0xc0; // DSCP CS6 (internetwork control), as routers send their ICMP.
    wr16(h, 2, tot as u16);
    h[8] = 64;
    h[9] = IPPROTO_ICMP;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let c = checksum(h);
    wr16(h, 10, c);
    let m = &mut f[l3 + 20..l3 + tot];
    m[0] = ty;
    m[1] = code;
    wr32(m, 4, rest);
    m[8..].copy_from_slice(&orig[..quote]);
    let c = checksum(m);
    wr16(m, 2, c);
    finish_frame(pkt);
    true
}

/// Builds an ICMPv6 error from `src` to `dst` quoting `orig` (the offending packet from its
/// IPv6 header, bounded by its payload length), cut so that the packet fits [`V6_ERROR_MAX`].
#[allow(clippy::too_many_arguments)]
pub fn build_v6_error(
    pkt: &mut Packet,
    l2: L2,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    ty: u8,
    code: u8,
    rest: u32,
    orig: &[u8],
) -> bool {
    let quote = orig.len().min(V6_ERROR_MAX - 48);
    build_icmpv6(pkt, l2, src, dst, 64, 8 + quote, |m| {
        m[0] = ty;
        m[1] = code;
        wr32(m, 4, rest);
        m[8..].copy_from_slice(&orig[..quote]);
    })
}

/// Builds an ICMPv6 packet from `src` to `dst` with hop limit `hop` and a message of `plen`
/// bytes, which `write` fills (zeroed, the checksum field left alone); then the checksum.
/// `false` if the buffer is too small.
pub(crate) fn build_icmpv6(
    pkt: &mut Packet,
    l2: L2,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop: u8,
    plen: usize,
    write: impl FnOnce(&mut [u8]),
) -> bool {
    let Some(l3) = start_frame(pkt, l2, ETHERTYPE_IPV6, 40 + plen) else {
        return false;
    };
    let f = pkt.data_mut();
    write_v6_header(&mut f[l3..l3 + 40], plen as u16, IPPROTO_ICMPV6, hop, src, dst);
    let m = &mut f[l3 + 40..l3 + 40 + plen];
    write(m);
    let c = icmpv6_checksum(src, dst, m);
    wr16(m, 2, c);
    finish_frame(pkt);
    true
}

/// Writes a 40-byte IPv6 header (traffic class and flow label zero).
pub fn write_v6_header(h: &mut [u8], plen: u16, nh: u8, hop: u8, src: Ipv6Addr, dst: Ipv6Addr) {
    h[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
    wr16(h, 4, plen);
    h[6] = nh;
    h[7] = hop;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
}

/// The ICMPv6 checksum of `msg` (its checksum field must be zero, or the result is the
/// verification sum: 0 when valid).
#[inline]
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    fold(sum(
        msg,
        pseudo_v6(src.octets(), dst.octets(), IPPROTO_ICMPV6, msg.len() as u32),
    ))
}

/// Turns the ICMP echo request in `pkt` (IPv4 header at `l3`, validated) into the echo reply in
/// place: MACs, addresses swapped, TTL 64, checksums updated. `false` (nothing sent) if it is
/// not a well-formed echo request with a valid ICMP checksum.
pub fn echo_reply_v4(pkt: &mut Packet, l3: usize, our_mac: [u8; 6]) -> bool {
    // A new frame in the old buffer: whoever handles it next parses it.
    pkt.meta.flags = 0;
    let f = pkt.data_mut();
    let Some(&vihl) = f.get(l3) else { return false };
    let hl = usize::from(vihl & 0x0f) * 4;
    let Some(tot) = f.get(l3 + 2..l3 + 4).map(|b| usize::from(rd16(b, 0))) else {
        return false;
    };
    if tot < hl + 8 || l3 + tot > f.len() {
        return false;
    }
    let icmp = &f[l3 + hl..l3 + tot];
    if icmp[0] != v4::ECHO_REQUEST || icmp[1] != 0 || !verify(icmp) {
        return false;
    }
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&f[6..12]);
    f[0..6].copy_from_slice(&src_mac);
    f[6..12].copy_from_slice(&our_mac);
    let h = &mut f[l3..l3 + hl];
    let mut a = [0u8; 4];
    a.copy_from_slice(&h[12..16]);
    h.copy_within(16..20, 12);
    h[16..20].copy_from_slice(&a);
    h[8] = 64;
    h[10] = 0;
    h[11] = 0;
    let c = checksum(h);
    wr16(h, 10, c);
    let m = &mut f[l3 + hl..l3 + tot];
    let old = rd16(m, 2);
    m[0] = v4::ECHO_REPLY;
    let c = update16(old, u16::from(v4::ECHO_REQUEST) << 8, u16::from(v4::ECHO_REPLY) << 8);
    wr16(m, 2, c);
    true
}

/// Turns the ICMPv6 echo request in `pkt` (IPv6 header at `l3`, ICMPv6 at `l3 + up`, packet
/// ending at `l3 + 40 + payload length`) into an echo reply from `src` in place: extension
/// headers are dropped, hop limit 64, checksum recomputed. `false` if the request's checksum
/// is wrong or it is not an echo request.
pub fn echo_reply_v6(pkt: &mut Packet, l3: usize, up: usize, our_mac: [u8; 6], src: Ipv6Addr) -> bool {
    // A new frame in the old buffer (extension headers dropped): whoever handles it next
    // parses it.
    pkt.meta.flags = 0;
    let f = pkt.data_mut();
    let Some(h) = f.get(l3..l3 + 40) else { return false };
    let end = l3 + 40 + usize::from(rd16(h, 4));
    let (osrc, odst) = (addr6(&h[8..24]), addr6(&h[24..40]));
    if end > f.len() || l3 + up + 8 > end {
        return false;
    }
    let msg = &f[l3 + up..end];
    if msg[0] != v6::ECHO_REQUEST || msg[1] != 0 || icmpv6_checksum(osrc, odst, msg) != 0 {
        return false;
    }
    let len = end - (l3 + up);
    f.copy_within(l3 + up..end, l3 + 40);
    let mut src_mac = [0u8; 6];
    src_mac.copy_from_slice(&f[6..12]);
    f[0..6].copy_from_slice(&src_mac);
    f[6..12].copy_from_slice(&our_mac);
    write_v6_header(&mut f[l3..l3 + 40], len as u16, IPPROTO_ICMPV6, 64, src, osrc);
    let m = &mut f[l3 + 40..l3 + 40 + len];
    m[0] = v6::ECHO_REPLY;
    m[2] = 0;
    m[3] = 0;
    let c = icmpv6_checksum(src, osrc, m);
    wr16(m, 2, c);
    pkt.truncate(l3 + 40 + len);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_bursts_then_refills_at_rate() {
        let mut b = TokenBucket::new(100, 5);
        assert_eq!((0..10).filter(|_| b.take(0)).count(), 5);
        // 100/s = one token per 10 ms.
        assert!(!b.take(9));
        assert!(b.take(10));
        assert!(!b.take(10));
        assert_eq!((0..100).filter(|_| b.take(10_000)).count(), 5, "refill capped at burst");
        let mut z = TokenBucket::new(0, 0);
        assert!(!z.take(1_000_000));
    }

    #[test]
    fn error_rules() {
        let mut ip = [0u8; 28];
        ip[0] = 0x45;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 1, 1]);
        assert!(v4_error_allowed(&ip));
        ip[9] = IPPROTO_ICMP;
        ip[20] = 8;
        assert!(v4_error_allowed(&ip), "echo request may get an error");
        ip[20] = 3;
        assert!(!v4_error_allowed(&ip), "never an error about an error");
        ip[9] = 17;
        ip[6] = 0x00;
        ip[7] = 0x10;
        assert!(!v4_error_allowed(&ip), "non-first fragment");
        ip[7] = 0;
        ip[16] = 224;
        assert!(!v4_error_allowed(&ip), "multicast destination");
        ip[16] = 10;
        ip[12] = 0;
        assert!(!v4_error_allowed(&ip), "source 0/8");
    }

    #[test]
    fn v6_walker_finds_fragments() {
        let mut ip = vec![0u8; 40 + 8 + 8];
        ip[0] = 0x60;
        ip[6] = 44;
        ip[8] = 0x20;
        ip[24] = 0x20;
        ip[40] = 17;
        assert_eq!(
            v6_upper(&ip),
            Some(V6Upper {
                proto: 17,
                off: 48,
                fragment: true,
                non_first_fragment: false
            })
        );
        assert!(v6_error_allowed(&ip));
        ip[43] = 8; // offset 1
        assert!(v6_upper(&ip).unwrap().non_first_fragment);
        assert!(!v6_error_allowed(&ip));
        ip.truncate(44);
        assert_eq!(v6_upper(&ip), None);
    }
}
