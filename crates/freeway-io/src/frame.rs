//! A small private frame builder for the generator: Ethernet, optional 802.1Q tag, IPv4 or
//! IPv6, UDP/TCP/ICMP echo request, with a valid IPv4 header checksum and valid L4 checksums,
//! plus the incremental checksum update (RFC 1624) the generator uses to patch a template.
//!
//! Only the control thread builds frames (in `GenPort::open`); workers only patch copies.
//! (To be replaced by `freeway_packet::build` once that lands.)

/// The L4 protocol of generated frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum L4 {
    Udp,
    Tcp,
    Icmp,
}

/// Source and destination addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Addrs {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

/// Everything that goes into one frame.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub vlan: Option<u16>,
    pub addrs: Addrs,
    pub l4: L4,
    /// Source port (UDP/TCP) or echo identifier (ICMP).
    pub sport: u16,
    /// Destination port (UDP/TCP); unused for ICMP.
    pub dport: u16,
    /// Frame length in the buffer (no FCS). Must be at least [`header_len`].
    pub len: usize,
}

pub(crate) const ETH_LEN: usize = 14;
pub(crate) const VLAN_LEN: usize = 4;
pub(crate) const TTL: u8 = 64;

/// Length of the L3 header.
pub(crate) fn l3_len(v6: bool) -> usize {
    if v6 {
        40
    } else {
        20
    }
}

/// Length of the L4 header.
pub(crate) fn l4_len(l4: L4) -> usize {
    match l4 {
        L4::Udp | L4::Icmp => 8,
        L4::Tcp => 20,
    }
}

/// Bytes of headers (no payload, no FCS).
pub(crate) fn header_len(tagged: bool, v6: bool, l4: L4) -> usize {
    ETH_LEN + if tagged { VLAN_LEN } else { 0 } + l3_len(v6) + l4_len(l4)
}

/// IP protocol number of the L4 header.
pub(crate) fn ip_proto(l4: L4, v6: bool) -> u8 {
    match (l4, v6) {
        (L4::Udp, _) => 17,
        (L4::Tcp, _) => 6,
        (L4::Icmp, false) => 1,
        (L4::Icmp, true) => 58,
    }
}

/// Offset of the checksum inside the L4 header.
pub(crate) fn l4_csum_off(l4: L4) -> usize {
    match l4 {
        L4::Udp => 6,
        L4::Tcp => 16,
        L4::Icmp => 2,
    }
}

/// Offset of the source port / echo identifier inside the L4 header.
pub(crate) fn l4_port_off(l4: L4) -> usize {
    match l4 {
        L4::Udp | L4::Tcp => 0,
        L4::Icmp => 4,
    }
}

/// Adds `data` as big-endian 16-bit words to a ones'-complement accumulator.
pub(crate) fn sum_words(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
        // Fold early so that very long frames cannot overflow.
        if acc >= 0x8000_0000 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
    }
    if let [b] = chunks.remainder() {
        acc = acc.wrapping_add(u32::from(*b) << 8);
    }
    acc
}

/// Folds an accumulator to 16 bits.
pub(crate) fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum of `data`.
pub(crate) fn checksum(data: &[u8]) -> u16 {
    !fold(sum_words(0, data))
}

/// Updates checksum `csum` for the 16-bit words `old` replaced by `new` (RFC 1624, eqn. 3).
#[inline(always)]
pub(crate) fn csum_update(csum: u16, old: &[u16], new: &[u16]) -> u16 {
    let mut acc = u32::from(!csum);
    for o in old {
        acc += u32::from(!*o);
    }
    for n in new {
        acc += u32::from(*n);
    }
    !fold(acc)
}

/// Builds the frame described by `spec`. The payload is the byte pattern `i as u8`.
pub(crate) fn build(spec: &Spec) -> Vec<u8> {
    let v6 = matches!(spec.addrs, Addrs::V6(..));
    let tagged = spec.vlan.is_some();
    assert!(
        spec.len >= header_len(tagged, v6, spec.l4),
        "frame too short for its headers"
    );
    let mut f = vec![0u8; spec.len];
    f[0..6].copy_from_slice(&spec.dst);
    f[6..12].copy_from_slice(&spec.src);
    let mut off = 12;
    if let Some(v) = spec.vlan {
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        f[14..16].copy_from_slice(&(v & 0x0fff).to_be_bytes());
        off += VLAN_LEN;
    }
    f[off..off + 2].copy_from_slice(&(if v6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    let l3 = off + 2;
    let l4 = l3 + l3_len(v6);
    let l4_total = spec.len - l4;
    let proto = ip_proto(spec.l4, v6);
    for (i, b) in f[l4 + l4_len(spec.l4)..].iter_mut().enumerate() {
        *b = i as u8;
    }

    // L4 header, checksum zero for now.
    match spec.l4 {
        L4::Udp => {
            f[l4..l4 + 2].copy_from_slice(&spec.sport.to_be_bytes());
            f[l4 + 2..l4 + 4].copy_from_slice(&spec.dport.to_be_bytes());
            f[l4 + 4..l4 + 6].copy_from_slice(&(l4_total as u16).to_be_bytes());
        }
        L4::Tcp => {
            f[l4..l4 + 2].copy_from_slice(&spec.sport.to_be_bytes());
            f[l4 + 2..l4 + 4].copy_from_slice(&spec.dport.to_be_bytes());
            f[l4 + 4..l4 + 8].copy_from_slice(&1u32.to_be_bytes()); // sequence number
            f[l4 + 12] = 5 << 4; // data offset: 5 words
            f[l4 + 13] = 0x02; // SYN
            f[l4 + 14..l4 + 16].copy_from_slice(&0xffffu16.to_be_bytes()); // window
        }
        L4::Icmp => {
            f[l4] = if v6 { 128 } else { 8 }; // echo request
            f[l4 + 4..l4 + 6].copy_from_slice(&spec.sport.to_be_bytes()); // identifier
            f[l4 + 6..l4 + 8].copy_from_slice(&1u16.to_be_bytes()); // sequence
        }
    }

    // L3 header and the pseudo-header sum.
    let pseudo = match spec.addrs {
        Addrs::V4(s, d) => {
            let h = &mut f[l3..l4];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&((spec.len - l3) as u16).to_be_bytes());
            h[6] = 0x40; // DF
            h[8] = TTL;
            h[9] = proto;
            h[12..16].copy_from_slice(&s);
            h[16..20].copy_from_slice(&d);
            let c = checksum(h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            let acc = sum_words(sum_words(0, &s), &d);
            acc + u32::from(proto) + l4_total as u32
        }
        Addrs::V6(s, d) => {
            let h = &mut f[l3..l4];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&(l4_total as u16).to_be_bytes());
            h[6] = proto;
            h[7] = TTL;
            h[8..24].copy_from_slice(&s);
            h[24..40].copy_from_slice(&d);
            let acc = sum_words(sum_words(0, &s), &d);
            acc + u32::from(proto) + (l4_total as u32 >> 16) + (l4_total as u32 & 0xffff)
        }
    };
    let with_pseudo = spec.l4 != L4::Icmp || v6;
    let acc = sum_words(if with_pseudo { pseudo } else { 0 }, &f[l4..]);
    let mut c = !fold(acc);
    if spec.l4 == L4::Udp && c == 0 {
        c = 0xffff;
    }
    let co = l4 + l4_csum_off(spec.l4);
    f[co..co + 2].copy_from_slice(&c.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(addrs: Addrs, l4: L4, vlan: Option<u16>) -> Spec {
        Spec {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan,
            addrs,
            l4,
            sport: 1234,
            dport: 80,
            len: 100,
        }
    }

    /// Verifies the L4 checksum of a built frame from scratch.
    fn l4_ok(f: &[u8], v6: bool, l4: L4, tagged: bool) -> bool {
        let l3 = ETH_LEN + if tagged { VLAN_LEN } else { 0 };
        let l4o = l3 + l3_len(v6);
        let len = (f.len() - l4o) as u32;
        let proto = u32::from(ip_proto(l4, v6));
        let pseudo = if v6 {
            sum_words(0, &f[l3 + 8..l3 + 40]) + proto + len
        } else if l4 == L4::Icmp {
            0
        } else {
            sum_words(0, &f[l3 + 12..l3 + 20]) + proto + len
        };
        fold(sum_words(pseudo, &f[l4o..])) == 0xffff
    }

    #[test]
    fn checksums_verify() {
        let v4 = Addrs::V4([10, 0, 0, 1], [10, 0, 0, 2]);
        let v6 = Addrs::V6([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0xfe; 16]);
        for (a, is6) in [(v4, false), (v6, true)] {
            for l4 in [L4::Udp, L4::Tcp, L4::Icmp] {
                for vlan in [None, Some(100)] {
                    let f = build(&spec(a, l4, vlan));
                    assert_eq!(f.len(), 100);
                    let l3 = if vlan.is_some() { 18 } else { 14 };
                    if !is6 {
                        assert_eq!(checksum(&f[l3..l3 + 20]), 0, "IPv4 header checksum");
                    }
                    assert!(l4_ok(&f, is6, l4, vlan.is_some()), "{a:?} {l4:?} {vlan:?}");
                }
            }
        }
    }

    #[test]
    fn incremental_update_matches_rebuild() {
        let mut s = spec(Addrs::V4([10, 0, 0, 1], [10, 0, 0, 2]), L4::Udp, None);
        let a = build(&s);
        s.sport = 4321;
        let b = build(&s);
        let old = u16::from_be_bytes([a[40], a[41]]);
        let c = csum_update(old, &[1234], &[4321]);
        assert_eq!(c, u16::from_be_bytes([b[40], b[41]]));
    }
}
