//! What an attempt talks to: a provider endpoint that opens a streaming
//! response, and the decoder that turns its bytes into classed events.
//!
//! Provider dialects implement these over HTTP; tests implement them with
//! scripted streams. Neither retries: retrying is the executor's alone.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use http::HeaderMap;
use tokio::time::Instant;

use super::credentials::Credential;
use super::event::{EventClass, StreamId};
use super::failover::Target;
use super::failure::Failure;

/// What the caller asks of a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallInput {
    /// The prompt.
    pub prompt: String,
    /// Estimated context size in tokens (drives the TTFB and stale rules).
    pub context_tokens: Option<u64>,
    /// What the response's body is read as.
    pub expect: Expect,
}

/// What a call's response body is read as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Expect {
    /// An event stream of the provider's dialect: a success is a 2xx event
    /// stream that says it is done; any other 2xx body is a failure.
    #[default]
    Stream,
    /// A whole answer of any kind (a models list, embeddings, a completion
    /// without a stream, as an agent's request through observe may be): a
    /// 2xx is a success once its body has all come. Its bytes are counted,
    /// not decoded, and no progress clock runs on it.
    Answer,
}

/// One attempt's request.
#[derive(Debug, Clone, Copy)]
pub struct AttemptRequest<'a> {
    /// The call it belongs to (sent as `x-stallscope-stream` so a simulator
    /// can tell attempts of one call apart).
    pub stream: StreamId,
    /// The attempt's number within the call, from 1.
    pub attempt: u32,
    /// Where it goes.
    pub target: &'a Target,
    /// The key to use, if the provider needs one.
    pub credential: Option<&'a Credential>,
    /// What the caller asked.
    pub input: &'a CallInput,
}

/// A piece of a response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Its bytes.
    pub bytes: Bytes,
    /// When it arrived, when the body knows: a replayed body hands its
    /// chunks over ahead of the virtual clock, each stamped with its
    /// recorded arrival, so a flowing replayed stream costs no wake of the
    /// clock per chunk. `None`: it arrived as it was read.
    pub arrived: Option<Instant>,
}

impl From<Bytes> for Chunk {
    /// Bytes that arrived as they were read.
    fn from(bytes: Bytes) -> Self {
        Chunk { bytes, arrived: None }
    }
}

/// A response body, chunk by chunk.
pub type Body = BoxStream<'static, Result<Chunk, Failure>>;

/// A response whose headers have arrived.
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Body,
    /// A decoder of this body's own, instead of the upstream's: a replayed
    /// response decodes into the events that were recorded.
    pub decoder: Option<Box<dyn Decoder>>,
    /// Handed each chunk of an event stream once the governor has taken
    /// it in: decoded, its events counted, with no clock come due before
    /// it and no error in it. Whoever relays the stream on (the guard, to
    /// its agent) hands on exactly what the core has seen, so what the
    /// agent got and what the core decides from (content streamed or not)
    /// never disagree.
    pub accepted: Option<Accepted>,
}

/// Whether a response with `status` and `content_type` is read as an event
/// stream: a 2xx whose content type is `text/event-stream` (in any case,
/// with any parameters). The governor reads a body so, and whatever reads
/// a body as the governor does asks here.
pub fn is_event_stream(status: u16, content_type: Option<&str>) -> bool {
    (200..300).contains(&status)
        && content_type.is_some_and(|ct| ct.to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The `content-type` of `headers`, when it is text.
pub fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// What a response's [`Response::accepted`] is given.
pub type Accepted = Box<dyn FnMut(&Bytes) + Send>;

impl Response {
    /// A response decoded by its upstream's decoder.
    pub fn new(status: u16, headers: HeaderMap, body: Body) -> Self {
        Response { status, headers, body, decoder: None, accepted: None }
    }
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response").field("status", &self.status).field("headers", &self.headers).finish_non_exhaustive()
    }
}

/// One thing a decoder found in the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A stream event of a class, with the text it carries (content,
    /// reasoning or tool-call arguments; empty for the rest).
    Event {
        /// Its class.
        class: EventClass,
        /// Its text: owned, or borrowed where a replay fills in text the
        /// recording did not keep (millions of events, none allocated).
        text: Cow<'static, str>,
    },
    /// The provider reported why generation stopped.
    StopReason(String),
    /// The stream says it is complete.
    Done,
    /// The stream carried an error event.
    Error {
        /// The provider's error type or code.
        code: Option<String>,
        /// Its message.
        message: String,
    },
    /// The bytes are not a valid stream.
    Malformed(String),
}

/// Turns a byte stream into decoded events, however the bytes are split.
pub trait Decoder: Send {
    /// Feeds one chunk.
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<Decoded>);
    /// The body ended: flush what is pending.
    fn finish(&mut self, out: &mut Vec<Decoded>);
}

/// A provider endpoint.
pub trait Upstream: Send + Sync {
    /// Sends the request and resolves when the response headers arrive.
    fn open<'a>(&'a self, request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>>;
    /// A fresh decoder for one response body.
    fn decoder(&self) -> Box<dyn Decoder>;
}

/// The endpoints a call may use, by provider name, and every configured
/// target in config order (for the default failover chain).
#[derive(Clone, Default)]
pub struct Upstreams {
    /// Endpoint per provider name.
    pub providers: HashMap<String, Arc<dyn Upstream>>,
    /// Every configured provider/model pair, in config order.
    pub targets: Vec<Target>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams").field("targets", &self.targets).finish_non_exhaustive()
    }
}
