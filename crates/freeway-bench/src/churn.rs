//! The churn oracle: the real multi-worker runtime forwards generated traffic while
//! a control thread changes its tables as fast as it can, and an oracle checks every frame
//! that comes out.
//!
//! # What runs
//!
//! [`run`] starts the datapath ([`freeway_datapath::runtime`], the same code as `freeway run`) on five
//! ports of this module's own kind ([`ChurnPort`]): `lan0..lan2` (access VLAN 10) and
//! `wan0`, `wan1` (access VLAN 20), a router with one interface on each VLAN, connection
//! tracking and a firewall that lets new connections start only from the LAN ports. Each
//! port's receive queues generate traffic; its transmit queues are where the oracle looks at
//! every frame the datapath sends.
//!
//! Traffic, each frame carrying a tag in its UDP payload (worker, sequence number, class,
//! ingress port, the table version it was generated at):
//!
//! * `L2T`: a LAN host to one of [`NT`] MACs that never send; their static FDB entries are
//!   added, moved and deleted by the control side (flooded while absent).
//! * `L2H`: a LAN host to a host on another LAN port (learned; flooded after a flush).
//! * `FWD`: a LAN host to one of [`NX`] remote /24s, routed via gateways whose routes are
//!   replaced (ECMP over one or two gateways) and deleted, and whose FDB entries on the WAN
//!   ports are moved and deleted.
//! * `REPLY`: the remote side answering a `FWD` flow, from a WAN port: forwarded only while
//!   the connection exists (the control side flushes the connection table).
//! * `UNSOL`: unsolicited frames from the WAN side: never forwarded.
//!
//! The control thread works through the control socket (`fdb add/del/flush`, `route
//! replace/del`, `conntrack flush`: the path `freeway ctl` takes) and attaches, re-filters and
//! detaches capture taps on the run's tap registry, one operation at a time.
//!
//! # The oracle
//!
//! Operation `k` is counted in `sent` before it is issued and in `done` once its answer came
//! back, so at any moment the tables hold the effect of at least the first `done` and at
//! most the first `sent` operations. A frame is stamped with `done` when generated; when it
//! comes out, `sent` is read: every table value the datapath can have used for it lies in the
//! versioned history between those two numbers ([`History`]). Each output frame must go to a
//! port, and carry addresses, that some value in that window allows; a frame never reaches a
//! port twice; a flood reaches exactly the flood set, and only when some version had no
//! entry; a frame that reached no port must have been droppable in its window, and the
//! number of such frames must equal the drops the datapath counted. Capture taps are checked
//! the same way: a captured frame was on the tap's port and direction and matched a filter
//! the tap had during the frame's window, never twice, and each tap's counters balance.
//! The resident set size is sampled throughout; its growth after a warm-up is reported (and
//! bounded when asked).
//!
//! # Threads
//!
//! The runtime's workers own the [`ChurnPort`] queues; a worker's receive and transmit
//! queues share that worker's [`Book`] (frames in flight), locked only by that worker and,
//! after the run, by the caller. The control thread is the only writer of the history (a
//! write lock per operation; workers and tap writers take read locks). A monitor thread
//! samples memory and ends the run.

use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use freeway_bridge::Padded;
use freeway_capture::{Direction, Filter, TapId, TapRegistry, TapSpec, TapStats, TapWriter, Taps, WriterOptions};
use freeway_io::{Port, PortQueues, RxQueue, TxQueue};
use freeway_packet::build::{build_frame_into, FrameSpec, L4};
use freeway_packet::{Batch, PacketPool};
use freeway_sync::Tick;
use serde::Serialize;

use freeway_datapath::runtime::{self, RunError, RunOptions};

/// LAN ports (access VLAN 10), by index.
const LAN: [u16; 3] = [0, 1, 2];
/// WAN ports (access VLAN 20), by index.
const WAN: [u16; 2] = [3, 4];
/// Ports.
const NPORTS: usize = 5;
/// Hosts on each LAN port.
const HOSTS_PER_LAN: usize = 4;
/// LAN hosts.
const NHOSTS: usize = HOSTS_PER_LAN * LAN.len();
/// Static-entry targets (MACs that never send).
pub const NT: usize = 8;
/// Gateways on the WAN side.
pub const NG: usize = 4;
/// Remote prefixes (`10.100.j.0/24`).
pub const NX: usize = 8;
/// The router's MAC.
const RMAC: [u8; 6] = [0x02, 0xfe, 0, 0, 0, 1];
/// Frames generated per receive call at most.
const BURST: usize = 16;
/// Tags start here in the frame (Ethernet 14 + IPv4 20 + UDP 8).
const TAG_OFF: usize = 42;
/// Tag length.
const TAG_LEN: usize = 26;
/// Tag magic.
const MAGIC: &[u8; 4] = b"CHRN";
/// Value of an FDB key with no entry.
const NONE: u8 = 0xff;
/// Violation messages kept (all are counted).
const MAX_MESSAGES: usize = 32;

fn host_mac(h: usize) -> [u8; 6] {
    [2, 0, 0, 1, 0, h as u8]
}
fn host_ip(h: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 10, 10 + h as u8)
}
fn host_port(h: usize) -> u16 {
    LAN[h / HOSTS_PER_LAN]
}
fn t_mac(t: usize) -> [u8; 6] {
    [2, 0, 0, 0x0a, 0, t as u8]
}
fn gw_mac(a: usize) -> [u8; 6] {
    [2, 0, 0, 0x0b, 0, a as u8]
}
fn gw_ip(a: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 20, 100 + a as u8)
}
fn wan_mac(q: usize) -> [u8; 6] {
    [2, 0, 0, 0x0c, 0, q as u8]
}
fn remote_ip(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 100, j as u8, 1)
}
fn flow_port(h: usize, j: usize) -> u16 {
    20_000 + (h * NX + j) as u16
}
fn mac_text(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}
fn lan_mask() -> u32 {
    LAN.iter().fold(0, |m, p| m | 1 << p)
}
fn wan_mask() -> u32 {
    WAN.iter().fold(0, |m, p| m | 1 << p)
}

/// History key of target `t`'s FDB entry.
fn key_t(t: usize) -> usize {
    t
}
/// History key of gateway `a`'s FDB entry.
fn key_g(a: usize) -> usize {
    NT + a
}
/// History key of prefix `j`'s route (value: bit mask of gateways, 0 = no route).
fn key_x(j: usize) -> usize {
    NT + NG + j
}
const NKEYS: usize = NT + NG + NX;

/// The generator's SplitMix64, with indexes.
#[derive(Clone, Debug)]
struct Rng(freeway_io::gen::Rng);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

/// Traffic classes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Class {
    L2T = 1,
    L2H = 2,
    Fwd = 3,
    Reply = 4,
    Unsol = 5,
}

impl Class {
    fn from_u8(v: u8) -> Option<Class> {
        Some(match v {
            1 => Class::L2T,
            2 => Class::L2H,
            3 => Class::Fwd,
            4 => Class::Reply,
            5 => Class::Unsol,
            _ => return None,
        })
    }
}

/// What a generated frame carries in its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tag {
    worker: u16,
    class: Class,
    in_port: u16,
    /// Target, destination host or prefix (by class).
    a: u8,
    /// Source or destination LAN host (by class).
    b: u8,
    seq: u64,
    /// `done` when the frame was generated.
    lo: u64,
}

impl Tag {
    fn write(&self, f: &mut [u8]) {
        let t = &mut f[TAG_OFF..TAG_OFF + TAG_LEN];
        t[0..4].copy_from_slice(MAGIC);
        t[4..6].copy_from_slice(&self.worker.to_be_bytes());
        t[6] = self.class as u8;
        t[7] = self.in_port as u8;
        t[8] = self.a;
        t[9] = self.b;
        t[10..18].copy_from_slice(&self.seq.to_be_bytes());
        t[18..26].copy_from_slice(&self.lo.to_be_bytes());
    }

    /// The tag of an untagged IPv4/UDP frame with a 20-byte IP header, if it has one.
    fn read(f: &[u8]) -> Option<Tag> {
        let t = f.get(TAG_OFF..TAG_OFF + TAG_LEN)?;
        if f[12..14] != [0x08, 0x00] || f[14] != 0x45 || f[23] != 17 || &t[0..4] != MAGIC {
            return None;
        }
        Some(Tag {
            worker: u16::from_be_bytes([t[4], t[5]]),
            class: Class::from_u8(t[6])?,
            in_port: u16::from(t[7]),
            a: t[8],
            b: t[9],
            seq: u64::from_be_bytes(t[10..18].try_into().ok()?),
            lo: u64::from_be_bytes(t[18..26].try_into().ok()?),
        })
    }
}

/// The versioned history of every table value the oracle follows: per key, `(operation,
/// value)` pairs in operation order. Written by the control thread only.
#[derive(Debug)]
pub struct History {
    keys: Vec<Vec<(u64, u8)>>,
    /// Entries at or before this operation may have been pruned (the last one kept).
    floor: u64,
}

impl History {
    fn new(init: &[u8]) -> History {
        History {
            keys: init.iter().map(|&v| vec![(0, v)]).collect(),
            floor: 0,
        }
    }

    fn set(&mut self, key: usize, op: u64, v: u8) {
        self.keys[key].push((op, v));
    }

    /// Bit mask of the values `key` may have had from operation `lo` (applied) to `hi`
    /// (issued): bit `v` for `v < 31`, bit 31 for [`NONE`]. `None` when pruned too far.
    fn seen(&self, key: usize, lo: u64, hi: u64) -> Option<u32> {
        if lo < self.floor {
            return None;
        }
        Some(seen_in(&self.keys[key], lo, hi))
    }

    /// Drops entries no frame in flight can need (older than `floor`, keeping the value at
    /// `floor`).
    fn prune(&mut self, floor: u64) {
        if floor <= self.floor {
            return;
        }
        for k in &mut self.keys {
            let keep = k.partition_point(|e| e.0 <= floor).saturating_sub(1);
            k.drain(..keep);
        }
        self.floor = floor;
    }
}

fn bit(v: u8) -> u32 {
    if v < 31 {
        1 << v
    } else {
        1 << 31
    }
}

/// The values in a `(operation, value)` list between `lo` and `hi` (see [`History::seen`]).
fn seen_in(h: &[(u64, u8)], lo: u64, hi: u64) -> u32 {
    let first = h.partition_point(|e| e.0 <= lo).saturating_sub(1);
    h[first..].iter().take_while(|e| e.0 <= hi).fold(0, |m, e| m | bit(e.1))
}

/// Counters of the oracle, shared by every thread.
#[derive(Debug, Default)]
struct Counters {
    generated: AtomicU64,
    outputs: AtomicU64,
    finalized: AtomicU64,
    delivered: AtomicU64,
    floods: AtomicU64,
    lost: AtomicU64,
    unchecked: AtomicU64,
    tap_frames: AtomicU64,
    violations: AtomicU64,
}

/// What every thread of the harness shares.
struct Shared {
    sent: AtomicU64,
    done: AtomicU64,
    hist: RwLock<History>,
    /// Per (host, prefix): a `FWD` frame of that flow was generated.
    fwd_seen: Vec<AtomicBool>,
    /// Generators stop producing (the run is ending).
    gen_stop: AtomicBool,
    /// The datapath is up (its control socket answers): the run's clock starts.
    ready: AtomicBool,
    /// Per worker: the oldest `lo` of its frames in flight (`u64::MAX`: none).
    floors: Vec<AtomicU64>,
    c: Counters,
    messages: Mutex<Vec<String>>,
}

impl Shared {
    fn violation(&self, msg: String) {
        self.c.violations.fetch_add(1, SeqCst);
        let mut m = self.messages.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() < MAX_MESSAGES {
            m.push(msg);
        }
    }

    /// Checks one frame `f` leaving on `port` (a transmit queue or a transmit tap), with the
    /// operations issued so far `hi`. `Ok(false)`: could not check (history pruned).
    fn check_output(&self, h: &History, tag: &Tag, port: u16, f: &[u8], hi: u64) -> Result<bool, String> {
        let pbit = 1u32 << port;
        let dst: [u8; 6] = f[0..6].try_into().map_err(|_| "short frame")?;
        let src: [u8; 6] = f[6..12].try_into().map_err(|_| "short frame")?;
        let ttl = f[22];
        let flood_lan = lan_mask() & !(1 << tag.in_port);
        match tag.class {
            Class::L2T => {
                let t = usize::from(tag.a);
                if dst != t_mac(t) || ttl != 64 {
                    return Err(format!("L2T frame rewritten: dst {} ttl {ttl}", mac_text(dst)));
                }
                let Some(s) = h.seen(key_t(t), tag.lo, hi) else {
                    return Ok(false);
                };
                if s & pbit == 0 && !(s & bit(NONE) != 0 && flood_lan & pbit != 0) {
                    return Err(format!("target {t} sent to port {port}; entry values {s:#x}"));
                }
            }
            Class::L2H => {
                let d = usize::from(tag.a);
                if dst != host_mac(d) || ttl != 64 {
                    return Err(format!("L2H frame rewritten: dst {} ttl {ttl}", mac_text(dst)));
                }
                if port != host_port(d) && flood_lan & pbit == 0 {
                    return Err(format!("host {d} (port {}) sent to port {port}", host_port(d)));
                }
            }
            Class::Fwd => {
                let j = usize::from(tag.a);
                if src != RMAC || ttl != 63 || !ip_checksum_ok(f) {
                    return Err(format!("routed frame badly rewritten: src {} ttl {ttl}", mac_text(src)));
                }
                let Some(a) = (0..NG).find(|&a| gw_mac(a) == dst) else {
                    return Err(format!("routed to {}, no gateway", mac_text(dst)));
                };
                let Some(routes) = h.seen(key_x(j), tag.lo, hi) else {
                    return Ok(false);
                };
                if !(0..16u8).any(|m| routes & bit(m) != 0 && m & (1 << a) != 0) {
                    return Err(format!("prefix {j} routed via gateway {a}; route values {routes:#x}"));
                }
                let Some(g) = h.seen(key_g(a), tag.lo, hi) else {
                    return Ok(false);
                };
                if g & pbit == 0 && !(g & bit(NONE) != 0 && wan_mask() & pbit != 0) {
                    return Err(format!("gateway {a} reached on port {port}; entry values {g:#x}"));
                }
            }
            Class::Reply => {
                let (hh, j) = (usize::from(tag.b), usize::from(tag.a));
                if src != RMAC || dst != host_mac(hh) || ttl != 63 || !ip_checksum_ok(f) {
                    return Err(format!(
                        "reply badly rewritten: {} -> {} ttl {ttl}",
                        mac_text(src),
                        mac_text(dst)
                    ));
                }
                if lan_mask() & pbit == 0 {
                    return Err(format!("reply to host {hh} on port {port}"));
                }
                if !self.fwd_seen[hh * NX + j].load(SeqCst) {
                    return Err(format!(
                        "reply of flow ({hh},{j}) passed the firewall before any request"
                    ));
                }
            }
            Class::Unsol => return Err(format!("unsolicited frame passed the firewall to port {port}")),
        }
        Ok(true)
    }
}

fn ip_checksum_ok(f: &[u8]) -> bool {
    let Some(ip) = f.get(14..34) else { return false };
    let mut s: u32 = ip.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

/// A frame in flight, in its worker's book.
#[derive(Debug)]
struct Rec {
    tag: Tag,
    /// The receive call that generated it.
    call: u64,
    /// Ports it reached.
    mask: u32,
}

/// One worker's frames in flight (sequence numbers are contiguous), shared by that
/// worker's receive and transmit queues.
#[derive(Debug)]
struct Book {
    worker: u16,
    next_seq: u64,
    inflight: VecDeque<Rec>,
    calls: u64,
    rng: Rng,
}

impl Book {
    fn get(&mut self, seq: u64) -> Option<&mut Rec> {
        let first = self.inflight.front()?.tag.seq;
        self.inflight.get_mut(usize::try_from(seq.checked_sub(first)?).ok()?)
    }

    /// Closes the frames generated at least two receive calls ago (every batch runs to
    /// completion before its worker's next receive call), or all of them.
    fn finalize(&mut self, s: &Shared, all: bool) {
        let hi = s.sent.load(SeqCst);
        let mut h = None;
        while self.inflight.front().is_some_and(|r| all || r.call + 2 <= self.calls) {
            let r = self.inflight.pop_front().expect("front checked");
            let h = h.get_or_insert_with(|| s.hist.read().unwrap_or_else(|e| e.into_inner()));
            close(s, h, &r, hi);
        }
        let floor = self.inflight.front().map_or(u64::MAX, |r| r.tag.lo);
        s.floors[usize::from(self.worker)].store(floor, SeqCst);
    }
}

/// The end of one frame: it reached exactly what one outcome allows, or nothing and it was
/// droppable.
fn close(s: &Shared, h: &History, r: &Rec, hi: u64) {
    s.c.finalized.fetch_add(1, SeqCst);
    let t = &r.tag;
    let n = r.mask.count_ones();
    if n == 0 {
        s.c.lost.fetch_add(1, SeqCst);
        let droppable = match t.class {
            Class::L2T => h
                .seen(key_t(usize::from(t.a)), t.lo, hi)
                .map(|v| v & (1 << t.in_port) != 0),
            Class::L2H => Some(false),
            Class::Fwd => h.seen(key_x(usize::from(t.a)), t.lo, hi).map(|v| v & bit(0) != 0),
            Class::Reply | Class::Unsol => Some(true),
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
            lan_mask() & !(1 << t.in_port),
            h.seen(key_t(usize::from(t.a)), t.lo, hi).map(|v| v & bit(NONE) != 0),
        ),
        Class::L2H => (lan_mask() & !(1 << t.in_port), Some(true)),
        Class::Fwd => {
            let j = usize::from(t.a);
            let could = h.seen(key_x(j), t.lo, hi).and_then(|routes| {
                let gws = (0..16u8).filter(|m| routes & bit(*m) != 0).fold(0u8, |a, m| a | m);
                let mut any = Some(false);
                for a in (0..NG).filter(|a| gws & (1 << a) != 0) {
                    match h.seen(key_g(a), t.lo, hi) {
                        Some(g) if g & bit(NONE) != 0 => return Some(true),
                        Some(_) => {}
                        None => any = None,
                    }
                }
                any
            });
            (wan_mask(), could)
        }
        Class::Reply => (lan_mask(), Some(true)),
        Class::Unsol => (0, Some(false)),
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

/// A port of the harness: receive queues generate tagged traffic, transmit queues check it.
pub struct ChurnPort {
    index: u16,
    books: Vec<Arc<Mutex<Book>>>,
    shared: Arc<Shared>,
}

impl Port for ChurnPort {
    fn kind(&self) -> &'static str {
        "churn"
    }

    fn open(&mut self, workers: usize) -> std::io::Result<PortQueues> {
        if workers != self.books.len() {
            return Err(std::io::Error::other("churn port opened for another worker count"));
        }
        let q = |w: usize| (self.books[w].clone(), self.shared.clone(), self.index);
        Ok(PortQueues {
            rx: (0..workers)
                .map(|w| {
                    let (book, shared, port) = q(w);
                    Box::new(GenRx { book, shared, port }) as Box<dyn RxQueue>
                })
                .collect(),
            tx: (0..workers)
                .map(|w| {
                    let (book, shared, port) = q(w);
                    Box::new(CheckTx { book, shared, port }) as Box<dyn TxQueue>
                })
                .collect(),
        })
    }
}

struct GenRx {
    book: Arc<Mutex<Book>>,
    shared: Arc<Shared>,
    port: u16,
}

impl RxQueue for GenRx {
    fn rx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool, _now: Tick) -> usize {
        let s = &*self.shared;
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        book.calls += 1;
        book.finalize(s, false);
        if s.gen_stop.load(SeqCst) {
            return 0;
        }
        let lo = s.done.load(SeqCst);
        let mut n = 0;
        for _ in 0..batch.room().min(BURST) {
            let mut spec = FrameSpec {
                len: TAG_OFF + TAG_LEN,
                ttl: 64,
                l4_checksum: false,
                proto: L4::Udp,
                ..FrameSpec::default()
            };
            let (class, a, b);
            if let Some(lan) = LAN.iter().position(|p| *p == self.port) {
                let h = lan * HOSTS_PER_LAN + book.rng.below(HOSTS_PER_LAN);
                spec.src_mac = host_mac(h);
                spec.src_ip = IpAddr::V4(host_ip(h));
                b = h as u8;
                match book.rng.below(3) {
                    0 => {
                        let t = book.rng.below(NT);
                        (class, a) = (Class::L2T, t as u8);
                        spec.dst_mac = t_mac(t);
                        spec.dst_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 10, 200));
                        spec.dst_port = 7000;
                    }
                    1 => {
                        // A host on another LAN port.
                        let other = (lan + 1 + book.rng.below(LAN.len() - 1)) % LAN.len();
                        let d = other * HOSTS_PER_LAN + book.rng.below(HOSTS_PER_LAN);
                        (class, a) = (Class::L2H, d as u8);
                        spec.dst_mac = host_mac(d);
                        spec.dst_ip = IpAddr::V4(host_ip(d));
                        spec.dst_port = 7000;
                    }
                    _ => {
                        let j = book.rng.below(NX);
                        (class, a) = (Class::Fwd, j as u8);
                        s.fwd_seen[h * NX + j].store(true, SeqCst);
                        spec.dst_mac = RMAC;
                        spec.dst_ip = IpAddr::V4(remote_ip(j));
                        spec.src_port = flow_port(h, j);
                        spec.dst_port = 7001;
                    }
                }
            } else {
                let q = usize::from(self.port - WAN[0]);
                let (h, j) = (book.rng.below(NHOSTS), book.rng.below(NX));
                (a, b) = (j as u8, h as u8);
                spec.src_mac = wan_mac(q);
                spec.dst_mac = RMAC;
                spec.src_ip = IpAddr::V4(remote_ip(j));
                spec.dst_ip = IpAddr::V4(host_ip(h));
                if book.rng.below(4) == 0 {
                    class = Class::Unsol;
                    spec.src_port = 7002;
                    spec.dst_port = 30_000 + (h * NX + j) as u16;
                } else {
                    class = Class::Reply;
                    spec.src_port = 7001;
                    spec.dst_port = flow_port(h, j);
                }
            }
            let tag = Tag {
                worker: book.worker,
                class,
                in_port: self.port,
                a,
                b,
                seq: book.next_seq,
                lo,
            };
            let mut p = pool.get();
            let Ok(buf) = p.fill(TAG_OFF + TAG_LEN) else {
                pool.put(p);
                break;
            };
            if build_frame_into(&spec, buf) != Some(TAG_OFF + TAG_LEN) {
                pool.put(p);
                break;
            }
            tag.write(buf);
            if batch.push(p).is_err() {
                break;
            }
            n += 1;
            book.next_seq += 1;
            let call = book.calls;
            book.inflight.push_back(Rec { tag, call, mask: 0 });
            s.c.generated.fetch_add(1, SeqCst);
        }
        let floor = book.inflight.front().map_or(u64::MAX, |r| r.tag.lo);
        s.floors[usize::from(book.worker)].store(floor, SeqCst);
        n
    }
}

struct CheckTx {
    book: Arc<Mutex<Book>>,
    shared: Arc<Shared>,
    port: u16,
}

impl TxQueue for CheckTx {
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize {
        let s = &*self.shared;
        let n = batch.len();
        let hi = s.sent.load(SeqCst);
        let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let h = s.hist.read().unwrap_or_else(|e| e.into_inner());
        for p in batch.as_slice() {
            s.c.outputs.fetch_add(1, SeqCst);
            let f = p.data();
            let Some(tag) = Tag::read(f) else {
                s.violation(format!(
                    "port {}: a frame the harness never sent: {:02x?}",
                    self.port,
                    &f[..f.len().min(42)]
                ));
                continue;
            };
            if tag.worker != book.worker {
                s.violation(format!(
                    "port {}: {tag:?} left through worker {}",
                    self.port, book.worker
                ));
                continue;
            }
            let Some(r) = book.get(tag.seq) else {
                s.violation(format!("port {}: {tag:?} is not in flight (closed already)", self.port));
                continue;
            };
            if r.tag != tag {
                s.violation(format!(
                    "port {}: {tag:?} does not match what was sent {:?}",
                    self.port, r.tag
                ));
                continue;
            }
            if r.mask & (1 << self.port) != 0 {
                s.violation(format!("duplicate: {tag:?} reached port {} twice", self.port));
            }
            r.mask |= 1 << self.port;
            match s.check_output(&h, &tag, self.port, f, hi) {
                Ok(true) => {}
                Ok(false) => {
                    s.c.unchecked.fetch_add(1, SeqCst);
                }
                Err(e) => s.violation(format!("port {}: {e} ({tag:?}, issued {hi})", self.port)),
            }
        }
        pool.put_batch(batch);
        n
    }
}

/// The filters taps get, and what each matches among the harness's frames.
const FILTERS: [&str; 5] = [
    "udp",
    "udp dst port 7000",
    "ether dst 02:fe:00:00:00:01",
    "src net 10.100.0.0/16",
    "not ip",
];

fn filter_matches(i: u8, f: &[u8]) -> bool {
    let udp = f.len() >= 42 && f[12..14] == [0x08, 0x00] && f[23] == 17;
    match i {
        0 => udp,
        1 => udp && f[36..38] == 7000u16.to_be_bytes(),
        2 => f[0..6] == RMAC,
        3 => udp && f[26..28] == [10, 100],
        _ => f.len() < 14 || f[12..14] != [0x08, 0x00],
    }
}

/// A tap's filters over time (`(operation, filter index)`), written by the control thread.
type FilterLog = Arc<Mutex<Vec<(u64, u8)>>>;

/// The output of a tap's writer: reads the pcap stream back and checks every captured frame.
struct TapCheck {
    shared: Arc<Shared>,
    port: u16,
    dir: Direction,
    filters: FilterLog,
    buf: Vec<u8>,
    header: bool,
    seen: HashSet<(u16, u64)>,
    frames: Arc<AtomicU64>,
}

impl TapCheck {
    fn frame(&mut self, f: &[u8]) {
        let s = &*self.shared;
        s.c.tap_frames.fetch_add(1, SeqCst);
        self.frames.fetch_add(1, SeqCst);
        let hi = s.sent.load(SeqCst);
        let Some(tag) = Tag::read(f) else {
            s.violation(format!(
                "tap on port {}: captured a frame the harness never sent",
                self.port
            ));
            return;
        };
        if !self.seen.insert((tag.worker, tag.seq)) {
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
        let rx_ok = tag.in_port == self.port && self.dir.covers(Direction::Rx);
        if rx_ok {
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
        match s.check_output(&h, &tag, self.port, f, hi) {
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
struct LiveTap {
    id: TapId,
    filters: FilterLog,
    frames: Arc<AtomicU64>,
    writer: std::thread::JoinHandle<Result<TapStats, String>>,
}

/// Operations the control side completed, by kind.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ops {
    /// Static FDB entries added or moved (targets and gateways).
    pub fdb_add: u64,
    /// FDB entries deleted (targets, gateways, learned hosts).
    pub fdb_del: u64,
    /// Learned FDB entries flushed.
    pub fdb_flush: u64,
    /// Routes replaced (route generation bumped).
    pub route_replace: u64,
    /// Routes deleted.
    pub route_del: u64,
    /// Connection table flushes.
    pub ct_flush: u64,
    /// Taps attached.
    pub tap_attach: u64,
    /// Tap filters replaced.
    pub tap_replace: u64,
    /// Taps detached.
    pub tap_detach: u64,
}

impl Ops {
    /// Every operation.
    pub fn total(&self) -> u64 {
        self.fdb_add
            + self.fdb_del
            + self.fdb_flush
            + self.route_replace
            + self.route_del
            + self.ct_flush
            + self.tap_attach
            + self.tap_replace
            + self.tap_detach
    }
}

/// What the control thread did.
struct ControlOut {
    ops: Ops,
    taps: Vec<TapStats>,
}

/// The control thread's model of the tables it changes, and its tools.
struct Control {
    shared: Arc<Shared>,
    sock: PathBuf,
    reg: Taps,
    rng: Rng,
    t_port: [u8; NT],
    g_port: [u8; NG],
    routes: [u8; NX],
    taps: Vec<LiveTap>,
    ops: Ops,
    tap_stats: Vec<TapStats>,
}

const LAN_NAMES: [&str; 3] = ["lan0", "lan1", "lan2"];
const WAN_NAMES: [&str; 2] = ["wan0", "wan1"];

impl Control {
    /// Runs one operation as version `k`: records `changes` in the history, applies `f`,
    /// marks it done.
    fn op(
        &mut self,
        changes: &[(usize, u8)],
        f: impl FnOnce(&mut Control) -> Result<(), String>,
    ) -> Result<(), String> {
        let k = self.shared.sent.load(SeqCst) + 1;
        {
            let mut h = self.shared.hist.write().unwrap_or_else(|e| e.into_inner());
            for &(key, v) in changes {
                h.set(key, k, v);
            }
        }
        self.shared.sent.store(k, SeqCst);
        let r = f(self);
        self.shared.done.store(k, SeqCst);
        r
    }

    fn ctl(&self, words: &[String]) -> Result<(), String> {
        let v = runtime::ctl_request(&self.sock, words)?;
        if v["ok"] == true {
            Ok(())
        } else {
            Err(format!("{words:?}: {}", v["error"]))
        }
    }

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    /// Deletes (one time in `del_odds`, if present) or adds/moves the static FDB entry of
    /// `mac` (oracle key `key`) in `vlan`, on one of `ports`.
    fn churn_fdb(
        &mut self,
        key: usize,
        mac: [u8; 6],
        vlan: u16,
        ports: &[u16],
        names: &[&str],
        del_odds: usize,
    ) -> Result<(), String> {
        let slot = if key < NT {
            &mut self.t_port[key]
        } else {
            &mut self.g_port[key - NT]
        };
        if *slot != NONE && self.rng.below(del_odds) == 0 {
            *slot = NONE;
            let w = Self::words(&format!("fdb del {} vlan {vlan}", mac_text(mac)));
            self.op(&[(key, NONE)], |c| c.ctl(&w))?;
            self.ops.fdb_del += 1;
        } else {
            let p = self.rng.below(ports.len());
            *slot = ports[p] as u8;
            let w = Self::words(&format!("fdb add {} dev {} vlan {vlan}", mac_text(mac), names[p]));
            self.op(&[(key, ports[p] as u8)], |c| c.ctl(&w))?;
            self.ops.fdb_add += 1;
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), String> {
        match self.rng.below(20) {
            0..=5 => {
                let t = self.rng.below(NT);
                self.churn_fdb(key_t(t), t_mac(t), 10, &LAN, &LAN_NAMES, 2)?;
            }
            6..=8 => {
                let a = self.rng.below(NG);
                self.churn_fdb(key_g(a), gw_mac(a), 20, &WAN, &WAN_NAMES, 3)?;
            }
            9..=13 => {
                let j = self.rng.below(NX);
                if self.routes[j] != 0 && self.rng.below(3) == 0 {
                    self.routes[j] = 0;
                    let w = Self::words(&format!("route del 10.100.{j}.0/24"));
                    self.op(&[(key_x(j), 0)], |c| c.ctl(&w))?;
                    self.ops.route_del += 1;
                } else {
                    let a1 = self.rng.below(NG);
                    let a2 = self.rng.below(NG);
                    let mask = (1u8 << a1) | (1 << a2);
                    let gws: Vec<String> = (0..NG)
                        .filter(|a| mask & (1 << a) != 0)
                        .map(|a| gw_ip(a).to_string())
                        .collect();
                    self.routes[j] = mask;
                    let w = Self::words(&format!("route replace 10.100.{j}.0/24 via {}", gws.join(",")));
                    self.op(&[(key_x(j), mask)], |c| c.ctl(&w))?;
                    self.ops.route_replace += 1;
                }
            }
            14 => {
                self.op(&[], |c| c.ctl(&Self::words("fdb flush")))?;
                self.ops.fdb_flush += 1;
            }
            15 => {
                // A learned host entry: absent if not learned yet, which is no error.
                let h = self.rng.below(NHOSTS);
                let w = Self::words(&format!("fdb del {} vlan 10", mac_text(host_mac(h))));
                self.op(&[], |c| {
                    let _ = c.ctl(&w);
                    Ok(())
                })?;
                self.ops.fdb_del += 1;
            }
            16 => {
                self.op(&[], |c| c.ctl(&Self::words("conntrack flush")))?;
                self.ops.ct_flush += 1;
            }
            _ => self.tap_step()?,
        }
        Ok(())
    }

    fn tap_step(&mut self) -> Result<(), String> {
        if self.taps.len() < 2 && (self.taps.is_empty() || self.rng.below(2) == 0) {
            let port = self.rng.below(NPORTS) as u16;
            let dir = [Direction::Rx, Direction::Tx, Direction::Both][self.rng.below(3)];
            let fi = self.rng.below(FILTERS.len()) as u8;
            let filters: FilterLog = Arc::new(Mutex::new(Vec::new()));
            let frames = Arc::new(AtomicU64::new(0));
            let check = TapCheck {
                shared: self.shared.clone(),
                port,
                dir,
                filters: filters.clone(),
                buf: Vec::new(),
                header: false,
                seen: HashSet::new(),
                frames: frames.clone(),
            };
            let mut id = None;
            self.op(&[], |c| {
                let k = c.shared.sent.load(SeqCst);
                filters.lock().unwrap_or_else(|e| e.into_inner()).push((k, fi));
                let filter = Filter::new(FILTERS[usize::from(fi)], 128).map_err(|e| e.to_string())?;
                let spec = TapSpec {
                    port,
                    dir,
                    snaplen: 128,
                    ring_slots: 64,
                };
                let (tid, reader) = c.reg.attach(spec, filter).map_err(|e| e.to_string())?;
                id = Some((tid, reader));
                Ok(())
            })?;
            let (tid, reader) = id.ok_or("tap not attached")?;
            let w = TapWriter::new(reader, check, WriterOptions::default()).map_err(|e| e.to_string())?;
            let writer = std::thread::Builder::new()
                .name("churn-tap".into())
                .spawn(move || w.run().map_err(|e| e.to_string()))
                .map_err(|e| e.to_string())?;
            self.taps.push(LiveTap {
                id: tid,
                filters,
                frames,
                writer,
            });
            self.ops.tap_attach += 1;
        } else if self.rng.below(3) != 0 {
            let i = self.rng.below(self.taps.len());
            let fi = self.rng.below(FILTERS.len()) as u8;
            let (tid, log) = (self.taps[i].id, self.taps[i].filters.clone());
            self.op(&[], |c| {
                let k = c.shared.sent.load(SeqCst);
                log.lock().unwrap_or_else(|e| e.into_inner()).push((k, fi));
                let filter = Filter::new(FILTERS[usize::from(fi)], 128).map_err(|e| e.to_string())?;
                c.reg.replace_filter(tid, filter).map_err(|e| e.to_string())
            })?;
            self.ops.tap_replace += 1;
        } else {
            let i = self.rng.below(self.taps.len());
            let t = self.taps.swap_remove(i);
            self.op(&[], |c| {
                if c.reg.detach(t.id) {
                    Ok(())
                } else {
                    Err("tap was not attached".into())
                }
            })?;
            self.join_tap(t)?;
            self.ops.tap_detach += 1;
        }
        Ok(())
    }

    fn join_tap(&mut self, t: LiveTap) -> Result<(), String> {
        let st = t.writer.join().map_err(|_| "tap writer panicked".to_string())??;
        if st.matched != st.written + st.dropped + st.discarded {
            self.shared.violation(format!("tap counters do not balance: {st:?}"));
        }
        let read = t.frames.load(SeqCst);
        if read != st.written {
            self.shared
                .violation(format!("tap wrote {} frames, {read} read back", st.written));
        }
        self.tap_stats.push(st);
        Ok(())
    }

    fn run(mut self) -> Result<ControlOut, String> {
        // Wait for the control socket.
        let t0 = Instant::now();
        while runtime::ctl_request(&self.sock, &["stats".to_string()]).is_err() {
            if t0.elapsed() > Duration::from_secs(300) || self.shared.gen_stop.load(SeqCst) {
                self.shared.gen_stop.store(true, SeqCst);
                return Err("the control socket never came up".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shared.ready.store(true, SeqCst);
        let mut res = Ok(());
        while !self.shared.gen_stop.load(SeqCst) {
            if let Err(e) = self.step() {
                res = Err(e);
                // Ends the run.
                self.shared.gen_stop.store(true, SeqCst);
                break;
            }
            // Prune what no frame in flight can need (taps may lag: they count as unchecked).
            if self.shared.done.load(SeqCst) % 64 == 0 {
                let floor = self.shared.floors.iter().map(|f| f.load(SeqCst)).min().unwrap_or(0);
                let floor = floor.min(self.shared.done.load(SeqCst));
                self.shared.hist.write().unwrap_or_else(|e| e.into_inner()).prune(floor);
            }
        }
        for t in std::mem::take(&mut self.taps) {
            self.reg.detach(t.id);
            self.ops.tap_detach += 1;
            if let Err(e) = self.join_tap(t) {
                res = res.and(Err(e));
            }
        }
        res.map(|()| ControlOut {
            ops: self.ops,
            taps: self.tap_stats,
        })
    }
}

/// Settings of a churn run.
#[derive(Clone, Debug)]
pub struct ChurnOptions {
    /// How long traffic and churn go on (at least).
    pub duration: Duration,
    /// Go on past `duration` until this many control operations are done (so a short run on
    /// a slow machine still changes every table; the run ends early if the control side
    /// fails).
    pub min_ops: u64,
    /// Worker threads.
    pub workers: usize,
    /// Seed of the traffic and operation choices.
    pub seed: u64,
    /// Time after which the resident set is taken as the baseline for growth.
    pub warmup: Duration,
    /// Fail when the resident set grows by more than this many KiB after the warm-up.
    pub rss_limit_kib: Option<u64>,
    /// Print a progress line this often (to standard error).
    pub progress: Option<Duration>,
}

impl Default for ChurnOptions {
    fn default() -> Self {
        ChurnOptions {
            duration: Duration::from_secs(10),
            min_ops: 0,
            workers: 2,
            seed: 1,
            warmup: Duration::from_secs(2),
            rss_limit_kib: None,
            progress: None,
        }
    }
}

/// What a churn run did and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChurnReport {
    /// Seconds the traffic ran.
    pub elapsed_s: f64,
    /// Workers.
    pub workers: usize,
    /// Control operations completed.
    pub ops: Ops,
    /// Frames generated.
    pub generated: u64,
    /// Frames the datapath transmitted, each checked by the oracle.
    pub outputs_checked: u64,
    /// Generated frames closed by the oracle (all of them, at the end).
    pub frames_closed: u64,
    /// Frames that reached at least one port.
    pub delivered: u64,
    /// Of those, frames that reached several ports (floods).
    pub flooded: u64,
    /// Frames that reached no port.
    pub dropped: u64,
    /// Drops the datapath counted, by reason.
    pub drops_counted: std::collections::BTreeMap<String, u64>,
    /// Frames captured by taps and checked.
    pub tap_frames: u64,
    /// Checks that could not be made (history pruned past a frame's window).
    pub unchecked: u64,
    /// Violations found (all counted; the first few described in `messages`).
    pub violations: u64,
    /// The first violations.
    pub messages: Vec<String>,
    /// Resident set at the start, after the warm-up, highest after the warm-up, at the end (KiB).
    pub rss_kib: [u64; 4],
    /// Route generation bumps seen by the workers' caches (refills).
    pub route_cache_refills: u64,
    /// Connections created by the tracker.
    pub ct_created: u64,
}

impl ChurnReport {
    /// Resident set growth after the warm-up, KiB (end or highest, whichever is larger).
    pub fn rss_growth_kib(&self) -> u64 {
        self.rss_kib[2].max(self.rss_kib[3]).saturating_sub(self.rss_kib[1])
    }

    /// Whether the run found nothing wrong.
    pub fn clean(&self) -> bool {
        self.violations == 0
    }
}

/// The resident set size in KiB (from `/proc/self/statm`, 4 KiB pages), 0 if unknown.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4)
}

/// The datapath's configuration for a churn run.
fn config_text(workers: usize) -> String {
    let mut t = format!("workers = {workers}\npin_workers = false\n");
    for n in LAN_NAMES {
        t += &format!("[[port]]\nname = \"{n}\"\nkind = \"sink\"\nvlan = {{ mode = \"access\", vlan = 10 }}\n");
    }
    for n in WAN_NAMES {
        t += &format!("[[port]]\nname = \"{n}\"\nkind = \"sink\"\nvlan = {{ mode = \"access\", vlan = 20 }}\n");
    }
    t += "[bridge]\nstatic = [";
    for a in 0..NG {
        t += &format!(
            "{{ mac = \"{}\", vlan = 20, port = \"{}\" }},",
            mac_text(gw_mac(a)),
            WAN_NAMES[a % 2]
        );
    }
    t += "]\n";
    t += &format!(
        "[router]\nmac = \"{}\"\nicmp_rate = 0\nicmp_burst = 0\n\
         [[interface]]\nname = \"lan\"\nvlan = 10\naddr = [\"10.0.10.1/24\"]\n\
         [[interface]]\nname = \"wan\"\nvlan = 20\naddr = [\"10.0.20.1/24\"]\n",
        mac_text(RMAC)
    );
    for j in 0..NX {
        t += &format!("[[route]]\ndst = \"10.100.{j}.0/24\"\nvia = \"{}\"\n", gw_ip(j % NG));
    }
    for h in 0..NHOSTS {
        t += &format!(
            "[[neigh]]\nip = \"{}\"\nmac = \"{}\"\ndev = \"lan\"\n",
            host_ip(h),
            mac_text(host_mac(h))
        );
    }
    for a in 0..NG {
        t += &format!(
            "[[neigh]]\nip = \"{}\"\nmac = \"{}\"\ndev = \"wan\"\n",
            gw_ip(a),
            mac_text(gw_mac(a))
        );
    }
    // The traffic has a few thousand flows at most: a small table (quick to set up, also
    // under valgrind).
    t += "[conntrack]\nmax = 16384\n[firewall]\nallow_new_from = [\"lan0\", \"lan1\", \"lan2\"]\n";
    t
}

fn socket_path() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "freeway-churn-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, SeqCst)
    ))
}

/// Runs the datapath under churn for `opts.duration` and checks every frame (see the module
/// docs). `Err` only when the run could not be made; what it found is in the report.
pub fn run(opts: &ChurnOptions) -> Result<ChurnReport, RunError> {
    let workers = opts.workers.max(1);
    let cfg =
        freeway_datapath::config::parse(&config_text(workers), "<churn>", None).map_err(|e| RunError(e.to_string()))?;
    let mut init = vec![NONE; NKEYS];
    for a in 0..NG {
        init[key_g(a)] = WAN[a % 2] as u8;
    }
    for j in 0..NX {
        init[key_x(j)] = 1 << (j % NG);
    }
    let shared = Arc::new(Shared {
        sent: AtomicU64::new(0),
        done: AtomicU64::new(0),
        hist: RwLock::new(History::new(&init)),
        fwd_seen: (0..NHOSTS * NX).map(|_| AtomicBool::new(false)).collect(),
        gen_stop: AtomicBool::new(false),
        ready: AtomicBool::new(false),
        floors: (0..workers).map(|_| AtomicU64::new(u64::MAX)).collect(),
        c: Counters::default(),
        messages: Mutex::new(Vec::new()),
    });
    let books: Vec<Arc<Mutex<Book>>> = (0..workers)
        .map(|w| {
            Arc::new(Mutex::new(Book {
                worker: w as u16,
                next_seq: 0,
                inflight: VecDeque::new(),
                calls: 0,
                rng: Rng(freeway_io::gen::Rng(
                    opts.seed ^ (w as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d),
                )),
            }))
        })
        .collect();
    let ports: Vec<Box<dyn Port>> = (0..NPORTS)
        .map(|i| {
            Box::new(ChurnPort {
                index: i as u16,
                books: books.clone(),
                shared: shared.clone(),
            }) as Box<dyn Port>
        })
        .collect();
    let reg = Taps::new(workers);
    let sock = socket_path();
    let stop = Arc::new(AtomicBool::new(false));
    let rss_start = rss_kib();

    let control = Control {
        shared: shared.clone(),
        sock: sock.clone(),
        reg: reg.clone(),
        rng: Rng(freeway_io::gen::Rng(opts.seed.wrapping_mul(31).wrapping_add(7))),
        t_port: [NONE; NT],
        g_port: std::array::from_fn(|a| WAN[a % 2] as u8),
        routes: std::array::from_fn(|j| 1 << (j % NG)),
        taps: Vec::new(),
        ops: Ops::default(),
        tap_stats: Vec::new(),
    };
    let control = std::thread::Builder::new()
        .name("churn-ctl".into())
        .spawn(move || control.run())
        .map_err(|e| RunError(format!("cannot start the control thread: {e}")))?;
    let monitor = {
        let (shared, stop, o) = (shared.clone(), stop.clone(), opts.clone());
        std::thread::Builder::new()
            .name("churn-monitor".into())
            .spawn(move || monitor(&shared, &stop, &o, rss_start))
            .map_err(|e| RunError(format!("cannot start the monitor thread: {e}")))?
    };
    let res = runtime::run_on_ports::<Padded, Taps>(
        &cfg,
        RunOptions {
            stop: Some(stop.clone()),
            control: Some(sock.clone()),
            ..RunOptions::default()
        },
        Some(reg.clone()),
        ports,
    );
    // Whatever happened, end the other threads.
    shared.gen_stop.store(true, SeqCst);
    stop.store(true, SeqCst);
    let ctl = control
        .join()
        .map_err(|_| RunError("the control thread panicked".into()))?;
    let (rss_warm, rss_max, elapsed) = monitor
        .join()
        .map_err(|_| RunError("the monitor thread panicked".into()))?;
    let res = res?;
    let ctl = ctl.map_err(|e| RunError(format!("control side: {e}")))?;

    for b in &books {
        b.lock().unwrap_or_else(|e| e.into_inner()).finalize(&shared, true);
    }
    let c = &shared.c;
    let s = &res.last;
    let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
    let tx: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
    let drops = s.drops();
    let counted: u64 = drops.values().sum();
    let generated = c.generated.load(SeqCst);
    let outputs = c.outputs.load(SeqCst);
    let lost = c.lost.load(SeqCst);
    if rx != generated {
        shared.violation(format!("{generated} frames generated, the datapath received {rx}"));
    }
    if tx != outputs {
        shared.violation(format!(
            "the datapath counted {tx} frames transmitted, the ports saw {outputs}"
        ));
    }
    if lost != counted {
        shared.violation(format!(
            "{lost} frames reached no port, the datapath counted {counted} drops: {drops:?}"
        ));
    }
    if c.finalized.load(SeqCst) != generated {
        shared.violation(format!(
            "{generated} frames generated, {} closed",
            c.finalized.load(SeqCst)
        ));
    }
    for t in &ctl.taps {
        if t.matched != t.written + t.dropped + t.discarded {
            shared.violation(format!("tap counters do not balance: {t:?}"));
        }
    }
    let rss_end = rss_kib();
    let mut report = ChurnReport {
        elapsed_s: elapsed.as_secs_f64(),
        workers,
        ops: ctl.ops,
        generated,
        outputs_checked: outputs,
        frames_closed: c.finalized.load(SeqCst),
        delivered: c.delivered.load(SeqCst),
        flooded: c.floods.load(SeqCst),
        dropped: lost,
        drops_counted: drops,
        tap_frames: c.tap_frames.load(SeqCst),
        unchecked: c.unchecked.load(SeqCst),
        violations: 0,
        messages: Vec::new(),
        rss_kib: [rss_start, rss_warm, rss_max, rss_end],
        route_cache_refills: s.router.as_ref().map_or(0, |r| r.route_cache_refills),
        ct_created: s.conntrack.as_ref().map_or(0, |c| c.created),
    };
    if let Some(limit) = opts.rss_limit_kib {
        if report.rss_growth_kib() > limit {
            shared.violation(format!(
                "resident set grew by {} KiB after the warm-up (limit {limit} KiB): {:?}",
                report.rss_growth_kib(),
                report.rss_kib
            ));
        }
    }
    report.violations = c.violations.load(SeqCst);
    report.messages = shared.messages.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(report)
}

/// Samples the resident set, prints progress, ends generation at the deadline and the run
/// shortly after. Returns the resident set after the warm-up and the highest after it, and
/// how long traffic ran.
fn monitor(s: &Shared, stop: &AtomicBool, o: &ChurnOptions, rss_start: u64) -> (u64, u64, Duration) {
    // The clock starts once the datapath is up (slow under valgrind).
    while !s.ready.load(SeqCst) && !s.gen_stop.load(SeqCst) && !stop.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    let (mut warm, mut max) = (None, 0);
    let mut next_progress = o.progress;
    while (t0.elapsed() < o.duration || s.done.load(SeqCst) < o.min_ops)
        && !stop.load(SeqCst)
        && !s.gen_stop.load(SeqCst)
    {
        std::thread::sleep(Duration::from_millis(50));
        let el = t0.elapsed();
        let rss = rss_kib();
        if el >= o.warmup.min(o.duration / 2) {
            if warm.is_none() {
                warm = Some(rss);
            }
            max = max.max(rss);
        }
        if let Some(p) = next_progress {
            if el >= p {
                eprintln!(
                    "churn: {:>6.1}s ops {:>8} generated {:>10} checked {:>10} violations {} rss {} KiB",
                    el.as_secs_f64(),
                    s.done.load(SeqCst),
                    s.c.generated.load(SeqCst),
                    s.c.outputs.load(SeqCst),
                    s.c.violations.load(SeqCst),
                    rss
                );
                next_progress = o.progress.map(|d| p + d);
            }
        }
    }
    s.gen_stop.store(true, SeqCst);
    let ran = t0.elapsed();
    // Frames in flight leave within a batch; give the workers a moment.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, SeqCst);
    (warm.unwrap_or(rss_start), max.max(warm.unwrap_or(rss_start)), ran)
}

/// Writes `report` as the `freeway stress churn` table.
pub fn print_report(r: &ChurnReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "churn oracle: {:.1} s, {} workers", r.elapsed_s, r.workers)?;
    let o = &r.ops;
    writeln!(
        out,
        "  operations   {} (fdb add {}, fdb del {}, fdb flush {}, route replace {}, route del {}, conntrack flush {}, tap attach {}, tap filter {}, tap detach {})",
        o.total(),
        o.fdb_add,
        o.fdb_del,
        o.fdb_flush,
        o.route_replace,
        o.route_del,
        o.ct_flush,
        o.tap_attach,
        o.tap_replace,
        o.tap_detach
    )?;
    writeln!(out, "  generated    {}", r.generated)?;
    writeln!(
        out,
        "  checked      {} output frames, {} tap frames",
        r.outputs_checked, r.tap_frames
    )?;
    writeln!(
        out,
        "  frames       {} closed: {} delivered ({} flooded), {} dropped",
        r.frames_closed, r.delivered, r.flooded, r.dropped
    )?;
    writeln!(out, "  drops        {:?}", r.drops_counted)?;
    writeln!(
        out,
        "  route cache  {} refills; conntrack {} connections created",
        r.route_cache_refills, r.ct_created
    )?;
    writeln!(out, "  unchecked    {}", r.unchecked)?;
    writeln!(
        out,
        "  rss          start {} KiB, after warm-up {} KiB, max {} KiB, end {} KiB (growth {} KiB)",
        r.rss_kib[0],
        r.rss_kib[1],
        r.rss_kib[2],
        r.rss_kib[3],
        r.rss_growth_kib()
    )?;
    writeln!(out, "  violations   {}", r.violations)?;
    for m in &r.messages {
        writeln!(out, "    {m}")?;
    }
    Ok(())
}

/// `freeway stress ...`: long-running reliability checks.
#[derive(clap::Subcommand, Debug)]
pub enum StressCmd {
    /// The churn oracle: FDB entries, routes, taps and connections changed as fast as the
    /// control socket allows while the workers forward generated traffic; every output frame
    /// checked against the tables' versions, every frame accounted for, memory sampled.
    Churn(ChurnArgs),
}

/// Arguments of `freeway stress churn`.
#[derive(clap::Args, Debug)]
pub struct ChurnArgs {
    /// How long (e.g. 300s, 5m).
    #[arg(short, long, default_value = "60s", value_parser = freeway_datapath::config::parse_duration)]
    pub duration: Duration,
    /// Worker threads.
    #[arg(short, long, default_value_t = 2)]
    pub workers: usize,
    /// Seed of the traffic and of the operations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Resident set baseline taken after this long.
    #[arg(long, default_value = "5s", value_parser = freeway_datapath::config::parse_duration)]
    pub warmup: Duration,
    /// Fail if the resident set grows by more than this many MiB after the warm-up (0: no
    /// limit, e.g. under valgrind).
    #[arg(long, default_value_t = 32)]
    pub rss_limit_mib: u64,
    /// Go on past the duration until this many control operations are done.
    #[arg(long, default_value_t = 0)]
    pub min_ops: u64,
    /// Print the report as JSON.
    #[arg(short = 'j', long)]
    pub json: bool,
    /// No progress lines.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs a `freeway stress` command; `Err` when it could not run or found a violation.
pub fn main(cmd: StressCmd) -> Result<(), String> {
    let StressCmd::Churn(a) = cmd;
    if a.workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    let opts = ChurnOptions {
        duration: a.duration,
        min_ops: a.min_ops,
        workers: a.workers,
        seed: a.seed,
        warmup: a.warmup,
        rss_limit_kib: (a.rss_limit_mib > 0).then_some(a.rss_limit_mib * 1024),
        progress: (!a.quiet).then_some(Duration::from_secs(10)),
    };
    let r = run(&opts).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
        writeln!(out, "{v}").map_err(|e| e.to_string())?;
    } else {
        print_report(&r, &mut out).map_err(|e| e.to_string())?;
    }
    if r.clean() {
        Ok(())
    } else {
        Err(format!("the churn oracle found {} violations", r.violations))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(init: &[u8]) -> Shared {
        Shared {
            sent: AtomicU64::new(0),
            done: AtomicU64::new(0),
            hist: RwLock::new(History::new(init)),
            fwd_seen: (0..NHOSTS * NX).map(|_| AtomicBool::new(false)).collect(),
            gen_stop: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            floors: vec![AtomicU64::new(u64::MAX)],
            c: Counters::default(),
            messages: Mutex::new(Vec::new()),
        }
    }

    fn l2t_frame(t: usize, in_port: u16, lo: u64) -> (Tag, Vec<u8>) {
        let spec = FrameSpec {
            src_mac: host_mac(0),
            dst_mac: t_mac(t),
            len: TAG_OFF + TAG_LEN,
            ttl: 64,
            l4_checksum: false,
            dst_port: 7000,
            ..FrameSpec::default()
        };
        let mut f = freeway_packet::build::build_frame(&spec);
        let tag = Tag {
            worker: 0,
            class: Class::L2T,
            in_port,
            a: t as u8,
            b: 0,
            seq: 9,
            lo,
        };
        tag.write(&mut f);
        (tag, f)
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
        let s = shared(&init);
        let h = s.hist.read().unwrap();
        let (tag, f) = l2t_frame(0, 0, 0);
        assert_eq!(Tag::read(&f), Some(tag));
        assert_eq!(s.check_output(&h, &tag, 1, &f, 0), Ok(true));
        assert!(
            s.check_output(&h, &tag, 2, &f, 0).is_err(),
            "port 2 never held target 0"
        );
        // The same frame reaching ports 1 and 2 is a flood while the entry always existed.
        close(
            &s,
            &h,
            &Rec {
                tag,
                call: 0,
                mask: 0b110,
            },
            0,
        );
        assert_eq!(s.c.violations.load(SeqCst), 1);
        // Reaching nothing when no version put the target on the ingress port: lost.
        close(&s, &h, &Rec { tag, call: 0, mask: 0 }, 0);
        assert_eq!(s.c.violations.load(SeqCst), 2);
        drop(h);
        // Once an operation deleted the entry, the flood is one valid outcome.
        s.hist.write().unwrap().set(key_t(0), 1, NONE);
        let h = s.hist.read().unwrap();
        assert_eq!(s.check_output(&h, &tag, 2, &f, 1), Ok(true));
        close(
            &s,
            &h,
            &Rec {
                tag,
                call: 0,
                mask: 0b110,
            },
            1,
        );
        assert_eq!(s.c.violations.load(SeqCst), 2);
        // But not a partial one.
        close(
            &s,
            &h,
            &Rec {
                tag,
                call: 0,
                mask: 0b010 | 0b1000,
            },
            1,
        );
        assert_eq!(s.c.violations.load(SeqCst), 3);
    }
}
