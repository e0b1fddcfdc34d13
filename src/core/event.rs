//! The typed events the core emits for every decision and observation, and
//! the sink they are delivered to.
//!
//! The core knows nothing of who listens: the recorder, the GUI and the
//! CLI's progress line are all sinks. A sink must never block a stream.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::category::{Category, TimerKind};
use super::failover::Target;
use super::failure::{Failure, TransportKind};
use super::lag_probe::LagSample;

/// Identifies one call within a run.
pub type StreamId = u64;

/// What a parsed stream event is, which decides the timers it resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventClass {
    /// SSE comments (`: keep-alive`) and pings: alive, but no progress.
    Keepalive,
    /// Start, stop, usage and other bookkeeping events.
    Lifecycle,
    /// Reasoning or thinking deltas.
    Reasoning,
    /// Output text deltas.
    Content,
    /// Tool-call argument deltas.
    ToolCall,
    /// An error reported inside the stream.
    Error,
}

impl EventClass {
    /// The name used in tunables and reports.
    pub const fn name(self) -> &'static str {
        match self {
            EventClass::Keepalive => "keepalive",
            EventClass::Lifecycle => "lifecycle",
            EventClass::Reasoning => "reasoning",
            EventClass::Content => "content",
            EventClass::ToolCall => "tool_call",
            EventClass::Error => "error",
        }
    }

    /// Whether this class is output the caller keeps: the first such event
    /// commits the attempt (no failover or retry after it).
    pub const fn is_output(self) -> bool {
        matches!(self, EventClass::Content | EventClass::ToolCall)
    }
}

/// Why the executor sleeps before the next attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SleepReason {
    /// Computed backoff.
    Backoff,
    /// The server asked for this wait (Retry-After or a reset hint).
    ServerRequested {
        /// The header it came from.
        header: String,
    },
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The stream completed.
    Ok,
    /// A transient break after content; the partial text was kept.
    Partial,
    /// The call failed.
    Failed,
    /// The call was cancelled from outside.
    Cancelled,
}

impl Outcome {
    /// The name used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Partial => "partial",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// The phases of one attempt. The attempt is committed once it reaches
/// `Streaming`: from then on the call can neither retry nor fail over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptPhase {
    /// Opening the connection and sending the request.
    Connecting,
    /// Request sent, no response headers yet.
    AwaitingHeaders,
    /// Headers received, no output yet.
    AwaitingFirstContent,
    /// Output has streamed: committed.
    Streaming,
    /// The attempt ended.
    Done,
}

impl AttemptPhase {
    /// Its name, as the JSON and the event log write it.
    pub const fn name(self) -> &'static str {
        match self {
            AttemptPhase::Connecting => "connecting",
            AttemptPhase::AwaitingHeaders => "awaiting_headers",
            AttemptPhase::AwaitingFirstContent => "awaiting_first_content",
            AttemptPhase::Streaming => "streaming",
            AttemptPhase::Done => "done",
        }
    }
}

/// How an attempt ended: the last event of every attempt says which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum AttemptEnd {
    /// The stream said it was done.
    Done,
    /// The transport failed (a clean early EOF is `closed`).
    Transport {
        /// What kind of failure.
        kind: TransportKind,
    },
    /// One of our timers fired.
    Timer {
        /// Which one.
        timer: TimerKind,
    },
    /// The server answered with an error status, or with a body that is
    /// not an event stream.
    Status {
        /// The status.
        status: u16,
    },
    /// The stream carried an error event.
    InStream {
        /// The provider's error type or code, when it gave one.
        code: Option<String>,
    },
    /// The stream's bytes could not be parsed.
    Malformed,
    /// The call was cancelled from outside.
    Cancelled,
}

impl std::fmt::Display for AttemptEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptEnd::Done => f.write_str("done"),
            AttemptEnd::Transport { kind } => f.write_str(kind.describe()),
            AttemptEnd::Timer { timer } => write!(f, "{timer} timer fired"),
            AttemptEnd::Status { status } => write!(f, "HTTP {status}"),
            AttemptEnd::InStream { code: Some(code) } => write!(f, "in-stream error {code}"),
            AttemptEnd::InStream { code: None } => f.write_str("in-stream error"),
            AttemptEnd::Malformed => f.write_str("malformed stream"),
            AttemptEnd::Cancelled => f.write_str("cancelled"),
        }
    }
}

impl AttemptEnd {
    /// How an attempt that failed with `failure` ended.
    pub fn of(failure: &Failure) -> AttemptEnd {
        match failure {
            Failure::Transport { kind, .. } => AttemptEnd::Transport { kind: *kind },
            Failure::Timeout { timer, .. } => AttemptEnd::Timer { timer: *timer },
            Failure::Http { status, .. } | Failure::UnexpectedContentType { status, .. } => {
                AttemptEnd::Status { status: *status }
            }
            Failure::InStream { code, .. } => AttemptEnd::InStream { code: code.clone() },
            Failure::Malformed { .. } => AttemptEnd::Malformed,
            Failure::Cancelled => AttemptEnd::Cancelled,
        }
    }
}

/// An attempt's response body as recorded (`STALLSCOPE_RECORD_BODIES`).
/// Chunk boundaries are those of the attempt's `ChunkReceived` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum RecordedBody {
    /// Each parsed event's text, one entry per `SseReceived` event in order
    /// (empty for events that carry none).
    Text {
        /// The texts.
        texts: Vec<String>,
        /// True when the per-attempt cap cut the recording short.
        truncated: bool,
    },
    /// The exact bytes of the body, as received.
    Raw {
        /// The bytes.
        bytes: Vec<u8>,
        /// True when the per-attempt cap cut the recording short.
        truncated: bool,
    },
}

/// One event: when, which call and attempt, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Monotonic time since the run's epoch.
    pub at: Duration,
    /// The call.
    pub stream: StreamId,
    /// The attempt number within the call, from 1 (0 = between attempts).
    pub attempt: u32,
    /// What happened.
    pub kind: EventKind,
}

/// Everything the core reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A call began.
    CallStarted {
        /// The first target.
        target: Target,
        /// The estimated context size in tokens, when known.
        context_tokens: Option<u64>,
    },
    /// An attempt began against a target.
    AttemptStarted {
        /// Where it goes.
        target: Target,
        /// Index of the pool key used (never the key itself).
        credential: Option<usize>,
    },
    /// The attempt moved to another phase.
    PhaseChanged {
        /// The new phase.
        phase: AttemptPhase,
    },
    /// Response headers arrived.
    HeadersReceived {
        /// HTTP status.
        status: u16,
        /// The `content-type`, if any.
        content_type: Option<String>,
    },
    /// The response headers that decisions and diagnosis read, from an
    /// allowlist (`retry-after*`, rate-limit buckets, `x-should-retry`,
    /// `date`, `content-type`, `content-encoding`, `server`, `via`, `x-cache`, request ids);
    /// never cookies or anything carrying a credential. Follows
    /// `HeadersReceived`.
    ResponseHeaders {
        /// Lower-case name and value, in the order received.
        headers: Vec<(String, String)>,
    },
    /// The start of an error (or non-event-stream) body, bounded, with
    /// anything that looks like a key redacted.
    ErrorBody {
        /// The text.
        body: String,
        /// True when the body was longer than what is kept.
        truncated: bool,
    },
    /// Bytes arrived (resets the idle timer).
    ChunkReceived {
        /// Size of the chunk.
        bytes: usize,
    },
    /// A parsed stream event arrived.
    SseReceived {
        /// Its class.
        class: EventClass,
        /// Characters of text it carried.
        chars: usize,
        /// Whether it reset the data-stall timer.
        progress: bool,
    },
    /// A timer was armed (or re-armed with a new budget).
    TimerArmed {
        /// Which timer.
        timer: TimerKind,
        /// Its budget from now (the throughput floor's: its window).
        after: Duration,
        /// The throughput floor's rate, in progress events per second
        /// over `after`; `None` for every other timer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        floor: Option<f64>,
    },
    /// A timer was switched off for this attempt.
    TimerDisarmed {
        /// Which timer.
        timer: TimerKind,
        /// Why it is off.
        reason: String,
    },
    /// A timer fired.
    TimerFired {
        /// Which timer.
        timer: TimerKind,
        /// Its budget.
        after: Duration,
        /// How late our own runtime was running when it fired (the run's
        /// lag probe over the recent past, or this timer's own late
        /// wake-up, whichever is larger); `None` where it was not measured
        /// (virtual-time replays, older recordings). See [`super::lag`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lag: Option<Duration>,
    },
    /// A timer came due while our own runtime ran late by a tenth of its
    /// budget or more, and was not acted on (guard mode: we do not cut a
    /// stream for our own lateness, see [`super::lag`]); its clock starts
    /// again from here with its whole budget. Stamped when it was noticed.
    /// The call deadline is never held.
    TimerHeld {
        /// Which timer.
        timer: TimerKind,
        /// Its budget.
        after: Duration,
        /// How late our own runtime was running, measured as for
        /// `TimerFired`.
        lag: Duration,
    },
    /// Rate-limit headers were read.
    RateLimitObserved {
        /// Requests left, if reported.
        requests_remaining: Option<u64>,
        /// Tokens left, if reported.
        tokens_remaining: Option<u64>,
        /// Longest reset among exhausted buckets.
        exhausted_reset: Option<Duration>,
    },
    /// A rate-limit bucket is running low (at most a tenth of its limit
    /// left, or none), on any response, successful ones too.
    RateLimitLow {
        /// `requests`, `tokens`, `input_tokens` or `output_tokens`.
        bucket: String,
        /// What is left.
        remaining: u64,
        /// The bucket's size, when reported.
        limit: Option<u64>,
        /// When it refills, when reported.
        reset: Option<Duration>,
    },
    /// The attempt ended, and how: its last event.
    AttemptEnded {
        /// How.
        end: AttemptEnd,
        /// The stop reason the stream reported, if any.
        stop_reason: Option<String>,
    },
    /// The attempt's body, when bodies are recorded.
    BodyRecorded {
        /// What was kept.
        body: RecordedBody,
    },
    /// A failure was classified.
    ErrorClassified {
        /// Its category.
        category: Category,
        /// The timer, when it was a timeout.
        timer: Option<TimerKind>,
        /// HTTP status, when there was one.
        status: Option<u16>,
        /// Whether the category may be retried.
        retryable: bool,
        /// The rule that matched.
        rule: String,
        /// A short description.
        message: String,
    },
    /// The retry decision was made and a sleep begins.
    BackoffScheduled {
        /// The retry number within the call, from 1.
        retry: u32,
        /// The category being retried.
        category: Category,
        /// The un-jittered delay (backoff) or the requested one (server).
        nominal: Duration,
        /// The sleep actually taken.
        sleep: Duration,
        /// Why.
        reason: SleepReason,
    },
    /// A server asked for a longer wait than the cap allows; not slept.
    ServerWaitRefused {
        /// What the server asked for.
        requested: Duration,
        /// The cap (`STALLSCOPE_RETRY_AFTER_MAX_S`).
        cap: Duration,
    },
    /// The fleet-wide retry budget refused a retry.
    RetryBudgetRefused {
        /// The provider.
        provider: String,
        /// Retries in flight at the time.
        in_flight: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The call moved to the next target of its chain.
    FailedOver {
        /// The target it leaves.
        from: Target,
        /// The target it moves to.
        to: Target,
        /// The category that caused it.
        reason: Category,
    },
    /// A pool key was set aside.
    CredentialCooledDown {
        /// The provider.
        provider: String,
        /// The key's index.
        credential: usize,
        /// How long it rests.
        cooldown: Duration,
    },
    /// The next attempt uses another key of the pool.
    CredentialRotated {
        /// The provider.
        provider: String,
        /// The key left.
        from: usize,
        /// The key taken.
        to: usize,
    },
    /// A transient break after content was turned into a partial finish.
    PartialRecovered {
        /// Characters kept.
        chars: usize,
        /// The category of the break.
        category: Category,
    },
    /// The agent whose call observe relays closed its connection before
    /// its response was complete (its own timeout, or it gave up): the
    /// call ends cancelled there, by the agent, not by stallscope.
    AgentDisconnected,
    /// One of our timers would have fired here, under the tunables in
    /// force, on an attempt observe relayed without acting (its clocks are
    /// off): what stallscope's core would have done. Stamped where it
    /// would have fired; sent once the attempt has ended, so it comes
    /// after the attempt's own events in the order sent, and in its place
    /// when read back in time order.
    TimerWouldFire {
        /// Which timer.
        timer: TimerKind,
        /// Its budget.
        after: Duration,
    },
    /// The call ended.
    Finished {
        /// How.
        outcome: Outcome,
        /// Attempts made.
        attempts: u32,
        /// The stop reason reported, if any.
        stop_reason: Option<String>,
    },
}

/// Receives events. Implementations must return quickly and never block
/// the stream: a full buffer drops (and counts) rather than waits.
pub trait EventSink: Send + Sync {
    /// Delivers one event.
    fn emit(&self, event: Event);

    /// Delivers one reading of the run's own scheduling lag (the lag
    /// probe's, about no stream). Sinks that keep no such series ignore it.
    fn runtime_lag(&self, _sample: LagSample) {}
}

/// A sink that discards everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) {}
}

/// A sink that keeps every event in memory (tests, short CLI runs).
#[derive(Debug, Default)]
pub struct VecSink {
    events: Mutex<Vec<Event>>,
}

impl VecSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// The kinds of the events so far, in order.
    pub fn kinds(&self) -> Vec<EventKind> {
        self.events().into_iter().map(|e| e.kind).collect()
    }
}

impl EventSink for VecSink {
    fn emit(&self, event: Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event);
        }
    }
}

impl<S: EventSink + ?Sized> EventSink for std::sync::Arc<S> {
    fn emit(&self, event: Event) {
        (**self).emit(event);
    }

    fn runtime_lag(&self, sample: LagSample) {
        (**self).runtime_lag(sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::category::Category;

    /// A phase's name is the word its JSON writes (the event log shows it
    /// instead of the enum's Rust name, gui review D17).
    #[test]
    fn a_phase_is_named_as_its_json_writes_it() {
        use AttemptPhase::*;
        for phase in [Connecting, AwaitingHeaders, AwaitingFirstContent, Streaming, Done] {
            assert_eq!(serde_json::to_value(phase).unwrap(), phase.name(), "{phase:?}");
        }
    }

    /// Recorded events are read back (history, replay): every kind must
    /// survive its JSON form unchanged.
    #[test]
    fn events_round_trip_through_json() {
        let target = Target::new("p", "org/model");
        let kinds = vec![
            EventKind::CallStarted { target: target.clone(), context_tokens: Some(3) },
            EventKind::AttemptStarted { target: target.clone(), credential: Some(1) },
            EventKind::PhaseChanged { phase: AttemptPhase::Streaming },
            EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) },
            EventKind::ResponseHeaders { headers: vec![("retry-after-ms".into(), "700".into())] },
            EventKind::ErrorBody { body: "{\"error\":\"slow down\"}".into(), truncated: false },
            EventKind::ChunkReceived { bytes: 42 },
            EventKind::SseReceived { class: EventClass::ToolCall, chars: 3, progress: true },
            EventKind::TimerArmed { timer: TimerKind::DataStall, after: Duration::from_millis(1500), floor: None },
            EventKind::TimerDisarmed { timer: TimerKind::Ttfb, reason: "large context".into() },
            EventKind::TimerFired {
                timer: TimerKind::Idle,
                after: Duration::from_secs(2),
                lag: Some(Duration::from_millis(3)),
            },
            EventKind::TimerHeld {
                timer: TimerKind::DataStall,
                after: Duration::from_secs(1),
                lag: Duration::from_millis(350),
            },
            EventKind::RateLimitObserved { requests_remaining: Some(0), tokens_remaining: None, exhausted_reset: None },
            EventKind::RateLimitLow {
                bucket: "tokens".into(),
                remaining: 10,
                limit: Some(1000),
                reset: Some(Duration::from_secs(3)),
            },
            EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) },
            EventKind::AttemptEnded {
                end: AttemptEnd::Transport { kind: TransportKind::KernelTimeout },
                stop_reason: None,
            },
            EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Connect }, stop_reason: None },
            EventKind::AttemptEnded {
                end: AttemptEnd::InStream { code: Some("overloaded".into()) },
                stop_reason: None,
            },
            EventKind::BodyRecorded {
                body: RecordedBody::Text { texts: vec!["Hel".into(), String::new()], truncated: false },
            },
            EventKind::BodyRecorded { body: RecordedBody::Raw { bytes: b"data: {}\n\n".to_vec(), truncated: true } },
            EventKind::ErrorClassified {
                category: Category::RateLimit,
                timer: None,
                status: Some(429),
                retryable: true,
                rule: "builtin: status 429".into(),
                message: "HTTP 429".into(),
            },
            EventKind::BackoffScheduled {
                retry: 1,
                category: Category::RateLimit,
                nominal: Duration::from_millis(700),
                sleep: Duration::from_millis(750),
                reason: SleepReason::ServerRequested { header: "retry-after-ms".into() },
            },
            EventKind::ServerWaitRefused { requested: Duration::from_secs(600), cap: Duration::from_secs(60) },
            EventKind::RetryBudgetRefused { provider: "p".into(), in_flight: 3, limit: 3 },
            EventKind::FailedOver { from: target.clone(), to: Target::new("q", "m"), reason: Category::Overloaded },
            EventKind::CredentialCooledDown { provider: "p".into(), credential: 0, cooldown: Duration::from_secs(300) },
            EventKind::CredentialRotated { provider: "p".into(), from: 0, to: 1 },
            EventKind::PartialRecovered { chars: 5, category: Category::Connection },
            EventKind::Finished { outcome: Outcome::Partial, attempts: 2, stop_reason: Some("length".into()) },
        ];
        for kind in kinds {
            let event = Event { at: Duration::from_micros(1234), stream: 7, attempt: 2, kind };
            let json = serde_json::to_string(&event).unwrap();
            assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), event, "{json}");
        }
    }
}
