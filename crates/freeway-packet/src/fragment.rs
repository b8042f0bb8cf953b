//! Output fragmentation: IPv4 (RFC 791) and IPv6 (RFC 8200, for datagrams a router
//! reassembled and sends on again).
//!
//! [`fragment_v4`] splits an IPv4 packet whose IP packet is larger than an MTU into fragments
//! that fit it: every fragment but the last carries a multiple of 8 bytes of payload and MF;
//! the offsets continue from the packet's own (so a fragment can be fragmented again, and the
//! last piece keeps the packet's own MF); the first fragment keeps every IP option, the others
//! only the options whose *copied* flag (the type's top bit) is set; each header gets a fresh
//! checksum. A packet with DF set is refused ([`FragError::DontFragment`]): the caller answers
//! with ICMP "fragmentation needed".
//!
//! [`fragment_v6`] splits an IPv6 packet by inserting a Fragment header after its
//! unfragmentable part (the IPv6 header and the extension headers up to and including the
//! last Hop-by-Hop or Routing header). Routers never fragment IPv6 they forward; this is
//! for a datagram reassembled here (the identification is the caller's, normally the
//! original one).
//!
//! Both copy the frame's Ethernet header (and its VLAN tags) in front of every fragment, take
//! each fragment's buffer from a [`PacketPool`] and hand it to a callback, in offset order.
//! A fragment's IP packet fits both the MTU and the pool's buffers. Each fragment's [`Meta`]
//! is the original's (port, VLAN, flow hash, flags, timestamp), with `l4_off` found again (set
//! on the first fragment only). Every check is made before the first fragment is emitted:
//! an error emits nothing.
//!
//! These run on the slow path (a packet over its egress MTU), never on the forwarding fast
//! path; they never panic on any packet content.
//!
//! Threads: pure functions of their arguments; the pool and the callback are the caller's.

use crate::bytes::{rd16, wr16, wr32};
use crate::checksum::checksum;
use crate::parse::{parse_frame, IPV6_DSTOPTS, IPV6_FRAGMENT, IPV6_HOPOPTS, IPV6_ROUTING};
use crate::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::{meta_flags, Meta, Packet, PacketPool, NO_OFFSET};

/// The smallest MTU of an IPv4 link (RFC 791): a 60-byte header and 8 bytes of payload.
pub const IPV4_MIN_MTU: usize = 68;
/// The smallest MTU of an IPv6 link (RFC 8200).
pub const IPV6_MIN_MTU: usize = 1280;
/// IPv4 "don't fragment" flag, in the flags/fragment-offset word.
pub const IPV4_DF: u16 = 0x4000;
/// IPv4 "more fragments" flag, in the flags/fragment-offset word.
pub const IPV4_MF: u16 = 0x2000;
/// IPv4 fragment offset (in 8-byte units), in the flags/fragment-offset word.
pub const IPV4_OFFSET_MASK: u16 = 0x1fff;
/// The IPv6 Fragment header's next-header value.
pub const IPPROTO_FRAGMENT: u8 = IPV6_FRAGMENT;

/// Why a packet was not fragmented (nothing was emitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragError {
    /// The IPv4 packet has DF set: it must not be fragmented (answer with ICMP
    /// destination unreachable, fragmentation needed).
    DontFragment,
    /// The packet is not a parsed IP packet of the fragmenter's family (no `meta_flags::PARSED`,
    /// another ethertype, or no L3 header).
    NotIp,
    /// The header's lengths disagree with the frame, or the offsets would pass 65,535 bytes.
    Malformed,
    /// Fewer than 8 bytes of payload fit behind the headers within the MTU (or the pool's
    /// buffers).
    MtuTooSmall,
    /// The IPv6 packet already carries a Fragment header.
    AlreadyFragmented,
}

impl std::fmt::Display for FragError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FragError::DontFragment => "the packet has DF (don't fragment) set",
            FragError::NotIp => "not a parsed IP packet of this family",
            FragError::Malformed => "the IP header's lengths or offsets are malformed",
            FragError::MtuTooSmall => "the MTU leaves fewer than 8 bytes of payload per fragment",
            FragError::AlreadyFragmented => "the IPv6 packet already has a Fragment header",
        })
    }
}

impl std::error::Error for FragError {}

/// An IPv6 Fragment header's length.
const IPV6_FRAG_HEADER_LEN: usize = 8;
/// The largest IP datagram: fragment offsets plus payload stay below it.
const MAX_DATAGRAM: usize = 65_535;

/// A packet from `pool` holding a frame of `l2 + ip_len` bytes that starts with the first
/// `l2` bytes of `f` (the Ethernet header and tags); the IP part is for the caller to fill.
/// `ip_room` kept `l2 + ip_len` within the pool's buffers behind their headroom.
fn start_fragment(pool: &mut PacketPool, f: &[u8], l2: usize, ip_len: usize) -> Result<Packet, FragError> {
    let mut p = pool.get_for(l2 + ip_len);
    let Ok(out) = p.fill(l2 + ip_len) else {
        pool.put(p);
        return Err(FragError::MtuTooSmall);
    };
    out[..l2].copy_from_slice(&f[..l2]);
    Ok(p)
}

/// The frame and L3 offset of a parsed packet of ethertype `ethertype` ([`FragError::NotIp`]
/// otherwise) whose IP header has version `version` and at least `min` bytes
/// ([`FragError::Malformed`] otherwise).
fn ip_of(pkt: &Packet, ethertype: u16, version: u8, min: usize) -> Result<(&[u8], usize), FragError> {
    let m = &pkt.meta;
    let (flags, et, l3) = (m.flags, m.ethertype, m.l3_off);
    if flags & meta_flags::PARSED == 0 || et != ethertype || l3 == NO_OFFSET {
        return Err(FragError::NotIp);
    }
    let (f, l3) = (pkt.data(), usize::from(l3));
    if f.len() < l3 + min || f[l3] >> 4 != version {
        return Err(FragError::Malformed);
    }
    Ok((f, l3))
}

/// The room for an IP packet: the MTU, or less when the pool's buffers (its large ones, if
/// it has them) cannot hold the L2 header and `mtu` bytes behind their headroom.
fn ip_room(pool: &PacketPool, l2: usize, mtu: usize) -> usize {
    mtu.min(pool.max_frame().saturating_sub(l2))
}

/// Gives a fragment the original's metadata, with its L4 offset found again (the first
/// fragment has one, the others none) and `extra` flags set.
fn fragment_meta(p: &mut Packet, orig: &Meta, extra: u8) {
    let mut probe = Meta::default();
    let l4 = match parse_frame(p.data(), &mut probe) {
        Ok(()) => probe.l4_off,
        Err(_) => NO_OFFSET,
    };
    let mut m = *orig;
    m.l4_off = l4;
    m.flags = orig.flags | meta_flags::PARSED | extra;
    p.meta = m;
}

/// The IPv4 header `h` with only the options whose copied flag is set (RFC 791: what
/// fragments after the first carry), padded to 4 bytes; returns the buffer and its length.
fn copied_options_header(h: &[u8]) -> ([u8; 60], usize) {
    let mut out = [0u8; 60];
    out[..20].copy_from_slice(&h[..20]);
    let mut n = 20;
    let mut i = 20;
    while i < h.len() {
        let t = h[i];
        match t {
            0 => break,
            1 => i += 1,
            _ => {
                let Some(&len) = h.get(i + 1) else { break };
                let len = usize::from(len);
                if len < 2 || i + len > h.len() {
                    break;
                }
                if t & 0x80 != 0 {
                    out[n..n + len].copy_from_slice(&h[i..i + len]);
                    n += len;
                }
                i += len;
            }
        }
    }
    // The padding is end-of-option-list bytes (zero), already there.
    (out, n.next_multiple_of(4))
}

/// Splits the IPv4 packet `pkt` (Ethernet framed, parsed) into fragments whose IP packets
/// are at most `mtu` bytes, taking their buffers from `pool` and handing each to `emit` in
/// offset order; returns how many. A packet that already fits comes out as one copy. See the
/// module doc for the rules; nothing is emitted on an error.
pub fn fragment_v4(
    pkt: &Packet,
    mtu: usize,
    pool: &mut PacketPool,
    mut emit: impl FnMut(Packet),
) -> Result<usize, FragError> {
    let (f, l3) = ip_of(pkt, ETHERTYPE_IPV4, 4, 20)?;
    let hl = usize::from(f[l3] & 0x0f) * 4;
    let tot = usize::from(rd16(f, l3 + 2));
    if hl < 20 || tot < hl || l3 + tot > f.len() {
        return Err(FragError::Malformed);
    }
    let word = rd16(f, l3 + 6);
    if word & IPV4_DF != 0 {
        return Err(FragError::DontFragment);
    }
    let base = usize::from(word & IPV4_OFFSET_MASK) * 8;
    let data = &f[l3 + hl..l3 + tot];
    if base + data.len() > MAX_DATAGRAM - 20 {
        return Err(FragError::Malformed);
    }
    let room = ip_room(pool, l3, mtu);
    // The first fragment's header is the longest: if 8 bytes fit behind it, they fit behind
    // every later one.
    if room < hl + 8 {
        return Err(FragError::MtuTooSmall);
    }
    let (later, later_len) = copied_options_header(&f[l3..l3 + hl]);
    // The reserved bit and the packet's own MF; DF is clear here.
    let keep = word & !(IPV4_OFFSET_MASK | IPV4_MF);
    let mut off = 0;
    let mut count = 0;
    loop {
        let h = if off == 0 { &f[l3..l3 + hl] } else { &later[..later_len] };
        let take = ((room - h.len()) & !7).min(data.len() - off);
        let last = off + take == data.len();
        let mf = if last { word & IPV4_MF } else { IPV4_MF };
        let ip_len = h.len() + take;
        let mut p = start_fragment(pool, f, l3, ip_len)?;
        let ip = &mut p.data_mut()[l3..];
        ip[..h.len()].copy_from_slice(h);
        ip[h.len()..].copy_from_slice(&data[off..off + take]);
        ip[0] = 0x40 | (h.len() / 4) as u8;
        wr16(ip, 2, ip_len as u16);
        wr16(ip, 6, keep | mf | ((base + off) / 8) as u16);
        wr16(ip, 10, 0);
        let c = checksum(&ip[..h.len()]);
        wr16(ip, 10, c);
        fragment_meta(&mut p, &pkt.meta, meta_flags::IPV4_CSUM_OK);
        emit(p);
        count += 1;
        off += take;
        if last {
            return Ok(count);
        }
    }
}

/// Splits the IPv6 packet `pkt` (Ethernet framed, parsed, without a Fragment header) into
/// fragments whose IP packets are at most `mtu` bytes, each with a Fragment header of
/// identification `ident` after the unfragmentable part, taking their buffers from `pool`
/// and handing each to `emit` in offset order; returns how many. A packet that already fits
/// comes out as one fragment (offset 0, no M flag). Nothing is emitted on an error.
pub fn fragment_v6(
    pkt: &Packet,
    mtu: usize,
    ident: u32,
    pool: &mut PacketPool,
    mut emit: impl FnMut(Packet),
) -> Result<usize, FragError> {
    let (f, l3) = ip_of(pkt, ETHERTYPE_IPV6, 6, 40)?;
    let end = l3 + 40 + usize::from(rd16(f, l3 + 4));
    if end > f.len() {
        return Err(FragError::Malformed);
    }
    // Walk the extension headers: the unfragmentable part ends after the last Hop-by-Hop or
    // Routing header; `nh_at` is the next-header byte that will name the Fragment header.
    let (mut nh_at, mut unfrag_end) = (l3 + 6, l3 + 40);
    let (mut nh, mut at) = (f[l3 + 6], l3 + 40);
    for _ in 0..crate::parse::MAX_IPV6_EXT_HEADERS {
        match nh {
            IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS => {
                if at + 8 > end {
                    return Err(FragError::Malformed);
                }
                let len = (usize::from(f[at + 1]) + 1) * 8;
                if at + len > end {
                    return Err(FragError::Malformed);
                }
                if nh != IPV6_DSTOPTS {
                    (nh_at, unfrag_end) = (at, at + len);
                }
                nh = f[at];
                at += len;
            }
            IPPROTO_FRAGMENT => return Err(FragError::AlreadyFragmented),
            _ => break,
        }
    }
    let unfrag = &f[l3..unfrag_end];
    let data = &f[unfrag_end..end];
    if data.len() > MAX_DATAGRAM {
        return Err(FragError::Malformed);
    }
    let head = unfrag.len() + IPV6_FRAG_HEADER_LEN;
    let room = ip_room(pool, l3, mtu);
    if room < head + 8 {
        return Err(FragError::MtuTooSmall);
    }
    let frag_nh = f[nh_at];
    let mut off = 0;
    let mut count = 0;
    loop {
        let take = ((room - head) & !7).min(data.len() - off);
        let last = off + take == data.len();
        let ip_len = head + take;
        let mut p = start_fragment(pool, f, l3, ip_len)?;
        let ip = &mut p.data_mut()[l3..];
        ip[..unfrag.len()].copy_from_slice(unfrag);
        ip[nh_at - l3] = IPPROTO_FRAGMENT;
        wr16(ip, 4, (ip_len - 40) as u16);
        let fh = &mut ip[unfrag.len()..head];
        fh[0] = frag_nh;
        fh[1] = 0;
        wr16(fh, 2, (off as u16 & 0xfff8) | u16::from(!last));
        wr32(fh, 4, ident);
        ip[head..].copy_from_slice(&data[off..off + take]);
        fragment_meta(&mut p, &pkt.meta, 0);
        emit(p);
        count += 1;
        off += take;
        if last {
            return Ok(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build_frame, FrameSpec, L4};
    use crate::bytes::rd32;
    use crate::checksum::verify;
    use std::net::{IpAddr, Ipv6Addr};

    /// Fills `frame` from `from` on with a counting pattern.
    fn pattern(frame: &mut [u8], from: usize) {
        for (i, b) in frame[from..].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
    }

    /// A parsed packet holding `frame`.
    fn packet(frame: Vec<u8>) -> Packet {
        let mut p = Packet::from_frame(&frame).unwrap();
        p.meta.in_port = 3;
        crate::parse(&mut p).unwrap();
        p
    }

    /// An untagged or tagged IPv4 UDP frame of `len` bytes with the IPv4 options `opts`.
    fn v4_frame(len: usize, vlan: Option<u16>, opts: &[u8]) -> (Vec<u8>, usize) {
        let spec = FrameSpec {
            len,
            vlan,
            l4_checksum: false,
            ..FrameSpec::default()
        };
        let mut f = build_frame(&spec);
        let l3 = if vlan.is_some() { 18 } else { 14 };
        assert_eq!(opts.len() % 4, 0);
        let tail = f.split_off(l3 + 20);
        f.extend_from_slice(opts);
        f.extend_from_slice(&tail);
        let hl = 20 + opts.len();
        f[l3] = 0x40 | (hl / 4) as u8;
        let tot = rd16(&f, l3 + 2) as usize + opts.len();
        wr16(&mut f, l3 + 2, tot as u16);
        // The builder sets DF; these packets may be fragmented.
        wr16(&mut f, l3 + 6, 0);
        wr16(&mut f, l3 + 10, 0);
        let c = checksum(&f[l3..l3 + hl]);
        wr16(&mut f, l3 + 10, c);
        pattern(&mut f, l3 + hl);
        (f, l3)
    }

    fn split_v4(p: &Packet, mtu: usize, pool: &mut PacketPool) -> Result<Vec<Packet>, FragError> {
        let mut out = Vec::new();
        let n = fragment_v4(p, mtu, pool, |f| out.push(f))?;
        assert_eq!(n, out.len());
        Ok(out)
    }

    /// Puts IPv4 fragments back together: checks each one's header and returns the
    /// reassembled IP payload.
    fn reassemble_v4(frags: &[Packet], l3: usize, mtu: usize) -> Vec<u8> {
        let mut payload = Vec::new();
        for (i, p) in frags.iter().enumerate() {
            let f = p.data();
            let ip = &f[l3..];
            let hl = usize::from(ip[0] & 0x0f) * 4;
            assert!(ip.len() <= mtu, "fragment {i} is {} bytes, over {mtu}", ip.len());
            assert_eq!(usize::from(rd16(ip, 2)), ip.len());
            assert!(verify(&ip[..hl]), "fragment {i}'s header checksum");
            let word = rd16(ip, 6);
            assert_eq!(
                usize::from(word & IPV4_OFFSET_MASK) * 8,
                payload.len(),
                "fragment {i}'s offset"
            );
            let last = i + 1 == frags.len();
            assert_eq!(word & IPV4_MF != 0, !last, "fragment {i}'s MF");
            if !last {
                assert_eq!((ip.len() - hl) % 8, 0, "fragment {i}'s payload is a multiple of 8");
            }
            assert_eq!(p.meta.flags & meta_flags::IPV4_CSUM_OK, meta_flags::IPV4_CSUM_OK);
            assert_eq!(p.meta.in_port, 3);
            assert_eq!(p.meta.l4_off != NO_OFFSET, i == 0, "only the first fragment has L4");
            payload.extend_from_slice(&ip[hl..]);
        }
        payload
    }

    #[test]
    fn ipv4_fragments_reassemble_to_the_original() {
        for (len, mtu, vlan) in [
            (1514, 576, None),
            (9014, 1500, Some(7)),
            (3000, 1280, None),
            (101, 68, None),
        ] {
            let (f, l3) = v4_frame(len, vlan, &[]);
            let p = packet(f.clone());
            let mut pool = PacketPool::new(2048, 0, 64);
            let frags = split_v4(&p, mtu, &mut pool).unwrap();
            assert_eq!(reassemble_v4(&frags, l3, mtu), f[l3 + 20..], "len {len} mtu {mtu}");
            let per = (mtu - 20) & !7;
            assert_eq!(frags.len(), (len - l3 - 20).div_ceil(per), "len {len} mtu {mtu}");
            for q in &frags {
                assert_eq!(q.data()[..l3], f[..l3], "the Ethernet/VLAN header is copied");
                let ip = &q.data()[l3..];
                // Everything but length, flags/offset and checksum is the original's.
                assert_eq!(ip[4..6], f[l3 + 4..l3 + 6]);
                assert_eq!(ip[8..10], f[l3 + 8..l3 + 10]);
                assert_eq!(ip[12..20], f[l3 + 12..l3 + 20]);
            }
        }
    }

    #[test]
    fn a_packet_that_fits_comes_out_as_one_copy() {
        let (f, _) = v4_frame(1000, None, &[]);
        let p = packet(f);
        let frags = split_v4(&p, 1500, &mut PacketPool::default()).unwrap();
        assert_eq!(frags.len(), 1);
        assert_eq!(frags[0].data(), p.data());
    }

    #[test]
    fn only_copied_options_go_into_later_fragments() {
        // Loose source route (0x83, copied), a NOP, record route (0x07, not copied), a NOP;
        // 7 + 1 + 7 + 1 = 16 bytes.
        let mut opts = vec![0x83, 7, 4, 1, 2, 3, 4, 1, 0x07, 7, 4, 0, 0, 0, 0, 1];
        opts.resize(16, 0);
        let (f, l3) = v4_frame(1514, None, &opts);
        let p = packet(f.clone());
        let frags = split_v4(&p, 600, &mut PacketPool::default()).unwrap();
        assert_eq!(reassemble_v4(&frags, l3, 600), f[l3 + 36..]);
        let first = &frags[0].data()[l3..];
        assert_eq!(first[0] & 0x0f, 9, "the first fragment keeps every option");
        assert_eq!(first[20..36], opts[..]);
        for q in &frags[1..] {
            let ip = &q.data()[l3..];
            assert_eq!(ip[0] & 0x0f, 7, "7 copied bytes padded to 8");
            assert_eq!(ip[20..28], [0x83, 7, 4, 1, 2, 3, 4, 0]);
        }
    }

    #[test]
    fn a_fragment_is_fragmented_again_with_its_offset_and_mf() {
        let (mut f, l3) = v4_frame(1514, None, &[]);
        // A middle fragment at offset 800 (100 units), MF set.
        wr16(&mut f, l3 + 6, IPV4_MF | 100);
        wr16(&mut f, l3 + 10, 0);
        let c = checksum(&f[l3..l3 + 20]);
        wr16(&mut f, l3 + 10, c);
        let p = packet(f);
        let frags = split_v4(&p, 576, &mut PacketPool::default()).unwrap();
        let words: Vec<u16> = frags.iter().map(|q| rd16(q.data(), l3 + 6)).collect();
        assert_eq!(words, [IPV4_MF | 100, IPV4_MF | 169, IPV4_MF | 238]);
    }

    #[test]
    fn df_small_mtus_and_other_families_are_refused() {
        let (mut f, l3) = v4_frame(1514, None, &[]);
        wr16(&mut f, l3 + 6, IPV4_DF);
        let p = packet(f);
        let mut pool = PacketPool::default();
        let mut n = 0;
        assert_eq!(
            fragment_v4(&p, 1400, &mut pool, |_| n += 1),
            Err(FragError::DontFragment)
        );
        let (f, _) = v4_frame(1514, None, &[]);
        let p = packet(f);
        assert_eq!(fragment_v4(&p, 27, &mut pool, |_| n += 1), Err(FragError::MtuTooSmall));
        assert_eq!(fragment_v6(&p, 1280, 1, &mut pool, |_| n += 1), Err(FragError::NotIp));
        let unparsed = Packet::from_frame(p.data()).unwrap();
        assert_eq!(
            fragment_v4(&unparsed, 1400, &mut pool, |_| n += 1),
            Err(FragError::NotIp)
        );
        assert_eq!(n, 0, "an error emits nothing");
    }

    #[test]
    fn fragments_fit_the_pools_buffers() {
        let (f, l3) = v4_frame(9014, None, &[]);
        let p = packet(f.clone());
        let mut pool = PacketPool::new(1024, 0, 64);
        let frags = split_v4(&p, 9000, &mut pool).unwrap();
        let room = 1024 - crate::HEADROOM - l3;
        assert_eq!(reassemble_v4(&frags, l3, room), f[l3 + 20..]);
    }

    #[test]
    fn a_pool_with_large_buffers_gives_fragments_up_to_the_mtu() {
        let (f, l3) = v4_frame(9014, None, &[]);
        let p = packet(f.clone());
        let mut pool = PacketPool::new(2048, 0, 64).with_large(crate::large_buf_size_for_mtu(9000));
        let frags = split_v4(&p, 4000, &mut pool).unwrap();
        assert_eq!(frags.len(), 3, "4000-byte fragments, not the small buffers' 1900");
        assert_eq!(reassemble_v4(&frags, l3, 4000), f[l3 + 20..]);
    }

    fn v6_frame(len: usize, hop_by_hop: bool) -> (Vec<u8>, usize) {
        let spec = FrameSpec {
            len,
            src_ip: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            dst_ip: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
            proto: L4::Udp,
            l4_checksum: false,
            ..FrameSpec::default()
        };
        let mut f = build_frame(&spec);
        if hop_by_hop {
            // An 8-byte Hop-by-Hop header (router alert) in front of the UDP header.
            let tail = f.split_off(54);
            f.extend_from_slice(&[17, 0, 5, 2, 0, 0, 1, 0]);
            f.extend_from_slice(&tail);
            f[14 + 6] = 0;
            let pl = rd16(&f, 18) + 8;
            wr16(&mut f, 18, pl);
        }
        pattern(&mut f, if hop_by_hop { 62 } else { 54 });
        (f, 14)
    }

    #[test]
    fn ipv6_fragments_reassemble_to_the_original() {
        for (len, mtu, hbh) in [(9014, 1280, false), (3000, 1500, true), (1400, 1280, true)] {
            let (f, l3) = v6_frame(len, hbh);
            let unfrag = if hbh { 48 } else { 40 };
            let p = packet(f.clone());
            let mut pool = PacketPool::new(2048, 0, 64);
            let mut frags = Vec::new();
            fragment_v6(&p, mtu, 0xdead_beef, &mut pool, |q| frags.push(q)).unwrap();
            let mut payload = Vec::new();
            for (i, q) in frags.iter().enumerate() {
                let d = q.data();
                let ip = &d[l3..];
                assert!(ip.len() <= mtu);
                assert_eq!(d[..l3], f[..l3]);
                assert_eq!(usize::from(rd16(ip, 4)) + 40, ip.len());
                // The unfragmentable part, with the next header naming the Fragment header.
                let nh_at = if hbh { 40 } else { 6 };
                assert_eq!(ip[nh_at], IPPROTO_FRAGMENT);
                assert_eq!(ip[..4], f[l3..l3 + 4]);
                assert_eq!(ip[6..nh_at], f[l3 + 6..l3 + nh_at]);
                assert_eq!(ip[nh_at + 1..unfrag], f[l3 + nh_at + 1..l3 + unfrag]);
                let fh = &ip[unfrag..unfrag + 8];
                assert_eq!(fh[0], 17, "the Fragment header names UDP");
                assert_eq!(
                    usize::from(rd16(fh, 2) & 0xfff8),
                    payload.len(),
                    "fragment {i}'s offset"
                );
                assert_eq!(rd16(fh, 2) & 1 == 1, i + 1 < frags.len(), "fragment {i}'s M flag");
                assert_eq!(rd32(fh, 4), 0xdead_beef);
                assert_eq!(q.meta.l4_off != NO_OFFSET, i == 0);
                if i + 1 < frags.len() {
                    assert_eq!((ip.len() - unfrag - 8) % 8, 0);
                }
                payload.extend_from_slice(&ip[unfrag + 8..]);
            }
            assert_eq!(payload, f[l3 + unfrag..], "len {len} mtu {mtu}");
            assert_eq!(frags.len(), (len - l3 - unfrag).div_ceil((mtu - unfrag - 8) & !7));
        }
    }

    #[test]
    fn an_ipv6_fragment_is_not_fragmented_again() {
        let (f, _) = v6_frame(2000, false);
        let p = packet(f);
        let mut frags = Vec::new();
        fragment_v6(&p, 1280, 9, &mut PacketPool::default(), |q| frags.push(q)).unwrap();
        assert_eq!(
            fragment_v6(&frags[0], 1280, 9, &mut PacketPool::default(), |_| ()),
            Err(FragError::AlreadyFragmented)
        );
    }

    proptest::proptest! {
        /// Any size, any MTU, any buffer size: the fragments fit and reassemble.
        #[test]
        fn any_ipv4_split_reassembles(len in 42usize..9014, mtu in 68usize..9000, buf in 256usize..10_000) {
            let (f, l3) = v4_frame(len, None, &[]);
            let p = packet(f.clone());
            let mut pool = PacketPool::new(buf, 0, 64);
            let room = mtu.min(pool.buf_size().max(crate::HEADROOM + 64) - crate::HEADROOM - l3);
            match split_v4(&p, mtu, &mut pool) {
                Ok(frags) => proptest::prop_assert_eq!(reassemble_v4(&frags, l3, room), &f[l3 + 20..]),
                Err(e) => {
                    proptest::prop_assert_eq!(e, FragError::MtuTooSmall);
                    proptest::prop_assert!(room < 28);
                }
            }
        }
    }
}
