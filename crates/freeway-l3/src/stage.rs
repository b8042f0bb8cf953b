//! The L3 stage: a per-worker [`L3Worker`] that runs a batch of frames the bridge handed to the
//! router (see [`crate::Wants`]) to completion.
//!
//! Per frame, in order: find the ingress interface by `(meta.in_port, outer tag)`; then
//!
//! * **ARP**: answer requests for our addresses in place (learning the requester), learn from
//!   replies; gratuitous announcements only refresh existing entries.
//! * **IPv4**: validate the header (version, IHL, header checksum, total length against the
//!   frame); to one of our addresses: answer echo requests in place, drop the rest (counted: we
//!   run no local stack); otherwise forward: drop link-layer group frames, broadcast, multicast
//!   and martian addresses; TTL ≤ 1 → ICMP time exceeded; route lookup (with `meta.flow_hash`),
//!   none → ICMP net unreachable; larger than the egress interface's MTU
//!   ([`Interfaces::mtu`], live) with DF → ICMP fragmentation needed carrying that MTU and a
//!   counted drop; TTL - 1 with the RFC 1624 incremental checksum; larger without DF → the
//!   forward hook judges the whole packet, then it is fragmented
//!   ([`freeway_packet::fragment::fragment_v4`]) and each fragment is delivered on its own
//!   (neighbour resolution, pending queue). A datagram the datapath reassembled is measured
//!   by its largest original fragment (`FragNote`) instead, and without DF leaves in pieces
//!   of the MTU (refragmented on transmit).
//! * **IPv6**: validate version and payload length; to one of our addresses or groups: echo
//!   replies, NS → NA (learning the solicitor), NA → learn, RS/RA/redirects dropped (counted);
//!   otherwise forward like IPv4 (hop limit, no route, larger than the egress MTU → ICMPv6
//!   packet too big with the MTU: routers never fragment IPv6), never link-local scope.
//! * **Neighbour**: usable entry (`REACHABLE`/`STALE`/`PERMANENT`) → rewrite source MAC (egress
//!   interface), destination MAC (neighbour), 802.1Q tag (egress interface) and emit on the
//!   egress port; a `STALE` one is also probed (unicast ARP/NS, at most once per `retrans_ms`
//!   per worker and neighbour). `FAILED` → ICMP host unreachable. Unknown or `INCOMPLETE` →
//!   the packet waits in the worker's bounded pending queue while a broadcast ARP request or a
//!   solicited-node NS goes out (again every `retrans_ms`); [`L3Worker::poll`] (also run at
//!   the start of every batch) sends what has resolved and drops, counted, what waited longer
//!   than `pending_timeout_ms` (with ICMP host unreachable).
//!
//! The firewall is asked ([`L3Out::filter`], see [`crate::filter`]) at the input hook, before a
//! packet for our addresses is answered, and at the forward hook, after the TTL and MTU checks
//! and before neighbour resolution; a drop or reject is counted as `filtered`. A translator
//! ([`L3Out::nat`]) may rewrite an IP packet at prerouting, before the local-address check
//! and the route lookup, and at postrouting, right after the forward hook.
//!
//! ICMP errors go back out of the ingress interface to the frame's source MAC (the previous
//! hop), from the ingress interface's address, through the worker's token bucket; the rules of
//! [`crate::icmp`] decide whether one may be sent at all.
//!
//! Threads: one `L3Worker` per worker thread, `&mut self`; it reads [`Interfaces`] (immutable,
//! shared; a new version arrives between batches through [`L3Worker::set_interfaces`]) and
//! the neighbour table (lock-free, one epoch pin per batch), writes only its own counters
//! and pending queue, and hands neighbour updates to the writer through the bounded
//! queue (a full queue is counted, never waited on). Nothing here panics on any frame content.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use freeway_packet::bytes::{mac_at, rd16, rd32, wr16};
use freeway_packet::checksum::{update16, verify};
use freeway_packet::fragment::{fragment_v4, IPV4_DF};
use freeway_packet::wire::{ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6};
use freeway_packet::{meta_flags, Batch, Packet, PacketPool, NO_OFFSET};
use freeway_sync::{CachePadded, Counter, Tick};
use serde::{Deserialize, Serialize};

use crate::filter::{build_tcp_reset, FilterHook, FilterVerdict, NatHook, Reject};
use crate::frame::{egress_tag_frame, is_group};
use crate::icmp::{
    self, addr6, v4, v4_error_allowed, v4_unicast_source, v6, v6_error_allowed, v6_upper, TokenBucket, L2,
};
use crate::iface::{is_link_local, Interface, Interfaces};
use crate::neigh::{Guard, Neigh, NeighState, NeighUpdate};
use crate::{arp, nd, NextHop, RouteLookup};

/// Settings of the L3 stage (per worker).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct L3Config {
    /// ICMP errors per second per worker.
    pub icmp_rate: u32,
    /// ICMP error burst per worker.
    pub icmp_burst: u32,
    /// Packets kept per unresolved neighbour (the oldest is dropped beyond). The default, 16,
    /// holds a stream of 50 packets a second through 320 ms of resolution (the request, the
    /// answer, the neighbour writer's publication, the worker's next poll: 110 ms measured on
    /// two cores at a load average of 30). Linux's `unres_qlen_bytes` holds about 100 full
    /// frames; 3, Linux's count before 3.3, lost such a stream's packets on a loaded host.
    pub pending_per_neigh: usize,
    /// Packets kept in all (new ones are dropped beyond); also the most neighbours resolved at
    /// once by one worker.
    pub pending_total: usize,
    /// A pending packet is dropped after this long.
    pub pending_timeout_ms: u64,
    /// Interval between two ARP requests / NS for one neighbour (and between two probes of a
    /// `STALE` neighbour) from one worker.
    pub retrans_ms: u64,
    /// Send ICMP host unreachable for packets whose neighbour failed or timed out.
    pub host_unreachable: bool,
}

impl Default for L3Config {
    fn default() -> Self {
        L3Config {
            icmp_rate: 100,
            icmp_burst: 50,
            pending_per_neigh: 16,
            pending_total: 64,
            pending_timeout_ms: 3_000,
            retrans_ms: 1_000,
            host_unreachable: true,
        }
    }
}

/// Where the stage sends packets. Implemented by the worker's per-port transmit batches.
pub trait L3Out {
    /// The worker's buffer pool (generated packets: ARP requests, NS/NA, ICMP errors).
    fn pool(&mut self) -> &mut PacketPool;
    /// Queues `pkt` for transmission on `port`. Its tagging is already the egress interface's
    /// and `meta.vlan` is that VLAN (or `NO_VLAN`).
    fn emit(&mut self, port: u16, pkt: Packet);
    /// [`L3Out::emit`] of a packet whose `meta.vlan` is still to be set to `vlan` (the egress
    /// interface's VLAN, or `NO_VLAN`): the forwarding path's transmit. The default stores it
    /// and emits; an implementation that queues the packet in memory should store the field
    /// into its queued copy instead, after the move, so that the move does not read a field
    /// written just before it (a load that spans a pending narrower store waits for it).
    #[inline(always)]
    fn emit_on_vlan(&mut self, port: u16, mut pkt: Packet, vlan: u16) {
        pkt.meta.vlan = vlan;
        self.emit(port, pkt);
    }
    /// A packet ends here (already counted by the stage under `reason`). The default returns
    /// the buffer to the pool.
    fn drop(&mut self, pkt: Packet, reason: L3Drop) {
        let _ = reason;
        self.pool().put(pkt);
    }
    /// A packet for the router that the stage does not answer itself (TCP, UDP and other
    /// protocols to its unicast addresses), arrived on interface
    /// `iif`: hands a copy to the interface's kernel twin, if it has one (the punt path). The
    /// stage recycles `pkt` afterwards. The default has no twin.
    #[inline(always)]
    fn punt(&mut self, iif: u16, pkt: &Packet) -> Punt {
        let _ = (iif, pkt);
        Punt::NoTwin
    }
    /// The firewall's verdict on `pkt` at `hook`: it arrived on router interface `iif` and,
    /// at [`FilterHook::Forward`], leaves by `oif` (at [`FilterHook::Input`], `oif == iif`).
    /// The default accepts everything.
    #[inline(always)]
    fn filter(&mut self, hook: FilterHook, pkt: &Packet, iif: u16, oif: u16) -> FilterVerdict {
        let _ = (hook, pkt, iif, oif);
        FilterVerdict::Accept
    }
    /// Translates `pkt` in place at `hook` (NAT): it arrived on router interface `iif` and,
    /// at [`NatHook::Postrouting`], leaves by `oif` (at prerouting `oif == iif`). A translation
    /// keeps the frame's layout and its metadata valid (a verified IPv4 header checksum stays
    /// verified). `Err` drops the packet, counted under the reason given (`filtered` for a
    /// rule's drop, `nat_exhausted` for a new connection that found no free port). The
    /// default changes nothing.
    #[inline(always)]
    fn nat(&mut self, hook: NatHook, pkt: &mut Packet, iif: u16, oif: u16) -> Result<(), L3Drop> {
        let _ = (hook, pkt, iif, oif);
        Ok(())
    }
}

/// What became of a punted packet ([`L3Out::punt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Punt {
    /// The interface has no kernel twin: the packet is dropped as before (`local`).
    NoTwin,
    /// The twin took it (counted `punted`).
    Sent,
    /// The twin could not take it (its queue is full): dropped as `punt_failed`.
    Failed,
}

macro_rules! drops {
    ($($(#[$m:meta])* $v:ident => $n:literal,)*) => {
        /// Why a packet ended in the L3 stage. `r as usize` indexes per-reason counters;
        /// [`L3Drop::ALL`] lists the reasons in that order.
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum L3Drop { $($(#[$m])* $v,)* }

        impl L3Drop {
            /// Every reason, in discriminant order.
            pub const ALL: &'static [L3Drop] = &[$(L3Drop::$v,)*];
            /// Number of reasons.
            pub const COUNT: usize = Self::ALL.len();

            /// A stable snake_case name for counters and logs.
            pub fn name(&self) -> &'static str {
                match self { $(L3Drop::$v => $n,)* }
            }
        }
    };
}

drops! {
    /// Not an error: the frame was handled here (ARP reply or NA learned, NS answered by a new
    /// packet).
    Consumed => "consumed",
    /// The ingress (port, VLAN) is not a router interface.
    NotRouterInterface => "not_router_interface",
    /// More than one VLAN tag.
    VlanStack => "vlan_stack",
    /// Neither ARP, IPv4 nor IPv6.
    UnsupportedEthertype => "unsupported_ethertype",
    /// Truncated or inconsistent IP header (version, IHL, lengths) or unparsed frame.
    Malformed => "malformed",
    /// IPv4 header checksum is wrong.
    BadChecksum => "bad_checksum",
    /// Not an Ethernet/IPv4 ARP request or reply, or from a group MAC.
    BadArp => "bad_arp",
    /// ARP request for an address that is not ours on that interface.
    ArpNotForUs => "arp_not_for_us",
    /// Source address that names no single host (or an IPv6 multicast source).
    Martian => "martian_source",
    /// Not forwardable: link-layer group frame, broadcast, multicast, link-local scope.
    NotForwardable => "not_forwardable",
    /// To one of our addresses, but nothing we answer (we run no local stack).
    Local => "local",
    /// A fragment to one of our addresses (we do not reassemble).
    LocalFragment => "local_fragment",
    /// Malformed or bad-checksum echo request to us.
    BadIcmp => "bad_icmp",
    /// Invalid NS/NA (hop limit, checksum, rules).
    BadNd => "bad_nd",
    /// NS for an address that is not ours on that interface.
    NdNotForUs => "nd_not_for_us",
    /// Router solicitation/advertisement or redirect (not handled).
    NdIgnored => "nd_ignored",
    /// TTL / hop limit expired.
    TtlExpired => "ttl_expired",
    /// No route.
    NoRoute => "no_route",
    /// The route names an interface that does not exist.
    BadNextHop => "bad_next_hop",
    /// Larger than the egress MTU (ICMP sent if DF / IPv6; we do not fragment).
    TooBig => "too_big",
    /// The egress interface has no address to send ARP requests from.
    NoSourceAddress => "no_source_address",
    /// No headroom to push the egress VLAN tag.
    NoHeadroom => "no_headroom",
    /// The neighbour is `FAILED`.
    HostUnreachable => "host_unreachable",
    /// The pending queue (per neighbour or in all) is full.
    PendingOverflow => "pending_overflow",
    /// Waited longer than `pending_timeout_ms` for the neighbour.
    PendingTimeout => "pending_timeout",
    /// Dropped or rejected by the firewall at the input or forward hook.
    Filtered => "filtered",
    /// A new connection that a NAT rule translates found no free port (or identifier) in
    /// its range: refused.
    NatExhausted => "nat_exhausted",
    /// For the router's kernel twin, which could not take it (its queue was full).
    PuntFailed => "punt_failed",
    /// Waited for a neighbour on an interface that a reload removed meanwhile.
    IfaceRemoved => "iface_removed",
}

impl std::fmt::Display for L3Drop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

macro_rules! counters {
    ($($(#[$m:meta])* $f:ident,)*) => {
        /// The stage's counters for one worker (single writer: that worker).
        #[derive(Debug)]
        pub struct L3Counters {
            $($(#[$m])* pub $f: Counter,)*
            /// Packets ended, by [`L3Drop`] reason.
            pub drops: [Counter; L3Drop::COUNT],
        }

        impl Default for L3Counters {
            fn default() -> Self {
                L3Counters { $($f: Counter::new(),)* drops: std::array::from_fn(|_| Counter::new()) }
            }
        }

        /// A plain, serialisable copy of [`L3Counters`] (sum workers with [`L3Stats::merge`]).
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct L3Stats {
            $($(#[$m])* pub $f: u64,)*
            /// Packets ended, by [`L3Drop::name`] (zeros omitted).
            pub drops: BTreeMap<String, u64>,
        }

        impl L3Counters {
            /// A snapshot.
            pub fn snapshot(&self) -> L3Stats {
                let mut drops = BTreeMap::new();
                for r in L3Drop::ALL {
                    let v = self.drops[*r as usize].get();
                    if v > 0 {
                        drops.insert(r.name().to_string(), v);
                    }
                }
                L3Stats { $($f: self.$f.get(),)* drops }
            }
        }

        impl L3Stats {
            /// Adds another worker's numbers.
            pub fn merge(&mut self, o: &L3Stats) {
                $(self.$f += o.$f;)*
                for (k, v) in &o.drops {
                    *self.drops.entry(k.clone()).or_default() += v;
                }
            }

            /// Every counter by name (drops as `drop_<reason>`), for tables.
            pub fn named(&self) -> Vec<(String, u64)> {
                let mut v = vec![$((stringify!($f).to_string(), self.$f),)*];
                v.extend(self.drops.iter().map(|(k, n)| (format!("drop_{k}"), *n)));
                v
            }

            /// Packets dropped for a reason (0 if none).
            pub fn drop_count(&self, r: L3Drop) -> u64 {
                self.drops.get(r.name()).copied().unwrap_or(0)
            }
        }
    };
}

counters! {
    /// Frames that entered the stage.
    rx,
    /// IPv4 packets forwarded.
    forwarded_v4,
    /// IPv6 packets forwarded.
    forwarded_v6,
    /// ARP requests received (for us or not).
    arp_requests_rx,
    /// ARP replies received.
    arp_replies_rx,
    /// ARP replies sent.
    arp_replies_tx,
    /// ARP requests sent (resolution).
    arp_requests_tx,
    /// Neighbour solicitations received.
    ns_rx,
    /// Neighbour advertisements received.
    na_rx,
    /// Neighbour advertisements sent.
    na_tx,
    /// Neighbour solicitations sent (resolution).
    ns_tx,
    /// Unicast probes of `STALE` neighbours sent (ARP or NS).
    probes_tx,
    /// ICMP echo replies sent.
    echo_replies_v4,
    /// ICMPv6 echo replies sent.
    echo_replies_v6,
    /// ICMP/ICMPv6 errors sent.
    icmp_errors_tx,
    /// ICMP errors not sent: rate limited.
    icmp_rate_limited,
    /// ICMP errors not sent: forbidden by the rules (about an error, a group address, a
    /// non-first fragment, a bad source).
    icmp_suppressed,
    /// ICMP errors not sent: the interface has no address to send them from.
    icmp_no_source,
    /// TCP resets sent by the firewall's `reject`.
    tcp_resets_tx,
    /// Packets queued while their neighbour resolves.
    pending_queued,
    /// Pending packets sent after resolution.
    pending_sent,
    /// Neighbour updates handed to the writer.
    neigh_updates,
    /// Neighbour updates dropped: the queue was full.
    neigh_queue_full,
    /// IPv4 packets larger than their egress MTU, without DF, fragmented.
    fragmented_v4,
    /// Fragments made of them.
    fragments_v4,
    /// Packets for the router handed to an interface's kernel twin (the punt path).
    punted,
    /// Packets the kernel twins sent, routed out by the stage (also counted in
    /// `forwarded_v4`/`forwarded_v6` once they leave).
    twin_tx,
}

struct Waiting {
    ip: IpAddr,
    iface: u16,
    first: Tick,
    last_req: Tick,
    pkts: VecDeque<(Packet, u16)>,
}

const PROBE_SLOTS: usize = 64;
/// A worker does not re-send a learn for an entry confirmed this recently with the same MAC.
const LEARN_REFRESH_MS: Tick = 1_000;

/// ICMP errors the stage generates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IcmpErr {
    TimeExceeded,
    NoRoute,
    HostUnreachable,
    TooBig(u16),
    /// A firewall's reject: destination unreachable with these ICMP and ICMPv6 codes; from
    /// the packet's own destination when that is one of ours (the input hook), as Linux
    /// answers for its local addresses.
    Rejected(u8, u8, bool),
}

impl IcmpErr {
    /// The ICMPv4 and ICMPv6 (type, code) of the error, and the 4 bytes after the checksum
    /// (the MTU of a "too big").
    fn wire(self) -> ([u8; 2], [u8; 2], u32) {
        match self {
            IcmpErr::TimeExceeded => (
                [v4::TIME_EXCEEDED, v4::CODE_TTL],
                [v6::TIME_EXCEEDED, v6::CODE_HOP_LIMIT],
                0,
            ),
            IcmpErr::NoRoute => (
                [v4::DEST_UNREACH, v4::CODE_NET],
                [v6::DEST_UNREACH, v6::CODE_NO_ROUTE],
                0,
            ),
            IcmpErr::HostUnreachable => ([v4::DEST_UNREACH, v4::CODE_HOST], [v6::DEST_UNREACH, v6::CODE_ADDR], 0),
            IcmpErr::Rejected(c4, c6, _) => ([v4::DEST_UNREACH, c4], [v6::DEST_UNREACH, c6], 0),
            IcmpErr::TooBig(mtu) => (
                [v4::DEST_UNREACH, v4::CODE_FRAG_NEEDED],
                [v6::PACKET_TOO_BIG, 0],
                u32::from(mtu),
            ),
        }
    }
}

/// The addresses of an ICMP error: (ours, the offending packet's sender).
enum ErrorAddrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

/// What the stage reads per batch.
struct Ctx<'a> {
    ifaces: &'a Interfaces,
    neigh: &'a Neigh,
    cfg: &'a L3Config,
    g: &'a Guard,
    now: Tick,
}

/// The worker's own mutable state.
struct State {
    c: Arc<CachePadded<L3Counters>>,
    icmp: TokenBucket,
    pending: Vec<Waiting>,
    pending_pkts: usize,
    probes: Box<[(IpAddr, u16, Tick); PROBE_SLOTS]>,
    /// The fragments of the packet being fragmented (kept, so fragmenting allocates nothing
    /// once warm).
    frags: Vec<Packet>,
}

/// Per-worker state of the L3 stage.
pub struct L3Worker {
    ifaces: Arc<Interfaces>,
    neigh: Neigh,
    cfg: L3Config,
    st: State,
}

impl L3Worker {
    /// A worker over the shared interfaces and neighbour table.
    pub fn new(ifaces: Arc<Interfaces>, neigh: Neigh, cfg: L3Config) -> L3Worker {
        let st = State {
            c: Default::default(),
            icmp: TokenBucket::new(cfg.icmp_rate, cfg.icmp_burst),
            pending: Vec::with_capacity(cfg.pending_total),
            pending_pkts: 0,
            probes: Box::new([(IpAddr::V4(Ipv4Addr::UNSPECIFIED), u16::MAX, 0); PROBE_SLOTS]),
            frags: Vec::new(),
        };
        L3Worker { ifaces, neigh, cfg, st }
    }

    /// The counters (shared with the stats reader).
    pub fn counters(&self) -> &Arc<CachePadded<L3Counters>> {
        &self.st.c
    }

    /// The interfaces.
    pub fn interfaces(&self) -> &Interfaces {
        &self.ifaces
    }

    /// Takes up a new version of the interfaces (addresses changed, interfaces added or
    /// removed); packets waiting for a neighbour keep the interface id they were routed to,
    /// and those of an interface removed are dropped at the next poll (counted as
    /// `iface_removed`).
    pub fn set_interfaces(&mut self, ifaces: Arc<Interfaces>) {
        self.ifaces = ifaces;
    }

    /// Packets waiting for a neighbour.
    pub fn pending_len(&self) -> usize {
        self.st.pending_pkts
    }

    /// Processes every packet of `batch` (frames parsed by `freeway_packet::parse`, for the
    /// router), leaving it empty. Runs [`L3Worker::poll`] first when packets are pending.
    pub fn process(&mut self, batch: &mut Batch, routes: &mut impl RouteLookup, now: Tick, out: &mut impl L3Out) {
        self.with_ctx(now, |st, cx| {
            if !st.pending.is_empty() {
                st.poll(cx, out);
            }
            for p in batch.drain() {
                st.one(cx, p, routes, out);
            }
        });
    }

    /// Processes one packet (same as a batch of one, without the pending poll).
    pub fn process_one(&mut self, pkt: Packet, routes: &mut impl RouteLookup, now: Tick, out: &mut impl L3Out) {
        self.with_ctx(now, |st, cx| st.one(cx, pkt, routes, out));
    }

    /// Sends a packet the kernel twin of interface `iif` sent (a frame parsed by
    /// `freeway_packet::parse`): the router's own traffic, such as a routing daemon's BGP
    /// session. It is not forwarded: its TTL is kept and the forward hook does not judge it;
    /// it is routed by the FIB and its next hop resolved by the neighbour table as a
    /// forwarded packet's is. Multicast, broadcast and IPv6 link-local destinations leave by
    /// `iif` itself.
    pub fn output(&mut self, pkt: Packet, iif: u16, routes: &mut impl RouteLookup, now: Tick, out: &mut impl L3Out) {
        self.with_ctx(now, |st, cx| st.output(cx, pkt, iif, routes, out));
    }

    /// Services the pending queue: sends packets whose neighbour resolved, re-sends requests
    /// that are due, drops (counted) what failed or waited too long. Call it when a worker
    /// is idle (no batch) at least every few milliseconds; [`L3Worker::process`] calls it too.
    pub fn poll(&mut self, now: Tick, out: &mut impl L3Out) {
        if self.st.pending.is_empty() {
            return;
        }
        self.with_ctx(now, |st, cx| st.poll(cx, out));
    }

    /// Whether packets wait for a neighbour: [`L3Worker::poll`] then has work due soon, so an
    /// idle worker sleeps only briefly.
    pub fn has_pending(&self) -> bool {
        !self.st.pending.is_empty()
    }

    /// Runs `f` on the stage's state with the context of one batch: the neighbour table
    /// pinned once, the clock read once (`now`).
    #[inline(always)]
    fn with_ctx<R>(&mut self, now: Tick, f: impl FnOnce(&mut State, &Ctx) -> R) -> R {
        let g = self.neigh.pin();
        let cx = Ctx {
            ifaces: &self.ifaces,
            neigh: &self.neigh,
            cfg: &self.cfg,
            g: &g,
            now,
        };
        f(&mut self.st, &cx)
    }
}

impl State {
    #[inline]
    fn drop(&self, out: &mut impl L3Out, pkt: Packet, r: L3Drop) {
        self.c.drops[r as usize].inc();
        out.drop(pkt, r);
    }

    fn one(&mut self, cx: &Ctx, pkt: Packet, routes: &mut impl RouteLookup, out: &mut impl L3Out) {
        self.c.rx.inc();
        let Some(iif) = cx.ifaces.ingress(&pkt) else {
            return self.drop(out, pkt, L3Drop::NotRouterInterface);
        };
        if pkt.meta.vlan_depth > 1 {
            return self.drop(out, pkt, L3Drop::VlanStack);
        }
        match pkt.meta.ethertype {
            ETHERTYPE_ARP => self.arp(cx, pkt, iif, out),
            ETHERTYPE_IPV4 => self.ipv4(cx, pkt, iif, routes, out),
            ETHERTYPE_IPV6 => self.ipv6(cx, pkt, iif, routes, out),
            _ => self.drop(out, pkt, L3Drop::UnsupportedEthertype),
        }
    }

    /// Hands a learn to the writer unless the entry already says the same and is fresh.
    fn learn(&self, cx: &Ctx, ip: IpAddr, iface: u16, mac: [u8; 6], create: bool) {
        if let Some(v) = cx.neigh.lookup(ip, iface, cx.g) {
            if v.state == NeighState::Permanent
                || (v.state == NeighState::Reachable
                    && v.mac == mac
                    && cx.now.saturating_sub(v.updated) < LEARN_REFRESH_MS)
            {
                return;
            }
        }
        self.request(cx, NeighUpdate::Learn { ip, iface, mac, create });
    }

    fn request(&self, cx: &Ctx, u: NeighUpdate) {
        if cx.neigh.request(u) {
            self.c.neigh_updates.inc();
        } else {
            self.c.neigh_queue_full.inc();
        }
    }

    // ---- ARP ----

    fn arp(&mut self, cx: &Ctx, mut pkt: Packet, iif: u16, out: &mut impl L3Out) {
        let it = &cx.ifaces.get(iif).expect("ingress interface exists");
        let l3 = usize::from(pkt.meta.l3_off);
        let msg = match pkt.data().get(l3..l3.saturating_add(arp::ARP_LEN)) {
            Some(b) if pkt.meta.l3_off != NO_OFFSET => arp::parse(b),
            _ => None,
        };
        let Some(m) = msg else {
            return self.drop(out, pkt, L3Drop::BadArp);
        };
        if is_group(&m.sha) || m.sha == [0; 6] {
            return self.drop(out, pkt, L3Drop::BadArp);
        }
        let for_us = it.has_v4(m.tpa);
        let sender_ok = v4_unicast_source(m.spa) && it.v4_on_link(m.spa) && !it.has_v4(m.spa);
        if m.op == arp::OP_REQUEST {
            self.c.arp_requests_rx.inc();
            if !for_us {
                if sender_ok && m.spa == m.tpa {
                    // Gratuitous ARP: refresh an existing entry only.
                    self.learn(cx, IpAddr::V4(m.spa), iif, m.sha, false);
                }
                return self.drop(out, pkt, L3Drop::ArpNotForUs);
            }
            if sender_ok {
                self.learn(cx, IpAddr::V4(m.spa), iif, m.sha, true);
            }
            if !arp::reply_in_place(&mut pkt, l3, it.mac, &m) {
                return self.drop(out, pkt, L3Drop::BadArp);
            }
            self.c.arp_replies_tx.inc();
            out.emit(it.port, pkt);
        } else {
            self.c.arp_replies_rx.inc();
            if sender_ok {
                self.learn(cx, IpAddr::V4(m.spa), iif, m.sha, for_us);
            }
            self.drop(out, pkt, L3Drop::Consumed);
        }
    }

    // ---- IPv4 ----

    fn ipv4(&mut self, cx: &Ctx, mut pkt: Packet, iif: u16, routes: &mut impl RouteLookup, out: &mut impl L3Out) {
        let it = cx.ifaces.get(iif).expect("ingress interface exists");
        let l3 = usize::from(pkt.meta.l3_off);
        let f = pkt.data();
        if pkt.meta.l3_off == NO_OFFSET || f.len() < l3 + 20 {
            return self.drop(out, pkt, L3Drop::Malformed);
        }
        let vihl = f[l3];
        let hl = usize::from(vihl & 0x0f) * 4;
        let tot = usize::from(rd16(f, l3 + 2));
        if vihl >> 4 != 4 || hl < 20 || tot < hl || l3 + tot > f.len() {
            return self.drop(out, pkt, L3Drop::Malformed);
        }
        // Verified once per buffer: conntrack may have done it already.
        if pkt.meta.flags & meta_flags::IPV4_CSUM_OK == 0 {
            if !verify(&f[l3..l3 + hl]) {
                return self.drop(out, pkt, L3Drop::BadChecksum);
            }
            pkt.meta.flags |= meta_flags::IPV4_CSUM_OK;
        }
        if let Err(why) = out.nat(NatHook::Prerouting, &mut pkt, iif, iif) {
            return self.drop(out, pkt, why);
        }
        let f = pkt.data();
        // Each address read as one 32-bit word: built byte by byte, LLVM kept it on the stack
        // in four byte stores and read it back whole, a load that cannot be forwarded from
        // the stores.
        let src = Ipv4Addr::from(rd32(f, l3 + 12));
        let dst = Ipv4Addr::from(rd32(f, l3 + 16));
        if !v4_unicast_source(src) {
            return self.drop(out, pkt, L3Drop::Martian);
        }
        let frag = rd16(f, l3 + 6);
        let proto = f[l3 + 9];
        let ttl = f[l3 + 8];
        let l2_unicast = f[0..6] == it.mac;
        if cx.ifaces.local_v4(dst).is_some() {
            if frag & 0x3fff != 0 {
                return self.drop(out, pkt, L3Drop::LocalFragment);
            }
            let echo = proto == IPPROTO_ICMP && f.get(l3 + hl) == Some(&v4::ECHO_REQUEST);
            if !self.admit(cx, FilterHook::Input, &pkt, iif, iif, out) {
                return self.drop(out, pkt, L3Drop::Filtered);
            }
            if echo {
                if icmp::echo_reply_v4(&mut pkt, l3, it.mac) {
                    self.c.echo_replies_v4.inc();
                    pkt.meta.vlan = it.vlan.unwrap_or(freeway_packet::NO_VLAN);
                    return out.emit(it.port, pkt);
                }
                return self.drop(out, pkt, L3Drop::BadIcmp);
            }
            return self.punt(out, pkt, iif, L3Drop::Local);
        }
        if !l2_unicast
            || dst.is_multicast()
            || dst.is_broadcast()
            || dst.is_unspecified()
            || dst.octets()[0] == 0
            || dst.is_loopback()
            || it.is_v4_broadcast(dst)
        {
            return self.drop(out, pkt, L3Drop::NotForwardable);
        }
        if let Err(r) = self.hop_left(cx, &pkt, iif, ttl, out) {
            return self.drop(out, pkt, r);
        }
        let hop = routes.lookup_v4(dst, pkt.meta.flow_hash);
        let (hop, oif) = match self.next_hop(cx, &pkt, iif, hop, out) {
            Ok(r) => r,
            Err(r) => return self.drop(out, pkt, r),
        };
        if oif.is_v4_broadcast(dst) && hop.gateway.is_none() {
            // Directed broadcast to a connected subnet: not forwarded (RFC 2644).
            return self.drop(out, pkt, L3Drop::NotForwardable);
        }
        let mtu = cx.ifaces.mtu(hop.iface);
        // A datagram reassembled here leaves in fragments of its largest original size: that
        // is what must fit (Linux's `frag_max_size`).
        let note = pkt.frag_note();
        let mut over = note.map_or(tot, |n| usize::from(n.max_size)) > usize::from(mtu);
        if over && frag & IPV4_DF != 0 {
            // Quoting the packet as it arrived (before its TTL changes), as Linux does.
            self.icmp_error(cx, &pkt, iif, IcmpErr::TooBig(mtu), out);
            return self.drop(out, pkt, L3Drop::TooBig);
        }
        if let (true, Some(n)) = (over, note) {
            // Without DF a reassembled datagram is cut to the MTU when it is refragmented.
            pkt.set_frag_note(freeway_packet::FragNote { max_size: mtu, ..n });
            over = false;
        }
        // TTL - 1 with the RFC 1624 incremental update of the header checksum.
        let f = pkt.data_mut();
        let old_word = u16::from_be_bytes([ttl, proto]);
        let new_word = u16::from_be_bytes([ttl - 1, proto]);
        f[l3 + 8] = ttl - 1;
        let c = update16(rd16(f, l3 + 10), old_word, new_word);
        wr16(f, l3 + 10, c);
        let nh = hop.gateway.unwrap_or(IpAddr::V4(dst));
        if over {
            return self.forward_fragmented(cx, pkt, iif, hop.iface, nh, mtu, out);
        }
        self.forward(cx, pkt, iif, hop.iface, nh, out);
    }

    /// Forwards an IPv4 packet larger than its egress MTU (DF clear): the forward hook judges
    /// the whole packet, as Linux's does before it fragments on output; then each fragment
    /// is delivered. A packet the fragmenter refuses (options leaving no room under a tiny
    /// MTU) is a counted `too_big` drop.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn forward_fragmented(
        &mut self,
        cx: &Ctx,
        mut pkt: Packet,
        iif: u16,
        oif: u16,
        nh: IpAddr,
        mtu: u16,
        out: &mut impl L3Out,
    ) {
        if !self.admit(cx, FilterHook::Forward, &pkt, iif, oif, out) {
            return self.drop(out, pkt, L3Drop::Filtered);
        }
        if let Err(why) = out.nat(NatHook::Postrouting, &mut pkt, iif, oif) {
            return self.drop(out, pkt, why);
        }
        let mut frags = std::mem::take(&mut self.frags);
        match fragment_v4(&pkt, usize::from(mtu), out.pool(), |f| frags.push(f)) {
            Ok(n) => {
                self.c.fragmented_v4.inc();
                self.c.fragments_v4.add(n as u64);
                out.pool().put(pkt);
                for f in frags.drain(..) {
                    self.deliver(cx, f, iif, oif, nh, out);
                }
            }
            Err(_) => self.drop(out, pkt, L3Drop::TooBig),
        }
        self.frags = frags;
    }

    /// The first half of the forwarding decision both families share: a packet whose TTL
    /// (hop limit) would expire gets Time Exceeded and `Err(TtlExpired)`; the route lookup
    /// runs only for a packet that may be forwarded, and its result goes to
    /// [`State::next_hop`]. (The lookup is the caller's own call rather than a closure handed
    /// in here: a closure compiled apart returned its `NextHop` through the stack, and the
    /// copy that followed stalled on store-to-load forwarding.)
    #[inline(always)]
    fn hop_left(&mut self, cx: &Ctx, pkt: &Packet, iif: u16, ttl: u8, out: &mut impl L3Out) -> Result<(), L3Drop> {
        if ttl <= 1 {
            self.icmp_error(cx, pkt, iif, IcmpErr::TimeExceeded, out);
            return Err(L3Drop::TtlExpired);
        }
        Ok(())
    }

    /// The second half: no route gets Destination Unreachable and `Err(NoRoute)`; otherwise
    /// the egress interface.
    #[inline(always)]
    fn next_hop<'c>(
        &mut self,
        cx: &Ctx<'c>,
        pkt: &Packet,
        iif: u16,
        hop: Option<NextHop>,
        out: &mut impl L3Out,
    ) -> Result<(NextHop, &'c Interface), L3Drop> {
        let Some(hop) = hop else {
            self.icmp_error(cx, pkt, iif, IcmpErr::NoRoute, out);
            return Err(L3Drop::NoRoute);
        };
        let oif = cx.ifaces.get(hop.iface).ok_or(L3Drop::BadNextHop)?;
        Ok((hop, oif))
    }

    // ---- IPv6 ----

    fn ipv6(&mut self, cx: &Ctx, mut pkt: Packet, iif: u16, routes: &mut impl RouteLookup, out: &mut impl L3Out) {
        let it = cx.ifaces.get(iif).expect("ingress interface exists");
        let l3 = usize::from(pkt.meta.l3_off);
        let f = pkt.data();
        if pkt.meta.l3_off == NO_OFFSET || f.len() < l3 + 40 || f[l3] >> 4 != 6 {
            return self.drop(out, pkt, L3Drop::Malformed);
        }
        let plen = usize::from(rd16(f, l3 + 4));
        let end = l3 + 40 + plen;
        if end > f.len() {
            return self.drop(out, pkt, L3Drop::Malformed);
        }
        if let Err(why) = out.nat(NatHook::Prerouting, &mut pkt, iif, iif) {
            return self.drop(out, pkt, why);
        }
        let f = pkt.data();
        let src = addr6(&f[l3 + 8..l3 + 24]);
        let dst = addr6(&f[l3 + 24..l3 + 40]);
        let hop_limit = f[l3 + 7];
        if src.is_multicast() || src.is_loopback() {
            return self.drop(out, pkt, L3Drop::Martian);
        }
        let l2_unicast = f[0..6] == it.mac;
        if cx.ifaces.is_local_v6(dst, iif) || (dst.is_multicast() && it.listens_v6(dst)) {
            return self.local_v6(cx, pkt, iif, l3, end, src, dst, out);
        }
        if !l2_unicast
            || dst.is_multicast()
            || dst.is_unspecified()
            || dst.is_loopback()
            || src.is_unspecified()
            || is_link_local(src)
            || is_link_local(dst)
        {
            return self.drop(out, pkt, L3Drop::NotForwardable);
        }
        if let Err(r) = self.hop_left(cx, &pkt, iif, hop_limit, out) {
            return self.drop(out, pkt, r);
        }
        let hop = routes.lookup_v6(dst, pkt.meta.flow_hash);
        let (hop, _) = match self.next_hop(cx, &pkt, iif, hop, out) {
            Ok(r) => r,
            Err(r) => return self.drop(out, pkt, r),
        };
        let mtu = cx.ifaces.mtu(hop.iface);
        // A reassembled datagram leaves in fragments of its largest original size.
        if pkt.frag_note().map_or(40 + plen, |n| usize::from(n.max_size)) > usize::from(mtu) {
            self.icmp_error(cx, &pkt, iif, IcmpErr::TooBig(mtu), out);
            return self.drop(out, pkt, L3Drop::TooBig);
        }
        pkt.data_mut()[l3 + 7] = hop_limit - 1;
        let nh = hop.gateway.unwrap_or(IpAddr::V6(dst));
        self.forward(cx, pkt, iif, hop.iface, nh, out);
    }

    #[allow(clippy::too_many_arguments)]
    fn local_v6(
        &mut self,
        cx: &Ctx,
        mut pkt: Packet,
        iif: u16,
        l3: usize,
        end: usize,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        out: &mut impl L3Out,
    ) {
        let it = cx.ifaces.get(iif).expect("ingress interface exists");
        let Some(up) = v6_upper(&pkt.data()[l3..end]) else {
            return self.drop(out, pkt, L3Drop::Malformed);
        };
        if up.fragment {
            return self.drop(out, pkt, L3Drop::LocalFragment);
        }
        if !self.admit(cx, FilterHook::Input, &pkt, iif, iif, out) {
            return self.drop(out, pkt, L3Drop::Filtered);
        }
        if up.proto != IPPROTO_ICMPV6 {
            return self.punt(out, pkt, iif, L3Drop::Local);
        }
        let Some(&ty) = pkt.data().get(l3 + up.off) else {
            return self.drop(out, pkt, L3Drop::BadIcmp);
        };
        match ty {
            v6::ECHO_REQUEST => {
                if src.is_unspecified() {
                    return self.drop(out, pkt, L3Drop::Martian);
                }
                let from = if dst.is_multicast() { it.v6_source_for(src) } else { dst };
                if icmp::echo_reply_v6(&mut pkt, l3, up.off, it.mac, from) {
                    self.c.echo_replies_v6.inc();
                    pkt.meta.vlan = it.vlan.unwrap_or(freeway_packet::NO_VLAN);
                    out.emit(it.port, pkt);
                } else {
                    self.drop(out, pkt, L3Drop::BadIcmp);
                }
            }
            v6::NEIGHBOR_SOLICIT | v6::NEIGHBOR_ADVERT => {
                let solicit = ty == v6::NEIGHBOR_SOLICIT;
                if solicit {
                    self.c.ns_rx.inc();
                } else {
                    self.c.na_rx.inc();
                }
                let Ok(m) = nd::parse(&pkt.data()[l3..end], up.off) else {
                    return self.drop(out, pkt, L3Drop::BadNd);
                };
                let ours = it.has_v6(m.target);
                // Whom the message tells about (a solicitation's sender, an advertisement's
                // target), whether that may be learned, and whether learning may create an
                // entry.
                let (ip, learnable, create) = if solicit {
                    (m.src, !m.src.is_unspecified() && it.v6_on_link(m.src), ours)
                } else {
                    let create = m.flags & nd::FLAG_SOLICITED != 0;
                    (m.target, it.v6_on_link(m.target) && !ours, create)
                };
                if learnable {
                    if let Some(mac) = m.lladdr.filter(|m| !is_group(m)) {
                        self.learn(cx, IpAddr::V6(ip), iif, mac, create);
                    }
                }
                if solicit && !ours {
                    return self.drop(out, pkt, L3Drop::NdNotForUs);
                }
                if solicit {
                    let frame_src = mac_at(pkt.data(), 6);
                    let mut r = out.pool().get();
                    if nd::build_na_reply(&mut r, &m, it.mac, it.vlan, frame_src) {
                        r.meta.in_port = it.port;
                        self.c.na_tx.inc();
                        out.emit(it.port, r);
                    } else {
                        out.pool().put(r);
                    }
                }
                self.drop(out, pkt, L3Drop::Consumed);
            }
            v6::ROUTER_SOLICIT | v6::ROUTER_ADVERT | v6::REDIRECT => self.drop(out, pkt, L3Drop::NdIgnored),
            _ => self.punt(out, pkt, iif, L3Drop::Local),
        }
    }

    // ---- Neighbours, pending queue, transmit ----

    /// Hands `pkt` to the kernel twin of `iif`; without one it ends as `otherwise`.
    fn punt(&self, out: &mut impl L3Out, pkt: Packet, iif: u16, otherwise: L3Drop) {
        match out.punt(iif, &pkt) {
            Punt::Sent => {
                self.c.punted.inc();
                out.pool().put(pkt);
            }
            Punt::Failed => self.drop(out, pkt, L3Drop::PuntFailed),
            Punt::NoTwin => self.drop(out, pkt, otherwise),
        }
    }

    /// A packet the kernel twin of `iif` sent (see [`L3Worker::output`]).
    fn output(&mut self, cx: &Ctx, pkt: Packet, iif: u16, routes: &mut impl RouteLookup, out: &mut impl L3Out) {
        let Some(it) = cx.ifaces.get(iif) else {
            return self.drop(out, pkt, L3Drop::NotRouterInterface);
        };
        let l3 = usize::from(pkt.meta.l3_off);
        let f = pkt.data();
        let dst = match pkt.meta.ethertype {
            ETHERTYPE_IPV4 if pkt.meta.l3_off != NO_OFFSET && f.len() >= l3 + 20 => {
                IpAddr::V4(Ipv4Addr::new(f[l3 + 16], f[l3 + 17], f[l3 + 18], f[l3 + 19]))
            }
            ETHERTYPE_IPV6 if pkt.meta.l3_off != NO_OFFSET && f.len() >= l3 + 40 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(&f[l3 + 24..l3 + 40]);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            _ => return self.drop(out, pkt, L3Drop::UnsupportedEthertype),
        };
        // Group and link-local destinations leave by the twin's own interface as they are.
        let group = match dst {
            IpAddr::V4(a) if a.is_multicast() => {
                let o = a.octets();
                Some([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
            }
            IpAddr::V4(a) if a.is_broadcast() || it.is_v4_broadcast(a) => Some([0xff; 6]),
            IpAddr::V6(a) if a.is_multicast() => Some(crate::iface::v6_multicast_mac(a)),
            _ => None,
        };
        self.c.twin_tx.inc();
        if let Some(mac) = group {
            return self.transmit(cx, pkt, iif, mac, out);
        }
        if let IpAddr::V6(a) = dst {
            if is_link_local(a) {
                return self.deliver(cx, pkt, iif, iif, dst, out);
            }
        }
        let hop = match dst {
            IpAddr::V4(a) => routes.lookup_v4(a, pkt.meta.flow_hash),
            IpAddr::V6(a) => routes.lookup_v6(a, pkt.meta.flow_hash),
        };
        let Some(hop) = hop else {
            return self.drop(out, pkt, L3Drop::NoRoute);
        };
        let nh = hop.gateway.unwrap_or(dst);
        self.deliver(cx, pkt, iif, hop.iface, nh, out);
    }

    fn forward(&mut self, cx: &Ctx, mut pkt: Packet, iif: u16, oif: u16, nh: IpAddr, out: &mut impl L3Out) {
        if !self.admit(cx, FilterHook::Forward, &pkt, iif, oif, out) {
            return self.drop(out, pkt, L3Drop::Filtered);
        }
        if let Err(why) = out.nat(NatHook::Postrouting, &mut pkt, iif, oif) {
            return self.drop(out, pkt, why);
        }
        self.deliver(cx, pkt, iif, oif, nh, out);
    }

    /// Sends a packet the forward hook let through to its next hop `nh` on `oif`: at once
    /// when the neighbour is usable, into the pending queue while it resolves.
    #[inline(always)]
    fn deliver(&mut self, cx: &Ctx, pkt: Packet, iif: u16, oif: u16, nh: IpAddr, out: &mut impl L3Out) {
        match cx.neigh.lookup(nh, oif, cx.g) {
            Some(v) if v.state.usable() => {
                if v.state == NeighState::Stale {
                    self.probe(cx, oif, nh, v.mac, out);
                }
                self.transmit(cx, pkt, oif, v.mac, out);
            }
            Some(v) if v.state == NeighState::Failed => {
                if cx.cfg.host_unreachable {
                    self.icmp_error(cx, &pkt, iif, IcmpErr::HostUnreachable, out);
                }
                self.drop(out, pkt, L3Drop::HostUnreachable);
            }
            v => self.enqueue(cx, pkt, iif, oif, nh, v.is_none(), out),
        }
    }

    fn transmit(&self, cx: &Ctx, mut pkt: Packet, oif: u16, mac: [u8; 6], out: &mut impl L3Out) {
        let Some(it) = cx.ifaces.get(oif) else {
            return self.drop(out, pkt, L3Drop::BadNextHop);
        };
        let Some(vlan) = egress_tag_frame(&mut pkt, it.vlan) else {
            return self.drop(out, pkt, L3Drop::NoHeadroom);
        };
        let f = pkt.data_mut();
        f[0..6].copy_from_slice(&mac);
        f[6..12].copy_from_slice(&it.mac);
        if pkt.meta.ethertype == ETHERTYPE_IPV4 {
            self.c.forwarded_v4.inc();
        } else {
            self.c.forwarded_v6.inc();
        }
        out.emit_on_vlan(it.port, pkt, vlan);
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue(&mut self, cx: &Ctx, pkt: Packet, iif: u16, oif: u16, nh: IpAddr, absent: bool, out: &mut impl L3Out) {
        let idx = match self.pending.iter().position(|w| w.ip == nh && w.iface == oif) {
            Some(i) => i,
            None => {
                if self.pending.len() >= cx.cfg.pending_total || cx.cfg.pending_per_neigh == 0 {
                    return self.drop(out, pkt, L3Drop::PendingOverflow);
                }
                if !self.solicit(cx, oif, nh, None, out) {
                    return self.drop(out, pkt, L3Drop::NoSourceAddress);
                }
                if absent {
                    self.request(cx, NeighUpdate::Resolve { ip: nh, iface: oif });
                }
                self.pending.push(Waiting {
                    ip: nh,
                    iface: oif,
                    first: cx.now,
                    last_req: cx.now,
                    pkts: VecDeque::with_capacity(cx.cfg.pending_per_neigh),
                });
                self.pending.len() - 1
            }
        };
        if self.pending[idx].pkts.len() >= cx.cfg.pending_per_neigh {
            // Like the kernel's unres_qlen: the oldest packet makes room.
            if let Some((old, _)) = self.pending[idx].pkts.pop_front() {
                self.pending_pkts -= 1;
                self.drop(out, old, L3Drop::PendingOverflow);
            }
        } else if self.pending_pkts >= cx.cfg.pending_total {
            return self.drop(out, pkt, L3Drop::PendingOverflow);
        }
        self.pending[idx].pkts.push_back((pkt, iif));
        self.pending_pkts += 1;
        self.c.pending_queued.inc();
    }

    fn poll(&mut self, cx: &Ctx, out: &mut impl L3Out) {
        let mut pending = std::mem::take(&mut self.pending);
        let mut i = 0;
        while i < pending.len() {
            if cx.ifaces.get(pending[i].iface).is_none() {
                // Its interface is gone (a reload removed it): no ICMP error from it.
                let w = pending.swap_remove(i);
                self.pending_pkts -= w.pkts.len();
                for (p, _) in w.pkts {
                    self.drop(out, p, L3Drop::IfaceRemoved);
                }
                continue;
            }
            let w = &mut pending[i];
            let v = cx.neigh.lookup(w.ip, w.iface, cx.g);
            match v {
                Some(v) if v.state.usable() => {
                    let w = pending.swap_remove(i);
                    self.pending_pkts -= w.pkts.len();
                    for (p, _) in w.pkts {
                        self.c.pending_sent.inc();
                        self.transmit(cx, p, w.iface, v.mac, out);
                    }
                    continue;
                }
                Some(v) if v.state == NeighState::Failed => {
                    let w = pending.swap_remove(i);
                    self.fail(cx, w, L3Drop::HostUnreachable, out);
                    continue;
                }
                _ => {}
            }
            if cx.now.saturating_sub(w.first) >= cx.cfg.pending_timeout_ms {
                let w = pending.swap_remove(i);
                self.fail(cx, w, L3Drop::PendingTimeout, out);
                continue;
            }
            if cx.now.saturating_sub(w.last_req) >= cx.cfg.retrans_ms {
                w.last_req = cx.now;
                let (ip, iface) = (w.ip, w.iface);
                self.solicit(cx, iface, ip, None, out);
                if v.is_none() {
                    self.request(cx, NeighUpdate::Resolve { ip, iface });
                }
            }
            i += 1;
        }
        // Nothing is added to `self.pending` while it is taken.
        self.pending = pending;
    }

    fn fail(&mut self, cx: &Ctx, w: Waiting, r: L3Drop, out: &mut impl L3Out) {
        self.pending_pkts -= w.pkts.len();
        for (p, iif) in w.pkts {
            if cx.cfg.host_unreachable {
                self.icmp_error(cx, &p, iif, IcmpErr::HostUnreachable, out);
            }
            self.drop(out, p, r);
        }
    }

    /// Sends an ARP request / NS for `ip` out of `oif`: broadcast / solicited-node multicast,
    /// or unicast to `mac` (a probe). `false` if the interface has no source address.
    fn solicit(&self, cx: &Ctx, oif: u16, ip: IpAddr, mac: Option<[u8; 6]>, out: &mut impl L3Out) -> bool {
        let Some(it) = cx.ifaces.get(oif) else { return false };
        let mut p = out.pool().get();
        let ok = match ip {
            IpAddr::V4(t) => match it.v4_source_for(t) {
                Some(s) => arp::build_request(&mut p, it.mac, it.vlan, s, t, mac),
                None => false,
            },
            IpAddr::V6(t) => nd::build_ns(&mut p, it.mac, it.vlan, it.v6_source_for(t), t, mac),
        };
        if !ok {
            out.pool().put(p);
            return false;
        }
        match (mac.is_some(), ip) {
            (true, _) => self.c.probes_tx.inc(),
            (false, IpAddr::V4(_)) => self.c.arp_requests_tx.inc(),
            (false, IpAddr::V6(_)) => self.c.ns_tx.inc(),
        }
        p.meta.in_port = it.port;
        out.emit(it.port, p);
        true
    }

    /// Probes a `STALE` neighbour, at most once per `retrans_ms` from this worker.
    fn probe(&mut self, cx: &Ctx, oif: u16, ip: IpAddr, mac: [u8; 6], out: &mut impl L3Out) {
        let h = match ip {
            IpAddr::V4(a) => u32::from(a),
            IpAddr::V6(a) => {
                let o = a.octets();
                rd32(&o, 12)
            }
        };
        let slot = (h.wrapping_mul(0x9e37_79b9) >> 26) as usize ^ usize::from(oif);
        let slot = slot % PROBE_SLOTS;
        let (pip, pif, t) = self.probes[slot];
        if pip == ip && pif == oif && cx.now.saturating_sub(t) < cx.cfg.retrans_ms {
            return;
        }
        self.probes[slot] = (ip, oif, cx.now);
        self.solicit(cx, oif, ip, Some(mac), out);
    }

    /// Asks the firewall about `pkt` at `hook`: `true` if accepted; otherwise, after answering
    /// its sender for a reject, `false`, and the caller drops it as `filtered`. The packet
    /// stays where it is (a verdict, not a move: copying the packet out and back right after
    /// the stage's narrow stores to it stalls on store-to-load forwarding).
    #[inline(always)]
    fn admit(&mut self, cx: &Ctx, hook: FilterHook, pkt: &Packet, iif: u16, oif: u16, out: &mut impl L3Out) -> bool {
        match out.filter(hook, pkt, iif, oif) {
            FilterVerdict::Accept => return true,
            FilterVerdict::Drop => {}
            FilterVerdict::Reject(Reject::Unreachable { v4, v6 }) => {
                let local = hook == FilterHook::Input;
                self.icmp_error(cx, pkt, iif, IcmpErr::Rejected(v4, v6, local), out)
            }
            FilterVerdict::Reject(Reject::TcpReset) => self.tcp_reset(cx, pkt, iif, hook == FilterHook::Input, out),
        }
        false
    }

    /// The interface `orig` arrived on and the framing of a reply to it (back to the frame's
    /// source MAC, from the interface's); `None`, counted as suppressed, for a frame that
    /// gets no reply (from a group address, too short, not IP).
    fn reply_l2<'c>(&self, cx: &Ctx<'c>, orig: &Packet, iif: u16) -> Option<(&'c Interface, L2)> {
        let it = cx.ifaces.get(iif)?;
        let f = orig.data();
        if f.len() < 14 || is_group(&f[0..6]) || orig.meta.l3_off == NO_OFFSET {
            self.c.icmp_suppressed.inc();
            return None;
        }
        let l2 = L2 {
            dst: mac_at(f, 6),
            src: it.mac,
            vlan: it.vlan,
        };
        Some((it, l2))
    }

    /// Answers `orig` (as received on `iif`) with a TCP reset through the ICMP token bucket;
    /// a packet that is not a TCP segment gets ICMP port unreachable instead (from its own
    /// destination when `local`: it was for one of our addresses).
    fn tcp_reset(&mut self, cx: &Ctx, orig: &Packet, iif: u16, local: bool, out: &mut impl L3Out) {
        if orig.meta.ip_proto != freeway_packet::wire::IPPROTO_TCP {
            let e = IcmpErr::Rejected(v4::CODE_PORT, v6::CODE_PORT, local);
            return self.icmp_error(cx, orig, iif, e, out);
        }
        let Some((it, l2)) = self.reply_l2(cx, orig, iif) else {
            return;
        };
        if !self.icmp.take(cx.now) {
            self.c.icmp_rate_limited.inc();
            return;
        }
        let (f, l3) = (orig.data(), usize::from(orig.meta.l3_off));
        let mut p = out.pool().get();
        if !build_tcp_reset(&mut p, l2, &f[l3..], orig.meta.ethertype == ETHERTYPE_IPV6) {
            self.c.icmp_suppressed.inc();
            return out.pool().put(p);
        }
        self.c.tcp_resets_tx.inc();
        p.meta.in_port = it.port;
        out.emit(it.port, p);
    }

    /// Sends an ICMP/ICMPv6 error about `orig` (as received on `iif`) back to its sender, if
    /// the rules and the rate limiter allow.
    fn icmp_error(&mut self, cx: &Ctx, orig: &Packet, iif: u16, e: IcmpErr, out: &mut impl L3Out) {
        let Some((it, l2)) = self.reply_l2(cx, orig, iif) else {
            return;
        };
        let (f, l3) = (orig.data(), usize::from(orig.meta.l3_off));
        let (ip, addrs) = if orig.meta.ethertype == ETHERTYPE_IPV4 {
            let Some(h) = f.get(l3..l3 + 20) else { return };
            let tot = usize::from(rd16(h, 2)).min(f.len() - l3);
            if tot < 20 {
                return;
            }
            let ip = &f[l3..l3 + tot];
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            if !v4_error_allowed(ip) || it.is_v4_broadcast(dst) {
                self.c.icmp_suppressed.inc();
                return;
            }
            let to = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let from = match e {
                IcmpErr::Rejected(_, _, true) => Some(dst),
                _ => it.v4_source_for(to),
            };
            let Some(from) = from else {
                self.c.icmp_no_source.inc();
                return;
            };
            (ip, ErrorAddrs::V4(from, to))
        } else {
            let Some(h) = f.get(l3..l3 + 40) else { return };
            let end = (l3 + 40 + usize::from(rd16(h, 4))).min(f.len());
            let ip = &f[l3..end];
            if !v6_error_allowed(ip) {
                self.c.icmp_suppressed.inc();
                return;
            }
            let to = addr6(&ip[8..24]);
            let from = match e {
                IcmpErr::Rejected(_, _, true) => addr6(&ip[24..40]),
                _ => it.v6_source_for(to),
            };
            (ip, ErrorAddrs::V6(from, to))
        };
        if !self.icmp.take(cx.now) {
            self.c.icmp_rate_limited.inc();
            return;
        }
        let ([ty4, code4], [ty6, code6], rest) = e.wire();
        let mut p = out.pool().get();
        let built = match addrs {
            ErrorAddrs::V4(from, to) => icmp::build_v4_error(&mut p, l2, from, to, ty4, code4, rest, ip),
            ErrorAddrs::V6(from, to) => icmp::build_v6_error(&mut p, l2, from, to, ty6, code6, rest, ip),
        };
        if !built {
            return out.pool().put(p);
        }
        self.c.icmp_errors_tx.inc();
        p.meta.in_port = it.port;
        out.emit(it.port, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_moves_to_its_thread_and_counters_are_shared() {
        fn send<T: Send>() {}
        fn sync<T: Send + Sync>() {}
        send::<L3Worker>();
        sync::<Neigh>();
        sync::<Interfaces>();
        sync::<CachePadded<L3Counters>>();
    }

    #[test]
    fn drop_reasons_are_indexed_in_order() {
        for (i, r) in L3Drop::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        let c = L3Counters::default();
        c.drops[L3Drop::NoRoute as usize].add(3);
        c.rx.inc();
        let s = c.snapshot();
        assert_eq!(s.drop_count(L3Drop::NoRoute), 3);
        let mut t = s.clone();
        t.merge(&s);
        assert_eq!((t.rx, t.drop_count(L3Drop::NoRoute)), (2, 6));
        let j = serde_json::to_string(&t).unwrap();
        assert!(j.contains("\"no_route\":6"), "{j}");
        let back: L3Stats = serde_json::from_str(&j).unwrap();
        assert_eq!(back, t);
    }
}
