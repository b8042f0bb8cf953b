//! The syntax tree of a filter expression. Children appear in the order they were written,
//! which matters: like libpcap, `vlan` shifts the offsets of everything written after it.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;

/// A boolean filter expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// `a and b` / `a && b`.
    And(Box<Expr>, Box<Expr>),
    /// `a or b` / `a || b`.
    Or(Box<Expr>, Box<Expr>),
    /// `not a` / `!a`.
    Not(Box<Expr>),
    /// A primitive and the byte span it was written at.
    Prim(Prim, Range<usize>),
}

/// Direction qualifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// `src`.
    Src,
    /// `dst`.
    Dst,
    /// `src or dst` (the default).
    SrcOrDst,
    /// `src and dst`.
    SrcAndDst,
}

/// Protocol names usable as qualifiers, abbreviations and load bases (`tcp[13]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// `ether` / `link`.
    Ether,
    /// `ip`.
    Ip,
    /// `ip6`.
    Ip6,
    /// `arp`.
    Arp,
    /// `rarp`.
    Rarp,
    /// `tcp`.
    Tcp,
    /// `udp`.
    Udp,
    /// `icmp`.
    Icmp,
    /// `icmp6`.
    Icmp6,
    /// `sctp`.
    Sctp,
    /// `igmp`.
    Igmp,
}

impl Proto {
    /// The keyword.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Ether => "ether",
            Proto::Ip => "ip",
            Proto::Ip6 => "ip6",
            Proto::Arp => "arp",
            Proto::Rarp => "rarp",
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
            Proto::Icmp6 => "icmp6",
            Proto::Sctp => "sctp",
            Proto::Igmp => "igmp",
        }
    }

    /// The IP protocol number of an L4 protocol.
    pub fn ip_proto(self) -> Option<u8> {
        match self {
            Proto::Tcp => Some(6),
            Proto::Udp => Some(17),
            Proto::Icmp => Some(1),
            Proto::Icmp6 => Some(58),
            Proto::Sctp => Some(132),
            Proto::Igmp => Some(2),
            _ => None,
        }
    }
}

/// An IPv4 or IPv6 address with a mask (a host is a full mask).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    /// IPv4 address and netmask.
    V4(Ipv4Addr, u32),
    /// IPv6 address and prefix length.
    V6(Ipv6Addr, u8),
}

/// Which link/IP protocols a `host`/`net` test covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostProto {
    /// No qualifier: IPv4, ARP and RARP for an IPv4 address; IPv6 for an IPv6 address.
    Any,
    /// `ip`.
    Ip,
    /// `ip6`.
    Ip6,
    /// `arp`.
    Arp,
    /// `rarp`.
    Rarp,
}

/// A primitive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prim {
    /// A protocol abbreviation: `ip`, `ip6`, `arp`, `rarp`, `tcp`, `udp`, `icmp`, `icmp6`,
    /// `sctp`, `igmp`.
    Proto(Proto),
    /// `vlan [id]`.
    Vlan(Option<u16>),
    /// `ether proto N`.
    EtherProto(u16),
    /// `ip proto N`, `ip6 proto N`, `proto N` (both).
    IpProto {
        /// Test IPv4.
        v4: bool,
        /// Test IPv6.
        v6: bool,
        /// Protocol number.
        proto: u8,
    },
    /// `[ip|ip6|arp|rarp] [dir] host|net ADDR[/len | mask M]`.
    Host {
        /// Protocol qualifier.
        proto: HostProto,
        /// Direction.
        dir: Dir,
        /// Address and mask.
        net: Net,
    },
    /// `ether [dir] host MAC`.
    EtherHost {
        /// Direction.
        dir: Dir,
        /// Address.
        mac: [u8; 6],
    },
    /// `[tcp|udp|sctp] [dir] port N` / `portrange A-B`.
    Port {
        /// L4 qualifier (`None`: TCP, UDP and SCTP).
        l4: Option<Proto>,
        /// Direction.
        dir: Dir,
        /// Lowest port.
        lo: u16,
        /// Highest port.
        hi: u16,
        /// Written as `portrange` (compiled as a range test even when `lo == hi`).
        range: bool,
    },
    /// `ether broadcast` / `broadcast`.
    EtherBroadcast,
    /// `ether multicast` / `multicast`.
    EtherMulticast,
    /// `ip multicast`.
    IpMulticast,
    /// `ip broadcast`: IPv4 destination 255.255.255.255 or 0.0.0.0, which is what libpcap
    /// compiles with a netmask of 0, as tcpdump passes when it reads a file or knows no
    /// netmask for the interface (a capture on a Freeway port has no netmask).
    IpBroadcast,
    /// `ip6 multicast`.
    Ip6Multicast,
    /// `arith relop arith` (`less`/`greater` become relations on `len`).
    Rel {
        /// The comparison.
        op: RelOp,
        /// Left side.
        lhs: Arith,
        /// Right side.
        rhs: Arith,
    },
}

/// A comparison (unsigned 32-bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelOp {
    /// `=` / `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// A binary arithmetic operator (32-bit, wrapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArOp {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/` (unsigned; by a runtime zero the filter rejects the packet).
    Div,
    /// `%`.
    Mod,
    /// `&`.
    And,
    /// `|`.
    Or,
    /// `^`.
    Xor,
    /// `<<`.
    Lsh,
    /// `>>`.
    Rsh,
}

impl ArOp {
    /// Applies the operator to constants (`None` for division by zero).
    pub fn fold(self, a: u32, b: u32) -> Option<u32> {
        Some(match self {
            ArOp::Add => a.wrapping_add(b),
            ArOp::Sub => a.wrapping_sub(b),
            ArOp::Mul => a.wrapping_mul(b),
            ArOp::Div => a.checked_div(b)?,
            ArOp::Mod => a.checked_rem(b)?,
            ArOp::And => a & b,
            ArOp::Or => a | b,
            ArOp::Xor => a ^ b,
            ArOp::Lsh => a.checked_shl(b).unwrap_or(0),
            ArOp::Rsh => a.checked_shr(b).unwrap_or(0),
        })
    }
}

/// An arithmetic expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arith {
    /// A constant.
    Num(u32),
    /// `len`: the packet length.
    Len,
    /// `proto[index]`, `proto[index:size]` (size 1, 2 or 4).
    Load {
        /// The header the index is relative to.
        proto: Proto,
        /// The offset within it.
        index: Box<Arith>,
        /// Bytes to load.
        size: u8,
    },
    /// `a op b`.
    Bin(ArOp, Box<Arith>, Box<Arith>),
    /// `-a`.
    Neg(Box<Arith>),
}
