//! The `stallscope` binary: parses the command line and reports errors.

use std::process::ExitCode;

use clap::Parser;
use stallscope::cli::{Cli, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("stallscope: {}", one_line(&error));
            ExitCode::from(2)
        }
    }
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
