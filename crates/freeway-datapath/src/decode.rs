//! One-line packet summaries in the style of `tcpdump -n`, for `freeway capture` without `-w`
//! and for `freeway ctl trace`.
//!
//! [`summary`] decodes a frame with the workers' parser ([`freeway_packet::parse`]) and prints
//! what tcpdump prints for the common cases (ARP, IPv4/IPv6 with TCP, UDP, ICMP/ICMPv6 echo and
//! errors, neighbour discovery); anything else gets its ethertype or protocol number.
//! [`PcapText`] turns a pcap byte stream (what a tap writer produces) into such lines with
//! their timestamps, so the same tap machinery serves files, pipes and the terminal.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};

use freeway_packet::{parse, Packet, NO_VLAN};

fn rd16(f: &[u8], i: usize) -> Option<u16> {
    f.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

fn rd32(f: &[u8], i: usize) -> Option<u32> {
    f.get(i..i + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn v4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

fn v6(b: &[u8]) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(&b[..16]).expect("16 bytes"))
}

/// tcpdump's flag letters (`[S.]`).
pub fn tcp_flags(f: u8) -> String {
    let mut s = String::new();
    for (b, c) in [
        (0x01, 'F'),
        (0x02, 'S'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'W'),
    ] {
        if f & b != 0 {
            s.push(c);
        }
    }
    if f & 0x10 != 0 {
        s.push('.');
    }
    if s.is_empty() {
        s.push_str("none");
    }
    s
}

/// The tcpdump-style one-line summary of an Ethernet frame (no timestamp).
pub fn summary(frame: &[u8]) -> String {
    let mut p = match Packet::from_frame(frame) {
        Ok(p) => p,
        Err(_) => return format!("frame of {} bytes (longer than the datapath's buffers)", frame.len()),
    };
    if let Err(e) = parse(&mut p) {
        return format!("[|{}] length {}", e.name(), frame.len());
    }
    let f = p.data();
    let m = &p.meta;
    let mut s = String::new();
    if m.vlan_depth > 0 && m.vlan != NO_VLAN {
        let _ = write!(s, "vlan {}, ", m.vlan);
    }
    match m.ethertype {
        0x0806 => arp(&mut s, f, usize::from(m.l3_off)),
        0x0800 | 0x86dd => ip(&mut s, f, m),
        e => {
            let _ = write!(s, "ethertype 0x{e:04x}, length {}", f.len());
        }
    }
    s
}

/// An ARP packet at `l3`.
fn arp(s: &mut String, f: &[u8], l3: usize) {
    let Some(b) = f.get(l3..l3 + 28) else {
        s.push_str("ARP, [|arp]");
        return;
    };
    let (spa, tpa) = (v4(&b[14..18]), v4(&b[24..28]));
    let _ = match u16::from_be_bytes([b[6], b[7]]) {
        1 => write!(s, "ARP, Request who-has {tpa} tell {spa}"),
        2 => write!(
            s,
            "ARP, Reply {spa} is-at {}",
            freeway_bridge::Mac(b[8..14].try_into().expect("6"))
        ),
        op => write!(s, "ARP, op {op}"),
    };
    let _ = write!(s, ", length {}", f.len() - l3);
}

/// An IPv4 or IPv6 packet: addresses, the transport's summary and the TTL (hop limit).
fn ip(s: &mut String, f: &[u8], m: &freeway_packet::Meta) {
    let l3 = usize::from(m.l3_off);
    let l4 = usize::from(m.l4_off);
    let is4 = m.ethertype == 0x0800;
    // The two headers' layouts: length, where the length field counts from (IPv4 counts the
    // header, IPv6 not), the TTL / hop limit, the addresses.
    let (hlen, counted, ttl_at, addr, short) = if is4 {
        (20, 0, 8, 12, "IP [|ip]")
    } else {
        (40, 40, 7, 8, "IP6 [|ip6]")
    };
    let Some(h) = f.get(l3..l3 + hlen) else {
        s.push_str(short);
        return;
    };
    let len_at = if is4 { 2 } else { 4 };
    let len = usize::from(u16::from_be_bytes([h[len_at], h[len_at + 1]]));
    let alen = (hlen - addr) / 2;
    let text = |a: &[u8]| if is4 { v4(a).to_string() } else { v6(a).to_string() };
    let (src, dst) = (text(&h[addr..addr + alen]), text(&h[addr + alen..hlen]));
    let (ttl, end) = (h[ttl_at], (l3 + counted + len).min(f.len()));
    s.push_str(if is4 { "IP " } else { "IP6 " });
    let has_l4 = m.l4_off != freeway_packet::NO_OFFSET;
    let payload = |hl: usize| end.saturating_sub(l4 + hl);
    let _ = match m.ip_proto {
        6 if has_l4 => match (rd16(f, l4), rd16(f, l4 + 2), f.get(l4 + 12..l4 + 14)) {
            (Some(a), Some(b), Some(o)) => {
                let hl = usize::from(o[0] >> 4) * 4;
                let mut t = format!(
                    "{src}.{a} > {dst}.{b}: Flags [{}], seq {}",
                    tcp_flags(o[1]),
                    rd32(f, l4 + 4).unwrap_or(0)
                );
                if o[1] & 0x10 != 0 {
                    let _ = write!(t, ", ack {}", rd32(f, l4 + 8).unwrap_or(0));
                }
                let _ = write!(t, ", win {}, length {}", rd16(f, l4 + 14).unwrap_or(0), payload(hl));
                write!(s, "{t}")
            }
            _ => write!(s, "{src} > {dst}: tcp [|tcp]"),
        },
        17 if has_l4 => match (rd16(f, l4), rd16(f, l4 + 2)) {
            (Some(a), Some(b)) => write!(s, "{src}.{a} > {dst}.{b}: UDP, length {}", payload(8)),
            _ => write!(s, "{src} > {dst}: udp [|udp]"),
        },
        1 | 58 if has_l4 => write!(
            s,
            "{src} > {dst}: {}, length {}",
            icmp(f, l4, m.ip_proto),
            end.saturating_sub(l4)
        ),
        pr => write!(s, "{src} > {dst}: ip-proto-{pr} {}", end.saturating_sub(l3)),
    };
    let _ = write!(s, " (ttl {ttl})");
}

/// An ICMP (`proto` 1) or ICMPv6 (58) message at `l4`: its type, and id and sequence of an echo.
fn icmp(f: &[u8], l4: usize, proto: u8) -> String {
    let (t, c) = (f.get(l4).copied().unwrap_or(0), f.get(l4 + 1).copied().unwrap_or(0));
    let id = rd16(f, l4 + 4).unwrap_or(0);
    let seq = rd16(f, l4 + 6).unwrap_or(0);
    match (proto, t, c) {
        (1, 8, _) => format!("ICMP echo request, id {id}, seq {seq}"),
        (1, 0, _) => format!("ICMP echo reply, id {id}, seq {seq}"),
        (1, 11, _) => "ICMP time exceeded in-transit".into(),
        (1, 3, 4) => "ICMP unreachable - need to frag".into(),
        (1, 3, c) => format!("ICMP unreachable, code {c}"),
        (58, 128, _) => format!("ICMP6, echo request, id {id}, seq {seq}"),
        (58, 129, _) => format!("ICMP6, echo reply, id {id}, seq {seq}"),
        (58, 135, _) => "ICMP6, neighbor solicitation".into(),
        (58, 136, _) => "ICMP6, neighbor advertisement".into(),
        (58, 133, _) => "ICMP6, router solicitation".into(),
        (58, 1, _) => "ICMP6, destination unreachable".into(),
        (58, 2, _) => "ICMP6, packet too big".into(),
        (58, 3, _) => "ICMP6, time exceeded in-transit".into(),
        (1, t, c) => format!("ICMP type {t}, code {c}"),
        (_, t, c) => format!("ICMP6, type {t}, code {c}"),
    }
}

/// A `Write` that takes a pcap stream (as a tap writer produces it) and writes one tcpdump-style
/// line per packet (`HH:MM:SS.micro summary`, UTC) to `out`. A stream that is not pcap, or a
/// record larger than 256 KiB, ends the output with an error.
pub struct PcapText<W: Write> {
    out: W,
    buf: Vec<u8>,
    /// After the global header: (nanosecond timestamps, byte-swapped).
    header: Option<(bool, bool)>,
}

impl<W: Write> PcapText<W> {
    /// Decodes into `out`.
    pub fn new(out: W) -> PcapText<W> {
        PcapText {
            out,
            buf: Vec::new(),
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
            let day = secs % 86_400;
            let mut line = format!(
                "{:02}:{:02}:{:02}.{:06} {}",
                day / 3600,
                day / 60 % 60,
                day % 60,
                micros,
                summary(&rest[16..16 + incl])
            );
            if orig > incl {
                let _ = write!(line, " [snapped {incl} of {orig} bytes]");
            }
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
mod tests {
    use super::*;
    use freeway_packet::build::{build_arp_request, build_frame, tcp_flags as tf, FrameSpec, L4};

    #[test]
    fn summaries_read_like_tcpdump() {
        let udp = build_frame(&FrameSpec::default());
        assert_eq!(summary(&udp), "IP 10.0.0.1.1024 > 10.0.0.2.80: UDP, length 18 (ttl 64)");
        let syn = build_frame(&FrameSpec {
            proto: L4::Tcp {
                flags: tf::SYN | tf::ACK,
            },
            vlan: Some(20),
            ..FrameSpec::default()
        });
        assert_eq!(
            summary(&syn),
            "vlan 20, IP 10.0.0.1.1024 > 10.0.0.2.80: Flags [S.], seq 1, ack 1, win 65535, length 2 (ttl 64)"
        );
        let arp = build_arp_request(
            [2, 0, 0, 0, 0, 1],
            None,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 9),
        );
        assert_eq!(summary(&arp), "ARP, Request who-has 10.0.0.9 tell 10.0.0.1, length 46");
        let echo6 = build_frame(&FrameSpec {
            proto: L4::Icmp,
            src_ip: "fd00::1".parse().unwrap(),
            dst_ip: "fd00::2".parse().unwrap(),
            src_port: 7,
            dst_port: 3,
            ..FrameSpec::default()
        });
        assert!(summary(&echo6).starts_with("IP6 fd00::1 > fd00::2: ICMP6, echo request, id 7, seq 3"));
        assert_eq!(summary(&udp[..20]), "[|truncated_ipv4] length 20");
    }

    #[test]
    fn a_pcap_stream_becomes_lines_whatever_the_chunking() {
        let frames = [build_frame(&FrameSpec::default()), build_frame(&FrameSpec::default())];
        let mut stream = Vec::new();
        {
            let mut w = pcap_file::pcap::PcapWriter::new(&mut stream).unwrap();
            for (i, f) in frames.iter().enumerate() {
                let p = pcap_file::pcap::PcapPacket::new(
                    std::time::Duration::new(3600 + 61 + i as u64, 5000),
                    f.len() as u32,
                    f,
                );
                w.write_packet(&p).unwrap();
            }
        }
        for chunk in [1, 7, stream.len()] {
            let mut out = Vec::new();
            let mut t = PcapText::new(&mut out);
            for c in stream.chunks(chunk) {
                t.write_all(c).unwrap();
            }
            let text = String::from_utf8(out).unwrap();
            assert_eq!(
                text,
                "01:01:01.000005 IP 10.0.0.1.1024 > 10.0.0.2.80: UDP, length 18 (ttl 64)\n\
                 01:01:02.000005 IP 10.0.0.1.1024 > 10.0.0.2.80: UDP, length 18 (ttl 64)\n"
            );
        }
        assert!(PcapText::new(Vec::new()).write_all(&[0u8; 40]).is_err());
    }
}
