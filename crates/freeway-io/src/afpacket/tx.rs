//! The transmit side: one `sendmmsg(2)` per batch on the worker's own socket (the one whose
//! ring its RX queue reads).
//!
//! A TX ring (`PACKET_TX_RING`) would save the per-frame copy into a kernel skb but costs a
//! second mapping per worker and a `send()` to kick it anyway; `sendmmsg` with one iovec per
//! packet is one syscall per batch, needs no extra memory, and lets the buffers go back to the
//! pool as soon as it returns (the kernel has copied the frames by then).
//!
//! Never blocks: the socket is non-blocking and every call passes `MSG_DONTWAIT`. When the
//! kernel refuses a frame because a queue is full (`EAGAIN`, or `ENOBUFS` from the device
//! queue with `PACKET_QDISC_BYPASS`) that frame and the rest of the batch are counted as
//! `busy` drops; any other error (`EMSGSIZE`: larger than the MTU; `ENETDOWN`; ...) drops that
//! one frame (`errors`, errno kept in `last_errno`) and the rest of the batch is still sent.
//!
//! Threads: an [`AfPacketTx`] is owned by one worker, the only writer of its counters.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use freeway_packet::{Batch, PacketPool, MAX_BATCH};
use freeway_sync::Counter;

use super::sys::Socket;
use super::QueueSlot;
use crate::TxQueue;

/// Transmit counters of one queue beyond packets/bytes. Single writer: the queue's worker.
#[derive(Debug, Default)]
pub struct TxCounters {
    /// Frames dropped because a kernel queue was full (`EAGAIN`/`ENOBUFS`).
    pub busy: Counter,
    /// Frames the kernel refused for another reason.
    pub errors: Counter,
    /// The errno of the last such refusal (0: none).
    pub last_errno: AtomicI32,
    /// `sendmmsg` calls made.
    pub syscalls: Counter,
}

/// One transmit queue.
#[derive(Debug)]
pub struct AfPacketTx {
    sock: Arc<Socket>,
    slot: QueueSlot<TxCounters>,
}

impl AfPacketTx {
    pub(crate) fn new(sock: Arc<Socket>, slot: QueueSlot<TxCounters>) -> AfPacketTx {
        AfPacketTx { sock, slot }
    }
}

impl TxQueue for AfPacketTx {
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize {
        let n = batch.len().min(MAX_BATCH);
        if n == 0 {
            return 0;
        }
        let x = self.slot.extra();
        let pkts = batch.as_slice();
        // SAFETY: all-zero is a valid `iovec` and `mmsghdr` (null pointers, zero lengths).
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for (i, p) in pkts.iter().take(n).enumerate() {
            // The kernel only reads through `iov_base` (sendmmsg), so the const-to-mut cast
            // never leads to a write into the packet.
            iov[i].iov_base = p.data().as_ptr() as *mut libc::c_void;
            iov[i].iov_len = p.len();
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        let mut i = 0usize;
        let mut bytes = 0u64;
        let mut dropped = 0u64;
        while i < n {
            x.syscalls.inc();
            // SAFETY: `msgs[i..n]` are initialised headers whose iovecs point into packets of
            // `batch`, which is neither moved nor mutated until this loop ends; the socket is
            // bound, so no destination address is needed.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.raw(),
                    msgs.as_mut_ptr().add(i),
                    (n - i) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                let r = r as usize;
                bytes += pkts[i..i + r].iter().map(|p| p.len() as u64).sum::<u64>();
                i += r;
                continue;
            }
            let e = if r == 0 {
                libc::EAGAIN
            } else {
                std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
            };
            match e {
                libc::EINTR => {}
                libc::EAGAIN | libc::ENOBUFS => {
                    let rest = (n - i) as u64;
                    x.busy.add(rest);
                    dropped += rest;
                    break;
                }
                e => {
                    x.errors.inc();
                    x.last_errno.store(e, Ordering::Relaxed);
                    dropped += 1;
                    i += 1;
                }
            }
        }
        let sent = n as u64 - dropped;
        let s = self.slot.stats();
        s.packets.add(sent);
        s.bytes.add(bytes);
        s.dropped.add(dropped);
        pool.put_batch(batch);
        sent as usize
    }
}
