//! Symbolic names of values (services, protocols, ICMP types, flags, …) and how each kind of
//! value is read from text and written back.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::ast::{Field, ValueType};

/// How a value is read and written: a [`ValueType`], with the two kinds that share a
/// `ValueType` but not their names told apart (ICMPv6 codes, and VLAN ids' 12 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dt {
    /// As [`ValueType`] says.
    Plain(ValueType),
    /// An ICMPv6 code (`icmpv6_code`), stored as [`ValueType::IcmpCode`].
    Icmpv6Code,
    /// A VLAN id: a 16-bit field whose values end at 4095.
    VlanId,
}

impl Dt {
    /// How a field's values are read.
    pub fn of_field(f: Field) -> Dt {
        match f {
            Field::Icmpv6Code => Dt::Icmpv6Code,
            Field::VlanId => Dt::VlanId,
            f => Dt::Plain(f.value_type()),
        }
    }

    /// The value type it is stored as.
    pub fn value_type(self) -> ValueType {
        match self {
            Dt::Plain(t) => t,
            Dt::Icmpv6Code => ValueType::IcmpCode,
            Dt::VlanId => ValueType::Integer { bits: 16 },
        }
    }

    /// The largest value.
    pub fn max(self) -> u128 {
        match self {
            Dt::VlanId => 4095,
            d => match d.value_type().bits() {
                128 => u128::MAX,
                b => (1u128 << b) - 1,
            },
        }
    }

    /// Whether values are addresses (written as prefixes where they can be).
    pub fn is_addr(self) -> bool {
        matches!(
            self.value_type(),
            ValueType::Ipv4Addr | ValueType::Ipv6Addr | ValueType::EtherAddr
        )
    }

    fn table(self) -> &'static [(&'static str, u32)] {
        match self {
            Dt::Icmpv6Code => ICMPV6_CODES,
            Dt::VlanId => &[],
            Dt::Plain(t) => match t {
                ValueType::InetProto => PROTOCOLS,
                ValueType::InetService => SERVICES,
                ValueType::CtState => CT_STATES,
                ValueType::TcpFlags => TCP_FLAGS,
                ValueType::IcmpType => ICMP_TYPES,
                ValueType::Icmpv6Type => ICMPV6_TYPES,
                ValueType::IcmpCode => ICMP_CODES,
                ValueType::EtherType => ETHER_TYPES,
                ValueType::NfProto => NFPROTOS,
                _ => &[],
            },
        }
    }

    /// Reads one value (not a range or prefix): a number, an address or a name.
    pub fn parse_one(self, s: &str) -> Result<u128, String> {
        let t = self.value_type();
        match t {
            ValueType::Ipv4Addr => {
                return s
                    .parse::<Ipv4Addr>()
                    .map(|a| u128::from(u32::from(a)))
                    .map_err(|_| format!("could not parse \"{s}\" as an IPv4 address"))
            }
            ValueType::Ipv6Addr => {
                return s
                    .parse::<Ipv6Addr>()
                    .map(u128::from)
                    .map_err(|_| format!("could not parse \"{s}\" as an IPv6 address"))
            }
            ValueType::EtherAddr => {
                return parse_mac(s).ok_or_else(|| format!("could not parse \"{s}\" as an Ethernet address"))
            }
            ValueType::Ifname => return Err("an interface name is not a number".into()),
            _ => {}
        }
        if let Some(v) = parse_number(s) {
            if v > self.max() {
                return Err(format!(
                    "value {v} exceeds valid range 0-{} of {}",
                    self.max(),
                    self.type_name()
                ));
            }
            return Ok(v);
        }
        let table = self.table();
        match table.iter().find(|(n, _)| *n == s) {
            Some((_, v)) => Ok(u128::from(*v)),
            None if table.is_empty() => Err(format!("could not parse \"{s}\" as a number ({})", self.type_name())),
            None => Err(format!("unknown {} \"{s}\"", self.type_name())),
        }
    }

    /// The name of a value, if it has one, for writing it back; ports and plain numbers are
    /// written as numbers, as `nft list` does.
    pub fn name_of(self, v: u128) -> Option<&'static str> {
        if matches!(self, Dt::Plain(ValueType::InetService)) {
            return None;
        }
        self.table().iter().find(|(_, x)| u128::from(*x) == v).map(|(n, _)| *n)
    }

    /// Writes one value back as it is read.
    pub fn show(self, v: u128) -> String {
        match self.value_type() {
            ValueType::Ipv4Addr => Ipv4Addr::from(v as u32).to_string(),
            ValueType::Ipv6Addr => Ipv6Addr::from(v).to_string(),
            ValueType::EtherAddr => {
                let b = (v as u64).to_be_bytes();
                format!(
                    "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                    b[2], b[3], b[4], b[5], b[6], b[7]
                )
            }
            ValueType::Mark => format!("0x{v:08x}"),
            t if t.is_flags() => self.show_flags(v),
            _ => match self.name_of(v) {
                Some(n) => n.to_string(),
                None => v.to_string(),
            },
        }
    }

    /// Writes a set of flag bits as names joined by `,` (a number when a bit has no name).
    pub fn show_flags(self, v: u128) -> String {
        let table = self.table();
        let mut names = Vec::new();
        let mut rest = v;
        for (n, b) in table {
            let b = u128::from(*b);
            if rest & b != 0 {
                names.push(*n);
                rest &= !b;
            }
        }
        if rest != 0 || names.is_empty() {
            format!("0x{v:x}")
        } else {
            names.join(",")
        }
    }

    /// The name of the type, as `nft` writes it in a set's `type`.
    pub fn type_name(self) -> &'static str {
        match self {
            Dt::Icmpv6Code => "icmpv6_code",
            Dt::VlanId => "integer",
            Dt::Plain(t) => type_name(t),
        }
    }
}

/// The name `nft` gives a value type in a set's `type` (`integer` for plain numbers, which
/// a set can only declare with `typeof`).
pub fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Ipv4Addr => "ipv4_addr",
        ValueType::Ipv6Addr => "ipv6_addr",
        ValueType::EtherAddr => "ether_addr",
        ValueType::InetProto => "inet_proto",
        ValueType::InetService => "inet_service",
        ValueType::Ifname => "ifname",
        ValueType::Mark => "mark",
        ValueType::CtState => "ct_state",
        ValueType::TcpFlags => "tcp_flag",
        ValueType::IcmpType => "icmp_type",
        ValueType::Icmpv6Type => "icmpv6_type",
        ValueType::IcmpCode => "icmp_code",
        ValueType::EtherType => "ether_type",
        ValueType::NfProto => "nf_proto",
        ValueType::Integer { .. } => "integer",
    }
}

/// The type a set's `type` names.
pub fn type_by_name(s: &str) -> Option<Dt> {
    let t = match s {
        "ipv4_addr" => ValueType::Ipv4Addr,
        "ipv6_addr" => ValueType::Ipv6Addr,
        "ether_addr" => ValueType::EtherAddr,
        "inet_proto" => ValueType::InetProto,
        "inet_service" => ValueType::InetService,
        "ifname" => ValueType::Ifname,
        "mark" => ValueType::Mark,
        "ct_state" => ValueType::CtState,
        "tcp_flag" => ValueType::TcpFlags,
        "icmp_type" => ValueType::IcmpType,
        "icmpv6_type" => ValueType::Icmpv6Type,
        "icmp_code" => ValueType::IcmpCode,
        "icmpv6_code" => return Some(Dt::Icmpv6Code),
        "ether_type" => ValueType::EtherType,
        "nf_proto" => ValueType::NfProto,
        _ => return None,
    };
    Some(Dt::Plain(t))
}

/// A decimal or `0x` hexadecimal number.
pub fn parse_number(s: &str) -> Option<u128> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 32 {
            return None;
        }
        return u128::from_str_radix(h, 16).ok();
    }
    if s.is_empty() || s.len() > 39 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_mac(s: &str) -> Option<u128> {
    let mut v: u128 = 0;
    let mut n = 0;
    for part in s.split(':') {
        if part.is_empty() || part.len() > 2 {
            return None;
        }
        v = (v << 8) | u128::from(u8::from_str_radix(part, 16).ok()?);
        n += 1;
    }
    (n == 6).then_some(v)
}

/// Codes `reject with icmp` takes.
pub const ICMP_CODES: &[(&str, u32)] = &[
    ("net-unreachable", 0),
    ("host-unreachable", 1),
    ("prot-unreachable", 2),
    ("port-unreachable", 3),
    ("frag-needed", 4),
    ("net-prohibited", 9),
    ("host-prohibited", 10),
    ("admin-prohibited", 13),
];

/// Codes `reject with icmpv6` takes.
pub const ICMPV6_CODES: &[(&str, u32)] = &[
    ("no-route", 0),
    ("admin-prohibited", 1),
    ("addr-unreachable", 3),
    ("port-unreachable", 4),
    ("policy-fail", 5),
    ("reject-route", 6),
];

/// Codes `reject with icmpx` takes.
pub const ICMPX_CODES: &[(&str, u32)] = &[
    ("no-route", 0),
    ("port-unreachable", 1),
    ("host-unreachable", 2),
    ("admin-prohibited", 3),
];

const CT_STATES: &[(&str, u32)] = &[
    ("invalid", 1),
    ("established", 2),
    ("related", 4),
    ("new", 8),
    ("untracked", 64),
];

const TCP_FLAGS: &[(&str, u32)] = &[
    ("fin", 0x01),
    ("syn", 0x02),
    ("rst", 0x04),
    ("psh", 0x08),
    ("ack", 0x10),
    ("urg", 0x20),
    ("ecn", 0x40),
    ("cwr", 0x80),
];

const ETHER_TYPES: &[(&str, u32)] = &[
    ("ip", 0x0800),
    ("arp", 0x0806),
    ("ip6", 0x86dd),
    ("vlan", 0x8100),
    ("8021q", 0x8100),
    ("8021ad", 0x88a8),
];

const NFPROTOS: &[(&str, u32)] = &[("ipv4", 2), ("ipv6", 10)];

const PROTOCOLS: &[(&str, u32)] = &[
    ("icmp", 1),
    ("igmp", 2),
    ("tcp", 6),
    ("udp", 17),
    ("dccp", 33),
    ("ipv6", 41),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("ipv6-icmp", 58),
    ("icmpv6", 58),
    ("ospf", 89),
    ("pim", 103),
    ("vrrp", 112),
    ("l2tp", 115),
    ("sctp", 132),
    ("udplite", 136),
];

const ICMP_TYPES: &[(&str, u32)] = &[
    ("echo-reply", 0),
    ("destination-unreachable", 3),
    ("source-quench", 4),
    ("redirect", 5),
    ("echo-request", 8),
    ("router-advertisement", 9),
    ("router-solicitation", 10),
    ("time-exceeded", 11),
    ("parameter-problem", 12),
    ("timestamp-request", 13),
    ("timestamp-reply", 14),
    ("info-request", 15),
    ("info-reply", 16),
    ("address-mask-request", 17),
    ("address-mask-reply", 18),
];

const ICMPV6_TYPES: &[(&str, u32)] = &[
    ("destination-unreachable", 1),
    ("packet-too-big", 2),
    ("time-exceeded", 3),
    ("parameter-problem", 4),
    ("echo-request", 128),
    ("echo-reply", 129),
    ("mld-listener-query", 130),
    ("mld-listener-report", 131),
    ("mld-listener-done", 132),
    ("mld-listener-reduction", 132),
    ("nd-router-solicit", 133),
    ("nd-router-advert", 134),
    ("nd-neighbor-solicit", 135),
    ("nd-neighbor-advert", 136),
    ("nd-redirect", 137),
    ("router-renumbering", 138),
    ("ind-neighbor-solicit", 141),
    ("ind-neighbor-advert", 142),
    ("mld2-listener-report", 143),
];

/// Service names and their ports (the common part of `/etc/services`).
const SERVICES: &[(&str, u32)] = &[
    ("ftp-data", 20),
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("whois", 43),
    ("domain", 53),
    ("bootps", 67),
    ("bootpc", 68),
    ("tftp", 69),
    ("finger", 79),
    ("http", 80),
    ("kerberos", 88),
    ("pop3", 110),
    ("sunrpc", 111),
    ("auth", 113),
    ("nntp", 119),
    ("ntp", 123),
    ("netbios-ns", 137),
    ("netbios-dgm", 138),
    ("netbios-ssn", 139),
    ("imap", 143),
    ("imap2", 143),
    ("snmp", 161),
    ("snmp-trap", 162),
    ("bgp", 179),
    ("ldap", 389),
    ("https", 443),
    ("microsoft-ds", 445),
    ("submissions", 465),
    ("isakmp", 500),
    ("syslog", 514),
    ("printer", 515),
    ("rtsp", 554),
    ("submission", 587),
    ("ipp", 631),
    ("ldaps", 636),
    ("domain-s", 853),
    ("rsync", 873),
    ("imaps", 993),
    ("pop3s", 995),
    ("socks", 1080),
    ("openvpn", 1194),
    ("radius", 1812),
    ("radius-acct", 1813),
    ("nfs", 2049),
    ("mysql", 3306),
    ("ms-wbt-server", 3389),
    ("ipsec-nat-t", 4500),
    ("sip", 5060),
    ("xmpp-client", 5222),
    ("mdns", 5353),
    ("postgresql", 5432),
    ("redis", 6379),
    ("http-alt", 8080),
    ("git", 9418),
    ("dhcpv6-client", 546),
    ("dhcpv6-server", 547),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_and_written() {
        let svc = Dt::Plain(ValueType::InetService);
        assert_eq!(svc.parse_one("ssh"), Ok(22));
        assert_eq!(svc.parse_one("0x16"), Ok(22));
        assert!(svc.parse_one("70000").unwrap_err().contains("exceeds"));
        assert!(svc.parse_one("nope").unwrap_err().contains("unknown inet_service"));
        let mac = Dt::Plain(ValueType::EtherAddr);
        let m = mac.parse_one("aa:bb:cc:dd:ee:0f").unwrap();
        assert_eq!(mac.show(m), "aa:bb:cc:dd:ee:0f");
        let fl = Dt::Plain(ValueType::TcpFlags);
        assert_eq!(fl.show(0x12), "syn,ack");
        assert_eq!(Dt::Plain(ValueType::CtState).show(0x10), "0x10");
        assert!(Dt::VlanId.parse_one("4096").is_err());
        assert_eq!(Dt::Plain(ValueType::InetProto).show(58), "ipv6-icmp");
    }
}
