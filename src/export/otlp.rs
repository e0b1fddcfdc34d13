//! Recorded runs as OpenTelemetry traces, sent over OTLP/HTTP (protobuf) to
//! any receiver: Arize Phoenix, Jaeger, Grafana Tempo, a collector.
//!
//! Each call is one trace: a span for the call, a child span for each
//! attempt and for each backoff sleep. Timers firing, classifications,
//! failover hops, retries refused and partial recoveries are span events,
//! as are, on an observed call, the agent disconnecting and where our
//! timers would have fired (on its attempt's span, "timer would fire"),
//! and the stream's verdict is an event on the call span (its kind is also
//! an attribute, to filter on). Provider and model follow the OpenTelemetry
//! GenAI semantic conventions (`gen_ai.*`); the rest is `stallscope.*`.
//! Nothing carries a key: events name a pool key by index at most. No
//! failure message is exported, as one quotes the error body: a failed
//! attempt's status names its category, HTTP status and classifying rule.
//! Recorded bodies are not exported either.
//!
//! Ids are derived from the run's epoch, its id and the stream, so sending
//! a run twice gives the same trace and span ids (a receiver that keys on
//! them keeps one copy).
//!
//! A receiver is a [`Destination`]: its endpoint, and headers sent with
//! every request ([`Header`], for a receiver's API key, so that none has
//! to sit in the URL). Every URL shown (errors, [`Sent`]) has its
//! credentials masked ([`crate::core::redact`]), and header values are
//! never shown.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event as SpanEvent, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::core::category::Category;
use crate::core::event::{Event, EventKind, Outcome, SleepReason, StreamId};
use crate::core::redact;
use crate::core::transport::error_chain;
use crate::diagnosis::Diagnosis;
use crate::store::{RunId, Store, StoreError};

/// Calls per request: receivers cap a request's size (4 MiB is common).
const CALLS_PER_REQUEST: usize = 200;

/// How long connecting to a receiver may take. reqwest sets no limit, and
/// the kernel retries a SYN that is dropped for about two minutes; a watch
/// round must not wait that long for a receiver that is not there.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one request may take in all, connecting included, until its
/// answer is read. A receiver that accepts and never answers would
/// otherwise hold a watch round, or the app's "sending traces…", for ever;
/// a request of `CALLS_PER_REQUEST` calls takes well under a second on a
/// receiver that works.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What can go wrong exporting a run. URLs in it have their credentials
/// masked; header values are never in it.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No such run.
    #[error("no run {0} in the database")]
    NoRun(RunId),
    /// The endpoint is not a URL this exporter can post to.
    #[error(
        "OTLP endpoint {value:?} is not accepted: {why}; allowed: an http:// or https:// URL, the receiver's base (…/v1/traces is appended) or its traces path"
    )]
    Endpoint {
        /// What was given, its credentials masked.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A header to send is not one.
    #[error(
        "OTLP header `{shown}` is not accepted: {why}; allowed: NAME=VALUE, or NAME=env:VAR to read the value from the environment variable VAR"
    )]
    Header {
        /// What was given, its value left out (`NAME=…`).
        shown: String,
        /// What is wrong with it.
        why: String,
    },
    /// No client to send with (its TLS could not be set up).
    #[error("cannot set up a client to send traces: {}", error_chain(.0))]
    Client(reqwest::Error),
    /// No runtime to send from.
    #[error("cannot start a runtime to send traces: {0}")]
    Runtime(std::io::Error),
    /// The request could not be sent or its answer not read.
    #[error("cannot send traces to {url}: {}", error_chain(source))]
    Send {
        /// Where, its credentials masked.
        url: String,
        /// Why (it carries no URL).
        source: reqwest::Error,
    },
    /// The receiver did not connect or answer within the timeouts.
    #[error(
        "{url} did not answer in time (allowed: {} s to connect, {} s for each request)",
        CONNECT_TIMEOUT.as_secs(),
        request.as_secs_f64()
    )]
    Timeout {
        /// Where, its credentials masked.
        url: String,
        /// The request timeout.
        request: Duration,
    },
    /// Sending was cancelled before the receiver answered, or before it
    /// began.
    #[error("sending traces to {url} was cancelled")]
    Cancelled {
        /// Where, its credentials masked.
        url: String,
    },
    /// The receiver refused the traces, or some of their spans.
    #[error("{url} refused the traces: {answer}")]
    Refused {
        /// Where, its credentials masked.
        url: String,
        /// Its status and what it said.
        answer: String,
    },
}

/// A header sent with every request to a receiver (an API key, a tenant).
/// Its value is never shown: not by `Debug`, not in an error.
#[derive(Clone)]
pub struct Header {
    name: HeaderName,
    value: HeaderValue,
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ***", self.name)
    }
}

impl Header {
    /// Reads `NAME=VALUE`, or `NAME=env:VAR` whose value is the variable
    /// `VAR` of `env` (so that a key needs to be on no command line).
    pub fn parse(text: &str, env: &[(String, String)]) -> Result<Header, OtlpError> {
        let Some((name, value)) = text.split_once('=') else {
            // Without `=` there is no telling a name from a value: show neither.
            let why = "there is no `=` (the text is not shown: it may hold a credential)".to_owned();
            return Err(OtlpError::Header { shown: "…".to_owned(), why });
        };
        let bad = |shown: &str, why: String| OtlpError::Header { shown: shown.to_owned(), why };
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| bad("…=…", "the part before `=` is not a header name".to_owned()))?;
        let shown = format!("{name}=…");
        let value = match value.strip_prefix("env:") {
            Some(var) => env
                .iter()
                .find(|(k, _)| k == var)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad(&shown, format!("the environment variable {var} is not set or empty")))?,
            None => value,
        };
        let mut value = HeaderValue::from_str(value.trim())
            .map_err(|_| bad(&shown, "the value holds characters a header cannot carry".to_owned()))?;
        value.set_sensitive(true);
        Ok(Header { name, value })
    }
}

/// Where traces go: an OTLP/HTTP receiver's endpoint (see [`traces_url`])
/// and the headers sent with every request. `Debug` masks the endpoint's
/// credentials.
#[derive(Clone, Default)]
pub struct Destination {
    /// The endpoint as given.
    pub endpoint: String,
    /// Sent with every request.
    pub headers: Vec<Header>,
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoint = redact::url(&self.endpoint);
        f.debug_struct("Destination").field("endpoint", &endpoint).field("headers", &self.headers).finish()
    }
}

impl Destination {
    /// A destination without headers.
    pub fn new(endpoint: &str) -> Destination {
        Destination { endpoint: endpoint.to_owned(), headers: Vec::new() }
    }

    /// `endpoint` with `headers` read by [`Header::parse`] (`env` is the
    /// process environment), as the command line gives them.
    pub fn parse(endpoint: &str, headers: &[String], env: &[(String, String)]) -> Result<Destination, OtlpError> {
        let headers = headers.iter().map(|h| Header::parse(h, env)).collect::<Result<_, _>>()?;
        Ok(Destination { endpoint: endpoint.to_owned(), headers })
    }

    /// A sender to it, with the timeouts every OTLP request has.
    pub fn sender(&self) -> Result<Sender, OtlpError> {
        self.sender_within(REQUEST_TIMEOUT)
    }

    /// A sender to it whose requests may take `request_timeout` each (the
    /// tests' short limit takes this path too).
    fn sender_within(&self, request_timeout: Duration) -> Result<Sender, OtlpError> {
        let url = traces_url(&self.endpoint)?;
        let headers: HeaderMap = self.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(request_timeout)
            .default_headers(headers)
            .build()
            .map_err(OtlpError::Client)?;
        Ok(Sender { shown: redact::masked(&url), url, client, request_timeout })
    }
}

/// Posts runs' traces to one receiver: the one client the CLI, the app and
/// the watch send with, so each request has the same timeouts and headers.
/// `Debug` shows its URL masked.
#[derive(Clone)]
pub struct Sender {
    url: reqwest::Url,
    /// `url` with its credentials masked.
    shown: String,
    client: reqwest::Client,
    request_timeout: Duration,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").field("url", &self.shown).field("request_timeout", &self.request_timeout).finish()
    }
}

impl Sender {
    /// The traces URL, its credentials masked.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Posts every request of `traces`.
    pub async fn send(&self, traces: &RunTraces) -> Result<Sent, OtlpError> {
        for request in &traces.requests {
            self.post(request).await?;
        }
        Ok(Sent { url: self.shown.clone(), calls: traces.calls, spans: traces.spans })
    }

    async fn post(&self, request: &ExportTraceServiceRequest) -> Result<(), OtlpError> {
        let failed = |source: reqwest::Error| match source.is_timeout() {
            true => OtlpError::Timeout { url: self.shown.clone(), request: self.request_timeout },
            // reqwest's own text names the URL, credentials and all.
            false => OtlpError::Send { url: self.shown.clone(), source: source.without_url() },
        };
        let response = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .body(request.encode_to_vec())
            .send()
            .await
            .map_err(failed)?;
        let status = response.status();
        let protobuf = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/x-protobuf"));
        let body = response.bytes().await.map_err(failed)?;
        let refused = |answer| Err(OtlpError::Refused { url: self.shown.clone(), answer });
        if !status.is_success() {
            return refused(format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(500)])));
        }
        // A receiver that keeps only some spans says so in a successful answer.
        if protobuf
            && let Ok(answer) = ExportTraceServiceResponse::decode(body.as_ref())
            && let Some(partial) = answer.partial_success.filter(|p| p.rejected_spans > 0)
        {
            return refused(format!("{} spans rejected: {}", partial.rejected_spans, partial.error_message));
        }
        Ok(())
    }
}

/// A run's traces, ready to send: its requests, each holding up to
/// `CALLS_PER_REQUEST` calls.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTraces {
    /// The requests.
    pub requests: Vec<ExportTraceServiceRequest>,
    /// Calls (traces) in all.
    pub calls: usize,
    /// Spans in all.
    pub spans: usize,
}

/// What was sent, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// The traces URL, its credentials masked.
    pub url: String,
    /// Calls (traces) sent.
    pub calls: usize,
    /// Spans sent.
    pub spans: usize,
}

/// Sends stored runs `ids` to `destination`, one after the other, from a
/// thread that runs no async runtime (the CLI's, a background thread of
/// the app's).
pub fn send_runs(store: &Store, ids: &[RunId], destination: &Destination) -> Result<Sent, OtlpError> {
    let sender = destination.sender()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(OtlpError::Runtime)?;
    let mut sent = Sent { url: sender.url().to_owned(), calls: 0, spans: 0 };
    for &id in ids {
        let run = runtime.block_on(sender.send(&run_traces(store, id)?))?;
        (sent.calls, sent.spans) = (sent.calls + run.calls, sent.spans + run.spans);
    }
    Ok(sent)
}

/// The traces of stored run `id`, each stream with its verdict.
pub fn run_traces(store: &Store, id: RunId) -> Result<RunTraces, OtlpError> {
    streams_traces(store, id, &store.streams(id)?)
}

/// The traces of `streams` of stored run `id`, each with its verdict: a
/// run's calls sent as they end (observe), with the ids the whole run's
/// export gives them.
pub fn streams_traces(store: &Store, id: RunId, streams: &[StreamId]) -> Result<RunTraces, OtlpError> {
    let record = store.run(id)?.ok_or(OtlpError::NoRun(id))?;
    // Runs recorded before the epoch was kept start at their start time.
    let epoch_unix_ns =
        record.meta.as_ref().map_or(record.summary.started_at_ms.saturating_mul(1_000_000), |m| m.epoch_unix_ns);
    let recorded = store.recorded_run(id)?;
    let mut calls = Vec::new();
    for &stream in streams {
        let events = store.events(id, stream)?;
        let verdict = recorded.diagnose(stream, &events);
        calls.push(call_spans(Ids::new(epoch_unix_ns, id, stream), epoch_unix_ns, &events, Some(&verdict)));
    }
    Ok(RunTraces::new(id, record.summary.scenario.as_deref(), calls))
}

impl RunTraces {
    fn new(run: RunId, scenario: Option<&str>, calls: Vec<Vec<Span>>) -> RunTraces {
        let mut resource = vec![
            string("service.name", "stallscope"),
            string("service.version", env!("CARGO_PKG_VERSION")),
            int("stallscope.run", run),
        ];
        resource.extend(scenario.map(|s| string("stallscope.scenario", s)));
        let spans = calls.iter().map(Vec::len).sum();
        let requests = calls
            .chunks(CALLS_PER_REQUEST)
            .map(|chunk| ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(Resource { attributes: resource.clone(), ..Resource::default() }),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "stallscope".to_owned(),
                            version: env!("CARGO_PKG_VERSION").to_owned(),
                            ..InstrumentationScope::default()
                        }),
                        spans: chunk.concat(),
                        ..ScopeSpans::default()
                    }],
                    ..ResourceSpans::default()
                }],
            })
            .collect();
        RunTraces { requests, calls: calls.len(), spans }
    }
}

/// The traces URL of an OTLP/HTTP receiver: `endpoint` as given when its
/// path ends in `/v1/traces`, else with `/v1/traces` appended (as
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is read).
pub fn traces_url(endpoint: &str) -> Result<reqwest::Url, OtlpError> {
    let bad = |why: String| OtlpError::Endpoint { value: redact::url(endpoint), why };
    let mut url = reqwest::Url::parse(endpoint).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!("the scheme is {}", url.scheme())));
    }
    if !url.path().ends_with("/v1/traces") {
        let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url)
}

/// Trace and span ids of one call.
struct Ids {
    trace: Vec<u8>,
    /// The next span id, before mixing.
    next_span: u64,
}

impl Ids {
    fn new(epoch_unix_ns: i64, run: RunId, stream: StreamId) -> Ids {
        let call = ((run as u64) << 32) | (stream & 0xffff_ffff);
        let mut trace = epoch_unix_ns.to_be_bytes().to_vec();
        trace.extend(call.to_be_bytes());
        Ids { trace, next_span: mix(epoch_unix_ns as u64 ^ mix(call)) }
    }

    /// Span ids must be unique across traces, not only within one
    /// (Phoenix keeps one span per id): numbered per call, then mixed.
    fn span(&mut self) -> Vec<u8> {
        self.next_span = self.next_span.wrapping_add(1);
        mix(self.next_span).max(1).to_be_bytes().to_vec()
    }
}

/// SplitMix64's finaliser: a bijection on u64 that scatters nearby inputs.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The spans of one call from its events (in time order, or as sent:
/// observe's would-fire marks after the call's end): the call's span
/// first, then its attempts' and sleeps'.
fn call_spans(mut ids: Ids, epoch_unix_ns: i64, events: &[Event], verdict: Option<&Diagnosis>) -> Vec<Span> {
    let ns = |at: Duration| unix_ns(epoch_unix_ns, at);
    let call = Span {
        trace_id: ids.trace.clone(),
        span_id: ids.span(),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: events.first().map_or(0, |e| ns(e.at)),
        ..Span::default()
    };
    let mut spans = vec![call];
    // The latest attempt: what it counts, and whether its span is open.
    let mut attempt: Option<Attempt> = None;
    // Each attempt's number and span, for events that name their attempt.
    let mut numbered: Vec<(u32, usize)> = Vec::new();
    let mut ended = false;
    for event in events {
        let t = ns(event.at);
        let open = attempt.as_ref().filter(|a| a.open).map_or(0, |a| a.index);
        match &event.kind {
            EventKind::CallStarted { target, context_tokens } => {
                let call = &mut spans[0];
                call.name = format!("chat {}", target.model);
                set(
                    call,
                    [
                        string("gen_ai.operation.name", "chat"),
                        string("gen_ai.provider.name", &target.provider),
                        string("gen_ai.request.model", &target.model),
                        int("stallscope.stream", event.stream),
                    ],
                );
                set(call, context_tokens.map(|n| int("stallscope.context_tokens", n)));
            }
            EventKind::AttemptStarted { target, credential } => {
                if let Some(a) = &mut attempt {
                    a.close(&mut spans, t);
                }
                let mut attributes = vec![
                    string("gen_ai.provider.name", &target.provider),
                    string("gen_ai.request.model", &target.model),
                    int("stallscope.attempt", event.attempt),
                ];
                attributes.extend(credential.map(|c| int("stallscope.credential_index", c as u64)));
                spans.push(Span {
                    trace_id: ids.trace.clone(),
                    span_id: ids.span(),
                    parent_span_id: spans[0].span_id.clone(),
                    name: format!("attempt {} {target}", event.attempt),
                    kind: SpanKind::Client as i32,
                    start_time_unix_nano: t,
                    attributes,
                    ..Span::default()
                });
                attempt = Some(Attempt { index: spans.len() - 1, open: true, bytes: 0, events: 0, output: false });
                numbered.push((event.attempt, spans.len() - 1));
            }
            EventKind::HeadersReceived { status, .. } => {
                set(&mut spans[open], [int("http.response.status_code", *status)]);
                mark(&mut spans[open], t, "response headers", vec![int("http.response.status_code", *status)]);
            }
            EventKind::ChunkReceived { bytes } => {
                if let Some(a) = &mut attempt {
                    a.bytes += *bytes as u64;
                }
            }
            EventKind::SseReceived { class, .. } => {
                if let Some(a) = &mut attempt {
                    a.events += 1;
                    if class.is_output() && !a.output {
                        a.output = true;
                        mark(&mut spans[a.index], t, "first output", vec![string("stallscope.class", class.name())]);
                    }
                }
            }
            EventKind::TimerFired { timer, after, lag } => {
                let mut attributes =
                    vec![string("stallscope.timer", timer.name()), seconds("stallscope.budget_s", *after)];
                attributes.extend(lag.map(|lag| seconds("stallscope.runtime_lag_s", lag)));
                mark(&mut spans[open], t, "timer fired", attributes);
            }
            EventKind::TimerHeld { timer, after, lag } => {
                let attributes = vec![
                    string("stallscope.timer", timer.name()),
                    seconds("stallscope.budget_s", *after),
                    seconds("stallscope.runtime_lag_s", *lag),
                ];
                mark(&mut spans[open], t, "timer held", attributes);
            }
            EventKind::TimerWouldFire { timer, after } => {
                let attributes = vec![string("stallscope.timer", timer.name()), seconds("stallscope.budget_s", *after)];
                mark(&mut spans[span_of(&numbered, event.attempt)], t, "timer would fire", attributes);
            }
            EventKind::AgentDisconnected => {
                set(&mut spans[0], [bool("stallscope.agent_disconnected", true)]);
                mark(&mut spans[span_of(&numbered, event.attempt)], t, "agent disconnected", Vec::new());
            }
            EventKind::ErrorClassified { category, status, retryable, rule, .. } => {
                // A failure between attempts (attempt 0) is the call's.
                let index = span_of(&numbered, event.attempt);
                let span = &mut spans[index];
                let attributes = vec![
                    string("error.type", category.name()),
                    string("stallscope.rule", rule),
                    bool("stallscope.retryable", *retryable),
                ];
                mark(span, t, "error classified", attributes);
                // The first classification is the failure; a later one for
                // the same attempt is the executor's reading after it (a
                // backoff that would cross the deadline, a cancel during
                // the backoff), an event only.
                if !has(span, "error.type") {
                    set(span, [string("error.type", category.name())]);
                    if index > 0 {
                        let message = failure_status(*category, *status, rule);
                        span.status = Some(Status { code: StatusCode::Error as i32, message });
                    }
                }
            }
            EventKind::AttemptEnded { end, stop_reason } => {
                if let Some(a) = attempt.as_mut().filter(|a| a.open) {
                    let span = &mut spans[a.index];
                    set(span, [string("stallscope.attempt_end", &end.to_string())]);
                    set(span, stop_reason.as_deref().map(|r| string("stallscope.stop_reason", r)));
                    a.close(&mut spans, t);
                }
            }
            EventKind::BackoffScheduled { retry, category, nominal, sleep, reason } => {
                if let Some(a) = &mut attempt {
                    a.close(&mut spans, t);
                }
                let mut attributes = vec![
                    int("stallscope.retry", *retry),
                    string("stallscope.category", category.name()),
                    seconds("stallscope.nominal_s", *nominal),
                ];
                attributes.push(match reason {
                    SleepReason::Backoff => string("stallscope.sleep_reason", "backoff"),
                    SleepReason::ServerRequested { header } => string("stallscope.server_header", header),
                });
                spans.push(Span {
                    trace_id: ids.trace.clone(),
                    span_id: ids.span(),
                    parent_span_id: spans[0].span_id.clone(),
                    name: "backoff".to_owned(),
                    kind: SpanKind::Internal as i32,
                    start_time_unix_nano: t,
                    end_time_unix_nano: t.saturating_add(u64::try_from(sleep.as_nanos()).unwrap_or(u64::MAX)),
                    attributes,
                    ..Span::default()
                });
            }
            EventKind::FailedOver { from, to, reason } => {
                let attributes = vec![
                    string("stallscope.from", &from.to_string()),
                    string("stallscope.to", &to.to_string()),
                    string("stallscope.category", reason.name()),
                ];
                mark(&mut spans[0], t, "failover", attributes);
            }
            EventKind::RetryBudgetRefused { provider, in_flight, limit } => {
                let attributes = vec![
                    string("gen_ai.provider.name", provider),
                    int("stallscope.retries_in_flight", *in_flight),
                    int("stallscope.limit", *limit),
                ];
                mark(&mut spans[0], t, "retry refused by the fleet budget", attributes);
            }
            EventKind::ServerWaitRefused { requested, cap } => {
                let attributes = vec![seconds("stallscope.requested_s", *requested), seconds("stallscope.cap_s", *cap)];
                mark(&mut spans[0], t, "server wait refused", attributes);
            }
            EventKind::CredentialRotated { provider, from, to } => {
                let attributes = vec![
                    string("gen_ai.provider.name", provider),
                    int("stallscope.from_index", *from),
                    int("stallscope.to_index", *to),
                ];
                mark(&mut spans[0], t, "credential rotated", attributes);
            }
            EventKind::PartialRecovered { chars, category } => {
                let attributes = vec![int("stallscope.chars", *chars), string("stallscope.category", category.name())];
                mark(&mut spans[0], t, "partial recovery", attributes);
            }
            EventKind::Finished { outcome, attempts, stop_reason } => {
                if let Some(a) = &mut attempt {
                    a.close(&mut spans, t);
                }
                let call = &mut spans[0];
                call.end_time_unix_nano = t;
                set(call, [string("stallscope.outcome", outcome.name()), int("stallscope.attempts", *attempts)]);
                set(call, stop_reason.as_deref().map(|r| strings("gen_ai.response.finish_reasons", [r])));
                call.status = Some(match outcome {
                    Outcome::Ok | Outcome::Partial => Status { code: StatusCode::Ok as i32, message: String::new() },
                    _ => Status { code: StatusCode::Error as i32, message: outcome.name().to_owned() },
                });
                ended = true;
            }
            _ => {}
        }
    }
    let last = events.iter().map(|e| e.at).max().map_or(spans[0].start_time_unix_nano, ns);
    if let Some(a) = &mut attempt {
        a.close(&mut spans, last);
    }
    let call = &mut spans[0];
    if !ended {
        // The recording stops before the call ended (a run interrupted).
        call.end_time_unix_nano = last;
        set(call, [bool("stallscope.incomplete", true)]);
    }
    if let Some(d) = verdict {
        set(call, [string("stallscope.verdict", d.kind.name())]);
        let mut attributes = vec![
            string("stallscope.verdict", d.kind.name()),
            string("stallscope.severity", d.severity.name()),
            string("stallscope.summary", &d.summary),
            bool("stallscope.trusted", d.trusted),
        ];
        attributes.extend(d.tunable.as_deref().map(|t| string("stallscope.tunable", t)));
        mark(call, last, "verdict", attributes);
    }
    // A mark sent after the call's end goes in its time place.
    for span in &mut spans {
        span.events.sort_by_key(|e| e.time_unix_nano);
    }
    spans
}

/// The index of attempt `attempt`'s span among a call's `numbered` ones;
/// the call's (0) for a failure between attempts.
fn span_of(numbered: &[(u32, usize)], attempt: u32) -> usize {
    numbered.iter().find(|(n, _)| *n == attempt).map_or(0, |(_, index)| *index)
}

/// Unix nanoseconds of `at` after a run's epoch, within what OTLP carries:
/// a wall clock before 1970 (`epoch_unix_ns` below 0) reads as 1970.
fn unix_ns(epoch_unix_ns: i64, at: Duration) -> u64 {
    let ns = i128::from(epoch_unix_ns).saturating_add(i128::try_from(at.as_nanos()).unwrap_or(i128::MAX));
    u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
}

/// What a failed attempt's span status says: its category, its HTTP
/// status and the rule that classified it. Not the failure's message: for
/// an HTTP failure it quotes the error body.
fn failure_status(category: Category, status: Option<u16>, rule: &str) -> String {
    match status {
        Some(status) => format!("{}: HTTP {status} ({rule})", category.name()),
        None => format!("{} ({rule})", category.name()),
    }
}

/// Sets `attributes` on `span`, each replacing one of the same key: OTLP
/// keys are unique within a span, and receivers differ in which of two
/// they keep.
fn set(span: &mut Span, attributes: impl IntoIterator<Item = KeyValue>) {
    for attribute in attributes {
        match span.attributes.iter_mut().find(|a| a.key == attribute.key) {
            Some(old) => *old = attribute,
            None => span.attributes.push(attribute),
        }
    }
}

/// Whether `span` has an attribute `key`.
fn has(span: &Span, key: &str) -> bool {
    span.attributes.iter().any(|a| a.key == key)
}

/// Adds an event named `name` at `at` to `span`.
fn mark(span: &mut Span, at: u64, name: &str, attributes: Vec<KeyValue>) {
    span.events.push(SpanEvent { time_unix_nano: at, name: name.to_owned(), attributes, ..SpanEvent::default() });
}

/// The latest attempt of a call: its span's index, whether it is still
/// open, and what it counts.
struct Attempt {
    index: usize,
    open: bool,
    bytes: u64,
    events: u64,
    /// Whether output (content, reasoning, a tool call) has arrived.
    output: bool,
}

impl Attempt {
    /// Ends its span at `end_unix_ns`, once.
    fn close(&mut self, spans: &mut [Span], end_unix_ns: u64) {
        if std::mem::take(&mut self.open) {
            let span = &mut spans[self.index];
            span.end_time_unix_nano = end_unix_ns;
            set(span, [int("stallscope.bytes", self.bytes), int("stallscope.sse_events", self.events)]);
        }
    }
}

fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue { key: key.to_owned(), value: Some(AnyValue { value: Some(value) }), ..KeyValue::default() }
}

fn string(key: &str, value: &str) -> KeyValue {
    attribute(key, any_value::Value::StringValue(value.to_owned()))
}

fn strings<'a>(key: &str, values: impl IntoIterator<Item = &'a str>) -> KeyValue {
    let values =
        values.into_iter().map(|v| AnyValue { value: Some(any_value::Value::StringValue(v.to_owned())) }).collect();
    attribute(key, any_value::Value::ArrayValue(ArrayValue { values }))
}

fn int(key: &str, value: impl TryInto<i64>) -> KeyValue {
    attribute(key, any_value::Value::IntValue(value.try_into().unwrap_or(i64::MAX)))
}

fn bool(key: &str, value: bool) -> KeyValue {
    attribute(key, any_value::Value::BoolValue(value))
}

fn seconds(key: &str, value: Duration) -> KeyValue {
    attribute(key, any_value::Value::DoubleValue(value.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::core::category::{Category, TimerKind};
    use crate::core::event::AttemptEnd;
    use crate::core::failover::Target;

    fn at(ms: u64, attempt: u32, kind: EventKind) -> Event {
        Event { at: Duration::from_millis(ms), stream: 7, attempt, kind }
    }

    fn names(span: &Span) -> Vec<&str> {
        span.events.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn a_call_is_a_root_span_with_its_attempts_and_sleeps_below() {
        let (a, b) = (Target::new("primary", "m1"), Target::new("backup", "m2"));
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: a.clone(), context_tokens: Some(40) }),
            at(0, 1, EventKind::AttemptStarted { target: a.clone(), credential: Some(0) }),
            at(300, 1, EventKind::HeadersReceived { status: 529, content_type: None }),
            at(300, 1, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 529 }, stop_reason: None }),
            at(
                300,
                1,
                EventKind::ErrorClassified {
                    category: Category::Overloaded,
                    timer: None,
                    status: Some(529),
                    retryable: true,
                    rule: "builtin: 529".into(),
                    message: "overloaded".into(),
                },
            ),
            at(300, 1, EventKind::FailedOver { from: a.clone(), to: b.clone(), reason: Category::Overloaded }),
            at(300, 2, EventKind::AttemptStarted { target: b.clone(), credential: None }),
            at(400, 2, EventKind::HeadersReceived { status: 200, content_type: None }),
            at(2400, 2, EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_secs(2), lag: None }),
        ];
        let spans = call_spans(Ids::new(1_800_000_000_000_000_000, 3, 7), 1_800_000_000_000_000_000, &events, None);
        let [call, first, second] = &spans[..] else { panic!("{spans:?}") };
        assert_eq!((call.name.as_str(), call.parent_span_id.is_empty()), ("chat m1", true));
        assert!([first, second].iter().all(|s| s.parent_span_id == call.span_id && s.trace_id == call.trace_id));
        assert_eq!(names(call), ["failover"]);
        // The classification follows the attempt's end, and belongs to it.
        assert_eq!(names(first), ["response headers", "error classified"]);
        assert_eq!(first.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
        assert_eq!(
            (first.start_time_unix_nano, first.end_time_unix_nano),
            (1_800_000_000_000_000_000, 1_800_000_000_300_000_000)
        );
        assert_eq!(names(second), ["response headers", "timer fired"]);
        // The recording ends mid-call: the open spans end with it, marked.
        assert_eq!(second.end_time_unix_nano, 1_800_000_002_400_000_000);
        assert!(call.attributes.contains(&bool("stallscope.incomplete", true)));
        assert!(call.attributes.contains(&string("gen_ai.provider.name", "primary")));
        assert!(second.attributes.contains(&string("gen_ai.provider.name", "backup")));
    }

    /// An observed agent that gave up: our timer's mark and the agent's
    /// going are events of its attempt's span, and the call says the agent
    /// went, whether the mark comes after the call's end (as observe sends
    /// it) or in its time place (as stored).
    #[test]
    fn an_observed_call_s_marks_are_events_of_its_attempt_in_either_order() {
        let sent = crate::diagnosis::fixtures::agent_gone_on_a_silent_stall(7);
        let stored = crate::diagnosis::fixtures::stored(&sent);
        let epoch = 1_800_000_000_000_000_000;
        let [sent, stored] = [sent, stored].map(|events| {
            let verdict = crate::diagnosis::diagnose(&events);
            call_spans(Ids::new(epoch, 3, 7), epoch, &events, Some(&verdict))
        });
        assert_eq!(sent, stored);
        let [call, attempt] = &sent[..] else { panic!("{sent:?}") };
        assert_eq!(names(attempt), ["response headers", "timer would fire", "agent disconnected", "error classified"]);
        let would = &attempt.events[1];
        assert_eq!(would.time_unix_nano, epoch as u64 + 410_000_000);
        assert!(would.attributes.contains(&string("stallscope.timer", "idle")));
        assert!(would.attributes.contains(&seconds("stallscope.budget_s", Duration::from_millis(400))));
        assert!(call.attributes.contains(&bool("stallscope.agent_disconnected", true)));
        assert_eq!((call.end_time_unix_nano, names(call)), (epoch as u64 + 1_011_000_000, vec!["verdict"]));
        let verdict = &call.events[0];
        assert_eq!(verdict.time_unix_nano, call.end_time_unix_nano, "at the call's end, whatever the order");
    }

    /// A timer held for our own lateness is an event of its attempt's
    /// span, with its budget and the lag; the attempt goes on to complete.
    #[test]
    fn a_held_timer_is_an_event_of_its_attempt() {
        let events = crate::diagnosis::fixtures::held_on_a_late_runtime(7);
        let epoch = 1_800_000_000_000_000_000;
        let spans = call_spans(Ids::new(epoch, 3, 7), epoch, &events, None);
        let [_, attempt] = &spans[..] else { panic!("{spans:?}") };
        let held = attempt.events.iter().find(|e| e.name == "timer held").unwrap();
        assert_eq!(held.time_unix_nano, epoch as u64 + 1_350_000_000);
        assert!(held.attributes.contains(&string("stallscope.timer", "idle")));
        assert!(held.attributes.contains(&seconds("stallscope.budget_s", Duration::from_secs(1))));
        assert!(held.attributes.contains(&seconds("stallscope.runtime_lag_s", Duration::from_millis(350))));
        assert!(!names(attempt).contains(&"timer fired"));
    }

    #[test]
    fn span_ids_are_unique_across_a_run_and_trace_ids_name_the_call() {
        let mut seen = HashSet::new();
        let mut traces = HashSet::new();
        for stream in 0..2_000 {
            let mut ids = Ids::new(1_800_000_000_000_000_000, 5, stream);
            traces.insert(ids.trace.clone());
            for _ in 0..8 {
                let id = ids.span();
                assert_ne!(id, [0; 8]);
                assert!(seen.insert(id), "stream {stream}: a span id repeats");
            }
        }
        assert_eq!(traces.len(), 2_000);
        let again = Ids::new(1_800_000_000_000_000_000, 5, 0);
        assert!(traces.contains(&again.trace), "the same call gets the same trace id");
    }

    #[test]
    fn an_endpoint_is_a_base_or_a_traces_url() {
        let url = |s| traces_url(s).map(|u| u.to_string());
        assert_eq!(url("http://127.0.0.1:6006").unwrap(), "http://127.0.0.1:6006/v1/traces");
        assert_eq!(url("https://otel.example/otlp/").unwrap(), "https://otel.example/otlp/v1/traces");
        assert_eq!(url("http://h:4318/v1/traces").unwrap(), "http://h:4318/v1/traces");
        let error = url("ftp://h").unwrap_err().to_string();
        assert!(error.contains("\"ftp://h\"") && error.contains("allowed: an http://"), "{error}");
        assert!(url("127.0.0.1:6006").is_err());
    }

    fn classified(ms: u64, attempt: u32, category: Category, status: Option<u16>, message: &str) -> Event {
        let (retryable, rule) = (category.is_retryable(), format!("builtin: {}", category.name()));
        at(
            ms,
            attempt,
            EventKind::ErrorClassified { category, timer: None, status, retryable, rule, message: message.into() },
        )
    }

    fn keys(span: &Span) -> Vec<&str> {
        span.attributes.iter().map(|a| a.key.as_str()).collect()
    }

    fn value<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
        span.attributes.iter().find(|a| a.key == key)?.value.as_ref()?.value.as_ref()
    }

    /// Review D11: a failure between attempts (attempt 0) was pinned on
    /// the attempt before it, and a second classification of one attempt
    /// (the executor's reading after it) repeated `error.type`.
    #[test]
    fn a_failure_between_attempts_is_the_calls_and_a_span_has_each_key_once() {
        let t = Target::new("p", "m");
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            at(0, 1, EventKind::AttemptStarted { target: t.clone(), credential: Some(0) }),
            at(100, 1, EventKind::HeadersReceived { status: 429, content_type: None }),
            at(100, 1, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 429 }, stop_reason: None }),
            classified(100, 1, Category::RateLimit, Some(429), "HTTP 429: slow down"),
            // The executor's own reading of the same attempt.
            classified(100, 1, Category::Timeout, None, "a 2.000 s backoff would cross the 3.000 s call deadline"),
            // Every key rests: no attempt 2 is made.
            classified(200, 0, Category::RateLimit, None, "every key of `p` rests after rate_limit failures"),
            at(200, 0, EventKind::Finished { outcome: Outcome::Failed, attempts: 1, stop_reason: None }),
        ];
        let spans = call_spans(Ids::new(1_800_000_000_000_000_000, 1, 7), 1_800_000_000_000_000_000, &events, None);
        let [call, attempt] = &spans[..] else { panic!("{spans:?}") };
        for span in [call, attempt] {
            let (all, unique) = (keys(span), keys(span).into_iter().collect::<HashSet<_>>());
            assert_eq!(all.len(), unique.len(), "{}: {all:?}", span.name);
        }
        // The attempt keeps its own failure; the reading after it is an event.
        assert_eq!(names(attempt), ["response headers", "error classified", "error classified"]);
        assert_eq!(value(attempt, "error.type"), Some(&any_value::Value::StringValue("rate_limit".into())));
        let status = attempt.status.as_ref().unwrap();
        assert_eq!(
            (status.code, status.message.as_str()),
            (StatusCode::Error as i32, "rate_limit: HTTP 429 (builtin: rate_limit)")
        );
        // The failure between attempts is the call's.
        assert_eq!(names(call), ["error classified"]);
        assert_eq!(call.events[0].time_unix_nano, 1_800_000_000_200_000_000);
        assert_eq!(value(call, "error.type"), Some(&any_value::Value::StringValue("rate_limit".into())));
    }

    /// Review R10: an HTTP failure's message quotes the error body, and
    /// the span status carried it.
    #[test]
    fn no_failure_message_is_exported_only_its_category_status_and_rule() {
        let t = Target::new("p", "m");
        let body = "HTTP 500: {\"error\": \"zebra-quartz-7 at db-42.internal\"}";
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            at(0, 1, EventKind::AttemptStarted { target: t.clone(), credential: None }),
            at(50, 1, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 500 }, stop_reason: None }),
            classified(50, 1, Category::ServerError, Some(500), body),
            classified(60, 0, Category::Permanent, None, "zebra-quartz-7 between attempts"),
        ];
        let spans = call_spans(Ids::new(1, 1, 7), 1, &events, None);
        let request = RunTraces::new(1, None, vec![spans.clone()]).requests[0].encode_to_vec();
        assert!(!request.windows(13).any(|w| w == b"zebra-quartz-"), "{spans:?}");
        let status = spans[1].status.as_ref().unwrap();
        assert_eq!(status.message, "server_error: HTTP 500 (builtin: server_error)");
    }

    /// Review D10: a run whose wall clock read before 1970 overflowed (a
    /// backoff's end) or read as the year 2554.
    #[test]
    fn a_run_from_before_1970_exports_from_1970_without_overflowing() {
        let t = Target::new("p", "m");
        let epoch = -5_000_000_000; // 5 s before 1970
        let events = vec![
            at(0, 0, EventKind::CallStarted { target: t.clone(), context_tokens: None }),
            at(0, 1, EventKind::AttemptStarted { target: t.clone(), credential: None }),
            at(100, 1, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 503 }, stop_reason: None }),
            at(
                100,
                1,
                EventKind::BackoffScheduled {
                    retry: 1,
                    category: Category::Overloaded,
                    nominal: Duration::from_secs(1),
                    sleep: Duration::from_secs(1),
                    reason: SleepReason::Backoff,
                },
            ),
            at(7_000, 2, EventKind::AttemptStarted { target: t.clone(), credential: None }),
            at(7_500, 0, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, stop_reason: None }),
        ];
        let spans = call_spans(Ids::new(epoch, 1, 7), epoch, &events, None);
        let times = |s: &Span| (s.start_time_unix_nano, s.end_time_unix_nano);
        let [call, first, backoff, second] = &spans[..] else { panic!("{spans:?}") };
        assert_eq!(times(call), (0, 2_500_000_000));
        assert_eq!(times(first), (0, 0));
        assert_eq!(times(backoff), (0, 1_000_000_000));
        assert_eq!(times(second), (2_000_000_000, 2_500_000_000));
        assert_eq!(unix_ns(i64::MAX, Duration::MAX), u64::MAX);
    }

    /// A loopback receiver that accepts connections and never answers
    /// (the kernel would complete the handshake alone; accepting too is
    /// what a hung receiver does); its base URL.
    fn silent_receiver() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().collect();
            drop(held);
        });
        url
    }

    /// Review D3: no timeout at all, so such a receiver held a watch round
    /// for ever. The limit here is short, on the same path as the real one.
    #[tokio::test]
    async fn a_receiver_that_never_answers_costs_a_request_its_timeout() {
        let traces = RunTraces::new(1, None, vec![call_spans(Ids::new(1, 1, 7), 1, &[], None)]);
        let sender = Destination::new(&silent_receiver()).sender_within(Duration::from_millis(200)).unwrap();
        let error = sender.send(&traces).await.unwrap_err();
        assert!(matches!(error, OtlpError::Timeout { .. }), "{error:?}");
        assert!(error.to_string().contains("did not answer in time (allowed: 10 s to connect, 0.2 s"), "{error}");
        let real = Destination::new("http://127.0.0.1:4318").sender().unwrap();
        assert_eq!(real.request_timeout, REQUEST_TIMEOUT);
    }

    /// Review R1: the URL's credentials were in every error, reqwest's own
    /// text included.
    #[tokio::test]
    async fn errors_show_the_url_with_its_credentials_masked() {
        let traces = RunTraces::new(1, None, vec![call_spans(Ids::new(1, 1, 7), 1, &[], None)]);
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let sender =
            Destination::new(&format!("http://otel:pa55word@127.0.0.1:{closed}/?token=t0ken")).sender().unwrap();
        assert_eq!(sender.url(), format!("http://otel:***@127.0.0.1:{closed}/v1/traces?***"));
        let env = [("KEY".to_owned(), "k3y".to_owned())];
        let destination =
            Destination::parse(&format!("http://otel:pa55word@127.0.0.1:{closed}"), &["x-key=env:KEY".into()], &env);
        let debug = format!("{:?} {sender:?}", destination.unwrap());
        assert!(debug.contains("***") && !debug.contains("pa55word") && !debug.contains("k3y"), "{debug}");
        let error = sender.send(&traces).await.unwrap_err();
        let mut text = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            text.push_str(&format!(" / {cause} / {cause:?}"));
            source = cause.source();
        }
        text.push_str(&format!(" / {error:?}"));
        assert!(matches!(error, OtlpError::Send { .. }), "{text}");
        assert!(
            text.contains("http://otel:***@127.0.0.1:") && !text.contains("pa55word") && !text.contains("t0ken"),
            "{text}"
        );
        let bad = traces_url("ftp://otel:pa55word@h").unwrap_err().to_string();
        assert!(bad.contains("ftp://otel:***@h") && !bad.contains("pa55word"), "{bad}");
    }

    #[test]
    fn a_header_is_name_and_value_or_name_and_a_variable_and_its_value_is_never_shown() {
        let env = [("OTLP_KEY".to_owned(), "s3cret".to_owned())];
        let header = Header::parse("x-api-key=env:OTLP_KEY", &env).unwrap();
        assert_eq!((header.name.as_str(), header.value.to_str().unwrap()), ("x-api-key", "s3cret"));
        assert_eq!(format!("{header:?}"), "x-api-key: ***");
        let header = Header::parse("Authorization=Bearer s3cret", &env).unwrap();
        assert_eq!((header.name.as_str(), header.value.to_str().unwrap()), ("authorization", "Bearer s3cret"));
        for (bad, why) in [
            ("Authorization: Bearer s3cret", "`…` is not accepted: there is no `=`"),
            ("x-key=env:MISSING", "`x-key=…` is not accepted: the environment variable MISSING is not set"),
            ("bad name=s3cret", "`…=…` is not accepted: the part before `=` is not a header name"),
            ("x-key=s3c\u{1}ret", "`x-key=…` is not accepted: the value holds characters"),
        ] {
            let error = Header::parse(bad, &env).unwrap_err().to_string();
            assert!(error.contains(why) && error.contains("NAME=env:VAR") && !error.contains("s3cret"), "{error}");
        }
    }
}
