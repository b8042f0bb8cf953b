//! IPv6 Neighbour Discovery (RFC 4861) for address resolution: validating Neighbour
//! Solicitations and Advertisements, building advertisements for our addresses and
//! solicitations (multicast to the solicited-node group for resolution, unicast for probes).
//!
//! DAD-safe behaviour: a solicitation from the unspecified address (Duplicate Address
//! Detection by another node) never creates or updates a neighbour entry; if it asks for one
//! of our addresses we defend it with an advertisement to all-nodes (ff02::1) without the
//! Solicited flag (RFC 4861 7.2.4). The router never performs DAD itself: its addresses are
//! configured, and the link-local one is derived from a MAC the operator chose.
//!
//! Threads: pure functions of the buffers they are given.

use std::net::Ipv6Addr;

use freeway_packet::Packet;

use crate::icmp::{addr6, build_icmpv6, icmpv6_checksum, v6, L2};
use crate::iface::{solicited_node, v6_multicast_mac, ALL_NODES};

/// NA flag: sender is a router.
pub const FLAG_ROUTER: u8 = 0x80;
/// NA flag: sent in response to a solicitation.
pub const FLAG_SOLICITED: u8 = 0x40;
/// NA flag: override an existing cache entry.
pub const FLAG_OVERRIDE: u8 = 0x20;

const OPT_SLLA: u8 = 1;
const OPT_TLLA: u8 = 2;

/// A validated NS or NA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NdMsg {
    /// [`v6::NEIGHBOR_SOLICIT`] or [`v6::NEIGHBOR_ADVERT`].
    pub ty: u8,
    /// IPv6 source.
    pub src: Ipv6Addr,
    /// IPv6 destination.
    pub dst: Ipv6Addr,
    /// Target address.
    pub target: Ipv6Addr,
    /// NA flags (R, S, O); 0 for NS.
    pub flags: u8,
    /// Source (NS) or target (NA) link-layer address option.
    pub lladdr: Option<[u8; 6]>,
}

/// Why an ND message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdError {
    /// Not NS/NA, or too short.
    Malformed,
    /// Hop limit is not 255 (the message was routed: RFC 4861 7.1).
    HopLimit,
    /// ICMPv6 checksum is wrong.
    Checksum,
    /// Violates a validity rule (multicast target, zero-length option, DAD rules, S flag to a
    /// multicast destination).
    Invalid,
}

/// Validates the NS/NA in the IPv6 packet `ip` (header at 0, bounded by the payload length)
/// whose ICMPv6 header is at `up` (after any extension headers).
pub fn parse(ip: &[u8], up: usize) -> Result<NdMsg, NdError> {
    if ip.len() < 40 || up + 24 > ip.len() {
        return Err(NdError::Malformed);
    }
    let msg = &ip[up..];
    let ty = msg[0];
    if ty != v6::NEIGHBOR_SOLICIT && ty != v6::NEIGHBOR_ADVERT {
        return Err(NdError::Malformed);
    }
    if ip[7] != 255 {
        return Err(NdError::HopLimit);
    }
    let src = addr6(&ip[8..24]);
    let dst = addr6(&ip[24..40]);
    if icmpv6_checksum(src, dst, msg) != 0 {
        return Err(NdError::Checksum);
    }
    if msg[1] != 0 {
        return Err(NdError::Invalid);
    }
    let target = addr6(&msg[8..24]);
    if target.is_multicast() {
        return Err(NdError::Invalid);
    }
    let mut lladdr = None;
    let mut opts = &msg[24..];
    let want = if ty == v6::NEIGHBOR_SOLICIT { OPT_SLLA } else { OPT_TLLA };
    while opts.len() >= 2 {
        let len = usize::from(opts[1]) * 8;
        if len == 0 || len > opts.len() {
            return Err(NdError::Invalid);
        }
        if opts[0] == want && len >= 8 {
            let mut m = [0u8; 6];
            m.copy_from_slice(&opts[2..8]);
            lladdr = Some(m);
        }
        opts = &opts[len..];
    }
    let flags = if ty == v6::NEIGHBOR_ADVERT { msg[4] & 0xe0 } else { 0 };
    if ty == v6::NEIGHBOR_SOLICIT && src.is_unspecified() && (dst != solicited_node(target) || lladdr.is_some()) {
        return Err(NdError::Invalid);
    }
    if ty == v6::NEIGHBOR_ADVERT && dst.is_multicast() && flags & FLAG_SOLICITED != 0 {
        return Err(NdError::Invalid);
    }
    Ok(NdMsg {
        ty,
        src,
        dst,
        target,
        flags,
        lladdr,
    })
}

#[allow(clippy::too_many_arguments)]
fn build(
    pkt: &mut Packet,
    l2: L2,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    ty: u8,
    flags: u8,
    target: Ipv6Addr,
    opt: Option<(u8, [u8; 6])>,
) -> bool {
    let plen = 24 + if opt.is_some() { 8 } else { 0 };
    build_icmpv6(pkt, l2, src, dst, 255, plen, |m| {
        m[0] = ty;
        m[4] = flags;
        m[8..24].copy_from_slice(&target.octets());
        if let Some((t, mac)) = opt {
            m[24] = t;
            m[25] = 1;
            m[26..32].copy_from_slice(&mac);
        }
    })
}

/// Builds the advertisement answering `ns` (which asked for our address `ns.target`) from a
/// router with MAC `our_mac` on VLAN `vlan`. Unicast to the solicitor (its link-layer option,
/// else `frame_src`) with R|S|O; to all-nodes with R|O for a DAD probe.
pub fn build_na_reply(pkt: &mut Packet, ns: &NdMsg, our_mac: [u8; 6], vlan: Option<u16>, frame_src: [u8; 6]) -> bool {
    let (dst, dst_mac, flags) = if ns.src.is_unspecified() {
        (ALL_NODES, v6_multicast_mac(ALL_NODES), FLAG_ROUTER | FLAG_OVERRIDE)
    } else {
        (
            ns.src,
            ns.lladdr.unwrap_or(frame_src),
            FLAG_ROUTER | FLAG_SOLICITED | FLAG_OVERRIDE,
        )
    };
    let l2 = L2 {
        dst: dst_mac,
        src: our_mac,
        vlan,
    };
    build(
        pkt,
        l2,
        ns.target,
        dst,
        v6::NEIGHBOR_ADVERT,
        flags,
        ns.target,
        Some((OPT_TLLA, our_mac)),
    )
}

/// Builds a solicitation for `target` from `src`: to its solicited-node group (resolution)
/// when `dst_mac` is `None`, unicast to `target` at `dst_mac` otherwise (a probe).
pub fn build_ns(
    pkt: &mut Packet,
    our_mac: [u8; 6],
    vlan: Option<u16>,
    src: Ipv6Addr,
    target: Ipv6Addr,
    dst_mac: Option<[u8; 6]>,
) -> bool {
    let (dst, mac) = match dst_mac {
        Some(m) => (target, m),
        None => {
            let g = solicited_node(target);
            (g, v6_multicast_mac(g))
        }
    };
    let l2 = L2 {
        dst: mac,
        src: our_mac,
        vlan,
    };
    build(
        pkt,
        l2,
        src,
        dst,
        v6::NEIGHBOR_SOLICIT,
        0,
        target,
        Some((OPT_SLLA, our_mac)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::bytes::rd16;

    #[test]
    fn ns_round_trips_and_is_answered() {
        let me = [2, 0, 0, 0, 0, 0xaa];
        let host = [2, 0, 0, 0, 0, 0x01];
        let ours: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let theirs: Ipv6Addr = "2001:db8::5".parse().unwrap();
        let mut p = Packet::new();
        assert!(build_ns(&mut p, host, None, theirs, ours, None));
        let f = p.data();
        let plen = usize::from(rd16(f, 18));
        let ns = parse(&f[14..14 + 40 + plen], 40).unwrap();
        assert_eq!(ns.target, ours);
        assert_eq!(ns.dst, solicited_node(ours));
        assert_eq!(ns.lladdr, Some(host));
        let mut r = Packet::new();
        assert!(build_na_reply(&mut r, &ns, me, None, host));
        let f = r.data();
        assert_eq!(&f[0..6], &host);
        let na = parse(&f[14..14 + 40 + 32], 40).unwrap();
        assert_eq!(na.ty, v6::NEIGHBOR_ADVERT);
        assert_eq!((na.src, na.dst, na.target), (ours, theirs, ours));
        assert_eq!(na.flags, FLAG_ROUTER | FLAG_SOLICITED | FLAG_OVERRIDE);
        assert_eq!(na.lladdr, Some(me));
        // Corrupt the checksum / hop limit: refused.
        let mut bad = f[14..14 + 72].to_vec();
        bad[40 + 2] ^= 1;
        assert_eq!(parse(&bad, 40), Err(NdError::Checksum));
        bad[40 + 2] ^= 1;
        bad[7] = 64;
        assert_eq!(parse(&bad, 40), Err(NdError::HopLimit));
    }
}
