//! `freeway capture -r FILE`: a pcap or pcapng file read back and filtered offline, as
//! `tcpdump -r` does: each packet the filter accepts is printed as a line (see [`Decoder`])
//! or written to a pcap file, up to a count.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;
use std::time::Duration;

use freeway_io::pcap::MAX_RECORD;
use pcap_file::pcap::{PcapHeader, PcapReader, PcapWriter, RawPcapPacket};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};

use super::{timestamp, Decoder, Options};

/// What to do with a file's packets.
pub struct ReadRequest<'a> {
    /// The filter expression (tcpdump syntax; empty: every packet).
    pub filter: &'a str,
    /// Stop after this many matching packets.
    pub count: Option<u64>,
    /// Bytes kept of each packet written with `-w` (the file header says so too).
    pub snaplen: u32,
    /// How lines are printed.
    pub opts: Options,
    /// Called once the file is open and its header read, before any packet, with the
    /// file's snap length (a pcapng file's first interface's): where `tcpdump -r` prints
    /// `reading from file ...`, never for a file it cannot read.
    pub opened: Option<&'a dyn Fn(u32)>,
}

/// Where matching packets go.
pub enum ReadOutput<'a> {
    /// One line per packet.
    Text(&'a mut dyn Write),
    /// A pcap file (`-w`).
    Pcap(&'a mut dyn Write),
}

/// What a read saw: packets read, and those the filter accepted (and printed or wrote).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadSummary {
    /// Packets read from the file.
    pub read: u64,
    /// Packets the filter accepted.
    pub matched: u64,
}

/// One packet of a file: time, captured bytes and length on the wire.
struct Rec {
    /// Seconds of the timestamp.
    secs: u64,
    /// Microseconds of the timestamp, as libpcap hands them to tcpdump: a classic pcap
    /// record's field is kept as it is, even when it is 1,000,000 or more (tcpdump prints
    /// such a record's time as `hh:mm:ss.1500000`, and `-w` writes the field back unchanged).
    micros: u32,
    data: Vec<u8>,
    wire: u32,
}

impl Rec {
    fn at(ts: Duration, data: Vec<u8>, wire: u32) -> Rec {
        Rec {
            secs: ts.as_secs(),
            micros: ts.subsec_micros(),
            data,
            wire,
        }
    }
}

/// The microseconds of a classic pcap record's fraction field, as libpcap gives them to
/// tcpdump: as written for a microsecond file; for a nanosecond file, the field read as
/// libpcap's signed 32-bit `tv_usec` divided by 1000 (so tcpdump and this print the same
/// digits even for a field of 2^31 or more).
fn record_micros(frac: u32, nanos: bool) -> u32 {
    if nanos {
        ((frac as i32) / 1000) as u32
    } else {
        frac
    }
}

/// A pcapng file's first four bytes (its section header block's type).
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// A classic pcap file's first word, read little-endian: microsecond and nanosecond files,
/// written on either kind of machine.
const PCAP_MAGICS: [u32; 4] = [0xa1b2_c3d4, 0xd4c3_b2a1, 0xa1b2_3c4d, 0x4d3c_b2a1];

/// Reads `path` (pcap or pcapng, Ethernet link type), filters it and sends the matches to
/// `out`. Errors name the file and what is wrong with it.
pub fn read_file(path: &Path, req: &ReadRequest, out: ReadOutput) -> Result<ReadSummary, String> {
    let name = path.display();
    let insns = freeway_capture::compile(req.filter, crate::config::capture::MAX_SNAPLEN)
        .map_err(|e| format!("filter: {e}"))?;
    let prog = freeway_capture::Program::new(&insns).map_err(|e| format!("filter: {e}"))?;
    let mut file = BufReader::new(File::open(path).map_err(|e| format!("{name}: {e}"))?);
    let mut head = Vec::with_capacity(4);
    (&mut file)
        .take(4)
        .read_to_end(&mut head)
        .map_err(|e| format!("{name}: {e}"))?;
    let Ok(magic) = <[u8; 4]>::try_from(&head[..]) else {
        // libpcap's words, as tcpdump prints them.
        return Err(format!(
            "{name}: truncated dump file; tried to read 4 file header bytes, only got {}",
            head.len()
        ));
    };
    if !PCAP_MAGICS.contains(&u32::from_le_bytes(magic)) && magic != PCAPNG_MAGIC {
        return Err(format!("{name}: unknown file format"));
    }
    let chained = io::Cursor::new(magic).chain(file);
    let mut sum = ReadSummary::default();
    let mut dec = Decoder::new(req.opts);
    let (mut text, mut pcap) = match out {
        ReadOutput::Text(w) => (Some(w), None),
        ReadOutput::Pcap(w) => {
            let header = PcapHeader {
                snaplen: req.snaplen,
                datalink: DataLink::ETHERNET,
                endianness: pcap_file::Endianness::native(),
                ..PcapHeader::default()
            };
            let w = PcapWriter::with_header(w, header).map_err(|e| format!("-w: {e}"))?;
            (None, Some(w))
        }
    };
    let mut each = |r: Rec| -> Result<bool, String> {
        sum.read += 1;
        if prog.run_wirelen(&r.data, r.wire) == 0 {
            return Ok(true);
        }
        sum.matched += 1;
        if let Some(w) = text.as_mut() {
            let mut line = timestamp(r.secs, r.micros);
            line.push_str(&dec.line(&r.data, r.wire as usize));
            line.push('\n');
            match w.write_all(line.as_bytes()) {
                Ok(()) => {}
                // A reader that went away (`| head`) ends the read quietly, as tcpdump.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(false),
                Err(e) => return Err(format!("output: {e}")),
            }
        }
        if let Some(w) = pcap.as_mut() {
            let keep = r.data.len().min(req.snaplen as usize);
            let ts_sec = u32::try_from(r.secs).map_err(|_| format!("-w: timestamp {} s is past 2106", r.secs))?;
            let raw = RawPcapPacket {
                ts_sec,
                ts_frac: r.micros,
                incl_len: keep as u32,
                orig_len: r.wire.max(keep as u32),
                data: Cow::Borrowed(&r.data[..keep]),
            };
            w.write_raw_packet(&raw).map_err(|e| format!("-w: {e}"))?;
        }
        Ok(req.count.is_none_or(|c| sum.matched < c))
    };
    let opened = |snaplen: u32| {
        if let Some(f) = req.opened {
            f(snaplen)
        }
    };
    if magic == PCAPNG_MAGIC {
        read_pcapng(chained, &name.to_string(), &opened, &mut each)?;
    } else {
        read_pcap(chained, &name.to_string(), &opened, &mut each)?;
    }
    Ok(sum)
}

/// Hands each packet record of a pcapng file to `each` until it answers `false`.
fn read_pcapng(
    file: impl Read,
    name: &str,
    opened: &dyn Fn(u32),
    each: &mut impl FnMut(Rec) -> Result<bool, String>,
) -> Result<(), String> {
    let bad = |e: pcap_file::PcapError| format!("{name}: {e}");
    let mut r = PcapNgReader::new(file).map_err(bad)?;
    let mut announced = false;
    while let Some(block) = r.next_block() {
        let block = block.map_err(bad)?.into_owned();
        let rec = match block {
            Block::InterfaceDescription(i) if !announced => {
                announced = true;
                opened(i.snaplen);
                continue;
            }
            Block::EnhancedPacket(p) => {
                let link = r.interfaces().get(p.interface_id as usize).map(|i| i.linktype);
                if link != Some(DataLink::ETHERNET) {
                    return Err(format!(
                        "{name}: only Ethernet captures can be read (link type {link:?})"
                    ));
                }
                Rec::at(p.timestamp, p.data.into_owned(), p.original_len)
            }
            Block::SimplePacket(p) => Rec::at(Duration::ZERO, p.data.into_owned(), p.original_len),
            _ => continue,
        };
        if !each(rec)? {
            break;
        }
    }
    Ok(())
}

/// Hands each record of a classic pcap file to `each` until it answers `false`.
fn read_pcap(
    file: impl Read,
    name: &str,
    opened: &dyn Fn(u32),
    each: &mut impl FnMut(Rec) -> Result<bool, String>,
) -> Result<(), String> {
    let bad = |e: pcap_file::PcapError| format!("{name}: {e}");
    let mut r = PcapReader::new(file).map_err(bad)?;
    if r.header().datalink != DataLink::ETHERNET {
        return Err(format!(
            "{name}: only Ethernet captures can be read (link type {:?})",
            r.header().datalink
        ));
    }
    // Records are taken raw and read as libpcap reads them (pcap-file's checked packets
    // refuse a fraction of a second or more, and an original length above the snap
    // length, both of which tcpdump reads): a captured length above the largest snap
    // length is an error; one above the file's snap length is cut to it.
    let header = r.header();
    let nanos = header.ts_resolution == TsResolution::NanoSecond;
    let snaplen = match header.snaplen {
        0 => MAX_RECORD,
        s => s.min(MAX_RECORD),
    };
    opened(header.snaplen);
    let mut n = 0u64;
    while let Some(p) = r.next_raw_packet() {
        let p = p.map_err(bad)?;
        n += 1;
        if p.incl_len > MAX_RECORD {
            return Err(format!(
                "{name}: record {n}: captured length {} too large (max {MAX_RECORD})",
                p.incl_len
            ));
        }
        let mut data = p.data.into_owned();
        data.truncate(snaplen as usize);
        let rec = Rec {
            secs: u64::from(p.ts_sec),
            micros: record_micros(p.ts_frac, nanos),
            wire: p.orig_len.max(data.len() as u32),
            data,
        };
        if !each(rec)? {
            break;
        }
    }
    Ok(())
}
