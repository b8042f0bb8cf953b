//! Connection keys: the direction-symmetric (zone, 5-tuple) under which a connection is stored.
//!
//! A packet's [`Tuple`] is directional (source → destination). Its [`Key`] orders the two
//! endpoints (address, port) so that both directions of a flow give the *same* key; the
//! `src_is_lo` flag returned by [`Key::new`] says which endpoint sent the packet. A connection
//! remembers whether its originator was the low endpoint, so a lookup learns the packet's
//! direction with one comparison.
//!
//! ICMP/ICMPv6 echo is keyed by identifier: a request from A to B is the tuple
//! `(A, id) → (B, 0)` and the reply from B to A is `(B, 0) → (A, id)`, which is the same key.
//!
//! Layout: five `u64` words (low address, high address, then ports, zone, protocol and
//! family packed in one word), compared with one slice equality and hashed with three folded
//! multiplies (two for IPv4) and a per-table seed (so chains cannot be aimed at from the wire).
//!
//! Threads: plain values, no shared state.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

/// A directional L3/L4 tuple as seen in one packet. IPv4 addresses live in the low 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Tuple {
    /// Source address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Source port (ICMP echo request: the identifier; echo reply: 0).
    pub sport: u16,
    /// Destination port (ICMP echo request: 0; echo reply: the identifier).
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
    /// IPv6 (else IPv4).
    pub v6: bool,
}

impl Tuple {
    /// The same flow seen from the other side.
    pub fn reversed(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// The source address.
    pub fn src_ip(&self) -> IpAddr {
        addr(self.src, self.v6)
    }

    /// The destination address.
    pub fn dst_ip(&self) -> IpAddr {
        addr(self.dst, self.v6)
    }

    /// An IPv4 tuple.
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, sport: u16, dport: u16) -> Tuple {
        Tuple {
            src: u128::from(u32::from(src)),
            dst: u128::from(u32::from(dst)),
            sport,
            dport,
            proto,
            v6: false,
        }
    }

    /// An IPv6 tuple.
    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, sport: u16, dport: u16) -> Tuple {
        Tuple {
            src: u128::from(src),
            dst: u128::from(dst),
            sport,
            dport,
            proto,
            v6: true,
        }
    }
}

fn addr(a: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(a))
    } else {
        IpAddr::V4(Ipv4Addr::from(a as u32))
    }
}

/// The symmetric table key: (zone, ordered endpoints, protocol, family).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Key {
    w: [u64; 5],
}

impl PartialEq for Key {
    /// Word by word, without a branch or a `memcmp` call (the derived comparison of the
    /// array calls `memcmp`, a measurable share of a lookup).
    #[inline(always)]
    fn eq(&self, o: &Key) -> bool {
        let (a, b) = (&self.w, &o.w);
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.w.hash(h);
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:x?})", self.w)
    }
}

const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
const K3: u64 = 0x1656_67b1_9e37_79f9;
const K4: u64 = 0x85eb_ca77_c2b2_ae63;

#[inline(always)]
fn folded_mul(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

impl Key {
    /// The key of `t` in `zone`, and whether the packet's source is the key's low endpoint.
    #[inline(always)]
    pub fn new(t: &Tuple, zone: u16) -> (Key, bool) {
        if !t.v6 && (t.src | t.dst) >> 32 == 0 {
            // IPv4 (the check folds away when the tuple was just built from 32-bit
            // addresses): the same key and order as below, with 64-bit compares only.
            return Key::new_v4(t.src as u32, t.dst as u32, t.sport, t.dport, t.proto, zone);
        }
        let src_lo = (t.src, t.sport) <= (t.dst, t.dport);
        let (la, lp, ha, hp) = if src_lo {
            (t.src, t.sport, t.dst, t.dport)
        } else {
            (t.dst, t.dport, t.src, t.sport)
        };
        let w4 = (u64::from(lp) << 48)
            | (u64::from(hp) << 32)
            | (u64::from(zone) << 16)
            | (u64::from(t.proto) << 8)
            | u64::from(t.v6);
        (
            Key {
                w: [(la >> 64) as u64, la as u64, (ha >> 64) as u64, ha as u64, w4],
            },
            src_lo,
        )
    }

    /// The key of an IPv4 packet `src:sport -> dst:dport` of protocol `proto` in `zone`, and
    /// whether the source is the low endpoint; equal to [`Key::new`] of the same tuple.
    #[inline(always)]
    pub fn new_v4(src: u32, dst: u32, sport: u16, dport: u16, proto: u8, zone: u16) -> (Key, bool) {
        // (address, port) as one number orders like the (address, port) pair.
        let s = (u64::from(src) << 16) | u64::from(sport);
        let d = (u64::from(dst) << 16) | u64::from(dport);
        let src_lo = s <= d;
        let (lo, hi) = if src_lo { (s, d) } else { (d, s) };
        let w4 = ((lo & 0xffff) << 48) | ((hi & 0xffff) << 32) | (u64::from(zone) << 16) | (u64::from(proto) << 8);
        (
            Key {
                w: [0, lo >> 16, 0, hi >> 16, w4],
            },
            src_lo,
        )
    }

    /// The key's five words.
    #[inline(always)]
    pub(crate) fn words(&self) -> [u64; 5] {
        self.w
    }

    /// The key of five words [`Key::words`] gave.
    #[inline(always)]
    pub(crate) fn from_words(w: [u64; 5]) -> Key {
        Key { w }
    }

    /// Sets the zone of a key built in zone 0.
    #[inline(always)]
    pub(crate) fn set_zone(&mut self, zone: u16) {
        self.w[4] |= u64::from(zone) << 16;
    }

    /// The zone.
    #[inline]
    pub fn zone(&self) -> u16 {
        (self.w[4] >> 16) as u16
    }

    /// The IP protocol.
    #[inline]
    pub fn proto(&self) -> u8 {
        (self.w[4] >> 8) as u8
    }

    /// Rebuilds the tuple sent by the low endpoint (`lo_sends`) or by the high one.
    pub fn tuple(&self, lo_sends: bool) -> Tuple {
        let lo = (u128::from(self.w[0]) << 64) | u128::from(self.w[1]);
        let hi = (u128::from(self.w[2]) << 64) | u128::from(self.w[3]);
        let lp = (self.w[4] >> 48) as u16;
        let hp = (self.w[4] >> 32) as u16;
        let t = Tuple {
            src: lo,
            dst: hi,
            sport: lp,
            dport: hp,
            proto: self.proto(),
            v6: self.w[4] & 1 == 1,
        };
        if lo_sends {
            t
        } else {
            t.reversed()
        }
    }

    /// An IPv4 key's tuple sent by the low endpoint (`lo_sends`) or the high one, as
    /// words: its source and destination addresses, and its ports (`source << 16 |
    /// destination`).
    #[inline(always)]
    pub fn v4_words(&self, lo_sends: bool) -> ([u32; 2], u32) {
        let (lo, hi) = (self.w[1] as u32, self.w[3] as u32);
        let ports = (self.w[4] >> 32) as u32;
        if lo_sends {
            ([lo, hi], ports)
        } else {
            ([hi, lo], ports.rotate_left(16))
        }
    }

    /// Whether this is an IPv6 key.
    #[inline(always)]
    pub fn is_v6(&self) -> bool {
        self.w[4] & 1 == 1
    }

    /// Seeded hash of the key (three folded multiplies; two for IPv4, whose high address
    /// words are zero).
    #[inline(always)]
    pub fn hash(&self, seed: u64) -> u64 {
        let a = folded_mul(self.w[1] ^ seed, self.w[3] ^ K1);
        if self.w[4] & 1 == 0 {
            return folded_mul(a ^ K2, self.w[4] ^ K4);
        }
        let b = folded_mul(self.w[0] ^ K2, self.w[2] ^ K3 ^ seed.rotate_left(29));
        folded_mul(a ^ b.rotate_left(23), self.w[4] ^ K4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions_share_a_key_and_know_their_side() {
        let t = Tuple::v4(Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1), 6, 1000, 80);
        let (k1, lo1) = Key::new(&t, 3);
        let (k2, lo2) = Key::new(&t.reversed(), 3);
        assert_eq!(k1, k2);
        assert_ne!(lo1, lo2);
        assert_eq!(k1.tuple(lo1), t);
        assert_eq!(k1.tuple(lo2), t.reversed());
        assert_eq!(k1.zone(), 3);
        assert_eq!(k1.proto(), 6);
        assert_eq!(k1.hash(7), k2.hash(7));
        assert_eq!(k1.v4_words(lo1), ([0x0a00_0002, 0x0a00_0001], 1000 << 16 | 80));
        assert_eq!(k1.v4_words(lo2), ([0x0a00_0001, 0x0a00_0002], 80 << 16 | 1000));
        assert!(!k1.is_v6());
        let (k3, _) = Key::new(&t, 4);
        assert_ne!(k1, k3, "zones are part of the key");
    }

    #[test]
    fn v4_key_matches_the_general_construction() {
        let addrs = [0u32, 1, 0x0a00_0001, 0x0a00_0002, 0xffff_ffff];
        let ports = [0u16, 1, 80, 0xffff];
        for &a in &addrs {
            for &b in &addrs {
                for &p in &ports {
                    for &q in &ports {
                        let t = Tuple::v4(Ipv4Addr::from(a), Ipv4Addr::from(b), 17, p, q);
                        let lo = (t.src, t.sport) <= (t.dst, t.dport);
                        let (la, lp, ha, hp) = if lo { (t.src, p, t.dst, q) } else { (t.dst, q, t.src, p) };
                        let w4 = (u64::from(lp) << 48) | (u64::from(hp) << 32) | (9 << 16) | (17 << 8);
                        let want = Key {
                            w: [0, la as u64, 0, ha as u64, w4],
                        };
                        assert_eq!(Key::new(&t, 9), (want, lo));
                        assert_eq!(Key::new_v4(a, b, p, q, 17, 9), (want, lo));
                    }
                }
            }
        }
    }

    #[test]
    fn v6_and_v4_differ() {
        let t4 = Tuple::v4(Ipv4Addr::new(0, 0, 0, 1), Ipv4Addr::new(0, 0, 0, 2), 17, 1, 2);
        let t6 = Tuple::v6(Ipv6Addr::from(1u128), Ipv6Addr::from(2u128), 17, 1, 2);
        assert_ne!(Key::new(&t4, 0).0, Key::new(&t6, 0).0);
        assert_eq!(Key::new(&t6, 0).0.tuple(true), t6);
    }
}
