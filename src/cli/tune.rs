//! `stallscope tune`: the tightest stream timers a recorded run supports,
//! each checked by what-if on the run, as `--set` lines and a `.env` block.
//!
//! `--json` prints one object of a fixed shape (see
//! [`crate::replay::tune::TuneReport`]):
//!
//! ```text
//! { "run", "assumptions": {"stall", "attempt"},
//!   "fidelity": {"reproduced", "streams", "worst_drift_s"},
//!   "healthy_streams", "healthy_retries",
//!   "timers": [{ "timer", "tunable", "unit" ("s"; the throughput floor's
//!                "events/s"), "current_s" (null: off), "tightest_s",
//!                "suggested_s" (null: leave it), "verdict",
//!                "evidence": CHECKED | null,
//!                "next_tighter": {"value_s", "false_positives"} | null,
//!                "probes": [{"value_s", "false_positives"}] }],
//!   "suggested": [{"name", "value_s"}],
//!   "combined": CHECKED | null,
//!   "probes" }
//! CHECKED = { "settings": ["NAME=VALUE"], "caught": [{"stream", "attempt",
//!   "timer", "at_s", "before_timer", "before_at_s", "sooner_s"}],
//!   "sooner_s", "false_positives": [{"stream", "attempt", "timer", "at_s"}],
//!   "healthy_streams", "healthy_retries", "saved", "lost", "unknown",
//!   "assumptions", "assumed": [{"stream", "what": [TEXT]}] }
//! ```

use std::io::Write;

use anyhow::{Context, Result, bail};

use super::Cli;
use super::whatif::Args;
use crate::replay::tune::{Checked, TimerTuning, TuneReport, tune};
use crate::tunables::Value;

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    if let Some(set) = cli.overrides.first() {
        bail!("--set {set}: tune searches from the run's recorded tunables; try one setting with `stallscope whatif`");
    }
    let (recording, assumptions) = args.load().context("cannot tune")?;
    args.write(&tune(&recording, assumptions)?, print, out)
}

fn print(report: &TuneReport, out: &mut dyn Write) -> Result<()> {
    let (a, f) = (&report.assumptions, &report.fidelity);
    writeln!(
        out,
        "tune run {} ({} what-if replays; where the recording ends: stall={}, attempt={})",
        report.run,
        report.probes,
        a.stall.name(),
        a.attempt.name()
    )?;
    writeln!(
        out,
        "replayed unchanged, {} of {} streams reproduce the recording (worst timer drift {:.3} s)",
        f.reproduced, f.streams, f.worst_drift_s
    )?;
    writeln!(
        out,
        "each value is checked against {} healthy streams and {} healthy retries: the fewer, the more it fits this run alone",
        report.healthy_streams, report.healthy_retries
    )?;
    for timer in &report.timers {
        print_timer(timer, out)?;
    }
    writeln!(out)?;
    let Some(combined) = &report.combined else {
        writeln!(out, "No timer is worth changing on this run.")?;
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

fn print_timer(timer: &TimerTuning, out: &mut dyn Write) -> Result<()> {
    let unit = timer.unit;
    let current = timer.current_s.map_or_else(|| "off".to_owned(), |s| format!("{} {unit}", Value::Float(s)));
    let change = match timer.suggested_s {
        Some(s) => format!("{current} → {} {unit}", Value::Float(s)),
        None => format!("{current}, left as it is"),
    };
    writeln!(out, "\n{} ({}): {change}", timer.timer, timer.tunable)?;
    writeln!(out, "  {}", timer.verdict)?;
    if let Some(evidence) = timer.evidence.as_ref().filter(|_| timer.suggested_s.is_some()) {
        print_evidence(evidence, out)?;
    }
    if let Some(edge) = &timer.next_tighter {
        let fired = match edge.false_positives {
            1 => "once".to_owned(),
            n => format!("{n} times"),
        };
        writeln!(out, "  at {} {unit} it fires in healthy attempts {fired}", Value::Float(edge.value_s))?;
    }
    if !timer.probes.is_empty() {
        let tried: Vec<String> = timer.probes.iter().map(|p| Value::Float(p.value_s).to_string()).collect();
        writeln!(out, "  tried: {} {unit}", tried.join(", "))?;
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
            "  stream {} attempt {}: {} at {:.3} s, {:.3} s sooner (as the run was set: {before})",
            caught.stream, caught.attempt, caught.timer, caught.at_s, caught.sooner_s
        )?;
    }
    for assumed in &checked.assumed {
        writeln!(out, "  stream {} assumes: {}", assumed.stream, assumed.what.join("; "))?;
    }
    Ok(())
}
