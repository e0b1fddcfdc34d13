//! The report of a run, in the JSON shape outside tools rely on
//! (`stallscope run --json`, `stallscope runs show --json`).
//!
//! Every stream carries its verdict (`diagnosis`: `kind`, `severity`,
//! `summary`, `evidence`, `tunable`, `suggestion`, `trusted`, `basis`; see
//! [`crate::diagnosis`]) and the run its verdicts grouped by kind
//! (`diagnosis.groups`). Both are `null` in a report made without the
//! run's events.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::core::event::{Outcome, StreamId};
use crate::core::executor::{CallReport, Used};
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

/// One call.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
        RunReport { run_id: None, scenario, seed: None, tunables, summary, stopped: false, streams, diagnosis: None }
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
