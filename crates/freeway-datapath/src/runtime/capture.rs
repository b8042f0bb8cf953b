//! Capture taps in the datapath: the `[[tap]]` sections (and `freeway capture`) attached to
//! the run's tap registry, one writer thread per tap.
//!
//! Workers offer every received batch to the taps of its port before parsing (so a capture
//! sees malformed frames too, as tcpdump would) and every transmit batch just before it is
//! handed to the port. With no tap attached that is one relaxed load of a shared word and a
//! test of the worker's cached tap list per batch; with taps, a batch of a tapped port and
//! direction runs through each such tap's filter at once (one call of its compiled code per
//! batch, [`freeway_capture::Program::run_batch`]). Each copy is recorded at its packet's
//! receive timestamp (`Meta::ts_ns`, set by the receiving port: a pcap input's own
//! timestamps, the wall clock once per batch for live ports; the worker's poll time for a
//! frame the datapath made) with its wire length as the original length. Each worker
//! reports its progress ([`freeway_capture::TapPoint::progress`]) once per poll while a tap
//! is attached, so a tap's writer can merge the workers' copies in timestamp order (see
//! [`freeway_capture::writer`]).
//!
//! Offline runs (one worker reading a pcap file) capture losslessly: a worker whose tap
//! ring is full waits for the tap's writer ([`freeway_capture::TapSpec::lossless`]), as it
//! waits for a full pcap output, instead of dropping copies. Live runs never wait: a full
//! ring drops and counts.
//!
//! Threads: attach and detach run on the runtime's caller thread; each tap's
//! [`TapWriter`] runs on its own thread (`fw-tap-N`) and stops when the tap is detached,
//! its count is reached or its output fails (then the tap detaches itself and forwarding
//! goes on).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::thread::JoinHandle;

use freeway_capture::tap::MAX_TAP_MEMORY;
use freeway_capture::{Direction, Filter, Format, TapId, TapRegistry, TapStats, TapWriter, WriterOptions};
use freeway_packet::MAX_FRAME;
use serde::Serialize;

use super::RunError;
use crate::config::capture::{self, TapSpec};

/// Most slots of one worker's ring of one tap.
const RING_SLOTS: usize = 1024;

/// A tap attached for this run, with its writer thread.
pub(crate) struct RunningTap {
    id: TapId,
    desc: TapDesc,
    handle: JoinHandle<Result<TapStats, String>>,
    /// The control client a streamed capture goes to, watched for its hang-up; set to
    /// `None` once the tap was detached for it.
    peer: Option<std::os::unix::net::UnixStream>,
}

impl RunningTap {
    /// Watches `peer`, the client of a streamed capture (see [`RunningTap::client_gone`]).
    pub fn set_peer(&mut self, peer: std::os::unix::net::UnixStream) {
        self.peer = Some(peer);
    }

    /// Whether the client of a streamed capture went away or asked for the end since the
    /// last call: `true` once, then the caller detaches the tap.
    pub fn client_gone(&mut self) -> bool {
        if self.peer.as_ref().is_some_and(super::control::stream::hung_up) {
            self.peer = None;
            return true;
        }
        false
    }

    /// The tap's id in its registry.
    pub fn id(&self) -> TapId {
        self.id
    }

    /// Waits for the writer to end; its counters or why it failed.
    pub fn join(self) -> Result<TapStats, String> {
        self.handle
            .join()
            .unwrap_or_else(|_| Err("the writer thread panicked".into()))
    }

    /// What the tap is.
    pub fn desc(&self) -> &TapDesc {
        &self.desc
    }

    /// Whether the writer stopped (count reached or output failed).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

/// What a tap was, for reports.
#[derive(Clone, Debug, Serialize)]
pub struct TapDesc {
    /// Port name.
    pub port: String,
    /// `in`, `out` or `inout`.
    pub direction: &'static str,
    /// Filter expression (empty: everything).
    pub filter: String,
    /// Output file, `-` for standard output.
    pub write: String,
}

/// What a tap did.
#[derive(Clone, Debug, Serialize)]
pub struct TapResult {
    /// The tap.
    #[serde(flatten)]
    pub tap: TapDesc,
    /// Its counters (absent when it failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<TapStats>,
    /// Why it stopped early, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn direction(d: capture::Direction) -> (Direction, &'static str) {
    match d {
        capture::Direction::In => (Direction::Rx, "in"),
        capture::Direction::Out => (Direction::Tx, "out"),
        capture::Direction::Inout => (Direction::Both, "inout"),
    }
}

/// What tap `s` is, for reports (its port by name).
pub(crate) fn desc_of(s: &TapSpec, port_names: &[String]) -> TapDesc {
    TapDesc {
        port: if s.port == freeway_capture::ANY_PORT {
            "any".to_string()
        } else {
            port_names.get(usize::from(s.port)).cloned().unwrap_or_default()
        },
        direction: direction(s.direction).1,
        filter: s.filter.clone(),
        write: s.write.as_ref().map_or("-".into(), |p| p.display().to_string()),
    }
}

/// Attaches `specs` to `reg` and starts their writers. On an error, what was attached is
/// detached again.
pub(crate) fn attach<R: TapRegistry>(
    reg: &R,
    specs: &[TapSpec],
    port_names: &[String],
    workers: usize,
    lossless: bool,
) -> Result<Vec<RunningTap>, RunError> {
    let mut out: Vec<RunningTap> = Vec::new();
    for (n, s) in specs.iter().enumerate() {
        match attach_one(reg, n, s, port_names, workers, lossless) {
            Ok(t) => out.push(t),
            Err(e) => {
                finish(reg, out);
                return Err(e);
            }
        }
    }
    Ok(out)
}

fn attach_one<R: TapRegistry>(
    reg: &R,
    n: usize,
    s: &TapSpec,
    port_names: &[String],
    workers: usize,
    lossless: bool,
) -> Result<RunningTap, RunError> {
    let out: Box<dyn Write + Send> = match &s.write {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).map_err(|x| RunError(format!("tap writing {}: {x}", p.display())))?,
        )),
        None => match s.text {
            Some(o) => Box::new(crate::decode::PcapText::with(BufWriter::new(std::io::stdout()), o)),
            None => Box::new(BufWriter::new(std::io::stdout())),
        },
    };
    attach_to(reg, &format!("fw-tap-{n}"), s, port_names, workers, lossless, out)
}

/// Attaches the tap `s` with a writer thread named `thread` writing to `out`; `lossless`:
/// workers wait for the writer instead of dropping (offline runs).
pub(crate) fn attach_to<R: TapRegistry>(
    reg: &R,
    thread: &str,
    s: &TapSpec,
    port_names: &[String],
    workers: usize,
    lossless: bool,
    out: Box<dyn Write + Send>,
) -> Result<RunningTap, RunError> {
    let (dir, dir_name) = direction(s.direction);
    let desc = desc_of(s, port_names);
    let port_name = desc.port.clone();
    let e = |m: String| RunError(format!("tap on {port_name:?} writing {}: {m}", desc.write));
    // Rings are preallocated: a slot holds at most one frame (MAX_FRAME), and the rings of
    // one tap stay under the registry's memory bound.
    let snap = s.snaplen.min(MAX_FRAME as u32);
    let slots = (MAX_TAP_MEMORY / (snap as usize * workers.max(1))).clamp(1, RING_SLOTS);
    let filter = Filter::new(&s.filter, snap).map_err(|x| e(x.to_string()))?;
    let (id, reader) = reg
        .attach(
            freeway_capture::TapSpec {
                port: s.port,
                dir,
                snaplen: snap,
                ring_slots: slots,
                lossless,
            },
            filter,
        )
        .map_err(|x| e(x.to_string()))?;
    let opts = WriterOptions {
        format: if s.pcapng {
            Format::PcapNg
        } else {
            Format::Pcap { nanos: false }
        },
        count: s.count,
        if_name: port_name.clone(),
        ..WriterOptions::default()
    };
    let writer = TapWriter::new(reader, out, opts).map_err(|x| e(x.to_string()))?;
    let handle = std::thread::Builder::new()
        .name(thread.to_string())
        .spawn({
            let (port, write) = (port_name.clone(), desc.write.clone());
            move || {
                let r = writer.run().map_err(|x| x.to_string());
                match &r {
                    Ok(s) => tracing::info!(tap = id, %port, output = %write, written = s.written, dropped = s.dropped, "capture tap finished"),
                    Err(e) => tracing::error!(tap = id, %port, output = %write, error = %e, "capture tap stopped: its output failed; forwarding goes on"),
                }
                r
            }
        })
        .map_err(|x| {
            reg.detach(id);
            e(format!("cannot start its writer thread: {x}"))
        })?;
    tracing::info!(tap = id, port = %port_name, direction = dir_name, filter = %s.filter, output = %desc.write, "capture tap attached");
    Ok(RunningTap {
        id,
        desc,
        handle,
        peer: None,
    })
}

/// Detaches every tap and waits for its writer to finish the file.
pub(crate) fn finish<R: TapRegistry>(reg: &R, taps: Vec<RunningTap>) -> Vec<TapResult> {
    for t in &taps {
        reg.detach(t.id);
    }
    taps.into_iter()
        .map(|t| {
            let (stats, error) = match t.handle.join() {
                Ok(Ok(s)) => (Some(s), None),
                Ok(Err(e)) => (None, Some(e)),
                Err(_) => (None, Some("the writer thread panicked".into())),
            };
            TapResult {
                tap: t.desc,
                stats,
                error,
            }
        })
        .collect()
}
