//! The relay between an agent and its upstream: the request goes on as it
//! came (hop-by-hop headers aside), the response comes back to the agent
//! chunk by chunk as it is read, never buffered, re-chunked or decoded,
//! and a copy of every chunk goes to the core's governor, which records
//! and parses it under observe's policy, where no clock acts. Only the
//! copy is decoded from its `content-encoding` (gzip, deflate, br; see
//! [`CopyDecoder`]): the agent's bytes stay as they came.
//!
//! [`ObservedUpstream`] is the core's [`Upstream`] for observed calls: the
//! executor opens each call's one attempt through it as through any
//! provider, so an observed stream's events are the events of any run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use http::HeaderMap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::encoding::CopyDecoder;
use crate::core::event::{Event, EventKind, EventSink, StreamId};
use crate::core::failure::{Failure, TransportKind};
use crate::core::transport::failure_from_reqwest;
use crate::core::upstream::{AttemptRequest, Body, Chunk, Decoder, Response, Upstream};
use crate::providers::Dialect;

/// Headers that describe one connection, not the message (RFC 9110
/// §7.6.1): never forwarded, in either direction.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Chunks waiting for a slow agent before the relay stops reading the
/// upstream: back-pressure, as a proxy gives, never a buffer of the
/// stream.
const AGENT_QUEUE: usize = 16;

/// How long the upstream's connection may take: the one limit observe
/// keeps (a route that never connects would hold the agent forever).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// `headers` without the hop-by-hop ones, those the `connection` header
/// names, and `extra` (lower-case).
pub(super) fn end_to_end(headers: &HeaderMap, extra: &[&str]) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|name| name.trim().to_ascii_lowercase()))
        .collect();
    let mut kept = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if !HOP_BY_HOP.contains(&n) && !extra.contains(&n) && !named.iter().any(|c| c == n) {
            kept.append(name.clone(), value.clone());
        }
    }
    kept
}

/// The response as the agent gets it: its head, and its body's chunks
/// (an error ends the body unfinished, as the upstream's did).
pub(super) struct ToAgent {
    /// Status.
    pub status: u16,
    /// End-to-end headers, as the upstream sent them.
    pub headers: HeaderMap,
    /// The body's chunks as they are read.
    pub body: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

/// An agent's request waiting for its call's attempt to send it.
pub(super) struct Pending {
    /// The request, ready to send.
    pub request: reqwest::RequestBuilder,
    /// The dialect its path names.
    pub dialect: Dialect,
    /// Where the response goes once its headers are in.
    pub agent: oneshot::Sender<ToAgent>,
    /// What ends the call when the agent stops reading.
    pub agent_gone: AgentGone,
}

/// How a call ends when its agent goes before it has its whole response
/// (its own timeout, or it gave up): the call's events say so where it
/// was noticed ([`EventKind::AgentDisconnected`]), then its token is
/// cancelled and the core ends it there. Observe stopping cancels the
/// token too, and is not the agent going.
#[derive(Clone)]
pub(super) struct AgentGone {
    /// The call's cancellation.
    pub token: CancellationToken,
    /// Where the call's events go.
    pub sink: Arc<dyn EventSink>,
    /// What the call's events are stamped from.
    pub epoch: Instant,
    /// The call.
    pub stream: StreamId,
    /// Its attempt under way.
    pub attempt: u32,
}

impl AgentGone {
    /// The agent went: said once, and the call cancelled.
    fn departed(&self) {
        if !self.token.is_cancelled() {
            let at = Instant::now().saturating_duration_since(self.epoch);
            let kind = EventKind::AgentDisconnected;
            self.sink.emit(Event { at, stream: self.stream, attempt: self.attempt, kind });
        }
        self.token.cancel();
    }
}

/// The upstream of observed calls: each call's request, sent when the
/// executor opens its attempt.
#[derive(Default)]
pub(super) struct ObservedUpstream {
    pending: Mutex<HashMap<StreamId, Pending>>,
}

impl ObservedUpstream {
    /// Holds `pending` for the attempt of call `stream`.
    pub fn expect(&self, stream: StreamId, pending: Pending) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(stream, pending);
    }
}

impl Upstream for ObservedUpstream {
    fn open<'a>(&'a self, request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&request.stream);
        Box::pin(async move {
            // Observe's policy makes one attempt a call: a second would find
            // nothing to send, and the agent's request is sent once.
            let Some(pending) = pending else {
                let message = "observe sends an agent's request once".to_owned();
                return Err(Failure::Transport { kind: TransportKind::Other, message });
            };
            let response = pending.request.send().await.map_err(|e| failure_from_reqwest(&e, CONNECT_TIMEOUT, None))?;
            let (status, headers) = (response.status().as_u16(), response.headers().clone());
            let agent_gone = AgentGone { attempt: request.attempt, ..pending.agent_gone };
            let copies = relay(response, pending.agent, agent_gone);
            let body: Body = futures_util::stream::unfold(copies, |mut rx| async move {
                let next = rx.recv().await?;
                Some((next, rx))
            })
            .boxed();
            Ok(Response { status, headers, body, decoder: Some(Box::new(pending.dialect.decoder())) })
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        // Never used: every observed response brings its own dialect's.
        Box::new(Dialect::OpenAiChat.decoder())
    }
}

/// Hands `response` to the agent: its head at once, then its body chunk
/// by chunk as it is read (see [`pump`]); returns a decoded copy of each chunk,
/// for the core or the recording. An agent already gone when the head is
/// in ends the call ([`AgentGone`]).
pub(super) fn relay(
    response: reqwest::Response,
    agent: oneshot::Sender<ToAgent>,
    agent_gone: AgentGone,
) -> mpsc::UnboundedReceiver<Result<Chunk, Failure>> {
    let (agent_tx, agent_rx) = mpsc::channel(AGENT_QUEUE);
    let head =
        ToAgent { status: response.status().as_u16(), headers: end_to_end(response.headers(), &[]), body: agent_rx };
    if agent.send(head).is_err() {
        agent_gone.departed();
    }
    let (copies_tx, copies) = mpsc::unbounded_channel();
    tokio::spawn(pump(response, agent_tx, copies_tx, agent_gone));
    copies
}

/// How much of a response's body the agent has been handed, against
/// what its `content-length` says: an agent whose connection lets the body
/// go once it has every byte has not given up.
struct Delivery {
    expected: Option<u64>,
    sent: u64,
}

impl Delivery {
    /// For a response with `headers`.
    fn of(headers: &HeaderMap) -> Delivery {
        let expected =
            headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
        Delivery { expected, sent: 0 }
    }

    /// `n` more bytes handed over.
    fn sent(&mut self, n: usize) {
        self.sent += n as u64;
    }

    /// Whether every byte the response announced has been handed over.
    fn complete(&self) -> bool {
        self.expected.is_some_and(|n| self.sent >= n)
    }
}

/// Reads the upstream's body to its end: each chunk to the agent first,
/// then its copy, decoded, to the core. The agent gone before it had the
/// whole body, the upstream is let go and the call cancelled; an upstream
/// that breaks breaks the agent's body too.
async fn pump(
    response: reqwest::Response,
    agent: mpsc::Sender<Result<Bytes, std::io::Error>>,
    core: mpsc::UnboundedSender<Result<Chunk, Failure>>,
    agent_gone: AgentGone,
) {
    let mut delivery = Delivery::of(response.headers());
    let mut copies = CopyDecoder::of(response.status().as_u16(), response.headers());
    let mut body = response.bytes_stream();
    loop {
        // An agent that gives up while the upstream is silent is noticed
        // when it goes, not at the next chunk.
        let next = tokio::select! {
            biased;
            () = agent.closed(), if !delivery.complete() => {
                agent_gone.departed();
                return;
            }
            next = body.next() => next,
        };
        let Some(next) = next else { return };
        match next {
            Ok(bytes) => {
                delivery.sent(bytes.len());
                if agent.send(Ok(bytes.clone())).await.is_err() && !delivery.complete() {
                    agent_gone.departed();
                    return;
                }
                // The core may have stopped reading (the stream said it was
                // done); the agent still gets every byte.
                for copy in copies.decode(&bytes) {
                    let _ = core.send(copy);
                }
            }
            Err(error) => {
                let failure = failure_from_reqwest(&error, CONNECT_TIMEOUT, None);
                let _ = agent.send(Err(std::io::Error::other(failure.to_string()))).await;
                let _ = core.send(Err(failure));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_stay_behind() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-trace"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("x-trace", "1"),
            ("authorization", "Bearer sk-agent"),
            ("content-type", "application/json"),
            ("host", "127.0.0.1:8787"),
        ] {
            headers.append(http::HeaderName::from_static(name), http::HeaderValue::from_static(value));
        }
        let kept = end_to_end(&headers, &["host"]);
        let names: Vec<&str> = kept.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["authorization", "content-type"], "the agent's own key goes on");
    }
}
