//! `stallscope sim`: serve one built-in scenario on loopback.

use std::io::Write;

use anyhow::Result;

use crate::sim::{SimServer, builtin, builtin_names};

/// Options of `stallscope sim`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The scenario to serve.
    #[arg(long, value_name = "NAME")]
    scenario: Option<String>,
    /// The port (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// List the built-in scenarios and exit.
    #[arg(long)]
    list: bool,
}

pub(super) fn run(args: &Args, out: &mut dyn Write) -> Result<()> {
    let Some(name) = args.scenario.as_deref().filter(|_| !args.list) else {
        for name in builtin_names() {
            let description = builtin(name).map(|s| s.description().to_owned()).unwrap_or_default();
            writeln!(out, "{name:<24} {}", description.lines().next().unwrap_or(""))?;
        }
        return Ok(());
    };
    let scenario = builtin(name)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let server = SimServer::start(scenario, args.port).await?;
        writeln!(out, "{}", server.base_url())?;
        out.flush()?;
        eprintln!("serving `{name}` (POST /v1/chat/completions, /v1/responses, /v1/messages); Ctrl-C stops");
        tokio::signal::ctrl_c().await?;
        server.shutdown().await;
        Ok(())
    })
}
