//! The run's set of bridge ports, and ports added to it while workers forward
//! (`freeway ctl reload` of a file with a new `[[port]]`).
//!
//! Capacity: every table indexed by bridge port that workers read without a lock is sized
//! once, at start, for [`PORT_INDEXES`] indexes: [`MAX_PORTS`] ports opened in a run (those
//! configured at start and those added later), plus the router's. That is the bridge's ports
//! and VLAN view, the ports' MTUs and every worker's per-port counters. A worker's own
//! per-port state (transmit queues, batches, next-stage edges) grows when it takes a port,
//! between batches, on its own thread.
//!
//! Indexes: the ports configured at start are 0..N in file order; the router's internal
//! port is N for the whole run; a port added later takes the next index never used in this
//! run (indexes are never reused, so a learned FDB entry or a counter always means one
//! port). A run that has opened [`MAX_PORTS`] ports refuses more until a restart.
//!
//! Adding a port ([`Adder::add`], on the control thread): it is opened as at start
//! (`open_port`, one transmit queue per worker), its bridge settings and MTU set at its
//! index, its name and counters made visible to `stats`; then each worker is handed its
//! transmit queue, and the least-loaded worker (fewest receive queues) its receive queues,
//! through a bounded channel per worker ([`Handover`]) that the worker looks at once per
//! round of polls (a sleeping worker wakes for its queues' frames or at its sleep's
//! timeout, at most 100 ms). Only once every running worker took it is the port's VLAN
//! membership published, so no worker floods to a port it has no queue for (a frame for an
//! index a worker does not know yet is a counted transmit drop, never a panic). From then
//! on it learns and forwards like the others.
//!
//! Removing a port ([`Adder::remove`]): its VLAN membership is published empty first (from
//! its next batch no worker floods or forwards to it, and frames it still receives are
//! dropped as not members), then every worker drops its queues through the same hand-over,
//! then it is closed and the FDB flushed of its entries (static ones too); a static entry
//! naming it is refused from then on. Its counters stay readable in `stats` (frozen, as
//! `NAME (removed)`) until a restart, and its index is never used again. A port whose kind or settings changed is
//! removed, then added again under a new index.
//!
//! Threads: [`Adder`] lives on the control thread; [`Handover`] messages go to workers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use freeway_bridge::vlan::VlanSet;
use freeway_bridge::{Bridge, Layout, PortVlan};
use freeway_io::{Port, PortQueues, RxQueue, TxQueue};
use freeway_packet::{Batch, PacketPool};

use super::mtu::PortMtus;
use crate::config::PortSpec;
pub(crate) use crate::config::MAX_PORTS;

/// Bridge port indexes a run has room for: [`MAX_PORTS`] ports and the router's.
pub(crate) const PORT_INDEXES: usize = MAX_PORTS + 1;

/// The name of the router's internal bridge port (as FDB dumps show it).
pub(crate) const ROUTER_NAME: &str = "(router)";

/// The VLAN mode of an index no port holds: a member of no VLAN (nothing floods to it, a
/// frame from it is dropped as not a member).
pub(crate) fn no_vlan() -> PortVlan {
    PortVlan::Trunk {
        allowed: Box::new(VlanSet::default()),
        native: None,
    }
}

/// `vlans` (by bridge port index) padded to [`PORT_INDEXES`] with [`no_vlan`].
pub(crate) fn padded(vlans: &[PortVlan]) -> Vec<PortVlan> {
    let mut v = vlans.to_vec();
    v.resize_with(PORT_INDEXES.max(v.len()), no_vlan);
    v
}

/// An open port of the run: its bridge index, name, kind, and the port (for its own
/// counters and its close at the end).
pub(crate) struct RunPort {
    pub(crate) index: u16,
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) port: Box<dyn Port>,
    /// Removed by a reload, and closed: its counters stay in `stats` until a restart, its
    /// name there `NAME (removed)`.
    pub(crate) removed: bool,
}

/// The run's open ports, in index order (shared by `stats` and the control thread; never
/// locked by a worker).
pub(crate) type RunPorts = Arc<Mutex<Vec<RunPort>>>;

/// What the control thread hands a worker, taken between batches; `taken` is counted up by
/// each worker that took its hand-over.
pub(crate) enum Handover {
    /// A port added at `index`: the worker's transmit queue for it, and receive queues for
    /// it to poll (none for all but one worker).
    Add {
        index: u16,
        tx: Box<dyn TxQueue>,
        rx: Vec<Box<dyn RxQueue>>,
        taken: Arc<AtomicUsize>,
    },
    /// The port at `index` removed: the worker stops polling its receive queues and drops
    /// its transmit queue (what is emitted there afterwards is a counted transmit drop).
    Remove { index: u16, taken: Arc<AtomicUsize> },
}

/// The transmit queue of an index a worker holds no port for (the router's, or one not
/// taken yet): accepts nothing, so what reaches it is a counted transmit drop.
pub(crate) struct Absent;

impl TxQueue for Absent {
    fn tx_burst(&mut self, batch: &mut Batch, pool: &mut PacketPool) -> usize {
        pool.put_batch(batch);
        0
    }
}

/// The longest [`Adder::add`] waits for every running worker to take a new port (a sleeping
/// worker takes it at its sleep's timeout, 100 ms at most).
const TAKE_WAIT: Duration = Duration::from_secs(5);

/// Adds ports to a running datapath (the control thread's side of the hand-over).
pub(crate) struct Adder {
    /// Each worker's hand-over channel.
    pub(crate) to_workers: Vec<Sender<Handover>>,
    /// Each worker's receive queues (for the least-loaded choice).
    pub(crate) rx_load: Vec<usize>,
    /// The next index never used in this run.
    pub(crate) next_index: usize,
    /// The run's open ports.
    pub(crate) ports: RunPorts,
    /// Multicast snooping runs (its per-port settings are fixed for a run).
    pub(crate) snooping: bool,
    /// The indexes of the ports removed.
    pub(crate) removed: Vec<usize>,
}

/// Each worker's end of its hand-over channel, and the control thread's ends.
pub(crate) fn channels(nworkers: usize) -> (Vec<Sender<Handover>>, Vec<Receiver<Handover>>) {
    (0..nworkers).map(|_| crossbeam_channel::bounded(16)).unzip()
}

impl Adder {
    /// Opens the port `spec` and hands it to the workers; returns its bridge index. Its VLAN
    /// membership is `vlans` extended with it, published once every worker took it; `vlans`
    /// then holds it. A setting this run cannot give an added port is refused, naming it.
    pub(crate) fn add<L: Layout>(
        &mut self,
        spec: &PortSpec,
        bridge: &Bridge<L>,
        mtus: &PortMtus,
        vlans: &mut Vec<PortVlan>,
    ) -> Result<u16, String> {
        let index = self.next_index;
        if index >= PORT_INDEXES {
            return Err(format!(
                "this run has opened {MAX_PORTS} ports, the most a run holds (indexes are never reused): restart to add more"
            ));
        }
        if index != vlans.len() {
            return Err(format!("port index {index} does not follow the {} known", vlans.len()));
        }
        let restart = |what: &str| Err(format!("{what} is fixed when a run starts: restart to add this port"));
        if spec.zone != 0 {
            return restart("a port's conntrack zone");
        }
        if spec.group_fwd_mask != 0 || spec.storm.is_set() {
            return restart("a port's group_fwd_mask and storm control");
        }
        if self.snooping && spec.mcast != Default::default() {
            return restart("with multicast snooping, a port's multicast_router and fast_leave");
        }
        let i16 = index as u16;
        mtus.add(index, spec)?;
        let mut port = super::start::open_port(spec).map_err(|e| e.0)?;
        let n = self.to_workers.len();
        let PortQueues { rx, tx } = port
            .open(n)
            .map_err(|e| format!("cannot open: {}", super::start::open_error(spec.kind, &e)))?;
        if tx.len() != n {
            return Err(format!("gave {} transmit queues for {n} workers", tx.len()));
        }
        bridge.set_port_flags(i16, spec.flags)?;
        // Receive queues to the least-loaded worker first, then round the others.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|w| self.rx_load[*w]);
        let mut rx_of: Vec<Vec<Box<dyn RxQueue>>> = (0..n).map(|_| Vec::new()).collect();
        for (q, r) in rx.into_iter().enumerate() {
            rx_of[order[q % n]].push(r);
        }
        let taken = Arc::new(AtomicUsize::new(0));
        let mut sent = 0;
        let mut left: Vec<Box<dyn RxQueue>> = Vec::new();
        for (w, (t, mut r)) in tx.into_iter().zip(rx_of).enumerate() {
            r.append(&mut left);
            let nrx = r.len();
            let h = Handover::Add {
                index: i16,
                tx: t,
                rx: r,
                taken: taken.clone(),
            };
            match self.to_workers[w].send_timeout(h, TAKE_WAIT) {
                Ok(()) => {
                    sent += 1;
                    self.rx_load[w] += nrx;
                }
                // A worker that ended (its inputs done) takes nothing: its receive queues go
                // to the next worker.
                Err(e) => {
                    if let Handover::Add { rx, .. } = e.into_inner() {
                        left = rx;
                    }
                }
            }
        }
        if sent == 0 {
            return Err("no worker is running".into());
        }
        // Handed out: the index is this port's for the run, whatever comes next.
        self.next_index += 1;
        if !wait_taken(&taken, sent) {
            // Published all the same: a worker that has not taken it yet counts what it
            // would send there as transmit drops until it does.
            tracing::warn!(port = %spec.name, "not every worker took the added port within {TAKE_WAIT:?}");
        }
        self.ports.lock().unwrap_or_else(|e| e.into_inner()).push(RunPort {
            index: i16,
            name: spec.name.clone(),
            kind: spec.kind.name(),
            port,
            removed: false,
        });
        vlans.push(spec.vlan.clone());
        bridge.set_port_vlans(padded(vlans))?;
        Ok(i16)
    }
}

impl Adder {
    /// Removes the port at `index`: its VLAN membership is published empty (no worker floods
    /// or forwards to it from its next batch, and what it receives is dropped), then every
    /// worker stops polling it and drops its transmit queue, then the port is closed. Its
    /// counters stay in `stats`; its index is never used again. `vlans[index]` becomes
    /// [`no_vlan`]. The FDB's entries on it are the caller's to flush.
    pub(crate) fn remove<L: Layout>(
        &mut self,
        index: u16,
        bridge: &Bridge<L>,
        vlans: &mut [PortVlan],
    ) -> Result<(), String> {
        let i = usize::from(index);
        let v = vlans.get_mut(i).ok_or(format!("no port index {i}"))?;
        *v = no_vlan();
        bridge.set_port_vlans(padded(vlans))?;
        let taken = Arc::new(AtomicUsize::new(0));
        let sent = self
            .to_workers
            .iter()
            .filter(|w| {
                let h = Handover::Remove {
                    index,
                    taken: taken.clone(),
                };
                w.send_timeout(h, TAKE_WAIT).is_ok()
            })
            .count();
        if !wait_taken(&taken, sent) {
            return Err(format!(
                "not every worker let the port go within {TAKE_WAIT:?}: it is out of every VLAN, and closes at the end of the run"
            ));
        }
        self.removed.push(i);
        let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        let p = ports
            .iter_mut()
            .find(|p| p.index == index && !p.removed)
            .ok_or(format!("no open port at index {i}"))?;
        p.removed = true;
        // Its counters stay in `stats` under this name (a port added again under its old
        // name is another port, with counters of its own).
        p.name = format!("{} (removed)", p.name);
        p.port.close().map_err(|e| format!("closing it: {e}"))
    }
}

/// Waits until `sent` workers took a hand-over (`taken`), [`TAKE_WAIT`] at most; whether
/// they all did.
fn wait_taken(taken: &AtomicUsize, sent: usize) -> bool {
    let since = Instant::now();
    while taken.load(Ordering::Acquire) < sent {
        if since.elapsed() > TAKE_WAIT {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Whether a worker's channel has a port for it; `try_recv` on an empty channel reads, never
/// writes, shared memory.
#[inline]
pub(crate) fn poll_handover(rx: &Receiver<Handover>) -> Option<Handover> {
    rx.try_recv().ok()
}
