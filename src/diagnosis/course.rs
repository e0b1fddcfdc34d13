//! What happened to one stream — outcome, attempts, hops, the timers that
//! fired and when, the sleeps, how long each stall went unnoticed — read
//! from the same fold of its events (`facts::CallFacts`) that its verdict reads,
//! so a recording and its replay, the metrics and the diagnosis all count
//! a silence from the same moment.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::core::category::TimerKind;
use crate::core::event::{AttemptEnd, Event, Outcome};
use crate::core::failover::Target;

use super::facts::{CallFacts, Fired, Try};

/// How a stream ended, as its course tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CourseOutcome {
    /// It completed.
    Ok,
    /// A transient break after content; the partial text was kept.
    Partial,
    /// It failed.
    Failed,
    /// It was cancelled from outside.
    Cancelled,
    /// No event says it ended.
    Unfinished,
    /// A what-if cannot tell: an assumption said stop, or it outlived the
    /// replay's horizon.
    Unknown,
}

impl CourseOutcome {
    /// Its name, as reports print it.
    pub const fn name(self) -> &'static str {
        match self {
            CourseOutcome::Ok => "ok",
            CourseOutcome::Partial => "partial",
            CourseOutcome::Failed => "failed",
            CourseOutcome::Cancelled => "cancelled",
            CourseOutcome::Unfinished => "unfinished",
            CourseOutcome::Unknown => "unknown",
        }
    }

    /// Whether the call finished with an answer (whole or partial).
    pub const fn is_finished(self) -> bool {
        matches!(self, CourseOutcome::Ok | CourseOutcome::Partial)
    }
}

impl From<Outcome> for CourseOutcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Ok => CourseOutcome::Ok,
            Outcome::Partial => CourseOutcome::Partial,
            Outcome::Failed => CourseOutcome::Failed,
            Outcome::Cancelled => CourseOutcome::Cancelled,
        }
    }
}

impl fmt::Display for CourseOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one attempt's clocks saw, counted as its timers count them: what
/// tune reads as the headroom each timer had on a healthy attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptClocks {
    /// The attempt's number.
    pub attempt: u32,
    /// Where it went.
    pub target: Option<Target>,
    /// Whether it completed (the stream said it was done).
    pub completed: bool,
    /// From its start to its first body byte (the TTFB timer's wait).
    pub first_byte: Option<Duration>,
    /// The longest time without a byte (the idle timer's: from the start,
    /// restarted by the headers and by every byte).
    pub longest_silence: Duration,
    /// The longest time without progress since the headers (the data-stall
    /// timer's); `None` when no headers came.
    pub longest_no_progress: Option<Duration>,
    /// From its start to its end (the total timer's).
    pub duration: Duration,
}

/// One stream's course.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamCourse {
    /// How it ended.
    pub outcome: CourseOutcome,
    /// Attempts made.
    pub attempts: u32,
    /// Failover hops, `from → to`.
    pub hops: Vec<String>,
    /// Every timer that fired, in order.
    pub fired: Vec<FiredTimer>,
    /// Categories of the failures classified, in order: each attempt's own
    /// reading (not the executor's after it, such as a backoff that would
    /// cross the deadline) and each failure between attempts.
    pub categories: Vec<String>,
    /// Sleeps before retries, in seconds.
    pub sleeps_s: Vec<f64>,
    /// From the call's start to its end, in seconds.
    pub elapsed_s: Option<f64>,
}

/// A timer that fired.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FiredTimer {
    /// Which.
    pub timer: TimerKind,
    /// In which attempt.
    pub attempt: u32,
    /// When, in seconds since the call started.
    pub at_s: f64,
    /// When, in seconds since its attempt started (the moment every clock
    /// but the call's deadline runs from).
    pub in_attempt_s: f64,
    /// How long the stall it ended went unnoticed, counted as its clock
    /// counts: since the attempt's last byte, or its headers, or its start
    /// (idle, TTFB, total, deadline); since the last progress event or the
    /// headers (data stall); the window judged (throughput floor, whose
    /// every earlier window held its pace).
    pub detected_after_s: f64,
    /// How late our own runtime ran when it fired, in seconds, when that
    /// was measured (live runs; a replay in virtual time is never late).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_s: Option<f64>,
}

impl StreamCourse {
    /// The course of a stream with no events.
    pub fn empty() -> StreamCourse {
        StreamCourse {
            outcome: CourseOutcome::Unfinished,
            attempts: 0,
            hops: Vec::new(),
            fired: Vec::new(),
            categories: Vec::new(),
            sleeps_s: Vec::new(),
            elapsed_s: None,
        }
    }

    /// The course of one stream's events (in order).
    pub fn of(events: &[Event]) -> StreamCourse {
        super::StreamFold::of(events).course()
    }

    /// Whether `other` differs in what an operator acts on: the outcome,
    /// the timers that fired (which, in which attempt), the attempts or the
    /// hops. Times alone do not count.
    pub fn differs(&self, other: &StreamCourse) -> bool {
        let fired = |c: &StreamCourse| c.fired.iter().map(|f| (f.timer, f.attempt)).collect::<Vec<_>>();
        self.outcome != other.outcome
            || self.attempts != other.attempts
            || self.hops != other.hops
            || fired(self) != fired(other)
    }

    /// The course the facts tell.
    pub(super) fn of_facts(facts: &CallFacts) -> StreamCourse {
        let start = call_start(facts);
        let mut course = StreamCourse::empty();
        for t in &facts.tries {
            course.attempts += u32::from(t.started_at.is_some());
            course.fired.extend(t.fired.iter().chain(&t.deadline_after).map(|f| fired_timer(t, f, start)));
            course.categories.extend(t.classified.iter().map(|c| c.category.name().to_owned()));
            course.sleeps_s.extend(t.backoff.iter().map(|b| b.sleep.as_secs_f64()));
            course.hops.extend(t.failed_over.iter().map(|h| format!("{} → {}", h.from, h.to)));
        }
        if let Some(finished) = &facts.finished {
            course.outcome = finished.outcome.into();
            course.elapsed_s = Some(finished.at.saturating_sub(start).as_secs_f64());
        }
        course
    }

    /// The timer that fired last, once one has (a live sink reads each
    /// fire's detection time as it comes).
    pub(super) fn last_fired(facts: &CallFacts) -> Option<FiredTimer> {
        let start = call_start(facts);
        facts
            .tries
            .iter()
            .rev()
            .find_map(|t| t.deadline_after.as_ref().or(t.fired.as_ref()).map(|f| fired_timer(t, f, start)))
    }
}

/// What each attempt's clocks saw (tries that sent no request aside).
pub(super) fn attempt_clocks(facts: &CallFacts) -> Vec<AttemptClocks> {
    facts
        .tries
        .iter()
        .filter(|t| t.started_at.is_some())
        .map(|t| AttemptClocks {
            attempt: t.number,
            target: t.target.clone(),
            completed: t.end == Some(AttemptEnd::Done),
            first_byte: t.first_byte_at.map(|at| t.offset(at)),
            longest_silence: t.longest_silence,
            longest_no_progress: t.headers_at.map(|_| t.longest_no_progress),
            duration: t.offset(t.stopped_at()),
        })
        .collect()
}

/// When the call started: its first event the fold saw as a start.
fn call_start(facts: &CallFacts) -> Duration {
    facts.started_at.or_else(|| facts.tries.iter().find_map(|t| t.started_at)).unwrap_or_default()
}

fn fired_timer(t: &Try, fired: &Fired, call_start: Duration) -> FiredTimer {
    let started = t.started_at.unwrap_or(call_start);
    let unnoticed = match fired.timer {
        TimerKind::DataStall => fired.at.saturating_sub(t.last_progress_at.or(t.headers_at).unwrap_or(started)),
        TimerKind::MinRate => fired.budget,
        _ => fired.at.saturating_sub(t.last_sign_of_life().unwrap_or(started)),
    };
    FiredTimer {
        timer: fired.timer,
        attempt: fired.attempt,
        at_s: fired.at.saturating_sub(call_start).as_secs_f64(),
        in_attempt_s: fired.at.saturating_sub(started).as_secs_f64(),
        detected_after_s: unnoticed.as_secs_f64(),
        lag_s: fired.lag.map(|lag| lag.as_secs_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::category::Category;
    use crate::core::event::{EventClass, EventKind, SleepReason};
    use crate::core::failover::Target;

    fn at(ms: u64, attempt: u32, kind: EventKind) -> Event {
        Event { at: Duration::from_millis(ms), stream: 0, attempt, kind }
    }

    #[test]
    fn a_stall_its_detection_and_the_retry() {
        let t = Target::new("p", "m");
        let events = vec![
            at(1000, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            at(1020, 1, EventKind::AttemptStarted { target: t.clone(), credential: None }),
            at(1100, 1, EventKind::ChunkReceived { bytes: 10 }),
            at(1100, 1, EventKind::SseReceived { class: EventClass::Content, chars: 2, progress: true }),
            at(1300, 1, EventKind::ChunkReceived { bytes: 10 }),
            at(1300, 1, EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false }),
            at(
                2100,
                1,
                EventKind::TimerFired { timer: TimerKind::DataStall, after: Duration::from_secs(1), lag: None },
            ),
            at(
                2100,
                1,
                EventKind::ErrorClassified {
                    category: Category::Timeout,
                    timer: Some(TimerKind::DataStall),
                    status: None,
                    retryable: true,
                    rule: "r".into(),
                    message: "m".into(),
                },
            ),
            at(
                2100,
                1,
                EventKind::BackoffScheduled {
                    retry: 1,
                    category: Category::Timeout,
                    nominal: Duration::from_millis(500),
                    sleep: Duration::from_millis(500),
                    reason: SleepReason::Backoff,
                },
            ),
            at(2600, 2, EventKind::AttemptStarted { target: t, credential: None }),
            at(3000, 2, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, stop_reason: None }),
        ];
        let course = StreamCourse::of(&events);
        assert_eq!((course.outcome, course.attempts, course.elapsed_s), (CourseOutcome::Ok, 2, Some(2.0)));
        assert_eq!(course.categories, ["timeout"]);
        assert_eq!(course.sleeps_s, [0.5]);
        let fired = &course.fired[0];
        assert_eq!((fired.timer, fired.attempt), (TimerKind::DataStall, 1));
        assert!((fired.at_s - 1.1).abs() < 1e-9 && (fired.detected_after_s - 1.0).abs() < 1e-9);
        assert!((fired.in_attempt_s - 1.08).abs() < 1e-9, "the attempt began 20 ms into the call");

        let mut later = course.clone();
        later.fired[0].at_s += 0.5;
        assert!(!course.differs(&later), "times alone are no change");
        later.attempts = 3;
        assert!(course.differs(&later));
    }

    fn timer(ms: u64, attempt: u32, timer: TimerKind, after_ms: u64) -> Event {
        at(ms, attempt, EventKind::TimerFired { timer, after: Duration::from_millis(after_ms), lag: None })
    }

    /// Review D6: the idle clock restarts when the headers come, so a stall
    /// after slow headers went unnoticed only since the headers.
    #[test]
    fn a_stall_after_slow_headers_went_unnoticed_since_the_headers() {
        let t = Target::new("p", "m");
        let headers = EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) };
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            at(0, 1, EventKind::AttemptStarted { target: t, credential: None }),
            at(40_000, 1, headers),
            timer(100_000, 1, TimerKind::Idle, 60_000),
        ];
        let course = StreamCourse::of(&events);
        let fired = &course.fired[0];
        assert!((fired.detected_after_s - 60.0).abs() < 1e-9, "{fired:?}");
        assert!((fired.in_attempt_s - 100.0).abs() < 1e-9);
        assert_eq!(super::super::StreamFold::of(&events).last_fired().as_ref(), Some(fired));
    }

    /// The data-stall clock is armed at the headers: a stall with no
    /// progress at all went unnoticed since then, not since the request.
    #[test]
    fn a_data_stall_without_progress_counts_from_the_headers() {
        let t = Target::new("p", "m");
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            at(0, 1, EventKind::AttemptStarted { target: t, credential: None }),
            at(5_000, 1, EventKind::HeadersReceived { status: 200, content_type: None }),
            at(6_000, 1, EventKind::ChunkReceived { bytes: 14 }),
            at(6_000, 1, EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false }),
            timer(15_000, 1, TimerKind::DataStall, 10_000),
        ];
        let fired = &StreamCourse::of(&events).fired[0];
        assert!((fired.detected_after_s - 10.0).abs() < 1e-9, "{fired:?}");
    }

    /// The executor's own reading after an attempt (a backoff that would
    /// cross the deadline) is not a category of its own.
    #[test]
    fn an_attempt_counts_its_own_classification_once() {
        let t = Target::new("p", "m");
        let classified = |category| EventKind::ErrorClassified {
            category,
            timer: None,
            status: Some(429),
            retryable: true,
            rule: "r".into(),
            message: "m".into(),
        };
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            at(0, 1, EventKind::AttemptStarted { target: t, credential: None }),
            at(
                5,
                1,
                EventKind::AttemptEnded {
                    end: crate::core::event::AttemptEnd::Status { status: 429 },
                    stop_reason: None,
                },
            ),
            at(5, 1, classified(Category::RateLimit)),
            timer(5, 1, TimerKind::Deadline, 30_000),
            at(5, 1, classified(Category::Timeout)),
        ];
        let course = StreamCourse::of(&events);
        assert_eq!(course.categories, ["rate_limit"]);
        assert_eq!(course.fired.iter().map(|f| (f.timer, f.attempt)).collect::<Vec<_>>(), [(TimerKind::Deadline, 1)]);
    }
}
