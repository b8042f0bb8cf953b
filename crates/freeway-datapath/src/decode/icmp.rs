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
        3 => match c {
            0 => write!(s, "net {dst} unreachable"),
            1 => write!(s, "host {dst} unreachable"),
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
            5 => write!(s, "{dst} unreachable - source route failed"),
            6 => write!(s, "net {dst} unreachable - unknown"),
            7 => write!(s, "host {dst} unreachable - unknown"),
            8 => write!(s, "{dst} unreachable - source host isolated"),
            9 => write!(s, "net {dst} unreachable - admin prohibited"),
            10 => write!(s, "host {dst} unreachable - admin prohibited"),
            11 => write!(s, "net {dst} unreachable - tos prohibited"),
            12 => write!(s, "host {dst} unreachable - tos prohibited"),
            13 => write!(s, "host {dst} unreachable - admin prohibited filter"),
            14 => write!(s, "host {dst} unreachable - host precedence violation"),
            15 => write!(s, "host {dst} unreachable - precedence cutoff"),
            c => write!(s, "{dst} unreachable - #{c}"),
        },
        5 => {
            let gw = f.v4(l4 + 4).map(|a| a.to_string()).unwrap_or_default();
            match c {
                0 => write!(s, "redirect {dst} to net {gw}"),
                1 => write!(s, "redirect {dst} to host {gw}"),
                2 => write!(s, "redirect-tos {dst} to net {gw}"),
                3 => write!(s, "redirect-tos {dst} to host {gw}"),
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
        13 => write!(s, "time stamp query id {id} seq {seq}"),
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

/// An ICMPv6 message at `l4` of `len` bytes (after `src > dst: `).
pub(super) fn icmp6(s: &mut String, f: &Frame, l4: usize, len: usize) {
    let (Some(t), Some(c)) = (f.u8(l4), f.u8(l4 + 1)) else {
        s.push_str("ICMP6, [|icmp6]");
        return;
    };
    let name = match t {
        1 => "destination unreachable",
        2 => "packet too big",
        3 => "time exceeded in-transit",
        4 => "parameter problem",
        128 => "echo request",
        129 => "echo reply",
        130 => "multicast listener query",
        131 => "multicast listener report",
        132 => "multicast listener done",
        133 => "router solicitation",
        134 => "router advertisement",
        135 => "neighbor solicitation",
        136 => "neighbor advertisement",
        137 => "redirect",
        138 => "router renumbering",
        139 => "node information query",
        140 => "node information reply",
        141 => "inverse neighbor solicitation",
        142 => "inverse neighbor advertisement",
        143 => "multicast listener report v2",
        200 => "mtrace response",
        201 => "mtrace message",
        _ => "",
    };
    if name.is_empty() {
        let _ = write!(s, "ICMP6, unknown icmp6 type ({t}), length {len}");
        super::hex_dump(s, f.b.get(l4..(l4 + len).min(f.b.len())).unwrap_or_default(), false);
        return;
    }
    let _ = write!(s, "ICMP6, {name}");
    // The quoted packet's destination, at the fixed place of an IPv6 header.
    let q = l4 + 8;
    let qdst = f.v6(q + 24).map(|a| a.to_string()).unwrap_or_default();
    let _ = match t {
        1 => {
            let code = match c {
                0 => "unreachable route",
                1 => " unreachable prohibited",
                2 => "beyond scope",
                3 => "unreachable address",
                4 => "unreachable port",
                _ => "",
            };
            if code.is_empty() {
                let _ = write!(s, ", unknown unreach code ({c})");
            } else {
                let _ = write!(s, ", {code}");
            }
            match c {
                0 | 1 | 3 => write!(s, " {qdst}"),
                2 => write!(
                    s,
                    " {qdst}, source address {}",
                    f.v6(q + 8).map(|a| a.to_string()).unwrap_or_default()
                ),
                4 => match (f.u8(q + 6), f.u16(q + 40 + 2)) {
                    (Some(6), Some(p)) => write!(s, ", {qdst} tcp port {p}"),
                    (Some(17), Some(p)) => write!(s, ", {qdst} udp port {p}"),
                    (pr, p) => write!(
                        s,
                        ", {qdst} protocol {} port {} unreachable",
                        pr.unwrap_or(0),
                        p.unwrap_or(0)
                    ),
                },
                _ => Ok(()),
            }
        }
        2 => write!(s, ", mtu {}", f.u32(l4 + 4).unwrap_or(0)),
        3 => match c {
            0 => write!(s, " for {qdst}"),
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
            let _ = write!(s, " [gaddr {}", f.v6(l4 + 8).map(|a| a.to_string()).unwrap_or_default());
            let n = f.u16(l4 + 26).unwrap_or(0);
            if n > 0 {
                if len < 28 + usize::from(n) * 16 {
                    s.push_str(" [invalid number of sources]");
                } else {
                    let _ = write!(s, ", {n} source(s)");
                }
            }
            write!(s, "]")
        }
        130 => write!(s, " unknown-version (len {len}) "),
        131 | 132 => mld1(s, f, l4),
        135 => write!(
            s,
            ", who has {}",
            f.v6(l4 + 8).map(|a| a.to_string()).unwrap_or_default()
        ),
        136 => write!(
            s,
            ", tgt is {}",
            f.v6(l4 + 8).map(|a| a.to_string()).unwrap_or_default()
        ),
        137 => write!(
            s,
            ", {} to {}",
            f.v6(l4 + 24).map(|a| a.to_string()).unwrap_or_default(),
            f.v6(l4 + 8).map(|a| a.to_string()).unwrap_or_default()
        ),
        143 => {
            if len < 8 {
                write!(s, " [invalid len {len}]")
            } else {
                write!(s, ", {} group record(s)", f.u16(l4 + 6).unwrap_or(0))
            }
        }
        133 | 134 | 138..=142 => Ok(()),
        _ => {
            let _ = write!(s, ", length {len}");
            super::hex_dump(s, f.b.get(l4..(l4 + len).min(f.b.len())).unwrap_or_default(), false);
            return;
        }
    };
    let _ = write!(s, ", length {len}");
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
    let n = f.u16(l4 + 10).unwrap_or(0);
    if n > 0 {
        if len < 12 + usize::from(n) * 4 {
            s.push_str(" [invalid number of sources]");
        } else {
            let _ = write!(s, ", {n} source(s)");
        }
    }
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
