//! `[conntrack]` and `[firewall]`: connection tracking and the stateful firewall.
//!
//! ```toml
//! [conntrack]
//! max = 1000000                          # connections in all zones
//! zone_limits = [{ zone = 1, max = 1000 }]
//! timeouts = { tcp_established = 86400, udp_single = 30 }   # seconds, conntrack-tools names
//!
//! [conntrack.reassembly]                 # IP fragments, per worker (these are the defaults)
//! enabled = true
//! max_datagrams = 1024                   # datagrams in flight
//! max_bytes = 4194304                    # bytes of fragment buffers held (Linux's ipfrag_high_thresh)
//! max_fragments = 64                     # fragments of one datagram
//! timeout = 30                           # seconds from the first fragment (Linux's ipfrag_time)
//!
//! [firewall]                             # implies [conntrack]
//! allow_new_from = ["inside"]            # ports where new connections may start
//!
//! [[port]]
//! name = "inside"
//! zone = 1                               # conntrack zone of what arrives here (default 0)
//! ```
//!
//! With tracking on, IPv4 and IPv6 fragments are reassembled before they are tracked (each
//! worker its own, `freeway-frag`): the datagram is judged, bridged and routed whole, and
//! leaves fragmented again to its largest original fragment's size. With
//! `reassembly.enabled = false` fragments are tracked as they are, that is found invalid.
//!
//! With the firewall on, an IPv4/IPv6 packet is forwarded when its connection is established
//! or related, or when it is new and arrived on a port of `allow_new_from`; invalid packets
//! and new connections from other ports are dropped and counted. Without `[firewall]`,
//! `[conntrack]` tracks and counts but drops nothing (except new connections over a limit).
//!
//! The firewall's policy can instead be an nftables ruleset, as `nft -f` reads it:
//!
//! ```toml
//! [firewall]
//! ruleset = "rules.nft"                  # relative to this file's directory
//! # rules = """ table inet filter { ... } """   # or inline
//! ```
//!
//! Its `ip`, `ip6` and `inet` tables' `input` and `forward` base chains judge routed packets
//! (so it needs a `[router]`), as Linux's do: bridged traffic is not filtered by them.
//! `iifname`/`oifname` name router interfaces. A ruleset that does not parse is an error
//! naming its line and column; `freeway ctl firewall load FILE` replaces it live.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use freeway_firewall::ast::Ruleset;

use serde::Deserialize;
use toml::Spanned;

/// `[conntrack]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConntrackConfig {
    /// Track connections (default true when the section or `[firewall]` is present).
    pub enabled: Option<bool>,
    /// Most connections, all zones together.
    pub max: Option<Spanned<usize>>,
    /// Per-zone limits.
    #[serde(default)]
    pub zone_limits: Vec<Spanned<ZoneLimit>>,
    /// Timeout overrides in seconds, by conntrack-tools name.
    #[serde(default)]
    pub timeouts: BTreeMap<String, Spanned<u64>>,
    /// `[conntrack.reassembly]`: fragment reassembly.
    pub reassembly: Option<Spanned<ReassemblyConfig>>,
}

/// `[conntrack.reassembly]`: the bounds of each worker's reassembly table
/// (`freeway_frag::Limits`; unset fields keep its defaults).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReassemblyConfig {
    /// Reassemble fragments (default true).
    pub enabled: Option<bool>,
    /// Datagrams in flight per worker.
    pub max_datagrams: Option<usize>,
    /// Bytes of fragment buffers held per worker.
    pub max_bytes: Option<usize>,
    /// Fragments of one datagram.
    pub max_fragments: Option<usize>,
    /// Seconds a datagram may take to complete.
    pub timeout: Option<u64>,
}

/// One per-zone limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneLimit {
    /// Zone.
    pub zone: u16,
    /// Most connections in it.
    pub max: usize,
}

/// `[firewall]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallConfig {
    /// Port names where new connections may start.
    #[serde(default)]
    pub allow_new_from: Vec<Spanned<String>>,
    /// An nftables ruleset file (relative to the configuration's directory).
    pub ruleset: Option<Spanned<String>>,
    /// An nftables ruleset written inline.
    pub rules: Option<Spanned<String>>,
}

/// Checked conntrack settings.
#[derive(Clone, Debug)]
pub struct ConntrackSpec {
    /// Most connections.
    pub max: usize,
    /// Per-zone limits.
    pub zone_limits: Vec<(u16, usize)>,
    /// Timeout overrides (name, seconds).
    pub timeouts: Vec<(String, u64)>,
    /// Fragment reassembly's bounds, per worker (`None`: fragments are not reassembled).
    pub reassembly: Option<freeway_frag::Limits>,
}

/// Checked firewall settings.
#[derive(Clone, Debug)]
pub struct FirewallSpec {
    /// Port indexes where new connections may start.
    pub allow_new_from: Vec<u16>,
    /// The nftables ruleset, parsed, with where it came from (a file name or "inline").
    pub ruleset: Option<(String, freeway_firewall::ast::Ruleset)>,
}

/// Reads and parses the nftables ruleset of `[firewall]`, if it names one: `(where it came
/// from, the ruleset)`. A parse error names the ruleset's line and column.
fn load_ruleset(f: &FirewallConfig, base: Option<&Path>) -> Result<Option<(String, Ruleset)>, Err> {
    let (name, text, span) = match (&f.ruleset, &f.rules) {
        (Some(_), Some(r)) => {
            return Err((
                Some(r.span()),
                "firewall: give either `ruleset` (a file) or `rules` (inline), not both".into(),
            ))
        }
        (Some(p), None) => {
            let path = match base {
                Some(b) => b.join(p.get_ref()),
                None => Path::new(p.get_ref()).to_path_buf(),
            };
            let text = std::fs::read_to_string(&path).map_err(|e| {
                (
                    Some(p.span()),
                    format!("firewall.ruleset: cannot read {}: {e}", path.display()),
                )
            })?;
            (path.display().to_string(), text, p.span())
        }
        (None, Some(r)) => ("inline rules".to_string(), r.get_ref().clone(), r.span()),
        (None, None) => return Ok(None),
    };
    let rs = freeway_firewall::parse(&text).map_err(|e| (Some(span), format!("firewall: {name}:{e}")))?;
    Ok(Some((name, rs)))
}

/// Most connections a config may ask for.
pub const MAX_CONNECTIONS: usize = 64 << 20;

type Err = (Option<Range<usize>>, String);

/// Checks both sections. `present` says whether `[conntrack]` appeared; `port` resolves names.
pub fn check(
    ct: Option<&ConntrackConfig>,
    fw: Option<&FirewallConfig>,
    base: Option<&Path>,
    port: impl Fn(&str) -> Option<u16>,
    timeout_ok: impl Fn(&str) -> bool,
    timeout_names: &str,
) -> Result<(Option<ConntrackSpec>, Option<FirewallSpec>), Err> {
    let fw = match fw {
        Some(f) => {
            let mut ports = Vec::new();
            for p in &f.allow_new_from {
                let i = port(p.get_ref()).ok_or_else(|| {
                    (
                        Some(p.span()),
                        format!("firewall.allow_new_from: no port named {:?}", p.get_ref()),
                    )
                })?;
                if !ports.contains(&i) {
                    ports.push(i);
                }
            }
            let ruleset = load_ruleset(f, base)?;
            if ruleset.is_some() && !ports.is_empty() {
                return Err((
                    f.allow_new_from.first().map(|p| p.span()),
                    "firewall: `allow_new_from` and a ruleset cannot be combined: write the policy in the ruleset (`iifname \"lan\" ct state new accept`)".into(),
                ));
            }
            Some(FirewallSpec {
                allow_new_from: ports,
                ruleset,
            })
        }
        None => None,
    };
    let default = ConntrackConfig::default();
    let c = match ct {
        Some(c) => c,
        None if fw.is_some() => &default,
        None => return Ok((None, None)),
    };
    if c.enabled == Some(false) {
        if fw.is_some() {
            return Err((
                None,
                "conntrack.enabled = false, but [firewall] needs connection tracking".into(),
            ));
        }
        return Ok((None, None));
    }
    let max = c.max.as_ref().map(|m| *m.get_ref()).unwrap_or(1_000_000);
    if max == 0 || max > MAX_CONNECTIONS {
        return Err((
            c.max.as_ref().map(|m| m.span()),
            format!("conntrack.max: must be 1..={MAX_CONNECTIONS} (got {max})"),
        ));
    }
    let mut zone_limits: Vec<(u16, usize)> = Vec::new();
    for z in &c.zone_limits {
        let l = z.get_ref();
        if zone_limits.iter().any(|(zz, _)| *zz == l.zone) {
            return Err((
                Some(z.span()),
                format!("conntrack.zone_limits: zone {} is listed twice", l.zone),
            ));
        }
        if l.max == 0 || l.max > max {
            return Err((
                Some(z.span()),
                format!(
                    "conntrack.zone_limits: zone {} max must be 1..={max} (got {})",
                    l.zone, l.max
                ),
            ));
        }
        zone_limits.push((l.zone, l.max));
    }
    let mut timeouts = Vec::new();
    for (k, v) in &c.timeouts {
        if !timeout_ok(k) {
            return Err((
                Some(v.span()),
                format!("conntrack.timeouts: unknown timeout {k:?} (known: {timeout_names})"),
            ));
        }
        let s = *v.get_ref();
        if s == 0 || s > 86_400 * 30 {
            return Err((
                Some(v.span()),
                format!("conntrack.timeouts.{k}: must be 1..=2592000 seconds (got {s})"),
            ));
        }
        timeouts.push((k.clone(), s));
    }
    let reassembly = reassembly(c.reassembly.as_ref())?;
    Ok((
        Some(ConntrackSpec {
            max,
            zone_limits,
            timeouts,
            reassembly,
        }),
        fw,
    ))
}

/// Checks `[conntrack.reassembly]`: `None` when disabled, else the bounds (defaults for
/// what it leaves unset).
fn reassembly(r: Option<&Spanned<ReassemblyConfig>>) -> Result<Option<freeway_frag::Limits>, Err> {
    let mut l = freeway_frag::Limits::default();
    let Some(r) = r else { return Ok(Some(l)) };
    let (span, c) = (r.span(), r.get_ref());
    if c.enabled == Some(false) {
        return Ok(None);
    }
    let range = |name: &str, v: Option<usize>, lo: usize, hi: usize, into: &mut usize| match v {
        Some(v) if v < lo || v > hi => Err((
            Some(span.clone()),
            format!("conntrack.reassembly.{name}: must be {lo}..={hi} (got {v})"),
        )),
        Some(v) => {
            *into = v;
            Ok(())
        }
        None => Ok(()),
    };
    range("max_datagrams", c.max_datagrams, 1, 1 << 20, &mut l.max_datagrams)?;
    range("max_bytes", c.max_bytes, 64 << 10, 1 << 30, &mut l.max_bytes)?;
    range("max_fragments", c.max_fragments, 2, 8192, &mut l.max_fragments)?;
    let mut secs = (l.timeout_ms / 1000) as usize;
    range("timeout", c.timeout.map(|t| t as usize), 1, 300, &mut secs)?;
    l.timeout_ms = secs as u64 * 1000;
    Ok(Some(l))
}
