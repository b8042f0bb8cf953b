//! ARP (RFC 826) for Ethernet/IPv4: reading requests and replies, answering requests for our
//! addresses in place, and building requests (broadcast for resolution, unicast for probes).
//!
//! Reading goes through smoltcp's checked [`ArpPacket`] view, so no accessor can panic.
//! Threads: pure functions of the buffers they are given.

use std::net::Ipv4Addr;

use freeway_packet::wire::{ArpHardware, ArpOperation, ArpPacket, EthernetProtocol, ETHERTYPE_ARP};
use freeway_packet::Packet;

use crate::frame::{finish_frame, start_frame, BROADCAST, L2};

/// Length of an Ethernet/IPv4 ARP body.
pub const ARP_LEN: usize = 28;

/// The fields of an Ethernet/IPv4 ARP message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpMsg {
    /// 1 = request, 2 = reply (others are refused by [`parse`]).
    pub op: u16,
    /// Sender hardware address.
    pub sha: [u8; 6],
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target hardware address.
    pub tha: [u8; 6],
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

/// Operation code of a request.
pub const OP_REQUEST: u16 = 1;
/// Operation code of a reply.
pub const OP_REPLY: u16 = 2;

/// Reads an ARP body; `None` unless it is a well-formed Ethernet/IPv4 request or reply.
pub fn parse(body: &[u8]) -> Option<ArpMsg> {
    let p = ArpPacket::new_checked(body).ok()?;
    if p.hardware_type() != ArpHardware::Ethernet
        || p.protocol_type() != EthernetProtocol::Ipv4
        || p.hardware_len() != 6
        || p.protocol_len() != 4
    {
        return None;
    }
    let op = match p.operation() {
        ArpOperation::Request => OP_REQUEST,
        ArpOperation::Reply => OP_REPLY,
        _ => return None,
    };
    let mac = |s: &[u8]| -> [u8; 6] { [s[0], s[1], s[2], s[3], s[4], s[5]] };
    let ip = |s: &[u8]| Ipv4Addr::new(s[0], s[1], s[2], s[3]);
    Some(ArpMsg {
        op,
        sha: mac(p.source_hardware_addr()),
        spa: ip(p.source_protocol_addr()),
        tha: mac(p.target_hardware_addr()),
        tpa: ip(p.target_protocol_addr()),
    })
}

fn write_body(body: &mut [u8], op: u16, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) {
    let mut p = ArpPacket::new_unchecked(&mut body[..ARP_LEN]);
    p.set_hardware_type(ArpHardware::Ethernet);
    p.set_protocol_type(EthernetProtocol::Ipv4);
    p.set_hardware_len(6);
    p.set_protocol_len(4);
    p.set_operation(if op == OP_REPLY {
        ArpOperation::Reply
    } else {
        ArpOperation::Request
    });
    p.set_source_hardware_addr(&sha);
    p.set_source_protocol_addr(&spa.octets());
    p.set_target_hardware_addr(&tha);
    p.set_target_protocol_addr(&tpa.octets());
}

/// Turns the request in `pkt` (ARP body at `l3`, already [`parse`]d into `req`) into the reply
/// "`req.tpa` is at `our_mac`", addressed to the requester, in place. The frame keeps its
/// tagging (it leaves by the interface it came in on) and its padding.
pub fn reply_in_place(pkt: &mut Packet, l3: usize, our_mac: [u8; 6], req: &ArpMsg) -> bool {
    // A new frame in the old buffer: whoever handles it next parses it.
    pkt.meta.flags = 0;
    let f = pkt.data_mut();
    if f.len() < l3 + ARP_LEN {
        return false;
    }
    f[0..6].copy_from_slice(&req.sha);
    f[6..12].copy_from_slice(&our_mac);
    write_body(&mut f[l3..], OP_REPLY, our_mac, req.tpa, req.sha, req.spa);
    true
}

/// Builds an ARP request "who has `target`? tell `sender`" from `src_mac` into `pkt`:
/// broadcast when `dst_mac` is `None` (resolution), unicast to the cached MAC otherwise (a probe
/// of a `STALE` entry, RFC 1122 2.3.2.1). `false` if the buffer is too small.
pub fn build_request(
    pkt: &mut Packet,
    src_mac: [u8; 6],
    vlan: Option<u16>,
    sender: Ipv4Addr,
    target: Ipv4Addr,
    dst_mac: Option<[u8; 6]>,
) -> bool {
    let l2 = L2 {
        dst: dst_mac.unwrap_or(BROADCAST),
        src: src_mac,
        vlan,
    };
    let Some(l3) = start_frame(pkt, l2, ETHERTYPE_ARP, ARP_LEN) else {
        return false;
    };
    write_body(&mut pkt.data_mut()[l3..], OP_REQUEST, src_mac, sender, [0; 6], target);
    finish_frame(pkt);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::build::build_arp_request;

    #[test]
    fn request_round_trips_and_is_answered_in_place() {
        let me = [2, 0, 0, 0, 0, 0xaa];
        let host = [2, 0, 0, 0, 0, 0x01];
        let f = build_arp_request(host, None, Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::new(10, 0, 0, 1));
        let mut p = Packet::from_frame(&f).unwrap();
        let m = parse(&p.data()[14..]).unwrap();
        assert_eq!(m.op, OP_REQUEST);
        assert_eq!(
            (m.sha, m.spa, m.tpa),
            (host, Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::new(10, 0, 0, 1))
        );
        assert!(reply_in_place(&mut p, 14, me, &m));
        let r = parse(&p.data()[14..]).unwrap();
        assert_eq!(
            r,
            ArpMsg {
                op: OP_REPLY,
                sha: me,
                spa: Ipv4Addr::new(10, 0, 0, 1),
                tha: host,
                tpa: Ipv4Addr::new(10, 0, 0, 5)
            }
        );
        assert_eq!(&p.data()[0..12], &[host, me].concat()[..]);
        // Garbage is refused, never a panic.
        assert!(parse(&[0u8; 27]).is_none());
        let mut bad = f[14..].to_vec();
        bad[7] = 9;
        assert!(parse(&bad).is_none());
    }
}
