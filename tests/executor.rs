//! The retry executor and stream governor in paused time: a 30-minute
//! stall runs in microseconds and every duration is exact.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use http::{HeaderMap, HeaderValue};

use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{AttemptPhase, Event, EventKind, EventSink, Outcome, VecSink};
use stallscope::core::failover::Target;
use stallscope::core::failure::{Failure, TransportKind};
use stallscope::core::governor::{AttemptProgress, AttemptScope, run_attempt};
use stallscope::core::upstream::{AttemptRequest, CallInput, Chunk, Decoder, Response, Upstream};
use support::{Harness, LineDecoder, Script, Scripted, Step, policy};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

fn reset() -> Failure {
    Failure::Transport { kind: TransportKind::Reset, message: "connection reset by peer".into() }
}

fn refused() -> Failure {
    Failure::Transport { kind: TransportKind::Connect, message: "connection refused".into() }
}

/// Deterministic sleeps: no jitter, base 1 s doubling.
const NO_JITTER: &[&str] = &["BACKOFF_JITTER=none", "RETRY_AFTER_JITTER=none", "FALLBACK_MODELS=off"];

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    NO_JITTER.iter().copied().chain(extra.iter().copied()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_healthy_stream_completes_in_one_attempt() {
    let up = Scripted::new(vec![Script::stream(vec![
        Step::Send("r:thinking\n"),
        Step::Send("c:Hel"),
        Step::Send("lo\nc: world\ns:end_turn\n"),
        Step::Send("d\n"),
    ])]);
    let h = Harness::single(policy(NO_JITTER), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.outcome, Outcome::Ok);
    assert_eq!(report.content, "Hello world");
    assert_eq!(report.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!((report.attempts, report.events), (1, 3));
    assert!(report.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn the_deadline_interrupts_a_stall_in_flight() {
    // Headers, then silence; idle is 30 minutes, the deadline 10 s.
    let up = Scripted::new(vec![Script::stream(vec![Step::Send("p\n"), Step::Hang])]);
    let h = Harness::single(policy(&with(&["CALL_DEADLINE_S=10"])), up.clone());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    let error = report.error.unwrap();
    assert_eq!(
        (report.outcome, error.category, error.timer),
        (Outcome::Failed, Category::Timeout, Some(TimerKind::Deadline))
    );
    assert!(!error.retryable);
    assert_eq!(report.elapsed, S(10));
    assert_eq!(up.opened(), 1, "a deadline is final: no retry");
}

#[tokio::test(start_paused = true)]
async fn a_backoff_that_would_cross_the_deadline_ends_the_call_at_once() {
    let up = Scripted::new(vec![Script::status(500, vec![], "boom")]);
    let h = Harness::single(
        policy(&with(&["CALL_DEADLINE_S=5", "PROVIDER_STREAM_BACKOFF_S=10", "PROVIDER_STREAM_BACKOFF_MAX_S=10"])),
        up.clone(),
    );
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    let error = report.error.unwrap();
    assert_eq!((error.category, error.timer), (Category::Timeout, Some(TimerKind::Deadline)));
    assert_eq!(error.rule, "builtin: backoff would cross the deadline");
    // The deadline is armed with the call, so a timeline can show it running.
    let armed = EventKind::TimerArmed { timer: TimerKind::Deadline, after: Duration::from_secs(5), floor: None };
    assert_eq!(h.sink.kinds()[1], armed);
    assert_eq!(report.elapsed, Duration::ZERO);
    assert!(report.backoff_sleeps.is_empty());
    assert_eq!(up.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_never_retried() {
    for (status, body, category) in [
        (400, "{\"error\":{\"type\":\"invalid_request_error\"}}", Category::InvalidRequest),
        (418, "teapot", Category::Permanent),
        (429, "{\"error\":{\"code\":\"insufficient_quota\"}}", Category::Permanent),
    ] {
        let up = Scripted::new(vec![
            Script::status(status, vec![("content-type", "application/json")], body),
            Script::ok("c:late\n"),
        ]);
        let h = Harness::single(policy(NO_JITTER), up.clone());
        let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
        assert_eq!((report.outcome, report.error.unwrap().category), (Outcome::Failed, category), "{status}");
        assert_eq!(up.opened(), 1, "{status}");
    }
}

#[tokio::test(start_paused = true)]
async fn category_budgets_are_independent_and_the_total_caps_them() {
    // server_error has 2 retries: the third 500 ends the call.
    let up = Scripted::new(vec![Script::status(500, vec![], "")]);
    let h = Harness::single(policy(&with(&["PROVIDER_STREAM_RETRIES=10"])), up.clone());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.attempts), (Outcome::Failed, 3));
    let counts = &report.retry_counts;
    assert_eq!((counts[&Category::ServerError].used, counts[&Category::ServerError].budget), (2, 2));

    // Spending server_error's budget leaves connection's untouched.
    let scripts = vec![
        Script::status(500, vec![], ""),
        Script::status(502, vec![], ""),
        Script::refuse(refused()),
        Script::refuse(refused()),
        Script::refuse(refused()),
        Script::ok("c:finally\n"),
    ];
    let up = Scripted::new(scripts);
    let h = Harness::single(policy(&with(&["PROVIDER_STREAM_RETRIES=10", "PROVIDER_STREAM_BACKOFF_S=0.01"])), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.attempts), (Outcome::Ok, 6));
    assert_eq!(report.retry_counts[&Category::ServerError].used, 2);
    assert_eq!(report.retry_counts[&Category::Connection].used, 3);

    // The call-wide cap (default 3) stops before any category's budget.
    let up = Scripted::new(vec![Script::status(429, vec![], "")]);
    let h = Harness::single(policy(&with(&["PROVIDER_STREAM_BACKOFF_S=0.01"])), up.clone());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.attempts, report.retry_counts[&Category::RateLimit].used), (4, 3));
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_without_jitter() {
    let up = Scripted::new(vec![Script::refuse(refused())]);
    let h = Harness::single(policy(NO_JITTER), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.backoff_sleeps, [S(1), S(2), S(4)]);
    assert_eq!(report.elapsed, S(7));
}

#[tokio::test(start_paused = true)]
async fn failover_happens_before_the_first_token_and_never_after() {
    // Pre-content: 503 with no overloaded budget left moves to m2.
    let up = Scripted::new(vec![Script::status(503, vec![], "overloaded"), Script::ok("c:from m2\n")]);
    let h = Harness::single(policy(&["BACKOFF_JITTER=none", "RETRY_BUDGET_OVERLOADED=0"]), up.clone());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.content.as_str()), (Outcome::Ok, "from m2"));
    assert_eq!(report.hops.len(), 1);
    assert_eq!((report.hops[0].from.to_string(), report.hops[0].to.to_string()), ("p/m1".into(), "p/m2".into()));
    assert_eq!(report.hops[0].reason, Category::Overloaded);
    let seen: Vec<String> = up.seen.lock().unwrap().iter().map(|(m, _)| m.clone()).collect();
    assert_eq!(seen, ["m1", "m2"]);

    // After content: no hop, no retry, even with budgets and a chain.
    let up = Scripted::new(vec![
        Script::stream(vec![Step::Send("c:partial\n"), Step::Fail(reset())]),
        Script::ok("c:never\n"),
    ]);
    let h = Harness::single(policy(&["PARTIAL_RECOVERY=0"]), up.clone());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.attempts, report.hops.len()), (Outcome::Failed, 1, 0));
    assert_eq!(report.error.unwrap().category, Category::Connection);
    assert_eq!(up.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_dead_primary_fails_over_down_the_explicit_chain() {
    let dead = Scripted::new(vec![Script::refuse(refused())]);
    let alive = Scripted::new(vec![Script::ok("c:backup\n")]);
    let h = Harness::new(
        policy(&[
            "BACKOFF_JITTER=none",
            "FALLBACK_MODELS=q/b1",
            "RETRY_BUDGET_CONNECTION=1",
            "PROVIDER_STREAM_BACKOFF_S=0.1",
        ]),
        vec![("p", vec!["m1"], dead.clone(), 0), ("q", vec!["b1"], alive, 0)],
    );
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.attempts), (Outcome::Ok, 3));
    assert_eq!(report.target.to_string(), "q/b1");
    assert_eq!(dead.opened(), 2, "one retry in place, then the hop");
    assert_eq!(report.backoff_sleeps, [MS(100)]);
}

#[tokio::test(start_paused = true)]
async fn partial_recovery_keeps_the_text_with_stop_reason_length() {
    let broken = || {
        Scripted::new(vec![Script::stream(vec![
            Step::Send("c:half an ans"),
            Step::Send("wer\n"),
            Step::Wait(S(1)),
            Step::Fail(reset()),
        ])])
    };
    let h = Harness::single(policy(NO_JITTER), broken());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.outcome, Outcome::Partial);
    assert_eq!((report.content.as_str(), report.stop_reason.as_deref()), ("half an answer", Some("length")));
    assert!(h.sink.kinds().iter().any(|k| matches!(k, EventKind::PartialRecovered { chars: 14, .. })));

    let h = Harness::single(policy(&with(&["PARTIAL_RECOVERY=0"])), broken());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.outcome, Outcome::Failed);

    // Half a tool call is not worth keeping.
    let up = Scripted::new(vec![Script::stream(vec![Step::Send("t:{\"city\": \"Par\n"), Step::Fail(reset())])]);
    let h = Harness::single(policy(NO_JITTER), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.error.unwrap().category), (Outcome::Failed, Category::Connection));

    // A permanent error after content still fails.
    let up =
        Scripted::new(vec![Script::stream(vec![Step::Send("c:text\n"), Step::Send("e:invalid_request_error:bad\n")])]);
    let h = Harness::single(policy(NO_JITTER), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.error.unwrap().category), (Outcome::Failed, Category::InvalidRequest));
}

#[tokio::test(start_paused = true)]
async fn cancellation_stops_a_sleeping_backoff_at_once() {
    let up = Scripted::new(vec![Script::refuse(refused())]);
    let h = Harness::single(
        policy(&with(&["PROVIDER_STREAM_BACKOFF_S=60", "PROVIDER_STREAM_BACKOFF_MAX_S=60"])),
        up.clone(),
    );
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(S(5)).await;
        trigger.cancel();
    });
    let report = h.executor.run(&h.call("m1"), &cancel).await;
    assert_eq!((report.outcome, report.elapsed, up.opened()), (Outcome::Cancelled, S(5), 1));
}

#[tokio::test(start_paused = true)]
async fn cancellation_stops_an_attempt_in_flight_at_once() {
    let up = Scripted::new(vec![Script::stream(vec![Step::Send("c:some\n"), Step::Hang])]);
    let h = Harness::single(policy(NO_JITTER), up);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(S(3)).await;
        trigger.cancel();
    });
    let report = h.executor.run(&h.call("m1"), &cancel).await;
    assert_eq!((report.outcome, report.elapsed, report.content.as_str()), (Outcome::Cancelled, S(3), "some"));
}

/// Cancels a token when it sees the `at`-th chunk.
struct CancelAtChunk {
    chunks: AtomicUsize,
    at: usize,
    token: CancellationToken,
}

impl EventSink for CancelAtChunk {
    fn emit(&self, event: Event) {
        if matches!(event.kind, EventKind::ChunkReceived { .. })
            && self.chunks.fetch_add(1, Ordering::SeqCst) + 1 == self.at
        {
            self.token.cancel();
        }
    }
}

/// One attempt straight through the governor, with policy `sets`.
async fn one_attempt(
    up: &dyn Upstream,
    sets: &[&str],
    sink: &dyn EventSink,
    cancel: &CancellationToken,
) -> (Result<(), Failure>, AttemptProgress) {
    let policy = policy(sets);
    let timers = policy.timers.for_attempt(None, &policy.retry.escalation, 0, 0);
    let scope = AttemptScope {
        sink,
        epoch: Instant::now(),
        stream: 1,
        attempt: 1,
        deadline: None,
        cancel,
        wall_epoch: std::time::SystemTime::now(),
        bodies: policy.bodies,
        lag: None,
        rule_headers: &[],
    };
    let (target, input) = (Target::new("p", "m1"), CallInput::default());
    let request = AttemptRequest { stream: 1, attempt: 1, target: &target, credential: None, input: &input };
    let mut progress = AttemptProgress::default();
    let result = run_attempt(up, request, &timers, &scope, &mut progress).await;
    (result, progress)
}

#[tokio::test(start_paused = true)]
async fn cancellation_stops_a_stream_whose_chunks_never_pause() {
    // One pause (so the body loop has waited once), then chunks that are
    // always ready: the token must be noticed between them.
    let mut body = vec![Step::Send("c:a\n"), Step::Wait(MS(1))];
    body.extend(std::iter::repeat_n(Step::Send("c:a\n"), 10_000));
    let up = Scripted::new(vec![Script::stream(body)]);
    let cancel = CancellationToken::new();
    let sink = CancelAtChunk { chunks: AtomicUsize::new(0), at: 100, token: cancel.clone() };
    let (result, progress) = one_attempt(&*up, NO_JITTER, &sink, &cancel).await;
    assert!(matches!(result, Err(Failure::Cancelled)), "{result:?}");
    assert_eq!(progress.events, 100, "the chunk that cancelled is the last one read");
}

/// A caller that stops reading an error body it has the status of (an
/// SDK closing a 429 to retry it, as observe sees) leaves the attempt that
/// status, its body as far as it came, not a cancel.
#[tokio::test(start_paused = true)]
async fn a_cancel_while_an_error_body_is_read_keeps_the_status() {
    let head = (429, vec![("retry-after-ms", "700")]);
    let script =
        Script { headers_after: Duration::ZERO, open: Ok(head), body: vec![Step::Send("{\"error\""), Step::Hang] };
    let up = Scripted::new(vec![script]);
    let cancel = CancellationToken::new();
    let sink = CancelAtChunk { chunks: AtomicUsize::new(0), at: 1, token: cancel.clone() };
    let (result, _) = one_attempt(&*up, NO_JITTER, &sink, &cancel).await;
    match result {
        Err(Failure::Http { status: 429, body, .. }) => assert_eq!(body, "{\"error\""),
        other => panic!("{other:?}"),
    }
}

/// An upstream whose body hands over all its chunks at once, each stamped
/// with when it arrived, as a replayed body does.
struct Stamped(Vec<(Duration, &'static str)>);

impl Upstream for Stamped {
    fn open<'a>(&'a self, _request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        let start = Instant::now();
        let chunks: Vec<Result<Chunk, Failure>> = self
            .0
            .iter()
            .map(|&(at, text)| Ok(Chunk { bytes: Bytes::from_static(text.as_bytes()), arrived: Some(start + at) }))
            .collect();
        Box::pin(async move {
            let mut headers = HeaderMap::new();
            headers.insert("content-type", HeaderValue::from_static("text/event-stream"));
            Ok(Response::new(200, headers, stream::iter(chunks).chain(stream::pending()).boxed()))
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(LineDecoder::default())
    }
}

#[tokio::test(start_paused = true)]
async fn chunks_handed_over_ahead_of_the_clock_meet_each_timer_at_its_deadline() {
    // Content at 0.1 s, then a ping every 0.5 s: the data-stall timer (2 s)
    // is due at 2.1 s, between the pings at 2.0 and 2.5 s.
    let mut chunks = vec![(MS(100), "c:a\n")];
    chunks.extend((1..=10).map(|i| (MS(500 * i), "p\n")));
    let sink = VecSink::new();
    let started = Instant::now();
    let sets = with(&["SSE_DATA_STALL_TIMEOUT_S=2"]);
    let (result, progress) = one_attempt(&Stamped(chunks), &sets, &sink, &CancellationToken::new()).await;
    assert!(matches!(result, Err(Failure::Timeout { timer: TimerKind::DataStall, .. })), "{result:?}");
    assert_eq!(progress.keepalives, 4, "the pings before the deadline were read, the rest never");
    let events = sink.events();
    let fired = events.iter().find(|e| matches!(e.kind, EventKind::TimerFired { .. })).map(|e| e.at);
    assert_eq!(fired, Some(MS(2100)), "fired at its deadline, not at the next chunk");
    let chunks: Vec<Duration> =
        events.iter().filter(|e| matches!(e.kind, EventKind::ChunkReceived { .. })).map(|e| e.at).collect();
    assert_eq!(chunks, [100, 500, 1000, 1500, 2000].map(MS), "each chunk stamped with its arrival");
    assert_eq!(started.elapsed(), MS(2100), "what follows the attempt waits for the clock to reach its end");
}

#[tokio::test(start_paused = true)]
async fn a_stream_handed_over_ahead_of_the_clock_ends_when_the_clock_reaches_it() {
    let chunks = vec![(MS(200), "c:a\n"), (S(3), "c:b\n"), (S(3), "d\n")];
    let sink = VecSink::new();
    let started = Instant::now();
    let (result, progress) = one_attempt(&Stamped(chunks), NO_JITTER, &sink, &CancellationToken::new()).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!((progress.content.as_str(), progress.ttfb), ("ab", Some(MS(200))));
    let last = sink.events().pop().map(|e| (e.at, e.kind));
    let done = EventKind::PhaseChanged { phase: AttemptPhase::Done };
    assert_eq!(last, Some((S(3), done)), "done is stamped with its chunk's arrival");
    assert_eq!(started.elapsed(), S(3));
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One content event, then silence; `closed` is set when the body is
/// dropped (when the connection would close).
struct StallsAfterOneEvent {
    closed: Arc<AtomicBool>,
}

impl Upstream for StallsAfterOneEvent {
    fn open<'a>(&'a self, _request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        let guard = SetOnDrop(Arc::clone(&self.closed));
        Box::pin(async move {
            let body = stream::once(async { Ok(Bytes::from_static(b"c:a\n").into()) }).chain(stream::pending()).map(
                move |chunk| {
                    let _owned_by_the_body = &guard;
                    chunk
                },
            );
            let mut headers = HeaderMap::new();
            headers.insert("content-type", HeaderValue::from_static("text/event-stream"));
            Ok(Response::new(200, headers, body.boxed()))
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(LineDecoder::default())
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_connection_is_closed_a_moment_after_its_timer_fires() {
    let up = StallsAfterOneEvent { closed: Arc::default() };
    let sets = with(&["SSE_IDLE_TIMEOUT_S=2"]);
    let (result, _) = one_attempt(&up, &sets, &VecSink::default(), &CancellationToken::new()).await;
    assert!(matches!(result, Err(Failure::Timeout { timer: TimerKind::Idle, .. })), "{result:?}");
    // Closed off the path where other stalls are noticed, but closed.
    assert!(!up.closed.load(Ordering::SeqCst));
    tokio::time::sleep(MS(99)).await;
    assert!(!up.closed.load(Ordering::SeqCst));
    tokio::time::sleep(MS(2)).await;
    assert!(up.closed.load(Ordering::SeqCst), "the stalled body was never dropped");
}

#[tokio::test(start_paused = true)]
async fn pings_reset_the_idle_timer_but_not_the_data_stall_timer() {
    let mut pings = vec![Step::Send("c:start\n")];
    for _ in 0..100 {
        pings.push(Step::Wait(S(1)));
        pings.push(Step::Send("p\n"));
    }
    let up = Scripted::new(vec![Script::stream(pings)]);
    let sets = with(&["SSE_IDLE_TIMEOUT_S=2", "SSE_DATA_STALL_TIMEOUT_S=5", "PARTIAL_RECOVERY=0"]);
    let h = Harness::single(policy(&sets), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    let error = report.error.unwrap();
    assert_eq!(error.timer, Some(TimerKind::DataStall));
    assert_eq!(report.elapsed, S(5));
    assert_eq!(report.keepalives, 4);

    // Silence trips the idle timer first.
    let up = Scripted::new(vec![Script::stream(vec![Step::Send("c:start\n"), Step::Hang])]);
    let h = Harness::single(policy(&sets), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.error.unwrap().timer, report.elapsed), (Some(TimerKind::Idle), S(2)));
}

#[tokio::test(start_paused = true)]
async fn reasoning_counts_as_progress_unless_configured_otherwise() {
    let mut thinking = vec![];
    for _ in 0..20 {
        thinking.push(Step::Wait(S(1)));
        thinking.push(Step::Send("r:hmm\n"));
    }
    thinking.push(Step::Send("c:answer\n"));
    thinking.push(Step::Send("d\n"));
    let up = Scripted::new(vec![Script::stream(thinking)]);
    let h = Harness::single(policy(&with(&["SSE_DATA_STALL_TIMEOUT_S=5"])), up.clone());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.outcome, Outcome::Ok);

    let up = Scripted::new(vec![up_script_thinking()]);
    let sets =
        with(&["SSE_DATA_STALL_TIMEOUT_S=5", "PROGRESS_EVENT_CLASSES=content,tool_call", "RETRY_BUDGET_TIMEOUT=0"]);
    let h = Harness::single(policy(&sets), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.error.unwrap().timer), (Outcome::Failed, Some(TimerKind::DataStall)));
}

fn up_script_thinking() -> Script {
    let mut thinking = vec![];
    for _ in 0..20 {
        thinking.push(Step::Wait(S(1)));
        thinking.push(Step::Send("r:hmm\n"));
    }
    Script::stream(thinking)
}

/// A healthy start (20 content events in the first second), then from 2 s
/// a crawl: a content event every 2 s and pings between for ten minutes,
/// then the end at 602 s.
fn crawl() -> Script {
    let mut steps = vec![];
    for _ in 0..20 {
        steps.push(Step::Send("c:x\n"));
        steps.push(Step::Wait(MS(50)));
    }
    steps.push(Step::Wait(S(1)));
    for _ in 0..300 {
        steps.push(Step::Send("c:y\n"));
        steps.push(Step::Wait(MS(500)));
        for _ in 0..3 {
            steps.push(Step::Send("p\n"));
            steps.push(Step::Wait(MS(500)));
        }
    }
    steps.push(Step::Send("d\n"));
    Script::stream(steps)
}

#[tokio::test(start_paused = true)]
async fn the_throughput_floor_catches_a_crawl_that_pings_cannot_hide() {
    // Off (the default), the crawl holds the call for ten minutes: progress
    // every 2 s resets the data-stall clock and pings the idle one.
    let h = Harness::single(policy(NO_JITTER), Scripted::new(vec![crawl()]));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.elapsed), (Outcome::Ok, MS(602_000)));

    // A floor of one event a second over 60 s: the window from the first
    // content to 60 s holds 20 + 29 events, and the 1,200 pings count for
    // nothing. After content, the break keeps the partial text.
    let sets = with(&["SSE_MIN_RATE=1", "SSE_MIN_RATE_WINDOW_S=60"]);
    let h = Harness::single(policy(&sets), Scripted::new(vec![crawl()]));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.elapsed, report.attempts), (Outcome::Partial, S(60), 1));
    assert_eq!(report.content, format!("{}{}", "x".repeat(20), "y".repeat(29)));
    let fired: Vec<_> = h
        .sink
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::TimerFired { timer, after, .. } => Some((timer, after)),
            _ => None,
        })
        .collect();
    assert_eq!(fired, [(TimerKind::MinRate, S(60))]);
    assert!(h.sink.kinds().iter().any(|k| matches!(
        k,
        EventKind::TimerArmed { timer: TimerKind::MinRate, floor: Some(f), .. } if *f == 1.0
    )));

    // At the floor is not below it: half an event a second is what the
    // crawl keeps up (30 events a window), so it runs to its end.
    let sets = with(&["SSE_MIN_RATE=0.5", "SSE_MIN_RATE_WINDOW_S=60"]);
    let h = Harness::single(policy(&sets), Scripted::new(vec![crawl()]));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.outcome, Outcome::Ok);
}

#[tokio::test(start_paused = true)]
async fn the_throughput_floor_waits_for_content_unless_told_to_judge_earlier() {
    // Twenty seconds of slow reasoning, then a quick answer.
    let mut thinking = vec![];
    for _ in 0..10 {
        thinking.push(Step::Wait(S(2)));
        thinking.push(Step::Send("r:hmm\n"));
    }
    for _ in 0..10 {
        thinking.push(Step::Send("c:a\n"));
    }
    thinking.push(Step::Send("d\n"));
    let quick = Script::stream(vec![Step::Send("c:b\n"), Step::Send("d\n")]);
    let floor = ["SSE_MIN_RATE=1", "SSE_MIN_RATE_WINDOW_S=10"];
    let h = Harness::single(policy(&with(&floor)), Scripted::new(vec![Script::stream(thinking.clone())]));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.attempts), (Outcome::Ok, 1), "reasoning is not judged by default");

    // Judged from the first progress event, the reasoning crawls: before
    // content, the attempt is retried like any timeout.
    let sets = with(&[floor[0], floor[1], "SSE_MIN_RATE_AFTER=progress"]);
    let up = Scripted::new(vec![Script::stream(thinking), quick]);
    let h = Harness::single(policy(&sets), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    let categories: Vec<_> = h
        .sink
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ErrorClassified { category, timer, retryable, .. } => Some((category, timer, retryable)),
            _ => None,
        })
        .collect();
    assert_eq!(categories, [(Category::Timeout, Some(TimerKind::MinRate), true)]);
    assert_eq!((report.outcome, report.attempts, report.content.as_str()), (Outcome::Ok, 2, "b"));
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_a_longer_wait_than_the_cap_is_refused() {
    let up = Scripted::new(vec![Script::status(429, vec![("retry-after-ms", "1500")], ""), Script::ok("c:ok\n")]);
    let h = Harness::single(policy(NO_JITTER), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.outcome, Outcome::Ok);
    assert_eq!((report.backoff_sleeps.clone(), report.retry_after.clone()), (vec![MS(1500)], vec![Some(MS(1500))]));

    // Positive-only jitter never sleeps less than asked.
    let up = Scripted::new(vec![Script::status(429, vec![("retry-after", "2")], ""), Script::ok("c:ok\n")]);
    let h = Harness::single(policy(&["FALLBACK_MODELS=off"]), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert!(report.backoff_sleeps[0] >= S(2) && report.backoff_sleeps[0] <= MS(2500), "{:?}", report.backoff_sleeps);

    // Over the cap: not slept; no chain, so the call fails fast and says
    // what the server asked for.
    let up = Scripted::new(vec![Script::status(429, vec![("retry-after", "600")], "")]);
    let h = Harness::single(policy(NO_JITTER), up.clone());
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.refused_wait, report.elapsed), (Outcome::Failed, Some(S(600)), Duration::ZERO));
    assert!(h.sink.kinds().iter().any(|k| matches!(k, EventKind::ServerWaitRefused { .. })));
    assert_eq!(up.opened(), 1);

    // With a chain, the refused wait moves the call on.
    let up = Scripted::new(vec![Script::status(429, vec![("retry-after", "600")], ""), Script::ok("c:ok\n")]);
    let h = Harness::single(policy(&["BACKOFF_JITTER=none"]), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.hops.len()), (Outcome::Ok, 1));
}

#[tokio::test(start_paused = true)]
async fn timeout_retries_escalate_the_timers() {
    let up = Scripted::new(vec![Script::stream(vec![Step::Hang])]);
    let sets = with(&[
        "SSE_TTFB_TIMEOUT_S=1",
        "TIMEOUT_ESCALATION=additive",
        "TIMEOUT_ESCALATION_INCREMENT_S=1",
        "PROVIDER_STREAM_BACKOFF_S=0",
    ]);
    let h = Harness::single(policy(&sets), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    let fired: Vec<Duration> = h
        .sink
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::TimerFired { timer: TimerKind::Ttfb, after, .. } => Some(after),
            _ => None,
        })
        .collect();
    assert_eq!(fired, [S(1), S(2), S(3), S(4)]);
    assert_eq!(report.elapsed, S(10));
}

#[tokio::test(start_paused = true)]
async fn the_ttfb_guard_is_off_for_large_contexts() {
    let up = Scripted::new(vec![Script { headers_after: S(200), ..Script::ok("c:slow prefill\n") }]);
    let h = Harness::single(policy(NO_JITTER), up);
    let mut call = h.call("m1");
    call.input.context_tokens = Some(30_000);
    let report = h.executor.run(&call, &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.elapsed), (Outcome::Ok, S(200)));
    assert!(h.sink.kinds().iter().any(|k| matches!(k, EventKind::TimerDisarmed { timer: TimerKind::Ttfb, .. })));

    let up = Scripted::new(vec![Script { headers_after: S(200), ..Script::ok("c:slow prefill\n") }]);
    let h = Harness::single(policy(&with(&["RETRY_BUDGET_TIMEOUT=0"])), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.error.unwrap().timer, report.elapsed), (Some(TimerKind::Ttfb), S(120)));
}

#[tokio::test(start_paused = true)]
async fn a_non_event_stream_body_is_read_under_the_timers_and_classified() {
    let json =
        Script::status(200, vec![("content-type", "application/json")], "{\"error\":{\"type\":\"overloaded_error\"}}");
    let h = Harness::single(policy(&with(&["RETRY_BUDGET_OVERLOADED=0"])), Scripted::new(vec![json]));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.error.unwrap().category, Category::Overloaded);

    // A proxy page that never ends still trips the idle timer.
    let html = Script {
        headers_after: Duration::ZERO,
        open: Ok((200, vec![("content-type", "text/html")])),
        body: vec![Step::Send("<html>"), Step::Hang],
    };
    let sets = with(&["SSE_IDLE_TIMEOUT_S=3", "RETRY_BUDGET_TIMEOUT=0"]);
    let h = Harness::single(policy(&sets), Scripted::new(vec![html]));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.error.unwrap().timer, report.elapsed), (Some(TimerKind::Idle), S(3)));

    // A body trickling a byte per second keeps idle quiet, not data stall.
    let mut trickle = vec![];
    for _ in 0..100 {
        trickle.push(Step::Wait(S(1)));
        trickle.push(Step::Send("{"));
    }
    let json = Script {
        headers_after: Duration::ZERO,
        open: Ok((200, vec![("content-type", "application/json")])),
        body: trickle,
    };
    let sets = with(&["SSE_IDLE_TIMEOUT_S=3", "SSE_DATA_STALL_TIMEOUT_S=10", "RETRY_BUDGET_TIMEOUT=0"]);
    let h = Harness::single(policy(&sets), Scripted::new(vec![json]));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.error.unwrap().timer, report.elapsed), (Some(TimerKind::DataStall), S(10)));
}

#[tokio::test(start_paused = true)]
async fn auth_failures_rotate_to_the_next_key_and_rest_the_refused_one() {
    let up = Scripted::new(vec![Script::status(401, vec![], "invalid key"), Script::ok("c:ok\n")]);
    let h = Harness::new(policy(NO_JITTER), vec![("p", vec!["m1"], up.clone(), 2)]);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.attempts), (Outcome::Ok, 2));
    let keys: Vec<Option<usize>> = up.seen.lock().unwrap().iter().map(|(_, k)| *k).collect();
    assert_eq!(keys, [Some(0), Some(1)]);
    let kinds = h.sink.kinds();
    assert!(
        kinds.iter().any(
            |k| matches!(k, EventKind::CredentialCooledDown { credential: 0, cooldown, .. } if *cooldown == S(300))
        )
    );
    assert!(kinds.iter().any(|k| matches!(k, EventKind::CredentialRotated { from: 0, to: 1, .. })));

    // Every key refused: each key is tried once, the rotations are counted
    // under auth, and the call ends as the auth failure it is.
    let up = Scripted::new(vec![Script::status(401, vec![], "invalid key")]);
    let h = Harness::new(policy(NO_JITTER), vec![("p", vec!["m1"], up.clone(), 2)]);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    let error = report.error.unwrap();
    assert_eq!((report.outcome, error.category, up.opened()), (Outcome::Failed, Category::Auth, 2));
    assert_eq!(error.rule, "builtin: status 401/403");
    assert_eq!(report.retry_counts[&Category::Auth], stallscope::core::executor::Used { used: 1, budget: 1 });

    // A single key is never rested and an auth failure is final.
    let up = Scripted::new(vec![Script::status(401, vec![], "invalid key")]);
    let h = Harness::new(policy(NO_JITTER), vec![("p", vec!["m1"], up.clone(), 1)]);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, up.opened()), (Outcome::Failed, 1));
    assert!(!h.sink.kinds().iter().any(|k| matches!(k, EventKind::CredentialCooledDown { .. })));
}

/// A lone call's fleet budget allows no retry at all: 20 % of one call,
/// no floor.
const NO_FLEET_RETRY: [&str; 2] = ["FLEET_RETRY_BUDGET_MIN=0", "FLEET_RETRY_BUDGET_PERCENT=20"];

fn fleet_refusals(h: &Harness) -> usize {
    h.sink.kinds().iter().filter(|k| matches!(k, EventKind::RetryBudgetRefused { limit: 0, .. })).count()
}

/// The failures that say the provider is loaded: retrying them is what
/// multiplies its load, so the fleet budget bounds their retries.
#[tokio::test(start_paused = true)]
async fn the_fleet_budget_refuses_retries_of_a_loaded_provider_beyond_its_share() {
    let loaded = [
        (Script::status(429, vec![], "slow down"), Category::RateLimit),
        (Script::status(529, vec![], "overloaded"), Category::Overloaded),
        (Script::status(500, vec![], "internal error"), Category::ServerError),
        // No response byte before the TTFB timer (120 s): a queueing server.
        (Script { headers_after: S(200), ..Script::ok("c:late\n") }, Category::Timeout),
    ];
    for (first, category) in loaded {
        let up = Scripted::new(vec![first, Script::ok("c:ok\n")]);
        let h = Harness::single(policy(&with(&NO_FLEET_RETRY)), up.clone());
        let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
        assert_eq!((report.outcome, up.opened()), (Outcome::Failed, 1), "{category}");
        assert_eq!(report.error.unwrap().category, category);
        assert_eq!(fleet_refusals(&h), 1, "{category}");
    }
}

/// A path gone silent after the response began, a stream of keep-alives
/// only, a refused connection: none says the provider is loaded, so the
/// fleet budget neither refuses their retries nor counts them, and the
/// call recovers however many others are retrying.
#[tokio::test(start_paused = true)]
async fn a_stall_or_a_refused_connection_is_retried_whatever_the_fleet_budget_has_left() {
    let pings: Vec<Step> = (0..20).flat_map(|_| [Step::Send("p\n"), Step::Wait(S(1))]).collect();
    let path = [
        (Script::stream(vec![Step::Send("p\n"), Step::Hang]), Some(TimerKind::Idle)),
        (Script::stream(pings), Some(TimerKind::DataStall)),
        (Script::refuse(refused()), None),
    ];
    for (first, timer) in path {
        let up = Scripted::new(vec![first, Script::ok("c:ok\n")]);
        let sets = with(&[NO_FLEET_RETRY[0], NO_FLEET_RETRY[1], "SSE_IDLE_TIMEOUT_S=2", "SSE_DATA_STALL_TIMEOUT_S=5"]);
        let h = Harness::single(policy(&sets), up.clone());
        let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
        assert_eq!((report.outcome, up.opened()), (Outcome::Ok, 2), "{timer:?}");
        let timers: Vec<_> = h
            .sink
            .kinds()
            .into_iter()
            .filter_map(|k| match k {
                EventKind::ErrorClassified { timer, .. } => Some(timer),
                _ => None,
            })
            .collect();
        assert_eq!(timers, [timer]);
        assert_eq!(fleet_refusals(&h), 0, "{timer:?}");
    }
}

/// `FLEET_RETRY_BUDGET_CATEGORIES` says which failures the budget governs:
/// a category, or a timeout by its timer; empty, it refuses nothing.
#[tokio::test(start_paused = true)]
async fn the_failures_the_fleet_budget_governs_are_configurable() {
    let stall = || Script::stream(vec![Step::Send("p\n"), Step::Hang]);
    let cases = [
        ("timeout:idle", stall(), Outcome::Failed),
        ("timeout", stall(), Outcome::Failed),
        ("timeout:ttfb,connection", stall(), Outcome::Ok),
        ("connection", Script::refuse(refused()), Outcome::Failed),
        ("", Script::status(429, vec![], "slow down"), Outcome::Ok),
    ];
    for (list, first, outcome) in cases {
        let up = Scripted::new(vec![first, Script::ok("c:ok\n")]);
        let categories = format!("FLEET_RETRY_BUDGET_CATEGORIES={list}");
        let sets = with(&[NO_FLEET_RETRY[0], NO_FLEET_RETRY[1], "SSE_IDLE_TIMEOUT_S=2"]);
        let sets: Vec<&str> = sets.into_iter().chain([categories.as_str()]).collect();
        let h = Harness::single(policy(&sets), up.clone());
        let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
        assert_eq!(report.outcome, outcome, "{list:?}");
        assert_eq!(fleet_refusals(&h), usize::from(outcome == Outcome::Failed), "{list:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn escalation_past_what_an_instant_holds_does_not_panic() {
    let up = Scripted::new(vec![Script::stream(vec![Step::Hang])]);
    let sets = with(&[
        "SSE_TTFB_TIMEOUT_S=1",
        "TIMEOUT_ESCALATION=multiplicative",
        "TIMEOUT_ESCALATION_MULTIPLIER=10",
        "RETRY_BUDGET_TIMEOUT=100",
        "PROVIDER_STREAM_RETRIES=30",
        "PROVIDER_STREAM_BACKOFF_S=0",
        "CALL_DEADLINE_S=86400",
    ]);
    let h = Harness::single(policy(&sets), up);
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.error.unwrap().timer, Some(TimerKind::Deadline));
}

#[tokio::test(start_paused = true)]
async fn every_event_carries_stream_attempt_and_monotonic_time() {
    let up = Scripted::new(vec![Script::refuse(refused()), Script::ok("c:ok\n")]);
    let h = Harness::single(policy(NO_JITTER), up);
    h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    let events = h.sink.events();
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(events.iter().all(|e| e.stream == 1));
    assert!(matches!(events.first().unwrap().kind, EventKind::CallStarted { .. }));
    assert!(matches!(events.last().unwrap().kind, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, .. }));
    let attempts: Vec<u32> =
        events.iter().filter(|e| matches!(e.kind, EventKind::AttemptStarted { .. })).map(|e| e.attempt).collect();
    assert_eq!(attempts, [1, 2]);
}
