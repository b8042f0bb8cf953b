//! ICMP, ICMPv6 and IGMP messages, in tcpdump's words.

use std::fmt::Write as _;

use super::Frame;

/// The quoted (inner) IPv4 header of an ICMP error at `q`: (destination, protocol, its
/// destination port if the transport header is there).
fn quoted_v4(f: &Frame, q: usize) -> Option<(String, u8, Option<u16>)> {
    let ihl = usize::from(f.u8(q)? & 0x0f) * 4;
    Some((f.v4(q + 16)?.to_string(), f.u8(q + 9)?, f.u16(q + ihl + 2)))
}

/// An ICMP message at `l4` of `len` bytes (after `src > dst: `).
pub(super) fn icmp4(s: &mut String, f: &Frame, l4: usize, len: usize) {
    let (Some(t), Some(c)) = (f.u8(l4), f.u8(l4 + 1)) else {
        s.push_str("ICMP [|icmp]");
        return;
    };
    // A timestamp reply or router advertisement cut short (by the capture or by its own
    // datagram's length): tcpdump names nothing, not even ICMP.
    let cut = |n: usize| n > len || l4 + n > f.b.len();
    let complete = match t {
        9 => !cut(8) && (f.u8(l4 + 5) != Some(2) || !cut(8 + 8 * usize::from(f.u8(l4 + 4).unwrap_or(0)))),
        14 => !cut(20),
        _ => true,
    };
    if !complete {
        s.push_str(" [|icmp]");
        return;
    }
    s.push_str("ICMP ");
    let q = l4 + 8;
    let inner = quoted_v4(f, q);
    let dst = inner.as_ref().map(|i| i.0.clone()).unwrap_or_default();
    let id = f.u16(l4 + 4).unwrap_or(0);
    let seq = f.u16(l4 + 6).unwrap_or(0);
    let _ = match t {
        0 | 8 => write!(
            s,
            "echo {}, id {id}, seq {seq}",
            if t == 8 { "request" } else { "reply" }
        ),
        3 => unreach4(s, f, l4, c, inner),
        5 => {
            let gw = f.v4(l4 + 4).map(|a| a.to_string()).unwrap_or_default();
            // Codes 0 to 3: for the net or the host, and for the TOS or not.
            let tos = if c & 2 != 0 { "-tos" } else { "" };
            let to = if c & 1 != 0 { "host" } else { "net" };
            match c {
                0..=3 => write!(s, "redirect{tos} {dst} to {to} {gw}"),
                c => write!(s, "redirect-#{c} {dst} to {gw}"),
            }
        }
        11 => match c {
            0 => write!(s, "time exceeded in-transit"),
            1 => write!(s, "ip reassembly time exceeded"),
            c => write!(s, "time exceeded-#{c}"),
        },
        12 => match c {
            0 => write!(s, "parameter problem - octet {}", f.u8(l4 + 4).unwrap_or(0)),
            c => write!(s, "parameter problem - code {c}"),
        },
        9 => router_advertisement(s, f, l4),
        13 => write!(s, "time stamp query id {id} seq {seq}"),
        14 => {
            let ts = |at: usize| tstamp(f.u32(at).unwrap_or(0));
            write!(
                s,
                "time stamp reply id {id} seq {seq}: org {}, recv {}, xmit {}",
                ts(l4 + 8),
                ts(l4 + 12),
                ts(l4 + 16)
            )
        }
        18 => write!(s, "address mask is 0x{:08x}", f.u32(l4 + 8).unwrap_or(0)),
        4 => write!(s, "source quench"),
        10 => write!(s, "router solicitation"),
        15 => write!(s, "information request"),
        16 => write!(s, "information reply"),
        17 => write!(s, "address mask request"),
        t => write!(s, "type-#{t}"),
    };
    let _ = write!(s, ", length {len}");
}

/// The rest of an ICMP router advertisement at `l4` (complete: checked by the caller): its
/// lifetime, and its addresses with their preferences when each entry is 2 words long.
fn router_advertisement(s: &mut String, f: &Frame, l4: usize) -> std::fmt::Result {
    let life = u32::from(f.u16(l4 + 6).unwrap_or(0));
    let n = f.u8(l4 + 4).unwrap_or(0);
    let size = f.u8(l4 + 5).unwrap_or(0);
    s.push_str("router advertisement lifetime ");
    let _ = match life {
        0..=59 => write!(s, "{life}"),
        60..=3599 => write!(s, "{}:{:02}", life / 60, life % 60),
        _ => write!(s, "{}:{:02}:{:02}", life / 3600, life % 3600 / 60, life % 60),
    };
    let _ = write!(s, " {n}:");
    if size != 2 {
        return write!(s, " [size {size}]");
    }
    for e in (0..usize::from(n)).map(|i| l4 + 8 + 8 * i) {
        let addr = f.v4(e).map(|a| a.to_string()).unwrap_or_default();
        let _ = write!(s, " {{{addr} {}}}", f.u32(e + 4).unwrap_or(0));
    }
    Ok(())
}

/// A timestamp (milliseconds since midnight UT) as tcpdump prints it: `hh:mm:ss.mmm`, the
/// hours not wrapped at 24.
fn tstamp(ms: u32) -> String {
    let (h, m, sec, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{h:02}:{m:02}:{sec:02}.{milli:03}")
}

/// An ICMP destination unreachable of code `c` at `l4`, about the quoted packet `inner`.
fn unreach4(s: &mut String, f: &Frame, l4: usize, c: u8, inner: Option<(String, u8, Option<u16>)>) -> std::fmt::Result {
    let dst = inner.as_ref().map(|i| i.0.clone()).unwrap_or_default();
    match c {
        2 => write!(s, "{dst} protocol {} unreachable", inner.as_ref().map_or(0, |i| i.1)),
        3 => match inner {
            Some((d, 6, Some(p))) => write!(s, "{d} tcp port {p} unreachable"),
            Some((d, 17, Some(p))) => write!(s, "{d} udp port {p} unreachable"),
            Some((d, pr, p)) => write!(s, "{d} protocol {pr} port {} unreachable", p.unwrap_or(0)),
            None => write!(s, " port unreachable"),
        },
        4 => match f.u16(l4 + 6).unwrap_or(0) {
            0 => write!(s, "{dst} unreachable - need to frag"),
            mtu => write!(s, "{dst} unreachable - need to frag (mtu {mtu})"),
        },
        c => unreach4_plain(s, c, &dst),
    }
}

/// An ICMP destination unreachable of code `c` in tcpdump's plain form: whether it is the
/// net or the host that is unreachable, and why.
fn unreach4_plain(s: &mut String, c: u8, dst: &str) -> std::fmt::Result {
    let scope = match c {
        0 | 6 | 9 | 11 => "net ",
        5 | 8 => "",
        _ => "host ",
    };
    let why = match c {
        0 | 1 => "",
        5 => " - source route failed",
        6 | 7 => " - unknown",
        8 => " - source host isolated",
        9 | 10 => " - admin prohibited",
        11 | 12 => " - tos prohibited",
        13 => " - admin prohibited filter",
        14 => " - host precedence violation",
        15 => " - precedence cutoff",
        c => return write!(s, "{dst} unreachable - #{c}"),
    };
    write!(s, "{scope}{dst} unreachable{why}")
}

/// ICMPv6 message types tcpdump names.
const ICMP6_NAMES: &[(u8, &str)] = &[
    (1, "destination unreachable"),
    (2, "packet too big"),
    (3, "time exceeded in-transit"),
    (4, "parameter problem"),
    (128, "echo request"),
    (129, "echo reply"),
    (130, "multicast listener query"),
    (131, "multicast listener report"),
    (132, "multicast listener done"),
    (133, "router solicitation"),
    (134, "router advertisement"),
    (135, "neighbor solicitation"),
    (136, "neighbor advertisement"),
    (137, "redirect"),
    (138, "router renumbering"),
    (139, "node information query"),
    (140, "node information reply"),
    (141, "inverse neighbor solicitation"),
    (142, "inverse neighbor advertisement"),
    (143, "multicast listener report v2"),
    (144, "ha discovery request"),
    (145, "ha discovery reply"),
    (146, "mobile router solicitation"),
    (147, "mobile router advertisement"),
    (200, "mtrace response"),
    (201, "mtrace message"),
];

/// The IPv6 address at `at` as text, empty when the frame is too short.
fn v6_text(f: &Frame, at: usize) -> String {
    f.v6(at).map(|a| a.to_string()).unwrap_or_default()
}

/// The `len` bytes of a message at `l4` in hex, as far as the frame holds them.
fn dump(s: &mut String, f: &Frame, l4: usize, len: usize) {
    super::hex_dump(s, f.b.get(l4..(l4 + len).min(f.b.len())).unwrap_or_default(), false);
}

/// An ICMPv6 message at `l4` of `len` bytes (after `src > dst: `).
pub(super) fn icmp6(s: &mut String, f: &Frame, l4: usize, len: usize) {
    let (Some(t), Some(c)) = (f.u8(l4), f.u8(l4 + 1)) else {
        s.push_str("ICMP6, [|icmp6]");
        return;
    };
    let Some(&(_, name)) = ICMP6_NAMES.iter().find(|(n, _)| *n == t) else {
        let _ = write!(s, "ICMP6, unknown icmp6 type ({t}), length {len}");
        dump(s, f, l4, len);
        return;
    };
    let _ = write!(s, "ICMP6, {name}");
    let _ = match t {
        1 if c > 4 => {
            // No length after an unknown code: tcpdump dumps the message instead.
            let _ = write!(s, ", unknown unreach code ({c})");
            dump(s, f, l4, len);
            return;
        }
        1 => icmp6_unreach(s, f, c, l4 + 8),
        2 => write!(s, ", mtu {}", f.u32(l4 + 4).unwrap_or(0)),
        3 => match c {
            // The quoted packet's destination, at the fixed place of an IPv6 header.
            0 => write!(s, " for {}", v6_text(f, l4 + 8 + 24)),
            1 => write!(s, " (reassembly)"),
            c => write!(s, ", unknown code ({c})"),
        },
        4 => {
            let at = f.u32(l4 + 4).unwrap_or(0);
            match c {
                0 => write!(s, ", erroneous - octet {at}"),
                1 => write!(s, ", next header - octet {at}"),
                2 => write!(s, ", option - octet {at}"),
                3 => write!(s, ", incomplete header chain - octet {at}"),
                c => write!(s, ", code-#{c}"),
            }
        }
        128 | 129 => write!(
            s,
            ", id {}, seq {}",
            f.u16(l4 + 4).unwrap_or(0),
            f.u16(l4 + 6).unwrap_or(0)
        ),
        130 if len == 24 => mld1(s, f, l4),
        130 if len >= 28 => {
            s.push_str(" v2");
            let _ = write!(s, " [gaddr {}", v6_text(f, l4 + 8));
            sources(s, len, 28, f.u16(l4 + 26).unwrap_or(0), 16);
            write!(s, "]")
        }
        130 => write!(s, " unknown-version (len {len}) "),
        131 | 132 => mld1(s, f, l4),
        135 => write!(s, ", who has {}", v6_text(f, l4 + 8)),
        136 => write!(s, ", tgt is {}", v6_text(f, l4 + 8)),
        137 => write!(s, ", {} to {}", v6_text(f, l4 + 24), v6_text(f, l4 + 8)),
        143 => {
            if len < 8 {
                write!(s, " [invalid len {len}]")
            } else {
                write!(s, ", {} group record(s)", f.u16(l4 + 6).unwrap_or(0))
            }
        }
        138 => match c {
            // A command's match-prefix and use-prefix parts are not decoded: it stays
            // `router renumbering, length N`.
            0 => Ok(()),
            c => {
                let _ = match c {
                    1 => write!(s, ", result"),
                    255 => write!(s, ", sequence number reset"),
                    c => write!(s, ", code-#{c}"),
                };
                write!(s, ", seq={}", f.u32(l4 + 4).unwrap_or(0))
            }
        },
        // Home agent discovery and mobile prefix solicitation carry an identifier.
        144 | 146 => write!(s, ", id 0x{:04x}", f.u16(l4 + 4).unwrap_or(0)),
        133 | 134 | 139..=142 | 145 | 147 => Ok(()),
        _ => {
            let _ = write!(s, ", length {len}");
            dump(s, f, l4, len);
            return;
        }
    };
    let _ = write!(s, ", length {len}");
}

/// The rest of an ICMPv6 destination unreachable of code `c` (0 to 4: the caller prints the
/// others), whose quoted packet is at `q`.
fn icmp6_unreach(s: &mut String, f: &Frame, c: u8, q: usize) -> std::fmt::Result {
    let qdst = v6_text(f, q + 24);
    match c {
        0 => write!(s, ", unreachable route {qdst}"),
        1 => write!(s, ",  unreachable prohibited {qdst}"),
        2 => write!(s, ", beyond scope {qdst}, source address {}", v6_text(f, q + 8)),
        3 => write!(s, ", unreachable address {qdst}"),
        _ => match (f.u8(q + 6), f.u16(q + 40 + 2)) {
            (Some(6), Some(p)) => write!(s, ", unreachable port, {qdst} tcp port {p}"),
            (Some(17), Some(p)) => write!(s, ", unreachable port, {qdst} udp port {p}"),
            (pr, p) => write!(
                s,
                ", unreachable port, {qdst} protocol {} port {} unreachable",
                pr.unwrap_or(0),
                p.unwrap_or(0)
            ),
        },
    }
}

/// A query's count of `n` sources, `each` bytes long after the first `fixed` bytes of a
/// message of `len` bytes (or that the count does not fit).
fn sources(s: &mut String, len: usize, fixed: usize, n: u16, each: usize) {
    if n > 0 {
        if len < fixed + usize::from(n) * each {
            s.push_str(" [invalid number of sources]");
        } else {
            let _ = write!(s, ", {n} source(s)");
        }
    }
}

/// An MLDv1 message's delay and address.
fn mld1(s: &mut String, f: &Frame, l4: usize) -> std::fmt::Result {
    match (f.u16(l4 + 4), f.v6(l4 + 8)) {
        (Some(d), Some(a)) => write!(s, "max resp delay: {d} addr: {a}"),
        _ => Ok(()),
    }
}

/// An IGMP message at `l4` of `len` bytes (after `src > dst: `).
pub(super) fn igmp(s: &mut String, f: &Frame, l4: usize, len: usize) {
    let Some(t) = f.u8(l4) else {
        s.push_str("igmp [|igmp]");
        return;
    };
    let group = f.v4(l4 + 4).map(|a| a.to_string()).unwrap_or_default();
    let code = f.u8(l4 + 1).unwrap_or(0);
    let _ = match t {
        0x11 => {
            s.push_str("igmp query");
            if len >= 12 {
                igmp3_query(s, f, l4, len, code)
            } else {
                if code != 0 {
                    s.push_str(" v2");
                    if code != 100 {
                        let _ = write!(s, " [max resp time {code}]");
                    }
                } else {
                    s.push_str(" v1");
                }
                if f.u32(l4 + 4).unwrap_or(0) != 0 {
                    let _ = write!(s, " [gaddr {group}]");
                }
                if len != 8 {
                    let _ = write!(s, " [len {len}]");
                }
                Ok(())
            }
        }
        0x12 => {
            let _ = write!(s, "igmp v1 report {group}");
            if len != 8 {
                let _ = write!(s, " [len {len}]");
            }
            Ok(())
        }
        0x16 => write!(s, "igmp v2 report {group}"),
        0x17 => write!(s, "igmp leave {group}"),
        0x22 => {
            s.push_str("igmp v3 report");
            if len < 16 || len & 3 != 0 {
                write!(s, " [invalid len {len}]")
            } else {
                write!(s, ", {} group record(s)", f.u16(l4 + 6).unwrap_or(0))
            }
        }
        t => write!(s, "igmp-{t}"),
    };
}

/// The rest of an IGMPv3 query.
fn igmp3_query(s: &mut String, f: &Frame, l4: usize, len: usize, mrc: u8) -> std::fmt::Result {
    s.push_str(" v3");
    if len < 12 || len & 3 != 0 {
        return write!(s, " [invalid len {len}]");
    }
    if mrc != 100 {
        let mrt = if mrc < 128 {
            u32::from(mrc)
        } else {
            (u32::from(mrc & 0x0f) | 0x10) << (((mrc & 0x70) >> 4) + 3)
        };
        if mrt < 600 {
            let _ = write!(s, " [max resp time {:.1}s]", f64::from(mrt) * 0.1);
        } else {
            let _ = write!(s, " [max resp time {}]", relts(mrt / 10));
        }
    }
    if f.u32(l4 + 4).unwrap_or(0) == 0 {
        return Ok(());
    }
    let _ = write!(s, " [gaddr {}", f.v4(l4 + 4).map(|a| a.to_string()).unwrap_or_default());
    sources(s, len, 12, f.u16(l4 + 10).unwrap_or(0), 4);
    write!(s, "]")
}

/// tcpdump's relative time (`1m40s`).
fn relts(mut secs: u32) -> String {
    let mut out = String::new();
    for (unit, n) in [('w', 604_800), ('d', 86_400), ('h', 3600), ('m', 60)] {
        if secs >= n {
            let _ = write!(out, "{}{unit}", secs / n);
            secs %= n;
        }
    }
    if secs > 0 || out.is_empty() {
        let _ = write!(out, "{secs}s");
    }
    out
}
