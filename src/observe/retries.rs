//! The agent's own retries, as attempts of one call: a request with the
//! same URL and body as a call that failed or was cut within the window
//! (a minute, [`RETRY_WINDOW`], unless `--retry-window` says otherwise) is
//! that call's next attempt, and the agent's
//! wait between them is the call's backoff (a server-requested one when
//! the failure asked for a wait), so the verdict, the replay and `whatif`
//! read the agent's retries as they read the core's.
//!
//! Calls are told apart by their bodies: the same request sent again after
//! a success is a new call, and so is one that changes anything in its
//! body (another message, another model). Only the window's failed calls
//! are kept, each with the fold of its events until it is retried or its
//! window passes: then the call is over (counted, sent as a trace).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::core::category::Category;
use crate::core::event::{Event, EventKind, EventSink, SleepReason, StreamId};
use crate::core::executor::CallReport;
use crate::diagnosis::Diagnosis;
use crate::replay::recording::StreamRecord;

use super::segment::Segment;

/// How long after a failed call a request with the same body is its
/// retry, by default: SDKs retry within seconds (openai-python and
/// anthropic back off to 8 s at most, honouring a `retry-after` of up to
/// a minute).
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
    /// Its verdict so far.
    pub verdict: Diagnosis,
    /// The run it is recorded in.
    pub segment: Arc<Segment>,
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

/// The most failed calls kept for the agent's retry: past it the oldest
/// is over at once (counted and sent), so a flood of failures holds no
/// more than this many calls' folds.
pub const RECENT_MAX: usize = 4096;

/// The failed calls of the latest window, at most [`RECENT_MAX`].
pub(super) struct Recent {
    window: Duration,
    ended: Mutex<Vec<Ended>>,
}

impl Recent {
    /// Keeps failed calls for `window`.
    pub fn new(window: Duration) -> Recent {
        Recent { window, ended: Mutex::default() }
    }

    /// The failed call a request with `key` retries, taken, if one ended
    /// within the window before `now`.
    pub fn retried(&self, key: &Key, now: Instant) -> Option<Ended> {
        let mut ended = self.lock();
        let found = ended.iter().rposition(|e| &e.key == key && now.saturating_duration_since(e.at) <= self.window)?;
        Some(ended.remove(found))
    }

    /// Keeps a failed call for its retry; returns the oldest kept when
    /// that passes [`RECENT_MAX`]: its retry will not be known as one.
    pub fn keep(&self, ended: Ended) -> Option<Ended> {
        let mut kept = self.lock();
        kept.push(ended);
        (kept.len() > RECENT_MAX).then(|| kept.remove(0))
    }

    /// Takes the calls whose window has passed by `now`: no retry of them
    /// will come.
    pub fn expired(&self, now: Instant) -> Vec<Ended> {
        self.take(|e| now.saturating_duration_since(e.at) > self.window)
    }

    /// Takes the calls of run `segment`, which takes no more calls.
    pub fn take_of(&self, segment: &Arc<Segment>) -> Vec<Ended> {
        self.take(|e| Arc::ptr_eq(&e.segment, segment))
    }

    /// Takes every call.
    pub fn drain(&self) -> Vec<Ended> {
        self.take(|_| true)
    }

    fn take(&self, which: impl Fn(&Ended) -> bool) -> Vec<Ended> {
        let mut kept = self.lock();
        let (taken, rest) = std::mem::take(&mut *kept).into_iter().partition(which);
        *kept = rest;
        taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Ended>> {
        self.ended.lock().unwrap_or_else(PoisonError::into_inner)
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
    use crate::config::{ConfigFile, Layers, Settings};
    use crate::core::event::VecSink;
    use crate::core::failover::Target;
    use crate::observe::Setup;

    /// A run recording nothing, under the defaults.
    async fn unrecorded_run() -> Arc<Segment> {
        let layers = Layers { config: ConfigFile::None, ..Layers::default() };
        let settings = Settings::load(layers, Vec::<(String, String)>::new()).unwrap();
        let setup = Setup {
            watch_policy: settings.policy.clone(),
            replays: None,
            guard: false,
            failover: Default::default(),
            settings,
            recorded: Vec::new(),
            scenario: None,
            watcher: None,
            metrics: None,
        };
        Arc::new(Segment::open(&setup, "observe@test".into(), None).await.unwrap())
    }

    #[tokio::test]
    async fn a_request_is_a_retry_only_of_a_failed_call_of_the_same_body_within_the_window() {
        let recent = Recent::new(RETRY_WINDOW);
        let (start, segment) = (Instant::now(), unrecorded_run().await);
        let key = Key::of("http://gw/v1/chat/completions", b"{\"model\":\"m\",\"stream\":true}");
        let ended = |at| Ended {
            key: key.clone(),
            stream: 4,
            at,
            record: StreamRecord::default(),
            report: CallReport::empty(4, Target::new("upstream", "m")),
            verdict: crate::diagnosis::diagnose(&[]),
            segment: Arc::clone(&segment),
        };
        recent.keep(ended(start));
        let other_body = Key::of("http://gw/v1/chat/completions", b"{\"model\":\"other\"}");
        assert!(recent.retried(&other_body, start).is_none(), "another body");
        let other_path = Key::of("http://gw/v1/responses", b"{\"model\":\"m\",\"stream\":true}");
        assert!(recent.retried(&other_path, start).is_none(), "another endpoint");
        assert_eq!(recent.retried(&key, start + Duration::from_secs(5)).map(|e| e.stream), Some(4));
        assert!(recent.retried(&key, start).is_none(), "taken once");
        recent.keep(ended(start));
        let late = start + RETRY_WINDOW + Duration::from_secs(1);
        assert!(recent.retried(&key, late).is_none(), "too late");
        assert_eq!(recent.expired(start + RETRY_WINDOW).len(), 0, "the window has not passed");
        assert_eq!(recent.expired(late).len(), 1, "over once its window passed");
        recent.keep(ended(start));
        assert_eq!(recent.take_of(&unrecorded_run().await).len(), 0, "another run's");
        assert_eq!(recent.take_of(&segment).len(), 1);
        // A flood of failures holds at most RECENT_MAX: the oldest is over.
        let at = |i: u64| start + Duration::from_millis(i);
        let over: Vec<Ended> = (0..=RECENT_MAX as u64).filter_map(|i| recent.keep(ended(at(i)))).collect();
        assert_eq!(over.iter().map(|e| e.at).collect::<Vec<_>>(), [at(0)]);
        assert_eq!(recent.drain().len(), RECENT_MAX);
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
