//! Fragment builders for tests, the fuzz target and the benchmark: frames of any shape,
//! hostile ones included (overlaps, bad offsets), which a real fragmenter would not write.
//!
//! Threads: pure functions of their arguments.

use std::net::IpAddr;

use freeway_packet::build::write_l2;
use freeway_packet::bytes::{wr16, wr32};
use freeway_packet::checksum::{checksum, fold, pseudo_v4, pseudo_v6, sum};
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_UDP};

/// What every fragment of one datagram shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragSpec {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source address (both addresses of one family).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Identification (IPv4: the low 16 bits).
    pub id: u32,
    /// The upper protocol.
    pub proto: u8,
}

impl FragSpec {
    /// UDP from `src` to `dst` with identification `id`, MAC 02:00:00:00:00:01 to
    /// 02:00:00:00:00:02.
    pub fn udp(src: IpAddr, dst: IpAddr, id: u32) -> FragSpec {
        FragSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src,
            dst,
            id,
            proto: IPPROTO_UDP,
        }
    }
}

fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// A UDP datagram's upper part (header and `len - 8` bytes of patterned payload) with its
/// checksum, from `spec`'s addresses: the data a datagram's fragments carry.
pub fn udp_payload(spec: &FragSpec, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let len = len.max(8);
    let mut u = vec![0u8; len];
    wr16(&mut u, 0, sport);
    wr16(&mut u, 2, dport);
    wr16(&mut u, 4, len as u16);
    for (i, b) in u[8..].iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let ps = match (spec.src, spec.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_v4(s.octets(), d.octets(), IPPROTO_UDP, len as u16),
        (s, d) => {
            let (s, d) = (octets(s), octets(d));
            let mut a = [0; 16];
            let mut b = [0; 16];
            a[16 - s.len()..].copy_from_slice(&s);
            b[16 - d.len()..].copy_from_slice(&d);
            pseudo_v6(a, b, IPPROTO_UDP, len as u32)
        }
    };
    let c = !fold(sum(&u, ps));
    wr16(&mut u, 6, if c == 0 { 0xffff } else { c });
    u
}

/// One fragment frame of `spec`'s datagram: `data` placed at byte offset `off` of the
/// datagram's data, MF (IPv6: M) set if `more`. IPv4 gets a valid header checksum, TTL 64;
/// IPv6 a Fragment header right after its header, hop limit 64.
pub fn fragment(spec: &FragSpec, data: &[u8], off: u32, more: bool) -> Vec<u8> {
    match (spec.src, spec.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut f = vec![0u8; 14 + 20 + data.len()];
            let l3 = write_l2(&mut f, spec.dst_mac, spec.src_mac, None, ETHERTYPE_IPV4);
            let h = &mut f[l3..];
            h[0] = 0x45;
            wr16(h, 2, (20 + data.len()) as u16);
            wr16(h, 4, spec.id as u16);
            wr16(h, 6, (if more { 0x2000 } else { 0 }) | ((off / 8) as u16 & 0x1fff));
            h[8] = 64;
            h[9] = spec.proto;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = checksum(&h[..20]);
            wr16(h, 10, c);
            h[20..].copy_from_slice(data);
            f
        }
        (s, d) => {
            let mut f = vec![0u8; 14 + 48 + data.len()];
            let l3 = write_l2(&mut f, spec.dst_mac, spec.src_mac, None, ETHERTYPE_IPV6);
            let h = &mut f[l3..];
            h[0] = 0x60;
            wr16(h, 4, (8 + data.len()) as u16);
            h[6] = 44;
            h[7] = 64;
            let (s, d) = (octets(s), octets(d));
            h[8 + 16 - s.len()..24].copy_from_slice(&s);
            h[24 + 16 - d.len()..40].copy_from_slice(&d);
            h[40] = spec.proto;
            wr16(h, 42, (off as u16 & 0xfff8) | u16::from(more));
            wr32(h, 44, spec.id);
            h[48..].copy_from_slice(data);
            f
        }
    }
}

/// `data` cut into fragments of at most `chunk` bytes each (a multiple of 8), in order.
pub fn fragments(spec: &FragSpec, data: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let chunk = (chunk & !7).max(8);
    data.chunks(chunk)
        .enumerate()
        .map(|(i, part)| fragment(spec, part, (i * chunk) as u32, (i + 1) * chunk < data.len()))
        .collect()
}

/// The whole (unfragmented) frame of `spec`'s datagram carrying `data`: what the
/// reassembler must deliver for [`fragments`] of the same data (DF clear).
pub fn whole(spec: &FragSpec, data: &[u8]) -> Vec<u8> {
    let mut f = fragment(spec, data, 0, false);
    if let (IpAddr::V6(_), _) | (_, IpAddr::V6(_)) = (spec.src, spec.dst) {
        // No Fragment header: the IPv6 header names the upper protocol.
        f.drain(14 + 40..14 + 48);
        f[14 + 6] = spec.proto;
        wr16(&mut f, 14 + 4, data.len() as u16);
    }
    f
}
