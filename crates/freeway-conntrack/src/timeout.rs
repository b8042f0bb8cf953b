//! Timeout policies: how long a connection may stay idle in each protocol state.
//!
//! Names and defaults follow conntrack-tools / Linux `nf_conntrack_*_timeout_*` (seconds):
//!
//! | name | default | applies to |
//! |---|---|---|
//! | `tcp_syn_sent` | 120 | SYN seen |
//! | `tcp_syn_recv` | 60 | SYN-ACK seen |
//! | `tcp_established` | 432000 (5 days) | handshake done |
//! | `tcp_fin_wait` | 120 | first FIN seen |
//! | `tcp_close_wait` | 60 | first FIN acknowledged |
//! | `tcp_last_ack` | 30 | both FINs seen |
//! | `tcp_time_wait` | 120 | last FIN acknowledged |
//! | `tcp_close` | 10 | RST seen |
//! | `tcp_syn_sent2` | 120 | simultaneous open |
//! | `udp_single` | 30 | UDP, no reply yet |
//! | `udp_multiple` | 120 | UDP, replied (and assured) |
//! | `icmp` | 30 | ICMP/ICMPv6 echo |
//! | `generic` | 600 | other IP protocols |
//!
//! A [`Timeouts`] value holds milliseconds (tests and benchmarks may use sub-second values);
//! [`Timeouts::set`] takes seconds by name, as a configuration does. The conntrack table holds
//! a default policy and optional per-zone policies; the control plane replaces them while
//! workers track ([`crate::Conntrack::set_timeouts`]).
//!
//! Threads: plain values; the table's copies (`LiveTimeouts`) are read by workers with
//! relaxed loads and written by one control thread.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// One timeout class (a protocol state or group of states).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[allow(missing_docs)]
pub enum TimeoutClass {
    TcpSynSent = 0,
    TcpSynRecv,
    TcpEstablished,
    TcpFinWait,
    TcpCloseWait,
    TcpLastAck,
    TcpTimeWait,
    TcpClose,
    TcpSynSent2,
    UdpSingle,
    UdpMultiple,
    Icmp,
    Generic,
}

/// Number of timeout classes.
pub const N_CLASSES: usize = 13;

/// The conntrack-tools names, indexed by [`TimeoutClass`].
pub const NAMES: [&str; N_CLASSES] = [
    "tcp_syn_sent",
    "tcp_syn_recv",
    "tcp_established",
    "tcp_fin_wait",
    "tcp_close_wait",
    "tcp_last_ack",
    "tcp_time_wait",
    "tcp_close",
    "tcp_syn_sent2",
    "udp_single",
    "udp_multiple",
    "icmp",
    "generic",
];

const DEFAULT_SECS: [u64; N_CLASSES] = [120, 60, 432_000, 120, 60, 30, 120, 10, 120, 30, 120, 30, 600];

/// A timeout policy as the table keeps it: one relaxed atomic per class, so the control plane
/// can replace it while workers read it (a load costs what a plain read does). A connection
/// takes the new value at its next packet.
#[derive(Debug)]
pub(crate) struct LiveTimeouts {
    ms: [AtomicU64; N_CLASSES],
}

impl LiveTimeouts {
    pub(crate) fn new(t: &Timeouts) -> LiveTimeouts {
        LiveTimeouts {
            ms: std::array::from_fn(|i| AtomicU64::new(t.ms[i])),
        }
    }

    /// Replaces every class's value (one writer at a time).
    pub(crate) fn store(&self, t: &Timeouts) {
        for (a, v) in self.ms.iter().zip(t.ms) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// The policy now.
    pub(crate) fn get(&self) -> Timeouts {
        Timeouts {
            ms: std::array::from_fn(|i| self.ms[i].load(Ordering::Relaxed)),
        }
    }

    /// A class's timeout in milliseconds.
    #[inline(always)]
    pub(crate) fn ms(&self, class: TimeoutClass) -> u64 {
        self.ms[class as usize].load(Ordering::Relaxed)
    }
}

/// A timeout policy, in milliseconds per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Timeouts {
    ms: [u64; N_CLASSES],
}

impl Default for Timeouts {
    fn default() -> Self {
        let mut ms = [0; N_CLASSES];
        for (m, s) in ms.iter_mut().zip(DEFAULT_SECS) {
            *m = s * 1000;
        }
        Timeouts { ms }
    }
}

impl Timeouts {
    /// Whether `name` is a known timeout name.
    pub fn is_name(name: &str) -> bool {
        NAMES.contains(&name)
    }

    /// The known names, comma-separated (for error messages).
    pub fn names() -> String {
        NAMES.join(", ")
    }

    /// Sets the timeout called `name` to `secs` seconds.
    pub fn set(&mut self, name: &str, secs: u64) -> Result<(), String> {
        let i = NAMES
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("unknown timeout {name:?} (known: {})", Self::names()))?;
        self.ms[i] = secs.saturating_mul(1000);
        Ok(())
    }

    /// Sets a class's timeout in milliseconds.
    pub fn set_ms(&mut self, class: TimeoutClass, ms: u64) {
        self.ms[class as usize] = ms;
    }

    /// A class's timeout in milliseconds.
    #[inline(always)]
    pub fn ms(&self, class: TimeoutClass) -> u64 {
        self.ms[class as usize]
    }

    /// The timeout called `name`, in seconds.
    pub fn get(&self, name: &str) -> Option<u64> {
        NAMES.iter().position(|n| *n == name).map(|i| self.ms[i] / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_defaults() {
        let mut t = Timeouts::default();
        assert_eq!(t.get("tcp_established"), Some(432_000));
        assert_eq!(t.get("udp_single"), Some(30));
        assert_eq!(t.ms(TimeoutClass::Generic), 600_000);
        t.set("udp_multiple", 5).unwrap();
        assert_eq!(t.ms(TimeoutClass::UdpMultiple), 5000);
        assert!(t.set("udp_bogus", 5).unwrap_err().contains("tcp_established"));
        assert!(Timeouts::is_name("icmp") && !Timeouts::is_name("icmp_reply"));
        assert_eq!(NAMES[TimeoutClass::Generic as usize], "generic");
    }
}
