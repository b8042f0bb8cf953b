//! What `conntrack -L` and `conntrack -E` select and print: filters in conntrack(8)'s terms,
//! the JSON shape of a flow, and events (NEW, UPDATE, DESTROY) found by comparing two views
//! of the table.
//!
//! # Filters
//!
//! A [`CtFilter`] holds conntrack(8)'s selectors: `-p` (protocol), `-s`/`-d` (original source
//! and destination), `-r`/`-q` (reply source and destination), `--sport`/`--dport` (original
//! ports), `--reply-port-src`/`--reply-port-dst`, `-w` (zone) and `--state` (a TCP state in conntrack's words). Every given selector
//! must match; none given matches everything. The control plane applies it while it walks the
//! table ([`crate::Conntrack::dump_filtered`]), so a client receives only what it asked for.
//!
//! # JSON
//!
//! conntrack-tools has no JSON output; a [`ConnRecord`] serialises with the keys from `conntrack -o xml`'s
//! structure: `original` and `reply` (each `src`, `dst`, and `sport`/`dport` or ICMP `type`,
//! `code`, `id`), then what the XML calls independent: `family`, `proto`, `protonum`,
//! `state` (TCP), `timeout`, `mark`, `zone`, `use`, `id`, and `assured` / `unreplied` as
//! booleans:
//!
//! ```json
//! {"original":{"src":"10.0.10.5","dst":"10.0.20.7","sport":40000,"dport":80},
//!  "reply":{"src":"10.0.20.7","dst":"10.0.10.5","sport":80,"dport":40000},
//!  "family":"ipv4","proto":"tcp","protonum":6,"state":"ESTABLISHED","timeout":431999,
//!  "mark":0,"zone":0,"use":1,"id":2871309312,"assured":true,"unreplied":false}
//! ```
//!
//! Freeway keeps no connection ids: `id` is a hash of the zone and the original tuple, the
//! same for the whole life of a connection (so a NEW and its DESTROY event carry the same
//! one), and the same again for a later connection of the same tuple.
//!
//! # Events
//!
//! [`EventDiff`] turns successive views of the (filtered) table into `conntrack -E`'s events:
//! a connection not in the previous view is `NEW`, one whose TCP state, reply flag or assured
//! flag changed is `UPDATE`, one gone is `DESTROY`. [`Event`]'s `Display` is conntrack -E's
//! line (`    [NEW] tcp      6 120 SYN_SENT src=...`).

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::dump::{ConnRecord, TupleRecord};

/// conntrack(8)'s selectors; `None` selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CtFilter {
    /// IP protocol number (`-p tcp`).
    pub proto: Option<u8>,
    /// The original tuple's selectors (`-s`, `-d`, `--sport`, `--dport`).
    pub orig: TupleFilter,
    /// The reply tuple's selectors (`-r`, `-q`, `--reply-port-src`, `--reply-port-dst`).
    pub reply: TupleFilter,
    /// Zone (`-w`, `--zone`).
    pub zone: Option<u16>,
    /// TCP state in conntrack's words (`--state ESTABLISHED`); selects TCP connections only.
    pub state: Option<String>,
}

/// Selectors of one direction's tuple.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TupleFilter {
    /// Source address.
    pub src: Option<IpAddr>,
    /// Destination address.
    pub dst: Option<IpAddr>,
    /// Source and destination ports (TCP, UDP).
    pub ports: (Option<u16>, Option<u16>),
}

impl TupleFilter {
    /// Whether `t` is selected.
    fn matches(&self, t: &TupleRecord) -> bool {
        let port = |want: Option<u16>, got| want.is_none() || want == got;
        self.src.is_none_or(|a| a == t.src)
            && self.dst.is_none_or(|a| a == t.dst)
            && port(self.ports.0, t.sport)
            && port(self.ports.1, t.dport)
    }
}

/// The protocol number of a `-p` argument: a name (`tcp`, `udp`, `icmp`, `icmpv6`, `ipv6-icmp`)
/// or a number.
pub fn parse_proto(s: &str) -> Result<u8, String> {
    use freeway_packet::wire::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP};
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Ok(IPPROTO_TCP),
        "udp" => Ok(IPPROTO_UDP),
        "icmp" => Ok(IPPROTO_ICMP),
        "icmpv6" | "ipv6-icmp" => Ok(IPPROTO_ICMPV6),
        n => n
            .parse()
            .map_err(|_| format!("unknown protocol {s:?} (tcp, udp, icmp, icmpv6 or a number 0-255)")),
    }
}

/// A `--state` argument in conntrack's words (case-insensitive), as conntrack prints it.
pub fn parse_state(s: &str) -> Result<String, String> {
    let up = s.to_ascii_uppercase();
    crate::tcp::state::NAMES
        .iter()
        .find(|n| **n == up)
        .map(|n| n.to_string())
        .ok_or_else(|| {
            format!(
                "unknown TCP state {s:?} (one of {})",
                crate::tcp::state::NAMES.join(", ")
            )
        })
}

impl CtFilter {
    /// Whether `r` is selected.
    pub fn matches(&self, r: &ConnRecord) -> bool {
        self.proto.is_none_or(|p| p == r.proto_num)
            && self.orig.matches(&r.orig)
            && self.reply.matches(&r.reply)
            && self.zone.is_none_or(|z| z == r.zone)
            && self.state.as_deref().is_none_or(|s| r.state == Some(s))
    }

    /// Whether no selector is given.
    pub fn is_empty(&self) -> bool {
        *self == CtFilter::default()
    }
}

/// A 64-bit hash of a connection's zone, protocol and original tuple: the same for its whole
/// life.
pub fn flow_hash(r: &ConnRecord) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (r.zone, r.proto_num, &r.orig).hash(&mut h);
    h.finish()
}

/// The `id` of a connection (see the module doc).
pub fn flow_id(r: &ConnRecord) -> u32 {
    flow_hash(r) as u32
}

impl Serialize for ConnRecord {
    /// `conntrack -o xml`'s structure as JSON (see the module doc).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut m = s.serialize_struct("Flow", 13)?;
        m.serialize_field("original", &self.orig)?;
        m.serialize_field("reply", &self.reply)?;
        m.serialize_field("family", self.family)?;
        m.serialize_field("proto", self.proto)?;
        m.serialize_field("protonum", &self.proto_num)?;
        if let Some(st) = self.state {
            m.serialize_field("state", st)?;
        }
        m.serialize_field("timeout", &self.timeout_secs)?;
        m.serialize_field("mark", &0)?;
        m.serialize_field("zone", &self.zone)?;
        m.serialize_field("use", &1)?;
        m.serialize_field("id", &flow_id(self))?;
        m.serialize_field("assured", &self.assured)?;
        m.serialize_field("unreplied", &self.unreplied)?;
        m.end()
    }
}

/// An event's type, in conntrack -E's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventKind {
    /// A connection appeared.
    #[serde(rename = "NEW")]
    New,
    /// Its state or flags changed.
    #[serde(rename = "UPDATE")]
    Update,
    /// It is gone (expired or flushed).
    #[serde(rename = "DESTROY")]
    Destroy,
}

impl EventKind {
    /// `NEW`, `UPDATE` or `DESTROY`.
    pub fn word(self) -> &'static str {
        match self {
            EventKind::New => "NEW",
            EventKind::Update => "UPDATE",
            EventKind::Destroy => "DESTROY",
        }
    }
}

/// One event: its type and the connection as it was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// NEW, UPDATE or DESTROY.
    pub kind: EventKind,
    /// The connection (for DESTROY: as last seen).
    pub conn: ConnRecord,
}

/// An event in `-j` output: `{"type":"NEW", ...the connection's keys}`.
#[derive(Serialize)]
pub struct EventJson<'a> {
    /// NEW, UPDATE or DESTROY.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The connection.
    #[serde(flatten)]
    pub conn: &'a ConnRecord,
}

impl<'a> From<&'a Event> for EventJson<'a> {
    fn from(e: &'a Event) -> EventJson<'a> {
        EventJson {
            kind: e.kind,
            conn: &e.conn,
        }
    }
}

impl fmt::Display for Event {
    /// conntrack -E's line: the type in brackets, right-aligned in 9 columns, then the
    /// connection as `conntrack -L` prints it but without `mark=` and `use=` (the kernel's
    /// events carry neither); a DESTROY line has no timeout and no TCP state, as
    /// conntrack's.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>9} ", format!("[{}]", self.kind.word()))?;
        let c = &self.conn;
        write!(f, "{:<8} {} ", c.proto, c.proto_num)?;
        let alive = self.kind != EventKind::Destroy;
        if alive {
            write!(f, "{} ", c.timeout_secs)?;
        }
        c.fmt_tuples(f, alive)?;
        if c.zone != 0 {
            write!(f, " zone={}", c.zone)?;
        }
        Ok(())
    }
}

/// The key of a connection across views: zone, protocol and original tuple.
type ConnKey = (u16, u8, TupleRecord);

fn key_of(r: &ConnRecord) -> ConnKey {
    (r.zone, r.proto_num, r.orig.clone())
}

/// What distinguishes an UPDATE: the TCP state and the flags.
fn state_of(r: &ConnRecord) -> (Option<&'static str>, bool, bool) {
    (r.state, r.unreplied, r.assured)
}

/// Successive views of the table to events (see the module doc).
#[derive(Default)]
pub struct EventDiff {
    seen: HashMap<ConnKey, ConnRecord>,
}

impl EventDiff {
    /// A diff whose first view is `now`: what is already there makes no event.
    pub fn starting_at(now: Vec<ConnRecord>) -> EventDiff {
        EventDiff {
            seen: now.into_iter().map(|r| (key_of(&r), r)).collect(),
        }
    }

    /// How many connections the last view held.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether the last view was empty.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The events from the previous view to `now`: NEW and UPDATE in `now`'s order, then
    /// DESTROY.
    pub fn next(&mut self, now: Vec<ConnRecord>) -> Vec<Event> {
        let mut events = Vec::new();
        let mut next = HashMap::with_capacity(now.len());
        for r in now {
            let k = key_of(&r);
            match self.seen.remove(&k) {
                None => events.push(Event {
                    kind: EventKind::New,
                    conn: r.clone(),
                }),
                Some(old) if state_of(&old) != state_of(&r) => events.push(Event {
                    kind: EventKind::Update,
                    conn: r.clone(),
                }),
                Some(_) => {}
            }
            next.insert(k, r);
        }
        let mut gone: Vec<ConnRecord> = std::mem::replace(&mut self.seen, next).into_values().collect();
        gone.sort_by(|a, b| {
            (a.zone, a.proto_num, &a.orig.src, a.orig.sport).cmp(&(b.zone, b.proto_num, &b.orig.src, b.orig.sport))
        });
        events.extend(gone.into_iter().map(|conn| Event {
            kind: EventKind::Destroy,
            conn,
        }));
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(proto: &'static str, num: u8, src: &str, dst: &str, sport: u16, dport: u16) -> ConnRecord {
        let t = |s: &str, d: &str, sp, dp| TupleRecord {
            src: s.parse().unwrap(),
            dst: d.parse().unwrap(),
            sport: Some(sp),
            dport: Some(dp),
            icmp_type: None,
            icmp_code: None,
            icmp_id: None,
        };
        ConnRecord {
            proto,
            proto_num: num,
            family: "ipv4",
            zone: 0,
            state: (num == 6).then_some("SYN_SENT"),
            timeout_secs: 120,
            orig: t(src, dst, sport, dport),
            reply: t(dst, src, dport, sport),
            unreplied: true,
            assured: false,
        }
    }

    #[test]
    fn each_selector_narrows_and_all_must_match() {
        let a = rec("tcp", 6, "10.0.0.1", "10.0.0.2", 1000, 80);
        let mut b = rec("udp", 17, "10.0.0.3", "10.0.0.2", 2000, 53);
        b.zone = 4;
        let all = CtFilter::default();
        assert!(all.is_empty() && all.matches(&a) && all.matches(&b));
        // (the filter as JSON, whether it selects a, b)
        let cases = [
            (r#"{"proto":6}"#, true, false),
            (r#"{"orig":{"src":"10.0.0.3"}}"#, false, true),
            (r#"{"orig":{"dst":"10.0.0.2"}}"#, true, true),
            (r#"{"reply":{"src":"10.0.0.2"}}"#, true, true),
            (r#"{"reply":{"dst":"10.0.0.1"}}"#, true, false),
            (r#"{"reply":{"ports":[53,null]}}"#, false, true),
            (r#"{"orig":{"ports":[2000,null]}}"#, false, true),
            (r#"{"orig":{"ports":[null,80]}}"#, true, false),
            (r#"{"zone":4}"#, false, true),
            (r#"{"state":"SYN_SENT"}"#, true, false),
            (r#"{"state":"ESTABLISHED"}"#, false, false),
            (r#"{"proto":17,"orig":{"ports":[null,80]}}"#, false, false),
        ];
        for (f, wa, wb) in cases {
            let f: CtFilter = serde_json::from_str(f).unwrap();
            assert_eq!((f.matches(&a), f.matches(&b)), (wa, wb), "{f:?}");
        }
    }

    #[test]
    fn selector_words_parse_as_conntrack_takes_them() {
        assert_eq!(parse_proto("TCP"), Ok(6));
        assert_eq!(parse_proto("ipv6-icmp"), Ok(58));
        assert_eq!(parse_proto("47"), Ok(47));
        assert!(parse_proto("tpc").unwrap_err().contains("unknown protocol \"tpc\""));
        assert_eq!(parse_state("established").unwrap(), "ESTABLISHED");
        assert!(parse_state("OPEN").unwrap_err().contains("TIME_WAIT"));
        // Deserialising an empty filter, and refusing an unknown selector.
        assert_eq!(serde_json::from_str::<CtFilter>("{}").unwrap(), CtFilter::default());
        assert!(serde_json::from_str::<CtFilter>(r#"{"mark":1}"#).is_err());
    }

    #[test]
    fn events_are_new_update_and_destroy_in_conntrack_e_words() {
        let a = rec("tcp", 6, "10.0.0.1", "10.0.0.2", 1000, 80);
        let b = rec("udp", 17, "10.0.0.3", "10.0.0.2", 2000, 53);
        let mut d = EventDiff::starting_at(vec![b.clone()]);
        let e = d.next(vec![a.clone(), b.clone()]);
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].to_string(),
            "    [NEW] tcp      6 120 SYN_SENT src=10.0.0.1 dst=10.0.0.2 sport=1000 dport=80 [UNREPLIED] src=10.0.0.2 dst=10.0.0.1 sport=80 dport=1000"
        );
        // Only a timeout changed: nothing.
        let mut b2 = b.clone();
        b2.timeout_secs = 3;
        assert!(d.next(vec![a.clone(), b2]).is_empty());
        let mut a2 = a.clone();
        a2.state = Some("ESTABLISHED");
        a2.unreplied = false;
        a2.assured = true;
        a2.timeout_secs = 432000;
        let e = d.next(vec![a2.clone()]);
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0].to_string(),
            " [UPDATE] tcp      6 432000 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=1000 dport=80 src=10.0.0.2 dst=10.0.0.1 sport=80 dport=1000 [ASSURED]"
        );
        assert_eq!(
            e[1].to_string(),
            "[DESTROY] udp      17 src=10.0.0.3 dst=10.0.0.2 sport=2000 dport=53 [UNREPLIED] src=10.0.0.2 dst=10.0.0.3 sport=53 dport=2000"
        );
        let j = serde_json::to_value(EventJson::from(&e[0])).unwrap();
        assert_eq!(j["type"], "UPDATE");
        assert_eq!(j["original"]["sport"], 1000);
        assert_eq!(j["reply"]["dst"], "10.0.0.1");
        assert_eq!(j["state"], "ESTABLISHED");
        assert_eq!(j["assured"], true);
        assert_eq!(j["id"], flow_id(&a2));
        assert_eq!(flow_id(&a2), flow_id(&a), "an id lives as long as its connection");
        assert_eq!(d.len(), 1);
    }
}
