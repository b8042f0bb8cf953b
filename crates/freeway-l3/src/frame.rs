//! Small Ethernet helpers shared by the protocol modules: reading the outer tag, writing an
//! Ethernet (+ optional 802.1Q) header into a fresh frame, and retagging a forwarded frame.
//!
//! Threads: pure functions of the buffers they are given.

use freeway_packet::build::write_l2;
use freeway_packet::bytes::{rd16, wr16};
use freeway_packet::wire::{is_vlan_tpid, ETHERTYPE_VLAN, VID_MASK};
use freeway_packet::{parse, vlan_pop, vlan_push, Packet, NO_VLAN};

/// The broadcast MAC address.
pub const BROADCAST: [u8; 6] = [0xff; 6];
/// The shortest frame put on the wire (without FCS); generated frames are padded to it.
pub const MIN_FRAME: usize = 60;

/// Whether a MAC address is a group (multicast or broadcast) address.
#[inline(always)]
pub fn is_group(mac: &[u8]) -> bool {
    !mac.is_empty() && mac[0] & 1 == 1
}

/// The outer VLAN tag of a frame (`None` if untagged or too short to tell).
#[inline(always)]
pub fn outer_vid(f: &[u8]) -> Option<u16> {
    if f.len() >= 18 && is_vlan_tpid(rd16(f, 12)) {
        Some(rd16(f, 14) & VID_MASK)
    } else {
        None
    }
}

/// Length of an Ethernet header with or without one tag.
#[inline(always)]
pub fn l2_len(vlan: Option<u16>) -> usize {
    if vlan.is_some() {
        18
    } else {
        14
    }
}

/// The Ethernet framing of a generated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2 {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC (the router's on the interface).
    pub src: [u8; 6],
    /// 802.1Q tag of the interface.
    pub vlan: Option<u16>,
}

/// Makes `pkt` a fresh frame of `max(l2 + l3_len, MIN_FRAME)` bytes (zero padded), writes the
/// Ethernet header `l2` and returns the offset of the L3 header. `None` if the buffer is too
/// small.
pub fn start_frame(pkt: &mut Packet, l2: L2, ethertype: u16, l3_len: usize) -> Option<usize> {
    let total = (l2_len(l2.vlan) + l3_len).max(MIN_FRAME);
    let f = pkt.fill(total).ok()?;
    f.fill(0);
    Some(write_l2(f, l2.dst, l2.src, l2.vlan, ethertype))
}

/// Fills a generated frame's metadata (parser fields; `in_port` is left alone) so later stages
/// (egress taps, the bridge) see a consistent packet.
pub fn finish_frame(pkt: &mut Packet) {
    let _ = parse(pkt);
}

/// Gives a frame the tagging of an egress interface: retags (keeping PCP/DEI), pops or pushes
/// the outer tag, and sets `meta.vlan` to the interface's VLAN ([`NO_VLAN`] if untagged).
/// `false` if a tag had to be pushed and there is no headroom.
#[inline]
pub fn set_egress_tag(pkt: &mut Packet, vlan: Option<u16>) -> bool {
    match egress_tag_frame(pkt, vlan) {
        Some(v) => {
            pkt.meta.vlan = v;
            true
        }
        None => false,
    }
}

/// [`set_egress_tag`] but for `meta.vlan`, whose value it returns for the caller to store
/// (`None`: no headroom for a tag). The one store left to the caller lets it write the field
/// after the packet has been moved rather than before: a narrow store into a packet that is
/// copied right after stalls the copy's loads (store-to-load forwarding fails).
#[inline]
pub fn egress_tag_frame(pkt: &mut Packet, vlan: Option<u16>) -> Option<u16> {
    let cur = outer_vid(pkt.data());
    match (cur, vlan) {
        (None, None) => {}
        (Some(c), Some(v)) => {
            if c != v & VID_MASK {
                let f = pkt.data_mut();
                let tci = (rd16(f, 14) & !VID_MASK) | (v & VID_MASK);
                wr16(f, 14, tci);
                // A forwarded frame crossing to another VLAN uses the 802.1Q TPID.
                wr16(f, 12, ETHERTYPE_VLAN);
            }
        }
        (Some(_), None) => {
            vlan_pop(pkt);
        }
        (None, Some(v)) => {
            if !vlan_push(pkt, v) {
                return None;
            }
        }
    }
    Some(vlan.map_or(NO_VLAN, |v| v & VID_MASK))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of `l3_len` bytes of ethertype `ethertype` begun in a new packet, broadcast in
    /// VLAN 10; with where its L3 header starts.
    fn started(ethertype: u16, l3_len: usize) -> (Packet, usize) {
        let mut p = Packet::new();
        let l2 = L2 {
            dst: BROADCAST,
            src: [2, 0, 0, 0, 0, 1],
            vlan: Some(10),
        };
        let l3 = start_frame(&mut p, l2, ethertype, l3_len).unwrap();
        (p, l3)
    }

    #[test]
    fn start_frame_pads_and_tags() {
        let (mut p, l3) = started(0x0806, 28);
        assert_eq!(l3, 18);
        assert_eq!(p.len(), 60);
        assert_eq!(outer_vid(p.data()), Some(10));
        assert_eq!(&p.data()[16..18], &[0x08, 0x06]);
        assert!(set_egress_tag(&mut p, Some(20)));
        assert_eq!(outer_vid(p.data()), Some(20));
        assert!(set_egress_tag(&mut p, None));
        assert_eq!(outer_vid(p.data()), None);
        assert_eq!(&p.data()[12..14], &[0x08, 0x06]);
        assert!(set_egress_tag(&mut p, Some(30)));
        assert_eq!(outer_vid(p.data()), Some(30));
        assert_eq!(p.meta.vlan, 30);
    }

    #[test]
    fn egress_tag_frame_tags_the_frame_and_returns_the_vlan_for_meta() {
        let (mut p, _) = started(0x0800, 28);
        p.meta.vlan = 10;
        // Retag: the frame says 20 (PCP/DEI kept), `meta.vlan` is the caller's to store.
        p.data_mut()[14] |= 0xa0;
        assert_eq!(egress_tag_frame(&mut p, Some(20)), Some(20));
        assert_eq!(outer_vid(p.data()), Some(20));
        assert_eq!(p.data()[14] & 0xf0, 0xa0);
        assert_eq!(p.meta.vlan, 10);
        // Pop: untagged, NO_VLAN.
        assert_eq!(egress_tag_frame(&mut p, None), Some(NO_VLAN));
        assert_eq!(outer_vid(p.data()), None);
        assert_eq!(&p.data()[12..14], &[0x08, 0x00]);
        // Push with no headroom left (the frame grown over all of it): `None`, no change.
        let h = p.headroom();
        assert!(p.push_front(h).is_some());
        let before = p.data().to_vec();
        assert_eq!(egress_tag_frame(&mut p, Some(30)), None);
        assert_eq!(p.data(), &before[..]);
    }
}
