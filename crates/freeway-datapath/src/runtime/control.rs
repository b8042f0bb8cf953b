//! The control socket: `freeway run --ctl PATH` listens on a Unix stream socket (mode 0600)
//! and `freeway ctl` talks to it.
//!
//! # Protocol
//!
//! One request per connection, one reply: typed JSON lines, see [`protocol`]. `freeway ctl`
//! builds its requests from its command line ([`cli`]); the commands are listed in [`HELP`].
//! A `capture` request's reply is followed, on the same connection, by the capture itself
//! (pcap or pcapng) until its count is reached or the client goes away (which detaches the
//! tap).
//!
//! # Threads
//!
//! * **The control thread** (`fw-ctl`) owns the RIB while the datapath runs and answers the
//!   requests one at a time, from a queue: route changes publish a new FIB version that
//!   workers pick up at their next lookup (their caches refill by generation); it never takes
//!   a lock a worker could wait on. FDB and neighbour changes go to the tables' own writer
//!   threads (`fw-fdb`, `fw-neigh`: each table has one writer) through a channel, with the
//!   answer coming back on another; in offline runs the worker owns those writers and the
//!   socket refuses such changes. It never reads from or waits on a client: a reply is handed
//!   back as a string.
//! * **The acceptor** (`fw-ctl-accept`) accepts connections. At most [`MAX_CLIENTS`] are
//!   served at once; one more gets a `busy` error at once (counted) and is closed.
//! * **One client thread per connection** (`fw-ctl-client`) reads the request line, which
//!   must arrive whole within [`REQUEST_DEADLINE`] of the connection (a client that trickles
//!   or sends nothing gets a `timeout` error and is closed, counted), decodes it, queues it
//!   for the control thread, and writes the reply, which must be taken within
//!   [`REPLY_DEADLINE`] (a client that does not read is dropped, counted and logged).
//!
//! So a slow, idle or non-reading client holds only its own thread: the control thread and
//! the other clients go on. The socket's counters are `freeway ctl clients`.
//!
//! The socket file is created by [`bind`] only where nothing is (or a stale socket whose
//! server is gone: connecting is refused); anything else there (a file, a directory, a live
//! socket) is left alone and the run refused. At exit the file is removed only if it is
//! still the socket this run created (same device and inode).

pub mod access;
pub mod cli;
pub mod events;
mod ifaces;
mod lan;
mod nft;
pub mod protocol;
pub mod rates;
mod reload;
pub mod stream;

use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use freeway_bridge::{Fdb, FdbWriter, Layout, Mac, PortVlan};
use freeway_conntrack::Conntrack;
use freeway_l3::neigh::NeighWriter;
use freeway_l3::{Interfaces, Neigh};
use freeway_route::{NextHop, Prefix, Rib, Route, RouteError, RouteKind};
use freeway_sync::Clock;
use freeway_sync::Tick;
use serde_json::{json, Value};

pub use protocol::{CtlError, Reply, Request, MAX_REQUEST};
use protocol::{Hops, Response, TapOptions};

use super::{RunError, Snapper};

/// A change for the FDB's writer thread.
pub(crate) enum FdbOp {
    /// A static entry (MAC, VLAN, port).
    Add(Mac, u16, u16),
    /// Delete the entry for (MAC, VLAN).
    Del(Mac, u16),
    /// Delete every learned entry.
    Flush,
    /// A port removed for good: delete its entries (static ones too) and refuse learning
    /// on it from now on.
    Retire(u16),
}

/// A change for the neighbour table's writer thread.
pub(crate) enum NeighOp {
    /// A permanent entry (address, interface, MAC).
    Add(IpAddr, u16, [u8; 6]),
    /// Delete the entry for (address, interface).
    Del(IpAddr, u16),
    /// Delete the dynamic entries (of one interface).
    Flush(Option<u16>),
    /// Delete every entry of one interface, permanent ones included, and ignore the workers'
    /// later updates about it (a reload removed it).
    Purge(u16),
}

/// A request to a writer thread, where its answer goes, and its claim word ([`PENDING`],
/// [`TAKEN`], [`CANCELLED`]): the writer applies a request only if it moves the word from
/// pending to taken, and the asker gives up only if it moves it from pending to cancelled, so
/// a request the asker reported as not done is never applied later.
pub(crate) type Op<T> = (T, Sender<Result<String, CtlError>>, Arc<AtomicU8>);

/// Waiting in the queue.
const PENDING: u8 = 0;
/// Being applied by the writer (the answer will come).
const TAKEN: u8 = 1;
/// Given up by the asker (the writer skips it).
const CANCELLED: u8 = 2;

/// Answers every request waiting in `rx` with `apply` (a table's writer thread, between its
/// rounds), skipping those their asker gave up on. Returns how many were applied.
fn drain<T>(rx: &Receiver<Op<T>>, mut apply: impl FnMut(T) -> Result<String, CtlError>) -> usize {
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
        FdbOp::Add(mac, vlan, port) => w.add_static(mac, vlan, port, now).map(|_| String::new()).map_err(|e| {
            use freeway_bridge::FdbError as E;
            match e {
                E::StaticLimit | E::LearnLimit => CtlError::Conflict(e.to_string()),
                E::MulticastAddress(_) | E::BadVlan(_) => CtlError::Invalid(e.to_string()),
            }
        }),
        FdbOp::Del(mac, vlan) if w.delete(mac, vlan) => Ok(String::new()),
        FdbOp::Del(mac, vlan) => Err(CtlError::NotFound(format!("no entry for {mac} vlan {vlan}"))),
        FdbOp::Flush => Ok(format!("{} entries flushed\n", w.flush(false))),
        FdbOp::Retire(port) => Ok(format!("{} entries flushed\n", w.retire_port(port))),
    })
}

/// Applies the neighbour changes waiting in `rx` (the neighbour writer thread).
pub(crate) fn apply_neigh(w: &mut NeighWriter, rx: &Receiver<Op<NeighOp>>, now: Tick) -> usize {
    drain(rx, |op| match op {
        NeighOp::Add(ip, iface, mac) => w.add_static(ip, iface, mac, now).map(|_| String::new()).map_err(|e| {
            use freeway_l3::neigh::NeighError as E;
            match e {
                E::StaticLimit => CtlError::Conflict(e.to_string()),
                E::BadMac(_) | E::BadAddress(_) => CtlError::Invalid(e.to_string()),
            }
        }),
        NeighOp::Del(ip, iface) if w.delete(ip, iface) => Ok(String::new()),
        NeighOp::Del(ip, _) => Err(CtlError::NotFound(format!("no neighbour {ip} on that interface"))),
        NeighOp::Flush(iface) => Ok(format!("{} entries flushed\n", w.flush(iface, false))),
        NeighOp::Purge(iface) => Ok(format!("{} entries deleted\n", w.retire(iface))),
    })
}

/// How long after connecting a client may take to send its whole request line.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long a client may take to read its whole reply.
pub const REPLY_DEADLINE: Duration = Duration::from_secs(5);
/// Most clients served at once (those beyond get a `busy` error at once).
pub const MAX_CLIENTS: usize = 16;

/// The control socket's own counters (`freeway ctl clients`).
#[derive(Debug, Default)]
pub(crate) struct ClientStats {
    /// Clients being served now.
    active: AtomicU64,
    /// Requests answered (whatever the answer).
    answered: AtomicU64,
    /// Clients refused because [`MAX_CLIENTS`] were being served.
    busy: AtomicU64,
    /// Clients whose request did not arrive whole within [`REQUEST_DEADLINE`].
    timed_out: AtomicU64,
    /// Clients dropped because they did not read their reply within [`REPLY_DEADLINE`].
    dropped: AtomicU64,
    /// Clients or requests refused because the user may not send them (see [`access`]).
    forbidden: AtomicU64,
}

impl ClientStats {
    fn reply(&self) -> Reply {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (active, answered, busy, timed_out, dropped, forbidden) = (
            g(&self.active),
            g(&self.answered),
            g(&self.busy),
            g(&self.timed_out),
            g(&self.dropped),
            g(&self.forbidden),
        );
        Reply::new(
            format!(
                "clients: {active} active (at most {MAX_CLIENTS}), {answered} answered, {busy} refused busy, \
                 {timed_out} timed out sending, {dropped} dropped not reading, {forbidden} forbidden\n"
            ),
            json!({"active": active, "max": MAX_CLIENTS, "answered": answered, "busy": busy,
                   "timed_out": timed_out, "dropped": dropped, "forbidden": forbidden}),
        )
    }
}

/// What the control thread works on.
pub(crate) struct Control<L: Layout> {
    pub snap: Snapper<L>,
    /// The counters sampled about once a second, for the rates of `stats`.
    pub rates: rates::RateSampler,
    /// What of the configuration the run applied last can change live (for `reload`).
    pub live: reload::Live,
    /// The file the run was started with (the default of `reload`).
    pub config_path: Option<std::path::PathBuf>,
    /// Configurations read again on `SIGHUP` by the run's main thread, to apply here.
    pub reloads: Option<crossbeam_channel::Receiver<crate::config::Checked>>,
    pub start: Instant,
    pub clock: Clock,
    pub fdb: Fdb<L>,
    /// The bridge (for traces, which run its real stage read-only).
    pub bridge: Arc<freeway_bridge::Bridge<L>>,
    pub port_names: Vec<String>,
    /// The RIB and the interfaces (with a router).
    pub rib: Option<(Rib, Arc<Interfaces>, Neigh)>,
    /// Where new interfaces are published to the workers (with a router).
    pub ifaces_live: Option<Arc<freeway_l3::LiveInterfaces>>,
    /// The router interfaces' kernel twins (`[linux] punt`), which take their new addresses.
    pub twins: Option<Arc<freeway_linuxcp::Twins>>,
    pub ct: Option<Conntrack>,
    /// The bridge ports' VLAN membership (static FDB entries are checked against it).
    pub port_vlans: Vec<PortVlan>,
    /// The ports configured at start (the router's internal port, if any, has this index;
    /// ports a reload adds come after it).
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
    pub ended: Vec<Ended>,
    /// The firewall's policy (for traces).
    pub fw: Option<freeway_conntrack::Firewall>,
    /// The nftables firewall (with a ruleset).
    pub nft: Option<super::firewall::FirewallShared>,
    /// Conntrack zone of each port (for traces).
    pub zones: Arc<[u16]>,
    /// The L3 stage's settings (for traces).
    pub l3: Option<freeway_l3::L3Config>,
    /// The ports' live MTUs.
    pub mtus: Arc<super::mtu::PortMtus>,
    /// The kernel route mirror's changes (with `[linux] mirror`).
    pub linux: Option<super::linux::LinuxFeed>,
    /// Adds a reload's new ports to the running workers (none where the run cannot).
    pub adder: Option<super::portset::Adder>,
}

/// A capture that ended: its id, what it was, how it ended, its final counters.
pub(crate) type Ended = (
    freeway_capture::TapId,
    super::capture::TapDesc,
    String,
    Option<freeway_capture::TapStats>,
);

/// Attaches a tap, with its writer thread, writing to a stream.
pub(crate) type Attach = Box<
    dyn Fn(&crate::config::capture::TapSpec, Box<dyn Write + Send>) -> Result<super::capture::RunningTap, RunError>
        + Send,
>;

/// How long the control thread waits for a table's writer.
const WRITER_WAIT: Duration = Duration::from_secs(2);

/// Sends `op` to a writer thread and waits (bounded) for its answer. A request that is not
/// taken in time is withdrawn, so "did not answer" always means "not done".
fn ask<T>(q: &Option<Sender<Op<T>>>, op: T) -> Result<Reply, CtlError> {
    let q = q.as_ref().ok_or_else(|| {
        CtlError::Unavailable("this run's tables are written by its worker (offline pcap run): no live changes".into())
    })?;
    let (tx, rx) = bounded(1);
    let claim = Arc::new(AtomicU8::new(PENDING));
    q.send_timeout((op, tx, claim.clone()), WRITER_WAIT)
        .map_err(|e| match e {
            crossbeam_channel::SendTimeoutError::Timeout(_) => {
                CtlError::Busy("the table's writer is busy: nothing done, try again".into())
            }
            crossbeam_channel::SendTimeoutError::Disconnected(_) => {
                CtlError::Unavailable("the table's writer has stopped".into())
            }
        })?;
    let text = match rx.recv_timeout(WRITER_WAIT) {
        Ok(r) => r?,
        Err(_) => {
            if claim
                .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Err(CtlError::Busy(
                    "the table's writer did not take the request in time: nothing done, try again".into(),
                ));
            }
            // The writer took it: the answer is on its way.
            rx.recv()
                .map_err(|_| CtlError::Failed("the table's writer stopped while applying the request".into()))??
        }
    };
    Ok(Reply::new(text, Value::Null))
}

/// The control socket's listener: removes its socket file when dropped, if the file is still
/// the socket it created.
pub(crate) struct Listener {
    listener: UnixListener,
    path: PathBuf,
    /// Who may use it.
    access: Arc<access::Access>,
    /// The user the datapath runs as (always admitted).
    owner: u32,
    /// Device and inode of the socket file this listener created.
    id: (u64, u64),
}

impl Drop for Listener {
    fn drop(&mut self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.file_type().is_socket() && (m.dev(), m.ino()) == self.id => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the control socket");
                }
            }
            Ok(_) => tracing::warn!(
                path = %self.path.display(),
                "the control socket file was replaced while running: left alone"
            ),
            Err(_) => {}
        }
    }
}

/// Binds `path` with mode 0600. Only a stale socket (one nobody listens on: connecting is
/// refused) is replaced; a live socket, a file, a directory or anything else there is left
/// alone and refused.
pub(crate) fn bind(path: &Path, access: &access::Access) -> Result<Listener, RunError> {
    let e = |m: String| RunError(format!("control socket {}: {m}", path.display()));
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => return Err(e("another freeway (or another program) is listening there".into())),
            Err(x) if x.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing a stale control socket");
                std::fs::remove_file(path).map_err(|x| e(format!("cannot remove the stale socket: {x}")))?;
            }
            Err(x) => return Err(e(format!("a socket is there and cannot be checked ({x}): left alone"))),
        },
        Ok(m) => {
            let what = if m.is_dir() {
                "a directory"
            } else if m.file_type().is_symlink() {
                "a symbolic link"
            } else if m.is_file() {
                "a regular file"
            } else {
                "not a socket"
            };
            return Err(e(format!(
                "{what} is there, not a socket: left alone (remove it or choose another path)"
            )));
        }
        Err(x) if x.kind() == std::io::ErrorKind::NotFound => {}
        Err(x) => return Err(e(x.to_string())),
    }
    // Bound under a private name, made 0600, then renamed into place: the socket never
    // appears at `path` with looser permissions, and a client that finds it can connect.
    // The private name is unique per bind (process id and a counter), so two datapaths of one
    // process binding in one directory at once never take each other's name.
    static BINDS: AtomicU64 = AtomicU64::new(0);
    let tmp = path.with_file_name(format!(
        ".fw-ctl-{}-{}.tmp",
        std::process::id(),
        BINDS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&tmp);
    let l = UnixListener::bind(&tmp).map_err(|x| e(x.to_string()))?;
    let group = access.group.as_ref().map(|g| g.gid);
    let placed = std::os::unix::fs::chown(&tmp, None, group)
        .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(access.mode())))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(x) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e(x.to_string()));
    }
    let m = std::fs::symlink_metadata(path).map_err(|x| e(x.to_string()))?;
    let listener = Listener {
        listener: l,
        path: path.to_path_buf(),
        access: Arc::new(access.clone()),
        // SAFETY: geteuid cannot fail and has no preconditions.
        owner: unsafe { libc::geteuid() },
        id: (m.dev(), m.ino()),
    };
    listener.listener.set_nonblocking(true).map_err(|x| e(x.to_string()))?;
    Ok(listener)
}

/// How long the idle control thread waits for a request (one wakes it at once) before it
/// looks at what has no wake-up of its own: a SIGHUP reload, the rates' sample, captures whose
/// client left or that ended. Also how long the acceptor sleeps in `poll()` on the socket (a
/// client wakes it at once) before it looks at the stop flag. Ten wake-ups a second each.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How long the acceptor waits after an `accept` error other than "no client yet".
const ACCEPT_ERROR_NAP: Duration = Duration::from_millis(10);

/// A request handed to the control thread, with where its answer goes. A `capture` request
/// carries its connection (the capture is streamed on it); its answer is `None` when the
/// control thread has answered on the connection itself.
struct Job {
    request: Request,
    stream: Option<UnixStream>,
    answer: Sender<Option<Result<Reply, CtlError>>>,
}

/// Serves requests until `stop` is set; returns the state (with the RIB) for the final dumps.
/// The socket file is removed (if still ours) when this returns.
/// Without a socket (`l` is `None`: the thread runs only to own the RIB for the kernel route
/// mirror), there is no acceptor and only the mirror's changes arrive.
pub(crate) fn serve<L: Layout>(l: Option<Listener>, mut c: Control<L>, stop: Arc<AtomicBool>) -> Control<L> {
    let stats = Arc::new(ClientStats::default());
    let (jobs_tx, jobs) = bounded::<Job>(MAX_CLIENTS);
    // Without an acceptor the sender stays here, so `jobs` never reads as disconnected.
    let mut idle_sender = None;
    let acceptor = match l {
        None => {
            idle_sender = Some(jobs_tx);
            None
        }
        Some(l) => {
            let (stats, stop) = (stats.clone(), stop.clone());
            let spawned = std::thread::Builder::new().name("fw-ctl-accept".into()).spawn(move || {
                accept_loop(&l, &jobs_tx, &stats, &stop);
                l
            });
            match spawned {
                Ok(h) => Some(h),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the control socket's acceptor: no control socket");
                    None
                }
            }
        }
    };
    let mut mirror = c.linux.as_ref().map(|f| f.rx.clone());
    // `conntrack -E` subscribers: their own threads (see `events`).
    let mut event_streams: Vec<events::EventStream> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if let Some(new) = c.reloads.as_ref().and_then(|r| r.try_recv().ok()) {
            let (applied, restart) = c.apply_reload(&new, false);
            let text = reload::report(false, &applied, &restart);
            tracing::info!(
                changes = applied.len(),
                "SIGHUP reload: {}",
                text.trim_end().replace('\n', "; ")
            );
        }
        let now = Instant::now();
        if c.rates.due(now) {
            let s = c.snap.snap(c.start.elapsed());
            c.rates.push(now, &s);
        }
        let job = match &mirror {
            None => jobs.recv_timeout(IDLE_POLL).ok(),
            Some(m) => crossbeam_channel::select! {
                recv(jobs) -> j => j.ok(),
                recv(m) -> changes => {
                    match changes {
                        Ok(ch) => c.apply_linux(ch),
                        // The mirror stopped (its error is logged): the socket goes on.
                        Err(_) => mirror = None,
                    }
                    None
                }
                default(IDLE_POLL) => None,
            },
        };
        if let Some(job) = job {
            let answer = match (job.request, job.stream) {
                (Request::ConntrackEvents { filter }, Some(s)) => {
                    event_streams.retain(|e| !e.is_finished());
                    events::start(c.ct.as_ref(), filter, s, event_streams.len(), REPLY_DEADLINE)
                        .map(|e| event_streams.push(e))
                        .err()
                        .map(Err)
                }
                (request, stream) => c.job(request, stream, &stats),
            };
            let _ = job.answer.send(answer);
        }
        // A client that hung up (or asked for the end) ends its capture: the writer
        // finishes the stream once the tap is detached.
        for t in &mut c.captures {
            if t.client_gone() {
                (c.detach)(t.id());
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
    if let Some(f) = &c.linux {
        tracing::info!(applied = ?f.applied, "linux mirror: what became of the kernel's routes");
    }
    // Requests still queued are answered: the datapath is stopping.
    drop(jobs);
    drop(idle_sender);
    for e in event_streams {
        e.end();
    }
    // The datapath stops: end the captures, so their clients see the end of the stream.
    for t in std::mem::take(&mut c.captures) {
        (c.detach)(t.id());
        let _ = t.join();
    }
    if let Some(h) = acceptor {
        // Dropping the listener removes the socket file.
        drop(h.join());
    }
    c
}

/// Sleeps until `fd` is readable (a listening socket: a client waits) or `timeout` passes.
fn wait_readable(fd: &impl std::os::fd::AsRawFd, timeout: Duration) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is one live, writable `pollfd` for the whole call; the kernel writes only its
    // `revents`. The descriptor is borrowed from `fd`, live for the call. An error (a signal)
    // only ends the wait early.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// The acceptor: hands each connection to a client thread, at most [`MAX_CLIENTS`] at once.
fn accept_loop(l: &Listener, jobs: &Sender<Job>, stats: &Arc<ClientStats>, stop: &AtomicBool) {
    // While nobody calls, sleep in `poll()` on the listening socket: a client wakes it at once.
    while !stop.load(Ordering::Relaxed) {
        let s = match l.listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_readable(&l.listener, IDLE_POLL);
                continue;
            }
            Err(_) => {
                std::thread::sleep(ACCEPT_ERROR_NAP);
                continue;
            }
        };
        let connected = Instant::now();
        let peer = match access::Peer::of(&s) {
            Ok(p) if l.access.admits(&p, l.owner) => p,
            who => {
                refuse_forbidden(s, who, stats);
                continue;
            }
        };
        if stats.active.load(Ordering::Relaxed) >= MAX_CLIENTS as u64 {
            refuse_busy(s, stats);
            continue;
        }
        stats.active.fetch_add(1, Ordering::Relaxed);
        let (jobs, st) = (jobs.clone(), stats.clone());
        let who = Who {
            peer,
            owner: l.owner,
            access: l.access.clone(),
        };
        let spawned = std::thread::Builder::new().name("fw-ctl-client".into()).spawn(move || {
            client(s, connected, &who, &jobs, &st);
            st.active.fetch_sub(1, Ordering::Relaxed);
        });
        if let Err(e) = spawned {
            stats.active.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "cannot start a control client thread");
        }
    }
}

/// A connected client's credentials and the rules they are checked against.
struct Who {
    peer: access::Peer,
    owner: u32,
    access: Arc<access::Access>,
}

/// Tells a client that may not use the socket so (a short line into an empty socket buffer:
/// never waits) and closes it; counted and logged.
fn refuse_forbidden(s: UnixStream, who: std::io::Result<access::Peer>, stats: &ClientStats) {
    let n = stats.forbidden.fetch_add(1, Ordering::Relaxed) + 1;
    let why = match &who {
        Ok(p) => format!("user {} (group {}) is not allowed on this control socket", p.uid, p.gid),
        Err(e) => format!("the client's credentials cannot be read: {e}"),
    };
    tracing::warn!(refused = n, "control client refused: {why}");
    let _ = s.set_nonblocking(true);
    let _ = (&s).write_all(Response::line(Err(CtlError::Forbidden(why))).as_bytes());
}

/// Tells a client over the limit that the socket is busy (a short line into an empty socket
/// buffer: never waits) and closes it.
fn refuse_busy(s: UnixStream, stats: &ClientStats) {
    let n = stats.busy.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::warn!(
        refused = n,
        max = MAX_CLIENTS,
        "control client refused: too many clients"
    );
    let _ = s.set_nonblocking(true);
    let line = Response::line(Err(CtlError::Busy(format!(
        "the control socket is busy ({MAX_CLIENTS} clients being served): nothing done, try again"
    ))));
    let _ = (&s).write_all(line.as_bytes());
}

/// Reads the request line: whole within `deadline`, at most [`MAX_REQUEST`] + 1 bytes (a longer
/// line is refused when that much has come).
fn read_request(s: &UnixStream, deadline: Instant) -> Result<Vec<u8>, CtlError> {
    let mut line = Vec::with_capacity(256);
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(CtlError::Timeout(format!(
                "the request did not arrive whole within {} s of connecting",
                REQUEST_DEADLINE.as_secs()
            )));
        }
        s.set_read_timeout(Some(left))
            .map_err(|e| CtlError::Failed(format!("reading the request: {e}")))?;
        match (&*s).read(&mut buf) {
            Ok(0) => return Ok(line),
            Ok(n) => {
                let chunk = &buf[..n];
                if let Some(i) = chunk.iter().position(|&b| b == b'\n') {
                    line.extend_from_slice(&chunk[..=i]);
                    return Ok(line);
                }
                line.extend_from_slice(chunk);
                if line.len() > MAX_REQUEST {
                    return Ok(line);
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CtlError::Failed(format!("reading the request: {e}"))),
        }
    }
}

/// Writes `bytes` whole within `deadline`; false if the client did not take them in time (or
/// went away).
fn write_within(s: &UnixStream, bytes: &[u8], deadline: Instant) -> bool {
    let mut rest = bytes;
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_write_timeout(Some(left)).is_err() {
            return false;
        }
        match (&*s).write(rest) {
            Ok(0) => return false,
            Ok(n) => rest = &rest[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Queues a decoded request for the control thread and waits for its answer (`None`: the
/// answer went on the connection itself, a capture stream).
fn submit(request: Request, s: &UnixStream, jobs: &Sender<Job>) -> Option<Result<Reply, CtlError>> {
    let stream = match &request {
        Request::Capture(_) | Request::ConntrackEvents { .. } => s.try_clone().ok(),
        _ => None,
    };
    let (tx, rx) = bounded(1);
    let gone = || CtlError::Unavailable("the datapath is stopping".into());
    match jobs.send(Job {
        request,
        stream,
        answer: tx,
    }) {
        Ok(()) => rx.recv().unwrap_or_else(|_| Some(Err(gone()))),
        Err(_) => Some(Err(gone())),
    }
}

/// Serves one connection (a client thread): request in, reply out, each with its deadline.
fn client(s: UnixStream, connected: Instant, who: &Who, jobs: &Sender<Job>, stats: &ClientStats) {
    let _ = s.set_nonblocking(false);
    let answer = match read_request(&s, connected + REQUEST_DEADLINE) {
        Err(e) => {
            if let CtlError::Timeout(_) = e {
                let n = stats.timed_out.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(timed_out = n, error = %e, "control client timed out sending its request");
            } else {
                tracing::warn!(error = %e, "control request refused");
            }
            Some(Err(e))
        }
        Ok(line) => match protocol::decode_request(&line) {
            Err(e) => {
                tracing::warn!(error = %e, kind = e.kind(), "control request refused");
                Some(Err(e))
            }
            Ok(request) => match who.access.check(&who.peer, who.owner, &request) {
                Err(e) => {
                    stats.forbidden.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "control request refused");
                    Some(Err(CtlError::Forbidden(e)))
                }
                Ok(()) => submit(request, &s, jobs),
            },
        },
    };
    let Some(answer) = answer else {
        // Answered on the connection (a capture stream): nothing more to write here.
        stats.answered.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let line = Response::line(answer);
    if write_within(&s, line.as_bytes(), Instant::now() + REPLY_DEADLINE) {
        stats.answered.fetch_add(1, Ordering::Relaxed);
    } else {
        let n = stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            dropped = n,
            reply_bytes = line.len(),
            "control client dropped: it did not take its reply within {} s",
            REPLY_DEADLINE.as_secs()
        );
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// `freeway ctl`'s side: connects to the datapath's socket.
fn connect(path: &Path) -> Result<UnixStream, CtlError> {
    UnixStream::connect(path).map_err(|e| CtlError::Unreachable(unreachable(path, &e)))
}

/// Why `freeway ctl` could not connect to `path`, with what to do about it: a refused
/// permission means the datapath runs but this user may not talk to it, not that it is
/// not running.
fn unreachable(path: &Path, e: &std::io::Error) -> String {
    let p = path.display();
    let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
        "this user may not open it: the socket is its owner's alone (mode 0600) unless the \
         datapath was started with --ctl-group GROUP or --ctl-read-group GROUP; run as its \
         owner, root or a member of that group"
            .to_string()
    } else {
        format!("is `freeway run --ctl {p}` running?")
    };
    format!("cannot reach freeway at {p}: {e} ({hint})")
}

/// How long `freeway ctl` waits for its reply.
const CLIENT_WAIT: Duration = Duration::from_secs(30);

/// Reads one reply line from `r`.
fn read_reply(r: &mut impl std::io::BufRead) -> Result<Reply, CtlError> {
    let mut line = String::new();
    r.read_line(&mut line)
        .map_err(|e| CtlError::Unreachable(format!("no reply from the datapath: {e}")))?;
    if line.is_empty() {
        return Err(CtlError::Unreachable(
            "no reply from the datapath: it closed the connection".into(),
        ));
    }
    Response::decode(&line)
}

/// Sends `req` to the socket at `path` and returns its reply.
pub fn send(path: &Path, req: &Request) -> Result<Reply, CtlError> {
    let mut s = connect(path)?;
    s.set_read_timeout(Some(CLIENT_WAIT))
        .map_err(|e| CtlError::Unreachable(e.to_string()))?;
    write_request(&mut s, req)?;
    read_reply(&mut std::io::BufReader::new(s))
}

/// Writes `req` on `s`. A datapath that refuses a client (not allowed, busy) answers and
/// closes without reading the request, so the write can fail (broken pipe, reset) although
/// the refusal is waiting in the socket: then that answer is returned, not the write's error.
pub(crate) fn write_request(s: &mut UnixStream, req: &Request) -> Result<(), CtlError> {
    let Err(e) = s.write_all(protocol::encode_request(req).as_bytes()) else {
        return Ok(());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    match read_reply(&mut std::io::BufReader::new(&*s)) {
        Err(refused @ (CtlError::Forbidden(_) | CtlError::Busy(_))) => Err(refused),
        _ => Err(CtlError::Unreachable(format!("sending the request: {e}"))),
    }
}

/// `freeway capture --ctl`: asks for a capture and copies the stream that follows the reply
/// into `out`, whole records only, until the datapath ends it (count reached, datapath
/// stopped) or `stop` is set (then the capture is ended in order: see [`stream`]); returns
/// tcpdump's summary.
pub fn capture_request(
    path: &Path,
    tap: &TapOptions,
    out: &mut dyn Write,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<stream::Summary, CtlError> {
    stream::capture(path, tap, out, stop)
}

/// Sends a request given as `freeway ctl` words (`["route", "add", "10.9.0.0/24", "via",
/// "10.0.20.7"]`) and returns the reply as one JSON object: `{"ok":true,"text":...,"data":...}`
/// or `{"ok":false,"kind":...,"error":...}` (words `freeway ctl` would refuse are refused the
/// same way, kind `usage`). Fails only when the datapath cannot be reached. For scripts and
/// tests; programs should build a [`Request`] and use [`send`].
pub fn request(path: &Path, words: &[String]) -> Result<Value, String> {
    let r = cli::parse_words(words).and_then(|req| send(path, &req));
    Ok(match r {
        Ok(x) => json!({"ok": true, "text": x.text, "data": x.data}),
        Err(e @ CtlError::Unreachable(_)) => return Err(e.to_string()),
        Err(e) => json!({"ok": false, "kind": e.kind(), "error": e.to_string()}),
    })
}

/// The live parts of `cfg`, as the control thread keeps them for `reload`.
pub(crate) fn reload_live(cfg: &crate::config::Checked) -> reload::Live {
    reload::Live::of(cfg)
}

/// The data of a reply, serialized.
fn to_data<T: serde::Serialize>(x: &T) -> Result<Value, CtlError> {
    serde_json::to_value(x).map_err(|e| CtlError::Failed(format!("cannot encode the reply: {e}")))
}

impl<L: Layout> Control<L> {
    /// Answers one request (logged); `None` when it was answered on `stream` (a capture).
    fn job(
        &mut self,
        req: Request,
        stream: Option<UnixStream>,
        stats: &ClientStats,
    ) -> Option<Result<Reply, CtlError>> {
        let r = match (&req, stream) {
            (Request::Capture(tap), Some(s)) => match self.capture(tap, s) {
                Ok(()) => {
                    tracing::debug!(request = %req, "control request answered");
                    return None;
                }
                Err(e) => Err(e),
            },
            (Request::Capture(_), None) => Err(CtlError::Failed("the capture's connection is gone".into())),
            (Request::Clients, _) => Ok(stats.reply()),
            _ => self.handle(&req),
        };
        match &r {
            Err(e) => tracing::warn!(request = %req, error = %e, kind = e.kind(), "control request refused"),
            Ok(_) if req.is_change() => tracing::info!(request = %req, "control request applied"),
            Ok(_) => tracing::debug!(request = %req, "control request answered"),
        }
        Some(r)
    }

    /// Checks a capture's options against this datapath: any running port, those a reload
    /// added included (a tap names its port by bridge index; the router's internal port and
    /// the ports removed are no names to capture on).
    fn tap_spec(&self, tap: &TapOptions, write: Option<PathBuf>) -> Result<crate::config::capture::TapSpec, CtlError> {
        use crate::config::capture::TapOptionsError as E;
        let names: Vec<String> = (0..self.port_names.len())
            .map(|i| {
                if self.is_port(i) {
                    self.port_names[i].clone()
                } else {
                    String::new()
                }
            })
            .collect();
        tap.check(&names, crate::config::capture::filter_compiles, write)
            .map_err(|e| match e {
                E::NoSuchPort { .. } => CtlError::NotFound(e.to_string()),
                _ => CtlError::Invalid(e.to_string()),
            })
    }

    /// The router's own MAC addresses (its interfaces').
    fn router_macs(&self) -> Vec<Mac> {
        self.rib
            .as_ref()
            .map(|(_, ifs, _)| ifs.iter().map(|i| Mac(i.mac)).collect())
            .unwrap_or_default()
    }

    /// Joins an ended capture and remembers how it ended.
    fn reap(&mut self, t: super::capture::RunningTap) {
        let (id, desc) = (t.id(), t.desc().clone());
        let (how, stats) = match t.join() {
            Ok(s) => (
                format!("ended: {} packets written, {} dropped", s.written, s.dropped),
                Some(s),
            ),
            Err(e) => (format!("failed: {e}"), None),
        };
        self.ended.push((id, desc, how, stats));
        let n = self.ended.len();
        if n > 64 {
            self.ended.drain(..n - 64);
        }
    }
    /// `capture list`: the config's taps, the running captures and the last ended ones.
    fn capture_list(&self) -> Reply {
        let mut rows = Vec::new();
        for (id, d, stopped) in &self.config_taps {
            let state = if *stopped { "stopped" } else { "running" };
            rows.push((*id, d, "config", state.to_string(), None));
        }
        for t in &self.captures {
            rows.push((t.id(), t.desc(), "ctl", "running".into(), None));
        }
        for (id, d, how, stats) in &self.ended {
            rows.push((*id, d, "ctl", how.clone(), *stats));
        }
        rows.sort_by_key(|r| r.0);
        let mut text = format!(
            "{:<4} {:<8} {:<12} {:<6} {:<28} {:<24} {}\n",
            "id", "origin", "port", "dir", "output", "filter", "state"
        );
        for (id, d, origin, state, _) in &rows {
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
            .map(|(id, d, origin, state, stats)| json!({"id": id, "origin": origin, "port": d.port, "direction": d.direction, "filter": d.filter, "output": d.write, "state": state, "stats": stats}))
            .collect();
        Reply::new(text, json!(data))
    }

    /// `capture stop ID`: detaches a tap; a capture started here is joined and its counts
    /// returned.
    fn capture_stop(&mut self, id: freeway_capture::TapId) -> Result<Reply, CtlError> {
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
                        Some(s),
                    ));
                    Ok(Reply::new(
                        format!(
                            "tap {id} stopped: {} packets written, {} dropped by full rings\n",
                            s.written, s.dropped
                        ),
                        to_data(&s)?,
                    ))
                }
                Err(e) => {
                    self.ended.push((id, desc, format!("failed: {e}"), None));
                    Err(CtlError::Failed(format!(
                        "tap {id} stopped; its writer had failed: {e}"
                    )))
                }
            };
        }
        if let Some(t) = self.config_taps.iter_mut().find(|t| t.0 == id) {
            if t.2 {
                return Err(CtlError::Conflict(format!("tap {id} is already stopped")));
            }
            (self.detach)(id);
            t.2 = true;
            return Ok(Reply::new(
                format!("tap {id} (from the config) stopped; its counts are in the run's final report\n"),
                json!({"id": id}),
            ));
        }
        Err(CtlError::NotFound(format!("no running tap {id} (see `capture list`)")))
    }

    /// `capture start`: a tap writing a file on the datapath's side; replies with its id.
    fn capture_start(&mut self, tap: &TapOptions, path: &Path) -> Result<Reply, CtlError> {
        if !path.is_absolute() {
            return Err(CtlError::Invalid(format!(
                "-w {}: an absolute path, please (the datapath writes it, from its own directory)",
                path.display()
            )));
        }
        let spec = self.tap_spec(tap, Some(path.to_path_buf()))?;
        let f = std::fs::File::create(path).map_err(|e| CtlError::Failed(format!("-w {}: {e}", path.display())))?;
        let t =
            (self.attach)(&spec, Box::new(std::io::BufWriter::new(f))).map_err(|e| CtlError::Failed(e.to_string()))?;
        let id = t.id();
        self.captures.push(t);
        Ok(Reply::new(
            format!(
                "tap {id} writing {} (stop it with `freeway ctl capture stop {id}`)\n",
                path.display()
            ),
            json!({"id": id, "output": path}),
        ))
    }

    /// Starts a capture streaming to `s` (see the module docs): the reply line first, then
    /// the capture.
    fn capture(&mut self, tap: &TapOptions, mut s: UnixStream) -> Result<(), CtlError> {
        let spec = self.tap_spec(tap, None)?;
        // The tap is attached first, so that the reply names it; its writer (on a second
        // handle of the stream) waits behind a gate until the reply line is out. Every write
        // is bounded, so a client that stops reading ends its capture; one that hangs up or
        // shuts its sending half ends it too (`serve` watches a third handle).
        let handle = || s.try_clone().map_err(|e| CtlError::Failed(e.to_string()));
        let (out, peer) = (handle()?, handle()?);
        let _ = out.set_write_timeout(Some(REPLY_DEADLINE));
        let _ = s.set_write_timeout(Some(REPLY_DEADLINE));
        let (open, gate) = bounded(1);
        let gated = stream::Gate::new(out, gate, REPLY_DEADLINE);
        let mut t = (self.attach)(&spec, Box::new(std::io::BufWriter::new(gated)))
            .map_err(|e| CtlError::Failed(e.to_string()))?;
        let line = Response::line(Ok(Reply::new("", json!({"id": t.id()}))));
        if s.write_all(line.as_bytes()).is_ok() {
            let _ = open.send(());
        }
        // Otherwise the gate never opens: the writer fails and the tap ends by itself.
        tracing::info!(tap = t.id(), port = %t.desc().port, filter = %t.desc().filter, "capture streamed to a control client");
        t.set_peer(peer);
        self.captures.push(t);
        Ok(())
    }

    /// Applies a batch of the kernel route mirror's changes to the RIB.
    fn apply_linux(&mut self, changes: Vec<freeway_linuxcp::Change>) {
        if let (Some(feed), Some((rib, _, _))) = (self.linux.as_mut(), self.rib.as_mut()) {
            feed.apply(rib, changes);
        }
    }

    /// Answers a request that is not a streamed capture.
    fn handle(&mut self, req: &Request) -> Result<Reply, CtlError> {
        match req {
            Request::Help => Ok(Reply::new(HELP, json!(HELP))),
            Request::Stats => self.stats(),
            // Answered in `job`, which holds the socket's counters.
            Request::Clients => Err(CtlError::Failed("no client counters here".into())),
            Request::FdbAdd { mac, port, vlan } => self.fdb_add(mac, port, *vlan),
            Request::FdbDel { mac, port, vlan } => self.fdb_del(mac, port.as_deref(), *vlan),
            Request::FdbFlush => ask(&self.fdb_ops, FdbOp::Flush),
            Request::FdbShow => self.fdb_show(),
            Request::NeighAdd { ip, mac, dev } => self.neigh_add(*ip, mac, dev),
            Request::NeighDel { ip, dev } => self.neigh_del(*ip, dev),
            Request::NeighFlush { dev } => self.neigh_flush(dev.as_deref()),
            Request::NeighShow => self.neigh_show(),
            Request::Reload { file, check } => self.reload(file.as_deref(), *check),
            Request::RouteShow => self.route_show(),
            Request::RouteGet { addr } => self.route_get(*addr),
            Request::RouteAdd { prefix, hops } => self.route_add(prefix, hops, false, RouteKind::Ctl),
            Request::RouteReplace { prefix, hops } => self.route_add(prefix, hops, true, RouteKind::Ctl),
            Request::RouteDel { prefix } => self.route_del(prefix),
            Request::CaptureList => Ok(self.capture_list()),
            Request::CaptureStop { id } => self.capture_stop(*id),
            Request::CaptureStart { tap, write } => self.capture_start(tap, write),
            Request::Capture(_) => Err(CtlError::Failed("a capture needs its connection".into())),
            Request::Trace { fields } => self.trace(fields),
            Request::LinkShow => Ok(self.link_show()),
            Request::LinkUp { port } => self.link_up(port),
            Request::LinkMtu { dev, mtu } => self.link_mtu(dev, *mtu),
            Request::LinkSet { port, up, flags } => {
                let i = self.port_index(port)?;
                let r = lan::link_set(&self.bridge, i, port, flags)?;
                if *up {
                    self.link_up(port)?;
                }
                Ok(r)
            }
            Request::MdbShow => lan::mdb_show(&self.bridge, &self.port_names),
            Request::FirewallList => nft::list(self.nft()?),
            Request::FirewallLoad { path } => nft::load(self.nft()?, path),
            Request::SetAdd { set, elements } => nft::set_change(self.nft()?, set, elements, true),
            Request::SetDel { set, elements } => nft::set_change(self.nft()?, set, elements, false),
            Request::ConntrackList { filter } => self.conntrack_list(filter),
            // Answered in `serve`, which starts the stream on the connection.
            Request::ConntrackEvents { .. } => Err(CtlError::Failed("the event stream's connection is gone".into())),
            Request::ConntrackFlush { zone } => self.conntrack_flush(*zone),
        }
    }

    /// `stats`: ports (packets, bytes, and their rates over the last second), workers and
    /// drops.
    fn stats(&self) -> Result<Reply, CtlError> {
        let s = self.snap.snap(self.start.elapsed());
        let r = self.rates.rates(&s);
        let h = rates::human;
        let mut text = format!(
            "{:<12} {:>12} {:>14} {:>8} {:>8} {:>12} {:>14} {:>8} {:>8} {:>9}\n",
            "port",
            "rx packets",
            "rx bytes",
            "rx pps",
            "rx bit/s",
            "tx packets",
            "tx bytes",
            "tx pps",
            "tx bit/s",
            "dropped"
        );
        for (i, p) in s.ports.iter().enumerate() {
            let pr = r.as_ref().and_then(|r| r.ports.get(i));
            let rate = |f: fn(&rates::PortRate) -> f64| pr.map_or_else(|| "-".to_string(), |x| h(f(x)));
            text.push_str(&format!(
                "{:<12} {:>12} {:>14} {:>8} {:>8} {:>12} {:>14} {:>8} {:>8} {:>9}\n",
                p.name,
                p.rx_packets,
                p.rx_bytes,
                rate(|x| x.rx_pps),
                rate(|x| x.rx_bps),
                p.tx_packets,
                p.tx_bytes,
                rate(|x| x.tx_pps),
                rate(|x| x.tx_bps),
                p.rx_dropped + p.tx_dropped
            ));
        }
        for (i, w) in s.workers.iter().enumerate() {
            let pps = r
                .as_ref()
                .and_then(|r| r.workers_pps.get(i))
                .map_or_else(|| "-".into(), |x| h(*x));
            text.push_str(&format!(
                "worker {} packets {} batches {} pps {pps}\n",
                w.id, w.packets, w.batches
            ));
        }
        if let Some(r) = &s.reassembly {
            text.push_str(&format!(
                "reassembly fragments {} reassembled {} in_flight {} bytes_held {} refragmented {} fragments_out {}\n",
                r.fragments, r.reassembled, r.in_flight, r.bytes_held, r.refragmented, r.fragments_out
            ));
        }
        let d: Vec<String> = s.drops().iter().map(|(k, v)| format!("{k} {v}")).collect();
        text.push_str(&format!(
            "drops: {}\n",
            if d.is_empty() { "none".into() } else { d.join(", ") }
        ));
        let mut data = to_data(&s)?;
        data["rates"] = to_data(&r)?;
        Ok(Reply::new(text, data))
    }

    /// `fdb add MAC dev PORT [vlan N]`: a static entry for a unicast address that is not the
    /// router's, on a port of that VLAN (default: the port's access or native VLAN).
    fn fdb_add(&self, mac: &Mac, port: &str, vlan: Option<u16>) -> Result<Reply, CtlError> {
        if mac.is_zero() || mac.is_multicast() {
            return Err(CtlError::Invalid(format!(
                "{mac}: not a unicast address (a static entry needs one; zero, multicast and \
                 broadcast addresses cannot be learned or forwarded to)"
            )));
        }
        if self.router_macs().contains(mac) {
            return Err(CtlError::Refused(format!(
                "{mac} is the router's own MAC address: its entries belong to the router"
            )));
        }
        let (p, vlan) = self.port_and_vlan(port, vlan)?;
        if !self.port_vlans[p].is_member(vlan) {
            return Err(CtlError::Invalid(format!("dev {port} is not a member of vlan {vlan}")));
        }
        ask(&self.fdb_ops, FdbOp::Add(*mac, vlan, p as u16))
    }

    /// `fdb del MAC dev PORT [vlan N]` or `fdb del MAC vlan N`: any entry but the router's own.
    fn fdb_del(&self, mac: &Mac, port: Option<&str>, vlan: Option<u16>) -> Result<Reply, CtlError> {
        if self.router_macs().contains(mac) {
            return Err(CtlError::Refused(format!(
                "{mac} is the router's own MAC address: without its entry routed traffic would \
                 be flooded"
            )));
        }
        let vlan = match (port, vlan) {
            (Some(port), vlan) => self.port_and_vlan(port, vlan)?.1,
            (None, Some(v)) => v,
            (None, None) => return Err(CtlError::Usage("fdb del MAC: say dev PORT or vlan N".into())),
        };
        ask(&self.fdb_ops, FdbOp::Del(*mac, vlan))
    }

    /// The index of the bridge port named `port`, and `vlan` or, without one, the port's
    /// access or native VLAN (the default of `fdb add` and `fdb del`).
    fn port_and_vlan(&self, port: &str, vlan: Option<u16>) -> Result<(usize, u16), CtlError> {
        let p = self
            .port_names
            .iter()
            .position(|n| n == port)
            .filter(|&i| self.is_port(i))
            .ok_or_else(|| CtlError::NotFound(format!("dev {port:?}: no such port")))?;
        let vlan = match vlan {
            None => match &self.port_vlans[p] {
                PortVlan::Access(v) => *v,
                PortVlan::Trunk { native: Some(v), .. } => *v,
                PortVlan::Trunk { .. } => {
                    return Err(CtlError::Usage(format!("dev {port}: a trunk port: say which vlan")))
                }
            },
            Some(v) => v,
        };
        Ok((p, vlan))
    }

    /// `fdb show`.
    fn fdb_show(&self) -> Result<Reply, CtlError> {
        let e = self.fdb.entries(self.clock.now());
        let rows = crate::report::fdb_json(&e, &self.port_names);
        let text: String = rows
            .iter()
            .map(|r| {
                format!(
                    "{} dev {} vlan {}{}\n",
                    r.mac,
                    r.ifname,
                    r.vlan,
                    if r.state.is_empty() { "" } else { " static" }
                )
            })
            .collect();
        Ok(Reply::new(text, to_data(&rows)?))
    }

    /// `neigh add IP lladdr MAC dev IFACE`: any address but the router's own.
    fn neigh_add(&self, ip: IpAddr, mac: &Mac, dev: &str) -> Result<Reply, CtlError> {
        let (_, ifs, _) = self.rib.as_ref().ok_or_else(no_router)?;
        let i = iface_named(ifs, dev)?;
        if let Some(on) = own_address(ifs, ip) {
            return Err(CtlError::Refused(format!(
                "{ip} is the router's own address (interface {on}): it cannot be a neighbour"
            )));
        }
        ask(&self.neigh_ops, NeighOp::Add(ip, i, mac.0))
    }

    /// `neigh del IP dev IFACE`.
    fn neigh_del(&self, ip: IpAddr, dev: &str) -> Result<Reply, CtlError> {
        let (_, ifs, _) = self.rib.as_ref().ok_or_else(no_router)?;
        let i = iface_named(ifs, dev)?;
        ask(&self.neigh_ops, NeighOp::Del(ip, i))
    }

    /// `neigh flush [dev IFACE]`.
    fn neigh_flush(&self, dev: Option<&str>) -> Result<Reply, CtlError> {
        let (_, ifs, _) = self.rib.as_ref().ok_or_else(no_router)?;
        let i = match dev {
            None => None,
            Some(d) => Some(iface_named(ifs, d)?),
        };
        ask(&self.neigh_ops, NeighOp::Flush(i))
    }

    /// `neigh show`.
    fn neigh_show(&self) -> Result<Reply, CtlError> {
        let (_, ifs, n) = self.rib.as_ref().ok_or_else(no_router)?;
        let e = n.entries(self.clock.now(), ifs);
        let text: String = e.iter().map(|x| format!("{x}\n")).collect();
        Ok(Reply::new(text, to_data(&e)?))
    }

    /// `route show`.
    fn route_show(&self) -> Result<Reply, CtlError> {
        let (rib, ifs, _) = self.rib.as_ref().ok_or_else(no_router)?;
        Ok(Reply::new(rib.show(&**ifs).to_string(), to_data(&rib.records(&**ifs))?))
    }

    /// `reload [--check] [FILE]`: the file (or the run's own) read again; see [`reload`].
    fn reload(&mut self, file: Option<&str>, check: bool) -> Result<Reply, CtlError> {
        let path = match (file, &self.config_path) {
            (Some(f), _) => std::path::PathBuf::from(f),
            (None, Some(p)) => p.clone(),
            (None, None) => {
                return Err(CtlError::Usage(
                    "this run's configuration came from no file (the built-in demo): reload FILE".into(),
                ))
            }
        };
        let new = crate::config::load(&path).map_err(|e| CtlError::Invalid(format!("{e}; nothing changed")))?;
        let (applied, restart) = self.apply_reload(&new, check);
        let text = reload::report(check, &applied, &restart);
        let data = json!({
            "file": path.display().to_string(),
            "check": check,
            "changes": applied.iter().map(|(c, r)| json!({
                "change": c.to_string(),
                "ok": r.is_ok(),
                "error": r.as_ref().err(),
            })).collect::<Vec<_>>(),
            "restart": restart,
        });
        Ok(Reply::new(text, data))
    }

    /// Applies (or with `check`, only lists) what turns the configuration applied last into
    /// `new`; the ruleset first, so that one that does not compile stops the rest.
    fn apply_reload(&mut self, new: &crate::config::Checked, check: bool) -> (reload::Outcome, Vec<&'static str>) {
        use reload::Change;
        let next = reload::Live::of(new);
        let (changes, restart) = self.live.diff(&next);
        if check {
            return (changes.into_iter().map(|c| (c, Ok(()))).collect(), restart);
        }
        let mut out = Vec::new();
        for c in changes {
            let r = match &c {
                Change::Ruleset(src, rs) => match self.nft.as_ref() {
                    Some(fw) => fw.replace(rs.clone(), src),
                    None => Err("this run has no nftables ruleset to replace: restart to add one".into()),
                },
                Change::RouteSet(p, h) => self
                    .route_add(p, h, true, RouteKind::Static)
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Change::RouteDel(p) => self.route_del(p).map(drop).map_err(|e| e.to_string()),
                Change::NeighSet(ip, mac, dev) => self.neigh_add(*ip, mac, dev).map(drop).map_err(|e| e.to_string()),
                Change::NeighDel(ip, dev) => self.neigh_del(*ip, dev).map(drop).map_err(|e| e.to_string()),
                Change::FdbSet(mac, vlan, port) => self
                    .fdb_add(mac, port, Some(*vlan))
                    .map(drop)
                    .map_err(|e| e.to_string()),
                // Gone already (with a port removed just before): what the file says.
                Change::FdbDel(mac, vlan) => match self.fdb_del(mac, None, Some(*vlan)) {
                    Ok(_) | Err(CtlError::NotFound(_)) => Ok(()),
                    Err(e) => Err(e.to_string()),
                },
                Change::ZoneLimit(z, n) => match &self.ct {
                    Some(ct) => {
                        ct.set_zone_limit(*z, n.map(|n| n.min(u32::MAX as usize) as u32));
                        Ok(())
                    }
                    None => Err("this run has no connection tracker".into()),
                },
                Change::PortVlans(ports) => self.set_port_vlans(ports),
                Change::PortAdd(p) => self.port_add(&p.0),
                Change::PortRemove(name) => self.port_remove(name),
                Change::LinkFlags(port, flags) => self
                    .port_index(port)
                    .map_err(|e| e.to_string())
                    .and_then(|i| self.bridge.set_port_flags(i, *flags)),
                Change::LinkMtu(port, mtu) => self
                    .link_mtu(port, u32::from(*mtu))
                    .map(drop)
                    .map_err(|e| e.to_string()),
                Change::Addrs(a) => match (self.rib.as_mut(), self.ifaces_live.as_ref()) {
                    (Some((rib, ifs, _)), Some(live)) => {
                        let old = ifs.clone();
                        reload::readdress(rib, ifs, live, a).and_then(|()| match &self.twins {
                            Some(t) => reload::readdress_twins(t, &old, a),
                            None => Ok(()),
                        })
                    }
                    _ => Err("this run has no router".into()),
                },
                Change::Ifaces(plan) => self.apply_ifaces(plan, new),
                Change::IfaceMtu(name, mtu) => self.iface_mtu(name, *mtu),
                Change::TapStart(_, t) => self.tap_start(&t.0),
                Change::TapStop(_, t) => self.tap_stop(&t.0),
                Change::CtTimeouts(t) => match &self.ct {
                    Some(ct) => reload::timeouts(t).and_then(|t| ct.set_timeouts(t, &[])),
                    None => Err("this run has no connection tracker".into()),
                },
            };
            let failed_ruleset = matches!(c, Change::Ruleset(..)) && r.is_err();
            if r.is_ok() {
                self.live.absorb(&c);
            }
            out.push((c, r));
            if failed_ruleset {
                // Nothing else changes when the new ruleset does not compile.
                return (out, restart);
            }
        }
        (out, restart)
    }

    /// Starts a tap of a reloaded file, writing its file from the start (a `capture start`
    /// of this run: `capture list` shows it, `capture stop` stops it).
    fn tap_start(&mut self, t: &crate::config::capture::TapSpec) -> Result<(), String> {
        let path = t
            .write
            .as_ref()
            .ok_or("a tap writing to standard output starts only with the run")?;
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let tap = (self.attach)(t, Box::new(std::io::BufWriter::new(f))).map_err(|e| e.to_string())?;
        self.captures.push(tap);
        Ok(())
    }

    /// Stops the running tap that is `t` (one of the file the run started with, or one a
    /// reload started).
    fn tap_stop(&mut self, t: &crate::config::capture::TapSpec) -> Result<(), String> {
        let d = super::capture::desc_of(t, &self.port_names);
        let same = |x: &super::capture::TapDesc| {
            (&x.port, x.direction, &x.filter, &x.write) == (&d.port, d.direction, &d.filter, &d.write)
        };
        let id = self
            .config_taps
            .iter()
            .find(|c| !c.2 && same(&c.1))
            .map(|c| c.0)
            .or_else(|| self.captures.iter().find(|c| same(c.desc())).map(|c| c.id()))
            .ok_or("no running tap is this one (stopped already?)")?;
        self.capture_stop(id).map(drop).map_err(|e| e.to_string())
    }

    /// Publishes the new VLAN modes of the ports named (the others, and the router port,
    /// keep theirs).
    fn set_port_vlans(&mut self, ports: &[(String, PortVlan)]) -> Result<(), String> {
        let mut all = self.port_vlans.clone();
        for (name, v) in ports {
            let i = self.port_index(name).map_err(|e| e.to_string())?;
            all[usize::from(i)] = v.clone();
        }
        self.bridge.set_port_vlans(super::portset::padded(&all))?;
        self.port_vlans = all;
        Ok(())
    }

    /// Adds the port `spec` to the running workers (see `portset`): it forwards from the
    /// next batch after every worker took it.
    fn port_add(&mut self, spec: &crate::config::PortSpec) -> Result<(), String> {
        if self.port_index(&spec.name).is_ok() {
            return Err(format!("a port named {:?} runs already", spec.name));
        }
        let adder = self.adder.as_mut().ok_or("this run cannot add ports: restart")?;
        let i = adder.add(spec, &self.bridge, &self.mtus, &mut self.port_vlans)?;
        self.port_names.push(spec.name.clone());
        debug_assert_eq!(self.port_names.len(), usize::from(i) + 1);
        Ok(())
    }

    /// Removes the running port `name` (see `portset`): no frame leaves it once this
    /// returns; the FDB is flushed of its entries, static ones too.
    fn port_remove(&mut self, name: &str) -> Result<(), String> {
        let i = self.port_index(name).map_err(|e| e.to_string())?;
        let adder = self.adder.as_mut().ok_or("this run cannot remove ports: restart")?;
        let closed = adder.remove(i, &self.bridge, &mut self.port_vlans);
        // Retired rather than flushed entry by entry: a learn request a worker queued before
        // it stopped polling the port must not bring an entry back.
        ask(&self.fdb_ops, FdbOp::Retire(i)).map_err(|x| format!("flushing its FDB entries: {x}"))?;
        closed
    }

    /// Whether bridge index `i` is a port (not the router's internal one, nor one removed).
    fn is_port(&self, i: usize) -> bool {
        i < self.port_names.len()
            && self.port_names[i] != super::portset::ROUTER_NAME
            && self.adder.as_ref().is_none_or(|a| !a.removed.contains(&i))
    }

    /// `route get ADDR`: the route that matches, as `ip route get` prints it (the address
    /// itself as `dst`; an ECMP route lists its next hops, of which a flow's hash picks one).
    fn route_get(&self, addr: std::net::IpAddr) -> Result<Reply, CtlError> {
        let (rib, ifs, _) = self.rib.as_ref().ok_or_else(no_router)?;
        let r = rib
            .lookup(addr)
            .ok_or_else(|| CtlError::Invalid(format!("route get {addr}: network is unreachable (no route)")))?;
        let mut rec = freeway_route::RouteRecord::new(&r, &**ifs);
        let mut text = addr.to_string();
        match (&rec.gateway, &rec.dev) {
            (gw, Some(dev)) => {
                if let Some(gw) = gw {
                    text.push_str(&format!(" via {gw}"));
                }
                text.push_str(&format!(" dev {dev}"));
            }
            _ => {
                for h in &rec.nexthops {
                    text.push_str("\n\tnexthop");
                    if let Some(gw) = h.gateway {
                        text.push_str(&format!(" via {gw}"));
                    }
                    text.push_str(&format!(" dev {}", h.dev));
                }
            }
        }
        text.push('\n');
        rec.dst = addr.to_string();
        Ok(Reply::new(text, to_data(&[rec])?))
    }

    /// `route del PREFIX`.
    fn route_del(&mut self, prefix: &str) -> Result<Reply, CtlError> {
        let (rib, _, _) = self.rib.as_mut().ok_or_else(no_router)?;
        let p = parse_prefix(prefix)?;
        rib.delete(p).map_err(route_error)?;
        Ok(Reply::new("", json!({"generation": rib.generation()})))
    }

    /// `trace in_port=PORT FIELD...`: what the datapath's tables do with one packet.
    fn trace(&self, fields: &[String]) -> Result<Reply, CtlError> {
        let words: Vec<&str> = fields.iter().map(String::as_str).collect();
        let (port, frame) =
            super::trace::frame_from_words(&words, &self.port_names, self.nports).map_err(CtlError::Invalid)?;
        let tables = super::trace::Tables {
            bridge: &self.bridge,
            fdb: &self.fdb,
            port_names: &self.port_names,
            port_vlans: &self.port_vlans,
            nports: self.nports,
            now: self.clock.now(),
            ct: self.ct.as_ref(),
            fw: self.fw.as_ref(),
            nft: self.nft.as_ref().map(|f| (f.current(), f.zones())),
            ct_state: Default::default(),
            zones: &self.zones,
            router: match (&self.rib, &self.l3) {
                (Some((rib, ifaces, neigh)), Some(l3)) => Some(super::trace::RouterView { rib, ifaces, neigh, l3 }),
                _ => None,
            },
        };
        let (text, data) = super::trace::render(&tables.trace(port, frame));
        Ok(Reply::new(text, data))
    }

    /// `link show`: every port's state and bridge flags, in `bridge link show`'s words.
    fn link_show(&self) -> Reply {
        let mut text = String::new();
        let mut data = Vec::new();
        for (i, name) in self.port_names.iter().enumerate().filter(|(i, _)| self.is_port(*i)) {
            let p = i as u16;
            let f = self.bridge.port_flags(p);
            let state = if self.bridge.port_disabled(p) {
                "disabled"
            } else {
                "forwarding"
            };
            let mtu = self.mtus.mtu(i);
            text.push_str(&format!(
                "{}: {name}: mtu {mtu} state {state} {}\n",
                i + 1,
                lan::flags_words(&f)
            ));
            let mut row = json!({"ifindex": i + 1, "ifname": name, "mtu": mtu, "state": state});
            if let (Some(r), Value::Object(fl)) = (row.as_object_mut(), lan::flags_json(&f)) {
                r.extend(fl);
            }
            data.push(row);
        }
        if let Some((_, ifs, _)) = &self.rib {
            for (i, it) in ifs.indexed() {
                let mtu = ifs.mtu(i);
                let n = self.port_names.len() + usize::from(i);
                text.push_str(&format!(
                    "{n}: {}: router interface vlan {} mtu {mtu}\n",
                    it.name,
                    it.vlan.unwrap_or(0)
                ));
                data.push(json!({"ifindex": n, "ifname": it.name, "kind": "router", "vlan": it.vlan, "mtu": mtu}));
            }
        }
        Reply::new(text, Value::Array(data))
    }

    /// `link set dev NAME mtu N`: a port's L2 MTU or a router interface's IP MTU, live.
    fn link_mtu(&self, dev: &str, mtu: u32) -> Result<Reply, CtlError> {
        if let Some(i) = self.port_index(dev).ok().map(usize::from) {
            let was = self
                .mtus
                .set(i, mtu)
                .map_err(|e| CtlError::Invalid(format!("port {dev:?}: {e}")))?;
            return Ok(Reply::new(
                format!("{dev}: mtu {mtu} (was {was})\n"),
                json!({"ifname": dev, "mtu": mtu, "was": was}),
            ));
        }
        if let Some((_, ifs, _)) = &self.rib {
            if let Some(i) = ifs.by_name(dev) {
                let was = ifs.set_mtu(i, mtu).map_err(CtlError::Invalid)?;
                return Ok(Reply::new(
                    format!("{dev}: mtu {mtu} (was {was})\n"),
                    json!({"ifname": dev, "mtu": mtu, "was": was}),
                ));
            }
        }
        Err(CtlError::NotFound(format!("no port or router interface named {dev:?}")))
    }

    /// The index of the bridge port named `port` (not the router's internal one).
    fn port_index(&self, port: &str) -> Result<u16, CtlError> {
        self.port_names
            .iter()
            .enumerate()
            .position(|(i, n)| n == port && self.is_port(i))
            .map(|i| i as u16)
            .ok_or_else(|| CtlError::NotFound(format!("no port named {port:?}")))
    }

    /// `link set dev PORT up`: enables a port its BPDU guard disabled.
    fn link_up(&self, port: &str) -> Result<Reply, CtlError> {
        let i = self.port_index(port)?;
        let was = self.bridge.enable_port(i).map_err(CtlError::Invalid)?;
        let text = if was {
            format!("{port}: enabled (its BPDU guard had disabled it)\n")
        } else {
            format!("{port}: already forwarding\n")
        };
        Ok(Reply::new(text, json!({"ifname": port, "was_disabled": was})))
    }

    /// The nftables firewall, or why there is none.
    fn nft(&self) -> Result<&super::firewall::FirewallShared, CtlError> {
        self.nft.as_ref().ok_or_else(|| {
            CtlError::Unavailable(
                "this datapath has no nftables ruleset (`[firewall] ruleset = \"FILE.nft\"` in its config, with a [router])"
                    .into(),
            )
        })
    }

    /// `conntrack list [-p PROTO ...]`: the connections the filter selects, chosen while the
    /// table is walked; the text is `conntrack -L`'s lines, the data their
    /// records (`conntrack -o xml`'s structure as JSON).
    fn conntrack_list(&self, filter: &freeway_conntrack::CtFilter) -> Result<Reply, CtlError> {
        let ct = self.ct.as_ref().ok_or_else(no_ct)?;
        let d = ct.dump_filtered(filter);
        let text: String = d.iter().map(|x| format!("{x}\n")).collect();
        Ok(Reply::new(text, to_data(&d)?))
    }

    /// `conntrack flush [zone N]`.
    fn conntrack_flush(&self, zone: Option<u16>) -> Result<Reply, CtlError> {
        let ct = self.ct.as_ref().ok_or_else(no_ct)?;
        let n = match zone {
            None => ct.flush(),
            Some(z) => ct.flush_zone(z),
        };
        Ok(Reply::new(
            format!("{n} flow entries have been deleted.\n"),
            json!({"deleted": n}),
        ))
    }

    /// `route add|replace PREFIX (via GW[,GW...] | dev IFACE)`, with its origin: `Ctl` from
    /// the socket, `Static` for a reloaded configuration's routes.
    fn route_add(&mut self, prefix: &str, hops: &Hops, replace: bool, kind: RouteKind) -> Result<Reply, CtlError> {
        let (rib, ifs, _) = self.rib.as_mut().ok_or_else(no_router)?;
        let p = parse_prefix(prefix)?;
        let hops = match hops {
            Hops::Via(gws) => {
                if gws.is_empty() {
                    return Err(CtlError::Usage("route add PREFIX via GW[,GW...]: no gateway".into()));
                }
                gws.iter()
                    .map(|&ip| gateway_hop(ifs, p, ip, None))
                    .collect::<Result<Vec<_>, CtlError>>()?
            }
            Hops::Dev(d) => vec![NextHop::connected(iface_named(ifs, d)?)],
            Hops::Nexthops(hs) => {
                if hs.is_empty() {
                    return Err(CtlError::Usage("route add PREFIX nexthop ...: no next hop".into()));
                }
                hs.iter()
                    .map(|h| {
                        if let Some(w) = h.weight.filter(|&w| w != 1) {
                            return Err(CtlError::Invalid(format!(
                                "nexthop {h}: weight {w}: the router's ECMP spreads flows equally \
                                 (weight 1 only)"
                            )));
                        }
                        match (h.via, &h.dev) {
                            (Some(ip), dev) => gateway_hop(ifs, p, ip, dev.as_deref()),
                            (None, Some(d)) => Ok(NextHop::connected(iface_named(ifs, d)?)),
                            (None, None) => Err(CtlError::Usage("nexthop: via GW or dev IFACE needed".into())),
                        }
                    })
                    .collect::<Result<Vec<_>, CtlError>>()?
            }
        };
        let mut r = Route::new(p, hops);
        r.kind = kind;
        let res = if replace { rib.replace(r) } else { rib.add(r) };
        res.map_err(route_error)?;
        Ok(Reply::new("", json!({"generation": rib.generation()})))
    }
}

/// The hop through gateway `ip` for a route to `p`: on `dev` (whose subnet must hold
/// it), or on the interface whose subnet holds it.
fn gateway_hop(ifs: &Interfaces, p: Prefix, ip: IpAddr, dev: Option<&str>) -> Result<NextHop, CtlError> {
    if ip.is_ipv4() != p.addr().is_ipv4() {
        return Err(CtlError::Invalid(format!(
            "via {ip}: not of the route's address family"
        )));
    }
    if let Some(on) = own_address(ifs, ip) {
        return Err(CtlError::Refused(format!(
            "via {ip}: that is the router's own address (interface {on}), not a gateway"
        )));
    }
    let on_link = |i: u16| {
        ifs.get(i).is_some_and(|x| match ip {
            IpAddr::V4(a) => x.v4_on_link(a),
            IpAddr::V6(a) => x.v6_on_link(a),
        })
    };
    let i = match dev {
        Some(d) => {
            let i = iface_named(ifs, d)?;
            if !on_link(i) {
                return Err(CtlError::Invalid(format!(
                    "via {ip} dev {d}: {ip} is not on {d}'s subnet"
                )));
            }
            i
        }
        None => (0..ifs.len() as u16)
            .find(|&i| on_link(i))
            .ok_or_else(|| CtlError::Invalid(format!("via {ip}: on no interface's subnet")))?,
    };
    Ok(NextHop::via(ip, i))
}

/// The router's interface holding `ip`, if it is one of the router's own addresses.
fn own_address(ifs: &Interfaces, ip: IpAddr) -> Option<String> {
    let i = match ip {
        IpAddr::V4(a) => ifs.local_v4(a),
        IpAddr::V6(a) => ifs
            .local_v6(a)
            .or_else(|| (0..ifs.len() as u16).find(|&i| ifs.get(i).is_some_and(|x| x.link_local() == a))),
    }?;
    Some(ifs.get(i).map_or_else(|| format!("if{i}"), |x| x.name.clone()))
}

/// A RIB refusal, typed.
fn route_error(e: RouteError) -> CtlError {
    match e {
        RouteError::Exists(_) => CtlError::Conflict(e.to_string()),
        RouteError::NotFound(_) => CtlError::NotFound(e.to_string()),
        RouteError::BadNextHops(_) | RouteError::GatewayFamily { .. } => CtlError::Invalid(e.to_string()),
        _ => CtlError::Failed(e.to_string()),
    }
}

/// The router interface named `dev`.
fn iface_named(ifs: &Interfaces, dev: &str) -> Result<u16, CtlError> {
    ifs.by_name(dev)
        .ok_or_else(|| CtlError::NotFound(format!("dev {dev:?}: no such interface")))
}

fn no_router() -> CtlError {
    CtlError::Unavailable("this datapath has no router (no [[interface]] in its config)".into())
}

fn no_ct() -> CtlError {
    CtlError::Unavailable("this datapath does not track connections (no [conntrack] or [firewall])".into())
}

fn parse_prefix(s: &str) -> Result<Prefix, CtlError> {
    let (a, l) = crate::config::l3::parse_prefix(if s == "default" { "0.0.0.0/0" } else { s }, false)
        .map_err(CtlError::Invalid)?;
    Prefix::new(a, l).map_err(|e| CtlError::Invalid(e.to_string()))
}

/// What `freeway ctl help` prints.
pub const HELP: &str = "\
stats                                   counters of ports, workers and drops
clients                                 the control socket's clients: served, refused busy, timed out, dropped
fdb show                                the forwarding database
fdb add MAC dev PORT [vlan N]           a static entry (default: the port's access/native VLAN)
fdb del MAC dev PORT [vlan N]           delete an entry (default: the port's VLAN; or vlan N alone)
fdb flush                               delete the learned entries
route show                              the routing table
route get ADDR                          the route a packet to ADDR takes
reload [--check] [FILE]                 read the configuration again, apply what changed
route add PREFIX via GW[,GW...]         add a route (several gateways: ECMP)
route add PREFIX dev IFACE              add a directly connected route
route add PREFIX via GW dev IFACE       add a route through GW on IFACE
route add PREFIX nexthop via GW dev IFACE [weight 1] nexthop ...
                                        add an ECMP route, as ip route writes it
route replace PREFIX ...                add or replace
route del PREFIX                        delete a route
neigh show                              the neighbour table
neigh add IP lladdr MAC dev IFACE       a permanent neighbour
neigh del IP dev IFACE                  delete a neighbour
neigh flush [dev IFACE]                 delete the dynamic neighbours
conntrack list [-p P] [-s|-d|-r|-q ADDR] [--sport|--dport N] [-w ZONE] [--state S]
                                        the connection table (conntrack -L's selectors)
conntrack flush [zone N]                delete connections
capture list                            the capture taps (config and started here)
capture start -i PORT [-Q in|out|inout] [-s SNAPLEN] [-c COUNT] -w /ABS/FILE [FILTER...]
                                        a tap writing a pcap (.pcapng: pcapng) file
capture stop ID                         detach a tap (its file is completed)
link show                               the bridge ports: state (forwarding, disabled) and flags
link set dev PORT up                    enable a port its BPDU guard disabled
link set dev NAME mtu N                 a port's (L2) or router interface's (IP) MTU, live
link set dev PORT FLAG on|off ...       change flags while forwarding: learning flood mcast_flood
                                        bcast_flood isolated guard
mdb show                                IGMP/MLD snooping: groups' member ports per VLAN, router ports
firewall list                           the nftables ruleset with its counters (nft list ruleset)
firewall load FILE                      replace the ruleset, atomically (a bad file changes nothing)
set add|del SET ELEMENT[, ELEMENT...]   elements of a named set (SET: NAME or TABLE/NAME)
trace in_port=PORT FIELD...             what the datapath does with one packet, stage by stage
                                        (nothing is sent or changed). Fields, OVS style:
                                        dl_src= dl_dst= dl_vlan= ip|ipv6|arp nw_src= nw_dst=
                                        tcp|udp|icmp tp_src= tp_dst= tcp_flags=syn|ack|fin|rst
                                        nw_ttl= len= arp_spa= arp_tpa=, or hex=FRAME
";

#[cfg(test)]
mod tests {
    #[test]
    fn a_socket_refused_for_permission_is_not_called_not_running() {
        use std::io::{Error, ErrorKind};
        let path = std::path::Path::new("/run/freeway.sock");
        let denied = super::unreachable(path, &Error::from(ErrorKind::PermissionDenied));
        assert!(denied.contains("--ctl-group GROUP"), "{denied}");
        assert!(!denied.contains("running?"), "{denied}");
        let absent = super::unreachable(path, &Error::from(ErrorKind::NotFound));
        assert!(
            absent.ends_with("(is `freeway run --ctl /run/freeway.sock` running?)"),
            "{absent}"
        );
    }

    use super::*;

    #[test]
    fn a_request_reported_as_not_done_is_never_applied_later() {
        let (q, rx) = bounded::<Op<u32>>(4);
        let q = Some(q);
        // No writer drains in time: the asker gives up and says nothing was done ...
        let e = ask(&q, 7).unwrap_err();
        assert!(e.to_string().contains("nothing done"), "{e}");
        assert_eq!(e.kind(), "busy");
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
        assert_eq!(ask(&q, 9).unwrap().text, "applied 9\n");
        w.join().unwrap();
    }

    /// A datapath refuses a client and closes before the client has written its request: the
    /// client's write fails (broken pipe), and it reports the refusal, not the pipe.
    #[test]
    fn a_refusal_sent_before_the_request_was_read_is_what_the_client_reports() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let refusal = Response::line(Err(CtlError::Forbidden("user 7 is not allowed".into())));
        (&server).write_all(refusal.as_bytes()).unwrap();
        drop(server);
        let e = write_request(&mut client, &Request::Stats).unwrap_err();
        assert_eq!(e.kind(), "forbidden", "{e}");
        assert!(e.to_string().contains("user 7 is not allowed"), "{e}");

        // Closed without an answer: the write's own error.
        let (mut client, server) = UnixStream::pair().unwrap();
        drop(server);
        let e = write_request(&mut client, &Request::Stats).unwrap_err();
        assert!(e.to_string().contains("sending the request"), "{e}");
    }

    /// Several datapaths of one process bind sockets in one directory at once (as the tests
    /// do): each gets its own socket, none refused for another's private name.
    #[test]
    fn sockets_bound_at_once_in_one_directory_never_collide() {
        let dir = std::env::temp_dir().join(format!("fw-bind-race-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let path = dir.join(format!("{t}-{i}.sock"));
                        let l = bind(&path, &access::Access::default()).unwrap_or_else(|e| panic!("{e}"));
                        assert!(UnixStream::connect(&path).is_ok());
                        drop(l);
                        assert!(!path.exists(), "{}", path.display());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
