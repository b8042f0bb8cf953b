//! Which parsed frames are IP fragments, and what their headers say.
//!
//! [`classify`] reads a frame the parser accepted (`Meta::l3_off`, `Meta::ip_proto` set):
//! an unfragmented packet costs one 16-bit read for IPv4 (the fragment field) and one byte
//! comparison for IPv6 (no extension header at all: the parser's final protocol is the IPv6
//! header's next header); only a packet with extension headers walks them to look for a
//! Fragment header. An IPv6 *atomic fragment* (offset 0, no more fragments, RFC 6946) is not a
//! fragment: it is tracked as it is.
//!
//! Threads: pure functions of the packet.

use freeway_packet::bytes::{rd16, rd32};
use freeway_packet::checksum;
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_TCP};
use freeway_packet::{meta_flags, Packet, NO_OFFSET};

use crate::reasm::DropReason;

/// IPv6 extension header numbers the walk steps over.
const HOPOPTS: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const AH: u8 = 51;
const DSTOPTS: u8 = 60;
/// The most extension headers walked (the parser's own bound).
const MAX_EXT: usize = freeway_packet::parse::MAX_IPV6_EXT_HEADERS;

/// What one fragment's headers say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragInfo {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Source address (IPv4 in the first 4 bytes).
    pub src: [u8; 16],
    /// Destination address (IPv4 in the first 4 bytes).
    pub dst: [u8; 16],
    /// Identification (IPv4: 16 bits).
    pub id: u32,
    /// IPv4: the protocol (part of the key); IPv6: the Fragment header's next header.
    pub proto: u8,
    /// Where this fragment's data goes in the datagram's fragmentable part, in bytes.
    pub off: u32,
    /// Bytes of data it carries.
    pub len: u32,
    /// More fragments follow (MF / M flag).
    pub more: bool,
    /// IPv4: Don't Fragment is set.
    pub df: bool,
    /// Offset in the frame of its data (after the IPv4 header, or the Fragment header).
    pub data_at: usize,
    /// IPv6: offset in the frame of the byte that names the Fragment header (the IPv6
    /// header's next header, or the preceding extension header's); IPv4: 0.
    pub nh_at: usize,
    /// The fragment's IP length (IPv4 total length; IPv6 40 + payload length).
    pub ip_len: u16,
}

impl FragInfo {
    /// Where this fragment's data ends in the fragmentable part.
    #[inline]
    pub fn end(&self) -> u32 {
        self.off + self.len
    }
}

/// The answer of [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Not an IP fragment (or not IP): goes on as it is.
    NotFragment,
    /// A fragment to reassemble.
    Fragment(FragInfo),
    /// A fragment that cannot be part of a valid datagram: dropped for this reason.
    Bad(DropReason),
}

/// Whether a parsed frame may be a fragment: `false` is certain (the fast test of the
/// module doc); `true` asks [`classify`].
#[inline(always)]
pub fn may_be_fragment(p: &Packet) -> bool {
    let m = p.meta;
    let l3 = usize::from(m.l3_off);
    match m.ethertype {
        _ if m.l3_off == NO_OFFSET => false,
        ETHERTYPE_IPV4 => p
            .data()
            .get(l3 + 6..l3 + 8)
            .is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) & 0x3fff != 0),
        ETHERTYPE_IPV6 => p
            .data()
            .get(l3 + 6)
            .is_some_and(|&nh| nh != m.ip_proto || nh == FRAGMENT),
        _ => false,
    }
}

/// Classifies a parsed frame (see the module doc).
#[inline]
pub fn classify(p: &Packet) -> Class {
    if !may_be_fragment(p) {
        return Class::NotFragment;
    }
    let l3 = usize::from(p.meta.l3_off);
    if p.meta.ethertype == ETHERTYPE_IPV4 {
        v4(p, l3)
    } else {
        v6(p.data(), l3)
    }
}

#[cold]
fn v4(p: &Packet, l3: usize) -> Class {
    let f = p.data();
    // The parser checked these; checked again for a caller that did not parse.
    if f.len() < l3 + 20 {
        return Class::Bad(DropReason::Malformed);
    }
    let hl = usize::from(f[l3] & 0x0f) * 4;
    let tot = usize::from(rd16(f, l3 + 2));
    if f[l3] >> 4 != 4 || hl < 20 || tot < hl || l3 + tot > f.len() {
        return Class::Bad(DropReason::Malformed);
    }
    if p.meta.flags & meta_flags::IPV4_CSUM_OK == 0 && !checksum::verify(&f[l3..l3 + hl]) {
        return Class::Bad(DropReason::BadChecksum);
    }
    let frag = rd16(f, l3 + 6);
    let off = u32::from(frag & 0x1fff) * 8;
    let len = (tot - hl) as u32;
    let more = frag & 0x2000 != 0;
    let proto = f[l3 + 9];
    if len == 0 || (more && len % 8 != 0) {
        return Class::Bad(DropReason::BadLength);
    }
    if hl as u32 + off + len > 65_535 {
        return Class::Bad(DropReason::TooLong);
    }
    // RFC 1858: a TCP fragment at offset 8 could rewrite the first fragment's flags.
    if proto == IPPROTO_TCP && off == 8 {
        return Class::Bad(DropReason::Tiny);
    }
    let mut src = [0; 16];
    let mut dst = [0; 16];
    src[..4].copy_from_slice(&f[l3 + 12..l3 + 16]);
    dst[..4].copy_from_slice(&f[l3 + 16..l3 + 20]);
    Class::Fragment(FragInfo {
        v6: false,
        src,
        dst,
        id: u32::from(rd16(f, l3 + 4)),
        proto,
        off,
        len,
        more,
        df: frag & 0x4000 != 0,
        data_at: l3 + hl,
        nh_at: 0,
        ip_len: tot as u16,
    })
}

/// The length of the IPv6 extension header `nh` at `off` (inside `..end`), `None` if `nh`
/// is not one the walk steps over or it overruns.
#[inline]
fn ext_len(f: &[u8], off: usize, end: usize, nh: u8) -> Option<usize> {
    if off + 8 > end {
        return None;
    }
    let n = match nh {
        HOPOPTS | ROUTING | DSTOPTS => (usize::from(f[off + 1]) + 1) * 8,
        AH => (usize::from(f[off + 1]) + 2) * 4,
        FRAGMENT => 8,
        _ => return None,
    };
    (off + n <= end).then_some(n)
}

#[cold]
fn v6(f: &[u8], l3: usize) -> Class {
    if f.len() < l3 + 40 {
        return Class::Bad(DropReason::Malformed);
    }
    let end = l3 + 40 + usize::from(rd16(f, l3 + 4));
    if end > f.len() {
        return Class::Bad(DropReason::Malformed);
    }
    let mut nh_at = l3 + 6;
    let mut off = l3 + 40;
    for _ in 0..MAX_EXT {
        let nh = f[nh_at];
        if nh == FRAGMENT {
            if off + 8 > end {
                return Class::Bad(DropReason::Malformed);
            }
            let ol = rd16(f, off + 2);
            let foff = u32::from(ol & 0xfff8);
            let more = ol & 1 != 0;
            let data_at = off + 8;
            let len = (end - data_at) as u32;
            if foff == 0 && !more {
                return Class::NotFragment;
            }
            if len == 0 || (more && len % 8 != 0) {
                return Class::Bad(DropReason::BadLength);
            }
            // The reassembled payload length (unfragmentable extension headers plus the
            // data) must fit the 16-bit payload length.
            if (off - l3 - 40) as u32 + foff + len > 65_535 {
                return Class::Bad(DropReason::TooLong);
            }
            let mut src = [0; 16];
            let mut dst = [0; 16];
            src.copy_from_slice(&f[l3 + 8..l3 + 24]);
            dst.copy_from_slice(&f[l3 + 24..l3 + 40]);
            return Class::Fragment(FragInfo {
                v6: true,
                src,
                dst,
                id: rd32(f, off + 4),
                proto: f[off],
                off: foff,
                len,
                more,
                df: false,
                data_at,
                nh_at,
                ip_len: (end - l3) as u16,
            });
        }
        let Some(n) = ext_len(f, off, end, nh) else {
            return Class::NotFragment;
        };
        nh_at = off;
        off += n;
    }
    Class::NotFragment
}
