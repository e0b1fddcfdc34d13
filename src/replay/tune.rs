//! Tune: the tightest stream timers a recorded run supports, each checked
//! by what-if on the run itself.
//!
//! For each stall timer ([`TUNED`]), tune looks for the smallest value on
//! a grid of round numbers ([`grid`]) at which the timer fires in none of
//! the attempts the recording shows healthy, replaying the run under each
//! value it tries ([`what_if`]). A value is suggested only when it would
//! have caught stalls clearly sooner than the run's own timers (`WORTH`);
//! every suggestion is then checked together, since timers interact (a
//! lower idle timer ends a stall before the data-stall timer sees it).
//! [`check`] tells the same about any one setting, as a sentence a
//! diagnosis can carry.
//!
//! The throughput floor is not bisected: its value is a rate, and the
//! highest floor no healthy attempt went below can be read off the
//! recording (the fewest progress events any judged window of a completed
//! attempt held, counted by the governor's own
//! [`rate_window`](crate::core::rate_window); an attempt shorter than a
//! window counts as judged at its end, so a floor never exceeds a healthy
//! stream's pace). The round value at or below it is checked by one
//! what-if like any other. Its window and start are the run's own.
//!
//! The connect timeout and the whole-call deadline are not tuned: a
//! recording does not separate a healthy attempt's connect time from its
//! wait for headers, so no replay can show a connect timeout firing on a
//! healthy stream; and a deadline is the caller's budget, not a stall
//! detector.
//!
//! # Cost
//!
//! Every probe is one what-if of the whole run: about 1.7 s for a
//! 1,000-stream hour on a 2-core machine. Tune replays the run once
//! unchanged (its fidelity, and the baseline every probe is compared
//! with: the live runtime's lateness, which no replay reproduces, cancels
//! out), then bisects each timer's grid, at most
//! [`MAX_PROBES_PER_TIMER`] probes each (the grid's 70 values take 7, plus
//! one to gather evidence for a value the bisection did not try), then
//! checks the suggestions together once: at most 1 + 4 × 8 + 1 = 34
//! what-ifs, about a minute for such an hour. Nothing runs in parallel.
//!
//! Bisection assumes fewer false positives as a timer grows, which holds
//! for one timer on recorded attempts: each healthy attempt replays at its
//! recorded offsets, and a longer timer fires in it only if a shorter one
//! did.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use super::recording::{RecordedAttempt, Recording};
use super::upstream::Assumptions;
use super::whatif::{
    Caught, FIDELITY_TOLERANCE, Fidelity, WhatIf, WhatIfError, WhatIfReport, caught_sooner, seconds, what_if,
};
use crate::core::category::TimerKind;
use crate::core::event::AttemptEnd;
use crate::core::policy::{CorePolicy, RateStart};
use crate::core::rate_window::fewest_in_a_window;
use crate::diagnosis::CourseOutcome;
use crate::store::RunId;
use crate::tunables::{PREFIX, Value};

/// The timers tune searches, with the tunable that sets each.
pub const TUNED: [(TimerKind, &str); 5] = [
    (TimerKind::Ttfb, "STALLSCOPE_SSE_TTFB_TIMEOUT_S"),
    (TimerKind::Idle, "STALLSCOPE_SSE_IDLE_TIMEOUT_S"),
    (TimerKind::DataStall, "STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S"),
    (TimerKind::MinRate, "STALLSCOPE_SSE_MIN_RATE"),
    (TimerKind::Total, "STALLSCOPE_SSE_TOTAL_TIMEOUT_S"),
];

/// A change is suggested when it ends the stalls it catches at least this
/// share sooner, in all, than the run's own timers did (each time counted
/// from its call's start): a smaller gain is finer than the grid's own
/// steps, which are 20–25 % apart.
const WORTH: f64 = 0.2;

/// The most what-if probes one timer's search makes.
pub const MAX_PROBES_PER_TIMER: usize = 10;

/// Round numbers of milliseconds in a decade: the grid's steps, 20–25 %
/// apart, as an operator would write them.
const STEPS_MS: [u64; 10] = [10, 12, 15, 20, 25, 30, 40, 50, 60, 80];

/// Decades of the grid: from 10 ms to 80,000 s, below the tunables' one-day
/// ceiling.
const DECADES: u32 = 7;

/// The values tune tries, in seconds, ascending: 0.01, 0.012, 0.015, 0.02,
/// … 60000, 80000.
pub fn grid() -> Vec<f64> {
    (0..DECADES).flat_map(|decade| STEPS_MS.map(|ms| (ms * 10u64.pow(decade)) as f64 / 1000.0)).collect()
}

/// A run that cannot be tuned or checked.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A replay could not run.
    #[error(transparent)]
    WhatIf(#[from] WhatIfError),
    /// The run holds nothing tune could learn from.
    #[error("run {run} cannot be tuned: {reason}")]
    Untunable {
        /// The run.
        run: RunId,
        /// Why, in words.
        reason: &'static str,
    },
}

/// What one setting would have done on a run, against the recording.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checked {
    /// The setting, `NAME=VALUE` each (names without the prefix).
    pub settings: Vec<String>,
    /// The stalls it would have caught sooner, one per stream: the first
    /// place the stream's replay differs from its replay with the run's own
    /// tunables (the baseline, which cancels what the replay itself does
    /// not reproduce: the live runtime's lateness). A later stall of the
    /// same stream is not counted: its attempt starts at another moment in
    /// the replay, so its times no longer compare.
    pub caught: Vec<Caught>,
    /// How much sooner, summed over `caught`, in seconds.
    pub sooner_s: f64,
    /// Timers that fired in attempts the recording shows healthy.
    pub false_positives: Vec<FalsePositive>,
    /// Streams whose every recorded attempt completed, reached by the
    /// replay: what a false positive is checked against.
    pub healthy_streams: usize,
    /// Completed attempts after a failed one (a healthy retry), reached by
    /// the replay: checked too.
    pub healthy_retries: usize,
    /// Streams that fail with the run's own tunables (replayed, as every
    /// count here) and would have finished.
    pub saved: usize,
    /// Streams that finish with the run's own tunables and would have
    /// failed.
    pub lost: usize,
    /// Streams whose outcome the replay can tell with the run's own
    /// tunables and cannot with these.
    pub unknown: usize,
    /// The what-if assumptions in force where the recording ends.
    pub assumptions: Assumptions,
    /// The streams whose course rests on one of them, with what each
    /// assumed.
    pub assumed: Vec<Assumed>,
}

/// A timer that fired in an attempt the recording shows healthy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FalsePositive {
    /// The stream.
    pub stream: u64,
    /// The attempt.
    pub attempt: u32,
    /// The timer.
    pub timer: TimerKind,
    /// When, in seconds since the call started.
    pub at_s: f64,
}

/// A stream whose replay rests on an assumption.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assumed {
    /// The stream.
    pub stream: u64,
    /// What it assumed, in words.
    pub what: Vec<String>,
}

/// Replays `recording` under `settings` (`(NAME, VALUE)` pairs, names with
/// or without the `STALLSCOPE_` prefix) with the default assumptions, and
/// says what they would have caught and where they would have fired on a
/// healthy stream. Two what-ifs: the run unchanged, then changed.
pub fn check(recording: &Recording, settings: &[(&str, &str)]) -> Result<Checked, TuneError> {
    check_assuming(recording, settings, Assumptions::default())
}

/// [`check`] under chosen assumptions.
pub fn check_assuming(
    recording: &Recording,
    settings: &[(&str, &str)],
    assumptions: Assumptions,
) -> Result<Checked, TuneError> {
    let overrides = settings
        .iter()
        .map(|(name, value)| format!("{}={}", name.trim().strip_prefix(PREFIX).unwrap_or(name.trim()), value.trim()))
        .collect();
    let baseline = what_if(recording, &WhatIf { overrides: Vec::new(), assumptions, verdicts: false })?;
    let report = what_if(recording, &WhatIf { overrides, assumptions, verdicts: false })?;
    Ok(Checked::of(recording, &baseline, &report))
}

impl Checked {
    /// Reads `report`, a what-if of `recording`, against `baseline`, the
    /// recording replayed unchanged under the same assumptions.
    pub fn of(recording: &Recording, baseline: &WhatIfReport, report: &WhatIfReport) -> Checked {
        let mut checked = Checked {
            settings: report.overrides.clone(),
            caught: Vec::new(),
            sooner_s: 0.0,
            false_positives: Vec::new(),
            healthy_streams: 0,
            healthy_retries: 0,
            saved: 0,
            lost: 0,
            unknown: 0,
            assumptions: report.assumptions,
            assumed: Vec::new(),
        };
        for ((recorded, stream), unchanged) in recording.streams.iter().zip(&report.streams).zip(&baseline.streams) {
            let reached = |a: &&RecordedAttempt| a.completed() && a.ordinal <= stream.after.attempts;
            let healthy = recorded.attempts.iter().filter(reached).count();
            if recorded.attempts.iter().all(RecordedAttempt::completed) {
                checked.healthy_streams += usize::from(healthy > 0);
            } else {
                checked.healthy_retries += healthy;
            }
            checked.false_positives.extend(stream.false_positives.iter().map(|f| FalsePositive {
                stream: stream.stream,
                attempt: f.attempt,
                timer: f.timer,
                at_s: f.at_s,
            }));
            if !stream.assumptions.is_empty() {
                checked.assumed.push(Assumed { stream: stream.stream, what: stream.assumptions.clone() });
            }
            let (before, after) = (unchanged.after.outcome, stream.after.outcome);
            checked.saved += usize::from(before == CourseOutcome::Failed && after.is_finished());
            checked.lost += usize::from(before.is_finished() && after == CourseOutcome::Failed);
            checked.unknown += usize::from(before != CourseOutcome::Unknown && after == CourseOutcome::Unknown);
            if let Some(caught) =
                caught_sooner(recorded, &unchanged.after.fired, &stream.after, &stream.false_positives)
            {
                checked.sooner_s += caught.sooner_s;
                checked.caught.push(caught);
            }
        }
        checked
    }

    /// Healthy attempts a timer fired in.
    pub fn false_positive_attempts(&self) -> usize {
        self.false_positives.iter().map(|f| (f.stream, f.attempt)).collect::<BTreeSet<_>>().len()
    }

    /// What the setting would have done, in one sentence: "SSE_DATA_STALL_TIMEOUT_S=120
    /// would have caught these 12 stalls 780 s sooner and fired on none of
    /// the 28 healthy streams (what-if on this run)".
    pub fn sentence(&self) -> String {
        let setting = self.settings.join(" ");
        let caught = match self.caught.as_slice() {
            [] => "would have caught no stall sooner".to_owned(),
            [one] => format!("would have caught this stall {} s sooner", seconds(one.sooner_s)),
            all => {
                let (least, most) =
                    all.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), c| (lo.min(c.sooner_s), hi.max(c.sooner_s)));
                if most - least <= FIDELITY_TOLERANCE.as_secs_f64() {
                    format!("would have caught these {} stalls {} s sooner", all.len(), seconds(most))
                } else {
                    format!(
                        "would have caught these {} stalls {}–{} s sooner ({} s in all)",
                        all.len(),
                        seconds(least),
                        seconds(most),
                        seconds(self.sooner_s)
                    )
                }
            }
        };
        let mut healthy = Vec::new();
        if self.healthy_streams > 0 || self.healthy_retries == 0 {
            healthy.push(count(self.healthy_streams, "healthy stream", "healthy streams"));
        }
        if self.healthy_retries > 0 {
            healthy.push(count(self.healthy_retries, "healthy retry", "healthy retries"));
        }
        let healthy = healthy.join(" and ");
        let fired = match self.false_positive_attempts() {
            0 if self.healthy_streams + self.healthy_retries == 1 => format!("and did not fire on the {healthy}"),
            0 => format!("and fired on none of the {healthy}"),
            n => format!("but fired on {n} of the {healthy}"),
        };
        let lost = match self.lost {
            0 => String::new(),
            n => format!("; {} that finished would have failed", count(n, "stream", "streams")),
        };
        let assumed = match self.assumed.len() {
            0 => String::new(),
            n => format!(
                "; {} on assuming stall={}, attempt={}",
                count(n, "stream rests", "streams rest"),
                self.assumptions.stall.name(),
                self.assumptions.attempt.name()
            ),
        };
        format!("{setting} {caught} {fired}{lost} (what-if on this run{assumed})")
    }
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What tune found for a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneReport {
    /// The run.
    pub run: RunId,
    /// The what-if assumptions every probe used.
    pub assumptions: Assumptions,
    /// How faithfully the run replays unchanged: the ground every probe
    /// stands on.
    pub fidelity: Fidelity,
    /// Streams whose every attempt completed: what each value is checked
    /// against. The fewer, the more the values fit this run alone.
    pub healthy_streams: usize,
    /// Completed attempts after a failed one, checked too.
    pub healthy_retries: usize,
    /// Each timer searched, in [`TUNED`] order.
    pub timers: Vec<TimerTuning>,
    /// The suggested settings, one per timer worth changing.
    pub suggested: Vec<Setting>,
    /// The suggestions checked together; `None` when there are none.
    pub combined: Option<Checked>,
    /// What-if replays made, the fidelity check included.
    pub probes: usize,
}

/// One timer's search. Its values are seconds, except the throughput
/// floor's, which are progress events a second ([`unit`](Self::unit)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimerTuning {
    /// The timer.
    pub timer: TimerKind,
    /// The tunable that sets it.
    pub tunable: &'static str,
    /// The unit of its values: `s`, or `events/s` for the floor.
    pub unit: &'static str,
    /// Its value in the run, in seconds; `None` when it was off.
    pub current_s: Option<f64>,
    /// The smallest value found that fires on no healthy stream; `None`
    /// when the run offers nothing to search.
    pub tightest_s: Option<f64>,
    /// The value suggested; `None` to leave the timer as it is.
    pub suggested_s: Option<f64>,
    /// Why it is or is not suggested, in words.
    pub verdict: String,
    /// What `tightest_s` would have done on the run, when it was replayed.
    pub evidence: Option<Checked>,
    /// The next value down the grid, which fired on a healthy stream: how
    /// close to the edge `tightest_s` is.
    pub next_tighter: Option<Probe>,
    /// Every value tried, in order.
    pub probes: Vec<Probe>,
}

/// One value tried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Probe {
    /// The value, in seconds.
    pub value_s: f64,
    /// Timers that fired in healthy attempts under it.
    pub false_positives: usize,
}

/// A suggested setting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    /// The tunable's full name.
    pub name: &'static str,
    /// The value, in seconds.
    pub value_s: f64,
}

impl Setting {
    /// `NAME=VALUE` with the name's prefix left out, as `--set` takes it.
    pub fn assignment(&self) -> String {
        format!("{}={}", self.name.strip_prefix(PREFIX).unwrap_or(self.name), Value::Float(self.value_s))
    }

    /// `STALLSCOPE_NAME=VALUE`, as a `.env` file holds it.
    pub fn env_line(&self) -> String {
        format!("{}={}", self.name, Value::Float(self.value_s))
    }
}

/// Searches every timer of [`TUNED`] on `recording` under `assumptions`.
pub fn tune(recording: &Recording, assumptions: Assumptions) -> Result<TuneReport, TuneError> {
    let attempts = || recording.streams.iter().flat_map(|s| &s.attempts);
    let stalled = attempts().any(|a| {
        matches!(a.ended, Some((_, AttemptEnd::Timer { .. })))
            || (a.response.is_some() && matches!(a.ended, Some((_, AttemptEnd::Transport { .. }))))
    });
    if !stalled {
        let reason = "no timer fired and no connection broke after its response began, so no setting can be shown to catch a stall";
        return Err(TuneError::Untunable { run: recording.run, reason });
    }
    let Some(longest_healthy) =
        attempts().filter(|a| a.completed()).map(|a| a.span().1.saturating_sub(a.span().0)).max()
    else {
        let reason = "no attempt completed, so no setting can be checked against a healthy stream";
        return Err(TuneError::Untunable { run: recording.run, reason });
    };
    let baseline = what_if(recording, &WhatIf { overrides: Vec::new(), assumptions, verdicts: false })?;
    let fidelity = Fidelity::of(&baseline);
    let healthy = Checked::of(recording, &baseline, &baseline);
    let mut search = Search { recording, assumptions, baseline, probes: 1 };
    let mut timers = Vec::new();
    for (timer, tunable) in TUNED {
        timers.push(search.timer(timer, tunable, longest_healthy)?);
    }
    let suggested: Vec<Setting> =
        timers.iter().filter_map(|t| t.suggested_s.map(|value_s| Setting { name: t.tunable, value_s })).collect();
    let combined = if suggested.is_empty() {
        None
    } else {
        Some(search.check(suggested.iter().map(Setting::assignment).collect())?)
    };
    Ok(TuneReport {
        run: recording.run,
        assumptions,
        fidelity,
        healthy_streams: healthy.healthy_streams,
        healthy_retries: healthy.healthy_retries,
        timers,
        suggested,
        combined,
        probes: search.probes,
    })
}

/// A search in progress: the run, the assumptions, the run replayed
/// unchanged under them, and the what-ifs made.
struct Search<'a> {
    recording: &'a Recording,
    assumptions: Assumptions,
    baseline: WhatIfReport,
    probes: usize,
}

impl Search<'_> {
    fn check(&mut self, overrides: Vec<String>) -> Result<Checked, TuneError> {
        self.probes += 1;
        let report = what_if(self.recording, &WhatIf { overrides, assumptions: self.assumptions, verdicts: false })?;
        Ok(Checked::of(self.recording, &self.baseline, &report))
    }

    /// Bisects the grid below the timer's value for the smallest that
    /// fires on no healthy stream.
    fn timer(
        &mut self,
        timer: TimerKind,
        tunable: &'static str,
        longest_healthy: Duration,
    ) -> Result<TimerTuning, TuneError> {
        let current = self.recording.tunables.get(tunable).value.as_f64();
        let current_s = (current > 0.0).then_some(current);
        // Tightest first; the last fires on no healthy stream.
        let candidates = match self.candidates(timer, current_s, longest_healthy) {
            Ok(candidates) => candidates,
            Err(verdict) => return Ok(TimerTuning::unsearched(timer, tunable, current_s, verdict.to_owned())),
        };
        let mut tuning = TimerTuning::unsearched(timer, tunable, current_s, String::new());
        let unit = tuning.unit;
        // Invariant: candidates[quiet] fires on no healthy stream, and every
        // candidate up to `fires` does.
        let (mut fires, mut quiet) = (None::<usize>, candidates.len() - 1);
        let mut evidence = None;
        loop {
            let low = fires.map_or(0, |f| f + 1);
            if low >= quiet || tuning.probes.len() == MAX_PROBES_PER_TIMER {
                break;
            }
            let mid = low + (quiet - low) / 2;
            let checked = self.check(vec![Setting { name: tunable, value_s: candidates[mid] }.assignment()])?;
            let probe = Probe { value_s: candidates[mid], false_positives: checked.false_positives.len() };
            tuning.probes.push(probe);
            if probe.false_positives == 0 {
                (quiet, evidence) = (mid, Some(checked));
            } else {
                (fires, tuning.next_tighter) = (Some(mid), Some(probe));
            }
        }
        let tightest = candidates[quiet];
        tuning.tightest_s = Some(tightest);
        let unchanged = current_s == Some(tightest);
        if evidence.is_none() && !unchanged {
            // The bisection never tried the top: replay it for its evidence.
            let checked = self.check(vec![Setting { name: tunable, value_s: tightest }.assignment()])?;
            tuning.probes.push(Probe { value_s: tightest, false_positives: checked.false_positives.len() });
            evidence = Some(checked);
        }
        let shown = format!("{} {unit}", Value::Float(tightest));
        tuning.verdict = match &evidence {
            _ if unchanged && tuning.probes.is_empty() => format!("keep {shown}: nothing tighter on the grid"),
            _ if unchanged => format!("keep {shown}: every tighter value tried fired on a healthy stream"),
            Some(checked) if !checked.false_positives.is_empty() => {
                format!("{shown} fired on a healthy stream in the replay: left as it is")
            }
            Some(checked) if checked.caught.is_empty() => {
                format!("{shown} fires on no healthy stream but catches no stall on this run: left as it is")
            }
            Some(checked) if checked.sooner_s < WORTH * checked.caught.iter().map(|c| c.before_at_s).sum::<f64>() => {
                format!(
                    "{shown} fires on no healthy stream but ends the stalls it catches only {} s sooner in all, \
                     under a fifth of the time the run's own timers took: left as it is",
                    seconds(checked.sooner_s)
                )
            }
            Some(checked) => {
                tuning.suggested_s = Some(tightest);
                checked.sentence()
            }
            None => format!("keep {shown}"),
        };
        tuning.evidence = evidence;
        Ok(tuning)
    }
}

impl Search<'_> {
    /// The values to bisect, tightest first; the last is known to fire on
    /// no healthy stream. `Err` says why there is nothing to search.
    fn candidates(
        &self,
        timer: TimerKind,
        current: Option<f64>,
        longest_healthy: Duration,
    ) -> Result<Vec<f64>, &'static str> {
        let grid = grid();
        if timer == TimerKind::MinRate {
            // The run's own floor fired on no attempt that completed, nor
            // does any floor up to the slowest healthy window.
            let quiet = match (self.highest_quiet_floor(), current) {
                (Some(highest), Some(current)) => Some(highest.max(current)),
                (highest, current) => highest.or(current),
            };
            return match quiet.and_then(|q| grid.into_iter().rev().find(|&v| v <= q).or(current)) {
                Some(quiet) => Ok(vec![quiet]),
                None => Err("off, and no floor on the grid is below the slowest window of a healthy attempt: left off"),
            };
        }
        // A value above the longest healthy attempt cannot fire in one, so
        // the search starts there when that is below the timer's value.
        let above_healthy = grid.iter().copied().find(|&v| v > longest_healthy.as_secs_f64());
        let top = match (current, above_healthy) {
            (Some(current), Some(above)) => current.min(above),
            (Some(current), None) => current,
            (None, Some(above)) => above,
            (None, None) => return Err("off, and every healthy attempt outlasts the grid: left off"),
        };
        let mut candidates: Vec<f64> = grid.into_iter().filter(|&v| v < top).collect();
        candidates.push(top);
        Ok(candidates)
    }

    /// The highest floor, in progress events a second over the run's
    /// window and from its start, that no completed attempt went below;
    /// `None` when one went a whole window without progress or none reached
    /// its start.
    fn highest_quiet_floor(&self) -> Option<f64> {
        let t = &self.recording.tunables;
        let window = t.seconds("STALLSCOPE_SSE_MIN_RATE_WINDOW_S");
        let Ok(policy) = CorePolicy::from_tunables(t) else { return None };
        let progress = &policy.timers.progress_classes;
        let after = RateStart::parse(t.get("STALLSCOPE_SSE_MIN_RATE_AFTER").value.as_str());
        let mut fewest = None::<u64>;
        for attempt in self.recording.streams.iter().flat_map(|s| &s.attempts).filter(|a| a.completed()) {
            let progress_at = || {
                attempt.chunks_with_events().flat_map(move |(chunk, events)| {
                    events.iter().filter(|(class, _)| progress.contains(class)).map(move |_| chunk.at)
                })
            };
            let start = match after {
                RateStart::Headers => attempt.response.as_ref().map(|r| r.at),
                RateStart::Progress => progress_at().next(),
                RateStart::Content => attempt
                    .chunks_with_events()
                    .find(|(_, events)| events.iter().any(|(class, _)| class.is_output()))
                    .map(|(chunk, _)| chunk.at),
            };
            let (Some(start), Some((end, _))) = (start, &attempt.ended) else { continue };
            let events = progress_at().filter(|&at| at >= start).map(|at| at - start);
            let held = fewest_in_a_window(window, events, end.saturating_sub(start));
            fewest = Some(fewest.map_or(held, |f| f.min(held)));
        }
        fewest.filter(|&held| held > 0).map(|held| held as f64 / window.as_secs_f64())
    }
}

impl TimerTuning {
    fn unsearched(timer: TimerKind, tunable: &'static str, current_s: Option<f64>, verdict: String) -> Self {
        TimerTuning {
            timer,
            tunable,
            unit: if timer == TimerKind::MinRate { "events/s" } else { "s" },
            current_s,
            tightest_s: None,
            suggested_s: None,
            verdict,
            evidence: None,
            next_tighter: None,
            probes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_round_ascending_and_small_enough_to_bisect_within_the_cap() {
        let grid = grid();
        assert!(grid.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((grid[0], grid[1], grid[grid.len() - 1]), (0.01, 0.012, 80_000.0));
        assert!(grid.contains(&120.0) && grid.contains(&0.25));
        // Bisection over n + 1 candidates takes ⌈log2(n + 1)⌉ probes, plus
        // one for evidence.
        let probes = (grid.len() + 1).next_power_of_two().trailing_zeros() as usize + 1;
        assert!(probes <= MAX_PROBES_PER_TIMER, "{probes}");
        let shown: Vec<String> = grid[..4].iter().map(|v| Value::Float(*v).to_string()).collect();
        assert_eq!(shown, ["0.01", "0.012", "0.015", "0.02"]);
    }

    fn caught(stream: u64, sooner_s: f64) -> Caught {
        Caught {
            stream,
            attempt: 1,
            timer: TimerKind::DataStall,
            at_s: 1.0,
            before_timer: Some(TimerKind::Idle),
            before_at_s: 1.0 + sooner_s,
            sooner_s,
        }
    }

    fn checked(caught: Vec<Caught>) -> Checked {
        Checked {
            settings: vec!["SSE_DATA_STALL_TIMEOUT_S=120".into()],
            sooner_s: caught.iter().map(|c| c.sooner_s).sum(),
            caught,
            false_positives: Vec::new(),
            healthy_streams: 28,
            healthy_retries: 0,
            saved: 0,
            lost: 0,
            unknown: 0,
            assumptions: Assumptions::default(),
            assumed: Vec::new(),
        }
    }

    #[test]
    fn a_sentence_says_what_a_setting_caught_and_where_it_fired() {
        let same = checked((0..12).map(|s| caught(s, 780.0)).collect());
        assert_eq!(
            same.sentence(),
            "SSE_DATA_STALL_TIMEOUT_S=120 would have caught these 12 stalls 780 s sooner \
             and fired on none of the 28 healthy streams (what-if on this run)"
        );
        let mut mixed = checked(vec![caught(0, 0.25), caught(1, 780.0)]);
        mixed.healthy_retries = 1;
        assert_eq!(
            mixed.sentence(),
            "SSE_DATA_STALL_TIMEOUT_S=120 would have caught these 2 stalls 0.25–780 s sooner (780.25 s in all) \
             and fired on none of the 28 healthy streams and 1 healthy retry (what-if on this run)"
        );
        let mut wrong = checked(vec![caught(0, 1.0)]);
        let fp = FalsePositive { stream: 3, attempt: 1, timer: TimerKind::DataStall, at_s: 2.0 };
        wrong.false_positives = vec![fp.clone(), FalsePositive { timer: TimerKind::Idle, ..fp }];
        wrong.lost = 1;
        wrong.assumed = vec![Assumed { stream: 3, what: vec!["attempt 2 was never recorded".into()] }];
        assert_eq!(
            wrong.sentence(),
            "SSE_DATA_STALL_TIMEOUT_S=120 would have caught this stall 1 s sooner but fired on 1 of the 28 healthy \
             streams; 1 stream that finished would have failed (what-if on this run; 1 stream rests on assuming \
             stall=silence, attempt=last-to-target)"
        );
        assert_eq!(
            checked(Vec::new()).sentence().split(" and ").next(),
            Some("SSE_DATA_STALL_TIMEOUT_S=120 would have caught no stall sooner")
        );
    }
}
