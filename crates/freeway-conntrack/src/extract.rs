//! Per-packet header checks and tuple extraction (what conntrack reads from a parsed frame).
//!
//! Input: a frame and the [`Meta`] filled by `freeway_packet::parse` (ethertype, `l3_off`,
//! `l4_off`, `ip_proto` are trusted: the parser guarantees the IP header and the L4 header
//! lie inside the frame). Checks done here, in the manner of Open vSwitch's conntrack
//! extraction:
//!
//! * IPv4: header checksum (skipped when the caller says this buffer was already verified),
//!   fragments are not reassembled and are reported [`InvalidReason::Fragment`];
//! * UDP: `8 <= length <= IP payload`;
//! * TCP: flags and the window-scale option (SYN only) are read for the tracker;
//! * SCTP: ports; only a first chunk that may start an association (INIT, COOKIE ECHO,
//!   HEARTBEAT) creates a connection;
//! * ICMP/ICMPv6: queries (echo, timestamp, information, address mask; ICMPv6 echo and node
//!   information) keyed by identifier, with their replies; errors (unreachable, time exceeded,
//!   parameter problem, packet too big, ...) yield the embedded tuple, which must come with at
//!   least 8 bytes of its L4 header; ND/MLD messages are untracked; other types invalid.
//!
//! Never panics: every read is bounds-checked against the IP datagram's end.
//!
//! Threads: pure functions of the frame.

use freeway_packet::bytes::{rd128, rd16, rd32};
use freeway_packet::checksum;
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP};

/// SCTP.
const IPPROTO_SCTP: u8 = 132;
use freeway_packet::{Meta, NO_OFFSET};

use crate::key::{Key, Tuple};
use crate::InvalidReason;

/// A TCP segment as the tracker needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSeg {
    /// Flag bits (FIN 0x01 .. CWR 0x80).
    pub flags: u8,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Raw (unscaled) window.
    pub win: u16,
    /// Payload length.
    pub len: u32,
    /// Window scale option (SYN segments only).
    pub wscale: Option<u8>,
}

/// The L4 part of a tracked packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4Info {
    /// TCP.
    Tcp(TcpSeg),
    /// UDP (and UDP-Lite are not special-cased: generic).
    Udp,
    /// SCTP; `starts`: its first chunk may start a connection (INIT, COOKIE ECHO,
    /// HEARTBEAT).
    Sctp {
        /// May start a connection.
        starts: bool,
    },
    /// ICMP/ICMPv6 echo; `request` is true for a request.
    Echo {
        /// Echo request (else reply).
        request: bool,
    },
    /// Any other IP protocol (keyed by addresses and protocol).
    Generic,
}

/// What a packet is to conntrack. `T` is what a tracked packet is keyed by: its [`Tuple`]
/// (what [`classify`] gives), or inside the tracker the table key directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class<T = Tuple> {
    /// A packet to track under `T`.
    Track(T, L4Info),
    /// An ICMP error whose embedded packet had this tuple (sent in that direction).
    IcmpError(Tuple),
    /// Not tracked (non-IP, ND/MLD).
    Untracked,
    /// Malformed or not trackable.
    Invalid(InvalidReason),
}

/// How the header walk keys a tracked packet: by its [`Tuple`] for [`classify`], or for the
/// tracker by the table key in zone 0 (set the zone with [`Key::set_zone`]) and whether the
/// packet's source is the key's low endpoint, without going through a 128-bit [`Tuple`].
pub(crate) trait Endpoints: Sized {
    /// An IPv4 packet.
    fn v4(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self;
    /// An IPv6 packet.
    fn v6(src: u128, dst: u128, sport: u16, dport: u16, proto: u8) -> Self;
}

#[inline(always)]
fn tuple(src: u128, dst: u128, sport: u16, dport: u16, proto: u8, v6: bool) -> Tuple {
    Tuple {
        src,
        dst,
        sport,
        dport,
        proto,
        v6,
    }
}

impl Endpoints for Tuple {
    #[inline(always)]
    fn v4(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self {
        tuple(u128::from(src), u128::from(dst), sport, dport, proto, false)
    }
    #[inline(always)]
    fn v6(src: u128, dst: u128, sport: u16, dport: u16, proto: u8) -> Self {
        tuple(src, dst, sport, dport, proto, true)
    }
}

impl Endpoints for (Key, bool) {
    #[inline(always)]
    fn v4(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> Self {
        Key::new_v4(src, dst, sport, dport, proto, 0)
    }
    #[inline(always)]
    fn v6(src: u128, dst: u128, sport: u16, dport: u16, proto: u8) -> Self {
        Key::new(&tuple(src, dst, sport, dport, proto, true), 0)
    }
}

/// Addresses of a packet, by family.
trait Addrs: Copy {
    const V6: bool;
    fn track<T: Endpoints>(self, sport: u16, dport: u16, proto: u8, l4: L4Info) -> Class<T>;
}

#[derive(Clone, Copy)]
struct A4(u32, u32);

#[derive(Clone, Copy)]
struct A6(u128, u128);

impl Addrs for A4 {
    const V6: bool = false;
    #[inline(always)]
    fn track<T: Endpoints>(self, sport: u16, dport: u16, proto: u8, l4: L4Info) -> Class<T> {
        Class::Track(T::v4(self.0, self.1, sport, dport, proto), l4)
    }
}

impl Addrs for A6 {
    const V6: bool = true;
    #[inline(always)]
    fn track<T: Endpoints>(self, sport: u16, dport: u16, proto: u8, l4: L4Info) -> Class<T> {
        Class::Track(T::v6(self.0, self.1, sport, dport, proto), l4)
    }
}

/// Classifies a parsed frame. `l3_csum_verified`: the IPv4 header checksum of this buffer was
/// already checked (by an earlier pass or by hardware).
#[inline(always)]
pub fn classify(f: &[u8], meta: &Meta, l3_csum_verified: bool) -> Class {
    walk(f, meta, l3_csum_verified)
}

/// [`classify`], keying tracked packets by any [`Endpoints`].
#[inline(always)]
pub(crate) fn walk<T: Endpoints>(f: &[u8], meta: &Meta, l3_csum_verified: bool) -> Class<T> {
    let l3 = usize::from(meta.l3_off);
    if meta.l3_off == NO_OFFSET {
        return Class::Untracked;
    }
    match meta.ethertype {
        ETHERTYPE_IPV4 => ipv4(f, l3, meta, l3_csum_verified),
        ETHERTYPE_IPV6 => ipv6(f, l3, meta),
        _ => Class::Untracked,
    }
}

#[inline(always)]
fn ipv4<T: Endpoints>(f: &[u8], l3: usize, meta: &Meta, verified: bool) -> Class<T> {
    // One bounds check for the fixed header; the reads below index inside it.
    let Some(h) = f.get(l3..l3 + 20) else {
        return Class::Invalid(InvalidReason::Malformed);
    };
    let hl = usize::from(h[0] & 0x0f) * 4;
    let tot = usize::from(rd16(h, 2));
    let end = l3 + tot;
    if hl < 20 || tot < hl || end > f.len() {
        return Class::Invalid(InvalidReason::Malformed);
    }
    if !verified && !checksum::verify(&f[l3..l3 + hl]) {
        return Class::Invalid(InvalidReason::IpChecksum);
    }
    if rd16(h, 6) & 0x3fff != 0 {
        return Class::Invalid(InvalidReason::Fragment);
    }
    let a = A4(rd32(h, 12), rd32(h, 16));
    l4(f, meta.l4_off, end, meta.ip_proto, a)
}

#[inline(always)]
fn ipv6<T: Endpoints>(f: &[u8], l3: usize, meta: &Meta) -> Class<T> {
    if f.len() < l3 + 40 {
        return Class::Invalid(InvalidReason::Malformed);
    }
    let end = l3 + 40 + usize::from(rd16(f, l3 + 4));
    if end > f.len() {
        return Class::Invalid(InvalidReason::Malformed);
    }
    if meta.l4_off == NO_OFFSET {
        return Class::Invalid(InvalidReason::Fragment);
    }
    let a = A6(rd128(f, l3 + 8), rd128(f, l3 + 24));
    l4(f, meta.l4_off, end, meta.ip_proto, a)
}

#[inline(always)]
fn l4<T: Endpoints, A: Addrs>(f: &[u8], l4_off: u16, end: usize, proto: u8, a: A) -> Class<T> {
    let v6 = A::V6;
    if l4_off == NO_OFFSET {
        return match proto {
            IPPROTO_TCP | IPPROTO_UDP | IPPROTO_ICMP | IPPROTO_ICMPV6 => Class::Invalid(InvalidReason::Malformed),
            _ => a.track(0, 0, proto, L4Info::Generic),
        };
    }
    let l4 = usize::from(l4_off);
    // `end <= f.len()` (checked by the callers), so `f[..end]` never fails and the reads
    // below need only the checks against `end`.
    let f = &f[..end];
    match proto {
        IPPROTO_UDP => {
            let Some(u) = f.get(l4..l4 + 8) else {
                return Class::Invalid(InvalidReason::Malformed);
            };
            let ulen = usize::from(rd16(u, 4));
            if ulen < 8 || ulen > end - l4 {
                return Class::Invalid(InvalidReason::L4Length);
            }
            a.track(rd16(u, 0), rd16(u, 2), proto, L4Info::Udp)
        }
        IPPROTO_TCP => {
            let Some(h) = f.get(l4..l4 + 20) else {
                return Class::Invalid(InvalidReason::Malformed);
            };
            let doff = usize::from(h[12] >> 4) * 4;
            if doff < 20 || l4 + doff > end {
                return Class::Invalid(InvalidReason::Malformed);
            }
            let flags = h[13];
            let wscale = if flags & 0x02 != 0 {
                wscale_option(&f[l4 + 20..l4 + doff])
            } else {
                None
            };
            a.track(
                rd16(h, 0),
                rd16(h, 2),
                proto,
                L4Info::Tcp(TcpSeg {
                    flags,
                    seq: rd32(h, 4),
                    ack: rd32(h, 8),
                    win: rd16(h, 14),
                    len: (end - l4 - doff) as u32,
                    wscale,
                }),
            )
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => {
            if l4 + 8 > end {
                return Class::Invalid(InvalidReason::Malformed);
            }
            let ty = f[l4];
            if let Some(request) = query(ty, v6) {
                let id = rd16(f, l4 + 4);
                let (sport, dport) = if request { (id, 0) } else { (0, id) };
                return a.track(sport, dport, proto, L4Info::Echo { request });
            }
            let is_error = if v6 {
                matches!(ty, 1..=4)
            } else {
                matches!(ty, 3 | 4 | 5 | 11 | 12)
            };
            if is_error {
                return match inner(f, l4 + 8, end, v6) {
                    Some(t) => Class::IcmpError(t),
                    None => Class::Invalid(InvalidReason::IcmpInner),
                };
            }
            if v6 && matches!(ty, 130..=137 | 143) {
                // Multicast listener and neighbour discovery: link-local control, untracked.
                return Class::Untracked;
            }
            Class::Invalid(InvalidReason::IcmpType)
        }
        IPPROTO_SCTP => {
            // Common header (12 bytes), then the first chunk's type: only an INIT,
            // COOKIE ECHO or HEARTBEAT may start a connection, as Linux's tracker decides.
            let Some(h) = f.get(l4..l4 + 13).filter(|_| l4 + 13 <= end) else {
                return Class::Invalid(InvalidReason::Malformed);
            };
            let starts = matches!(h[12], 1 | 4 | 10);
            a.track(rd16(h, 0), rd16(h, 2), proto, L4Info::Sctp { starts })
        }
        _ => a.track(0, 0, proto, L4Info::Generic),
    }
}

/// Whether an ICMP (ICMPv6 with `v6`) type is a query (`Some(true)`) or its reply
/// (`Some(false)`), tracked by identifier as Linux tracks them: echo, timestamp,
/// information and address mask (ICMPv6: echo and node information). `None`: not a query.
fn query(ty: u8, v6: bool) -> Option<bool> {
    match (v6, ty) {
        (false, 8 | 13 | 15 | 17) | (true, 128 | 139) => Some(true),
        (false, 0 | 14 | 16 | 18) | (true, 129 | 140) => Some(false),
        _ => None,
    }
}

/// The tuple of the packet embedded in an ICMP error at `off`.
fn inner(f: &[u8], off: usize, end: usize, v6: bool) -> Option<Tuple> {
    let (src, dst, proto, l4) = if v6 {
        if off + 40 > end || f[off] >> 4 != 6 {
            return None;
        }
        (rd128(f, off + 8), rd128(f, off + 24), f[off + 6], off + 40)
    } else {
        if off + 20 > end || f[off] >> 4 != 4 {
            return None;
        }
        let hl = usize::from(f[off] & 0x0f) * 4;
        if hl < 20 || rd16(f, off + 6) & 0x1fff != 0 {
            return None;
        }
        (
            u128::from(rd32(f, off + 12)),
            u128::from(rd32(f, off + 16)),
            f[off + 9],
            off + hl,
        )
    };
    let mut t = Tuple {
        src,
        dst,
        sport: 0,
        dport: 0,
        proto,
        v6,
    };
    match proto {
        IPPROTO_TCP | IPPROTO_UDP => {
            if l4 + 8 > end {
                return None;
            }
            t.sport = rd16(f, l4);
            t.dport = rd16(f, l4 + 2);
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => {
            if l4 + 8 > end || (proto == IPPROTO_ICMPV6) != v6 {
                return None;
            }
            let id = rd16(f, l4 + 4);
            match query(f[l4], v6) {
                Some(true) => t.sport = id,
                Some(false) => t.dport = id,
                // Errors are never sent about errors (RFC 1122 / 4443).
                None => return None,
            }
        }
        _ => {}
    }
    Some(t)
}

/// The window-scale option (kind 3) of a SYN's options, capped at 14 (RFC 7323).
fn wscale_option(mut o: &[u8]) -> Option<u8> {
    while let Some(&kind) = o.first() {
        match kind {
            0 => return None,
            1 => o = &o[1..],
            _ => {
                let len = usize::from(*o.get(1)?);
                if len < 2 || len > o.len() {
                    return None;
                }
                if kind == 3 && len == 3 {
                    return Some(o[2].min(14));
                }
                o = &o[len..];
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_scale_option_is_found_and_capped() {
        assert_eq!(wscale_option(&[2, 4, 5, 0xb4, 1, 3, 3, 7]), Some(7));
        assert_eq!(wscale_option(&[1, 1, 3, 3, 20]), Some(14));
        assert_eq!(wscale_option(&[2, 4, 5, 0xb4]), None);
        assert_eq!(wscale_option(&[3, 0]), None, "bad length does not loop");
        assert_eq!(wscale_option(&[3, 9, 1]), None, "overlong option");
    }
}
