//! Freeway's Linux control plane: the kernel of the network namespace Freeway runs in as its
//! routing daemon's view of the router, in the manner of VPP's linux-cp.
//!
//! * [`translate`]: rtnetlink route messages to Freeway route changes (pure; the mirror's
//!   state: several kernel routes per prefix, the best one installed).
//! * [`netlink`]: the sockets and the mirror's loop (a full dump at start, then
//!   notifications, a full resync when the socket overruns).
//! * [`neigh`]: rtnetlink neighbour messages of the twins to Freeway neighbour entries.
//! * [`apply`]: how the changes enter the RIB (a mirrored route never displaces another's).
//! * [`kernel`]: writing routes into the kernel (benchmarks and tests).
//! * [`twin`]: the router interfaces' kernel twins (tap devices) and the punt path.
//!
//! The changes go to the RIB's single writer (the control thread), which installs them with
//! their origin ([`freeway_route::RouteKind::Linux`] and the kernel's route protocol).
#![warn(missing_docs)]

pub mod apply;
pub mod kernel;
pub mod neigh;
pub mod netlink;
pub mod translate;
pub mod twin;

pub use apply::{apply, Applied};
pub use neigh::{decode_neigh, Neighbour};
pub use netlink::{run, run_with, MirrorConfig};
pub use translate::{decode, Change, Decoded, Filter, Key, Mirror, MirrorStats, Skip};
pub use twin::{Addresses, TwinSpec, TwinStats, Twins};
