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
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use http::HeaderMap;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;

use super::agent::AgentGone;
use super::encoding::CopyDecoder;
use crate::core::event::StreamId;
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
    /// The dialect its stream is decoded as; `None`: a whole answer,
    /// not decoded.
    pub dialect: Option<Dialect>,
    /// Where the response goes once its headers are in.
    pub agent: oneshot::Sender<ToAgent>,
    /// What ends the call when the agent stops reading.
    pub agent_gone: AgentGone,
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
            let body: Body = relay(response, pending.agent).boxed();
            let decoder = pending.dialect.map(|dialect| Box::new(dialect.decoder()) as Box<dyn Decoder>);
            Ok(Response { decoder, ..Response::new(status, headers, body) })
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        // Never used: an observed stream brings its own dialect's, and a
        // whole answer is not decoded.
        Box::new(Dialect::OpenAiChat.decoder())
    }
}

/// Hands `response` to the agent: its head at once, then its body chunk
/// by chunk as it is read ([`Relay`]); returns the stream of each chunk's
/// decoded copy, for the core or the recording, which the relay is
/// driven by. (An agent gone before the head is in has ended the call
/// already: [`super::agent`].)
pub(super) fn relay(response: reqwest::Response, agent: oneshot::Sender<ToAgent>) -> Relay {
    let (agent_tx, agent_rx) = mpsc::channel(AGENT_QUEUE);
    let head =
        ToAgent { status: response.status().as_u16(), headers: end_to_end(response.headers(), &[]), body: agent_rx };
    let _ = agent.send(head);
    Relay {
        decoder: CopyDecoder::of(response.status().as_u16(), response.headers()),
        upstream: Some(response.bytes_stream().boxed()),
        agent: PollSender::new(agent_tx),
        held: None,
        copies: VecDeque::new(),
    }
}

/// The upstream's body read by whoever reads its copies (the core's
/// governor, or the pass-through), each chunk handed to the agent first:
/// one task reads, relays and decodes, with no hand-over between them.
/// A slow agent holds the next chunk back (back-pressure, never a buffer
/// of the stream). An agent that let its body go gets nothing more, and
/// the copies go on: the call hears of its going where it went
/// ([`super::agent`]). An upstream that breaks breaks the agent's body
/// too. Dropped before the upstream's end (the stream said it was done),
/// the rest of the body still reaches the agent.
pub(super) struct Relay {
    /// The upstream's body, until it ends.
    upstream: Option<BoxStream<'static, reqwest::Result<Bytes>>>,
    /// The agent's body, until it is let go.
    agent: PollSender<Result<Bytes, std::io::Error>>,
    /// A chunk read, waiting for room in the agent's body.
    held: Option<Bytes>,
    /// Copies decoded, not yet taken.
    copies: VecDeque<Result<Chunk, Failure>>,
    decoder: CopyDecoder,
}

impl Stream for Relay {
    type Item = Result<Chunk, Failure>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(copy) = this.copies.pop_front() {
                return Poll::Ready(Some(copy));
            }
            if let Some(bytes) = this.held.take() {
                if !this.agent.is_closed() {
                    match this.agent.poll_reserve(cx) {
                        Poll::Pending => {
                            this.held = Some(bytes);
                            return Poll::Pending;
                        }
                        Poll::Ready(reserved) => {
                            if reserved.is_err() || this.agent.send_item(Ok(bytes.clone())).is_err() {
                                this.agent.close();
                            }
                        }
                    }
                }
                this.copies.extend(this.decoder.decode(&bytes));
                continue;
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
        let Some(mut upstream) = self.upstream.take() else { return };
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
