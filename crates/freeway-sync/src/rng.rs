//! SplitMix64: a small, fast, well-mixed deterministic generator for workloads, traffic
//! generation and property-test inputs (never for anything that must be unpredictable).
//!
//! Threads: a generator is plain state, owned by whoever draws from it.

/// A SplitMix64 generator; the state is public so callers can seed it directly.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator from `seed`, mixed with a constant first (seeds 0, 1, 2… start far apart).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform number in `0..n` (multiply-shift: no division; 0 when `n` is 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `pct` %.
    #[inline]
    pub fn pct(&mut self, pct: u32) -> bool {
        self.below(100) < u64::from(pct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_sequence_and_ranges() {
        // The first output of SplitMix64 from state 0 (the reference implementation's).
        assert_eq!(Rng(0).next_u64(), 0xe220_a839_7b1d_cdaf);
        let mut r = Rng::new(7);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
        assert!(!(0..100).any(|_| r.pct(0)));
        assert!((0..100).all(|_| r.pct(100)));
    }
}
