//! Costs of the core's hot paths, each beside a baseline measured in the
//! same run:
//!
//! - `decision/*`: classifying a failure and computing the next backoff
//!   (paid once per failed attempt);
//! - `stream/*`: the governor's cost per chunk, as `governed` (timers,
//!   events, decoding) against `decode_only` (the same chunks through the
//!   same decoder with no governor). Their ratio is the governor's
//!   overhead; `governed_floor` is `governed` with the throughput floor on
//!   (its ratio to `governed` is the floor's cost).

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream;
use http::{HeaderMap, HeaderValue};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use stallscope::core::classify::Classifier;
use stallscope::core::event::NullSink;
use stallscope::core::failover::Target;
use stallscope::core::failure::Failure;
use stallscope::core::governor::{AttemptProgress, AttemptScope, run_attempt};
use stallscope::core::policy::{AttemptTimers, CorePolicy, RateFloor};
use stallscope::core::upstream::{AttemptRequest, CallInput, Decoder, Response, Upstream};
use support::LineDecoder;
use tokio_util::sync::CancellationToken;

const CHUNKS: usize = 10_000;
const CHUNK: &[u8] = b"c:a token of content\n";

/// An upstream whose body is `CHUNKS` ready chunks, then done.
struct InMemory;

impl Upstream for InMemory {
    fn open<'a>(&'a self, _request: AttemptRequest<'a>) -> BoxFuture<'a, Result<Response, Failure>> {
        Box::pin(async {
            let mut headers = HeaderMap::new();
            headers.insert("content-type", HeaderValue::from_static("text/event-stream"));
            Ok(Response::new(200, headers, body().boxed()))
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(LineDecoder::default())
    }
}

fn body() -> impl futures_util::Stream<Item = Result<Bytes, Failure>> {
    stream::iter((0..=CHUNKS).map(|i| Ok(Bytes::from_static(if i == CHUNKS { b"d\n" } else { CHUNK }))))
}

fn decisions(c: &mut Criterion) {
    let classifier = Classifier::default();
    let mut headers = HeaderMap::new();
    headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
    headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("0"));
    headers.insert("x-ratelimit-reset-requests", HeaderValue::from_static("6m0s"));
    let failure = Failure::Http {
        status: 429,
        headers: Box::new(headers),
        body: "{\"error\":{\"type\":\"rate_limit_error\"}}".into(),
    };
    let policy = CorePolicy::default();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut group = c.benchmark_group("decision");
    group.bench_function("classify_429", |b| {
        b.iter(|| classifier.classify(black_box(&failure), SystemTime::UNIX_EPOCH))
    });
    group.bench_function("next_backoff", |b| {
        b.iter(|| policy.retry.backoff.delay(black_box(3), Some(Duration::from_secs(2)), &mut rng))
    });
    group.finish();
}

fn stream_costs(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let policy = CorePolicy::default();
    let timers = policy.timers.for_attempt(None, &policy.retry.escalation, 0, 3);
    let cancel = CancellationToken::new();
    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Elements(CHUNKS as u64));
    group.bench_function("decode_only", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let mut decoder = LineDecoder::default();
                let mut out = Vec::new();
                let mut body = Box::pin(body());
                let mut events = 0;
                while let Some(Ok(chunk)) = body.next().await {
                    decoder.feed(&chunk, &mut out);
                    events += out.len();
                    out.clear();
                }
                events
            })
        })
    });
    group.bench_function("governed", |b| b.iter(|| runtime.block_on(govern_all(&timers, &cancel))));
    // The same with the throughput floor on (a floor no stream of ready
    // chunks goes below): its cost is counting each progress event.
    let mut floored = timers.clone();
    floored.min_rate = Some(RateFloor {
        floor: 1.0,
        window: Duration::from_secs(60),
        after: stallscope::core::policy::RateStart::Content,
    });
    group.bench_function("governed_floor", |b| b.iter(|| runtime.block_on(govern_all(&floored, &cancel))));
    group.finish();
}

/// Runs one attempt over the in-memory body under `timers`.
async fn govern_all(timers: &AttemptTimers, cancel: &CancellationToken) -> u64 {
    let scope = AttemptScope {
        sink: &NullSink,
        epoch: tokio::time::Instant::now(),
        wall_epoch: std::time::SystemTime::now(),
        bodies: stallscope::core::policy::BodySettings::default(),
        lag: None,
        stream: 1,
        attempt: 1,
        deadline: None,
        cancel,
    };
    let mut progress = AttemptProgress::default();
    let (target, input) = (Target::new("p", "m"), CallInput::default());
    let request = AttemptRequest { stream: 1, attempt: 1, target: &target, credential: None, input: &input };
    run_attempt(&InMemory, request, timers, &scope, &mut progress).await.unwrap();
    progress.events
}

/// One realistic chat completions chunk through the SSE parser and the
/// dialect's decoder, beside the parser alone.
fn decode_costs(c: &mut Criterion) {
    const EVENT: &[u8] = b"data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741570252,\"model\":\"gpt-4o-mini-2024-07-18\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_06737a9306\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n";
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(1));
    let mut parser = stallscope::providers::sse::SseParser::default();
    group.bench_function("sse_only", |b| {
        b.iter(|| {
            let mut n = 0;
            parser.feed(black_box(EVENT), &mut |_| n += 1).unwrap();
            n
        })
    });
    let json = std::str::from_utf8(&EVENT[6..EVENT.len() - 2]).unwrap();
    group.bench_function("json_skim", |b| {
        b.iter(|| serde_json::from_str::<serde::de::IgnoredAny>(black_box(json)).unwrap())
    });
    group.bench_function("json_value", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(json)).unwrap())
    });
    let mut decoder = stallscope::providers::Dialect::OpenAiChat.decoder();
    let mut out = Vec::new();
    group.bench_function("chat_event", |b| {
        b.iter(|| {
            decoder.feed(black_box(EVENT), &mut out);
            let n = out.len();
            out.clear();
            n
        })
    });
    group.finish();
}

criterion_group!(benches, decisions, stream_costs, decode_costs);
criterion_main!(benches);
