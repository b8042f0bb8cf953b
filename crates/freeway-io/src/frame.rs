//! What the generator needs beyond [`freeway_packet::build`]: its payload pattern and the
//! in-place patching of a template's source address and port, with the checksums fixed
//! incrementally (RFC 1624, on top of [`checksum::update16`]).
//!
//! Only the control thread builds frames (in `GenPort::open`); workers only patch copies.

use freeway_packet::build::{self, FrameSpec, L4};
use freeway_packet::bytes::{rd16, rd32, wr16, wr32};
use freeway_packet::checksum::{self, update16};
use freeway_packet::wire::{ETH_HEADER_LEN, VLAN_TAG_LEN};

/// Offset of the L3 header.
pub(crate) fn l3_off(tagged: bool) -> usize {
    ETH_HEADER_LEN + if tagged { VLAN_TAG_LEN } else { 0 }
}

/// Offsets of the low 32 bits of the source address and of the L4 header, from the L3 offset.
#[inline(always)]
fn src_low_and_l4_off(l3: usize, v6: bool) -> (usize, usize) {
    if v6 {
        (l3 + 20, l3 + 40)
    } else {
        (l3 + 12, l3 + 20)
    }
}

/// Offset of the checksum inside the L4 header.
#[inline(always)]
fn l4_csum_off(l4: L4) -> usize {
    match l4 {
        L4::Udp => 6,
        L4::Tcp { .. } => 16,
        L4::Icmp => 2,
    }
}

/// Offset of the source port / echo identifier inside the L4 header.
#[inline(always)]
fn l4_port_off(l4: L4) -> usize {
    match l4 {
        L4::Udp | L4::Tcp { .. } => 0,
        L4::Icmp => 4,
    }
}

/// [`update16`] for a 32-bit field: the same result as updating its two words one after the
/// other, with one fold (this is on the generator's per-packet path).
#[inline(always)]
fn update32(csum: u16, old: u32, new: u32) -> u16 {
    let acc = u32::from(!csum) + u32::from(!(old >> 16) as u16) + u32::from(!old as u16) + (new >> 16) + (new & 0xffff);
    checksum::fold(acc)
}

/// Appends the frame described by `spec` (same address family on both sides) to `out`, with
/// the payload the byte pattern `i as u8`, and returns its length.
pub(crate) fn build_into(spec: &FrameSpec, out: &mut Vec<u8>) -> usize {
    // The L4 checksum is computed here, over the final payload, rather than by
    // `build_frame_into` (which sums a zero payload).
    let spec = FrameSpec {
        l4_checksum: false,
        ..*spec
    };
    let start = out.len();
    out.resize(start + build::frame_len(&spec), 0);
    let f = &mut out[start..];
    let len = build::build_frame_into(&spec, f).expect("buffer sized by frame_len");
    for (i, b) in f[build::header_len(&spec)..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let l3 = l3_off(spec.vlan.is_some());
    let v6 = spec.src_ip.is_ipv6();
    let (_, l4) = src_low_and_l4_off(l3, v6);
    let seg_len = (len - l4) as u32;
    // Pseudo header: addresses, protocol and length (below 2^16 here) summed as the words of
    // the frame's own L3 header; ICMPv4 has none.
    let pseudo = if v6 {
        checksum::sum(&f[l3 + 8..l3 + 40], u32::from(f[l3 + 6]) + seg_len)
    } else if spec.proto == L4::Icmp {
        0
    } else {
        checksum::sum(&f[l3 + 12..l3 + 20], u32::from(f[l3 + 9]) + seg_len)
    };
    let co = l4 + l4_csum_off(spec.proto);
    f[co..co + 2].fill(0);
    let mut c = checksum::fold(checksum::sum(&f[l4..], pseudo));
    if spec.proto == L4::Udp && c == 0 {
        c = 0xffff;
    }
    wr16(f, co, c);
    len
}

/// Rewrites, in the frame `f` (L3 header at `l3`, IPv6 if `v6`, L4 header `l4`), the low 32
/// bits of the source address to `low` and the source port (ICMP: echo identifier) to `port`,
/// updating the IPv4 header checksum and the L4 checksum incrementally.
#[inline(always)]
pub(crate) fn patch_src(f: &mut [u8], l3: usize, v6: bool, l4: L4, low: u32, port: u16) {
    let (ip_off, l4_off) = src_low_and_l4_off(l3, v6);
    let old_ip = rd32(f, ip_off);
    let po = l4_off + l4_port_off(l4);
    let old_port = rd16(f, po);
    wr32(f, ip_off, low);
    wr16(f, po, port);
    if !v6 {
        let c = update32(rd16(f, l3 + 10), old_ip, low);
        wr16(f, l3 + 10, c);
    }
    let co = l4_off + l4_csum_off(l4);
    let mut c = rd16(f, co);
    // ICMPv4 has no pseudo header; everything else covers the addresses.
    if v6 || l4 != L4::Icmp {
        c = update32(c, old_ip, low);
    }
    c = update16(c, old_port, port);
    if l4 == L4::Udp && c == 0 {
        c = 0xffff;
    }
    wr16(f, co, c);
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::build::tcp_flags;
    use freeway_packet::checksum::{pseudo_v6, sum, verify};
    use std::net::IpAddr;

    fn spec(src: &str, dst: &str, proto: L4, vlan: Option<u16>, len: usize) -> FrameSpec {
        FrameSpec {
            src_ip: src.parse().unwrap(),
            dst_ip: dst.parse().unwrap(),
            proto,
            vlan,
            src_port: 1234,
            dst_port: 80,
            len,
            ..FrameSpec::default()
        }
    }

    fn built(s: &FrameSpec) -> Vec<u8> {
        let mut v = vec![0xaa; 3];
        let n = build_into(s, &mut v);
        assert_eq!(v.len(), 3 + n);
        v.split_off(3)
    }

    /// Verifies the IPv4 header checksum and the L4 checksum of a built frame from scratch.
    fn checksums_ok(f: &[u8], s: &FrameSpec) -> bool {
        let l3 = l3_off(s.vlan.is_some());
        let (_, l4) = src_low_and_l4_off(l3, s.src_ip.is_ipv6());
        let seg = &f[l4..];
        let pseudo = match (s.src_ip, s.dst_ip) {
            (IpAddr::V4(..), _) if s.proto == L4::Icmp => 0,
            // IPv4-mapped: the extra 0xffff words are ones'-complement zeros.
            (IpAddr::V4(a), IpAddr::V4(b)) => pseudo_v6(
                a.to_ipv6_mapped().octets(),
                b.to_ipv6_mapped().octets(),
                f[l3 + 9],
                seg.len() as u32,
            ),
            (IpAddr::V6(a), IpAddr::V6(b)) => pseudo_v6(a.octets(), b.octets(), f[l3 + 6], seg.len() as u32),
            _ => unreachable!(),
        };
        (s.src_ip.is_ipv6() || verify(&f[l3..l4])) && checksum::fold(sum(seg, pseudo)) == 0
    }

    const PROTOS: [L4; 3] = [L4::Udp, L4::Tcp { flags: tcp_flags::SYN }, L4::Icmp];
    const ADDRS: [(&str, &str); 4] = [
        ("10.0.0.1", "10.0.0.2"),
        ("255.255.255.255", "255.255.255.255"),
        ("2001:db8::1", "fe80::fe"),
        (
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ),
    ];

    #[test]
    fn checksums_verify_with_payload() {
        for (a, b) in ADDRS {
            for l4 in PROTOS {
                for vlan in [None, Some(100)] {
                    for len in [0, 99, 100, 1514] {
                        let s = spec(a, b, l4, vlan, len);
                        let f = built(&s);
                        assert_eq!(f.len(), build::frame_len(&s));
                        let hdr = build::header_len(&s);
                        assert!(f[hdr..].iter().enumerate().all(|(i, &b)| b == i as u8));
                        assert!(checksums_ok(&f, &s), "{s:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn patch_matches_rebuild() {
        for (a, b) in ADDRS {
            for l4 in PROTOS {
                for vlan in [None, Some(7)] {
                    let s = spec(a, b, l4, vlan, 77);
                    let mut f = built(&s);
                    for (low, port) in [(0x0a00_0105, 4321), (0xffff_ffff, 0), (1, 65535), (0x0a00_0001, 1234)] {
                        let mut t = s;
                        t.src_port = port;
                        t.src_ip = match s.src_ip {
                            IpAddr::V4(_) => IpAddr::V4(low.into()),
                            IpAddr::V6(x) => {
                                let mut o = x.octets();
                                wr32(&mut o, 12, low);
                                IpAddr::V6(o.into())
                            }
                        };
                        patch_src(&mut f, l3_off(vlan.is_some()), s.src_ip.is_ipv6(), l4, low, port);
                        assert_eq!(f, built(&t), "{t:?}");
                    }
                }
            }
        }
    }
}
