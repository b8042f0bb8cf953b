//! The tap writer: drains a tap's per-worker rings into a pcap or pcapng stream.
//!
//! Runs on its own thread ([`TapWriter::run`], which keeps polling while packets flow,
//! yielding for a moment when the rings run dry ([`WriterOptions::spin`]), then polls every
//! `idle_sleep`, and parks when they stop, see [`WriterOptions::park_after`]) or is polled
//! ([`TapWriter::poll`]). It stops when the tap is detached, after `count` packets, or on a write error (the tap is
//! then detached, so workers stop copying; forwarding is not affected). On stop it closes
//! the tap, waits until no worker is mid-push, drains or discards what is left, writes the
//! pcapng statistics block and flushes.
//!
//! Accounting, exact once [`TapWriter::run`] returns:
//! `matched == written + dropped + discarded`.
//!
//! # Order
//!
//! Each worker's ring is in the order the worker pushed, which is timestamp order for the
//! packets of one port and direction (receive timestamps are taken per batch, in the order
//! the batches come; a frame held back by the datapath, waiting for a neighbour, keeps its
//! receive time and may follow later ones). The writer merges the rings: it writes the
//! oldest of their heads, and only once no other worker can still push an older one: every
//! other ring has a head (a k-way merge), or its worker's progress mark
//! ([`crate::TapPoint::progress`], read before looking at the empty ring again) is at least
//! as new. So the output is in timestamp order whenever every worker reports its progress
//! and no worker stalls, between taking a batch's timestamp and pushing its copies, for
//! longer than [`WriterOptions::reorder_hold`]: a record held back that long (a stalled or
//! silent worker) is written anyway, so a stopped worker never stops a capture. With one
//! worker there is nothing to merge and nothing is held. After the tap closes, the final
//! drain merges what is left with nobody to wait for.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::pcap::{CaptureWriter, Format};
use crate::tap::{Direction, TapError, TapReader};

/// Writer options.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Output format.
    pub format: Format,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Interface name for pcapng.
    pub if_name: String,
    /// Sleep when all rings are empty (after `spin`).
    pub idle_sleep: Duration,
    /// For this long after the last poll that found packets, an empty poll yields the
    /// thread and polls again instead of sleeping `idle_sleep`: at tens of Mpps a ring of a
    /// few thousand slots fills in far less than a millisecond, so a writer that slept
    /// whenever it caught up left the rings full, and the workers dropping, for most of each
    /// sleep.
    pub spin: Duration,
    /// After this many polls in a row found nothing, [`TapWriter::run`] flushes and parks
    /// its thread until a worker pushes a packet (or the tap closes) instead of polling:
    /// an idle capture costs no wake-ups, and no worker is preempted by its polling.
    pub park_after: u32,
    /// The longest a parked writer sleeps (bounds the delay of a packet whose wake-up was
    /// missed in a race, see [`crate::tap`]).
    pub park_timeout: Duration,
    /// Flush at least this often while packets flow.
    pub flush_every: Duration,
    /// The longest the writer holds back the oldest record waiting for a worker whose ring
    /// is empty and whose progress mark is older (see the module documentation, "Order").
    pub reorder_hold: Duration,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            format: Format::Pcap { nanos: false },
            count: None,
            if_name: "freeway".into(),
            idle_sleep: Duration::from_millis(1),
            spin: Duration::from_micros(200),
            park_after: 16,
            park_timeout: Duration::from_millis(100),
            flush_every: Duration::from_millis(100),
            reorder_hold: Duration::from_millis(10),
        }
    }
}

/// What a writer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TapStats {
    /// Packets run through the filter (matched or not): tcpdump's "received by filter".
    pub seen: u64,
    /// Packets that matched the filter (copied or dropped).
    pub matched: u64,
    /// Packets written.
    pub written: u64,
    /// Packets dropped by workers because a ring was full.
    pub dropped: u64,
    /// Packets left in the rings after stop (count reached or write error).
    pub discarded: u64,
    /// Bytes of packet data written.
    pub bytes: u64,
}

/// Drains one tap into a capture stream.
#[derive(Debug)]
pub struct TapWriter<W: Write> {
    reader: TapReader,
    out: CaptureWriter<W>,
    opts: WriterOptions,
    stats: TapStats,
    last_flush: Instant,
    /// Since when the oldest record has been held back for the merge (None: not held).
    held_since: Option<Instant>,
    /// Per ring, whether the merge's last scan found it empty (scratch).
    empty: Vec<bool>,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl<W: Write> TapWriter<W> {
    /// A writer for `reader`'s tap into `out` (writes the file header now).
    pub fn new(reader: TapReader, out: W, opts: WriterOptions) -> Result<TapWriter<W>, TapError> {
        let out = match CaptureWriter::new(out, opts.format, reader.tap().snaplen(), &opts.if_name) {
            Ok(o) => o,
            Err(e) => {
                reader.detach();
                return Err(TapError::Write(e));
            }
        };
        Ok(TapWriter {
            reader,
            out,
            opts,
            stats: TapStats::default(),
            last_flush: Instant::now(),
            held_since: None,
            empty: Vec::new(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> TapStats {
        let mut s = self.stats;
        s.seen = self.reader.tap().seen();
        s.matched = self.reader.tap().matched();
        s.dropped = self.reader.tap().dropped();
        s
    }

    fn remaining(&self) -> u64 {
        self.opts
            .count
            .map_or(u64::MAX, |c| c.saturating_sub(self.stats.written))
    }

    /// Writes up to `max` packets available now, oldest first (see "Order" in the module
    /// documentation; `closed`: nothing more can arrive, so nothing is waited for). Returns
    /// how many; sets `held_since` when it stopped to wait for a worker.
    fn drain(&mut self, max: u64, closed: bool) -> Result<u64, TapError> {
        let (tap, mut rings) = self.reader.consume();
        let mut n = 0;
        'next: while n < max {
            let mut pick: Option<(u64, usize)> = None;
            let mut some_empty = false;
            self.empty.clear();
            for i in 0..rings.len() {
                let head = rings.peek_ts(i);
                self.empty.push(head.is_none());
                match head {
                    Some(t) if pick.is_none_or(|(p, _)| t < p) => pick = Some((t, i)),
                    Some(_) => {}
                    None => some_empty = true,
                }
            }
            let Some((t, i)) = pick else { break };
            if some_empty && !closed && rings.len() > 1 {
                // An empty ring's worker may still push an older packet, unless its mark
                // (read before looking at the ring again: the pushes made before the mark
                // are then visible) says it will not.
                let mut wait = false;
                for j in 0..rings.len() {
                    if !self.empty[j] || tap.mark(j) >= t {
                        continue;
                    }
                    if rings.peek_ts(j).is_some() {
                        // Something arrived meanwhile: pick again.
                        continue 'next;
                    }
                    wait = true;
                }
                if wait {
                    // Held since the merge last went through unblocked: past the hold, a
                    // silent worker is no longer waited for (until it is heard again).
                    let since = *self.held_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < self.opts.reorder_hold {
                        break;
                    }
                } else {
                    self.held_since = None;
                }
            } else {
                self.held_since = None;
            }
            let out = &mut self.out;
            let res = rings.pop(i, |s| {
                let inbound = Some(s.dir == Direction::Rx as u8);
                out.write_packet(s.ts_ns, s.orig_len, s.data(), inbound)
                    .map(|_| s.cap_len as u64)
            });
            match res {
                Some(Ok(bytes)) => {
                    self.stats.written += 1;
                    self.stats.bytes += bytes;
                    n += 1;
                }
                Some(Err(e)) => {
                    // The packet was taken out of the ring but not written.
                    self.stats.discarded += 1;
                    return Err(TapError::Write(e));
                }
                None => break,
            }
        }
        Ok(n)
    }

    /// Drains what is available now (up to the count). Returns how many packets were
    /// written, and whether the writer should stop (tap closed or count reached).
    pub fn poll(&mut self) -> Result<(u64, bool), TapError> {
        let n = self.drain(self.remaining(), false)?;
        if self.last_flush.elapsed() >= self.opts.flush_every {
            self.out.flush().map_err(TapError::Write)?;
            self.last_flush = Instant::now();
        }
        let done = self.remaining() == 0 || self.reader.tap().is_closed();
        Ok((n, done))
    }

    /// Runs until the tap is detached or `count` packets are written; then finishes (see
    /// the module documentation). Returns the counters, or the write error.
    ///
    /// While packets flow it drains; when the rings run dry it yields and polls again for
    /// up to `spin` after the last packet, then sleeps `idle_sleep` between polls; after
    /// `park_after` empty polls in a row it parks (see [`WriterOptions::park_after`]).
    pub fn run(mut self) -> Result<TapStats, TapError> {
        self.reader.tap().register_writer();
        let mut empty = 0u32;
        let mut last_packet: Option<Instant> = None;
        let r = loop {
            match self.poll() {
                Ok((_, true)) => break Ok(()),
                Ok((0, false)) => {
                    if self.held_since.is_some_and(|t| t.elapsed() < self.opts.reorder_hold) {
                        // Waiting for a worker's progress (the merge): not idle.
                        std::thread::yield_now();
                        continue;
                    }
                    if last_packet.is_some_and(|t| t.elapsed() < self.opts.spin) {
                        std::thread::yield_now();
                        continue;
                    }
                    empty = empty.saturating_add(1);
                    if empty < self.opts.park_after {
                        std::thread::sleep(self.opts.idle_sleep);
                    } else if let Err(e) = self.park() {
                        break Err(e);
                    }
                }
                Ok(_) => {
                    empty = 0;
                    last_packet = Some(Instant::now());
                }
                Err(e) => break Err(e),
            }
        };
        self.finish(r)
    }

    /// Flushes, then sleeps until a worker pushes a packet, the tap closes or
    /// `park_timeout` passes. Announces the sleep before a last look at the rings, so a
    /// worker that pushes after that look sees the announcement and wakes the thread.
    fn park(&mut self) -> Result<(), TapError> {
        self.out.flush().map_err(TapError::Write)?;
        self.last_flush = Instant::now();
        let (tap, mut rings) = self.reader.consume();
        tap.set_parked(true);
        let pending = (0..rings.len()).any(|i| rings.peek_ts(i).is_some());
        if !pending && !tap.is_closed() {
            std::thread::park_timeout(self.opts.park_timeout);
        }
        tap.set_parked(false);
        Ok(())
    }

    /// Stops now: detaches and closes the tap, drains what is left (up to the count),
    /// discards the rest, writes the statistics and flushes.
    pub fn stop(self) -> Result<TapStats, TapError> {
        self.finish(Ok(()))
    }

    fn finish(mut self, r: Result<(), TapError>) -> Result<TapStats, TapError> {
        self.reader.detach();
        let mut r = r;
        if r.is_ok() {
            if let Err(e) = self.drain(self.remaining(), true) {
                r = Err(e);
            }
        }
        // Whatever is left (count reached, or after an error) is discarded.
        let (_, mut rings) = self.reader.consume();
        for i in 0..rings.len() {
            while rings.pop(i, |_| ()).is_some() {
                self.stats.discarded += 1;
            }
        }
        let stats = self.stats();
        if r.is_ok() {
            if let Err(e) = self.out.close(now_ns(), stats.matched, stats.dropped) {
                r = Err(TapError::Write(e));
            }
        }
        r.map(|_| stats)
    }
}
