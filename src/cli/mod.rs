//! The command line: a thin front end over library calls.
//!
//! Data goes to stdout (`--json` where it is data); messages go to stderr.

mod budget;
mod explain;
mod observe;
mod probe;
mod run;
mod runs;
mod service;
mod sim;
mod tunables;
mod tune;
mod watch;
mod whatif;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub use probe::NotReady;
pub use run::Stopped;

use crate::config::{Settings, process_env};
use crate::session::{RunSource, settings_for};

/// stallscope: watch, tune and replay the fault tolerance of streaming LLM calls.
#[derive(Debug, Parser)]
#[command(
    name = "stallscope",
    version,
    about,
    after_help = "With no subcommand, stallscope opens the desktop app (it reads --config, --set and --db)."
)]
pub struct Cli {
    /// Configuration file (default: $STALLSCOPE_CONFIG, else the platform
    /// config directory's stallscope/config.toml when it exists; `run
    /// --scenario` reads none).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Override a tunable: NAME=VALUE (with or without the STALLSCOPE_ prefix).
    #[arg(long = "set", global = true, value_name = "NAME=VALUE")]
    pub overrides: Vec<String>,
    /// The app's database (default: $STALLSCOPE_DB, else stallscope.db in
    /// the platform data directory); subcommands take their own --db.
    #[arg(long, value_name = "PATH", env = "STALLSCOPE_DB")]
    pub db: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run calls through the core against configured providers or a built-in scenario.
    Run(run::Args),
    /// Route readiness: call every configured provider/model with a tiny
    /// prompt and a realistic payload, and say which routes are ready.
    Probe(probe::Args),
    /// The recorded history: list, show, compare and delete runs.
    Runs(runs::Args),
    /// Export a recorded run as JSON lines or a Chrome/Perfetto trace, with every stream's verdict.
    Export(runs::ExportArgs),
    /// Serve a built-in scenario, a scenario file or a recorded run from the fault-injecting simulator.
    Sim(sim::Args),
    /// List every tunable with its value, default, unit and source.
    Tunables(tunables::Args),
    /// Worst-case wall-clock of one call, layer by layer.
    Budget(budget::Args),
    /// What changed tunables (--set) would have done to a recorded run,
    /// replayed through the core in virtual time.
    Whatif(whatif::Args),
    /// The tightest stream timers a recorded run, or a history of runs,
    /// supports, each suggestion checked by what-if, as --set lines and a
    /// .env block.
    Tune(tune::Args),
    /// How one failure would be classified with the configured rules: each
    /// rule tried and the one that matched.
    Explain(explain::Args),
    /// A headless canary: rounds of calls on a schedule, recorded, with Prometheus metrics on /metrics.
    Watch(watch::Args),
    /// A recording streaming proxy in front of your own agent: its calls
    /// pass through unchanged and are recorded, diagnosed and replayable.
    Observe(observe::Args),
}

impl Cli {
    /// The effective settings from the config file, the environment and the
    /// overrides.
    fn settings(&self) -> Result<Settings> {
        let source = RunSource::Config { path: self.config_path(), target: None };
        Ok(settings_for(&source, &self.overrides, &[], &process_env())?)
    }

    /// The config file named by `--config`, else by `$STALLSCOPE_CONFIG`;
    /// `None` means the default location.
    fn config_path(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| std::env::var_os("STALLSCOPE_CONFIG").map(PathBuf::from))
    }
}

/// Runs the command line; `out` receives data. With no subcommand the
/// desktop app opens.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    match &cli.command {
        Some(Command::Run(args)) => run::run(&cli, args, out),
        Some(Command::Probe(args)) => probe::run(&cli, args, out),
        Some(Command::Sim(args)) => sim::run(args, out),
        Some(Command::Runs(args)) => runs::run(args, out),
        Some(Command::Export(args)) => runs::export(args, out),
        Some(Command::Tunables(args)) => tunables::run(args, &cli.settings()?, out),
        Some(Command::Budget(args)) => budget::run(args, &cli.settings()?, out),
        Some(Command::Whatif(args)) => whatif::run(&cli, args, out),
        Some(Command::Tune(args)) => tune::run(&cli, args, out),
        Some(Command::Explain(args)) => explain::run(&cli, args, out),
        Some(Command::Watch(args)) => watch::run(&cli, args, out),
        Some(Command::Observe(args)) => observe::run(&cli, args, out),
        None => crate::gui::open(
            crate::gui::Launch { config: cli.config_path(), overrides: cli.overrides.clone() },
            cli.db.clone(),
        ),
    }
}
