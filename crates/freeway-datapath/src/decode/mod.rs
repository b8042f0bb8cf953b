//! Packet lines in the format of `tcpdump -n` (and `-e`), for `freeway capture` without `-w`,
//! `freeway capture -r FILE` and `freeway ctl trace`.
//!
//! A [`Decoder`] turns one Ethernet frame into the line tcpdump prints for it: ARP, IPv4 and
//! IPv6 (extension headers, fragments), TCP (flags, relative sequence numbers, options), UDP,
//! ICMP and ICMPv6 (echo, errors with the quoted header's address and port, neighbour
//! discovery, MLD), IGMP, 802.1Q/802.1ad tags and STP BPDUs; anything else gets tcpdump's
//! generic form (`ip-proto-N`, an unknown ethertype with a hex dump). The corpus test in
//! `crates/freeway/tests/decode.rs` compares the lines with the real tcpdump's, frame by
//! frame. Not decoded (tcpdump decodes them, Freeway prints the generic UDP/IP line): the
//! application protocols on well-known ports (DNS, DHCP, NTP, VXLAN, ...), GRE, SCTP, ESP.
//!
//! tcpdump prints TCP sequence numbers relative to the first ones it saw for a conversation
//! (unless `-S`); so does a [`Decoder`], which therefore keeps a small table of conversations
//! (bounded: [`TCP_CONVERSATIONS`], cleared when full). [`summary`] decodes one frame with a
//! fresh decoder, as the first packet of a conversation is printed.
//!
//! [`PcapText`] turns a pcap byte stream (what a tap writer produces) into such lines with
//! their timestamps, so the same tap machinery serves files, pipes and the terminal.
//!
//! Times are printed in UTC (`HH:MM:SS.micro`); tcpdump prints local time, which is the same
//! with `TZ=UTC`.

mod icmp;
mod ip;
mod read;

pub use read::{read_file, ReadOutput, ReadRequest, ReadSummary};

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::Ipv4Addr;

/// Conversations whose first sequence numbers a [`Decoder`] remembers (cleared when full).
pub const TCP_CONVERSATIONS: usize = 4096;

/// How to print (tcpdump's flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// `-e`: the link-level header (MAC addresses, ethertype, length, VLAN tags).
    pub link: bool,
}

/// Decodes frames into tcpdump lines; see the module doc.
#[derive(Debug, Default)]
pub struct Decoder {
    opts: Options,
    /// (low endpoint, high endpoint) → (first seq, first ack - 1) of the low → high direction.
    tcp: HashMap<ip::TcpConv, (u32, u32)>,
}

/// A frame's bytes as captured and its length on the wire.
pub(crate) struct Frame<'a> {
    pub(crate) b: &'a [u8],
    /// The frame's length on the wire (at least `b.len()`).
    pub(crate) wire: usize,
}

impl Frame<'_> {
    pub(crate) fn u8(&self, i: usize) -> Option<u8> {
        self.b.get(i).copied()
    }
    pub(crate) fn u16(&self, i: usize) -> Option<u16> {
        self.b.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&self, i: usize) -> Option<u32> {
        self.b
            .get(i..i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn v4(&self, i: usize) -> Option<Ipv4Addr> {
        self.b.get(i..i + 4).map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
    pub(crate) fn v6(&self, i: usize) -> Option<std::net::Ipv6Addr> {
        let b: [u8; 16] = self.b.get(i..i + 16)?.try_into().ok()?;
        Some(b.into())
    }
}

/// The one-line summary of a frame, as tcpdump -n prints it (no timestamp).
pub fn summary(frame: &[u8]) -> String {
    Decoder::new(Options::default()).line(frame, frame.len())
}

/// tcpdump's flag letters (`[S.]`).
pub fn tcp_flags(f: u8) -> String {
    let mut s = String::new();
    for (b, c) in [
        (0x01, 'F'),
        (0x02, 'S'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x10, '.'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'W'),
    ] {
        if f & b != 0 {
            s.push(c);
        }
    }
    if s.is_empty() {
        s.push_str("none");
    }
    s
}

fn mac(b: &[u8]) -> String {
    freeway_bridge::Mac(b[..6].try_into().expect("6 bytes")).to_string()
}

/// tcpdump's name of an ethertype.
fn ethertype_name(t: u16) -> &'static str {
    match t {
        0x0800 => "IPv4",
        0x0806 => "ARP",
        0x86dd => "IPv6",
        0x8100 => "802.1Q",
        0x88a8 => "802.1Q-QinQ",
        0x9100 => "802.1Q-9100",
        0x88cc => "LLDP",
        0x8809 => "Slow Protocols",
        0x888e => "EAPOL",
        0x8847 => "MPLS unicast",
        0x8848 => "MPLS multicast",
        0x8035 => "Reverse ARP",
        _ => "Unknown",
    }
}

/// tcpdump's hex dump of `b` (lines of 16 bytes, each after `\n\t`), with the bytes as
/// ASCII beside when `ascii`.
fn hex_dump(s: &mut String, b: &[u8], ascii: bool) {
    for (n, chunk) in b.chunks(16).enumerate() {
        let _ = write!(s, "\n\t0x{:04x}:  ", n * 16);
        let mut hex = String::new();
        for (i, pair) in chunk.chunks(2).enumerate() {
            if i > 0 {
                hex.push(' ');
            }
            for x in pair {
                let _ = write!(hex, "{x:02x}");
            }
        }
        if ascii {
            let text: String = chunk
                .iter()
                .map(|&c| if (0x20..0x7f).contains(&c) { c as char } else { '.' })
                .collect();
            let _ = write!(s, "{hex:<39}  {text}");
        } else {
            s.push_str(&hex);
        }
    }
}

impl Decoder {
    /// A decoder printing with `opts`.
    pub fn new(opts: Options) -> Decoder {
        Decoder {
            opts,
            tcp: HashMap::new(),
        }
    }

    /// The line of one frame (`wire`: its length on the wire, at least the captured length).
    pub fn line(&mut self, frame: &[u8], wire: usize) -> String {
        let f = Frame {
            b: frame,
            wire: wire.max(frame.len()),
        };
        let mut s = String::new();
        let Some(mut et) = f.u16(12) else {
            let _ = write!(s, "[|ether]");
            return s;
        };
        let link = self.opts.link;
        if link {
            let _ = write!(s, "{} > {}, ", mac(&frame[6..12]), mac(&frame[0..6]));
        }
        if et < 0x0600 {
            return self.llc(s, &f, et);
        }
        let mut off = 14;
        if link {
            let _ = write!(s, "ethertype {} (0x{et:04x}), length {wire}: ", ethertype_name(et));
        }
        // VLAN tags: silent without -e, as tcpdump.
        while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
            let (Some(tci), Some(inner)) = (f.u16(off), f.u16(off + 2)) else {
                s.push_str("[|vlan]");
                return s;
            };
            if link {
                let _ = write!(s, "vlan {}, p {}, ", tci & 0xfff, tci >> 13);
                if tci & 0x1000 != 0 {
                    s.push_str("DEI, ");
                }
                let _ = write!(s, "ethertype {} (0x{inner:04x}), ", ethertype_name(inner));
            }
            et = inner;
            off += 4;
        }
        match et {
            0x0800 => {
                if !link {
                    s.push_str("IP ");
                }
                ip::v4(self, &mut s, &f, off);
            }
            0x86dd => {
                if !link {
                    s.push_str("IP6 ");
                }
                ip::v6(self, &mut s, &f, off);
            }
            0x0806 => {
                if !link {
                    s.push_str("ARP, ");
                }
                arp(&mut s, &f, off);
            }
            _ => {
                if !link {
                    let _ = write!(
                        s,
                        "{} > {}, ethertype {} (0x{et:04x}), length {wire}: ",
                        mac(&frame[6..12]),
                        mac(&frame[0..6]),
                        ethertype_name(et)
                    );
                }
                hex_dump(&mut s, frame.get(off..).unwrap_or_default(), true);
            }
        }
        s
    }

    /// An 802.3 frame (a length, not an ethertype, after the addresses): STP, else LLC.
    fn llc(&mut self, mut s: String, f: &Frame, len: u16) -> String {
        if self.opts.link {
            let _ = write!(s, "802.3, length {len}: ");
        }
        let (dsap, ssap, ctl) = (f.u8(14), f.u8(15), f.u8(16));
        if (dsap, ssap, ctl) == (Some(0x42), Some(0x42), Some(0x03)) {
            if self.opts.link {
                s.push_str("LLC, dsap STP (0x42) Individual, ssap STP (0x42) Command, ctrl 0x03: ");
            }
            stp(&mut s, f, 17, usize::from(len).saturating_sub(3));
        } else {
            let _ = write!(
                s,
                "LLC, dsap 0x{:02x}, ssap 0x{:02x}, ctrl 0x{:02x}, length {len}",
                dsap.unwrap_or(0),
                ssap.unwrap_or(0),
                ctl.unwrap_or(0)
            );
        }
        s
    }
}

/// An ARP packet at `off` (its `ARP, ` prefix already printed, or the ethertype with `-e`).
fn arp(s: &mut String, f: &Frame, off: usize) {
    let (Some(htype), Some(ptype), Some(hlen), Some(plen), Some(op)) =
        (f.u16(off), f.u16(off + 2), f.u8(off + 4), f.u8(off + 5), f.u16(off + 6))
    else {
        s.push_str("[|arp]");
        return;
    };
    let len = f.b.len() - off;
    if htype != 1 || ptype != 0x0800 || hlen != 6 || plen != 4 {
        let hw = if htype == 1 {
            "Ethernet".to_string()
        } else {
            format!("Unknown Hardware ({htype})")
        };
        let pr = if ptype == 0x0800 {
            "IPv4".to_string()
        } else {
            format!("Unknown Protocol (0x{ptype:04x})")
        };
        let _ = write!(s, "{hw} (len {hlen}), {pr} (len {plen}), length {len}");
        return;
    }
    let (Some(spa), Some(tpa)) = (f.v4(off + 14), f.v4(off + 24)) else {
        s.push_str("[|arp]");
        return;
    };
    let _ = match op {
        1 => write!(s, "Request who-has {tpa} tell {spa}"),
        2 => write!(s, "Reply {spa} is-at {}", mac(&f.b[off + 8..off + 14])),
        op => write!(s, "Unknown opcode ({op})"),
    };
    let _ = write!(s, ", length {len}");
}

/// An STP BPDU at `off` (after the LLC header).
fn stp(s: &mut String, f: &Frame, off: usize, len: usize) {
    let (Some(_proto), Some(ver), Some(kind)) = (f.u16(off), f.u8(off + 2), f.u8(off + 3)) else {
        s.push_str("STP [|stp]");
        return;
    };
    let version = match ver {
        0 => "802.1d",
        2 => "802.1w",
        3 => "802.1s",
        _ => "unknown version",
    };
    match kind {
        0x80 => {
            let _ = write!(s, "STP {version}, Topology Change, length {len}");
        }
        0x00 | 0x02 => {
            let flags = f.u8(off + 4).unwrap_or(0);
            let mut names = Vec::new();
            for (bit, n) in [(0x01, "Topology change"), (0x80, "Topology change ACK")] {
                if flags & bit != 0 {
                    names.push(n);
                }
            }
            let (Some(prio), Some(port)) = (f.u16(off + 17), f.u16(off + 25)) else {
                s.push_str("STP [|stp]");
                return;
            };
            let bridge = f.b.get(off + 19..off + 25).map(mac).unwrap_or_default();
            let what = if kind == 0 { "Config" } else { "Rapid STP" };
            let flags = if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            };
            let _ = write!(
                s,
                "STP {version}, {what}, Flags [{flags}], bridge-id {prio:04x}.{bridge}.{port:04x}, length {len}"
            );
        }
        k => {
            let _ = write!(s, "STP {version}, BPDU type 0x{k:02x}, length {len}");
        }
    }
}

/// A `Write` that takes a pcap stream (as a tap writer produces it) and writes one tcpdump
/// line per packet (`HH:MM:SS.micro line`, UTC) to `out`. A stream that is not pcap, or a
/// record larger than 256 KiB, ends the output with an error.
pub struct PcapText<W: Write> {
    out: W,
    buf: Vec<u8>,
    dec: Decoder,
    /// After the global header: (nanosecond timestamps, byte-swapped).
    header: Option<(bool, bool)>,
}

/// `HH:MM:SS.micro ` of a time in seconds and microseconds since the epoch (UTC).
pub fn timestamp(secs: u64, micros: u32) -> String {
    let day = secs % 86_400;
    format!("{:02}:{:02}:{:02}.{:06} ", day / 3600, day / 60 % 60, day % 60, micros)
}

impl<W: Write> PcapText<W> {
    /// Decodes into `out`, as tcpdump -n prints.
    pub fn new(out: W) -> PcapText<W> {
        PcapText::with(out, Options::default())
    }

    /// Decodes into `out` with tcpdump's `opts`.
    pub fn with(out: W, opts: Options) -> PcapText<W> {
        PcapText {
            out,
            buf: Vec::new(),
            dec: Decoder::new(opts),
            header: None,
        }
    }

    fn drain(&mut self) -> io::Result<()> {
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        let mut at = 0;
        loop {
            let rest = &self.buf[at..];
            let Some((nanos, swap)) = self.header else {
                if rest.len() < 24 {
                    break;
                }
                let magic = u32::from_le_bytes(rest[0..4].try_into().expect("4"));
                self.header = Some(match magic {
                    0xa1b2_c3d4 => (false, false),
                    0xa1b2_3c4d => (true, false),
                    0xd4c3_b2a1 => (false, true),
                    0x4d3c_b2a1 => (true, true),
                    _ => return Err(bad("not a pcap stream (pcapng cannot be decoded to text)")),
                });
                at += 24;
                continue;
            };
            if rest.len() < 16 {
                break;
            }
            let word = |i: usize| {
                let b: [u8; 4] = rest[i..i + 4].try_into().expect("4");
                if swap {
                    u32::from_be_bytes(b)
                } else {
                    u32::from_le_bytes(b)
                }
            };
            let (secs, frac, incl, orig) = (word(0), word(4), word(8) as usize, word(12) as usize);
            if incl > 262_144 {
                return Err(bad("pcap record larger than 256 KiB"));
            }
            if rest.len() < 16 + incl {
                break;
            }
            let micros = if nanos { frac / 1000 } else { frac };
            let mut line = timestamp(u64::from(secs), micros);
            line.push_str(&self.dec.line(&rest[16..16 + incl], orig.max(incl)));
            line.push('\n');
            self.out.write_all(line.as_bytes())?;
            at += 16 + incl;
        }
        self.buf.drain(..at);
        Ok(())
    }
}

impl<W: Write> Write for PcapText<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        self.drain()?;
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests;
