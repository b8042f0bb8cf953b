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
//! An IPv4 translated connection keeps its rewrite with the checksum changes of each half
//! computed once ([`Rewrite4`], [`rewrite4`]), its words as the headers hold them: a
//! packet's rewrite compares, adds one change per checksum and stores, without a tuple or a
//! plan built per packet and without swapping bytes. It is applied in halves ([`Half`]): the
//! destination at prerouting, the source at postrouting.
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

/// The fixed-size view of the IPv4 header at `l3` of `f`, when a transport header of `N` bytes
/// lies whole after it at `l4` (as parsing makes it), before the datagram's end; `None`
/// otherwise. The one bounds check of the fast rewrites.
#[inline(always)]
fn ipv4_view<const N: usize>(f: &mut [u8], l3: usize, l4: usize) -> Option<&mut [u8; 20]> {
    let len = f.len();
    let ip: &mut [u8; 20] = f.get_mut(l3..)?.first_chunk_mut()?;
    let end = (l3 + usize::from(u16::from_be_bytes([ip[2], ip[3]]))).min(len);
    if l4 < l3 + 20 || l4 > end || end - l4 < N {
        return None;
    }
    Some(ip)
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
    let ip = ipv4_view::<N>(f, l3, l4)?;
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

/// A value of the packet's bytes as they lie in the header (the 4 bytes at `at` of `b`
/// loaded in the machine's byte order): the form [`Rewrite4`] keeps its words in.
#[inline(always)]
fn wire32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// [`wire32`] of 2 bytes.
#[inline(always)]
fn wire16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// The header form ([`wire32`]) of the number `x`.
#[inline(always)]
fn to_wire32(x: u32) -> u32 {
    u32::from_ne_bytes(x.to_be_bytes())
}

/// The number a header holds as `w` ([`wire32`]).
#[inline(always)]
fn of_wire32(w: u32) -> u32 {
    u32::from_be_bytes(w.to_ne_bytes())
}

/// The source port of a ports word in header form (`source, destination` as the transport
/// header holds them): its first two bytes.
const SPORT: u32 = u32::from_ne_bytes([0xff, 0xff, 0, 0]);
/// The destination port of a ports word in header form: its last two bytes.
const DPORT: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

/// The one's complement sum of `a` and `b` (the carry out of the top added back in): zero
/// only when both are zero. A checksum changed by `d` is `!oc_add(!c, d)` (RFC 1624).
#[inline(always)]
fn oc_add(a: u16, b: u16) -> u16 {
    let (s, carry) = a.overflowing_add(b);
    s + u16::from(carry)
}

/// A sum of a few 16-bit words (`!old + new` of each changed word) as a checksum change:
/// folded to 16 bits, with zero written `0xffff` (the "negative zero" that the general
/// update, RFC 1624 `~m + m'`, adds for an unchanged word), so that equal changes have equal
/// values and the change back is its complement ([`neg_delta`]). A sum is the same whichever
/// byte order its words are in (RFC 1071), so header-form words ([`wire32`]) give the change
/// in header form.
#[inline]
fn fold_delta(s: u32) -> u16 {
    let s = (s & 0xffff) + (s >> 16);
    let s = ((s & 0xffff) + (s >> 16)) as u16;
    if s == 0 {
        0xffff
    } else {
        s
    }
}

/// The change that undoes the change `d` of [`fold_delta`] (its one's complement negative, in
/// the same form: zero is `0xffff`).
#[inline(always)]
fn neg_delta(d: u16) -> u16 {
    if d == 0xffff {
        0xffff
    } else {
        !d
    }
}

/// Which half of a translation a rewrite applies: the datapath rewrites the destination at
/// prerouting (before the route lookup) and the source at postrouting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    /// The source address and port, of a packet whose destination half is done.
    Src,
    /// The destination address and port.
    Dst,
    /// Both at once.
    Both,
}

/// How an IPv4 packet of a translated connection is rewritten, with the checksum changes of
/// each half computed once, when the connection was created (the table keeps them on the
/// connection's hot line): the rewrite of a packet is then a few loads, comparisons, one
/// one's complement addition per checksum, and stores.
///
/// Its words are kept as the headers hold them ([`Rewrite4::to_bytes`] gives them in that
/// order), so that the rewrite compares and stores them without swapping bytes; the checksum
/// changes too, since a one's complement sum is the same in either byte order (RFC 1071).
/// A packet is rewritten only when it carries the addresses and the ports (an ICMP echo: its
/// identifier) that the half starts from: the changes are those of that tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewrite4 {
    /// The source and destination addresses the packet carries.
    from: [u32; 2],
    /// Its ports (source, destination; an ICMP echo's identifier is one of them, the other
    /// zero, as in [`Tuple`]).
    from_ports: u32,
    /// The source and destination addresses it must carry.
    to: [u32; 2],
    /// The ports it must carry.
    to_ports: u32,
    /// The changes ([`fold_delta`]) of the IP header checksum by the source half and by the
    /// destination half, then of the transport checksum by each (TCP, UDP: the address, in
    /// the pseudo header, and the port; an ICMP echo: the identifier).
    delta: [u16; 4],
    /// The IP protocol.
    proto: u8,
}

/// Both ports of `t` in one word, source high.
#[inline(always)]
pub fn ports_word(t: &Tuple) -> u32 {
    u32::from(t.sport) << 16 | u32::from(t.dport)
}

impl Rewrite4 {
    /// Bytes of [`Rewrite4::to_bytes`].
    pub const LEN: usize = 33;

    /// The rewrite of an IPv4 tuple `from` to `to` (`None` for IPv6), with its changes
    /// computed here.
    #[inline]
    pub fn new(from: &Tuple, to: &Tuple) -> Option<Rewrite4> {
        if from.v6 || to.v6 {
            return None;
        }
        Some(Rewrite4::of_words(
            [from.src as u32, from.dst as u32],
            ports_word(from),
            [to.src as u32, to.dst as u32],
            ports_word(to),
            from.proto,
        ))
    }

    /// [`Rewrite4::new`] of the tuples given as numbers: addresses (source, destination)
    /// and ports (`source << 16 | destination`), and the protocol.
    #[inline]
    pub(crate) fn of_words(from: [u32; 2], from_ports: u32, to: [u32; 2], to_ports: u32, proto: u8) -> Rewrite4 {
        let (f, t) = (
            [to_wire32(from[0]), to_wire32(from[1])],
            [to_wire32(to[0]), to_wire32(to[1])],
        );
        let (fp, tp) = (to_wire32(from_ports), to_wire32(to_ports));
        // The ports after the destination half.
        let mid = (fp & SPORT) | (tp & DPORT);
        // Each half's changes: of its address, and of its port (an echo: the identifier).
        let (a_src, a_dst) = (words(!f[0]) + words(t[0]), words(!f[1]) + words(t[1]));
        let (p_src, p_dst, a) = if proto == IPPROTO_ICMP {
            // An echo's identifier: one of the ports, the other zero. ICMPv4's checksum has
            // no pseudo header: no address in it.
            let id = |p: u32| echo_id(p);
            (
                u32::from(!id(mid)) + u32::from(id(tp)),
                u32::from(!id(fp)) + u32::from(id(mid)),
                0,
            )
        } else {
            (words(!mid) + words(tp), words(!fp) + words(mid), 1)
        };
        Rewrite4 {
            from: f,
            from_ports: fp,
            to: t,
            to_ports: tp,
            delta: [
                fold_delta(a_src),
                fold_delta(a_dst),
                fold_delta(a * a_src + p_src),
                fold_delta(a * a_dst + p_dst),
            ],
            proto,
        }
    }

    /// The rewrite of the other direction (a reply to a packet this rewrites): from the
    /// reverse of `to` to the reverse of `from`, each half's changes those of the other half
    /// negated (the reply's destination half undoes this one's source half).
    #[inline(always)]
    pub fn reversed(&self) -> Rewrite4 {
        let d = self.delta;
        Rewrite4 {
            from: [self.to[1], self.to[0]],
            from_ports: self.to_ports.rotate_left(16),
            to: [self.from[1], self.from[0]],
            to_ports: self.from_ports.rotate_left(16),
            delta: [neg_delta(d[1]), neg_delta(d[0]), neg_delta(d[3]), neg_delta(d[2])],
            proto: self.proto,
        }
    }

    /// The ports a packet carries between the halves (its destination half done).
    #[inline(always)]
    fn mid_ports(&self) -> u32 {
        (self.from_ports & SPORT) | (self.to_ports & DPORT)
    }

    /// The IP protocol.
    #[inline(always)]
    pub fn proto(&self) -> u8 {
        self.proto
    }

    /// The tuple the packet carries before and after `half` of the rewrite.
    pub fn tuples(&self, half: Half) -> (Tuple, Tuple) {
        let t = |a: [u32; 2], p: u32| {
            let p = of_wire32(p);
            Tuple {
                src: u128::from(of_wire32(a[0])),
                dst: u128::from(of_wire32(a[1])),
                sport: (p >> 16) as u16,
                dport: p as u16,
                proto: self.proto,
                v6: false,
            }
        };
        let (from, to) = (t(self.from, self.from_ports), t(self.to, self.to_ports));
        let mid = Tuple {
            dst: to.dst,
            dport: to.dport,
            ..from
        };
        match half {
            Half::Src => (mid, to),
            Half::Dst => (from, mid),
            Half::Both => (from, to),
        }
    }

    /// Whether `half` changes anything.
    #[inline(always)]
    pub fn changes(&self, half: Half) -> bool {
        let ports = self.from_ports ^ self.to_ports;
        let src = self.from[0] != self.to[0] || ports & SPORT != 0;
        let dst = self.from[1] != self.to[1] || ports & DPORT != 0;
        match half {
            Half::Src => src,
            Half::Dst => dst,
            Half::Both => src || dst,
        }
    }

    /// The rewrite as bytes (to be kept in a buffer, [`Rewrite4::from_bytes`]).
    pub fn to_bytes(&self) -> [u8; Rewrite4::LEN] {
        let mut b = [0u8; Rewrite4::LEN];
        let words = [
            self.from[0],
            self.from[1],
            self.from_ports,
            self.to[0],
            self.to[1],
            self.to_ports,
        ];
        for (i, w) in words.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
        }
        for (i, d) in self.delta.iter().enumerate() {
            b[24 + 2 * i..26 + 2 * i].copy_from_slice(&d.to_ne_bytes());
        }
        b[32] = self.proto;
        b
    }

    /// The rewrite [`Rewrite4::to_bytes`] gave `b` of. (Any bytes make a rewrite: one not
    /// made by `to_bytes` rewrites wrongly, but only packets carrying its tuple.)
    pub fn from_bytes(b: &[u8; Rewrite4::LEN]) -> Rewrite4 {
        let w = |i: usize| wire32(b, 4 * i);
        let d = |i: usize| wire16(b, 24 + 2 * i);
        Rewrite4 {
            from: [w(0), w(1)],
            from_ports: w(2),
            to: [w(3), w(4)],
            to_ports: w(5),
            delta: [d(0), d(1), d(2), d(3)],
            proto: b[32],
        }
    }

    /// What a connection's primary keeps of the rewrite of its original direction (whose
    /// untranslated tuple its key gives): the translated tuple and the changes.
    #[inline(always)]
    pub(crate) fn stored(&self) -> Stored4 {
        Stored4 {
            to: [self.to[0], self.to[1], self.to_ports],
            delta: self.delta,
        }
    }

    /// The rewrite of `s` (a primary's, [`Rewrite4::stored`]) for the untranslated tuple of
    /// addresses `from` and ports `from_ports` (numbers, as [`Rewrite4::of_words`] takes
    /// them) and protocol `proto`.
    #[inline(always)]
    pub(crate) fn of_stored(from: [u32; 2], from_ports: u32, s: &Stored4, proto: u8) -> Rewrite4 {
        Rewrite4 {
            from: [to_wire32(from[0]), to_wire32(from[1])],
            from_ports: to_wire32(from_ports),
            to: [s.to[0], s.to[1]],
            to_ports: s.to[2],
            delta: s.delta,
            proto,
        }
    }
}

/// An echo's identifier from a ports word in header form (one port is the identifier, the
/// other zero).
#[inline(always)]
fn echo_id(p: u32) -> u16 {
    (p >> 16) as u16 | p as u16
}

/// What a translated IPv4 connection's primary keeps of its original direction's
/// [`Rewrite4`] (all but the untranslated tuple, which its key holds): 20 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stored4 {
    /// The translated addresses and ports, as [`Rewrite4`] keeps them.
    to: [u32; 3],
    /// [`Rewrite4`]'s changes.
    delta: [u16; 4],
}

/// Applies `half` of `rw` to the IPv4 packet at `l3` (transport header at `l4`) of `f`:
/// what [`rewrite`] of [`Rewrite4::tuples`] does, with the stored changes. `false`, and
/// nothing changed, if the packet does not carry the tuple `half` starts from (its addresses
/// and ports, an ICMP echo's identifier) or is too short.
///
/// The fixed-size rewrite of TCP, UDP and ICMP echo is always inlined (a call site beside
/// another in the same function no longer takes it out of line); anything else goes to the
/// tuples' rewrite, out of line.
#[inline(always)]
pub fn rewrite4(f: &mut [u8], l3: usize, l4: usize, rw: &Rewrite4, half: Half) -> bool {
    if let Some(done) = rewrite4_fast(f, l3, l4, rw, half) {
        return done;
    }
    rewrite4_tuples(f, l3, l4, rw, half)
}

/// [`rewrite4`] by [`rewrite`] of [`Rewrite4::tuples`], after the same test of the ports.
#[cold]
#[inline(never)]
fn rewrite4_tuples(f: &mut [u8], l3: usize, l4: usize, rw: &Rewrite4, half: Half) -> bool {
    let (from, to) = rw.tuples(half);
    let ports = l4.checked_add(4).and_then(|e| f.get(l4..e));
    if matches!(rw.proto, IPPROTO_TCP | IPPROTO_UDP)
        && ports.is_some_and(|p| wire32(p, 0) != to_wire32(ports_word(&from)))
    {
        return false;
    }
    rewrite(f, l3, l4, rw.proto, &from, &to)
}

/// The fixed-size views of the IPv4 header at `l3` of `f` and of the `N` bytes of the
/// transport header at `l4`, when both lie whole in `f` and the transport bytes in the
/// datagram (its length field) after a header of 20 bytes or more; `None` otherwise. The one
/// bounds check of the stored-change rewrite.
#[inline(always)]
fn ipv4_views<const N: usize>(f: &mut [u8], l3: usize, l4: usize) -> Option<(&mut [u8; 20], &mut [u8; N])> {
    let hl = l4.checked_sub(l3)?;
    if hl < 20 {
        return None;
    }
    let s = f.get_mut(l3..l4.checked_add(N)?)?;
    let (ip, t) = s.split_at_mut(hl);
    let ip: &mut [u8; 20] = ip.first_chunk_mut()?;
    let t: &mut [u8; N] = t.first_chunk_mut()?;
    if usize::from(u16::from_be_bytes([ip[2], ip[3]])) < hl + N {
        return None;
    }
    Some((ip, t))
}

/// [`rewrite4`] on a fixed-size view of the IPv4 header and of the transport header for
/// TCP (`N` = 18: its header up to the checksum), UDP (`N` = 8) and ICMP (`N` = 8: an echo's
/// header), whole after a 20-byte IP header or more; `None` for anything else (the general
/// code handles it). The same checksums as [`rewrite_packet`].
#[inline(always)]
fn rewrite4_fast(f: &mut [u8], l3: usize, l4: usize, rw: &Rewrite4, half: Half) -> Option<bool> {
    match rw.proto {
        IPPROTO_TCP => rewrite4_l4::<18, IPPROTO_TCP>(f, l3, l4, rw, half),
        IPPROTO_UDP => rewrite4_l4::<8, IPPROTO_UDP>(f, l3, l4, rw, half),
        IPPROTO_ICMP => rewrite4_l4::<8, IPPROTO_ICMP>(f, l3, l4, rw, half),
        _ => None,
    }
}

/// [`rewrite4_fast`] for one header size `N` and protocol `P`.
#[inline(always)]
fn rewrite4_l4<const N: usize, const P: u8>(
    f: &mut [u8],
    l3: usize,
    l4: usize,
    rw: &Rewrite4,
    half: Half,
) -> Option<bool> {
    let (src, dst) = match half {
        Half::Src => (true, false),
        Half::Dst => (false, true),
        Half::Both => (true, true),
    };
    let (ip, t) = ipv4_views::<N>(f, l3, l4)?;
    // The tuple this half starts from (the destination half is done first) and ends with.
    let (dst_before, ports_before) = if dst {
        (rw.from[1], rw.from_ports)
    } else {
        (rw.to[1], rw.mid_ports())
    };
    let ports_after = if src { rw.to_ports } else { rw.mid_ports() };
    let d = rw.delta;
    let (ip_d, l4_d) = match half {
        Half::Src => (d[0], d[2]),
        Half::Dst => (d[1], d[3]),
        Half::Both => (oc_add(d[0], d[1]), oc_add(d[2], d[3])),
    };
    let icmp = P == IPPROTO_ICMP;
    // The packet must carry it: a stale plan (or a forged packet) changes nothing.
    let ports_ok = if icmp {
        wire16(t, 4) == echo_id(ports_before)
    } else {
        wire32(t, 0) == ports_before
    };
    if wire32(ip, 12) != rw.from[0] || wire32(ip, 16) != dst_before || !ports_ok {
        return Some(false);
    }
    let c = wire16(ip, 10);
    ip[10..12].copy_from_slice(&(!oc_add(!c, ip_d)).to_ne_bytes());
    let ns = if src { rw.to[0] } else { rw.from[0] };
    ip[12..16].copy_from_slice(&ns.to_ne_bytes());
    ip[16..20].copy_from_slice(&rw.to[1].to_ne_bytes());
    if icmp {
        // An echo's identifier; ICMPv4's checksum has no pseudo header.
        let c = wire16(t, 2);
        t[2..4].copy_from_slice(&(!oc_add(!c, l4_d)).to_ne_bytes());
        t[4..6].copy_from_slice(&echo_id(ports_after).to_ne_bytes());
        return Some(true);
    }
    let udp = P == IPPROTO_UDP;
    let c = wire16(t, N - 2);
    if !(udp && c == 0) {
        let mut nc = !oc_add(!c, l4_d);
        if udp && nc == 0 {
            nc = 0xffff;
        }
        t[N - 2..].copy_from_slice(&nc.to_ne_bytes());
    }
    t[0..4].copy_from_slice(&ports_after.to_ne_bytes());
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

        /// [`rewrite4`], with changes computed once ([`Rewrite4::new`], and the reverse
        /// direction's from [`Rewrite4::reversed`]), writes for each half exactly the bytes
        /// the general code writes for that half's tuples, and refuses what it refuses.
        #[test]
        fn rewrite4_writes_what_the_general_code_writes(
            kind in 0u8..4, a in any::<u32>(), b in any::<u32>(), sp in any::<u16>(), dp in any::<u16>(),
            len in 0usize..40, zero in any::<bool>(), to in any::<(u32, u32, u16, u16)>(),
            half in 0u8..3, reverse in any::<bool>(), stale in 0u8..3,
        ) {
            let (ia, ib) = (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)));
            let p = match kind {
                0 | 1 => v4_packet(kind == 0, a, b, sp, dp, len, zero),
                2 => frames::echo(ia, ib, sp, dp, true),
                _ => frames::echo(ia, ib, sp, dp, false),
            };
            let Class::Track(from, _) = classify(p.data(), &p.meta, false) else {
                panic!("a tracked packet");
            };
            // An echo's tuple holds its identifier in one port and zero in the other.
            let (tsp, tdp) = match (kind, from.sport) {
                (0 | 1, _) => (to.2, to.3),
                (_, 0) => (0, to.3),
                _ => (to.2, 0),
            };
            let to = Tuple { src: u128::from(to.0), dst: u128::from(to.1), sport: tsp, dport: tdp, ..from };
            // The reverse direction's rewrite, from the rewrite of the other way.
            let rw = if reverse {
                Rewrite4::new(&to.reversed(), &from.reversed()).map(|r| r.reversed())
            } else {
                Rewrite4::new(&from, &to)
            };
            let mut rw = rw.expect("IPv4");
            prop_assert_eq!(Some(rw), Rewrite4::new(&from, &to));
            let half = [Half::Dst, Half::Src, Half::Both][usize::from(half)];
            let (mut hf, ht) = rw.tuples(half);
            // The packet as this half finds it.
            let (l3, l4, proto) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off), p.meta.ip_proto);
            let mut x = p.data().to_vec();
            prop_assert!(rewrite(&mut x, l3, l4, proto, &from, &hf));
            // Stale: the packet does not carry the address (1) or the port (2) the half
            // starts from.
            if stale == 1 {
                rw.from[0] ^= 1;
                hf.src ^= 1;
            }
            let mut y = x.clone();
            if stale == 2 {
                // The general code does not read the ports it starts from; the stored
                // changes are for them, so the packet is refused.
                let at = if kind >= 2 { l4 + 4 } else { l4 };
                x[at] ^= 0x80;
                let before = x.clone();
                prop_assert!(!rewrite4(&mut x, l3, l4, &rw, half));
                prop_assert_eq!(x, before);
                return Ok(());
            }
            let fast = rewrite4(&mut x, l3, l4, &rw, half);
            let end = ip_end(&y, l3, false).expect("an IP header");
            let general = rewrite_packet(&mut y, l3, l4, end, proto, &hf, &ht);
            prop_assert_eq!(fast, general);
            prop_assert_eq!(fast, stale == 0);
            prop_assert_eq!(x, y);
        }

        /// A rewrite kept as bytes ([`Rewrite4::to_bytes`]) comes back as it was, and the
        /// primary's stored part with the untranslated tuple gives it whole.
        #[test]
        fn rewrite4_survives_its_bytes_and_its_stored_form(
            f in any::<(u32, u32, u16, u16)>(), t in any::<(u32, u32, u16, u16)>(), proto in prop::sample::select(vec![1u8, 6, 17, 47]),
        ) {
            let from = Tuple { src: u128::from(f.0), dst: u128::from(f.1), sport: f.2, dport: f.3, proto, v6: false };
            let to = Tuple { src: u128::from(t.0), dst: u128::from(t.1), sport: t.2, dport: t.3, ..from };
            let rw = Rewrite4::new(&from, &to).expect("IPv4");
            prop_assert_eq!(Rewrite4::from_bytes(&rw.to_bytes()), rw);
            let again = Rewrite4::of_stored([f.0, f.1], ports_word(&from), &rw.stored(), proto);
            prop_assert_eq!(again, rw);
            prop_assert_eq!(rw.tuples(Half::Both), (from, to));
            prop_assert_eq!(rw.reversed().reversed(), rw);
        }
    }
}
