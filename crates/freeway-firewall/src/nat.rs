//! NAT statements, resolved: what a `type nat` chain decides for a new connection's first
//! packet ([`Firewall::judge_nat`](crate::Firewall::judge_nat)).
//!
//! A NAT statement ends its rule like a verdict (it accepts the packet in its chain). Two
//! cases make it a no-op that lets the chain go on with the next rule, as in nftables: its
//! addresses are of the other family than the packet's (`snat ip to …` in an `inet` table
//! seen by an IPv6 packet), or it is a map and the packet's key is in none of its elements.
//!
//! The datapath applies the [`NatChoice`]: it picks the address and port within the ranges
//! (a free port, for a source translation), records the translation with the connection and
//! rewrites the packet; `masquerade` takes the address of the interface the packet leaves by.

use crate::ast::{self, Field, NatKind, NatTo};
use crate::eval::Intervals;
use crate::packet::{value, Fields, NFPROTO_IPV4, NFPROTO_IPV6};

/// What a NAT chain decided: the kind of translation and the ranges to pick from. `None` for
/// a range means "keep the packet's own" (a `dnat to ADDR` keeps the destination port, a
/// plain `masquerade` picks the interface's address and keeps the source port unless it is
/// taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NatChoice {
    /// Which translation.
    pub kind: NatKind,
    /// The addresses to pick from (IPv4 in the low 32 bits); `None` for masquerade.
    pub addr: Option<(u128, u128)>,
    /// The ports to pick from.
    pub port: Option<(u16, u16)>,
}

/// A NAT statement, resolved.
#[derive(Clone, Debug)]
pub(crate) struct NatRule {
    kind: NatKind,
    /// The packet family its addresses apply to: `None` for both (masquerade in `inet`).
    nfproto: Option<u8>,
    target: Target,
}

#[derive(Clone, Debug)]
enum Target {
    Range {
        addr: Option<(u128, u128)>,
        port: Option<(u16, u16)>,
    },
    Map {
        key: Field,
        /// The keys' intervals, sorted, and the target of each.
        keys: Intervals,
        targets: Vec<(u128, u128, u128, Option<u16>)>,
    },
}

impl NatRule {
    /// Resolves `n`, a statement of a table of `family`.
    pub(crate) fn new(n: &ast::Nat, family: ast::Family) -> NatRule {
        let nfproto = match (n.family, family, &n.to) {
            (Some(ast::Family::Ip6), ..) | (None, ast::Family::Ip6, _) => Some(NFPROTO_IPV6),
            (Some(_), ..) | (None, ast::Family::Ip, _) => Some(NFPROTO_IPV4),
            // An `inet` masquerade (the parser asks for a family whenever there is an address).
            _ => None,
        };
        let target = match &n.to {
            NatTo::Range { addr, port } => Target::Range {
                addr: *addr,
                port: *port,
            },
            NatTo::Map { key, elems } => {
                let mut targets: Vec<(u128, u128, u128, Option<u16>)> = elems
                    .iter()
                    .filter_map(|(k, a, p)| match k {
                        ast::Atom::Range(lo, hi) => Some((*lo, *hi, *a, *p)),
                        ast::Atom::Name(_) => None,
                    })
                    .collect();
                targets.sort_by_key(|t| (t.0, t.1));
                let keys = Intervals::new(targets.iter().map(|t| (t.0, t.1)).collect());
                Target::Map {
                    key: *key,
                    keys,
                    targets,
                }
            }
        };
        NatRule {
            kind: n.kind,
            nfproto,
            target,
        }
    }

    /// What it does to packet `f`: `None` when it does not apply (the rule goes on).
    pub(crate) fn choose(&self, f: &Fields) -> Option<NatChoice> {
        if self.nfproto.is_some_and(|p| p != f.nfproto) || !matches!(f.nfproto, NFPROTO_IPV4 | NFPROTO_IPV6) {
            return None;
        }
        match &self.target {
            Target::Range { addr, port } => Some(NatChoice {
                kind: self.kind,
                addr: *addr,
                port: *port,
            }),
            Target::Map { key, keys, targets } => {
                let v = value(*key, f)?;
                if !keys.contains(v) {
                    return None;
                }
                // Of the elements that begin at or below the value, the last that holds it.
                let i = targets.partition_point(|t| t.0 <= v);
                let t = targets[..i].iter().rev().find(|t| v <= t.1)?;
                Some(NatChoice {
                    kind: self.kind,
                    addr: Some((t.2, t.2)),
                    port: t.3.map(|p| (p, p)),
                })
            }
        }
    }
}
