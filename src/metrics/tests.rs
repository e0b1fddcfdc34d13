//! The exposition text the metrics produce from a call's events, report
//! and verdict.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::core::category::{Category, TimerKind};
use crate::core::event::{AttemptEnd, Event, EventClass, EventKind, EventSink, Outcome, SleepReason};
use crate::core::executor::{CallReport, Hop};
use crate::core::failover::Target;
use crate::core::lag_probe::LagSample;
use crate::diagnosis::diagnose;

/// Metrics that keep the names of the calls below: providers p and q,
/// model m.
fn configured() -> Arc<Metrics> {
    Arc::new(Metrics::with_names(LabelNames::new(["p", "q"], ["m"])))
}

fn at(ms: u64, stream: u64, attempt: u32, kind: EventKind) -> Event {
    Event { at: Duration::from_millis(ms), stream, attempt, kind }
}

/// A call to p/m whose first attempt stalls after some progress (the
/// data-stall timer fires 500 ms after the last progress event), that
/// fails over to q/m and succeeds there.
fn stalled_then_failed_over(stream: u64) -> Vec<Event> {
    let (p, q) = (Target::new("p", "m"), Target::new("q", "m"));
    vec![
        at(0, stream, 0, EventKind::CallStarted { target: p.clone(), context_tokens: None }),
        at(0, stream, 1, EventKind::AttemptStarted { target: p.clone(), credential: None }),
        at(100, stream, 1, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
        at(200, stream, 1, EventKind::ChunkReceived { bytes: 10 }),
        at(250, stream, 1, EventKind::SseReceived { class: EventClass::Reasoning, chars: 3, progress: true }),
        at(300, stream, 1, EventKind::ChunkReceived { bytes: 10 }),
        at(350, stream, 1, EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false }),
        at(
            750,
            stream,
            1,
            EventKind::TimerFired { timer: TimerKind::DataStall, after: Duration::from_millis(500), lag: None },
        ),
        at(
            750,
            stream,
            1,
            EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::DataStall }, stop_reason: None },
        ),
        at(
            750,
            stream,
            1,
            EventKind::ErrorClassified {
                category: Category::Timeout,
                timer: Some(TimerKind::DataStall),
                status: None,
                retryable: true,
                rule: "builtin: timer".into(),
                message: "stream 987654 said sk-secret".into(),
            },
        ),
        at(
            750,
            stream,
            0,
            EventKind::BackoffScheduled {
                retry: 1,
                category: Category::Timeout,
                nominal: Duration::from_millis(50),
                sleep: Duration::from_millis(50),
                reason: SleepReason::Backoff,
            },
        ),
        at(800, stream, 0, EventKind::FailedOver { from: p.clone(), to: q.clone(), reason: Category::Timeout }),
        at(800, stream, 2, EventKind::AttemptStarted { target: q.clone(), credential: None }),
        at(850, stream, 2, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
        at(900, stream, 2, EventKind::ChunkReceived { bytes: 10 }),
        at(900, stream, 2, EventKind::SseReceived { class: EventClass::Content, chars: 3, progress: true }),
        at(950, stream, 2, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) }),
        at(950, stream, 0, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, stop_reason: Some("stop".into()) }),
    ]
}

fn report(stream: u64) -> CallReport {
    let (p, q) = (Target::new("p", "m"), Target::new("q", "m"));
    CallReport {
        stream,
        outcome: Outcome::Ok,
        target: q.clone(),
        attempts: 2,
        elapsed: Duration::from_millis(950),
        ttfb: Some(Duration::from_millis(100)),
        bytes: 30,
        events: 3,
        keepalives: 1,
        content: "tok".into(),
        stop_reason: Some("stop".into()),
        error: None,
        hops: vec![Hop { from: p, to: q, reason: Category::Timeout }],
        backoff_sleeps: vec![Duration::from_millis(50)],
        retry_after: vec![None],
        refused_wait: None,
        retry_counts: BTreeMap::new(),
        low_buckets: Vec::new(),
    }
}

/// Feeds `streams` copies of the call at `site` and returns the text.
fn exposition(metrics: &Arc<Metrics>, site: &str, streams: u64) -> String {
    let sink = metrics.calls(site);
    for stream in 0..streams {
        let events = stalled_then_failed_over(stream);
        let verdict = diagnose(&events);
        for event in events {
            sink.emit(event);
        }
        sink.on_finish(&report(stream), &verdict);
    }
    metrics.encode()
}

fn assert_lines(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.lines().any(|l| l == *line), "missing `{line}` in:\n{text}");
    }
}

#[test]
fn a_stalled_call_that_failed_over_is_counted_under_each_attempts_target() {
    let metrics = configured();
    let text = exposition(&metrics, "office", 2);
    assert_lines(
        &text,
        &[
            "# TYPE stallscope_calls_total counter",
            r#"stallscope_calls_total{site="office",provider="p",model="m",outcome="ok",verdict="keepalive_only_stall"} 2"#,
            r#"stallscope_attempts_total{site="office",provider="p",model="m",end="timer"} 2"#,
            r#"stallscope_attempts_total{site="office",provider="q",model="m",end="done"} 2"#,
            r#"stallscope_timer_fires_total{site="office",provider="p",model="m",timer="data_stall"} 2"#,
            r#"stallscope_retries_total{site="office",provider="p",model="m",category="timeout"} 2"#,
            r#"stallscope_failover_hops_total{site="office",from="p/m",to="q/m",reason="timeout"} 2"#,
            "# TYPE stallscope_stall_detection_seconds histogram",
            r#"stallscope_stall_detection_seconds_sum{site="office",provider="p",model="m",timer="data_stall"} 1.0"#,
            r#"stallscope_stall_detection_seconds_count{site="office",provider="p",model="m",timer="data_stall"} 2"#,
            r#"stallscope_stall_detection_seconds_bucket{site="office",provider="p",model="m",timer="data_stall",le="0.32"} 0"#,
            r#"stallscope_stall_detection_seconds_bucket{site="office",provider="p",model="m",timer="data_stall",le="0.64"} 2"#,
            r#"stallscope_ttfb_seconds_sum{site="office",provider="p",model="m"} 0.4"#,
            r#"stallscope_ttfb_seconds_sum{site="office",provider="q",model="m"} 0.2"#,
            r#"stallscope_backoff_sleep_seconds_count{site="office",provider="p",model="m",reason="backoff"} 2"#,
            r#"stallscope_call_duration_seconds_count{site="office",provider="p",model="m",outcome="ok"} 2"#,
            r#"stallscope_call_duration_seconds_sum{site="office",provider="p",model="m",outcome="ok"} 1.9"#,
        ],
    );
}

#[test]
fn no_stream_id_message_or_key_becomes_a_label() {
    let metrics = configured();
    let text = exposition(&metrics, "office", 1);
    for leaked in ["987654", "sk-secret", "stream="] {
        assert!(!text.contains(leaked), "`{leaked}` in:\n{text}");
    }
    // Many more streams add no series: the text only grows with routes.
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    let more = exposition(&configured(), "office", 50);
    assert_eq!(series(&text), series(&more));
}

#[test]
fn sites_are_kept_apart() {
    let metrics = configured();
    exposition(&metrics, "office", 1);
    let text = exposition(&metrics, "home", 3);
    assert_lines(
        &text,
        &[
            r#"stallscope_timer_fires_total{site="office",provider="p",model="m",timer="data_stall"} 1"#,
            r#"stallscope_timer_fires_total{site="home",provider="p",model="m",timer="data_stall"} 3"#,
        ],
    );
}

#[test]
fn rounds_drops_and_the_runtime_lag_are_counted_per_site() {
    let metrics = configured();
    metrics.round_finished("office", RoundResult::Recorded, Duration::from_millis(1500), 1_700_000_000.5);
    metrics.round_finished("office", RoundResult::Unrecorded, Duration::from_millis(500), 1_700_000_060.0);
    metrics.round_finished("office", RoundResult::Failed, Duration::ZERO, 1_700_000_120.0);
    metrics.rounds_skipped("office", 2);
    metrics.recorder_dropped("office", 7);
    metrics.calls("office").runtime_lag(LagSample { at: Duration::ZERO, lag: Duration::from_millis(3) });
    assert_lines(
        &metrics.encode(),
        &[
            r#"stallscope_watch_rounds_total{site="office",result="recorded"} 1"#,
            r#"stallscope_watch_rounds_total{site="office",result="unrecorded"} 1"#,
            r#"stallscope_watch_rounds_total{site="office",result="failed"} 1"#,
            r#"stallscope_watch_rounds_skipped_total{site="office"} 2"#,
            r#"stallscope_recorder_dropped_events_total{site="office"} 7"#,
            r#"stallscope_watch_round_duration_seconds_count{site="office"} 3"#,
            r#"stallscope_watch_last_round_timestamp_seconds{site="office"} 1700000120.0"#,
            // A failed round says nothing about recording: the last word
            // was the unrecorded round's.
            r#"stallscope_watch_recording{site="office"} 0"#,
            r#"stallscope_runtime_lag_seconds_bucket{site="office",le="0.004"} 1"#,
            r#"stallscope_runtime_lag_seconds_bucket{site="office",le="0.002"} 0"#,
        ],
    );
}

#[test]
fn route_readiness_follows_each_sites_last_probe_and_forgets_removed_routes() {
    let metrics = Metrics::with_names(LabelNames::new(["a", "b", "c"], ["m", "org/m"]));
    let (a, b, c) = (Target::new("a", "m"), Target::new("b", "org/m"), Target::new("c", "m"));
    metrics.routes_ready("office", &[(a.clone(), true), (b.clone(), false)]);
    metrics.routes_ready("home", &[(a.clone(), false)]);
    // The office's config lost route b and gained c; a is ready no longer.
    metrics.routes_ready("office", &[(a, false), (c, true)]);
    let text = metrics.encode();
    assert_lines(
        &text,
        &[
            "# TYPE stallscope_route_ready gauge",
            r#"stallscope_route_ready{site="office",provider="a",model="m"} 0"#,
            r#"stallscope_route_ready{site="office",provider="c",model="m"} 1"#,
            r#"stallscope_route_ready{site="home",provider="a",model="m"} 0"#,
        ],
    );
    assert!(!text.contains(r#"provider="b""#), "a removed route stays:\n{text}");
}

#[tokio::test]
async fn the_server_answers_metrics_and_nothing_else() {
    let metrics = configured();
    metrics.recorder_dropped("office", 1);
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), Arc::clone(&metrics)).await.unwrap();
    let base = format!("http://{}", server.addr());
    let client = reqwest::Client::new();
    let response = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], CONTENT_TYPE);
    let body = response.text().await.unwrap();
    assert!(body.contains(r#"stallscope_recorder_dropped_events_total{site="office"} 1"#), "{body}");
    assert_eq!(client.get(format!("{base}/other")).send().await.unwrap().status(), 404);
    assert_eq!(client.post(format!("{base}/metrics")).send().await.unwrap().status(), 405);
    server.shutdown().await;
}

/// Review D6: the idle clock restarts at the headers, so an idle timer
/// that fired 1 s after headers that took 4 s detected its stall in 1 s,
/// not 5 s.
#[test]
fn stall_detection_counts_from_the_headers_as_the_idle_clock_does() {
    let metrics = configured();
    let sink = metrics.calls("office");
    let p = Target::new("p", "m");
    let idle = EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_secs(1), lag: None };
    for event in [
        at(0, 7, 0, EventKind::CallStarted { target: p.clone(), context_tokens: None }),
        at(0, 7, 1, EventKind::AttemptStarted { target: p, credential: None }),
        at(4000, 7, 1, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
        at(5000, 7, 1, idle),
    ] {
        sink.emit(event);
    }
    assert_lines(
        &metrics.encode(),
        &[r#"stallscope_stall_detection_seconds_sum{site="office",provider="p",model="m",timer="idle"} 1.0"#],
    );
}

/// Review D8: 200 model names an observed agent made up gave 7,200
/// series. Names not given to the metrics count as `other`, so the series
/// are as many as for one name, and configured names keep their own.
#[test]
fn names_not_configured_count_as_other_and_add_no_series() {
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    let invented = |models: usize| {
        let metrics = Arc::new(Metrics::with_names(LabelNames::new(["route"], ["gpt-4o"])));
        let sink = metrics.calls("observe@lab");
        for stream in 0..models as u64 {
            let (ours, theirs) = (Target::new("route", format!("made-up-{stream}")), Target::new("gw", "x"));
            let events = [
                at(0, stream, 0, EventKind::CallStarted { target: ours.clone(), context_tokens: None }),
                at(0, stream, 1, EventKind::AttemptStarted { target: ours.clone(), credential: None }),
                at(5, stream, 1, EventKind::ChunkReceived { bytes: 10 }),
                at(9, stream, 1, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: None }),
                at(9, stream, 0, EventKind::FailedOver { from: ours.clone(), to: theirs, reason: Category::Timeout }),
            ];
            for event in events {
                sink.emit(event);
            }
            sink.would_fire(&ours, TimerKind::Idle);
            let mut report = report(stream);
            (report.target, report.hops) = (ours, Vec::new());
            sink.on_finish(&report, &diagnose(&[]));
        }
        metrics.routes_ready("observe@lab", &[(Target::new("route", "made-up-0"), true)]);
        metrics.encode()
    };
    let (one, many) = (invented(1), invented(200));
    assert_eq!(series(&one), series(&many), "{many}");
    assert!(!many.contains("made-up") && !many.contains(r#"provider="gw""#), "{many}");
    assert_lines(
        &many,
        &[
            r#"stallscope_attempts_total{site="observe@lab",provider="route",model="other",end="done"} 200"#,
            r#"stallscope_would_fire_total{site="observe@lab",provider="route",model="other",timer="idle"} 200"#,
            r#"stallscope_failover_hops_total{site="observe@lab",from="route/other",to="other/other",reason="timeout"} 200"#,
            r#"stallscope_route_ready{site="observe@lab",provider="route",model="other"} 1"#,
        ],
    );
    // A configured model keeps its name; with no names given, nothing does.
    let metrics = Arc::new(Metrics::with_names(LabelNames::new(["route"], ["gpt-4o"])));
    metrics.calls("observe@lab").would_fire(&Target::new("route", "gpt-4o"), TimerKind::Idle);
    let unnamed = Arc::new(Metrics::new());
    unnamed.calls("observe@lab").would_fire(&Target::new("route", "gpt-4o"), TimerKind::Idle);
    assert_lines(
        &format!("{}{}", metrics.encode(), unnamed.encode()),
        &[
            r#"stallscope_would_fire_total{site="observe@lab",provider="route",model="gpt-4o",timer="idle"} 1"#,
            r#"stallscope_would_fire_total{site="observe@lab",provider="other",model="other",timer="idle"} 1"#,
        ],
    );
}

/// The names a configuration gives: its rows' and FALLBACK_MODELS's; a sink
/// keeps the names set when it was made, and a later set applies to the
/// sinks made after it.
#[test]
fn the_configuration_names_what_is_kept() {
    use crate::providers::Dialect;
    use crate::providers::setup::ProviderConfig;
    let rows = [ProviderConfig::at_root("openai", Dialect::OpenAiChat, "http://h", "gpt-4o")];
    let fallback = crate::core::failover::FallbackSetting::parse("claude/sonnet").unwrap();
    let names = LabelNames::configured(&rows, &fallback);
    assert_eq!(names, LabelNames::new(["openai", "claude"], ["gpt-4o", "sonnet"]));
    let metrics = Arc::new(Metrics::new());
    let before = metrics.calls("s");
    metrics.set_names(names);
    let after = metrics.calls("s");
    for sink in [before, after] {
        sink.would_fire(&Target::new("claude", "sonnet"), TimerKind::Idle);
    }
    assert_lines(
        &metrics.encode(),
        &[
            r#"stallscope_would_fire_total{site="s",provider="other",model="other",timer="idle"} 1"#,
            r#"stallscope_would_fire_total{site="s",provider="claude",model="sonnet",timer="idle"} 1"#,
        ],
    );
}
