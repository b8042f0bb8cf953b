//! Freeway's router tables: RIB, longest-prefix-match FIB for IPv4 and IPv6 with ECMP, and
//! the per-worker route cache.
//!
//! * [`prefix`]: IPv4/IPv6 prefixes, strict parsing.
//! * [`nh`]: next hops, ECMP next-hop groups (`pick(flow_hash)`), counted references.
//! * `dir` (private): the DIR-24-8 / 16-8-8... multibit trie with atomic in-place entries.
//! * [`fib`]: the workers' handle: lock-free lookups, route generation.
//! * [`rib`]: routes (control side) and the single FIB writer; `ip route`-style dumps.
//! * [`cache`]: the per-worker route cache validated by the generation.
//!
//! Locking context: [`Fib`] lookups and [`RouteCache`] run on workers and never block or write
//! shared memory (except the rare reference count of a cache refill); [`Rib`] methods run on
//! one control thread. A worker's flow: pin once per batch ([`Fib::pin`]), then per packet
//! `cache.lookup_v4_in(&fib, &guard, dst, meta.flow_hash)`.
#![warn(missing_docs)]

pub mod cache;
mod dir;
pub mod epoch;
pub mod fib;
pub mod nh;
pub mod prefix;
pub mod rib;

pub use cache::{CacheStats, RouteCache};
pub use epoch::Guard;
pub use fib::{Fib, FibConfig, FibMemory};
pub use nh::{NextHop, NhGroup, NhRef};
pub use prefix::{Prefix, Prefix4, Prefix6, PrefixError};
pub use rib::{rt_proto_name, rt_proto_parse, Rib, Route, RouteError, RouteKind, RouteRecord};
