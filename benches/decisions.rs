//! Costs of the core's hot paths, each beside a baseline measured in the
//! same run:
//!
//! - `decision/*`: classifying a failure and computing the next backoff
//!   (paid once per failed attempt);
//! - `stream/*`: the governor's cost per chunk, as `governed` (timers,
//!   events, decoding) against `decode_only` (the same chunks through the
//!   same decoder with no governor). Their ratio is the governor's
//!   overhead; `governed_floor` is `governed` with the throughput floor on
//!   (the `floor` bench measures the two in alternation, which shows the
//!   floor's few percent where separate runs cannot).

#[path = "common/governed.rs"]
mod governed;
#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use governed::{CHUNKS, body, floored, govern_all};
use http::{HeaderMap, HeaderValue};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use stallscope::core::classify::Classifier;
use stallscope::core::failure::Failure;
use stallscope::core::policy::CorePolicy;
use stallscope::core::upstream::Decoder;
use support::LineDecoder;
use tokio_util::sync::CancellationToken;

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
                    decoder.feed(&chunk.bytes, &mut out);
                    events += out.len();
                    out.clear();
                }
                events
            })
        })
    });
    group.bench_function("governed", |b| b.iter(|| runtime.block_on(govern_all(&timers, &cancel))));
    let floored = floored(&timers);
    group.bench_function("governed_floor", |b| b.iter(|| runtime.block_on(govern_all(&floored, &cancel))));
    group.finish();
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
