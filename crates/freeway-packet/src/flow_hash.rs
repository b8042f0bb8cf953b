//! The symmetric flow hash.
//!
//! Both directions of a flow must land on the same worker (so one flow's state is written by
//! one worker) and in the same conntrack bucket, so the hash is *symmetric*: swapping source
//! and destination (address and port together) gives the same value.
//!
//! Construction: each endpoint becomes one 64-bit key — `(addr << 16) | port` for IPv4 (exact),
//! a folded address mixed with the port for IPv6, the 48-bit MAC for non-IP frames. The two
//! keys are ordered (`min`, `max`), which makes the result symmetric without the weaknesses of
//! an XOR combination (XOR maps every `(a, b)` and `(a ^ x, b ^ x)` to the same value), and the
//! ordered pair plus the protocol are mixed by two folded 64x64->128-bit multiplies (the
//! mixing step of aHash's fallback and wyhash), so every input bit reaches every output bit.
//! Cost: two `mul` instructions and a few ALU operations, 1-2 ns.
//!
//! The hash is unseeded and therefore predictable; a table that must resist hash flooding
//! should mix in its own secret.
//!
//! Threads: pure functions, no state.

const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
/// The `proto` argument of [`hash_pair`] used for MAC-pair hashes.
pub const MAC_DISCRIMINATOR: u32 = 0x0200;

const K3: u64 = 0x1656_67b1_9e37_79f9;

/// Multiplies two 64-bit values to 128 bits and folds the halves together (one `mul`
/// instruction): the mixing step of aHash's fallback and wyhash.
#[inline(always)]
fn folded_mul(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// Hashes two endpoint keys and a protocol/discriminator, symmetrically in the two keys.
#[inline(always)]
pub fn hash_pair(a: u64, b: u64, proto: u32) -> u32 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let h = folded_mul(lo ^ K1, hi ^ K2);
    let h = folded_mul(h ^ u64::from(proto), K3);
    (h ^ (h >> 32)) as u32
}

/// The endpoint key of an IPv4 address and port.
#[inline(always)]
fn key_v4(addr: [u8; 4], port: u16) -> u64 {
    (u64::from(u32::from_be_bytes(addr)) << 16) | u64::from(port)
}

/// The endpoint key of an IPv6 address and port.
#[inline(always)]
fn key_v6(addr: [u8; 16], port: u16) -> u64 {
    let v = u128::from_be_bytes(addr);
    let hi = (v >> 64) as u64;
    let lo = v as u64;
    // An injective-per-half fold: multiply one half so the two halves cannot cancel out.
    (hi.wrapping_mul(K1) ^ lo).rotate_left(16) ^ u64::from(port)
}

/// Symmetric hash of an IPv4 5-tuple: `hash_5tuple_v4(a, b, p, x, y) == hash_5tuple_v4(b, a,
/// p, y, x)`. Use ports 0 for protocols without ports (and for IPv4 fragments).
#[inline(always)]
pub fn hash_5tuple_v4(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16) -> u32 {
    hash_pair(key_v4(src, sport), key_v4(dst, dport), u32::from(proto) | 0x0400)
}

/// Symmetric hash of an IPv6 5-tuple, with the same symmetry as [`hash_5tuple_v4`].
#[inline(always)]
pub fn hash_5tuple_v6(src: [u8; 16], dst: [u8; 16], proto: u8, sport: u16, dport: u16) -> u32 {
    hash_pair(key_v6(src, sport), key_v6(dst, dport), u32::from(proto) | 0x0600)
}

/// Symmetric hash of a MAC address pair (for non-IP frames).
#[inline]
pub fn hash_macs(a: [u8; 6], b: [u8; 6]) -> u32 {
    let ka = u64::from_be_bytes([0, 0, a[0], a[1], a[2], a[3], a[4], a[5]]);
    let kb = u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
    hash_pair(ka, kb, MAC_DISCRIMINATOR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn v4_is_symmetric(a: [u8; 4], b: [u8; 4], p: u8, x: u16, y: u16) {
            prop_assert_eq!(hash_5tuple_v4(a, b, p, x, y), hash_5tuple_v4(b, a, p, y, x));
        }

        #[test]
        fn v6_is_symmetric(a: [u8; 16], b: [u8; 16], p: u8, x: u16, y: u16) {
            prop_assert_eq!(hash_5tuple_v6(a, b, p, x, y), hash_5tuple_v6(b, a, p, y, x));
        }

        #[test]
        fn macs_are_symmetric(a: [u8; 6], b: [u8; 6]) {
            prop_assert_eq!(hash_macs(a, b), hash_macs(b, a));
        }

        #[test]
        fn changing_one_port_changes_the_hash(a: [u8; 4], b: [u8; 4], x: u16, y: u16, d in 1u16..) {
            // Not guaranteed for a 32-bit hash in general, but a collision here would be a
            // (1 in 4 billion) fluke; a systematic one would mean a port is ignored.
            prop_assert_ne!(hash_5tuple_v4(a, b, 17, x, y), hash_5tuple_v4(a, b, 17, x.wrapping_add(d), y));
        }
    }

    fn chi_square(buckets: &[u32]) -> f64 {
        let n: u32 = buckets.iter().sum();
        let e = f64::from(n) / buckets.len() as f64;
        buckets.iter().map(|&c| (f64::from(c) - e).powi(2) / e).sum()
    }

    #[test]
    fn v4_flows_spread_evenly() {
        // 64k flows differing only in the source port (the hard case for weak hashes), then
        // 64k differing only in the low bytes of the source address.
        let mut by_port = [0u32; 16];
        let mut by_addr = [0u32; 16];
        for i in 0..=u16::MAX {
            let h = hash_5tuple_v4([10, 0, 0, 1], [10, 0, 0, 2], 17, i, 53);
            by_port[(h % 16) as usize] += 1;
            let h = hash_5tuple_v4([10, 1, (i >> 8) as u8, i as u8], [10, 0, 0, 2], 6, 1000, 80);
            by_addr[(h % 16) as usize] += 1;
        }
        // 15 degrees of freedom: chi-square above 50 has p < 1e-5 for a uniform hash.
        for b in [by_port, by_addr] {
            let x = chi_square(&b);
            assert!(x < 50.0, "uneven buckets {b:?} (chi2 {x})");
            let exp = 65536 / 16;
            assert!(b.iter().all(|&c| c > exp * 9 / 10 && c < exp * 11 / 10), "{b:?}");
        }
    }

    #[test]
    fn v6_flows_spread_evenly_and_on_high_bits_too() {
        let mut low = [0u32; 16];
        let mut high = [0u32; 16];
        for i in 0..=u16::MAX {
            let mut a = [0x20u8, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            a[14] = (i >> 8) as u8;
            a[15] = i as u8;
            let h = hash_5tuple_v6(a, [0xfe; 16], 6, 443, 5000);
            low[(h % 16) as usize] += 1;
            high[(h >> 28) as usize] += 1;
        }
        for b in [low, high] {
            assert!(chi_square(&b) < 50.0, "uneven buckets {b:?}");
        }
    }

    #[test]
    fn directions_differ_from_other_flows() {
        let a = hash_5tuple_v4([1, 2, 3, 4], [5, 6, 7, 8], 6, 1000, 80);
        assert_ne!(
            a,
            hash_5tuple_v4([1, 2, 3, 4], [5, 6, 7, 8], 17, 1000, 80),
            "protocol matters"
        );
        assert_ne!(
            a,
            hash_5tuple_v4([1, 2, 3, 4], [5, 6, 7, 8], 6, 80, 1000),
            "ports pair with addresses"
        );
    }
}
