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
use crate::replay::tune::{TuneOptions, tune};
use crate::replay::tune_text::report_text;
use crate::store::RunId;
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
        Ok(out.write_all(report_text(&report).as_bytes())?)
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
