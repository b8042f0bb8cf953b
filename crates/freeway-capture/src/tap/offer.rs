//! The worker side of a tap: [`Entry`] (a tap and its filter, as a published list holds
//! it) offers a batch to the tap's filter, and copies the matches into the calling worker's
//! ring of that tap, a batch's matches reserved and published at once.
//!
//! Threads: workers only, each with its own [`ProducerKey`] (so each writes only its own
//! ring of every tap); both registry variants tap through here.

use std::sync::Arc;

use freeway_packet::Packet;

use super::{Direction, TapShared};
use crate::bpf::vm::LANES;
use crate::filter::Filter;
use crate::ring::ProducerKey;

impl TapShared {
    /// Worker side: runs `filter` over `frames` (at most [`LANES`], one batch run of the
    /// VM) and copies matches into the ring of `key`'s worker, each recorded at `ts` and as
    /// long on the wire as it is.
    #[inline]
    fn offer(&self, key: &mut ProducerKey, filter: &Filter, dir: Direction, frames: &[&[u8]], ts: u64) {
        let mut keep = [0u32; LANES];
        self.saw(key, frames.len());
        if filter.program().run_batch(frames, &mut keep) {
            self.push_matches(key, dir, &keep[..frames.len()], |i| {
                (frames[i], ts, frames[i].len() as u32)
            });
        }
    }

    /// [`TapShared::offer`] for packets (at most [`LANES`]): compiled filters read the
    /// frames straight from the packets; each is recorded at its receive time
    /// (`meta.ts_ns`, or `ts` when it has none) with its wire length
    /// ([`Packet::wire_len`]) as the original length.
    #[inline]
    fn offer_packets(&self, key: &mut ProducerKey, filter: &Filter, dir: Direction, pkts: &[Packet], ts: u64) {
        let mut keep = [0u32; LANES];
        self.saw(key, pkts.len());
        if filter.program().run_packets(pkts, &mut keep) {
            self.push_matches(key, dir, &keep[..pkts.len()], |i| {
                let p = &pkts[i];
                let t = if p.meta.ts_ns != 0 { p.meta.ts_ns } else { ts };
                (p.data(), t, p.wire_len())
            });
        }
    }

    /// Counts `n` packets seen by the filter on the ring of `key`'s worker.
    #[inline(always)]
    fn saw(&self, key: &mut ProducerKey, n: usize) {
        if let Some(mut p) = self.rings.producer(key) {
            p.saw(n);
        }
    }

    /// Copies packet `i` (`pkt(i)`: its bytes, timestamp and wire length), up to `keep[i]`
    /// bytes and the snap length, into the ring of `key`'s worker for every `keep[i]` that
    /// is not 0: the room is looked up once, the copies are published with one store, and
    /// what does not fit is counted as dropped at once. A lossless tap instead publishes
    /// what fits, wakes the writer and waits for room (giving up, and counting the rest as
    /// dropped, only if the tap closes meanwhile).
    #[cold]
    #[inline(never)]
    fn push_matches<'f>(
        &self,
        key: &mut ProducerKey,
        dir: Direction,
        keep: &[u32],
        pkt: impl Fn(usize) -> (&'f [u8], u64, u32),
    ) {
        let Some(mut producer) = self.rings.producer(key) else {
            return;
        };
        let matched = keep.iter().filter(|&&k| k != 0).count();
        if matched == 0 {
            return;
        }
        let Some(mut section) = producer.enter() else { return };
        let mut todo = keep.iter().enumerate().filter(|(_, &k)| k != 0);
        let mut left = matched;
        loop {
            let mut b = section.batch(left);
            for (i, &k) in todo.by_ref().take(b.len()) {
                let (frame, ts, wire) = pkt(i);
                let snap = k.min(self.snaplen) as usize;
                if !b.fill(ts, self.port, dir as u8, frame, wire, snap) {
                    break;
                }
            }
            left -= b.filled();
            if left == 0 || !self.lossless {
                b.commit(left);
                break;
            }
            // Lossless: publish what fits, let the writer drain, wait for room.
            b.commit(0);
            self.wake_writer();
            if section.is_closed() {
                section.refuse(left);
                break;
            }
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        drop(section);
        self.wake_writer();
    }
}

/// One attached tap in a published list: its shared part and its current filter.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// The tap.
    pub(crate) tap: Arc<TapShared>,
    /// Its current filter.
    pub(crate) filter: Arc<Filter>,
}

impl Entry {
    /// Worker side (the worker of `key`): offers `frames` (any number; run through the
    /// filter [`LANES`] at a time) if the tap is on this port and direction.
    #[inline]
    pub(crate) fn offer_frames(&self, key: &mut ProducerKey, port: u16, dir: Direction, frames: &[&[u8]], ts: u64) {
        if (self.tap.port == port || self.tap.port == super::ANY_PORT) && self.tap.dir.covers(dir) {
            for chunk in frames.chunks(LANES) {
                self.tap.offer(key, &self.filter, dir, chunk, ts);
            }
        }
    }

    /// [`Entry::offer_frames`] for packets, [`LANES`] at a time (compiled filters read the
    /// frames straight from the packets).
    #[inline]
    pub(crate) fn offer_packets(&self, key: &mut ProducerKey, port: u16, dir: Direction, pkts: &[Packet], ts: u64) {
        if (self.tap.port == port || self.tap.port == super::ANY_PORT) && self.tap.dir.covers(dir) {
            for chunk in pkts.chunks(LANES) {
                self.tap.offer_packets(key, &self.filter, dir, chunk, ts);
            }
        }
    }
}

/// What a worker offers its taps ([`super::TapPoint::tap`], [`super::TapPoint::tap_frames`]):
/// packets or raw frames. Both registries walk their lists with it.
pub(crate) trait Offer: Copy {
    /// Whether there is nothing to offer.
    fn is_empty(self) -> bool;

    /// Offers it to `e`'s tap as the worker of `key`.
    fn offer_to(self, e: &Entry, key: &mut ProducerKey, port: u16, dir: Direction, ts: u64);
}

impl Offer for &[Packet] {
    #[inline(always)]
    fn is_empty(self) -> bool {
        <[Packet]>::is_empty(self)
    }

    #[inline(always)]
    fn offer_to(self, e: &Entry, key: &mut ProducerKey, port: u16, dir: Direction, ts: u64) {
        e.offer_packets(key, port, dir, self, ts);
    }
}

impl Offer for &[&[u8]] {
    #[inline(always)]
    fn is_empty(self) -> bool {
        <[&[u8]]>::is_empty(self)
    }

    #[inline(always)]
    fn offer_to(self, e: &Entry, key: &mut ProducerKey, port: u16, dir: Direction, ts: u64) {
        e.offer_frames(key, port, dir, self, ts);
    }
}
