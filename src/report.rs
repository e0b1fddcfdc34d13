//! The report of a run, in the JSON shape outside tools rely on
//! (`stallscope run --json`, `stallscope runs show --json`).
//!
//! Every stream carries its verdict (`diagnosis`: `kind`, `severity`,
//! `summary`, `evidence`, `tunable`, `suggestion`, `trusted`, `basis`; see
//! [`crate::diagnosis`]) and the run its verdicts grouped by kind
//! (`diagnosis.groups`). Both are `null` in a report made without the
//! run's events.
//!
//! A run that may take millions of calls (an observer's) lists no streams
//! in its report: its calls are counted as they end ([`Tally`]), in a size
//! that does not grow with them, and the report carries the counts
//! (`counted`); each stream is in the run's recording, where `runs show`
//! reads it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::core::event::{Outcome, StreamId};
use crate::core::executor::{CallReport, Used};
use crate::diagnosis::verdict::VerdictKind;
use crate::diagnosis::{Diagnosis, RunDiagnosis, diagnose, summarize};

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The run's id in the store, when recorded.
    pub run_id: Option<i64>,
    /// The built-in scenario, when the run used one.
    pub scenario: Option<String>,
    /// The seed of the run's random draws (`run --seed` repeats them);
    /// unknown for runs stored before it was recorded.
    pub seed: Option<u64>,
    /// Effective tunable values.
    pub tunables: serde_json::Map<String, serde_json::Value>,
    /// Counts by outcome.
    pub summary: Summary,
    /// The run was stopped (Stop, Ctrl-C) before all its calls finished.
    pub stopped: bool,
    /// Every call that started, in index order.
    pub streams: Vec<StreamReport>,
    /// The streams' verdicts grouped by kind.
    pub diagnosis: Option<RunDiagnosis>,
    /// For a run whose calls were counted as they ended rather than
    /// listed: what the list would have given. `streams` is then empty
    /// when made (the store fills it from the recording when read back)
    /// and `diagnosis` is `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counted: Option<Counted>,
}

/// What a run's counted calls give in place of their list.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counted {
    /// The median wall-clock of the calls not cancelled (within 1 %).
    pub p50_ms: Option<f64>,
    /// Their 99th percentile (within 1 %).
    pub p99_ms: Option<f64>,
    /// Retries used, over every call.
    pub retries: u64,
    /// How many calls each verdict kind was given.
    pub verdicts: BTreeMap<VerdictKind, usize>,
    /// How many verdicts are not trustworthy (our runtime was late).
    pub untrusted: usize,
}

/// Counts by outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Completed streams.
    pub ok: usize,
    /// Streams finished by partial recovery.
    pub partial: usize,
    /// Failed streams.
    pub failed: usize,
    /// Cancelled streams.
    pub cancelled: usize,
    /// Calls still queued when the run was stopped: they never started,
    /// have no stream and count in no percentile.
    pub not_started: usize,
    /// Wall-clock of the whole run.
    pub elapsed_ms: f64,
}

impl StreamReport {
    /// Fills in what a call's events say of it beyond its outcome and
    /// wall-clock: its body bytes, parsed events and keep-alives, the time
    /// to first byte of its last attempt that got one, its stop reason.
    pub fn read_from(&mut self, events: &[crate::core::event::Event]) {
        use crate::core::event::{EventClass, EventKind};
        let (mut started, mut first_byte) = (None, None);
        for event in events {
            match &event.kind {
                EventKind::AttemptStarted { .. } => started = Some((event.attempt, event.at)),
                EventKind::ChunkReceived { bytes } => {
                    self.bytes += *bytes as u64;
                    if let Some((attempt, at)) = started.filter(|(a, _)| first_byte.is_none_or(|(b, _)| b != *a)) {
                        first_byte = Some((attempt, event.at.saturating_sub(at)));
                    }
                }
                EventKind::SseReceived { class: EventClass::Keepalive, .. } => self.keepalives += 1,
                EventKind::SseReceived { .. } => self.events += 1,
                EventKind::Finished { stop_reason, .. } => self.stop_reason.clone_from(stop_reason),
                _ => {}
            }
        }
        self.ttfb_ms = first_byte.map(|(_, ttfb)| ms(ttfb));
    }
}

/// One call.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StreamReport {
    /// Its index in the run, from 0.
    pub index: u64,
    /// `ok`, `partial`, `failed` or `cancelled`.
    pub outcome: &'static str,
    /// The provider of the last attempt.
    pub provider: String,
    /// The model of the last attempt.
    pub model: String,
    /// Attempts made.
    pub attempts: u32,
    /// The call's wall-clock.
    pub elapsed_ms: f64,
    /// Time to first byte of the last attempt that got one.
    pub ttfb_ms: Option<f64>,
    /// Body bytes.
    pub bytes: u64,
    /// Parsed events.
    pub events: u64,
    /// Keep-alives.
    pub keepalives: u64,
    /// Output text.
    pub content: String,
    /// Stop reason.
    pub stop_reason: Option<String>,
    /// What ended the call (or the break partial recovery absorbed).
    pub error: Option<ErrorReport>,
    /// Failover hops.
    pub failover_hops: Vec<HopReport>,
    /// Sleeps before retries.
    pub backoff_sleeps_ms: Vec<f64>,
    /// For each sleep, what the server asked for.
    pub retry_after_ms: Vec<Option<f64>>,
    /// Retries used and allowed, by category.
    pub retry_counts: BTreeMap<String, Used>,
    /// Rate-limit buckets that ran low (a tenth of their limit or less).
    pub rate_limits_low: Vec<LowBucketReport>,
    /// The verdict on the stream.
    pub diagnosis: Option<Diagnosis>,
}

/// A rate-limit bucket that ran low.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct LowBucketReport {
    /// `requests`, `tokens`, `input_tokens` or `output_tokens`.
    pub bucket: String,
    /// What was left.
    pub remaining: u64,
    /// The bucket's size, when reported.
    pub limit: Option<u64>,
}

/// A classified failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorReport {
    /// Category.
    pub category: String,
    /// The timer, for timeouts.
    pub timer: Option<String>,
    /// What the transport reported, for transport failures (`refused`,
    /// `dns`, `kernel_timeout`, …).
    pub transport: Option<String>,
    /// HTTP status.
    pub status: Option<u16>,
    /// Whether it was retryable.
    pub retryable: bool,
    /// The rule that matched.
    pub rule: String,
    /// Description.
    pub message: String,
}

/// A failover hop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HopReport {
    /// `provider/model` left.
    pub from: String,
    /// `provider/model` taken.
    pub to: String,
    /// The category that caused it.
    pub reason: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl From<&CallReport> for StreamReport {
    fn from(call: &CallReport) -> Self {
        StreamReport {
            index: call.stream,
            outcome: call.outcome.name(),
            provider: call.target.provider.clone(),
            model: call.target.model.clone(),
            attempts: call.attempts,
            elapsed_ms: ms(call.elapsed),
            ttfb_ms: call.ttfb.map(ms),
            bytes: call.bytes,
            events: call.events,
            keepalives: call.keepalives,
            content: call.content.clone(),
            stop_reason: call.stop_reason.clone(),
            error: call.error.as_ref().map(|c| ErrorReport {
                category: c.category.name().to_owned(),
                timer: c.timer.map(|t| t.name().to_owned()),
                transport: c.transport.map(|k| k.name().to_owned()),
                status: c.status,
                retryable: c.retryable,
                rule: c.rule.clone(),
                message: c.message.clone(),
            }),
            failover_hops: call
                .hops
                .iter()
                .map(|h| HopReport {
                    from: h.from.to_string(),
                    to: h.to.to_string(),
                    reason: h.reason.name().to_owned(),
                })
                .collect(),
            backoff_sleeps_ms: call.backoff_sleeps.iter().copied().map(ms).collect(),
            retry_after_ms: call.retry_after.iter().map(|d| d.map(ms)).collect(),
            retry_counts: call.retry_counts.iter().map(|(c, used)| (c.name().to_owned(), *used)).collect(),
            rate_limits_low: call
                .low_buckets
                .iter()
                .map(|b| LowBucketReport { bucket: b.bucket.to_owned(), remaining: b.remaining, limit: b.limit })
                .collect(),
            diagnosis: None,
        }
    }
}

impl RunReport {
    /// The report of `calls` (in any order) that took `elapsed`.
    pub fn new(
        scenario: Option<String>,
        tunables: serde_json::Map<String, serde_json::Value>,
        calls: &[CallReport],
        elapsed: Duration,
    ) -> Self {
        let mut streams: Vec<StreamReport> = calls.iter().map(StreamReport::from).collect();
        streams.sort_by_key(|s| s.index);
        let mut summary = Summary { elapsed_ms: ms(elapsed), ..Summary::default() };
        for call in calls {
            match call.outcome {
                Outcome::Ok => summary.ok += 1,
                Outcome::Partial => summary.partial += 1,
                Outcome::Failed => summary.failed += 1,
                Outcome::Cancelled => summary.cancelled += 1,
            }
        }
        RunReport {
            run_id: None,
            scenario,
            seed: None,
            tunables,
            summary,
            stopped: false,
            streams,
            diagnosis: None,
            counted: None,
        }
    }

    /// The outcome counts in one line; a stopped run says so and counts
    /// the calls it never started.
    pub fn summary_line(&self) -> String {
        let sum = &self.summary;
        let counts =
            format!("{} ok, {} partial, {} failed, {} cancelled", sum.ok, sum.partial, sum.failed, sum.cancelled);
        match self.stopped {
            true => format!("stopped: {counts}, {} not started, after {:.0} ms", sum.not_started, sum.elapsed_ms),
            false => format!("{counts} in {:.0} ms", sum.elapsed_ms),
        }
    }

    /// Gives every stream its verdict from `diagnoses` (a stream without
    /// one had no events recorded, and is diagnosed as such) and the run
    /// its summary.
    pub fn attach_diagnoses(&mut self, diagnoses: Vec<(StreamId, Diagnosis)>) {
        let mut by_stream: HashMap<StreamId, Diagnosis> = diagnoses.into_iter().collect();
        let mut all = Vec::with_capacity(self.streams.len());
        for s in &mut self.streams {
            let diagnosis = by_stream.remove(&s.index).unwrap_or_else(|| diagnose(&[]));
            all.push((s.index, diagnosis.clone()));
            s.diagnosis = Some(diagnosis);
        }
        self.diagnosis = Some(summarize(&all));
    }
}

/// A run's calls counted as each ends: its outcome counts, a histogram of
/// the calls' wall-clocks, the retries they used and their verdicts by
/// kind. What a call adds is taken back with [`Tally::remove`] (an
/// agent's retry that continues it replaces it), so each call counts
/// once, as it last ended. Its size does not grow with the calls: at most
/// one bucket per 2 % of wall-clock between a microsecond and eleven days,
/// and one count per verdict kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    outcomes: [usize; 4],
    latencies: Latencies,
    retries: u64,
    verdicts: BTreeMap<VerdictKind, usize>,
    untrusted: usize,
}

impl Tally {
    /// Counts `call`, which ended with `verdict`.
    pub fn add(&mut self, call: &CallReport, verdict: &Diagnosis) {
        self.outcomes[slot(call.outcome)] += 1;
        if call.outcome != Outcome::Cancelled {
            self.latencies.add(ms(call.elapsed));
        }
        self.retries += retries(call);
        *self.verdicts.entry(verdict.kind).or_default() += 1;
        self.untrusted += usize::from(!verdict.trusted);
    }

    /// Takes back what [`Tally::add`] of the same `call` and `verdict`
    /// added.
    pub fn remove(&mut self, call: &CallReport, verdict: &Diagnosis) {
        let outcome = &mut self.outcomes[slot(call.outcome)];
        *outcome = outcome.saturating_sub(1);
        if call.outcome != Outcome::Cancelled {
            self.latencies.remove(ms(call.elapsed));
        }
        self.retries = self.retries.saturating_sub(retries(call));
        if let Some(n) = self.verdicts.get_mut(&verdict.kind) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.verdicts.remove(&verdict.kind);
            }
        }
        self.untrusted = self.untrusted.saturating_sub(usize::from(!verdict.trusted));
    }

    /// The report of the calls counted, over a run that took `elapsed`:
    /// its summary and `counted`, no stream listed.
    pub fn report(
        &self,
        scenario: Option<String>,
        tunables: serde_json::Map<String, serde_json::Value>,
        elapsed: Duration,
    ) -> RunReport {
        let [ok, partial, failed, cancelled] = self.outcomes;
        let summary = Summary { ok, partial, failed, cancelled, not_started: 0, elapsed_ms: ms(elapsed) };
        let counted = Counted {
            p50_ms: self.latencies.percentile(50.0),
            p99_ms: self.latencies.percentile(99.0),
            retries: self.retries,
            verdicts: self.verdicts.clone(),
            untrusted: self.untrusted,
        };
        RunReport { summary, counted: Some(counted), ..RunReport::new(scenario, tunables, &[], elapsed) }
    }
}

/// The retries `call` used, over every category.
fn retries(call: &CallReport) -> u64 {
    call.retry_counts.values().map(|u| u64::from(u.used)).sum()
}

/// The index of an outcome among a [`Tally`]'s counts.
fn slot(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Ok => 0,
        Outcome::Partial => 1,
        Outcome::Failed => 2,
        Outcome::Cancelled => 3,
    }
}

/// Wall-clocks in milliseconds, counted in logarithmic buckets each
/// [`Latencies::GROWTH`] wider than the last (DDSketch's): a percentile
/// read from them is within 1 % of the exact nearest-rank one, and values
/// outside [`Latencies::RANGE_MS`] count at its ends, so there are at most
/// about 1,600 buckets.
#[derive(Debug, Clone, Default, PartialEq)]
struct Latencies {
    buckets: BTreeMap<i32, u64>,
    count: u64,
}

impl Latencies {
    /// How much wider each bucket is than the one below.
    const GROWTH: f64 = 1.02;
    /// The wall-clocks told apart: a microsecond to about eleven days.
    const RANGE_MS: (f64, f64) = (1e-3, 1e9);

    fn bucket(ms: f64) -> i32 {
        let (low, high) = Latencies::RANGE_MS;
        // NaN (never a wall-clock) counts at the low end.
        let ms = if ms.is_nan() { low } else { ms.clamp(low, high) };
        (ms.ln() / Latencies::GROWTH.ln()).ceil() as i32
    }

    /// The value a bucket stands for: the one whose distance to either
    /// edge, relative to it, is the same.
    fn value(bucket: i32) -> f64 {
        2.0 * Latencies::GROWTH.powi(bucket) / (Latencies::GROWTH + 1.0)
    }

    fn add(&mut self, ms: f64) {
        *self.buckets.entry(Latencies::bucket(ms)).or_default() += 1;
        self.count += 1;
    }

    fn remove(&mut self, ms: f64) {
        let bucket = Latencies::bucket(ms);
        if let Some(n) = self.buckets.get_mut(&bucket) {
            *n -= 1;
            self.count -= 1;
            if *n == 0 {
                self.buckets.remove(&bucket);
            }
        }
    }

    /// The nearest-rank `p`th percentile, as its bucket's value.
    fn percentile(&self, p: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().clamp(1.0, self.count as f64) as u64;
        let mut below = 0;
        self.buckets.iter().find_map(|(&bucket, &n)| {
            below += n;
            (below >= rank).then(|| Latencies::value(bucket))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::category::Category;
    use crate::core::failover::Target;

    fn call(stream: StreamId, outcome: Outcome, elapsed_ms: f64, retries: u32) -> CallReport {
        let mut call = CallReport::empty(stream, Target::new("p", "m"));
        call.outcome = outcome;
        call.elapsed = Duration::from_secs_f64(elapsed_ms / 1000.0);
        call.retry_counts.insert(Category::Timeout, Used { used: retries, budget: 3 });
        call
    }

    /// A spread of wall-clocks from well under a microsecond to weeks.
    fn spread(i: u64) -> f64 {
        10f64.powf((i % 16_001) as f64 / 1000.0 - 4.0)
    }

    #[test]
    fn a_tally_does_not_grow_with_the_calls() {
        let verdict = diagnose(&[]);
        let mut tally = Tally::default();
        // Every wall-clock the spread gives, once at least.
        for i in 0..20_000 {
            tally.add(&call(i, Outcome::Ok, spread(i * 7), 1), &verdict);
        }
        let (size, kinds) = (tally.latencies.buckets.len(), tally.verdicts.len());
        for i in 20_000..200_000 {
            tally.add(&call(i, Outcome::Ok, spread(i * 7), 1), &verdict);
        }
        let bound = Latencies::bucket(Latencies::RANGE_MS.1) - Latencies::bucket(Latencies::RANGE_MS.0) + 1;
        assert!(tally.latencies.buckets.len() <= bound as usize, "{} buckets", tally.latencies.buckets.len());
        assert!(bound < 1_700, "{bound}");
        assert_eq!(tally.latencies.buckets.len(), size, "the same buckets after 180,000 more calls");
        assert_eq!(tally.verdicts.len(), kinds);
        assert_eq!((tally.outcomes[0], tally.latencies.count, tally.retries), (200_000, 200_000, 200_000));
    }

    #[test]
    fn its_percentiles_are_within_one_percent_of_the_exact_ones() {
        let verdict = diagnose(&[]);
        let mut tally = Tally::default();
        let mut exact = Vec::new();
        for i in 0..10_001 {
            // 0.5 ms to about 5 s, unevenly.
            let ms = 0.5 * 1.0009_f64.powi((i * 7919 % 10_001) as i32);
            exact.push(ms);
            tally.add(&call(i, Outcome::Partial, ms, 0), &verdict);
        }
        // Cancelled calls count in no percentile, as in a listed report.
        tally.add(&call(99_999, Outcome::Cancelled, 1e7, 0), &verdict);
        exact.sort_by(f64::total_cmp);
        for p in [1.0, 50.0, 90.0, 99.0, 100.0] {
            let want = crate::store::runs::percentile(&exact, p).unwrap();
            let got = tally.latencies.percentile(p).unwrap();
            assert!((got / want - 1.0).abs() <= 0.01, "p{p}: {got} against {want}");
        }
        assert_eq!(Tally::default().latencies.percentile(50.0), None);
    }

    #[test]
    fn a_call_taken_back_counts_as_never_added() {
        let (healthy, stalled) = (diagnose(&[]), Diagnosis { kind: VerdictKind::SilentStall, ..diagnose(&[]) });
        let mut tally = Tally::default();
        tally.add(&call(0, Outcome::Ok, 12.0, 0), &healthy);
        let before = tally.clone();
        let (failed, retried) = (call(1, Outcome::Failed, 300.0, 2), call(1, Outcome::Ok, 900.0, 2));
        tally.add(&failed, &stalled);
        assert_ne!(tally, before);
        // The agent's retry continues call 1: it counts once, as it ended last.
        tally.remove(&failed, &stalled);
        assert_eq!(tally, before);
        tally.add(&retried, &healthy);
        let report = tally.report(None, serde_json::Map::new(), Duration::from_secs(1));
        let sum = &report.summary;
        assert_eq!((sum.ok, sum.partial, sum.failed, sum.cancelled), (2, 0, 0, 0));
        let counted = report.counted.unwrap();
        assert_eq!((counted.retries, counted.untrusted), (2, 0));
        assert_eq!(counted.verdicts.into_iter().collect::<Vec<_>>(), [(healthy.kind, 2)]);
        assert!(report.streams.is_empty() && report.diagnosis.is_none());
        assert!((counted.p99_ms.unwrap() / 900.0 - 1.0).abs() <= 0.01, "{:?}", counted.p99_ms);
    }
}
