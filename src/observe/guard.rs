//! Guard (`observe --guard`): stallscope's core in force on an agent's
//! streamed calls, with no change to the agent. Each streamed request of
//! a dialect is a call of the same executor as `stallscope run` under the
//! tunables in force: one retry owner, the governor's clocks acting.
//!
//! [`GuardedUpstream`] is the core's [`Upstream`] for guarded calls: each
//! attempt sends the agent's request again (its own key, its body, with
//! the model a failover hop names), asking for an uncompressed answer, for
//! the guard reads what it relays. A hop to another configured provider
//! takes only what a request needs of the agent's headers (an allow-list,
//! [`CARRIED`]) and that provider's own key and headers: nothing of the
//! agent's credentials, cookies or gateways' keys goes to a provider it did
//! not call. A body that comes compressed all the same (gzip, deflate,
//! br) is decoded as it is read ([`CopyDecoder`]): the core and the agent
//! both have the text, the agent with no `content-encoding`.
//! [`Answer`] is what the agent gets:
//!
//! - **Before content** (no text, reasoning or tool-call delta has gone:
//!   under the guard reasoning commits a stream as output does, for the
//!   agent's SDK holds it), nothing the agent could tell from a healthy call:
//!   the head (status and headers, with `x-stallscope-guard: on`) is held
//!   until an attempt's stream is taken in by the core, and sent once; each
//!   chunk the core takes in ([`crate::core::upstream::Response::accepted`])
//!   goes on, so the agent has exactly what the core decided from. A retried
//!   attempt opens the message again: each start event the agent has
//!   already (`message_start`, a `content_block_start` index, the role
//!   chunk, `response.created`, an output item or content part) is not
//!   sent again, and a Responses retry's ids and numbers are made the
//!   agent's (see [`opening`]), so the agent reads one well-formed stream
//!   however far the opening had gone.
//! - **After content** the core never retries; a stall caught by a clock
//!   ends the agent's stream in its dialect's own terms, as
//!   `GUARD_AFTER_CONTENT` says ([`crate::providers::ending`]).
//! - **A call that fails before anything reached the agent** is answered
//!   as the provider answered its last attempt (a 429 whose wait is above
//!   the cap goes back as it came), or, when no answer came, with the
//!   guard's own 502 or 504 in the dialect's error shape.
//!
//! Events are relayed whole (re-framed from the parsed stream), so an
//! ending always follows a complete event.

mod opening;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use http::HeaderMap;
use tokio::sync::{mpsc, oneshot};

use self::opening::{Follow, Follows, Had};
use super::agent::AgentGone;
use super::answers::error_body;
use super::encoding::CopyDecoder;
use super::failover::Elsewhere;
use super::relay::end_to_end;
use crate::core::category::Category;
use crate::core::event::{Outcome, StreamId};
use crate::core::executor::CallReport;
use crate::core::failover::Target;
use crate::core::failure::{Failure, TransportKind};
use crate::core::transport::{TransportSettings, failure_from_reqwest};
use crate::core::upstream::{AttemptRequest, Body, Chunk, Decoder, Response, Upstream, content_type, is_event_stream};
use crate::providers::Dialect;
use crate::providers::ending::{AfterContent, EndingState};
use crate::providers::http::with_key;
use crate::providers::sse::{SseItem, SseParser};

/// The header on every response the guard gives (observe's exchange puts
/// it on), so an operator sees from the agent's side that the guard is
/// there.
pub const GUARD_HEADER: &str = "x-stallscope-guard";

/// The most of an error body the guard keeps to answer the agent with.
const ERROR_BODY_KEPT: usize = 64 << 10;

/// An agent's streamed request, as each attempt sends it again.
pub(super) struct GuardedRequest {
    /// The route's client.
    pub client: reqwest::Client,
    /// Method.
    pub method: reqwest::Method,
    /// The upstream URL.
    pub url: String,
    /// End-to-end headers, the agent's key among them.
    pub headers: HeaderMap,
    /// The body as the agent sent it.
    pub body: Bytes,
    /// The model it asked for.
    pub model: String,
    /// The dialect its path names.
    pub dialect: Dialect,
    /// The provider it is recorded under: its route's.
    pub own: String,
}

/// The agent's headers a hop to another provider takes (with its
/// dialect's own, [`carried`]): what the request needs, and nothing that
/// could carry a credential. The rest (keys, cookies, a gateway's auth,
/// the agent's organisation or project) goes to the agent's own provider
/// only.
const CARRIED: [&str; 3] = ["content-type", "accept", "user-agent"];

/// The headers of `dialect` a hop to another provider of it takes: its
/// version and beta headers.
fn carried(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::AnthropicMessages => &["anthropic-version", "anthropic-beta"],
        Dialect::OpenAiChat | Dialect::OpenAiResponses => &["openai-beta"],
    }
}

impl GuardedRequest {
    /// The request of an attempt to `target`: the agent's, with the
    /// target's model when a failover hop named another; to another
    /// configured provider (`elsewhere`), the agent's body at that
    /// provider's endpoint with its own key (`key`, from its pool), never
    /// the agent's.
    fn to(
        &self,
        target: &Target,
        elsewhere: &HashMap<String, Elsewhere>,
        key: Option<&str>,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let body = match target.model == self.model {
            true => self.body.clone(),
            false => with_model(&self.body, &target.model).unwrap_or_else(|| self.body.clone()),
        };
        if target.provider == self.own {
            let mut headers = self.headers.clone();
            // The guard reads what it relays: no compressed answer.
            headers.remove(http::header::ACCEPT_ENCODING);
            return Ok(self.client.request(self.method.clone(), &self.url).headers(headers).body(body));
        }
        let cannot = |why: String| Failure::Transport { kind: TransportKind::Other, message: why };
        let Some(there) = elsewhere.get(&target.provider) else {
            return Err(cannot(format!("the guard knows no provider `{}` to fail over to", target.provider)));
        };
        if there.dialect != self.dialect {
            return Err(cannot(format!(
                "failover to `{}`: it speaks {}, the agent's call {}",
                target.provider, there.dialect, self.dialect
            )));
        }
        let mut headers = HeaderMap::with_capacity(CARRIED.len() + there.headers.len());
        for name in CARRIED.iter().chain(carried(self.dialect)) {
            for value in self.headers.get_all(*name) {
                headers.append(*name, value.clone());
            }
        }
        // The row's own headers over the agent's; the agent's version over
        // the default one `with_key` names (its body is written for it).
        headers.extend(there.headers.clone());
        let request = there.client.request(self.method.clone(), there.dialect.url(&there.base_url));
        Ok(with_key(request, there.dialect, key).headers(headers).body(body))
    }
}

/// `body` (a JSON object) asking for `model` instead.
fn with_model(body: &[u8], model: &str) -> Option<Bytes> {
    let mut asked: serde_json::Value = serde_json::from_slice(body).ok()?;
    *asked.as_object_mut()?.get_mut("model")? = serde_json::Value::String(model.to_owned());
    serde_json::to_vec(&asked).ok().map(Bytes::from)
}

/// One guarded call, as its attempts open.
#[derive(Clone)]
pub(super) struct Guarded {
    /// What each attempt sends.
    pub request: Arc<GuardedRequest>,
    /// What the agent gets.
    pub answer: Arc<Answer>,
    /// What ends the call when the agent goes: its attempt follows the
    /// call's.
    pub agent_gone: AgentGone,
}

/// The upstream of guarded calls: each call's request, sent again by each
/// attempt the executor opens.
pub(super) struct GuardedUpstream {
    calls: Mutex<HashMap<StreamId, Guarded>>,
    /// The configured providers calls may fail over to.
    elsewhere: Arc<HashMap<String, Elsewhere>>,
    /// The clients' timeouts, which tell a transport failure's timer.
    timeouts: Timeouts,
}

/// A client's connect timeout and read backstop.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    connect: Duration,
    read: Option<Duration>,
}

impl Timeouts {
    /// What `error` of a client with these timeouts was.
    fn failure(self, error: &reqwest::Error) -> Failure {
        failure_from_reqwest(error, self.connect, self.read)
    }
}

impl GuardedUpstream {
    /// Sends calls to their own provider, or on failover to one of
    /// `elsewhere`, with clients of `transport`'s timeouts.
    pub fn new(elsewhere: Arc<HashMap<String, Elsewhere>>, transport: &TransportSettings) -> GuardedUpstream {
        GuardedUpstream {
            calls: Mutex::default(),
            elsewhere,
            timeouts: Timeouts { connect: transport.connect_timeout, read: transport.read_timeout },
        }
    }

    /// Holds `guarded` for the attempts of call `stream`.
    pub fn expect(&self, stream: StreamId, guarded: Guarded) {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).insert(stream, guarded);
    }

    /// Lets go of call `stream`, which has ended.
    pub fn done(&self, stream: StreamId) {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).remove(&stream);
    }
}

impl Upstream for GuardedUpstream {
    fn open<'a>(&'a self, request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        let guarded = self.calls.lock().unwrap_or_else(PoisonError::into_inner).get(&request.stream).cloned();
        Box::pin(async move {
            let Some(guarded) = guarded else {
                let message = "the guard has no request for this call".to_owned();
                return Err(Failure::Transport { kind: TransportKind::Other, message });
            };
            guarded.agent_gone.attempt.store(request.attempt, Ordering::Relaxed);
            let answer = Arc::clone(&guarded.answer);
            answer.opens(request.attempt);
            let key = request.credential.map(|c| c.secret.expose());
            let sent = guarded.request.to(request.target, &self.elsewhere, key)?.send().await;
            let timeouts = self.timeouts;
            let response = sent.map_err(|e| timeouts.failure(&e))?;
            let (status, headers) = (response.status().as_u16(), response.headers().clone());
            let upstream = decoded(response, timeouts);
            if is_event_stream(status, content_type(&headers)) {
                let body: Body = upstream;
                let head = AgentHead::of(status, &headers);
                let attempt = request.attempt;
                let mut response = Response::new(status, headers, body);
                response.decoder = Some(Box::new(guarded.request.dialect.decoder()));
                response.accepted = Some(Box::new(move |chunk: &Bytes| answer.accepted(attempt, &head, chunk)));
                return Ok(response);
            }
            // An answer the agent may get as it came, if no retry follows.
            answer.answered(status, &headers);
            let kept = Arc::clone(&answer);
            let body: Body = upstream
                .inspect(move |next| {
                    if let Ok(chunk) = next {
                        kept.answered_body(&chunk.bytes);
                    }
                })
                .boxed();
            let decoder: Box<dyn Decoder> = Box::new(guarded.request.dialect.decoder());
            Ok(Response { decoder: Some(decoder), ..Response::new(status, headers, body) })
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        // Never used: the executor asks each guarded call's own dialect's.
        Box::new(Dialect::OpenAiChat.decoder())
    }
}

/// `response`'s body as the core and the agent read it: its chunks as they
/// come, decoded as its `content-encoding` says when it has one (the
/// guard asked for none, but a hop may compress all the same); an
/// encoding that cannot be decoded ends a stream with a failure naming
/// it, and stands in for another body's text.
fn decoded(response: reqwest::Response, timeouts: Timeouts) -> Body {
    let mut copy = CopyDecoder::of(response.status().as_u16(), response.headers());
    let upstream = response.bytes_stream();
    if !copy.decodes() {
        return upstream.map(move |next| next.map(Chunk::from).map_err(|e| timeouts.failure(&e))).boxed();
    }
    upstream
        .flat_map(move |next| {
            let copies: Vec<Result<Chunk, Failure>> = match next {
                Ok(wire) => copy.decode(&wire).collect(),
                Err(error) => vec![Err(timeouts.failure(&error))],
            };
            futures_util::stream::iter(copies)
        })
        .boxed()
}

/// The head an attempt's stream goes to the agent with.
struct AgentHead {
    status: u16,
    headers: HeaderMap,
}

impl AgentHead {
    /// An upstream answer's head as the agent gets it: end-to-end headers,
    /// no length (the guard re-frames what it relays).
    fn of(status: u16, headers: &HeaderMap) -> AgentHead {
        AgentHead { status, headers: end_to_end(headers, &["content-length", "content-encoding"]) }
    }
}

/// What the agent gets, shared by a call's attempts.
pub(super) struct Answer {
    inner: Mutex<Answering>,
}

/// Where an answer is.
struct Answering {
    dialect: Dialect,
    /// Where the head goes, until it is sent.
    head: Option<oneshot::Sender<(u16, HeaderMap)>>,
    /// The agent's body, until the call ends.
    body: Option<mpsc::Sender<Result<Bytes, std::io::Error>>>,
    /// Re-frames what is relayed, whole events at a time.
    framer: SseParser,
    /// What the ending must close or repeat.
    ending: EndingState,
    /// The attempt whose stream is relayed.
    attempt: u32,
    /// What the agent has of the stream's opening.
    had: Had,
    /// An attempt after the agent had events of an earlier one, while its
    /// events must be made to follow them.
    follow: Option<Follow>,
    /// Anything went to the agent's body.
    relayed: bool,
    /// What ends the call when the agent stops reading.
    gone: AgentGone,
    /// The last attempt's answer when it was not a stream: status, headers
    /// and the start of its body.
    answered: Option<(u16, HeaderMap, Vec<u8>)>,
}

/// The agent's side of a guarded call: the head and body its response is
/// made of, and what watches for it going.
pub(super) struct AgentSide {
    /// The head, once an attempt's stream is taken in (or the call ends).
    pub head: oneshot::Receiver<(u16, HeaderMap)>,
    /// The body.
    pub body: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

/// The agent's body may fall this many chunks behind before it counts as
/// gone: the guard never holds the upstream back for a slow reader (our
/// clocks would read the wait as a stall).
const AGENT_BACKLOG: usize = 4096;

impl Answer {
    /// An answer for a call of `dialect` asking for `model`, and the side
    /// the agent reads it from; `gone` ends the call if the agent stops
    /// reading.
    pub fn new(dialect: Dialect, model: &str, gone: AgentGone) -> (Arc<Answer>, AgentSide) {
        let (head_tx, head) = oneshot::channel();
        let (body_tx, body) = mpsc::channel(AGENT_BACKLOG);
        let answering = Answering {
            dialect,
            head: Some(head_tx),
            body: Some(body_tx),
            framer: SseParser::new(SseParser::DEFAULT_MAX_LINE),
            ending: EndingState::new(dialect, model),
            attempt: 0,
            had: Had::default(),
            follow: None,
            relayed: false,
            gone,
            answered: None,
        };
        (Arc::new(Answer { inner: Mutex::new(answering) }), AgentSide { head, body })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answering> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Attempt `attempt` opens.
    fn opens(&self, attempt: u32) {
        let mut a = self.lock();
        a.attempt = attempt;
        a.follow = a.relayed.then(|| Follow::new(a.dialect, a.ending.next_sequence()));
        a.answered = None;
        a.framer = SseParser::new(SseParser::DEFAULT_MAX_LINE);
    }

    /// The core took in `chunk` of attempt `attempt`'s stream, whose head
    /// is `head`.
    fn accepted(&self, attempt: u32, head: &AgentHead, chunk: &Bytes) {
        let mut a = self.lock();
        // An empty chunk (a compressed body's decoder waiting for more, or
        // one it refused) has nothing for the agent: its head waits on.
        if a.attempt != attempt || chunk.is_empty() {
            return;
        }
        if let Some(sender) = a.head.take() {
            let _ = sender.send((head.status, head.headers.clone()));
        }
        let out = a.relay(chunk);
        let Some(agent) = a.body.as_ref().filter(|_| !out.is_empty()) else { return };
        // A full backlog is an agent that stopped reading: it has gone, as
        // far as its stream goes (nothing is dropped from the middle).
        let stopped = matches!(agent.try_send(Ok(Bytes::from(out))), Err(mpsc::error::TrySendError::Full(_)));
        a.relayed = true;
        if stopped {
            a.body = None;
            a.gone.departed();
        }
    }

    /// The attempt was answered with `status` and `headers`, not a stream.
    fn answered(&self, status: u16, headers: &HeaderMap) {
        self.lock().answered = Some((status, headers.clone(), Vec::new()));
    }

    /// More of the answer's body came.
    fn answered_body(&self, bytes: &[u8]) {
        if let Some((_, _, body)) = &mut self.lock().answered {
            let room = ERROR_BODY_KEPT.saturating_sub(body.len());
            body.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    }

    /// The call ended as `report` says (`stopping`: because observe
    /// stops): the agent's answer is finished — its head when none went,
    /// and after a failure the stream's end in its dialect's terms.
    pub fn ended(&self, report: &CallReport, stopping: bool) -> Delivered {
        let mut a = self.lock();
        let message = || report.error.as_ref().map_or_else(|| "the stream ended".to_owned(), |c| c.message.clone());
        // An agent that went before its head is gone: nothing reaches it.
        let agent_gone = a.body.as_ref().is_none_or(mpsc::Sender::is_closed);
        if report.outcome == Outcome::Cancelled && agent_gone && a.head.take().is_some() {
            a.body = None;
            return Delivered::Cut;
        }
        if let Some(sender) = a.head.take() {
            let provider_answered = report.outcome == Outcome::Failed && a.answered.is_some();
            let (status, headers, body) = match (&report.outcome, a.answered.take()) {
                (Outcome::Ok, _) => (200, HeaderMap::new(), Vec::new()),
                // The provider's own answer, as it came.
                (Outcome::Failed, Some((status, headers, body))) => (status, headers, body),
                (_, _) => {
                    let timed_out = report.error.as_ref().is_some_and(|c| c.category == Category::Timeout);
                    let status = match (stopping, timed_out) {
                        (true, _) => 503,
                        (false, true) => 504,
                        (false, false) => 502,
                    };
                    let said = format!("stallscope guard: {}", message());
                    let mut headers = HeaderMap::new();
                    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                    (status, headers, error_body(a.dialect, status, &said).into_bytes())
                }
            };
            let mut head = AgentHead::of(status, &headers);
            if !body.is_empty() {
                head.headers.insert(http::header::CONTENT_LENGTH, body.len().into());
            }
            let _ = sender.send((head.status, head.headers));
            if let Some(agent) = a.body.take().filter(|_| !body.is_empty()) {
                let _ = agent.try_send(Ok(Bytes::from(body)));
            }
            return match (report.outcome, provider_answered) {
                (Outcome::Ok, _) => Delivered::Whole,
                (_, true) => Delivered::ProviderAnswer(status),
                (_, false) => Delivered::OwnAnswer(status),
            };
        }
        // Partial recovery is what `GUARD_AFTER_CONTENT=finish` turns on;
        // any other failure is said as one, before content or after.
        let how = match report.outcome {
            Outcome::Ok | Outcome::Cancelled => None,
            Outcome::Partial => Some(AfterContent::Finish),
            Outcome::Failed => Some(AfterContent::Error),
        };
        if let (Some(how), Some(body)) = (how, &a.body) {
            let _ = body.try_send(Ok(Bytes::from(a.ending.end(how, &message()).concat())));
        }
        // The agent's body ends here.
        a.body = None;
        match (report.outcome, how) {
            (Outcome::Cancelled, _) => Delivered::Cut,
            (_, Some(AfterContent::Finish)) => Delivered::LengthFinish,
            (_, Some(AfterContent::Error)) => Delivered::ErrorEnding,
            (_, None) => Delivered::Whole,
        }
    }
}

/// What the agent of a guarded call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// The whole answer, one stream.
    Whole,
    /// The partial answer, ended at the output limit (`finish`).
    LengthFinish,
    /// What streamed, then the dialect's in-stream error (`error`).
    ErrorEnding,
    /// The provider's own answer to the last attempt (this status).
    ProviderAnswer(u16),
    /// The guard's own error answer (this status): no answer came.
    OwnAnswer(u16),
    /// Nothing more: the agent went, or observe stopped.
    Cut,
}

impl Delivered {
    /// "the whole answer", "an error ending", …
    pub fn words(self) -> String {
        match self {
            Delivered::Whole => "the whole answer".to_owned(),
            Delivered::LengthFinish => "the partial answer with a length finish".to_owned(),
            Delivered::ErrorEnding => "what streamed, then the dialect's error".to_owned(),
            Delivered::ProviderAnswer(status) => format!("the provider's own {status}"),
            Delivered::OwnAnswer(status) => format!("the guard's {status}"),
            Delivered::Cut => "no end: the call was cancelled".to_owned(),
        }
    }
}

impl Answering {
    /// What of `chunk` the agent gets: its whole events, re-framed, but
    /// for what a retried attempt repeats of what the agent has.
    fn relay(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len() + 16);
        let Answering { framer, ending, had, follow, dialect, .. } = self;
        // Bytes that are not a stream the core has refused already; what
        // came whole before them still goes.
        let _ = framer.feed(chunk, &mut |item| match item {
            SseItem::Comment(text) => comment(text, &mut out),
            SseItem::Event { event, data, .. } => {
                let start = out.len();
                framed(event, data, &mut out);
                let renamed = match follow.as_mut().map(|f| f.follow((event, data), &out[start..], had)) {
                    None | Some(Follows::AsIs) => None,
                    Some(Follows::Dropped) => {
                        out.truncate(start);
                        return;
                    }
                    Some(Follows::As(renamed)) => {
                        out.truncate(start);
                        framed(event, &renamed, &mut out);
                        Some(renamed)
                    }
                };
                let data = renamed.as_deref().unwrap_or(data);
                had.note(*dialect, event, data);
                ending.observe(event, data);
            }
        });
        if follow.as_ref().is_some_and(Follow::over) {
            *follow = None;
        }
        out
    }
}

/// An SSE comment, framed, onto `out`.
fn comment(text: &str, out: &mut Vec<u8>) {
    out.push(b':');
    if !text.is_empty() {
        out.push(b' ');
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(b"\n\n");
}

/// An SSE event, framed onto `out`: its name when it has one, each line
/// of its data.
fn framed(event: &str, data: &str, out: &mut Vec<u8>) {
    if !event.is_empty() {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the agent's body has been sent so far, as text.
    fn sent(agent: &mut AgentSide) -> String {
        let mut text = String::new();
        while let Ok(Ok(bytes)) = agent.body.try_recv() {
            text.push_str(std::str::from_utf8(&bytes).unwrap());
        }
        text
    }

    /// An answer of `dialect`'s, and the agent's side of it.
    fn answer(dialect: Dialect) -> (Arc<Answer>, AgentSide) {
        let gone = AgentGone::new(
            tokio_util::sync::CancellationToken::new(),
            Arc::new(crate::core::event::NullSink),
            tokio::time::Instant::now(),
            0,
        );
        Answer::new(dialect, "claude-x", gone)
    }

    const MESSAGE_START: &str =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\n";
    const BLOCK_START: &str = "event: content_block_start\n\
        data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    const PING: &str = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    const DELTA: &str = "event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";

    /// An attempt retried after the agent had the message's opening: its
    /// own opening is not sent again, but the block its text goes in is
    /// (the agent's SDK indexes the deltas by it), and so are its pings.
    #[test]
    fn a_retried_attempt_sends_a_block_the_agent_lacks_but_not_the_opening_again() {
        let (answer, mut agent) = answer(Dialect::AnthropicMessages);
        let head = AgentHead::of(200, &HeaderMap::new());
        answer.opens(1);
        answer.accepted(1, &head, &Bytes::from(MESSAGE_START));
        assert_eq!(sent(&mut agent), MESSAGE_START);
        answer.opens(2);
        answer.accepted(
            2,
            &head,
            &Bytes::from(format!("{}{BLOCK_START}{PING}{DELTA}", MESSAGE_START.replace("msg_1", "msg_2"))),
        );
        assert_eq!(sent(&mut agent), format!("{BLOCK_START}{PING}{DELTA}"));
    }

    /// A stall after the block opened, before its first text: the retry's
    /// block start, which the agent has, is not sent again.
    #[test]
    fn a_retried_attempt_does_not_start_a_block_the_agent_has() {
        let (answer, mut agent) = answer(Dialect::AnthropicMessages);
        let head = AgentHead::of(200, &HeaderMap::new());
        answer.opens(1);
        answer.accepted(1, &head, &Bytes::from(format!("{MESSAGE_START}{BLOCK_START}{PING}")));
        assert_eq!(sent(&mut agent), format!("{MESSAGE_START}{BLOCK_START}{PING}"));
        answer.opens(2);
        answer.accepted(2, &head, &Bytes::from(format!("{MESSAGE_START}{BLOCK_START}{PING}{DELTA}{BLOCK_START}")));
        // After its first text the retry is no longer looked at.
        assert_eq!(sent(&mut agent), format!("{PING}{DELTA}{BLOCK_START}"));
    }

    /// An agent that went before any head went got nothing: its call is
    /// cut, not answered with the guard's own error.
    #[test]
    fn an_agent_gone_before_the_head_got_nothing() {
        let (answer, agent) = answer(Dialect::OpenAiChat);
        drop(agent);
        let mut report = CallReport::empty(0, Target::new("upstream", "gpt-x"));
        report.outcome = Outcome::Cancelled;
        assert_eq!(answer.ended(&report, false), Delivered::Cut);
        // Observe stopping while the agent waits answers it.
        let (answer, _agent) = self::answer(Dialect::OpenAiChat);
        assert_eq!(answer.ended(&report, true), Delivered::OwnAnswer(503));
    }

    /// The agent's request with every kind of header an agent sends.
    fn request(dialect: Dialect) -> GuardedRequest {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("user-agent", "agent/1.0"),
            ("accept-encoding", "gzip"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "tools-2024"),
            ("openai-beta", "assistants=v2"),
            ("authorization", "Bearer sk-agent"),
            ("x-api-key", "sk-agent"),
            ("api-key", "sk-agent"),
            ("cookie", "session=agent"),
            ("helicone-auth", "Bearer sk-helicone"),
            ("x-portkey-api-key", "pk-agent"),
            ("cf-aig-authorization", "Bearer cf-agent"),
            ("x-goog-api-key", "goog-agent"),
            ("openai-organization", "org-agent"),
            ("openai-project", "proj-agent"),
            ("x-custom-trace", "agent-trace"),
        ] {
            headers.insert(http::HeaderName::from_static(name), http::HeaderValue::from_static(value));
        }
        GuardedRequest {
            client: reqwest::Client::new(),
            method: reqwest::Method::POST,
            url: "http://127.0.0.1:9/v1/chat/completions".to_owned(),
            headers,
            body: Bytes::from_static(br#"{"model":"gpt-x","stream":true}"#),
            model: "gpt-x".to_owned(),
            dialect,
            own: "upstream".to_owned(),
        }
    }

    /// The headers of `request`'s attempt to `target`, sorted.
    fn sent_headers(request: &GuardedRequest, target: &Target, elsewhere: &HashMap<String, Elsewhere>) -> Vec<String> {
        let built = request.to(target, elsewhere, Some("sk-backup")).unwrap().build().unwrap();
        let mut headers: Vec<String> =
            built.headers().iter().map(|(n, v)| format!("{n}: {}", v.to_str().unwrap())).collect();
        headers.sort();
        headers
    }

    /// A hop to another provider takes the agent's allow-listed headers,
    /// the row's own and its configured key, nothing else; the agent's own
    /// provider gets the agent's headers (but for the encoding it asks).
    #[test]
    fn a_hop_elsewhere_takes_only_the_allow_listed_headers_and_the_configured_key() {
        for (dialect, expected) in [
            (
                Dialect::OpenAiChat,
                &[
                    "accept: text/event-stream",
                    "authorization: Bearer sk-backup",
                    "content-type: application/json",
                    "openai-beta: assistants=v2",
                    "user-agent: agent/1.0",
                    "x-row: row-value",
                ][..],
            ),
            (
                Dialect::AnthropicMessages,
                &[
                    "accept: text/event-stream",
                    "anthropic-beta: tools-2024",
                    "anthropic-version: 2023-06-01",
                    "content-type: application/json",
                    "user-agent: agent/1.0",
                    "x-api-key: sk-backup",
                    "x-row: row-value",
                ],
            ),
        ] {
            let mut row = HeaderMap::new();
            row.insert("x-row", http::HeaderValue::from_static("row-value"));
            let there = Elsewhere {
                dialect,
                base_url: "http://127.0.0.1:9/v1".to_owned(),
                headers: row,
                client: reqwest::Client::new(),
            };
            let elsewhere = HashMap::from([("backup".to_owned(), there)]);
            let request = request(dialect);
            assert_eq!(sent_headers(&request, &Target::new("backup", "gpt-b"), &elsewhere), expected, "{dialect}");
            let own = sent_headers(&request, &Target::new("upstream", "gpt-x"), &elsewhere);
            assert_eq!(own.len(), request.headers.len() - 1, "{dialect}: {own:?}");
            assert!(own.contains(&"helicone-auth: Bearer sk-helicone".to_owned()), "{dialect}: {own:?}");
            assert!(!own.iter().any(|h| h.starts_with("accept-encoding")), "{dialect}: {own:?}");
        }
    }
}
