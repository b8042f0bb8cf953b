//! `freeway conntrack`: the daemon's connections as conntrack(8) shows them: `-L` (or
//! `list`) with conntrack's selectors, chosen by the daemon; `-E` (or `events`) streams
//! NEW, UPDATE and DESTROY events until Ctrl-C. Text in conntrack's words, its closing line on
//! standard error; `-j`: the connections as a JSON array of flows (`conntrack -o xml`'s
//! keys, see `freeway_conntrack::query`), or one JSON object per event line.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use freeway_datapath::config;
use freeway_datapath::runtime::control::cli::CtFilterArgs;
use freeway_datapath::runtime::control::{self, events, Request};
use freeway_datapath::{out, outln, report};

use super::{daemon_unreachable, run_cmd, RunArgs, Show, DEFAULT_SOCKET};

/// `freeway conntrack`'s arguments.
#[derive(Args)]
pub(crate) struct ConntrackArgs {
    /// List the connections (conntrack -L; the default).
    #[arg(short = 'L', long = "dump", conflicts_with = "event")]
    list: bool,
    /// Show events (NEW, UPDATE, DESTROY) as they happen, until Ctrl-C (conntrack -E).
    #[arg(short = 'E', long = "event")]
    event: bool,
    /// `list` (as -L) or `events` (as -E).
    #[arg(value_name = "ACTION", value_parser = ["list", "events"])]
    action: Option<String>,
    #[command(flatten)]
    filter: CtFilterArgs,
    /// The running daemon's control socket (`freeway run --ctl PATH`).
    #[arg(long = "ctl", short = 'S', value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// A one-shot run instead of asking the daemon: run this configuration (until its inputs
    /// end, or --duration) and list the connections at its end.
    #[arg(short, long, value_name = "FILE", conflicts_with = "event")]
    config: Option<PathBuf>,
    /// How long the one-shot run lasts (with --config): seconds (1.5) or with a unit (300ms,
    /// 5s, 2m).
    #[arg(long, value_name = "DURATION", value_parser = config::parse_duration, requires = "config")]
    duration: Option<Duration>,
    /// Workers of the one-shot run (with --config).
    #[arg(long, requires = "config")]
    workers: Option<usize>,
    /// Print JSON: an array of flows, or with -E one object per event.
    #[arg(short = 'j', long)]
    json: bool,
}

/// `freeway conntrack ...`.
pub(crate) fn run(a: ConntrackArgs) -> Result<(), String> {
    let events = a.event || a.action.as_deref() == Some("events");
    if events && a.list {
        return Err("-L lists, -E (events) streams: one of them".into());
    }
    let filter = a.filter.filter();
    if let Some(cfg) = a.config {
        if events {
            return Err("events come from a running daemon: not with --config".into());
        }
        if !filter.is_empty() {
            return Err("the selectors (-p, -s, -d, ...) ask the running daemon: not with --config".into());
        }
        return run_cmd(
            RunArgs::one_shot(Some(cfg), a.duration, a.workers, a.json),
            Show::Conntrack,
        );
    }
    if events {
        let stop = super::stop_flag();
        let mut o = std::io::stdout().lock();
        let sum = events::events(&a.socket, &filter, a.json, &mut o, &stop).map_err(|e| match e {
            control::CtlError::Unreachable(m) => m,
            e => e.to_string(),
        })?;
        if sum.lost != 0 {
            eprintln!(
                "freeway conntrack: {} events lost (connections created and gone between two looks at the table)",
                sum.lost
            );
        }
        eprintln!(
            "freeway v{} (freeway conntrack): {} flow events have been shown.",
            env!("CARGO_PKG_VERSION"),
            sum.shown
        );
        return Ok(());
    }
    let r = control::send(&a.socket, &Request::ConntrackList { filter }).map_err(|e| match e {
        control::CtlError::Unreachable(m) => daemon_unreachable(&m),
        e => e.to_string(),
    })?;
    let n = r.data.as_array().map_or(0, |v| v.len());
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r.data).expect("json"));
    } else {
        out!("{}", r.text);
        eprintln!("{}", report::conntrack_summary(n));
    }
    Ok(())
}
