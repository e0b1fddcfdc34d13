//! A recorded run served as a live provider (`sim --from-run`): built-in
//! scenarios are run through the real HTTP stack and recorded, the
//! recording is served on loopback, and the real core calls it again — the
//! outcome, attempts, failures and the timers that fire must be the
//! recording's.

mod recorded;

use std::sync::Arc;
use std::time::Duration;

use recorded::record;
use stallscope::core::category::TimerKind;
use stallscope::core::event::{AttemptEnd, EventKind, RecordedBody, SleepReason, VecSink};
use stallscope::core::executor::{Call, Origin};
use stallscope::core::transport::ClientCache;
use stallscope::core::upstream::CallInput;
use stallscope::diagnosis::StreamCourse;
use stallscope::providers::Dialect;
use stallscope::providers::setup::ProviderConfig;
use stallscope::replay::recording::Recording;
use stallscope::run::executor;
use stallscope::session::{RunSource, settings_for};
use stallscope::sim::{STREAM_HEADER, SimServer};
use tokio_util::sync::CancellationToken;

/// Serves `recording` at `speed` and calls every recorded stream again
/// through the real core, with the scenario's tunables and provider rows
/// like the recorded ones pointing at the served recording. Returns each
/// stream's course and the events of the calls.
async fn replay_live(
    recording: &Recording,
    scenario: &str,
    dialect: Dialect,
    speed: f64,
) -> (Vec<StreamCourse>, Vec<stallscope::core::event::Event>) {
    let server = SimServer::start_recording(recording, speed, 0).await.unwrap();
    let providers: Vec<ProviderConfig> = recording
        .providers
        .iter()
        .map(|p| ProviderConfig::at_root(&p.target.provider, p.dialect.unwrap(), &server.base_url(), &p.target.model))
        .collect();
    let source = RunSource::Scenario { name: scenario.to_owned(), dialect };
    let settings = settings_for(&source, &[], &[], &[]).unwrap();
    let sink = Arc::new(VecSink::new());
    let executor =
        executor(&settings, &providers, &ClientCache::new(), sink.clone(), Origin::now(7), |_| None).unwrap();
    let calls = recording.streams.iter().map(|stream| {
        let call = Call {
            stream: stream.id,
            target: stream.target.clone(),
            input: CallInput { prompt: "Say hello.".into(), context_tokens: Some(3), ..CallInput::default() },
            not_before: None,
        };
        let executor = executor.clone();
        async move { executor.run(&call, &CancellationToken::new()).await }
    });
    futures_util::future::join_all(calls).await;
    server.shutdown().await;
    let events = sink.events();
    let courses = recording
        .streams
        .iter()
        .map(|stream| StreamCourse::of(&events.iter().filter(|e| e.stream == stream.id).cloned().collect::<Vec<_>>()))
        .collect();
    (courses, events)
}

fn recorded_courses(recording: &Recording) -> Vec<StreamCourse> {
    recording.streams.iter().map(|s| s.course.clone()).collect()
}

/// The recording's course again: the same outcome, attempts, hops and
/// failures, the same timers in the same attempts, each firing within
/// `slack` of when it fired live.
fn assert_same_course(name: &str, recorded: &[StreamCourse], served: &[StreamCourse], slack: f64) {
    assert_eq!(recorded.len(), served.len(), "{name}");
    for (before, after) in recorded.iter().zip(served) {
        let same = before.outcome == after.outcome
            && before.attempts == after.attempts
            && before.hops == after.hops
            && before.categories == after.categories
            && before.fired.len() == after.fired.len()
            && before
                .fired
                .iter()
                .zip(&after.fired)
                .all(|(b, a)| b.timer == a.timer && b.attempt == a.attempt && (b.at_s - a.at_s).abs() <= slack);
        assert!(same, "{name}:\n  recorded {before:?}\n  served   {after:?}");
    }
}

/// Every kind of ending the recording can show — a stall our timer gave
/// up on, keep-alives hiding a stall, a reset after content, an in-stream
/// error, a malformed stream, refused connections, error statuses — is met
/// again by the real core calling the served recording, in each dialect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_meets_each_recorded_scenario_again() {
    let cases = [
        ("silent-stall", Dialect::OpenAiResponses),
        ("ping-flood-stall", Dialect::AnthropicMessages),
        ("reset-after-first-token", Dialect::OpenAiChat),
        ("overloaded-in-stream", Dialect::AnthropicMessages),
        ("malformed-sse", Dialect::OpenAiChat),
        ("dead-primary", Dialect::OpenAiResponses),
        ("server-error-then-ok", Dialect::AnthropicMessages),
        ("slow-ttfb", Dialect::OpenAiChat),
    ];
    let runs = cases.map(|(name, dialect)| async move {
        let recording = record(name, dialect, &[]).await;
        let (served, _) = replay_live(&recording, name, dialect, 1.0).await;
        (name, recorded_courses(&recording), served)
    });
    for (name, recorded, served) in futures_util::future::join_all(runs).await {
        assert!(recorded.iter().all(|c| c.outcome.name() != "unfinished"), "{name}: {recorded:?}");
        assert_same_course(name, &recorded, &served, 0.1);
    }
}

/// The example: the silent stall is caught by the idle timer in
/// attempt 1, and attempt 2 completes.
#[tokio::test]
async fn a_served_silent_stall_fires_the_idle_timer_in_attempt_one() {
    let recording = record("silent-stall", Dialect::OpenAiChat, &[]).await;
    let (served, _) = replay_live(&recording, "silent-stall", Dialect::OpenAiChat, 1.0).await;
    for course in &served {
        assert_eq!((course.outcome.name(), course.attempts), ("ok", 2), "{course:?}");
        let fired: Vec<(TimerKind, u32)> = course.fired.iter().map(|f| (f.timer, f.attempt)).collect();
        assert_eq!(fired, [(TimerKind::Idle, 1)]);
        assert!((course.fired[0].detected_after_s - 1.0).abs() < 0.05, "{course:?}");
    }
    assert_same_course("silent-stall", &recorded_courses(&recording), &served, 0.05);
}

/// The example: the 429s come back with their `retry-after-ms`
/// header, and the core sleeps what it asks.
#[tokio::test]
async fn a_served_rate_limit_sends_retry_after_ms_and_it_is_honoured() {
    let recording = record("rate-limited-ms", Dialect::OpenAiChat, &[]).await;
    let (served, events) = replay_live(&recording, "rate-limited-ms", Dialect::OpenAiChat, 1.0).await;
    let headers: Vec<&Vec<(String, String)>> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ResponseHeaders { headers } if e.attempt < 3 => Some(headers),
            _ => None,
        })
        .collect();
    assert_eq!(headers.len(), 4, "two streams, two refused attempts each");
    assert!(headers.iter().all(|h| h.contains(&("retry-after-ms".to_owned(), "700".to_owned()))), "{headers:?}");
    let waits: Vec<(Duration, &SleepReason)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::BackoffScheduled { nominal, reason, .. } => Some((*nominal, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(waits.len(), 4, "{waits:?}");
    for (asked, reason) in waits {
        assert_eq!(reason, &SleepReason::ServerRequested { header: "retry-after-ms".into() });
        assert_eq!(asked, Duration::from_millis(700));
    }
    let recorded = recorded_courses(&recording);
    for (before, after) in recorded.iter().zip(&served) {
        assert_eq!((after.outcome.name(), after.attempts), ("ok", 3), "{after:?}");
        assert_eq!(before.sleeps_s, after.sleeps_s, "the same seed draws the same jitter on the same hints");
    }
    assert_same_course("rate-limited-ms", &recorded, &served, 0.1);
}

/// A dated `retry-after` asks for the wait it asked for when it was
/// recorded, not for a moment long past.
#[tokio::test]
async fn a_served_retry_after_date_still_asks_for_its_wait() {
    let recording = record("rate-limited-date", Dialect::AnthropicMessages, &[]).await;
    let (served, _) = replay_live(&recording, "rate-limited-date", Dialect::AnthropicMessages, 1.0).await;
    let recorded = recorded_courses(&recording);
    for (before, after) in recorded.iter().zip(&served) {
        assert_eq!((after.outcome, after.attempts), (before.outcome, before.attempts));
        // The date is whole seconds, so the wait may differ by up to one.
        for (b, a) in before.sleeps_s.iter().zip(&after.sleeps_s) {
            assert!(*a > 0.5 && (a - b).abs() <= 1.0, "recorded {before:?}\n served {after:?}");
        }
    }
}

/// With raw bodies recorded, every attempt's body is served byte for byte.
#[tokio::test]
async fn raw_bodies_are_served_byte_for_byte() {
    // A reset after content; an error status, then a stream that completes.
    let (reset, recovered) = tokio::join!(
        record("reset-after-first-token", Dialect::AnthropicMessages, &["RECORD_BODIES=raw"]),
        record("server-error-then-ok", Dialect::OpenAiResponses, &["RECORD_BODIES=raw"])
    );
    for recording in [&reset, &recovered] {
        let server = SimServer::start_recording(recording, 1.0, 0).await.unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        for stream in &recording.streams {
            for attempt in &stream.attempts {
                let Some(RecordedBody::Raw { bytes, truncated: false }) = &attempt.body else {
                    panic!("attempt {} of stream {} has no raw body", attempt.ordinal, stream.id)
                };
                let mut response = client
                    .post(format!("{}/v1/messages", server.base_url()))
                    .header(STREAM_HEADER, stream.id.to_string())
                    .body("{}")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status().as_u16(), attempt.response.as_ref().unwrap().status);
                let mut body = Vec::new();
                let mut broke = false;
                loop {
                    match response.chunk().await {
                        Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                        Ok(None) => break,
                        Err(_) => {
                            broke = true;
                            break;
                        }
                    }
                }
                assert_eq!(String::from_utf8_lossy(&body), String::from_utf8_lossy(bytes));
                let reset = matches!(attempt.ended, Some((_, AttemptEnd::Transport { .. })));
                assert_eq!(broke, reset, "stream {} attempt {}", stream.id, attempt.ordinal);
            }
        }
        server.shutdown().await;
    }
}

/// `--speed 10` plays every delay ten times faster: each body's span, from
/// its first chunk to its last, shrinks tenfold — never more, and less when
/// the machine is busy: each of the 19 gaps is a sleep that can only wake
/// late (a few ms each on a loaded 2-core machine, against 2.5 ms gaps),
/// so the upper bound only tells 10× from 1×.
#[tokio::test]
async fn speed_ten_shrinks_the_timing_tenfold() {
    let recording = record("healthy", Dialect::OpenAiChat, &[]).await;
    let (served, events) = replay_live(&recording, "healthy", Dialect::OpenAiChat, 10.0).await;
    for (stream, after) in recording.streams.iter().zip(&served) {
        let chunks = &stream.attempts[0].chunks;
        let before_s = (chunks.last().unwrap().at - chunks[0].at).as_secs_f64();
        let replayed: Vec<_> = events
            .iter()
            .filter(|e| e.stream == stream.id && matches!(e.kind, EventKind::ChunkReceived { .. }))
            .map(|e| e.at)
            .collect();
        let after_s = (*replayed.last().unwrap() - replayed[0]).as_secs_f64();
        assert!(before_s > 0.45, "20 tokens 25 ms apart: {chunks:?}");
        assert!(after_s >= before_s / 10.0 * 0.95 && after_s < before_s / 2.0, "{before_s} s → {after_s} s");
        assert_eq!((after.outcome.name(), after.attempts), ("ok", 1));
    }
}

/// A request the recording has no attempt for is answered 503, saying why.
#[tokio::test]
async fn requests_the_recording_never_had_are_refused_saying_why() {
    let recording = record("healthy", Dialect::OpenAiChat, &[]).await;
    let server = SimServer::start_recording(&recording, 1.0, 0).await.unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let call = |stream: Option<&str>| {
        let mut request = client.post(format!("{}/v1/chat/completions", server.base_url())).body("{}");
        if let Some(stream) = stream {
            request = request.header(STREAM_HEADER, stream);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let (status, body) = call(Some("1")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(Some("1")).await;
    assert_eq!(status, 503);
    assert!(body.contains("stream 1: the recording has 1 attempt(s), and this is request 2"), "{body}");
    let (status, body) = call(Some("9")).await;
    assert!(status == 503 && body.contains("no stream \\\"9\\\"") && body.contains("0 to 1"), "{body}");
    let (status, body) = call(None).await;
    assert!(status == 503 && body.contains("x-stallscope-stream"), "{body}");
    assert!(matches!(
        SimServer::start_recording(&recording, 2000.0, 0).await.err(),
        Some(stallscope::sim::SimError::Speed(_))
    ));
    server.shutdown().await;
}
