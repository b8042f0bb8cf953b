//! Zero-copy header views.
//!
//! The views for Ethernet, ARP, IPv4, IPv6 (and its extension headers), TCP, UDP, ICMPv4 and
//! ICMPv6 are smoltcp's (`smoltcp::wire`), re-exported here. smoltcp fits because its views:
//!
//! - are zero-copy wrappers over any `T: AsRef<[u8]>` (and `AsMut<[u8]>` for the setters), so
//!   the same type reads a received `&[u8]` and rewrites a `&mut [u8]` in place — which the
//!   router needs for TTL decrement and MAC rewrite, and NAT later for address/port rewrite;
//! - have checked constructors (`new_checked`) that validate every length field once, after
//!   which no accessor can panic — the "never panic on any input" rule of the fast path;
//! - come with `Repr` types that `parse` a view into plain values and `emit` them back, with
//!   checksum fill/verify helpers, which is what tests, control-plane replies (ARP, ICMP
//!   errors, ND) and the builders' verification want.
//!
//! smoltcp has no 802.1Q view (it does not do VLANs), so [`VlanTag`] is written here in the
//! same style. The hot path does not use these views: [`crate::parse()`] reads bytes directly,
//! because a per-packet budget of a few nanoseconds leaves no room for layered `Result`s.
//!
//! Also here: [`vlan_push`] and [`vlan_pop`], which insert or remove an 802.1Q tag in a
//! [`Packet`] by moving only the 12 MAC bytes, using the packet's headroom.
//!
//! Threads: none; every function works on the buffer it is given.

use crate::bytes::{rd16, wr16};
use crate::{Packet, NO_OFFSET};

pub use smoltcp::wire::{
    ArpHardware, ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr,
    Icmpv4Message, Icmpv4Packet, Icmpv4Repr, Icmpv6Message, Icmpv6Packet, Icmpv6Repr, IpAddress, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, Ipv6Address, Ipv6ExtHeader, Ipv6FragmentHeader, Ipv6Packet, Ipv6Repr,
    TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket, UdpRepr, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
    IPV6_HEADER_LEN, TCP_HEADER_LEN, UDP_HEADER_LEN,
};

/// What `Ipv4Repr::parse` (and other `Repr` parsers) should verify; `default()` verifies all.
pub use smoltcp::phy::ChecksumCapabilities;

/// The error of smoltcp's checked constructors and `Repr::parse` (a malformed or short buffer).
pub use smoltcp::wire::Error as WireError;

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// TPID of an 802.1Q (customer) VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// TPID of an 802.1ad (service, "QinQ" outer) VLAN tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Length of an Ethernet header (no tags).
pub const ETH_HEADER_LEN: usize = 14;
/// Length of one VLAN tag (TPID + TCI).
pub const VLAN_TAG_LEN: usize = 4;
/// The largest VLAN ID value (12 bits).
pub const VID_MASK: u16 = 0x0fff;

/// IP protocol number of ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number of ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;
/// IP protocol number of SCTP.
pub const IPPROTO_SCTP: u8 = 132;

/// Whether `ethertype` is a VLAN TPID the parser walks through (802.1Q or 802.1ad).
#[inline(always)]
pub fn is_vlan_tpid(ethertype: u16) -> bool {
    ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ
}

/// A zero-copy view of an 802.1Q tag body: TCI (PCP, DEI, VID) then the encapsulated ethertype,
/// followed by the payload.
///
/// The view starts *after* the TPID, i.e. over the payload of an [`EthernetFrame`] whose
/// ethertype is 0x8100/0x88a8 (or over the payload of an outer `VlanTag`), which is how
/// smoltcp's Ethernet view hands it out:
///
/// ```
/// use freeway_packet::wire::{EthernetFrame, VlanTag};
/// let frame = [0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0x20, 0x0a, 0x08, 0x00];
/// let eth = EthernetFrame::new_checked(&frame[..]).unwrap();
/// let tag = VlanTag::new_checked(eth.payload()).unwrap();
/// assert_eq!((tag.pcp(), tag.vid(), tag.ethertype()), (1, 10, 0x0800));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Length of the view's header (TCI + ethertype).
    pub const HEADER_LEN: usize = 4;

    /// Wraps `buffer` without checking its length; accessors may panic if it is shorter than
    /// [`Self::HEADER_LEN`]. Prefer [`VlanTag::new_checked`].
    pub const fn new_unchecked(buffer: T) -> VlanTag<T> {
        VlanTag { buffer }
    }

    /// Wraps `buffer`, checking that it holds the 4-byte tag body; after this no accessor
    /// panics.
    pub fn new_checked(buffer: T) -> Result<VlanTag<T>, WireError> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            Err(WireError)
        } else {
            Ok(VlanTag { buffer })
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Tag Control Information (PCP:3, DEI:1, VID:12).
    #[inline]
    pub fn tci(&self) -> u16 {
        let b = self.buffer.as_ref();
        rd16(b, 0)
    }

    /// Priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & VID_MASK
    }

    /// The encapsulated ethertype (or the next TPID for a stacked tag).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        rd16(b, 2)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> VlanTag<&'a T> {
    /// The bytes after the tag.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[Self::HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the whole TCI.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        wr16(self.buffer.as_mut(), 0, tci);
    }

    /// Sets the VID, keeping PCP and DEI.
    #[inline]
    pub fn set_vid(&mut self, vid: u16) {
        let tci = (self.tci() & !VID_MASK) | (vid & VID_MASK);
        self.set_tci(tci);
    }

    /// Sets the PCP (low 3 bits of `pcp`), keeping DEI and VID.
    #[inline]
    pub fn set_pcp(&mut self, pcp: u8) {
        let tci = (self.tci() & 0x1fff) | (u16::from(pcp & 7) << 13);
        self.set_tci(tci);
    }

    /// Sets the DEI bit.
    #[inline]
    pub fn set_dei(&mut self, dei: bool) {
        let tci = (self.tci() & !0x1000) | if dei { 0x1000 } else { 0 };
        self.set_tci(tci);
    }

    /// Sets the encapsulated ethertype.
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: u16) {
        wr16(self.buffer.as_mut(), 2, ethertype);
    }

    /// The bytes after the tag, mutable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[Self::HEADER_LEN..]
    }
}

/// The plain-value form of a [`VlanTag`], in the manner of smoltcp's `Repr` types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanRepr {
    /// Priority code point (0..=7).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (0..=4095).
    pub vid: u16,
    /// Encapsulated ethertype.
    pub ethertype: u16,
}

impl VlanRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(tag: &VlanTag<T>) -> VlanRepr {
        VlanRepr {
            pcp: tag.pcp(),
            dei: tag.dei(),
            vid: tag.vid(),
            ethertype: tag.ethertype(),
        }
    }

    /// Writes the tag body into a checked view (out-of-range fields are masked).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut VlanTag<T>) {
        let tci = (u16::from(self.pcp & 7) << 13) | if self.dei { 0x1000 } else { 0 } | (self.vid & VID_MASK);
        tag.set_tci(tci);
        tag.set_ethertype(self.ethertype);
    }
}

/// Inserts an 802.1Q tag (TPID 0x8100, PCP 0, DEI 0, VID `vid & 0xfff`) after the MAC
/// addresses, using 4 bytes of headroom and moving only the 12 MAC bytes.
///
/// Returns `false` (and changes nothing) if the frame is shorter than an Ethernet header or
/// the headroom is smaller than 4 bytes. An already tagged frame gets a new outer tag.
///
/// If `pkt.meta` was filled by [`crate::parse()`] it stays consistent: `l3_off`/`l4_off` move by
/// 4 and `vlan_depth` grows by one. `meta.vlan` is left alone: it is the packet's classified
/// VLAN, which the bridge owns.
#[inline]
pub fn vlan_push(pkt: &mut Packet, vid: u16) -> bool {
    if pkt.len() < ETH_HEADER_LEN || pkt.headroom() < VLAN_TAG_LEN {
        return false;
    }
    let Some(d) = pkt.push_front(VLAN_TAG_LEN) else {
        return false;
    };
    d.copy_within(VLAN_TAG_LEN..VLAN_TAG_LEN + 12, 0);
    wr16(d, 12, ETHERTYPE_VLAN);
    wr16(d, 14, vid & VID_MASK);
    let m = &mut pkt.meta;
    if m.l3_off != NO_OFFSET {
        m.l3_off += VLAN_TAG_LEN as u16;
    }
    if m.l4_off != NO_OFFSET {
        m.l4_off += VLAN_TAG_LEN as u16;
    }
    m.vlan_depth = m.vlan_depth.saturating_add(1);
    true
}

/// Removes the outer VLAN tag (TPID 0x8100 or 0x88a8), moving only the 12 MAC bytes; the
/// freed 4 bytes become headroom.
///
/// Returns `false` (and changes nothing) if the frame carries no tag or is too short to hold
/// one (18 bytes). Like [`vlan_push`], it keeps a parsed `meta` consistent (offsets move back
/// by 4, `vlan_depth` shrinks by one) and leaves `meta.vlan` alone.
#[inline]
pub fn vlan_pop(pkt: &mut Packet) -> bool {
    let d = pkt.data_mut();
    if d.len() < ETH_HEADER_LEN + VLAN_TAG_LEN || !is_vlan_tpid(rd16(d, 12)) {
        return false;
    }
    d.copy_within(0..12, VLAN_TAG_LEN);
    if !pkt.pull_front(VLAN_TAG_LEN) {
        return false;
    }
    let m = &mut pkt.meta;
    if m.l3_off != NO_OFFSET && m.l3_off >= VLAN_TAG_LEN as u16 {
        m.l3_off -= VLAN_TAG_LEN as u16;
    }
    if m.l4_off != NO_OFFSET && m.l4_off >= VLAN_TAG_LEN as u16 {
        m.l4_off -= VLAN_TAG_LEN as u16;
    }
    m.vlan_depth = m.vlan_depth.saturating_sub(1);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        wr16(&mut f, 12, ETHERTYPE_IPV4);
        for (i, b) in f[14..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    #[test]
    fn vlan_view_reads_and_writes() {
        let mut b = [0xe0u8, 0x64, 0x86, 0xdd, 9, 9];
        let t = VlanTag::new_checked(&b[..]).unwrap();
        assert_eq!(t.tci(), 0xe064);
        assert_eq!(t.pcp(), 7);
        assert!(!t.dei());
        assert_eq!(t.vid(), 100);
        assert_eq!(t.ethertype(), ETHERTYPE_IPV6);
        assert_eq!(t.payload(), &[9, 9]);
        let r = VlanRepr::parse(&t);
        let mut t = VlanTag::new_checked(&mut b[..]).unwrap();
        t.set_vid(4095);
        t.set_dei(true);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (7, true, 4095));
        t.set_pcp(2);
        t.set_ethertype(ETHERTYPE_ARP);
        assert_eq!(
            (t.pcp(), t.dei(), t.vid(), t.ethertype()),
            (2, true, 4095, ETHERTYPE_ARP)
        );
        r.emit(&mut t);
        assert_eq!(VlanRepr::parse(&t), r);
        assert_eq!(b, [0xe0, 0x64, 0x86, 0xdd, 9, 9]);
    }

    #[test]
    fn vlan_view_checked_constructor_refuses_short_buffers() {
        for n in 0..4 {
            assert!(VlanTag::new_checked(&[0u8; 4][..n]).is_err());
        }
        assert!(VlanTag::new_checked(&[0u8; 4][..]).is_ok());
    }

    #[test]
    fn push_then_pop_restores_the_frame() {
        let f = frame();
        let mut p = Packet::from_frame(&f).unwrap();
        let room = p.headroom();
        assert!(vlan_push(&mut p, 0x1234)); // masked to 0x234
        assert_eq!(p.len(), f.len() + 4);
        assert_eq!(p.headroom(), room - 4);
        let d = p.data();
        assert_eq!(&d[0..12], &f[0..12]);
        assert_eq!(&d[12..16], &[0x81, 0x00, 0x02, 0x34]);
        assert_eq!(&d[16..], &f[12..]);
        assert!(vlan_push(&mut p, 7));
        assert_eq!(&p.data()[12..20], &[0x81, 0x00, 0x00, 0x07, 0x81, 0x00, 0x02, 0x34]);
        assert!(vlan_pop(&mut p));
        assert!(vlan_pop(&mut p));
        assert_eq!(p.data(), &f[..]);
        assert_eq!(p.headroom(), room);
        assert!(!vlan_pop(&mut p), "untagged frame has nothing to pop");
        assert_eq!(p.data(), &f[..]);
    }

    #[test]
    fn push_and_pop_keep_parsed_meta_consistent() {
        let f = frame();
        let mut p = Packet::from_frame(&f).unwrap();
        p.meta.l3_off = 14;
        p.meta.l4_off = 34;
        p.meta.vlan = 55;
        assert!(vlan_push(&mut p, 10));
        assert_eq!(
            (p.meta.l3_off, p.meta.l4_off, p.meta.vlan_depth, p.meta.vlan),
            (18, 38, 1, 55)
        );
        assert!(vlan_pop(&mut p));
        assert_eq!(
            (p.meta.l3_off, p.meta.l4_off, p.meta.vlan_depth, p.meta.vlan),
            (14, 34, 0, 55)
        );
    }

    #[test]
    fn push_and_pop_refuse_what_they_cannot_do() {
        let mut p = Packet::from_frame(&[0u8; 13]).unwrap();
        assert!(!vlan_push(&mut p, 1));
        assert_eq!(p.len(), 13);
        // A tag TPID but only 17 bytes: no room for the TCI + ethertype.
        let mut short = frame();
        wr16(&mut short, 12, ETHERTYPE_QINQ);
        short.truncate(17);
        let mut p = Packet::from_frame(&short).unwrap();
        assert!(!vlan_pop(&mut p));
        assert_eq!(p.data(), &short[..]);
        // No headroom left.
        let mut p = Packet::from_frame(&frame()).unwrap();
        let h = p.headroom();
        assert!(p.push_front(h).is_some());
        let before = p.data().to_vec();
        assert!(!vlan_push(&mut p, 1));
        assert_eq!(p.data(), &before[..]);
    }
}
