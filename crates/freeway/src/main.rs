//! The `freeway` command: run the datapath, dump its tables, run its benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use freeway::config::{self, Checked};
use freeway::report;
use freeway::runtime::{self, RunOptions};
use freeway_bridge::Padded;

#[derive(Parser)]
#[command(
    name = "freeway",
    version,
    about = "A multi-core userspace packet datapath: learning bridge on generator, pcap and sink ports"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the datapath (the built-in demo configuration when no --config is given).
    Run(RunArgs),
    /// Run a configuration, then print the forwarding database as it stood at the end.
    Fdb(RunArgs),
    /// Check a configuration file and print what it describes, without running it.
    Check {
        /// The TOML file.
        config: PathBuf,
    },
    /// Print the embedded default configuration (a starting point for your own).
    DefaultConfig,
    /// Benchmarks that reproduce the seeds' experiments.
    #[command(subcommand)]
    Bench(freeway::bench::BenchCmd),
}

#[derive(Args)]
struct RunArgs {
    /// TOML configuration file (default: the embedded demo, see `freeway default-config`).
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// Stop after this many seconds (overrides the config).
    #[arg(short, long)]
    duration: Option<f64>,
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
}

fn stop_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        let g = f.clone();
        // If a handler cannot be installed, Ctrl-C simply kills the process.
        let _ = ctrlc::set_handler(move || g.store(true, Ordering::Relaxed));
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

fn run_cmd(args: RunArgs, dump_fdb_only: bool) -> Result<(), String> {
    let cfg = load(&args)?;
    if let Some(d) = args.duration {
        if d.is_nan() || d <= 0.0 {
            return Err(format!("--duration must be positive (got {d})"));
        }
    }
    if let Some(w) = args.workers {
        if w == 0 || w > config::MAX_WORKERS {
            return Err(format!(
                "--workers must be between 1 and {} (got {w})",
                config::MAX_WORKERS
            ));
        }
    }
    let tables = !args.json && !args.quiet && !dump_fdb_only;
    let mut printer = report::LivePrinter::default();
    let mut cb = |s: &runtime::Snapshot| printer.print(s);
    let opts = RunOptions {
        duration: args.duration.map(Duration::from_secs_f64),
        workers: args.workers,
        interval: Duration::from_secs(1),
        on_snapshot: if tables { Some(&mut cb) } else { None },
        stop: Some(stop_flag()),
    };
    if tables {
        let src = args
            .config
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "the built-in demo configuration".into());
        println!(
            "freeway: bridging {} ports with {} workers, from {src} (Ctrl-C stops)",
            cfg.ports.len(),
            args.workers.unwrap_or(cfg.workers)
        );
    }
    let res = runtime::run::<Padded>(&cfg, opts).map_err(|e| e.to_string())?;
    if dump_fdb_only {
        report::print_fdb(&res.fdb, &res.port_names, args.json);
    } else if args.json {
        let mut v = serde_json::to_value(&res.last).expect("snapshot serialises");
        if args.fdb {
            v["fdb_table"] = serde_json::to_value(report::fdb_json(&res.fdb, &res.port_names)).expect("fdb serialises");
        }
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        report::print_summary(&res.last);
        if args.fdb {
            println!();
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

fn check_cmd(path: PathBuf) -> Result<(), String> {
    let cfg = config::load(&path).map_err(|e| e.to_string())?;
    println!("{}: ok", path.display());
    println!("  workers: {}", cfg.workers);
    match cfg.duration_secs {
        Some(d) => println!("  duration: {d} s"),
        None => println!("  duration: until inputs end (5 s if a generator never ends)"),
    }
    for (i, p) in cfg.ports.iter().enumerate() {
        println!("  port {i}: {} ({}), {}", p.name, p.kind.name(), p.vlan);
    }
    println!(
        "  fdb: learn_limit {} static {} ageing {} ms",
        cfg.fdb.learn_limit,
        cfg.statics.len(),
        cfg.fdb.ageing_ms
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(a) => run_cmd(a, false),
        Cmd::Fdb(a) => run_cmd(a, true),
        Cmd::Check { config } => check_cmd(config),
        Cmd::DefaultConfig => {
            print!("{}", config::DEFAULT_CONFIG);
            Ok(())
        }
        Cmd::Bench(b) => freeway::bench::main(b),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("freeway: error: {e}");
            ExitCode::FAILURE
        }
    }
}
