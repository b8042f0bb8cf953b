//! The per-worker reassembly table.
//!
//! # Design
//!
//! A [`Reassembler`] holds the datagrams in flight in a fixed number of slots
//! ([`Limits::max_datagrams`]), found by key in a `HashMap` sized once for that many (it
//! never grows, so never allocates after the first datagrams; std's `RandomState` keys it,
//! so a sender cannot aim fragments at one bucket). A slot keeps its fragments as the very
//! packets they arrived in, sorted by offset, and copies nothing until the datagram is
//! complete; then one buffer from the worker's [`PacketPool`] (a huge one,
//! [`PacketPool::get_huge`], for a datagram that does not fit a regular buffer) receives the
//! first fragment's Ethernet and IP headers and every fragment's data, and the fragments'
//! buffers go back to the pool. Slots are linked in arrival order of their first fragment,
//! so [`Reassembler::expire`] looks only at the oldest.
//!
//! # Rules (Linux's `inet_frag_queue_insert`, `ip_frag_queue`, `ipv6_frag_queue`)
//!
//! - A fragment entirely inside one already held is a duplicate: it alone is dropped.
//! - Any other overlap drops the whole datagram (RFC 5722 for IPv6; Linux does the same for
//!   IPv4 since 4.19): teardrop-shaped fragments never reassemble.
//! - A last fragment (no MF / M) that disagrees with a known end, or ends before data
//!   already held, and a fragment beyond a known end, drop the datagram ("inconsistent").
//! - Zero-length fragments, non-final fragments whose length is not a multiple of 8, a
//!   datagram longer than 65,535 bytes (or than a buffer can hold), a TCP fragment at offset
//!   8 (RFC 1858) and an IPv4 header with a bad checksum are dropped on arrival
//!   ([`crate::classify`]).
//!
//! # Bounds
//!
//! [`Limits`]: at most `max_datagrams` datagrams in flight and `max_bytes` bytes of buffers
//! held (each fragment counts its whole buffer, as Linux counts `truesize`), at most
//! `max_fragments` fragments per datagram, and a datagram not complete `timeout_ms` after its
//! first fragment is dropped. A fragment that would start a datagram beyond the first bound
//! or hold bytes beyond the second is dropped (as Linux drops past `ipfrag_high_thresh`):
//! held datagrams are never evicted for newcomers. The defaults follow Linux:
//! `ipfrag_high_thresh` 4 MiB, `ipfrag_time` 30 s; 1024 datagrams; 64 fragments (a 64 KiB
//! datagram cut for a 1280-byte IPv6 link needs 52).
//!
//! # Invariants
//!
//! 1. A slot's fragments are sorted by offset and never overlap; `covered` is the sum of
//!    their lengths, so the datagram is complete exactly when its end is known and
//!    `covered == end`.
//! 2. `bytes` is the sum of the capacities of every fragment held, and never exceeds
//!    `max_bytes`; the map holds exactly the live slots, at most `max_datagrams`.
//! 3. Every fragment given to [`Reassembler::push`] is, exactly once: returned (not a
//!    fragment), held, merged into a returned datagram, or counted in one drop reason and
//!    given back to the pool.
//!
//! Threads: one worker's, owning it; [`FragCounters`] are read by any thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use freeway_packet::bytes::wr16;
use freeway_packet::checksum;
use freeway_packet::{meta_flags, parse_reassembled, FragNote, Packet, PacketPool, HEADROOM, MAX_BUF_SIZE};
use freeway_sync::{CachePadded, Counter, Tick};
use serde::{Deserialize, Serialize};

use crate::classify::{classify, Class, FragInfo};

/// The bounds of one worker's reassembly table (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Datagrams in flight at once.
    pub max_datagrams: usize,
    /// Bytes of fragment buffers held at once.
    pub max_bytes: usize,
    /// Fragments one datagram may have.
    pub max_fragments: usize,
    /// Milliseconds a datagram may take to complete, from its first fragment.
    pub timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_datagrams: 1024,
            max_bytes: 4 << 20,
            max_fragments: 64,
            timeout_ms: 30_000,
        }
    }
}

macro_rules! reasons {
    ($($(#[$doc:meta])* $v:ident => $name:literal,)*) => {
        /// Why fragments were dropped. `r as usize` indexes [`FragCounters::drops`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $($(#[$doc])* $v,)*
        }

        impl DropReason {
            /// Every reason, in discriminant order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$v,)*];

            /// A stable snake_case name for counters.
            pub fn name(self) -> &'static str {
                match self {
                    $(DropReason::$v => $name,)*
                }
            }
        }
    };
}

reasons! {
    /// Headers the parser would not have accepted (a caller that did not parse).
    Malformed => "malformed",
    /// An IPv4 header checksum that does not verify.
    BadChecksum => "bad_checksum",
    /// No data, or a non-final fragment whose length is not a multiple of 8.
    BadLength => "bad_length",
    /// The datagram would be longer than 65,535 bytes, or than a buffer holds.
    TooLong => "too_long",
    /// A TCP fragment at offset 8 (RFC 1858).
    Tiny => "tiny",
    /// A fragment entirely inside one already held.
    Duplicate => "duplicate",
    /// The datagram had overlapping fragments (its every fragment is dropped).
    Overlap => "overlap",
    /// The datagram's last fragment disagreed with its other fragments.
    Inconsistent => "inconsistent",
    /// The datagram had more than `max_fragments` fragments.
    TooManyFragments => "too_many_fragments",
    /// `max_datagrams` were in flight: a new datagram's fragment.
    TableFull => "table_full",
    /// `max_bytes` were held.
    MemoryFull => "memory_full",
    /// The datagram did not complete within `timeout_ms`.
    Timeout => "timeout",
}

/// One worker's reassembly counters. Single writer: that worker (and its transmit side, for
/// the refragmentation counters, on the same thread).
#[derive(Debug, Default)]
pub struct FragCounters {
    /// Fragments taken in.
    pub fragments: Counter,
    /// Datagrams reassembled and handed on.
    pub reassembled: Counter,
    /// Fragments merged into those datagrams.
    pub merged: Counter,
    /// Reassembled datagrams fragmented again on their way out.
    pub refragmented: Counter,
    /// Fragments those made.
    pub fragments_out: Counter,
    /// Reassembled datagrams that could not be fragmented again (dropped).
    pub refrag_failed: Counter,
    /// Fragments dropped, by [`DropReason`].
    pub drops: [Counter; DropReason::ALL.len()],
    /// Datagrams in flight now.
    pub in_flight: AtomicU64,
    /// Bytes of fragment buffers held now.
    pub bytes_held: AtomicU64,
}

impl FragCounters {
    /// Sums `self` into `into` (a snapshot over workers).
    pub fn add_to(&self, into: &mut FragStats) {
        into.fragments += self.fragments.get();
        into.reassembled += self.reassembled.get();
        into.merged += self.merged.get();
        into.refragmented += self.refragmented.get();
        into.fragments_out += self.fragments_out.get();
        into.refrag_failed += self.refrag_failed.get();
        into.in_flight += self.in_flight.load(Ordering::Relaxed);
        into.bytes_held += self.bytes_held.load(Ordering::Relaxed);
        for (r, c) in DropReason::ALL.iter().zip(&self.drops) {
            if c.get() > 0 {
                *into.drops.entry(r.name()).or_default() += c.get();
            }
        }
    }

    /// Every fragment dropped, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().map(Counter::get).sum()
    }
}

/// [`FragCounters`] summed (over workers), for statistics output.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct FragStats {
    /// Fragments taken in.
    pub fragments: u64,
    /// Datagrams reassembled.
    pub reassembled: u64,
    /// Fragments merged into them.
    pub merged: u64,
    /// Datagrams fragmented again on transmit.
    pub refragmented: u64,
    /// Fragments those made.
    pub fragments_out: u64,
    /// Reassembled datagrams that could not be fragmented again.
    pub refrag_failed: u64,
    /// Datagrams in flight.
    pub in_flight: u64,
    /// Bytes of fragment buffers held.
    pub bytes_held: u64,
    /// Fragments dropped by reason (only non-zero ones).
    pub drops: std::collections::BTreeMap<&'static str, u64>,
}

/// What identifies a datagram's fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    src: [u8; 16],
    dst: [u8; 16],
    id: u32,
    /// IPv4: the protocol; IPv6: 0 (not part of its key).
    proto: u8,
    v6: bool,
    /// The caller's separation of address spaces (the conntrack zone of the port).
    zone: u16,
}

/// One held fragment.
#[derive(Debug)]
struct Frag {
    pkt: Packet,
    off: u32,
    len: u32,
    /// Where its data starts in its frame.
    data_at: u16,
}

const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Slot {
    key: Key,
    created: Tick,
    frags: Vec<Frag>,
    bytes: usize,
    /// The datagram's end (the last fragment's), [`NIL`] until it arrived.
    total: u32,
    covered: u32,
    max_size: u16,
    all_df: bool,
    /// IPv6: offset in the first fragment's frame of the byte naming the Fragment header.
    nh_at: u16,
    /// IPv6: the Fragment header's next header (from the first fragment).
    next: u8,
    prev: u32,
    next_slot: u32,
}

/// One worker's reassembly table (see the module doc).
#[derive(Debug)]
pub struct Reassembler {
    limits: Limits,
    index: HashMap<Key, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Oldest and newest live slot.
    head: u32,
    tail: u32,
    bytes: usize,
    counters: Arc<CachePadded<FragCounters>>,
}

impl Reassembler {
    /// An empty table with these bounds.
    pub fn new(limits: Limits) -> Reassembler {
        Reassembler {
            limits,
            index: HashMap::with_capacity(limits.max_datagrams),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            counters: Arc::default(),
        }
    }

    /// The counters (shared with the statistics reader and the transmit side).
    pub fn counters(&self) -> &Arc<CachePadded<FragCounters>> {
        &self.counters
    }

    /// The bounds.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.index.len()
    }

    /// Bytes of fragment buffers held.
    pub fn bytes_held(&self) -> usize {
        self.bytes
    }

    /// Takes one parsed packet: a packet that is not a fragment comes back as it is; a
    /// fragment is held (`None`), or completes its datagram, which comes back reassembled
    /// (the fragments' buffers go to `pool`), or is dropped (counted, its buffer to `pool`).
    /// `zone` keeps apart datagrams of separate address spaces.
    #[inline]
    pub fn push(&mut self, pkt: Packet, zone: u16, now: Tick, pool: &mut PacketPool) -> Option<Packet> {
        match classify(&pkt) {
            Class::NotFragment => Some(pkt),
            Class::Fragment(fi) => self.add(pkt, fi, zone, now, pool),
            Class::Bad(r) => {
                self.counters.fragments.inc();
                self.drop_one(r, pkt, pool);
                None
            }
        }
    }

    /// Whether no datagram is being reassembled (nothing can expire).
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Drops every datagram whose first fragment came `timeout_ms` or more before `now`.
    /// Costs one comparison when none is due.
    #[inline]
    pub fn expire(&mut self, now: Tick, pool: &mut PacketPool) {
        while self.head != NIL && self.slots[self.head as usize].created + self.limits.timeout_ms <= now {
            self.kill(self.head, DropReason::Timeout, pool);
        }
    }

    fn drop_one(&mut self, r: DropReason, pkt: Packet, pool: &mut PacketPool) {
        self.counters.drops[r as usize].inc();
        pool.put(pkt);
    }

    fn publish(&self) {
        self.counters
            .in_flight
            .store(self.index.len() as u64, Ordering::Relaxed);
        self.counters.bytes_held.store(self.bytes as u64, Ordering::Relaxed);
    }

    #[cold]
    fn add(&mut self, pkt: Packet, fi: FragInfo, zone: u16, now: Tick, pool: &mut PacketPool) -> Option<Packet> {
        self.counters.fragments.inc();
        // The reassembled frame (L2 + IP headers + data) must fit the largest buffer.
        let hdr = if fi.v6 { fi.data_at - 8 } else { fi.data_at };
        if HEADROOM + hdr + fi.end() as usize > MAX_BUF_SIZE {
            self.drop_one(DropReason::TooLong, pkt, pool);
            return None;
        }
        let key = Key {
            src: fi.src,
            dst: fi.dst,
            id: fi.id,
            proto: if fi.v6 { 0 } else { fi.proto },
            v6: fi.v6,
            zone,
        };
        let cap = pkt.capacity();
        if self.bytes + cap > self.limits.max_bytes {
            self.drop_one(DropReason::MemoryFull, pkt, pool);
            return None;
        }
        let s = match self.index.get(&key) {
            Some(&s) => s,
            None => {
                if self.index.len() >= self.limits.max_datagrams {
                    self.drop_one(DropReason::TableFull, pkt, pool);
                    return None;
                }
                self.open(key, now)
            }
        };
        let slot = &mut self.slots[s as usize];
        if slot.frags.len() >= self.limits.max_fragments {
            self.drop_one(DropReason::TooManyFragments, pkt, pool);
            self.kill(s, DropReason::TooManyFragments, pool);
            return None;
        }
        let end = fi.end();
        let held_end = slot.frags.last().map_or(0, |f| f.off + f.len);
        let inconsistent = if fi.more {
            slot.total != NIL && end > slot.total
        } else {
            (slot.total != NIL && end != slot.total) || end < held_end
        };
        if inconsistent {
            self.drop_one(DropReason::Inconsistent, pkt, pool);
            self.kill(s, DropReason::Inconsistent, pool);
            return None;
        }
        let pos = slot.frags.partition_point(|f| f.off < fi.off);
        let mut dup = false;
        let mut overlap = false;
        if pos > 0 {
            let p = &slot.frags[pos - 1];
            if p.off + p.len > fi.off {
                dup = end <= p.off + p.len;
                overlap = !dup;
            }
        }
        if let Some(n) = slot.frags.get(pos) {
            if n.off < end {
                if n.off == fi.off && end <= n.off + n.len {
                    dup = true;
                } else {
                    overlap = true;
                }
            }
        }
        if overlap {
            self.drop_one(DropReason::Overlap, pkt, pool);
            self.kill(s, DropReason::Overlap, pool);
            return None;
        }
        if dup {
            self.drop_one(DropReason::Duplicate, pkt, pool);
            return None;
        }
        if !fi.more {
            slot.total = end;
        }
        if fi.off == 0 {
            slot.nh_at = fi.nh_at as u16;
            slot.next = fi.proto;
        }
        slot.covered += fi.len;
        slot.bytes += cap;
        slot.max_size = slot.max_size.max(fi.ip_len);
        slot.all_df &= fi.df;
        slot.frags.insert(
            pos,
            Frag {
                pkt,
                off: fi.off,
                len: fi.len,
                data_at: fi.data_at as u16,
            },
        );
        self.bytes += cap;
        let done = slot.total != NIL && slot.covered == slot.total;
        let out = if done { self.complete(s, pool) } else { None };
        self.publish();
        out
    }

    /// Opens a slot for `key`, linked as the newest.
    fn open(&mut self, key: Key, now: Tick) -> u32 {
        let fresh = Slot {
            key,
            created: now,
            frags: Vec::new(),
            bytes: 0,
            total: NIL,
            covered: 0,
            max_size: 0,
            all_df: true,
            nh_at: 0,
            next: 0,
            prev: self.tail,
            next_slot: NIL,
        };
        let s = match self.free.pop() {
            Some(s) => {
                let slot = &mut self.slots[s as usize];
                // Keeps the fragment list's capacity: a reused slot allocates nothing.
                let frags = std::mem::take(&mut slot.frags);
                *slot = Slot { frags, ..fresh };
                s
            }
            None => {
                self.slots.push(fresh);
                (self.slots.len() - 1) as u32
            }
        };
        if self.tail != NIL {
            self.slots[self.tail as usize].next_slot = s;
        } else {
            self.head = s;
        }
        self.tail = s;
        self.index.insert(key, s);
        s
    }

    /// Unlinks slot `s` and frees it; its fragments stay in its list for the caller.
    fn close(&mut self, s: u32) {
        let (prev, next, key, bytes) = {
            let slot = &self.slots[s as usize];
            (slot.prev, slot.next_slot, slot.key, slot.bytes)
        };
        if prev != NIL {
            self.slots[prev as usize].next_slot = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.slots[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
        self.index.remove(&key);
        self.bytes -= bytes;
        self.free.push(s);
    }

    /// Drops datagram `s`: each of its fragments is counted under `r`.
    fn kill(&mut self, s: u32, r: DropReason, pool: &mut PacketPool) {
        self.close(s);
        let slot = &mut self.slots[s as usize];
        self.counters.drops[r as usize].add(slot.frags.len() as u64);
        for f in slot.frags.drain(..) {
            pool.put(f.pkt);
        }
        self.publish();
    }

    /// Builds the datagram of the complete slot `s` and frees the slot.
    fn complete(&mut self, s: u32, pool: &mut PacketPool) -> Option<Packet> {
        self.close(s);
        let slot = &mut self.slots[s as usize];
        let first = &slot.frags[0];
        let v6 = slot.key.v6;
        let fm = first.pkt.meta;
        let l3 = usize::from(fm.l3_off);
        let data_at = usize::from(first.data_at);
        // Headers kept: L2 + IPv4 header, or L2 + the unfragmentable part (without the
        // Fragment header).
        let hdr = if v6 { data_at - 8 } else { data_at };
        let len = hdr + slot.total as usize;
        let mut out = if HEADROOM + len <= pool.buf_size() {
            pool.get()
        } else {
            pool.get_huge()
        };
        let ok = out.fill(len).is_ok();
        if ok {
            let o = out.data_mut();
            o[..hdr].copy_from_slice(&first.pkt.data()[..hdr]);
            for f in &slot.frags {
                let at = hdr + f.off as usize;
                let src = usize::from(f.data_at);
                o[at..at + f.len as usize].copy_from_slice(&f.pkt.data()[src..src + f.len as usize]);
            }
            if v6 {
                o[usize::from(slot.nh_at)] = slot.next;
                wr16(o, l3 + 4, (len - l3 - 40) as u16);
            } else {
                let hl = hdr - l3;
                wr16(o, l3 + 2, (len - l3) as u16);
                wr16(o, l3 + 6, if slot.all_df { 0x4000 } else { 0 });
                wr16(o, l3 + 10, 0);
                let c = checksum::checksum(&o[l3..l3 + hl]);
                wr16(o, l3 + 10, c);
            }
        }
        let ts = slot.frags.iter().map(|f| f.pkt.meta.ts_ns).max().unwrap_or(0);
        let n = slot.frags.len() as u64;
        let (max_size, id) = (slot.max_size, slot.key.id);
        for f in slot.frags.drain(..) {
            pool.put(f.pkt);
        }
        // The datagram's headers passed the parser as the first fragment; only a datagram
        // whose first fragment's upper header was cut short by it can fail here.
        if !ok || parse_reassembled(&mut out).is_err() {
            self.counters.drops[DropReason::Malformed as usize].add(n);
            pool.put_huge(out);
            return None;
        }
        out.meta.in_port = fm.in_port;
        out.meta.ts_ns = ts;
        if !v6 {
            out.meta.flags |= meta_flags::IPV4_CSUM_OK;
        }
        out.set_frag_note(FragNote { max_size, id });
        self.counters.reassembled.inc();
        self.counters.merged.add(n);
        Some(out)
    }
}

#[cfg(test)]
mod tests;
