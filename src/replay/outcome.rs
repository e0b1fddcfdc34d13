//! What one stream's events say happened to it — outcome, attempts, hops,
//! the timers that fired and when, the sleeps, how long each stall went
//! unnoticed — read the same way from a recording and from its replay, so
//! the two can be compared.

use std::time::Duration;

use serde::Serialize;

use crate::core::category::TimerKind;
use crate::core::event::{Event, EventKind};

/// One stream's course, from its events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamCourse {
    /// `ok`, `partial`, `failed`, `cancelled`, or `unfinished` when no
    /// event says it ended.
    pub outcome: &'static str,
    /// Attempts made.
    pub attempts: u32,
    /// Failover hops, `from → to`.
    pub hops: Vec<String>,
    /// Every timer that fired.
    pub fired: Vec<FiredTimer>,
    /// Categories of the failures classified, in order.
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
    /// How long the stall it ended went unnoticed: since the attempt's
    /// last byte (idle, TTFB, total, deadline) or last progress event
    /// (data stall), or its start when nothing came.
    pub detected_after_s: f64,
    /// How late our own runtime ran when it fired, in seconds, when that
    /// was measured (live runs; a replay in virtual time is never late).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_s: Option<f64>,
}

impl StreamCourse {
    /// The course of one stream's events (in order).
    pub fn of(events: &[Event]) -> StreamCourse {
        let mut builder = CourseBuilder::default();
        for event in events {
            builder.push(event);
        }
        builder.finish()
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
}

/// A stream's course built event by event, so a replay need not keep its
/// events.
#[derive(Debug, Clone)]
pub struct CourseBuilder {
    course: StreamCourse,
    start: Option<Duration>,
    /// The current attempt's start.
    attempt_start: Duration,
    /// The attempt's last byte and last progress event (or its start).
    last_byte: Duration,
    last_progress: Duration,
}

impl Default for CourseBuilder {
    fn default() -> Self {
        CourseBuilder {
            course: StreamCourse {
                outcome: "unfinished",
                attempts: 0,
                hops: Vec::new(),
                fired: Vec::new(),
                categories: Vec::new(),
                sleeps_s: Vec::new(),
                elapsed_s: None,
            },
            start: None,
            attempt_start: Duration::ZERO,
            last_byte: Duration::ZERO,
            last_progress: Duration::ZERO,
        }
    }
}

impl CourseBuilder {
    /// Takes in the stream's next event.
    pub fn push(&mut self, event: &Event) {
        let start = *self.start.get_or_insert(event.at);
        let secs = |at: Duration| at.saturating_sub(start).as_secs_f64();
        let course = &mut self.course;
        match &event.kind {
            EventKind::ChunkReceived { .. } => self.last_byte = event.at,
            EventKind::SseReceived { progress: true, .. } => self.last_progress = event.at,
            EventKind::AttemptStarted { .. } => {
                course.attempts += 1;
                (self.attempt_start, self.last_byte, self.last_progress) = (event.at, event.at, event.at);
            }
            EventKind::TimerFired { timer, lag, .. } => {
                // The progress clocks are late from the last progress event.
                let progress = matches!(timer, TimerKind::DataStall | TimerKind::MinRate);
                let since = if progress { self.last_progress } else { self.last_byte };
                course.fired.push(FiredTimer {
                    timer: *timer,
                    attempt: event.attempt,
                    at_s: secs(event.at),
                    in_attempt_s: event.at.saturating_sub(self.attempt_start).as_secs_f64(),
                    detected_after_s: event.at.saturating_sub(since).as_secs_f64(),
                    lag_s: lag.map(|lag| lag.as_secs_f64()),
                });
            }
            EventKind::FailedOver { from, to, .. } => course.hops.push(format!("{from} → {to}")),
            EventKind::ErrorClassified { category, .. } => course.categories.push(category.name().to_owned()),
            EventKind::BackoffScheduled { sleep, .. } => course.sleeps_s.push(sleep.as_secs_f64()),
            EventKind::Finished { outcome, .. } => {
                course.outcome = outcome.name();
                course.elapsed_s = Some(secs(event.at));
            }
            _ => {}
        }
    }

    /// The timer that fired last, once one has (a live sink reads each
    /// fire's detection time as it comes).
    pub fn last_fired(&self) -> Option<&FiredTimer> {
        self.course.fired.last()
    }

    /// The course so far.
    pub fn finish(self) -> StreamCourse {
        self.course
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::category::Category;
    use crate::core::event::{EventClass, Outcome, SleepReason};
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
        assert_eq!((course.outcome, course.attempts, course.elapsed_s), ("ok", 2, Some(2.0)));
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
}
