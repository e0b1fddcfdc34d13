//! `stallscope probe`: the route readiness matrix of the configured
//! providers ([`crate::probe`]), as a table or as JSON.

use std::io::Write;

use anyhow::Result;

use super::Cli;
use super::run::{RecordArgs, Stopped, until_ctrl_c};
use crate::config::process_env;
use crate::probe::{DEFAULT_CONCURRENCY, MAX_CONTEXT_TOKENS, ProbePlan, ProbeResult, Readiness, cells, probe};

/// Options of `stallscope probe`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Every [[provider]] row of the config is a route, probed alone (failover off) through the core with \
the configured timers and retries: once with a tiny prompt and once with a realistic payload.

A route is ready when both probes end ok and neither verdict is worse than notice: both calls \
succeeded with no failure, not even one a retry recovered from. A route whose provider cannot be set \
up (a key variable not set, a bad URL) is not ready and says why.

With --compare, routes to one endpoint (dialect, base URL and model alike) on different paths \
(directly and through a proxy, or through two proxies) are compared on the realistic payload: which \
path a fault follows.

The probe is recorded as one run labelled `probe` (`probe: LABEL` with --label); route i is streams 2i \
(tiny) and 2i+1 (realistic).

Exit status: 0 when every route is ready, 1 when any route is not, 2 when the probe could not run, \
130 when stopped by Ctrl-C.")]
pub struct Args {
    /// Tokens of context in the realistic probe, about four characters
    /// each (default: the config's [probe] context_tokens, else 20000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_CONTEXT_TOKENS))]
    context_tokens: Option<u64>,
    /// How many probes at once.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY as u32, value_parser = clap::value_parser!(u32).range(1..=1000))]
    concurrency: u32,
    /// Print the matrix as one JSON object (its shape: see the docs of
    /// stallscope::probe).
    #[arg(long)]
    json: bool,
    /// Also say, for each endpoint configured on more than one path
    /// (directly and through a proxy, or through two proxies), which path
    /// a fault follows.
    #[arg(long)]
    compare: bool,
    #[command(flatten)]
    record: RecordArgs,
}

/// Some routes are not ready: the matrix is printed, and the exit status
/// (1) tells a script.
#[derive(Debug, thiserror::Error)]
#[error("{not_ready} of {total} routes are not ready")]
pub struct NotReady {
    /// Routes not ready.
    pub not_ready: usize,
    /// Routes configured.
    pub total: usize,
}

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    let plan = ProbePlan {
        config: cli.config_path(),
        overrides: cli.overrides.clone(),
        edits: Vec::new(),
        context_tokens: args.context_tokens,
        concurrency: args.concurrency as usize,
        recording: args.record.recording()?,
        seed: args.record.seed,
    };
    let readiness = until_ctrl_c(|cancel| async move { probe(&plan, &process_env(), None, &cancel).await })??;
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&readiness)?)?;
    } else {
        print_matrix(&readiness, out)?;
        if args.compare {
            print_comparisons(&readiness, out)?;
        }
    }
    if readiness.stopped {
        return Err(Stopped.into());
    }
    if !readiness.all_ready() {
        return Err(
            NotReady { not_ready: readiness.routes_total - readiness.ready, total: readiness.routes_total }.into()
        );
    }
    Ok(())
}

/// The matrix as a table, then why each route that is not ready is not,
/// then the count.
fn print_matrix(readiness: &Readiness, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{:<32}  {:<5}  {:<9}  {:>8}  {:>9}  {:<9}  {:>8}  {:>9}  VERDICT",
        "ROUTE", "READY", "TINY", "TTFB", "ELAPSED", "REALISTIC", "TTFB", "ELAPSED"
    )?;
    for route in &readiness.routes {
        let verdict = route.verdict.map_or("-", |v| v.name());
        writeln!(
            out,
            "{:<32}  {:<5}  {}  {}  {verdict}",
            route.route,
            if route.ready { "yes" } else { "no" },
            columns(route.tiny.as_ref()),
            columns(route.realistic.as_ref()),
        )?;
    }
    for route in readiness.routes.iter().filter(|r| !r.ready) {
        let why = route.problem.as_deref().or(route.summary.as_deref()).unwrap_or("not probed");
        writeln!(out, "{}: {why}", route.route)?;
    }
    for cut in readiness.routes.iter().filter_map(|r| r.fixed_cut.as_deref()) {
        writeln!(out, "{cut}")?;
    }
    let recorded = readiness.run_id.map(|id| format!("; recorded as run {id}")).unwrap_or_default();
    writeln!(
        out,
        "{} of {} routes ready (realistic payload: {} tokens{recorded})",
        readiness.ready, readiness.routes_total, readiness.context_tokens
    )?;
    Ok(())
}

/// Each endpoint reached on more than one path: which path the fault
/// follows.
fn print_comparisons(readiness: &Readiness, out: &mut dyn Write) -> Result<()> {
    if readiness.comparisons.is_empty() {
        writeln!(out, "no endpoint is configured on more than one path (directly and through a proxy) to compare")?;
    }
    for c in &readiness.comparisons {
        writeln!(out, "{} ({}): {}", c.endpoint, c.model, c.finding)?;
    }
    Ok(())
}

/// A probe's outcome, TTFB and elapsed columns.
fn columns(probe: Option<&ProbeResult>) -> String {
    let [outcome, ttfb, elapsed] = cells(probe);
    format!("{outcome:<9}  {ttfb:>8}  {elapsed:>9}")
}
