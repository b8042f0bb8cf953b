//! The multicast database: IGMP/MLD snooping, (VLAN, group) → member ports, and the
//! multicast router ports of each VLAN.
//!
//! # Who does what
//!
//! * **Workers** hold an [`Mdb`] (cheap to clone). The bridge stage reads the current
//!   [`MdbView`] under the epoch guard of its batch (one `Acquire` load, no lock, no shared
//!   write) and hands what it learns from IGMP and MLD messages ([`MdbRequest`]: a report, a
//!   leave, a query) to the writer through a bounded lock-free queue. A full queue is
//!   counted by the worker (`mdb_queue_full`) and the request dropped: hosts repeat their
//!   reports.
//! * **The writer** ([`MdbWriter`], exactly one, not `Clone`; it lives with the FDB writer on
//!   the `fw-fdb` thread, or with a worker that owns the writers offline) is the only one
//!   that changes memberships: it drains the queue, ages members, learned router ports and
//!   queriers, and when anything that forwarding depends on changed, builds a new view and
//!   publishes it whole ([`freeway_sync::Published`]). A refreshed membership changes no
//!   view.
//!
//! # What snooping means here, as in Linux's bridge
//!
//! * A report (IGMPv1/v2, MLDv1, or an IGMPv3/MLDv2 record) makes its port a member of the
//!   group in the frame's VLAN for the membership interval. IGMPv3/MLDv2 records are taken
//!   "any source": `MODE_IS_EXCLUDE`, `CHANGE_TO_EXCLUDE` and any record naming sources
//!   join; `MODE_IS_INCLUDE`/`CHANGE_TO_INCLUDE` with no source leave; `BLOCK_OLD_SOURCES`
//!   changes nothing (no per-source filtering).
//! * A leave (IGMPv2 leave, MLDv1 done, an empty INCLUDE record) removes the member at once
//!   on a port with fast leave, else shortens its timer to the last-member count times the
//!   last-member interval (the time a querier's group-specific queries would take).
//! * A query with a non-zero source makes its port a router port of the VLAN (unless the
//!   port's `multicast_router` is 0) for the querier interval, and marks the VLAN as having
//!   a querier. A port with `multicast_router = 2` is always a router port. IGMP and MLD
//!   are apart, as in Linux: an IGMP querier is no MLD querier, and router ports are learned
//!   per protocol.
//! * Forwarding (see the stage): while the VLAN has a querier, a frame to a snooped group goes
//!   to its members and the VLAN's router ports only, and reports go to router ports only.
//!   Without a querier, memberships cannot be refreshed, so multicast is flooded as unsnooped
//!   (the port's `mcast_flood` decides), as Linux does without its own querier. Groups in
//!   224.0.0.0/24 and ff02::1 are never snooped.
//!
//! # Bounds
//!
//! Groups ≤ `hash_max` (a (VLAN, group) pair counts once however many members it has): a
//! report for a new group beyond it is refused and counted (`hash_max_reached`), and that
//! group stays unknown (flooded by `mcast_flood`). Ports ≥ [`MDB_MAX_PORTS`] are never
//! members or router ports. Request queue ≤ `queue` requests; the writer takes at most that
//! many a round. Ageing scans every entry at most every [`AGE_INTERVAL_MS`] and only once
//! the earliest timer is due.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use freeway_packet::buffer::{meta_flags, NO_OFFSET};
use freeway_packet::Meta;
use freeway_sync::reclaim::{pin, Guard};
use freeway_sync::{Counter, Published, Tick};
use serde::{Deserialize, Serialize};

/// Words of a [`PortSet`].
const PORT_WORDS: usize = 5;
/// Ports a [`PortSet`] can hold (the datapath's 256 ports and the router port fit).
pub const MDB_MAX_PORTS: usize = 64 * PORT_WORDS;
/// Ageing never scans more often than this.
pub const AGE_INTERVAL_MS: Tick = 100;

/// A set of bridge ports, as a bitmap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortSet([u64; PORT_WORDS]);

impl PortSet {
    /// Adds `port` (ignored beyond [`MDB_MAX_PORTS`]).
    pub fn insert(&mut self, port: u16) {
        if let Some(w) = self.0.get_mut(usize::from(port) / 64) {
            *w |= 1 << (port % 64);
        }
    }

    /// Whether `port` is in the set.
    #[inline(always)]
    pub fn contains(&self, port: u16) -> bool {
        self.0
            .get(usize::from(port) / 64)
            .is_some_and(|w| w & (1 << (port % 64)) != 0)
    }

    /// The union of two sets.
    pub fn union(&self, o: &PortSet) -> PortSet {
        let mut r = *self;
        for (a, b) in r.0.iter_mut().zip(o.0) {
            *a |= b;
        }
        r
    }

    /// The ports in the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..MDB_MAX_PORTS as u16).filter(|p| self.contains(*p))
    }
}

/// Multicast snooping settings (keys of `[bridge]`, named as Linux's bridge options).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MdbConfig {
    /// Snoop IGMP and MLD (Linux's default, on).
    pub multicast_snooping: bool,
    /// Most (VLAN, group) entries.
    pub multicast_hash_max: usize,
    /// A member not heard from for this long is removed (Linux: 2 × query interval + query
    /// response interval = 260 s).
    pub multicast_membership_interval_ms: u64,
    /// A learned router port, and a VLAN's querier, not heard from for this long is
    /// forgotten (Linux: 255 s).
    pub multicast_querier_interval_ms: u64,
    /// After a leave, a member stays for this many intervals (Linux: 2)...
    pub multicast_last_member_count: u32,
    /// ... of this long (Linux: 1 s).
    pub multicast_last_member_interval_ms: u64,
    /// Capacity of the request queue from the workers.
    pub multicast_queue: usize,
}

impl Default for MdbConfig {
    fn default() -> Self {
        MdbConfig {
            multicast_snooping: true,
            multicast_hash_max: 4_096,
            multicast_membership_interval_ms: 260_000,
            multicast_querier_interval_ms: 255_000,
            multicast_last_member_count: 2,
            multicast_last_member_interval_ms: 1_000,
            multicast_queue: 1_024,
        }
    }
}

impl MdbConfig {
    /// Checks the settings; the error names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        in_range("multicast_hash_max", self.multicast_hash_max as u64, 1, 1 << 20)?;
        in_range("multicast_queue", self.multicast_queue as u64, 1, 1 << 20)?;
        in_range(
            "multicast_last_member_count",
            self.multicast_last_member_count.into(),
            1,
            100,
        )?;
        for (k, v) in [
            (
                "multicast_membership_interval_ms",
                self.multicast_membership_interval_ms,
            ),
            ("multicast_querier_interval_ms", self.multicast_querier_interval_ms),
            (
                "multicast_last_member_interval_ms",
                self.multicast_last_member_interval_ms,
            ),
        ] {
            in_range(k, v, 100, 86_400_000)?;
        }
        Ok(())
    }
}

/// `Ok` if `lo <= v <= hi`, else an error naming the key first.
fn in_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("{key} must be between {lo} and {hi} (got {v})"))
    }
}

/// A port's multicast router mode, as Linux's `multicast_router`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum McastRouter {
    /// 0: never a router port (queries received here still count as a querier).
    Disabled,
    /// 1: a router port while queries arrive on it (the default).
    #[default]
    Learn,
    /// 2: always a router port.
    Permanent,
}

impl McastRouter {
    /// From Linux's number (0, 1, 2).
    pub fn from_linux(n: u8) -> Option<McastRouter> {
        match n {
            0 => Some(McastRouter::Disabled),
            1 => Some(McastRouter::Learn),
            2 => Some(McastRouter::Permanent),
            _ => None,
        }
    }
}

/// What a worker saw in an IGMP or MLD message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MdbEvent {
    /// A report: the port wants the group.
    Join(IpAddr),
    /// A leave (or an empty INCLUDE record): the port no longer wants the group.
    Leave(IpAddr),
    /// A query from a real querier (source not 0.0.0.0 / ::): IGMP, or MLD if `v6`.
    Query {
        /// MLD (IPv6), not IGMP.
        v6: bool,
    },
}

/// A worker's request to the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdbRequest {
    /// The frame's VLAN.
    pub vid: u16,
    /// Its ingress port.
    pub port: u16,
    /// What it said.
    pub event: MdbEvent,
}

/// A multiply-and-rotate hasher, seeded per table, for the view's small fixed keys.
#[derive(Clone, Copy, Debug)]
struct Fold(u64);

impl Hasher for Fold {
    fn write(&mut self, b: &[u8]) {
        for c in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    #[inline]
    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }
    #[inline]
    fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64);
        self.write_u64((x >> 64) as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

#[derive(Clone, Copy, Debug)]
struct Seeded(u64);

impl BuildHasher for Seeded {
    type Hasher = Fold;
    fn build_hasher(&self) -> Fold {
        Fold(self.0)
    }
}

/// A group as the view keys it: IPv4 groups as IPv4-mapped IPv6 addresses.
#[inline]
fn group_bits(g: IpAddr) -> u128 {
    match g {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// A VLAN's multicast state for one protocol (IGMP or MLD) in the view.
#[derive(Clone, Copy, Debug, Default)]
pub struct VlanMcast {
    /// Its router ports (learned and permanent).
    pub routers: PortSet,
    /// Whether a querier was heard within the querier interval.
    pub querier: bool,
}

/// What workers read: an immutable version of the forwarding state.
#[derive(Debug)]
pub struct MdbView {
    snooping: bool,
    groups: HashMap<(u16, u128), PortSet, Seeded>,
    /// By (VLAN, MLD rather than IGMP).
    vlans: HashMap<(u16, bool), VlanMcast, Seeded>,
}

impl MdbView {
    fn empty(snooping: bool, seed: u64) -> MdbView {
        MdbView {
            snooping,
            groups: HashMap::with_hasher(Seeded(seed)),
            vlans: HashMap::with_hasher(Seeded(seed ^ 0x5555)),
        }
    }

    /// Whether snooping is on.
    #[inline(always)]
    pub fn snooping(&self) -> bool {
        self.snooping
    }

    /// The VLAN's IGMP state (MLD's if `v6`), when it has a querier or router ports.
    #[inline]
    pub fn vlan(&self, vid: u16, v6: bool) -> Option<&VlanMcast> {
        self.vlans.get(&(vid, v6))
    }

    /// The member ports of `group` in `vid`, if it is snooped.
    #[inline]
    pub fn group(&self, vid: u16, group: IpAddr) -> Option<&PortSet> {
        self.groups.get(&(vid, group_bits(group)))
    }

    /// (VLAN, group) entries.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no group is snooped.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Every (VLAN, group, member ports), sorted.
    pub fn entries(&self) -> Vec<(u16, IpAddr, PortSet)> {
        let mut v: Vec<_> = self
            .groups
            .iter()
            .map(|(&(vid, g), s)| {
                let a = Ipv6Addr::from(g);
                let ip = a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4);
                (vid, ip, *s)
            })
            .collect();
        v.sort_by_key(|e| (e.0, e.1));
        v
    }

    /// Every (VLAN, MLD rather than IGMP) with router ports or a querier, sorted.
    pub fn vlans(&self) -> Vec<((u16, bool), VlanMcast)> {
        let mut v: Vec<_> = self.vlans.iter().map(|(k, s)| (*k, *s)).collect();
        v.sort_by_key(|e| e.0);
        v
    }
}

/// Counters kept by the writer (single writer).
#[derive(Debug, Default)]
pub struct MdbStats {
    /// Reports (joins) applied.
    pub reports: Counter,
    /// Leaves applied.
    pub leaves: Counter,
    /// Queries seen.
    pub queries: Counter,
    /// Groups created.
    pub groups_added: Counter,
    /// Members removed by ageing or leave timers.
    pub members_expired: Counter,
    /// Reports for a new group refused because `multicast_hash_max` was reached.
    pub hash_max_reached: Counter,
    /// Views published.
    pub published: Counter,
}

impl MdbStats {
    /// Every counter by name.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("reports", self.reports.get()),
            ("leaves", self.leaves.get()),
            ("queries", self.queries.get()),
            ("groups_added", self.groups_added.get()),
            ("members_expired", self.members_expired.get()),
            ("hash_max_reached", self.hash_max_reached.get()),
            ("published", self.published.get()),
        ]
    }
}

struct Shared {
    view: Published<MdbView>,
    queue: ArrayQueue<MdbRequest>,
    stats: MdbStats,
}

/// The read side, handed to workers and dumps. Cheap to clone.
#[derive(Clone)]
pub struct Mdb {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Mdb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mdb").finish_non_exhaustive()
    }
}

impl Mdb {
    /// The current view, valid while `guard` is held.
    #[inline(always)]
    pub fn view<'g>(&self, guard: &'g Guard) -> &'g MdbView {
        self.shared.view.load(guard)
    }

    /// Hands a request to the writer. Never blocks; `false` if the queue is full.
    #[inline]
    pub fn request(&self, r: MdbRequest) -> bool {
        self.shared.queue.push(r).is_ok()
    }

    /// The writer's counters.
    pub fn stats(&self) -> &MdbStats {
        &self.shared.stats
    }

    /// Runs `f` on the current view (dumps).
    pub fn with_view<R>(&self, f: impl FnOnce(&MdbView) -> R) -> R {
        let g = pin();
        f(self.view(&g))
    }
}

/// The write side. Exactly one exists per table.
pub struct MdbWriter {
    shared: Arc<Shared>,
    cfg: MdbConfig,
    seed: u64,
    /// (VLAN, group) → member port → expiry.
    groups: BTreeMap<(u16, IpAddr), BTreeMap<u16, Tick>>,
    /// (VLAN, MLD, port) → expiry of a learned router port.
    routers: BTreeMap<(u16, bool, u16), Tick>,
    /// (VLAN, MLD) → expiry of its querier.
    queriers: BTreeMap<(u16, bool), Tick>,
    /// Per port: `multicast_router` and fast leave.
    ports: Vec<(McastRouter, bool)>,
    /// The earliest timer of all (ageing skips scans before it).
    next_expiry: Tick,
    last_age: Tick,
    dirty: bool,
}

/// Creates a multicast database: its read side and its single writer.
pub fn new(cfg: MdbConfig, seed: u64) -> (Mdb, MdbWriter) {
    let view = Published::new(MdbView::empty(cfg.multicast_snooping, seed));
    let queue = ArrayQueue::new(cfg.multicast_queue.max(1));
    let w = MdbWriter {
        shared: Arc::new(Shared {
            stats: MdbStats::default(),
            view,
            queue,
        }),
        cfg,
        seed,
        groups: BTreeMap::new(),
        routers: BTreeMap::new(),
        queriers: BTreeMap::new(),
        ports: Vec::new(),
        next_expiry: Tick::MAX,
        last_age: 0,
        dirty: false,
    };
    (w.reader(), w)
}

/// Like [`new`] with a random hash seed, the ports' (`multicast_router`, fast leave) in
/// order, and the first view published.
pub fn new_random(cfg: MdbConfig, ports: impl IntoIterator<Item = (McastRouter, bool)>) -> (Mdb, MdbWriter) {
    let seed = {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0x006d_6462_u64)
    };
    let (r, mut w) = new(cfg, seed);
    for (i, (router, fast)) in ports.into_iter().enumerate() {
        w.set_port(i as u16, router, fast);
    }
    w.publish();
    (r, w)
}

impl MdbWriter {
    /// A read handle on the same table.
    pub fn reader(&self) -> Mdb {
        Mdb {
            shared: self.shared.clone(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &MdbConfig {
        &self.cfg
    }

    /// Sets a port's `multicast_router` mode and fast leave (takes effect at the next
    /// [`MdbWriter::service`]).
    pub fn set_port(&mut self, port: u16, router: McastRouter, fast_leave: bool) {
        let i = usize::from(port);
        if self.ports.len() <= i {
            self.ports.resize(i + 1, (McastRouter::Learn, false));
        }
        self.ports[i] = (router, fast_leave);
        if router == McastRouter::Disabled {
            self.routers.retain(|(_, _, p), _| *p != port);
        }
        self.dirty = true;
    }

    fn port(&self, port: u16) -> (McastRouter, bool) {
        self.ports.get(usize::from(port)).copied().unwrap_or_default()
    }

    /// Groups in the table.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether the table has no group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    fn due(&mut self, t: Tick) -> Tick {
        self.next_expiry = self.next_expiry.min(t);
        t
    }

    /// Applies one request now.
    pub fn apply(&mut self, r: MdbRequest, now: Tick) {
        let stats = &self.shared.stats;
        match r.event {
            MdbEvent::Join(g) => {
                stats.reports.inc();
                let exp = now + self.cfg.multicast_membership_interval_ms;
                let full = self.groups.len() >= self.cfg.multicast_hash_max;
                match self.groups.get_mut(&(r.vid, g)) {
                    Some(m) => {
                        if m.insert(r.port, exp).is_none() {
                            self.dirty = true;
                        }
                    }
                    None if full => {
                        stats.hash_max_reached.inc();
                        return;
                    }
                    None => {
                        stats.groups_added.inc();
                        self.groups.insert((r.vid, g), BTreeMap::from([(r.port, exp)]));
                        self.dirty = true;
                    }
                }
                self.due(exp);
            }
            MdbEvent::Leave(g) => {
                stats.leaves.inc();
                let fast = self.port(r.port).1;
                let lmqt =
                    now + u64::from(self.cfg.multicast_last_member_count) * self.cfg.multicast_last_member_interval_ms;
                let Some(m) = self.groups.get_mut(&(r.vid, g)) else {
                    return;
                };
                if fast {
                    if m.remove(&r.port).is_some() {
                        self.shared.stats.members_expired.inc();
                        self.dirty = true;
                    }
                    if m.is_empty() {
                        self.groups.remove(&(r.vid, g));
                    }
                } else if let Some(e) = m.get_mut(&r.port) {
                    *e = (*e).min(lmqt);
                    self.due(lmqt);
                }
            }
            MdbEvent::Query { v6 } => {
                stats.queries.inc();
                let exp = now + self.cfg.multicast_querier_interval_ms;
                if self.queriers.insert((r.vid, v6), exp).is_none() {
                    self.dirty = true;
                }
                if self.port(r.port).0 == McastRouter::Learn && self.routers.insert((r.vid, v6, r.port), exp).is_none()
                {
                    self.dirty = true;
                }
                self.due(exp);
            }
        }
    }

    /// Removes every member, router port and querier whose timer ran out, at most every
    /// [`AGE_INTERVAL_MS`] and only once the earliest timer is due. Returns how many went.
    pub fn age(&mut self, now: Tick) -> usize {
        if now < self.next_expiry || now < self.last_age + AGE_INTERVAL_MS {
            return 0;
        }
        self.last_age = now;
        let mut next = Tick::MAX;
        let mut removed = 0;
        self.groups.retain(|_, m| {
            m.retain(|_, e| {
                let keep = *e > now;
                if keep {
                    next = next.min(*e);
                } else {
                    removed += 1;
                }
                keep
            });
            !m.is_empty()
        });
        self.shared.stats.members_expired.add(removed as u64);
        let mut others = 0;
        for map in [&mut self.routers as &mut dyn RetainTicks, &mut self.queriers] {
            others += map.retain_live(now, &mut next);
        }
        self.next_expiry = next;
        if removed + others > 0 {
            self.dirty = true;
        }
        removed + others
    }

    /// Builds the view from the writer's state.
    fn build(&self) -> MdbView {
        let mut v = MdbView::empty(self.cfg.multicast_snooping, self.seed);
        for ((vid, g), m) in &self.groups {
            let mut s = PortSet::default();
            m.keys().for_each(|p| s.insert(*p));
            v.groups.insert((*vid, group_bits(*g)), s);
        }
        let mut perm = PortSet::default();
        for (i, (r, _)) in self.ports.iter().enumerate() {
            if *r == McastRouter::Permanent {
                perm.insert(i as u16);
            }
        }
        for k in self.queriers.keys() {
            v.vlans.entry(*k).or_default().querier = true;
        }
        for (vid, v6, p) in self.routers.keys() {
            v.vlans.entry((*vid, *v6)).or_default().routers.insert(*p);
        }
        for s in v.vlans.values_mut() {
            s.routers = s.routers.union(&perm);
        }
        v
    }

    /// One round of the writer: applies up to a queue's worth of requests, ages, and
    /// publishes a new view if forwarding changed. Returns the number of requests applied.
    pub fn service(&mut self, now: Tick) -> usize {
        let mut n = 0;
        while n < self.cfg.multicast_queue {
            let Some(r) = self.shared.queue.pop() else { break };
            self.apply(r, now);
            n += 1;
        }
        self.age(now);
        self.publish();
        n
    }

    /// Publishes a new view if anything forwarding depends on changed since the last one.
    pub fn publish(&mut self) {
        if self.dirty {
            self.dirty = false;
            self.shared.view.publish(self.build());
            self.shared.stats.published.inc();
        }
    }
}

/// Expiry maps the writer ages alike.
trait RetainTicks {
    /// Drops entries expired at `now`, lowers `next` to the earliest remaining; returns how
    /// many went.
    fn retain_live(&mut self, now: Tick, next: &mut Tick) -> usize;
}

impl<K: Ord> RetainTicks for BTreeMap<K, Tick> {
    fn retain_live(&mut self, now: Tick, next: &mut Tick) -> usize {
        let before = self.len();
        self.retain(|_, e| {
            *next = (*next).min(*e);
            *e > now
        });
        before - self.len()
    }
}

/// What a multicast frame is, for snooping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McastFrame {
    /// Not snooped: not IP, a link-local group (224.0.0.0/24, ff02::1), or unparsed.
    Other,
    /// IP multicast data to a group.
    Data(IpAddr),
    /// An IGMP or MLD (`v6`) report or leave: forwarded to router ports.
    Report {
        /// MLD, not IGMP.
        v6: bool,
    },
    /// An IGMP or MLD query: flooded.
    Query,
}

const IGMP_QUERY: u8 = 0x11;
const IGMP_V1_REPORT: u8 = 0x12;
const IGMP_V2_REPORT: u8 = 0x16;
const IGMP_V2_LEAVE: u8 = 0x17;
const IGMP_V3_REPORT: u8 = 0x22;
const MLD_QUERY: u8 = 130;
const MLD_V1_REPORT: u8 = 131;
const MLD_V1_DONE: u8 = 132;
const MLD_V2_REPORT: u8 = 143;

/// Whether a group is never snooped: IPv4 local network control (224.0.0.0/24) and
/// IPv6 all-nodes (ff02::1).
pub fn is_unsnooped_group(g: IpAddr) -> bool {
    match g {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a == Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
    }
}

/// Classifies a parsed frame to a group MAC address, and passes each event of an IGMP or MLD
/// message to `events` (at most one per group record; a record that cannot be read ends
/// the message). Reads only what the parser already located (`meta.l3_off`, `l4_off`,
/// `ip_proto`).
pub fn classify(f: &[u8], meta: &Meta, mut events: impl FnMut(MdbEvent)) -> McastFrame {
    if meta.flags & meta_flags::PARSED == 0 || meta.l3_off == NO_OFFSET {
        return McastFrame::Other;
    }
    let l3 = usize::from(meta.l3_off);
    let l4 = usize::from(meta.l4_off);
    match meta.ethertype {
        0x0800 => {
            let Some(h) = f.get(l3..l3 + 20) else {
                return McastFrame::Other;
            };
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            let src = [h[12], h[13], h[14], h[15]];
            if meta.ip_proto == 2 && meta.l4_off != NO_OFFSET {
                let Some(m) = f.get(l4..) else { return McastFrame::Other };
                return igmp(m, src != [0; 4], &mut events);
            }
            if !dst.is_multicast() || is_unsnooped_group(IpAddr::V4(dst)) {
                return McastFrame::Other;
            }
            McastFrame::Data(IpAddr::V4(dst))
        }
        0x86dd => {
            let Some(h) = f.get(l3..l3 + 40) else {
                return McastFrame::Other;
            };
            let mut d = [0u8; 16];
            d.copy_from_slice(&h[24..40]);
            let dst = Ipv6Addr::from(d);
            let src_set = h[8..24].iter().any(|b| *b != 0);
            if meta.ip_proto == 58 && meta.l4_off != NO_OFFSET {
                let Some(m) = f.get(l4..) else { return McastFrame::Other };
                if let Some(k) = mld(m, src_set, &mut events) {
                    return k;
                }
            }
            if !dst.is_multicast() || is_unsnooped_group(IpAddr::V6(dst)) {
                return McastFrame::Other;
            }
            McastFrame::Data(IpAddr::V6(dst))
        }
        _ => McastFrame::Other,
    }
}

/// A group address from a message, if it is one snooping tracks.
fn tracked(g: IpAddr) -> Option<IpAddr> {
    let mcast = match g {
        IpAddr::V4(a) => a.is_multicast(),
        IpAddr::V6(a) => a.is_multicast(),
    };
    (mcast && !is_unsnooped_group(g)).then_some(g)
}

fn v4_at(m: &[u8], at: usize) -> Option<IpAddr> {
    let b = m.get(at..at + 4)?;
    Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
}

fn v6_at(m: &[u8], at: usize) -> Option<IpAddr> {
    let b: [u8; 16] = m.get(at..at + 16)?.try_into().ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(b)))
}

/// The event of an IGMPv3/MLDv2 group record, "any source" (see the module's docs).
fn record_event(rtype: u8, nsrc: usize, g: IpAddr) -> Option<MdbEvent> {
    let g = tracked(g)?;
    match rtype {
        2 | 4 => Some(MdbEvent::Join(g)),
        1 | 3 if nsrc == 0 => Some(MdbEvent::Leave(g)),
        1 | 3 | 5 => Some(MdbEvent::Join(g)),
        _ => None,
    }
}

/// Reads IGMPv3/MLDv2 records starting at `at` (`addr` bytes per address).
fn records(m: &[u8], mut at: usize, count: usize, addr: usize, events: &mut impl FnMut(MdbEvent)) {
    for _ in 0..count {
        let Some(h) = m.get(at..at + 4) else { return };
        let (rtype, aux, nsrc) = (
            h[0],
            usize::from(h[1]) * 4,
            usize::from(u16::from_be_bytes([h[2], h[3]])),
        );
        let g = if addr == 4 { v4_at(m, at + 4) } else { v6_at(m, at + 4) };
        let Some(g) = g else { return };
        if let Some(e) = record_event(rtype, nsrc, g) {
            events(e);
        }
        at += 4 + addr + nsrc * addr + aux;
    }
}

/// The message types of one protocol: IGMP or MLD.
struct Kinds {
    query: u8,
    /// Reports of the older versions (IGMPv1 and v2; MLDv1 twice).
    reports: [u8; 2],
    leave: u8,
    /// IGMPv3 / MLDv2 report.
    records: u8,
    /// Where the group of a query, report or leave is.
    group_at: usize,
    /// Address length.
    addr: usize,
}

const IGMP: Kinds = Kinds::new(
    IGMP_QUERY,
    [IGMP_V1_REPORT, IGMP_V2_REPORT],
    IGMP_V2_LEAVE,
    IGMP_V3_REPORT,
    4,
    4,
);
const MLD: Kinds = Kinds::new(MLD_QUERY, [MLD_V1_REPORT; 2], MLD_V1_DONE, MLD_V2_REPORT, 8, 16);

impl Kinds {
    const fn new(query: u8, reports: [u8; 2], leave: u8, records: u8, group_at: usize, addr: usize) -> Kinds {
        Kinds {
            query,
            reports,
            leave,
            records,
            group_at,
            addr,
        }
    }
}

/// Reads an IGMP or MLD message; `None` if it is none of the types snooping reads.
fn message(m: &[u8], k: &Kinds, src_set: bool, events: &mut impl FnMut(MdbEvent)) -> Option<McastFrame> {
    let &t = m.first()?;
    let group = || {
        if k.addr == 4 {
            v4_at(m, k.group_at)
        } else {
            v6_at(m, k.group_at)
        }
        .and_then(tracked)
    };
    if t == k.query {
        if src_set {
            events(MdbEvent::Query { v6: k.addr == 16 });
        }
        return Some(McastFrame::Query);
    }
    if k.reports.contains(&t) || t == k.leave {
        if let Some(g) = group() {
            events(if t == k.leave {
                MdbEvent::Leave(g)
            } else {
                MdbEvent::Join(g)
            });
        }
    } else if t == k.records {
        let n = m.get(6..8).map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
        records(m, 8, n, k.addr, events);
    } else {
        return None;
    }
    Some(McastFrame::Report { v6: k.addr == 16 })
}

fn igmp(m: &[u8], src_set: bool, events: &mut impl FnMut(MdbEvent)) -> McastFrame {
    message(m, &IGMP, src_set, events).unwrap_or(McastFrame::Other)
}

/// `None` for an ICMPv6 message that is not MLD (the frame is then classified by its
/// destination).
fn mld(m: &[u8], src_set: bool, events: &mut impl FnMut(MdbEvent)) -> Option<McastFrame> {
    message(m, &MLD, src_set, events)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn g4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(239, 1, 1, last))
    }

    fn join(vid: u16, port: u16, g: IpAddr) -> MdbRequest {
        MdbRequest {
            vid,
            port,
            event: MdbEvent::Join(g),
        }
    }

    #[test]
    fn joins_publish_members_and_refreshes_publish_nothing() {
        let (mdb, mut w) = new(MdbConfig::default(), 1);
        assert!(mdb.request(join(10, 1, g4(1))));
        assert!(mdb.request(join(10, 2, g4(1))));
        w.service(0);
        let published = mdb.stats().published.get();
        mdb.with_view(|v| {
            let s = v.group(10, g4(1)).unwrap();
            assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 2]);
            assert!(v.group(20, g4(1)).is_none(), "groups are per VLAN");
        });
        w.apply(join(10, 1, g4(1)), 50);
        w.service(60);
        assert_eq!(mdb.stats().published.get(), published);
    }

    #[test]
    fn members_age_and_leaves_shorten_timers() {
        let cfg = MdbConfig::default();
        let (mdb, mut w) = new(cfg.clone(), 1);
        w.set_port(3, McastRouter::Learn, true);
        w.apply(join(1, 1, g4(1)), 0);
        w.apply(join(1, 2, g4(1)), 0);
        w.apply(join(1, 3, g4(1)), 0);
        w.publish();
        // Port 3 has fast leave: gone at once; port 2 after the last-member time.
        for p in [2, 3] {
            w.apply(
                MdbRequest {
                    vid: 1,
                    port: p,
                    event: MdbEvent::Leave(g4(1)),
                },
                1_000,
            );
        }
        w.service(1_000);
        let ports = |mdb: &Mdb| mdb.with_view(|v| v.group(1, g4(1)).map(|s| s.iter().collect::<Vec<_>>()));
        assert_eq!(ports(&mdb), Some(vec![1, 2]));
        w.service(1_000 + 2_000);
        assert_eq!(ports(&mdb), Some(vec![1]));
        w.service(cfg.multicast_membership_interval_ms);
        assert_eq!(ports(&mdb), None);
        assert_eq!(w.len(), 0);
        assert_eq!(mdb.stats().members_expired.get(), 3);
    }

    #[test]
    fn the_table_is_bounded() {
        let (mdb, mut w) = new(MdbConfig::default(), 1);
        w.cfg.multicast_hash_max = 3;
        for i in 0..5 {
            w.apply(join(1, 1, g4(i)), 0);
        }
        w.apply(join(1, 2, g4(0)), 0);
        assert_eq!(w.len(), 3);
        assert_eq!(mdb.stats().hash_max_reached.get(), 2);
    }

    #[test]
    fn queries_learn_router_ports_unless_disabled() {
        let (mdb, mut w) = new(MdbConfig::default(), 1);
        w.set_port(2, McastRouter::Disabled, false);
        w.set_port(5, McastRouter::Permanent, false);
        for p in [1, 2] {
            w.apply(
                MdbRequest {
                    vid: 7,
                    port: p,
                    event: MdbEvent::Query { v6: false },
                },
                0,
            );
        }
        w.publish();
        mdb.with_view(|v| {
            assert!(v.vlan(7, true).is_none(), "an IGMP querier is no MLD querier");
            let s = v.vlan(7, false).unwrap();
            assert!(s.querier);
            assert_eq!(s.routers.iter().collect::<Vec<_>>(), vec![1, 5]);
        });
        w.service(MdbConfig::default().multicast_querier_interval_ms);
        mdb.with_view(|v| assert!(v.vlan(7, false).is_none()));
    }

    #[test]
    fn v3_records_are_read_any_source() {
        // Three records: TO_EX 239.1.1.1 (join), IS_IN {} 239.1.1.2 (leave), ALLOW {one
        // source} 239.1.1.3 (join), then a record cut short.
        let mut m = vec![IGMP_V3_REPORT, 0, 0, 0, 0, 0, 0, 4];
        m.extend([4, 0, 0, 0, 239, 1, 1, 1]);
        m.extend([1, 0, 0, 0, 239, 1, 1, 2]);
        m.extend([5, 0, 0, 1, 239, 1, 1, 3, 10, 0, 0, 1]);
        m.extend([4, 0, 0, 0, 239]);
        let mut ev = Vec::new();
        assert_eq!(igmp(&m, true, &mut |e| ev.push(e)), McastFrame::Report { v6: false });
        assert_eq!(
            ev,
            vec![MdbEvent::Join(g4(1)), MdbEvent::Leave(g4(2)), MdbEvent::Join(g4(3))]
        );
    }

    #[test]
    fn link_local_groups_are_never_snooped() {
        assert!(is_unsnooped_group("224.0.0.251".parse().unwrap()));
        assert!(is_unsnooped_group("ff02::1".parse().unwrap()));
        assert!(!is_unsnooped_group("ff02::fb".parse().unwrap()));
        assert!(!is_unsnooped_group("239.255.255.250".parse().unwrap()));
        let mut ev = Vec::new();
        igmp(&[IGMP_V2_REPORT, 0, 0, 0, 224, 0, 0, 251], true, &mut |e| ev.push(e));
        assert!(ev.is_empty());
    }
}
