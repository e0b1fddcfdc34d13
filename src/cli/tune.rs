//! `stallscope tune`: the tightest stream timers a recorded run — or a
//! history of runs (`--runs`, `--label`, `--since`) — supports, each
//! suggestion checked by what-if on those runs, as `--set` lines and a
//! `.env` block.
//!
//! `--json` prints one object of a fixed shape (see
//! [`crate::replay::tune::TuneReport`]):
//!
//! ```text
//! { "runs": [RUN], "span_s", "assumptions": {"stall", "attempt"}, "floor_scale",
//!   "replayed_runs", "fidelity": {"reproduced", "streams", "worst_drift_s"},
//!   "healthy_attempts", "stalls",
//!   "routes": [{"route", "healthy_attempts", "timers": [[TIMER, HEADROOM]]}] (empty: one route),
//!   "timers": [{ "timer", "tunable", "unit" ("s"; the throughput floor's
//!                "events/s"), "current_s" (null: off), "earlier_s": [VALUE],
//!                "headroom": HEADROOM | null, "tightest_s", "floor_s", "safe_s",
//!                "suggested_s" (null: leave it), "verdict",
//!                "evidence": CHECKED | null,
//!                "probes": [{"value_s", "false_positives", "lost"}] }],
//!   "suggested": [{"name", "value_s"}],
//!   "combined": CHECKED | null,
//!   "probes" }
//! HEADROOM = { "attempts", "worst", "worst_at": {"run", "stream", "attempt"}, "p50", "p90", "p99" }
//! CHECKED = { "settings": ["NAME=VALUE"], "runs", "caught": [{"run", "stream", "attempt",
//!   "timer", "at_s", "before_timer", "before_at_s", "sooner_s"}],
//!   "sooner_s", "false_positives": [{"run", "stream", "attempt", "timer", "at_s"}],
//!   "healthy_attempts", "saved", "lost", "unknown",
//!   "assumptions", "assumed": [{"run", "stream", "what": [TEXT]}] }
//! ```

use std::io::Write;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

use super::Cli;
use super::runs::DbArg;
use super::whatif::parse_assumptions;
use crate::replay::recording::Recording;
use crate::replay::tune::{Checked, Headroom, TimerTuning, TuneOptions, TuneReport, tune};
use crate::store::RunId;
use crate::tunables::Value;
use crate::watch::parse_every;

/// Options of `stallscope tune`: the runs and how to replay them.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recorded run (or choose runs with --runs, --label, --since).
    run: Option<RunId>,
    /// Several recorded runs, tuned together: `--runs 3,5,9`.
    #[arg(long, value_name = "RUN,…", value_delimiter = ',', conflicts_with = "run")]
    runs: Vec<RunId>,
    /// Every ended run with this label (`watch@office` for a watch's
    /// rounds), tuned together.
    #[arg(long, conflicts_with_all = ["run", "runs"])]
    label: Option<String>,
    /// Every ended run started within this long (`7d`, `12h`, `30m`),
    /// with --label or alone.
    #[arg(long, value_name = "DURATION", conflicts_with_all = ["run", "runs"])]
    since: Option<String>,
    /// What the floors of real traffic suggestions keep to are multiplied
    /// by (above 0, at most 1): for runs recorded with every timer scaled
    /// down, as the simulator's stories are.
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
    floor_scale: f64,
    /// What to assume where the recording ends (as `whatif --assume`).
    #[arg(long, value_name = "WHAT=HOW", value_delimiter = ',')]
    assume: Vec<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    if let Some(set) = cli.overrides.first() {
        bail!("--set {set}: tune searches from the runs' recorded tunables; try one setting with `stallscope whatif`");
    }
    let assumptions = parse_assumptions(&args.assume)?;
    let recordings = args.load().context("cannot tune")?;
    let options = TuneOptions { assumptions, floor_scale: args.floor_scale, ..TuneOptions::default() };
    let report = tune(&recordings, &options)?;
    if args.json {
        serde_json::to_writer(&mut *out, &report)?;
        writeln!(out)?;
        Ok(())
    } else {
        print(&report, out)
    }
}

impl Args {
    /// The runs chosen, loaded for replay. A run chosen by label or time
    /// that cannot be replayed (recorded by an older stallscope) is left
    /// out with a word on stderr; one named is an error.
    fn load(&self) -> Result<Vec<Recording>> {
        let store = self.db.open()?;
        let named: Vec<RunId> = self.run.into_iter().chain(self.runs.iter().copied()).collect();
        if !named.is_empty() {
            return named.iter().map(|&run| Ok(Recording::load(&store, run)?)).collect();
        }
        if self.label.is_none() && self.since.is_none() {
            bail!("give a run, --runs RUN,…, or --label LABEL and/or --since DURATION");
        }
        let since_ms = match &self.since {
            Some(since) => {
                let within = parse_every(since).map_err(|e| anyhow::anyhow!("--since {since}: {e}"))?;
                let cutoff = SystemTime::now().checked_sub(within).unwrap_or(SystemTime::UNIX_EPOCH);
                let ms = cutoff.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_millis();
                i64::try_from(ms).unwrap_or(i64::MAX)
            }
            None => i64::MIN,
        };
        let mut chosen = store.ended_runs(self.label.as_deref(), since_ms)?;
        chosen.reverse();
        if chosen.is_empty() {
            let label = self.label.as_deref().map_or_else(String::new, |l| format!(" labelled {l:?}"));
            let since = self.since.as_deref().map_or_else(String::new, |s| format!(" started within {s}"));
            bail!("no ended run{label}{since} in {}", store.path().display());
        }
        let mut recordings = Vec::with_capacity(chosen.len());
        for (run, _) in chosen {
            match Recording::load(&store, run) {
                Ok(recording) => recordings.push(recording),
                Err(e) => eprintln!("stallscope: tune: run {run} left out: {e}"),
            }
        }
        Ok(recordings)
    }
}

fn print(report: &TuneReport, out: &mut dyn Write) -> Result<()> {
    let (a, f) = (&report.assumptions, &report.fidelity);
    let runs = match report.runs.as_slice() {
        [one] => format!("run {one}"),
        many => format!("{} runs over {}", many.len(), span(report.span_s)),
    };
    writeln!(
        out,
        "tune {runs}: {}, {} ({} replayed, {}; where a recording ends: stall={}, attempt={})",
        count(report.healthy_attempts, "healthy attempt"),
        count(report.stalls, "stall"),
        count(report.replayed_runs, "run"),
        count(report.probes, "what-if"),
        a.stall.name(),
        a.attempt.name()
    )?;
    if report.replayed_runs > 0 {
        writeln!(
            out,
            "replayed unchanged, {} of {} streams reproduce the recording (worst timer drift {:.3} s)",
            f.reproduced, f.streams, f.worst_drift_s
        )?;
    }
    writeln!(
        out,
        "each value is checked against these {}: it fits this traffic, not every day",
        count(report.healthy_attempts, "healthy attempt")
    )?;
    if report.floor_scale != 1.0 {
        writeln!(out, "floors of real traffic scaled by {}", Value::Float(report.floor_scale))?;
    }
    for route in &report.routes {
        writeln!(out, "\nroute {}: {}", route.route, count(route.healthy_attempts, "healthy attempt"))?;
        for (timer, headroom) in &route.timers {
            let unit = report.timers.iter().find(|t| t.timer == *timer).map_or("s", |t| t.unit);
            writeln!(out, "  {timer:<10} {}", headroom_line(headroom, unit))?;
        }
    }
    for timer in &report.timers {
        print_timer(timer, out)?;
    }
    writeln!(out)?;
    let Some(combined) = &report.combined else {
        if report.stalls == 0 {
            writeln!(out, "No stall on these runs, so no setting is shown to catch one; the tightest values above")?;
            writeln!(out, "say how tight each timer can go on this traffic.")?;
        } else {
            writeln!(out, "No timer is worth changing on these runs.")?;
        }
        return Ok(());
    };
    writeln!(out, "Together: {}", combined.sentence())?;
    writeln!(out)?;
    writeln!(out, "As --set:")?;
    let sets: Vec<String> = report.suggested.iter().map(|s| format!("--set {}", s.assignment())).collect();
    writeln!(out, "  {}", sets.join(" "))?;
    writeln!(out)?;
    writeln!(out, "As .env:")?;
    for setting in &report.suggested {
        writeln!(out, "{}", setting.env_line())?;
    }
    Ok(())
}

/// "1 stall", "3 stalls".
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// "3 days", "5 h", "12 min", "40 s".
fn span(s: f64) -> String {
    match s {
        s if s >= 2.0 * 86_400.0 => format!("{:.0} days", s / 86_400.0),
        s if s >= 2.0 * 3600.0 => format!("{:.0} h", s / 3600.0),
        s if s >= 120.0 => format!("{:.0} min", s / 60.0),
        s => format!("{s:.0} s"),
    }
}

/// "worst 25 s (run 3, stream 12, attempt 1), p99 20 s, p90 9 s, p50 2 s, over 4312".
fn headroom_line(h: &Headroom, unit: &str) -> String {
    let v = |x: f64| format!("{} {unit}", Value::Float((x * 1000.0).round() / 1000.0));
    format!(
        "worst {} (run {}, stream {}, attempt {}), p99 {}, p90 {}, p50 {}, over {}",
        v(h.worst),
        h.worst_at.run,
        h.worst_at.stream,
        h.worst_at.attempt,
        v(h.p99),
        v(h.p90),
        v(h.p50),
        h.attempts
    )
}

fn print_timer(timer: &TimerTuning, out: &mut dyn Write) -> Result<()> {
    let unit = timer.unit;
    let shown = |s: f64| format!("{} {unit}", Value::Float(s));
    let current = timer.current_s.map_or_else(|| "off".to_owned(), shown);
    let change = match timer.suggested_s {
        Some(s) => format!("{current} → {}", shown(s)),
        None => format!("{current}, left as it is"),
    };
    writeln!(out, "\n{} ({}): {change}", timer.timer, timer.tunable)?;
    if !timer.earlier_s.is_empty() {
        let earlier: Vec<String> = timer.earlier_s.iter().map(|&s| shown(s)).collect();
        writeln!(out, "  (earlier runs had {})", earlier.join(", "))?;
    }
    writeln!(out, "  {}", timer.verdict)?;
    if let Some(evidence) = timer.evidence.as_ref().filter(|_| timer.suggested_s.is_some()) {
        print_evidence(evidence, out)?;
    }
    if !timer.probes.is_empty() {
        let tried: Vec<String> = timer.probes.iter().map(|p| Value::Float(p.value_s).to_string()).collect();
        writeln!(out, "  checked by what-if: {} {unit}", tried.join(", "))?;
    }
    Ok(())
}

/// Each stall caught, and the streams that rest on an assumption.
fn print_evidence(checked: &Checked, out: &mut dyn Write) -> Result<()> {
    for caught in &checked.caught {
        let before = match caught.before_timer {
            Some(timer) => format!("{timer} at {:.3} s", caught.before_at_s),
            None => format!("the attempt ended at {:.3} s", caught.before_at_s),
        };
        writeln!(
            out,
            "  run {} stream {} attempt {}: {} at {:.3} s, {:.3} s sooner (as the run was set: {before})",
            caught.run, caught.stream, caught.attempt, caught.timer, caught.at_s, caught.sooner_s
        )?;
    }
    for assumed in &checked.assumed {
        writeln!(out, "  run {} stream {} assumes: {}", assumed.run, assumed.stream, assumed.what.join("; "))?;
    }
    Ok(())
}
