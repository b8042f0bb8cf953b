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
//! [`ast`] (what a ruleset says).
#![warn(missing_docs)]

pub mod ast;
pub mod list;
pub mod parse;

pub use list::{list, list_json};
pub use parse::parse;
