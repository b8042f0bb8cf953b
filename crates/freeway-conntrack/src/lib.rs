//! Freeway's connection tracker: a lock-free connection table shared by all workers, TCP/UDP/
//! ICMP trackers, zones, limits, timeout policies, background expiry and a stateful firewall.
//!
//! # Who does what
//!
//! * **Workers** each own a [`CtWorker`] (from [`Conntrack::worker`]). Per batch they pin an
//!   epoch guard and read the clock once ([`CtWorker::pin`]); per packet
//!   ([`CtWorker::track`]) they check the headers, build the symmetric (zone, 5-tuple) key, look
//!   it up without any lock, and update the connection in place: UDP/ICMP/other protocols with
//!   atomics on the connection's own cache line (written only when the value changes, so the
//!   expiry tick at most once per clock tick), TCP under a per-connection lock that only that
//!   connection's packets take. A miss with `commit` creates the connection (a CAS on its bucket
//!   head, after reserving a place under the global and per-zone limits) and hands a pointer to
//!   the expiry thread through the worker's own bounded lock-free queue. A full queue or table is
//!   counted and the new connection refused; established connections keep flowing. Workers
//!   never wait on anything but a busy TCP connection's lock.
//! * **The expiry thread** ([`Expirer`], one) drains the workers' queues into its list of live
//!   connections and removes expired ones in bounded chunks at least
//!   [`CtConfig::expiry_interval_ms`] apart. It is the only thread that unlinks connections
//!   (with the control plane's flushes, which take the same remover mutex; no worker ever
//!   takes it). Lookups never check expiry.
//! * **The control plane** (any thread, through a [`Conntrack`] clone) flushes, dumps
//!   ([`ConnRecord`], printed like `conntrack -L`), reads statistics and sets zone limits.
//!
//! # Bounds
//!
//! At most [`CtConfig::max`] connections (default 1,000,000) in all zones, and per-zone limits;
//! each connection is one 128-byte node, the bucket array is sized once from `max`. Per-worker
//! expiry queues hold [`CtConfig::expiry_queue`] pointers. Refusals are counted by reason
//! ([`InvalidReason::LimitGlobal`], [`InvalidReason::LimitZone`],
//! [`InvalidReason::QueueFull`]).
//!
//! # Modules
//!
//! [`key`] (symmetric keys), [`nat`] (packet rewriting and port choice for NAT), [`extract`] (header checks, tuples), [`table`] (the lock-free
//! table), [`tcp`] (TCP tracker), [`timeout`] (policies), [`ct`] (the shared handle and the
//! worker), [`expiry`], [`dump`] (records), [`query`] (filters, JSON, events), [`firewall`], [`frames`] (frame builders for
//! tests and benchmarks).
#![warn(missing_docs)]

pub mod ct;
pub mod dump;
pub mod expiry;
pub mod extract;
pub mod firewall;
pub mod frames;
pub mod key;
pub mod nat;
pub mod query;
mod shared;
pub mod table;
pub mod tcp;
pub mod timeout;

pub use ct::{Conntrack, CtConfig, CtStats, CtWorker, NatCommit, NatPlan, NewConn, TrackFlags};
pub use dump::{ConnRecord, TupleRecord};
pub use expiry::{Expirer, ExpiryThread};
pub use firewall::{Firewall, FirewallPolicy, FwStats, FwWorker, Verdict};
pub use key::{Key, Tuple};
pub use query::{CtFilter, Event, EventDiff, EventKind, TupleFilter};
pub use table::{pin, Guard};
pub use timeout::{TimeoutClass, Timeouts};

/// Why a packet is [`CtState::Invalid`]. `r as usize` indexes per-reason counters;
/// [`InvalidReason::ALL`] lists them in that order.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum InvalidReason {
    /// Headers inconsistent with the parser's metadata, or truncated L4.
    Malformed = 0,
    /// Bad IPv4 header checksum.
    IpChecksum,
    /// An IP fragment (fragments are not reassembled).
    Fragment,
    /// UDP length field out of range.
    L4Length,
    /// A TCP flag combination no stack sends.
    TcpFlags,
    /// A TCP segment that makes no sense in the connection's state.
    TcpState,
    /// A TCP segment outside the tracked sequence/ack windows.
    TcpWindow,
    /// A packet that needs an existing connection and has none (TCP non-SYN with pickup off,
    /// echo reply, ICMP error about an unknown connection).
    NoConnection,
    /// An ICMP type conntrack does not track.
    IcmpType,
    /// An ICMP error whose embedded header is unusable.
    IcmpInner,
    /// New connection refused: the table is full.
    LimitGlobal,
    /// New connection refused: the zone is at its limit.
    LimitZone,
    /// New connection refused: the worker's expiry queue is full.
    QueueFull,
}

impl InvalidReason {
    /// Number of reasons.
    pub const COUNT: usize = 13;
    /// Every reason, in counter order.
    pub const ALL: [InvalidReason; InvalidReason::COUNT] = [
        InvalidReason::Malformed,
        InvalidReason::IpChecksum,
        InvalidReason::Fragment,
        InvalidReason::L4Length,
        InvalidReason::TcpFlags,
        InvalidReason::TcpState,
        InvalidReason::TcpWindow,
        InvalidReason::NoConnection,
        InvalidReason::IcmpType,
        InvalidReason::IcmpInner,
        InvalidReason::LimitGlobal,
        InvalidReason::LimitZone,
        InvalidReason::QueueFull,
    ];

    /// A short snake_case name for statistics.
    pub fn name(self) -> &'static str {
        match self {
            InvalidReason::Malformed => "malformed",
            InvalidReason::IpChecksum => "ip_checksum",
            InvalidReason::Fragment => "fragment",
            InvalidReason::L4Length => "l4_length",
            InvalidReason::TcpFlags => "tcp_flags",
            InvalidReason::TcpState => "tcp_state",
            InvalidReason::TcpWindow => "tcp_window",
            InvalidReason::NoConnection => "no_connection",
            InvalidReason::IcmpType => "icmp_type",
            InvalidReason::IcmpInner => "icmp_inner",
            InvalidReason::LimitGlobal => "limit_global",
            InvalidReason::LimitZone => "limit_zone",
            InvalidReason::QueueFull => "queue_full",
        }
    }

    /// Whether this is a refused new connection (a limit), rather than a bad packet.
    pub fn is_limit(self) -> bool {
        matches!(
            self,
            InvalidReason::LimitGlobal | InvalidReason::LimitZone | InvalidReason::QueueFull
        )
    }
}

/// The connection state of a packet, as a firewall sees it (`ct_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum CtState {
    /// The first packet of a connection, or any packet of a connection that has not seen a
    /// reply yet.
    New,
    /// A packet of a connection that has seen traffic in both directions.
    Established,
    /// An ICMP error about a tracked connection.
    Related,
    /// Not acceptable (malformed, out of window, refused by a limit, ...).
    Invalid(InvalidReason),
    /// Not tracked: non-IP frames, ICMPv6 neighbour discovery and MLD.
    Untracked,
}

impl CtState {
    /// Number of per-state packet counters: the state's byte is below it (`STATE_BYTES`).
    pub(crate) const COUNTERS: usize = InvalidReason::COUNT + 5;

    /// The index of this state's packet counter, below [`CtState::COUNTERS`]: the state's
    /// own byte. The compiler stores an invalid reason's value in it and the other states in
    /// values after the reasons' (new, established, related and untracked in 13, 14, 15 and
    /// 17 today: the variant's index plus 13); `STATE_BYTES` checks at compile time that the
    /// states' bytes are distinct and below [`CtState::COUNTERS`]. (A `match` giving each
    /// state an index compiles to a jump table: LLVM does not see the identity on the byte.)
    #[inline(always)]
    pub(crate) const fn counter(self) -> usize {
        // SAFETY: `CtState` is one byte (checked by `STATE_BYTES`) and every byte of a valid
        // `CtState` is initialised, so it is a valid `u8`.
        (unsafe { std::mem::transmute::<CtState, u8>(self) }) as usize
    }

    /// Every state: the invalid reasons in their order, then new, established, related and
    /// untracked.
    pub(crate) const ALL: [CtState; InvalidReason::COUNT + 4] = {
        let mut all = [CtState::New; InvalidReason::COUNT + 4];
        let mut i = 0;
        while i < InvalidReason::COUNT {
            all[i] = CtState::Invalid(InvalidReason::ALL[i]);
            i += 1;
        }
        all[InvalidReason::COUNT + 1] = CtState::Established;
        all[InvalidReason::COUNT + 2] = CtState::Related;
        all[InvalidReason::COUNT + 3] = CtState::Untracked;
        all
    };
}

/// Every state has its own counter ([`CtState::counter`]), below [`CtState::COUNTERS`].
const STATE_BYTES: () = {
    assert!(std::mem::size_of::<CtState>() == 1);
    let mut used = [false; CtState::COUNTERS];
    let mut i = 0;
    while i < CtState::ALL.len() {
        let c = CtState::ALL[i].counter();
        assert!(c < CtState::COUNTERS && !used[c]);
        used[c] = true;
        i += 1;
    }
};
const _: () = STATE_BYTES;

/// The result of tracking one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtResult {
    /// The state.
    pub state: CtState,
    /// The packet travels in the reply direction of its connection.
    pub reply: bool,
    /// A new connection that tracking without commit did not create (the caller creates it
    /// by tracking the packet again with commit, once it decided to let it through).
    pub uncommitted: bool,
}

impl CtResult {
    /// A result in the original direction.
    #[inline(always)]
    pub const fn orig(state: CtState) -> CtResult {
        CtResult {
            state,
            reply: false,
            uncommitted: false,
        }
    }

    /// Whether tracking an IPv4 packet got past its header checksum (verified then, or
    /// already known good): every result but a malformed header or a bad checksum. For IPv6
    /// and non-IP frames it says nothing.
    #[inline]
    pub fn ipv4_csum_checked(&self) -> bool {
        !matches!(
            self.state,
            CtState::Invalid(InvalidReason::Malformed | InvalidReason::IpChecksum)
        )
    }

    /// Whether the packet is invalid.
    #[inline]
    pub fn is_invalid(&self) -> bool {
        matches!(self.state, CtState::Invalid(_))
    }

    /// Whether the packet is a new connection refused by a limit (to be dropped even without a
    /// firewall).
    #[inline]
    pub fn over_limit(&self) -> bool {
        matches!(self.state, CtState::Invalid(r) if r.is_limit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_its_own_counter() {
        let mut seen = [false; CtState::COUNTERS];
        for s in CtState::ALL {
            let i = s.counter();
            assert!(i < CtState::COUNTERS, "{s:?} -> {i}");
            assert!(!seen[i], "{s:?} shares counter {i}");
            seen[i] = true;
        }
        assert_eq!(seen.iter().filter(|&&b| b).count(), InvalidReason::COUNT + 4);
    }
}
