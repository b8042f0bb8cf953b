//! Capture taps under churn: the filters taps get, what each matches among the harness's
//! frames, and the writer output that reads the pcap stream back and checks every frame.

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use freeway_capture::{Direction, TapId, TapStats};

use super::model::*;
use super::oracle::{bit, seen_in, Shared};

/// The filters taps get.
pub(super) const FILTERS: [&str; 7] = [
    "udp",
    "udp dst port 7000",
    "ether dst 02:fe:00:00:00:01",
    "src net 10.100.0.0/16",
    "not ip",
    "vlan 20 and udp",
    "ip6 src net 2001:db8:100::/40",
];

/// Whether filter `i` matches `f`, as libpcap reads it: without `vlan`, the ethertype is the
/// one at offset 12 (a tagged frame is neither `ip` nor `ip6`); `vlan` moves what follows by
/// 4 bytes.
pub(super) fn filter_matches(i: u8, f: &[u8]) -> bool {
    let at = |o: usize| f.get(o).copied().unwrap_or(0);
    let et = |o: usize| u16::from_be_bytes([at(o), at(o + 1)]);
    // UDP over IPv4 or IPv6 with the ethertype at `o`, and its destination port.
    let udp = |o: usize| match et(o) {
        0x0800 => (at(o + 2 + 9) == 17).then(|| et(o + 2 + usize::from(at(o + 2) & 0x0f) * 4 + 2)),
        0x86dd => (at(o + 2 + 6) == 17).then(|| et(o + 2 + 40 + 2)),
        _ => None,
    };
    match i {
        0 => udp(12).is_some(),
        1 => udp(12) == Some(7000),
        2 => f.get(0..6) == Some(&RMAC[..]),
        3 => et(12) == 0x0800 && f.get(26..28) == Some(&[10, 100][..]),
        4 => et(12) != 0x0800,
        5 => et(12) == 0x8100 && et(14) & 0x0fff == 20 && udp(16).is_some(),
        _ => et(12) == 0x86dd && f.get(22..27) == Some(&[0x20, 0x01, 0x0d, 0xb8, 0x01][..]),
    }
}

/// A tap's filters over time (`(operation, filter index)`), written by the control thread.
pub(super) type FilterLog = Arc<Mutex<Vec<(u64, u8)>>>;

/// The output of a tap's writer: reads the pcap stream back and checks every captured frame.
pub(super) struct TapCheck {
    pub(super) shared: Arc<Shared>,
    pub(super) port: u16,
    pub(super) dir: Direction,
    pub(super) filters: FilterLog,
    pub(super) buf: Vec<u8>,
    pub(super) header: bool,
    /// `(worker, sequence number, incoming copy)` of the frames captured.
    pub(super) seen: HashSet<(u16, u64, bool)>,
    pub(super) frames: Arc<AtomicU64>,
}

impl TapCheck {
    fn frame(&mut self, f: &[u8]) {
        let s = &*self.shared;
        s.c.tap_frames.fetch_add(1, SeqCst);
        self.frames.fetch_add(1, SeqCst);
        let hi = s.sent.load(SeqCst);
        let Some((tag, hd)) = Tag::read(f) else {
            // The router's solicitations leave a VLAN 20 port; when is unknown here, so any
            // filter the tap had up to now may have matched.
            let log = self.filters.lock().unwrap_or_else(|e| e.into_inner());
            let fs = seen_in(&log, 0, hi);
            drop(log);
            let matched = (0..FILTERS.len() as u8).any(|i| fs & bit(i) != 0 && filter_matches(i, f));
            match solicitation(f) {
                Ok((_, _, vid))
                    if self.dir.covers(Direction::Tx)
                        && vlan_mask(20) & (1 << self.port) != 0
                        && vid == (self.port == TRUNK).then_some(20)
                        && matched => {}
                r => s.violation(format!(
                    "tap on port {} ({:?}): captured a frame the harness never sent ({r:?}, filters {fs:#x})",
                    self.port, self.dir
                )),
            }
            return;
        };
        // A routed frame may leave the port it came in on (another VLAN of the trunk): its
        // incoming copy is the one not from the router.
        let rx_copy = tag.in_port == self.port && f[6..12] != RMAC;
        if !self.seen.insert((tag.worker, tag.seq, rx_copy)) {
            s.violation(format!("tap on port {}: captured {tag:?} twice", self.port));
        }
        let log = self.filters.lock().unwrap_or_else(|e| e.into_inner());
        let fs = seen_in(&log, tag.lo, hi);
        drop(log);
        if !(0..FILTERS.len() as u8).any(|i| fs & bit(i) != 0 && filter_matches(i, f)) {
            s.violation(format!(
                "tap on port {}: {tag:?} captured, but no filter it had ({fs:#x}) matches it",
                self.port
            ));
        }
        if rx_copy && self.dir.covers(Direction::Rx) {
            return;
        }
        if !self.dir.covers(Direction::Tx) {
            s.violation(format!(
                "tap on port {} (in): captured {tag:?} from another port",
                self.port
            ));
            return;
        }
        let h = s.hist.read().unwrap_or_else(|e| e.into_inner());
        // The MAC of a routed frame's copies is the transmit queue's business.
        let mut mac = NONE;
        match s.check_output(&h, &tag, &hd, self.port, f, hi, &mut mac) {
            Ok(true) => {}
            Ok(false) => {
                s.c.unchecked.fetch_add(1, SeqCst);
            }
            Err(e) => s.violation(format!("tap on port {} (out): {e}", self.port)),
        }
    }
}

impl Write for TapCheck {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        let mut at = 0;
        if !self.header {
            if self.buf.len() < 24 {
                return Ok(data.len());
            }
            if self.buf[0..4] != [0xd4, 0xc3, 0xb2, 0xa1] {
                self.shared
                    .violation("tap: not a little-endian microsecond pcap stream".into());
            }
            self.header = true;
            at = 24;
        }
        while let Some(h) = self.buf.get(at..at + 16) {
            let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
            let Some(f) = self.buf.get(at + 16..at + 16 + len) else {
                break;
            };
            let f = f.to_vec();
            self.frame(&f);
            at += 16 + len;
        }
        self.buf.drain(..at);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A tap the control thread attached.
pub(super) struct LiveTap {
    pub(super) id: TapId,
    pub(super) filters: FilterLog,
    pub(super) frames: Arc<AtomicU64>,
    pub(super) writer: std::thread::JoinHandle<Result<TapStats, String>>,
}
