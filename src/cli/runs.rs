//! `stallscope runs` and `stallscope export`: the recorded history.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::config::process_env;
use crate::diagnosis::summarize;
use crate::export;
use crate::replay::advice;
use crate::replay::recording::Recording;
use crate::replay::tune::{TuneOptions, tune};
use crate::store::runs::{RunSummary, tunables_diff, utc_millis, utc_second};
use crate::store::{OutcomeChange, RunId, RunRecord, Store};

/// Where the history lives.
#[derive(Debug, clap::Args)]
pub struct DbArg {
    /// The database (default: $STALLSCOPE_DB, else stallscope.db in the
    /// platform data directory).
    #[arg(long, value_name = "PATH", env = "STALLSCOPE_DB", global = true)]
    db: Option<PathBuf>,
}

impl DbArg {
    pub(super) fn open(&self) -> Result<Store> {
        let path =
            self.db.clone().or_else(Store::default_path).context("no platform data directory: give --db PATH")?;
        let mut store = Store::open(&path)?;
        store.mark_interrupted()?;
        Ok(store)
    }
}

/// Options of `stallscope runs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbArg,
    #[command(subcommand)]
    command: RunsCommand,
}

/// What to do with the history.
#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// Every recorded run, newest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One run's report (the same JSON `run --json` printed), with every
    /// stream's verdict computed from its recorded events, and the stall
    /// timers' suggestions checked by what-if on the run (as `tune` finds
    /// them). A run that did not finish shows its verdicts alone.
    Show {
        /// The run.
        id: RunId,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Skip the what-if check of suggestions (a few replays of the
        /// run's failed streams).
        #[arg(long)]
        no_check: bool,
        /// Scale the floors of real traffic the suggestions keep to (as
        /// `tune --floor-scale`).
        #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
        floor_scale: f64,
    },
    /// What differs between two runs: tunables and outcomes.
    Compare {
        /// The first run.
        a: RunId,
        /// The second run.
        b: RunId,
    },
    /// Delete a run and its events.
    Delete {
        /// The run.
        id: RunId,
    },
}

pub(super) fn run(args: &Args, out: &mut dyn Write) -> Result<()> {
    let mut store = args.db.open()?;
    match &args.command {
        RunsCommand::List { json } => {
            let runs = store.list_runs()?;
            if *json {
                writeln!(out, "{}", serde_json::to_string(&runs)?)?;
            } else {
                print_list(&runs, out)?;
            }
        }
        RunsCommand::Show { id, json, no_check, floor_scale } => {
            show(&store, *id, *json, (!*no_check).then_some(*floor_scale), out)?;
        }
        RunsCommand::Compare { a, b } => {
            let (Some(ra), Some(rb)) = (store.run(*a)?, store.run(*b)?) else {
                bail!("runs {a} and {b} must both exist in {}", store.path().display());
            };
            let diff = tunables_diff(&ra.tunables, &rb.tunables);
            writeln!(out, "tunables that differ (run {a} → run {b}):")?;
            if diff.is_empty() {
                writeln!(out, "  none")?;
            }
            for (name, (va, vb)) in &diff {
                let show = |v: &Option<serde_json::Value>| v.as_ref().map_or("-".to_owned(), ToString::to_string);
                writeln!(out, "  {name}: {} → {}", show(va), show(vb))?;
            }
            writeln!(out, "outcomes:")?;
            for (label, s) in [(a, &ra.summary), (b, &rb.summary)] {
                let o = &s.outcomes;
                let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} ms"));
                writeln!(
                    out,
                    "  run {label}: {} ok, {} partial, {} failed, {} cancelled, {} not started; p50 {}, p99 {}; retries {}",
                    o.ok,
                    o.partial,
                    o.failed,
                    o.cancelled,
                    o.not_started,
                    ms(s.p50_ms),
                    ms(s.p99_ms),
                    s.retries.map_or("-".to_owned(), |r| r.to_string())
                )?;
            }
            let changes = store.outcome_changes(*a, *b)?;
            writeln!(out, "streams whose outcome changed (run {a} → run {b}): {}", changes.len())?;
            for change in &changes {
                let (stream, x, y) = (change.stream, &change.a, &change.b);
                let mark =
                    if change.fleet_refused { format!(" ({})", OutcomeChange::FLEET_MARK) } else { String::new() };
                writeln!(out, "  stream {stream}: {x} → {y}{mark}")?;
            }
            if changes.iter().any(|c| c.fleet_refused) {
                writeln!(out, "  {}: {}", OutcomeChange::FLEET_MARK, OutcomeChange::FLEET_NOTE)?;
            }
        }
        RunsCommand::Delete { id } => {
            if !store.delete_run(*id)? {
                bail!("no run {id} in {}", store.path().display());
            }
            writeln!(out, "deleted run {id}")?;
        }
    }
    Ok(())
}

/// `runs show`: the report with its verdicts (and, when `check`, their
/// suggestions checked by what-if), or a run's verdicts alone when it has
/// no report.
fn show(store: &Store, id: RunId, json: bool, check: Option<f64>, out: &mut dyn Write) -> Result<()> {
    let Some(record) = store.run(id)? else { bail!("no run {id} in {}", store.path().display()) };
    let Some(mut report) = store.diagnosed_report(id)? else {
        return show_unfinished(store, &record, json, out);
    };
    let mut none_checked = false;
    if let Some(floor_scale) = check
        && advice::worth_checking(report.streams.iter().filter_map(|s| s.diagnosis.as_ref()))
    {
        // Without a check the verdicts still stand: say why there is none.
        let options = TuneOptions { floor_scale, ..TuneOptions::default() };
        let checked = Recording::load(store, id)
            .map_err(anyhow::Error::from)
            .and_then(|recording| Ok(tune(std::slice::from_ref(&recording), &options)?));
        match checked {
            Ok(found) => none_checked = advice::attach(&mut report, id, &found) == 0,
            Err(e) if json => eprintln!("stallscope: suggestions not checked: {e:#}"),
            Err(e) => writeln!(out, "suggestions not checked: {e:#}")?,
        }
    }
    if json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
        return Ok(());
    }
    super::run::print_report(&report, out)?;
    if none_checked {
        writeln!(
            out,
            "checked by what-if: no suggestion — no tighter timer keeps room over this run's healthy attempts and \
             the floors of real traffic (`stallscope tune {id}` says why, timer by timer)"
        )?;
    }
    print_recording(&record, out)
}

/// The verdicts of a run that has no report (interrupted, or still
/// going): every stream recorded, from its events.
fn show_unfinished(store: &Store, record: &RunRecord, json: bool, out: &mut dyn Write) -> Result<()> {
    let s = &record.summary;
    let streams = store.streams(s.id)?;
    let diagnoses = store.diagnoses(s.id, &streams)?;
    let run = summarize(&diagnoses);
    if json {
        let streams: Vec<_> =
            diagnoses.iter().map(|(index, d)| serde_json::json!({"index": index, "diagnosis": d})).collect();
        let shown = serde_json::json!({
            "run_id": s.id, "status": s.status.name(), "report": null, "streams": streams, "diagnosis": run,
        });
        writeln!(out, "{shown}")?;
        return Ok(());
    }
    writeln!(
        out,
        "run {} is {}: no report; the verdicts of its {} from its {} recorded events",
        s.id,
        s.status.name(),
        plural(streams.len(), "stream"),
        s.events
    )?;
    super::run::print_verdicts(&diagnoses, &run, out)?;
    print_recording(record, out)
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// What `runs show` adds to the report: what the run was recorded with,
/// what was lost, and what replay would lack.
fn print_recording(record: &RunRecord, out: &mut dyn Write) -> Result<()> {
    if let Some(meta) = &record.meta {
        let pools: Vec<String> = meta.pools.iter().map(|(provider, keys)| format!("{provider} {keys}")).collect();
        writeln!(
            out,
            "recorded: {} calls, concurrency {}, seed {}, clock at start {}{}",
            meta.requests,
            meta.concurrency,
            meta.seed,
            utc_millis(meta.epoch_unix_ns),
            if pools.is_empty() { String::new() } else { format!(", keys per pool: {}", pools.join(", ")) }
        )?;
    }
    let s = &record.summary;
    let mut dropped = format!("dropped: {} events", s.dropped_events);
    if s.dropped_bodies > 0 {
        dropped.push_str(&format!(" ({} of them bodies)", s.dropped_bodies));
    }
    if !record.dropped_by_stream.is_empty() {
        let streams: Vec<String> =
            record.dropped_by_stream.iter().map(|(stream, n)| format!("{stream}: {n}")).collect();
        dropped.push_str(&format!("; by stream {}", streams.join(", ")));
    }
    writeln!(out, "{dropped}")?;
    if let Some(note) = record.replay_note() {
        writeln!(out, "{note}")?;
    }
    Ok(())
}

fn print_list(runs: &[RunSummary], out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{:>5}  {:<11}  {:<19}  {:<24}  {:>17}  {:>11}  {:>9}  {:>9}  {:>7}  LABEL",
        "ID",
        "STATUS",
        "STARTED (UTC)",
        "SCENARIO/PROVIDERS",
        "OK/PART/FAIL/CANC",
        "NOT STARTED",
        "P50",
        "P99",
        "RETRIES"
    )?;
    for r in runs {
        let source = r.scenario.clone().unwrap_or_else(|| r.providers.join(","));
        let o = &r.outcomes;
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} ms"));
        writeln!(
            out,
            "{:>5}  {:<11}  {:<19}  {:<24}  {:>17}  {:>11}  {:>9}  {:>9}  {:>7}  {}",
            r.id,
            r.status.name(),
            utc_second(r.started_at_ms),
            source,
            format!("{}/{}/{}/{}", o.ok, o.partial, o.failed, o.cancelled),
            o.not_started,
            ms(r.p50_ms),
            ms(r.p99_ms),
            r.retries.map_or("-".to_owned(), |n| n.to_string()),
            r.label.as_deref().unwrap_or("")
        )?;
    }
    Ok(())
}

/// Options of `stallscope export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    db: DbArg,
    /// The run.
    id: RunId,
    /// The format.
    #[arg(long, value_parser = ["jsonl", "chrome-trace"], required_unless_present = "otlp")]
    format: Option<String>,
    /// Send the run as OpenTelemetry traces (a trace per call) to this
    /// OTLP/HTTP receiver instead: its base URL (…/v1/traces is appended,
    /// as for OTEL_EXPORTER_OTLP_ENDPOINT) or its traces URL. Phoenix:
    /// http://127.0.0.1:6006
    #[arg(long, value_name = "URL", conflicts_with_all = ["format", "output", "bodies"])]
    otlp: Option<String>,
    /// A header sent with every OTLP request, NAME=VALUE (repeatable), for
    /// a receiver's API key: NAME=env:VAR reads the value from the
    /// environment variable VAR, so the key is on no command line. Values
    /// are never printed.
    #[arg(long, value_name = "NAME=VALUE", requires = "otlp")]
    otlp_header: Vec<String>,
    /// Write here instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Include recorded response bodies (jsonl only; they can be large).
    #[arg(long)]
    bodies: bool,
}

pub(super) fn export(args: &ExportArgs, out: &mut dyn Write) -> Result<()> {
    let store = args.db.open()?;
    let Some(record) = store.run(args.id)? else {
        bail!("no run {} in {}", args.id, store.path().display());
    };
    if let Some(note) = record.replay_note() {
        eprintln!("note: {note}");
    }
    if let Some(endpoint) = &args.otlp {
        let destination = export::otlp::Destination::parse(endpoint, &args.otlp_header, &process_env())?;
        let sent = export::otlp::send_runs(&store, &[args.id], &destination)?;
        writeln!(out, "sent run {}: {} calls, {} spans to {}", args.id, sent.calls, sent.spans, sent.url)?;
        return Ok(());
    }
    let recorded = store.recorded_run(args.id)?;
    let text = if args.format.as_deref() == Some("jsonl") {
        let events = store.run_events(args.id)?;
        export::jsonl(&events, args.bodies, &recorded.diagnose_all(&events))?
    } else {
        if args.bodies {
            bail!("--bodies is for --format jsonl: a chrome-trace never holds bodies");
        }
        serde_json::to_string(&export::run_trace(&store, args.id)?)? + "\n"
    };
    match &args.output {
        Some(path) => std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?,
        None => out.write_all(text.as_bytes())?,
    }
    Ok(())
}
