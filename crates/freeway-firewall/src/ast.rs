//! What a ruleset says: tables, chains, sets and rules, as the parser reads them from nftables
//! syntax and before anything is resolved against the running datapath.
//!
//! Every value a rule compares is normalised to an unsigned integer (`u128` holds an IPv6
//! address, a MAC address, a port, a protocol number, a flag set) so that both evaluators
//! work on numbers only: an address prefix or a range becomes an inclusive interval, a
//! single value an interval of one, and symbolic names (`ssh`, `tcp`, `echo-request`,
//! `established`) their numbers. Only interface names stay text, resolved when the ruleset
//! is compiled against the datapath's ports and router interfaces.
//!
//! The semantics follow nftables': a rule's items run left to right, a match that fails
//! ends the rule, statements before a verdict run for every packet that got that far.

use std::fmt;

/// A place in the source text: 1-based line and column (counted in characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A whole ruleset: what one `nft -f` file (or one `freeway ctl firewall load`) holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ruleset {
    /// Tables, in the order the file declares them.
    pub tables: Vec<Table>,
}

/// A table's family: which packets its base chains see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4 only (`table ip`).
    Ip,
    /// IPv6 only (`table ip6`).
    Ip6,
    /// IPv4 and IPv6 (`table inet`).
    Inet,
    /// Bridged frames (`table bridge`).
    Bridge,
}

impl Family {
    /// The keyword nftables writes.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
            Family::Bridge => "bridge",
        }
    }
}

/// One table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Its family.
    pub family: Family,
    /// Its name.
    pub name: String,
    /// Named sets, in declaration order.
    pub sets: Vec<SetDecl>,
    /// Chains, in declaration order.
    pub chains: Vec<Chain>,
    /// Where `table` was written.
    pub span: Span,
}

/// The hook a base chain is attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// Before routing (NAT's destination translation).
    Prerouting,
    /// Packets for the router's own addresses.
    Input,
    /// Packets the router (or, in a bridge table, the bridge) forwards.
    Forward,
    /// Packets the router sends itself.
    Output,
    /// After routing (NAT's source translation).
    Postrouting,
}

impl Hook {
    /// The keyword nftables writes.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// A base chain's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChainType {
    /// `type filter`.
    Filter,
    /// `type nat`.
    Nat,
}

/// A base chain's default verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// `policy accept` (the default).
    Accept,
    /// `policy drop`.
    Drop,
}

/// What makes a chain a base chain: `type filter hook forward priority 0; policy drop;`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseChain {
    /// Its type.
    pub kind: ChainType,
    /// Its hook.
    pub hook: Hook,
    /// Its priority: lower runs first (`filter` is 0, `dstnat` -100, `srcnat` 100).
    pub priority: i32,
    /// Its policy.
    pub policy: Policy,
}

/// A chain: a base chain (attached to a hook) or a user chain (reached by `jump`/`goto`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Its name.
    pub name: String,
    /// `Some` for a base chain.
    pub base: Option<BaseChain>,
    /// Its rules, in order.
    pub rules: Vec<Rule>,
    /// Where `chain` was written.
    pub span: Span,
}

/// What a packet field (or a set element's part) holds, which decides how a value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// An IPv4 address (`ipv4_addr`): 32 bits.
    Ipv4Addr,
    /// An IPv6 address (`ipv6_addr`): 128 bits.
    Ipv6Addr,
    /// A MAC address (`ether_addr`): 48 bits.
    EtherAddr,
    /// An IP protocol number or name (`inet_proto`: `tcp`, `udp`, `icmp`, …).
    InetProto,
    /// A port number or service name (`inet_service`: `ssh`, `http`, …).
    InetService,
    /// An interface name (`ifname`); not a number (see [`Atom::Name`]).
    Ifname,
    /// A packet mark (`mark`): 32 bits.
    Mark,
    /// Connection tracking state bits (`ct_state`: `invalid` 1, `established` 2, `related`
    /// 4, `new` 8, `untracked` 64: the kernel's values).
    CtState,
    /// TCP flag bits (`tcp_flag`: `fin` 0x01, `syn` 0x02, `rst` 0x04, `psh` 0x08, `ack`
    /// 0x10, `urg` 0x20, `ecn` 0x40, `cwr` 0x80).
    TcpFlags,
    /// An ICMP type (`icmp_type`: `echo-request` 8, …).
    IcmpType,
    /// An ICMPv6 type (`icmpv6_type`: `echo-request` 128, `nd-neighbor-solicit` 135, …).
    Icmpv6Type,
    /// An ICMP or ICMPv6 code.
    IcmpCode,
    /// An EtherType (`ether_type`: `ip`, `ip6`, `arp`, `vlan`).
    EtherType,
    /// The protocol family of a packet (`nf_proto`: `ipv4` 2, `ipv6` 10).
    NfProto,
    /// A plain number of the field's width (`vlan id`, `ct zone`, `ip ttl`, …).
    Integer {
        /// Width in bits.
        bits: u8,
    },
}

impl ValueType {
    /// The width of its values in bits (0 for an interface name).
    pub fn bits(self) -> u8 {
        match self {
            ValueType::Ipv4Addr | ValueType::Mark => 32,
            ValueType::Ipv6Addr => 128,
            ValueType::EtherAddr => 48,
            ValueType::InetService | ValueType::EtherType => 16,
            ValueType::InetProto
            | ValueType::CtState
            | ValueType::TcpFlags
            | ValueType::IcmpType
            | ValueType::Icmpv6Type
            | ValueType::IcmpCode
            | ValueType::NfProto => 8,
            ValueType::Ifname => 0,
            ValueType::Integer { bits } => bits,
        }
    }

    /// Whether a bare value matches "any of these bits set" rather than equality (nftables'
    /// flag types: `ct state established,related`, `tcp flags syn`).
    pub fn is_flags(self) -> bool {
        matches!(self, ValueType::CtState | ValueType::TcpFlags)
    }
}

/// A packet field a rule can look at. Matching a field implies its protocol: `tcp dport 22`
/// never matches a UDP packet, `ip saddr …` never an IPv6 one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `iifname`: the interface the packet came in on (a router interface or a port name).
    IifName,
    /// `oifname`: the interface the packet leaves by (forward, output and postrouting).
    OifName,
    /// `meta l4proto`: the transport protocol (IPv6 extension headers skipped).
    L4Proto,
    /// `meta nfproto`: IPv4 or IPv6.
    NfProto,
    /// `meta mark`.
    Mark,
    /// `meta length`: the length of the IP packet in bytes.
    Length,
    /// `ip saddr`.
    IpSaddr,
    /// `ip daddr`.
    IpDaddr,
    /// `ip protocol`.
    IpProtocol,
    /// `ip ttl`.
    IpTtl,
    /// `ip6 saddr`.
    Ip6Saddr,
    /// `ip6 daddr`.
    Ip6Daddr,
    /// `ip6 nexthdr`.
    Ip6Nexthdr,
    /// `ip6 hoplimit`.
    Ip6Hoplimit,
    /// `tcp sport`.
    TcpSport,
    /// `tcp dport`.
    TcpDport,
    /// `tcp flags`.
    TcpFlags,
    /// `udp sport`.
    UdpSport,
    /// `udp dport`.
    UdpDport,
    /// `th sport`: TCP, UDP, UDP-Lite, SCTP or DCCP source port.
    ThSport,
    /// `th dport`.
    ThDport,
    /// `icmp type`.
    IcmpType,
    /// `icmp code`.
    IcmpCode,
    /// `icmpv6 type`.
    Icmpv6Type,
    /// `icmpv6 code`.
    Icmpv6Code,
    /// `ct state`.
    CtState,
    /// `ct zone`.
    CtZone,
    /// `vlan id`.
    VlanId,
    /// `ether saddr`.
    EtherSaddr,
    /// `ether daddr`.
    EtherDaddr,
    /// `ether type`.
    EtherType,
}

impl Field {
    /// What the field holds.
    pub fn value_type(self) -> ValueType {
        use Field::*;
        match self {
            IifName | OifName => ValueType::Ifname,
            L4Proto | IpProtocol | Ip6Nexthdr => ValueType::InetProto,
            NfProto => ValueType::NfProto,
            Mark => ValueType::Mark,
            Length => ValueType::Integer { bits: 16 },
            IpSaddr | IpDaddr => ValueType::Ipv4Addr,
            IpTtl | Ip6Hoplimit => ValueType::Integer { bits: 8 },
            Ip6Saddr | Ip6Daddr => ValueType::Ipv6Addr,
            TcpSport | TcpDport | UdpSport | UdpDport | ThSport | ThDport => ValueType::InetService,
            TcpFlags => ValueType::TcpFlags,
            IcmpType => ValueType::IcmpType,
            Icmpv6Type => ValueType::Icmpv6Type,
            IcmpCode | Icmpv6Code => ValueType::IcmpCode,
            CtState => ValueType::CtState,
            CtZone | VlanId => ValueType::Integer { bits: 16 },
            EtherSaddr | EtherDaddr => ValueType::EtherAddr,
            EtherType => ValueType::EtherType,
        }
    }

    /// The words nftables writes for it (`"tcp dport"`).
    pub fn name(self) -> &'static str {
        use Field::*;
        match self {
            IifName => "iifname",
            OifName => "oifname",
            L4Proto => "meta l4proto",
            NfProto => "meta nfproto",
            Mark => "meta mark",
            Length => "meta length",
            IpSaddr => "ip saddr",
            IpDaddr => "ip daddr",
            IpProtocol => "ip protocol",
            IpTtl => "ip ttl",
            Ip6Saddr => "ip6 saddr",
            Ip6Daddr => "ip6 daddr",
            Ip6Nexthdr => "ip6 nexthdr",
            Ip6Hoplimit => "ip6 hoplimit",
            TcpSport => "tcp sport",
            TcpDport => "tcp dport",
            TcpFlags => "tcp flags",
            UdpSport => "udp sport",
            UdpDport => "udp dport",
            ThSport => "th sport",
            ThDport => "th dport",
            IcmpType => "icmp type",
            IcmpCode => "icmp code",
            Icmpv6Type => "icmpv6 type",
            Icmpv6Code => "icmpv6 code",
            CtState => "ct state",
            CtZone => "ct zone",
            VlanId => "vlan id",
            EtherSaddr => "ether saddr",
            EtherDaddr => "ether daddr",
            EtherType => "ether type",
        }
    }
}

/// One part of a value: an inclusive interval of numbers, or an interface name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    /// `lo..=hi`: a single value (`lo == hi`), a prefix (`10.0.0.0/8`) or a range
    /// (`1024-65535`).
    Range(u128, u128),
    /// An interface name; a trailing `*` matches every name it begins (`"eth*"`).
    Name(String),
}

impl Atom {
    /// A single value.
    pub fn value(v: u128) -> Atom {
        Atom::Range(v, v)
    }
}

/// One element of a set: one atom per field of the match (several for a concatenation
/// `ip saddr . tcp dport`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Elem(pub Vec<Atom>);

/// The right-hand side of an equality match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rhs {
    /// A value or an anonymous set `{ a, b, c }`: the packet's value is one of them.
    Elems(Vec<Elem>),
    /// A named set of the rule's table (`@allowed`).
    Set(String),
}

/// How a match compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    /// The packet's value (a concatenation of the fields' values) is in the right-hand side;
    /// with `negate` (`!=`), it is not.
    In {
        /// The values.
        rhs: Rhs,
        /// `!=`.
        negate: bool,
    },
    /// A flag field written bare: any of these bits is set (`tcp flags syn,ack`,
    /// `ct state established,related`); with `negate`, none is.
    AnyBit {
        /// The bits.
        bits: u128,
        /// `!=`.
        negate: bool,
    },
    /// `field & mask == value` (`tcp flags & (syn|ack) == syn`, `tcp flags syn / syn,ack`);
    /// with `negate`, `!=`.
    Masked {
        /// The mask.
        mask: u128,
        /// The value the masked field is compared to.
        value: u128,
        /// `!=`.
        negate: bool,
    },
}

/// A match: fields (one, or several joined by `.`) compared to something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    /// The fields; more than one for a concatenation.
    pub fields: Vec<Field>,
    /// The comparison.
    pub test: Test,
    /// Where the match begins.
    pub span: Span,
}

/// The unit of a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Per {
    /// `/second`.
    Second,
    /// `/minute`.
    Minute,
    /// `/hour`.
    Hour,
    /// `/day`.
    Day,
}

impl Per {
    /// Its length in milliseconds.
    pub fn ms(self) -> u64 {
        match self {
            Per::Second => 1_000,
            Per::Minute => 60_000,
            Per::Hour => 3_600_000,
            Per::Day => 86_400_000,
        }
    }

    /// The word nftables writes.
    pub fn name(self) -> &'static str {
        match self {
            Per::Second => "second",
            Per::Minute => "minute",
            Per::Hour => "hour",
            Per::Day => "day",
        }
    }
}

/// `limit rate [over] N/unit [burst M packets]` (or bytes with `bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Packets (or bytes) per unit.
    pub rate: u64,
    /// The unit.
    pub per: Per,
    /// Burst allowance (nftables' default is 5 packets).
    pub burst: u32,
    /// The rate counts bytes, not packets.
    pub bytes: bool,
    /// `over`: the statement matches while the rate is exceeded, instead of under it.
    pub over: bool,
}

/// What `reject` sends back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectWith {
    /// Plain `reject`: ICMP port unreachable for IPv4, ICMPv6 port unreachable for IPv6.
    Default,
    /// `reject with tcp reset`.
    TcpReset,
    /// `reject with icmp type|code N` (an ICMP destination-unreachable code).
    Icmp(u8),
    /// `reject with icmpv6 type|code N` (an ICMPv6 destination-unreachable code).
    Icmpv6(u8),
    /// `reject with icmpx type N`: the code for the packet's family (0 no-route, 1
    /// port-unreachable, 2 host-unreachable, 3 admin-prohibited).
    Icmpx(u8),
}

/// A verdict statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `accept`: this base chain lets the packet through (later base chains still see it).
    Accept,
    /// `drop`: the packet is dropped, now.
    Drop,
    /// `reject`: dropped, and an error (or a TCP reset) goes back to its sender.
    Reject(RejectWith),
    /// `continue`: the next rule.
    Continue,
    /// `return`: back to the chain that jumped here (in a base chain: its policy).
    Return,
    /// `jump CHAIN`: evaluate that chain, then come back.
    Jump(String),
    /// `goto CHAIN`: evaluate that chain and do not come back.
    Goto(String),
}

/// Which translation a NAT statement makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NatKind {
    /// `snat`: the source address (and port) of the connection's original direction.
    Snat,
    /// `dnat`: its destination address (and port).
    Dnat,
    /// `masquerade`: `snat` to the address of the interface the packet leaves by.
    Masquerade,
}

impl NatKind {
    /// The keyword nftables writes.
    pub fn name(self) -> &'static str {
        match self {
            NatKind::Snat => "snat",
            NatKind::Dnat => "dnat",
            NatKind::Masquerade => "masquerade",
        }
    }
}

/// Where a NAT statement translates to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NatTo {
    /// `to ADDR[-ADDR][:PORT[-PORT]]` (an address range and a port range, each inclusive and
    /// optional: `masquerade` has no address, `masquerade to :1024-2000` only ports).
    Range {
        /// The addresses (IPv4 in the low 32 bits).
        addr: Option<(u128, u128)>,
        /// The ports.
        port: Option<(u16, u16)>,
    },
    /// `to FIELD map { KEY : ADDR [. PORT], … }`: the packet's value of `key` picks the
    /// target (a port forward: `dnat to tcp dport map { 8080 : 10.0.10.5 . 80 }`); a packet
    /// whose value is in no element is not translated.
    Map {
        /// The field the map is looked up by.
        key: Field,
        /// Key atom, address, port (if the elements give one), in the order written.
        elems: Vec<(Atom, u128, Option<u16>)>,
    },
}

/// A NAT statement: `snat [ip|ip6] to …`, `dnat [ip|ip6] to …`, `masquerade [to :PORTS]`.
/// It ends the rule (a terminal statement, accepting the packet in its NAT chain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nat {
    /// Which translation.
    pub kind: NatKind,
    /// `ip` or `ip6` when written (required in `inet` tables when an address is given).
    pub family: Option<Family>,
    /// Its addresses are IPv6 (the table's family, or the written one).
    pub v6: bool,
    /// The target.
    pub to: NatTo,
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// `counter`: count the packets and bytes that reach it.
    Counter,
    /// `limit rate …`: a match on a token bucket.
    Limit(Limit),
    /// `log [prefix "…"]`: a line in the structured log (itself rate-limited).
    Log {
        /// The prefix, if any.
        prefix: Option<String>,
    },
    /// A verdict; ends the rule.
    Verdict(Verdict),
    /// A NAT statement; ends the rule (only in `type nat` chains).
    Nat(Nat),
}

/// One item of a rule, in the order written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A match: a packet that fails it leaves the rule.
    Match(Match),
    /// A statement.
    Stmt(Stmt),
}

/// A rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Its items, in order.
    pub items: Vec<Item>,
    /// `comment "…"`, if any.
    pub comment: Option<String>,
    /// Where the rule begins (its line is what `ctl trace` names).
    pub span: Span,
}

impl Rule {
    /// The verdict the rule ends with, if it has one.
    pub fn verdict(&self) -> Option<&Verdict> {
        self.items.iter().rev().find_map(|i| match i {
            Item::Stmt(Stmt::Verdict(v)) => Some(v),
            _ => None,
        })
    }
}

/// A named set: `set NAME { type T [. T]; [flags interval;] [elements = { … }] }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetDecl {
    /// Its name (referred to as `@name`).
    pub name: String,
    /// The type of each part of an element (several for a concatenation).
    pub key: Vec<ValueType>,
    /// `flags interval`: elements may be prefixes and ranges.
    pub interval: bool,
    /// Its elements.
    pub elements: Vec<Elem>,
    /// Where `set` was written.
    pub span: Span,
}

/// A parse or check error: where, and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{span}: Error: {msg}")]
pub struct Error {
    /// Where the offending token begins.
    pub span: Span,
    /// What is wrong, in nft's manner ("unknown chain \"foo\"").
    pub msg: String,
}

impl Ruleset {
    /// The same ruleset with every [`Span`] zeroed: what two parses of texts that say the
    /// same thing in different places (a file and its listing) compare equal by.
    pub fn without_spans(&self) -> Ruleset {
        let z = Span::default();
        let mut rs = self.clone();
        for t in &mut rs.tables {
            t.span = z;
            for s in &mut t.sets {
                s.span = z;
            }
            for c in &mut t.chains {
                c.span = z;
                for r in &mut c.rules {
                    r.span = z;
                    for i in &mut r.items {
                        if let Item::Match(m) = i {
                            m.span = z;
                        }
                    }
                }
            }
        }
        rs
    }
}
