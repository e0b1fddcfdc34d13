//! Tune: the tightest stream timers a history of recorded runs supports —
//! one run, or a week of canary rounds or observed traffic — each
//! suggestion checked by what-if on those runs.
//!
//! # What is read
//!
//! For each stall timer ([`TUNED`]) tune reads, off every healthy
//! (completed) attempt of the runs, what that timer's clock saw, counted
//! as the governor counts it ([`AttemptClocks`], from the same fold as
//! the verdicts): the wait for the first byte (TTFB), the longest silence
//! (idle: from the request, restarted by the headers and every byte), the
//! longest wait for progress (data stall), the attempt's length (total)
//! and its slowest window (the throughput floor, counted by the
//! governor's own [`rate_window`](crate::core::rate_window)). The worst of
//! them, with percentiles and where it was seen, per route, is the
//! timer's headroom ([`Headroom`]). A healthy attempt replays at its
//! recorded offsets, so a timer fires in one exactly when it is within
//! what that attempt's clock saw: the tightest value on a grid of round
//! numbers ([`grid`]) that fires on none of them needs no replay.
//!
//! # What is suggested
//!
//! A value is suggested only with room to spare: at least [`MARGIN`]
//! times the worst healthy value (a floor at most its inverse), never
//! below what real providers need ([`FLOORS`], scaled by
//! [`TuneOptions::floor_scale`] for recordings made with timers scaled
//! down, as the simulator's stories are), only when it is tighter than
//! the run's own, and only when a what-if shows it catching stalls
//! clearly sooner (`WORTH`) while firing on no healthy attempt and losing
//! no stream. Where a value fires or loses one in the replay (a retry
//! that meets a timer the recording never saw), the next grid value up is
//! checked, a few times at most. The suggestions are then checked
//! together, since timers interact, and the weakest is dropped until
//! together they are clean: a suggestion is never one whose check fires
//! on a healthy attempt or loses a stream.
//!
//! A run of healthy traffic catches no stall, but says most about how
//! tight each timer can go: its report gives each timer's tightest value
//! and headroom, and says it caught nothing.
//!
//! The connect timeout and the whole-call deadline are not tuned: a
//! recording does not separate a healthy attempt's connect time from its
//! wait for headers; and a deadline is the caller's budget, not a stall
//! detector.
//!
//! # Cost
//!
//! Reading the headroom replays nothing. A what-if of a run whose every
//! attempt completed, under values above its every healthy clock, is the
//! run itself (no timer can fire), so only runs with an attempt that did
//! not complete are replayed: once unchanged (their fidelity, and the
//! baseline each check is compared with, which cancels the live runtime's
//! lateness), then per value checked. A week of one-minute canary rounds
//! replays only its failed rounds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::recording::{RecordedAttempt, RecordedStream, Recording};
use super::upstream::Assumptions;
use super::whatif::{
    Caught, FIDELITY_TOLERANCE, Fidelity, WhatIf, WhatIfError, WhatIfReport, caught_sooner, seconds, what_if_until,
};
use crate::core::category::TimerKind;
use crate::core::event::AttemptEnd;
use crate::core::policy::{CorePolicy, RateStart};
use crate::core::rate_window::fewest_in_a_window;
use crate::diagnosis::{AttemptClocks, CourseOutcome};
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

/// A suggested value keeps at least this factor of room over the worst
/// the healthy attempts showed (a throughput floor at most the slowest
/// healthy window over it): the next day's traffic is not the one seen,
/// and a timer at the edge of the seen fires on the first attempt beyond.
pub const MARGIN: f64 = 1.5;

/// What no real provider undercuts: a stall timer below these, or a
/// throughput floor above its value, cuts healthy streams that real
/// traffic has. In seconds (the floor's in progress events a second).
///
/// - TTFB 30 s: the shortest first-byte guard the seeds report (Azure's;
///   codex uses 120 s), as long prefills and queues take tens of seconds.
/// - Idle 120 s: the content silence LangChain's stream watchdog allows
///   (langchain-ai/langchain #36949); Azure OpenAI sends its first
///   keep-alive only after 30 s of silence, and hops count silence
///   against 60 s defaults (research, intermediaries).
/// - Data stall 300 s: reasoning streams go minutes with keep-alives and
///   no progress (8.5-minute thinking streams cut by an idle deadline,
///   openai/codex #39771); the seeds' default is 900 s.
/// - Total 600 s: long answers and reasoning run for many minutes; the
///   seeds set no total cap at all.
/// - Throughput floor 1 event/s at most: a model thinking or writing a
///   long tool call streams slower than that for stretches.
pub const FLOORS: [(TimerKind, f64); 5] = [
    (TimerKind::Ttfb, 30.0),
    (TimerKind::Idle, 120.0),
    (TimerKind::DataStall, 300.0),
    (TimerKind::MinRate, 1.0),
    (TimerKind::Total, 600.0),
];

/// A change is suggested when it ends the stalls it catches at least this
/// share sooner, in all, than the runs' own timers did (each time counted
/// from its call's start): a smaller gain is finer than the grid's own
/// steps, which are 20–25 % apart.
const WORTH: f64 = 0.2;

/// The most values checked by what-if for one timer: the first candidate
/// and the grid values above it, when one fired in a replay.
pub const MAX_PROBES_PER_TIMER: usize = 4;

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

/// How a search runs.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// The what-if assumptions where a recording ends.
    pub assumptions: Assumptions,
    /// What [`FLOORS`] is multiplied by: 1 for real traffic; a recording
    /// made with every timer scaled down (the simulator's stories run
    /// seconds where real ones run minutes) takes the same scale.
    pub floor_scale: f64,
    /// Stops the search between and within its replays.
    pub stop: CancellationToken,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions { assumptions: Assumptions::default(), floor_scale: 1.0, stop: CancellationToken::new() }
    }
}

/// Runs that cannot be tuned or checked.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A replay could not run.
    #[error(transparent)]
    WhatIf(#[from] WhatIfError),
    /// The runs hold nothing tune could learn from.
    #[error("{} cannot be tuned: {reason}", runs_words(.runs))]
    Untunable {
        /// The runs.
        runs: Vec<RunId>,
        /// Why, in words.
        reason: &'static str,
    },
    /// A floor scale outside what is allowed.
    #[error("floor scale {0}: allowed: above 0 and at most 1")]
    FloorScale(f64),
}

/// "run 4", "runs 3, 5, 9" or "112 runs (3 to 9,104)".
fn runs_words(runs: &[RunId]) -> String {
    match runs {
        [one] => format!("run {one}"),
        few if few.len() <= 5 => {
            format!("runs {}", few.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
        }
        many => format!("{} runs ({} to {})", many.len(), many[0], many[many.len() - 1]),
    }
}

/// What one setting would have done on some runs, against their
/// recordings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checked {
    /// The setting, `NAME=VALUE` each (names without the prefix).
    pub settings: Vec<String>,
    /// The runs it was checked on.
    pub runs: usize,
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
    /// Completed attempts it was checked against: those the replays
    /// reached, and those of runs that replay unchanged.
    pub healthy_attempts: usize,
    /// Streams that fail with the runs' own tunables (replayed, as every
    /// count here) and would have finished.
    pub saved: usize,
    /// Streams that finish with the runs' own tunables and would have
    /// failed.
    pub lost: usize,
    /// Streams whose outcome the replay can tell with the runs' own
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
    /// The run.
    pub run: RunId,
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
    /// The run.
    pub run: RunId,
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
    let stop = CancellationToken::new();
    let replay = |overrides| what_if_until(recording, &WhatIf { overrides, assumptions, verdicts: false }, None, &stop);
    let baseline = replay(Vec::new())?;
    let report = replay(overrides)?;
    Ok(Checked::of(recording, &baseline, &report))
}

impl Checked {
    /// Nothing checked yet, of `settings`.
    fn empty(settings: Vec<String>, assumptions: Assumptions) -> Checked {
        Checked {
            settings,
            runs: 0,
            caught: Vec::new(),
            sooner_s: 0.0,
            false_positives: Vec::new(),
            healthy_attempts: 0,
            saved: 0,
            lost: 0,
            unknown: 0,
            assumptions,
            assumed: Vec::new(),
        }
    }

    /// Reads `report`, a what-if of `recording`, against `baseline`, the
    /// recording replayed unchanged under the same assumptions.
    pub fn of(recording: &Recording, baseline: &WhatIfReport, report: &WhatIfReport) -> Checked {
        let mut checked = Checked::empty(report.overrides.clone(), report.assumptions);
        checked.runs = 1;
        let run = recording.run;
        for ((recorded, stream), unchanged) in recording.streams.iter().zip(&report.streams).zip(&baseline.streams) {
            let reached = |a: &&RecordedAttempt| a.completed() && a.ordinal <= stream.after.attempts;
            checked.healthy_attempts += recorded.attempts.iter().filter(reached).count();
            checked.false_positives.extend(stream.false_positives.iter().map(|f| FalsePositive {
                run,
                stream: stream.stream,
                attempt: f.attempt,
                timer: f.timer,
                at_s: f.at_s,
            }));
            if !stream.assumptions.is_empty() {
                checked.assumed.push(Assumed { run, stream: stream.stream, what: stream.assumptions.clone() });
            }
            let (before, after) = (unchanged.after.outcome, stream.after.outcome);
            checked.saved += usize::from(before == CourseOutcome::Failed && after.is_finished());
            checked.lost += usize::from(before.is_finished() && after == CourseOutcome::Failed);
            checked.unknown += usize::from(before != CourseOutcome::Unknown && after == CourseOutcome::Unknown);
            let caught = caught_sooner(run, recorded, &unchanged.after.fired, &stream.after, &stream.false_positives);
            if let Some(caught) = caught {
                checked.sooner_s += caught.sooner_s;
                checked.caught.push(caught);
            }
        }
        checked
    }

    /// Adds what `other`, the same setting checked on other runs, found.
    fn merge(&mut self, other: Checked) {
        self.runs += other.runs;
        self.caught.extend(other.caught);
        self.sooner_s += other.sooner_s;
        self.false_positives.extend(other.false_positives);
        self.healthy_attempts += other.healthy_attempts;
        self.saved += other.saved;
        self.lost += other.lost;
        self.unknown += other.unknown;
        self.assumed.extend(other.assumed);
    }

    /// Healthy attempts a timer fired in.
    pub fn false_positive_attempts(&self) -> usize {
        self.false_positives.iter().map(|f| (f.run, f.stream, f.attempt)).collect::<BTreeSet<_>>().len()
    }

    /// Whether it fired on no healthy attempt and lost no stream: the only
    /// kind of setting tune suggests.
    pub fn is_clean(&self) -> bool {
        self.false_positives.is_empty() && self.lost == 0
    }

    /// What the setting would have done, in one sentence:
    /// "SSE_DATA_STALL_TIMEOUT_S=600 would have caught these 12 stalls
    /// 780 s sooner and fired on none of the 28 healthy attempts (what-if
    /// on this run: it fits this traffic, not every day)".
    pub fn sentence(&self) -> String {
        let setting = self.settings.join(" ");
        let caught = match self.caught.as_slice() {
            [] => "would have caught no stall sooner".to_owned(),
            [one] => format!("would have caught this stall {} sooner", duration_words(one.sooner_s)),
            all => {
                let (least, most) =
                    all.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), c| (lo.min(c.sooner_s), hi.max(c.sooner_s)));
                if most - least <= FIDELITY_TOLERANCE.as_secs_f64() {
                    format!("would have caught these {} stalls {} sooner", all.len(), duration_words(most))
                } else {
                    format!(
                        "would have caught these {} stalls {}–{} sooner ({} in all)",
                        all.len(),
                        duration_words(least),
                        duration_words(most),
                        duration_words(self.sooner_s)
                    )
                }
            }
        };
        let healthy = count(self.healthy_attempts, "healthy attempt", "healthy attempts");
        let fired = match self.false_positive_attempts() {
            0 if self.healthy_attempts == 1 => format!("and did not fire on the {healthy}"),
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
        let on = if self.runs <= 1 { "this run".to_owned() } else { format!("these {} runs", self.runs) };
        format!("{setting} {caught} {fired}{lost} (what-if on {on}: it fits this traffic, not every day{assumed})")
    }
}

/// A span of time as an operator reads it: seconds to the millisecond
/// under two minutes, else minutes (or hours) to one decimal.
fn duration_words(s: f64) -> String {
    match s {
        s if s < 120.0 => format!("{} s", seconds(s)),
        s if s < 7200.0 => format!("{} min", Value::Float((s / 6.0).round() / 10.0)),
        s => format!("{} h", Value::Float((s / 360.0).round() / 10.0)),
    }
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Where a value was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AttemptRef {
    /// The run.
    pub run: RunId,
    /// The stream.
    pub stream: u64,
    /// The attempt.
    pub attempt: u32,
}

/// What one timer's clock saw on the healthy attempts: how close they came
/// to firing it. Seconds, or for the throughput floor progress events a
/// second (its slowest window), where the worst is the smallest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Headroom {
    /// Healthy attempts the clock ran on.
    pub attempts: usize,
    /// The worst (the largest wait; the slowest window).
    pub worst: f64,
    /// Where it was seen.
    pub worst_at: AttemptRef,
    /// The median, and the 90th and 99th percentiles toward the worst
    /// (nearest rank).
    pub p50: f64,
    /// See `p50`.
    pub p90: f64,
    /// See `p50`.
    pub p99: f64,
}

impl Headroom {
    /// From `(value, where)` pairs; `ascending` when the worst is the
    /// largest.
    fn of(mut seen: Vec<(f64, AttemptRef)>, ascending: bool) -> Option<Headroom> {
        seen.sort_by(|a, b| if ascending { a.0.total_cmp(&b.0) } else { b.0.total_cmp(&a.0) });
        let n = seen.len();
        let rank = |p: f64| seen[((p * n as f64).ceil() as usize).clamp(1, n) - 1].0;
        let &(worst, worst_at) = seen.last()?;
        Some(Headroom { attempts: n, worst, worst_at, p50: rank(0.5), p90: rank(0.9), p99: rank(0.99) })
    }
}

/// The healthy attempts of one route (`provider/model`) and each timer's
/// headroom on them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteHeadroom {
    /// `provider/model`.
    pub route: String,
    /// Its healthy attempts.
    pub healthy_attempts: usize,
    /// Each timer's headroom, in [`TUNED`] order (timers no healthy
    /// attempt's clock ran for are left out).
    pub timers: Vec<(TimerKind, Headroom)>,
}

/// What tune found on some runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneReport {
    /// The runs, ascending.
    pub runs: Vec<RunId>,
    /// From the first run's start to the last's end, wall clock, in
    /// seconds.
    pub span_s: f64,
    /// The what-if assumptions every check used.
    pub assumptions: Assumptions,
    /// The scale applied to [`FLOORS`].
    pub floor_scale: f64,
    /// The runs replayed (those with an attempt that did not complete).
    pub replayed_runs: usize,
    /// How faithfully the replayed runs replay unchanged: the ground every
    /// check stands on.
    pub fidelity: Fidelity,
    /// Completed attempts: what each value is checked against. The fewer,
    /// the more the values fit these runs alone.
    pub healthy_attempts: usize,
    /// Attempts that stalled: a timer gave up on them or their connection
    /// broke after the response began.
    pub stalls: usize,
    /// Each route's headroom, when the runs span more than one.
    pub routes: Vec<RouteHeadroom>,
    /// Each timer searched, in [`TUNED`] order.
    pub timers: Vec<TimerTuning>,
    /// The suggested settings, one per timer worth changing, clean
    /// together.
    pub suggested: Vec<Setting>,
    /// The suggestions checked together; `None` when there are none.
    pub combined: Option<Checked>,
    /// What-if replays made, the baselines included.
    pub probes: usize,
}

impl TuneReport {
    /// The suggestions as command-line options (`--set A=1 --set B=2`);
    /// empty when there are none.
    pub fn set_lines(&self) -> String {
        self.suggested.iter().map(|s| format!("--set {}", s.assignment())).collect::<Vec<_>>().join(" ")
    }
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
    /// Its value in the latest run; `None` when it was off.
    pub current_s: Option<f64>,
    /// Other values it had in earlier runs, ascending.
    pub earlier_s: Vec<f64>,
    /// What its clock saw on the healthy attempts of every route.
    pub headroom: Option<Headroom>,
    /// The tightest grid value that fires on no healthy attempt; `None`
    /// when no healthy attempt's clock ran.
    pub tightest_s: Option<f64>,
    /// What no real provider undercuts, scaled ([`FLOORS`]).
    pub floor_s: f64,
    /// The tightest value with room ([`MARGIN`]) and above the floor.
    pub safe_s: Option<f64>,
    /// The value suggested; `None` to leave the timer as it is.
    pub suggested_s: Option<f64>,
    /// Why it is or is not suggested, in words.
    pub verdict: String,
    /// What the last value checked would have done, when one was replayed.
    pub evidence: Option<Checked>,
    /// Every value checked by what-if, in order.
    pub probes: Vec<Probe>,
}

/// One value checked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Probe {
    /// The value.
    pub value_s: f64,
    /// Timers that fired in healthy attempts under it.
    pub false_positives: usize,
    /// Streams that would have failed under it and finished as set.
    pub lost: usize,
}

/// A suggested setting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    /// The tunable's full name.
    pub name: &'static str,
    /// The value.
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

/// Searches every timer of [`TUNED`] on `recordings` (one run or many).
pub fn tune(recordings: &[Recording], options: &TuneOptions) -> Result<TuneReport, TuneError> {
    if !(options.floor_scale > 0.0 && options.floor_scale <= 1.0) {
        return Err(TuneError::FloorScale(options.floor_scale));
    }
    let mut recordings: Vec<&Recording> = recordings.iter().collect();
    recordings.sort_by_key(|r| r.run);
    let runs: Vec<RunId> = recordings.iter().map(|r| r.run).collect();
    let seen = Seen::of(&recordings);
    if seen.healthy == 0 {
        let reason = "no attempt completed, so no setting can be checked against a healthy attempt";
        return Err(TuneError::Untunable { runs, reason });
    }
    let mut search = Search::new(&recordings, options)?;
    let mut timers = Vec::new();
    for (timer, tunable) in TUNED {
        timers.push(search.timer(timer, tunable, &seen)?);
    }
    let (suggested, combined) = search.together(&mut timers)?;
    Ok(TuneReport {
        span_s: span_s(&recordings),
        runs,
        assumptions: options.assumptions,
        floor_scale: options.floor_scale,
        replayed_runs: search.replayed.len(),
        fidelity: search.fidelity(),
        healthy_attempts: seen.healthy,
        stalls: seen.stalls,
        routes: if seen.routes.len() > 1 { seen.route_headroom() } else { Vec::new() },
        timers,
        suggested,
        combined,
        probes: search.probes,
    })
}

/// From the first run's start to the last's end, wall clock, in seconds.
fn span_s(recordings: &[&Recording]) -> f64 {
    let wall = |r: &Recording, at: Duration| {
        let epoch = SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(r.meta.epoch_unix_ns).unwrap_or(0));
        epoch + at
    };
    let start = recordings.iter().filter_map(|r| Some(wall(r, r.streams.iter().map(|s| s.started).min()?))).min();
    let end = recordings.iter().filter_map(|r| Some(wall(r, r.streams.iter().map(|s| s.last_at).max()?))).max();
    match (start, end) {
        (Some(start), Some(end)) => end.duration_since(start).unwrap_or_default().as_secs_f64(),
        _ => 0.0,
    }
}

/// What the healthy attempts' clocks saw, per timer and route.
struct Seen {
    /// Completed attempts.
    healthy: usize,
    stalls: usize,
    /// Per timer, every healthy attempt's value and where it was seen.
    values: BTreeMap<TimerKind, Vec<(f64, AttemptRef, String)>>,
    /// Healthy attempts per route.
    routes: BTreeMap<String, usize>,
}

impl Seen {
    fn of(recordings: &[&Recording]) -> Seen {
        let mut seen = Seen { healthy: 0, stalls: 0, values: BTreeMap::new(), routes: BTreeMap::new() };
        for recording in recordings {
            let slowest = SlowestWindow::of(recording);
            for stream in &recording.streams {
                seen.stream(recording.run, stream, slowest.as_ref());
            }
        }
        seen
    }

    fn stream(&mut self, run: RunId, stream: &RecordedStream, slowest: Option<&SlowestWindow>) {
        for attempt in &stream.attempts {
            let broke_mid_response =
                attempt.response.is_some() && matches!(attempt.ended, Some((_, AttemptEnd::Transport { .. })));
            self.stalls +=
                usize::from(matches!(attempt.ended, Some((_, AttemptEnd::Timer { .. }))) || broke_mid_response);
        }
        for clocks in stream.clocks.iter().filter(|c| c.completed) {
            self.healthy += 1;
            let route = clocks.target.as_ref().map_or_else(String::new, ToString::to_string);
            *self.routes.entry(route.clone()).or_default() += 1;
            let at = AttemptRef { run, stream: stream.id, attempt: clocks.attempt };
            let recorded = stream.attempts.iter().find(|a| a.ordinal == clocks.attempt);
            for timer in TUNED.map(|(timer, _)| timer) {
                let value = match timer {
                    TimerKind::MinRate => recorded.zip(slowest).and_then(|(a, s)| s.rate(a)),
                    _ => clock_value(clocks, timer),
                };
                if let Some(value) = value {
                    self.values.entry(timer).or_default().push((value, at, route.clone()));
                }
            }
        }
    }

    /// A timer's headroom over every route.
    fn headroom(&self, timer: TimerKind) -> Option<Headroom> {
        let values = self.values.get(&timer)?;
        Headroom::of(values.iter().map(|(v, at, _)| (*v, *at)).collect(), timer != TimerKind::MinRate)
    }

    fn route_headroom(&self) -> Vec<RouteHeadroom> {
        self.routes
            .iter()
            .map(|(route, &healthy_attempts)| {
                let timers = TUNED
                    .iter()
                    .filter_map(|&(timer, _)| {
                        let values = self.values.get(&timer)?;
                        let own = values.iter().filter(|(_, _, r)| r == route).map(|(v, at, _)| (*v, *at)).collect();
                        Some((timer, Headroom::of(own, timer != TimerKind::MinRate)?))
                    })
                    .collect();
                RouteHeadroom { route: route.clone(), healthy_attempts, timers }
            })
            .collect()
    }
}

/// What a healthy attempt's clock saw for `timer`, in seconds.
fn clock_value(clocks: &AttemptClocks, timer: TimerKind) -> Option<f64> {
    let seen = match timer {
        TimerKind::Ttfb => clocks.first_byte?,
        TimerKind::Idle => clocks.longest_silence,
        TimerKind::DataStall => clocks.longest_no_progress?,
        TimerKind::Total => clocks.duration,
        _ => return None,
    };
    Some(seen.as_secs_f64())
}

/// How a run's throughput floor judges an attempt: its window, start and
/// progress classes.
struct SlowestWindow {
    window: Duration,
    after: RateStart,
    progress: Vec<crate::core::event::EventClass>,
}

impl SlowestWindow {
    fn of(recording: &Recording) -> Option<SlowestWindow> {
        let t = &recording.tunables;
        let policy = CorePolicy::from_tunables(t).ok()?;
        Some(SlowestWindow {
            window: t.seconds("STALLSCOPE_SSE_MIN_RATE_WINDOW_S"),
            after: RateStart::parse(t.get("STALLSCOPE_SSE_MIN_RATE_AFTER").value.as_str()),
            progress: policy.timers.progress_classes.to_vec(),
        })
    }

    /// The slowest window of a completed attempt, in progress events a
    /// second; `None` when the floor would not have started.
    fn rate(&self, attempt: &RecordedAttempt) -> Option<f64> {
        let progress_at = || {
            attempt.chunks_with_events().flat_map(move |(chunk, events)| {
                events.iter().filter(|(class, _)| self.progress.contains(class)).map(move |_| chunk.at)
            })
        };
        let start = match self.after {
            RateStart::Headers => attempt.response.as_ref().map(|r| r.at),
            RateStart::Progress => progress_at().next(),
            RateStart::Content => attempt
                .chunks_with_events()
                .find(|(_, events)| events.iter().any(|(class, _)| class.is_output()))
                .map(|(chunk, _)| chunk.at),
        }?;
        let (end, _) = attempt.ended.as_ref()?;
        let events = progress_at().filter(|&at| at >= start).map(|at| at - start);
        let held = fewest_in_a_window(self.window, events, end.saturating_sub(start));
        Some(held as f64 / self.window.as_secs_f64())
    }
}

/// A search in progress: the runs, the runs replayed with their baselines,
/// and the what-ifs made.
struct Search<'a> {
    recordings: &'a [&'a Recording],
    options: &'a TuneOptions,
    /// The runs with an attempt that did not complete, each with its
    /// replay under its own tunables.
    replayed: Vec<(&'a Recording, WhatIfReport)>,
    /// Completed attempts of the runs not replayed: they replay unchanged.
    unreplayed_healthy: usize,
    probes: usize,
}

impl<'a> Search<'a> {
    fn new(recordings: &'a [&'a Recording], options: &'a TuneOptions) -> Result<Search<'a>, TuneError> {
        let mut search = Search { recordings, options, replayed: Vec::new(), unreplayed_healthy: 0, probes: 0 };
        for &recording in recordings {
            let attempts = || recording.streams.iter().flat_map(|s| &s.attempts);
            if attempts().all(RecordedAttempt::completed) {
                search.unreplayed_healthy += attempts().count();
            } else {
                let baseline = search.replay(recording, Vec::new())?;
                search.replayed.push((recording, baseline));
            }
        }
        Ok(search)
    }

    fn replay(&mut self, recording: &Recording, overrides: Vec<String>) -> Result<WhatIfReport, TuneError> {
        self.probes += 1;
        let whatif = WhatIf { overrides, assumptions: self.options.assumptions, verdicts: false };
        Ok(what_if_until(recording, &whatif, None, &self.options.stop)?)
    }

    /// How faithfully the replayed runs replay unchanged.
    fn fidelity(&self) -> Fidelity {
        let mut all = Fidelity { reproduced: 0, streams: 0, worst_drift_s: 0.0 };
        for (_, baseline) in &self.replayed {
            let one = Fidelity::of(baseline);
            all.reproduced += one.reproduced;
            all.streams += one.streams;
            all.worst_drift_s = all.worst_drift_s.max(one.worst_drift_s);
        }
        all
    }

    /// Checks `overrides` on every replayed run.
    fn check(&mut self, overrides: Vec<String>) -> Result<Checked, TuneError> {
        let mut checked = Checked::empty(overrides.clone(), self.options.assumptions);
        for i in 0..self.replayed.len() {
            let recording = self.replayed[i].0;
            let report = self.replay(recording, overrides.clone())?;
            checked.merge(Checked::of(recording, &self.replayed[i].1, &report));
        }
        // The runs not replayed are themselves under these values.
        checked.runs += self.recordings.len() - self.replayed.len();
        checked.healthy_attempts += self.unreplayed_healthy;
        Ok(checked)
    }

    /// The timer's value in the latest run, and the other values it had.
    fn current(&self, tunable: &str) -> (Option<f64>, Vec<f64>) {
        let value = |r: &Recording| Some(r.tunables.get(tunable).value.as_f64()).filter(|&v| v > 0.0);
        let current = self.recordings.last().and_then(|r| value(r));
        let mut earlier: Vec<f64> =
            self.recordings.iter().filter_map(|r| value(r)).filter(|&v| Some(v) != current).collect();
        earlier.sort_by(f64::total_cmp);
        earlier.dedup();
        (current, earlier)
    }

    /// Reads one timer's headroom and checks the safe value below the
    /// timer's own, when there is one.
    fn timer(&mut self, timer: TimerKind, tunable: &'static str, seen: &Seen) -> Result<TimerTuning, TuneError> {
        let (current_s, earlier_s) = self.current(tunable);
        let floor = FLOORS.iter().find(|(t, _)| *t == timer).map_or(0.0, |(_, f)| *f);
        let is_floor = timer == TimerKind::MinRate;
        let floor_s = if is_floor { floor / self.options.floor_scale } else { floor * self.options.floor_scale };
        let unit = if is_floor { "events/s" } else { "s" };
        let mut tuning = TimerTuning {
            timer,
            tunable,
            unit,
            current_s,
            earlier_s,
            headroom: seen.headroom(timer),
            tightest_s: None,
            floor_s,
            safe_s: None,
            suggested_s: None,
            verdict: String::new(),
            evidence: None,
            probes: Vec::new(),
        };
        let Some(headroom) = tuning.headroom.clone() else {
            tuning.verdict = "no healthy attempt's clock ran for it: left as it is".to_owned();
            return Ok(tuning);
        };
        let shown = |v: f64| format!("{} {unit}", Value::Float(v));
        let grid = grid();
        // Tightest: the first grid value beyond what any healthy attempt's
        // clock saw (for the floor: the last at or below its slowest window).
        let tightest = if is_floor {
            grid.iter().rev().copied().find(|&v| v <= headroom.worst)
        } else {
            grid.iter().copied().find(|&v| v > headroom.worst)
        };
        let Some(tightest) = tightest else {
            tuning.verdict =
                format!("every healthy attempt is beyond the grid ({}): left as it is", shown(headroom.worst));
            return Ok(tuning);
        };
        tuning.tightest_s = Some(tightest);
        let room = if is_floor { headroom.worst / MARGIN } else { headroom.worst * MARGIN };
        let safe = if is_floor {
            grid.iter().rev().copied().find(|&v| v <= tightest.min(room).min(floor_s))
        } else {
            grid.iter().copied().find(|&v| v >= tightest.max(room).max(floor_s))
        };
        tuning.safe_s = safe;
        let seen_words = headroom_words(timer, &headroom, unit);
        // A throughput floor's bound is a ceiling: a floor above it cuts
        // streams that real traffic has.
        let bound = if is_floor { "ceiling" } else { "floor" };
        let tighter = |v: f64| current_s.is_none_or(|c| if is_floor { v > c } else { v < c });
        let Some(safe) = safe.filter(|&v| tighter(v)) else {
            let current = current_s.map_or_else(|| "off".to_owned(), shown);
            let below_floor = match current_s {
                Some(c) if (is_floor && c > floor_s) || (!is_floor && c < floor_s) => {
                    format!(" ({current} is itself tighter than real traffic allows)")
                }
                _ => String::new(),
            };
            tuning.verdict = format!(
                "keep {current}: {seen_words}; the tightest value firing on none is {}, and with {MARGIN}× room \
                 and the {} {bound} of real traffic nothing {} is safe{below_floor}",
                shown(tightest),
                shown(floor_s),
                if current_s.is_some() { "tighter" } else { "on the grid" }
            );
            return Ok(tuning);
        };
        if seen.stalls == 0 {
            tuning.verdict = format!(
                "{seen_words}; the tightest value firing on none is {}, {} with {MARGIN}× room and {} the {} \
                 {bound}; no stall here to catch sooner: left as it is",
                shown(tightest),
                shown(safe),
                if is_floor { "under" } else { "above" },
                shown(floor_s)
            );
            return Ok(tuning);
        }
        // Check the safe value by what-if; where a replay fires it on a
        // healthy attempt or loses a stream, try the next values up.
        let up: Vec<f64> = if is_floor {
            grid.iter().rev().copied().filter(|&v| v <= safe).collect()
        } else {
            grid.iter().copied().filter(|&v| v >= safe).collect()
        };
        let mut clean = None;
        for &value in up.iter().take(MAX_PROBES_PER_TIMER).filter(|&&v| tighter(v)) {
            let checked = self.check(vec![Setting { name: tunable, value_s: value }.assignment()])?;
            tuning.probes.push(Probe {
                value_s: value,
                false_positives: checked.false_positive_attempts(),
                lost: checked.lost,
            });
            let is_clean = checked.is_clean();
            tuning.evidence = Some(checked);
            if is_clean {
                clean = Some(value);
                break;
            }
        }
        let (Some(value), Some(checked)) = (clean, &tuning.evidence) else {
            tuning.verdict = format!(
                "{seen_words}; every value checked from {} up fired on a healthy attempt or lost a stream in the \
                 replay: left as it is",
                shown(safe)
            );
            return Ok(tuning);
        };
        let before_s: f64 = checked.caught.iter().map(|c| c.before_at_s).sum();
        tuning.verdict = if checked.caught.is_empty() {
            format!(
                "{seen_words}; {} fires on no healthy attempt but catches no stall on these runs: left as it is",
                shown(value)
            )
        } else if checked.sooner_s < WORTH * before_s {
            format!(
                "{seen_words}; {} fires on no healthy attempt but ends the stalls it catches only {} sooner in all, \
                 under a fifth of the time the runs' own timers took: left as it is",
                shown(value),
                duration_words(checked.sooner_s)
            )
        } else {
            tuning.suggested_s = Some(value);
            format!("{seen_words}; {}", checked.sentence())
        };
        Ok(tuning)
    }

    /// Checks the suggestions together; while together they fire on a
    /// healthy attempt or lose a stream, the one that caught least is
    /// dropped.
    fn together(&mut self, timers: &mut [TimerTuning]) -> Result<(Vec<Setting>, Option<Checked>), TuneError> {
        loop {
            let suggested: Vec<Setting> = timers
                .iter()
                .filter_map(|t| t.suggested_s.map(|value_s| Setting { name: t.tunable, value_s }))
                .collect();
            if suggested.is_empty() {
                return Ok((suggested, None));
            }
            let combined = self.check(suggested.iter().map(Setting::assignment).collect())?;
            if combined.is_clean() {
                return Ok((suggested, Some(combined)));
            }
            let weakest =
                timers.iter_mut().filter(|t| t.suggested_s.is_some()).min_by(|a, b| sooner(a).total_cmp(&sooner(b)));
            if let Some(weakest) = weakest {
                weakest.suggested_s = None;
                weakest.verdict = format!(
                    "{}; but with the other suggestions it fired on a healthy attempt or lost a stream \
                     ({}): left as it is",
                    weakest.verdict,
                    combined.sentence()
                );
            }
        }
    }
}

fn sooner(t: &TimerTuning) -> f64 {
    t.evidence.as_ref().map_or(0.0, |e| e.sooner_s)
}

/// "the longest healthy silence was 25 s (run 3, stream 12, attempt 1; p99
/// 20 s, p50 2 s, over 4,312 healthy attempts)".
fn headroom_words(timer: TimerKind, h: &Headroom, unit: &str) -> String {
    let what = match timer {
        TimerKind::Ttfb => "the longest healthy wait for the first byte",
        TimerKind::Idle => "the longest healthy silence",
        TimerKind::DataStall => "the longest healthy wait for progress",
        TimerKind::Total => "the longest healthy attempt",
        _ => "the slowest healthy window",
    };
    let v = |x: f64| format!("{} {unit}", Value::Float((x * 1000.0).round() / 1000.0));
    format!(
        "{what} was {} (run {}, stream {}, attempt {}; p99 {}, p50 {}, over {})",
        v(h.worst),
        h.worst_at.run,
        h.worst_at.stream,
        h.worst_at.attempt,
        v(h.p99),
        v(h.p50),
        count(h.attempts, "healthy attempt", "healthy attempts")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_round_ascending_and_readable() {
        let grid = grid();
        assert!(grid.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((grid[0], grid[1], grid[grid.len() - 1]), (0.01, 0.012, 80_000.0));
        assert!(grid.contains(&120.0) && grid.contains(&0.25));
        let shown: Vec<String> = grid[..4].iter().map(|v| Value::Float(*v).to_string()).collect();
        assert_eq!(shown, ["0.01", "0.012", "0.015", "0.02"]);
    }

    #[test]
    fn headroom_reads_the_worst_and_nearest_rank_percentiles() {
        let at = |stream| AttemptRef { run: 1, stream, attempt: 1 };
        let seen: Vec<(f64, AttemptRef)> = (1..=100).map(|i| (f64::from(i), at(u64::from(i as u8)))).collect();
        let h = Headroom::of(seen.clone(), true).unwrap();
        assert_eq!((h.attempts, h.worst, h.worst_at.stream, h.p50, h.p90, h.p99), (100, 100.0, 100, 50.0, 90.0, 99.0));
        // The floor's worst is its slowest window.
        let h = Headroom::of(seen, false).unwrap();
        assert_eq!((h.worst, h.p50, h.p99), (1.0, 51.0, 2.0));
        assert_eq!(Headroom::of(Vec::new(), true), None);
    }

    fn caught(stream: u64, sooner_s: f64) -> Caught {
        Caught {
            run: 1,
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
        let mut checked = Checked::empty(vec!["SSE_DATA_STALL_TIMEOUT_S=600".into()], Assumptions::default());
        checked.runs = 1;
        checked.healthy_attempts = 28;
        checked.sooner_s = caught.iter().map(|c| c.sooner_s).sum();
        checked.caught = caught;
        checked
    }

    #[test]
    fn a_sentence_says_what_a_setting_caught_where_it_fired_and_what_it_fits() {
        let same = checked((0..12).map(|s| caught(s, 780.0)).collect());
        assert_eq!(
            same.sentence(),
            "SSE_DATA_STALL_TIMEOUT_S=600 would have caught these 12 stalls 13 min sooner and fired on none of the \
             28 healthy attempts (what-if on this run: it fits this traffic, not every day)"
        );
        let mut mixed = checked(vec![caught(0, 0.25), caught(1, 90.0)]);
        mixed.runs = 7;
        assert_eq!(
            mixed.sentence(),
            "SSE_DATA_STALL_TIMEOUT_S=600 would have caught these 2 stalls 0.25 s–90 s sooner (90.25 s in all) \
             and fired on none of the 28 healthy attempts (what-if on these 7 runs: it fits this traffic, not \
             every day)"
        );
        let mut wrong = checked(vec![caught(0, 1.0)]);
        let fp = FalsePositive { run: 1, stream: 3, attempt: 1, timer: TimerKind::DataStall, at_s: 2.0 };
        wrong.false_positives = vec![fp.clone(), FalsePositive { timer: TimerKind::Idle, ..fp }];
        wrong.lost = 1;
        wrong.assumed = vec![Assumed { run: 1, stream: 3, what: vec!["attempt 2 was never recorded".into()] }];
        assert!(!wrong.is_clean());
        assert_eq!(
            wrong.sentence(),
            "SSE_DATA_STALL_TIMEOUT_S=600 would have caught this stall 1 s sooner but fired on 1 of the 28 healthy \
             attempts; 1 stream that finished would have failed (what-if on this run: it fits this traffic, not \
             every day; 1 stream rests on assuming stall=silence, attempt=last-to-target)"
        );
    }

    #[test]
    fn spans_read_in_seconds_minutes_or_hours() {
        assert_eq!(
            [0.25, 119.0, 300.0, 1680.0, 9000.0].map(duration_words),
            ["0.25 s", "119 s", "5 min", "28 min", "2.5 h"]
        );
    }
}
