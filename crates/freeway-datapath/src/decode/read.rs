//! `freeway capture -r FILE`: a pcap or pcapng file read back and filtered offline, as
//! `tcpdump -r` does: each packet the filter accepts is printed as a line (see [`Decoder`])
//! or written to a pcap file, up to a count.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

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
    ts: Duration,
    data: Vec<u8>,
    wire: u32,
}

/// Reads `path` (pcap or pcapng, Ethernet link type), filters it and sends the matches to
/// `out`. Errors name the file and what is wrong with it.
pub fn read_file(path: &Path, req: &ReadRequest, out: ReadOutput) -> Result<ReadSummary, String> {
    let name = path.display();
    let insns = freeway_capture::compile(req.filter, crate::config::capture::MAX_SNAPLEN)
        .map_err(|e| format!("filter: {e}"))?;
    let prog = freeway_capture::Program::new(&insns).map_err(|e| format!("filter: {e}"))?;
    let mut file = BufReader::new(File::open(path).map_err(|e| format!("{name}: {e}"))?);
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic)
        .map_err(|e| format!("{name}: not a pcap or pcapng file ({e})"))?;
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
            let mut line = timestamp(r.ts.as_secs(), r.ts.subsec_micros());
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
            w.write_packet(&PcapPacket::new(r.ts, r.wire, &r.data[..keep]))
                .map_err(|e| format!("-w: {e}"))?;
        }
        Ok(req.count.is_none_or(|c| sum.matched < c))
    };
    let bad = |e: pcap_file::PcapError| format!("{name}: {e}");
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(chained).map_err(bad)?;
        while let Some(block) = r.next_block() {
            let block = block.map_err(bad)?.into_owned();
            let rec = match block {
                Block::EnhancedPacket(p) => {
                    let link = r.interfaces().get(p.interface_id as usize).map(|i| i.linktype);
                    if link != Some(DataLink::ETHERNET) {
                        return Err(format!(
                            "{name}: only Ethernet captures can be read (link type {link:?})"
                        ));
                    }
                    Rec {
                        ts: p.timestamp,
                        wire: p.original_len,
                        data: p.data.into_owned(),
                    }
                }
                Block::SimplePacket(p) => Rec {
                    ts: Duration::ZERO,
                    wire: p.original_len,
                    data: p.data.into_owned(),
                },
                _ => continue,
            };
            if !each(rec)? {
                break;
            }
        }
    } else {
        let mut r = PcapReader::new(chained).map_err(bad)?;
        if r.header().datalink != DataLink::ETHERNET {
            return Err(format!(
                "{name}: only Ethernet captures can be read (link type {:?})",
                r.header().datalink
            ));
        }
        while let Some(p) = r.next_packet() {
            let p = p.map_err(bad)?;
            let rec = Rec {
                ts: p.timestamp,
                wire: p.orig_len,
                data: p.data.into_owned(),
            };
            if !each(rec)? {
                break;
            }
        }
    }
    Ok(sum)
}
