//! The router inside the datapath: router interfaces as one more port of the bridge.
//!
//! Router interfaces are SVIs: each sits on a bridge VLAN. The router is attached to the
//! bridge as an internal **router port** (index `nports`, after the configured ports), a
//! tagged member of every interface VLAN, with a static FDB entry `(router MAC, VLAN) →
//! router port` per interface. So the bridge itself delivers to the router what it should
//! see: unicast frames to the router MAC, and flooded broadcasts and multicasts of those
//! VLANs (ARP requests, neighbour solicitations). Frames the router sends (forwarded
//! packets, ARP/ND, ICMP) re-enter the bridge *from* the router port, tagged with the
//! egress interface's VLAN, and the bridge delivers them (FDB lookup, untagging for access
//! ports, flooding for broadcasts).
//!
//! Per worker, [`RouterWorker::run`] runs right after the bridge pass of a batch: it takes
//! the frames the bridge queued for the router port, drops silently the flooded frames the
//! router does not want ([`freeway_l3::Wants::NotOurs`]), runs the L3 stage on the rest
//! (route lookup through the per-worker [`RouteCache`], neighbour resolution, rewrite), and
//! bridges what the stage emits. Everything stays on the worker's thread, in its batch.
//! Before it does, it compares the generation of the published interfaces
//! ([`LiveInterfaces`], one load) with its own and takes up a reload's new addresses.
//!
//! Threads: [`RouterWorker`] is owned by one worker. The RIB ([`Rib`]) is the control side,
//! kept by the runtime's caller thread; the neighbour writer runs on its own thread
//! (`fw-neigh`), fed by the workers through the neighbour table's bounded queue.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use freeway_l3::neigh::{NeighConfig, NeighWriter};
use freeway_l3::{
    FilterHook, FilterVerdict, Interface, Interfaces, L3Config, L3Drop, L3Out, L3Worker, LiveInterfaces, NatHook,
    Neigh, Punt, RouteLookup, Wants,
};
use freeway_packet::{meta_flags, parse, Batch, Packet, PacketPool, MAX_BATCH};
use freeway_route::{Fib, FibConfig, Guard, NextHop, Prefix, Rib, Route, RouteCache};
use freeway_sync::Tick;

use super::firewall::FwHook;
use super::RunError;
use crate::config::l3::RouterSpec;

/// Route cache slots per family per worker.
const ROUTE_CACHE_ENTRIES: usize = 4096;

/// Rounds of router → bridge → router in one batch (a frame the router emits never comes
/// back to the router port through the bridge, so one round suffices; the bound makes it
/// certain).
const MAX_ROUNDS: usize = 2;

/// The router's shared state, built from the config.
pub(crate) struct RouterShared {
    /// The interfaces as the run started (immutable, shared with workers).
    pub ifaces: Arc<Interfaces>,
    /// The current interfaces: a reload that changes addresses publishes a new version here.
    pub live: Arc<LiveInterfaces>,
    /// The bridge port index of the router.
    pub port: u16,
    /// The FIB workers read.
    pub fib: Fib,
    /// The neighbour table's read side.
    pub neigh: Neigh,
    /// Settings of each worker's L3 stage.
    pub l3: L3Config,
    /// Whether workers use the route cache.
    pub cache: bool,
    /// The interfaces' kernel twins (`[linux] punt`).
    pub twins: Option<Arc<freeway_linuxcp::Twins>>,
}

/// Builds the router: interfaces on the router port `port`, the RIB with connected and
/// configured routes, the neighbour table with the static entries.
pub(crate) fn build(spec: &RouterSpec, port: u16, now: Tick) -> Result<(RouterShared, Rib, NeighWriter), RunError> {
    let list = spec
        .interfaces
        .iter()
        .map(|i| {
            let mut it = Interface::new(i.name.clone(), port, Some(i.vlan), i.mac.0).with_mtu(i.mtu);
            for (a, l) in &i.v4 {
                it = it.with_v4(*a, *l);
            }
            for (a, l) in &i.v6 {
                it = it.with_v6(*a, *l);
            }
            it
        })
        .collect();
    let ifaces = Arc::new(Interfaces::new(list).map_err(|e| RunError(format!("router interfaces: {e}")))?);
    let (mut rib, fib) = Rib::new(FibConfig::default());
    for c in ifaces.connected_prefixes() {
        let p = Prefix::new_truncate(c.prefix, c.len).map_err(|e| RunError(format!("connected route: {e}")))?;
        // Two addresses of one subnet on one interface give the same connected route.
        let _ = rib.add(Route::connected(p, c.iface));
    }
    for r in &spec.routes {
        let p = Prefix::new_truncate(r.dst, r.len).map_err(|e| RunError(format!("route {}/{}: {e}", r.dst, r.len)))?;
        let hops = r
            .hops
            .iter()
            .map(|h| freeway_route::NextHop {
                iface: h.iface as u16,
                gateway: h.gateway,
            })
            .collect();
        rib.replace(Route::new(p, hops))
            .map_err(|e| RunError(format!("route {p}: {e}")))?;
    }
    let (neigh, mut nw) = freeway_l3::neigh::new(NeighConfig {
        limit: spec.neigh_limit,
        ..NeighConfig::default()
    });
    for n in &spec.neighs {
        nw.add_static(n.ip, n.iface as u16, n.mac.0, now)
            .map_err(|e| RunError(format!("neigh {}: {e}", n.ip)))?;
    }
    let l3 = L3Config {
        icmp_rate: spec.icmp_rate,
        icmp_burst: spec.icmp_burst,
        ..L3Config::default()
    };
    Ok((
        RouterShared {
            live: Arc::new(LiveInterfaces::new(ifaces.clone())),
            ifaces,
            port,
            fib,
            neigh,
            l3,
            cache: spec.route_cache,
            twins: None,
        },
        rib,
        nw,
    ))
}

/// The routes as the L3 stage sees them: the worker's route cache over the FIB, under the
/// batch's epoch guard.
struct Lookup<'a> {
    fib: &'a Fib,
    guard: &'a Guard,
    cache: &'a mut RouteCache,
}

impl RouteLookup for Lookup<'_> {
    #[inline]
    fn lookup_v4(&mut self, dst: Ipv4Addr, flow_hash: u32) -> Option<NextHop> {
        self.cache.lookup_v4_in(self.fib, self.guard, dst, flow_hash)
    }

    #[inline]
    fn lookup_v6(&mut self, dst: Ipv6Addr, flow_hash: u32) -> Option<NextHop> {
        self.cache.lookup_v6_in(self.fib, self.guard, dst, flow_hash)
    }
}

/// Where the L3 stage's output goes: back into the bridge, from the router port; and the
/// firewall it asks at its hooks.
struct ToBridge<'a> {
    pool: &'a mut PacketPool,
    out: &'a mut Vec<Packet>,
    fw: Option<&'a mut FwHook>,
    twins: Option<&'a freeway_linuxcp::Twins>,
}

impl L3Out for ToBridge<'_> {
    #[inline]
    fn pool(&mut self) -> &mut PacketPool {
        self.pool
    }

    #[inline]
    fn emit(&mut self, _port: u16, pkt: Packet) {
        self.out.push(pkt);
    }

    #[inline]
    fn emit_on_vlan(&mut self, _port: u16, pkt: Packet, vlan: u16) {
        // The field is stored into the queued copy, after the move (see the trait's doc).
        self.out.push(pkt);
        if let Some(p) = self.out.last_mut() {
            p.meta.vlan = vlan;
        }
    }

    fn punt(&mut self, iif: u16, pkt: &Packet) -> Punt {
        let Some(t) = self.twins else {
            return Punt::NoTwin;
        };
        let (f, l3) = (pkt.data(), usize::from(pkt.meta.l3_off));
        if pkt.meta.l3_off == freeway_packet::NO_OFFSET || l3 < 14 || l3 > f.len() {
            return Punt::Failed;
        }
        // The frame without its VLAN tag: the MAC addresses, then from the EtherType on.
        match t.send(iif, [&f[..12], &f[l3 - 2..]]) {
            None => Punt::NoTwin,
            Some(true) => Punt::Sent,
            Some(false) => Punt::Failed,
        }
    }

    #[inline]
    fn filter(&mut self, hook: FilterHook, pkt: &Packet, iif: u16, oif: u16) -> FilterVerdict {
        match self.fw.as_deref_mut() {
            Some(fw) => fw.judge(hook, pkt, iif, oif),
            None => FilterVerdict::Accept,
        }
    }

    #[inline]
    fn nat(&mut self, hook: NatHook, pkt: &mut Packet, iif: u16, oif: u16) -> Result<(), L3Drop> {
        match self.fw.as_deref_mut() {
            Some(fw) => fw.nat(hook, pkt, iif, oif),
            None => Ok(()),
        }
    }
}

/// One worker's router: its L3 stage, route cache and the frames in flight.
pub(crate) struct RouterWorker {
    pub l3: L3Worker,
    pub cache: RouteCache,
    fib: Fib,
    ifaces: Arc<Interfaces>,
    /// Where a reload publishes new interfaces, and the generation `ifaces` is of.
    live: Arc<LiveInterfaces>,
    ifaces_gen: u64,
    port: u16,
    /// Frames the router emitted, to be bridged from the router port.
    outbox: Vec<Packet>,
    batch: Batch,
    /// The nftables firewall, when a ruleset is loaded.
    fw: Option<FwHook>,
    /// The interfaces' kernel twins (punt path), if any.
    twins: Option<Arc<freeway_linuxcp::Twins>>,
    /// Whether this worker routes out what the twins send (one worker does).
    serve_twins: bool,
}

/// What the router hands back to the pipeline between its steps.
pub(crate) trait Bridging {
    /// The worker's pool.
    fn pool(&mut self) -> &mut PacketPool;
    /// Takes the frames on the edge to the router stage (appends them to `into`).
    fn take_for_router(&mut self, into: &mut Vec<Packet>);
    /// Bridges `batch` (parsed, received on the router port).
    fn bridge(&mut self, batch: &mut Batch, now: Tick);
    /// Counts one more parse of a frame (the stage's own frames).
    fn parsed(&mut self);
}

impl RouterWorker {
    /// A worker's router over `shared`, judging with `fw` when a ruleset is loaded; `first`:
    /// the worker that routes out what the kernel twins send.
    pub fn new(shared: &RouterShared, mut fw: Option<FwHook>, first: bool) -> RouterWorker {
        let (ifaces_gen, ifaces) = shared.live.current();
        if let Some(fw) = fw.as_mut() {
            fw.set_interfaces(&ifaces);
        }
        RouterWorker {
            l3: L3Worker::new(ifaces.clone(), shared.neigh.clone(), shared.l3.clone()),
            cache: RouteCache::new(ROUTE_CACHE_ENTRIES, shared.cache),
            fib: shared.fib.clone(),
            ifaces,
            live: shared.live.clone(),
            ifaces_gen,
            port: shared.port,
            outbox: Vec::with_capacity(4 * MAX_BATCH),
            batch: Batch::default(),
            fw,
            twins: shared.twins.clone(),
            serve_twins: first && shared.twins.is_some(),
        }
    }

    /// Allocates the worker's buffers (call on the worker's own thread).
    pub fn on_thread(&mut self) {
        self.batch = Batch::new();
    }

    /// Routes what the bridge queued for the router port, then bridges what the router
    /// emits. `inbox` is scratch space owned by the caller.
    pub fn run(&mut self, now: Tick, br: &mut impl Bridging, inbox: &mut Vec<Packet>) {
        if self.live.generation() != self.ifaces_gen {
            self.take_interfaces();
        }
        if self.serve_twins {
            self.route_twins_output(now, br);
        }
        for _ in 0..MAX_ROUNDS {
            br.take_for_router(inbox);
            if inbox.is_empty() && self.outbox.is_empty() {
                return;
            }
            self.route(now, br.pool(), inbox);
            self.bridge_out(now, br);
        }
        // Whatever is still queued for the router waits for the next batch (bounded: the
        // bridge queues at most one frame per frame it bridges).
    }

    /// Takes up the interfaces a reload published (their addresses changed), and with them
    /// masquerade's source addresses.
    #[cold]
    fn take_interfaces(&mut self) {
        let (gen, ifaces) = self.live.current();
        if let Some(fw) = self.fw.as_mut() {
            fw.set_interfaces(&ifaces);
        }
        self.l3.set_interfaces(ifaces.clone());
        self.ifaces = ifaces;
        self.ifaces_gen = gen;
    }

    /// Sends what waited for a neighbour and has resolved, or expired (idle workers call
    /// this now and then; a busy worker's L3 stage polls at every batch).
    pub fn poll(&mut self, now: Tick, br: &mut impl Bridging) {
        if self.serve_twins {
            self.route_twins_output(now, br);
        }
        self.l3.poll(
            now,
            &mut ToBridge {
                pool: br.pool(),
                out: &mut self.outbox,
                fw: None,
                twins: None,
            },
        );
        self.bridge_out(now, br);
    }

    /// Whether [`RouterWorker::poll`] has nothing due until a frame comes: no packet waits
    /// for a neighbour, and this worker does not route out what the kernel twins send (which
    /// arrives from another thread without waking it).
    pub fn quiet(&self) -> bool {
        !self.serve_twins && !self.l3.has_pending()
    }

    /// Routes out what the kernel twins sent (at most a batch's worth), then bridges it.
    fn route_twins_output(&mut self, now: Tick, br: &mut impl Bridging) {
        let Some(t) = self.twins.as_deref() else { return };
        if !t.pending() {
            return;
        }
        let guard = Fib::pin();
        for _ in 0..MAX_BATCH {
            let Some((iface, frame)) = t.pop() else { break };
            let mut p = br.pool().get();
            br.parsed();
            if p.set_frame(&frame).is_err() || parse(&mut p).is_err() {
                br.pool().put(p);
                continue;
            }
            p.meta.in_port = self.port;
            let mut routes = Lookup {
                fib: &self.fib,
                guard: &guard,
                cache: &mut self.cache,
            };
            let out = &mut ToBridge {
                pool: br.pool(),
                out: &mut self.outbox,
                fw: None,
                twins: None,
            };
            self.l3.output(p, iface, &mut routes, now, out);
        }
        drop(guard);
        self.bridge_out(now, br);
    }

    fn route(&mut self, now: Tick, pool: &mut PacketPool, inbox: &mut Vec<Packet>) {
        let guard = Fib::pin();
        if let Some(fw) = self.fw.as_mut() {
            fw.refresh(now);
        }
        let mut it = inbox.drain(..);
        loop {
            for p in it.by_ref() {
                if self.ifaces.wants_at(self.port, &p) == Wants::NotOurs {
                    // A flooded frame for someone else: not the router's business.
                    pool.put(p);
                    continue;
                }
                // Cannot fail: the batch is drained below whenever it is full.
                let _ = self.batch.push(p);
                // `in_port` is stored into the batch's copy, after the move: a narrow store
                // into the packet right before moving it stalls the move's loads
                // (store-to-load forwarding fails).
                set_in_port(&mut self.batch, self.port);
                if self.batch.is_full() {
                    break;
                }
            }
            if self.batch.is_empty() {
                break;
            }
            let mut routes = Lookup {
                fib: &self.fib,
                guard: &guard,
                cache: &mut self.cache,
            };
            self.l3.process(
                &mut self.batch,
                &mut routes,
                now,
                &mut ToBridge {
                    pool,
                    out: &mut self.outbox,
                    fw: self.fw.as_mut(),
                    twins: self.twins.as_deref(),
                },
            );
        }
    }

    fn bridge_out(&mut self, now: Tick, br: &mut impl Bridging) {
        while !self.outbox.is_empty() {
            let take = self.outbox.len().min(MAX_BATCH);
            for mut p in self.outbox.drain(..take) {
                // A forwarded frame's metadata was kept consistent through the stage's
                // rewrite (addresses, tags, TTL), and frames the stage built (ARP/ND, ICMP)
                // were parsed when built: the bridge trusts both. Only a frame changed in
                // place without its metadata (an echo or ARP reply) is parsed here.
                if p.meta.flags & meta_flags::PARSED == 0 {
                    br.parsed();
                    if parse(&mut p).is_err() {
                        br.pool().put(p);
                        continue;
                    }
                }
                let _ = self.batch.push(p);
                set_in_port(&mut self.batch, self.port);
            }
            br.bridge(&mut self.batch, now);
        }
    }
}

/// Stores `port` as the `in_port` of the packet last pushed to `batch`: the field is written
/// in the batch after the move, not in the packet before it (see `RouterWorker::route`).
#[inline(always)]
fn set_in_port(batch: &mut Batch, port: u16) {
    if let Some(p) = batch.as_mut_slice().last_mut() {
        p.meta.in_port = port;
    }
}
