//! The Linux control plane's glue: the kernel route mirror's thread (`fw-linuxcp`, see
//! `freeway-linuxcp`) and how its changes enter the RIB.
//!
//! The mirror hands batches of changes to the control thread (`fw-ctl`, the RIB's single
//! writer) through a bounded channel; when the channel is full the mirror waits, its netlink
//! socket may then overrun, and the overrun is answered by a full resync. The control thread
//! applies them with `freeway_linuxcp::apply`: a mirrored route never displaces a configured,
//! connected or `ctl` route, and only mirrored routes are deleted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, SendTimeoutError};
use freeway_linuxcp::{Change, MirrorConfig};
use freeway_route::Rib;

use freeway_l3::neigh::{Neigh, NeighUpdate};
use freeway_l3::Interfaces;
use freeway_linuxcp::{TwinSpec, Twins};

use crate::config::{Checked, PortKind};

use super::RunError;

/// The mirror's side of the control thread: its changes, and what became of them.
pub(crate) struct LinuxFeed {
    pub rx: Receiver<Vec<Change>>,
    pub applied: freeway_linuxcp::Applied,
}

impl LinuxFeed {
    /// Applies a batch to the RIB (on the control thread), with the batches queued behind it
    /// (up to [`DRAIN`] changes): one publication for them all.
    pub(crate) fn apply(&mut self, rib: &mut Rib, changes: Vec<Change>) {
        let (rx, applied) = (&self.rx, &mut self.applied);
        rib.batch(|rib| {
            let mut n = changes.len();
            freeway_linuxcp::apply(rib, changes, applied);
            while n < DRAIN {
                match rx.try_recv() {
                    Ok(more) => {
                        n += more.len();
                        freeway_linuxcp::apply(rib, more, applied);
                    }
                    Err(_) => break,
                }
            }
        });
    }
}

/// The most changes the control thread applies as one publication before it looks at its
/// other work (the socket's clients wait at most that long).
const DRAIN: usize = 65_536;

/// Starts the mirror's thread; its changes arrive on the returned feed until `stop`. The
/// kernel's neighbour entries on the twins go to the neighbour writer's queue (`neigh`) as
/// learned neighbours, as workers hand over ARP/ND replies (a full queue is counted and
/// logged when the mirror stops).
pub(crate) fn spawn(
    filter: &freeway_linuxcp::Filter,
    ifaces: Vec<String>,
    neigh: Neigh,
    stop: &Arc<AtomicBool>,
) -> Result<(JoinHandle<()>, LinuxFeed), RunError> {
    let (tx, rx) = bounded::<Vec<Change>>(64);
    let cfg = MirrorConfig {
        filter: filter.clone(),
        ifaces,
        notify_buffer: MirrorConfig::NOTIFY_BUFFER,
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
            let (mut learned, mut full) = (0u64, 0u64);
            let learn = |n: freeway_linuxcp::Neighbour| {
                let u = NeighUpdate::Learn {
                    ip: n.ip,
                    iface: n.iface,
                    mac: n.mac,
                    create: true,
                };
                if neigh.request(u) {
                    learned += 1;
                } else {
                    full += 1;
                }
            };
            match freeway_linuxcp::run_with(&cfg, &stop, sink, learn) {
                Ok(s) => tracing::info!(stats = ?s, neighbours = learned, neighbours_queue_full = full, "linux mirror stopped"),
                Err(e) => tracing::error!(error = %e, "linux mirror failed: kernel routes are no longer followed"),
            }
        })
        .map_err(|e| RunError(format!("cannot start the linux mirror's thread: {e}")))?;
    Ok((
        h,
        LinuxFeed {
            rx,
            applied: Default::default(),
        },
    ))
}

/// Creates the router interfaces' kernel twins (`[linux] punt`), and keeps the kernel from
/// answering ARP for their addresses on the ports' own devices (`arp_ignore = 1` on each
/// AF_PACKET or AF_XDP port's device): there, Freeway answers.
pub(crate) fn twins(cfg: &Checked, ifaces: &Interfaces) -> Result<Option<Arc<Twins>>, RunError> {
    if !cfg.linux.as_ref().is_some_and(|l| l.punt) {
        return Ok(None);
    }
    let specs: Vec<Option<TwinSpec>> = ifaces
        .iter()
        .map(|i| {
            Some(TwinSpec {
                name: i.name.clone(),
                mac: i.mac,
                mtu: u32::from(i.mtu),
                v4: i.v4.clone(),
                v6: i.v6.clone(),
            })
        })
        .collect();
    for p in &cfg.ports {
        let dev = match p.kind {
            PortKind::Afpacket => p.afpacket.as_ref().map(|a| a.iface.as_str()),
            PortKind::Afxdp => p.afxdp.as_ref().map(|a| a.iface.as_str()),
            _ => None,
        };
        if let Some(dev) = dev {
            let path = format!("/proc/sys/net/ipv4/conf/{dev}/arp_ignore");
            if let Err(e) = std::fs::write(&path, "1") {
                tracing::warn!(path, error = %e, "cannot keep the kernel from answering ARP for the twins' addresses on a port");
            }
        }
    }
    let t = Twins::create(&specs).map_err(|e| RunError(format!("[linux] punt: {e}")))?;
    Ok(Some(Arc::new(t)))
}

/// Starts the thread (`fw-punt`) that reads what the kernel sends through the twins.
pub(crate) fn spawn_twins(t: &Arc<Twins>, stop: &Arc<AtomicBool>) -> Result<JoinHandle<()>, RunError> {
    let (t, stop) = (t.clone(), stop.clone());
    std::thread::Builder::new()
        .name("fw-punt".into())
        .spawn(move || t.serve(&stop))
        .map_err(|e| RunError(format!("cannot start the twins' thread: {e}")))
}
