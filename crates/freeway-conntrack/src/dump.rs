//! Connection records for dumps: serde-serialisable, and printed like `conntrack -L`.
//!
//! ```text
//! tcp      6 431999 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=1024 dport=80 src=10.0.0.2 dst=10.0.0.1 sport=80 dport=1024 [ASSURED] mark=0 use=1
//! udp      17 29 src=10.1.1.1 dst=10.1.1.2 sport=1 dport=2 [UNREPLIED] src=10.1.1.2 dst=10.1.1.1 sport=2 dport=1 mark=0 zone=3 use=1
//! icmp     1 29 src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=7 [UNREPLIED] src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=7 mark=0 use=1
//! ```
//!
//! `zone=` is printed only for a zone other than 0, as conntrack prints it.
//!
//! A translated connection's reply tuple is its reply direction's (`src=` the translated
//! destination, `dst=` the translated source), as `conntrack -L` shows a NAT connection.
//!
//! Records are snapshots built on the control path from relaxed reads of a connection's
//! fields; a connection being updated concurrently may show a mix of its old and new state.
//! Per-connection packet/byte accounting is not kept (it would be a write per packet).

use std::fmt;
use std::net::IpAddr;

use freeway_packet::wire::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP};
use freeway_sync::Tick;
use serde::Serialize;

use crate::key::Tuple;
use crate::table::{Conn, Kind, ASSURED, SEEN_REPLY};
use crate::tcp::state;

/// One direction of a connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct TupleRecord {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (TCP/UDP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    /// Destination port (TCP/UDP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    /// ICMP type (echo); `type` in JSON, as in `conntrack -o xml`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP code (`code`).
    #[serde(rename = "code", skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
    /// ICMP echo identifier (`id`).
    #[serde(rename = "id", skip_serializing_if = "Option::is_none")]
    pub icmp_id: Option<u16>,
}

impl TupleRecord {
    fn new(t: &Tuple, kind: Kind, request: bool) -> TupleRecord {
        let mut r = TupleRecord {
            src: t.src_ip(),
            dst: t.dst_ip(),
            sport: None,
            dport: None,
            icmp_type: None,
            icmp_code: None,
            icmp_id: None,
        };
        match kind {
            Kind::Tcp | Kind::Udp => {
                r.sport = Some(t.sport);
                r.dport = Some(t.dport);
            }
            Kind::Echo => {
                r.icmp_type = Some(match (t.v6, request) {
                    (false, true) => 8,
                    (false, false) => 0,
                    (true, true) => 128,
                    (true, false) => 129,
                });
                r.icmp_code = Some(0);
                r.icmp_id = Some(t.sport | t.dport);
            }
            Kind::Generic => {}
        }
        r
    }
}

impl fmt::Display for TupleRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "src={} dst={}", self.src, self.dst)?;
        if let (Some(s), Some(d)) = (self.sport, self.dport) {
            write!(f, " sport={s} dport={d}")?;
        }
        if let (Some(t), Some(c), Some(id)) = (self.icmp_type, self.icmp_code, self.icmp_id) {
            write!(f, " type={t} code={c} id={id}")?;
        }
        Ok(())
    }
}

/// A snapshot of one connection. Its JSON is `conntrack -o xml`'s structure (see
/// [`crate::query`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnRecord {
    /// Protocol name (`tcp`, `udp`, `icmp`, `icmpv6`, `unknown`).
    pub proto: &'static str,
    /// IP protocol number.
    pub proto_num: u8,
    /// `ipv4` or `ipv6`.
    pub family: &'static str,
    /// Zone.
    pub zone: u16,
    /// TCP state name (TCP only).
    pub state: Option<&'static str>,
    /// Seconds until the connection expires (0 if due).
    pub timeout_secs: u64,
    /// The original direction.
    pub orig: TupleRecord,
    /// The reply direction.
    pub reply: TupleRecord,
    /// No packet seen in the reply direction.
    pub unreplied: bool,
    /// Assured (traffic both ways; TCP: handshake completed).
    pub assured: bool,
}

impl ConnRecord {
    /// The record of connection `c` (a primary node).
    pub(crate) fn new(c: &Conn, now: Tick) -> ConnRecord {
        let k = c.key();
        let orig = k.tuple(c.orig_lo());
        // A translated connection's replies carry its reply node's tuple.
        let reply = match c.twin() {
            Some(r) => r.key().tuple(!r.orig_lo()),
            None => orig.reversed(),
        };
        let status = c.status();
        let proto_num = k.proto();
        ConnRecord {
            proto: match proto_num {
                IPPROTO_TCP => "tcp",
                IPPROTO_UDP => "udp",
                IPPROTO_ICMP => "icmp",
                IPPROTO_ICMPV6 => "icmpv6",
                _ => "unknown",
            },
            proto_num,
            family: if orig.v6 { "ipv6" } else { "ipv4" },
            zone: k.zone(),
            state: (c.kind() == Kind::Tcp).then(|| state::NAMES[usize::from(c.state().min(9))]),
            timeout_secs: c.expires().saturating_sub(now).div_ceil(1000),
            orig: TupleRecord::new(&orig, c.kind(), true),
            reply: TupleRecord::new(&reply, c.kind(), false),
            unreplied: status & SEEN_REPLY == 0,
            assured: status & ASSURED != 0,
        }
    }

    /// A label for per-state counts: `tcp ESTABLISHED`, `udp UNREPLIED`, `udp REPLIED`,
    /// `udp ASSURED`, ...
    pub fn state_label(&self) -> String {
        match self.state {
            Some(s) => format!("{} {s}", self.proto),
            None if self.unreplied => format!("{} UNREPLIED", self.proto),
            None if self.assured => format!("{} ASSURED", self.proto),
            None => format!("{} REPLIED", self.proto),
        }
    }
}

impl ConnRecord {
    /// The part of `conntrack -L`'s line that conntrack -E's lines share: the TCP state (with
    /// `state`), both tuples and the flags, without a trailing space.
    pub(crate) fn fmt_tuples(&self, f: &mut fmt::Formatter<'_>, state: bool) -> fmt::Result {
        if let Some(s) = self.state.filter(|_| state) {
            write!(f, "{s} ")?;
        }
        write!(f, "{} ", self.orig)?;
        if self.unreplied {
            write!(f, "[UNREPLIED] ")?;
        }
        write!(f, "{}", self.reply)?;
        if self.assured {
            write!(f, " [ASSURED]")?;
        }
        Ok(())
    }
}

impl fmt::Display for ConnRecord {
    /// `conntrack -L`'s line: `zone=` only where it is not 0, as conntrack prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<8} {} {} ", self.proto, self.proto_num, self.timeout_secs)?;
        self.fmt_tuples(f, true)?;
        write!(f, " mark=0 ")?;
        if self.zone != 0 {
            write!(f, "zone={} ", self.zone)?;
        }
        write!(f, "use=1")
    }
}
