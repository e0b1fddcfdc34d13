//! What tune found, in words: the one text of a [`TuneReport`] that
//! `stallscope tune` prints and the app's History shows for the runs
//! picked there, so the two never say it differently.

use std::fmt::{self, Write};

use super::tune::{Checked, Headroom, TimerTuning, TuneReport};
use crate::tunables::Value;

/// What tune found, in the words the CLI prints and the app shows.
pub fn report_text(report: &TuneReport) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_report(report, &mut out);
    out
}

fn write_report(report: &TuneReport, out: &mut String) -> fmt::Result {
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
        write_timer(timer, out)?;
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
    writeln!(out, "  {}", report.set_lines())?;
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

fn write_timer(timer: &TimerTuning, out: &mut String) -> fmt::Result {
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
        write_evidence(evidence, out)?;
    }
    if !timer.probes.is_empty() {
        let tried: Vec<String> = timer.probes.iter().map(|p| Value::Float(p.value_s).to_string()).collect();
        writeln!(out, "  checked by what-if: {} {unit}", tried.join(", "))?;
    }
    Ok(())
}

/// Each stall caught, and the streams that rest on an assumption.
fn write_evidence(checked: &Checked, out: &mut String) -> fmt::Result {
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
