//! The Prometheus endpoint: `freeway run --metrics 127.0.0.1:9477` serves
//! `GET /metrics` in the OpenMetrics text format (prometheus-client's encoder).
//!
//! Every scrape takes a snapshot (the per-worker counters summed, as the statistics table
//! does) and renders it: per-port packets, bytes and transmit drops; per-worker packets and
//! batches; drops by reason; FDB entries and learning; the router's forwarding and route
//! cache; conntrack connections and packets by state; firewall verdicts.
//!
//! Threads: one thread (`fw-metrics`) accepts and answers one connection at a time; it reads
//! only counters (single-writer, relaxed loads) and never touches the fast path.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use freeway_bridge::Layout;
use freeway_conntrack::{CtStats, FwStats};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{RouterSnap, RunError, Snapper, Snapshot};

/// Binds `addr` (e.g. `127.0.0.1:9477`; port 0 picks one).
pub(crate) fn bind(addr: &str) -> Result<TcpListener, RunError> {
    let e = |m: String| RunError(format!("metrics address {addr}: {m}"));
    let l = TcpListener::bind(addr).map_err(|x| e(x.to_string()))?;
    l.set_nonblocking(true).map_err(|x| e(x.to_string()))?;
    if let Ok(a) = l.local_addr() {
        eprintln!("freeway: metrics on http://{a}/metrics");
    }
    Ok(l)
}

/// Serves scrapes until `stop` is set.
pub(crate) fn serve<L: Layout>(l: TcpListener, snap: Snapper<L>, start: Instant, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => answer(s, || render(&snap.snap(start.elapsed()))),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn answer(mut s: TcpStream, body: impl FnOnce() -> String) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    // The request head, bounded.
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let reply = if line.starts_with(b"GET /metrics ") || line.starts_with(b"GET /metrics?") {
        let b = body();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
    } else {
        let b = "freeway serves GET /metrics\n";
        format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
    };
    let _ = s.write_all(reply.as_bytes());
}

type Labels = Vec<(&'static str, String)>;

/// A counter family registered under `name`, filled from `(labels, value)` pairs.
fn counters(r: &mut Registry, name: &str, help: &str, rows: impl IntoIterator<Item = (Labels, u64)>) {
    let f = Family::<Labels, Counter>::default();
    for (l, v) in rows {
        f.get_or_create(&l).inc_by(v);
    }
    r.register(name, help, f);
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: i64) {
    let g = Gauge::<i64>::default();
    g.set(v);
    r.register(name, help, g);
}

/// Rows labelled `key = name`, one per `(name, value)`.
fn labelled<'a>(key: &'static str, rows: impl IntoIterator<Item = (&'a str, u64)>) -> Vec<(Labels, u64)> {
    rows.into_iter().map(|(k, v)| (vec![(key, k.to_string())], v)).collect()
}

/// `[("name", s.name), ...]`: counters labelled with their field names.
macro_rules! fields {
    ($s:ident: $($f:ident),+ $(,)?) => {
        [$((stringify!($f), $s.$f)),+]
    };
}

/// Renders a snapshot in the OpenMetrics text format.
pub(crate) fn render(s: &Snapshot) -> String {
    let mut r = Registry::with_prefix("freeway");
    ports(&mut r, s);
    workers(&mut r, s);
    bridge(&mut r, s);
    if let Some(rt) = &s.router {
        router(&mut r, rt);
    }
    if let Some(c) = &s.conntrack {
        conntrack(&mut r, c);
    }
    if let Some(f) = &s.firewall {
        firewall(&mut r, f);
    }
    if let Some(f) = &s.reassembly {
        reassembly(&mut r, f);
    }
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

/// Per port: frames and bytes received and transmitted, transmit drops.
fn ports(r: &mut Registry, s: &Snapshot) {
    let rows = |f: fn(&super::PortSnap) -> u64| s.ports.iter().map(move |p| (vec![("port", p.name.clone())], f(p)));
    counters(r, "port_rx_packets", "Frames received", rows(|p| p.rx_packets));
    counters(r, "port_rx_bytes", "Bytes received", rows(|p| p.rx_bytes));
    counters(r, "port_tx_packets", "Frames transmitted", rows(|p| p.tx_packets));
    counters(r, "port_tx_bytes", "Bytes transmitted", rows(|p| p.tx_bytes));
    counters(
        r,
        "port_tx_dropped",
        "Frames the transmit queue refused",
        rows(|p| p.tx_dropped),
    );
}

/// Per worker: frames and batches.
fn workers(r: &mut Registry, s: &Snapshot) {
    let worker = |id: usize| vec![("worker", id.to_string())];
    counters(
        r,
        "worker_packets",
        "Frames received by a worker",
        s.workers.iter().map(|w| (worker(w.id), w.packets)),
    );
    counters(
        r,
        "worker_batches",
        "Batches processed by a worker",
        s.workers.iter().map(|w| (worker(w.id), w.batches)),
    );
}

/// Drops by reason, the bridge stage's events, the FDB's size and events.
fn bridge(r: &mut Registry, s: &Snapshot) {
    counters(
        r,
        "drops",
        "Frames dropped, by stage and reason",
        s.drops().into_iter().map(|(k, v)| (vec![("reason", k)], v)),
    );
    counters(
        r,
        "bridge_events",
        "Bridge stage events (rx, forwarded, flooded, learn requests, drops, ...)",
        labelled("event", s.bridge.iter().map(|(k, v)| (*k, *v))),
    );
    gauge(
        r,
        "fdb_entries",
        "Entries in the forwarding database",
        s.fdb_entries as i64,
    );
    counters(
        r,
        "fdb_events",
        "FDB writer events (learned, aged, moved, refused at the limit)",
        labelled("event", s.fdb.iter().map(|(k, v)| (*k, *v))),
    );
}

/// Packets routed by family, route lookups by outcome, neighbour entries.
fn router(r: &mut Registry, rt: &RouterSnap) {
    counters(
        r,
        "router_forwarded",
        "Packets routed",
        labelled("family", [("ipv4", rt.l3.forwarded_v4), ("ipv6", rt.l3.forwarded_v6)]),
    );
    counters(
        r,
        "route_cache_lookups",
        "Route lookups by outcome",
        labelled(
            "outcome",
            [
                ("hit", rt.route_cache_hits),
                ("miss", rt.route_cache_misses),
                ("refill", rt.route_cache_refills),
                ("uncached", rt.route_uncached),
            ],
        ),
    );
    gauge(
        r,
        "neigh_entries",
        "Entries in the neighbour table",
        rt.neigh_entries as i64,
    );
}

/// Tracked connections and their bound, packets by state, connections created and expired,
/// node slabs mapped on the packet path.
fn conntrack(r: &mut Registry, c: &CtStats) {
    gauge(r, "conntrack_connections", "Tracked connections", c.connections as i64);
    gauge(r, "conntrack_max", "Most tracked connections", c.max as i64);
    counters(
        r,
        "conntrack_packets",
        "Packets tracked, by state",
        labelled("state", fields!(c: new, established, related, untracked, invalid)),
    );
    counters(r, "conntrack_created", "Connections created", [(vec![], c.created)]);
    counters(r, "conntrack_expired", "Connections expired", [(vec![], c.expired)]);
    counters(
        r,
        "conntrack_slab_sync_maps",
        "Node slabs a worker mapped itself while creating a connection (none prepared in time)",
        [(vec![], c.slab_sync_maps)],
    );
}

/// Fragment reassembly: what came in and out, what is held (its drops are in `drops`).
fn reassembly(r: &mut Registry, f: &freeway_frag::FragStats) {
    gauge(
        r,
        "reassembly_in_flight",
        "Datagrams being reassembled",
        f.in_flight as i64,
    );
    gauge(
        r,
        "reassembly_bytes_held",
        "Bytes of fragment buffers held",
        f.bytes_held as i64,
    );
    counters(
        r,
        "reassembly_events",
        "Fragments in, datagrams reassembled, fragments merged, datagrams refragmented, fragments out",
        labelled(
            "event",
            fields!(f: fragments, reassembled, merged, refragmented, fragments_out),
        ),
    );
}

/// Firewall verdicts by reason.
fn firewall(r: &mut Registry, f: &FwStats) {
    counters(
        r,
        "firewall_verdicts",
        "Firewall verdicts by reason",
        labelled(
            "verdict",
            fields!(f: accept_new, accept_established, accept_related, accept_untracked,
                drop_invalid, drop_limit, drop_new_not_allowed),
        ),
    );
}
