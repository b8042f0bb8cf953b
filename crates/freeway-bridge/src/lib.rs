//! Freeway's learning bridge.
//!
//! * [`table`]: the lock-free (MAC, VLAN) hash table: RCU-style chains, one writer, epoch
//!   reclamation.
//! * [`layout`]: where an entry keeps its write-heavy timestamps (own cache line, written once
//!   per tick; or the naive "before" layout for the benchmark).
//! * [`fdb`]: the forwarding database on top of the table: the workers' read handle, the single
//!   writer (learning queue, learning limit, static entries, flush, chunked ageing).
//! * [`mdb`]: IGMP/MLD snooping: the multicast database (one writer, epoch-published views
//!   read by workers), the parsing of reports, leaves and queries.
//! * [`vlan`]: access and trunk ports, ingress filtering, egress tagging.
//! * [`stage`]: the per-batch L2 stage run by workers.
//!
//! Locking context, as in Linux `net/bridge`: functions on [`Fdb`], [`table::Table::lookup`]
//! and [`Bridge::process`] run on worker threads and never block; functions on
//! [`FdbWriter`] run on the one FDB writer thread (or a worker that owns it in offline mode).
#![warn(missing_docs)]

pub mod fdb;
pub mod layout;
pub mod mdb;
pub mod stage;
pub mod table;
pub mod vlan;

pub use fdb::{Fdb, FdbConfig, FdbEntry, FdbError, FdbStats, FdbWriter, LearnRequest, Learned};
/// MAC addresses ([`Mac`] and its parse error), shared with the other crates through
/// `freeway-packet`.
pub use freeway_packet::mac;
pub use freeway_packet::Mac;
pub use layout::{Layout, Naive, Padded};
pub use mdb::{McastRouter, Mdb, MdbConfig, MdbWriter};
pub use stage::{
    check_group_fwd_mask, is_link_local, Bridge, BridgeCounters, BridgeWorker, Emit, Learning, PortFlags, StormControl,
    GROUP_FWD_RESTRICTED,
};
pub use vlan::{PortVlan, PortVlanConfig, VlanSet};
