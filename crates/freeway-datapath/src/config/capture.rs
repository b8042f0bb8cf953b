//! `[[tap]]`: live captures started with the datapath.
//!
//! ```toml
//! [[tap]]
//! port = "uplink"
//! direction = "inout"         # in | out | inout (tcpdump -Q)
//! filter = "tcp port 80"      # tcpdump filter syntax; empty = everything
//! snaplen = 262144
//! write = "uplink.pcapng"     # .pcapng writes pcapng, anything else pcap; "-" = stdout
//! count = 1000                # stop capturing after this many packets (optional)
//! ```

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// Tap direction, as tcpdump's `-Q`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Received frames.
    In,
    /// Transmitted frames.
    Out,
    /// Both.
    #[default]
    Inout,
}

/// One `[[tap]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapConfig {
    /// Port name.
    pub port: Spanned<String>,
    /// Direction (default inout).
    #[serde(default)]
    pub direction: Direction,
    /// Filter expression.
    #[serde(default)]
    pub filter: Option<Spanned<String>>,
    /// Snap length (default 262144).
    pub snaplen: Option<Spanned<u32>>,
    /// Output file.
    pub write: Spanned<String>,
    /// Stop after this many packets.
    pub count: Option<Spanned<u64>>,
}

/// A checked tap.
#[derive(Clone, Debug)]
pub struct TapSpec {
    /// Port index.
    pub port: u16,
    /// Direction.
    pub direction: Direction,
    /// Filter expression ("" = all).
    pub filter: String,
    /// Snap length.
    pub snaplen: u32,
    /// Output path; `None` = standard output.
    pub write: Option<PathBuf>,
    /// pcapng instead of pcap.
    pub pcapng: bool,
    /// Packet count limit.
    pub count: Option<u64>,
    /// Decode to tcpdump-style text lines instead of writing pcap (only with `write: None`;
    /// `freeway capture` without `-w`).
    pub text: bool,
}

type Err = (Option<Range<usize>>, String);

/// Checks the taps; `compile` checks a filter expression (returns the error text).
pub fn check(
    taps: &[TapConfig],
    port: impl Fn(&str) -> Option<u16>,
    compile: impl Fn(&str) -> Result<(), String>,
    base: Option<&Path>,
) -> Result<Vec<TapSpec>, Err> {
    let mut out = Vec::new();
    let mut stdout_used = false;
    for t in taps {
        let p = port(t.port.get_ref()).ok_or_else(|| {
            (
                Some(t.port.span()),
                format!("tap: no port named {:?}", t.port.get_ref()),
            )
        })?;
        let filter = t.filter.as_ref().map(|f| f.get_ref().clone()).unwrap_or_default();
        if let Some(f) = &t.filter {
            compile(f.get_ref())
                .map_err(|m| (Some(f.span()), format!("tap on {:?}: filter: {m}", t.port.get_ref())))?;
        }
        let snaplen = t.snaplen.as_ref().map(|s| *s.get_ref()).unwrap_or(262_144);
        if snaplen == 0 || snaplen > 262_144 {
            return Err((
                t.snaplen.as_ref().map(|s| s.span()),
                format!("tap: snaplen must be 1..=262144 (got {snaplen})"),
            ));
        }
        if t.count.as_ref().is_some_and(|c| *c.get_ref() == 0) {
            return Err((
                t.count.as_ref().map(|c| c.span()),
                "tap: count must be at least 1".into(),
            ));
        }
        let w = t.write.get_ref();
        let write = if w == "-" {
            if stdout_used {
                return Err((
                    Some(t.write.span()),
                    "tap: only one tap can write to standard output".into(),
                ));
            }
            stdout_used = true;
            None
        } else if w.is_empty() {
            return Err((Some(t.write.span()), "tap: write needs a file name or \"-\"".into()));
        } else {
            let p = PathBuf::from(w);
            Some(match base {
                Some(b) if p.is_relative() => b.join(p),
                _ => p,
            })
        };
        let pcapng = write
            .as_ref()
            .is_some_and(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("pcapng")));
        out.push(TapSpec {
            port: p,
            direction: t.direction,
            filter,
            snaplen,
            write,
            pcapng,
            count: t.count.as_ref().map(|c| *c.get_ref()),
            text: false,
        });
    }
    Ok(out)
}
