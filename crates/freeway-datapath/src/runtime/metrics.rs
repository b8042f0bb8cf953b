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
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{RunError, Snapper, Snapshot};

/// Binds `addr` (e.g. `127.0.0.1:9477`; port 0 picks one).
pub(crate) fn bind(addr: &str) -> Result<TcpListener, RunError> {
    let e = |m: String| RunError(format!("metrics address {addr}: {m}"));
    let l = TcpListener::bind(addr).map_err(|x| e(x.to_string()))?;
    l.set_nonblocking(true).map_err(|x| e(x.to_string()))?;
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

/// Renders a snapshot in the OpenMetrics text format.
pub(crate) fn render(s: &Snapshot) -> String {
    let mut r = Registry::with_prefix("freeway");
    let port = |p: &super::PortSnap| vec![("port", p.name.clone())];
    counters(
        &mut r,
        "port_rx_packets",
        "Frames received",
        s.ports.iter().map(|p| (port(p), p.rx_packets)),
    );
    counters(
        &mut r,
        "port_rx_bytes",
        "Bytes received",
        s.ports.iter().map(|p| (port(p), p.rx_bytes)),
    );
    counters(
        &mut r,
        "port_tx_packets",
        "Frames transmitted",
        s.ports.iter().map(|p| (port(p), p.tx_packets)),
    );
    counters(
        &mut r,
        "port_tx_bytes",
        "Bytes transmitted",
        s.ports.iter().map(|p| (port(p), p.tx_bytes)),
    );
    counters(
        &mut r,
        "port_tx_dropped",
        "Frames the transmit queue refused",
        s.ports.iter().map(|p| (port(p), p.tx_dropped)),
    );
    let worker = |id: usize| vec![("worker", id.to_string())];
    counters(
        &mut r,
        "worker_packets",
        "Frames received by a worker",
        s.workers.iter().map(|w| (worker(w.id), w.packets)),
    );
    counters(
        &mut r,
        "worker_batches",
        "Batches processed by a worker",
        s.workers.iter().map(|w| (worker(w.id), w.batches)),
    );
    counters(
        &mut r,
        "drops",
        "Frames dropped, by stage and reason",
        s.drops().into_iter().map(|(k, v)| (vec![("reason", k)], v)),
    );
    counters(
        &mut r,
        "bridge_events",
        "Bridge stage events (rx, forwarded, flooded, learn requests, drops, ...)",
        s.bridge.iter().map(|(k, v)| (vec![("event", k.to_string())], *v)),
    );
    gauge(
        &mut r,
        "fdb_entries",
        "Entries in the forwarding database",
        s.fdb_entries as i64,
    );
    counters(
        &mut r,
        "fdb_events",
        "FDB writer events (learned, aged, moved, refused at the limit)",
        s.fdb.iter().map(|(k, v)| (vec![("event", k.to_string())], *v)),
    );
    if let Some(rt) = &s.router {
        counters(
            &mut r,
            "router_forwarded",
            "Packets routed",
            [
                (vec![("family", "ipv4".to_string())], rt.l3.forwarded_v4),
                (vec![("family", "ipv6".to_string())], rt.l3.forwarded_v6),
            ],
        );
        counters(
            &mut r,
            "route_cache_lookups",
            "Route lookups by outcome",
            [
                (vec![("outcome", "hit".to_string())], rt.route_cache_hits),
                (vec![("outcome", "miss".to_string())], rt.route_cache_misses),
                (vec![("outcome", "refill".to_string())], rt.route_cache_refills),
                (vec![("outcome", "uncached".to_string())], rt.route_uncached),
            ],
        );
        gauge(
            &mut r,
            "neigh_entries",
            "Entries in the neighbour table",
            rt.neigh_entries as i64,
        );
    }
    if let Some(c) = &s.conntrack {
        gauge(
            &mut r,
            "conntrack_connections",
            "Tracked connections",
            c.connections as i64,
        );
        gauge(&mut r, "conntrack_max", "Most tracked connections", c.max as i64);
        counters(
            &mut r,
            "conntrack_packets",
            "Packets tracked, by state",
            [
                ("new", c.new),
                ("established", c.established),
                ("related", c.related),
                ("untracked", c.untracked),
                ("invalid", c.invalid),
            ]
            .map(|(k, v)| (vec![("state", k.to_string())], v)),
        );
        counters(
            &mut r,
            "conntrack_created",
            "Connections created",
            [(vec![], c.created)],
        );
        counters(
            &mut r,
            "conntrack_expired",
            "Connections expired",
            [(vec![], c.expired)],
        );
    }
    if let Some(f) = &s.firewall {
        counters(
            &mut r,
            "firewall_verdicts",
            "Firewall verdicts by reason",
            [
                ("accept_new", f.accept_new),
                ("accept_established", f.accept_established),
                ("accept_related", f.accept_related),
                ("accept_untracked", f.accept_untracked),
                ("drop_invalid", f.drop_invalid),
                ("drop_limit", f.drop_limit),
                ("drop_new_not_allowed", f.drop_new_not_allowed),
            ]
            .map(|(k, v)| (vec![("verdict", k.to_string())], v)),
        );
    }
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}
