//! One agent request, from its arrival to the end of its response: routed,
//! forwarded, answered as the upstream answers, and recorded as one call.
//!
//! A streamed request of a dialect (`"stream": true` to chat completions,
//! Responses or Messages) is a call of the core's executor under
//! observe's policy ([`super::WATCH_ONLY`]): its one attempt goes through
//! the governor, so its events, verdict and replay are those of any run.
//! Any other request (a models list, embeddings, a completion without a
//! stream) passes through and is recorded as an attempt without a stream.
//! Observe itself answers only what it must: 404 for a path no route
//! takes, 413 for a request body over its limit, 502 (naming why) when the
//! upstream could not be reached.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full, Limited, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::guard::{Answer, GUARD_HEADER, Guarded, GuardedRequest, GuardedUpstream};
use super::relay::{AgentGone, CONNECT_TIMEOUT, Pending, ToAgent, end_to_end, relay};
use super::retries::{Continuing, Ended, Key};
use super::segment::{Calls, Segment};
use super::{State, routes};
use crate::core::category::Category;
use crate::core::event::{AttemptEnd, Event, EventKind, Outcome, StreamId};
use crate::core::evidence::{recorded_error_body, recorded_headers};
use crate::core::executor::{Call, CallReport, Executor};
use crate::core::failover::Target;
use crate::core::failure::Failure;
use crate::core::governor::ERROR_BODY_LIMIT;
use crate::core::transport::failure_from_reqwest;
use crate::core::upstream::CallInput;

/// The body of a response to the agent.
pub(super) type AgentBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// The largest request body forwarded: well above any prompt an SDK
/// sends (a million tokens is about 4 MB).
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// Answers one agent request.
pub(super) async fn handle(
    state: Arc<State>,
    request: hyper::Request<Incoming>,
) -> Result<hyper::Response<AgentBody>, Infallible> {
    let guards = state.guards;
    let mut response = answer(state, request).await;
    // The agent can tell the guard is there from any answer it gives.
    if guards {
        response.headers_mut().insert(GUARD_HEADER, http::HeaderValue::from_static("on"));
    }
    Ok(response)
}

/// The answer to one agent request.
async fn answer(state: Arc<State>, request: hyper::Request<Incoming>) -> hyper::Response<AgentBody> {
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let Some(routed) = state.routes.route(&path) else {
        let why = format!("stallscope observe: no route for {path}; routes: {}\n", state.routes.describe());
        return plain(404, why);
    };
    let (url, dialect, route) = (routed.url, routed.dialect, routed.route.name.clone());
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            let why = format!(
                "stallscope observe: the request body could not be read ({error}); at most {MAX_REQUEST_BYTES} bytes are forwarded\n"
            );
            return plain(413, why);
        }
    };
    let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = asked.get("model").and_then(|m| m.as_str()).unwrap_or("-");
    let streamed = asked.get("stream").and_then(serde_json::Value::as_bool) == Some(true);
    let Some(client) = state.clients.get(&route) else { return plain(500, format!("no client for {route}\n")) };
    let key = Key::of(&url, &body);
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap_or(reqwest::Method::POST);
    // A retry of a call that failed or was cut goes on as its next attempt.
    let (segment, stream, mut retried) = state.admit(state.recent.retried(&key, Instant::now()));
    let mut executor = segment.executor.clone();
    if let Some(ended) = &mut retried {
        let now = Instant::now();
        segment.going.resume(stream, std::mem::take(&mut ended.record));
        executor.sink.emit(ended.backoff(ended.at.saturating_duration_since(executor.epoch), now - ended.at));
        executor.sink = Arc::new(Continuing { inner: executor.sink, before: ended.report.attempts });
    }
    let target = Target::new(routes::provider_name(&route, dialect.filter(|_| streamed)), model);
    let agent_gone = AgentGone {
        token: state.cancel.child_token(),
        sink: Arc::clone(&executor.sink),
        epoch: executor.epoch,
        stream,
        attempt: Arc::new(AtomicU32::new(1)),
    };
    if let (Some(dialect), Calls::Guarded(guarded)) = (dialect.filter(|_| streamed), &segment.calls) {
        let guarded = Arc::clone(guarded);
        let request = GuardedRequest {
            client: client.clone(),
            method,
            url,
            headers: end_to_end(&parts.headers, &["host", "content-length"]),
            body,
            model: model.to_owned(),
            dialect,
            own: target.provider.clone(),
        };
        let call =
            GuardedCall { state, segment, upstream: guarded, executor, stream, target, key, retried, agent_gone };
        return call.answer(request).await;
    }
    let forwarded =
        client.request(method, &url).headers(end_to_end(&parts.headers, &["host", "content-length"])).body(body);
    let (agent_tx, agent_rx) = oneshot::channel();
    let state_of_call = Arc::clone(&state);
    let call = tokio::spawn(async move {
        let state = state_of_call;
        let report = match (dialect.filter(|_| streamed), &segment.calls) {
            (Some(dialect), Calls::Observed(upstream)) => {
                let pending = Pending { request: forwarded, dialect, agent: agent_tx, agent_gone: agent_gone.clone() };
                upstream.expect(stream, pending);
                let call = Call { stream, target, input: CallInput::default(), not_before: None };
                executor.run(&call, &agent_gone.token).await
            }
            _ => pass_through(&executor, stream, target, forwarded, agent_tx, &agent_gone).await,
        };
        state.finished(segment, report, key, retried, None).await
    });
    match agent_rx.await {
        Ok(answer) => to_agent(answer),
        // No answer came: the upstream could not be reached (or the call
        // ended otherwise before its headers); say why.
        Err(_) => {
            let why = match call.await {
                Ok(Some(why)) => why,
                _ => "the call ended before the upstream answered".to_owned(),
            };
            plain(502, format!("stallscope observe: {url}: {why}\n"))
        }
    }
}

/// A streamed call of a dialect under the guard, ready to start.
struct GuardedCall {
    state: Arc<State>,
    segment: Arc<Segment>,
    upstream: Arc<GuardedUpstream>,
    executor: Executor,
    stream: StreamId,
    target: Target,
    key: Key,
    retried: Option<Ended>,
    agent_gone: AgentGone,
}

impl GuardedCall {
    /// Runs the call through the executor and answers the agent as the
    /// guard does ([`super::guard`]): the head once an attempt's stream is
    /// taken in, or once the call ends without one.
    async fn answer(self, request: GuardedRequest) -> hyper::Response<AgentBody> {
        let GuardedCall { state, segment, upstream, executor, stream, target, key, retried, agent_gone } = self;
        let (answer, side) = Answer::new(request.dialect, &request.model, agent_gone.clone());
        let guarded =
            Guarded { request: Arc::new(request), answer: Arc::clone(&answer), agent_gone: agent_gone.clone() };
        upstream.expect(stream, guarded);
        // The agent's going is noticed when it goes: the receiver of its
        // body (held by this request until the head comes, then by its
        // response) is let go.
        let (closed, over) = (answer.agent_closed(), CancellationToken::new());
        let (gone, call_over) = (agent_gone.clone(), over.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = closed => gone.departed(),
                () = call_over.cancelled() => {}
            }
        });
        tokio::spawn(async move {
            let call = Call { stream, target, input: CallInput::default(), not_before: None };
            let report = executor.run(&call, &agent_gone.token).await;
            let delivered = answer.ended(&report, state.cancel.is_cancelled());
            upstream.done(stream);
            over.cancel();
            state.finished(segment, report, key, retried, Some(delivered)).await
        });
        match side.head.await {
            Ok((status, headers)) => {
                let mut response = hyper::Response::new(BodyExt::boxed_unsync(Relayed(side.body)));
                *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
                *response.headers_mut() = headers;
                response
            }
            // Every guarded call ends with a head: only a panic gets here.
            Err(_) => plain(502, "stallscope guard: the call ended without an answer\n".to_owned()),
        }
    }
}

/// The agent's response: the upstream's status and headers, then its body
/// as it is read.
fn to_agent(answer: ToAgent) -> hyper::Response<AgentBody> {
    let mut response = hyper::Response::new(BodyExt::boxed_unsync(Relayed(answer.body)));
    *response.status_mut() = http::StatusCode::from_u16(answer.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    *response.headers_mut() = answer.headers;
    response
}

/// The body the relay hands the agent, chunk by chunk as each is sent.
struct Relayed(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl hyper::body::Body for Relayed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx).map(|next| next.map(|chunk| chunk.map(Frame::data)))
    }
}

/// A short text answer of observe's own.
fn plain(status: u16, text: String) -> hyper::Response<AgentBody> {
    let mut response =
        hyper::Response::new(Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// A request that is not a stream of a dialect, forwarded and recorded as
/// one attempt: its headers, its chunks as they came, how it ended.
async fn pass_through(
    executor: &Executor,
    stream: StreamId,
    target: Target,
    request: reqwest::RequestBuilder,
    agent: oneshot::Sender<ToAgent>,
    agent_gone: &AgentGone,
) -> CallReport {
    let started = Instant::now();
    let emit = |attempt, kind| {
        let at = Instant::now().saturating_duration_since(executor.epoch);
        executor.sink.emit(Event { at, stream, attempt, kind });
    };
    emit(0, EventKind::CallStarted { target: target.clone(), context_tokens: None });
    emit(1, EventKind::AttemptStarted { target: target.clone(), credential: None });
    let mut report = CallReport::empty(stream, target.clone());
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            let failure = failure_from_reqwest(&error, CONNECT_TIMEOUT, None);
            return ended(executor, &emit, report, started, Err(failure));
        }
    };
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let now = Instant::now();
    report.ttfb = Some(now - started);
    let content_type = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    emit(1, EventKind::HeadersReceived { status, content_type });
    emit(1, EventKind::ResponseHeaders { headers: recorded_headers(&headers, executor.classifier.headers_read()) });
    let mut copies = relay(response, agent, agent_gone.clone());
    let mut kept = Vec::new();
    let end = loop {
        let next = tokio::select! {
            biased;
            () = agent_gone.token.cancelled() => break Err(Failure::Cancelled),
            next = copies.next() => next,
        };
        match next {
            None => break Ok(()),
            Some(Ok(chunk)) => {
                let bytes = chunk.bytes;
                emit(1, EventKind::ChunkReceived { bytes: bytes.len() });
                report.bytes += bytes.len() as u64;
                if status >= 400 && kept.len() < ERROR_BODY_LIMIT {
                    kept.extend_from_slice(&bytes[..bytes.len().min(ERROR_BODY_LIMIT - kept.len())]);
                }
            }
            Some(Err(failure)) => break Err(failure),
        }
    };
    let end = match end {
        Ok(()) if status >= 400 => {
            let (body, truncated) = recorded_error_body(&kept);
            emit(1, EventKind::ErrorBody { body, truncated });
            let body = String::from_utf8_lossy(&kept).into_owned();
            Err(Failure::Http { status, headers: Box::new(headers), body })
        }
        other => other,
    };
    ended(executor, &emit, report, started, end)
}

/// Records how a passed-through request ended and completes its report.
fn ended(
    executor: &Executor,
    emit: &dyn Fn(u32, EventKind),
    mut report: CallReport,
    started: Instant,
    end: Result<(), Failure>,
) -> CallReport {
    report.elapsed = started.elapsed();
    report.attempts = 1;
    report.outcome = match end {
        Ok(()) => {
            emit(1, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None });
            Outcome::Ok
        }
        Err(failure) => {
            let end = AttemptEnd::of(&failure);
            emit(1, EventKind::AttemptEnded { end, stop_reason: None });
            let c = executor.classifier.classify(&failure, std::time::SystemTime::now());
            emit(1, c.event());
            let outcome = if c.category == Category::Cancelled { Outcome::Cancelled } else { Outcome::Failed };
            report.error = Some(c);
            outcome
        }
    };
    emit(0, EventKind::Finished { outcome: report.outcome, attempts: 1, stop_reason: None });
    report
}
