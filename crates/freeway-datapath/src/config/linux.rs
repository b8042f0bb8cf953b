//! `[linux]`: the Linux control plane. With `mirror = true` the routes of a kernel routing
//! table of Freeway's network namespace (what a routing daemon such as BIRD or FRR installs)
//! are mirrored into Freeway's RIB, tagged with their origin; see `freeway-linuxcp`.
//!
//! ```toml
//! [linux]
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
    /// Which kernel routes are mirrored.
    pub mirror: freeway_linuxcp::Filter,
}

/// Checks `[linux]`; `None` when nothing is enabled. `router` tells whether the config has
/// router interfaces.
pub fn check(c: &LinuxConfig, router: bool) -> Result<Option<LinuxSpec>, (Option<Range<usize>>, String)> {
    if !c.mirror {
        if c.table.is_some() || c.protocols.is_some() {
            return Err((None, "[linux]: table and protocols need mirror = true".into()));
        }
        return Ok(None);
    }
    if !router {
        return Err((
            None,
            "[linux] mirror = true needs a router: add an [[interface]] (kernel routes are matched to \
             router interfaces by device name)"
                .into(),
        ));
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
        mirror: freeway_linuxcp::Filter { table, protocols },
    }))
}
