//! The Linux control plane's glue: the kernel route mirror's thread (`fw-linuxcp`, see
//! `freeway-linuxcp`) and how its changes enter the RIB.
//!
//! The mirror hands batches of changes to the control thread (`fw-ctl`, the RIB's single
//! writer) through a bounded channel; when the channel is full the mirror waits, its netlink
//! socket may then overrun, and the overrun is answered by a full resync. The control thread
//! installs a mirrored route only where the RIB has no route of another origin for its prefix
//! (a configured, connected or `ctl` route wins: the kernel's route is counted as shadowed),
//! and deletes only mirrored routes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, SendTimeoutError};
use freeway_linuxcp::{Change, MirrorConfig};
use freeway_route::{Rib, RouteKind};

use crate::config::linux::LinuxSpec;

use super::RunError;

/// The mirror's side of the control thread: its changes, and what became of them.
pub(crate) struct LinuxFeed {
    pub rx: Receiver<Vec<Change>>,
    /// Routes installed or replaced.
    pub installed: u64,
    /// Routes deleted.
    pub deleted: u64,
    /// Kernel routes not installed because a route of another origin holds the prefix.
    pub shadowed: u64,
    /// Kernel routes the RIB refused (full tables, bad next hops).
    pub refused: u64,
}

impl LinuxFeed {
    /// Applies a batch to the RIB (on the control thread).
    pub(crate) fn apply(&mut self, rib: &mut Rib, changes: Vec<Change>) {
        for c in changes {
            match c {
                Change::Replace(r) => match rib.kind_of(r.prefix) {
                    None | Some(RouteKind::Linux(_)) => {
                        let p = r.prefix;
                        match rib.replace(r) {
                            Ok(()) => self.installed += 1,
                            Err(e) => {
                                self.refused += 1;
                                tracing::warn!(prefix = %p, error = %e, refused = self.refused, "linux mirror: route refused");
                            }
                        }
                    }
                    Some(_) => self.shadowed += 1,
                },
                Change::Delete(p) => {
                    if let Some(RouteKind::Linux(_)) = rib.kind_of(p) {
                        if rib.delete(p).is_ok() {
                            self.deleted += 1;
                        }
                    }
                }
            }
        }
    }
}

/// Starts the mirror's thread; its changes arrive on the returned feed until `stop`.
pub(crate) fn spawn(
    spec: &LinuxSpec,
    ifaces: Vec<String>,
    stop: &Arc<AtomicBool>,
) -> Result<(JoinHandle<()>, LinuxFeed), RunError> {
    let (tx, rx) = bounded::<Vec<Change>>(64);
    let cfg = MirrorConfig {
        filter: spec.mirror.clone(),
        ifaces,
    };
    let stop = stop.clone();
    let h = std::thread::Builder::new()
        .name("fw-linuxcp".into())
        .spawn(move || {
            let sink = |mut batch: Vec<Change>| loop {
                match tx.send_timeout(batch, Duration::from_millis(100)) {
                    Ok(()) => return true,
                    Err(SendTimeoutError::Timeout(b)) if !stop.load(Ordering::Relaxed) => batch = b,
                    Err(_) => return false,
                }
            };
            match freeway_linuxcp::run(&cfg, &stop, sink) {
                Ok(s) => tracing::info!(stats = ?s, "linux mirror stopped"),
                Err(e) => tracing::error!(error = %e, "linux mirror failed: kernel routes are no longer followed"),
            }
        })
        .map_err(|e| RunError(format!("cannot start the linux mirror's thread: {e}")))?;
    Ok((
        h,
        LinuxFeed {
            rx,
            installed: 0,
            deleted: 0,
            shadowed: 0,
            refused: 0,
        },
    ))
}
