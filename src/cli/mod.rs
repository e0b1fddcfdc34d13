//! The command line: a thin front end over library calls.
//!
//! Data goes to stdout (`--json` where it is data); messages go to stderr.

mod budget;
mod run;
mod sim;
mod tunables;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::{Layers, Settings};

/// stallscope: watch, tune and replay the fault tolerance of streaming LLM calls.
#[derive(Debug, Parser)]
#[command(name = "stallscope", version, about)]
pub struct Cli {
    /// Configuration file (default: the platform config directory's
    /// stallscope/config.toml, when it exists).
    #[arg(long, global = true, env = "STALLSCOPE_CONFIG", value_name = "PATH")]
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
    /// Serve a built-in scenario from the fault-injecting simulator.
    Sim(sim::Args),
    /// List every tunable with its value, default, unit and source.
    Tunables(tunables::Args),
    /// Worst-case wall-clock of one call, layer by layer.
    Budget(budget::Args),
}

/// The effective settings from the config file, the environment and the
/// overrides, with a scenario's recommendations when given.
fn load_settings(
    config: Option<&Path>,
    overrides: &[String],
    scenario: Option<(&str, &BTreeMap<String, String>)>,
) -> Result<Settings> {
    Ok(Settings::load(Layers { config, scenario, overrides }, env())?)
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
        Some(Command::Tunables(args)) => {
            tunables::run(args, &load_settings(cli.config.as_deref(), &cli.overrides, None)?, out)
        }
        Some(Command::Budget(args)) => {
            budget::run(args, &load_settings(cli.config.as_deref(), &cli.overrides, None)?, out)
        }
        None => {
            // Until the desktop app lands, the default command explains the CLI.
            let mut help = <Cli as clap::CommandFactory>::command();
            write!(out, "{}", help.render_help())?;
            Ok(())
        }
    }
}
