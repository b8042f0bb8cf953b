//! `[linux]`: the Linux control plane, so a routing daemon (BIRD, FRR) on the kernel of
//! Freeway's network namespace drives the router. With `mirror = true` the routes of a kernel
//! routing table are mirrored into Freeway's RIB, tagged with their origin; with
//! `punt = true` every router interface gets a kernel twin (a tap device of the interface's
//! name, MAC and addresses) that receives the packets for the router that Freeway does not
//! answer itself and whose output Freeway routes out. See `freeway-linuxcp`.
//!
//! ```toml
//! [linux]
//! punt = true            # the interfaces' kernel twins
//! mirror = true          # follow the kernel's routing table
//! table = 254            # which table (default 254, `main`)
//! protocols = ["bird"]   # only routes of these protocols (names as in `ip route`'s
//!                        # `proto`, or numbers); default: all but `kernel`
//! ```
//!
//! A kernel route's devices are matched to the router's interfaces by name.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

/// The `[linux]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxConfig {
    /// Mirror the kernel's routes.
    #[serde(default)]
    pub mirror: bool,
    /// Give every router interface a kernel twin (the punt path).
    #[serde(default)]
    pub punt: bool,
    /// The kernel table (default 254).
    #[serde(default)]
    pub table: Option<Spanned<u32>>,
    /// Route protocols to mirror (names or numbers).
    #[serde(default)]
    pub protocols: Option<Vec<Spanned<String>>>,
}

/// The checked `[linux]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxSpec {
    /// Which kernel routes are mirrored (with `mirror = true`).
    pub mirror: Option<freeway_linuxcp::Filter>,
    /// Whether the router interfaces get kernel twins.
    pub punt: bool,
}

/// Checks `[linux]`; `None` when nothing is enabled. `router` tells whether the config has
/// router interfaces.
pub fn check(c: &LinuxConfig, router: bool) -> Result<Option<LinuxSpec>, (Option<Range<usize>>, String)> {
    if !c.mirror && (c.table.is_some() || c.protocols.is_some()) {
        return Err((None, "[linux]: table and protocols need mirror = true".into()));
    }
    if !c.mirror && !c.punt {
        return Ok(None);
    }
    if !router {
        return Err((
            None,
            "[linux] mirror and punt need a router: add an [[interface]] (kernel routes are matched to \
             router interfaces by device name; the twins are the interfaces')"
                .into(),
        ));
    }
    if !c.mirror {
        return Ok(Some(LinuxSpec {
            mirror: None,
            punt: true,
        }));
    }
    let table = match &c.table {
        Some(t) if *t.get_ref() == 0 => {
            return Err((Some(t.span()), "[linux] table: 1 to 4294967295 (254 is main)".into()))
        }
        Some(t) => *t.get_ref(),
        None => 254,
    };
    let protocols = match &c.protocols {
        None => None,
        Some(list) => Some(
            list.iter()
                .map(|s| {
                    freeway_route::rt_proto_parse(s.get_ref()).ok_or_else(|| {
                        (
                            Some(s.span()),
                            format!(
                                "[linux] protocols: unknown route protocol {:?} (a name as `ip route` shows it, \
                                 such as bird, static, boot, zebra, bgp, ospf, or a number 0-255)",
                                s.get_ref()
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<u8>, _>>()?,
        ),
    };
    Ok(Some(LinuxSpec {
        mirror: Some(freeway_linuxcp::Filter { table, protocols }),
        punt: c.punt,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_str(s: &str, router: bool) -> Result<Option<LinuxSpec>, String> {
        let c: LinuxConfig = toml::from_str(s).map_err(|e| e.to_string())?;
        check(&c, router).map_err(|e| e.1)
    }

    #[test]
    fn linux_section_is_checked() {
        assert_eq!(check_str("", true), Ok(None));
        let s = check_str("mirror = true\npunt = true\nprotocols = [\"bird\", \"186\"]", true)
            .unwrap()
            .unwrap();
        assert_eq!(
            s.mirror,
            Some(freeway_linuxcp::Filter {
                table: 254,
                protocols: Some(vec![12, 186])
            })
        );
        assert!(s.punt);
        let s = check_str("punt = true", true).unwrap().unwrap();
        assert_eq!(s.mirror, None);
        let s = check_str("mirror = true\ntable = 100", true).unwrap().unwrap();
        assert_eq!(s.mirror.unwrap().table, 100);
        let refused = [
            (
                "mirror = true\nprotocols = [\"birdd\"]",
                true,
                "unknown route protocol \"birdd\"",
            ),
            ("table = 100", true, "need mirror = true"),
            ("mirror = true", false, "need a router"),
            ("mirror = true\ntable = 0", true, "254 is main"),
            ("mirrors = true", true, "unknown field"),
        ];
        for (text, router, why) in refused {
            let e = check_str(text, router).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }
}
