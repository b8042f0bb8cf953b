//! The plain evaluator: every rule of a chain in order. It is the reference the classifier
//! ([`crate::compile`]) is tested against, and the "before" of `freeway bench firewall`.
//!
//! Threads: reads the shared program; writes only the worker's state.

use crate::eval::{run_rule, CVerdict, Program};
use crate::firewall::FwState;
use crate::packet::Fields;

/// The first rule of `chain` at or after `from` that ends with a verdict for `f` (other than
/// `continue`), and that verdict.
#[inline]
pub(crate) fn next_verdict(
    p: &Program,
    chain: u32,
    from: usize,
    f: &Fields,
    st: &mut FwState,
    now_ms: u64,
) -> Option<(usize, CVerdict)> {
    let rules = &p.chains[chain as usize].rules;
    for (r, rule) in rules.iter().enumerate().skip(from) {
        if let Some(v) = run_rule(p, rule, 0, f, st, now_ms) {
            return Some((r, v));
        }
    }
    None
}
