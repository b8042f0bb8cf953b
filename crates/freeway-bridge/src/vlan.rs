//! VLAN membership of bridge ports: access and trunk ports, ingress filtering, egress tagging.
//!
//! * An **access** port belongs to one VLAN (its PVID). It accepts untagged frames, and frames
//!   tagged with its PVID or priority-tagged (VID 0); other tagged frames are dropped and
//!   counted. It always transmits untagged.
//! * A **trunk** port carries a set of VLANs tagged. Tagged frames whose VID is not in the set
//!   are dropped and counted. Untagged (or priority-tagged) frames belong to the native VLAN if
//!   one is set and are dropped otherwise. Frames of the native VLAN leave untagged.
//!
//! These tables are read-only on the fast path: the bridge keeps every port's mode in one
//! version published whole (`Bridge::set_port_vlans`), which a reload replaces while workers
//! forward.

use serde::{Deserialize, Serialize};

/// A set of VLAN IDs (0..4096), one bit each.
#[derive(Clone, PartialEq, Eq)]
pub struct VlanSet([u64; 64]);

impl Default for VlanSet {
    fn default() -> Self {
        VlanSet([0; 64])
    }
}

impl std::fmt::Debug for VlanSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl VlanSet {
    /// Adds a VLAN.
    pub fn insert(&mut self, vid: u16) {
        let v = usize::from(vid & 0x0fff);
        self.0[v / 64] |= 1 << (v % 64);
    }

    /// Whether `vid` is in the set.
    #[inline(always)]
    pub fn contains(&self, vid: u16) -> bool {
        let v = usize::from(vid & 0x0fff);
        self.0[v / 64] & (1 << (v % 64)) != 0
    }

    /// The VLANs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..4096u16).filter(|v| self.contains(*v))
    }

    /// Parses a list like `["10", "20-30", "100"]`.
    pub fn parse_list<S: AsRef<str>>(items: &[S]) -> Result<VlanSet, String> {
        let mut s = VlanSet::default();
        for it in items {
            let it = it.as_ref().trim();
            let (a, b) = match it.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (it, it),
            };
            let a = parse_vid(a)?;
            let b = parse_vid(b)?;
            if a > b {
                return Err(format!("VLAN range {it:?} is backwards"));
            }
            for v in a..=b {
                s.insert(v);
            }
        }
        Ok(s)
    }
}

/// Parses a VLAN ID in 1..=4094.
pub fn parse_vid(s: &str) -> Result<u16, String> {
    let v: u16 = s.parse().map_err(|_| format!("{s:?} is not a VLAN ID"))?;
    check_vid(v)?;
    Ok(v)
}

/// Checks that a VLAN ID is in 1..=4094.
pub fn check_vid(v: u16) -> Result<(), String> {
    if (1..=4094).contains(&v) {
        Ok(())
    } else {
        Err(format!("VLAN {v} is outside 1..=4094"))
    }
}

/// How a port takes part in VLANs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortVlan {
    /// Untagged member of one VLAN.
    Access(u16),
    /// Tagged member of several VLANs, with an optional untagged native VLAN.
    Trunk {
        /// VLANs carried tagged.
        allowed: Box<VlanSet>,
        /// VLAN of untagged frames.
        native: Option<u16>,
    },
}

/// The `vlan` settings of a port in the config file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "lowercase", tag = "mode")]
pub enum PortVlanConfig {
    /// `{ mode = "access", vlan = 10 }`
    Access {
        /// The PVID.
        vlan: u16,
    },
    /// `{ mode = "trunk", vlans = ["10", "20-30"], native = 1 }`
    Trunk {
        /// Allowed VLANs.
        vlans: Vec<String>,
        /// Native VLAN.
        #[serde(default)]
        native: Option<u16>,
    },
}

impl Default for PortVlanConfig {
    fn default() -> Self {
        PortVlanConfig::Access { vlan: 1 }
    }
}

impl PortVlanConfig {
    /// Checks and compiles the settings.
    pub fn build(&self) -> Result<PortVlan, String> {
        match self {
            PortVlanConfig::Access { vlan } => {
                check_vid(*vlan)?;
                Ok(PortVlan::Access(*vlan))
            }
            PortVlanConfig::Trunk { vlans, native } => {
                let mut allowed = VlanSet::parse_list(vlans)?;
                if let Some(n) = native {
                    check_vid(*n)?;
                    allowed.insert(*n);
                }
                Ok(PortVlan::Trunk {
                    allowed: Box::new(allowed),
                    native: *native,
                })
            }
        }
    }
}

impl std::fmt::Display for VlanSet {
    /// Ranges, like `10,20-30`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v: Vec<u16> = self.iter().collect();
        let mut parts = Vec::new();
        let mut i = 0;
        while i < v.len() {
            let mut j = i;
            while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
                j += 1;
            }
            parts.push(if i == j {
                v[i].to_string()
            } else {
                format!("{}-{}", v[i], v[j])
            });
            i = j + 1;
        }
        f.write_str(&parts.join(","))
    }
}

impl std::fmt::Display for PortVlan {
    /// `access vlan 10`, or `trunk vlans 10,20-30 native 1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortVlan::Access(v) => write!(f, "access vlan {v}"),
            PortVlan::Trunk { allowed, native } => {
                write!(f, "trunk vlans {allowed}")?;
                match native {
                    Some(n) => write!(f, " native {n}"),
                    None => write!(f, " (untagged frames dropped)"),
                }
            }
        }
    }
}

impl PortVlan {
    /// The VLAN an arriving frame belongs to, from its outer tag (`tag` is the VID, or `None`
    /// when untagged); `None` means the port does not accept it.
    #[inline(always)]
    pub fn classify(&self, tag: Option<u16>) -> Option<u16> {
        match self {
            PortVlan::Access(pvid) => match tag {
                None | Some(0) => Some(*pvid),
                Some(t) if t == *pvid => Some(t),
                Some(_) => None,
            },
            PortVlan::Trunk { allowed, native } => match tag {
                None | Some(0) => *native,
                Some(t) if allowed.contains(t) => Some(t),
                Some(_) => None,
            },
        }
    }

    /// Whether frames of `vid` leave this port tagged.
    #[inline(always)]
    pub fn egress_tagged(&self, vid: u16) -> bool {
        match self {
            PortVlan::Access(_) => false,
            PortVlan::Trunk { native, .. } => *native != Some(vid),
        }
    }

    /// How frames of `vid` leave this port: `Some(tagged)` when it is a member of `vid`,
    /// `None` when it is not (one read of the mode for both questions).
    #[inline(always)]
    pub fn egress(&self, vid: u16) -> Option<bool> {
        self.is_member(vid).then(|| self.egress_tagged(vid))
    }

    /// Whether the port is a member of `vid`.
    pub fn is_member(&self, vid: u16) -> bool {
        match self {
            PortVlan::Access(p) => *p == vid,
            PortVlan::Trunk { allowed, .. } => allowed.contains(vid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_port_accepts_untagged_and_its_pvid() {
        let p = PortVlan::Access(10);
        assert_eq!(p.classify(None), Some(10));
        assert_eq!(p.classify(Some(0)), Some(10));
        assert_eq!(p.classify(Some(10)), Some(10));
        assert_eq!(p.classify(Some(11)), None);
        assert!(!p.egress_tagged(10));
    }

    #[test]
    fn trunk_port_filters_and_tags() {
        let cfg = PortVlanConfig::Trunk {
            vlans: vec!["10".into(), "20-22".into()],
            native: Some(1),
        };
        let p = cfg.build().unwrap();
        assert_eq!(p.classify(Some(21)), Some(21));
        assert_eq!(p.classify(Some(23)), None);
        assert_eq!(p.classify(None), Some(1));
        assert!(p.egress_tagged(21));
        assert!(!p.egress_tagged(1));
        assert_eq!(p.to_string(), "trunk vlans 1,10,20-22 native 1");
        assert_eq!(PortVlan::Access(7).to_string(), "access vlan 7");
        let no_native = PortVlanConfig::Trunk {
            vlans: vec!["10".into()],
            native: None,
        }
        .build()
        .unwrap();
        assert_eq!(no_native.classify(None), None);
    }

    #[test]
    fn bad_vlan_lists_are_refused() {
        assert!(VlanSet::parse_list(&["5000"]).is_err());
        assert!(VlanSet::parse_list(&["0"]).is_err());
        assert!(VlanSet::parse_list(&["30-20"]).is_err());
        assert!(VlanSet::parse_list(&["ten"]).is_err());
        assert!(PortVlanConfig::Access { vlan: 4095 }.build().is_err());
    }
}
