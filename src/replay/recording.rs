//! A recorded run as replay needs it: what the core's decisions depended on
//! (tunables with their sources, seed, wall clock, rules, key pools,
//! requests and concurrency) and, per stream, each attempt's network
//! behaviour as observed — when it started, when headers came with what
//! status and headers, each chunk's time, size and events, and how it
//! ended.

use std::sync::Arc;
use std::time::Duration;

use crate::core::classify::Rule;
use crate::core::event::{AttemptEnd, Event, EventClass, EventKind, RecordedBody, StreamId};
use crate::core::failover::Target;
use crate::core::upstream::{Expect, is_event_stream};
use crate::diagnosis::{AttemptClocks, Diagnosis, RecordedRun, StreamCourse, StreamFold};
use crate::providers::Dialect;
use crate::store::runs::RunMeta;
use crate::store::{RunId, Store, StoreError};
use crate::tunables::{TunableError, Tunables};

/// A recording that cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No run has this id.
    #[error("no run {0} in the store")]
    NoRun(RunId),
    /// The run lacks what its decisions depended on.
    #[error("{0}")]
    Lacks(String),
    /// A stored tunable cannot be rebuilt.
    #[error("run {run}: {source}")]
    Tunables {
        /// The run.
        run: RunId,
        /// What was wrong.
        source: TunableError,
    },
    /// The stored classifier rules cannot be read.
    #[error("run {run}: stored classifier rules: {message}")]
    Rules {
        /// The run.
        run: RunId,
        /// What was wrong.
        message: String,
    },
}

/// A run loaded for replay.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Its id in the store.
    pub run: RunId,
    /// The tunables it ran with, with their sources.
    pub tunables: Tunables,
    /// Seed, wall clock, requests, concurrency, pools.
    pub meta: RunMeta,
    /// The classifier's user rules.
    pub rules: Vec<Rule>,
    /// Every configured provider/model, in config order, with its dialect.
    pub providers: Vec<RecordedProvider>,
    /// Every stream, by id.
    pub streams: Vec<RecordedStream>,
}

/// One configured provider row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedProvider {
    /// `provider/model`.
    pub target: Target,
    /// The dialect it speaks, when the row names a known one.
    pub dialect: Option<Dialect>,
}

/// One call as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStream {
    /// Its id.
    pub id: StreamId,
    /// The primary target.
    pub target: Target,
    /// Its estimated context size.
    pub context_tokens: Option<u64>,
    /// What happened to it, as recorded.
    pub course: StreamCourse,
    /// Its verdict, as recorded (what a what-if's verdicts compare with).
    pub verdict: Diagnosis,
    /// When it started.
    pub started: Duration,
    /// Its last event's time.
    pub last_at: Duration,
    /// Its attempts, in order.
    pub attempts: Vec<RecordedAttempt>,
    /// What each attempt's clocks saw, read from the same fold as its
    /// course and verdict.
    pub clocks: Vec<AttemptClocks>,
}

impl RecordedStream {
    /// What the call read its response as: a whole answer when an attempt
    /// took a 2xx that is not an event stream to its end (or was cancelled
    /// reading it), which a call expecting a stream never does (it fails
    /// such an answer as it comes); a stream otherwise, and where the two
    /// cannot be told apart they end alike.
    pub fn expect(&self) -> Expect {
        let answered = self.attempts.iter().any(|a| {
            let whole = a.response.as_ref().is_some_and(|r| {
                (200..300).contains(&r.status) && !is_event_stream(r.status, r.content_type.as_deref())
            });
            whole && matches!(a.ended, Some((_, AttemptEnd::Done | AttemptEnd::Cancelled)))
        });
        if answered { Expect::Answer } else { Expect::Stream }
    }
}

/// One attempt's network behaviour. Times are since the run's epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedAttempt {
    /// Its number within the call, from 1.
    pub ordinal: u32,
    /// Where it went.
    pub target: Target,
    /// When it started.
    pub started: Duration,
    /// The response, when headers came.
    pub response: Option<RecordedResponse>,
    /// The body's chunks, in order. Shared: a replay plays them where they
    /// lie, and a what-if's copy of the recording copies none.
    pub chunks: Arc<[RecordedChunk]>,
    /// The parsed events the chunks completed, in order: class and
    /// characters of text (each chunk says how many are its own). Shared
    /// like the chunks.
    pub events: Arc<[(EventClass, u32)]>,
    /// How and when it ended; `None` when the recording stops before.
    pub ended: Option<(Duration, AttemptEnd)>,
    /// The stop reason the stream reported.
    pub stop_reason: Option<String>,
    /// The failure's description as its own classification gave it
    /// (in-stream error messages, transport messages; see
    /// [`RecordedAttempt::failure_message`] for the message it
    /// described).
    pub message: Option<String>,
    /// The body, when bodies were recorded.
    pub body: Option<RecordedBody>,
}

impl RecordedAttempt {
    /// Whether the attempt completed: a stream the recording shows healthy.
    pub fn completed(&self) -> bool {
        matches!(self.ended, Some((_, AttemptEnd::Done)))
    }

    /// Whether the recording stops while the attempt still ran: one of our
    /// timers gave up on it, the call was cancelled, or nothing says how it
    /// ended. What the network would have done next was never observed.
    pub fn abandoned(&self) -> bool {
        matches!(self.ended, None | Some((_, AttemptEnd::Timer { .. } | AttemptEnd::Cancelled)))
    }

    /// Each chunk with the parsed events it completed.
    pub fn chunks_with_events(&self) -> impl Iterator<Item = (&RecordedChunk, &[(EventClass, u32)])> {
        let mut rest = &self.events[..];
        self.chunks.iter().map(move |chunk| {
            let (own, later) = rest.split_at((chunk.events as usize).min(rest.len()));
            rest = later;
            (chunk, own)
        })
    }

    /// When it started and when its recording stops.
    pub fn span(&self) -> (Duration, Duration) {
        let last_chunk = self.chunks.last().map(|c| c.at);
        let end = self.ended.as_ref().map(|(at, _)| *at).or(last_chunk).unwrap_or(self.started);
        (self.started, end)
    }
}

/// A response's head as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedResponse {
    /// When the headers came.
    pub at: Duration,
    /// The status.
    pub status: u16,
    /// The content type.
    pub content_type: Option<String>,
    /// The allowlisted headers.
    pub headers: Vec<(String, String)>,
    /// The start of an error body, as recorded (redacted, at most
    /// [`ERROR_BODY_RECORDED`](crate::core::evidence::ERROR_BODY_RECORDED)
    /// bytes).
    pub error_body: Option<String>,
    /// Whether the error body was longer than what was recorded: its
    /// replay is classified from the start kept.
    pub error_body_cut: bool,
}

/// One chunk, and how many parsed events the decoder found in it (the
/// attempt's next ones in [`RecordedAttempt::events`]). Kept small: a long
/// recording holds millions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedChunk {
    /// When it came.
    pub at: Duration,
    /// Its size.
    pub bytes: u32,
    /// How many parsed events it completed.
    pub events: u32,
}

impl Recording {
    /// Loads run `run` from `store`. A run recorded without what its
    /// decisions depended on (by an older stallscope) is refused, saying
    /// what it lacks.
    pub fn load(store: &Store, run: RunId) -> Result<Recording, RecordingError> {
        let record = store.run(run)?.ok_or(RecordingError::NoRun(run))?;
        if let Some(note) = record.replay_note() {
            return Err(RecordingError::Lacks(note));
        }
        let meta = record.meta.clone().ok_or_else(|| RecordingError::Lacks(format!("run {run} has no meta")))?;
        let tunables =
            Tunables::from_snapshot(&record.tunables).map_err(|source| RecordingError::Tunables { run, source })?;
        let rules = serde_json::from_value(meta.rules.clone())
            .map_err(|e| RecordingError::Rules { run, message: e.to_string() })?;
        let providers = record
            .providers
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|row| {
                        let target = Target::new(row["name"].as_str()?, row["model"].as_str()?);
                        let dialect = row["kind"].as_str().and_then(|k| k.parse().ok());
                        Some(RecordedProvider { target, dialect })
                    })
                    .collect()
            })
            .unwrap_or_default();
        // Stream by stream: a long run's events never sit in memory at once.
        let verdicts = store.recorded_run(run)?;
        let mut streams = Vec::new();
        for id in store.streams(run)? {
            streams.push(stream(id, &store.events(run, id)?, &verdicts));
        }
        Ok(Recording { run, tunables, meta, rules, providers, streams })
    }

    /// The stream with id `id`.
    pub fn stream(&self, id: StreamId) -> Option<&RecordedStream> {
        self.streams.binary_search_by_key(&id, |s| s.id).ok().map(|i| &self.streams[i])
    }
}

/// One stream's events (in order) folded into its attempts, with its
/// verdict read as `run` reads it.
pub fn stream(id: StreamId, events: &[Event], run: &RecordedRun) -> RecordedStream {
    let mut record = StreamRecord::default();
    events.iter().for_each(|event| record.push(event));
    record.recorded(id, run)
}

/// One attempt's chunks and parsed events, as they come.
type Gathered = (Vec<RecordedChunk>, Vec<(EventClass, u32)>);

/// One stream's events folded, as they come, into what a replay and a
/// verdict need of it, keeping no event: each attempt's head, its chunks'
/// times and sizes, its parsed events' classes and lengths, how it ended,
/// and the stream's [`StreamFold`]. [`stream`] reads a stored stream with
/// it; observe keeps one per call while the call goes.
#[derive(Debug, Clone)]
pub struct StreamRecord {
    fold: StreamFold,
    target: Target,
    context_tokens: Option<u64>,
    attempts: Vec<RecordedAttempt>,
    /// Each attempt's chunks and parsed events, gathered before they are
    /// shared.
    bodies: Vec<Gathered>,
    /// The first and the latest event's times.
    span: Option<(Duration, Duration)>,
}

impl Default for StreamRecord {
    fn default() -> Self {
        StreamRecord {
            fold: StreamFold::default(),
            target: Target::new("", ""),
            context_tokens: None,
            attempts: Vec::new(),
            bodies: Vec::new(),
            span: None,
        }
    }
}

impl StreamRecord {
    /// Folds the stream's next event in.
    pub fn push(&mut self, event: &Event) {
        self.fold.push(event);
        self.span = Some(self.span.map_or((event.at, event.at), |(first, _)| (first, event.at)));
        let attempt = self.attempts.last_mut().filter(|a| a.ordinal == event.attempt);
        let gathered = self.bodies.last_mut().filter(|_| attempt.is_some());
        match (&event.kind, attempt) {
            (EventKind::CallStarted { target, context_tokens }, _) => {
                self.target = target.clone();
                self.context_tokens = *context_tokens;
            }
            (EventKind::AttemptStarted { target, .. }, _) => {
                self.attempts.push(RecordedAttempt {
                    ordinal: event.attempt,
                    target: target.clone(),
                    started: event.at,
                    response: None,
                    chunks: Arc::new([]),
                    events: Arc::new([]),
                    ended: None,
                    stop_reason: None,
                    message: None,
                    body: None,
                });
                self.bodies.push((Vec::new(), Vec::new()));
            }
            (EventKind::HeadersReceived { status, content_type }, Some(attempt)) => {
                attempt.response = Some(RecordedResponse {
                    at: event.at,
                    status: *status,
                    content_type: content_type.clone(),
                    headers: Vec::new(),
                    error_body: None,
                    error_body_cut: false,
                });
            }
            (EventKind::ResponseHeaders { headers }, Some(attempt)) => {
                if let Some(response) = &mut attempt.response {
                    response.headers.clone_from(headers);
                }
            }
            (EventKind::ErrorBody { body, truncated }, Some(attempt)) => {
                if let Some(response) = &mut attempt.response {
                    (response.error_body, response.error_body_cut) = (Some(body.clone()), *truncated);
                }
            }
            (EventKind::ChunkReceived { bytes }, Some(_)) => {
                if let Some((chunks, _)) = gathered {
                    let bytes = u32::try_from(*bytes).unwrap_or(u32::MAX);
                    chunks.push(RecordedChunk { at: event.at, bytes, events: 0 });
                }
            }
            (EventKind::SseReceived { class, chars, .. }, Some(_)) => {
                if let Some((chunks, events)) = gathered
                    && let Some(chunk) = chunks.last_mut()
                {
                    chunk.events += 1;
                    events.push((*class, u32::try_from(*chars).unwrap_or(u32::MAX)));
                }
            }
            (EventKind::AttemptEnded { end, stop_reason }, Some(attempt)) => {
                attempt.ended = Some((event.at, end.clone()));
                attempt.stop_reason.clone_from(stop_reason);
            }
            // The attempt's own classification: the executor's reading
            // after it (a backoff that would cross the deadline, a
            // cancellation in backoff) is not what the attempt's failure was.
            (EventKind::ErrorClassified { message, .. }, Some(attempt))
                if attempt.ended.is_some() && attempt.message.is_none() =>
            {
                attempt.message = Some(message.clone());
            }
            (EventKind::BodyRecorded { body }, Some(attempt)) => attempt.body = Some(body.clone()),
            _ => {}
        }
    }

    /// The fold of the events so far, which the verdict is read from.
    pub fn fold(&self) -> &StreamFold {
        &self.fold
    }

    /// The stream so far as recorded, with its verdict read as `run`
    /// reads it.
    pub fn recorded(&self, id: StreamId, run: &RecordedRun) -> RecordedStream {
        let mut attempts = self.attempts.clone();
        for (attempt, (chunks, events)) in attempts.iter_mut().zip(&self.bodies) {
            (attempt.chunks, attempt.events) = (chunks.as_slice().into(), events.as_slice().into());
        }
        let (started, last_at) = self.span.unwrap_or_default();
        RecordedStream {
            id,
            target: self.target.clone(),
            context_tokens: self.context_tokens,
            course: self.fold.course(),
            verdict: run.judge(id, &self.fold),
            started,
            last_at,
            attempts,
            clocks: self.fold.attempt_clocks(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::category::TimerKind;

    fn at(ms: u64, attempt: u32, kind: EventKind) -> Event {
        Event { at: Duration::from_millis(ms), stream: 3, attempt, kind }
    }

    #[test]
    fn events_fold_into_attempts_with_their_chunks_and_ends() {
        let t = Target::new("p", "m");
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: Some(7) }),
            at(1, 1, EventKind::AttemptStarted { target: t.clone(), credential: None }),
            at(5, 1, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
            at(5, 1, EventKind::ResponseHeaders { headers: vec![("server".into(), "sim".into())] }),
            at(9, 1, EventKind::ChunkReceived { bytes: 30 }),
            at(9, 1, EventKind::SseReceived { class: EventClass::Content, chars: 3, progress: true }),
            at(9, 1, EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false }),
            at(50, 1, EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_millis(41), lag: None }),
            at(50, 1, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None }),
            at(
                50,
                1,
                EventKind::ErrorClassified {
                    category: crate::core::category::Category::Timeout,
                    timer: Some(TimerKind::Idle),
                    status: None,
                    retryable: true,
                    rule: "builtin: timer fired".into(),
                    message: "idle timer fired after 0.041 s".into(),
                },
            ),
            // The executor's own reading after the attempt (review D7).
            at(
                50,
                1,
                EventKind::ErrorClassified {
                    category: crate::core::category::Category::Timeout,
                    timer: Some(TimerKind::Deadline),
                    status: None,
                    retryable: false,
                    rule: "builtin: deadline".into(),
                    message: "a 2.000 s backoff would cross the 30.000 s call deadline".into(),
                },
            ),
            at(60, 2, EventKind::AttemptStarted { target: t.clone(), credential: None }),
        ];
        let stream = &stream(3, &events, &RecordedRun::new(&serde_json::Map::new(), &Default::default()));
        assert_eq!((stream.id, stream.context_tokens, stream.attempts.len()), (3, Some(7), 2));
        let first = &stream.attempts[0];
        assert_eq!(first.response.as_ref().unwrap().headers, [("server".to_owned(), "sim".to_owned())]);
        assert_eq!(first.chunks[0].events, 2);
        assert_eq!(*first.events, [(EventClass::Content, 3), (EventClass::Keepalive, 0)]);
        assert!(first.abandoned() && !first.completed());
        assert_eq!(first.span(), (Duration::from_millis(1), Duration::from_millis(50)));
        assert_eq!(first.message.as_deref(), Some("idle timer fired after 0.041 s"));
        assert_eq!((stream.attempts[1].ordinal, stream.attempts[1].ended.is_none()), (2, true));
        assert_eq!((stream.course.attempts, stream.course.categories.len()), (2, 1));
    }
}
