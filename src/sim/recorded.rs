//! A recorded run served as a live provider: every recorded attempt becomes
//! a [`Reply`] the server plays with the recorded timing, so any client can
//! meet the traffic a run actually had.
//!
//! An attempt's reply is worked out once, when serving starts: the wait
//! until its recorded headers, its status and allowlisted headers, then its
//! chunks at their recorded offsets, then its recorded ending — a clean
//! end, a close, a reset, or, where our timer gave up on it (or the
//! recording stops), a connection held open forever. An attempt that got
//! no headers is answered with nothing: held, or closed or reset when the
//! recording says the transport failed.
//!
//! Bodies are the recorded bytes when raw bodies were recorded in full.
//! Otherwise each chunk is re-rendered in the recorded dialect from the
//! events the decoder found in it: the same classes (content, reasoning,
//! keep-alive, lifecycle, tool call) with text of the recorded length (the
//! recorded texts under `RECORD_BODIES=text`, else filler). Chunk sizes
//! then differ from the recording; bytes that completed no event are sent
//! as the start of the next event, so the byte flow keeps its rhythm.
//! Error answers get their recorded status, headers and error body.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::error::SimError;
use super::plan::{Ending, Plan, Timed};
use super::player::Abort;
use super::reply::{Head, Reply, ReplyBody};
use super::scenario::{FRAMING_HEADERS, StreamError};
use super::wire::{Kind, Renderer};
use crate::core::event::{AttemptEnd, EventClass, RecordedBody, StreamId};
use crate::core::failure::{Failure, TransportKind};
use crate::core::upstream::{Decoded, Decoder};
use crate::providers::Dialect;
use crate::replay::attempt_body::{BodyEnd, BodySource};
use crate::replay::recording::{RecordedAttempt, RecordedChunk, RecordedResponse, Recording};
use crate::store::RunId;

/// The slowest and fastest replay speeds.
pub const SPEEDS: std::ops::RangeInclusive<f64> = 0.1..=1000.0;

/// Every recorded attempt's reply, by stream.
#[derive(Debug)]
pub(super) struct RecordedReplies {
    run: RunId,
    streams: BTreeMap<StreamId, Vec<Reply>>,
}

impl RecordedReplies {
    /// The replies of `recording` with every delay divided by `speed`.
    pub fn new(recording: &Recording, speed: f64) -> Result<RecordedReplies, SimError> {
        if !SPEEDS.contains(&speed) {
            return Err(SimError::Speed(speed));
        }
        let wall_epoch = SystemTime::UNIX_EPOCH
            + Duration::from_nanos(u64::try_from(recording.meta.epoch_unix_ns).unwrap_or_default());
        let mut streams = BTreeMap::new();
        for stream in &recording.streams {
            let mut replies = Vec::with_capacity(stream.attempts.len());
            for attempt in &stream.attempts {
                let dialect = recording.providers.iter().find(|p| p.target == attempt.target).and_then(|p| p.dialect);
                let timing = Timing { started: attempt.started, speed, wall_epoch };
                let reply = reply(attempt, dialect, &timing).ok_or_else(|| SimError::NoDialect {
                    run: recording.run,
                    stream: stream.id,
                    attempt: attempt.ordinal,
                    target: attempt.target.to_string(),
                })?;
                replies.push(reply);
            }
            streams.insert(stream.id, replies);
        }
        Ok(RecordedReplies { run: recording.run, streams })
    }

    /// The reply to the `attempt`-th request (from 1) naming `stream`; a
    /// 503 saying why when the recording has no such attempt.
    pub fn reply(&self, stream: Option<&str>, attempt: usize) -> Reply {
        let run = self.run;
        let streams = match (self.streams.keys().next(), self.streams.keys().next_back()) {
            (Some(first), Some(last)) => format!("its {} streams are {first} to {last}", self.streams.len()),
            _ => "it has no streams".to_owned(),
        };
        let Some(stream) = stream else {
            let message = format!(
                "this simulator serves recorded run {run}: name the stream in the x-stallscope-stream header ({streams})"
            );
            return Reply::error(StatusCode::SERVICE_UNAVAILABLE, &message);
        };
        let Some(attempts) = stream.trim().parse::<StreamId>().ok().and_then(|id| self.streams.get(&id)) else {
            let message = format!("recorded run {run} has no stream {stream:?}; {streams}");
            return Reply::error(StatusCode::SERVICE_UNAVAILABLE, &message);
        };
        match attempts.get(attempt.saturating_sub(1)) {
            Some(reply) => reply.clone(),
            None => {
                let message = format!(
                    "recorded run {run}, stream {stream}: the recording has {} attempt(s), and this is request {attempt}",
                    attempts.len()
                );
                Reply::error(StatusCode::SERVICE_UNAVAILABLE, &message)
            }
        }
    }
}

/// How recorded moments of one attempt become served ones.
struct Timing {
    /// When the attempt started (since the run's epoch).
    started: Duration,
    speed: f64,
    /// The wall clock at the run's epoch.
    wall_epoch: SystemTime,
}

impl Timing {
    /// The served length of the recorded span `from`..`to`.
    fn between(&self, from: Duration, to: Duration) -> Duration {
        to.saturating_sub(from).div_f64(self.speed)
    }
}

/// The reply that plays `attempt`; `None` when it must be re-rendered and
/// no dialect is known.
fn reply(attempt: &RecordedAttempt, dialect: Option<Dialect>, timing: &Timing) -> Option<Reply> {
    let ended_at = attempt.ended.as_ref().map(|(at, _)| *at);
    let Some(response) = &attempt.response else {
        let abort = match attempt.body_end() {
            BodyEnd::Breaks(TransportKind::Closed) => Some(Abort::Hangup),
            BodyEnd::Breaks(_) => Some(Abort::Reset),
            BodyEnd::Ends | BodyEnd::Abandoned => None,
        };
        let delay = match (abort, ended_at) {
            (Some(_), Some(at)) => timing.between(timing.started, at),
            _ => Duration::ZERO,
        };
        return Some(Reply::Unanswered { delay, abort });
    };
    let delay = timing.between(timing.started, response.at);
    let head = head(response, timing);
    let payloads = match attempt.body_source()? {
        BodySource::Fixed(body) => {
            return Some(Reply::Respond { delay, head, body: ReplyBody::Fixed(Bytes::copy_from_slice(body)) });
        }
        BodySource::Raw(raw) => split(raw, &attempt.chunks),
        BodySource::Events => rerender(attempt, dialect?),
    };
    let mut timed = Vec::new();
    let mut last = response.at;
    for (chunk, bytes) in attempt.chunks.iter().zip(payloads) {
        let gap = timing.between(last, chunk.at);
        if !gap.is_zero() {
            timed.push(Timed::Sleep(gap));
        }
        if !bytes.is_empty() {
            timed.push(Timed::Write(bytes));
        }
        last = chunk.at;
    }
    let ending = match attempt.body_end() {
        BodyEnd::Abandoned => Ending::Hold,
        BodyEnd::Breaks(kind) => {
            timed.push(Timed::Sleep(timing.between(last, ended_at.unwrap_or(last))));
            match kind {
                TransportKind::Closed => Ending::Finish,
                TransportKind::Reset => Ending::Reset,
                _ => Ending::Hangup,
            }
        }
        BodyEnd::Ends => Ending::Finish,
    };
    Some(Reply::Respond { delay, head, body: ReplyBody::Timed(Plan { timed, ending }) })
}

/// The recorded status, content type and allowlisted headers. A dated
/// `retry-after` is remade when the head is sent, asking for the same wait
/// it asked for when it was recorded.
fn head(response: &RecordedResponse, timing: &Timing) -> Head {
    let status = StatusCode::from_u16(response.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    if let Some(value) = response.content_type.as_deref().and_then(|c| HeaderValue::try_from(c).ok()) {
        headers.insert(CONTENT_TYPE, value);
    }
    let mut retry_after_date_in = None;
    for (name, value) in &response.headers {
        let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) else {
            continue;
        };
        if name == CONTENT_TYPE || FRAMING_HEADERS.contains(&name.as_str()) {
            continue;
        }
        if name == RETRY_AFTER
            && let Some(date) = value.to_str().ok().and_then(|v| httpdate::parse_http_date(v).ok())
        {
            let sent = timing.wall_epoch + response.at;
            retry_after_date_in = Some(date.duration_since(sent).unwrap_or_default());
            continue;
        }
        headers.append(name, value);
    }
    Head { status, headers, retry_after_date_in }
}

/// The raw body cut at the recorded chunk boundaries.
fn split(raw: &[u8], chunks: &[RecordedChunk]) -> Vec<Bytes> {
    let mut rest = Bytes::copy_from_slice(raw);
    let mut pieces: Vec<Bytes> = chunks.iter().map(|c| rest.split_to((c.bytes as usize).min(rest.len()))).collect();
    if let Some(last) = pieces.last_mut()
        && !rest.is_empty()
    {
        *last = Bytes::from([last.as_ref(), rest.as_ref()].concat());
    }
    pieces
}

/// Each chunk's bytes re-rendered in `dialect` from its recorded events.
///
/// The renderer keeps the stream valid (opening events, blocks opened and
/// closed, terminal events), so it may render more than one event for a
/// recorded one: those wait in a queue and are sent where the recording
/// shows an event of their class. A recorded bookkeeping event with none
/// waiting renders the stream's next one on the way to the next recorded
/// output. The ending the recording shows (the terminal events, an
/// in-stream error, a malformed event) goes out with the last chunk.
fn rerender(attempt: &RecordedAttempt, dialect: Dialect) -> Vec<Bytes> {
    let mut renderer = Renderer::new(dialect, &attempt.target.model);
    let mut classify = Classifier(dialect.decoder());
    let mut texts = match &attempt.body {
        Some(RecordedBody::Text { texts, .. }) => texts.clone().into_iter(),
        _ => Vec::new().into_iter(),
    };
    let end = attempt.ended.as_ref().map(|(_, end)| end);
    let events: Vec<(usize, EventClass, usize)> = attempt
        .chunks_with_events()
        .enumerate()
        .flat_map(|(i, (_, events))| events.iter().map(move |&(class, chars)| (i, class, chars as usize)))
        .collect();
    let mut waiting: VecDeque<(Option<EventClass>, Bytes)> = VecDeque::new();
    let mut per_chunk: Vec<Vec<Bytes>> = vec![Vec::new(); attempt.chunks.len()];
    let mut ended = false;
    for (at, &(chunk, class, chars)) in events.iter().enumerate() {
        let text = texts.next().unwrap_or_else(|| filler(class, chars));
        if !waiting.iter().any(|(c, _)| *c == Some(class)) {
            // After the ending nothing valid can be rendered.
            if ended {
                continue;
            }
            let mut out = Vec::new();
            match class {
                EventClass::Content => renderer.content(&text, &mut out),
                EventClass::Reasoning => renderer.reasoning(&text, &mut out),
                EventClass::ToolCall => renderer.tool_call(&text, &mut out),
                EventClass::Keepalive => out.push(renderer.ping()),
                EventClass::Lifecycle | EventClass::Error => {
                    let next = events[at + 1..].iter().find_map(|(_, class, _)| output_kind(*class));
                    if next.is_none() && matches!(end, Some(AttemptEnd::Done)) {
                        renderer.finish(&mut out);
                        ended = true;
                    } else {
                        renderer.bookkeeping(next, &mut out);
                    }
                }
            }
            waiting.extend(classify.classes(out));
        }
        while let Some((c, bytes)) = waiting.pop_front() {
            per_chunk[chunk].push(bytes);
            if c == Some(class) {
                break;
            }
        }
    }
    if !ended {
        let mut out = Vec::new();
        match end {
            Some(AttemptEnd::Done) => renderer.finish(&mut out),
            Some(AttemptEnd::InStream { code }) => {
                let (kind, message) = in_stream_error(code.as_deref(), attempt);
                renderer.error(kind, message.as_deref(), false, &mut out);
            }
            Some(AttemptEnd::Malformed) => renderer.invalid_utf8(&mut out),
            _ => {}
        }
        waiting.extend(classify.classes(out));
    }
    if let Some(last) = per_chunk.last_mut() {
        last.extend(waiting.into_iter().map(|(_, bytes)| bytes));
    }
    spread(&attempt.chunks, per_chunk)
}

/// Classifies rendered events by decoding them as a client will.
struct Classifier(crate::providers::DialectDecoder);

impl Classifier {
    /// Each event with the class it decodes to (`None`: it ends the stream).
    fn classes(&mut self, events: Vec<Bytes>) -> Vec<(Option<EventClass>, Bytes)> {
        events
            .into_iter()
            .map(|event| {
                let mut decoded = Vec::new();
                self.0.feed(&event, &mut decoded);
                let class = decoded.iter().find_map(|d| match d {
                    Decoded::Event { class, .. } => Some(*class),
                    _ => None,
                });
                (class, event)
            })
            .collect()
    }
}

/// The block output of `class` streams in.
fn output_kind(class: EventClass) -> Option<Kind> {
    match class {
        EventClass::Content => Some(Kind::Text),
        EventClass::Reasoning => Some(Kind::Thinking),
        EventClass::ToolCall => Some(Kind::Tool),
        EventClass::Keepalive | EventClass::Lifecycle | EventClass::Error => None,
    }
}

/// Text of the recorded length where the recording kept none.
fn filler(class: EventClass, chars: usize) -> String {
    if output_kind(class).is_some() { "·".repeat(chars) } else { String::new() }
}

/// The in-stream error to render for `attempt`'s: its kind from the
/// recorded code, its message from the classified description.
fn in_stream_error(code: Option<&str>, attempt: &RecordedAttempt) -> (StreamError, Option<String>) {
    let kind = match code {
        Some(code) if code.contains("overloaded") => StreamError::Overloaded,
        Some(code) if code.contains("rate_limit") => StreamError::RateLimit,
        _ => StreamError::ServerError,
    };
    let shape = Failure::InStream { code: code.map(str::to_owned), message: String::new() };
    (kind, attempt.failure_message(&shape))
}

/// Joins each chunk's events. A chunk in which the recording found no
/// event carries the start of the next event (never all of it), so bytes
/// keep arriving when they arrived.
fn spread(chunks: &[RecordedChunk], mut per_chunk: Vec<Vec<Bytes>>) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(per_chunk.len());
    for (i, chunk) in chunks.iter().enumerate() {
        let (now, later) = per_chunk.split_at_mut(i + 1);
        let events = &mut now[i];
        if events.is_empty() {
            let next = later.iter_mut().find_map(|events| events.first_mut());
            out.push(next.map_or_else(Bytes::new, |event| event.split_to((chunk.bytes as usize).min(event.len() - 1))));
        } else {
            out.push(Bytes::from(events.concat()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::failover::Target;

    const MS: Duration = Duration::from_millis(1);

    /// A chunk as the recording holds it, with the events it completed.
    type Chunk = (RecordedChunk, Vec<(EventClass, u32)>);

    fn chunk(ms: u64, bytes: u32, events: &[(EventClass, u32)]) -> Chunk {
        let at = MS * u32::try_from(ms).unwrap();
        (RecordedChunk { at, bytes, events: u32::try_from(events.len()).unwrap() }, events.to_vec())
    }

    fn attempt(chunks: Vec<Chunk>, end: Option<(u64, AttemptEnd)>) -> RecordedAttempt {
        let (chunks, events): (Vec<RecordedChunk>, Vec<Vec<(EventClass, u32)>>) = chunks.into_iter().unzip();
        RecordedAttempt {
            ordinal: 1,
            target: Target::new("p", "m"),
            started: MS * 100,
            response: Some(RecordedResponse {
                at: MS * 110,
                status: 200,
                content_type: Some("text/event-stream".into()),
                headers: vec![("retry-after-ms".into(), "5".into()), ("content-length".into(), "9".into())],
                error_body: None,
                error_body_cut: false,
            }),
            chunks: chunks.into(),
            events: events.concat().into(),
            ended: end.map(|(ms, e)| (MS * u32::try_from(ms).unwrap(), e)),
            stop_reason: None,
            message: None,
            body: None,
        }
    }

    fn timing(speed: f64) -> Timing {
        Timing { started: MS * 100, speed, wall_epoch: SystemTime::UNIX_EPOCH }
    }

    /// What `decoder` makes of each payload: the classes of its events, and
    /// whether the stream was done.
    fn decode(dialect: Dialect, payloads: &[Bytes]) -> (Vec<Vec<EventClass>>, bool) {
        let mut decoder = dialect.decoder();
        let mut done = false;
        let classes = payloads
            .iter()
            .map(|p| {
                let mut out = Vec::new();
                decoder.feed(p, &mut out);
                done |= out.contains(&Decoded::Done);
                out.iter()
                    .filter_map(|d| match d {
                        Decoded::Event { class, .. } => Some(*class),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        (classes, done)
    }

    #[test]
    fn rerendered_chunks_decode_to_the_recorded_classes_in_every_dialect() {
        use EventClass::{Content, Keepalive, Lifecycle, Reasoning, ToolCall};
        // Each dialect's own shape of a stream: the opening, a thinking
        // block, text, a tool call, keep-alives, and the closing events.
        let cases: [(Dialect, Vec<Chunk>); 3] = [
            (
                Dialect::OpenAiChat,
                vec![
                    chunk(120, 90, &[(Lifecycle, 0)]),
                    chunk(130, 90, &[(Reasoning, 2), (Content, 3)]),
                    chunk(140, 15, &[(Keepalive, 0)]),
                    chunk(150, 90, &[(ToolCall, 4), (Lifecycle, 0), (Lifecycle, 0)]),
                ],
            ),
            (
                Dialect::OpenAiResponses,
                vec![
                    chunk(120, 90, &[(Lifecycle, 0), (Lifecycle, 0)]),
                    chunk(130, 90, &[(Lifecycle, 0), (Lifecycle, 0), (Reasoning, 2)]),
                    chunk(135, 90, &[(Lifecycle, 0), (Lifecycle, 0), (Lifecycle, 0)]),
                    chunk(140, 90, &[(Lifecycle, 0), (Lifecycle, 0), (Content, 3), (Keepalive, 0)]),
                    chunk(150, 90, &[(Lifecycle, 0), (Lifecycle, 0), (Lifecycle, 0), (Lifecycle, 0), (ToolCall, 4)]),
                    chunk(160, 90, &[(Lifecycle, 0), (Lifecycle, 0)]),
                ],
            ),
            (
                Dialect::AnthropicMessages,
                vec![
                    chunk(120, 90, &[(Lifecycle, 0)]),
                    chunk(130, 90, &[(Lifecycle, 0), (Keepalive, 0), (Reasoning, 2)]),
                    chunk(140, 90, &[(Lifecycle, 0), (Lifecycle, 0), (Lifecycle, 0), (Content, 3)]),
                    chunk(150, 90, &[(Lifecycle, 0), (Lifecycle, 0), (ToolCall, 4)]),
                    chunk(160, 90, &[(Lifecycle, 0), (Lifecycle, 0)]),
                ],
            ),
        ];
        for (dialect, chunks) in cases {
            let recorded: Vec<Vec<EventClass>> =
                chunks.iter().map(|(_, events)| events.iter().map(|(class, _)| *class).collect()).collect();
            let a = attempt(chunks, Some((160, AttemptEnd::Done)));
            let (classes, done) = decode(dialect, &rerender(&a, dialect));
            assert_eq!(classes, recorded, "{dialect:?}");
            assert!(done, "{dialect:?}: the terminal events go out with the last chunk");
        }
    }

    #[test]
    fn recorded_texts_are_rendered_and_filler_keeps_the_length() {
        let chunks = vec![chunk(120, 50, &[(EventClass::Content, 5)]), chunk(130, 50, &[(EventClass::Content, 3)])];
        let mut a = attempt(chunks, None);
        let filled = rerender(&a, Dialect::AnthropicMessages).concat();
        assert!(String::from_utf8_lossy(&filled).contains(r#""text":"·····""#));
        a.body = Some(RecordedBody::Text { texts: vec!["Hello".into()], truncated: true });
        let text = String::from_utf8(rerender(&a, Dialect::AnthropicMessages).concat()).unwrap();
        assert!(text.contains(r#""text":"Hello""#) && text.contains(r#""text":"···""#), "{text}");
        assert!(!text.contains("message_stop"), "no end was recorded");
    }

    #[test]
    fn bytes_that_completed_no_event_carry_the_start_of_the_next() {
        let chunks = vec![
            chunk(120, 4, &[]),
            chunk(130, 4, &[]),
            chunk(140, 4, &[(EventClass::Content, 2)]),
            chunk(150, 4, &[]),
        ];
        let a = attempt(chunks, Some((160, AttemptEnd::Transport { kind: TransportKind::Reset })));
        let payloads = rerender(&a, Dialect::OpenAiChat);
        assert_eq!(payloads.iter().map(Bytes::len).take(2).collect::<Vec<_>>(), [4, 4]);
        assert!(payloads[2].ends_with(b"\n\n") && payloads[3].is_empty());
        let (classes, _) = decode(Dialect::OpenAiChat, &payloads);
        assert_eq!(classes, [vec![], vec![], vec![EventClass::Lifecycle, EventClass::Content], vec![]]);
    }

    #[test]
    fn endings_follow_the_recording() {
        let chunks = || vec![chunk(120, 10, &[(EventClass::Content, 1)])];
        let ending = |end| match reply(&attempt(chunks(), end), Some(Dialect::OpenAiChat), &timing(1.0)) {
            Some(Reply::Respond { body: ReplyBody::Timed(plan), .. }) => (plan.timed.last().cloned(), plan.ending),
            other => panic!("{other:?}"),
        };
        let reset = Some((320, AttemptEnd::Transport { kind: TransportKind::Reset }));
        assert_eq!(ending(reset), (Some(Timed::Sleep(MS * 200)), Ending::Reset));
        let closed = Some((120, AttemptEnd::Transport { kind: TransportKind::Closed }));
        assert_eq!(ending(closed).1, Ending::Finish);
        let idle = Some((900, AttemptEnd::Timer { timer: crate::core::category::TimerKind::Idle }));
        assert_eq!(ending(idle).1, Ending::Hold);
        assert_eq!(ending(None).1, Ending::Hold);

        let mut refused = attempt(Vec::new(), Some((130, AttemptEnd::Transport { kind: TransportKind::Refused })));
        refused.response = None;
        let served = reply(&refused, None, &timing(10.0));
        assert_eq!(served, Some(Reply::Unanswered { delay: MS * 3, abort: Some(Abort::Reset) }));
    }

    #[test]
    fn speed_scales_every_delay_and_headers_keep_to_the_allowlist() {
        let chunks = vec![chunk(120, 10, &[(EventClass::Content, 1)]), chunk(220, 10, &[(EventClass::Content, 1)])];
        let Some(Reply::Respond { delay, head, body: ReplyBody::Timed(plan) }) =
            reply(&attempt(chunks, None), Some(Dialect::OpenAiChat), &timing(10.0))
        else {
            panic!("a streamed reply")
        };
        assert_eq!(delay, MS);
        let sleeps: Vec<Duration> =
            plan.timed.iter().filter_map(|t| if let Timed::Sleep(d) = t { Some(*d) } else { None }).collect();
        assert_eq!(sleeps, [MS, MS * 10]);
        assert_eq!(head.headers["retry-after-ms"], "5");
        assert!(!head.headers.contains_key("content-length"), "hyper frames the body");
        assert_eq!(head.headers[CONTENT_TYPE], "text/event-stream");
    }

    #[test]
    fn a_dated_retry_after_asks_for_the_same_wait() {
        let mut a = attempt(Vec::new(), Some((110, AttemptEnd::Status { status: 429 })));
        let response = a.response.as_mut().unwrap();
        response.status = 429;
        // The run's epoch is the Unix epoch; the head came 110 ms after it.
        response.headers = vec![("retry-after".into(), "Thu, 01 Jan 1970 00:00:03 GMT".into())];
        response.error_body = Some("{}".into());
        let Some(Reply::Respond { head, body, .. }) = reply(&a, None, &timing(1.0)) else { panic!("a response") };
        assert_eq!(head.retry_after_date_in, Some(Duration::from_millis(2890)));
        assert!(!head.headers.contains_key(RETRY_AFTER));
        assert_eq!(body, ReplyBody::Fixed(Bytes::from_static(b"{}")));
    }
}
