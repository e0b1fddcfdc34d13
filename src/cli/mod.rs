//! The command line: a thin front end over library calls.
//!
//! Data goes to stdout (`--json` where it is data); messages go to stderr.

mod budget;
mod run;
mod runs;
mod sim;
mod tunables;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::{ConfigFile, Layers, Settings};

/// stallscope: watch, tune and replay the fault tolerance of streaming LLM calls.
#[derive(Debug, Parser)]
#[command(name = "stallscope", version, about)]
pub struct Cli {
    /// Configuration file (default: $STALLSCOPE_CONFIG, else the platform
    /// config directory's stallscope/config.toml when it exists; `run
    /// --scenario` reads none).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Override a tunable: NAME=VALUE (with or without the STALLSCOPE_ prefix).
    #[arg(long = "set", global = true, value_name = "NAME=VALUE")]
    pub overrides: Vec<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run calls through the core against configured providers or a built-in scenario.
    Run(run::Args),
    /// The recorded history: list, show, compare and delete runs.
    Runs(runs::Args),
    /// Export a recorded run as JSON lines or a Chrome/Perfetto trace.
    Export(runs::ExportArgs),
    /// Serve a built-in scenario from the fault-injecting simulator.
    Sim(sim::Args),
    /// List every tunable with its value, default, unit and source.
    Tunables(tunables::Args),
    /// Worst-case wall-clock of one call, layer by layer.
    Budget(budget::Args),
}

impl Cli {
    /// The effective settings from the config file, the environment and the
    /// overrides.
    fn settings(&self) -> Result<Settings> {
        let from_env = std::env::var_os("STALLSCOPE_CONFIG").map(PathBuf::from);
        let config = match self.config.as_deref().or(from_env.as_deref()) {
            Some(path) => ConfigFile::Path(path),
            None => ConfigFile::Default,
        };
        Ok(Settings::load(Layers { config, scenario: None, overrides: &self.overrides }, env())?)
    }

    /// The effective settings for a built-in scenario: its recommendations,
    /// the environment and the overrides, and no config file (a scenario
    /// needs none, and a broken one must not stop it).
    fn scenario_settings(&self, name: &str, recommended: &BTreeMap<String, String>) -> Result<Settings> {
        let layers =
            Layers { config: ConfigFile::None, scenario: Some((name, recommended)), overrides: &self.overrides };
        Ok(Settings::load(layers, env())?)
    }
}

/// The process environment. `vars()` would panic on a variable that is not
/// UTF-8; such a variable cannot be one of ours, so it is skipped.
fn env() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

/// Runs the command line; `out` receives data.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    match &cli.command {
        Some(Command::Run(args)) => run::run(&cli, args, out),
        Some(Command::Sim(args)) => sim::run(args, out),
        Some(Command::Runs(args)) => runs::run(args, out),
        Some(Command::Export(args)) => runs::export(args, out),
        Some(Command::Tunables(args)) => tunables::run(args, &cli.settings()?, out),
        Some(Command::Budget(args)) => budget::run(args, &cli.settings()?, out),
        None => {
            // Until the desktop app lands, the default command explains the CLI.
            let mut help = <Cli as clap::CommandFactory>::command();
            write!(out, "{}", help.render_help())?;
            Ok(())
        }
    }
}
