//! The agent's own retries, as attempts of one call: a request with the
//! same URL and body as a call that failed or was cut within the last
//! minute ([`RETRY_WINDOW`]) is that call's next attempt, and the agent's
//! wait between them is the call's backoff (a server-requested one when
//! the failure asked for a wait), so the verdict, the replay and `whatif`
//! read the agent's retries as they read the core's.
//!
//! Calls are told apart by their bodies: the same request sent again after
//! a success is a new call, and so is one that changes anything in its
//! body (another message, another model). Only the latest minute of
//! failed calls is kept, each with the fold of its events until it is
//! retried or let go.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::core::category::Category;
use crate::core::event::{Event, EventKind, EventSink, SleepReason, StreamId};
use crate::core::executor::CallReport;
use crate::replay::recording::StreamRecord;

/// How long after a failed call a request with the same body is its
/// retry: SDKs retry within seconds (openai-python and anthropic back
/// off to 8 s at most, honouring a `retry-after` of up to a minute).
pub const RETRY_WINDOW: Duration = Duration::from_secs(60);

/// What tells a request's call: its upstream URL and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Key {
    url: String,
    len: usize,
    hash: u64,
}

impl Key {
    /// The key of a request to `url` with `body`.
    pub fn of(url: &str, body: &[u8]) -> Key {
        let mut hasher = DefaultHasher::new();
        body.hash(&mut hasher);
        Key { url: url.to_owned(), len: body.len(), hash: hasher.finish() }
    }
}

/// A call that failed or was cut, waiting for the agent to retry it.
pub(super) struct Ended {
    /// What its request was.
    pub key: Key,
    /// Its stream.
    pub stream: StreamId,
    /// When it ended.
    pub at: Instant,
    /// Its events so far, folded.
    pub record: StreamRecord,
    /// Its report so far.
    pub report: CallReport,
}

impl Ended {
    /// The event that shows the agent's wait, `gap`, as the backoff after
    /// the call's last attempt (stamped `at`, when that attempt ended).
    pub fn backoff(&self, at: Duration, gap: Duration) -> Event {
        let error = self.report.error.as_ref();
        let category = error.map_or(Category::Cancelled, |c| c.category);
        let asked = error.and_then(|c| c.server_delay.as_ref());
        let (nominal, reason) = match asked {
            Some(delay) => (delay.delay, SleepReason::ServerRequested { header: delay.source.header() }),
            None => (gap, SleepReason::Backoff),
        };
        let attempts = self.report.attempts;
        Event {
            at,
            stream: self.stream,
            attempt: attempts,
            kind: EventKind::BackoffScheduled { retry: attempts, category, nominal, sleep: gap, reason },
        }
    }

    /// The report of the call continued by a retry that reported `next`,
    /// `gap` after it ended.
    pub fn continued(self, next: CallReport, gap: Duration) -> CallReport {
        let before = self.report;
        let mut backoff_sleeps = before.backoff_sleeps;
        backoff_sleeps.push(gap);
        backoff_sleeps.extend(next.backoff_sleeps);
        CallReport {
            attempts: before.attempts + next.attempts,
            elapsed: before.elapsed + gap + next.elapsed,
            ttfb: next.ttfb.or(before.ttfb),
            bytes: before.bytes + next.bytes,
            events: before.events + next.events,
            keepalives: before.keepalives + next.keepalives,
            backoff_sleeps,
            ..next
        }
    }
}

/// The failed calls of the latest minute.
#[derive(Default)]
pub(super) struct Recent(Mutex<Vec<Ended>>);

impl Recent {
    /// The failed call a request with `key` retries, taken, if one ended
    /// within the window before `now`.
    pub fn retried(&self, key: &Key, now: Instant) -> Option<Ended> {
        let mut ended = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        ended.retain(|e| now.saturating_duration_since(e.at) <= RETRY_WINDOW);
        let found = ended.iter().rposition(|e| &e.key == key)?;
        Some(ended.remove(found))
    }

    /// Keeps a failed call for its retry.
    pub fn keep(&self, ended: Ended) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|e| ended.at.saturating_duration_since(e.at) <= RETRY_WINDOW);
        kept.push(ended);
    }
}

/// Stamps a retry's events as the next attempts of the call it continues:
/// its attempts numbered on from the `before` already made, its start
/// dropped (the call started with its first attempt), its end counting
/// every attempt.
pub(super) struct Continuing {
    /// Where the events go.
    pub inner: Arc<dyn EventSink>,
    /// Attempts the call made before.
    pub before: u32,
}

impl EventSink for Continuing {
    fn emit(&self, mut event: Event) {
        match &mut event.kind {
            EventKind::CallStarted { .. } => return,
            EventKind::Finished { attempts, .. } => *attempts += self.before,
            _ => {}
        }
        if event.attempt > 0 {
            event.attempt += self.before;
        }
        self.inner.emit(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::VecSink;
    use crate::core::failover::Target;

    #[test]
    fn a_request_is_a_retry_only_of_a_failed_call_of_the_same_body_within_the_window() {
        let recent = Recent::default();
        let start = Instant::now();
        let key = Key::of("http://gw/v1/chat/completions", b"{\"model\":\"m\",\"stream\":true}");
        let ended = |at| Ended {
            key: key.clone(),
            stream: 4,
            at,
            record: StreamRecord::default(),
            report: CallReport::empty(4, Target::new("upstream", "m")),
        };
        recent.keep(ended(start));
        let other_body = Key::of("http://gw/v1/chat/completions", b"{\"model\":\"other\"}");
        assert!(recent.retried(&other_body, start).is_none(), "another body");
        let other_path = Key::of("http://gw/v1/responses", b"{\"model\":\"m\",\"stream\":true}");
        assert!(recent.retried(&other_path, start).is_none(), "another endpoint");
        assert_eq!(recent.retried(&key, start + Duration::from_secs(5)).map(|e| e.stream), Some(4));
        assert!(recent.retried(&key, start).is_none(), "taken once");
        recent.keep(ended(start));
        assert!(recent.retried(&key, start + RETRY_WINDOW + Duration::from_secs(1)).is_none(), "too late");
    }

    #[test]
    fn a_retry_s_events_are_the_next_attempts_of_its_call() {
        let sink = Arc::new(VecSink::new());
        let continuing = Continuing { inner: sink.clone(), before: 2 };
        let event = |attempt, kind| Event { at: Duration::ZERO, stream: 4, attempt, kind };
        let target = Target::new("upstream", "m");
        continuing.emit(event(0, EventKind::CallStarted { target: target.clone(), context_tokens: None }));
        continuing.emit(event(1, EventKind::AttemptStarted { target, credential: None }));
        let outcome = crate::core::event::Outcome::Ok;
        continuing.emit(event(0, EventKind::Finished { outcome, attempts: 1, stop_reason: None }));
        let seen: Vec<(u32, EventKind)> = sink.events().into_iter().map(|e| (e.attempt, e.kind)).collect();
        assert_eq!(seen.len(), 2, "no second start: {seen:?}");
        assert_eq!(seen[0].0, 3);
        assert!(matches!(seen[1], (0, EventKind::Finished { attempts: 3, .. })), "{seen:?}");
    }
}
