//! The plain evaluator: every rule of a chain in order. It is the reference the classifier
//! ([`crate::compile`]) is tested against, and the "before" of `freeway bench firewall`.
//!
//! Threads: reads the shared program; writes only the worker's state.

use crate::eval::{run_rule, CVerdict, Ctx};
use crate::firewall::FwState;

/// The first rule of `chain` at or after `from` and before `end` that ends with a verdict
/// for the packet (other than `continue`), and that verdict.
#[inline]
pub(crate) fn next_verdict(
    cx: &Ctx,
    chain: u32,
    from: usize,
    end: usize,
    st: &mut FwState,
) -> Option<(usize, CVerdict)> {
    let rules = &cx.p.chains[chain as usize].rules;
    (from..end.min(rules.len())).find_map(|r| run_rule(cx.p, &rules[r], 0, cx.f, st, cx.now_ms).map(|v| (r, v)))
}
