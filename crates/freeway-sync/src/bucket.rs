//! A token bucket over the coarse clock's ticks (milliseconds): the rate limiters of ICMP
//! errors, firewall rejects and storm control.
//!
//! Threads: a bucket belongs to one worker (`&mut self`); nothing in it is shared.

use crate::Tick;

/// A token bucket: `rate` tokens per second up to `burst`, refilled from clock ticks.
/// `rate == 0` refills nothing (only the initial burst is ever spent).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: u32,
    burst: u32,
    /// Thousandths of a token.
    milli: u64,
    last: Tick,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: u32, burst: u32) -> Self {
        TokenBucket {
            rate,
            burst,
            milli: u64::from(burst) * 1000,
            last: 0,
        }
    }

    /// An empty bucket as of tick 0: it fills with time (a storm limit starts with what the
    /// clock's age has earned, so a run that starts does not begin with a free burst).
    pub fn starting_empty(rate: u32, burst: u32) -> Self {
        TokenBucket {
            milli: 0,
            ..TokenBucket::new(rate, burst)
        }
    }

    /// Takes one token if there is one.
    #[inline]
    pub fn take(&mut self, now: Tick) -> bool {
        if now > self.last {
            let add = (now - self.last).saturating_mul(u64::from(self.rate));
            self.milli = self.milli.saturating_add(add).min(u64::from(self.burst) * 1000);
            self.last = now;
        }
        if self.milli >= 1000 {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }
}
