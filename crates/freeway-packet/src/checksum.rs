//! The Internet checksum (RFC 1071), full and incremental (RFC 1624).
//!
//! All functions are pure and work on the bytes they are given; no state, no threads.
//! Sums are carried in a `u32` accumulator and folded to 16 bits at the end.

use crate::bytes::{rd16, rd32};

/// Adds `data` (as big-endian 16-bit words, an odd last byte padded with zero) to `acc`.
///
/// The result is unfolded; pass it to [`fold`] (or feed more data first). Safe for any
/// length: the accumulator is folded as it goes, so it never overflows.
#[inline]
pub fn sum(data: &[u8], acc: u32) -> u32 {
    let mut acc = u64::from(acc);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        acc += u64::from(rd32(c, 0));
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        acc += u64::from(rd16(rest, i));
        i += 2;
    }
    if i < rest.len() {
        acc += u64::from(rest[i]) << 8;
    }
    // Fold 64 -> 32 bits (one's complement addition is associative over 16-bit words).
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc as u32
}

/// Folds an accumulator to 16 bits and complements it: the value to store in a header.
#[inline]
pub fn fold(acc: u32) -> u16 {
    let mut a = acc;
    a = (a & 0xffff) + (a >> 16);
    a = (a & 0xffff) + (a >> 16);
    !(a as u16)
}

/// The checksum of `data` (complemented, ready to store).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum(data, 0))
}

/// Unfolded sum of the IPv4 pseudo header for an L4 segment of `l4_len` bytes.
#[inline]
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, l4_len: u16) -> u32 {
    let acc = sum(&src, 0);
    let acc = sum(&dst, acc);
    // In 64 bits: the unfolded 32-bit sum can be close to 2^32 (e.g. 255.255.255.255 twice).
    let acc = u64::from(acc) + u64::from(proto) + u64::from(l4_len);
    ((acc & 0xffff_ffff) + (acc >> 32)) as u32
}

/// Unfolded sum of the IPv6 pseudo header for an upper-layer packet of `l4_len` bytes.
#[inline]
pub fn pseudo_v6(src: [u8; 16], dst: [u8; 16], next_header: u8, l4_len: u32) -> u32 {
    let acc = sum(&src, 0);
    let acc = sum(&dst, acc);
    let acc = u64::from(acc) + u64::from(next_header) + u64::from(l4_len >> 16) + u64::from(l4_len & 0xffff);
    ((acc & 0xffff_ffff) + (acc >> 32)) as u32
}

/// Incremental update (RFC 1624, eqn. 3) of a stored checksum `old_csum` when one 16-bit word
/// of the covered data changes from `old` to `new` — e.g. the TTL/protocol word of an IPv4
/// header on a TTL decrement.
#[inline]
pub fn update16(old_csum: u16, old: u16, new: u16) -> u16 {
    // HC' = ~(~HC + ~m + m')
    let acc = u32::from(!old_csum) + u32::from(!old) + u32::from(new);
    fold(acc)
}

/// Whether `data`, which includes its own checksum field, sums to the all-ones value.
#[inline]
pub fn verify(data: &[u8]) -> bool {
    checksum(data) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn pseudo_v4_does_not_overflow_on_all_ones_addresses() {
        let a = [255u8; 4];
        let acc = pseudo_v4(a, a, 17, 0xffff);
        // Reference: sum the pseudo header's 16-bit words in a wide accumulator.
        let words: u64 = 4 * 0xffff + 17 + 0xffff;
        let mut r = words;
        while r > 0xffff {
            r = (r & 0xffff) + (r >> 16);
        }
        assert_eq!(fold(acc), !(r as u16));
    }

    use super::*;
    use crate::bytes::wr16;

    /// A classic example IPv4 header, checksum field zeroed (its checksum is 0xb861).
    const SAMPLE_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
        0x00, 0xc7,
    ];

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: the sum of these words is 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(checksum(&[0x12, 0x34, 0x56]), checksum(&[0x12, 0x34, 0x56, 0x00]));
    }

    #[test]
    fn known_ipv4_header() {
        let mut h = SAMPLE_HEADER;
        let c = checksum(&h);
        assert_eq!(c, 0xb861);
        wr16(&mut h, 10, c);
        assert!(verify(&h));
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut h = SAMPLE_HEADER;
        let c = checksum(&h);
        wr16(&mut h, 10, c);
        for ttl in (0u8..=0x40).rev() {
            let old = rd16(&h, 8);
            let old_c = rd16(&h, 10);
            h[8] = ttl;
            let new = rd16(&h, 8);
            let inc = update16(old_c, old, new);
            wr16(&mut h, 10, inc);
            assert!(verify(&h), "ttl {ttl}");
        }
    }

    #[test]
    fn long_input_does_not_overflow() {
        let data = vec![0xffu8; 70_000];
        assert_eq!(checksum(&data), 0);
    }
}
