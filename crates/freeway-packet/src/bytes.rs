//! Big-endian (network order) field readers and writers on byte slices.
//!
//! The fast-path parsers and the frame rewriters read header fields at computed offsets after
//! checking the lengths they rely on once. These helpers are the one place such reads live.
//! Each is `#[inline(always)]` and bounds-checked through slice indexing: after the caller's
//! own length check the compiler proves the index in range and drops the check, so the code is
//! the same as an open-coded `u16::from_be_bytes([b[i], b[i + 1]])`; a caller that got its
//! check wrong panics instead of reading out of bounds.
//!
//! Threads: none; every function works on the slice it is given.

/// The big-endian `u16` at `b[i..i + 2]`.
///
/// # Panics
/// If `b` is shorter than `i + 2`.
#[inline(always)]
pub fn rd16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

/// The big-endian `u32` at `b[i..i + 4]`.
///
/// # Panics
/// If `b` is shorter than `i + 4`.
#[inline(always)]
pub fn rd32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The big-endian `u128` at `b[i..i + 16]` (an IPv6 address).
///
/// # Panics
/// If `b` is shorter than `i + 16`.
#[inline(always)]
pub fn rd128(b: &[u8], i: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[i..i + 16]);
    u128::from_be_bytes(a)
}

/// The 6 bytes at `b[i..i + 6]` (a MAC address).
///
/// # Panics
/// If `b` is shorter than `i + 6`.
#[inline(always)]
pub fn mac_at(b: &[u8], i: usize) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[i..i + 6]);
    m
}

/// Writes `v` big-endian at `b[i..i + 2]`.
///
/// # Panics
/// If `b` is shorter than `i + 2`.
#[inline(always)]
pub fn wr16(b: &mut [u8], i: usize, v: u16) {
    b[i..i + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `b[i..i + 4]`.
///
/// # Panics
/// If `b` is shorter than `i + 4`.
#[inline(always)]
pub fn wr32(b: &mut [u8], i: usize, v: u32) {
    b[i..i + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_network_order() {
        let mut b = [0u8; 20];
        wr16(&mut b, 1, 0x1234);
        wr32(&mut b, 3, 0x5678_9abc);
        assert_eq!(&b[..7], &[0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc]);
        assert_eq!(rd16(&b, 1), 0x1234);
        assert_eq!(rd32(&b, 3), 0x5678_9abc);
        assert_eq!(mac_at(&b, 1), [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc]);
        assert_eq!(rd128(&b, 1) >> 80, 0x1234_5678_9abc);
    }

    #[test]
    #[should_panic]
    fn a_short_slice_panics_rather_than_reading_past_it() {
        rd16(&[1], 0);
    }
}
