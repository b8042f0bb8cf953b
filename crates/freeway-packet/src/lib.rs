//! Freeway packet layer: buffers, batches, zero-copy header views, the fast-path parser,
//! checksums, frame builders and the symmetric flow hash.
//!
//! - [`buffer`]: [`Packet`] (an owned buffer with headroom plus [`Meta`]), [`Batch`] and the
//!   per-worker [`PacketPool`].
//! - [`bytes`]: big-endian field readers and writers ([`bytes::rd16`], [`bytes::wr16`], …)
//!   shared by the parsers and frame rewriters of every crate.
//! - [`wire`]: zero-copy header views (smoltcp's `wire` views re-exported, plus an 802.1Q
//!   [`wire::VlanTag`] view) and the in-place [`vlan_push`]/[`vlan_pop`] helpers.
//! - [`parse`](mod@parse): the fast-path parser that fills [`Meta`], with [`ParseError`] as the
//!   list of drop reasons.
//! - [`flow_hash`]: the symmetric flow hash used to spread flows over workers and by conntrack.
//! - [`checksum`]: the Internet checksum, full and incremental (RFC 1624).
//! - [`mac`]: [`Mac`], a 48-bit Ethernet address with its colon form (parse, print, serde).
//! - [`build`]: frame builders for tests and the traffic generator.
//! - [`fragment`]: IPv4 output fragmentation and IPv6 fragmentation of reassembled datagrams.
//!
//! Invariants: nothing in this crate panics on any packet content; every parser and view
//! bounds-checks before it reads. Nothing here is shared between threads: a [`Packet`] is
//! owned by one thread at a time, and every function works on the packet it is given.

#![warn(missing_docs)]

pub mod buffer;
pub mod build;
pub mod bytes;
pub mod checksum;
pub mod flow_hash;
pub mod fragment;
pub mod mac;
pub mod parse;
pub mod wire;

pub use buffer::*;
pub use flow_hash::{hash_5tuple_v4, hash_5tuple_v6};
pub use mac::Mac;
pub use parse::{parse, parse_frame, ParseError, MAX_FRAME};
pub use wire::{vlan_pop, vlan_push};
