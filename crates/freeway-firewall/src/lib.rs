//! Freeway's firewall: rulesets written in a subset of nftables' own language (`nft -f`
//! files), parsed into an abstract syntax ([`ast`]), compiled into a per-hook classifier,
//! and judged per packet by the workers.
//!
//! # Who does what
//!
//! * **The control plane** parses a ruleset ([`parse`]), compiles it (names of ports and
//!   router interfaces resolved to numbers) and publishes the compiled form; a bad file is an
//!   error naming its line and column and changes nothing.
//! * **Workers** judge each packet at a hook (`forward`, `input`) against one whole
//!   compiled ruleset, old or new, never half of each.
//!
//! # Modules
//!
//! [`ast`] (what a ruleset says), [`packet`] (what a packet holds: [`Fields`]),
//! [`firewall`] (the ruleset ready for workers: [`Firewall`], [`FwState`], the walk through
//! the chains), `eval` (the resolved program and one rule's evaluation, shared by both
//! strategies), `linear` (every rule in order: the reference) and `compile` (the classifier:
//! bit-vector intersection per chain), [`build`] (helpers that write rulesets as values),
//! [`parse`] (nftables syntax to [`ast`], errors with line and column) and [`list`] (back to
//! `nft list ruleset`'s text and `nft -j`'s JSON); [`nat`] (NAT statements, resolved: what a
//! `type nat` chain decides).
#![warn(missing_docs)]

pub mod ast;
pub mod build;
mod compile;
mod eval;
pub mod firewall;
mod linear;
pub mod list;
pub mod nat;
pub mod packet;
pub mod parse;

pub use firewall::{
    Action, Decision, Firewall, FwState, LogLine, RuleRef, Strategy, LOG_LINES_PER_SEC, NFPROTO_BRIDGE,
};
pub use list::{list, list_json};
pub use nat::NatChoice;
pub use packet::{Fields, NO_IF};
pub use parse::parse;

#[cfg(test)]
mod tests;
