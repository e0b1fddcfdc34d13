//! `stallscope watch`: the headless canary. Parses its options, prints a
//! line per round and says on stderr when recording stops or resumes; the
//! watching itself is [`crate::watch`].

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::Cli;
use super::run::until_ctrl_c;
use super::service::{KeepArgs, OtlpArgs};
use crate::config::process_env;
use crate::metrics::{DEFAULT_ADDR, Metrics, RoundResult};
use crate::probe::MAX_CONTEXT_TOKENS;
use crate::providers::Dialect;
use crate::store::Store;
use crate::watch::{CallPlan, RecordingChange, Round, WatchEvent, WatchPlan, parse_every, watch};

/// Options of `stallscope watch`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The interval between round starts (500ms, 60s, 5m, 1h); a round
    /// that runs longer skips the starts it ran over.
    #[arg(long, default_value = "60s", value_parser = parse_every)]
    every: Duration,
    /// Where this canary measures from: the `site` label of its metrics
    /// (default: the host name).
    #[arg(long, value_name = "NAME")]
    site: Option<String>,
    /// Where /metrics is served, HOST:PORT.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_ADDR)]
    metrics_addr: SocketAddr,
    #[command(flatten)]
    keep: KeepArgs,
    /// Each round runs this built-in scenario, served in-process.
    #[arg(long, value_name = "NAME")]
    scenario: Option<String>,
    /// Each round is a route probe (as `stallscope probe`): every
    /// [[provider]] row alone, with a tiny prompt and a realistic payload;
    /// the round's line says how many routes are ready. Not the default: it
    /// sends two calls per route each round, one of them large.
    #[arg(long, conflicts_with_all = ["scenario", "target", "requests", "prompt"])]
    probe: bool,
    /// Tokens of context in a probe round's realistic payload (default: the
    /// config's [probe] context_tokens, else 20000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_CONTEXT_TOKENS), requires = "probe")]
    context_tokens: Option<u64>,
    /// The primary target of configured calls, provider/model (default: the first [[provider]] row).
    #[arg(long, value_name = "PROVIDER/MODEL", conflicts_with = "scenario")]
    target: Option<String>,
    /// Calls per round, made at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    requests: u32,
    /// The prompt of every call.
    #[arg(long, default_value = "Say hello in five words.")]
    prompt: String,
    /// The dialect the scenario's simulator speaks.
    #[arg(long, default_value = "openai-chat", value_parser = ["openai-chat", "openai-responses", "anthropic-messages"])]
    dialect: String,
    /// The database rounds are recorded in (default: $STALLSCOPE_DB, else
    /// stallscope.db in the platform data directory).
    #[arg(long, value_name = "PATH", env = "STALLSCOPE_DB")]
    db: Option<PathBuf>,
    /// Record no round.
    #[arg(long)]
    no_record: bool,
    #[command(flatten)]
    otlp: OtlpArgs,
}

/// The machine's host name, the default site.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    let round = match &args.scenario {
        Some(name) if cli.config.is_some() => bail!("give either --config or --scenario {name}, not both"),
        Some(name) => Round::Scenario {
            name: name.clone(),
            dialect: args.dialect.parse::<Dialect>().map_err(anyhow::Error::msg)?,
        },
        None if args.probe => Round::Probe { config: cli.config_path(), context_tokens: args.context_tokens },
        None => Round::Calls { config: cli.config_path(), target: args.target.clone() },
    };
    let db = match args.no_record {
        true => None,
        false => Some(
            args.db
                .clone()
                .or_else(Store::default_path)
                .context("no platform data directory to keep the rounds in: give --db PATH, or --no-record")?,
        ),
    };
    let env = process_env();
    let plan = WatchPlan {
        round,
        calls: CallPlan {
            requests: args.requests as usize,
            prompt: args.prompt.clone(),
            overrides: cli.overrides.clone(),
        },
        every: args.every,
        site: args.site.clone().unwrap_or_else(host_name),
        db,
        retention: args.keep.retention(),
        metrics_addr: Some(args.metrics_addr),
        otlp: args.otlp.destination(&env)?,
    };
    let mut failed_write = None;
    let failed = &mut failed_write;
    // Ctrl-C stops the round's calls; the round is still recorded (as
    // stopped) and the watch ends normally.
    until_ctrl_c(|cancel| async move {
        watch(&plan, &env, Arc::new(Metrics::new()), &cancel, |event| {
            if let Err(e) = print_event(&event, out) {
                failed.get_or_insert(e);
                cancel.cancel();
            }
        })
        .await
    })??;
    match failed_write {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn print_event(event: &WatchEvent, out: &mut dyn Write) -> Result<()> {
    let round = match event {
        WatchEvent::Serving(addr) => {
            eprintln!("stallscope: serving metrics on http://{addr}/metrics");
            return Ok(());
        }
        WatchEvent::Round(round) => round,
    };
    match &round.recording {
        Some(RecordingChange::Stopped(why)) => {
            eprintln!("stallscope: not recording rounds ({why}); still watching and serving metrics")
        }
        Some(RecordingChange::Resumed) => eprintln!("stallscope: recording rounds again"),
        None => {}
    }
    let mut line = format!("round {}: {}", round.slot.index, round.result.name());
    if let Some(readiness) = &round.readiness {
        line.push_str(&format!(", {}/{} routes ready", readiness.ready, readiness.routes_total));
    }
    if let Some(report) = &round.report {
        line.push_str(&format!(", {}", report.summary_line()));
        if let Some(id) = report.run_id {
            line.push_str(&format!(", run {id}"));
        }
    }
    if round.slot.skipped > 0 {
        line.push_str(&format!(", {} starts skipped (the round before ran over them)", round.slot.skipped));
    }
    if !round.deleted.is_empty() {
        line.push_str(&format!(", {} old rounds deleted", round.deleted.len()));
    }
    match &round.traces {
        Some(Ok(sent)) => line.push_str(&format!(", {} spans sent", sent.spans)),
        Some(Err(why)) => eprintln!("stallscope: round {}: traces not sent: {why}", round.slot.index),
        None => {}
    }
    writeln!(out, "{line}")?;
    for cut in &round.fixed_cuts {
        writeln!(out, "  {}", cut.sentence("rounds"))?;
    }
    out.flush()?;
    // A database that cannot be written is said once, through
    // `recording`; a round that could not run, or whose old rounds could
    // not be deleted, every time.
    if round.recording.is_none()
        && round.result != RoundResult::Unrecorded
        && let Some(error) = &round.error
    {
        eprintln!("stallscope: round {}: {error}", round.slot.index);
    }
    Ok(())
}
