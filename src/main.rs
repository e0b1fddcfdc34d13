//! The `stallscope` binary: parses the command line and reports errors.

use std::process::ExitCode;

use clap::Parser;
use stallscope::cli::{Cli, NotReady, Stopped, run};

/// The exit code of a run stopped by Ctrl-C, as shells report SIGINT.
const STOPPED: u8 = 130;

/// The exit code of a probe that found a route not ready.
const NOT_READY: u8 = 1;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`| head`) is not an error of ours.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) if error.downcast_ref::<Stopped>().is_some() => {
            eprintln!("stallscope: {error}");
            ExitCode::from(STOPPED)
        }
        Err(error) if error.downcast_ref::<NotReady>().is_some() => {
            eprintln!("stallscope: {error}");
            ExitCode::from(NOT_READY)
        }
        Err(error) => {
            eprintln!("stallscope: {}", one_line(&error));
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

/// The error and its causes on one line, each cause once: many messages
/// already quote their cause, and `{:#}` would repeat it.
fn one_line(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}
