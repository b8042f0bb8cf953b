//! IP fragment reassembly for the stateful stages (conntrack, the firewall), and
//! refragmentation of the reassembled datagram after the verdict.
//!
//! - [`reasm`]: the per-worker [`Reassembler`]: IPv4 (key: source, destination,
//!   identification, protocol) and IPv6 (source, destination, the Fragment header's
//!   identification), bounded in datagrams, bytes and time, with every dropped fragment
//!   counted by reason ([`FragCounters`]).
//! - [`refrag`]: [`refragment`] splits a reassembled datagram again into fragments no larger
//!   than its largest original fragment ([`freeway_packet::FragNote`]).
//! - [`classify`]: which frames are fragments, and what their headers say.
//!
//! # Threads
//!
//! Each worker owns its reassembler (no shared state, no lock): the fragments of one
//! datagram reach one worker because every port's worker choice hashes a fragment by its
//! addresses and protocol only (Freeway's flow hash, `freeway_packet::flow_hash`; the kernel's
//! `PACKET_FANOUT_HASH`, whose flow dissector does not read ports of a fragment; the RSS hash
//! of NICs, which falls back to the addresses for fragments). The counters are single-writer
//! [`freeway_sync::Counter`]s that any thread may read.
//!
//! # Why hand-written
//!
//! Reassembly crates (smoltcp's `iface::fragmentation`, for one) keep a general buffer per
//! datagram and know nothing of a per-worker packet pool, of a worker's coarse clock or of
//! drop counters by reason; the datapath needs fragments kept as the very buffers they
//! arrived in (no copy until the datagram is complete), a hard bound on bytes held, Linux's
//! overlap rules and a reassembled datagram delivered as one pool [`freeway_packet::Packet`].
//! That is a small fixed table, simpler to write than to adapt.

#![warn(missing_docs)]

pub mod build;
pub mod classify;
pub mod reasm;
pub mod refrag;

pub use classify::{classify, Class, FragInfo};
pub use reasm::{DropReason, FragCounters, FragStats, Limits, Reassembler};
pub use refrag::{refragment, RefragError};
