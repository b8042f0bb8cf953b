//! The L2 stage: ingress VLAN classification, learning, lookup, forwarding and flooding.
//!
//! Runs on a worker thread, once per batch, to completion. Reads the FDB lock-free under one
//! epoch guard per batch; its only shared writes are those the packet's own flow demands
//! (an entry's timestamps at most once per tick, the port of a moved MAC). New addresses are
//! handed to the FDB writer through its bounded queue ([`Learning::Queue`]), or learned on the
//! spot by a worker that owns the writer ([`Learning::Inline`], offline runs and tests).
//!
//! Per packet, in order: drop if the source MAC is a group address; classify the VLAN by the
//! ingress port's mode (drop if filtered); learn or refresh the source; forward to the port of
//! a known unicast destination (drop if that is the ingress port), or flood broadcast,
//! multicast and unknown unicast to every other member port of the VLAN; tag or untag each
//! copy for its egress port. Within a batch, frames in a row from one station or to one
//! station look its FDB entry up once (the entry refreshed for the batch's tick by the
//! first), and frames to one (port, VLAN) take one egress verdict; a station move, an
//! address learned inline, a change of ingress port or a disabled port forgets both.
//! With IGMP/MLD snooping ([`crate::mdb`]), a multicast frame's
//! reports, leaves and queries go to the multicast database's writer (like learn requests),
//! and while its VLAN has a querier, a frame to a known group goes only to the group's
//! members and the VLAN's router ports, a report only to the router ports.
//!
//! Two protections for a real LAN, as switches have them: **BPDU guard** (a port flag): an
//! STP BPDU received on a guarded port, where no switch should be, disables the port (every
//! frame from or to it is dropped and counted) until the control plane enables it again;
//! the flag is one store by the worker that saw the BPDU, read from the port's own line by
//! every worker. **Storm control**: per port, broadcast, multicast and unknown-unicast
//! frames received beyond a rate are dropped and counted, by token buckets each worker keeps
//! for itself (no shared write; each worker gets an even share of the rate).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use freeway_packet::bytes::{rd16, wr16};
use freeway_packet::{vlan_pop, vlan_push, Batch, Packet, PacketPool, MAX_BATCH, NO_VLAN};
use freeway_sync::{CachePadded, Counter, Published, Tick, TokenBucket};

use crate::fdb::{Fdb, FdbWriter, LearnRequest};
use crate::layout::{Layout, Padded};
use crate::mdb::{self, McastFrame, Mdb, MdbRequest, PortSet};
use crate::table::{addr_words, key_of_word, unkey, Guard, Node, Table, GROUP_BIT};
use crate::vlan::PortVlan;

/// Where the stage sends packets. Implemented by the worker's per-port transmit batches.
pub trait Emit {
    /// The worker's buffer pool (for flood copies and dropped packets).
    fn pool(&mut self) -> &mut PacketPool;
    /// Queues `pkt` for transmission on `port`.
    fn emit(&mut self, port: u16, pkt: Packet);
    /// Queues every packet of `batch` for `port`, leaving `batch` empty. The stage calls this
    /// when a whole batch goes to one port, so an implementation can take the batch as it is
    /// instead of moving packets one by one.
    fn emit_batch(&mut self, port: u16, batch: &mut Batch) {
        for p in batch.drain() {
            self.emit(port, p);
        }
    }
}

/// How the stage learns new addresses.
pub enum Learning<'a, L: Layout = Padded> {
    /// Push requests to the FDB writer thread (live runs).
    Queue,
    /// Learn immediately with a writer this worker owns (offline runs, tests).
    Inline(&'a mut FdbWriter<L>),
    /// Change nothing in the FDB: no learning, no station moves, no timestamps
    /// (`freeway ctl trace` runs the real stage on the live table this way).
    ReadOnly,
}

macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident,)* }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub struct $name { $($(#[$fm])* pub $f: Counter,)* }
        impl $name {
            /// Every counter by name, for tables and JSON.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f.get()),)*]
            }
        }
    };
}

counters! {
    /// The stage's counters for one worker (single writer: that worker).
    BridgeCounters {
        /// Frames that entered the stage.
        rx,
        /// Frames sent to one known port.
        forwarded,
        /// Frames flooded (broadcast, multicast, unknown unicast).
        flooded,
        /// Of the flooded frames, unknown unicast.
        unknown_unicast,
        /// Copies transmitted by flooding.
        flood_copies,
        /// Dropped: source MAC is a group address.
        drop_src_multicast,
        /// Dropped: VLAN not allowed on the ingress port.
        drop_vlan_filtered,
        /// Dropped: the destination is on the ingress port.
        drop_same_port,
        /// Dropped: ingress port is not a bridge port.
        drop_bad_port,
        /// Dropped: the VLAN has no other member port.
        drop_flood_empty,
        /// Copies dropped: no room to add a VLAN tag.
        drop_no_headroom,
        /// Frames between two isolated ports.
        drop_isolated,
        /// IEEE 802.1D link-local control frames (to 01:80:c2:00:00:00–0f: STP BPDUs, PAUSE,
        /// LACP, LLDP, 802.1X) that the ingress port does not forward (its group_fwd_mask).
        drop_link_local,
        /// STP BPDUs received on a port with BPDU guard: each disabled the port.
        bpdu_guard,
        /// Frames from or to a port disabled by its BPDU guard.
        drop_port_disabled,
        /// Broadcast, multicast and unknown-unicast frames over their port's storm-control
        /// rate.
        drop_storm,
        /// Multicast frames forwarded by snooping: to a known group's members and the VLAN's
        /// router ports (data), or to the router ports only (IGMP/MLD reports and leaves).
        mcast_snooped,
        /// IGMP/MLD events handed to the multicast database's writer.
        mdb_requests,
        /// IGMP/MLD events dropped because the writer's queue was full.
        mdb_queue_full,
        /// Learn requests sent to the FDB writer.
        learn_requests,
        /// Learn requests dropped because the queue was full (retried on a later frame).
        learn_queue_full,
        /// MAC moves applied in place.
        moves,
        /// Frames whose source is a static entry on another port (entry left alone).
        static_conflict,
    }
}

/// Per-worker state of the stage.
pub struct BridgeWorker {
    /// Counters; read by the stats thread.
    pub counters: std::sync::Arc<CachePadded<BridgeCounters>>,
    recent: Box<[(u64, Tick); RECENT]>,
    /// Storm control's buckets, per port and class (made on the first frame that needs one:
    /// a second's worth of frames as burst).
    storm: Vec<[Option<TokenBucket>; 3]>,
}

const RECENT: usize = 256;
/// A worker asks again to learn an address it asked for this long ago.
const RELEARN_MS: Tick = 10;

impl Default for BridgeWorker {
    fn default() -> Self {
        BridgeWorker {
            counters: Default::default(),
            recent: Box::new([(u64::MAX, 0); RECENT]),
            storm: Vec::new(),
        }
    }
}

/// The link-local groups a bridge never forwards, whatever a port's mask says: STP BPDUs
/// (01:80:c2:00:00:00), PAUSE (…:01) and LACP/slow protocols (…:02), as 802.1D requires.
pub const GROUP_FWD_RESTRICTED: u16 = 0x0007;

/// Refuses a `group_fwd_mask` that would forward STP, PAUSE or LACP
/// ([`GROUP_FWD_RESTRICTED`]), naming them.
pub fn check_group_fwd_mask(mask: u16) -> Result<(), String> {
    if mask & GROUP_FWD_RESTRICTED != 0 {
        return Err(format!(
            "group_fwd_mask {mask:#06x}: bits 0-2 (STP, PAUSE, LACP: {GROUP_FWD_RESTRICTED:#06x}) are never forwarded"
        ));
    }
    Ok(())
}

/// Whether `dst` is one of IEEE 802.1D's reserved link-local groups, 01:80:c2:00:00:00–0f,
/// which a bridge consumes instead of forwarding.
#[inline]
pub fn is_link_local(dst: &[u8; 6]) -> bool {
    matches!(dst, [0x01, 0x80, 0xc2, 0, 0, low] if *low <= 0x0f)
}

/// A port's bridge flags, with the Linux bridge's names and meanings (`bridge link set dev
/// PORT flood off ...`). The flood flags are egress flags: they decide whether flooded frames
/// of that class leave by the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortFlags {
    /// Learn the source addresses of frames received here (and refresh or move their
    /// entries); off, the port's stations are reached only by flooding or static entries.
    pub learning: bool,
    /// Unknown-unicast frames are flooded out of this port.
    pub flood: bool,
    /// Multicast frames (group destinations other than broadcast) are flooded out of it.
    pub mcast_flood: bool,
    /// Broadcast frames are flooded out of it.
    pub bcast_flood: bool,
    /// An isolated port talks only to non-isolated ports: nothing goes from one isolated
    /// port to another, flooded or not.
    pub isolated: bool,
    /// BPDU guard: an STP BPDU received here disables the port ([`Bridge::port_disabled`])
    /// until [`Bridge::enable_port`].
    pub bpdu_guard: bool,
}

/// Storm control of one port: the most broadcast, multicast and unknown-unicast frames a
/// second it takes in, for each worker (0: no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StormControl {
    /// Broadcast frames a second.
    pub broadcast: u32,
    /// Multicast frames a second (group destinations other than broadcast).
    pub multicast: u32,
    /// Unknown-unicast frames a second (flooded because the destination is not known).
    pub unknown_unicast: u32,
}

impl StormControl {
    /// The limit of a class of flooded frame (0: none).
    #[inline]
    fn rate(&self, class: FloodClass) -> u32 {
        match class {
            FloodClass::Broadcast => self.broadcast,
            FloodClass::Multicast => self.multicast,
            FloodClass::Unknown => self.unknown_unicast,
        }
    }

    /// Whether any class is limited.
    pub fn is_set(&self) -> bool {
        self.broadcast != 0 || self.multicast != 0 || self.unknown_unicast != 0
    }
}

impl PortFlags {
    /// The flags as bits (one byte, so a port's flags change with one store).
    pub fn to_bits(self) -> u8 {
        [
            self.learning,
            self.flood,
            self.mcast_flood,
            self.bcast_flood,
            self.isolated,
            self.bpdu_guard,
        ]
        .iter()
        .enumerate()
        .fold(0, |b, (i, on)| b | (u8::from(*on) << i))
    }

    /// The flags of [`PortFlags::to_bits`].
    #[inline(always)]
    pub fn from_bits(b: u8) -> PortFlags {
        let on = |i: u8| b & (1 << i) != 0;
        PortFlags {
            learning: on(0),
            flood: on(1),
            mcast_flood: on(2),
            bcast_flood: on(3),
            isolated: on(4),
            bpdu_guard: on(5),
        }
    }
}

impl Default for PortFlags {
    fn default() -> Self {
        PortFlags {
            learning: true,
            flood: true,
            mcast_flood: true,
            bcast_flood: true,
            isolated: false,
            bpdu_guard: false,
        }
    }
}

/// What kind of frame is flooded: decides which egress flag applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FloodClass {
    Unknown,
    Multicast,
    Broadcast,
}

/// Where a snooped multicast frame goes: the group's members (none for a report) and the
/// VLAN's router ports.
type Snooped<'g> = Option<(Option<&'g PortSet>, &'g PortSet)>;

impl PortFlags {
    #[inline]
    fn floods(&self, class: FloodClass) -> bool {
        match class {
            FloodClass::Unknown => self.flood,
            FloodClass::Multicast => self.mcast_flood,
            FloodClass::Broadcast => self.bcast_flood,
        }
    }
}

/// A port as the stage sees it (its VLAN membership is in [`VlanView`]).
struct BridgePort {
    /// [`PortFlags::to_bits`]: changed by the control plane while workers forward.
    flags: AtomicU8,
    /// Which link-local groups (bit N for 01:80:c2:00:00:0N) it forwards.
    group_fwd: u16,
    /// Per-worker storm-control rates.
    storm: StormControl,
    /// Disabled by its BPDU guard: written once by the worker that saw the BPDU, cleared
    /// by the control plane.
    disabled: AtomicBool,
    /// Its name, for the log.
    name: Box<str>,
}

/// The ingress port of the frames the stage is deciding, read once per batch (again only
/// where a batch mixes ingress ports): a port's flags and BPDU-guard state changed by another
/// thread take effect from a worker's next batch.
struct Ingress<'a> {
    port: u16,
    bp: &'a BridgePort,
    vlan: &'a PortVlan,
    flags: PortFlags,
    /// Its frames' sources are learned: its learning flag, unless the stage is read-only.
    learn: bool,
    /// Disabled by its BPDU guard: as read for the batch, or by a BPDU in it.
    disabled: bool,
}

/// What becomes of a known-unicast frame of one VLAN from the ingress port to one egress
/// port: decided once for a run of frames of the same (egress port, VLAN) in a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Egress {
    /// Sent, tagged or not.
    Send {
        /// Leaves with a VLAN tag.
        tagged: bool,
    },
    /// The egress port is disabled by its BPDU guard.
    Disabled,
    /// Both ports are isolated.
    Isolated,
    /// The egress port is not a member of the VLAN (any more).
    Filtered,
}

/// Says, once per disabling, that a port's BPDU guard disabled it (a worker, cold path).
#[cold]
#[inline(never)]
fn guard_log(port: u16, name: &str) {
    tracing::warn!(
        port = name,
        index = port,
        "an STP BPDU arrived on port {name:?}, which has BPDU guard: the port is disabled until `freeway ctl link set dev {name} up`"
    );
}

/// The VLAN membership of every port, built whole and published by the control plane
/// ([`Bridge::set_port_vlans`]); a worker loads it once per batch, under the batch's guard.
struct VlanView {
    /// Each port's VLAN mode, by port number.
    ports: Box<[PortVlan]>,
    /// For each VLAN, its member ports.
    members: Box<[Box<[u16]>]>,
}

impl VlanView {
    fn new(ports: Vec<PortVlan>) -> VlanView {
        let members = (0..4096u16)
            .map(|vid| {
                (0..ports.len() as u16)
                    .filter(|p| vid != 0 && ports[*p as usize].is_member(vid))
                    .collect::<Vec<_>>()
                    .into_boxed_slice()
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        VlanView {
            ports: ports.into_boxed_slice(),
            members,
        }
    }
}

/// The bridge: its FDB and the VLAN tables of its ports. Shared by all workers; the VLAN
/// membership is published whole ([`Bridge::set_port_vlans`]), so a reload changes it while
/// workers forward, each batch seeing one version.
pub struct Bridge<L: Layout = Padded> {
    fdb: Fdb<L>,
    /// Per port, all that the stage reads of it in one place (one cache line per frame).
    ports: Box<[BridgePort]>,
    /// The ports' VLAN membership (one writer: the control plane).
    vlans: Published<VlanView>,
    /// The multicast database, when snooping is set up.
    mdb: Option<Mdb>,
}

impl<L: Layout> Bridge<L> {
    /// A bridge over `ports` (indexed by port number) with the given FDB.
    pub fn new(fdb: Fdb<L>, ports: Vec<PortVlan>) -> Bridge<L> {
        let n = ports.len();
        Bridge {
            fdb,
            vlans: Published::new(VlanView::new(ports)),
            ports: (0..n)
                .map(|_| BridgePort {
                    flags: AtomicU8::new(PortFlags::default().to_bits()),
                    group_fwd: 0,
                    storm: StormControl::default(),
                    disabled: AtomicBool::new(false),
                    name: "".into(),
                })
                .collect(),
            mdb: None,
        }
    }

    /// Snoops IGMP and MLD with `mdb` (whose writer the FDB writer services, see
    /// [`crate::FdbWriter::attach_mdb`]).
    pub fn set_mdb(&mut self, mdb: Mdb) {
        self.mdb = Some(mdb);
    }

    /// The multicast database, when snooping is set up.
    pub fn mdb(&self) -> Option<&Mdb> {
        self.mdb.as_ref()
    }

    /// Lets `port` forward the link-local groups of `mask` (bit N for 01:80:c2:00:00:0N), as
    /// Linux's `group_fwd_mask`: 802.1X (bit 3) or LLDP (bit 14) across a transparent
    /// bridge. STP, PAUSE and LACP ([`GROUP_FWD_RESTRICTED`]) are never forwarded: such a
    /// mask, or an unknown port, is refused.
    pub fn set_group_fwd_mask(&mut self, port: u16, mask: u16) -> Result<(), String> {
        check_group_fwd_mask(mask)?;
        self.port_mut(port)?.group_fwd = mask;
        Ok(())
    }

    /// Sets `port`'s flags, also while workers forward (one store, seen by each worker from
    /// its next batch on); an unknown port is refused.
    pub fn set_port_flags(&self, port: u16, flags: PortFlags) -> Result<(), String> {
        self.ports
            .get(usize::from(port))
            .ok_or_else(|| format!("no port {port}"))?
            .flags
            .store(flags.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    /// Names `port` (for the log); an unknown port is refused.
    pub fn set_port_name(&mut self, port: u16, name: &str) -> Result<(), String> {
        self.port_mut(port)?.name = name.into();
        Ok(())
    }

    /// Sets `port`'s storm control: the rates each worker lets in (the caller divides a
    /// port's rate among its workers); an unknown port is refused.
    pub fn set_storm_control(&mut self, port: u16, storm: StormControl) -> Result<(), String> {
        self.port_mut(port)?.storm = storm;
        Ok(())
    }

    /// Whether `port` was disabled by its BPDU guard.
    pub fn port_disabled(&self, port: u16) -> bool {
        self.ports
            .get(usize::from(port))
            .is_some_and(|p| p.disabled.load(Ordering::Relaxed))
    }

    /// Enables `port` again after its BPDU guard disabled it; `Ok(true)` if it was disabled.
    pub fn enable_port(&self, port: u16) -> Result<bool, String> {
        let p = self
            .ports
            .get(usize::from(port))
            .ok_or_else(|| format!("no port {port}"))?;
        Ok(p.disabled.swap(false, Ordering::Relaxed))
    }

    fn port_mut(&mut self, port: u16) -> Result<&mut BridgePort, String> {
        self.ports
            .get_mut(usize::from(port))
            .ok_or_else(|| format!("no port {port}"))
    }

    /// The flags of `port` (defaults for an unknown one).
    #[inline]
    pub fn port_flags(&self, port: u16) -> PortFlags {
        self.ports
            .get(usize::from(port))
            .map(|p| PortFlags::from_bits(p.flags.load(Ordering::Relaxed)))
            .unwrap_or_default()
    }

    /// The ingress port `port` as the stage reads it for a batch; `None` for no bridge port.
    #[inline]
    fn ingress<'a>(&'a self, vlans: &'a VlanView, port: u16, read_only: bool) -> Option<Ingress<'a>> {
        let bp = self.ports.get(usize::from(port))?;
        let vlan = vlans.ports.get(usize::from(port))?;
        let flags = PortFlags::from_bits(bp.flags.load(Ordering::Relaxed));
        Some(Ingress {
            port,
            bp,
            vlan,
            flags,
            learn: flags.learning && !read_only,
            disabled: bp.disabled.load(Ordering::Relaxed),
        })
    }

    /// What becomes of a known-unicast frame of VLAN `vid` from `ing` to port `o`.
    #[inline(never)]
    fn egress(&self, vlans: &VlanView, ing: &Ingress<'_>, o: u16, vid: u16) -> Egress {
        if self.port_disabled(o) {
            Egress::Disabled
        } else if ing.flags.isolated && self.port_flags(o).isolated {
            Egress::Isolated
        } else {
            match vlans.ports.get(usize::from(o)).and_then(|v| v.egress(vid)) {
                Some(tagged) => Egress::Send { tagged },
                None => Egress::Filtered,
            }
        }
    }

    /// Whether a frame to the link-local group `01:80:c2:00:00:0{low}` received on a port
    /// with the group mask `mask` goes on.
    #[inline]
    fn forwards_link_local(mask: u16, low: u8) -> bool {
        low < 16 && mask & (1 << low) != 0
    }

    /// The FDB.
    pub fn fdb(&self) -> &Fdb<L> {
        &self.fdb
    }

    /// The VLAN mode of `port` now.
    pub fn port_vlan(&self, port: u16) -> Option<PortVlan> {
        let g = self.fdb.pin();
        self.vlans.load(&g).ports.get(usize::from(port)).cloned()
    }

    /// Member ports of a VLAN now.
    pub fn members(&self, vid: u16) -> Vec<u16> {
        let g = self.fdb.pin();
        self.vlans.load(&g).members[usize::from(vid & 0x0fff)].to_vec()
    }

    /// Replaces every port's VLAN membership at once, also while workers forward: each
    /// batch sees either the old membership or the new one, never a mix. One writer at a
    /// time (the control plane); a list of the wrong length is refused. A frame forwarded by
    /// a learned entry to a port that left its VLAN is dropped (`drop_vlan_filtered`), never
    /// sent into another VLAN.
    pub fn set_port_vlans(&self, ports: Vec<PortVlan>) -> Result<(), String> {
        if ports.len() != self.ports.len() {
            return Err(format!(
                "{} VLAN modes for {} ports: the ports themselves cannot change here",
                ports.len(),
                self.ports.len()
            ));
        }
        self.vlans.publish(VlanView::new(ports));
        Ok(())
    }

    /// Runs the stage over a parsed batch (`meta.in_port`, `meta.vlan`, `meta.vlan_depth`
    /// filled). Every packet is either emitted (possibly as several copies) or dropped, counted,
    /// and its buffer returned to the pool; the batch is left empty.
    ///
    /// Two passes, in the manner of VPP's nodes: the first ([`Pass::frame`]) decides each
    /// packet's fate in place (learning, lookup, egress tagging of unicast frames); the second
    /// ([`Bridge::dispatch`]) sends. When every packet of the batch goes to the same port, the
    /// batch is handed over whole.
    pub fn process<E: Emit>(
        &self,
        w: &mut BridgeWorker,
        batch: &mut Batch,
        now: Tick,
        out: &mut E,
        learning: &mut Learning<'_, L>,
    ) {
        let guard = self.fdb.pin();
        let mut pass = Pass::new(self, &guard, w, learning, now);
        let c = pass.c;
        c.rx.add(batch.len() as u64);
        // Per packet: the output port, or DROP / FLOOD.
        let mut fate = [DROP; MAX_BATCH];
        // The smallest and largest fate: one port for all when they are equal and a port.
        let (mut lo, mut hi) = (DROP, 0);
        // The ingress port's state, read when its first frame of the batch comes.
        let mut ing: Option<Ingress<'_>> = None;
        for (i, (p, f)) in batch.as_mut_slice().iter_mut().zip(fate.iter_mut()).enumerate() {
            *f = pass.frame(i, p, &mut ing);
            lo = lo.min(*f);
            hi = hi.max(*f);
        }
        c.forwarded.add(pass.forwarded);
        if lo == hi && hi < FLOOD && !batch.is_empty() {
            out.emit_batch(hi, batch);
            return;
        }
        self.dispatch(
            pass.vlans,
            batch,
            &fate,
            pass.floods.as_ref().map(|f| &f[..]),
            pass.snooped.as_ref().map(|s| &s[..]),
            c,
            out,
        );
    }

    /// The second pass: sends each packet of `batch` as `fate` says (dropped packets back to
    /// the pool, flooded ones copied to their VLAN's members).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn dispatch<E: Emit>(
        &self,
        vlans: &VlanView,
        batch: &mut Batch,
        fate: &[u16; MAX_BATCH],
        floods: Option<&[FloodFrame]>,
        snooped: Option<&[Snooped<'_>]>,
        c: &BridgeCounters,
        out: &mut E,
    ) {
        for ((i, p), &f) in batch.drain().enumerate().zip(fate) {
            match f {
                DROP => out.pool().put(p),
                FLOOD => {
                    // Set with FLOOD, so present; a DROP if ever not.
                    let Some(&fl) = floods.and_then(|f| f.get(i)) else {
                        out.pool().put(p);
                        continue;
                    };
                    let s = snooped.and_then(|s| s.get(i).copied().flatten());
                    let in_port = p.meta.in_port;
                    self.flood(vlans, p, in_port, fl, s, c, out);
                }
                o => out.emit(o, p),
            }
        }
    }

    /// Reads a multicast frame for snooping: hands what an IGMP/MLD message says to the
    /// multicast database's writer (unless read-only), and says where the frame goes when
    /// snooping decides it (the VLAN has a querier, and the frame is a report or is to a
    /// known group); `None`: flood as unsnooped.
    #[inline(never)]
    fn snoop<'g>(
        view: &'g mdb::MdbView,
        m: &Mdb,
        p: &Packet,
        vid: u16,
        c: &BridgeCounters,
        learning: &mut Learning<'_, L>,
        now: Tick,
    ) -> Snooped<'g> {
        let port = p.meta.in_port;
        let kind = mdb::classify(p.data(), &p.meta, |event| {
            let r = MdbRequest { vid, port, event };
            match learning {
                Learning::ReadOnly => {}
                Learning::Inline(wr) => {
                    if let Some(w) = wr.mdb_mut() {
                        w.apply(r, now);
                        w.publish();
                        c.mdb_requests.inc();
                    }
                }
                Learning::Queue => {
                    if m.request(r) {
                        c.mdb_requests.inc();
                    } else {
                        c.mdb_queue_full.inc();
                    }
                }
            }
        });
        let v6 = match kind {
            McastFrame::Report { v6 } => v6,
            McastFrame::Data(g) => g.is_ipv6(),
            McastFrame::Query | McastFrame::Other => return None,
        };
        let v = view.vlan(vid, v6).filter(|v| v.querier)?;
        match kind {
            McastFrame::Data(g) => view.group(vid, g).map(|s| (Some(s), &v.routers)),
            _ => Some((None, &v.routers)),
        }
    }

    /// Sends copies of `p` to the members of its VLAN that take this class of flooded frame
    /// (their egress flags), or for a snooped frame to the group's members and router ports
    /// of the VLAN, except `in_port` and, from an isolated port, the isolated ones.
    #[allow(clippy::too_many_arguments)]
    fn flood<E: Emit>(
        &self,
        vlans: &VlanView,
        p: Packet,
        in_port: u16,
        (vid, tag, class): (u16, Option<u16>, FloodClass),
        snooped: Snooped<'_>,
        c: &BridgeCounters,
        out: &mut E,
    ) {
        let members = &vlans.members[usize::from(vid & 0x0fff)];
        let isolated = self.port_flags(in_port).isolated;
        let wants = |m: u16, f: PortFlags| match snooped {
            None => f.floods(class),
            Some((group, routers)) => group.is_some_and(|g| g.contains(m)) || routers.contains(m),
        };
        let mut targets = members
            .iter()
            .copied()
            .filter(|&m| {
                let f = self.port_flags(m);
                m != in_port && wants(m, f) && !(isolated && f.isolated) && !self.port_disabled(m)
            })
            .peekable();
        if targets.peek().is_none() {
            c.drop_flood_empty.inc();
            out.pool().put(p);
            return;
        }
        c.flooded.inc();
        let mut p = Some(p);
        while let Some(m) = targets.next() {
            let copy = if targets.peek().is_some() {
                let orig = p.as_ref().expect("original kept until the last member");
                let note = orig.frag_note();
                // A datagram reassembled from fragments may be larger than a pool buffer.
                let mut q = if note.is_some() {
                    out.pool().get_huge()
                } else {
                    out.pool().get()
                };
                if q.set_frame(orig.data()).is_err() {
                    // Pool buffers are never smaller than the frame's own; count, do not panic.
                    c.drop_no_headroom.inc();
                    out.pool().put(q);
                    continue;
                }
                q.meta = orig.meta;
                if let Some(n) = note {
                    q.set_frag_note(n);
                }
                q
            } else {
                p.take().expect("original used once, for the last member")
            };
            let mut copy = copy;
            if Self::egress_prepare(&mut copy, vlans.ports[usize::from(m)].egress_tagged(vid), vid, tag) {
                c.flood_copies.inc();
                out.emit(m, copy);
            } else {
                c.drop_no_headroom.inc();
                out.pool().put(copy);
            }
        }
        if let Some(p) = p {
            out.pool().put(p);
        }
    }

    /// Tags or untags `p` for leaving in VLAN `vid`, tagged if `want` (`tag` is the tag it arrived
    /// with). `false` if there was no headroom for a tag.
    #[inline(always)]
    fn egress_prepare(p: &mut Packet, want: bool, vid: u16, tag: Option<u16>) -> bool {
        let ok = match (tag, want) {
            (None, false) => true,
            (Some(t), true) => {
                if t != vid {
                    // Priority-tagged frame leaving tagged: write the VID, keep the PCP/DEI bits.
                    let d = p.data_mut();
                    let tci = (rd16(d, 14) & 0xf000) | vid;
                    wr16(d, 14, tci);
                }
                true
            }
            (Some(_), false) => vlan_pop(p),
            (None, true) => vlan_push(p, vid),
        };
        p.meta.vlan = vid;
        ok
    }
}

/// `fate` of a dropped packet.
const DROP: u16 = u16::MAX;
/// `fate` of a flooded packet.
const FLOOD: u16 = u16::MAX - 1;
/// No FDB key: a unicast address's key never has the group bit (bit 56) set.
const NO_KEY: u64 = u64::MAX;

/// A flooded frame's VLAN, the tag it arrived with and its storm-control class.
type FloodFrame = (u16, Option<u16>, FloodClass);

/// The first pass over one batch ([`Bridge::process`]): what the stage reads once per batch
/// (the epoch guard, the FDB, the VLAN view, the multicast view) and the decisions it reuses
/// from frame to frame, beside what the second pass needs of flooded frames.
struct Pass<'g, 'w, 'l, L: Layout> {
    bridge: &'g Bridge<L>,
    guard: &'g Guard,
    table: &'g Table<L>,
    vlans: &'g VlanView,
    c: &'w BridgeCounters,
    recent: &'w mut [(u64, Tick); RECENT],
    storm: &'w mut Vec<[Option<TokenBucket>; 3]>,
    learning: &'w mut Learning<'l, L>,
    now: Tick,
    read_only: bool,
    /// The verdict for the last (egress port, VLAN) a frame from the current ingress port
    /// was forwarded to: a run of frames to one port decides it once.
    last_out: Option<(u16, u16, Egress)>,
    /// The last source key found on the current ingress port's entry (refreshed for this
    /// batch's tick), or [`NO_KEY`]: the frames of one station in a row look it up once.
    learned: u64,
    /// The last known-unicast destination key from the current ingress port, the port its
    /// frames went to and whether tagged, or [`NO_KEY`]: the frames to one station in a row
    /// look it up once (its `used` time is this batch's tick from the first).
    known: (u64, u16, bool),
    /// Frames forwarded to one port, added to the counter once per batch.
    forwarded: u64,
    /// For floods only, made when the batch's first frame floods: the VLAN, original tag
    /// and class, and where snooping sends a multicast frame.
    floods: Option<[FloodFrame; MAX_BATCH]>,
    snooped: Option<[Snooped<'g>; MAX_BATCH]>,
    mview: Option<&'g mdb::MdbView>,
}

impl<'g, 'w, 'l, L: Layout> Pass<'g, 'w, 'l, L> {
    fn new(
        bridge: &'g Bridge<L>,
        guard: &'g Guard,
        w: &'w mut BridgeWorker,
        learning: &'w mut Learning<'l, L>,
        now: Tick,
    ) -> Self {
        let BridgeWorker {
            counters,
            recent,
            storm,
        } = w;
        let c: &'w BridgeCounters = counters;
        Pass {
            bridge,
            guard,
            table: bridge.fdb.table(),
            vlans: bridge.vlans.load(guard),
            c,
            recent,
            storm,
            read_only: matches!(learning, Learning::ReadOnly),
            learning,
            now,
            last_out: None,
            learned: NO_KEY,
            known: (NO_KEY, 0, false),
            forwarded: 0,
            floods: None,
            snooped: None,
            mview: None,
        }
    }

    /// Decides the fate of frame `i`, `p`: its output port, [`DROP`] (counted) or [`FLOOD`].
    /// `ing` is the ingress port as last read in this batch (read again when `p` comes from
    /// another port).
    #[inline(always)]
    fn frame(&mut self, i: usize, p: &mut Packet, ing: &mut Option<Ingress<'g>>) -> u16 {
        let c = self.c;
        // One bounds check for both addresses, each read as one word (see `addr_words`).
        let Some(head) = p.data().first_chunk::<12>() else {
            c.drop_bad_port.inc();
            return DROP;
        };
        let (dst_w, src_w) = addr_words(head);
        if src_w & GROUP_BIT != 0 {
            c.drop_src_multicast.inc();
            return DROP;
        }
        let in_port = p.meta.in_port;
        let cur = match ing {
            Some(x) if x.port == in_port => x,
            _ => match self.bridge.ingress(self.vlans, in_port, self.read_only) {
                Some(x) => {
                    self.forget();
                    ing.insert(x)
                }
                None => {
                    c.drop_bad_port.inc();
                    return DROP;
                }
            },
        };
        if cur.disabled {
            c.drop_port_disabled.inc();
            return DROP;
        }
        let tag = (p.meta.vlan_depth > 0 && p.meta.vlan != NO_VLAN).then_some(p.meta.vlan);
        let Some(vid) = cur.vlan.classify(tag) else {
            c.drop_vlan_filtered.inc();
            return DROP;
        };
        if cur.learn {
            let sk = key_of_word(src_w, vid);
            if sk != self.learned {
                self.learn_source(in_port, sk);
            }
        }
        if dst_w & GROUP_BIT == 0 {
            let dk = key_of_word(dst_w, vid);
            if dk == self.known.0 {
                let (_, o, tagged) = self.known;
                return self.send_known(p, o, tagged, vid, tag);
            }
            if let Some(f) = self.known_unicast(p, cur, dk, vid, tag) {
                return f;
            }
            c.unknown_unicast.inc();
        }
        // A group or unknown destination: its bytes, for the rarer paths below.
        let dst = unkey(dst_w).0;
        if dst_w & GROUP_BIT != 0 && is_link_local(&dst) && !Bridge::<L>::forwards_link_local(cur.bp.group_fwd, dst[5])
        {
            self.link_local(cur, dst[5]);
            return DROP;
        }
        self.flood_frame(i, p, cur, &dst, vid, tag)
    }

    /// Forgets what the frames so far decided for the frames after them: the ingress port
    /// changed, or an entry moved or was learned, or a port was disabled.
    #[inline(always)]
    fn forget(&mut self) {
        self.last_out = None;
        self.learned = NO_KEY;
        self.known = (NO_KEY, 0, false);
    }

    /// Learns or refreshes the source `sk` of a frame from `in_port`.
    #[inline(always)]
    fn learn_source(&mut self, in_port: u16, sk: u64) {
        match self.table.lookup(sk, self.guard) {
            Some(n) => {
                if n.port() == in_port {
                    self.learned = sk;
                } else {
                    self.moved(n, in_port);
                }
                n.touch_updated(self.now);
            }
            None => self.learn_new(in_port, sk),
        }
    }

    /// A known source seen on another port than its entry's: moved, or a static entry's
    /// conflict.
    #[inline(never)]
    fn moved(&mut self, n: &Node<L>, in_port: u16) {
        if n.move_to(in_port) {
            self.c.moves.inc();
            // A destination decided before may be this station's.
            self.forget();
        } else if n.is_static() {
            self.c.static_conflict.inc();
        }
    }

    /// An unknown source: learned here ([`Learning::Inline`]) or asked of the FDB writer
    /// (at most once per [`RELEARN_MS`] per address and worker, as far as `recent` recalls).
    #[inline(never)]
    fn learn_new(&mut self, in_port: u16, sk: u64) {
        let c = self.c;
        match self.learning {
            Learning::ReadOnly => {}
            Learning::Inline(wr) => {
                wr.learn(sk, in_port, self.now);
                // Learning may have made room by removing an entry decided on before.
                self.forget();
            }
            Learning::Queue => {
                let slot = &mut self.recent[(sk.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % RECENT];
                if slot.0 != sk || self.now.saturating_sub(slot.1) >= RELEARN_MS {
                    *slot = (sk, self.now);
                    if self.bridge.fdb.request_learn(LearnRequest { key: sk, port: in_port }) {
                        c.learn_requests.inc();
                    } else {
                        c.learn_queue_full.inc();
                    }
                }
            }
        }
    }

    /// The fate of a frame to the unicast destination `dk` (VLAN `vid`, arrived with `tag`):
    /// its egress port (the frame tagged or untagged for it) or [`DROP`]; `None` when `dk` is
    /// unknown. The egress verdict is decided once per run of frames to one (port, VLAN).
    #[inline(always)]
    fn known_unicast(&mut self, p: &mut Packet, cur: &Ingress<'g>, dk: u64, vid: u16, tag: Option<u16>) -> Option<u16> {
        let n = self.table.lookup(dk, self.guard)?;
        if !self.read_only {
            n.touch_used(self.now);
        }
        let o = n.port();
        if o == cur.port {
            self.c.drop_same_port.inc();
            return Some(DROP);
        }
        let verdict = match self.last_out {
            Some((lo, lv, e)) if lo == o && lv == vid => e,
            _ => {
                let e = self.bridge.egress(self.vlans, cur, o, vid);
                self.last_out = Some((o, vid, e));
                e
            }
        };
        let Egress::Send { tagged } = verdict else {
            self.egress_dropped(verdict);
            return Some(DROP);
        };
        self.known = (dk, o, tagged);
        Some(self.send_known(p, o, tagged, vid, tag))
    }

    /// The fate of a frame of VLAN `vid` (arrived with `tag`) to a known destination on
    /// port `o`, where it leaves `tagged` or not.
    #[inline(always)]
    fn send_known(&mut self, p: &mut Packet, o: u16, tagged: bool, vid: u16, tag: Option<u16>) -> u16 {
        if Bridge::<L>::egress_prepare(p, tagged, vid, tag) {
            self.forwarded += 1;
            o
        } else {
            self.c.drop_no_headroom.inc();
            DROP
        }
    }

    /// Counts a known-unicast frame that its egress verdict drops.
    #[cold]
    fn egress_dropped(&self, verdict: Egress) {
        let c = self.c;
        match verdict {
            Egress::Send { .. } => {}
            Egress::Disabled => c.drop_port_disabled.inc(),
            Egress::Isolated => c.drop_isolated.inc(),
            // Learned while the port was a member of the VLAN, which it left.
            Egress::Filtered => c.drop_vlan_filtered.inc(),
        }
    }

    /// A link-local control frame (to 01:80:c2:00:00:0{low}) that the ingress port does not
    /// forward: dropped, counted; an STP BPDU on a port with BPDU guard disables the port.
    #[cold]
    fn link_local(&mut self, cur: &mut Ingress<'g>, low: u8) {
        if low == 0 && cur.flags.bpdu_guard && !self.read_only {
            // An STP BPDU where no switch should be: the port goes down, for the rest of
            // this batch too (its frames, and frames to it).
            if !cur.bp.disabled.swap(true, Ordering::Relaxed) {
                guard_log(cur.port, &cur.bp.name);
            }
            cur.disabled = true;
            self.forget();
            self.c.bpdu_guard.inc();
        }
        self.c.drop_link_local.inc();
    }

    /// The fate of frame `i`, `p`, a broadcast, multicast or unknown-unicast frame of VLAN
    /// `vid`: [`FLOOD`] (with what the second pass needs), or [`DROP`] over its port's storm
    /// control rate.
    #[inline(never)]
    fn flood_frame(
        &mut self,
        i: usize,
        p: &Packet,
        cur: &Ingress<'g>,
        dst: &[u8; 6],
        vid: u16,
        tag: Option<u16>,
    ) -> u16 {
        let c = self.c;
        let class = if *dst == [0xff; 6] {
            FloodClass::Broadcast
        } else if dst[0] & 1 != 0 {
            FloodClass::Multicast
        } else {
            FloodClass::Unknown
        };
        let rate = cur.bp.storm.rate(class);
        if rate != 0 && !self.read_only {
            let port = usize::from(cur.port);
            if self.storm.len() <= port {
                self.storm
                    .resize(self.bridge.ports.len().max(port + 1), [None, None, None]);
            }
            let bucket =
                self.storm[port][class as usize].get_or_insert_with(|| TokenBucket::starting_empty(rate, rate));
            if !bucket.take(self.now) {
                c.drop_storm.inc();
                return DROP;
            }
        }
        if let (FloodClass::Multicast, Some(m)) = (class, &self.bridge.mdb) {
            let guard = self.guard;
            let view = *self.mview.get_or_insert_with(|| m.view(guard));
            if view.snooping() {
                let s = Bridge::<L>::snoop(view, m, p, vid, c, self.learning, self.now);
                if s.is_some() {
                    c.mcast_snooped.inc();
                    if let Some(slot) = self.snooped.get_or_insert([None; MAX_BATCH]).get_mut(i) {
                        *slot = s;
                    }
                }
            }
        }
        if let Some(slot) = self
            .floods
            .get_or_insert([(0, None, FloodClass::Unknown); MAX_BATCH])
            .get_mut(i)
        {
            *slot = (vid, tag, class);
        }
        FLOOD
    }
}
