//! The receive side: walking the TPACKET_V2 ring of one socket.
//!
//! # The ring protocol
//!
//! The ring is `frames` fixed slots of `frame_size` bytes (see [`super`] for why frames and
//! not TPACKET_V3's blocks). The kernel writes each frame into the next free slot and hands it
//! over at once by setting `TP_STATUS_USER` in the slot's header (after the frame, with a
//! write barrier), then wakes any `poll()` waiting on the socket. The queue reads slots
//! strictly in ring order: it checks the status of the slot at its cursor (an acquire load,
//! pairing with the kernel's barrier), copies the frame out, and hands the slot back by storing
//! `TP_STATUS_KERNEL` (a release store, so every read of the slot happens before the kernel may
//! reuse it).
//!
//! `rx_burst` never blocks and makes no syscall: when the slot at the cursor still belongs to
//! the kernel there is nothing to read. A worker with nothing to do waits for the next frame
//! in `poll()` on the socket ([`RxQueue::wait_fd`]): the kernel reports it readable while the
//! slot it filled last still belongs to user space.
//!
//! # Per frame
//!
//! * **Copy**: each frame is copied into a pool [`Packet`] (zero-copy is out of scope: the
//!   slot goes back to the kernel as soon as it is read, and a packet's buffer has headroom
//!   for the datapath's pushes).
//! * **VLAN**: the kernel strips the outer 802.1Q/802.1ad tag into `tp_vlan_tci`
//!   (`TP_STATUS_VLAN_VALID`; the TPID in `tp_vlan_tpid` when `TP_STATUS_VLAN_TPID_VALID`,
//!   else 0x8100); the copy writes it back after the MAC addresses, so the datapath sees the
//!   frame as it was on the wire (`vlan_restored`).
//! * **Too big**: a frame the kernel truncated to its slot (`tp_snaplen < tp_len`) or one that
//!   does not fit a pool buffer (tag included) is counted (`too_big`, also in the queue's
//!   `dropped`) and skipped; never delivered truncated.
//! * **Partial checksums** (`TP_STATUS_CSUMNOTREADY`: sent by a local stack with checksum
//!   offload, e.g. through a veth whose TX offload is on): the L4 checksum field only holds
//!   the pseudo-header sum. For TCP, UDP and UDP-Lite over IPv4/IPv6 the queue completes it in
//!   software (`csum_completed`), as the NIC would have; anything else is delivered as is and
//!   counted (`csum_partial`). The test bed turns TX checksum offload off anyway.
//! * **Own transmissions**: frames whose `sll_pkttype` is `PACKET_OUTGOING` are skipped
//!   (`outgoing_skipped`). With `PACKET_IGNORE_OUTGOING` the kernel never queues them; the
//!   check is the fallback for kernels older than 4.20.
//!
//! Threads: an [`AfPacketRx`] is owned by one worker, the only writer of its counters.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use freeway_packet::checksum;
use freeway_packet::parse::parse_frame;
use freeway_packet::{Batch, Meta, Packet, PacketPool, TooBig, NO_OFFSET};
use freeway_sync::{Counter, Tick};

use super::sys::{self, Ring, Socket, Tpacket2Hdr};
use super::QueueSlot;
use crate::RxQueue;

/// Receive counters of one queue beyond packets/bytes. Single writer: the queue's worker.
#[derive(Debug, Default)]
pub struct RxCounters {
    /// Frames larger than a pool buffer or truncated by the kernel to the ring slot; dropped.
    pub too_big: Counter,
    /// Frames whose VLAN tag the kernel had stripped and the queue put back.
    pub vlan_restored: Counter,
    /// Frames with a partial (offloaded) L4 checksum that the queue completed.
    pub csum_completed: Counter,
    /// Frames with a partial checksum the queue could not complete (not TCP/UDP, unparsable);
    /// delivered as they are.
    pub csum_partial: Counter,
    /// Outgoing frames seen on the ring and skipped (only without `PACKET_IGNORE_OUTGOING`).
    pub outgoing_skipped: Counter,
}

/// What [`copy_frame`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Copied {
    /// The frame as received.
    Plain,
    /// The frame with the stripped VLAN tag re-inserted.
    Retagged,
}

/// Copies a frame read from the ring into `p`, re-inserting the VLAN tag the kernel stripped.
///
/// `data` is what the ring holds (`tp_snaplen` bytes), `wire_len` the frame's real length
/// (`tp_len`), `status`/`tci`/`tpid` the header fields. `Err(TooBig)` if the kernel truncated
/// the frame or it does not fit `p`'s buffer; `p` is then in an unspecified (but valid) state.
#[inline]
pub(crate) fn copy_frame(
    p: &mut Packet,
    data: &[u8],
    wire_len: usize,
    status: u32,
    tci: u16,
    tpid: u16,
) -> Result<Copied, TooBig> {
    if data.len() < wire_len {
        return Err(TooBig);
    }
    if status & sys::TP_STATUS_VLAN_VALID == 0 || data.len() < 12 {
        p.set_frame(data)?;
        return Ok(Copied::Plain);
    }
    let tpid = if status & sys::TP_STATUS_VLAN_TPID_VALID != 0 && tpid != 0 {
        tpid
    } else {
        0x8100
    };
    let out = p.fill(data.len() + 4)?;
    out[..12].copy_from_slice(&data[..12]);
    out[12..14].copy_from_slice(&tpid.to_be_bytes());
    out[14..16].copy_from_slice(&tci.to_be_bytes());
    out[16..].copy_from_slice(&data[12..]);
    Ok(Copied::Retagged)
}

/// Completes a partial (offloaded) TCP/UDP/UDP-Lite checksum in place: the checksum field
/// holds the folded pseudo-header sum, so the checksum is the complement of the sum over the
/// L4 segment, as a NIC computes it. Returns whether the frame was recognised and fixed.
pub(crate) fn complete_partial_csum(f: &mut [u8]) -> bool {
    let mut m = Meta::default();
    if parse_frame(f, &mut m).is_err() || m.l4_off == NO_OFFSET {
        return false;
    }
    let (l3, l4) = (usize::from(m.l3_off), usize::from(m.l4_off));
    let end = match m.ethertype {
        0x0800 => l3 + usize::from(u16::from_be_bytes([f[l3 + 2], f[l3 + 3]])),
        0x86dd => l3 + 40 + usize::from(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]])),
        _ => return false,
    };
    let field = match m.ip_proto {
        6 => 16,
        17 | 136 => 6,
        _ => return false,
    };
    if end > f.len() || l4 + field + 2 > end {
        return false;
    }
    let mut c = checksum::fold(checksum::sum(&f[l4..end], 0));
    if c == 0 && m.ip_proto == 17 {
        // UDP: 0 means "no checksum"; the computed value 0 is sent as all ones.
        c = 0xffff;
    }
    f[l4 + field..l4 + field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// The status word of a frame slot, shared with the kernel.
///
/// # Safety
/// `slot` must be the start of a slot of the mapped ring (16-aligned, so the status word is
/// 4-aligned) and the ring must outlive the returned reference.
#[inline(always)]
unsafe fn slot_status<'a>(slot: *mut u8) -> &'a AtomicU32 {
    // SAFETY: guaranteed by the caller; `AtomicU32` has the layout of `u32`, and the kernel
    // accesses this word with its own barriers (`__packet_set_status`: smp_wmb, store, flush).
    unsafe {
        &*slot
            .add(std::mem::offset_of!(Tpacket2Hdr, tp_status))
            .cast::<AtomicU32>()
    }
}

/// One receive queue: the RX ring of one socket.
///
/// Aligned to 128 bytes, as `GenQueue`: the queues of all workers are built one after another
/// on the control thread and each is written on every burst by its worker (the cursor), so
/// unaligned neighbours would share cache lines between workers.
#[derive(Debug)]
#[repr(align(128))]
pub struct AfPacketRx {
    ring: Ring,
    /// Keeps the socket (and with it the fanout membership) open while the queue lives.
    sock: Arc<Socket>,
    /// Slot at the cursor: the next frame the kernel hands over.
    cur: usize,
    slot: QueueSlot<RxCounters>,
}

impl AfPacketRx {
    pub(crate) fn new(ring: Ring, sock: Arc<Socket>, slot: QueueSlot<RxCounters>) -> AfPacketRx {
        AfPacketRx {
            ring,
            sock,
            cur: 0,
            slot,
        }
    }
}

impl RxQueue for AfPacketRx {
    fn rx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool, _now: Tick) -> usize {
        let x = self.slot.extra();
        let fs = self.ring.frame_size;
        let mut n = 0usize;
        let mut bytes = 0u64;
        let mut dropped = 0u64;
        // The receive timestamp: the wall clock read once per call, at its first packet.
        let mut ts = 0u64;
        while batch.room() > 0 {
            let h = self.ring.slot(self.cur);
            // SAFETY: `h` is the start of slot `cur` of our live ring.
            let st = unsafe { slot_status(h) };
            let status = st.load(Ordering::Acquire);
            if status & sys::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the slot now belongs to us (acquire above), so the kernel writes none of
            // it until we hand it back; the header and `sll_pkttype` lie in the first
            // FRAME_HDR_LEN bytes of the slot (`frame_size >= 128`), and the slot is 16-aligned.
            let (hdr, pkttype) = unsafe { (h.cast::<Tpacket2Hdr>().read(), *h.add(sys::H_SLL_PKTTYPE)) };
            let (snap, len, mac) = (hdr.tp_snaplen as usize, hdr.tp_len as usize, usize::from(hdr.tp_mac));
            let (tci, tpid) = (hdr.tp_vlan_tci, hdr.tp_vlan_tpid);
            if mac < sys::FRAME_HDR_LEN || mac + snap > fs {
                // Never happens with a sane kernel; do not read out of bounds.
                debug_assert!(false, "TPACKET_V2 frame at {mac}+{snap} outside a slot of {fs}");
                x.too_big.inc();
                dropped += 1;
            } else if pkttype == sys::PACKET_OUTGOING {
                x.outgoing_skipped.inc();
            } else {
                // SAFETY: `mac + snap <= frame_size` (checked above); the bytes belong to us
                // until the slot is handed back, which happens after this slice is dropped.
                let data = unsafe { std::slice::from_raw_parts(h.add(mac), snap) };
                // A large buffer only for a frame that needs one (the pool has them when
                // some port's MTU does); 4 bytes for a tag to re-insert.
                let mut p = pool.get_for(snap + 4);
                match copy_frame(&mut p, data, len, status, tci, tpid) {
                    Ok(c) => {
                        if c == Copied::Retagged {
                            x.vlan_restored.inc();
                        }
                        if status & sys::TP_STATUS_CSUMNOTREADY != 0 {
                            if complete_partial_csum(p.data_mut()) {
                                x.csum_completed.inc();
                            } else {
                                x.csum_partial.inc();
                            }
                        }
                        if ts == 0 {
                            ts = crate::wall_ns();
                        }
                        p.meta.ts_ns = ts;
                        bytes += p.len() as u64;
                        n += 1;
                        // Cannot fail: the loop runs only while the batch has room.
                        if let Err(p) = batch.push(p) {
                            pool.put(p);
                        }
                    }
                    Err(TooBig) => {
                        x.too_big.inc();
                        dropped += 1;
                        pool.put(p);
                    }
                }
            }
            // Release: every read of this slot happens before the kernel sees it as its own.
            st.store(sys::TP_STATUS_KERNEL, Ordering::Release);
            self.cur += 1;
            if self.cur == self.ring.frames {
                self.cur = 0;
            }
        }
        if n != 0 || dropped != 0 {
            let s = self.slot.stats();
            s.packets.add(n as u64);
            s.bytes.add(bytes);
            s.dropped.add(dropped);
        }
        n
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.sock.raw())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::build::{build_frame, FrameSpec, L4};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[test]
    fn plain_frames_are_copied_and_truncated_ones_refused() {
        let f: Vec<u8> = (0..100u8).collect();
        let mut p = Packet::new();
        assert_eq!(copy_frame(&mut p, &f, 100, 0, 0, 0), Ok(Copied::Plain));
        assert_eq!(p.data(), &f[..]);
        // The kernel cut it to the slot: snaplen < len.
        assert_eq!(copy_frame(&mut p, &f[..80], 100, 0, 0, 0), Err(TooBig));
        // Too big for the buffer.
        let mut small = Packet::with_capacity(256);
        let big = vec![0u8; 200];
        assert_eq!(copy_frame(&mut small, &big, 200, 0, 0, 0), Err(TooBig));
    }

    #[test]
    fn stripped_tags_are_reinserted() {
        let f: Vec<u8> = (0..64u8).collect();
        let mut p = Packet::new();
        let st = sys::TP_STATUS_VLAN_VALID;
        assert_eq!(copy_frame(&mut p, &f, 64, st, 0x6064, 0), Ok(Copied::Retagged));
        let d = p.data();
        assert_eq!(d.len(), 68);
        assert_eq!(&d[..12], &f[..12]);
        assert_eq!(&d[12..16], &[0x81, 0x00, 0x60, 0x64]);
        assert_eq!(&d[16..], &f[12..]);
        // 802.1ad TPID reported by the kernel.
        let st = sys::TP_STATUS_VLAN_VALID | sys::TP_STATUS_VLAN_TPID_VALID;
        copy_frame(&mut p, &f, 64, st, 10, 0x88a8).unwrap();
        assert_eq!(&p.data()[12..16], &[0x88, 0xa8, 0x00, 0x0a]);
        // A tag that no longer fits the buffer: too big, not truncated.
        let mut small = Packet::with_capacity(256);
        let f = vec![0u8; 128];
        assert_eq!(copy_frame(&mut small, &f, 128, st, 1, 0x8100), Err(TooBig));
    }

    /// Replaces the L4 checksum of a built frame with the folded pseudo-header sum, as a stack
    /// with checksum offload leaves it.
    fn make_partial(f: &mut [u8], v6: bool, proto: u8, l3: usize, l4: usize, field: usize) {
        let l4_len = f.len() - l4;
        let ps = if v6 {
            let s: [u8; 16] = f[l3 + 8..l3 + 24].try_into().unwrap();
            let d: [u8; 16] = f[l3 + 24..l3 + 40].try_into().unwrap();
            checksum::pseudo_v6(s, d, proto, l4_len as u32)
        } else {
            let s: [u8; 4] = f[l3 + 12..l3 + 16].try_into().unwrap();
            let d: [u8; 4] = f[l3 + 16..l3 + 20].try_into().unwrap();
            checksum::pseudo_v4(s, d, proto, l4_len as u16)
        };
        let partial = !checksum::fold(ps);
        f[l4 + field..l4 + field + 2].copy_from_slice(&partial.to_be_bytes());
    }

    #[test]
    fn partial_checksums_are_completed() {
        let cases = [
            (L4::Udp, false, 17u8, 6usize),
            (L4::Tcp { flags: 0x02 }, false, 6, 16),
            (L4::Udp, true, 17, 6),
            (L4::Tcp { flags: 0x12 }, true, 6, 16),
        ];
        for (proto, v6, num, field) in cases {
            for vlan in [None, Some(7)] {
                let (src_ip, dst_ip) = if v6 {
                    (
                        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
                        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
                    )
                } else {
                    (
                        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                    )
                };
                let spec = FrameSpec {
                    vlan,
                    src_ip,
                    dst_ip,
                    proto,
                    len: 111,
                    ..FrameSpec::default()
                };
                let good = build_frame(&spec);
                let l3 = if vlan.is_some() { 18 } else { 14 };
                let l4 = l3 + if v6 { 40 } else { 20 };
                let mut f = good.clone();
                make_partial(&mut f, v6, num, l3, l4, field);
                assert_ne!(f, good);
                assert!(complete_partial_csum(&mut f), "{proto:?} v6={v6}");
                assert_eq!(f, good, "{proto:?} v6={v6} vlan={vlan:?}");
            }
        }
        // ICMP and non-IP frames are left alone.
        let mut icmp = build_frame(&FrameSpec {
            proto: L4::Icmp,
            ..FrameSpec::default()
        });
        let before = icmp.clone();
        assert!(!complete_partial_csum(&mut icmp));
        assert_eq!(icmp, before);
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!complete_partial_csum(&mut arp));
    }
}
