//! The one duration syntax of Freeway: every command-line duration flag (through clap's
//! `value_parser`) and the config file's `duration_secs` read durations with
//! [`parse_duration`].
//!
//! A duration is a plain number of seconds (`5`, `1.5`) or a number with a unit: `ms`, `s`,
//! `m` or `h` (`300ms`, `5s`, `2m`, `1.5h`). It must be finite, positive, not round to zero
//! and be at most [`MAX_DURATION`] (one year): `inf`, `1e300` or `-3` are refused with an
//! error saying which rule they break, never a panic in `Duration`'s conversions.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The longest duration accepted: 365 days.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// The syntax, for error messages.
const SYNTAX: &str = "a number of seconds (1.5) or a number with a unit ms, s, m or h (300ms, 5s, 2m, 1h)";

/// Parses a duration: seconds (`1.5`) or a number with a unit (`300ms`, `5s`, `2m`, `1h`).
/// The error says what was wrong, without repeating the input (callers name it).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit_secs) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let num = num.trim_end();
    // Rust's float syntax also takes `inf`, `NaN` and `infinity`: they parse, and are refused
    // below as not finite, with that reason.
    let v: f64 = num.parse().map_err(|_| format!("not a duration: expected {SYNTAX}"))?;
    from_secs(v * unit_secs)
}

/// [`parse_duration`] in seconds, for the flags that compute with `f64` seconds.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    parse_duration(s).map(|d| d.as_secs_f64())
}

/// Checks a number of seconds against the rules of [`parse_duration`].
pub fn from_secs(v: f64) -> Result<Duration, String> {
    if !v.is_finite() {
        return Err("not a finite duration".into());
    }
    if v <= 0.0 {
        return Err("must be positive".into());
    }
    if v > MAX_DURATION.as_secs_f64() {
        return Err(format!("too long (max 1 year, {} s)", MAX_DURATION.as_secs()));
    }
    let d = Duration::from_secs_f64(v);
    if d.is_zero() {
        return Err("too short (less than a nanosecond)".into());
    }
    Ok(d)
}

/// A duration as a config file writes it: a number of seconds (`duration_secs = 2.5`) or a
/// string in the syntax of [`parse_duration`] (`duration_secs = "5m"`). Checked by
/// [`DurationValue::check`], so that the error can point at the line.
#[derive(Debug, Clone, PartialEq)]
pub enum DurationValue {
    /// A TOML number (integer or float), in seconds.
    Secs(f64),
    /// A TOML string.
    Text(String),
}

impl DurationValue {
    /// The duration, or why it is refused (the value is named in the message).
    pub fn check(&self) -> Result<Duration, String> {
        match self {
            DurationValue::Secs(v) => from_secs(*v).map_err(|e| format!("{v}: {e}")),
            DurationValue::Text(s) => parse_duration(s).map_err(|e| format!("{s:?}: {e}")),
        }
    }
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a duration: {SYNTAX}, as a number or a string")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DurationValue, E> {
                Ok(DurationValue::Secs(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DurationValue, E> {
                Ok(DurationValue::Secs(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DurationValue, E> {
                Ok(DurationValue::Secs(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationValue, E> {
                Ok(DurationValue::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_units_parse() {
        assert_eq!(parse_duration("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("365d").unwrap_err().starts_with("not a duration"));
        assert_eq!(parse_duration(&MAX_DURATION.as_secs().to_string()), Ok(MAX_DURATION));
    }

    #[test]
    fn unrepresentable_durations_are_errors_not_panics() {
        for (s, want) in [
            ("inf", "not a finite duration"),
            ("infs", "not a finite duration"),
            ("-inf", "not a finite duration"),
            ("NaN", "not a finite duration"),
            ("1e300", "too long"),
            ("1.85e19", "too long"),
            ("31536001", "too long"),
            ("8761h", "too long"),
            ("0", "must be positive"),
            ("0s", "must be positive"),
            ("-3", "must be positive"),
            ("1e-12", "too short"),
            ("soon", "not a duration"),
            ("", "not a duration"),
            ("5 minutes", "not a duration"),
        ] {
            let e = parse_duration(s).expect_err(s);
            assert!(e.starts_with(want), "{s:?}: {e}");
        }
    }
}
