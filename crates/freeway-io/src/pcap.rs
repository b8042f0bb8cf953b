//! pcap file ports: read frames from one file, write transmitted frames to another.
//!
//! # Reading
//!
//! [`PcapReader`] is a single RX queue (given to worker 0; other workers get none) that reads
//! a classic pcap file: micro- and nanosecond timestamps, either byte order. Only linktype
//! Ethernet (1) is accepted. Each packet carries its record's timestamp
//! ([`freeway_packet::Meta::ts_ns`]) and, when the record was cut, the bytes not stored
//! ([`freeway_packet::Meta::uncaptured`], so the packet's wire length is the record's
//! original length). Records are read as libpcap reads them: one longer than the file's
//! snap length is accepted and cut to it (a header snap length of 0 or above
//! [`MAX_RECORD`] means [`MAX_RECORD`]); one whose captured length exceeds [`MAX_RECORD`]
//! is an error naming the record and both lengths. A frame larger than the pool's buffers
//! is counted (`too_big`) and skipped. The file can be replayed `loops` times (0: forever).
//! At the end of the last pass the queue reports [`RxQueue::is_done`]. A record cut short or
//! corrupt in the middle of the file ends reading; the error is kept and reported by
//! [`Port::close`]. The reader does its file IO on the worker that polls it, in large
//! buffered reads.
//!
//! # Writing
//!
//! [`PcapWriter`] owns a writer thread. Each worker's TX queue copies the frames of a batch
//! into one buffer and sends it through a bounded crossbeam channel; the writer thread writes
//! a standard pcap (microsecond timestamps, native byte order, linktype Ethernet, snaplen
//! 65535, readable by tcpdump) where each record keeps the packet's receive timestamp
//! ([`freeway_packet::Meta::ts_ns`]: a pcap input's own timestamps, so an offline pcap→pcap
//! run keeps them) and its length on the wire as the original length
//! ([`freeway_packet::Packet::wire_len`]). Frames without a receive timestamp (made by the
//! datapath) get the writer's clock, read once per batch. Emptied buffers go back through a second channel, so the steady state
//! allocates nothing, and the packet buffers return to the worker's pool at once.
//!
//! **Backpressure:** when the channel is full (the disk is slower than the datapath) the
//! worker *blocks* in `tx_burst` until the writer catches up, like a full NIC TX ring that the
//! driver waits on: a file output never drops frames. This is the one place a worker may wait
//! on another thread; it never waits on a lock, and if the writer thread has died (IO error)
//! the channel is disconnected and the frames are counted as dropped instead.
//!
//! [`PcapWriter::close`] sends an explicit end marker (behind every frame the stopped workers
//! sent), so it terminates even while TX queues are still alive somewhere; it joins the
//! thread, flushes, and returns the first IO error.
//!
//! Threads: the control thread creates, opens and closes the port; worker 0 owns the reader;
//! worker `w` owns TX queue `w` (single writer of its counters); the writer thread owns the
//! output file and its own counter.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use pcap_file::pcap::{PcapHeader, PcapPacket};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};
use serde::Deserialize;

use freeway_packet::{Batch, Packet, PacketPool};
use freeway_sync::{CachePadded, Counter, Tick};

use crate::sink::SinkTx;
use crate::{Port, PortQueues, RxQueue, StatsBlock, Totals, TxQueue};

/// Snap length of written files.
pub const SNAPLEN: u32 = 65535;

/// Configuration of a pcap port (the `pcap` table of a port in the config file).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PcapConfig {
    /// File to read frames from (the port's RX). Default: none (no RX queue).
    pub read: Option<PathBuf>,
    /// File to write transmitted frames to, created or truncated. Default: none (TX frames
    /// are counted and discarded).
    pub write: Option<PathBuf>,
    /// How many times to read `read` (0: forever). Default 1.
    pub loops: u32,
    /// Capacity of the channel to the writer thread, in batches (of up to 32 frames). A full
    /// channel blocks the transmitting worker. Default 256.
    pub queue_batches: usize,
}

impl Default for PcapConfig {
    fn default() -> Self {
        PcapConfig {
            read: None,
            write: None,
            loops: 1,
            queue_batches: 256,
        }
    }
}

impl PcapConfig {
    /// Checks the configuration (does not touch the files).
    pub fn validate(&self) -> Result<(), String> {
        if self.read.is_none() && self.write.is_none() {
            return Err("give `read` (a file to read), `write` (a file to write) or both".into());
        }
        if let (Some(r), Some(w)) = (&self.read, &self.write) {
            if r == w {
                return Err(format!("read and write name the same file {}", r.display()));
            }
        }
        if self.queue_batches == 0 {
            return Err("queue_batches: must be at least 1".into());
        }
        Ok(())
    }

    /// Makes relative paths relative to `base` (the config file's directory).
    pub fn rebase(&mut self, base: &Path) {
        for p in [&mut self.read, &mut self.write].into_iter().flatten() {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }
}

fn pcap_err(path: &Path, e: PcapError) -> io::Error {
    let what = path.display();
    match e {
        PcapError::IoError(e) => io::Error::new(e.kind(), format!("{what}: {e}")),
        e => io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what}: cannot write a pcap record ({e})"),
        ),
    }
}

/// The largest captured length a record may have: libpcap's largest snap length for
/// Ethernet. A record that claims more is an error (the file is damaged), never an
/// allocation of what it claims.
pub const MAX_RECORD: u32 = 262_144;

/// A classic pcap file read record by record through a large buffer.
struct PcapFile {
    path: PathBuf,
    r: BufReader<File>,
    /// The file is in the other byte order.
    swapped: bool,
    /// Timestamp fractions are nanoseconds (else microseconds).
    nanos: bool,
    /// Bytes kept of a record: the header's snap length, or [`MAX_RECORD`] when the header
    /// gives 0 or more (as libpcap does).
    snaplen: u32,
    /// Records read so far (to name the bad one in errors).
    records: u64,
}

/// One record's header.
#[derive(Clone, Copy, Debug)]
struct RecordHeader {
    ts_ns: u64,
    caplen: u32,
    orig_len: u32,
}

fn invalid(path: &Path, m: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {m}", path.display()))
}

/// Reads as much of `buf` as the file still has; the count read (short only at its end).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl PcapFile {
    /// Opens `path` and checks its header: a clear error for a missing, truncated or
    /// non-pcap file, or a linktype other than Ethernet.
    fn open(path: &Path) -> io::Result<PcapFile> {
        let f = File::open(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut h = [0u8; 24];
        let got =
            read_full(&mut r, &mut h).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        if got < 24 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: truncated pcap file (ends inside the file header: {got} of 24 bytes)",
                    path.display()
                ),
            ));
        }
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match magic {
            0xa1b2_c3d4 => (false, false),
            0xd4c3_b2a1 => (true, false),
            0xa1b2_3c4d => (false, true),
            0x4d3c_b2a1 => (true, true),
            0x0a0d_0d0a => {
                return Err(invalid(
                    path,
                    "not a valid pcap file (this is pcapng; convert it with `editcap -F pcap`)",
                ))
            }
            m => return Err(invalid(path, format!("not a valid pcap file (magic number {m:#010x})"))),
        };
        let word = |i: usize| {
            let b = [h[i], h[i + 1], h[i + 2], h[i + 3]];
            if swapped {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let snaplen = match word(16) {
            0 => MAX_RECORD,
            s => s.min(MAX_RECORD),
        };
        // The low 28 bits are the link type; the high bits may carry FCS information.
        let linktype = word(20) & 0x0fff_ffff;
        if linktype != 1 {
            return Err(invalid(
                path,
                format!("linktype {linktype} is not supported; only Ethernet (1) is"),
            ));
        }
        Ok(PcapFile {
            path: path.to_path_buf(),
            r,
            swapped,
            nanos,
            snaplen,
            records: 0,
        })
    }

    /// The next record's header; `None` at the end of the file (between records).
    fn next_header(&mut self) -> io::Result<Option<RecordHeader>> {
        let mut h = [0u8; 16];
        let got = read_full(&mut self.r, &mut h).map_err(|e| self.io(e))?;
        let n = self.records + 1;
        if got == 0 {
            return Ok(None);
        }
        if got < 16 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: truncated pcap file (record {n} ends inside its header: {got} of 16 bytes)",
                    self.path.display()
                ),
            ));
        }
        let word = |i: usize| {
            let b = [h[i], h[i + 1], h[i + 2], h[i + 3]];
            if self.swapped {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let (sec, frac, caplen, orig_len) = (word(0), word(4), word(8), word(12));
        if caplen > MAX_RECORD {
            return Err(invalid(
                &self.path,
                format!("record {n}: captured length {caplen} too large (max {MAX_RECORD})"),
            ));
        }
        let frac_ns = if self.nanos {
            u64::from(frac)
        } else {
            u64::from(frac) * 1000
        };
        self.records = n;
        Ok(Some(RecordHeader {
            ts_ns: u64::from(sec) * 1_000_000_000 + frac_ns,
            caplen,
            orig_len,
        }))
    }

    /// Reads the record's bytes: the first `into.len()` into `into`, skipping the rest.
    fn read_data(&mut self, rec: &RecordHeader, into: &mut [u8]) -> io::Result<()> {
        let got = read_full(&mut self.r, into).map_err(|e| self.io(e))?;
        let rest = u64::from(rec.caplen) - into.len() as u64;
        let skipped = if got == into.len() && rest > 0 {
            io::copy(&mut (&mut self.r).take(rest), &mut io::sink()).map_err(|e| self.io(e))?
        } else {
            0
        };
        let total = got as u64 + skipped;
        if total < u64::from(rec.caplen) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: truncated pcap file (record {} ends after {total} of {} bytes)",
                    self.path.display(),
                    self.records,
                    rec.caplen
                ),
            ));
        }
        Ok(())
    }

    fn io(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))
    }
}

/// Counters of a [`PcapReader`]. Single writer: the worker polling the reader.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Records read from the file (delivered or too big).
    pub frames_read: Counter,
    /// Frames delivered to the worker.
    pub delivered: Counter,
    /// Bytes delivered.
    pub bytes: Counter,
    /// Frames larger than a pool buffer, skipped.
    pub too_big: Counter,
    /// Passes over the file completed.
    pub passes: Counter,
    /// Set once if reading stopped on an error (truncated or corrupt record).
    pub error: OnceLock<String>,
}

/// Reads frames from a pcap file: an RX queue.
pub struct PcapReader {
    path: PathBuf,
    reader: Option<PcapFile>,
    loops: u32,
    /// Records read in the current pass.
    pass_frames: u64,
    done: bool,
    stats: Arc<CachePadded<ReaderStats>>,
}

impl std::fmt::Debug for PcapReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapReader")
            .field("path", &self.path)
            .field("loops", &self.loops)
            .field("done", &self.done)
            .finish()
    }
}

impl PcapReader {
    /// Opens `path` and checks its header (a clear error for a missing, truncated or non-pcap
    /// file, or a linktype other than Ethernet). `loops`: passes over the file, 0 = forever.
    pub fn open(path: &Path, loops: u32) -> io::Result<PcapReader> {
        let r = PcapFile::open(path)?;
        Ok(PcapReader {
            path: path.to_path_buf(),
            reader: Some(r),
            loops,
            pass_frames: 0,
            done: false,
            stats: Arc::new(CachePadded::new(ReaderStats::default())),
        })
    }

    /// The reader's counters, shared (read them from any thread).
    pub fn stats(&self) -> Arc<CachePadded<ReaderStats>> {
        self.stats.clone()
    }

    fn fail(&mut self, e: io::Error) {
        let _ = self.stats.error.set(e.to_string());
        self.done = true;
        self.reader = None;
    }

    /// End of a pass: start the next one or finish.
    fn end_of_pass(&mut self) {
        self.stats.passes.inc();
        let passes = self.stats.passes.get();
        // A pass that read nothing would loop forever without producing anything.
        if self.pass_frames == 0 || (self.loops != 0 && passes >= u64::from(self.loops)) {
            self.done = true;
            self.reader = None;
            return;
        }
        self.pass_frames = 0;
        match PcapFile::open(&self.path) {
            Ok(r) => self.reader = Some(r),
            Err(e) => self.fail(e),
        }
    }
}

impl PcapReader {
    /// Reads one record into a packet from `pool`: `Ok(None)` at the end of the file,
    /// `Ok(Some(None))` for a record too big for the pool's buffers (counted, skipped).
    fn read_one(&mut self, pool: &mut PacketPool) -> io::Result<Option<Option<Packet>>> {
        let Some(f) = self.reader.as_mut() else {
            return Ok(None);
        };
        let Some(rec) = f.next_header()? else {
            return Ok(None);
        };
        self.pass_frames += 1;
        self.stats.frames_read.inc();
        // Like libpcap, a record longer than the file's snap length is cut to it.
        let keep = rec.caplen.min(f.snaplen) as usize;
        let mut p = pool.get_for(keep);
        let Ok(buf) = p.fill(keep) else {
            f.read_data(&rec, &mut [])?;
            self.stats.too_big.inc();
            pool.put(p);
            return Ok(Some(None));
        };
        if let Err(e) = f.read_data(&rec, buf) {
            pool.put(p);
            return Err(e);
        }
        p.meta.ts_ns = rec.ts_ns;
        p.meta.set_uncaptured(rec.orig_len.saturating_sub(keep as u32));
        Ok(Some(Some(p)))
    }
}

impl RxQueue for PcapReader {
    fn rx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool, _now: Tick) -> usize {
        let mut n = 0;
        while !self.done && batch.room() > 0 && self.reader.is_some() {
            match self.read_one(pool) {
                Ok(None) => self.end_of_pass(),
                Err(e) => self.fail(e),
                Ok(Some(None)) => {}
                Ok(Some(Some(p))) => {
                    let s = &self.stats;
                    s.delivered.inc();
                    s.bytes.add(p.len() as u64);
                    if let Err(p) = batch.push(p) {
                        pool.put(p);
                    }
                    n += 1;
                }
            }
        }
        n
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// Bytes in front of each frame of a [`Msg::Frames`] buffer: its length, its length on
/// the wire (u32 each) and its receive timestamp in nanoseconds (u64, 0: none), all
/// little-endian.
const FRAME_HDR: usize = 16;

enum Msg {
    /// Frames, each behind a [`FRAME_HDR`]-byte header.
    Frames(Vec<u8>),
    /// Flush and stop.
    Close,
}

/// Writes frames transmitted by the workers to a pcap file, through a writer thread.
#[derive(Debug)]
pub struct PcapWriter {
    path: PathBuf,
    tx: Option<Sender<Msg>>,
    free: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<io::Result<()>>>,
    written: Arc<CachePadded<Counter>>,
    stats: StatsBlock,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Frames(b) => write!(f, "Frames({} bytes)", b.len()),
            Msg::Close => write!(f, "Close"),
        }
    }
}

impl PcapWriter {
    /// Creates (or truncates) `path`, writes the pcap header and starts the writer thread.
    /// `queue_batches` bounds the channel (in batches); `queues` TX queues get counters.
    pub fn create(path: &Path, queue_batches: usize, queues: usize) -> io::Result<PcapWriter> {
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let file = File::create(path).map_err(ctx)?;
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::MicroSecond,
            endianness: Endianness::native(),
        };
        let mut w = pcap_file::pcap::PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header)
            .map_err(|e| pcap_err(path, e))?;
        let (tx, rx) = crossbeam_channel::bounded::<Msg>(queue_batches.max(1));
        let (free_tx, free) = crossbeam_channel::bounded::<Vec<u8>>(queue_batches.max(1) + 2 * queues.max(1));
        let written = Arc::new(CachePadded::new(Counter::new()));
        let (wr, ftx, p) = (written.clone(), free_tx, path.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("fw-pcap-writer".into())
            .spawn(move || -> io::Result<()> {
                let err = |e: PcapError| pcap_err(&p, e);
                // Ends on Close, or when every sender is gone.
                while let Ok(Msg::Frames(mut buf)) = rx.recv() {
                    // For frames without a receive timestamp (made by the datapath itself).
                    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
                    let mut rest = &buf[..];
                    while rest.len() >= FRAME_HDR {
                        let word = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
                        let (len, orig_len) = (word(0) as usize, word(4));
                        let ts_ns = u64::from(word(8)) | (u64::from(word(12)) << 32);
                        let ts = if ts_ns == 0 { now } else { Duration::from_nanos(ts_ns) };
                        let frame = &rest[FRAME_HDR..FRAME_HDR + len];
                        w.write_packet(&PcapPacket::new(ts, orig_len, frame)).map_err(err)?;
                        wr.inc();
                        rest = &rest[FRAME_HDR + len..];
                    }
                    buf.clear();
                    let _ = ftx.try_send(buf);
                }
                let mut f = w.into_writer();
                f.flush()
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))?;
                Ok(())
            })?;
        Ok(PcapWriter {
            path: path.to_path_buf(),
            tx: Some(tx),
            free,
            thread: Some(thread),
            written,
            stats: StatsBlock::new(queues.max(1)),
        })
    }

    /// TX queue `q` (of the `queues` given to [`PcapWriter::create`]), for one worker.
    pub fn tx_queue(&self, q: usize) -> PcapTxQueue {
        PcapTxQueue {
            tx: self.tx.clone(),
            free: self.free.clone(),
            stats: self.stats.clone(),
            idx: q,
        }
    }

    /// Frames the writer thread has written so far.
    pub fn written(&self) -> u64 {
        self.written.get()
    }

    /// Frames accepted by the TX queues, and frames dropped because the writer had failed.
    pub fn totals(&self) -> Totals {
        self.stats.totals()
    }

    /// Stops the writer thread after it wrote every frame sent before this call, flushes the
    /// file and returns the first IO error. Idempotent. Does not wait for TX queues to be
    /// dropped.
    pub fn close(&mut self) -> io::Result<()> {
        if let Some(tx) = self.tx.take() {
            // Fails only if the writer thread already ended (on an error): nothing to wait for.
            let _ = tx.send(Msg::Close);
        }
        match self.thread.take() {
            Some(h) => match h.join() {
                Ok(r) => r,
                Err(_) => Err(io::Error::other(format!(
                    "{}: pcap writer thread panicked",
                    self.path.display()
                ))),
            },
            None => Ok(()),
        }
    }
}

impl Drop for PcapWriter {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A worker's TX queue into a [`PcapWriter`].
#[derive(Debug)]
pub struct PcapTxQueue {
    tx: Option<Sender<Msg>>,
    free: Receiver<Vec<u8>>,
    stats: StatsBlock,
    idx: usize,
}

impl TxQueue for PcapTxQueue {
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize {
        let n = batch.len();
        if n == 0 {
            return 0;
        }
        let mut buf = self.free.try_recv().unwrap_or_default();
        let mut bytes = 0u64;
        for p in batch.drain() {
            buf.extend_from_slice(&(p.len() as u32).to_le_bytes());
            buf.extend_from_slice(&p.wire_len().to_le_bytes());
            buf.extend_from_slice(&p.meta.ts_ns.to_le_bytes());
            buf.extend_from_slice(p.data());
            bytes += p.len() as u64;
            pool.put(p);
        }
        let s = self.stats.queue(self.idx);
        // Blocks while the channel is full: file output applies backpressure.
        let ok = self.tx.as_ref().is_some_and(|tx| tx.send(Msg::Frames(buf)).is_ok());
        if ok {
            s.packets.add(n as u64);
            s.bytes.add(bytes);
            n
        } else {
            self.tx = None;
            s.dropped.add(n as u64);
            0
        }
    }
}

/// A pcap port: reads [`PcapConfig::read`] (RX queue for worker 0), writes
/// [`PcapConfig::write`] (one TX queue per worker); either may be absent.
#[derive(Debug)]
pub struct PcapPort {
    cfg: PcapConfig,
    reader: Option<PcapReader>,
    reader_stats: Option<Arc<CachePadded<ReaderStats>>>,
    writer: Option<PcapWriter>,
    sink: StatsBlock,
}

impl PcapPort {
    /// Validates `cfg` and opens the input file now (so a missing or bad file is reported
    /// before anything starts). The output file is created by [`Port::open`].
    pub fn new(cfg: PcapConfig) -> io::Result<PcapPort> {
        cfg.validate()
            .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
        let reader = match &cfg.read {
            Some(p) => Some(PcapReader::open(p, cfg.loops)?),
            None => None,
        };
        Ok(PcapPort {
            reader_stats: reader.as_ref().map(|r| r.stats()),
            reader,
            cfg,
            writer: None,
            sink: StatsBlock::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PcapConfig {
        &self.cfg
    }

    /// The reader's counters, if the port reads a file.
    pub fn reader_stats(&self) -> Option<Arc<CachePadded<ReaderStats>>> {
        self.reader_stats.clone()
    }

    /// Frames written to the output file so far (0 without one).
    pub fn written(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.written())
    }

    /// Frames accepted (and dropped) by the TX queues, summed over workers.
    pub fn tx_totals(&self) -> Totals {
        match &self.writer {
            Some(w) => w.totals(),
            None => self.sink.totals(),
        }
    }
}

impl Port for PcapPort {
    fn kind(&self) -> &'static str {
        "pcap"
    }

    fn open(&mut self, workers: usize) -> io::Result<PortQueues> {
        let workers = workers.max(1);
        let rx: Vec<Box<dyn RxQueue>> = match self.reader.take() {
            Some(r) => vec![Box::new(r)],
            None => Vec::new(),
        };
        let tx: Vec<Box<dyn TxQueue>> = match &self.cfg.write {
            Some(path) => {
                let w = PcapWriter::create(path, self.cfg.queue_batches, workers)?;
                let tx = (0..workers)
                    .map(|q| Box::new(w.tx_queue(q)) as Box<dyn TxQueue>)
                    .collect();
                self.writer = Some(w);
                tx
            }
            None => {
                let tx;
                (self.sink, tx) = SinkTx::queues(workers);
                tx
            }
        };
        Ok(PortQueues { rx, tx })
    }

    fn close(&mut self) -> io::Result<()> {
        let w = match &mut self.writer {
            Some(w) => w.close(),
            None => Ok(()),
        };
        let r = match self.reader_stats.as_ref().and_then(|s| s.error.get()) {
            Some(m) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("reading stopped: {m}"),
            )),
            None => Ok(()),
        };
        w.and(r)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = Vec::new();
        if let Some(s) = &self.reader_stats {
            v.push(("pcap_frames_read", s.frames_read.get()));
            v.push(("pcap_too_big", s.too_big.get()));
            v.push(("pcap_passes", s.passes.get()));
        }
        let t = self.tx_totals();
        v.push(("pcap_tx_packets", t.packets));
        v.push(("pcap_tx_dropped", t.dropped));
        if self.writer.is_some() {
            v.push(("pcap_written", self.written()));
        }
        v
    }

    fn rx_drops(&self) -> Vec<(&'static str, u64)> {
        match &self.reader_stats {
            Some(s) => vec![("too_big", s.too_big.get())],
            None => Vec::new(),
        }
    }
}
