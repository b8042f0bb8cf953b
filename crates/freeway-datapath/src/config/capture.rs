//! `[[tap]]`: live captures started with the datapath, and [`TapOptions`], what a capture
//! is, shared by the three ways to start one: a `[[tap]]` of the config, the flags of
//! `freeway capture` and `freeway ctl capture start`, and the control socket's requests.
//! Each surface reads its own syntax into a [`TapOptions`]; [`TapOptions::check`] is the one
//! place that checks it.
//!
//! ```toml
//! [[tap]]
//! port = "uplink"
//! direction = "inout"         # in | out | inout (tcpdump -Q)
//! filter = "tcp port 80"      # tcpdump filter syntax; empty = everything
//! snaplen = 262144
//! write = "uplink.pcapng"     # .pcapng writes pcapng, anything else pcap; "-" = stdout
//! format = "pcapng"           # optional: pcap | pcapng (default: from the file name)
//! count = 1000                # stop capturing after this many packets (optional)
//! ```

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// Tap direction, as tcpdump's `-Q`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
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

/// `Display` and `FromStr` for an enum of keywords (the same words serde reads), with the
/// error naming the words allowed.
macro_rules! keywords {
    ($t:ident { $($v:ident => $w:literal),+ }, $allowed:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($t::$v => $w),+ })
            }
        }

        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($w => Ok($t::$v),)+
                    other => Err(format!("{other:?}: must be {}", $allowed)),
                }
            }
        }
    };
}

keywords!(Direction { In => "in", Out => "out", Inout => "inout" }, "in, out or inout");

/// The file format of a capture.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// Classic pcap (microsecond timestamps).
    #[default]
    Pcap,
    /// pcapng.
    Pcapng,
}

impl FileFormat {
    /// The format a file name asks for: pcapng for `*.pcapng`, pcap otherwise.
    pub fn of_path(p: &Path) -> FileFormat {
        if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("pcapng")) {
            FileFormat::Pcapng
        } else {
            FileFormat::Pcap
        }
    }
}

keywords!(FileFormat { Pcap => "pcap", Pcapng => "pcapng" }, "pcap or pcapng");

/// The largest snap length, and the default one.
pub const MAX_SNAPLEN: u32 = 262_144;

fn default_snaplen() -> u32 {
    MAX_SNAPLEN
}

/// What to capture and how, whichever way the capture is asked for (see the module docs).
/// Where the packets go (a file, standard output, a control client) is not part of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapOptions {
    /// The port's name.
    pub port: String,
    /// Which frames of the port (default: both directions).
    #[serde(default)]
    pub direction: Direction,
    /// Bytes kept of each frame, 1..=[`MAX_SNAPLEN`].
    #[serde(default = "default_snaplen")]
    pub snaplen: u32,
    /// Stop after this many packets (at least 1); `None`: no limit.
    #[serde(default)]
    pub count: Option<u64>,
    /// The file format; `None`: from the output file's name (pcap when there is none).
    #[serde(default)]
    pub format: Option<FileFormat>,
    /// The filter expression, tcpdump syntax ("" = every frame).
    #[serde(default)]
    pub filter: String,
}

/// Which option of a [`TapOptions`] a [`TapOptionsError`] is about (for the surface to point
/// at it: a TOML key, a command-line flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapField {
    /// `port` / `-i`.
    Port,
    /// `snaplen` / `-s`.
    Snaplen,
    /// `count` / `-c`.
    Count,
    /// `filter` / the expression.
    Filter,
}

/// Why a [`TapOptions`] was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TapOptionsError {
    /// No configured port has that name.
    NoSuchPort {
        /// The name asked for.
        name: String,
        /// The configured ports.
        ports: Vec<String>,
    },
    /// A snap length outside 1..=[`MAX_SNAPLEN`].
    Snaplen(u32),
    /// A count of 0.
    ZeroCount,
    /// The filter does not compile.
    Filter(String),
}

impl TapOptionsError {
    /// The option the error is about.
    pub fn field(&self) -> TapField {
        match self {
            TapOptionsError::NoSuchPort { .. } => TapField::Port,
            TapOptionsError::Snaplen(_) => TapField::Snaplen,
            TapOptionsError::ZeroCount => TapField::Count,
            TapOptionsError::Filter(_) => TapField::Filter,
        }
    }
}

impl fmt::Display for TapOptionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TapOptionsError::NoSuchPort { name, ports } if ports.is_empty() => write!(f, "no port named {name:?}"),
            TapOptionsError::NoSuchPort { name, ports } => {
                write!(f, "no port named {name:?} (ports: {})", ports.join(", "))
            }
            TapOptionsError::Snaplen(s) => write!(f, "snaplen must be 1..={MAX_SNAPLEN} (got {s})"),
            TapOptionsError::ZeroCount => f.write_str("count must be at least 1"),
            TapOptionsError::Filter(e) => write!(f, "filter: {e}"),
        }
    }
}

impl std::error::Error for TapOptionsError {}

impl TapOptions {
    /// Checks the options against the datapath's configured `ports` (the port named must be
    /// one of them) and `compile` (the filter must compile; returns the error text); `write`
    /// is where the capture goes (`None`: standard output or a control client), which also
    /// decides the format when none is given. Returns the tap to attach.
    pub fn check(
        &self,
        ports: &[String],
        compile: impl Fn(&str, u32) -> Result<(), String>,
        write: Option<PathBuf>,
    ) -> Result<TapSpec, TapOptionsError> {
        let port = if self.port == "any" && !ports.iter().any(|p| p == "any") {
            usize::from(freeway_capture::ANY_PORT)
        } else {
            ports
                .iter()
                .position(|p| !p.is_empty() && *p == self.port)
                .ok_or_else(|| TapOptionsError::NoSuchPort {
                    name: self.port.clone(),
                    ports: ports.iter().filter(|p| !p.is_empty()).cloned().collect(),
                })?
        };
        if self.snaplen == 0 || self.snaplen > MAX_SNAPLEN {
            return Err(TapOptionsError::Snaplen(self.snaplen));
        }
        if self.count == Some(0) {
            return Err(TapOptionsError::ZeroCount);
        }
        compile(&self.filter, self.snaplen).map_err(TapOptionsError::Filter)?;
        let format = self
            .format
            .unwrap_or_else(|| write.as_deref().map_or(FileFormat::Pcap, FileFormat::of_path));
        Ok(TapSpec {
            port: port as u16,
            direction: self.direction,
            filter: self.filter.clone(),
            snaplen: self.snaplen,
            write,
            pcapng: format == FileFormat::Pcapng,
            count: self.count,
            text: None,
        })
    }
}

/// One `[[tap]]`: a [`TapOptions`] where the capture goes, each value with its place in the
/// file (for errors).
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
    /// File format (default: from the file name).
    #[serde(default)]
    pub format: Option<FileFormat>,
    /// Stop after this many packets.
    pub count: Option<Spanned<u64>>,
}

impl TapConfig {
    /// The options this section asks for.
    pub fn options(&self) -> TapOptions {
        TapOptions {
            port: self.port.get_ref().clone(),
            direction: self.direction,
            snaplen: self.snaplen.as_ref().map_or(MAX_SNAPLEN, |s| *s.get_ref()),
            count: self.count.as_ref().map(|c| *c.get_ref()),
            format: self.format,
            filter: self.filter.as_ref().map(|f| f.get_ref().clone()).unwrap_or_default(),
        }
    }

    /// Where in the file `field` was given (the port's place when it was not given).
    fn span(&self, field: TapField) -> Range<usize> {
        match field {
            TapField::Port => None,
            TapField::Snaplen => self.snaplen.as_ref().map(|s| s.span()),
            TapField::Count => self.count.as_ref().map(|c| c.span()),
            TapField::Filter => self.filter.as_ref().map(|f| f.span()),
        }
        .unwrap_or_else(|| self.port.span())
    }
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
    /// Decode to tcpdump lines, printed with these options, instead of writing pcap (only with
    /// `write: None`: `freeway capture` without `-w`).
    pub text: Option<crate::decode::Options>,
}

type Err = (Option<Range<usize>>, String);

/// The `compile` argument of [`check`] and [`TapOptions::check`] for taps that run: the
/// filter compiles to a BPF program at that snap length (or the compiler's error text).
pub fn filter_compiles(expr: &str, snaplen: u32) -> Result<(), String> {
    freeway_capture::compile(expr, snaplen)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks the taps against the configured `ports`; `compile` checks a filter expression at a
/// snap length (returns the error text).
pub fn check(
    taps: &[TapConfig],
    ports: &[String],
    compile: impl Fn(&str, u32) -> Result<(), String>,
    base: Option<&Path>,
) -> Result<Vec<TapSpec>, Err> {
    let mut out = Vec::new();
    let mut stdout_used = false;
    for t in taps {
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
        let spec = t.options().check(ports, &compile, write).map_err(|e| {
            let msg = match e.field() {
                TapField::Filter => format!("tap on {:?}: {e}", t.port.get_ref()),
                _ => format!("tap: {e}"),
            };
            (Some(t.span(e.field())), msg)
        })?;
        out.push(spec);
    }
    Ok(out)
}
