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

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use http::HeaderMap;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, PollSender};

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
    /// Its attempt under way, which the attempts of a guarded call move.
    pub attempt: Arc<AtomicU32>,
}

impl AgentGone {
    /// The agent went: said once, and the call cancelled.
    pub(super) fn departed(&self) {
        if !self.token.is_cancelled() {
            let at = Instant::now().saturating_duration_since(self.epoch);
            let kind = EventKind::AgentDisconnected;
            let attempt = self.attempt.load(Ordering::Relaxed);
            self.sink.emit(Event { at, stream: self.stream, attempt, kind });
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
            pending.agent_gone.attempt.store(request.attempt, Ordering::Relaxed);
            let body: Body = relay(response, pending.agent, pending.agent_gone).boxed();
            Ok(Response { decoder: Some(Box::new(pending.dialect.decoder())), ..Response::new(status, headers, body) })
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        // Never used: every observed response brings its own dialect's.
        Box::new(Dialect::OpenAiChat.decoder())
    }
}

/// Hands `response` to the agent: its head at once, then its body chunk
/// by chunk as it is read ([`Relay`]); returns the stream of each chunk's
/// decoded copy, for the core or the recording, which the relay is
/// driven by. An agent already gone when the head is in ends the call
/// ([`AgentGone`]).
pub(super) fn relay(response: reqwest::Response, agent: oneshot::Sender<ToAgent>, agent_gone: AgentGone) -> Relay {
    let (agent_tx, agent_rx) = mpsc::channel(AGENT_QUEUE);
    let head =
        ToAgent { status: response.status().as_u16(), headers: end_to_end(response.headers(), &[]), body: agent_rx };
    if agent.send(head).is_err() {
        agent_gone.departed();
    }
    let closed = agent_tx.clone();
    Relay {
        delivery: Delivery::of(response.headers()),
        decoder: CopyDecoder::of(response.status().as_u16(), response.headers()),
        upstream: Some(response.bytes_stream().boxed()),
        agent_closed: Box::pin(async move { closed.closed().await }),
        agent: PollSender::new(agent_tx),
        held: None,
        copies: VecDeque::new(),
        agent_gone,
        gone: false,
    }
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

/// The upstream's body read by whoever reads its copies (the core's
/// governor, or the pass-through), each chunk handed to the agent first:
/// one task reads, relays and decodes, with no hand-over between them.
/// A slow agent holds the next chunk back (back-pressure, never a buffer
/// of the stream). The agent gone before it had the whole body, the call
/// is cancelled and the upstream let go; an upstream that breaks breaks
/// the agent's body too. Dropped before the upstream's end (the stream
/// said it was done), the rest of the body still reaches the agent.
pub(super) struct Relay {
    /// The upstream's body, until it ends.
    upstream: Option<BoxStream<'static, reqwest::Result<Bytes>>>,
    /// The agent's body.
    agent: PollSender<Result<Bytes, std::io::Error>>,
    /// Resolves when the agent's body is let go: noticed while the
    /// upstream is silent, not at its next chunk.
    agent_closed: BoxFuture<'static, ()>,
    /// A chunk read, waiting for room in the agent's body.
    held: Option<Bytes>,
    /// Copies decoded, not yet taken.
    copies: VecDeque<Result<Chunk, Failure>>,
    delivery: Delivery,
    decoder: CopyDecoder,
    agent_gone: AgentGone,
    /// The agent went: the call is cancelled, nothing more is read.
    gone: bool,
}

impl Relay {
    /// The agent went before it had the whole body.
    fn departed(&mut self) {
        self.agent_gone.departed();
        self.gone = true;
        self.upstream = None;
    }
}

impl Stream for Relay {
    type Item = Result<Chunk, Failure>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(copy) = this.copies.pop_front() {
                return Poll::Ready(Some(copy));
            }
            // The call's cancellation ends it; the copies just stop.
            if this.gone {
                return Poll::Pending;
            }
            if !this.delivery.complete() && this.agent_closed.as_mut().poll(cx).is_ready() {
                this.departed();
                continue;
            }
            if let Some(bytes) = this.held.take() {
                match this.agent.poll_reserve(cx) {
                    Poll::Pending => {
                        this.held = Some(bytes);
                        return Poll::Pending;
                    }
                    Poll::Ready(reserved) => {
                        this.delivery.sent(bytes.len());
                        let sent = reserved.is_ok() && this.agent.send_item(Ok(bytes.clone())).is_ok();
                        if !sent && !this.delivery.complete() {
                            this.departed();
                            continue;
                        }
                        this.copies.extend(this.decoder.decode(&bytes));
                        continue;
                    }
                }
            }
            let Some(upstream) = this.upstream.as_mut() else { return Poll::Ready(None) };
            match upstream.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(bytes))) => this.held = Some(bytes),
                Poll::Ready(Some(Err(error))) => {
                    let failure = failure_from_reqwest(&error, CONNECT_TIMEOUT, None);
                    // The agent's body breaks as the upstream's did (when
                    // there is room to say so; else it ends there).
                    if let Some(agent) = this.agent.get_ref() {
                        let _ = agent.try_send(Err(std::io::Error::other(failure.to_string())));
                    }
                    this.agent.close();
                    this.upstream = None;
                    this.copies.push_back(Err(failure));
                }
                Poll::Ready(None) => {
                    this.agent.close();
                    this.upstream = None;
                }
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Read no more: the agent still gets every byte, read by a task of
        // its own.
        let Some(mut upstream) = self.upstream.take().filter(|_| !self.gone) else { return };
        let (Some(agent), held) = (self.agent.get_ref().cloned(), self.held.take()) else { return };
        tokio::spawn(async move {
            if let Some(bytes) = held
                && agent.send(Ok(bytes)).await.is_err()
            {
                return;
            }
            while let Some(next) = upstream.next().await {
                let next = next
                    .map_err(|e| std::io::Error::other(failure_from_reqwest(&e, CONNECT_TIMEOUT, None).to_string()));
                let broke = next.is_err();
                if agent.send(next).await.is_err() || broke {
                    return;
                }
            }
        });
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
