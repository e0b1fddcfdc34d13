//! Streams that tests across the crate read alike: an observed call as
//! observe sends it, so the verdict, the lanes and the exports are tested
//! on the same events.

use std::time::Duration;

use crate::core::category::{Category, TimerKind};
use crate::core::event::{AttemptEnd, AttemptPhase, Event, EventKind, Outcome, StreamId};
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

/// `events` as the store reads them back: by time, the order sent kept
/// among equals.
pub(crate) fn stored(events: &[Event]) -> Vec<Event> {
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.at);
    events
}
