//! IPv4 and IPv6, with TCP and UDP, in tcpdump's words.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use freeway_packet::bytes::{rd16, rd32};

use super::{icmp, Decoder, Frame, TCP_CONVERSATIONS};

/// A TCP conversation as tcpdump keys it: both endpoints in a fixed order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TcpConv {
    src: u128,
    dst: u128,
    ports: u32,
}

/// An IPv4 packet at `off` (after `IP ` or the ethertype).
pub(super) fn v4(d: &mut Decoder, s: &mut String, f: &Frame, off: usize) {
    // The fixed header, its length checked once.
    let Some(h) = f.b.get(off..off + 20) else {
        s.push_str(" [|ip]");
        return;
    };
    let (vhl, total, fo, proto) = (h[0], rd16(h, 2), rd16(h, 6), h[9]);
    let (src, dst) = (Ipv4Addr::from(rd32(h, 12)), Ipv4Addr::from(rd32(h, 16)));
    let ihl = usize::from(vhl & 0x0f) * 4;
    let total = usize::from(total);
    if vhl >> 4 != 4 {
        let _ = write!(s, "IP{}", vhl >> 4);
        return;
    }
    if ihl < 20 {
        let _ = write!(s, "bad-hlen {ihl}");
        return;
    }
    let on_wire = f.wire.saturating_sub(off);
    if on_wire < total {
        let _ = write!(s, "truncated-ip - {} bytes missing! ", total - on_wire);
    }
    let len = total.saturating_sub(ihl);
    let l4 = off + ihl;
    if fo & 0x1fff != 0 {
        let _ = write!(s, "{src} > {dst}: ip-proto-{proto}");
        return;
    }
    let (a, b) = (u128::from(u32::from(src)), u128::from(u32::from(dst)));
    match proto {
        6 => tcp(d, s, f, l4, len, Some((&src.to_string(), &dst.to_string())), (a, b)),
        17 => udp(
            s,
            f,
            l4,
            len,
            Some((&src.to_string(), &dst.to_string())),
            fo & 0x2000 != 0,
        ),
        1 => {
            let _ = write!(s, "{src} > {dst}: ");
            icmp::icmp4(s, f, l4, len);
        }
        2 => {
            let _ = write!(s, "{src} > {dst}: ");
            icmp::igmp(s, f, l4, len);
        }
        p => {
            let _ = write!(s, "{src} > {dst}:  ip-proto-{p} {len}");
        }
    }
}

/// An IPv6 packet at `off` (after `IP6 ` or the ethertype).
pub(super) fn v6(d: &mut Decoder, s: &mut String, f: &Frame, off: usize) {
    let (Some(plen), Some(mut nh), Some(src), Some(dst)) =
        (f.u16(off + 4), f.u8(off + 6), f.v6(off + 8), f.v6(off + 24))
    else {
        s.push_str(" [|ip6]");
        return;
    };
    let (a, b) = (u128::from(src), u128::from(dst));
    let (src, dst) = (src.to_string(), dst.to_string());
    let mut len = usize::from(plen);
    let mut at = off + 40;
    // TCP and UDP print the addresses with their ports, unless an extension header came first.
    let mut addrs = Some((src.as_str(), dst.as_str()));
    let mut said = false;
    let mut fragmented = false;
    let mut say = |s: &mut String, addrs: &mut Option<(&str, &str)>| {
        if !said {
            let _ = write!(s, "{src} > {dst}: ");
            said = true;
        }
        *addrs = None;
    };
    loop {
        match nh {
            0 | 60 | 43 => {
                let (Some(next), Some(hl)) = (f.u8(at), f.u8(at + 1)) else {
                    say(s, &mut addrs);
                    s.push_str("[|ip6]");
                    return;
                };
                say(s, &mut addrs);
                let hlen = (usize::from(hl) + 1) * 8;
                match nh {
                    0 => s.push_str("HBH "),
                    60 => s.push_str("DSTOPT "),
                    _ => {
                        let _ = write!(
                            s,
                            "srcrt (len={}, type={}, segleft={}) ",
                            hl,
                            f.u8(at + 2).unwrap_or(0),
                            f.u8(at + 3).unwrap_or(0)
                        );
                    }
                }
                nh = next;
                at += hlen;
                len = len.saturating_sub(hlen);
            }
            44 => {
                let (Some(next), Some(fo)) = (f.u8(at), f.u16(at + 2)) else {
                    say(s, &mut addrs);
                    s.push_str("frag [|frag]");
                    return;
                };
                say(s, &mut addrs);
                let offset = usize::from(fo & 0xfff8);
                let _ = write!(s, "frag ({offset}|{}) ", len.saturating_sub(8));
                if offset != 0 {
                    // tcpdump ends a non-first fragment's line after the fragment header.
                    s.pop();
                    return;
                }
                nh = next;
                at += 8;
                len = len.saturating_sub(8);
                fragmented = true;
            }
            59 => {
                say(s, &mut addrs);
                s.push_str("no next header");
                return;
            }
            6 => return tcp(d, s, f, at, len, addrs, (a, b)),
            17 => return udp(s, f, at, len, addrs, fragmented),
            58 => {
                say(s, &mut addrs);
                return icmp::icmp6(s, f, at, len);
            }
            p => {
                say(s, &mut addrs);
                let _ = write!(s, " ip-proto-{p} {len}");
                return;
            }
        }
    }
}

/// `a.p > b.q: ` or, after an extension header, `p > q: `.
fn ports(s: &mut String, addrs: Option<(&str, &str)>, sp: u16, dp: u16) {
    let _ = match addrs {
        Some((a, b)) => write!(s, "{a}.{sp} > {b}.{dp}: "),
        None => write!(s, "{sp} > {dp}: "),
    };
}

/// A UDP datagram at `l4` (`len`: what the IP header says is left; `fragmented`: the first
/// fragment of a larger datagram, whose length is not checked).
fn udp(s: &mut String, f: &Frame, l4: usize, len: usize, addrs: Option<(&str, &str)>, fragmented: bool) {
    let (Some(sp), Some(dp), Some(ulen)) = (f.u16(l4), f.u16(l4 + 2), f.u16(l4 + 4)) else {
        if let Some((a, b)) = addrs {
            let _ = write!(s, "{a} > {b}: ");
        }
        s.push_str("[|udp]");
        return;
    };
    ports(s, addrs, sp, dp);
    let ulen = usize::from(ulen);
    if ulen < 8 {
        let _ = write!(s, "UDP, bad length {ulen} < 8");
    } else if ulen > len && !fragmented {
        let _ = write!(s, "UDP, bad length {ulen} > {len}");
    } else {
        let _ = write!(s, "UDP, length {}", ulen - 8);
    }
}

/// A TCP segment at `l4` (`len`: what the IP header says is left); `key`: the addresses for
/// the relative sequence numbers.
fn tcp(
    d: &mut Decoder,
    s: &mut String,
    f: &Frame,
    l4: usize,
    len: usize,
    addrs: Option<(&str, &str)>,
    key: (u128, u128),
) {
    let (Some(sp), Some(dp)) = (f.u16(l4), f.u16(l4 + 2)) else {
        if let Some((a, b)) = addrs {
            let _ = write!(s, "{a} > {b}: ");
        }
        s.push_str("[|tcp]");
        return;
    };
    ports(s, addrs, sp, dp);
    // The fixed header, its length checked once.
    let Some(h) = f.b.get(l4..l4 + 20) else {
        s.push_str("[|tcp]");
        return;
    };
    let (seq, ack, offb, flags) = (rd32(h, 4), rd32(h, 8), h[12], h[13]);
    let (win, urp) = (rd16(h, 14), rd16(h, 18));
    let hlen = usize::from(offb >> 4) * 4;
    if hlen < 20 {
        let _ = write!(
            s,
            " tcp {} [bad hdr length {hlen} - too short, < 20]",
            len.saturating_sub(hlen)
        );
        return;
    }
    let _ = write!(s, "Flags [{}]", super::tcp_flags(flags));
    let (mut seq, mut ack) = (seq, ack);
    let (mut thseq, mut thack, mut rev) = (0u32, 0u32, false);
    if flags & 0x10 != 0 {
        rev = sp > dp || (sp == dp && key.0 > key.1);
        let conv = if rev {
            TcpConv {
                src: key.1,
                dst: key.0,
                ports: u32::from(dp) << 16 | u32::from(sp),
            }
        } else {
            TcpConv {
                src: key.0,
                dst: key.1,
                ports: u32::from(sp) << 16 | u32::from(dp),
            }
        };
        match d.tcp.get(&conv).copied() {
            Some((s0, a0)) if flags & 0x02 == 0 => {
                if rev {
                    seq = seq.wrapping_sub(a0);
                    ack = ack.wrapping_sub(s0);
                } else {
                    seq = seq.wrapping_sub(s0);
                    ack = ack.wrapping_sub(a0);
                }
                (thseq, thack) = (s0, a0);
            }
            _ => {
                if d.tcp.len() >= TCP_CONVERSATIONS {
                    d.tcp.clear();
                }
                let first = if rev {
                    (ack.wrapping_sub(1), seq)
                } else {
                    (seq, ack.wrapping_sub(1))
                };
                d.tcp.insert(conv, first);
                (thseq, thack) = first;
            }
        }
    }
    if hlen > len {
        let _ = write!(s, " [bad hdr length {hlen} - too long, > {len}]");
        return;
    }
    let data = len - hlen;
    if data > 0 || flags & 0x07 != 0 {
        let _ = write!(s, ", seq {seq}");
        if data > 0 {
            let _ = write!(s, ":{}", seq.wrapping_add(data as u32));
        }
    }
    if flags & 0x10 != 0 {
        let _ = write!(s, ", ack {ack}");
    }
    let _ = write!(s, ", win {win}");
    if flags & 0x20 != 0 {
        let _ = write!(s, ", urg {urp}");
    }
    if hlen > 20 {
        s.push_str(", options [");
        if !options(s, f, l4 + 20, hlen - 20, rev, thseq, thack) {
            return;
        }
        s.push(']');
    }
    let _ = write!(s, ", length {data}");
}

/// TCP options; false after a malformed one (tcpdump then ends the line).
fn options(s: &mut String, f: &Frame, mut at: usize, mut left: usize, rev: bool, thseq: u32, thack: u32) -> bool {
    let mut first = true;
    while left > 0 {
        if !first {
            s.push(',');
        }
        first = false;
        let Some(opt) = f.u8(at) else {
            s.push_str("[|tcp]");
            return false;
        };
        let len = if opt <= 1 {
            1
        } else {
            match f.u8(at + 1) {
                Some(l) if l >= 2 && usize::from(l) <= left => usize::from(l),
                _ => {
                    s.push_str("[bad opt]");
                    return false;
                }
            }
        };
        let data = at + 2;
        let dlen = len.saturating_sub(2);
        let name = match opt {
            0 => "eol",
            1 => "nop",
            2 => "mss",
            3 => "wscale",
            4 => "sackOK",
            5 => "sack",
            6 => "echo",
            7 => "echoreply",
            8 => "TS",
            11 => "cc",
            12 => "ccnew",
            13 => "ccecho",
            19 => "md5",
            27 => "qs",
            28 => "uto",
            29 => "tcp-ao",
            30 => "mptcp",
            34 => "tfo",
            _ => "",
        };
        if name.is_empty() {
            let _ = write!(s, "unknown-{opt}");
        } else {
            s.push_str(name);
        }
        let bad = |s: &mut String| {
            s.push_str("[bad opt]");
            false
        };
        match opt {
            2 if dlen >= 2 => {
                let _ = write!(s, " {}", f.u16(data).unwrap_or(0));
            }
            3 if dlen >= 1 => {
                let _ = write!(s, " {}", f.u8(data).unwrap_or(0));
            }
            5 => {
                if dlen % 8 != 0 {
                    s.push_str(" invalid sack");
                } else {
                    let _ = write!(s, " {} ", dlen / 8);
                    for i in (0..dlen).step_by(8) {
                        let (a, b) = (f.u32(data + i).unwrap_or(0), f.u32(data + i + 4).unwrap_or(0));
                        let base = if rev { thseq } else { thack };
                        let _ = write!(s, "{{{}:{}}}", a.wrapping_sub(base), b.wrapping_sub(base));
                    }
                }
            }
            6 | 7 | 11 | 12 | 13 if dlen >= 4 => {
                let _ = write!(s, " {}", f.u32(data).unwrap_or(0));
            }
            8 if dlen >= 8 => {
                let _ = write!(
                    s,
                    " val {} ecr {}",
                    f.u32(data).unwrap_or(0),
                    f.u32(data + 4).unwrap_or(0)
                );
            }
            0 | 1 | 4 => {}
            2 | 3 | 6 | 7 | 8 | 11 | 12 | 13 => return bad(s),
            _ => {
                if dlen > 0 {
                    s.push_str(" 0x");
                    for i in 0..dlen {
                        let _ = write!(s, "{:02x}", f.u8(data + i).unwrap_or(0));
                    }
                }
            }
        }
        at += len;
        left -= len;
        if opt == 0 && left > 0 {
            // tcpdump stops at the end-of-list option.
            break;
        }
    }
    true
}
