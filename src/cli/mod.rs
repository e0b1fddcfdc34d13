//! The command line: a thin front end over library calls.
//!
//! Data goes to stdout (`--json` where it is data); messages go to stderr.

mod budget;
mod tunables;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::Settings;

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
    /// List every tunable with its value, default, unit and source.
    Tunables(tunables::Args),
    /// Worst-case wall-clock of one call, layer by layer.
    Budget(budget::Args),
}

/// Runs the command line; `out` receives data.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    // `vars()` would panic on a variable that is not UTF-8; such a variable
    // cannot be one of ours, so it is skipped.
    let env = || std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let settings = || Settings::load(cli.config.as_deref(), env(), &cli.overrides);
    match &cli.command {
        Some(Command::Tunables(args)) => tunables::run(args, &settings()?, out),
        Some(Command::Budget(args)) => budget::run(args, &settings()?, out),
        None => {
            // Until the desktop app lands, the default command explains the CLI.
            let mut help = <Cli as clap::CommandFactory>::command();
            write!(out, "{}", help.render_help())?;
            Ok(())
        }
    }
}
