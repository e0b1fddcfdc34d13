//! The `stallscope` binary: parses the command line and reports errors.

use std::process::ExitCode;

use clap::Parser;
use stallscope::cli::{Cli, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("stallscope: {error:#}");
            ExitCode::from(2)
        }
    }
}
