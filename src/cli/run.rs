//! `stallscope run`: N calls through the core against the configured
//! providers, or against a built-in scenario or a scenario file served
//! in-process.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;

use super::Cli;
use crate::config::process_env;
use crate::core::event::{Outcome, StreamId};
use crate::diagnosis::{Diagnosis, RunDiagnosis};
use crate::providers::Dialect;
use crate::report::RunReport;
use crate::session::{RecordTo, RunSource, SessionPlan, run_session};
use crate::store::Store;

/// Options of `stallscope run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run against this built-in scenario, served in-process (no config or key needed).
    #[arg(long, value_name = "NAME")]
    scenario: Option<String>,
    /// Run against your own scenario file (the built-ins' TOML format; see
    /// assets/scenarios/), served in-process.
    #[arg(long, value_name = "PATH", conflicts_with = "scenario")]
    scenario_file: Option<PathBuf>,
    /// How many calls.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    requests: u32,
    /// How many calls at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    concurrency: u32,
    /// The prompt of every call.
    #[arg(long, default_value = "Say hello in five words.")]
    prompt: String,
    /// The primary target, provider/model (default: the first [[provider]] row).
    #[arg(long, value_name = "PROVIDER/MODEL", conflicts_with_all = ["scenario", "scenario_file"])]
    target: Option<String>,
    /// The dialect the scenario's simulator speaks.
    #[arg(long, default_value = "openai-chat", value_parser = ["openai-chat", "openai-responses", "anthropic-messages"])]
    dialect: String,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    record: RecordArgs,
}

/// Where a run is recorded, and its seed (`run` and `probe` take them).
#[derive(Debug, clap::Args)]
pub(super) struct RecordArgs {
    /// The database to record the run in (default: $STALLSCOPE_DB, else
    /// stallscope.db in the platform data directory).
    #[arg(long, value_name = "PATH", env = "STALLSCOPE_DB")]
    db: Option<PathBuf>,
    /// Do not record the run.
    #[arg(long)]
    no_record: bool,
    /// A label for the recorded run.
    #[arg(long)]
    label: Option<String>,
    /// The seed of every call's random draws (backoff jitter); a run
    /// repeated with the seed another printed or recorded sleeps the same.
    #[arg(long)]
    pub(super) seed: Option<u64>,
}

impl RecordArgs {
    /// Where to record, or `None` with `--no-record`.
    pub(super) fn recording(&self) -> Result<Option<RecordTo>> {
        if self.no_record {
            return Ok(None);
        }
        let db = self
            .db
            .clone()
            .or_else(Store::default_path)
            .context("no platform data directory to keep the run in: give --db PATH, or --no-record")?;
        Ok(Some(RecordTo { db, label: self.label.clone(), batch: None }))
    }
}

/// Runs `work` to its end on a runtime of its own; Ctrl-C cancels the
/// token it is given (the work still ends with what it has), and a second
/// Ctrl-C ends the process at once with status 130, as a shell expects:
/// once tokio holds SIGINT, the default action never comes back.
/// Resolves true at the next Ctrl-C (SIGINT) or SIGTERM (a service
/// manager's stop, `kill`); false when neither can be listened for.
async fn stop_signal() -> bool {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else { return tokio::signal::ctrl_c().await.is_ok() };
        tokio::select! {
            interrupted = tokio::signal::ctrl_c() => interrupted.is_ok(),
            terminated = term.recv() => terminated.is_some(),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.is_ok()
    }
}

pub(super) fn until_ctrl_c<T, F: Future<Output = T>>(work: impl FnOnce(CancellationToken) -> F) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    Ok(runtime.block_on(async {
        let cancel = CancellationToken::new();
        let ctrl_c = cancel.clone();
        tokio::spawn(async move {
            if stop_signal().await {
                ctrl_c.cancel();
                if stop_signal().await {
                    eprintln!("stallscope: interrupted again: stopping now");
                    std::process::exit(130);
                }
            }
        });
        work(cancel).await
    }))
}

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    if (args.scenario.is_some() || args.scenario_file.is_some()) && cli.config.is_some() {
        bail!("give either --config or --scenario/--scenario-file, not both");
    }
    let dialect = || args.dialect.parse::<Dialect>().map_err(anyhow::Error::msg);
    let source = match (&args.scenario, &args.scenario_file) {
        (Some(name), _) => RunSource::Scenario { name: name.clone(), dialect: dialect()? },
        (None, Some(path)) => RunSource::ScenarioFile { path: path.clone(), dialect: dialect()? },
        (None, None) => RunSource::Config { path: cli.config_path(), target: args.target.clone() },
    };
    let plan = SessionPlan {
        source,
        requests: args.requests as usize,
        concurrency: args.concurrency as usize,
        prompt: args.prompt.clone(),
        overrides: cli.overrides.clone(),
        edits: Vec::new(),
        recording: args.record.recording()?,
        seed: args.record.seed,
    };
    // Ctrl-C stops the calls; the run still ends with its report, recorded
    // as stopped, its queued calls as not started.
    let outcome = until_ctrl_c(|cancel| async move {
        let progress = Progress::new(plan.requests);
        run_session(&plan, &process_env(), None, &cancel, move |report, _| progress.finished(report.outcome)).await
    })??;
    if outcome.dropped_events > 0 {
        eprintln!(
            "stallscope: the recorder fell behind and dropped {} events (counted in the run's record)",
            outcome.dropped_events
        );
    }
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&outcome.report)?)?;
    } else {
        print_report(&outcome.report, out)?;
    }
    // Timeouts the client's own lateness may have caused (stderr under
    // --json, whose stdout is one object).
    match outcome.lag.overload_note() {
        Some(note) if args.json => eprintln!("stallscope: {note}"),
        Some(note) => writeln!(out, "{note}")?,
        None => {}
    }
    if outcome.report.stopped {
        return Err(Stopped.into());
    }
    Ok(())
}

/// `stallscope run` was stopped by Ctrl-C. Its report is printed and
/// recorded all the same; the exit code (130, as shells report SIGINT)
/// tells a script it did not run to its end.
#[derive(Debug, thiserror::Error)]
#[error("stopped by Ctrl-C: the run is recorded as stopped, its queued calls as not started")]
pub struct Stopped;

/// The live progress line on stderr, when stderr is a terminal.
struct Progress {
    total: usize,
    counts: [AtomicUsize; 4],
    live: bool,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress { total, counts: Default::default(), live: std::io::stderr().is_terminal() }
    }

    fn finished(&self, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Ok => 0,
            Outcome::Partial => 1,
            Outcome::Failed => 2,
            Outcome::Cancelled => 3,
        };
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        if self.live {
            let [ok, partial, failed, cancelled] = self.counts.each_ref().map(|c| c.load(Ordering::Relaxed));
            let done = ok + partial + failed + cancelled;
            eprint!(
                "\r{done}/{} done: {ok} ok, {partial} partial, {failed} failed, {cancelled} cancelled{}",
                self.total,
                if done == self.total { "\n" } else { "" }
            );
        }
    }
}

/// The human form of a run's report.
pub(super) fn print_report(report: &RunReport, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{:>5}  {:<9}  {:<28}  {:>8}  {:>10}  {:>9}  DETAIL",
        "#", "OUTCOME", "TARGET", "ATTEMPTS", "ELAPSED", "TTFB"
    )?;
    for s in &report.streams {
        let ttfb = s.ttfb_ms.map_or_else(|| "-".to_owned(), |t| format!("{t:.0} ms"));
        let mut detail = match &s.error {
            Some(e) => format!(
                "{}{} ({})",
                e.category,
                e.timer.as_deref().map(|t| format!("/{t}")).unwrap_or_default(),
                e.rule
            ),
            None => String::new(),
        };
        for hop in &s.failover_hops {
            detail.push_str(&format!(" hop {}→{} [{}]", hop.from, hop.to, hop.reason));
        }
        writeln!(
            out,
            "{:>5}  {:<9}  {:<28}  {:>8}  {:>7.0} ms  {:>9}  {}",
            s.index,
            s.outcome,
            format!("{}/{}", s.provider, s.model),
            s.attempts,
            s.elapsed_ms,
            ttfb,
            detail.trim()
        )?;
    }
    writeln!(out, "{}", report.summary_line()).context("writing the report")?;
    let Some(run) = &report.diagnosis else { return Ok(()) };
    let diagnoses: Vec<(StreamId, Diagnosis)> =
        report.streams.iter().filter_map(|s| Some((s.index, s.diagnosis.clone()?))).collect();
    print_verdicts(&diagnoses, run, out)
}

/// One verdict line per stream, then the run's verdicts grouped by kind;
/// an untrustworthy verdict's summary says so first.
pub(super) fn print_verdicts(
    diagnoses: &[(StreamId, Diagnosis)],
    run: &RunDiagnosis,
    out: &mut dyn Write,
) -> Result<()> {
    writeln!(out, "{:>5}  {:<9}  {:<20}  VERDICT", "#", "SEVERITY", "KIND")?;
    for (stream, d) in diagnoses {
        writeln!(out, "{stream:>5}  {:<9}  {:<20}  {}", d.severity.name(), d.kind.name(), d.summary)?;
    }
    for group in &run.groups {
        writeln!(out, "{}", group.summary)?;
        // A suggestion the group shares once; the others under their streams.
        match &group.checked {
            Some(checked) => writeln!(out, "  checked: {}", checked.sentence)?,
            None => {
                for (stream, d) in diagnoses.iter().filter(|(s, _)| group.streams.contains(s)) {
                    if let Some(checked) = &d.checked {
                        writeln!(out, "  stream {stream} checked: {}", checked.sentence)?;
                    }
                }
            }
        }
    }
    if run.untrusted > 0 {
        writeln!(
            out,
            "{} of {} verdicts are not trustworthy: our own runtime was late when their timers fired",
            run.untrusted, run.streams
        )?;
    }
    Ok(())
}
