//! `freeway conntrack -E`: connection events streamed over the control socket, both ends.
//!
//! # How events are found
//!
//! An event thread per subscriber (`fw-ct-events`, at most [`MAX_STREAMS`]) looks at the
//! connection table every [`LOOK`] and compares what it sees with its previous look
//! ([`freeway_conntrack::EventDiff`]): a connection that appeared is `NEW`, one whose TCP
//! state or reply/assured flags changed is `UPDATE`, one that is gone is `DESTROY`.
//!
//! Why this and not events pushed by the workers (a per-worker ring filled where connections
//! are created and change state, and by the expiry thread): looking costs the workers
//! nothing at all, not even the check of a subscriber flag per new connection, and nothing
//! in the connection table's insert, TCP tracking or expiry paths changes; a subscriber that
//! reads slowly delays only its own thread. The price is paid here: each look walks the whole
//! table (the control plane's cost, as `conntrack -L`'s), and what happens between two looks
//! is seen merged: a connection that changes state twice shows one UPDATE with its latest
//! state, and one that is created and removed between two looks is not seen at all. Those
//! are counted: the table's count of connections created (over all connections, filtered
//! or not) minus the new connections the looks found is the number of connections missed,
//! each a lost NEW and DESTROY event. The count is a lower bound that becomes exact at the
//! next look (the counter is read before the walk) and is sent to the client whenever it
//! grows; the client reports it (`N events lost`). Nothing ever waits on a subscriber.
//!
//! # Wire format
//!
//! After the reply line, one JSON object per line: `{"text": LINE, "event": EVENT}` for an
//! event (`LINE` in conntrack -E's words, `EVENT` a [`freeway_conntrack::query::EventJson`]),
//! `{"lost": N}` with the total of events lost so far. The stream ends when the client
//! closes the connection or shuts its sending half (Ctrl-C), or the datapath stops.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use freeway_conntrack::query::{flow_hash, EventJson};
use freeway_conntrack::{ConnRecord, Conntrack, CtFilter, EventDiff};
use serde_json::{json, Value};

use super::protocol::{CtlError, Reply, Request, Response};

/// How often an event thread looks at the table.
pub const LOOK: Duration = Duration::from_millis(100);
/// Most event streams at once.
pub const MAX_STREAMS: usize = 4;
/// How often the client checks for Ctrl-C while no event comes.
const CLIENT_POLL: Duration = Duration::from_millis(100);

/// A running event stream (the datapath's side).
pub(crate) struct EventStream {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl EventStream {
    /// Whether its thread ended (client gone, write failed).
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Ends it (the datapath stops) and waits for its thread.
    pub(crate) fn end(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
    }
}

/// Starts an event stream on `s`: the reply line, then events (see the module doc). `running`
/// is how many streams run already.
pub(crate) fn start(
    ct: Option<&Conntrack>,
    filter: CtFilter,
    s: UnixStream,
    running: usize,
    write_deadline: Duration,
) -> Result<EventStream, CtlError> {
    let ct = ct.ok_or_else(super::no_ct)?.clone();
    if running >= MAX_STREAMS {
        return Err(CtlError::Busy(format!(
            "{MAX_STREAMS} event streams run already (each one walks the table {} times a second)",
            1000 / LOOK.as_millis()
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let handle = std::thread::Builder::new()
        .name("fw-ct-events".into())
        .spawn(move || {
            let _ = s.set_write_timeout(Some(write_deadline));
            if let Err(e) = stream(&ct, &filter, s, &st) {
                tracing::debug!(error = %e, "conntrack event stream ended");
            }
        })
        .map_err(|e| CtlError::Failed(format!("cannot start the event thread: {e}")))?;
    Ok(EventStream { stop, handle })
}

/// One look: the records `filter` selects, and the ids of every connection.
fn look(ct: &Conntrack, filter: &CtFilter) -> (Vec<ConnRecord>, HashSet<u64>) {
    let mut kept = Vec::new();
    let mut ids = HashSet::with_capacity(ct.len());
    ct.for_each_record(|r| {
        ids.insert(flow_hash(&r));
        if filter.matches(&r) {
            kept.push(r);
        }
    });
    (kept, ids)
}

/// The event thread's body: until the client goes or `stop` is set.
fn stream(ct: &Conntrack, filter: &CtFilter, mut s: UnixStream, stop: &AtomicBool) -> std::io::Result<()> {
    let base = ct.stats().created;
    let (first, mut ids) = look(ct, filter);
    let mut diff = EventDiff::starting_at(first);
    let line = Response::line(Ok(Reply::new("", json!({"filter": filter}))));
    s.write_all(line.as_bytes())?;
    let (mut seen_new, mut lost) = (0u64, 0u64);
    loop {
        let until = Instant::now() + LOOK;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) || super::stream::hung_up(&s) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let created = ct.stats().created;
        let (now, now_ids) = look(ct, filter);
        seen_new += now_ids.difference(&ids).count() as u64;
        ids = now_ids;
        let mut out = String::new();
        for e in diff.next(now) {
            let v = json!({"text": e.to_string(), "event": EventJson::from(&e)});
            out.push_str(&v.to_string());
            out.push('\n');
        }
        // Each connection created and gone between two looks: a NEW and a DESTROY lost.
        let missed = 2 * created.saturating_sub(base).saturating_sub(seen_new);
        if missed > lost {
            lost = missed;
            out.push_str(&json!({ "lost": lost }).to_string());
            out.push('\n');
        }
        if !out.is_empty() {
            s.write_all(out.as_bytes())?;
        }
    }
}

/// What a client's event stream showed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EventSummary {
    /// Events shown.
    pub shown: u64,
    /// Events the datapath reported lost.
    pub lost: u64,
}

/// The client's side (`freeway conntrack -E`): asks for events with `filter` and writes each
/// to `out` (conntrack -E's line, or with `json` one JSON object per line) until `stop` is set
/// (Ctrl-C, SIGTERM) or the datapath ends the stream.
pub fn events(
    path: &Path,
    filter: &CtFilter,
    json: bool,
    out: &mut dyn Write,
    stop: &AtomicBool,
) -> Result<EventSummary, CtlError> {
    let mut s = super::connect(path)?;
    let req = Request::ConntrackEvents { filter: filter.clone() };
    super::write_request(&mut s, &req)?;
    s.set_read_timeout(Some(CLIENT_POLL))
        .map_err(|e| CtlError::Unreachable(e.to_string()))?;
    let mut r = BufReader::new(s.try_clone().map_err(|e| CtlError::Unreachable(e.to_string()))?);
    let mut sum = EventSummary::default();
    let mut replied = false;
    let mut line = Vec::new();
    let unreachable = |e: std::io::Error| CtlError::Unreachable(format!("reading events: {e}"));
    while !stop.load(Ordering::Relaxed) {
        match r.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.ends_with(b"\n") => {}
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(unreachable(e)),
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        line.clear();
        if !replied {
            Response::decode(&text)?;
            replied = true;
            continue;
        }
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| CtlError::Malformed(format!("an event line that is not JSON: {e}")))?;
        if let Some(n) = v["lost"].as_u64() {
            sum.lost = n;
            continue;
        }
        let shown = if json {
            v["event"].to_string()
        } else {
            v["text"].as_str().unwrap_or_default().to_string()
        };
        writeln!(out, "{shown}")
            .and_then(|()| out.flush())
            .map_err(|e| CtlError::Failed(format!("writing events: {e}")))?;
        sum.shown += 1;
    }
    if !replied && !stop.load(Ordering::Relaxed) {
        return Err(CtlError::Unreachable(
            "no reply from the datapath: it closed the connection".into(),
        ));
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
    Ok(sum)
}
