//! Frame builders for tests and benchmarks: TCP segments with chosen sequence numbers,
//! windows and window-scale option, UDP datagrams, ICMP echo and ICMP errors quoting another
//! frame. Every builder returns a parsed [`Packet`] (metadata filled by
//! `freeway_packet::parse`) with valid IPv4 and L4 checksums.
//!
//! Control path only (allocates); never used per packet by the datapath.
//!
//! Threads: pure functions.

use std::net::IpAddr;

use freeway_packet::build::{build_frame, FrameSpec, L4};
use freeway_packet::bytes::{rd16, wr16, wr32};
use freeway_packet::checksum::{fold, pseudo_v4, pseudo_v6, sum};
use freeway_packet::{parse, Packet};

/// The TCP segment fields a test chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// Flag bits (`freeway_packet::build::tcp_flags`).
    pub flags: u8,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Window (raw).
    pub win: u16,
    /// Payload bytes (zeros).
    pub len: usize,
    /// Window scale option to include (SYNs).
    pub wscale: Option<u8>,
}

impl Seg {
    /// A segment with window 65535, no payload, no options.
    pub fn new(flags: u8, seq: u32, ack: u32) -> Seg {
        Seg {
            flags,
            seq,
            ack,
            win: 65535,
            len: 0,
            wscale: None,
        }
    }

    /// With `len` payload bytes.
    pub fn data(mut self, len: usize) -> Seg {
        self.len = len;
        self
    }
}

fn spec(src: IpAddr, dst: IpAddr, proto: L4, sport: u16, dport: u16) -> FrameSpec {
    FrameSpec {
        src_ip: src,
        dst_ip: dst,
        proto,
        src_port: sport,
        dst_port: dport,
        len: 0,
        ..FrameSpec::default()
    }
}

fn parsed(frame: &[u8]) -> Packet {
    let mut p = Packet::from_frame(frame).expect("frame fits");
    parse(&mut p).expect("built frame parses");
    p
}

/// Recomputes the TCP/UDP/ICMPv6 checksum at `csum_at` within the L4 segment of `f`.
fn l4_checksum(f: &mut [u8], l3: usize, l4: usize, csum_at: usize) {
    let v6 = f[l3] >> 4 == 6;
    let end = if v6 {
        l3 + 40 + usize::from(rd16(f, l3 + 4))
    } else {
        l3 + usize::from(rd16(f, l3 + 2))
    };
    wr16(f, l4 + csum_at, 0);
    let pseudo = if v6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&f[l3 + 8..l3 + 24]);
        d.copy_from_slice(&f[l3 + 24..l3 + 40]);
        pseudo_v6(s, d, f[l3 + 6], (end - l4) as u32)
    } else {
        let mut s = [0u8; 4];
        let mut d = [0u8; 4];
        s.copy_from_slice(&f[l3 + 12..l3 + 16]);
        d.copy_from_slice(&f[l3 + 16..l3 + 20]);
        pseudo_v4(s, d, f[l3 + 9], (end - l4) as u16)
    };
    let c = fold(sum(&f[l4..end], pseudo));
    wr16(f, l4 + csum_at, c);
}

/// A TCP segment `src:sport → dst:dport`.
pub fn tcp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, s: Seg) -> Packet {
    let opt = if s.wscale.is_some() { 4 } else { 0 };
    let mut sp = spec(src, dst, L4::Tcp { flags: s.flags }, sport, dport);
    sp.len = freeway_packet::build::header_len(&sp) + opt + s.len;
    let mut f = build_frame(&sp);
    let p = parsed(&f);
    let (l3, l4) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off));
    wr32(&mut f, l4 + 4, s.seq);
    wr32(&mut f, l4 + 8, s.ack);
    wr16(&mut f, l4 + 14, s.win);
    if let Some(ws) = s.wscale {
        f[l4 + 12] = 6 << 4;
        f[l4 + 20..l4 + 24].copy_from_slice(&[1, 3, 3, ws]);
    }
    l4_checksum(&mut f, l3, l4, 16);
    parsed(&f)
}

/// A UDP datagram with `payload` zero bytes.
pub fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: usize) -> Packet {
    let mut sp = spec(src, dst, L4::Udp, sport, dport);
    sp.len = freeway_packet::build::header_len(&sp) + payload;
    parsed(&build_frame(&sp))
}

/// An ICMP (ICMPv6 for IPv6 addresses) echo request or reply with identifier `id`.
pub fn echo(src: IpAddr, dst: IpAddr, id: u16, seq: u16, request: bool) -> Packet {
    let mut f = build_frame(&spec(src, dst, L4::Icmp, id, seq));
    let p = parsed(&f);
    let (l3, l4) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off));
    let v6 = f[l3] >> 4 == 6;
    if !request {
        f[l4] = if v6 { 129 } else { 0 };
    }
    icmp_checksum(&mut f, l3, l4, v6);
    parsed(&f)
}

fn icmp_checksum(f: &mut [u8], l3: usize, l4: usize, v6: bool) {
    if v6 {
        l4_checksum(f, l3, l4, 2);
    } else {
        let end = l3 + usize::from(rd16(f, l3 + 2));
        wr16(f, l4 + 2, 0);
        let c = fold(sum(&f[l4..end], 0));
        wr16(f, l4 + 2, c);
    }
}

/// An ICMP error (`icmp_type`/`code`; ICMPv6 numbering for IPv6) from `src` to `dst`
/// quoting the IP header and the first 8 L4 bytes of `quoted` (a parsed packet).
pub fn icmp_error(src: IpAddr, dst: IpAddr, icmp_type: u8, code: u8, quoted: &Packet) -> Packet {
    let q = quoted.data();
    let ql3 = usize::from(quoted.meta.l3_off);
    let ql4 = usize::from(quoted.meta.l4_off);
    let inner = &q[ql3..(ql4 + 8).min(q.len())];
    let mut sp = spec(src, dst, L4::Icmp, 0, 0);
    sp.len = freeway_packet::build::header_len(&sp) + inner.len();
    let mut f = build_frame(&sp);
    let p = parsed(&f);
    let (l3, l4) = (usize::from(p.meta.l3_off), usize::from(p.meta.l4_off));
    let v6 = f[l3] >> 4 == 6;
    f[l4] = icmp_type;
    f[l4 + 1] = code;
    f[l4 + 4..l4 + 8].fill(0);
    f[l4 + 8..l4 + 8 + inner.len()].copy_from_slice(inner);
    icmp_checksum(&mut f, l3, l4, v6);
    parsed(&f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::checksum::verify;

    #[test]
    fn tcp_builder_sets_fields_and_valid_checksums() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut s = Seg::new(0x02, 1000, 0);
        s.wscale = Some(7);
        let p = tcp(a, b, 1234, 80, s);
        let f = p.data();
        let l4 = usize::from(p.meta.l4_off);
        assert_eq!(&f[l4 + 4..l4 + 8], &1000u32.to_be_bytes());
        assert_eq!(f[l4 + 12] >> 4, 6);
        assert_eq!(&f[l4 + 20..l4 + 24], &[1, 3, 3, 7]);
        assert!(verify(&f[14..34]));
        let mut s6 = [0u8; 16];
        s6[15] = 1;
        let p6 = udp(IpAddr::from(s6), b, 1, 2, 10);
        assert_eq!(p6.meta.ip_proto, 17);
    }
}
