//! IPv4 and IPv6 prefixes.
//!
//! A prefix is an address and a length whose host bits are zero (invariant kept by every
//! constructor). Parsing is strict, like `ip route`: `10.0.0.1/8` is an error
//! ([`PrefixError::HostBits`], which names the network the caller probably meant); the
//! `*_truncate` constructors normalise instead. A bare address is a host prefix (`/32`, `/128`);
//! `default` is `0.0.0.0/0` or `::/0` for the family-specific types (ambiguous for [`Prefix`]).
//!
//! Plain values; no thread concerns.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// Why a prefix was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixError {
    /// Not `ADDR/LEN`, `ADDR` or `default`, or the length is not a number.
    Syntax(String),
    /// The address part is not an address of the expected family.
    Address(String),
    /// The length exceeds 32 (IPv4) or 128 (IPv6).
    LengthTooLong {
        /// The length given.
        len: u32,
        /// The family's maximum.
        max: u8,
    },
    /// Bits beyond the length are set (strict parsing does not normalise).
    HostBits {
        /// What was given.
        given: String,
        /// The network with host bits cleared.
        network: String,
    },
    /// `default` without a family.
    AmbiguousDefault,
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixError::Syntax(s) => write!(f, "invalid prefix {s:?}: expected ADDRESS/LENGTH"),
            PrefixError::Address(s) => write!(f, "invalid address {s:?}"),
            PrefixError::LengthTooLong { len, max } => write!(f, "prefix length {len} exceeds {max}"),
            PrefixError::HostBits { given, network } => {
                write!(f, "{given} has host bits set (did you mean {network}?)")
            }
            PrefixError::AmbiguousDefault => write!(f, "\"default\" is ambiguous here: use 0.0.0.0/0 or ::/0"),
        }
    }
}

impl std::error::Error for PrefixError {}

/// The mask of a `len`-bit IPv4 prefix.
#[inline]
pub fn mask4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// The mask of a `len`-bit IPv6 prefix.
#[inline]
pub fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// An IPv4 prefix (host bits zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix4 {
    addr: Ipv4Addr,
    len: u8,
}

/// An IPv6 prefix (host bits zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix6 {
    addr: Ipv6Addr,
    len: u8,
}

/// The methods, parsing and printing of one family's prefix type (`Prefix4`, `Prefix6`).
macro_rules! family_prefix {
    ($name:ident, $addr:ident, $bits:ty, $max:literal, $mask:ident, $parse:ident) => {
        impl $name {
            #[doc = concat!("A prefix; refuses host bits and lengths above ", stringify!($max), ".")]
            pub fn new(addr: $addr, len: u8) -> Result<Self, PrefixError> {
                let p = Self::new_truncate(addr, len)?;
                if p.addr != addr {
                    return Err(PrefixError::HostBits {
                        given: format!("{addr}/{len}"),
                        network: p.to_string(),
                    });
                }
                Ok(p)
            }

            #[doc = concat!("A prefix with host bits cleared; refuses lengths above ", stringify!($max), ".")]
            pub fn new_truncate(addr: $addr, len: u8) -> Result<Self, PrefixError> {
                if len > $max {
                    return Err(PrefixError::LengthTooLong {
                        len: u32::from(len),
                        max: $max,
                    });
                }
                Ok($name {
                    addr: $addr::from(<$bits>::from(addr) & $mask(len)),
                    len,
                })
            }

            /// Parses like [`FromStr`] but clears host bits instead of refusing them.
            pub fn parse_truncate(s: &str) -> Result<Self, PrefixError> {
                let (a, l) = split::<$parse>(s, $max)?;
                Self::new_truncate(a.0, l)
            }

            /// The network address.
            pub fn addr(&self) -> $addr {
                self.addr
            }

            /// The length in bits.
            #[allow(clippy::len_without_is_empty)] // a prefix length, not a container's
            pub fn len(&self) -> u8 {
                self.len
            }

            /// The network address as an integer.
            pub fn bits(&self) -> $bits {
                <$bits>::from(self.addr)
            }

            /// Whether `ip` is inside the prefix.
            pub fn contains(&self, ip: $addr) -> bool {
                <$bits>::from(ip) & $mask(self.len) == self.bits()
            }
        }

        impl FromStr for $name {
            type Err = PrefixError;
            fn from_str(s: &str) -> Result<Self, PrefixError> {
                let (a, l) = split::<$parse>(s, $max)?;
                $name::new(a.0, l)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}/{}", self.addr, self.len)
            }
        }
    };
}

family_prefix!(Prefix4, Ipv4Addr, u32, 32, mask4, V4);
family_prefix!(Prefix6, Ipv6Addr, u128, 128, mask6, V6);

/// Splits `ADDR/LEN` (or `ADDR`, or `default`) without checking host bits.
fn split<A: FromStr + Default>(s: &str, max: u8) -> Result<(A, u8), PrefixError> {
    let s = s.trim();
    if s == "default" {
        return Ok((A::default(), 0));
    }
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => {
            let len: u32 = l.parse().map_err(|_| PrefixError::Syntax(s.to_string()))?;
            if len > u32::from(max) {
                return Err(PrefixError::LengthTooLong { len, max });
            }
            (a, len as u8)
        }
        None => (s, max),
    };
    let addr = a.parse::<A>().map_err(|_| PrefixError::Address(a.to_string()))?;
    Ok((addr, l))
}

/// `Ipv4Addr` with a `Default` (0.0.0.0) for `split`.
struct V4(Ipv4Addr);
/// `Ipv6Addr` with a `Default` (::) for `split`.
struct V6(Ipv6Addr);

impl Default for V4 {
    fn default() -> Self {
        V4(Ipv4Addr::UNSPECIFIED)
    }
}
impl Default for V6 {
    fn default() -> Self {
        V6(Ipv6Addr::UNSPECIFIED)
    }
}
impl FromStr for V4 {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(V4)
    }
}
impl FromStr for V6 {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(V6)
    }
}

/// An IPv4 or IPv6 prefix. Orders IPv4 before IPv6, then by address, then by length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prefix {
    /// IPv4.
    V4(Prefix4),
    /// IPv6.
    V6(Prefix6),
}

impl Prefix {
    /// A prefix of either family; refuses host bits and over-long lengths.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        match addr {
            IpAddr::V4(a) => Prefix4::new(a, len).map(Prefix::V4),
            IpAddr::V6(a) => Prefix6::new(a, len).map(Prefix::V6),
        }
    }

    /// A prefix of either family with host bits cleared.
    pub fn new_truncate(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        match addr {
            IpAddr::V4(a) => Prefix4::new_truncate(a, len).map(Prefix::V4),
            IpAddr::V6(a) => Prefix6::new_truncate(a, len).map(Prefix::V6),
        }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        match self {
            Prefix::V4(p) => IpAddr::V4(p.addr),
            Prefix::V6(p) => IpAddr::V6(p.addr),
        }
    }

    /// The length in bits.
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a container's
    pub fn len(&self) -> u8 {
        match self {
            Prefix::V4(p) => p.len,
            Prefix::V6(p) => p.len,
        }
    }

    /// Whether this is an IPv4 prefix.
    pub fn is_v4(&self) -> bool {
        matches!(self, Prefix::V4(_))
    }

    /// Whether `ip` is inside the prefix (always false across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Prefix::V4(p), IpAddr::V4(a)) => p.contains(a),
            (Prefix::V6(p), IpAddr::V6(a)) => p.contains(a),
            _ => false,
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let t = s.trim();
        if t == "default" {
            return Err(PrefixError::AmbiguousDefault);
        }
        let addr_part = t.split_once('/').map_or(t, |(a, _)| a);
        if addr_part.contains(':') {
            t.parse().map(Prefix::V6)
        } else {
            t.parse().map(Prefix::V4)
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prefix::V4(p) => p.fmt(f),
            Prefix::V6(p) => p.fmt(f),
        }
    }
}

impl From<Prefix4> for Prefix {
    fn from(p: Prefix4) -> Self {
        Prefix::V4(p)
    }
}

impl From<Prefix6> for Prefix {
    fn from(p: Prefix6) -> Self {
        Prefix::V6(p)
    }
}

macro_rules! serialize_as_string {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )*};
}
serialize_as_string!(Prefix4, Prefix6, Prefix);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display() {
        let p: Prefix4 = "10.0.0.0/8".parse().unwrap();
        assert_eq!((p.addr(), p.len()), (Ipv4Addr::new(10, 0, 0, 0), 8));
        assert_eq!(p.to_string(), "10.0.0.0/8");
        assert_eq!("192.0.2.1".parse::<Prefix4>().unwrap().len(), 32);
        assert_eq!("default".parse::<Prefix4>().unwrap().to_string(), "0.0.0.0/0");
        assert_eq!("default".parse::<Prefix6>().unwrap().to_string(), "::/0");
        let q: Prefix = "2001:db8::/32".parse().unwrap();
        assert_eq!(q.to_string(), "2001:db8::/32");
        assert!(!q.is_v4());
        assert_eq!("2001:db8::1".parse::<Prefix>().unwrap().len(), 128);
        assert!(q.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!q.contains("2001:db9::1".parse().unwrap()));
        assert!(!q.contains("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn errors_are_specific() {
        assert_eq!(
            "10.0.0.1/8".parse::<Prefix4>(),
            Err(PrefixError::HostBits {
                given: "10.0.0.1/8".into(),
                network: "10.0.0.0/8".into()
            })
        );
        assert_eq!(Prefix4::parse_truncate("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(
            "10.0.0.0/33".parse::<Prefix4>(),
            Err(PrefixError::LengthTooLong { len: 33, max: 32 })
        );
        assert_eq!(
            "::/129".parse::<Prefix6>(),
            Err(PrefixError::LengthTooLong { len: 129, max: 128 })
        );
        assert!(matches!("10.0.0.0/x".parse::<Prefix4>(), Err(PrefixError::Syntax(_))));
        assert!(matches!("10.0.0/8".parse::<Prefix4>(), Err(PrefixError::Address(_))));
        assert!(matches!("::1/64".parse::<Prefix>(), Err(PrefixError::HostBits { .. })));
        assert_eq!("default".parse::<Prefix>(), Err(PrefixError::AmbiguousDefault));
        assert!(PrefixError::HostBits {
            given: "a".into(),
            network: "b".into()
        }
        .to_string()
        .contains("did you mean b"));
    }

    #[test]
    fn masks_and_order() {
        assert_eq!(mask4(0), 0);
        assert_eq!(mask4(32), u32::MAX);
        assert_eq!(mask4(24), 0xffff_ff00);
        assert_eq!(mask6(0), 0);
        assert_eq!(mask6(128), u128::MAX);
        let a: Prefix = "10.0.0.0/8".parse().unwrap();
        let b: Prefix = "10.0.0.0/16".parse().unwrap();
        let c: Prefix = "::/0".parse().unwrap();
        assert!(a < b && b < c);
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"10.0.0.0/8\"");
    }
}
