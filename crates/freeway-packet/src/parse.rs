//! The fast-path parser: one pass over the headers of a received frame that fills the parser's
//! fields of [`Meta`] (VLAN, ethertype, L3/L4 offsets, IP protocol, flow hash) or returns the
//! reason to drop it.
//!
//! It reads bytes directly (every read after an explicit bounds check) rather than going
//! through the smoltcp views of [`crate::wire`]: its budget is a few nanoseconds per packet.
//!
//! What it guarantees on `Ok`:
//! - the Ethernet header and up to [`MAX_VLAN_DEPTH`] tags (0x8100/0x88a8) are present;
//!   `vlan` is the outer VID (or [`NO_VLAN`]), `ethertype` the innermost ethertype;
//! - IPv4: version 4, IHL >= 5, `IHL*4 <= total length <= frame` (trailing Ethernet padding is
//!   allowed); IPv6: version 6, `40 + payload length <= frame`, extension headers
//!   (hop-by-hop, routing, destination options, fragment, AH; at most
//!   [`MAX_IPV6_EXT_HEADERS`]) inside the payload; `l3_off` points at the IP header;
//! - when `l4_off` is set, the L4 header lies inside the IP payload: TCP has its full header
//!   (data offset >= 5 included), UDP 8 bytes, ICMP/ICMPv6 8 bytes, SCTP 12 bytes; other
//!   protocols at least one byte. IPv4 non-first fragments and IPv6 fragments with a non-zero
//!   offset have no L4 header (`l4_off` = [`NO_OFFSET`]); `ip_proto` is the protocol;
//! - ARP: `l3_off` points at a 28-byte ARP body (its fields are not validated);
//! - other ethertypes are not errors: no L3, `l3_off` = [`NO_OFFSET`];
//! - `flow_hash` is symmetric ([`crate::flow_hash`]): the 5-tuple for TCP/UDP/SCTP/UDP-Lite,
//!   addresses and protocol for every other IP packet *and for every fragment* (first or not,
//!   so all fragments of a datagram go to the same worker), the MAC pair for non-IP frames;
//! - `l3_off` and `l4_off`, when set, are `< frame length`.
//!
//! On `Err`, the parser's fields are reset to their defaults; `in_port` is never touched.
//!
//! Threads: pure function of the frame; no state.

use crate::bytes::{rd128, rd16, rd32};
use crate::flow_hash::{hash_5tuple_v4, hash_5tuple_v6, hash_pair, MAC_DISCRIMINATOR};
use crate::wire::{
    ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN, IPPROTO_ICMP, IPPROTO_ICMPV6,
    IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP,
};
use crate::{Meta, Packet, NO_OFFSET, NO_VLAN};

/// The largest accepted frame (no FCS): a 9216-byte jumbo payload + Ethernet header + two VLAN
/// tags. Larger frames are dropped as [`ParseError::Oversized`].
pub const MAX_FRAME: usize = 9216 + 14 + 8;
/// How many VLAN tags the parser walks through; one more is [`ParseError::VlanStack`].
pub const MAX_VLAN_DEPTH: u8 = 2;
/// How many IPv6 extension headers the parser walks through before giving up with
/// [`ParseError::BadIpv6ExtHeader`].
pub const MAX_IPV6_EXT_HEADERS: usize = 8;

const IPPROTO_UDPLITE: u8 = 136;
pub(crate) const IPV6_HOPOPTS: u8 = 0;
pub(crate) const IPV6_ROUTING: u8 = 43;
pub(crate) const IPV6_FRAGMENT: u8 = 44;
const IPV6_AH: u8 = 51;
const IPV6_NONXT: u8 = 59;
pub(crate) const IPV6_DSTOPTS: u8 = 60;

/// Why the parser dropped a frame. `e as usize` indexes per-reason counters; [`ParseError::ALL`]
/// lists the reasons in that order.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParseError {
    /// Shorter than an Ethernet header (14 bytes).
    Runt = 0,
    /// Longer than [`MAX_FRAME`].
    Oversized,
    /// An 802.3 frame (type/length field <= 1500) whose length field exceeds the frame.
    TruncatedEthernet,
    /// A VLAN TPID without the 4 bytes of tag (TCI + ethertype) behind it.
    TruncatedVlan,
    /// More than [`MAX_VLAN_DEPTH`] VLAN tags.
    VlanStack,
    /// ARP shorter than 28 bytes.
    TruncatedArp,
    /// IPv4 shorter than the 20-byte base header.
    TruncatedIpv4,
    /// IPv4 version is not 4 or IHL < 5.
    BadIpv4Header,
    /// IPv4 total length < IHL*4 or beyond the end of the frame.
    BadIpv4Length,
    /// IPv6 shorter than the 40-byte header.
    TruncatedIpv6,
    /// IPv6 version is not 6.
    BadIpv6Header,
    /// IPv6 payload length beyond the end of the frame.
    BadIpv6Length,
    /// An IPv6 extension header that overruns the payload, or too long a chain of them.
    BadIpv6ExtHeader,
    /// The L4 header (TCP 20, UDP 8, ICMP 8, SCTP 12 bytes) does not fit in the IP payload.
    TruncatedL4,
    /// TCP data offset < 5 or beyond the IP payload.
    BadTcpHeader,
}

impl ParseError {
    /// Every reason, in discriminant order (`ALL[e as usize] == e`).
    pub const ALL: [ParseError; 15] = [
        ParseError::Runt,
        ParseError::Oversized,
        ParseError::TruncatedEthernet,
        ParseError::TruncatedVlan,
        ParseError::VlanStack,
        ParseError::TruncatedArp,
        ParseError::TruncatedIpv4,
        ParseError::BadIpv4Header,
        ParseError::BadIpv4Length,
        ParseError::TruncatedIpv6,
        ParseError::BadIpv6Header,
        ParseError::BadIpv6Length,
        ParseError::BadIpv6ExtHeader,
        ParseError::TruncatedL4,
        ParseError::BadTcpHeader,
    ];

    /// A stable snake_case name for counters and logs.
    pub fn name(&self) -> &'static str {
        match self {
            ParseError::Runt => "runt",
            ParseError::Oversized => "oversized",
            ParseError::TruncatedEthernet => "truncated_ethernet",
            ParseError::TruncatedVlan => "truncated_vlan",
            ParseError::VlanStack => "vlan_stack_too_deep",
            ParseError::TruncatedArp => "truncated_arp",
            ParseError::TruncatedIpv4 => "truncated_ipv4",
            ParseError::BadIpv4Header => "bad_ipv4_header",
            ParseError::BadIpv4Length => "bad_ipv4_length",
            ParseError::TruncatedIpv6 => "truncated_ipv6",
            ParseError::BadIpv6Header => "bad_ipv6_header",
            ParseError::BadIpv6Length => "bad_ipv6_length",
            ParseError::BadIpv6ExtHeader => "bad_ipv6_ext_header",
            ParseError::TruncatedL4 => "truncated_l4",
            ParseError::BadTcpHeader => "bad_tcp_header",
        }
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for ParseError {}

#[inline(always)]
fn mac_key(b: &[u8], i: usize) -> u64 {
    (u64::from(rd16(b, i)) << 32) | u64::from(rd32(b, i + 2))
}

/// What the parser found; copied into [`Meta`] field by field (a whole-struct copy of a
/// partially written local costs a store-forwarding stall).
#[derive(Clone, Copy)]
struct Parsed {
    vlan: u16,
    ethertype: u16,
    l3_off: u16,
    l4_off: u16,
    ip_proto: u8,
    vlan_depth: u8,
    flow_hash: u32,
}

impl Parsed {
    #[inline(always)]
    fn store(self, meta: &mut Meta) {
        meta.vlan = self.vlan;
        meta.ethertype = self.ethertype;
        meta.l3_off = self.l3_off;
        meta.l4_off = self.l4_off;
        meta.ip_proto = self.ip_proto;
        meta.vlan_depth = self.vlan_depth;
        meta.flow_hash = self.flow_hash;
        meta.flags = crate::meta_flags::PARSED;
    }
}

/// Resets every field the parser owns (all but `in_port` and what the receiving port set:
/// `uncaptured`, `ts_ns`) after a drop (cold path).
#[cold]
fn clear(meta: &mut Meta) {
    let mut fresh = Meta::default();
    fresh.in_port = meta.in_port;
    fresh.ts_ns = meta.ts_ns;
    fresh.set_uncaptured(meta.uncaptured());
    *meta = fresh;
}

/// Parses `pkt` and fills its metadata (all fields but `in_port`, `uncaptured` and `ts_ns`). See the module docs for
/// what `Ok` guarantees.
#[inline(always)]
pub fn parse(pkt: &mut Packet) -> Result<(), ParseError> {
    parse_up_to(pkt, MAX_FRAME)
}

#[inline(always)]
fn parse_up_to(pkt: &mut Packet, max: usize) -> Result<(), ParseError> {
    match parse_inner(pkt.data(), max) {
        Ok(p) => {
            p.store(&mut pkt.meta);
            Ok(())
        }
        Err(e) => {
            clear(&mut pkt.meta);
            Err(e)
        }
    }
}

/// Parses `pkt` as [`parse`] does, without the [`MAX_FRAME`] bound: for a datagram that
/// was never on a wire whole (an IP datagram reassembled from fragments, up to a buffer's
/// [`crate::MAX_BUF_SIZE`] bytes). Same contract otherwise.
#[inline]
pub fn parse_reassembled(pkt: &mut Packet) -> Result<(), ParseError> {
    parse_up_to(pkt, usize::MAX)
}

/// Parses a frame held in a plain slice into `meta` (all fields but `in_port`, `uncaptured` and `ts_ns`), for callers
/// that have no [`Packet`]. Same contract as [`parse`].
#[inline]
pub fn parse_frame(f: &[u8], meta: &mut Meta) -> Result<(), ParseError> {
    match parse_inner(f, MAX_FRAME) {
        Ok(p) => {
            p.store(meta);
            Ok(())
        }
        Err(e) => {
            clear(meta);
            Err(e)
        }
    }
}

#[inline(always)]
fn is_tpid(et: u16) -> bool {
    et == ETHERTYPE_VLAN || et == ETHERTYPE_QINQ
}

#[inline(always)]
fn parse_inner(f: &[u8], max: usize) -> Result<Parsed, ParseError> {
    let len = f.len();
    if len < 14 {
        return Err(ParseError::Runt);
    }
    if len > max {
        return Err(ParseError::Oversized);
    }
    let mut et = rd16(f, 12);
    let mut off = 14usize;
    let mut vlan = NO_VLAN;
    let mut depth = 0u8;
    if is_tpid(et) {
        if len < 18 {
            return Err(ParseError::TruncatedVlan);
        }
        vlan = rd16(f, 14) & 0x0fff;
        et = rd16(f, 16);
        off = 18;
        depth = 1;
        if is_tpid(et) {
            if len < 22 {
                return Err(ParseError::TruncatedVlan);
            }
            et = rd16(f, 20);
            off = 22;
            depth = 2;
            if is_tpid(et) {
                return Err(ParseError::VlanStack);
            }
        }
    }
    let mut meta = Parsed {
        vlan,
        ethertype: et,
        l3_off: NO_OFFSET,
        l4_off: NO_OFFSET,
        ip_proto: 0,
        vlan_depth: depth,
        flow_hash: 0,
    };
    match et {
        ETHERTYPE_IPV4 => ipv4(f, off, meta),
        ETHERTYPE_IPV6 => ipv6(f, off, meta),
        ETHERTYPE_ARP => {
            if len < off + 28 {
                return Err(ParseError::TruncatedArp);
            }
            meta.l3_off = off as u16;
            meta.flow_hash = hash_pair(mac_key(f, 0), mac_key(f, 6), MAC_DISCRIMINATOR);
            Ok(meta)
        }
        _ => {
            if et <= 1500 && usize::from(et) > len - off {
                return Err(ParseError::TruncatedEthernet);
            }
            meta.flow_hash = hash_pair(mac_key(f, 0), mac_key(f, 6), MAC_DISCRIMINATOR);
            Ok(meta)
        }
    }
}

/// Checks the L4 header at `l4` (inside `..end`) and returns (l4_off, sport, dport).
#[inline(always)]
fn l4(f: &[u8], l4: usize, end: usize, proto: u8) -> Result<(u16, u16, u16), ParseError> {
    match proto {
        IPPROTO_TCP => {
            if l4 + 20 > end {
                return Err(ParseError::TruncatedL4);
            }
            let doff = usize::from(f[l4 + 12] >> 4) * 4;
            if doff < 20 || l4 + doff > end {
                return Err(ParseError::BadTcpHeader);
            }
            Ok((l4 as u16, rd16(f, l4), rd16(f, l4 + 2)))
        }
        IPPROTO_UDP | IPPROTO_UDPLITE => {
            if l4 + 8 > end {
                return Err(ParseError::TruncatedL4);
            }
            Ok((l4 as u16, rd16(f, l4), rd16(f, l4 + 2)))
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => {
            if l4 + 8 > end {
                return Err(ParseError::TruncatedL4);
            }
            Ok((l4 as u16, 0, 0))
        }
        IPPROTO_SCTP => {
            if l4 + 12 > end {
                return Err(ParseError::TruncatedL4);
            }
            Ok((l4 as u16, rd16(f, l4), rd16(f, l4 + 2)))
        }
        _ => Ok((if l4 < end { l4 as u16 } else { NO_OFFSET }, 0, 0)),
    }
}

#[inline(always)]
fn ipv4(f: &[u8], l3: usize, mut meta: Parsed) -> Result<Parsed, ParseError> {
    let len = f.len();
    if len < l3 + 20 {
        return Err(ParseError::TruncatedIpv4);
    }
    let vihl = f[l3];
    if vihl >> 4 != 4 || vihl & 0x0f < 5 {
        return Err(ParseError::BadIpv4Header);
    }
    let hl = usize::from(vihl & 0x0f) * 4;
    let tot = usize::from(rd16(f, l3 + 2));
    if tot < hl || l3 + tot > len {
        return Err(ParseError::BadIpv4Length);
    }
    let end = l3 + tot;
    let proto = f[l3 + 9];
    let frag = rd16(f, l3 + 6);
    let src = rd32(f, l3 + 12);
    let dst = rd32(f, l3 + 16);
    meta.l3_off = l3 as u16;
    meta.ip_proto = proto;
    if frag & 0x3fff == 0 {
        // Not a fragment: the common case.
        let (l4_off, sp, dp) = l4(f, l3 + hl, end, proto)?;
        meta.l4_off = l4_off;
        meta.flow_hash = hash_5tuple_v4(src.to_be_bytes(), dst.to_be_bytes(), proto, sp, dp);
    } else {
        if frag & 0x1fff == 0 {
            // First fragment: it carries the L4 header, but hash like the other fragments.
            meta.l4_off = l4(f, l3 + hl, end, proto)?.0;
        }
        meta.flow_hash = hash_5tuple_v4(src.to_be_bytes(), dst.to_be_bytes(), proto, 0, 0);
    }
    Ok(meta)
}

#[inline(always)]
fn ipv6(f: &[u8], l3: usize, mut meta: Parsed) -> Result<Parsed, ParseError> {
    let len = f.len();
    if len < l3 + 40 {
        return Err(ParseError::TruncatedIpv6);
    }
    if f[l3] >> 4 != 6 {
        return Err(ParseError::BadIpv6Header);
    }
    let end = l3 + 40 + usize::from(rd16(f, l3 + 4));
    if end > len {
        return Err(ParseError::BadIpv6Length);
    }
    let mut nh = f[l3 + 6];
    let mut off = l3 + 40;
    let mut fragment = false;
    let mut non_first = false;
    let mut n = 0;
    loop {
        let hlen = match nh {
            IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS => {
                if off + 8 > end {
                    return Err(ParseError::BadIpv6ExtHeader);
                }
                (usize::from(f[off + 1]) + 1) * 8
            }
            IPV6_AH => {
                if off + 8 > end {
                    return Err(ParseError::BadIpv6ExtHeader);
                }
                (usize::from(f[off + 1]) + 2) * 4
            }
            IPV6_FRAGMENT => {
                if off + 8 > end {
                    return Err(ParseError::BadIpv6ExtHeader);
                }
                fragment = true;
                non_first = rd16(f, off + 2) & 0xfff8 != 0;
                8
            }
            _ => break,
        };
        if off + hlen > end || n == MAX_IPV6_EXT_HEADERS {
            return Err(ParseError::BadIpv6ExtHeader);
        }
        n += 1;
        nh = f[off];
        off += hlen;
        if non_first {
            break;
        }
    }
    meta.l3_off = l3 as u16;
    meta.ip_proto = nh;
    let src = rd128(f, l3 + 8);
    let dst = rd128(f, l3 + 24);
    if fragment {
        if !non_first && nh != IPV6_NONXT {
            meta.l4_off = l4(f, off, end, nh)?.0;
        }
        meta.flow_hash = hash_5tuple_v6(src.to_be_bytes(), dst.to_be_bytes(), nh, 0, 0);
    } else {
        let (l4_off, sp, dp) = if nh == IPV6_NONXT {
            (NO_OFFSET, 0, 0)
        } else {
            l4(f, off, end, nh)?
        };
        meta.l4_off = l4_off;
        meta.flow_hash = hash_5tuple_v6(src.to_be_bytes(), dst.to_be_bytes(), nh, sp, dp);
    }
    Ok(meta)
}
