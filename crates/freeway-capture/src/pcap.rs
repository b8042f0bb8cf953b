//! pcap and pcapng file writers for Ethernet captures.
//!
//! * pcap: the classic format, microsecond (magic `a1b2c3d4`) or nanosecond (`a1b23c4d`)
//!   timestamps, link type 1 (Ethernet), little-endian.
//! * pcapng: a Section Header Block, one Interface Description Block (`if_name`,
//!   `if_tsresol` = 9, i.e. nanoseconds, snap length), Enhanced Packet Blocks (with
//!   `epb_flags` for the direction) and, when closed, an Interface Statistics Block with
//!   `isb_ifrecv` (packets matched) and `isb_ifdrop` (packets dropped because the ring was
//!   full).
//!
//! Threads: a writer belongs to one thread (the tap's writer thread).

use std::io::{self, Write};

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic pcap; `nanos` picks nanosecond instead of microsecond timestamps.
    Pcap {
        /// Nanosecond timestamps.
        nanos: bool,
    },
    /// pcapng (timestamps in nanoseconds).
    PcapNg,
}

const LINKTYPE_ETHERNET: u32 = 1;

/// Writes packets in one [`Format`] to any `Write`.
#[derive(Debug)]
pub struct CaptureWriter<W: Write> {
    out: W,
    format: Format,
    closed: bool,
}

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

fn opt(buf: &mut Vec<u8>, code: u16, val: &[u8]) {
    buf.extend_from_slice(&code.to_le_bytes());
    buf.extend_from_slice(&(val.len() as u16).to_le_bytes());
    buf.extend_from_slice(val);
    buf.resize(pad4(buf.len()), 0);
}

fn block(out: &mut impl Write, btype: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    out.write_all(&btype.to_le_bytes())?;
    out.write_all(&total.to_le_bytes())?;
    out.write_all(body)?;
    out.write_all(&total.to_le_bytes())
}

impl<W: Write> CaptureWriter<W> {
    /// Starts a capture file: writes the file header (pcap) or SHB + IDB (pcapng) for an
    /// interface called `if_name` with snap length `snaplen`, the tap's own (what tcpdump
    /// `-s` writes): records are cut to it, and their original length may exceed it.
    pub fn new(mut out: W, format: Format, snaplen: u32, if_name: &str) -> io::Result<CaptureWriter<W>> {
        match format {
            Format::Pcap { nanos } => {
                let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
                let mut h = Vec::with_capacity(24);
                h.extend_from_slice(&magic.to_le_bytes());
                h.extend_from_slice(&2u16.to_le_bytes());
                h.extend_from_slice(&4u16.to_le_bytes());
                h.extend_from_slice(&0i32.to_le_bytes());
                h.extend_from_slice(&0u32.to_le_bytes());
                h.extend_from_slice(&snaplen.to_le_bytes());
                h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
                out.write_all(&h)?;
            }
            Format::PcapNg => {
                let mut shb = Vec::new();
                shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
                shb.extend_from_slice(&1u16.to_le_bytes());
                shb.extend_from_slice(&0u16.to_le_bytes());
                shb.extend_from_slice(&(-1i64).to_le_bytes());
                opt(&mut shb, 4, b"freeway"); // shb_userappl
                opt(&mut shb, 0, &[]);
                block(&mut out, 0x0a0d_0d0a, &shb)?;
                let mut idb = Vec::new();
                idb.extend_from_slice(&(LINKTYPE_ETHERNET as u16).to_le_bytes());
                idb.extend_from_slice(&0u16.to_le_bytes());
                idb.extend_from_slice(&snaplen.to_le_bytes());
                opt(&mut idb, 2, if_name.as_bytes()); // if_name
                opt(&mut idb, 9, &[9]); // if_tsresol: 10^-9
                opt(&mut idb, 0, &[]);
                block(&mut out, 1, &idb)?;
            }
        }
        Ok(CaptureWriter {
            out,
            format,
            closed: false,
        })
    }

    /// The format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Writes one packet: `data` captured bytes of a packet `orig_len` long on the wire, at
    /// `ts_ns` nanoseconds since the epoch; `inbound` is `Some(true)` for received,
    /// `Some(false)` for sent (pcapng `epb_flags`; pcap has no direction).
    pub fn write_packet(&mut self, ts_ns: u64, orig_len: u32, data: &[u8], inbound: Option<bool>) -> io::Result<()> {
        match self.format {
            Format::Pcap { nanos } => {
                let sec = (ts_ns / 1_000_000_000) as u32;
                let frac = (ts_ns % 1_000_000_000) as u32;
                let frac = if nanos { frac } else { frac / 1000 };
                let mut h = [0u8; 16];
                h[0..4].copy_from_slice(&sec.to_le_bytes());
                h[4..8].copy_from_slice(&frac.to_le_bytes());
                h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
                h[12..16].copy_from_slice(&orig_len.to_le_bytes());
                self.out.write_all(&h)?;
                self.out.write_all(data)
            }
            Format::PcapNg => {
                let mut body = Vec::with_capacity(32 + pad4(data.len()));
                body.extend_from_slice(&0u32.to_le_bytes()); // interface id
                body.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
                body.extend_from_slice(&(ts_ns as u32).to_le_bytes());
                body.extend_from_slice(&(data.len() as u32).to_le_bytes());
                body.extend_from_slice(&orig_len.to_le_bytes());
                body.extend_from_slice(data);
                body.resize(pad4(body.len()), 0);
                if let Some(inb) = inbound {
                    let flags: u32 = if inb { 1 } else { 2 };
                    opt(&mut body, 2, &flags.to_le_bytes()); // epb_flags
                    opt(&mut body, 0, &[]);
                }
                block(&mut self.out, 6, &body)
            }
        }
    }

    /// Ends the capture: for pcapng, an Interface Statistics Block with `received`
    /// (`isb_ifrecv`) and `dropped` (`isb_ifdrop`) at `ts_ns`; then flushes. Idempotent.
    pub fn close(&mut self, ts_ns: u64, received: u64, dropped: u64) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if self.format == Format::PcapNg {
            let mut isb = Vec::new();
            isb.extend_from_slice(&0u32.to_le_bytes());
            isb.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
            isb.extend_from_slice(&(ts_ns as u32).to_le_bytes());
            opt(&mut isb, 4, &received.to_le_bytes()); // isb_ifrecv
            opt(&mut isb, 5, &dropped.to_le_bytes()); // isb_ifdrop
            opt(&mut isb, 0, &[]);
            block(&mut self.out, 5, &isb)?;
        }
        self.out.flush()
    }

    /// Flushes the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The output, after [`CaptureWriter::close`].
    pub fn into_inner(self) -> W {
        self.out
    }
}
