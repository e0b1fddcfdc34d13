//! What-if: a recorded run's network behaviour through the real executor,
//! governor and classifier, in virtual time, under tunables the operator
//! changed — and what would have been different.
//!
//! Every stream of the run goes through one paused-clock runtime together,
//! with the recorded seed, wall clock, rules, key pools, requests and
//! concurrency, because the fleet retry budget, key cooldowns and the
//! concurrency limit couple them. The paused clock belongs to this
//! runtime alone: live runs never share it.
//!
//! Within a response body a stream depends on no other, so a replayed body
//! hands its chunks over ahead of the clock, each stamped with its recorded
//! arrival, and the attempt meets the other streams again (at its end, for
//! retries, keys and the fleet) only once the clock has caught up: a
//! 1,000-stream hour replays without a wake of the clock per chunk.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::recording::{RecordedStream, Recording};
use super::upstream::{Assumptions, AttemptAssumption, Playback, Played, RecordedUpstream, StallAssumption};
use crate::core::category::TimerKind;
use crate::core::classify::{Classifier, Rule, RuleError};
use crate::core::credentials::{CredentialPool, Secret};
use crate::core::event::{AttemptEnd, Event, EventSink, StreamId};
use crate::core::executor::{Call, Executor};
use crate::core::fleet::Fleet;
use crate::core::policy::{CorePolicy, RetrySettings};
use crate::core::schedule::run_call_list;
use crate::core::upstream::{CallInput, Upstream, Upstreams};
use crate::diagnosis::{
    CourseOutcome, Diagnosis, FiredTimer, RunDiagnosis, StreamCourse, StreamFold, diagnose, summarize,
    unknown as unknown_verdict,
};
use crate::store::RunId;
use crate::tunables::{TunableError, Tunables, Value};

/// A what-if that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    /// A `--set` or the tunables it makes are invalid.
    #[error(transparent)]
    Tunables(#[from] TunableError),
    /// The recorded rules no longer load.
    #[error(transparent)]
    Rules(#[from] RuleError),
    /// The virtual-time runtime could not start.
    #[error("cannot start the what-if runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// It was stopped from outside before it finished.
    #[error("the what-if was stopped before it finished")]
    Cancelled,
}

/// What the operator changes and assumes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WhatIf {
    /// `NAME=VALUE` changes on top of the recorded tunables.
    pub overrides: Vec<String>,
    /// What to assume where the recording ends.
    pub assumptions: Assumptions,
    /// Diagnose every replayed stream too, for verdicts before and after
    /// (what an operator reads; a search making many what-ifs skips it).
    pub verdicts: bool,
}

/// What the change would have done to a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIfReport {
    /// The run.
    pub run: RunId,
    /// Whether any stream's outcome, attempts or hops differ, or which
    /// timers fired in which attempts (not when: a stall caught sooner by
    /// the same timer is counted in `summary.sooner`, not here).
    pub changed: bool,
    /// The changes applied.
    pub overrides: Vec<String>,
    /// The assumptions in force (each stream says which it used).
    pub assumptions: Assumptions,
    /// The first attempt's timers before and after, with where each value
    /// came from: an explicitly set value and a default of the same number
    /// can mean different timers.
    pub timers: Vec<TimerChange>,
    /// Counts over the run.
    pub summary: WhatIfSummary,
    /// Every stream.
    pub streams: Vec<StreamWhatIf>,
    /// The run's verdicts as recorded and under the change, when asked for
    /// ([`WhatIf::verdicts`]).
    pub verdicts: Option<VerdictChange<RunDiagnosis>>,
}

/// A verdict as recorded and under the change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictChange<T> {
    /// As recorded.
    pub before: T,
    /// Under the change.
    pub after: T,
}

/// One timer's effective value before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimerChange {
    /// Which.
    pub timer: TimerKind,
    /// Seconds before (`None`: off) and where the value came from.
    pub before: EffectiveTimer,
    /// The same after.
    pub after: EffectiveTimer,
}

/// A timer's effective value on a first attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EffectiveTimer {
    /// Seconds (the throughput floor's window); `None` when off.
    pub seconds: Option<f64>,
    /// The throughput floor, in progress events a second; `None` for the
    /// other timers and when it is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<f64>,
    /// Where the governing tunable's value came from (`default`, `--set`, …).
    pub source: String,
}

/// Counts over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WhatIfSummary {
    /// Streams.
    pub streams: usize,
    /// Streams whose course changed.
    pub changed: usize,
    /// Streams that failed and would have finished (ok or partial).
    pub saved: usize,
    /// Streams that finished and would have failed.
    pub lost: usize,
    /// Timers that would fire in attempts the recording shows healthy.
    pub false_positives: usize,
    /// Streams whose outcome depends on an assumption.
    pub assumed: usize,
    /// Streams whose outcome is unknown (an assumption said stop, or the
    /// stream outlived the replay's horizon).
    pub unknown: usize,
    /// Streams whose stall would have been caught sooner or that would
    /// have ended sooner, with an outcome no worse (see
    /// [`StreamWhatIf::sooner_s`] and [`StreamWhatIf::ended_sooner_s`]).
    pub sooner: usize,
    /// How much sooner those streams would have ended, in all, in seconds.
    pub time_saved_s: f64,
    /// Streams that would have ended later.
    pub later: usize,
    /// How much later, in all, in seconds.
    pub time_added_s: f64,
}

impl WhatIfSummary {
    /// The streams caught or ended sooner and later, in words: "2 caught
    /// or ended sooner (3 s saved in all)", with ", 1 ended later (+2 s)"
    /// when any did.
    pub fn sooner_words(&self) -> String {
        let mut words = format!("{} caught or ended sooner", self.sooner);
        if self.time_saved_s > 0.0 {
            words.push_str(&format!(" ({} s saved in all)", seconds(self.time_saved_s)));
        }
        if self.later > 0 {
            words.push_str(&format!(", {} ended later (+{} s)", self.later, seconds(self.time_added_s)));
        }
        words
    }
}

/// One stream before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamWhatIf {
    /// Its id.
    pub stream: u64,
    /// Whether its outcome, attempts or hops differ, or which timers fired
    /// in which attempts (not when: see `sooner_s`).
    pub changed: bool,
    /// As recorded.
    pub before: StreamCourse,
    /// Under the change (`outcome` is `unknown` when it cannot be told).
    pub after: StreamCourse,
    /// The assumptions its course depends on, in words; empty when none.
    pub assumptions: Vec<String>,
    /// Timers that fired in attempts the recording shows were healthy
    /// (attempts played from their own recording only).
    pub false_positives: Vec<FiredTimer>,
    /// How much sooner its first stall would have been caught, in
    /// seconds: a timer firing, outside any healthy attempt, before the
    /// recorded attempt it fired in was ended (by a timer, a broken
    /// connection or the recording's end). `None` when none was.
    pub sooner_s: Option<f64>,
    /// How much sooner the call would have ended, in seconds (negative:
    /// later); `None` when either side did not end, the outcome is
    /// unknown, or the difference is within what the replay itself does
    /// not reproduce (the timers' tolerance and our own runtime's lag).
    pub ended_sooner_s: Option<f64>,
    /// What its replay could not take from the recording, in words (an
    /// error body recorded only in part); unlike an assumption, no choice
    /// of the operator's.
    pub notes: Vec<String>,
    /// Its verdict as recorded and under the change, when asked for.
    pub verdict: Option<VerdictChange<Diagnosis>>,
}

/// A stall a setting would have caught sooner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Caught {
    /// The run.
    pub run: RunId,
    /// The stream.
    pub stream: u64,
    /// The attempt.
    pub attempt: u32,
    /// The timer that would have fired.
    pub timer: TimerKind,
    /// When, in seconds since the call started.
    pub at_s: f64,
    /// The timer that ends the attempt in the course compared with (as
    /// recorded, or replayed with the run's own tunables); `None` when it
    /// ended otherwise (a broken connection, the recording's end).
    pub before_timer: Option<TimerKind>,
    /// When the attempt ends in the course compared with, in seconds since
    /// the call started.
    pub before_at_s: f64,
    /// How much sooner, in seconds.
    pub sooner_s: f64,
}

impl StreamWhatIf {
    /// How much sooner its stall was caught and its call ended, in words:
    /// "stall caught 1.5 s sooner, call ended 1.5 s sooner"; `None` when
    /// neither changed.
    pub fn sooner_words(&self) -> Option<String> {
        let caught = self.sooner_s.map(|s| format!("stall caught {} s sooner", seconds(s)));
        let ended = self.ended_sooner_s.map(|s| match s > 0.0 {
            true => format!("call ended {} s sooner", seconds(s)),
            false => format!("call ended {} s later", seconds(-s)),
        });
        let both: Vec<String> = caught.into_iter().chain(ended).collect();
        (!both.is_empty()).then(|| both.join(", "))
    }
}

/// How far past the recording's end a replay may run before streams still
/// going are reported unknown (virtual time: silence costs nothing).
const HORIZON_PAST_END: Duration = Duration::from_secs(24 * 3600);

/// Runs `whatif` on `recording`.
pub fn what_if(recording: &Recording, whatif: &WhatIf) -> Result<WhatIfReport, WhatIfError> {
    what_if_watched(recording, whatif, None)
}

/// [`what_if`], with every replayed event also delivered to `watcher` (the
/// app draws the what-if lanes from them).
pub fn what_if_watched(
    recording: &Recording,
    whatif: &WhatIf,
    watcher: Option<Arc<dyn EventSink>>,
) -> Result<WhatIfReport, WhatIfError> {
    what_if_until(recording, whatif, watcher, &CancellationToken::new())
}

/// [`what_if_watched`], stopped early when `stop` is cancelled (from
/// another thread: the app drops a what-if nobody looks at any more), with
/// [`WhatIfError::Cancelled`].
pub fn what_if_until(
    recording: &Recording,
    whatif: &WhatIf,
    watcher: Option<Arc<dyn EventSink>>,
    stop: &CancellationToken,
) -> Result<WhatIfReport, WhatIfError> {
    let prepared = Prepared::new(&recording.tunables, &recording.rules, whatif)?;
    // A thread of its own: the caller may be on a runtime already, and a
    // runtime can be neither driven nor dropped inside another.
    let replayed = std::thread::scope(|scope| {
        scope.spawn(|| prepared.run(&paused_runtime()?, recording, whatif, watcher, stop)).join()
    });
    replayed.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Many recordings of one run, each replayed under one what-if on the
/// calling thread (which must not be a runtime's worker), with the
/// what-if's settings read and its runtime made once: observe replays
/// each attempt it relays once it has ended, so it needs no thread and no
/// runtime of its own per replay.
pub struct Replayer {
    prepared: Prepared,
    whatif: WhatIf,
    runtime: tokio::runtime::Runtime,
}

impl Replayer {
    /// For recordings with `tunables` and `rules`.
    pub fn new(tunables: &Tunables, rules: &[Rule], whatif: WhatIf) -> Result<Replayer, WhatIfError> {
        Ok(Replayer { prepared: Prepared::new(tunables, rules, &whatif)?, whatif, runtime: paused_runtime()? })
    }

    /// Replays `recording` (its tunables and rules those the replayer was
    /// made for), each replayed event also to `watcher`.
    pub fn replay(
        &self,
        recording: &Recording,
        watcher: Option<Arc<dyn EventSink>>,
    ) -> Result<WhatIfReport, WhatIfError> {
        self.prepared.run(&self.runtime, recording, &self.whatif, watcher, &CancellationToken::new())
    }
}

/// The runtime replays run on: virtual time, from a paused clock.
fn paused_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()
}

/// A what-if's settings: the recorded tunables under its overrides, the
/// policy and classifier they make, and the limits verdicts are read
/// against when it asks for verdicts.
struct Prepared {
    tunables: Tunables,
    policy: Arc<CorePolicy>,
    classifier: Arc<Classifier>,
    limits: Option<RetrySettings>,
}

impl Prepared {
    /// `whatif` over a recording's `tunables` and `rules`.
    fn new(tunables: &Tunables, rules: &[Rule], whatif: &WhatIf) -> Result<Prepared, WhatIfError> {
        let mut tunables = tunables.clone();
        for set in &whatif.overrides {
            tunables.apply_override(set)?;
        }
        let policy = CorePolicy::from_tunables(&tunables)?;
        let limits = whatif.verdicts.then(|| policy.retry.clone());
        let classifier = Classifier::new(rules.to_vec())?;
        Ok(Prepared { tunables, policy: Arc::new(policy), classifier: Arc::new(classifier), limits })
    }

    /// Replays `recording` on `runtime`, on the calling thread.
    fn run(
        &self,
        runtime: &tokio::runtime::Runtime,
        recording: &Recording,
        whatif: &WhatIf,
        watcher: Option<Arc<dyn EventSink>>,
        stop: &CancellationToken,
    ) -> Result<WhatIfReport, WhatIfError> {
        let (policy, classifier, limits) =
            (Arc::clone(&self.policy), Arc::clone(&self.classifier), self.limits.clone());
        let replayed = replay(recording, policy, classifier, whatif.assumptions, limits, watcher, stop);
        let (courses, plays) = runtime.block_on(replayed);
        if stop.is_cancelled() {
            return Err(WhatIfError::Cancelled);
        }
        Ok(report(recording, &self.tunables, whatif, courses, &plays))
    }
}

/// The replay's courses (with verdicts read against `limits`, when given)
/// and where each stream's attempts came from.
async fn replay(
    recording: &Recording,
    policy: Arc<CorePolicy>,
    classifier: Arc<Classifier>,
    assumptions: Assumptions,
    limits: Option<RetrySettings>,
    watcher: Option<Arc<dyn EventSink>>,
    outside: &CancellationToken,
) -> (HashMap<StreamId, Replayed>, BTreeMap<u64, Vec<Played>>) {
    // The replay starts where the recording's first call started, so both
    // share one clock: replayed events line up with recorded ones, and
    // "now" in the run means the same in both.
    let first_call = recording.streams.iter().map(|s| s.started).min().unwrap_or_default();
    let now = Instant::now();
    let epoch = now.checked_sub(first_call).unwrap_or(now);
    let recorded_end = recording.streams.iter().map(|s| s.last_at).max().unwrap_or_default();
    let horizon = now + recorded_end + HORIZON_PAST_END;
    let playback = Arc::new(Playback {
        // The copy shares the attempts' chunks and events.
        recording: Arc::new(recording.clone()),
        assumptions,
        connect_timeout: policy.transport.connect_timeout,
        read_backstop: policy.transport.read_timeout,
        only_idle_ends: {
            let timers = &policy.timers;
            timers.data_stall.is_none()
                && timers.total.is_none()
                && timers.min_rate.is_none()
                && policy.retry.deadline.is_none()
        },
        epoch,
        horizon,
        log: Default::default(),
    });
    let mut upstreams = Upstreams::default();
    for provider in &recording.providers {
        upstreams.targets.push(provider.target.clone());
        upstreams.providers.entry(provider.target.provider.clone()).or_insert_with(|| {
            Arc::new(RecordedUpstream::new(provider.dialect, Arc::clone(&playback))) as Arc<dyn Upstream>
        });
    }
    let pools: HashMap<String, Arc<CredentialPool>> = recording
        .meta
        .pools
        .iter()
        .map(|(name, &keys)| {
            let keys = (0..keys).map(|i| Secret::new(format!("replayed key {i}"))).collect();
            (name.clone(), Arc::new(CredentialPool::new(keys, policy.credentials.rotation)))
        })
        .collect();
    let sink = Arc::new(CourseSink::new(recording, limits, watcher));
    let executor = Executor {
        fleet: Arc::new(Fleet::new(policy.fleet, pools)),
        policy,
        classifier,
        upstreams: Arc::new(upstreams),
        sink: sink.clone(),
        epoch,
        wall_epoch: wall_clock(recording.meta.epoch_unix_ns),
        seed: recording.meta.seed,
        // Virtual time: our own lateness is not measured.
        lag: None,
    };
    // A call that started before any call ended (or with a turn for every
    // call) had its turn from the beginning: how late the live runtime got
    // to it was its own lateness, not a decision, so the replay starts it
    // where it started, and the calls meet the fleet's budget, keys and
    // outages in the order they did.
    let concurrency = usize::try_from(recording.meta.concurrency).unwrap_or(usize::MAX);
    let first_end = recording.streams.iter().map(|s| s.last_at).min().unwrap_or_default();
    let turn_from_start = |s: &RecordedStream| s.started < first_end || recording.streams.len() <= concurrency;
    let calls: Vec<Call> = recording
        .streams
        .iter()
        .map(|s| Call {
            stream: s.id,
            target: s.target.clone(),
            input: CallInput { prompt: String::new(), context_tokens: s.context_tokens, expect: s.expect() },
            not_before: turn_from_start(s).then(|| epoch + s.started),
        })
        .collect();
    let cancel = CancellationToken::new();
    let (stop, outside) = (cancel.clone(), outside.clone());
    let watchdog = tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep_until(horizon) => {}
            () = outside.cancelled() => {}
        }
        stop.cancel();
    });
    run_call_list(&executor, calls, concurrency, &cancel, |_| {}).await;
    watchdog.abort();
    (sink.take(), playback.log.take())
}

/// Folds each stream's events as they come, for its course (and its
/// verdict, when `limits` is given): a replay of millions of events keeps
/// none of them.
struct CourseSink {
    /// The recording's stream ids, ascending: a stream's place here is
    /// its place in `folds`.
    ids: Vec<StreamId>,
    /// Each stream's fold, once its first event came. A vector, not a map:
    /// the sink finds one for every event of a replay, and a map's buckets,
    /// spread over the streams, are one more place memory is waited for.
    folds: Mutex<Vec<Option<StreamFold>>>,
    limits: Option<RetrySettings>,
    watcher: Option<Arc<dyn EventSink>>,
}

/// One stream's replay: its course, and its verdict when asked for.
struct Replayed {
    course: StreamCourse,
    verdict: Option<Diagnosis>,
}

impl CourseSink {
    fn new(recording: &Recording, limits: Option<RetrySettings>, watcher: Option<Arc<dyn EventSink>>) -> Self {
        let ids: Vec<StreamId> = recording.streams.iter().map(|s| s.id).collect();
        let folds = Mutex::new(ids.iter().map(|_| None).collect());
        CourseSink { ids, folds, limits, watcher }
    }

    /// A stream's place. Ids are usually dense from the first, so its
    /// place is tried straight away; a search finds the others.
    fn place(&self, stream: StreamId) -> Option<usize> {
        let first = self.ids.first()?;
        let direct = usize::try_from(stream.wrapping_sub(*first)).ok();
        match direct {
            Some(i) if self.ids.get(i) == Some(&stream) => Some(i),
            _ => self.ids.binary_search(&stream).ok(),
        }
    }

    fn take(&self) -> HashMap<StreamId, Replayed> {
        let folds = self.folds.lock().map(|mut f| std::mem::take(&mut *f)).unwrap_or_default();
        self.ids
            .iter()
            .zip(folds)
            .filter_map(|(&id, fold)| {
                let fold = fold?;
                let verdict = self.limits.as_ref().map(|limits| fold.verdict(Some(limits)));
                Some((id, Replayed { course: fold.course(), verdict }))
            })
            .collect()
    }
}

impl EventSink for CourseSink {
    fn emit(&self, event: Event) {
        // One thread drives the replay: the lock is never contended. Every
        // call replayed is one of the recording's streams.
        if let Some(i) = self.place(event.stream)
            && let Ok(mut folds) = self.folds.lock()
            && let Some(slot) = folds.get_mut(i)
        {
            slot.get_or_insert_with(StreamFold::default).push(&event);
        }
        if let Some(watcher) = &self.watcher {
            watcher.emit(event);
        }
    }
}

/// How faithfully a recording replays: its null what-if (its own tunables
/// and seed) against what it recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fidelity {
    /// Streams whose replay matches the recording: the same outcome,
    /// attempts, hops and categories, every timer within
    /// [`FIDELITY_TOLERANCE`] of when it fired live (beyond the lag our own
    /// runtime had when it fired live; measured from its attempt's start,
    /// or the call's for the deadline), and no assumption.
    pub reproduced: usize,
    /// Streams in the run.
    pub streams: usize,
    /// The largest difference between a timer's live and replayed firing,
    /// in seconds, over the streams that fired the same timers, less the
    /// runtime lag recorded when it fired live.
    pub worst_drift_s: f64,
}

/// How far a replayed timer may fire from its live firing and still
/// count as reproduced (the replay's millisecond clock and the live
/// runtime's unmeasured lateness). A live timer that fired late because
/// our own runtime lagged is excused that recorded lag on top: the replay
/// runs in virtual time and fires on its deadline, and the difference is
/// the client's, not the network's.
pub const FIDELITY_TOLERANCE: Duration = Duration::from_millis(5);

impl Fidelity {
    /// Whether every stream was reproduced.
    pub fn is_exact(&self) -> bool {
        self.reproduced == self.streams
    }
}

/// Replays `recording` unchanged and says how faithfully it reproduces.
pub fn fidelity(recording: &Recording) -> Result<Fidelity, WhatIfError> {
    Ok(Fidelity::of(&what_if(recording, &WhatIf::default())?))
}

impl Fidelity {
    /// How faithfully `report`, a replay with the recorded tunables,
    /// reproduces its recording.
    pub fn of(report: &WhatIfReport) -> Fidelity {
        let tolerance = FIDELITY_TOLERANCE.as_secs_f64();
        let mut fidelity = Fidelity { reproduced: 0, streams: report.streams.len(), worst_drift_s: 0.0 };
        for stream in &report.streams {
            let (before, after) = (&stream.before, &stream.after);
            let drift = timer_drift(before, after);
            if let Some(drift) = drift {
                fidelity.worst_drift_s = fidelity.worst_drift_s.max(drift);
            }
            let same = same_course(before, after) && drift.is_some_and(|d| d <= tolerance);
            fidelity.reproduced += usize::from(same && stream.assumptions.is_empty());
        }
        fidelity
    }
}

/// Whether two courses have the same outcome, attempts, hops and
/// categories.
fn same_course(before: &StreamCourse, after: &StreamCourse) -> bool {
    before.outcome == after.outcome
        && before.attempts == after.attempts
        && before.hops == after.hops
        && before.categories == after.categories
}

/// The largest difference between when `before`'s timers fired and when
/// `after`'s did, in seconds, beyond the lag our own runtime had when each
/// of `before`'s fired; `None` when they are not the same timers in the
/// same attempts. Each clock is compared from where it runs (its
/// attempt's start, the call's for the deadline): how late the live
/// runtime started an attempt was its own lateness.
fn timer_drift(before: &StreamCourse, after: &StreamCourse) -> Option<f64> {
    let same_timers = before.fired.len() == after.fired.len()
        && before.fired.iter().zip(&after.fired).all(|(b, a)| b.timer == a.timer && b.attempt == a.attempt);
    let when = |f: &FiredTimer| if f.timer == TimerKind::Deadline { f.at_s } else { f.in_attempt_s };
    let beyond_lag = |(b, a): (&FiredTimer, &FiredTimer)| ((when(b) - when(a)).abs() - b.lag_s.unwrap_or(0.0)).max(0.0);
    same_timers.then(|| before.fired.iter().zip(&after.fired).map(beyond_lag).fold(0.0, f64::max))
}

fn wall_clock(unix_ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(unix_ns.unsigned_abs());
    if unix_ns >= 0 { SystemTime::UNIX_EPOCH + magnitude } else { SystemTime::UNIX_EPOCH - magnitude }
}

fn report(
    recording: &Recording,
    tunables: &Tunables,
    whatif: &WhatIf,
    mut replayed: HashMap<StreamId, Replayed>,
    plays: &BTreeMap<u64, Vec<Played>>,
) -> WhatIfReport {
    let mut summary = WhatIfSummary { streams: recording.streams.len(), ..WhatIfSummary::default() };
    let streams: Vec<StreamWhatIf> = recording
        .streams
        .iter()
        .map(|recorded| {
            let before = recorded.course.clone();
            // A call still queued when the horizon cancels the replay never starts.
            let started = replayed.contains_key(&recorded.id);
            let (mut after, verdict) = match replayed.remove(&recorded.id) {
                Some(r) => (r.course, r.verdict),
                None => (StreamCourse::empty(), whatif.verdicts.then(|| diagnose(&[]))),
            };
            let played = plays.get(&recorded.id).map_or(&[][..], Vec::as_slice);
            let assumptions = assumptions_used(played);
            let notes = notes(recording, played);
            let stopped = played.iter().any(|p| {
                p.chosen_by == Some(AttemptAssumption::Stop)
                    || p.past_recording == Some(StallAssumption::Stop)
                    || p.endless
            });
            let cut_by_horizon =
                (after.outcome == CourseOutcome::Cancelled || !started) && before.outcome != CourseOutcome::Cancelled;
            let unknown = stopped || cut_by_horizon;
            if unknown {
                after.outcome = CourseOutcome::Unknown;
                summary.unknown += 1;
            }
            // A stream the replay cannot finish has no verdict of its own:
            // its replayed events end in a cancellation that was never
            // the call's.
            let verdict = verdict.map(|after| VerdictChange {
                before: recorded.verdict.clone(),
                after: if unknown { unknown_verdict(&assumptions) } else { after },
            });
            let false_positives: Vec<FiredTimer> = after
                .fired
                .iter()
                // Only attempts played from their own recording: a timer in
                // an assumed attempt rests on the assumption, said above.
                .filter(|f| played.iter().any(|p| p.attempt == f.attempt && p.healthy && p.chosen_by.is_none()))
                .cloned()
                .collect();
            let changed = before.differs(&after);
            let lost = before.outcome.is_finished() && after.outcome == CourseOutcome::Failed;
            let sooner_s =
                caught_sooner(recording.run, recorded, &before.fired, &after, &false_positives).map(|c| c.sooner_s);
            let ended_sooner_s = ended_sooner(&before, &after);
            summary.changed += usize::from(changed);
            summary.saved += usize::from(before.outcome == CourseOutcome::Failed && after.outcome.is_finished());
            summary.lost += usize::from(lost);
            summary.false_positives += false_positives.len();
            summary.assumed += usize::from(!assumptions.is_empty());
            let ended_sooner = ended_sooner_s.filter(|&s| s > 0.0 && !lost);
            if (sooner_s.is_some() || ended_sooner.is_some()) && !lost {
                summary.sooner += 1;
                summary.time_saved_s += ended_sooner.unwrap_or(0.0);
            }
            if let Some(later) = ended_sooner_s.filter(|&s| s < 0.0) {
                summary.later += 1;
                summary.time_added_s -= later;
            }
            StreamWhatIf {
                stream: recorded.id,
                changed,
                before,
                after,
                assumptions,
                false_positives,
                sooner_s,
                ended_sooner_s,
                notes,
                verdict,
            }
        })
        .collect();
    let verdicts = whatif.verdicts.then(|| {
        let of = |side: fn(&VerdictChange<Diagnosis>) -> &Diagnosis| {
            let diagnoses: Vec<(StreamId, Diagnosis)> =
                streams.iter().filter_map(|s| Some((s.stream, side(s.verdict.as_ref()?).clone()))).collect();
            summarize(&diagnoses)
        };
        VerdictChange { before: of(|v| &v.before), after: of(|v| &v.after) }
    });
    WhatIfReport {
        run: recording.run,
        changed: summary.changed > 0,
        overrides: whatif.overrides.clone(),
        assumptions: whatif.assumptions,
        timers: timer_changes(recording, tunables),
        summary,
        streams,
        verdicts,
    }
}

/// The first place a stream's replayed course (`after`) differs from a
/// course it is compared with (`reference`: as recorded, or replayed
/// with the run's own tunables), when that is a stall caught sooner: a
/// timer firing, outside any healthy attempt (`false_positives`), before
/// the recorded attempt it fired in ended by a timer, a broken connection
/// or the recording's end. A timer of the reference that fired late
/// because our own runtime lagged is compared beyond that lag: the replay
/// fires on time.
pub fn caught_sooner(
    run: RunId,
    recorded: &RecordedStream,
    reference: &[FiredTimer],
    after: &StreamCourse,
    false_positives: &[FiredTimer],
) -> Option<Caught> {
    let tolerance = |u: &FiredTimer| FIDELITY_TOLERANCE.as_secs_f64() + u.lag_s.unwrap_or(0.0);
    let fired = after.fired.iter().enumerate().find_map(|(i, a)| {
        let same = reference
            .get(i)
            .is_some_and(|u| u.timer == a.timer && u.attempt == a.attempt && (u.at_s - a.at_s).abs() <= tolerance(u));
        (!same).then_some(a)
    })?;
    if false_positives.iter().any(|f| f.attempt == fired.attempt && f.timer == fired.timer) {
        return None;
    }
    let attempt = recorded.attempts.iter().find(|a| a.ordinal == fired.attempt)?;
    let stalled = attempt.abandoned() || matches!(attempt.ended, Some((_, AttemptEnd::Transport { .. })));
    if !stalled {
        return None;
    }
    let before = reference.iter().find(|u| u.attempt == fired.attempt);
    // The course's times run from the call's start (its first event), which
    // may come before its first attempt (a wait for a resting key pool).
    let before_at_s =
        before.map_or_else(|| attempt.span().1.saturating_sub(recorded.started).as_secs_f64(), |u| u.at_s);
    let sooner_s = before_at_s - fired.at_s;
    let margin = before.map_or(FIDELITY_TOLERANCE.as_secs_f64(), tolerance);
    (sooner_s > margin).then(|| Caught {
        run,
        stream: recorded.id,
        attempt: fired.attempt,
        timer: fired.timer,
        at_s: fired.at_s,
        before_timer: before.map(|u| u.timer),
        before_at_s,
        sooner_s,
    })
}

/// Seconds as an operator reads them: to the millisecond, no trailing
/// zeros.
pub fn seconds(s: f64) -> String {
    Value::Float((s * 1000.0).round() / 1000.0).to_string()
}

/// How much sooner `after` ended than `before` (negative: later), when a
/// decision differs: the outcome, attempts, hops or categories, a timer
/// (which, or when beyond the fidelity tolerance), or a sleep. When every
/// decision is the same, a difference in the end is what a replay does
/// not reproduce (the live runtime's lateness at each step), not the
/// change's.
fn ended_sooner(before: &StreamCourse, after: &StreamCourse) -> Option<f64> {
    if after.outcome == CourseOutcome::Unknown {
        return None;
    }
    let tolerance = FIDELITY_TOLERANCE.as_secs_f64();
    let same_sleeps = before.sleeps_s.len() == after.sleeps_s.len()
        && before.sleeps_s.iter().zip(&after.sleeps_s).all(|(b, a)| (b - a).abs() <= tolerance);
    let decided_alike =
        same_course(before, after) && same_sleeps && timer_drift(before, after).is_some_and(|d| d <= tolerance);
    let sooner = before.elapsed_s? - after.elapsed_s?;
    (!decided_alike && sooner.abs() > tolerance).then_some(sooner)
}

/// What a stream's replay could not take from the recording, in words.
fn notes(recording: &Recording, played: &[Played]) -> Vec<String> {
    played
        .iter()
        .filter_map(|p| {
            let (stream, ordinal) = p.source?;
            let attempt = recording.stream(stream)?.attempts.iter().find(|a| a.ordinal == ordinal)?;
            attempt.response.as_ref().filter(|r| r.error_body_cut).map(|_| {
                format!(
                    "attempt {}: the error body was recorded cut to {} KiB and redacted, so its replay is classified \
                     from what was kept (live, the classifier read up to {} KiB as it came)",
                    p.attempt,
                    crate::core::evidence::ERROR_BODY_RECORDED / 1024,
                    crate::core::governor::ERROR_BODY_LIMIT / 1024
                )
            })
        })
        .collect()
}

/// What a stream's replay assumed, in words.
fn assumptions_used(played: &[Played]) -> Vec<String> {
    let mut used = Vec::new();
    for p in played {
        if let Some(chosen_by) = p.chosen_by {
            let like = match p.source {
                Some((stream, attempt)) => format!("played like stream {stream}'s attempt {attempt}"),
                None => "not played: the stream's outcome is unknown".to_owned(),
            };
            used.push(format!("attempt {} was never recorded: assumed {} ({like})", p.attempt, chosen_by.name()));
        }
        if let Some(stall) = p.past_recording {
            used.push(format!(
                "attempt {} outlived its recording: assumed the stall continues as {}",
                p.attempt,
                stall.name()
            ));
        }
        if p.endless {
            used.push(format!(
                "attempt {}'s keep-alives would reset the idle timer, the only timer armed to end it: it would \
                 never end, so its end is unknown",
                p.attempt
            ));
        }
    }
    used
}

/// The first attempt's timers before and after, for the first stream's
/// context size.
fn timer_changes(recording: &Recording, after: &Tunables) -> Vec<TimerChange> {
    let context = recording.streams.first().and_then(|s| s.context_tokens);
    let effective = |tunables: &Tunables| {
        let policy = CorePolicy::from_tunables(tunables).ok()?;
        let timers = policy.timers.for_attempt(context, &policy.retry.escalation, 0, 0);
        let timer = |name: &str, d: Option<Duration>| EffectiveTimer {
            seconds: d.map(|d| d.as_secs_f64()),
            floor: None,
            source: tunables.get(name).source.to_string(),
        };
        let floor = EffectiveTimer {
            floor: timers.min_rate.map(|f| f.floor),
            ..timer("STALLSCOPE_SSE_MIN_RATE", timers.min_rate.map(|f| f.window))
        };
        Some([
            (TimerKind::Ttfb, timer("STALLSCOPE_SSE_TTFB_TIMEOUT_S", timers.ttfb)),
            (TimerKind::Idle, timer("STALLSCOPE_SSE_IDLE_TIMEOUT_S", timers.idle)),
            (TimerKind::DataStall, timer("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S", timers.data_stall)),
            (TimerKind::MinRate, floor),
            (TimerKind::Total, timer("STALLSCOPE_SSE_TOTAL_TIMEOUT_S", timers.total)),
        ])
    };
    let (Some(before), Some(after)) = (effective(&recording.tunables), effective(after)) else { return Vec::new() };
    before.into_iter().zip(after).map(|((timer, before), (_, after))| TimerChange { timer, before, after }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(ids: &[StreamId]) -> CourseSink {
        let folds = Mutex::new(ids.iter().map(|_| None).collect());
        CourseSink { ids: ids.to_vec(), folds, limits: None, watcher: None }
    }

    #[test]
    fn the_sink_finds_each_streams_place_whether_ids_are_dense_or_not() {
        let dense = sink(&[4, 5, 6]);
        assert_eq!([4, 5, 6, 3, 7].map(|id| dense.place(id)), [Some(0), Some(1), Some(2), None, None]);
        let sparse = sink(&[2, 9, 40]);
        assert_eq!([2, 9, 40, 3, 0].map(|id| sparse.place(id)), [Some(0), Some(1), Some(2), None, None]);
        assert_eq!(sink(&[]).place(0), None);
    }
}
