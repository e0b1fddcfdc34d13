//! The compact encoding of [`Event`]s in the `events` table.
//!
//! Every event is one row of integers: `stream`, `attempt`, `at_ns`
//! (nanoseconds since the run's epoch: microseconds would not read back
//! equal), `kind` (the codes in [`kind`]), and up to three numbers that
//! plots read without parsing anything: `code` (a timer, category, class,
//! phase or outcome code), `value` (bytes, characters, a status, or a
//! duration in ns) and `aux`. Only kinds that carry text (a target, a rule,
//! a reason) have a `detail`, as JSON.
//!
//! Byte chunks and SSE events are nearly all of a run's events, so within
//! one written batch the consecutive chunk and SSE events of one stream and
//! attempt share a single row of kind [`kind::PACKED`]: `n` events, the
//! first one's `at_ns`, the byte total in `value`, the character total in
//! `aux`, and in `packed` one entry per event: a tag byte (0 = chunk,
//! `1 + 2 × class + progress` = SSE event), the zigzag-varint delta in ns
//! from the previous event and the varint size. A stream's other events
//! close its pack, so reading a stream's rows by `(at_ns, id)` and
//! unpacking them gives its events back in the order they were written.
//!
//! An event whose numbers do not fit SQLite's 64-bit integers is stored as
//! [`kind::GENERIC`]: its whole serde JSON in `detail`.
//!
//! A recorded body ([`EventKind::BodyRecorded`]) keeps its place in the
//! stream as an events row of kind [`kind::BODY_RECORDED`] (mode, length,
//! truncation), while the body itself, zlib-compressed on the writer
//! thread, is a row of the `bodies` table with that row's id: bodies are
//! large and read rarely, and a stream's events read without them stay a
//! range scan of small rows. Reading a stream gives the event back whole,
//! in its place.
//!
//! The codes are part of the file format: a code never changes meaning;
//! new kinds get new codes.

use std::collections::HashMap;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use crate::core::category::{Category, TimerKind};
use crate::core::event::{
    AttemptEnd, AttemptPhase, Event, EventClass, EventKind, Outcome, RecordedBody, SleepReason, StreamId,
};
use crate::core::failover::Target;
use crate::core::failure::TransportKind;

/// The `events.kind` codes.
pub mod kind {
    /// Any event, as its serde JSON in `detail` (numbers too large for a column).
    pub const GENERIC: i64 = 0;
    /// `CallStarted`: `value` context tokens; detail `[provider, model]`.
    pub const CALL_STARTED: i64 = 1;
    /// `AttemptStarted`: `value` credential index; detail `[provider, model]`.
    pub const ATTEMPT_STARTED: i64 = 2;
    /// `PhaseChanged`: `code` phase.
    pub const PHASE_CHANGED: i64 = 3;
    /// `HeadersReceived`: `value` status; detail content type.
    pub const HEADERS_RECEIVED: i64 = 4;
    /// `ChunkReceived`: `value` bytes.
    pub const CHUNK_RECEIVED: i64 = 5;
    /// `SseReceived`: `code` class, `value` characters, `aux` 1 when it was progress.
    pub const SSE_RECEIVED: i64 = 6;
    /// `TimerArmed`: `code` timer, `value` budget in ns, `aux` the
    /// throughput floor in millionths of an event per second.
    pub const TIMER_ARMED: i64 = 7;
    /// `TimerDisarmed`: `code` timer; detail reason.
    pub const TIMER_DISARMED: i64 = 8;
    /// `TimerFired`: `code` timer, `value` budget in ns, `aux` the runtime's
    /// lag in ns when it was measured (NULL otherwise).
    pub const TIMER_FIRED: i64 = 9;
    /// `RateLimitObserved`: `value` requests left, `aux` tokens left; detail `{"reset_ns"}`.
    pub const RATE_LIMIT_OBSERVED: i64 = 10;
    /// `ErrorClassified`: `code` category, `value` status, `aux` timer; detail `{retryable, rule, message}`.
    pub const ERROR_CLASSIFIED: i64 = 11;
    /// `BackoffScheduled`: `code` category, `value` sleep in ns, `aux` nominal in ns; detail `{retry, header?}`.
    pub const BACKOFF_SCHEDULED: i64 = 12;
    /// `ServerWaitRefused`: `value` requested ns, `aux` cap ns.
    pub const SERVER_WAIT_REFUSED: i64 = 13;
    /// `RetryBudgetRefused`: `value` in flight, `aux` limit; detail provider.
    pub const RETRY_BUDGET_REFUSED: i64 = 14;
    /// `FailedOver`: `code` category; detail `[from provider, from model, to provider, to model]`.
    pub const FAILED_OVER: i64 = 15;
    /// `CredentialCooledDown`: `value` cooldown ns, `aux` credential; detail provider.
    pub const CREDENTIAL_COOLED_DOWN: i64 = 16;
    /// `CredentialRotated`: `value` key taken, `aux` key left; detail provider.
    pub const CREDENTIAL_ROTATED: i64 = 17;
    /// `PartialRecovered`: `code` category, `value` characters kept.
    pub const PARTIAL_RECOVERED: i64 = 18;
    /// `Finished`: `code` outcome, `value` attempts; detail stop reason.
    pub const FINISHED: i64 = 19;
    /// `ResponseHeaders`: detail `[[name, value], …]` in the order received.
    pub const RESPONSE_HEADERS: i64 = 20;
    /// `ErrorBody`: `value` the body's length in bytes, `aux` 1 when it was
    /// truncated; detail the body.
    pub const ERROR_BODY: i64 = 21;
    /// `RateLimitLow`: `code` bucket (`super::bucket_code`; NULL for a bucket
    /// without a code, named in detail), `value` remaining, `aux` limit;
    /// detail `{"bucket"?, "reset_ns"?}` when either applies.
    pub const RATE_LIMIT_LOW: i64 = 22;
    /// `AttemptEnded`: `code` how it ended (the [`super::end`] codes),
    /// `value` the status (`status`), timer code (`timer`) or transport-kind
    /// code (`transport`); detail `{"stop_reason"?, "code"?}` (`code`: the
    /// in-stream error's).
    pub const ATTEMPT_ENDED: i64 = 23;
    /// `BodyRecorded`: `code` mode (0 text, 1 raw), `value` the body's
    /// length before compression (raw: its bytes; text: the JSON array of
    /// its texts), `aux` 1 when the per-attempt cap cut it; the body is the
    /// `bodies` row whose `event_id` is this row's id.
    pub const BODY_RECORDED: i64 = 24;
    /// `AgentDisconnected`: nothing more.
    pub const AGENT_DISCONNECTED: i64 = 25;
    /// `TimerWouldFire`: `code` timer, `value` budget in ns.
    pub const TIMER_WOULD_FIRE: i64 = 26;
    /// `TimerHeld`: `code` timer, `value` budget in ns, `aux` the runtime's
    /// lag in ns.
    pub const TIMER_HELD: i64 = 27;
    /// `n` consecutive chunk and SSE events of one stream and attempt.
    pub const PACKED: i64 = 100;
}

/// Declares a stable integer code for each variant of a fieldless enum.
macro_rules! codes {
    ($(#[$doc:meta])* $to:ident, $from:ident, $ty:ident { $($variant:ident = $code:literal),+ $(,)? }) => {
        $(#[$doc])*
        pub fn $to(value: $ty) -> i64 {
            match value {
                $($ty::$variant => $code,)+
            }
        }

        /// The value of a code, if it is one.
        pub fn $from(code: i64) -> Option<$ty> {
            match code {
                $($code => Some($ty::$variant),)+
                _ => None,
            }
        }
    };
}

/// A throughput floor is stored in millionths of an event per second.
const PER_MILLIONTH: f64 = 1e6;

codes!(
    /// The code of a timer (`code` of timer events, `aux` of errors).
    timer_code, timer_from, TimerKind {
        Connect = 0, Ttfb = 1, Idle = 2, DataStall = 3, Total = 4, Deadline = 5, MinRate = 6,
    }
);
codes!(
    /// The code of an error category.
    category_code, category_from, Category {
        Connection = 0, Timeout = 1, RateLimit = 2, Overloaded = 3, ServerError = 4,
        Auth = 5, InvalidRequest = 6, Cancelled = 7, Permanent = 8,
    }
);
codes!(
    /// The code of an SSE event class.
    class_code, class_from, EventClass {
        Keepalive = 0, Lifecycle = 1, Reasoning = 2, Content = 3, ToolCall = 4, Error = 5,
    }
);
codes!(
    /// The code of an attempt phase.
    phase_code, phase_from, AttemptPhase {
        Connecting = 0, AwaitingHeaders = 1, AwaitingFirstContent = 2, Streaming = 3, Done = 4,
    }
);
codes!(
    /// The code of a call outcome.
    outcome_code, outcome_from, Outcome {
        Ok = 0, Partial = 1, Failed = 2, Cancelled = 3,
    }
);

codes!(
    /// The code of a transport failure kind (`value` of `AttemptEnded` rows).
    transport_code, transport_from, TransportKind {
        Refused = 0, Unreachable = 1, Dns = 2, Tls = 3, Proxy = 4, ConnectTimedOut = 5,
        Connect = 6, Reset = 7, Closed = 8, KernelTimeout = 9, Read = 10, Other = 11,
    }
);

/// The codes of how an attempt ended (`code` of `AttemptEnded` rows and
/// `attempts.end_code`).
pub mod end {
    /// The stream said it was done.
    pub const DONE: i64 = 0;
    /// The transport failed; `value` is the transport-kind code.
    pub const TRANSPORT: i64 = 1;
    /// A timer fired; `value` is the timer code.
    pub const TIMER: i64 = 2;
    /// An error status or a body that is not an event stream; `value` is the status.
    pub const STATUS: i64 = 3;
    /// An error event in the stream; its code, if any, is in the detail.
    pub const IN_STREAM: i64 = 4;
    /// The stream could not be parsed.
    pub const MALFORMED: i64 = 5;
    /// Cancelled from outside.
    pub const CANCELLED: i64 = 6;
}

/// How an attempt ended as its `end` code and the number that goes with it.
pub fn end_code(end: &AttemptEnd) -> (i64, Option<i64>) {
    match end {
        AttemptEnd::Done => (end::DONE, None),
        AttemptEnd::Transport { kind } => (end::TRANSPORT, Some(transport_code(*kind))),
        AttemptEnd::Timer { timer } => (end::TIMER, Some(timer_code(*timer))),
        AttemptEnd::Status { status } => (end::STATUS, Some(i64::from(*status))),
        AttemptEnd::InStream { .. } => (end::IN_STREAM, None),
        AttemptEnd::Malformed => (end::MALFORMED, None),
        AttemptEnd::Cancelled => (end::CANCELLED, None),
    }
}

/// The attempt end an `end` code, its number and the in-stream code stand for.
fn end_from(code: i64, value: Option<i64>, in_stream: Option<String>) -> Option<AttemptEnd> {
    Some(match code {
        end::DONE => AttemptEnd::Done,
        end::TRANSPORT => AttemptEnd::Transport { kind: transport_from(value?)? },
        end::TIMER => AttemptEnd::Timer { timer: timer_from(value?)? },
        end::STATUS => AttemptEnd::Status { status: u16::try_from(value?).ok()? },
        end::IN_STREAM => AttemptEnd::InStream { code: in_stream },
        end::MALFORMED => AttemptEnd::Malformed,
        end::CANCELLED => AttemptEnd::Cancelled,
        _ => return None,
    })
}

/// The rate-limit buckets with a code (`code` of `RateLimitLow` rows): the
/// code is the index.
const BUCKETS: [&str; 4] = ["requests", "tokens", "input_tokens", "output_tokens"];

/// The code of a rate-limit bucket, when it has one.
pub fn bucket_code(bucket: &str) -> Option<i64> {
    BUCKETS.iter().position(|b| *b == bucket).map(|i| i as i64)
}

/// The modes of recorded bodies (`bodies.mode`): the code (`code` of
/// `BodyRecorded` rows) is the index.
const BODY_MODES: [&str; 2] = ["text", "raw"];

fn body_mode(body: &RecordedBody) -> i64 {
    match body {
        RecordedBody::Text { .. } => 0,
        RecordedBody::Raw { .. } => 1,
    }
}

/// At most this many events share one packed row (keeps rows within a page).
const MAX_PACK: usize = 256;

/// One row of the `events` table.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Row {
    pub(crate) stream: i64,
    pub(crate) attempt: i64,
    pub(crate) at_ns: i64,
    pub(crate) kind: i64,
    pub(crate) n: i64,
    pub(crate) code: Option<i64>,
    pub(crate) value: Option<i64>,
    pub(crate) aux: Option<i64>,
    pub(crate) detail: Option<String>,
    pub(crate) packed: Option<Vec<u8>>,
    /// The compressed body of a `BodyRecorded` row (for the `bodies` table).
    pub(crate) body: Option<Vec<u8>>,
}

fn ns(d: Duration) -> Option<i64> {
    i64::try_from(d.as_nanos()).ok()
}

fn int(v: impl TryInto<i64>) -> Option<i64> {
    v.try_into().ok()
}

/// An optional number: `None` when it does not fit, `Some(None)` when absent.
fn opt_int(v: Option<impl TryInto<i64>>) -> Option<Option<i64>> {
    match v {
        None => Some(None),
        Some(v) => int(v).map(Some),
    }
}

fn json(value: &impl Serialize) -> Option<String> {
    serde_json::to_string(value).ok()
}

/// The detail of an `ErrorClassified` row.
#[derive(Serialize, Deserialize)]
struct ErrorDetail {
    retryable: bool,
    rule: String,
    message: String,
}

/// The detail of a `BackoffScheduled` row; `header` is set for server-requested waits.
#[derive(Serialize, Deserialize)]
struct BackoffDetail {
    retry: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    header: Option<String>,
}

/// The detail of a `RateLimitObserved` row with a reset.
#[derive(Serialize, Deserialize)]
struct ResetDetail {
    reset_ns: u64,
}

/// The detail of a `RateLimitLow` row: the bucket when it has no code, the reset when given.
#[derive(Serialize, Deserialize)]
struct LowDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bucket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reset_ns: Option<u64>,
}

/// The detail of an `AttemptEnded` row: the stop reason and the in-stream error code, when given.
#[derive(Serialize, Deserialize)]
struct EndDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
}

/// The JSON of a detail, or no detail when `empty`.
fn detail_unless(empty: bool, value: &impl Serialize) -> Option<Option<String>> {
    if empty { Some(None) } else { json(value).map(Some) }
}

/// A recorded body as stored: what it holds before compression (raw: its
/// bytes; text: the JSON array of its texts) and whether it was cut.
fn body_payload(body: &RecordedBody) -> Option<(std::borrow::Cow<'_, [u8]>, bool)> {
    match body {
        RecordedBody::Raw { bytes, truncated } => Some((std::borrow::Cow::Borrowed(bytes.as_slice()), *truncated)),
        RecordedBody::Text { texts, truncated } => Some((serde_json::to_vec(texts).ok()?.into(), *truncated)),
    }
}

/// zlib at its fastest level: SSE text still shrinks several times, and the
/// writer thread must keep up with the run.
fn compress(data: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut encoder =
        flate2::write::ZlibEncoder::new(Vec::with_capacity(data.len() / 4 + 64), flate2::Compression::fast());
    encoder.write_all(data).ok()?;
    encoder.finish().ok()
}

/// The body a `bodies` row holds, checked against the length it was stored with.
fn decompress(data: &[u8], length: i64) -> Option<Vec<u8>> {
    use std::io::Read;
    let length = u64::try_from(length).ok()?;
    let mut out = Vec::with_capacity(usize::try_from(length).ok()?);
    // One byte more than expected tells a longer body from an exact one.
    flate2::read::ZlibDecoder::new(data).take(length + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 == length).then_some(out)
}

/// A chunk or SSE event as its pack tag and size; `None` for other kinds.
fn hot(kind: &EventKind) -> Option<(u8, u64)> {
    match *kind {
        EventKind::ChunkReceived { bytes } => Some((0, bytes as u64)),
        EventKind::SseReceived { class, chars, progress } => {
            Some((1 + 2 * class_code(class) as u8 + u8::from(progress), chars as u64))
        }
        _ => None,
    }
}

/// The event a pack tag and size stand for.
fn from_hot(tag: u8, size: u64) -> Option<EventKind> {
    let size = usize::try_from(size).ok()?;
    if tag == 0 {
        return Some(EventKind::ChunkReceived { bytes: size });
    }
    let class = class_from(i64::from((tag - 1) / 2))?;
    Some(EventKind::SseReceived { class, chars: size, progress: (tag - 1) % 2 == 1 })
}

/// One event as one row (never packed).
pub(crate) fn encode(event: &Event) -> Row {
    encode_columns(event).unwrap_or_else(|| Row {
        stream: event.stream as i64,
        attempt: i64::from(event.attempt),
        at_ns: ns(event.at).unwrap_or(i64::MAX),
        kind: kind::GENERIC,
        n: 1,
        detail: json(event),
        ..Row::default()
    })
}

/// The columns of an event, or `None` when a number does not fit.
fn encode_columns(event: &Event) -> Option<Row> {
    use kind::*;
    let target = |t: &Target| json(&(&t.provider, &t.model));
    let mut body = None;
    let (kind, code, value, aux, detail) = match &event.kind {
        EventKind::ResponseHeaders { headers } => (RESPONSE_HEADERS, None, None, None, json(headers)),
        EventKind::ErrorBody { body, truncated } => {
            (ERROR_BODY, None, Some(int(body.len())?), Some(i64::from(*truncated)), json(body))
        }
        EventKind::RateLimitLow { bucket, remaining, limit, reset } => {
            let code = bucket_code(bucket);
            let reset_ns = match reset {
                Some(d) => Some(u64::try_from(d.as_nanos()).ok()?),
                None => None,
            };
            let detail = LowDetail { bucket: code.is_none().then(|| bucket.clone()), reset_ns };
            let empty = detail.bucket.is_none() && detail.reset_ns.is_none();
            (RATE_LIMIT_LOW, code, Some(int(*remaining)?), opt_int(*limit)?, detail_unless(empty, &detail)?)
        }
        EventKind::AttemptEnded { end, stop_reason } => {
            let (how, value) = end_code(end);
            let in_stream = match end {
                AttemptEnd::InStream { code } => code.clone(),
                _ => None,
            };
            let detail = EndDetail { stop_reason: stop_reason.clone(), code: in_stream };
            let empty = detail.stop_reason.is_none() && detail.code.is_none();
            (ATTEMPT_ENDED, Some(how), value, None, detail_unless(empty, &detail)?)
        }
        EventKind::BodyRecorded { body: recorded } => {
            let (payload, truncated) = body_payload(recorded)?;
            body = Some(compress(&payload)?);
            (BODY_RECORDED, Some(body_mode(recorded)), Some(int(payload.len())?), Some(i64::from(truncated)), None)
        }
        EventKind::CallStarted { target: t, context_tokens } => {
            (CALL_STARTED, None, opt_int(*context_tokens)?, None, target(t))
        }
        EventKind::AttemptStarted { target: t, credential } => {
            (ATTEMPT_STARTED, None, opt_int(*credential)?, None, target(t))
        }
        EventKind::PhaseChanged { phase } => (PHASE_CHANGED, Some(phase_code(*phase)), None, None, None),
        EventKind::HeadersReceived { status, content_type } => {
            (HEADERS_RECEIVED, None, Some(i64::from(*status)), None, content_type.as_ref().and_then(json))
        }
        EventKind::ChunkReceived { bytes } => (CHUNK_RECEIVED, None, Some(int(*bytes)?), None, None),
        EventKind::SseReceived { class, chars, progress } => {
            (SSE_RECEIVED, Some(class_code(*class)), Some(int(*chars)?), Some(i64::from(*progress)), None)
        }
        EventKind::TimerArmed { timer, after, floor } => {
            let floor = floor.map(|f| (f * PER_MILLIONTH).round() as i64);
            (TIMER_ARMED, Some(timer_code(*timer)), Some(ns(*after)?), floor, None)
        }
        EventKind::TimerDisarmed { timer, reason } => {
            (TIMER_DISARMED, Some(timer_code(*timer)), None, None, json(reason))
        }
        EventKind::TimerFired { timer, after, lag } => {
            let lag = match lag {
                Some(lag) => Some(ns(*lag)?),
                None => None,
            };
            (TIMER_FIRED, Some(timer_code(*timer)), Some(ns(*after)?), lag, None)
        }
        EventKind::TimerHeld { timer, after, lag } => {
            (TIMER_HELD, Some(timer_code(*timer)), Some(ns(*after)?), Some(ns(*lag)?), None)
        }
        EventKind::RateLimitObserved { requests_remaining, tokens_remaining, exhausted_reset } => {
            let reset = match exhausted_reset {
                Some(d) => Some(json(&ResetDetail { reset_ns: u64::try_from(d.as_nanos()).ok()? })?),
                None => None,
            };
            (RATE_LIMIT_OBSERVED, None, opt_int(*requests_remaining)?, opt_int(*tokens_remaining)?, reset)
        }
        EventKind::ErrorClassified { category, timer, status, retryable, rule, message } => {
            let detail = ErrorDetail { retryable: *retryable, rule: rule.clone(), message: message.clone() };
            (
                ERROR_CLASSIFIED,
                Some(category_code(*category)),
                status.map(i64::from),
                timer.map(timer_code),
                json(&detail),
            )
        }
        EventKind::BackoffScheduled { retry, category, nominal, sleep, reason } => {
            let header = match reason {
                SleepReason::Backoff => None,
                SleepReason::ServerRequested { header } => Some(header.clone()),
            };
            let detail = BackoffDetail { retry: *retry, header };
            (BACKOFF_SCHEDULED, Some(category_code(*category)), Some(ns(*sleep)?), Some(ns(*nominal)?), json(&detail))
        }
        EventKind::ServerWaitRefused { requested, cap } => {
            (SERVER_WAIT_REFUSED, None, Some(ns(*requested)?), Some(ns(*cap)?), None)
        }
        EventKind::RetryBudgetRefused { provider, in_flight, limit } => {
            (RETRY_BUDGET_REFUSED, None, Some(int(*in_flight)?), Some(int(*limit)?), json(provider))
        }
        EventKind::FailedOver { from, to, reason } => {
            let detail = json(&(&from.provider, &from.model, &to.provider, &to.model));
            (FAILED_OVER, Some(category_code(*reason)), None, None, detail)
        }
        EventKind::CredentialCooledDown { provider, credential, cooldown } => {
            (CREDENTIAL_COOLED_DOWN, None, Some(ns(*cooldown)?), Some(int(*credential)?), json(provider))
        }
        EventKind::CredentialRotated { provider, from, to } => {
            (CREDENTIAL_ROTATED, None, Some(int(*to)?), Some(int(*from)?), json(provider))
        }
        EventKind::AgentDisconnected => (AGENT_DISCONNECTED, None, None, None, None),
        EventKind::TimerWouldFire { timer, after } => {
            (TIMER_WOULD_FIRE, Some(timer_code(*timer)), Some(ns(*after)?), None, None)
        }
        EventKind::PartialRecovered { chars, category } => {
            (PARTIAL_RECOVERED, Some(category_code(*category)), Some(int(*chars)?), None, None)
        }
        EventKind::Finished { outcome, attempts, stop_reason } => (
            FINISHED,
            Some(outcome_code(*outcome)),
            Some(i64::from(*attempts)),
            None,
            stop_reason.as_ref().and_then(json),
        ),
    };
    Some(Row {
        stream: event.stream as i64,
        attempt: i64::from(event.attempt),
        at_ns: ns(event.at)?,
        kind,
        n: 1,
        code,
        value,
        aux,
        detail,
        packed: None,
        body,
    })
}

/// The consecutive chunk and SSE events of one stream and attempt, being packed.
struct Pack {
    stream: StreamId,
    attempt: u32,
    at_ns: i64,
    last_ns: i64,
    n: usize,
    first: (u8, u64),
    bytes: u64,
    chars: u64,
    buf: Vec<u8>,
}

impl Pack {
    fn new(stream: StreamId, attempt: u32, at_ns: i64, tag: u8, size: u64) -> Self {
        let mut pack = Pack {
            stream,
            attempt,
            at_ns,
            last_ns: at_ns,
            n: 0,
            first: (tag, size),
            bytes: 0,
            chars: 0,
            buf: Vec::with_capacity(64),
        };
        pack.push(tag, size, at_ns);
        pack
    }

    fn push(&mut self, tag: u8, size: u64, at_ns: i64) {
        self.buf.push(tag);
        put_varint(&mut self.buf, zigzag(at_ns.wrapping_sub(self.last_ns)));
        put_varint(&mut self.buf, size);
        self.last_ns = at_ns;
        self.n += 1;
        if tag == 0 {
            self.bytes = self.bytes.saturating_add(size);
        } else {
            self.chars = self.chars.saturating_add(size);
        }
    }

    fn into_row(self) -> Row {
        let (stream, attempt) = (self.stream as i64, i64::from(self.attempt));
        if self.n == 1 {
            // A lone event reads better as its own kind.
            let (tag, size) = self.first;
            let (kind, code, aux) = if tag == 0 {
                (kind::CHUNK_RECEIVED, None, None)
            } else {
                (kind::SSE_RECEIVED, Some(i64::from((tag - 1) / 2)), Some(i64::from((tag - 1) % 2)))
            };
            let value = Some(int(size).unwrap_or(i64::MAX));
            return Row { stream, attempt, at_ns: self.at_ns, kind, n: 1, code, value, aux, ..Row::default() };
        }
        Row {
            stream,
            attempt,
            at_ns: self.at_ns,
            kind: kind::PACKED,
            n: self.n as i64,
            code: None,
            value: Some(int(self.bytes).unwrap_or(i64::MAX)),
            aux: Some(int(self.chars).unwrap_or(i64::MAX)),
            detail: None,
            packed: Some(self.buf),
            body: None,
        }
    }
}

/// The rows of one batch: chunk and SSE events packed per stream and
/// attempt, every other event on its own row. Each stream's rows come out
/// in its order; the order across streams is unspecified.
pub(crate) fn encode_batch(events: &[Event]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut open: HashMap<StreamId, Pack> = HashMap::new();
    for event in events {
        let packable = hot(&event.kind).and_then(|h| Some((h, ns(event.at)?)));
        match packable {
            Some(((tag, size), at)) => match open.get_mut(&event.stream) {
                Some(pack) if pack.attempt == event.attempt && pack.n < MAX_PACK => pack.push(tag, size, at),
                _ => {
                    let pack = Pack::new(event.stream, event.attempt, at, tag, size);
                    if let Some(closed) = open.insert(event.stream, pack) {
                        rows.push(closed.into_row());
                    }
                }
            },
            None => {
                if let Some(closed) = open.remove(&event.stream) {
                    rows.push(closed.into_row());
                }
                rows.push(encode(event));
            }
        }
    }
    rows.extend(open.into_values().map(Pack::into_row));
    rows
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// The columns of a row as read.
pub(crate) struct Columns<'a> {
    pub(crate) stream: i64,
    pub(crate) attempt: i64,
    pub(crate) at_ns: i64,
    pub(crate) kind: i64,
    pub(crate) n: i64,
    pub(crate) code: Option<i64>,
    pub(crate) value: Option<i64>,
    pub(crate) aux: Option<i64>,
    pub(crate) detail: Option<&'a str>,
    pub(crate) packed: Option<&'a [u8]>,
    /// The compressed body of a `BodyRecorded` row, from the `bodies` table.
    pub(crate) body: Option<Vec<u8>>,
}

fn duration(ns: i64) -> Option<Duration> {
    u64::try_from(ns).ok().map(Duration::from_nanos)
}

fn parse<'a, T: Deserialize<'a>>(detail: Option<&'a str>) -> Option<T> {
    serde_json::from_str(detail?).ok()
}

fn target(provider: String, model: String) -> Target {
    Target { provider, model }
}

/// Appends the events a row stands for to `out`; `Err` describes a row
/// that cannot be read.
pub(crate) fn decode(row: &Columns<'_>, out: &mut Vec<Event>) -> Result<(), String> {
    let bad = || format!("event row of kind {} at {} ns in stream {} cannot be read", row.kind, row.at_ns, row.stream);
    let stream = row.stream as u64;
    let attempt = u32::try_from(row.attempt).map_err(|_| bad())?;
    if row.kind == kind::PACKED {
        let buf = row.packed.ok_or_else(bad)?;
        let (mut pos, mut at) = (0usize, row.at_ns);
        out.reserve(usize::try_from(row.n).unwrap_or(0));
        for _ in 0..row.n {
            let tag = *buf.get(pos).ok_or_else(bad)?;
            pos += 1;
            let delta = get_varint(buf, &mut pos).map(unzigzag).ok_or_else(bad)?;
            at = at.checked_add(delta).ok_or_else(bad)?;
            let size = get_varint(buf, &mut pos).ok_or_else(bad)?;
            let kind = from_hot(tag, size).ok_or_else(bad)?;
            out.push(Event { at: duration(at).ok_or_else(bad)?, stream, attempt, kind });
        }
        return Ok(());
    }
    if row.kind == kind::GENERIC {
        let event: Event = parse(row.detail).ok_or_else(bad)?;
        out.push(event);
        return Ok(());
    }
    let kind = decode_kind(row).ok_or_else(bad)?;
    out.push(Event { at: duration(row.at_ns).ok_or_else(bad)?, stream, attempt, kind });
    Ok(())
}

fn decode_kind(row: &Columns<'_>) -> Option<EventKind> {
    use kind::*;
    let code = || row.code;
    let value = || row.value;
    let aux = || row.aux;
    let usize_of = |v: Option<i64>| v.and_then(|v| usize::try_from(v).ok());
    let text = || parse::<String>(row.detail);
    Some(match row.kind {
        CALL_STARTED => {
            let (provider, model) = parse(row.detail)?;
            let context_tokens = match value() {
                Some(v) => Some(u64::try_from(v).ok()?),
                None => None,
            };
            EventKind::CallStarted { target: target(provider, model), context_tokens }
        }
        ATTEMPT_STARTED => {
            let (provider, model) = parse(row.detail)?;
            let credential = match value() {
                Some(v) => Some(usize::try_from(v).ok()?),
                None => None,
            };
            EventKind::AttemptStarted { target: target(provider, model), credential }
        }
        PHASE_CHANGED => EventKind::PhaseChanged { phase: phase_from(code()?)? },
        HEADERS_RECEIVED => EventKind::HeadersReceived {
            status: u16::try_from(value()?).ok()?,
            content_type: match row.detail {
                Some(_) => Some(text()?),
                None => None,
            },
        },
        CHUNK_RECEIVED => EventKind::ChunkReceived { bytes: usize_of(value())? },
        SSE_RECEIVED => {
            EventKind::SseReceived { class: class_from(code()?)?, chars: usize_of(value())?, progress: aux()? != 0 }
        }
        TIMER_ARMED => EventKind::TimerArmed {
            timer: timer_from(code()?)?,
            after: duration(value()?)?,
            floor: aux().map(|f| f as f64 / PER_MILLIONTH),
        },
        TIMER_DISARMED => EventKind::TimerDisarmed { timer: timer_from(code()?)?, reason: text()? },
        TIMER_FIRED => EventKind::TimerFired {
            timer: timer_from(code()?)?,
            after: duration(value()?)?,
            lag: match row.aux {
                Some(lag) => Some(duration(lag)?),
                None => None,
            },
        },
        TIMER_HELD => {
            EventKind::TimerHeld { timer: timer_from(code()?)?, after: duration(value()?)?, lag: duration(aux()?)? }
        }
        RATE_LIMIT_OBSERVED => {
            let u64_of = |v: Option<i64>| match v {
                Some(v) => u64::try_from(v).ok().map(Some),
                None => Some(None),
            };
            let exhausted_reset = match row.detail {
                Some(_) => Some(Duration::from_nanos(parse::<ResetDetail>(row.detail)?.reset_ns)),
                None => None,
            };
            EventKind::RateLimitObserved {
                requests_remaining: u64_of(value())?,
                tokens_remaining: u64_of(aux())?,
                exhausted_reset,
            }
        }
        ERROR_CLASSIFIED => {
            let detail: ErrorDetail = parse(row.detail)?;
            let timer = match aux() {
                Some(code) => Some(timer_from(code)?),
                None => None,
            };
            let status = match value() {
                Some(v) => Some(u16::try_from(v).ok()?),
                None => None,
            };
            EventKind::ErrorClassified {
                category: category_from(code()?)?,
                timer,
                status,
                retryable: detail.retryable,
                rule: detail.rule,
                message: detail.message,
            }
        }
        BACKOFF_SCHEDULED => {
            let detail: BackoffDetail = parse(row.detail)?;
            EventKind::BackoffScheduled {
                retry: detail.retry,
                category: category_from(code()?)?,
                nominal: duration(aux()?)?,
                sleep: duration(value()?)?,
                reason: match detail.header {
                    Some(header) => SleepReason::ServerRequested { header },
                    None => SleepReason::Backoff,
                },
            }
        }
        SERVER_WAIT_REFUSED => EventKind::ServerWaitRefused { requested: duration(value()?)?, cap: duration(aux()?)? },
        RETRY_BUDGET_REFUSED => {
            EventKind::RetryBudgetRefused { provider: text()?, in_flight: usize_of(value())?, limit: usize_of(aux())? }
        }
        FAILED_OVER => {
            let (from_provider, from_model, to_provider, to_model) = parse(row.detail)?;
            EventKind::FailedOver {
                from: target(from_provider, from_model),
                to: target(to_provider, to_model),
                reason: category_from(code()?)?,
            }
        }
        CREDENTIAL_COOLED_DOWN => EventKind::CredentialCooledDown {
            provider: text()?,
            credential: usize_of(aux())?,
            cooldown: duration(value()?)?,
        },
        CREDENTIAL_ROTATED => {
            EventKind::CredentialRotated { provider: text()?, from: usize_of(aux())?, to: usize_of(value())? }
        }
        PARTIAL_RECOVERED => {
            EventKind::PartialRecovered { chars: usize_of(value())?, category: category_from(code()?)? }
        }
        RESPONSE_HEADERS => EventKind::ResponseHeaders { headers: parse(row.detail)? },
        ERROR_BODY => EventKind::ErrorBody { body: text()?, truncated: aux()? != 0 },
        RATE_LIMIT_LOW => {
            let detail = match row.detail {
                Some(_) => parse(row.detail)?,
                None => LowDetail { bucket: None, reset_ns: None },
            };
            let bucket = match code() {
                Some(code) => (*BUCKETS.get(usize::try_from(code).ok()?)?).to_owned(),
                None => detail.bucket?,
            };
            EventKind::RateLimitLow {
                bucket,
                remaining: u64::try_from(value()?).ok()?,
                limit: match aux() {
                    Some(v) => Some(u64::try_from(v).ok()?),
                    None => None,
                },
                reset: detail.reset_ns.map(Duration::from_nanos),
            }
        }
        ATTEMPT_ENDED => {
            let detail = match row.detail {
                Some(_) => parse(row.detail)?,
                None => EndDetail { stop_reason: None, code: None },
            };
            EventKind::AttemptEnded { end: end_from(code()?, value(), detail.code)?, stop_reason: detail.stop_reason }
        }
        BODY_RECORDED => {
            let payload = decompress(row.body.as_deref()?, value()?)?;
            let truncated = aux()? != 0;
            let body = match code()? {
                0 => RecordedBody::Text { texts: serde_json::from_slice(&payload).ok()?, truncated },
                1 => RecordedBody::Raw { bytes: payload, truncated },
                _ => return None,
            };
            EventKind::BodyRecorded { body }
        }
        AGENT_DISCONNECTED => EventKind::AgentDisconnected,
        TIMER_WOULD_FIRE => EventKind::TimerWouldFire { timer: timer_from(code()?)?, after: duration(value()?)? },
        FINISHED => EventKind::Finished {
            outcome: outcome_from(code()?)?,
            attempts: u32::try_from(value()?).ok()?,
            stop_reason: match row.detail {
                Some(_) => Some(text()?),
                None => None,
            },
        },
        _ => return None,
    })
}

const INSERT_BODY: &str = "INSERT INTO bodies (event_id, run_id, stream, attempt, mode, truncated, length, data) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

const INSERT_EVENT: &str = "INSERT INTO events (run_id, stream, attempt, at_ns, kind, n, code, value, aux, detail, packed) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// Writes one batch of a run's events, and keeps the `streams` and
/// `attempts` tables up to date from the events that open and close them.
pub(crate) fn write(tx: &Transaction<'_>, run: i64, events: &[Event]) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached(INSERT_EVENT)?;
    for r in encode_batch(events) {
        insert.execute(params![
            run, r.stream, r.attempt, r.at_ns, r.kind, r.n, r.code, r.value, r.aux, r.detail, r.packed
        ])?;
        if let Some(data) = &r.body {
            let mode = r.code.and_then(|c| BODY_MODES.get(usize::try_from(c).ok()?));
            tx.prepare_cached(INSERT_BODY)?.execute(params![
                tx.last_insert_rowid(),
                run,
                r.stream,
                r.attempt,
                mode,
                r.aux,
                r.value,
                data
            ])?;
        }
    }
    for event in events {
        let (stream, attempt, at) = (event.stream as i64, i64::from(event.attempt), ns(event.at).unwrap_or(i64::MAX));
        // Attempt 0 is between attempts (a decision made before any): it has no row.
        let has_row = attempt != 0;
        match &event.kind {
            EventKind::CallStarted { target, .. } => {
                tx.prepare_cached(
                    "INSERT INTO streams (run_id, stream, provider, model, started_ns) VALUES (?1, ?2, ?3, ?4, ?5) \
                     ON CONFLICT (run_id, stream) DO UPDATE SET provider = excluded.provider, \
                     model = excluded.model, started_ns = excluded.started_ns",
                )?
                .execute(params![run, stream, target.provider, target.model, at])?;
            }
            EventKind::Finished { outcome, attempts, .. } => {
                tx.prepare_cached(
                    "INSERT INTO streams (run_id, stream, ended_ns, outcome, attempts) VALUES (?1, ?2, ?3, ?4, ?5) \
                     ON CONFLICT (run_id, stream) DO UPDATE SET ended_ns = excluded.ended_ns, \
                     outcome = excluded.outcome, attempts = excluded.attempts",
                )?
                .execute(params![run, stream, at, outcome.name(), attempts])?;
            }
            EventKind::AttemptStarted { target, credential } if has_row => {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO attempts (run_id, stream, attempt, provider, model, credential, started_ns) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?
                .execute(params![run, stream, attempt, target.provider, target.model, opt_int(*credential).flatten(), at])?;
            }
            EventKind::HeadersReceived { status, .. } if has_row => {
                tx.prepare_cached(
                    "UPDATE attempts SET status = ?4 WHERE run_id = ?1 AND stream = ?2 AND attempt = ?3",
                )?
                .execute(params![run, stream, attempt, status])?;
            }
            EventKind::ErrorClassified { category, .. } if has_row => {
                tx.prepare_cached(
                    "UPDATE attempts SET category = ?4 WHERE run_id = ?1 AND stream = ?2 AND attempt = ?3",
                )?
                .execute(params![run, stream, attempt, category_code(*category)])?;
            }
            EventKind::AttemptEnded { end, .. } if has_row => {
                let (how, value) = end_code(end);
                tx.prepare_cached(
                    "UPDATE attempts SET ended_ns = ?4, end_code = ?5, end_value = ?6 \
                     WHERE run_id = ?1 AND stream = ?2 AND attempt = ?3",
                )?
                .execute(params![run, stream, attempt, at, how, value])?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A read that failed.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// SQLite failed.
    Sql(rusqlite::Error),
    /// A row cannot be decoded.
    Format(String),
}

impl From<rusqlite::Error> for ReadError {
    fn from(e: rusqlite::Error) -> Self {
        ReadError::Sql(e)
    }
}

fn read(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Event>, ReadError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let columns = Columns {
            stream: row.get(0)?,
            attempt: row.get(1)?,
            at_ns: row.get(2)?,
            kind: row.get(3)?,
            n: row.get(4)?,
            code: row.get(5)?,
            value: row.get(6)?,
            aux: row.get(7)?,
            detail: row.get_ref(8)?.as_str_or_null().map_err(|e| ReadError::Format(e.to_string()))?,
            packed: row.get_ref(9)?.as_blob_or_null().map_err(|e| ReadError::Format(e.to_string()))?,
            body: None,
        };
        let columns = if columns.kind == kind::BODY_RECORDED {
            let id: i64 = row.get(10)?;
            let body = conn
                .prepare_cached("SELECT data FROM bodies WHERE event_id = ?1")?
                .query_row([id], |r| r.get(0))
                .optional()?;
            Columns { body, ..columns }
        } else {
            columns
        };
        decode(&columns, &mut out).map_err(ReadError::Format)?;
    }
    // Rows are in time order already; this only matters for a stream whose
    // events were emitted out of time order, and is linear when sorted.
    out.sort_by_key(|e| e.at);
    Ok(out)
}

const COLUMNS: &str = "SELECT stream, attempt, at_ns, kind, n, code, value, aux, detail, packed, id FROM events";

/// One stream's events in time order.
pub(crate) fn read_stream(conn: &Connection, run: i64, stream: StreamId) -> Result<Vec<Event>, ReadError> {
    let sql = format!("{COLUMNS} WHERE run_id = ?1 AND stream = ?2 ORDER BY at_ns, id");
    read(conn, &sql, params![run, stream as i64])
}

/// Every event of a run in time order (ties in stream order).
pub(crate) fn read_run(conn: &Connection, run: i64) -> Result<Vec<Event>, ReadError> {
    let sql = format!("{COLUMNS} WHERE run_id = ?1 ORDER BY stream, at_ns, id");
    read(conn, &sql, params![run])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for t in TimerKind::ALL {
            assert_eq!(timer_from(timer_code(t)), Some(t));
        }
        for c in Category::ALL {
            assert_eq!(category_from(category_code(c)), Some(c));
        }
        assert_eq!(class_from(6), None);
        assert_eq!(outcome_from(-1), None);
    }

    #[test]
    fn varints_and_zigzag_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 64, 1 << 40, -(1 << 40), i64::MAX, i64::MIN] {
            let mut buf = Vec::new();
            put_varint(&mut buf, zigzag(v));
            let mut pos = 0;
            assert_eq!(get_varint(&buf, &mut pos).map(unzigzag), Some(v));
            assert_eq!(pos, buf.len());
        }
        assert_eq!(get_varint(&[0x80, 0x80], &mut 0), None);
    }

    fn chunk(stream: u64, attempt: u32, us: u64, bytes: usize) -> Event {
        Event { at: Duration::from_micros(us), stream, attempt, kind: EventKind::ChunkReceived { bytes } }
    }

    #[test]
    fn chunks_pack_per_stream_and_attempt_and_other_events_close_the_pack() {
        let phase = |stream, us| Event {
            at: Duration::from_micros(us),
            stream,
            attempt: 1,
            kind: EventKind::PhaseChanged { phase: AttemptPhase::Done },
        };
        let events = vec![
            chunk(1, 1, 1, 10),
            chunk(2, 1, 2, 5),
            chunk(1, 1, 3, 20),
            phase(1, 4),
            chunk(1, 1, 5, 1),
            chunk(1, 2, 6, 2),
        ];
        let mut rows = encode_batch(&events);
        rows.sort_by_key(|r| (r.stream, r.at_ns));
        let shape: Vec<(i64, i64, i64, Option<i64>)> = rows.iter().map(|r| (r.stream, r.kind, r.n, r.value)).collect();
        assert_eq!(
            shape,
            [
                (1, kind::PACKED, 2, Some(30)),
                (1, kind::PHASE_CHANGED, 1, None),
                (1, kind::CHUNK_RECEIVED, 1, Some(1)),
                (1, kind::CHUNK_RECEIVED, 1, Some(2)),
                (2, kind::CHUNK_RECEIVED, 1, Some(5)),
            ]
        );
    }

    #[test]
    fn big_packs_split_and_decode_back() {
        let events: Vec<Event> = (0..1000).map(|i| chunk(3, 1, i * 7, (i % 300) as usize)).collect();
        let rows = encode_batch(&events);
        assert_eq!(rows.len(), 1000usize.div_ceil(MAX_PACK));
        let mut out = Vec::new();
        for r in &rows {
            decode(&columns(r), &mut out).unwrap();
        }
        out.sort_by_key(|e| e.at);
        assert_eq!(out, events);
    }

    /// A row as it is read back.
    fn columns(r: &Row) -> Columns<'_> {
        Columns {
            stream: r.stream,
            attempt: r.attempt,
            at_ns: r.at_ns,
            kind: r.kind,
            n: r.n,
            code: r.code,
            value: r.value,
            aux: r.aux,
            detail: r.detail.as_deref(),
            packed: r.packed.as_deref(),
            body: r.body.clone(),
        }
    }

    fn row_of(kind: EventKind) -> Row {
        encode(&Event { at: Duration::from_millis(3), stream: 1, attempt: 2, kind })
    }

    /// What plots and queries read without parsing: (kind, code, value, aux).
    fn numbers(row: &Row) -> (i64, Option<i64>, Option<i64>, Option<i64>) {
        (row.kind, row.code, row.value, row.aux)
    }

    #[test]
    fn new_kinds_have_their_own_codes_and_numbers() {
        let ended = |end| EventKind::AttemptEnded { end, stop_reason: None };
        let cases = [
            (ended(AttemptEnd::Status { status: 503 }), (kind::ATTEMPT_ENDED, Some(end::STATUS), Some(503), None)),
            (
                ended(AttemptEnd::Transport { kind: TransportKind::KernelTimeout }),
                (kind::ATTEMPT_ENDED, Some(end::TRANSPORT), Some(9), None),
            ),
            (
                ended(AttemptEnd::Timer { timer: TimerKind::DataStall }),
                (kind::ATTEMPT_ENDED, Some(end::TIMER), Some(timer_code(TimerKind::DataStall)), None),
            ),
            (ended(AttemptEnd::Done), (kind::ATTEMPT_ENDED, Some(end::DONE), None, None)),
            (
                EventKind::TimerHeld {
                    timer: TimerKind::Idle,
                    after: Duration::from_secs(1),
                    lag: Duration::from_millis(350),
                },
                (kind::TIMER_HELD, Some(timer_code(TimerKind::Idle)), Some(1_000_000_000), Some(350_000_000)),
            ),
            (
                EventKind::RateLimitLow { bucket: "tokens".into(), remaining: 5, limit: Some(100), reset: None },
                (kind::RATE_LIMIT_LOW, Some(1), Some(5), Some(100)),
            ),
            (
                EventKind::RateLimitLow { bucket: "widgets".into(), remaining: 5, limit: None, reset: None },
                (kind::RATE_LIMIT_LOW, None, Some(5), None),
            ),
            (EventKind::ErrorBody { body: "né".into(), truncated: true }, (kind::ERROR_BODY, None, Some(3), Some(1))),
            (EventKind::ResponseHeaders { headers: vec![] }, (kind::RESPONSE_HEADERS, None, None, None)),
            (
                EventKind::BodyRecorded { body: RecordedBody::Raw { bytes: vec![7; 1000], truncated: false } },
                (kind::BODY_RECORDED, Some(1), Some(1000), Some(0)),
            ),
            (
                EventKind::BodyRecorded { body: RecordedBody::Text { texts: vec!["a".into()], truncated: true } },
                (kind::BODY_RECORDED, Some(0), Some(5), Some(1)),
            ),
        ];
        for (event, expected) in cases {
            let row = row_of(event.clone());
            assert_eq!(numbers(&row), expected, "{event:?}");
            let mut back = Vec::new();
            decode(&columns(&row), &mut back).unwrap();
            assert_eq!(back.pop().map(|e| e.kind), Some(event));
        }
        let headers = row_of(EventKind::ResponseHeaders { headers: vec![("retry-after-ms".into(), "700".into())] });
        assert_eq!(headers.detail.as_deref(), Some(r#"[["retry-after-ms","700"]]"#));
        let ended = row_of(EventKind::AttemptEnded {
            end: AttemptEnd::InStream { code: Some("overloaded".into()) },
            stop_reason: Some("stop".into()),
        });
        assert_eq!(ended.detail.as_deref(), Some(r#"{"stop_reason":"stop","code":"overloaded"}"#));
    }

    #[test]
    fn codes_of_transport_kinds_and_attempt_ends_round_trip() {
        for k in TransportKind::ALL {
            assert_eq!(transport_from(transport_code(k)), Some(k));
        }
        assert_eq!(transport_from(12), None);
        assert_eq!(end_from(7, None, None), None);
        assert_eq!(end_from(end::STATUS, Some(70_000), None), None, "not a status");
    }

    #[test]
    fn a_raw_body_is_stored_compressed_and_checked_on_the_way_back() {
        let text: Vec<u8> = b"data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n".repeat(1000);
        let row = row_of(EventKind::BodyRecorded { body: RecordedBody::Raw { bytes: text.clone(), truncated: false } });
        let data = row.body.unwrap();
        assert!(data.len() * 10 < text.len(), "{} bytes compressed to {}", text.len(), data.len());
        assert_eq!(decompress(&data, text.len() as i64), Some(text.clone()));
        // A length that does not match is a damaged row, not a shorter body.
        assert_eq!(decompress(&data, text.len() as i64 - 1), None);
        assert_eq!(decompress(&data, text.len() as i64 + 1), None);
        assert_eq!(decompress(&data[..data.len() / 2], text.len() as i64), None);
    }

    #[test]
    fn numbers_too_large_for_a_column_fall_back_to_json() {
        let event = Event {
            at: Duration::from_secs(1),
            stream: 1,
            attempt: 1,
            kind: EventKind::TimerArmed { timer: TimerKind::Total, after: Duration::MAX, floor: None },
        };
        let row = encode(&event);
        assert_eq!(row.kind, kind::GENERIC);
        let columns = Columns {
            stream: row.stream,
            attempt: row.attempt,
            at_ns: row.at_ns,
            kind: row.kind,
            n: 1,
            code: None,
            value: None,
            aux: None,
            detail: row.detail.as_deref(),
            packed: None,
            body: None,
        };
        let mut out = Vec::new();
        decode(&columns, &mut out).unwrap();
        assert_eq!(out, [event]);
    }
}
