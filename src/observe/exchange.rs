//! One agent request, from its arrival to the end of its response, in
//! phases: **route** (which upstream, which dialect); **request filter**
//! (the proxy's limits: an upgrade, a connection past the cap, a request
//! past the in-flight cap, a body too large, too slow or past the request
//! buffer is answered by the proxy itself, [`super::answers`], and
//! recorded); **admit** (its call: a new one, or the next attempt of one
//! the agent retries); then the **call**, through the core's executor for
//! a streamed request of a dialect, observed ([`super::relay`]) or
//! guarded ([`super::guard`]); and **end**, where the call is recorded and
//! counted ([`super::State::finished`]). The agent's going is noticed in
//! one place for every path ([`super::agent`]).
//!
//! A streamed request of a dialect (`"stream": true` to chat completions,
//! Responses or Messages) is a call of the core's executor under
//! observe's policy ([`super::WATCH_ONLY`]) or the guard's. Any other
//! request (a models list, embeddings, a completion without a stream)
//! passes through and is recorded as an attempt without a stream.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, oneshot};
use tokio::time::Instant;

use super::agent::{AgentGone, AgentLink};
use super::answers::{OwnAnswer, ResponseBody};
use super::guard::{Answer, GUARD_HEADER, Guarded, GuardedRequest, GuardedUpstream};
use super::limits::{Limits, Refusal};
use super::relay::{Pending, end_to_end};
use super::retries::{Continuing, Ended, Key};
use super::routes;
use super::segment::Segment;
use super::state::State;
use crate::core::category::Category;
use crate::core::classify::Classification;
use crate::core::event::{Event, EventKind, Outcome, StreamId};
use crate::core::executor::{Call, CallReport, Executor};
use crate::core::failover::Target;
use crate::core::upstream::{CallInput, Expect};
use crate::diagnosis::proxy_rule;
use crate::providers::Dialect;

/// Answers one agent request (`overflow`: on a connection past the cap).
pub(super) async fn handle(
    state: Arc<State>,
    request: hyper::Request<Incoming>,
    overflow: bool,
) -> Result<hyper::Response<ResponseBody>, Infallible> {
    let guards = state.guards;
    let mut response = answer(state, request, overflow).await;
    // The agent can tell the guard is there from any answer it gives.
    if guards {
        response.headers_mut().insert(GUARD_HEADER, http::HeaderValue::from_static("on"));
    }
    Ok(response)
}

/// A request the proxy answers itself, and why.
struct Refused {
    why: Refusal,
    answer: OwnAnswer,
}

/// The answer to one agent request.
async fn answer(state: Arc<State>, request: hyper::Request<Incoming>, overflow: bool) -> hyper::Response<ResponseBody> {
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    // Only a path is appended to an upstream's root: `*` (`OPTIONS *`)
    // would make its URL none.
    if !path.starts_with('/') {
        let why =
            format!("stallscope observe: the request target {path} is not a path; send one, as /v1/chat/completions");
        return OwnAnswer::new(400, why).response(None);
    }
    // Route.
    let Some(routed) = state.routes.route(&path) else {
        let why = format!("stallscope observe: no route for {path}; routes: {}", state.routes.describe());
        return OwnAnswer::new(404, why).response(routes::dialect_of(&path));
    };
    let (url, dialect, route) = (routed.url, routed.dialect, routed.route.name.clone());
    // Request filter: what the proxy refuses before it reads the body.
    let close = request.version() < http::Version::HTTP_2;
    if overflow {
        let why = "stallscope observe: more agent connections are open than PROXY_MAX_CONNECTIONS allows; try again";
        let answer = OwnAnswer::new(503, why).retry_after(1);
        return if close { answer.closing() } else { answer }.response(dialect);
    }
    if is_upgrade(&request) {
        state.limits.refused.count(Refusal::Upgrade);
        let why = "stallscope observe does not carry protocol upgrades (websocket, the Realtime API): send that \
                   request to the provider directly";
        return OwnAnswer::new(501, why).response(dialect);
    }
    let Some(in_flight) = state.limits.in_flight() else {
        let why = "stallscope observe: as many requests are in flight as PROXY_MAX_IN_FLIGHT allows; try again";
        let refused = Refused { why: Refusal::InFlight, answer: OwnAnswer::new(503, why).retry_after(1) };
        return refuse(&state, &url, &route, dialect, refused).await;
    };
    let (parts, body) = request.into_parts();
    // The length hyper frames the body by (a content-length beside a
    // chunked encoding is not one).
    let declared = hyper::body::Body::size_hint(&body).exact();
    let (body, held) = match read_body(body, declared, &state.limits).await {
        Ok(read) => read,
        Err(refused) => return refuse(&state, &url, &route, dialect, refused).await,
    };
    let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = asked.get("model").and_then(|m| m.as_str()).unwrap_or("-");
    let streamed = asked.get("stream").and_then(serde_json::Value::as_bool) == Some(true);
    let Some(client) = state.clients.get(&route).cloned() else {
        return OwnAnswer::new(500, format!("stallscope observe: no client for route {route}")).response(dialect);
    };
    let key = Key::of(&url, &body);
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap_or(reqwest::Method::POST);
    // Admit: a retry of a call that failed or was cut goes on as its next
    // attempt.
    let Some((segment, stream, mut retried)) = state.admit(state.recent.retried(&key, Instant::now())) else {
        state.limits.refused.count(Refusal::Stopping);
        let answer = OwnAnswer::new(503, "stallscope observe is stopping").retry_after(1);
        return if close { answer.closing() } else { answer }.response(dialect);
    };
    // The guard acts on streamed calls of a dialect; the rest is watched.
    let guarded = dialect.filter(|_| streamed).zip(segment.calls.guarded.clone());
    let mut executor = if guarded.is_some() { segment.executor.clone() } else { segment.watching.clone() };
    if let Some(ended) = &mut retried {
        let now = Instant::now();
        segment.going.resume(stream, std::mem::take(&mut ended.record));
        executor.sink.emit(ended.backoff(ended.at.saturating_duration_since(executor.epoch), now - ended.at));
        executor.sink = Arc::new(Continuing { inner: executor.sink, before: ended.report.attempts });
    }
    let target = Target::new(routes::provider_name(&route, dialect.filter(|_| streamed)), model);
    let agent_gone = AgentGone::new(state.cancel.child_token(), Arc::clone(&executor.sink), executor.epoch, stream);
    // Held while the agent waits: dropped with this future when hyper lets
    // it go (the agent went before its head), or moved into its body.
    let link = AgentLink::new(agent_gone.clone());
    let call = Admitted { state, segment, executor, stream, target, key, retried, agent_gone, held: (in_flight, held) };
    let headers = end_to_end(&parts.headers, &["host", "content-length"]);
    if let Some((dialect, guarded)) = guarded {
        let own = call.target.provider.clone();
        let request = GuardedRequest { client, method, url, headers, body, model: model.to_owned(), dialect, own };
        return call.guarded(guarded, request, link).await;
    }
    let forwarded = client.request(method, &url).headers(headers).body(body);
    call.observed(dialect.filter(|_| streamed), forwarded, &url, link).await
}

/// Whether `request` asks to switch protocols (`Upgrade`, or HTTP/2's
/// extended CONNECT).
fn is_upgrade<B>(request: &hyper::Request<B>) -> bool {
    request.headers().contains_key(http::header::UPGRADE) || request.method() == http::Method::CONNECT
}

/// The request body, read whole within the body timeout, at most the
/// largest taken, held within the request buffer (its room, held for as
/// long as the call keeps the body).
async fn read_body(
    body: Incoming,
    declared: Option<u64>,
    limits: &Limits,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Refused> {
    let max = limits.max_request_bytes;
    let too_large = || {
        let why =
            format!("stallscope observe: the request body is larger than PROXY_MAX_REQUEST_MB allows ({max} bytes)");
        Refused { why: Refusal::TooLarge, answer: OwnAnswer::new(413, why) }
    };
    let no_room = || {
        let why = "stallscope observe: request bodies held at once would pass PROXY_REQUEST_BUFFER_MB; try again";
        Refused { why: Refusal::Buffer, answer: OwnAnswer::new(503, why).retry_after(1) }
    };
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let mut held = match declared {
        Some(0) => None,
        Some(n) => Some(limits.buffer(n as usize).ok_or_else(no_room)?),
        None => None,
    };
    let reading = async {
        let mut collected = BytesMut::new();
        let mut body = body;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                let why = format!("stallscope observe: the request body could not be read: {e}");
                Refused { why: Refusal::BrokenBody, answer: OwnAnswer::new(400, why) }
            })?;
            let Ok(data) = frame.into_data() else { continue };
            if collected.len() + data.len() > max {
                return Err(too_large());
            }
            // A body of no declared length takes its room as it comes.
            if declared.is_none() && !data.is_empty() {
                let more = limits.buffer(data.len()).ok_or_else(no_room)?;
                match &mut held {
                    Some(permit) => permit.merge(more),
                    None => held = Some(more),
                }
            }
            collected.extend_from_slice(&data);
        }
        Ok(collected.freeze())
    };
    match tokio::time::timeout(limits.body_timeout, reading).await {
        Ok(Ok(body)) => Ok((body, held)),
        Ok(Err(refused)) => Err(refused),
        Err(_) => {
            let why = format!(
                "stallscope observe: the request body did not arrive whole within PROXY_BODY_TIMEOUT_S ({} s)",
                limits.body_timeout.as_secs_f64()
            );
            Err(Refused { why: Refusal::BodyTimeout, answer: OwnAnswer::new(408, why) })
        }
    }
}

/// Answers a request the proxy refused, and records it as a call of the
/// run in force that made no attempt (its model unread: `-`), whose
/// verdict names the limit.
async fn refuse(
    state: &Arc<State>,
    url: &str,
    route: &str,
    dialect: Option<Dialect>,
    refused: Refused,
) -> hyper::Response<ResponseBody> {
    state.limits.refused.count(refused.why);
    let response = refused.answer.response(dialect);
    let Some((segment, stream, retried)) = state.admit(None) else { return response };
    let executor = &segment.executor;
    let target = Target::new(routes::provider_name(route, dialect), "-");
    let emit = |kind| {
        let at = Instant::now().saturating_duration_since(executor.epoch);
        executor.sink.emit(Event { at, stream, attempt: 0, kind });
    };
    let status = refused.answer.status;
    let (category, retryable) = match status {
        400 | 413 => (Category::InvalidRequest, false),
        408 => (Category::Timeout, true),
        _ => (Category::Overloaded, true),
    };
    let classified = Classification {
        category,
        timer: None,
        status: Some(status),
        retryable,
        rule: refused.why.tunable().map_or_else(|| format!("stallscope proxy: {}", refused.why.name()), proxy_rule),
        message: refused.answer.message.clone(),
        transport: None,
        server_delay: None,
        rate_limits: None,
    };
    emit(EventKind::CallStarted { target: target.clone(), context_tokens: None });
    emit(classified.event());
    emit(EventKind::Finished { outcome: Outcome::Failed, attempts: 0, stop_reason: None });
    let mut report = CallReport::empty(stream, target);
    report.outcome = Outcome::Failed;
    report.error = Some(classified);
    let key = Key::of(url, &[]);
    Arc::clone(state).finished(Arc::clone(&segment), report, key, retried, None).await;
    response
}

/// A request admitted as a call, ready to start.
struct Admitted {
    state: Arc<State>,
    segment: Arc<Segment>,
    executor: Executor,
    stream: StreamId,
    target: Target,
    key: Key,
    retried: Option<Ended>,
    agent_gone: AgentGone,
    /// Its place among the requests in flight and its body's room in the
    /// request buffer, held until the call has ended.
    held: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
}

impl Admitted {
    /// The call watched ([`super::relay`]): a streamed call of `dialect`
    /// through the executor, any other request passed through; the agent
    /// answered as the upstream answers, or with a 502 naming why no
    /// answer came.
    async fn observed(
        self,
        dialect: Option<Dialect>,
        forwarded: reqwest::RequestBuilder,
        url: &str,
        mut link: AgentLink,
    ) -> hyper::Response<ResponseBody> {
        let Admitted { state, segment, executor, stream, target, key, retried, agent_gone, held } = self;
        let (agent_tx, agent_rx) = oneshot::channel();
        let call = tokio::spawn(async move {
            // A stream of a dialect is decoded as one; any other request is
            // a whole answer, passed through as it comes.
            let expect = if dialect.is_some() { Expect::Stream } else { Expect::Answer };
            let pending = Pending { request: forwarded, dialect, agent: agent_tx, agent_gone: agent_gone.clone() };
            segment.calls.watched.expect(stream, pending);
            let input = CallInput { expect, ..CallInput::default() };
            let call = Call { stream, target, input, not_before: None };
            let report = executor.run(&call, &agent_gone.token).await;
            agent_gone.call_over();
            drop(held);
            state.finished(segment, report, key, retried, None).await
        });
        match agent_rx.await {
            Ok(answer) => link.answer(answer.status, answer.headers, answer.body).map(BodyExt::boxed_unsync),
            // No answer came: the upstream could not be reached (or the call
            // ended otherwise before its headers); say why.
            Err(_) => {
                link.disarm();
                let why = match call.await {
                    Ok(Some(why)) => why,
                    _ => "the call ended before the upstream answered".to_owned(),
                };
                let shown = crate::core::redact::url(url);
                OwnAnswer::new(502, format!("stallscope observe: {shown}: {why}")).response(dialect)
            }
        }
    }

    /// The call guarded ([`super::guard`]): run through the executor, the
    /// agent answered once an attempt's stream is taken in, or once the
    /// call ends without one.
    async fn guarded(
        self,
        upstream: Arc<GuardedUpstream>,
        request: GuardedRequest,
        link: AgentLink,
    ) -> hyper::Response<ResponseBody> {
        let Admitted { state, segment, executor, stream, target, key, retried, agent_gone, held } = self;
        let (answer, side) = Answer::new(request.dialect, &request.model, agent_gone.clone());
        let guarded =
            Guarded { request: Arc::new(request), answer: Arc::clone(&answer), agent_gone: agent_gone.clone() };
        upstream.expect(stream, guarded);
        tokio::spawn(async move {
            let call = Call { stream, target, input: CallInput::default(), not_before: None };
            let report = executor.run(&call, &agent_gone.token).await;
            agent_gone.call_over();
            let delivered = answer.ended(&report, state.cancel.is_cancelled());
            upstream.done(stream);
            drop(held);
            state.finished(segment, report, key, retried, Some(delivered)).await
        });
        match side.head.await {
            Ok((status, headers)) => link.answer(status, headers, side.body).map(BodyExt::boxed_unsync),
            // Every guarded call ends with a head: only a panic gets here.
            Err(_) => OwnAnswer::new(502, "stallscope guard: the call ended without an answer").response(None),
        }
    }
}
