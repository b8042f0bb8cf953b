//! `freeway link [show] [dev NAME] [-s [-s]] [-j]`: the daemon's ports as `freeway ctl link
//! show` lists them, with `-s` each port's counters in `ip -s link`'s layout and `-j` with
//! `ip -j -s link`'s keys (`stats64: {rx: {...}, tx: {...}}`).
//!
//! Freeway's counters in ip's terms:
//!
//! | ip | Freeway |
//! |---|---|
//! | RX bytes, packets | frames received on the port |
//! | RX errors | the RX error counters below, summed |
//! | RX length (`length_errors`) | frames too big for the port's receive buffers (`too_big`) |
//! | RX missed (`missed_errors`) | frames the kernel's ring dropped before Freeway saw them (`kernel`) |
//! | RX dropped | the port's other receive losses |
//! | TX bytes, packets | frames the transmit queue accepted |
//! | TX errors | frames larger than the port's MTU, dropped before its queue (`tx_over_mtu`) |
//! | TX dropped | frames the transmit queue refused (`tx_dropped`) |
//!
//! Freeway does not count multicast frames per port, CRC, frame, FIFO or overrun errors,
//! carrier errors or collisions: those columns are 0. Drops by reason inside the pipeline are
//! in `freeway stats`.

use std::path::PathBuf;

use clap::{ArgAction, Args};
use freeway_datapath::runtime::control::{self, Request};
use freeway_datapath::{out, outln};
use serde_json::{json, Map, Value};

use super::DEFAULT_SOCKET;

/// `freeway link`'s arguments.
#[derive(Args)]
pub(crate) struct LinkArgs {
    /// `show [dev NAME]` (the default), as `ip link show`.
    #[arg(value_name = "show [dev NAME]")]
    words: Vec<String>,
    /// Counters, as `ip -s link` (twice: the error details, as `ip -s -s link`).
    #[arg(short = 's', long = "stats", action = ArgAction::Count)]
    stats: u8,
    /// Print JSON (`ip -j link`'s keys).
    #[arg(short = 'j', long)]
    json: bool,
    /// The running daemon's control socket (`freeway run --ctl PATH`).
    #[arg(long = "ctl", short = 'S', value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
}

/// The device `words` name (`show`, `show dev X`, `show X`, `X`), or none.
fn device(words: &[String]) -> Result<Option<&str>, String> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let w = match w.as_slice() {
        ["show" | "list" | "ls", rest @ ..] => rest,
        rest => rest,
    };
    match w {
        [] => Ok(None),
        ["dev", name] | [name] if *name != "dev" => Ok(Some(name)),
        _ => Err(format!("link {}: expected `show [dev NAME]`", words.join(" "))),
    }
}

/// A port's counters in ip's terms (see the module doc).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LinkStats {
    rx: [u64; 11],
    tx: [u64; 10],
}

/// The keys of `ip -j -s link`'s `rx` (the first 6; all with `-s -s`).
const RX_KEYS: [&str; 11] = [
    "bytes",
    "packets",
    "errors",
    "dropped",
    "over_errors",
    "multicast",
    "length_errors",
    "crc_errors",
    "frame_errors",
    "fifo_errors",
    "missed_errors",
];
/// The keys of `ip -j -s link`'s `tx` (the first 6; all with `-s -s`).
const TX_KEYS: [&str; 10] = [
    "bytes",
    "packets",
    "errors",
    "dropped",
    "carrier_errors",
    "collisions",
    "aborted_errors",
    "fifo_errors",
    "window_errors",
    "heartbeat_errors",
];

impl LinkStats {
    /// From a port's entry in the `stats` reply (`PortSnap`).
    pub(crate) fn of(p: &Value) -> LinkStats {
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let too_big = n(&p["rx_drops"]["too_big"]);
        let kernel = n(&p["rx_drops"]["kernel"]);
        let other = n(&p["rx_dropped"]).saturating_sub(too_big + kernel);
        let mut s = LinkStats::default();
        s.rx[0] = n(&p["rx_bytes"]);
        s.rx[1] = n(&p["rx_packets"]);
        s.rx[2] = too_big;
        s.rx[3] = other;
        s.rx[6] = too_big;
        s.rx[10] = kernel;
        s.tx[0] = n(&p["tx_bytes"]);
        s.tx[1] = n(&p["tx_packets"]);
        s.tx[2] = n(&p["tx_over_mtu"]);
        s.tx[3] = n(&p["tx_dropped"]);
        s
    }

    /// `stats64` as `ip -j -s link` (`level` 1) or `ip -j -s -s link` (2) writes it.
    pub(crate) fn json(&self, level: u8) -> Value {
        let keep = if level > 1 { usize::MAX } else { 6 };
        let obj = |keys: &[&str], vals: &[u64]| {
            let m: Map<String, Value> = keys
                .iter()
                .zip(vals)
                .take(keep)
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            Value::Object(m)
        };
        json!({"rx": obj(&RX_KEYS, &self.rx), "tx": obj(&TX_KEYS, &self.tx)})
    }

    /// The lines `ip -s link` (`level` 1) or `ip -s -s link` (2) prints under a link, in its
    /// column layout.
    pub(crate) fn text(&self, level: u8) -> String {
        let (rx, tx) = (&self.rx, &self.tx);
        // ip's widths: at least its headers', widened to the numbers' (by ip's own digit count).
        let mut cols = [10usize, 7, 6, 7, 7, 7, 10];
        let mut size = |vals: &[u64]| {
            for (c, &v) in cols.iter_mut().zip(vals) {
                let (mut len, mut pow) = (1usize, 10u64);
                while pow < v {
                    len += 1;
                    match pow.checked_mul(10) {
                        Some(p) => pow = p,
                        None => break,
                    }
                }
                *c = (*c).max(len);
            }
        };
        size(&[rx[0], rx[1], rx[2], rx[3], rx[10], rx[5], 0]);
        if level > 1 {
            size(&[0, rx[6], rx[7], rx[8], rx[9], rx[4], 0]);
        }
        size(&[tx[0], tx[1], tx[2], tx[3], tx[4], tx[5], 0]);
        if level > 1 {
            size(&[0, 0, tx[6], tx[7], tx[8], tx[9], 0]);
        }
        let c = &cols;
        let mut s = String::new();
        totals(&mut s, c, "RX:", RX_WORDS, [rx[0], rx[1], rx[2], rx[3], rx[10], rx[5]]);
        if level > 1 {
            let words = ["length", "crc", "frame", "fifo", "overrun"];
            errors(&mut s, c, "RX errors:", &words, &[rx[6], rx[7], rx[8], rx[9], rx[4]]);
        }
        totals(&mut s, c, "TX:", TX_WORDS, [tx[0], tx[1], tx[2], tx[3], tx[4], tx[5]]);
        if level > 1 {
            let words = ["aborted", "fifo", "window", "heartbt"];
            errors(&mut s, c, "TX errors:", &words, &[tx[6], tx[7], tx[8], tx[9]]);
        }
        s
    }
}

/// The headers of ip's RX and TX totals.
const RX_WORDS: [&str; 6] = ["bytes", "packets", "errors", "dropped", "missed", "mcast"];
const TX_WORDS: [&str; 6] = ["bytes", "packets", "errors", "dropped", "carrier", "collsns"];

/// ip's totals lines: `    RX:` and the headers right-aligned in the columns (the bytes'
/// column starts under `RX:`; an empty compressed column ends the line), then the numbers.
fn totals(s: &mut String, c: &[usize; 7], head: &str, words: [&str; 6], vals: [u64; 6]) {
    s.push_str("    ");
    s.push_str(head);
    for (i, w) in words.iter().enumerate() {
        let width = if i == 0 { c[0] - 4 } else { c[i] };
        s.push_str(&format!(" {w:>width$}"));
    }
    s.push_str(&format!(" {:>w$}\n    ", "", w = c[6]));
    for (i, v) in vals.iter().enumerate() {
        s.push_str(&format!("{v:>w$} ", w = c[i]));
    }
    s.push('\n');
}

/// ip's error-detail lines (`-s -s`): the bytes' column left empty.
fn errors(s: &mut String, c: &[usize; 7], head: &str, words: &[&str], vals: &[u64]) {
    s.push_str(&format!("    {head}{:>w$}", "", w = c[0] - 10));
    for (i, w) in words.iter().enumerate() {
        s.push_str(&format!(" {w:>width$}", width = c[i + 1]));
    }
    s.push_str(&format!("\n{:w$}", "", w = c[0] + 5));
    for (i, v) in vals.iter().enumerate() {
        s.push_str(&format!("{v:>w$} ", w = c[i + 1]));
    }
    s.push('\n');
}

/// `freeway link ...`.
pub(crate) fn run(a: LinkArgs) -> Result<(), String> {
    let dev = device(&a.words)?;
    let ask = |r: &Request| {
        control::send(&a.socket, r).map_err(|e| match e {
            control::CtlError::Unreachable(m) => m,
            e => e.to_string(),
        })
    };
    let links = ask(&Request::LinkShow)?;
    let stats = if a.stats > 0 { Some(ask(&Request::Stats)?) } else { None };
    let rows = links.data.as_array().cloned().unwrap_or_default();
    let lines: Vec<&str> = links.text.lines().collect();
    if let Some(d) = dev {
        if !rows.iter().any(|r| r["ifname"] == d) {
            return Err(format!("Device \"{d}\" does not exist."));
        }
    }
    let port_stats = |name: &Value| {
        stats.as_ref().and_then(|s| {
            s.data["ports"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["name"] == *name))
                .map(LinkStats::of)
        })
    };
    let mut json_rows = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        if dev.is_some_and(|d| row["ifname"] != d) {
            continue;
        }
        let st = port_stats(&row["ifname"]);
        if a.json {
            let mut r = row.clone();
            if let Some(st) = &st {
                r["stats64"] = st.json(a.stats);
            }
            json_rows.push(r);
        } else {
            outln!("{}", lines.get(i).copied().unwrap_or_default());
            if let Some(st) = &st {
                out!("{}", st.text(a.stats));
            }
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string(&json_rows).expect("json"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ip -s -s link show lo` on a Linux host (iproute2 6.1), numbers and all; its `transns`
    /// column (carrier changes, which Freeway does not count) left out.
    const IP_S_S: &str = "    RX:  bytes packets errors dropped  missed   mcast           \n        987383    3956      0       0       0       0 \n    RX errors:  length    crc   frame    fifo overrun\n                     0      0       0       0       0 \n    TX:  bytes packets errors dropped carrier collsns           \n        987383    3956      0       0       0       0 \n    TX errors: aborted   fifo  window heartbt\n                     0      0       0       0 \n";

    #[test]
    fn counters_print_in_ip_s_links_layout_and_keys() {
        let port = json!({"rx_bytes": 987383, "rx_packets": 3956, "tx_bytes": 987383, "tx_packets": 3956,
            "rx_dropped": 0, "tx_dropped": 0, "tx_over_mtu": 0});
        let s = LinkStats::of(&port);
        assert_eq!(s.text(2), IP_S_S);
        // `ip -s link`: the same without the error details.
        let lines: Vec<&str> = IP_S_S.lines().collect();
        let one: String = [0, 1, 4, 5].iter().map(|&i| format!("{}\n", lines[i])).collect();
        assert_eq!(s.text(1), one);
        // Wide numbers widen their columns, as ip's do.
        let big = LinkStats::of(&json!({"rx_bytes": 126570234447969u64, "rx_packets": 15016149200u64,
            "rx_dropped": 9, "rx_drops": {"kernel": 7, "too_big": 2}, "tx_over_mtu": 3, "tx_dropped": 4}));
        let t = big.text(1);
        assert!(
            t.starts_with("    RX:       bytes     packets errors dropped  missed   mcast"),
            "{t}"
        );
        assert!(
            t.contains("\n    126570234447969 15016149200      2       0       7       0 \n"),
            "{t}"
        );
        let j = big.json(1);
        assert_eq!(
            j["rx"].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["bytes", "dropped", "errors", "multicast", "over_errors", "packets"]
        );
        assert_eq!(
            (
                j["rx"]["errors"].as_u64(),
                j["tx"]["errors"].as_u64(),
                j["tx"]["dropped"].as_u64()
            ),
            (Some(2), Some(3), Some(4))
        );
        let j = big.json(2);
        assert_eq!(
            (j["rx"]["missed_errors"].as_u64(), j["rx"]["length_errors"].as_u64()),
            (Some(7), Some(2))
        );
        assert_eq!(j["tx"].as_object().unwrap().len(), 10);
    }

    #[test]
    fn link_words_name_one_device_or_all() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(device(&w("")).unwrap(), None);
        assert_eq!(device(&w("show")).unwrap(), None);
        assert_eq!(device(&w("show dev lan")).unwrap(), Some("lan"));
        assert_eq!(device(&w("show lan")).unwrap(), Some("lan"));
        assert!(device(&w("show dev")).is_err());
        assert!(device(&w("set dev lan up")).is_err());
    }
}
