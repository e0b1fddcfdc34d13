//! The agent's side of a call: the body it reads, and the one place that
//! notices it going, for observed and guarded calls alike.
//!
//! An agent goes by closing its connection (its own timeout, a cancel).
//! hyper then drops what serves the request: before the response head, the
//! request's future, which holds the call's [`AgentLink`]; after it, the
//! response's [`AgentBody`], which the link has moved into. Either way the
//! link is dropped before the agent had its whole answer, and that drop is
//! where the call hears of it ([`AgentGone::departed`]), whether the
//! upstream is streaming or silent. A link is disarmed when the answer
//! ends, or when every byte the head announced went out (an agent whose
//! connection lets the body go then has not given up).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use hyper::body::Frame;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::event::{Event, EventKind, EventSink, StreamId};

/// How a call ends when its agent goes before it has its whole response:
/// the call's events say so where it was noticed
/// ([`EventKind::AgentDisconnected`]), then its token is cancelled and the
/// core ends it there. Observe stopping cancels the token too, and is not
/// the agent going; nor is an agent that goes once its call is over.
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
    /// The call has ended: what the agent does now is no part of it.
    over: Arc<AtomicBool>,
}

impl AgentGone {
    /// For call `stream`, whose events go to `sink` stamped from `epoch`,
    /// ended by `token`.
    pub fn new(token: CancellationToken, sink: Arc<dyn EventSink>, epoch: Instant, stream: StreamId) -> AgentGone {
        AgentGone { token, sink, epoch, stream, attempt: Arc::new(AtomicU32::new(1)), over: Arc::default() }
    }

    /// The agent went: said once, and the call cancelled.
    pub fn departed(&self) {
        if self.over.load(Ordering::Acquire) {
            return;
        }
        if !self.token.is_cancelled() {
            let at = Instant::now().saturating_duration_since(self.epoch);
            let attempt = self.attempt.load(Ordering::Relaxed);
            self.sink.emit(Event { at, stream: self.stream, attempt, kind: EventKind::AgentDisconnected });
        }
        self.token.cancel();
    }

    /// The call has ended.
    pub fn call_over(&self) {
        self.over.store(true, Ordering::Release);
    }
}

/// The agent's end of a call, armed while it waits for its answer: dropped
/// armed, the agent went ([`AgentGone::departed`]).
pub(super) struct AgentLink {
    gone: AgentGone,
    /// The body's length, when the head announced one.
    expected: Option<u64>,
    /// Body bytes handed to the agent's connection.
    sent: u64,
    armed: bool,
}

impl AgentLink {
    /// Armed, for the call `gone` ends.
    pub fn new(gone: AgentGone) -> AgentLink {
        AgentLink { gone, expected: None, sent: 0, armed: true }
    }

    /// Hands the agent `status`, `headers` and the chunks of `body`: the
    /// response hyper writes, with this link inside its body.
    pub fn answer(
        mut self,
        status: u16,
        headers: HeaderMap,
        body: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    ) -> hyper::Response<AgentBody> {
        self.expected =
            headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
        let mut response = hyper::Response::new(AgentBody { body, link: self });
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
        *response.headers_mut() = headers;
        response
    }

    /// The agent is answered in full, or needs nothing more: its going is
    /// no longer the call's.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for AgentLink {
    fn drop(&mut self) {
        let complete = self.expected.is_some_and(|n| self.sent >= n);
        if self.armed && !complete {
            self.gone.departed();
        }
    }
}

/// The body an agent reads: each chunk as the call hands it over, its
/// link inside.
pub(super) struct AgentBody {
    body: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    link: AgentLink,
}

impl hyper::body::Body for AgentBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        match this.body.poll_recv(cx) {
            Poll::Ready(Some(Ok(bytes))) => {
                this.link.sent += bytes.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            // A body that breaks was the upstream's doing: the agent gets
            // the break, and has not gone.
            Poll::Ready(Some(Err(error))) => {
                this.link.disarm();
                Poll::Ready(Some(Err(error)))
            }
            Poll::Ready(None) => {
                this.link.disarm();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::VecSink;
    use http_body_util::BodyExt;

    fn gone() -> (AgentGone, Arc<VecSink>) {
        let sink = Arc::new(VecSink::default());
        let gone = AgentGone::new(CancellationToken::new(), sink.clone(), Instant::now(), 7);
        (gone, sink)
    }

    fn disconnects(sink: &VecSink) -> usize {
        sink.events().iter().filter(|e| matches!(e.kind, EventKind::AgentDisconnected)).count()
    }

    #[tokio::test]
    async fn an_agent_that_goes_before_its_head_or_mid_body_is_heard_once() {
        // Before the head: the request's future, holding the link, dropped.
        let (before, sink) = gone();
        drop(AgentLink::new(before.clone()));
        assert!(before.token.is_cancelled());
        assert_eq!(disconnects(&sink), 1);

        // Mid-body: the response dropped with the upstream silent.
        let (during, sink) = gone();
        let (tx, rx) = mpsc::channel(4);
        let response = AgentLink::new(during.clone()).answer(200, HeaderMap::new(), rx);
        tx.send(Ok(Bytes::from_static(b"data: 1\n\n"))).await.unwrap();
        let mut body = response.into_body();
        assert!(body.frame().await.is_some());
        drop(body);
        assert!(during.token.is_cancelled());
        assert_eq!(disconnects(&sink), 1);
    }

    #[tokio::test]
    async fn an_answer_read_to_its_end_or_its_length_or_a_call_over_is_no_going() {
        // Read to its end.
        let (ended, sink) = gone();
        let (tx, rx) = mpsc::channel(4);
        let mut body = AgentLink::new(ended.clone()).answer(200, HeaderMap::new(), rx).into_body();
        tx.send(Ok(Bytes::from_static(b"x"))).await.unwrap();
        drop(tx);
        while body.frame().await.is_some() {}
        drop(body);
        // Every byte its length announced, then let go.
        let (whole, _) = gone();
        let (tx, rx) = mpsc::channel(4);
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, 2.into());
        let mut body = AgentLink::new(whole.clone()).answer(200, headers, rx).into_body();
        tx.send(Ok(Bytes::from_static(b"ok"))).await.unwrap();
        assert!(body.frame().await.is_some());
        drop(body);
        // The call ended first.
        let (over, _) = gone();
        over.call_over();
        drop(AgentLink::new(over.clone()));
        // Observe stopping: cancelled, but not said.
        let (stopping, stopped) = gone();
        stopping.token.cancel();
        drop(AgentLink::new(stopping.clone()));

        assert!(!ended.token.is_cancelled() && !whole.token.is_cancelled() && !over.token.is_cancelled());
        assert_eq!(disconnects(&sink) + disconnects(&stopped), 0);
    }
}
