//! [`TapReader`]: the writer's end of a tap (one per tap, moved into its
//! [`crate::writer::TapWriter`]): it holds the consumer key of the tap's rings and can
//! detach the tap from its registry.
//!
//! Threads: the tap's writer thread (or whoever polls its writer).

use std::fmt;
use std::sync::{Arc, Weak};

use super::{TapId, TapShared};
use crate::ring::{Consumer, ConsumerKey};

/// Control-plane operations a [`TapReader`] needs to detach its own tap.
pub(crate) trait Detach: Send + Sync {
    fn detach_id(&self, id: TapId) -> bool;
}

/// The consumer side of a tap, given to its writer ([`crate::writer::TapWriter`]).
pub struct TapReader {
    pub(crate) tap: Arc<TapShared>,
    /// The right to drain the tap's rings (one per tap).
    pub(crate) key: ConsumerKey,
    pub(crate) registry: Weak<dyn Detach>,
}

impl fmt::Debug for TapReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TapReader").field("tap", &self.tap.id).finish()
    }
}

impl TapReader {
    /// The tap.
    pub fn tap(&self) -> &TapShared {
        &self.tap
    }

    /// The tap and the consumer side of its rings: this reader holds the rings' one
    /// consumer key (made with them in [`Common::new_tap`]).
    pub(crate) fn consume(&mut self) -> (&TapShared, Consumer<'_>) {
        let rings = self
            .tap
            .rings
            .consumer(&mut self.key)
            .expect("a tap's reader holds the key of the tap's rings");
        (&self.tap, rings)
    }

    /// Closes the tap, detaches it from its registry (if still alive) and waits until no
    /// worker is pushing. Closed first: a worker waiting for room in a lossless tap's ring
    /// gives up, so it lets go of whatever it holds (the `RwLock` registry's read lock)
    /// before the registry is changed.
    pub fn detach(&self) {
        self.tap.close();
        if let Some(r) = self.registry.upgrade() {
            r.detach_id(self.tap.id);
        }
        self.tap.close_and_quiesce();
    }
}
