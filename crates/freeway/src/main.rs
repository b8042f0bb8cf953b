//! The `freeway` command: run the datapath, dump its tables, run its benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use freeway_bridge::Padded;
use freeway_datapath::config::{self, Checked};
use freeway_datapath::report;
use freeway_datapath::runtime::{self, RunOptions};

mod conntrack;
mod link;
mod top;
use freeway_datapath::{out, outln};

#[derive(Parser)]
#[command(
    name = "freeway",
    version,
    about = "A multi-core userspace packet datapath: learning bridge, IPv4/IPv6 router, connection tracking and capture"
)]
struct Cli {
    /// Log level of the structured logs on standard error: error, warn, info, debug, trace
    /// (or a full filter such as `freeway=debug`; the environment variable FREEWAY_LOG wins).
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL")]
    log_level: String,
    /// Log format: text, or json (one JSON object per event).
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    cmd: Cmd,
}

/// Installs the `tracing` subscriber: events at or above the level, to standard error.
fn init_logs(level: &str, format: &str) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("FREEWAY_LOG") {
        Ok(f) if !f.is_empty() => EnvFilter::try_new(&f).map_err(|e| format!("FREEWAY_LOG={f:?}: {e}"))?,
        _ => EnvFilter::try_new(level).map_err(|e| format!("--log-level {level:?}: {e}"))?,
    };
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_names(true)
        .with_target(false);
    let r = if format == "json" {
        b.json().try_init()
    } else {
        b.with_ansi(false).try_init()
    };
    r.map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the datapath (the built-in demo configuration when no --config is given).
    Run(RunArgs),
    /// The running daemon's forwarding database, like `bridge fdb show` (`--config`: run a
    /// configuration once and print the FDB as it stood at the end).
    Fdb(TableArgs),
    /// The running daemon's routing table, like `ip route` (`--config`: the routes a
    /// configuration file describes, without running it).
    Route(TableArgs),
    /// The running daemon's neighbour (ARP/ND) table, like `ip neigh` (`--config`: run a
    /// configuration once and print the table at its end).
    Neigh(TableArgs),
    /// The running daemon's connection table, like `conntrack -L` with its selectors (`-p`,
    /// `-s`, `-d`, `--state`, ...), or its events, like `conntrack -E` (`--config`: run a
    /// configuration once and list the connections at its end).
    Conntrack(conntrack::ConntrackArgs),
    /// The running daemon's ports, like `ip link show`; with `-s`, their counters as `ip -s
    /// link` prints them.
    Link(link::LinkArgs),
    /// The running daemon's counters: per port packets, bytes and their rates over the last
    /// second, per worker, drops by reason (`--config`: run a configuration once and print its
    /// summary).
    Stats(TableArgs),
    /// A live view of the running daemon: rates per port and worker, drops, table sizes.
    Top {
        /// The daemon's control socket.
        #[arg(long = "ctl", short = 'S', value_name = "PATH", default_value = DEFAULT_SOCKET)]
        socket: PathBuf,
        /// How often the screen is refreshed: seconds (0.5) or with a unit (500ms, 2s).
        #[arg(short, long, value_name = "DURATION", value_parser = config::parse_duration, default_value = "1")]
        interval: Duration,
    },
    /// Capture packets on a port of the running daemon, like tcpdump; or read a capture file
    /// (`-r`); or run a configuration once with a capture on it (`--config`).
    Capture(CaptureArgs),
    /// Talk to a running datapath (`freeway run --ctl PATH`): stats, fdb, routes, neighbours, connections.
    #[command(disable_help_subcommand = true)]
    Ctl(CtlArgs),
    /// Check a configuration file and print what it describes, without running it.
    Check {
        /// The TOML file.
        config: PathBuf,
    },
    /// Print the embedded default configuration (a starting point for your own).
    DefaultConfig {
        /// The router demo instead: two VLANs routed, a stateful firewall.
        #[arg(long)]
        router: bool,
    },
    /// Benchmarks that reproduce the seeds' experiments.
    #[command(subcommand)]
    Bench(freeway_bench::BenchCmd),
    /// Long-running reliability checks (the churn oracle).
    #[command(subcommand)]
    Stress(freeway_bench::churn::StressCmd),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on standard output.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (freeway.1, freeway-run.1, ...) into a directory.
    Manpages {
        /// The directory (created if missing); only files named freeway*.1 are written there.
        dir: PathBuf,
    },
}

#[derive(Args)]
struct RunArgs {
    /// TOML configuration file (default: the embedded demo, see `freeway default-config`).
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// Stop after this long: seconds (1.5) or with a unit (300ms, 5s, 2m, 1h); overrides the
    /// config.
    #[arg(short, long, value_name = "DURATION", value_parser = config::parse_duration)]
    duration: Option<Duration>,
    /// Number of workers (overrides the config).
    #[arg(short, long)]
    workers: Option<usize>,
    /// Print JSON instead of tables.
    #[arg(short = 'j', long)]
    json: bool,
    /// No per-second table, only the summary.
    #[arg(short, long)]
    quiet: bool,
    /// Also print the FDB at the end (`run` only).
    #[arg(long)]
    fdb: bool,
    /// Full FIB lookup for every routed packet (the baseline of the per-worker route cache).
    #[arg(long)]
    no_route_cache: bool,
    /// Listen for `freeway ctl` on this Unix socket (mode 0600) while running.
    #[arg(long, value_name = "PATH")]
    ctl: Option<PathBuf>,
    /// Members of this group (a name or a number) may send every control request; the socket
    /// becomes 0660 and owned by the group. Checked per connection with the peer's credentials.
    #[arg(long, value_name = "GROUP", requires = "ctl")]
    ctl_group: Option<String>,
    /// Members of this group may send the requests that only read (stats, tables, trace); the
    /// socket becomes 0666 and every connection is checked.
    #[arg(long, value_name = "GROUP", requires = "ctl")]
    ctl_read_group: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9477).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

impl RunArgs {
    /// Who may use the control socket, from `--ctl-group` and `--ctl-read-group`.
    fn ctl_access(&self) -> Result<runtime::control::access::Access, String> {
        use runtime::control::access::{Access, Group};
        let group = |g: &Option<String>, flag: &str| {
            g.as_deref()
                .map(Group::resolve)
                .transpose()
                .map_err(|e| format!("{flag}: {e}"))
        };
        Ok(Access {
            group: group(&self.ctl_group, "--ctl-group")?,
            read_group: group(&self.ctl_read_group, "--ctl-read-group")?,
        })
    }
}

/// The control socket a daemon (`freeway run --ctl`) listens on unless told otherwise, and
/// the one its clients ask.
const DEFAULT_SOCKET: &str = "/run/freeway.sock";

/// `freeway fdb|route|neigh|conntrack`: ask the running daemon, or read a configuration once.
#[derive(Args)]
struct TableArgs {
    /// `show` or `list`, as `ip route show` and `bridge fdb show` take it (the table is
    /// printed either way).
    #[arg(value_parser = ["show", "list"])]
    verb: Option<String>,
    /// The running daemon's control socket (`freeway run --ctl PATH`).
    #[arg(long = "ctl", short = 'S', value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// A one-shot run instead of asking the daemon: run this configuration (until its inputs
    /// end, or --duration) and print the table as it stood at the end. For `route`, the
    /// configured routes, without running.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// How long the one-shot run lasts (with --config): seconds (1.5) or with a unit (300ms,
    /// 5s, 2m).
    #[arg(short, long, value_name = "DURATION", value_parser = config::parse_duration, requires = "config")]
    duration: Option<Duration>,
    /// Workers of the one-shot run (with --config).
    #[arg(short, long, requires = "config")]
    workers: Option<usize>,
    /// Print JSON (the shapes of `bridge -j`, `ip -j` and `conntrack -o json`).
    #[arg(short = 'j', long)]
    json: bool,
}

impl TableArgs {
    /// The arguments of the one-shot run of `config`.
    fn one_shot(&self, config: PathBuf) -> RunArgs {
        RunArgs::one_shot(Some(config), self.duration, self.workers, self.json)
    }
}

impl RunArgs {
    /// A quiet run of `config` (the demo when none) without a control socket or metrics: the
    /// one-shot runs of the client commands.
    fn one_shot(config: Option<PathBuf>, duration: Option<Duration>, workers: Option<usize>, json: bool) -> RunArgs {
        RunArgs {
            config,
            duration,
            workers,
            json,
            quiet: true,
            fdb: false,
            no_route_cache: false,
            ctl: None,
            ctl_group: None,
            ctl_read_group: None,
            metrics: None,
        }
    }
}

/// The words of the control request that prints each table.
fn table_request(show: Show) -> &'static [&'static str] {
    match show {
        Show::Fdb => &["fdb", "show"],
        Show::Neigh => &["neigh", "show"],
        Show::Conntrack => &["conntrack", "list"],
        Show::Summary => &["stats"],
        _ => &["route", "show"],
    }
}

/// `freeway fdb|neigh|conntrack|route`: the daemon's table (or a one-shot run with --config).
fn table_cmd(a: TableArgs, show: Show) -> Result<(), String> {
    if let Some(cfg) = a.config.clone() {
        return if show == Show::Route {
            route_cmd(&cfg, a.json)
        } else {
            run_cmd(a.one_shot(cfg), show)
        };
    }
    let words: Vec<String> = table_request(show).iter().map(|w| w.to_string()).collect();
    let r = runtime::ctl_request(&a.socket, &words).map_err(|e| daemon_unreachable(&e))?;
    if r["ok"] != true {
        return Err(r["error"]
            .as_str()
            .unwrap_or("the daemon refused the request")
            .to_string());
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r["data"]).expect("json"));
    } else {
        out!("{}", r["text"].as_str().unwrap_or_default());
    }
    Ok(())
}

/// The error of a client command that found no daemon (`e` names the socket and how to start
/// a daemon there), with how to do without one.
fn daemon_unreachable(e: &str) -> String {
    format!("{e}; or run a configuration once with --config FILE")
}

#[derive(Args)]
struct CtlArgs {
    /// The socket `freeway run --ctl PATH` listens on.
    #[arg(short, long, default_value = "/run/freeway.sock")]
    socket: PathBuf,
    /// Print JSON.
    #[arg(short = 'j', long, global = true)]
    json: bool,
    /// The request, e.g. `route add 10.9.0.0/24 via 10.0.20.7` (`help` lists them).
    #[command(subcommand)]
    cmd: runtime::control::cli::CtlCmd,
}

#[derive(Args)]
struct CaptureArgs {
    /// A one-shot run instead of a tap on the daemon: run this configuration with the capture
    /// on it, until its inputs end, --duration or -c (e.g. on pcap files).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// How long the one-shot run lasts (with --config): seconds (1.5) or with a unit (300ms,
    /// 5s, 2m, 1h); overrides the config.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_duration, requires = "config")]
    duration: Option<Duration>,
    /// Number of workers of the one-shot run (with --config).
    #[arg(long, requires = "config")]
    workers: Option<usize>,
    /// Print the compiled BPF program and exit: `-d` as text, `-dd` as a C array, `-ddd` as
    /// decimal numbers (tcpdump's three forms).
    #[arg(short = 'd', action = clap::ArgAction::Count)]
    dump: u8,
    /// The running daemon's control socket (`freeway run --ctl PATH`; default
    /// /run/freeway.sock), when no --config or -r is given.
    #[arg(long, short = 'S', value_name = "PATH", conflicts_with_all = ["config", "duration", "workers"])]
    ctl: Option<PathBuf>,
    /// Read packets from this pcap or pcapng file instead of capturing, filter them and print
    /// (or `-w` write) the matches, as `tcpdump -r`.
    #[arg(short = 'r', value_name = "FILE", conflicts_with_all = ["config", "duration", "workers", "ctl"])]
    read: Option<PathBuf>,
    /// Print the ports that can be captured on (of the daemon with --ctl, else of the
    /// config) and exit, as `tcpdump -D`.
    #[arg(short = 'D')]
    list_ports: bool,
    /// Print the link-level header on each line (MAC addresses, ethertype, VLAN tags), as
    /// `tcpdump -e`.
    #[arg(short = 'e')]
    link: bool,
    /// Do not resolve addresses or ports to names. Freeway never does; accepted because
    /// `tcpdump -n` is a habit.
    #[arg(short = 'n')]
    numeric: bool,
    /// What to capture: -i PORT, -Q, -s, -c, --format, the filter.
    #[command(flatten)]
    tap: runtime::control::cli::TapArgs,
    /// Write packets to this file (`-` = standard output; `.pcapng` writes pcapng). Without
    /// -w, one decoded line per packet is printed, as tcpdump does.
    #[arg(short = 'w')]
    write: Option<String>,
}

/// What a run prints at the end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Show {
    Summary,
    Fdb,
    Neigh,
    Conntrack,
    Capture,
    /// `freeway route`: the routing table (never from a run).
    Route,
}

/// Set by SIGINT and SIGTERM: they stop the run (a second one ends the process at once); see
/// [`reload_flag`] for SIGHUP.
fn stop_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // If a handler cannot be installed, the signal simply kills the process.
            let _ = signal_hook::flag::register_conditional_shutdown(sig, 1, f.clone());
            let _ = signal_hook::flag::register(sig, f.clone());
        }
        f
    })
    .clone()
}

/// Set by SIGHUP: the run reads its configuration again and applies what can change live.
fn reload_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        let _ = signal_hook::flag::register(signal_hook::consts::SIGHUP, f.clone());
        f
    })
    .clone()
}

fn load(args: &RunArgs) -> Result<Checked, String> {
    match &args.config {
        Some(p) => config::load(p).map_err(|e| e.to_string()),
        None => config::parse(config::DEFAULT_CONFIG, "<built-in default>", None).map_err(|e| e.to_string()),
    }
}

fn run_cmd(args: RunArgs, show: Show) -> Result<(), String> {
    let cfg = load(&args)?;
    run_loaded(args, cfg, show)
}

fn run_loaded(args: RunArgs, mut cfg: Checked, show: Show) -> Result<(), String> {
    if args.no_route_cache {
        match cfg.router.as_mut() {
            Some(r) => r.route_cache = false,
            None => return Err("--no-route-cache: this configuration has no router".into()),
        }
    }
    let dump_only = show != Show::Summary;
    if let Some(w) = args.workers {
        if w == 0 || w > config::MAX_WORKERS {
            return Err(format!(
                "--workers must be between 1 and {} (got {w})",
                config::MAX_WORKERS
            ));
        }
    }
    let tables = !args.json && !args.quiet && !dump_only;
    // Under systemd (`Type=notify`) the service is up once the datapath forwards; elsewhere
    // NOTIFY_SOCKET is unset and this does nothing.
    let mut notify_ready = || {
        if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
            tracing::warn!(error = %e, "cannot tell the service manager that the datapath is ready");
        }
    };
    let mut printer = report::LivePrinter::default();
    let mut cb = |s: &runtime::Snapshot| printer.print(s);
    let config_path = args.config.clone();
    let mut read_again = || match &config_path {
        Some(p) => config::load(p).map_err(|e| e.to_string()),
        None => Err("the built-in demo configuration has no file to read again".to_string()),
    };
    let opts = RunOptions {
        duration: args.duration,
        workers: args.workers,
        interval: Duration::from_secs(1),
        on_snapshot: if tables { Some(&mut cb) } else { None },
        stop: Some(stop_flag()),
        stop_when_taps_done: show == Show::Capture,
        control: args.ctl.clone(),
        metrics: args.metrics.clone(),
        ctl_access: args.ctl_access()?,
        on_ready: Some(&mut notify_ready),
        reload: Some(reload_flag()),
        reload_config: Some(&mut read_again),
        config_path: args
            .config
            .as_ref()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
    };
    if tables {
        let src = args
            .config
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "the built-in demo configuration".into());
        outln!("{}", banner(cfg.ports.len(), args.workers.unwrap_or(cfg.workers), &src));
    }
    let res = runtime::run::<Padded>(&cfg, opts).map_err(|e| e.to_string())?;
    if show == Show::Fdb {
        report::print_fdb(&res.fdb, &res.port_names, args.json);
    } else if show == Show::Neigh {
        report::print_neigh(&res.neighbours, args.json);
    } else if show == Show::Conntrack {
        report::print_conntrack(&res.connections, args.json);
    } else if show == Show::Capture {
        report::print_capture(&res.taps, &res.last);
    } else if args.json {
        let mut v = serde_json::to_value(&res.last).expect("snapshot serialises");
        if args.fdb {
            v["fdb_table"] = serde_json::to_value(report::fdb_json(&res.fdb, &res.port_names)).expect("fdb serialises");
        }
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        report::print_summary(&res.last);
        if args.fdb {
            outln!();
            report::print_fdb(&res.fdb, &res.port_names, false);
        }
    }
    for e in &res.close_errors {
        eprintln!("freeway: {e}");
    }
    if res.close_errors.is_empty() {
        Ok(())
    } else {
        Err("some ports reported errors when closing".into())
    }
}

/// `freeway route --config FILE`: the routes a configuration describes, without running it.
fn route_cmd(path: &std::path::Path, json: bool) -> Result<(), String> {
    let cfg = config::load(path).map_err(|e| e.to_string())?;
    let (records, text) = runtime::route_table(&cfg).map_err(|e| e.to_string())?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&records).expect("json"));
    } else {
        out!("{text}");
    }
    Ok(())
}

fn ctl_cmd(a: CtlArgs) -> Result<(), String> {
    let req = a.cmd.request().map_err(|e| e.to_string())?;
    let r = runtime::ctl_send(&a.socket, &req).map_err(|e| e.to_string())?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r.data).expect("json"));
    } else {
        out!("{}", r.text);
    }
    Ok(())
}

/// The usage of `freeway capture`.
const CAPTURE_USAGE: &str = "freeway capture -i PORT [-Q in|out|inout] [-s SNAPLEN] [-c COUNT] [-w FILE] [FILTER...]";

/// `freeway capture --ctl PATH`: a tap on a running datapath, streamed back.
fn capture_live(a: &CaptureArgs, sock: &std::path::Path) -> Result<(), String> {
    let w = a.write.as_deref().unwrap_or("-");
    let mut tap = a.tap.options(CAPTURE_USAGE).map_err(|e| e.to_string())?;
    if tap.format.is_none() && w != "-" {
        tap.format = Some(config::capture::FileFormat::of_path(std::path::Path::new(w)));
    }
    let mut out: Box<dyn std::io::Write> = if a.write.is_none() {
        let opts = freeway_datapath::decode::Options { link: a.link };
        Box::new(freeway_datapath::decode::PcapText::with(std::io::stdout().lock(), opts))
    } else if w == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(w).map_err(|e| format!("-w {w}: {e}"))?,
        ))
    };
    // Ctrl-C or SIGTERM ends the capture in order: the file is whole, the tap is removed,
    // and the summary printed, as tcpdump does.
    let stop = stop_flag();
    let sum = runtime::ctl_capture(sock, &tap, &mut out, &stop).map_err(|e| match e {
        runtime::control::CtlError::Unreachable(_) => daemon_unreachable(&e.to_string()),
        e => e.to_string(),
    })?;
    drop(out);
    eprint!("{}", sum.lines());
    Ok(())
}

/// `freeway capture -r FILE`: a file filtered offline, printed or written (`-w`).
fn capture_read(a: &CaptureArgs, file: &std::path::Path) -> Result<(), String> {
    use freeway_datapath::decode::{read_file, Options, ReadOutput, ReadRequest};
    let filter = a.tap.expression.join(" ");
    // tcpdump's line, once the file has been read as one: a file it cannot read gets only
    // the error.
    let opened = |snaplen: u32| {
        eprintln!(
            "reading from file {}, link-type EN10MB (Ethernet), snapshot length {snaplen}",
            file.display()
        )
    };
    let req = ReadRequest {
        filter: &filter,
        count: a.tap.count,
        snaplen: if a.tap.snaplen == 0 { 262_144 } else { a.tap.snaplen },
        opts: Options { link: a.link },
        opened: Some(&opened),
    };
    let stdout = std::io::stdout();
    match a.write.as_deref() {
        None => read_file(file, &req, ReadOutput::Text(&mut stdout.lock()))?,
        Some("-") => read_file(file, &req, ReadOutput::Pcap(&mut stdout.lock()))?,
        Some(w) => {
            let mut f = std::io::BufWriter::new(std::fs::File::create(w).map_err(|e| format!("-w {w}: {e}"))?);
            read_file(file, &req, ReadOutput::Pcap(&mut f))?;
            std::io::Write::flush(&mut f).map_err(|e| format!("-w {w}: {e}"))?;
            return Ok(());
        }
    };
    Ok(())
}

fn capture_cmd(a: CaptureArgs) -> Result<(), String> {
    let run = RunArgs::one_shot(a.config.clone(), a.duration, a.workers, false);
    let _ = a.numeric;
    if a.dump > 0 {
        let filter = a.tap.expression.join(" ");
        let prog = freeway_capture::compile(&filter, a.tap.snaplen.max(1)).map_err(|e| format!("filter: {e}"))?;
        match a.dump {
            1 => out!("{}", freeway_capture::bpf::dump(&prog)),
            2 => out!("{}", freeway_capture::bpf::dump_c(&prog)),
            _ => out!("{}", freeway_capture::bpf::dump_decimal(&prog)),
        }
        return Ok(());
    }
    if let Some(file) = &a.read {
        return capture_read(&a, file);
    }
    let daemon = a
        .config
        .is_none()
        .then(|| a.ctl.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)));
    if a.list_ports {
        let names: Vec<String> = match &daemon {
            Some(sock) => {
                let r =
                    runtime::ctl_request(sock, &["link".to_string(), "show".to_string()]).map_err(|e| e.to_string())?;
                r["data"]
                    .as_array()
                    .map(|ports| {
                        ports
                            .iter()
                            .filter_map(|p| p["ifname"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            }
            None => load(&run)?.ports.iter().map(|p| p.name.clone()).collect(),
        };
        for (i, n) in names.iter().enumerate() {
            outln!("{}.{n}", i + 1);
        }
        return Ok(());
    }
    if let Some(sock) = &daemon {
        return capture_live(&a, sock);
    }
    let tap = a.tap.options(CAPTURE_USAGE).map_err(|e| e.to_string())?;
    let mut cfg = load(&run)?;
    let text = a.write.is_none();
    let w = a.write.as_deref().unwrap_or("-");
    let write = (w != "-").then(|| PathBuf::from(w));
    let names: Vec<String> = cfg.ports.iter().map(|p| p.name.clone()).collect();
    let compile = freeway_datapath::config::capture::filter_compiles;
    let mut spec = tap
        .check(&names, compile, write)
        .map_err(|e| runtime::control::cli::flag_error(&e))?;
    spec.text = text.then_some(freeway_datapath::decode::Options { link: a.link });
    if spec.write.is_none() && cfg.taps.iter().any(|t| t.write.is_none()) {
        return Err("a tap of the config already writes to standard output: use -w FILE".into());
    }
    cfg.taps.push(spec);
    run_loaded(run, cfg, Show::Capture)
}

fn check_cmd(path: PathBuf) -> Result<(), String> {
    let cfg = config::load(&path).map_err(|e| e.to_string())?;
    outln!("{}: ok", path.display());
    outln!("  workers: {}", cfg.workers);
    match cfg.duration_secs {
        Some(d) => outln!("  duration: {d} s"),
        None => outln!("  duration: until inputs end (5 s if a generator never ends)"),
    }
    for (i, p) in cfg.ports.iter().enumerate() {
        outln!("  port {i}: {} ({}), {}", p.name, p.kind.name(), p.vlan);
    }
    outln!(
        "  fdb: learn_limit {} static {} ageing {} ms",
        cfg.fdb.learn_limit,
        cfg.statics.len(),
        cfg.fdb.ageing_ms
    );
    if let Some(r) = &cfg.router {
        outln!(
            "  router: mac {}, route cache {}, icmp errors {}/s burst {}, neigh limit {}",
            r.mac,
            if r.route_cache { "on" } else { "off" },
            r.icmp_rate,
            r.icmp_burst,
            r.neigh_limit
        );
        for i in &r.interfaces {
            let mut addrs: Vec<String> = i.v4.iter().map(|(a, l)| format!("{a}/{l}")).collect();
            addrs.extend(i.v6.iter().map(|(a, l)| format!("{a}/{l}")));
            outln!(
                "  interface {}: vlan {} mac {} {}",
                i.name,
                i.vlan,
                i.mac,
                addrs.join(" ")
            );
        }
        outln!(
            "  routes: {} static, neighbours: {} static",
            r.routes.len(),
            r.neighs.len()
        );
    }
    if let Some(c) = &cfg.conntrack {
        outln!("  conntrack: max {}, {} zone limits", c.max, c.zone_limits.len());
    }
    for line in firewall_lines(&cfg) {
        outln!("  {line}");
    }
    for t in &cfg.taps {
        outln!(
            "  tap on {}: {:?} filter {:?} to {}",
            cfg.ports[usize::from(t.port)].name,
            t.direction,
            t.filter,
            t.write.as_ref().map_or("-".into(), |p| p.display().to_string())
        );
    }
    Ok(())
}

/// Writes one manual page per command (hidden ones aside) into `dir`.
fn manpages(dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cmd = <Cli as clap::CommandFactory>::command();
    clap_mangen::generate_to(cmd, dir).map_err(|e| format!("{}: {e}", dir.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = init_logs(&cli.log_level, &cli.log_format) {
        eprintln!("freeway: error: {e}");
        return ExitCode::FAILURE;
    }
    let r = match cli.cmd {
        Cmd::Run(a) => run_cmd(a, Show::Summary),
        Cmd::Fdb(a) => table_cmd(a, Show::Fdb),
        Cmd::Neigh(a) => table_cmd(a, Show::Neigh),
        Cmd::Conntrack(a) => conntrack::run(a),
        Cmd::Link(a) => link::run(a),
        Cmd::Route(a) => table_cmd(a, Show::Route),
        Cmd::Stats(a) => table_cmd(a, Show::Summary),
        Cmd::Top { socket, interval } => top::run(&socket, interval),
        Cmd::Capture(a) => capture_cmd(a),
        Cmd::Ctl(a) => ctl_cmd(a),
        Cmd::Check { config } => check_cmd(config),
        Cmd::DefaultConfig { router } => {
            out!(
                "{}",
                if router {
                    config::ROUTER_CONFIG
                } else {
                    config::DEFAULT_CONFIG
                }
            );
            Ok(())
        }
        Cmd::Bench(b) => freeway_bench::main(b),
        Cmd::Stress(s) => freeway_bench::churn::main(s),
        Cmd::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "freeway", &mut script);
            out!("{}", String::from_utf8_lossy(&script));
            Ok(())
        }
        Cmd::Manpages { dir } => manpages(&dir),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("freeway: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What `freeway check` says of `[firewall]`: the ports new connections may start from
/// (when the config names any, or has no ruleset), and the nftables ruleset's size.
fn firewall_lines(cfg: &config::Checked) -> Vec<String> {
    let Some(f) = &cfg.firewall else { return Vec::new() };
    let mut lines = Vec::new();
    if !f.allow_new_from.is_empty() || f.ruleset.is_none() {
        let from: Vec<&str> = f
            .allow_new_from
            .iter()
            .map(|p| cfg.ports[usize::from(*p)].name.as_str())
            .collect();
        let from = if from.is_empty() {
            "no port".to_string()
        } else {
            from.join(", ")
        };
        lines.push(format!("firewall: new connections allowed from {from}"));
    }
    if let Some((src, rs)) = &f.ruleset {
        let n = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let chains = rs.tables.iter().flat_map(|t| &t.chains);
        let rules = chains.clone().map(|c| c.rules.len()).sum();
        lines.push(format!(
            "firewall: nftables ruleset from {src}: {}, {}, {}",
            n(rs.tables.len(), "table"),
            n(chains.count(), "chain"),
            n(rules, "rule")
        ));
    }
    lines
}

/// The line a run starts with: what it bridges, from where.
fn banner(ports: usize, workers: usize, src: &str) -> String {
    let s = |n: usize| if n == 1 { "" } else { "s" };
    format!(
        "freeway: bridging {ports} port{} with {workers} worker{}, from {src} (Ctrl-C stops)",
        s(ports),
        s(workers)
    )
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn check_names_the_firewalls_ruleset_not_an_empty_list_of_ports() {
        use freeway_datapath::config;
        let demo = config::ROUTER_CONFIG;
        let cfg = config::parse(demo, "r.toml", None).unwrap();
        assert_eq!(
            super::firewall_lines(&cfg),
            ["firewall: new connections allowed from lan"]
        );
        let with_rules = demo.replace(
            "allow_new_from = [\"lan\"]",
            "rules = \"table inet f { chain fwd { type filter hook forward priority 0; policy drop; \
             ct state established accept; iifname lan accept; } }\"",
        );
        assert_ne!(with_rules, demo);
        let cfg = config::parse(&with_rules, "r.toml", None).unwrap();
        assert_eq!(
            super::firewall_lines(&cfg),
            ["firewall: nftables ruleset from inline rules: 1 table, 1 chain, 2 rules"]
        );
    }

    #[test]
    fn the_banner_counts_one_port_and_one_worker_in_the_singular() {
        assert_eq!(
            super::banner(1, 1, "a.toml"),
            "freeway: bridging 1 port with 1 worker, from a.toml (Ctrl-C stops)"
        );
        assert_eq!(
            super::banner(3, 2, "a.toml"),
            "freeway: bridging 3 ports with 2 workers, from a.toml (Ctrl-C stops)"
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
