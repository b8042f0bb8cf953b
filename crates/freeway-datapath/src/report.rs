//! Human-readable tables and JSON for runs and dumps.

use crate::outln;
use freeway_bridge::FdbEntry;
use freeway_conntrack::ConnRecord;
use freeway_l3::NeighEntry;
use serde::Serialize;

use crate::runtime::{Snapshot, TapResult};

/// Formats a rate or count with a k/M/G suffix.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A column of the text tables: its heading and its width (cells are right-aligned).
type Col = (&'static str, usize);

/// The live table's port columns (after the name).
const LIVE_PORT_COLS: [Col; 5] = [
    ("rx pps", 10),
    ("tx pps", 10),
    ("rx total", 10),
    ("tx total", 10),
    ("tx drop", 9),
];
/// The live table's worker columns.
const LIVE_WORKER_COLS: [Col; 3] = [("rx pps", 10), ("batch avg", 10), ("core", 6)];
/// The summary's port columns.
const SUMMARY_PORT_COLS: [Col; 7] = [
    ("rx packets", 12),
    ("rx bytes", 12),
    ("tx packets", 12),
    ("tx bytes", 12),
    ("tx drop", 9),
    ("rx pps", 10),
    ("tx pps", 10),
];
/// The summary's worker columns.
const SUMMARY_WORKER_COLS: [Col; 4] = [("packets", 12), ("batches", 12), ("avg pps", 10), ("core", 6)];

/// One line of a text table: `name` left-aligned in 12 columns, then each cell right-aligned
/// in its column's width, one space before each.
fn table_row<S: std::fmt::Display>(
    name: &dyn std::fmt::Display,
    cols: &[Col],
    cells: impl IntoIterator<Item = S>,
) -> String {
    use std::fmt::Write;
    let mut line = format!("{name:<12}");
    for (&(_, width), cell) in cols.iter().zip(cells) {
        let _ = write!(line, " {cell:>width$}");
    }
    line
}

/// The heading line of a text table whose first column is headed `name`.
fn table_head(name: &str, cols: &[Col]) -> String {
    table_row(&name, cols, cols.iter().map(|c| c.0))
}

/// A worker's core, or `-` when it is not pinned.
fn core_text(core: Option<usize>) -> String {
    core.map_or_else(|| "-".into(), |c| c.to_string())
}

/// Prints a table every time it is given a snapshot, with rates since the previous one.
#[derive(Default)]
pub struct LivePrinter {
    prev: Option<Snapshot>,
}

impl LivePrinter {
    /// Prints the table for `s`.
    pub fn print(&mut self, s: &Snapshot) {
        let (dt, prev) = match &self.prev {
            Some(p) => (s.elapsed_s - p.elapsed_s, Some(p)),
            None => (s.elapsed_s, None),
        };
        let dt = dt.max(1e-9);
        outln!();
        outln!("[{:6.1}s] {}", s.elapsed_s, table_head("port", &LIVE_PORT_COLS));
        for (i, p) in s.ports.iter().enumerate() {
            let q = prev.map(|x| x.ports[i].clone()).unwrap_or_default();
            let cells = [
                si((p.rx_packets - q.rx_packets) as f64 / dt),
                si((p.tx_packets - q.tx_packets) as f64 / dt),
                si(p.rx_packets as f64),
                si(p.tx_packets as f64),
                p.tx_dropped.to_string(),
            ];
            outln!("          {}", table_row(&p.name, &LIVE_PORT_COLS, cells));
        }
        outln!("          {}", table_head("worker", &LIVE_WORKER_COLS));
        for (i, w) in s.workers.iter().enumerate() {
            let q = prev.map(|x| x.workers[i].clone()).unwrap_or_default();
            let b = w.batches - q.batches;
            let avg = if b > 0 {
                (w.packets - q.packets) as f64 / b as f64
            } else {
                0.0
            };
            let cells = [
                si((w.packets - q.packets) as f64 / dt),
                format!("{avg:.1}"),
                core_text(w.core),
            ];
            outln!("          {}", table_row(&w.id, &LIVE_WORKER_COLS, cells));
        }
        outln!(
            "          fdb {} entries, {} learned, flooded {}, forwarded {}",
            s.fdb_entries,
            s.fdb.get("learned").copied().unwrap_or(0),
            si(s.bridge.get("flooded").copied().unwrap_or(0) as f64),
            si(s.bridge.get("forwarded").copied().unwrap_or(0) as f64),
        );
        self.prev = Some(s.clone());
    }
}

/// Prints the end-of-run summary.
pub fn write_summary(out: &mut dyn std::io::Write, s: &Snapshot) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "summary after {:.2} s", s.elapsed_s)?;
    summary_tables(out, s)?;
    summary_lan(out, s)?;
    summary_stages(out, s)?;
    summary_drops(out, s)
}

/// The summary's tables of ports (totals and average rates) and of workers (packets,
/// batches, average rate and core).
fn summary_tables(out: &mut dyn std::io::Write, s: &Snapshot) -> std::io::Result<()> {
    let rate = |n: u64| si(n as f64 / s.elapsed_s.max(1e-9));
    let ports = s.ports.iter().map(|p| {
        let counts = [p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes, p.tx_dropped];
        let cells = counts
            .iter()
            .map(u64::to_string)
            .chain([rate(p.rx_packets), rate(p.tx_packets)]);
        table_row(&p.name, &SUMMARY_PORT_COLS, cells)
    });
    write_table(out, table_head("port", &SUMMARY_PORT_COLS), ports)?;
    let workers = s.workers.iter().map(|w| {
        let cells = [
            w.packets.to_string(),
            w.batches.to_string(),
            rate(w.packets),
            core_text(w.core),
        ];
        table_row(&w.id, &SUMMARY_WORKER_COLS, cells)
    });
    write_table(out, table_head("worker", &SUMMARY_WORKER_COLS), workers)
}

/// Writes a summary table: its heading line and its rows, two spaces in.
fn write_table(out: &mut dyn std::io::Write, head: String, rows: impl Iterator<Item = String>) -> std::io::Result<()> {
    for line in std::iter::once(head).chain(rows) {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// The summary's lines of the bridge, its FDB and (when snooping) its MDB.
fn summary_lan(out: &mut dyn std::io::Write, s: &Snapshot) -> std::io::Result<()> {
    let b = |k: &str| s.bridge.get(k).copied().unwrap_or(0);
    writeln!(
        out,
        "  bridge: {} in, {} forwarded, {} flooded ({} unknown unicast, {} copies), {} MAC moves",
        b("rx"),
        b("forwarded"),
        b("flooded"),
        b("unknown_unicast"),
        b("flood_copies"),
        b("moves")
    )?;
    writeln!(
        out,
        "  fdb: {} entries; learned {}, aged {}, refused at the learning limit {}, learn queue full {}",
        s.fdb_entries,
        s.fdb.get("learned").copied().unwrap_or(0),
        s.fdb.get("aged").copied().unwrap_or(0),
        s.fdb.get("limit_reached").copied().unwrap_or(0),
        b("learn_queue_full")
    )?;
    if !s.mdb.is_empty() {
        let m = |k: &str| s.mdb.get(k).copied().unwrap_or(0);
        writeln!(
            out,
            "  mdb: {} groups; reports {}, leaves {}, queries {}, refused at hash_max {}; snooped frames {}, queue full {}",
            m("groups"),
            m("reports"),
            m("leaves"),
            m("queries"),
            m("hash_max_reached"),
            b("mcast_snooped"),
            b("mdb_queue_full")
        )?;
    }
    Ok(())
}

/// The summary's lines of the optional stages: router, conntrack, reassembly, firewall.
fn summary_stages(out: &mut dyn std::io::Write, s: &Snapshot) -> std::io::Result<()> {
    if let Some(r) = &s.router {
        let l = &r.l3;
        writeln!(
            out,
            "  router: {} in, {} forwarded (v4 {}, v6 {}); route cache {} hits, {} misses, {} refills, {} uncached; {} neighbours",
            l.rx,
            l.forwarded_v4 + l.forwarded_v6,
            l.forwarded_v4,
            l.forwarded_v6,
            r.route_cache_hits,
            r.route_cache_misses,
            r.route_cache_refills,
            r.route_uncached,
            r.neigh_entries
        )?;
    }
    if let Some(c) = &s.conntrack {
        writeln!(
            out,
            "  conntrack: {} connections (max {}); packets: {} new, {} established, {} related, {} untracked, {} invalid; {} created, {} expired",
            c.connections, c.max, c.new, c.established, c.related, c.untracked, c.invalid, c.created, c.expired
        )?;
    }
    if let Some(r) = &s.reassembly {
        writeln!(
            out,
            "  reassembly: {} fragments in, {} datagrams reassembled from {}, {} in flight ({} bytes held); refragmented {} into {} fragments",
            r.fragments, r.reassembled, r.merged, r.in_flight, r.bytes_held, r.refragmented, r.fragments_out
        )?;
    }
    if let Some(f) = &s.firewall {
        writeln!(
            out,
            "  firewall: accepted {} new, {} established, {} related, {} untracked; dropped {} invalid, {} over a limit, {} new not allowed",
            f.accept_new,
            f.accept_established,
            f.accept_related,
            f.accept_untracked,
            f.drop_invalid,
            f.drop_limit,
            f.drop_new_not_allowed
        )?;
    }
    Ok(())
}

/// The summary's last line: every drop counter that is not zero.
fn summary_drops(out: &mut dyn std::io::Write, s: &Snapshot) -> std::io::Result<()> {
    let drops = s.drops();
    if drops.is_empty() {
        writeln!(out, "  drops: none")?;
    } else {
        let d: Vec<String> = drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "  drops: {}", d.join(", "))?;
    }
    Ok(())
}

/// Prints [`write_summary`] to standard output (a closed output ends it quietly).
pub fn print_summary(s: &Snapshot) {
    let _ = write_summary(&mut std::io::stdout().lock(), s);
}

/// An FDB entry for JSON output, in the shape of `bridge -j -s fdb show`.
#[derive(Serialize)]
pub struct FdbJson<'a> {
    /// MAC address.
    pub mac: String,
    /// Port name.
    pub ifname: &'a str,
    /// VLAN.
    pub vlan: u16,
    /// Entry flags (bridge's `self`, `extern_learn`, ...; none here).
    pub flags: [&'static str; 0],
    /// `static` for a configured entry, empty for a learned one (as bridge prints them).
    pub state: &'static str,
    /// Seconds since last seen as a source.
    pub updated: f64,
    /// Seconds since last used as a destination.
    pub used: f64,
}

/// The FDB as JSON rows.
pub fn fdb_json<'a>(fdb: &[FdbEntry], names: &'a [String]) -> Vec<FdbJson<'a>> {
    fdb.iter()
        .map(|e| FdbJson {
            mac: e.mac.to_string(),
            ifname: names.get(usize::from(e.port)).map(String::as_str).unwrap_or("?"),
            vlan: e.vlan,
            flags: [],
            state: if e.is_static { "static" } else { "" },
            updated: e.updated_ms_ago as f64 / 1000.0,
            used: e.used_ms_ago as f64 / 1000.0,
        })
        .collect()
}

/// Prints the FDB like `bridge fdb show` (text) or as a JSON array (`-j`).
pub fn print_fdb(fdb: &[FdbEntry], names: &[String], json: bool) {
    if json {
        outln!("{}", serde_json::to_string_pretty(&fdb_json(fdb, names)).expect("json"));
        return;
    }
    for e in fdb {
        let port = names.get(usize::from(e.port)).map(String::as_str).unwrap_or("?");
        if e.is_static {
            outln!("{} dev {} vlan {} static", e.mac, port, e.vlan);
        } else {
            outln!(
                "{} dev {} vlan {} updated {:.2}s used {:.2}s",
                e.mac,
                port,
                e.vlan,
                e.updated_ms_ago as f64 / 1000.0,
                e.used_ms_ago as f64 / 1000.0
            );
        }
    }
    outln!("{} entries", fdb.len());
}

/// Prints the neighbour table like `ip neigh` (or `ip -j neigh`).
pub fn print_neigh(n: &[NeighEntry], json: bool) {
    if json {
        outln!("{}", serde_json::to_string_pretty(n).expect("json"));
    } else {
        for e in n {
            outln!("{e}");
        }
    }
}

/// Prints the connection table like `conntrack -L`, then conntrack's summary line and the
/// counts per zone and per state on standard error (or, with `json`, the connections as
/// `conntrack -o xml`'s structure: the shape `freeway conntrack -j` prints for the daemon's).
pub fn print_conntrack(c: &[ConnRecord], json: bool) {
    if json {
        outln!("{}", serde_json::to_string_pretty(c).expect("json"));
        return;
    }
    let mut zones: std::collections::BTreeMap<u16, usize> = Default::default();
    let mut states: std::collections::BTreeMap<String, usize> = Default::default();
    for r in c {
        *zones.entry(r.zone).or_default() += 1;
        *states.entry(r.state_label()).or_default() += 1;
    }
    for r in c {
        outln!("{r}");
    }
    eprintln!("{}", conntrack_summary(c.len()));
    for (z, n) in &zones {
        eprintln!("  zone {z}: {n}");
    }
    for (s, n) in &states {
        eprintln!("  {s}: {n}");
    }
}

/// conntrack -L's closing line in Freeway's words: `freeway v0.1.0 (freeway conntrack): 3
/// flow entries have been shown.`
pub fn conntrack_summary(n: usize) -> String {
    format!(
        "freeway v{} (freeway conntrack): {n} flow entries have been shown.",
        env!("CARGO_PKG_VERSION")
    )
}

/// Prints what the capture taps did, on standard error (standard output may carry the
/// capture itself), in tcpdump's closing words.
pub fn print_capture(taps: &[TapResult], s: &Snapshot) {
    for t in taps {
        let dir = t.tap.direction;
        match (&t.stats, &t.error) {
            (Some(st), _) => {
                // tcpdump's shape: captured (written), received by filter (every packet the
                // filter saw, matched or not), dropped (its "by kernel": a full ring).
                eprintln!("freeway capture on {} ({dir}) to {}:", t.tap.port, t.tap.write);
                let n = |v: u64| crate::runtime::control::stream::packets(Some(v));
                eprintln!("{} captured", n(st.written));
                eprintln!("{} received by filter", n(st.seen));
                eprintln!("{} dropped (ring full)", n(st.dropped));
                if st.discarded != 0 {
                    eprintln!("{} packets discarded at stop", st.discarded);
                }
            }
            (None, Some(e)) => eprintln!("freeway capture on {} ({dir}): stopped: {e}", t.tap.port),
            (None, None) => {}
        }
    }
    let fwd: u64 = s.ports.iter().map(|p| p.tx_packets).sum();
    let rx: u64 = s.ports.iter().map(|p| p.rx_packets).sum();
    eprintln!(
        "freeway: {rx} packets received, {fwd} transmitted in {:.2} s",
        s.elapsed_s
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_align_as_the_format_strings_did() {
        assert_eq!(
            table_head("port", &SUMMARY_PORT_COLS),
            format!(
                "{:<12} {:>12} {:>12} {:>12} {:>12} {:>9} {:>10} {:>10}",
                "port", "rx packets", "rx bytes", "tx packets", "tx bytes", "tx drop", "rx pps", "tx pps"
            )
        );
        let cells = ["1".to_string(), "2.5".into(), core_text(Some(3))];
        assert_eq!(
            table_row(&7usize, &LIVE_WORKER_COLS, cells),
            format!("{:<12} {:>10} {:>10.1} {:>6}", 7, 1, 2.5, 3)
        );
        assert_eq!(core_text(None), "-");
        assert_eq!(
            table_row(&"lan", &LIVE_PORT_COLS, ["1.5k", "2", "3", "4", "5"]),
            format!("{:<12} {:>10} {:>10} {:>10} {:>10} {:>9}", "lan", "1.5k", 2, 3, 4, 5)
        );
    }
}
