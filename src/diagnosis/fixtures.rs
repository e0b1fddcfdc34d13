//! Streams that tests across the crate read alike: an observed call as
//! observe sends it, and a guarded call whose timer was held for our own
//! lateness, so the verdict, the lanes and the exports are tested on the
//! same events.

use std::time::Duration;

use crate::core::category::{Category, TimerKind};
use crate::core::event::{AttemptEnd, AttemptPhase, Event, EventClass, EventKind, Outcome, StreamId};
use crate::core::failover::Target;

/// An agent that gave up on a silent stream after 1 s (its own read
/// timeout), our idle timer at 0.4 s in force, as observe sends it: the
/// headers at 10 ms, the agent going at 1.010 s where it was noticed, the
/// cancellation and the call's end at 1.011 s, then our timer's mark where
/// it would have fired, at 0.410 s.
pub(crate) fn agent_gone_on_a_silent_stall(stream: StreamId) -> Vec<Event> {
    let target = Target::new("sim", "gpt-x");
    let at = |ms, attempt, kind| Event { at: Duration::from_millis(ms), stream, attempt, kind };
    let cancelled = EventKind::ErrorClassified {
        category: Category::Cancelled,
        timer: None,
        status: None,
        retryable: false,
        rule: "builtin: cancelled".into(),
        message: "cancelled".into(),
    };
    vec![
        at(0, 0, EventKind::CallStarted { target: target.clone(), context_tokens: None }),
        at(0, 1, EventKind::AttemptStarted { target, credential: None }),
        at(10, 1, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
        at(10, 1, EventKind::PhaseChanged { phase: AttemptPhase::AwaitingFirstContent }),
        at(1010, 1, EventKind::AgentDisconnected),
        at(1011, 1, EventKind::AttemptEnded { end: AttemptEnd::Cancelled, stop_reason: None }),
        at(1011, 1, cancelled),
        at(1011, 0, EventKind::Finished { outcome: Outcome::Cancelled, attempts: 1, stop_reason: None }),
        at(410, 1, EventKind::TimerWouldFire { timer: TimerKind::Idle, after: Duration::from_millis(400) }),
    ]
}

/// A guarded call whose idle timer (1 s) came due while our own runtime
/// ran late: held at 1.35 s with 0.35 s of lag, not acted on, and the
/// stream went on to complete at 1.6 s.
pub(crate) fn held_on_a_late_runtime(stream: StreamId) -> Vec<Event> {
    let target = Target::new("sim", "gpt-x");
    let at = |ms, attempt, kind| Event { at: Duration::from_millis(ms), stream, attempt, kind };
    let idle = Duration::from_secs(1);
    let content = EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true };
    vec![
        at(0, 0, EventKind::CallStarted { target: target.clone(), context_tokens: None }),
        at(0, 1, EventKind::AttemptStarted { target, credential: None }),
        at(0, 1, EventKind::TimerArmed { timer: TimerKind::Idle, after: idle, floor: None }),
        at(10, 1, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
        at(20, 1, EventKind::ChunkReceived { bytes: 40 }),
        at(20, 1, content.clone()),
        at(1350, 1, EventKind::TimerHeld { timer: TimerKind::Idle, after: idle, lag: Duration::from_millis(350) }),
        at(1500, 1, EventKind::ChunkReceived { bytes: 40 }),
        at(1500, 1, content),
        at(1600, 1, EventKind::PhaseChanged { phase: AttemptPhase::Done }),
        at(1600, 1, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None }),
        at(1600, 0, EventKind::Finished { outcome: Outcome::Ok, attempts: 1, stop_reason: None }),
    ]
}

/// `events` as the store reads them back: by time, the order sent kept
/// among equals.
pub(crate) fn stored(events: &[Event]) -> Vec<Event> {
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.at);
    events
}
