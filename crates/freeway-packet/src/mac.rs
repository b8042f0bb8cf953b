//! MAC addresses: parsing and printing in the usual colon form.

use std::fmt;
use std::str::FromStr;

/// A 48-bit Ethernet address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: Mac = Mac([0xff; 6]);

    /// Group (multicast or broadcast) address: the I/G bit is set.
    #[inline(always)]
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// The all-zero address (never valid as a source).
    #[inline(always)]
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a MAC string did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadMac(pub String);

impl fmt::Display for BadMac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid MAC address {:?} (expected six hex bytes like 02:00:00:00:00:01)",
            self.0
        )
    }
}

impl std::error::Error for BadMac {}

impl FromStr for Mac {
    type Err = BadMac;

    fn from_str(s: &str) -> Result<Mac, BadMac> {
        let err = || BadMac(s.to_string());
        let parts: Vec<&str> = if s.contains(':') {
            s.split(':').collect()
        } else {
            s.split('-').collect()
        };
        if parts.len() != 6 {
            return Err(err());
        }
        let mut m = [0u8; 6];
        for (i, p) in parts.iter().enumerate() {
            if p.is_empty() || p.len() > 2 {
                return Err(err());
            }
            m[i] = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        Ok(Mac(m))
    }
}

impl serde::Serialize for Mac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Mac {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Mac, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let m: Mac = "02:AB:0c:00:00:01".parse().unwrap();
        assert_eq!(m.to_string(), "02:ab:0c:00:00:01");
        assert_eq!("02-ab-0c-00-00-01".parse::<Mac>().unwrap(), m);
        assert!("02:ab:0c:00:00".parse::<Mac>().is_err());
        assert!("02:ab:0c:00:00:1g".parse::<Mac>().is_err());
        assert!("02:ab:0c:00:00:100".parse::<Mac>().is_err());
        assert!(Mac::BROADCAST.is_multicast());
        assert!("01:00:5e:00:00:01".parse::<Mac>().unwrap().is_multicast());
        assert!(!m.is_multicast());
    }
}
