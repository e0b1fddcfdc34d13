//! `stallscope budget`: the worst-case wall-clock of one call and of the
//! layers around it, against a caller's deadline.

use std::io::Write;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::config::Settings;
use crate::core::analysis::{BudgetInput, OuterLayer, analyse};

/// Options of `stallscope budget`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The caller's deadline in seconds.
    #[arg(long, value_name = "S")]
    deadline: Option<String>,
    /// An outer harness retries the whole call N times (N + 1 runs).
    #[arg(long, value_name = "N")]
    outer_retries: Option<u32>,
    /// Another outer layer, innermost first: NAME:RUNS[:SLEEP_S]
    /// (e.g. candidates:12).
    #[arg(long = "layer", value_name = "NAME:RUNS[:SLEEP_S]")]
    layers: Vec<String>,
    /// Failover hops available (default: what STALLSCOPE_FALLBACK_MODELS allows).
    #[arg(long, value_name = "N")]
    fallbacks: Option<usize>,
    /// The call's context size in tokens (scales the stall timers).
    #[arg(long, value_name = "TOKENS")]
    context_tokens: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(args: &Args, settings: &Settings, out: &mut dyn Write) -> Result<()> {
    let caller_deadline = match &args.deadline {
        Some(text) => match text.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()) {
            Some(d) if !d.is_zero() => Some(d),
            _ => bail!("--deadline {text} is not accepted; allowed: a number of seconds above 0"),
        },
        None => None,
    };
    let mut outer = Vec::new();
    if let Some(n) = args.outer_retries {
        outer.push(OuterLayer { name: "outer retries".to_owned(), runs: n.saturating_add(1), sleeps: Duration::ZERO });
    }
    for text in &args.layers {
        outer.push(OuterLayer::parse(text).map_err(anyhow::Error::msg)?);
    }
    let report = analyse(
        &settings.policy,
        &BudgetInput { outer, caller_deadline, fallbacks: args.fallbacks, context_tokens: args.context_tokens },
    );
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    for layer in &report.layers {
        let worst = layer.worst.map_or_else(|| "unbounded".to_owned(), |d| format!("{:.3} s", d.as_secs_f64()));
        writeln!(out, "{:<16} {:>14}   {}", layer.name, worst, layer.detail)?;
    }
    if let (Some(deadline), Some(fits)) = (report.caller_deadline, report.fits) {
        let verdict = if fits { "fits" } else { "does NOT fit" };
        writeln!(out, "worst case {verdict} the caller's deadline of {:.3} s", deadline.as_secs_f64())?;
    }
    for note in &report.notes {
        writeln!(out, "note: {note}")?;
    }
    Ok(())
}
