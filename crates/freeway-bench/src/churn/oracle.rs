//! The oracle: the versioned history of the tables, the check of every output frame against
//! the versions of its window, and the end of every frame (delivered, flooded, parked while
//! its next hop may be unresolved, or dropped).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, RwLock};

use super::model::*;

/// Violation messages kept (all are counted).
const MAX_MESSAGES: usize = 32;

/// The versioned history of every table value the oracle follows: per key, `(operation,
/// value)` pairs in operation order. Written by the control thread only.
#[derive(Debug)]
pub struct History {
    keys: Vec<Vec<(u64, u8)>>,
    /// Entries at or before this operation may have been pruned (the last one kept).
    floor: u64,
}

impl History {
    pub(super) fn new(init: &[u8]) -> History {
        History {
            keys: init.iter().map(|&v| vec![(0, v)]).collect(),
            floor: 0,
        }
    }

    pub(super) fn set(&mut self, key: usize, op: u64, v: u8) {
        self.keys[key].push((op, v));
    }

    /// Bit mask of the values `key` may have had from operation `lo` (applied) to `hi`
    /// (issued): bit `v` for `v < 31`, bit 31 for [`NONE`]. `None` when pruned too far.
    pub(super) fn seen(&self, key: usize, lo: u64, hi: u64) -> Option<u32> {
        if lo < self.floor {
            return None;
        }
        Some(seen_in(&self.keys[key], lo, hi))
    }

    /// Drops entries no frame in flight can need (older than `floor`, keeping the value at
    /// `floor`).
    pub(super) fn prune(&mut self, floor: u64) {
        if floor <= self.floor {
            return;
        }
        for k in &mut self.keys {
            let keep = k.partition_point(|e| e.0 <= floor).saturating_sub(1);
            k.drain(..keep);
        }
        self.floor = floor;
    }

    /// The gateways prefix `j` (IPv4 or IPv6) may have been routed over in the window, and
    /// whether it may have had no route at all. An IPv6 /64 without a route falls back to
    /// the /48 that covers it: both keys' values count (a superset of the real
    /// combinations: never a false violation).
    pub(super) fn gateways(&self, v6: bool, j: usize, lo: u64, hi: u64) -> Option<(u8, bool)> {
        let masks = |routes: u32| (0..16u8).filter(|m| routes & bit(*m) != 0).fold(0u8, |a, m| a | m);
        if !v6 {
            let r = self.seen(key_x(j), lo, hi)?;
            return Some((masks(r), r & bit(0) != 0));
        }
        let r = self.seen(key_x6(j), lo, hi)?;
        let (mut g, mut none) = (masks(r), r & bit(0) != 0);
        if j < X6_PARENT && none {
            let p = self.seen(key_x6(X6_PARENT), lo, hi)?;
            g |= masks(p);
            none = p & bit(0) != 0;
        }
        Some((g, none))
    }
}

pub(super) fn bit(v: u8) -> u32 {
    if v < 31 {
        1 << v
    } else {
        1 << 31
    }
}

/// The values in a `(operation, value)` list between `lo` and `hi` (see [`History::seen`]).
pub(super) fn seen_in(h: &[(u64, u8)], lo: u64, hi: u64) -> u32 {
    let first = h.partition_point(|e| e.0 <= lo).saturating_sub(1);
    h[first..].iter().take_while(|e| e.0 <= hi).fold(0, |m, e| m | bit(e.1))
}

/// Counters of the oracle, shared by every thread.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) generated: AtomicU64,
    pub(super) outputs: AtomicU64,
    pub(super) finalized: AtomicU64,
    pub(super) delivered: AtomicU64,
    pub(super) floods: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) unchecked: AtomicU64,
    pub(super) tap_frames: AtomicU64,
    pub(super) violations: AtomicU64,
    /// Routed frames that reached no port in their batch (their next hop may have been
    /// unresolved: they may wait in the router's pending queue).
    pub(super) parked: AtomicU64,
    /// Of those, frames that left later (their neighbour resolved).
    pub(super) late: AtomicU64,
    pub(super) arp_requests: AtomicU64,
    pub(super) ns: AtomicU64,
    /// Frames that left the trunk (tagged).
    pub(super) trunk_out: AtomicU64,
    /// IPv6 frames routed out (to a gateway or a host).
    pub(super) v6_out: AtomicU64,
}

/// What every thread of the harness shares.
pub(super) struct Shared {
    pub(super) sent: AtomicU64,
    pub(super) done: AtomicU64,
    pub(super) hist: RwLock<History>,
    /// Per (host, prefix): a `FWD` frame of that flow was generated.
    pub(super) fwd_seen: Vec<AtomicBool>,
    /// Per (host, prefix): a `FWD6` frame of that flow was generated.
    pub(super) fwd6_seen: Vec<AtomicBool>,
    /// Generators stop producing (the run is ending).
    pub(super) gen_stop: AtomicBool,
    /// The datapath is up (its control socket answers): the run's clock starts.
    pub(super) ready: AtomicBool,
    /// The control side is done (its last operations applied): the datapath may stop.
    pub(super) ctl_done: AtomicBool,
    /// Per worker: the oldest `lo` its checks may still need (`u64::MAX`: none).
    pub(super) floors: Vec<AtomicU64>,
    /// The version of the last settle (every gateway neighbour usable, nothing else changed
    /// until every worker saw it; 0: none yet).
    pub(super) settle: AtomicU64,
    /// Per worker: the last settle it saw (its parked frames closed).
    pub(super) settled: Vec<AtomicU64>,
    pub(super) c: Counters,
    pub(super) messages: Mutex<Vec<String>>,
}

impl Shared {
    pub(super) fn new(init: &[u8], workers: usize) -> Shared {
        Shared {
            sent: AtomicU64::new(0),
            done: AtomicU64::new(0),
            hist: RwLock::new(History::new(init)),
            fwd_seen: (0..NHOSTS * NX).map(|_| AtomicBool::new(false)).collect(),
            fwd6_seen: (0..NHOSTS * NX6).map(|_| AtomicBool::new(false)).collect(),
            gen_stop: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            ctl_done: AtomicBool::new(false),
            floors: (0..workers).map(|_| AtomicU64::new(u64::MAX)).collect(),
            settle: AtomicU64::new(0),
            settled: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            c: Counters::default(),
            messages: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn violation(&self, msg: String) {
        self.c.violations.fetch_add(1, SeqCst);
        let mut m = self.messages.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() < MAX_MESSAGES {
            m.push(msg);
        }
    }

    /// Checks one frame `f` (headers `hd`) leaving on `port` (a transmit queue or a transmit
    /// tap), with the operations issued so far `hi`. `mac`: the gateway pool MAC a routed
    /// frame's earlier copies carried ([`NONE`] if none yet), set by this check.
    /// `Ok(false)`: could not check (history pruned).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_output(
        &self,
        h: &History,
        tag: &Tag,
        hd: &Hdr,
        port: u16,
        f: &[u8],
        hi: u64,
        mac: &mut u8,
    ) -> Result<bool, String> {
        let pbit = 1u32 << port;
        let dst: [u8; 6] = f[0..6].try_into().map_err(|_| "short frame")?;
        let src: [u8; 6] = f[6..12].try_into().map_err(|_| "short frame")?;
        let ttl = hd.ttl;
        let want_vid = (port == TRUNK).then_some(tag.class.out_vlan());
        if hd.vid != want_vid {
            return Err(format!(
                "{:?} frame left port {port} with VID {:?}, not {want_vid:?}",
                tag.class, hd.vid
            ));
        }
        if hd.v6 != tag.class.v6() {
            return Err("frame changed its address family".into());
        }
        if vlan_mask(tag.class.out_vlan()) & pbit == 0 {
            return Err(format!(
                "{:?} frame left on port {port}, outside VLAN {}",
                tag.class,
                tag.class.out_vlan()
            ));
        }
        let flood_in = vlan_mask(tag.class.in_vlan()) & !(1 << tag.in_port);
        let routed_ok = src == RMAC && ttl == 63 && (hd.v6 || ip_checksum_ok(f, hd.l3));
        match tag.class {
            Class::L2T => {
                let t = usize::from(tag.a);
                if dst != t_mac(t) || ttl != 64 {
                    return Err(format!("L2T frame rewritten: dst {} ttl {ttl}", mac_text(dst)));
                }
                let Some(s) = h.seen(key_t(t), tag.lo, hi) else {
                    return Ok(false);
                };
                if s & pbit == 0 && !(s & bit(NONE) != 0 && flood_in & pbit != 0) {
                    return Err(format!("target {t} sent to port {port}; entry values {s:#x}"));
                }
            }
            Class::L2H => {
                let d = usize::from(tag.a);
                if dst != HOSTS.mac(d) || ttl != 64 {
                    return Err(format!("L2H frame rewritten: dst {} ttl {ttl}", mac_text(dst)));
                }
                if port != host_port(d) && flood_in & pbit == 0 {
                    return Err(format!("host {d} (port {}) sent to port {port}", host_port(d)));
                }
            }
            Class::Fwd | Class::Fwd6 => {
                let j = usize::from(tag.a);
                if !routed_ok {
                    return Err(format!("routed frame badly rewritten: src {} ttl {ttl}", mac_text(src)));
                }
                if !hd.v6 {
                    let Some(b) = h.seen(key_b(j), tag.lo, hi) else {
                        return Ok(false);
                    };
                    if b & bit(0) == 0 {
                        return Err(format!(
                            "prefix {j} forwarded while every version of the ruleset blocked it"
                        ));
                    }
                }
                let Some(m) = (0..NM).find(|&m| GWS.mac(m) == dst) else {
                    return Err(format!("routed to {}, no gateway's MAC", mac_text(dst)));
                };
                if *mac != NONE && usize::from(*mac) != m {
                    return Err(format!("copies of one routed frame to MACs {} and {m}", *mac));
                }
                *mac = m as u8;
                let Some((gws, _)) = h.gateways(hd.v6, j, tag.lo, hi) else {
                    return Ok(false);
                };
                let mut nvals = Vec::new();
                let mut any = false;
                for a in (0..NG).filter(|a| gws & (1 << a) != 0) {
                    let Some(n) = h.seen(key_n(a, hd.v6), tag.lo, hi) else {
                        return Ok(false);
                    };
                    nvals.push((a, n));
                    any |= n & bit(m as u8) != 0;
                }
                if !any {
                    return Err(format!(
                        "prefix {j} routed to MAC {m}: no version of its routes (gateways {gws:#x}) \
                         and of their neighbour entries (gateway, values) {nvals:x?} gives it"
                    ));
                }
                let Some(g) = h.seen(key_m(m), tag.lo, hi) else {
                    return Ok(false);
                };
                if g & pbit == 0 && !(g & bit(NONE) != 0 && vlan_mask(20) & pbit != 0) {
                    return Err(format!("gateway MAC {m} reached on port {port}; entry values {g:#x}"));
                }
            }
            Class::Reply | Class::Reply6 => {
                let (hh, j) = (usize::from(tag.b), usize::from(tag.a));
                if !routed_ok || dst != HOSTS.mac(hh) {
                    return Err(format!(
                        "reply badly rewritten: {} -> {} ttl {ttl}",
                        mac_text(src),
                        mac_text(dst)
                    ));
                }
                let seen = if hd.v6 {
                    &self.fwd6_seen[hh * NX6 + j]
                } else {
                    &self.fwd_seen[hh * NX + j]
                };
                // New connections start only from the LAN: a reply needs its request.
                if !seen.load(SeqCst) {
                    return Err(format!(
                        "reply of flow ({hh},{j}) passed the firewall before any request"
                    ));
                }
            }
            Class::Unsol | Class::Unsol6 => {
                return Err(format!("unsolicited frame passed the firewall to port {port}"))
            }
        }
        Ok(true)
    }

    /// Checks a neighbour solicitation of the router leaving on `port`, sent after the
    /// worker's receive call that read `lo` (done) and before `hi` was issued: it asks for a
    /// gateway, leaves a VLAN 20 port with that port's tagging, and some version of the
    /// window had no usable entry for the gateway. `Ok(false)`: could not check.
    pub(super) fn check_solicit(&self, h: &History, f: &[u8], port: u16, lo: u64, hi: u64) -> Result<bool, String> {
        let (a, v6, vid) = solicitation(f)?;
        let want_vid = (port == TRUNK).then_some(20);
        if vlan_mask(20) & (1 << port) == 0 || vid != want_vid {
            return Err(format!("solicitation for gateway {a} on port {port} with VID {vid:?}"));
        }
        if v6 {
            self.c.ns.fetch_add(1, SeqCst);
        } else {
            self.c.arp_requests.fetch_add(1, SeqCst);
        }
        let Some(n) = h.seen(key_n(a, v6), lo, hi) else {
            return Ok(false);
        };
        if n & bit(NONE) == 0 {
            return Err(format!(
                "solicitation for gateway {a} (IPv6 {v6}) while every version had an entry: {n:#x}"
            ));
        }
        Ok(true)
    }
}

/// A frame in flight, in its worker's book.
#[derive(Debug)]
pub(super) struct Rec {
    pub(super) tag: Tag,
    /// The receive call that generated it (parked: the last call before it left).
    pub(super) call: u64,
    /// Ports it reached.
    pub(super) mask: u32,
    /// The gateway pool MAC a routed frame carried ([`NONE`] before it left).
    pub(super) mac: u8,
}

/// One worker's frames in flight (sequence numbers are contiguous), shared by that
/// worker's receive and transmit queues.
#[derive(Debug)]
pub(super) struct Book {
    pub(super) worker: u16,
    pub(super) next_seq: u64,
    pub(super) inflight: VecDeque<Rec>,
    /// Routed frames that reached no port in their batch, by sequence number.
    pub(super) parked: VecDeque<Rec>,
    /// Parked frames that left since the last receive call.
    pub(super) parked_out: usize,
    pub(super) calls: u64,
    /// `done` at the last receive call: whatever the worker sends after it (a solicitation
    /// too) used tables at least this new.
    pub(super) last_done: u64,
    /// The last settle this worker saw.
    pub(super) settle_seen: u64,
    pub(super) rng: Rng,
}

impl Book {
    pub(super) fn new(worker: u16, rng: Rng) -> Book {
        Book {
            worker,
            next_seq: 0,
            inflight: VecDeque::new(),
            parked: VecDeque::new(),
            parked_out: 0,
            calls: 0,
            last_done: 0,
            settle_seen: 0,
            rng,
        }
    }

    pub(super) fn get(&mut self, seq: u64) -> Option<&mut Rec> {
        if self.inflight.front().is_some_and(|r| r.tag.seq <= seq) {
            let first = self.inflight.front()?.tag.seq;
            return self.inflight.get_mut(usize::try_from(seq - first).ok()?);
        }
        let i = self.parked.binary_search_by_key(&seq, |r| r.tag.seq).ok()?;
        let r = &mut self.parked[i];
        if r.mask == 0 {
            self.parked_out += 1;
        }
        r.call = self.calls;
        Some(r)
    }

    /// Closes the frames generated at least two receive calls ago (every batch runs to
    /// completion before its worker's next receive call), or all of them. A routed frame
    /// that reached no port is parked instead: it may wait in the router's pending queue for
    /// its next hop. Parked frames close once they left (all copies of a frame leave in one
    /// transmit pass), or when the worker first sees a settle: the first routed frame it
    /// closes that was generated after the settle went through the router, whose pending
    /// queue was flushed before it with every gateway resolved, and since then nothing
    /// changed (the control side waits for this worker), so nothing was queued again: what
    /// is still parked was dropped.
    pub(super) fn finalize(&mut self, s: &Shared, all: bool) {
        let hi = s.sent.load(SeqCst);
        let settle = s.settle.load(SeqCst);
        let mut saw_settle = false;
        let mut h = None;
        while self.inflight.front().is_some_and(|r| all || r.call + 2 <= self.calls) {
            let r = self.inflight.pop_front().expect("front checked");
            if r.tag.class.to_gateway() && settle > self.settle_seen && r.tag.lo >= settle {
                saw_settle = true;
            }
            if !all && r.mask == 0 && r.tag.class.to_gateway() {
                s.c.parked.fetch_add(1, SeqCst);
                self.parked.push_back(r);
                continue;
            }
            let h = h.get_or_insert_with(|| s.hist.read().unwrap_or_else(|e| e.into_inner()));
            close(s, h, &r, hi);
        }
        if all || saw_settle || self.parked_out > 0 {
            let calls = self.calls;
            let close_all = all || saw_settle;
            let h = h.get_or_insert_with(|| s.hist.read().unwrap_or_else(|e| e.into_inner()));
            self.parked.retain(|r| {
                let left = r.mask != 0 && r.call < calls;
                if !(left || close_all) {
                    return true;
                }
                if r.mask != 0 {
                    s.c.late.fetch_add(1, SeqCst);
                }
                close(s, h, r, hi);
                false
            });
            self.parked_out = self.parked.iter().filter(|r| r.mask != 0).count();
        }
        if saw_settle {
            self.settle_seen = settle;
            s.settled[usize::from(self.worker)].store(settle, SeqCst);
        }
        self.store_floor(s);
    }

    /// Publishes the oldest version this worker's checks may still need.
    pub(super) fn store_floor(&self, s: &Shared) {
        let floor = [self.inflight.front(), self.parked.front()]
            .into_iter()
            .flatten()
            .map(|r| r.tag.lo)
            .fold(self.last_done, u64::min);
        s.floors[usize::from(self.worker)].store(floor, SeqCst);
    }
}

/// The end of one frame: it reached exactly what one outcome allows, or nothing and it was
/// droppable.
pub(super) fn close(s: &Shared, h: &History, r: &Rec, hi: u64) {
    s.c.finalized.fetch_add(1, SeqCst);
    let t = &r.tag;
    let n = r.mask.count_ones();
    let flood_in = vlan_mask(t.class.in_vlan()) & !(1 << t.in_port);
    if n == 0 {
        s.c.lost.fetch_add(1, SeqCst);
        let droppable = match t.class {
            Class::L2T => h
                .seen(key_t(usize::from(t.a)), t.lo, hi)
                .map(|v| v & (1 << t.in_port) != 0),
            Class::L2H => Some(false),
            Class::Fwd | Class::Fwd6 => {
                // Blocked by the firewall, no route, or a next hop without a usable neighbour
                // entry (dropped by the router, or queued and then dropped: timed out or
                // pushed out).
                let v6 = t.class.v6();
                let j = usize::from(t.a);
                let blocked = !v6 && h.seen(key_b(j), t.lo, hi).is_some_and(|b| b & bit(1) != 0);
                if blocked {
                    Some(true)
                } else {
                    h.gateways(v6, j, t.lo, hi).and_then(|(gws, none)| {
                        let mut unresolved = Some(none);
                        for a in (0..NG).filter(|a| gws & (1 << a) != 0) {
                            match h.seen(key_n(a, v6), t.lo, hi) {
                                Some(v) if v & bit(NONE) != 0 => return Some(true),
                                Some(_) => {}
                                None => unresolved = None,
                            }
                        }
                        unresolved
                    })
                }
            }
            Class::Reply | Class::Unsol | Class::Reply6 | Class::Unsol6 => Some(true),
        };
        match droppable {
            Some(true) => {}
            Some(false) => s.violation(format!("lost: {t:?} reached no port and no version allowed a drop")),
            None => {
                s.c.unchecked.fetch_add(1, SeqCst);
            }
        }
        return;
    }
    s.c.delivered.fetch_add(1, SeqCst);
    if n == 1 {
        return;
    }
    s.c.floods.fetch_add(1, SeqCst);
    let (set, could) = match t.class {
        Class::L2T => (
            flood_in,
            h.seen(key_t(usize::from(t.a)), t.lo, hi).map(|v| v & bit(NONE) != 0),
        ),
        Class::L2H => (flood_in, Some(true)),
        Class::Fwd | Class::Fwd6 => (
            vlan_mask(20),
            match r.mac {
                NONE => Some(false),
                m => h.seen(key_m(usize::from(m)), t.lo, hi).map(|v| v & bit(NONE) != 0),
            },
        ),
        Class::Reply | Class::Reply6 => (vlan_mask(10), Some(true)),
        Class::Unsol | Class::Unsol6 => (0, Some(false)),
    };
    match could {
        Some(true) if r.mask == set => {}
        Some(_) if r.mask != set => s.violation(format!("{t:?} reached ports {:#x}, flood set {set:#x}", r.mask)),
        Some(_) => s.violation(format!(
            "{t:?} flooded to {:#x} while every version had an entry",
            r.mask
        )),
        None => {
            s.c.unchecked.fetch_add(1, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use freeway_packet::build::FrameSpec;

    use super::*;

    /// A generated frame of `class` (`a`, `b` as the tag has them) entering on `in_port`,
    /// as it would leave: `vlan` tag, `dst`, from `src` with `ttl`.
    #[allow(clippy::too_many_arguments)]
    fn frame(
        class: Class,
        a: u8,
        in_port: u16,
        lo: u64,
        vlan: Option<u16>,
        src: [u8; 6],
        dst: [u8; 6],
        ttl: u8,
    ) -> (Tag, Vec<u8>) {
        let v6 = class.v6() || class == Class::Fwd6;
        let (len, off) = frame_layout(vlan, v6);
        let (s, d) = if v6 {
            (IpAddr::V6(HOSTS.ip6(0)), IpAddr::V6(remote_ip6(usize::from(a))))
        } else {
            (IpAddr::V4(HOSTS.ip(0)), IpAddr::V4(remote_ip(usize::from(a))))
        };
        let spec = FrameSpec {
            src_mac: src,
            dst_mac: dst,
            vlan,
            src_ip: s,
            dst_ip: d,
            len,
            ttl,
            l4_checksum: false,
            ..FrameSpec::default()
        };
        let mut f = freeway_packet::build::build_frame(&spec);
        let tag = Tag {
            worker: 0,
            class,
            in_port,
            a,
            b: 0,
            seq: 9,
            lo,
        };
        tag.write(&mut f, off);
        (tag, f)
    }

    fn check(s: &Shared, tag: &Tag, f: &[u8], port: u16, hi: u64) -> Result<bool, String> {
        let (t, hd) = Tag::read(f).expect("a harness frame");
        assert_eq!(&t, tag);
        let h = s.hist.read().unwrap();
        s.check_output(&h, tag, &hd, port, f, hi, &mut NONE.clone())
    }

    fn rec(tag: Tag, mask: u32) -> Rec {
        Rec {
            tag,
            call: 0,
            mask,
            mac: NONE,
        }
    }

    #[test]
    fn history_answers_every_value_of_a_window_and_prunes() {
        let mut h = History::new(&[NONE]);
        h.set(0, 3, 1);
        h.set(0, 5, 2);
        h.set(0, 9, NONE);
        assert_eq!(h.seen(0, 0, 2), Some(bit(NONE)));
        assert_eq!(h.seen(0, 3, 3), Some(bit(1)));
        assert_eq!(h.seen(0, 4, 5), Some(bit(1) | bit(2)));
        assert_eq!(h.seen(0, 2, 100), Some(bit(NONE) | bit(1) | bit(2)));
        h.prune(6);
        assert_eq!(h.seen(0, 4, 5), None, "pruned past: unchecked, never guessed");
        assert_eq!(h.seen(0, 6, 8), Some(bit(2)));
        assert_eq!(h.seen(0, 7, 9), Some(bit(2) | bit(NONE)));
    }

    #[test]
    fn the_oracle_refuses_a_port_no_version_allowed_and_a_flood_with_an_entry() {
        let mut init = vec![NONE; NKEYS];
        init[key_t(0)] = 1;
        let s = Shared::new(&init, 1);
        let (tag, f) = frame(Class::L2T, 0, 0, 0, None, HOSTS.mac(0), t_mac(0), 64);
        assert_eq!(check(&s, &tag, &f, 1, 0), Ok(true));
        assert!(check(&s, &tag, &f, 2, 0).is_err(), "port 2 never held target 0");
        let h = s.hist.read().unwrap();
        // The same frame reaching ports 1 and 2 is a flood while the entry always existed.
        close(&s, &h, &rec(tag, 0b110), 0);
        assert_eq!(s.c.violations.load(SeqCst), 1);
        // Reaching nothing when no version put the target on the ingress port: lost.
        close(&s, &h, &rec(tag, 0), 0);
        assert_eq!(s.c.violations.load(SeqCst), 2);
        drop(h);
        // Once an operation deleted the entry, the flood is one valid outcome.
        s.hist.write().unwrap().set(key_t(0), 1, NONE);
        assert_eq!(check(&s, &tag, &f, 2, 1), Ok(true));
        let h = s.hist.read().unwrap();
        close(&s, &h, &rec(tag, 0b100110), 1);
        assert_eq!(s.c.violations.load(SeqCst), 2);
        // But not a partial one.
        close(&s, &h, &rec(tag, 0b010 | 0b1000), 1);
        assert_eq!(s.c.violations.load(SeqCst), 3);
    }

    #[test]
    fn a_frame_leaving_the_trunk_carries_its_vlan_tag_and_one_leaving_an_access_port_none() {
        let mut init = vec![NONE; NKEYS];
        init[key_t(0)] = TRUNK as u8;
        let s = Shared::new(&init, 1);
        let (tag, f) = frame(Class::L2T, 0, 0, 0, Some(10), HOSTS.mac(0), t_mac(0), 64);
        assert_eq!(check(&s, &tag, &f, TRUNK, 0), Ok(true));
        let (_, untagged) = frame(Class::L2T, 0, 0, 0, None, HOSTS.mac(0), t_mac(0), 64);
        assert!(check(&s, &tag, &untagged, TRUNK, 0).unwrap_err().contains("VID"));
        let (_, wrong) = frame(Class::L2T, 0, 0, 0, Some(20), HOSTS.mac(0), t_mac(0), 64);
        assert!(check(&s, &tag, &wrong, TRUNK, 0).is_err(), "VLAN 10 frame with VID 20");
        s.hist.write().unwrap().set(key_t(0), 1, NONE);
        assert!(
            check(&s, &tag, &f, 1, 1).unwrap_err().contains("VID"),
            "tagged out of an access port"
        );
    }

    #[test]
    fn a_routed_frame_carries_a_mac_some_neighbour_version_of_its_window_gave_its_gateway() {
        let mut init = vec![NONE; NKEYS];
        // IPv6 prefix 5 via gateway 1, whose neighbour entry is pool MAC 1 (FDB: port 3);
        // pool MAC 2 is on the trunk.
        init[key_x6(5)] = 1 << 1;
        init[key_n(1, true)] = 1;
        init[key_n(1, false)] = 2;
        init[key_m(1)] = 3;
        init[key_m(2)] = TRUNK as u8;
        let s = Shared::new(&init, 1);
        let (tag, f) = frame(Class::Fwd6, 5, 0, 0, None, RMAC, GWS.mac(1), 63);
        assert_eq!(check(&s, &tag, &f, 3, 0), Ok(true));
        let (_, ttl) = frame(Class::Fwd6, 5, 0, 0, None, RMAC, GWS.mac(1), 64);
        assert!(check(&s, &tag, &ttl, 3, 0).is_err(), "hop limit not decremented");
        // MAC 2 is gateway 1's IPv4 neighbour, not its IPv6 one.
        let (_, m2) = frame(Class::Fwd6, 5, 0, 0, Some(20), RMAC, GWS.mac(2), 63);
        assert!(check(&s, &tag, &m2, TRUNK, 0).unwrap_err().contains("no version"));
        // Once the IPv6 entry is replaced by MAC 2, a frame of the window may carry either.
        s.hist.write().unwrap().set(key_n(1, true), 1, 2);
        assert_eq!(check(&s, &tag, &m2, TRUNK, 1), Ok(true));
        assert_eq!(check(&s, &tag, &f, 3, 1), Ok(true));
        // Reaching no port: droppable only if some version of the window left its gateway
        // unresolved (or it without a route).
        let h = s.hist.read().unwrap();
        close(&s, &h, &rec(tag, 0), 1);
        assert_eq!(
            s.c.violations.load(SeqCst),
            1,
            "every version had a route and a neighbour"
        );
        drop(h);
        s.hist.write().unwrap().set(key_n(1, true), 2, NONE);
        let h = s.hist.read().unwrap();
        close(&s, &h, &rec(tag, 0), 2);
        assert_eq!(s.c.violations.load(SeqCst), 1, "next hop unresolved in version 2");
        // An ARP request for gateway 1 now is wrong (its IPv4 entry never went away); an NS
        // is right.
        let mut arp = freeway_packet::Packet::default();
        assert!(freeway_l3::arp::build_request(
            &mut arp,
            RMAC,
            None,
            WAN_ADDR,
            GWS.ip(1),
            None
        ));
        assert!(s.check_solicit(&h, arp.data(), 3, 0, 2).is_err());
        let mut ns = freeway_packet::Packet::default();
        let src = "2001:db8:20::1".parse().unwrap();
        assert!(freeway_l3::nd::build_ns(&mut ns, RMAC, Some(20), src, GWS.ip6(1), None));
        assert_eq!(s.check_solicit(&h, ns.data(), TRUNK, 0, 2), Ok(true));
        assert!(
            s.check_solicit(&h, ns.data(), 3, 0, 2).is_err(),
            "tagged out of an access port"
        );
    }
}
