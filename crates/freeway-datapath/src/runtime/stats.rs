//! Counters: each worker's single-writer blocks, and the snapshots that sum them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use freeway_bridge::{BridgeCounters, Layout};
use freeway_conntrack::{CtStats, FwStats};
use freeway_frag::{FragCounters, FragStats};
use freeway_l3::{L3Counters, L3Stats};
use freeway_packet::ParseError;
use freeway_route::cache::CacheCounters;
use freeway_sync::{CachePadded, Counter};
use serde::Serialize;

/// Per-port counters of one worker.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Frames received.
    pub rx_packets: Counter,
    /// Bytes received.
    pub rx_bytes: Counter,
    /// Frames handed to the transmit queue and accepted.
    pub tx_packets: Counter,
    /// Bytes transmitted.
    pub tx_bytes: Counter,
    /// Frames the transmit queue refused.
    pub tx_dropped: Counter,
    /// Frames larger than the port's MTU, dropped before its transmit queue (L2 never
    /// fragments).
    pub tx_over_mtu: Counter,
}

/// One worker's counters. Single writer: that worker.
#[derive(Debug)]
pub struct WorkerStats {
    /// Frames received by this worker.
    pub packets: Counter,
    /// Non-empty batches processed.
    pub batches: Counter,
    /// Frames the pipeline parsed: one per frame received, plus any frame a stage handed on
    /// without consistent metadata; a forwarded frame is never parsed twice (frames the
    /// router builds are parsed once, when built).
    pub parses: Counter,
    /// Polls of all queues that found nothing.
    pub idle_polls: Counter,
    /// Times the worker slept in `poll()` on its queues' descriptors, idle.
    pub sleeps: Counter,
    /// Sleeps a frame ended (the others ran to their timeout).
    pub wakeups: Counter,
    /// Parser drops, indexed by `ParseError as usize` (inline, on this worker's lines).
    pub parse_drops: [Counter; ParseError::ALL.len()],
    /// Per-port counters.
    pub ports: Box<[CachePadded<PortCounters>]>,
    /// The bridge stage's counters.
    pub bridge: Arc<CachePadded<BridgeCounters>>,
    /// The L3 stage's counters (with a router).
    pub l3: Option<Arc<CachePadded<L3Counters>>>,
    /// The route cache's counters (with a router).
    pub route_cache: Option<Arc<CachePadded<CacheCounters>>>,
    /// The reassembler's counters (when fragments are reassembled).
    pub frag: Option<Arc<CachePadded<FragCounters>>>,
}

/// Port counters summed over workers.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PortSnap {
    /// Port name.
    pub name: String,
    /// Port kind.
    pub kind: &'static str,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames refused by the transmit queue.
    pub tx_dropped: u64,
    /// Frames larger than the port's MTU, dropped before its transmit queue.
    pub tx_over_mtu: u64,
    /// Frames the port lost on receive before any worker saw them (sum of `rx_drops`).
    pub rx_dropped: u64,
    /// Those losses by reason (`too_big`, `kernel`), only non-zero ones.
    pub rx_drops: BTreeMap<&'static str, u64>,
    /// The port's own counters (AF_PACKET ring and kernel statistics, pcap records, ...).
    pub counters: BTreeMap<&'static str, u64>,
}

/// One worker's totals.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct WorkerSnap {
    /// Worker index.
    pub id: usize,
    /// Core it is pinned to.
    pub core: Option<usize>,
    /// Frames received.
    pub packets: u64,
    /// Batches processed.
    pub batches: u64,
    /// Frames the pipeline parsed (see [`WorkerStats::parses`]).
    pub parses: u64,
    /// Empty polls.
    pub idle_polls: u64,
    /// Sleeps in `poll()` while idle (see [`WorkerStats::sleeps`]).
    pub sleeps: u64,
    /// Sleeps ended by a frame.
    pub wakeups: u64,
}

/// A point-in-time sum of every counter.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Snapshot {
    /// Seconds since the workers started.
    pub elapsed_s: f64,
    /// Per port.
    pub ports: Vec<PortSnap>,
    /// Per worker.
    pub workers: Vec<WorkerSnap>,
    /// Bridge stage counters, summed.
    pub bridge: BTreeMap<&'static str, u64>,
    /// Parser drops by reason (only non-zero ones).
    pub parse_drops: BTreeMap<&'static str, u64>,
    /// FDB entries.
    pub fdb_entries: usize,
    /// FDB writer counters.
    pub fdb: BTreeMap<&'static str, u64>,
    /// Multicast snooping: groups in the table and the writer's counters (with snooping on).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub mdb: BTreeMap<&'static str, u64>,
    /// The router's counters, summed over workers (with a router).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterSnap>,
    /// Connection tracking (when configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<CtStats>,
    /// Firewall verdicts (when configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firewall: Option<FwStats>,
    /// Fragment reassembly, summed over workers (when configured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reassembly: Option<FragStats>,
    /// Every drop, by stage and reason ([`Snapshot::drops`], filled in by the snapshot).
    pub drops: BTreeMap<String, u64>,
}

/// The router's counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RouterSnap {
    /// The L3 stage, summed over workers.
    pub l3: L3Stats,
    /// Route cache lookups answered from the cache.
    pub route_cache_hits: u64,
    /// Route cache misses (slot empty or another destination).
    pub route_cache_misses: u64,
    /// Route cache refills after a routing change (generation moved).
    pub route_cache_refills: u64,
    /// Full FIB lookups with the cache off.
    pub route_uncached: u64,
    /// Neighbour entries.
    pub neigh_entries: usize,
}

impl Snapshot {
    /// Every drop, by reason, including transmit drops (only non-zero).
    pub fn drops(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (k, v) in &self.parse_drops {
            m.insert(format!("parse:{k}"), *v);
        }
        for (k, v) in &self.bridge {
            if let Some(r) = k.strip_prefix("drop_") {
                if *v > 0 {
                    m.insert(format!("bridge:{r}"), *v);
                }
            }
        }
        if let Some(r) = &self.router {
            for (k, v) in &r.l3.drops {
                m.insert(format!("router:{k}"), *v);
            }
        }
        if let Some(f) = &self.firewall {
            for (k, v) in [
                ("invalid", f.drop_invalid),
                ("limit", f.drop_limit),
                ("new_not_allowed", f.drop_new_not_allowed),
            ] {
                if v > 0 {
                    m.insert(format!("firewall:{k}"), v);
                }
            }
        } else if let Some(c) = &self.conntrack {
            for (k, v) in &c.invalid_by_reason {
                if k.starts_with("limit") || k.starts_with("queue") {
                    m.insert(format!("conntrack:{k}"), *v);
                }
            }
        }
        if let Some(r) = &self.reassembly {
            for (k, v) in &r.drops {
                m.insert(format!("reassembly:{k}"), *v);
            }
            if r.refrag_failed > 0 {
                m.insert("reassembly:refrag_failed".into(), r.refrag_failed);
            }
        }
        for p in &self.ports {
            for (k, v) in &p.rx_drops {
                m.insert(format!("port:{}:{k}", p.name), *v);
            }
        }
        let tx: u64 = self.ports.iter().map(|p| p.tx_dropped).sum();
        if tx > 0 {
            m.insert("tx:queue_full".into(), tx);
        }
        let over: u64 = self.ports.iter().map(|p| p.tx_over_mtu).sum();
        if over > 0 {
            m.insert("bridge:egress_over_mtu".into(), over);
        }
        m
    }
}

/// Takes snapshots of a run's counters (the caller's thread and the control thread).
pub(crate) struct Snapper<L: Layout> {
    pub(crate) stats: Arc<[Arc<CachePadded<WorkerStats>>]>,
    pub(crate) cores: Arc<[Option<usize>]>,
    pub(crate) fdb: freeway_bridge::Fdb<L>,
    pub(crate) mdb: Option<freeway_bridge::Mdb>,
    pub(crate) neigh: Option<freeway_l3::Neigh>,
    pub(crate) ct: Option<freeway_conntrack::Conntrack>,
    pub(crate) fw: Option<freeway_conntrack::Firewall>,
    /// The ports themselves, with their bridge indexes and names, for their own counters
    /// (never locked by a worker; a port added by a reload joins them).
    pub(crate) ports: super::portset::RunPorts,
}

impl<L: Layout> Clone for Snapper<L> {
    fn clone(&self) -> Self {
        Snapper {
            stats: self.stats.clone(),
            cores: self.cores.clone(),
            fdb: self.fdb.clone(),
            mdb: self.mdb.clone(),
            neigh: self.neigh.clone(),
            ct: self.ct.clone(),
            fw: self.fw.clone(),
            ports: self.ports.clone(),
        }
    }
}

impl<L: Layout> Snapper<L> {
    /// Sums every counter now.
    pub(crate) fn snap(&self, elapsed: Duration) -> Snapshot {
        let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        let names: Vec<(usize, String, &'static str)> = ports
            .iter()
            .map(|p| (usize::from(p.index), p.name.clone(), p.kind))
            .collect();
        let mut s = snapshot(elapsed, &names, &self.stats, &self.cores, &self.fdb);
        if let Some(m) = &self.mdb {
            s.mdb = m.stats().snapshot().into_iter().collect();
            s.mdb.insert("groups", m.with_view(|v| v.len()) as u64);
        }
        if let Some(r) = &mut s.router {
            r.neigh_entries = self.neigh.as_ref().map_or(0, |n| n.len());
        }
        if let Some(ct) = &self.ct {
            s.conntrack = Some(ct.stats());
            s.firewall = self.fw.as_ref().map(|f| f.stats());
        }
        for (snap, port) in s.ports.iter_mut().zip(ports.iter().map(|p| &p.port)) {
            snap.counters = port.counters().into_iter().collect();
            for (k, v) in port.rx_drops() {
                if v > 0 {
                    snap.rx_drops.insert(k, v);
                    snap.rx_dropped += v;
                }
            }
        }
        s.drops = s.drops();
        s
    }
}

pub(crate) fn snapshot<L: Layout>(
    elapsed: Duration,
    names: &[(usize, String, &'static str)],
    stats: &[Arc<CachePadded<WorkerStats>>],
    cores: &[Option<usize>],
    fdb: &freeway_bridge::Fdb<L>,
) -> Snapshot {
    let mut s = Snapshot {
        elapsed_s: elapsed.as_secs_f64(),
        fdb_entries: fdb.len(),
        ..Default::default()
    };
    s.ports = names
        .iter()
        .map(|&(i, ref n, k)| {
            let mut p = PortSnap {
                name: n.clone(),
                kind: k,
                ..Default::default()
            };
            for w in stats {
                let c = &w.ports[i];
                p.rx_packets += c.rx_packets.get();
                p.rx_bytes += c.rx_bytes.get();
                p.tx_packets += c.tx_packets.get();
                p.tx_bytes += c.tx_bytes.get();
                p.tx_dropped += c.tx_dropped.get();
            }
            p.tx_over_mtu = stats.iter().map(|w| w.ports[i].tx_over_mtu.get()).sum();
            p
        })
        .collect();
    for (id, w) in stats.iter().enumerate() {
        s.workers.push(WorkerSnap {
            id,
            core: cores[id],
            packets: w.packets.get(),
            batches: w.batches.get(),
            parses: w.parses.get(),
            idle_polls: w.idle_polls.get(),
            sleeps: w.sleeps.get(),
            wakeups: w.wakeups.get(),
        });
        for (k, v) in w.bridge.snapshot() {
            *s.bridge.entry(k).or_default() += v;
        }
        for (r, c) in ParseError::ALL.iter().zip(w.parse_drops.iter()) {
            if c.get() > 0 {
                *s.parse_drops.entry(r.name()).or_default() += c.get();
            }
        }
        if let Some(f) = &w.frag {
            f.add_to(s.reassembly.get_or_insert_with(FragStats::default));
        }
        if let Some(l3) = &w.l3 {
            let r = s.router.get_or_insert_with(RouterSnap::default);
            r.l3.merge(&l3.snapshot());
            if let Some(c) = &w.route_cache {
                let c = c.snapshot();
                r.route_cache_hits += c.hits;
                r.route_cache_misses += c.misses;
                r.route_cache_refills += c.refills;
                r.route_uncached += c.uncached;
            }
        }
    }
    let f = fdb.stats();
    for (k, v) in [
        ("learned", f.learned.get()),
        ("limit_reached", f.limit_reached.get()),
        ("aged", f.aged.get()),
        ("deleted", f.deleted.get()),
        ("moved", f.moved.get()),
    ] {
        s.fdb.insert(k, v);
    }
    s
}
