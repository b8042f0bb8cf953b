//! Guards for loom models (only under `--cfg loom`).
//!
//! loom 0.7 can explore far fewer interleavings than a model needs and still pass: when the
//! main thread of a model runs to its `join` without a scheduling point another thread could
//! take over at, or when no preemption bound is set (the bounded search adds backtracking
//! points the unbounded one misses). Before these guards the capture ring's two SPSC models
//! explored one execution each and passed with a `Relaxed` publish; models of the bridge
//! table, the neighbour table and conntrack explored 6–90 but several caught no weakened
//! ordering, or never reached the interleaving they were written for.
//!
//! [`model`] fails a model that explores fewer executions than it is known to need;
//! [`Outcomes`] fails one that never reaches an outcome it names. Run the models with
//! `LOOM_MAX_PREEMPTIONS=3`, as CI does.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Runs `f` under `loom::model` and panics unless loom explored at least `min` executions.
///
/// Pick `min` well below the count the model explores today (`LOOM_LOG=info` prints it) and
/// above 1, so that a change which makes the model vacuous fails it.
pub fn model(min: usize, f: impl Fn() + Sync + Send + 'static) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    loom::model(move || {
        r.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let n = runs.load(Ordering::Relaxed);
    assert!(
        n >= min,
        "loom explored {n} executions, expected at least {min}: the model is vacuous \
         (is LOOM_MAX_PREEMPTIONS set? CI runs the models with 3)"
    );
}

/// [`model`] for a model whose executions report their outcomes: `f` records each
/// execution's outcome in the [`Outcomes`] it is given, returned for the test to
/// [`Outcomes::expect`] the ones it was written to reach.
pub fn explore(min: usize, f: impl Fn(&Outcomes) + Sync + Send + 'static) -> Outcomes {
    let outcomes = Outcomes::default();
    let seen = outcomes.clone();
    model(min, move || f(&seen));
    outcomes
}

/// The outcomes a model's executions ended in, recorded outside loom (std types), so that a
/// test can check after [`model`] returns that loom reached each one it expects: a count of
/// executions alone does not show that the interleavings that matter were among them.
#[derive(Clone, Debug, Default)]
pub struct Outcomes(Arc<Mutex<BTreeSet<&'static str>>>);

impl Outcomes {
    /// Records that an execution ended in outcome `o`.
    pub fn saw(&self, o: &'static str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(o);
    }

    /// Panics unless every outcome of `all` was recorded.
    pub fn expect(&self, all: &[&str]) {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for o in all {
            assert!(
                seen.contains(o),
                "loom never explored an execution where {o} (saw {seen:?})"
            );
        }
    }
}
