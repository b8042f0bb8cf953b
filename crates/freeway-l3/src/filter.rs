//! The router's filter hooks, where a firewall judges routed packets, and the replies a
//! `reject` sends.
//!
//! The L3 stage asks its [`crate::L3Out`] for a verdict at two places, as Linux's netfilter
//! hooks of the same names sit in its IP stack:
//!
//! * [`FilterHook::Forward`]: a packet about to be forwarded, after the route lookup (so the
//!   egress interface is known), the TTL/hop-limit check and decrement and the MTU check,
//!   before neighbour resolution;
//! * [`FilterHook::Input`]: a packet for one of the router's own addresses (echo requests,
//!   neighbour discovery, anything else it would drop as `local`), before it is answered.
//!
//! Two more hooks let a translator rewrite a routed packet ([`NatHook`], answered by
//! [`crate::L3Out::nat`]): prerouting, before the local-address check and the route lookup,
//! and postrouting, right after the forward hook. A packet the translator refuses is
//! counted as `filtered`.
//!
//! ARP is not IP and meets no hook. The default verdict ([`crate::L3Out::filter`]'s default)
//! accepts, so a stage without a firewall pays nothing.
//!
//! A [`FilterVerdict::Reject`] drops the packet (counted as `filtered`) and sends back, through
//! the stage's ICMP token bucket, an ICMP/ICMPv6 destination unreachable quoting it, or a TCP
//! reset ([`build_tcp_reset`]) shaped as Linux's firewall sends one.

use freeway_packet::bytes::{rd16, rd32, wr16, wr32};
use freeway_packet::checksum::{checksum, fold, pseudo_v4, pseudo_v6, sum};
use freeway_packet::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_TCP};
use freeway_packet::Packet;

use crate::frame::{finish_frame, start_frame, L2};
use crate::icmp::{v6_upper, write_v6_header};

/// Where in the stage a packet is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterHook {
    /// For one of the router's own addresses.
    Input,
    /// Forwarded by the router.
    Forward,
}

/// Where in the stage a packet may be translated (NAT), as Linux's NAT hooks sit: before the
/// route lookup (a destination translation changes where it goes) and after the forward
/// hook (a source translation, with the egress interface known).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NatHook {
    /// Before the local-address check and the route lookup.
    Prerouting,
    /// After the forward filter hook, before neighbour resolution.
    Postrouting,
}

/// What a reject sends back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reject {
    /// ICMP destination unreachable with code `v4` for IPv4, ICMPv6 destination unreachable
    /// with code `v6` for IPv6.
    Unreachable {
        /// The ICMP code (3 port unreachable, 13 administratively prohibited, …).
        v4: u8,
        /// The ICMPv6 code (4 port unreachable, 1 administratively prohibited, …).
        v6: u8,
    },
    /// A TCP reset (for a packet that is not TCP: ICMP port unreachable instead).
    TcpReset,
}

/// A filter's verdict on one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterVerdict {
    /// Let it through.
    Accept,
    /// Drop it silently.
    Drop,
    /// Drop it and answer its sender.
    Reject(Reject),
}

/// The fields of a TCP segment a reset answers.
struct Segment {
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    /// Sequence space the segment occupies: payload bytes, plus one each for SYN and FIN.
    len: u32,
}

/// Reads the TCP segment at `l4` of an IP packet whose transport payload ends at `end`.
fn segment(ip: &[u8], l4: usize, end: usize) -> Option<Segment> {
    let t = ip.get(l4..end)?;
    if t.len() < 20 {
        return None;
    }
    let doff = usize::from(t[12] >> 4) * 4;
    if doff < 20 || doff > t.len() {
        return None;
    }
    let flags = t[13];
    let len = (t.len() - doff) as u32 + u32::from(flags & 0x02 != 0) + u32::from(flags & 0x01 != 0);
    Some(Segment {
        sport: rd16(t, 0),
        dport: rd16(t, 2),
        seq: rd32(t, 4),
        ack: rd32(t, 8),
        flags,
        len,
    })
}

/// Writes the 20-byte TCP reset answering `s` into `t`, its checksum left zero. As Linux's
/// firewall does: a segment with ACK gets `RST` with its acknowledgement number as sequence
/// number; one without gets `RST|ACK` acknowledging everything it occupied.
fn write_reset(t: &mut [u8], s: &Segment) {
    wr16(t, 0, s.dport);
    wr16(t, 2, s.sport);
    if s.flags & 0x10 != 0 {
        wr32(t, 4, s.ack);
        t[13] = 0x04;
    } else {
        wr32(t, 8, s.seq.wrapping_add(s.len));
        t[13] = 0x14;
    }
    t[12] = 5 << 4;
}

/// Builds, into `pkt`, the TCP reset answering the TCP segment of `orig` (the IP packet from
/// its header to its end, IPv4 or IPv6 as `v6` says), framed with `l2`: from the segment's
/// destination to its source, TTL/hop limit 64. `false` (nothing built) if `orig` is not a
/// well-formed TCP segment, is itself a reset, or is a fragment.
pub fn build_tcp_reset(pkt: &mut Packet, l2: L2, orig: &[u8], v6: bool) -> bool {
    if v6 {
        build_reset_v6(pkt, l2, orig)
    } else {
        build_reset_v4(pkt, l2, orig)
    }
}

fn build_reset_v4(pkt: &mut Packet, l2: L2, ip: &[u8]) -> bool {
    if ip.len() < 20 || ip[9] != IPPROTO_TCP || rd16(ip, 6) & 0x3fff != 0 {
        return false;
    }
    let hl = usize::from(ip[0] & 0x0f) * 4;
    let end = usize::from(rd16(ip, 2)).min(ip.len());
    let Some(s) = segment(ip, hl, end).filter(|s| s.flags & 0x04 == 0) else {
        return false;
    };
    let (src, dst) = ([ip[16], ip[17], ip[18], ip[19]], [ip[12], ip[13], ip[14], ip[15]]);
    let Some(l3) = start_frame(pkt, l2, ETHERTYPE_IPV4, 40) else {
        return false;
    };
    let f = pkt.data_mut();
    let h = &mut f[l3..l3 + 20];
    h[0] = 0x45;
    wr16(h, 2, 40);
    h[6] = 0x40; // DF, as Linux's resets carry.
    h[8] = 64;
    h[9] = IPPROTO_TCP;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let c = checksum(h);
    wr16(h, 10, c);
    finish_reset(pkt, l3 + 20, &s, pseudo_v4(src, dst, IPPROTO_TCP, 20))
}

fn build_reset_v6(pkt: &mut Packet, l2: L2, ip: &[u8]) -> bool {
    let Some(up) = v6_upper(ip) else { return false };
    if up.fragment || up.proto != IPPROTO_TCP || ip.len() < 40 {
        return false;
    }
    let end = (40 + usize::from(rd16(ip, 4))).min(ip.len());
    let Some(s) = segment(ip, up.off, end).filter(|s| s.flags & 0x04 == 0) else {
        return false;
    };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&ip[24..40]);
    dst.copy_from_slice(&ip[8..24]);
    let Some(l3) = start_frame(pkt, l2, ETHERTYPE_IPV6, 60) else {
        return false;
    };
    let f = pkt.data_mut();
    write_v6_header(&mut f[l3..l3 + 40], 20, IPPROTO_TCP, 64, src.into(), dst.into());
    finish_reset(pkt, l3 + 40, &s, pseudo_v6(src, dst, IPPROTO_TCP, 20))
}

/// Writes the reset's TCP header at `at`, its checksum over the pseudo-header's sum
/// `pseudo`, and finishes the frame.
fn finish_reset(pkt: &mut Packet, at: usize, s: &Segment, pseudo: u32) -> bool {
    let t = &mut pkt.data_mut()[at..at + 20];
    write_reset(t, s);
    let c = fold(sum(t, pseudo));
    wr16(t, 16, c);
    finish_frame(pkt);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::build::{build_frame, header_len, FrameSpec, L4};
    use freeway_packet::checksum::verify;
    use std::net::{IpAddr, Ipv6Addr};

    const L2X: L2 = L2 {
        dst: [2, 0, 0, 0, 0, 1],
        src: [2, 0, 0, 0, 0, 2],
        vlan: None,
    };

    /// The IP packet of a TCP segment 40000 → 22, sequence 1000, acknowledgement 77.
    fn tcp(flags: u8, payload: usize, v6: bool) -> Vec<u8> {
        let mut spec = FrameSpec {
            proto: L4::Tcp { flags },
            src_port: 40000,
            dst_port: 22,
            ..FrameSpec::default()
        };
        if v6 {
            spec.src_ip = IpAddr::V6(Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 2));
            spec.dst_ip = IpAddr::V6(Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 0, 0, 2));
        }
        spec.len = header_len(&spec) + payload;
        let f = build_frame(&spec);
        let mut ip = f[14..].to_vec();
        let l4 = if v6 { 40 } else { 20 };
        wr32(&mut ip, l4 + 4, 1000);
        wr32(&mut ip, l4 + 8, 77);
        ip
    }

    fn reset_of(ip: &[u8], v6: bool) -> Option<Vec<u8>> {
        let mut p = Packet::default();
        build_tcp_reset(&mut p, L2X, ip, v6).then(|| p.data()[14..].to_vec())
    }

    #[test]
    fn a_syn_gets_rst_ack_acknowledging_it() {
        let r = reset_of(&tcp(0x02, 0, false), false).expect("built");
        assert_eq!(
            &r[12..16],
            &tcp(0x02, 0, false)[16..20],
            "from the segment's destination"
        );
        let t = &r[20..40];
        assert_eq!((rd16(t, 0), rd16(t, 2)), (22, 40000));
        assert_eq!(t[13], 0x14);
        assert_eq!(rd32(t, 8), 1001, "SYN occupies one");
        assert!(verify(&r[..20]));
        assert_eq!(
            fold(sum(
                t,
                pseudo_v4(r[12..16].try_into().unwrap(), r[16..20].try_into().unwrap(), 6, 20)
            )),
            0
        );
    }

    #[test]
    fn a_segment_with_ack_gets_rst_with_its_ack_as_sequence() {
        let r = reset_of(&tcp(0x18, 10, false), false).expect("built");
        assert_eq!(r[20 + 13], 0x04);
        assert_eq!(rd32(&r[20..40], 4), 77);
    }

    #[test]
    fn ipv6_resets_carry_a_valid_checksum() {
        let ip = tcp(0x02, 5, true);
        let r = reset_of(&ip, true).expect("built");
        let t = &r[40..60];
        assert_eq!(t[13], 0x14);
        assert_eq!(rd32(t, 8), 1006);
        let (s, d): ([u8; 16], [u8; 16]) = (r[8..24].try_into().unwrap(), r[24..40].try_into().unwrap());
        assert_eq!(fold(sum(t, pseudo_v6(s, d, 6, 20))), 0);
    }

    #[test]
    fn resets_fragments_and_garbage_get_no_reset() {
        assert!(
            reset_of(&tcp(0x04, 0, false), false).is_none(),
            "a reset is never answered"
        );
        let mut frag = tcp(0x02, 0, false);
        frag[6] = 0x20; // more fragments
        assert!(reset_of(&frag, false).is_none());
        assert!(reset_of(&[0x45; 19], false).is_none());
        assert!(reset_of(&[0x60; 39], true).is_none());
    }
}
