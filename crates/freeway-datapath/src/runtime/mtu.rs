//! The ports' live MTUs, the worker pools' buffer sizes that follow from them, and the
//! bridge's egress check (L2 never fragments: a frame larger than its egress port's MTU is a
//! counted drop).
//!
//! Each port's MTU is a relaxed atomic written by the control thread (`link set dev PORT mtu
//! N`) and read by workers once per transmit batch: a load, never a write, on the fast path.
//! A port's MTU may change live up to what its buffers and ring slots hold
//! ([`PortMtus::most`]), fixed when the run starts from the configured MTUs: the worker
//! pools get a list of large buffers only when some port's MTU needs them (see
//! `freeway_packet::PacketPool`), so a datapath of 1500-byte ports keeps its 2048-byte
//! buffers and its speed.
//!
//! A frame's size limit on a port of MTU `m` is `m` plus its Ethernet header plus 4 bytes per
//! VLAN tag it carries (`Meta::vlan_depth`, kept by the tag push and pop).

use std::sync::atomic::{AtomicU16, Ordering};

use crate::config::mtu::{check_port_mtu, MAX_PORT_MTU};
use crate::config::{Checked, PortKind, PortSpec};
use freeway_packet::{large_buf_size_for_mtu, Packet, DEFAULT_BUF_SIZE, HEADROOM, L2_OVERHEAD};

/// Every port's live MTU and the most it may be, by bridge port index (room for every index
/// of a run: `portset::PORT_INDEXES`).
#[derive(Debug)]
pub(crate) struct PortMtus {
    mtu: Box<[AtomicU16]>,
    most: Box<[AtomicU16]>,
    large_buf: usize,
}

/// The most a port of `p`'s settings may have as its MTU with buffers of `buf_frame` bytes
/// of frame: its ring slots', or the buffers'.
fn most_of(p: &PortSpec, buf_frame: usize) -> u16 {
    let ring = match p.kind {
        PortKind::Afpacket => p.afpacket.as_ref().map(|a| a.max_frame_len()),
        PortKind::Afxdp => p.afxdp.as_ref().map(|a| a.max_frame_len()),
        _ => None,
    };
    let frame = ring.map_or(buf_frame, |r| r.min(buf_frame));
    frame.saturating_sub(L2_OVERHEAD).min(usize::from(MAX_PORT_MTU)) as u16
}

impl PortMtus {
    /// The configured MTUs of `cfg`'s ports, with the limits their buffers and rings set.
    pub(crate) fn new(cfg: &Checked) -> PortMtus {
        let large_buf = cfg
            .ports
            .iter()
            .map(|p| large_buf_size_for_mtu(usize::from(p.mtu)))
            .max()
            .unwrap_or(0);
        let m = PortMtus {
            mtu: (0..super::portset::PORT_INDEXES).map(|_| AtomicU16::new(0)).collect(),
            most: (0..super::portset::PORT_INDEXES).map(|_| AtomicU16::new(0)).collect(),
            large_buf,
        };
        for (i, p) in cfg.ports.iter().enumerate() {
            m.mtu[i].store(p.mtu, Ordering::Relaxed);
            m.most[i].store(most_of(p, m.buf_frame()), Ordering::Relaxed);
        }
        m
    }

    /// The frame bytes of the worker pools' buffers.
    fn buf_frame(&self) -> usize {
        self.large_buf.max(DEFAULT_BUF_SIZE) - HEADROOM
    }

    /// Gives the port added at `index` its MTU and limit; refused when its MTU needs larger
    /// buffers than this run's pools have.
    pub(crate) fn add(&self, index: usize, p: &PortSpec) -> Result<(), String> {
        let most = most_of(p, self.buf_frame());
        if p.mtu > most {
            return Err(format!(
                "mtu {} needs larger buffers than this run's (at most {most}): restart to add this port",
                p.mtu
            ));
        }
        let slot = |v: &'_ [AtomicU16]| v.get(index).map(|_| ()).ok_or(format!("no port index {index}"));
        slot(&self.mtu)?;
        self.most[index].store(most, Ordering::Relaxed);
        self.mtu[index].store(p.mtu, Ordering::Relaxed);
        Ok(())
    }

    /// The size of the worker pools' large buffers (0: none).
    pub(crate) fn large_buf(&self) -> usize {
        self.large_buf
    }

    /// Port `port`'s MTU now.
    #[inline(always)]
    pub(crate) fn mtu(&self, port: usize) -> u16 {
        self.mtu.get(port).map_or(MAX_PORT_MTU, |m| m.load(Ordering::Relaxed))
    }

    /// The most port `port`'s MTU may be in this run (its buffers and ring slots).
    pub(crate) fn most(&self, port: usize) -> u16 {
        self.most.get(port).map_or(0, |m| m.load(Ordering::Relaxed))
    }

    /// Sets port `port`'s MTU; returns the previous one. The error says which bound `mtu`
    /// passes.
    pub(crate) fn set(&self, port: usize, mtu: u32) -> Result<u16, String> {
        let mtu = check_port_mtu(mtu, None)?;
        let most = self.most(port);
        if mtu > most {
            return Err(format!(
                "mtu {mtu} is more than this run's buffers and ring slots for the port hold (at most {most}; \
                 an AF_XDP frame is one chunk); set `mtu = {mtu}` on the [[port]] in the config and restart"
            ));
        }
        Ok(self.mtu[port].swap(mtu, Ordering::Relaxed))
    }
}

/// An untagged Ethernet header's bytes: a frame of a port of MTU `m` may be `m` plus this
/// plus 4 bytes a VLAN tag.
pub(crate) const ETH_HEADER: usize = 14;

/// Whether `p` is larger than a port of MTU `mtu` sends: its frame less the Ethernet header
/// and its VLAN tags is more than `mtu`.
#[inline(always)]
pub(crate) fn over_mtu(p: &Packet, mtu: u16) -> bool {
    p.len() > usize::from(mtu) + ETH_HEADER + 4 * usize::from(p.meta.vlan_depth)
}
