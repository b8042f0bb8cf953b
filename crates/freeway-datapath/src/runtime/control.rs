//! The control socket: `freeway run --ctl PATH` listens on a Unix stream socket (mode 0600)
//! and `freeway ctl` talks to it.
//!
//! # Protocol
//!
//! One request per connection: a JSON array of words (the `freeway ctl` arguments, e.g.
//! `["route","add","10.9.0.0/24","via","10.0.20.7"]`) on one line of at most
//! [`MAX_REQUEST`] bytes; one reply: a JSON object on one line, `{"ok":true,"text":...,
//! "data":...}` (`text` as the command prints it, `data` for `-j`) or `{"ok":false,
//! "error":...}`. A malformed, oversized or unknown request gets an error and changes nothing.
//!
//! Commands: `stats`; `fdb show|add|del|flush`; `route show|add|replace|del`;
//! `neigh show|add|del|flush`; `conntrack list|flush [zone N]`; `trace FIELDS` (see
//! [`super::trace`]); `help` (see [`HELP`]); and
//! `capture PORT DIR SNAPLEN COUNT FORMAT FILTER` (what `freeway capture --ctl` sends): the
//! reply line is followed, on the same connection, by the capture itself (pcap or pcapng)
//! until COUNT packets (0: no limit) or until the client goes away, which detaches the tap.
//!
//! # Threads
//!
//! One thread (`fw-ctl`) accepts and serves connections one at a time (a second client waits
//! in the listen backlog; a client that sends nothing is dropped after [`CLIENT_TIMEOUT`]).
//! It owns the RIB while the datapath runs: route changes publish a new FIB version that
//! workers pick up at their next lookup (their caches refill by generation); it never takes
//! a lock a worker could wait on. FDB and neighbour changes go to the tables' own writer
//! threads (`fw-fdb`, `fw-neigh`: each table has one writer) through a channel, with the
//! answer coming back on another; in offline runs the worker owns those writers and the
//! socket refuses such changes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use freeway_bridge::{Fdb, FdbWriter, Layout, Mac, PortVlan};
use freeway_conntrack::Conntrack;
use freeway_l3::neigh::NeighWriter;
use freeway_l3::{Interfaces, Neigh};
use freeway_route::{NextHop, Prefix, Rib, Route};
use freeway_sync::Clock;
use freeway_sync::Tick;
use serde_json::{json, Value};

use super::{RunError, Snapper};

/// A change for the FDB's writer thread.
pub(crate) enum FdbOp {
    /// A static entry (MAC, VLAN, port).
    Add(Mac, u16, u16),
    /// Delete the entry for (MAC, VLAN).
    Del(Mac, u16),
    /// Delete every learned entry.
    Flush,
}

/// A change for the neighbour table's writer thread.
pub(crate) enum NeighOp {
    /// A permanent entry (address, interface, MAC).
    Add(IpAddr, u16, [u8; 6]),
    /// Delete the entry for (address, interface).
    Del(IpAddr, u16),
    /// Delete the dynamic entries (of one interface).
    Flush(Option<u16>),
}

/// A request to a writer thread, where its answer goes, and its claim word ([`PENDING`],
/// [`TAKEN`], [`CANCELLED`]): the writer applies a request only if it moves the word from
/// pending to taken, and the asker gives up only if it moves it from pending to cancelled, so
/// a request the asker reported as not done is never applied later.
pub(crate) type Op<T> = (T, Sender<Result<String, String>>, Arc<AtomicU8>);

/// Waiting in the queue.
const PENDING: u8 = 0;
/// Being applied by the writer (the answer will come).
const TAKEN: u8 = 1;
/// Given up by the asker (the writer skips it).
const CANCELLED: u8 = 2;

/// Answers every request waiting in `rx` with `apply` (a table's writer thread, between its
/// rounds), skipping those their asker gave up on. Returns how many were applied.
fn drain<T>(rx: &Receiver<Op<T>>, mut apply: impl FnMut(T) -> Result<String, String>) -> usize {
    let mut n = 0;
    while let Ok((op, reply, claim)) = rx.try_recv() {
        if claim
            .compare_exchange(PENDING, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let _ = reply.send(apply(op));
            n += 1;
        }
    }
    n
}

/// Applies the FDB changes waiting in `rx` (the FDB writer thread).
pub(crate) fn apply_fdb<L: Layout>(w: &mut FdbWriter<L>, rx: &Receiver<Op<FdbOp>>, now: Tick) -> usize {
    drain(rx, |op| match op {
        FdbOp::Add(mac, vlan, port) => w
            .add_static(mac, vlan, port, now)
            .map(|_| String::new())
            .map_err(|e| e.to_string()),
        FdbOp::Del(mac, vlan) if w.delete(mac, vlan) => Ok(String::new()),
        FdbOp::Del(mac, vlan) => Err(format!("no entry for {mac} vlan {vlan}")),
        FdbOp::Flush => Ok(format!("{} entries flushed\n", w.flush(false))),
    })
}

/// Applies the neighbour changes waiting in `rx` (the neighbour writer thread).
pub(crate) fn apply_neigh(w: &mut NeighWriter, rx: &Receiver<Op<NeighOp>>, now: Tick) -> usize {
    drain(rx, |op| match op {
        NeighOp::Add(ip, iface, mac) => w
            .add_static(ip, iface, mac, now)
            .map(|_| String::new())
            .map_err(|e| e.to_string()),
        NeighOp::Del(ip, iface) if w.delete(ip, iface) => Ok(String::new()),
        NeighOp::Del(ip, _) => Err(format!("no neighbour {ip} on that interface")),
        NeighOp::Flush(iface) => Ok(format!("{} entries flushed\n", w.flush(iface, false))),
    })
}

/// Longest request line.
pub const MAX_REQUEST: usize = 64 * 1024;
/// How long a connected client may take to send its request.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the control thread works on.
pub(crate) struct Control<L: Layout> {
    pub snap: Snapper<L>,
    pub start: Instant,
    pub clock: Clock,
    pub fdb: Fdb<L>,
    /// The bridge (for traces, which run its real stage read-only).
    pub bridge: Arc<freeway_bridge::Bridge<L>>,
    pub port_names: Vec<String>,
    /// The RIB and the interfaces (with a router).
    pub rib: Option<(Rib, Arc<Interfaces>, Neigh)>,
    pub ct: Option<Conntrack>,
    /// The bridge ports' VLAN membership (static FDB entries are checked against it).
    pub port_vlans: Vec<PortVlan>,
    /// Configured ports (the router's internal port, if any, comes after them).
    pub nports: usize,
    /// The FDB writer thread's queue (none in offline runs).
    pub fdb_ops: Option<Sender<Op<FdbOp>>>,
    /// The neighbour writer thread's queue (none in offline runs or without a router).
    pub neigh_ops: Option<Sender<Op<NeighOp>>>,
    /// Attaches a tap writing to the given stream (the run's tap registry).
    pub attach: Attach,
    /// Detaches a tap by id.
    pub detach: Box<dyn Fn(freeway_capture::TapId) + Send>,
    /// Captures started through the socket (streamed to a client, or written to a file by
    /// `capture start`).
    pub captures: Vec<super::capture::RunningTap>,
    /// The config's taps (their writers belong to the runtime): id, what, stopped here.
    pub config_taps: Vec<(freeway_capture::TapId, super::capture::TapDesc, bool)>,
    /// Captures that ended: id and how (count reached, stopped, failed), for `capture list`.
    pub ended: Vec<(freeway_capture::TapId, super::capture::TapDesc, String)>,
    /// The firewall's policy (for traces).
    pub fw: Option<freeway_conntrack::Firewall>,
    /// Conntrack zone of each port (for traces).
    pub zones: Arc<[u16]>,
    /// The L3 stage's settings (for traces).
    pub l3: Option<freeway_l3::L3Config>,
}

/// Attaches a tap, with its writer thread, writing to a stream.
pub(crate) type Attach = Box<
    dyn Fn(&crate::config::capture::TapSpec, Box<dyn Write + Send>) -> Result<super::capture::RunningTap, RunError>
        + Send,
>;

/// How long the control thread waits for a table's writer.
const WRITER_WAIT: Duration = Duration::from_secs(2);

/// Sends `op` to a writer thread and waits (bounded) for its answer. A request that is not
/// taken in time is withdrawn, so "did not answer" always means "not done".
fn ask<T>(q: &Option<Sender<Op<T>>>, op: T) -> Result<(String, Value), String> {
    let q = q
        .as_ref()
        .ok_or("this run's tables are written by its worker (offline pcap run): no live changes")?;
    let (tx, rx) = bounded(1);
    let claim = Arc::new(AtomicU8::new(PENDING));
    q.send_timeout((op, tx, claim.clone()), WRITER_WAIT)
        .map_err(|e| match e {
            crossbeam_channel::SendTimeoutError::Timeout(_) => {
                "the table's writer is busy: nothing done, try again".to_string()
            }
            crossbeam_channel::SendTimeoutError::Disconnected(_) => "the table's writer has stopped".to_string(),
        })?;
    let text = match rx.recv_timeout(WRITER_WAIT) {
        Ok(r) => r?,
        Err(_) => {
            if claim
                .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Err("the table's writer did not take the request in time: nothing done, try again".into());
            }
            // The writer took it: the answer is on its way.
            rx.recv()
                .map_err(|_| "the table's writer stopped while applying the request".to_string())??
        }
    };
    Ok((text, Value::Null))
}

/// Binds `path` (replacing a stale socket file, refusing a live one) with mode 0600.
pub(crate) fn bind(path: &Path) -> Result<UnixListener, RunError> {
    let e = |m: String| RunError(format!("control socket {}: {m}", path.display()));
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(e("another freeway is listening there".into()));
        }
        std::fs::remove_file(path).map_err(|x| e(format!("cannot remove the stale socket: {x}")))?;
    }
    let l = UnixListener::bind(path).map_err(|x| e(x.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|x| e(x.to_string()))?;
    l.set_nonblocking(true).map_err(|x| e(x.to_string()))?;
    Ok(l)
}

/// How often an idle control thread looks for a client.
const IDLE_POLL: Duration = Duration::from_millis(10);

/// Serves requests until `stop` is set; returns the state (with the RIB) for the final dumps.
pub(crate) fn serve<L: Layout>(l: UnixListener, mut c: Control<L>, stop: Arc<AtomicBool>) -> Control<L> {
    // Right after a request the next one is likely (a script, `freeway stress churn`): poll
    // again soon, backing off to 10 ms while nobody calls.
    let mut nap = IDLE_POLL;
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                c.client(s);
                nap = Duration::from_micros(50);
            }
            Err(_) => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(IDLE_POLL);
            }
        }
        // Reap the captures that ended (count reached, client gone).
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut c.captures)
            .into_iter()
            .partition(|t| t.is_finished());
        c.captures = running;
        for t in done {
            c.reap(t);
        }
    }
    // The datapath stops: end the captures, so their clients see the end of the stream.
    for t in std::mem::take(&mut c.captures) {
        (c.detach)(t.id());
        let _ = t.join();
    }
    c
}

/// `freeway capture --ctl`: asks for a capture and copies the stream that follows the reply
/// into `out` until the datapath ends it (count reached, datapath stopped).
pub fn capture_request(path: &Path, words: &[String], out: &mut dyn Write) -> Result<(), String> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        format!(
            "cannot reach freeway at {}: {e} (is `freeway run --ctl {}` running?)",
            path.display(),
            path.display()
        )
    })?;
    let mut line = serde_json::to_string(words).map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut reply = String::new();
    r.read_line(&mut reply).map_err(|e| format!("no reply: {e}"))?;
    let v: Value = serde_json::from_str(&reply).map_err(|e| format!("bad reply: {e}"))?;
    if v["ok"] != true {
        return Err(v["error"].as_str().unwrap_or("capture refused").to_string());
    }
    std::io::copy(&mut r, out).map_err(|e| format!("capture stream: {e}"))?;
    out.flush().map_err(|e| e.to_string())
}

/// Sends one request to the socket at `path` and returns the reply object.
pub fn request(path: &Path, words: &[String]) -> Result<Value, String> {
    let mut s = UnixStream::connect(path).map_err(|e| {
        format!(
            "cannot reach freeway at {}: {e} (is `freeway run --ctl {}` running?)",
            path.display(),
            path.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut line = serde_json::to_string(words).map_err(|e| e.to_string())?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut reply = String::new();
    BufReader::new(s)
        .read_line(&mut reply)
        .map_err(|e| format!("no reply: {e}"))?;
    serde_json::from_str(&reply).map_err(|e| format!("bad reply: {e}"))
}

impl<L: Layout> Control<L> {
    /// The index of the configured port named `port`.
    fn port_index(&self, port: &str) -> Result<usize, String> {
        self.port_names
            .iter()
            .position(|n| n == port)
            .filter(|&i| i < self.nports)
            .ok_or_else(|| {
                format!(
                    "no port named {port:?} (ports: {})",
                    self.port_names[..self.nports].join(", ")
                )
            })
    }

    /// Joins an ended capture and remembers how it ended.
    fn reap(&mut self, t: super::capture::RunningTap) {
        let (id, desc) = (t.id(), t.desc().clone());
        let how = match t.join() {
            Ok(s) => format!("ended: {} packets written, {} dropped", s.written, s.dropped),
            Err(e) => format!("failed: {e}"),
        };
        self.ended.push((id, desc, how));
        let n = self.ended.len();
        if n > 64 {
            self.ended.drain(..n - 64);
        }
    }

    /// `capture list`: the config's taps, the running captures and the last ended ones.
    fn capture_list(&self) -> (String, Value) {
        let mut rows = Vec::new();
        for (id, d, stopped) in &self.config_taps {
            rows.push((
                *id,
                d,
                "config",
                if *stopped {
                    "stopped".to_string()
                } else {
                    "running".into()
                },
            ));
        }
        for t in &self.captures {
            rows.push((t.id(), t.desc(), "ctl", "running".into()));
        }
        for (id, d, how) in &self.ended {
            rows.push((*id, d, "ctl", how.clone()));
        }
        rows.sort_by_key(|r| r.0);
        let mut text = format!(
            "{:<4} {:<8} {:<12} {:<6} {:<28} {:<24} {}\n",
            "id", "origin", "port", "dir", "output", "filter", "state"
        );
        for (id, d, origin, state) in &rows {
            text.push_str(&format!(
                "{:<4} {:<8} {:<12} {:<6} {:<28} {:<24} {}\n",
                id,
                origin,
                d.port,
                d.direction,
                d.write,
                if d.filter.is_empty() { "(all)" } else { &d.filter },
                state
            ));
        }
        let data: Vec<Value> = rows
            .iter()
            .map(|(id, d, origin, state)| json!({"id": id, "origin": origin, "port": d.port, "direction": d.direction, "filter": d.filter, "output": d.write, "state": state}))
            .collect();
        (text, json!(data))
    }

    /// `capture stop ID`: detaches a tap; a capture started here is joined and its counts
    /// returned.
    fn capture_stop(&mut self, id: &str) -> Result<(String, Value), String> {
        let id: freeway_capture::TapId = id
            .parse()
            .map_err(|_| format!("capture stop {id:?}: not a tap id (see `capture list`)"))?;
        if let Some(i) = self.captures.iter().position(|t| t.id() == id) {
            let t = self.captures.swap_remove(i);
            (self.detach)(id);
            let desc = t.desc().clone();
            return match t.join() {
                Ok(s) => {
                    self.ended.push((
                        id,
                        desc,
                        format!("stopped: {} packets written, {} dropped", s.written, s.dropped),
                    ));
                    Ok((
                        format!(
                            "tap {id} stopped: {} packets written, {} dropped by full rings\n",
                            s.written, s.dropped
                        ),
                        serde_json::to_value(s).map_err(|e| e.to_string())?,
                    ))
                }
                Err(e) => {
                    self.ended.push((id, desc, format!("failed: {e}")));
                    Err(format!("tap {id} stopped; its writer had failed: {e}"))
                }
            };
        }
        if let Some(t) = self.config_taps.iter_mut().find(|t| t.0 == id) {
            if t.2 {
                return Err(format!("tap {id} is already stopped"));
            }
            (self.detach)(id);
            t.2 = true;
            return Ok((
                format!("tap {id} (from the config) stopped; its counts are in the run's final report\n"),
                json!({"id": id}),
            ));
        }
        Err(format!("no running tap {id} (see `capture list`)"))
    }

    /// `capture start -i PORT [-Q DIR] [-s SNAPLEN] [-c COUNT] -w /ABS/FILE [FILTER...]`: a
    /// tap writing a file on the datapath's side; replies with its id.
    fn capture_start(&mut self, w: &[&str]) -> Result<(String, Value), String> {
        let usage = "capture start -i PORT [-Q in|out|inout] [-s SNAPLEN] [-c COUNT] -w /ABSOLUTE/FILE [FILTER...]";
        let (mut port, mut dir, mut snap, mut count, mut file) = (None, "inout", 262_144u32, None, None);
        let mut i = 0;
        while i < w.len() {
            let arg = |i: usize| {
                w.get(i + 1)
                    .copied()
                    .ok_or_else(|| format!("{} needs a value; {usage}", w[i]))
            };
            match w[i] {
                "-i" => port = Some(arg(i)?),
                "-Q" => dir = arg(i)?,
                "-s" => {
                    let v = arg(i)?;
                    snap = v.parse().map_err(|_| format!("-s {v:?}: not a number"))?;
                    if snap == 0 {
                        snap = 262_144;
                    }
                }
                "-c" => {
                    let v = arg(i)?;
                    count = Some(
                        v.parse::<u64>()
                            .ok()
                            .filter(|c| *c > 0)
                            .ok_or_else(|| format!("-c {v:?}: a positive number"))?,
                    );
                }
                "-w" => file = Some(arg(i)?),
                _ => break,
            }
            i += 2;
        }
        let filter = w[i..].join(" ");
        let port = port.ok_or_else(|| format!("-i PORT is required; {usage}"))?;
        let file = file.ok_or_else(|| {
            format!("-w FILE is required (to stream a capture back, use `freeway capture --ctl`); {usage}")
        })?;
        let path = std::path::PathBuf::from(file);
        if !path.is_absolute() {
            return Err(format!(
                "-w {file}: an absolute path, please (the datapath writes it, from its own directory)"
            ));
        }
        let p = self.port_index(port)?;
        let direction = direction(dir).map_err(|e| format!("-Q {e}"))?;
        if !(1..=262_144).contains(&snap) {
            return Err(format!("-s {snap}: 1..=262144"));
        }
        freeway_capture::compile(&filter, snap).map_err(|e| format!("filter: {e}"))?;
        let pcapng = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("pcapng"));
        let spec = crate::config::capture::TapSpec {
            port: p as u16,
            direction,
            filter,
            snaplen: snap,
            write: Some(path.clone()),
            pcapng,
            count,
            text: false,
        };
        let f = std::fs::File::create(&path).map_err(|e| format!("-w {}: {e}", path.display()))?;
        let t = (self.attach)(&spec, Box::new(std::io::BufWriter::new(f))).map_err(|e| e.to_string())?;
        let id = t.id();
        self.captures.push(t);
        Ok((
            format!(
                "tap {id} writing {} (stop it with `freeway ctl capture stop {id}`)\n",
                path.display()
            ),
            json!({"id": id, "output": path}),
        ))
    }

    fn client(&mut self, s: UnixStream) {
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
        let req = read_request(&s);
        if let Ok(w) = &req {
            if w.first().map(String::as_str) == Some("capture")
                && !matches!(w.get(1).map(String::as_str), Some("start" | "list" | "stop") | None)
            {
                return self.capture(&w[1..], s);
            }
        }
        let reply = match req {
            Ok(words) => {
                let r = self.handle(&words);
                log_request(&words, r.as_ref().err());
                match r {
                    Ok((text, data)) => json!({"ok": true, "text": text, "data": data}),
                    Err(e) => json!({"ok": false, "error": e}),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "control request refused");
                json!({"ok": false, "error": e})
            }
        };
        let mut w = s;
        let _ = w.write_all(format!("{reply}\n").as_bytes());
    }

    fn handle(&mut self, words: &[String]) -> Result<(String, Value), String> {
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        match w.as_slice() {
            ["help"] | [] => Ok((HELP.to_string(), json!(HELP))),
            ["stats"] => {
                let s = self.snap.snap(self.start.elapsed());
                let mut text = String::new();
                for p in &s.ports {
                    text.push_str(&format!(
                        "{:<12} rx {} tx {} tx_dropped {}\n",
                        p.name, p.rx_packets, p.tx_packets, p.tx_dropped
                    ));
                }
                for w in &s.workers {
                    text.push_str(&format!(
                        "worker {} packets {} batches {}\n",
                        w.id, w.packets, w.batches
                    ));
                }
                let d: Vec<String> = s.drops().iter().map(|(k, v)| format!("{k} {v}")).collect();
                text.push_str(&format!(
                    "drops: {}\n",
                    if d.is_empty() { "none".into() } else { d.join(", ") }
                ));
                Ok((text, serde_json::to_value(&s).map_err(|e| e.to_string())?))
            }
            ["fdb", "add", mac, "dev", port, rest @ ..] => {
                let mac: Mac = mac.parse().map_err(|e| format!("{mac:?}: {e}"))?;
                let p = self
                    .port_names
                    .iter()
                    .position(|n| n == port)
                    .filter(|&i| i < self.nports)
                    .ok_or_else(|| format!("dev {port:?}: no such port"))?;
                let vlan = match rest {
                    [] => match &self.port_vlans[p] {
                        PortVlan::Access(v) => *v,
                        PortVlan::Trunk { native: Some(v), .. } => *v,
                        PortVlan::Trunk { .. } => return Err(format!("dev {port}: a trunk port: say which vlan")),
                    },
                    ["vlan", v] => v.parse().map_err(|_| format!("vlan {v:?}: not a number"))?,
                    _ => return Err("fdb add MAC dev PORT [vlan N]".into()),
                };
                if !self.port_vlans[p].is_member(vlan) {
                    return Err(format!("dev {port} is not a member of vlan {vlan}"));
                }
                ask(&self.fdb_ops, FdbOp::Add(mac, vlan, p as u16))
            }
            ["fdb", "del", mac, rest @ ..] => {
                let mac: Mac = mac.parse().map_err(|e| format!("{mac:?}: {e}"))?;
                let vlan = match rest {
                    [] => 1,
                    ["vlan", v] => v.parse().map_err(|_| format!("vlan {v:?}: not a number"))?,
                    _ => return Err("fdb del MAC [vlan N]".into()),
                };
                ask(&self.fdb_ops, FdbOp::Del(mac, vlan))
            }
            ["fdb", "flush"] => ask(&self.fdb_ops, FdbOp::Flush),
            ["neigh", "add", ip, "lladdr", mac, "dev", dev] => {
                let (_, ifs, _) = self.rib.as_ref().ok_or(NO_ROUTER)?;
                let ip: IpAddr = ip.parse().map_err(|_| format!("{ip:?}: not an address"))?;
                let mac: Mac = mac.parse().map_err(|e| format!("{mac:?}: {e}"))?;
                let i = ifs
                    .by_name(dev)
                    .ok_or_else(|| format!("dev {dev:?}: no such interface"))?;
                ask(&self.neigh_ops, NeighOp::Add(ip, i, mac.0))
            }
            ["neigh", "del", ip, "dev", dev] => {
                let (_, ifs, _) = self.rib.as_ref().ok_or(NO_ROUTER)?;
                let ip: IpAddr = ip.parse().map_err(|_| format!("{ip:?}: not an address"))?;
                let i = ifs
                    .by_name(dev)
                    .ok_or_else(|| format!("dev {dev:?}: no such interface"))?;
                ask(&self.neigh_ops, NeighOp::Del(ip, i))
            }
            ["neigh", "flush", rest @ ..] => {
                let (_, ifs, _) = self.rib.as_ref().ok_or(NO_ROUTER)?;
                let i = match rest {
                    [] => None,
                    ["dev", d] => Some(ifs.by_name(d).ok_or_else(|| format!("dev {d:?}: no such interface"))?),
                    _ => return Err("neigh flush [dev IFACE]".into()),
                };
                ask(&self.neigh_ops, NeighOp::Flush(i))
            }
            ["fdb", "show"] | ["fdb"] => {
                let e = self.fdb.entries(self.clock.now());
                let rows = crate::report::fdb_json(&e, &self.port_names);
                let text: String = rows
                    .iter()
                    .map(|r| {
                        format!(
                            "{} dev {} vlan {}{}\n",
                            r.mac,
                            r.port,
                            r.vlan,
                            if r.is_static { " static" } else { "" }
                        )
                    })
                    .collect();
                Ok((text, serde_json::to_value(&rows).map_err(|e| e.to_string())?))
            }
            ["route", rest @ ..] => self.route(rest),
            ["capture", "list"] | ["capture"] => Ok(self.capture_list()),
            ["capture", "stop", id] => self.capture_stop(id),
            ["capture", "start", rest @ ..] => self.capture_start(rest),
            ["trace", rest @ ..] => {
                let (port, frame) = super::trace::frame_from_words(rest, &self.port_names, self.nports)?;
                let tables = super::trace::Tables {
                    bridge: &self.bridge,
                    fdb: &self.fdb,
                    port_names: &self.port_names,
                    port_vlans: &self.port_vlans,
                    nports: self.nports,
                    now: self.clock.now(),
                    ct: self.ct.as_ref(),
                    fw: self.fw.as_ref(),
                    zones: &self.zones,
                    router: match (&self.rib, &self.l3) {
                        (Some((rib, ifaces, neigh)), Some(l3)) => {
                            Some(super::trace::RouterView { rib, ifaces, neigh, l3 })
                        }
                        _ => None,
                    },
                };
                Ok(super::trace::render(&tables.trace(port, frame)))
            }
            ["neigh", "show"] | ["neigh"] => {
                let (_, ifs, n) = self.rib.as_ref().ok_or(NO_ROUTER)?;
                let e = n.entries(self.clock.now(), ifs);
                let text: String = e.iter().map(|x| format!("{x}\n")).collect();
                Ok((text, serde_json::to_value(&e).map_err(|e| e.to_string())?))
            }
            ["conntrack", "list"] | ["conntrack", "-L"] | ["conntrack"] => {
                let ct = self.ct.as_ref().ok_or(NO_CT)?;
                let d = ct.dump();
                let mut text: String = d.iter().map(|x| format!("{x}\n")).collect();
                text.push_str(&format!("{} flow entries have been shown.\n", d.len()));
                Ok((text, serde_json::to_value(&d).map_err(|e| e.to_string())?))
            }
            ["conntrack", "flush"] | ["conntrack", "-F"] => {
                let n = self.ct.as_ref().ok_or(NO_CT)?.flush();
                Ok((format!("{n} flow entries have been deleted.\n"), json!({"deleted": n})))
            }
            ["conntrack", "flush", "zone", z] => {
                let z: u16 = z.parse().map_err(|_| format!("zone {z:?}: not a number 0..=65535"))?;
                let n = self.ct.as_ref().ok_or(NO_CT)?.flush_zone(z);
                Ok((format!("{n} flow entries have been deleted.\n"), json!({"deleted": n})))
            }
            _ => Err(format!("unknown command {:?}; try `freeway ctl help`", words.join(" "))),
        }
    }

    /// Starts a capture streaming to `s` (see the module docs).
    fn capture(&mut self, w: &[String], mut s: UnixStream) {
        let r = (|| -> Result<super::capture::RunningTap, String> {
            let [port, dir, snap, count, format, filter] = w else {
                return Err("capture PORT in|out|inout SNAPLEN COUNT pcap|pcapng FILTER".into());
            };
            let p = self.port_index(port)?;
            let direction = direction(dir).map_err(|e| format!("direction {e}"))?;
            let snaplen: u32 = snap
                .parse()
                .ok()
                .filter(|v| (1..=262_144).contains(v))
                .ok_or_else(|| format!("snaplen {snap:?}: 1..=262144"))?;
            let count: u64 = count.parse().map_err(|_| format!("count {count:?}: not a number"))?;
            let pcapng = match format.as_str() {
                "pcap" => false,
                "pcapng" => true,
                f => return Err(format!("format {f:?}: pcap or pcapng")),
            };
            let spec = crate::config::capture::TapSpec {
                port: p as u16,
                direction,
                filter: filter.clone(),
                snaplen,
                write: None,
                pcapng,
                count: (count > 0).then_some(count),
                text: false,
            };
            freeway_capture::compile(filter, snaplen).map_err(|e| format!("filter: {e}"))?;
            // Everything is checked: the reply line goes first, then the writer (on a second
            // handle of the stream) writes the capture's header and packets.
            let out = s.try_clone().map_err(|e| e.to_string())?;
            let _ = out.set_write_timeout(Some(Duration::from_secs(5)));
            s.write_all(format!("{}\n", json!({"ok": true})).as_bytes())
                .map_err(|e| e.to_string())?;
            (self.attach)(&spec, Box::new(std::io::BufWriter::new(out))).map_err(|e| e.to_string())
        })();
        match r {
            Ok(t) => {
                tracing::info!(tap = t.id(), port = %t.desc().port, filter = %t.desc().filter, "capture streamed to a control client");
                self.captures.push(t)
            }
            // After an "ok" line (attach failed late) this reads as the end of the stream.
            Err(e) => {
                let _ = s.write_all(format!("{}\n", json!({"ok": false, "error": e})).as_bytes());
            }
        }
    }

    fn route(&mut self, w: &[&str]) -> Result<(String, Value), String> {
        let (rib, ifs, _) = self.rib.as_mut().ok_or(NO_ROUTER)?;
        let name = |i: u16| ifs.get(i).map_or_else(|| format!("if{i}"), |x| x.name.clone());
        match w {
            ["show"] | [] => Ok((
                rib.show(name).to_string(),
                serde_json::to_value(rib.records(name)).map_err(|e| e.to_string())?,
            )),
            ["add", dst, how @ ..] | ["replace", dst, how @ ..] => {
                let p = prefix(dst)?;
                let hops = match how {
                    ["via", gws] => gws
                        .split(',')
                        .map(|g| {
                            let ip: IpAddr = g.parse().map_err(|_| format!("via {g:?}: not an address"))?;
                            if ip.is_ipv4() != p.addr().is_ipv4() {
                                return Err(format!("via {ip}: not of the route's address family"));
                            }
                            let i = (0..ifs.len() as u16)
                                .find(|&i| {
                                    ifs.get(i).is_some_and(|x| match ip {
                                        IpAddr::V4(a) => x.v4_on_link(a),
                                        IpAddr::V6(a) => x.v6_on_link(a),
                                    })
                                })
                                .ok_or_else(|| format!("via {ip}: on no interface's subnet"))?;
                            Ok(NextHop::via(ip, i))
                        })
                        .collect::<Result<Vec<_>, String>>()?,
                    ["dev", d] => vec![NextHop::connected(
                        ifs.by_name(d).ok_or_else(|| format!("dev {d:?}: no such interface"))?,
                    )],
                    _ => return Err("route add PREFIX via GW[,GW...] | route add PREFIX dev IFACE".into()),
                };
                let r = Route::new(p, hops);
                let res = if w[0] == "add" { rib.add(r) } else { rib.replace(r) };
                res.map_err(|e| e.to_string())?;
                Ok((String::new(), json!({"generation": rib.generation()})))
            }
            ["del", dst] | ["delete", dst] => {
                let p = prefix(dst)?;
                rib.delete(p).map_err(|e| e.to_string())?;
                Ok((String::new(), json!({"generation": rib.generation()})))
            }
            _ => Err("route show | route add PREFIX (via GW[,GW...] | dev IFACE) | route del PREFIX".into()),
        }
    }
}

/// Logs a control request: changes at `info`, reads at `debug`, refusals at `warn`.
fn log_request(words: &[String], err: Option<&String>) {
    let request = words.join(" ");
    let change = words.iter().skip(1).take(1).any(|w| {
        matches!(
            w.as_str(),
            "add" | "del" | "delete" | "replace" | "flush" | "-F" | "start" | "stop"
        )
    });
    match err {
        Some(e) => tracing::warn!(%request, error = %e, "control request refused"),
        None if change => tracing::info!(%request, "control request applied"),
        None => tracing::debug!(%request, "control request answered"),
    }
}

const NO_ROUTER: &str = "this datapath has no router (no [[interface]] in its config)";
const NO_CT: &str = "this datapath does not track connections (no [conntrack] or [firewall])";

/// What `freeway ctl help` prints.
pub const HELP: &str = "\
stats                                   counters of ports, workers and drops
fdb show                                the forwarding database
fdb add MAC dev PORT [vlan N]           a static entry (default: the port's access/native VLAN)
fdb del MAC [vlan N]                    delete an entry (default vlan 1)
fdb flush                               delete the learned entries
route show                              the routing table
route add PREFIX via GW[,GW...]         add a route (several gateways: ECMP)
route add PREFIX dev IFACE              add a directly connected route
route replace PREFIX ...                add or replace
route del PREFIX                        delete a route
neigh show                              the neighbour table
neigh add IP lladdr MAC dev IFACE       a permanent neighbour
neigh del IP dev IFACE                  delete a neighbour
neigh flush [dev IFACE]                 delete the dynamic neighbours
conntrack list                          the connection table
conntrack flush [zone N]                delete connections
capture list                            the capture taps (config and started here)
capture start -i PORT [-Q in|out|inout] [-s SNAPLEN] [-c COUNT] -w /ABS/FILE [FILTER...]
                                        a tap writing a pcap (.pcapng: pcapng) file
capture stop ID                         detach a tap (its file is completed)
trace in_port=PORT FIELD...             what the datapath does with one packet, stage by stage
                                        (nothing is sent or changed). Fields, OVS style:
                                        dl_src= dl_dst= dl_vlan= ip|ipv6|arp nw_src= nw_dst=
                                        tcp|udp|icmp tp_src= tp_dst= tcp_flags=syn|ack|fin|rst
                                        nw_ttl= len= arp_spa= arp_tpa=, or hex=FRAME
";

/// A capture direction as tcpdump's `-Q` names it.
fn direction(d: &str) -> Result<crate::config::capture::Direction, String> {
    use crate::config::capture::Direction;
    match d {
        "in" => Ok(Direction::In),
        "out" => Ok(Direction::Out),
        "inout" => Ok(Direction::Inout),
        d => Err(format!("{d:?}: in, out or inout")),
    }
}

fn prefix(s: &str) -> Result<Prefix, String> {
    let (a, l) = crate::config::l3::parse_prefix(if s == "default" { "0.0.0.0/0" } else { s }, false)?;
    Prefix::new(a, l).map_err(|e| e.to_string())
}

fn read_request(s: &UnixStream) -> Result<Vec<String>, String> {
    let mut line = Vec::new();
    BufReader::new(s.take(MAX_REQUEST as u64 + 1))
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("reading the request: {e}"))?;
    decode_request(&line)
}

/// Decodes one request line (the bytes up to and including the first newline, at most
/// [`MAX_REQUEST`] + 1 of them): a JSON array of words. Never panics on any input.
pub fn decode_request(line: &[u8]) -> Result<Vec<String>, String> {
    if line.len() > MAX_REQUEST {
        return Err(format!("request longer than {MAX_REQUEST} bytes"));
    }
    let words = serde_json::from_slice::<Vec<String>>(line)
        .map_err(|e| format!("malformed request (a JSON array of words expected): {e}"))?;
    if words.len() > 64 || words.iter().any(|w| w.len() > 4096) {
        return Err("request with too many or too long words".into());
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reported_as_not_done_is_never_applied_later() {
        let (q, rx) = bounded::<Op<u32>>(4);
        let q = Some(q);
        // No writer drains in time: the asker gives up and says nothing was done ...
        let e = ask(&q, 7).unwrap_err();
        assert!(e.contains("nothing done"), "{e}");
        // ... and the writer, coming late, skips it.
        let mut applied = Vec::new();
        assert_eq!(
            drain(&rx, |x| {
                applied.push(x);
                Ok(String::new())
            }),
            0
        );
        assert!(applied.is_empty());

        // A writer that answers: the request is applied once and its answer returned.
        let w = std::thread::spawn(move || loop {
            if drain(&rx, |x| Ok(format!("applied {x}\n"))) > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        });
        assert_eq!(ask(&q, 9).unwrap().0, "applied 9\n");
        w.join().unwrap();
    }
}
