//! Choosing the translated source port (or ICMP echo identifier) of a new connection,
//! without a shared write.
//!
//! Every port range is cut into blocks of [`BLOCK`] ports, and the blocks are dealt out to the
//! workers: worker `w` of `W` owns the blocks `b` with `b % W == w`, for every range and every
//! external address, so two workers never hand out the same port and no worker writes
//! anything another reads (a worker's cursor, its counters). A range with fewer blocks than
//! workers is shared by the workers whose index folds onto the same block.
//!
//! Where a search starts in the worker's ports: with [`NatPorts::seeded`] (the datapath's),
//! at a pseudo-random point for every new connection, as Linux starts its search at a random
//! offset, so a translated port says nothing about the connections before it (the sequence
//! is fixed by the seed, for tests); with [`NatPorts::new`], where the last search stopped.
//!
//! Ports are only candidates: the connection table decides. The insert of the translated
//! tuple's node refuses a tuple that is already a connection's (its scan of the bucket is the
//! test, no lookup before it), and the next candidate is tried, so a translation never
//! collides with an existing connection, and a port is reused for other destinations as Linux
//! does (the tuple is unique, not the port). The source port is kept when it is free.
//!
//! A search looks at most [`MAX_TRIES`] candidates: a range that is full (or nearly so)
//! refuses the new connection, counted as exhausted and logged at most once a second per
//! worker, rather than scanning on.
//!
//! Threads: a [`NatPorts`] belongs to one worker.

use freeway_sync::rng::Rng;
use freeway_sync::Tick;

/// Ports per block.
pub const BLOCK: u32 = 64;

/// Most candidates one new connection looks at.
pub const MAX_TRIES: u32 = 128;

/// An inclusive range of ports (or echo identifiers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// The first.
    pub lo: u16,
    /// The last.
    pub hi: u16,
}

impl PortRange {
    /// The range a translation picks from when its rule names none: as Linux, ports below
    /// 1024 stay below 1024 (privileged ones), others go to 1024-65535; echo identifiers
    /// (and protocols without ports, which never use it) may be anything.
    pub fn default_for(port: u16, echo: bool) -> PortRange {
        match port {
            _ if echo => PortRange { lo: 0, hi: u16::MAX },
            1..=1023 => PortRange { lo: 1, hi: 1023 },
            _ => PortRange { lo: 1024, hi: u16::MAX },
        }
    }

    fn len(self) -> u32 {
        u32::from(self.hi) - u32::from(self.lo) + 1
    }

    /// Whether `p` is in it.
    pub fn contains(self, p: u16) -> bool {
        (self.lo..=self.hi).contains(&p)
    }
}

/// One worker's share of the port ranges, and its exhaustion counter.
#[derive(Debug)]
pub struct NatPorts {
    worker: u32,
    workers: u32,
    /// Where the next search starts in the worker's own ports (without `rng`).
    cursor: u32,
    /// The state of the generator of each search's starting point ([`NatPorts::seeded`]).
    rng: Option<Rng>,
    /// New connections refused: no free port among the candidates.
    exhausted: u64,
    /// When exhaustion was last logged.
    logged: Option<Tick>,
}

impl NatPorts {
    /// Worker `worker`'s share, of `workers` workers, searched in order: each search starts
    /// where the last one stopped (predictable ports; tests).
    pub fn new(worker: usize, workers: usize) -> NatPorts {
        let workers = workers.max(1) as u32;
        NatPorts {
            worker: worker as u32 % workers,
            workers,
            cursor: 0,
            rng: None,
            exhausted: 0,
            logged: None,
        }
    }

    /// Worker `worker`'s share, of `workers` workers, each search starting at a pseudo-random
    /// point of it drawn from `seed`'s sequence (the same seed gives the same ports).
    pub fn seeded(worker: usize, workers: usize, seed: u64) -> NatPorts {
        NatPorts {
            rng: Some(Rng(seed ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))),
            ..NatPorts::new(worker, workers)
        }
    }

    /// Where a search of `owned` ports starts: the next pseudo-random point (SplitMix64), or
    /// the cursor.
    #[inline]
    fn start(rng: &mut Option<Rng>, cursor: u32, owned: u32) -> u32 {
        match rng {
            Some(r) => r.below(u64::from(owned)) as u32,
            None => cursor % owned,
        }
    }

    /// The candidates for a connection whose own port is `orig`, in `range`: `orig` first
    /// when it is in the range, then this worker's ports from its cursor on, at most
    /// [`MAX_TRIES`] in all, from a pseudo-random point ([`NatPorts::seeded`]) or the
    /// cursor, which each call moves past what it handed out. The starting point is drawn
    /// only when the search gets past `orig` (a connection that keeps its own port draws
    /// nothing).
    #[inline]
    pub fn candidates(&mut self, range: PortRange, orig: u16) -> Candidates<'_> {
        Candidates {
            range,
            orig: range.contains(orig).then_some(orig),
            first: 0,
            stride: 0,
            owned: 0,
            start: 0,
            k: 0,
            tries: 0,
            worker: self.worker,
            workers: self.workers,
            cursor: &mut self.cursor,
            rng: &mut self.rng,
        }
    }

    /// Counts a refused connection; returns whether to log it now (at most once a second).
    pub fn exhausted(&mut self, now: Tick) -> bool {
        self.exhausted += 1;
        let log = self.logged.is_none_or(|t| now.saturating_sub(t) >= 1000);
        if log {
            self.logged = Some(now);
        }
        log
    }

    /// New connections refused for want of a port.
    pub fn exhausted_count(&self) -> u64 {
        self.exhausted
    }
}

/// The candidate ports of one new connection ([`NatPorts::candidates`]).
#[derive(Debug)]
pub struct Candidates<'a> {
    range: PortRange,
    orig: Option<u16>,
    first: u32,
    stride: u32,
    owned: u32,
    start: u32,
    k: u32,
    tries: u32,
    worker: u32,
    workers: u32,
    cursor: &'a mut u32,
    rng: &'a mut Option<Rng>,
}

impl Candidates<'_> {
    /// Sets up the walk of the worker's own ports (once, after `orig`): the blocks it owns,
    /// every `stride`-th from `first`, and where the walk starts.
    #[inline]
    fn begin_walk(&mut self) {
        let blocks = self.range.len().div_ceil(BLOCK);
        self.stride = self.workers.min(blocks);
        self.first = self.worker % self.stride;
        self.owned = (blocks - self.first).div_ceil(self.stride) * BLOCK;
        self.start = NatPorts::start(self.rng, *self.cursor, self.owned);
    }
}

impl Iterator for Candidates<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        if self.tries >= MAX_TRIES {
            return None;
        }
        if let Some(p) = self.orig.take() {
            self.tries += 1;
            return Some(p);
        }
        if self.stride == 0 {
            self.begin_walk();
        }
        while self.k < self.owned && self.tries < MAX_TRIES {
            let i = (self.start + self.k) % self.owned;
            self.k += 1;
            *self.cursor = self.cursor.wrapping_add(1);
            let block = self.first + (i / BLOCK) * self.stride;
            let off = block * BLOCK + i % BLOCK;
            if off < self.range.len() {
                self.tries += 1;
                return Some((u32::from(self.range.lo) + off) as u16);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_own_disjoint_ports_and_cover_the_range() {
        let range = PortRange { lo: 1024, hi: 65535 };
        let mut seen = std::collections::HashSet::new();
        for w in 0..3 {
            let mut p = NatPorts::new(w, 3);
            let mut mine = std::collections::HashSet::new();
            // Many searches: each hands out up to MAX_TRIES of the worker's ports.
            for _ in 0..2000 {
                for port in p.candidates(range, 0) {
                    mine.insert(port);
                }
            }
            for port in &mine {
                assert!(range.contains(*port));
                assert!(seen.insert(*port), "port {port} handed to two workers");
            }
        }
        assert_eq!(seen.len(), range.len() as usize, "every port is someone's");
    }

    #[test]
    fn the_own_port_comes_first_and_searches_are_bounded() {
        let mut p = NatPorts::new(1, 2);
        let c: Vec<u16> = p.candidates(PortRange { lo: 2000, hi: 2999 }, 2500).collect();
        assert_eq!(c[0], 2500);
        assert_eq!(c.len(), MAX_TRIES as usize);
        assert!(c[1..].iter().all(|x| ((x - 2000) / 64) % 2 == 1), "worker 1's blocks");
        // A small range shared by more workers than blocks.
        let mut q = NatPorts::new(5, 8);
        let c: Vec<u16> = q.candidates(PortRange { lo: 10, hi: 19 }, 0).collect();
        assert_eq!(c, (10..=19).collect::<Vec<_>>());
        assert!(q.exhausted(0) && !q.exhausted(500) && q.exhausted(1000));
        assert_eq!(q.exhausted_count(), 3);
    }

    #[test]
    fn seeded_searches_start_at_scattered_points_fixed_by_the_seed() {
        let range = PortRange { lo: 1024, hi: 65535 };
        let firsts = |seed: u64| -> Vec<u16> {
            let mut p = NatPorts::seeded(1, 2, seed);
            (0..64).map(|_| p.candidates(range, 0).next().unwrap()).collect()
        };
        let a = firsts(7);
        assert_eq!(a, firsts(7), "the seed fixes the sequence");
        assert_ne!(a, firsts(8), "another seed, other ports");
        // Worker 1's blocks only, and no run of consecutive ports.
        assert!(a.iter().all(|x| ((x - 1024) / BLOCK as u16) % 2 == 1));
        let consecutive = a.windows(2).filter(|w| w[1] == w[0].wrapping_add(1)).count();
        assert!(consecutive < 4, "{a:?}");
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert!(distinct.len() > 60, "{a:?}");
        // A search still walks on from its start, wrapping within the worker's ports.
        let mut p = NatPorts::seeded(0, 1, 3);
        let c: Vec<u16> = p.candidates(PortRange { lo: 10, hi: 19 }, 0).collect();
        let mut sorted = c.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (10..=19).collect::<Vec<_>>());
    }
}
