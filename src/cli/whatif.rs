//! `stallscope whatif`: what a change of tunables would have done to a
//! recorded run, replayed through the core in virtual time.

use std::io::Write;

use anyhow::{Context, Result, bail};

use super::Cli;
use super::runs::DbArg;
use crate::diagnosis::StreamCourse;
use crate::replay::recording::Recording;
use crate::replay::upstream::{Assumptions, AttemptAssumption, StallAssumption};
use crate::replay::whatif::{WhatIf, WhatIfReport, what_if};
use crate::store::RunId;

/// Options of `stallscope whatif` and `stallscope tune`: a recorded run
/// and how to replay it.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recorded run.
    run: RunId,
    /// What to assume where the recording ends: `stall=silence|keepalives|stop`
    /// (an attempt kept alive past where it was given up on) and
    /// `attempt=same-ordinal|last-to-target|covering|stop` (an attempt the
    /// run never made). Repeat or separate with commas.
    #[arg(long, value_name = "WHAT=HOW", value_delimiter = ',')]
    assume: Vec<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: DbArg,
}

pub(super) fn run(cli: &Cli, args: &Args, out: &mut dyn Write) -> Result<()> {
    let (recording, assumptions) = args.load()?;
    let report = what_if(&recording, &WhatIf { overrides: cli.overrides.clone(), assumptions, verdicts: true })?;
    args.write(&report, print, out)
}

impl Args {
    /// The run, loaded for replay, and the assumptions given.
    pub(super) fn load(&self) -> Result<(Recording, Assumptions)> {
        let assumptions = parse_assumptions(&self.assume)?;
        let store = self.db.open()?;
        Ok((Recording::load(&store, self.run)?, assumptions))
    }

    /// Writes `report` as one line of JSON with `--json`, else with `print`.
    pub(super) fn write<T: serde::Serialize>(
        &self,
        report: &T,
        print: fn(&T, &mut dyn Write) -> Result<()>,
        out: &mut dyn Write,
    ) -> Result<()> {
        if self.json {
            serde_json::to_writer(&mut *out, report)?;
            writeln!(out)?;
            Ok(())
        } else {
            print(report, out)
        }
    }
}

pub(super) fn parse_assumptions(given: &[String]) -> Result<Assumptions> {
    let mut assumptions = Assumptions::default();
    for text in given {
        let (what, how) = text.split_once('=').context(format!("--assume {text}: give WHAT=HOW"))?;
        match what.trim() {
            "stall" => assumptions.stall = pick(what, how, &StallAssumption::ALL)?,
            "attempt" => assumptions.attempt = pick(what, how, &AttemptAssumption::ALL)?,
            other => bail!("--assume {other}={how}: allowed: stall=…, attempt=…"),
        }
    }
    Ok(assumptions)
}

/// The choice named `how` among `choices`.
fn pick<T: Copy>(what: &str, how: &str, choices: &[(&'static str, T)]) -> Result<T> {
    match choices.iter().find(|(name, _)| *name == how.trim()) {
        Some((_, choice)) => Ok(*choice),
        None => {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            bail!("--assume {what}={how}: allowed: {}", names.join(", "))
        }
    }
}

fn print(report: &WhatIfReport, out: &mut dyn Write) -> Result<()> {
    let changes = if report.overrides.is_empty() { "no change".to_owned() } else { report.overrides.join(" ") };
    let a = &report.assumptions;
    writeln!(
        out,
        "what-if on run {}: {changes} (where the recording ends: stall={}, attempt={})",
        report.run,
        a.stall.name(),
        a.attempt.name()
    )?;
    for timer in &report.timers {
        let shown = |t: &crate::replay::whatif::EffectiveTimer| match (t.floor, t.seconds) {
            (Some(floor), Some(s)) => format!("{floor}/s over {s} s ({})", t.source),
            (_, Some(s)) => format!("{s} s ({})", t.source),
            (_, None) => format!("off ({})", t.source),
        };
        let (before, after) = (shown(&timer.before), shown(&timer.after));
        let arrow = if before == after { "unchanged".to_owned() } else { format!("→ {after}") };
        writeln!(out, "  {:<10} {before} {arrow}", timer.timer.name())?;
    }
    writeln!(out, "{:>6}  {:<44} {:<44}", "STREAM", "BEFORE", "AFTER")?;
    for stream in &report.streams {
        let mark = if stream.changed { "*" } else { " " };
        writeln!(out, "{:>5}{mark}  {:<44} {:<44}", stream.stream, course(&stream.before), course(&stream.after))?;
        for fp in &stream.false_positives {
            writeln!(
                out,
                "        false positive: {} timer fires at {:.3} s in attempt {}, which the recording shows healthy",
                fp.timer, fp.at_s, fp.attempt
            )?;
        }
        if let Some(sooner) = stream.sooner_words() {
            writeln!(out, "        {sooner}")?;
        }
        for assumption in &stream.assumptions {
            writeln!(out, "        assumes: {assumption}")?;
        }
        for note in &stream.notes {
            writeln!(out, "        note: {note}")?;
        }
        if let Some(v) = stream.verdict.as_ref().filter(|v| v.before.kind != v.after.kind) {
            writeln!(out, "        verdict: {} → {}: {}", v.before.kind, v.after.kind, v.after.summary)?;
        }
    }
    let s = &report.summary;
    writeln!(
        out,
        "{} streams: {} changed, {}, {} saved, {} lost, {} false positives, {} resting on an assumption, {} unknown",
        s.streams,
        s.changed,
        report.summary.sooner_words(),
        s.saved,
        s.lost,
        s.false_positives,
        s.assumed,
        s.unknown
    )?;
    if let Some(verdicts) = &report.verdicts {
        for (when, run) in [("as recorded", &verdicts.before), ("after the change", &verdicts.after)] {
            writeln!(out, "verdicts {when}:")?;
            for group in &run.groups {
                writeln!(out, "  {}", group.summary)?;
            }
        }
    }
    Ok(())
}

/// `ok, 2 attempts, idle@1.102s (+1.000)`: outcome, attempts, each fired
/// timer with when it fired and how long its stall went unnoticed.
fn course(c: &StreamCourse) -> String {
    let mut text = format!("{}, {} attempt{}", c.outcome, c.attempts, if c.attempts == 1 { "" } else { "s" });
    for f in &c.fired {
        text.push_str(&format!(", {}@{:.3}s (+{:.3})", f.timer, f.at_s, f.detected_after_s));
    }
    if !c.hops.is_empty() {
        text.push_str(&format!(", {} hop{}", c.hops.len(), if c.hops.len() == 1 { "" } else { "s" }));
    }
    text
}
