//! What one call leaves in its events for a later replay: every attempt
//! that was made, and only those, with how it ended; the headers and error
//! bodies its decisions read; the body when asked for; and draws that a
//! seed makes repeatable. Also the retry bounds the recording exposed.

mod support;

use std::time::Duration;

use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{AttemptEnd, Event, EventKind, Outcome, RecordedBody};
use stallscope::core::executor::Used;
use stallscope::core::failure::{Failure, TransportKind};
use stallscope::core::governor::LowBucket;
use support::{Harness, Script, Scripted, Step, policy};
use tokio_util::sync::CancellationToken;

const S: fn(u64) -> Duration = Duration::from_secs;

/// Runs the harness's call to `p/m1` to its end.
async fn call(h: &Harness) -> stallscope::core::executor::CallReport {
    h.executor.run(&h.call("m1"), &CancellationToken::new()).await
}

fn kinds_of(events: &[Event], attempt: u32) -> Vec<&EventKind> {
    events.iter().filter(|e| e.attempt == attempt).map(|e| &e.kind).collect()
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_resting_keys_is_not_an_attempt() {
    // Each 429 says its request bucket is empty for 10 s but asks for a 1 s
    // wait: after two attempts both keys rest, and the call waits for the
    // first to wake without sending anything.
    let limited = Script::status(
        429,
        vec![("retry-after", "1"), ("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-reset-requests", "10s")],
        "slow down",
    );
    let up = Scripted::new(vec![limited.clone(), limited, Script::ok("c:ok\n")]);
    let h = Harness::new(policy(&["FALLBACK_MODELS=off"]), vec![("p", vec!["m1"], up.clone(), 2)]);
    let report = call(&h).await;
    assert_eq!((report.outcome, report.attempts, up.opened()), (Outcome::Ok, 3, 3));

    let events = h.sink.events();
    let started: Vec<u32> =
        events.iter().filter(|e| matches!(e.kind, EventKind::AttemptStarted { .. })).map(|e| e.attempt).collect();
    assert_eq!(started, [1, 2, 3]);
    let ended = events.iter().filter(|e| matches!(e.kind, EventKind::AttemptEnded { .. })).count();
    assert_eq!(ended, 3);
    // The wait for a key is classified between attempts, not as one.
    let between = kinds_of(&events, 0);
    assert!(
        between.iter().any(|k| matches!(k, EventKind::ErrorClassified { rule, .. } if rule.contains("cooling down"))),
        "{between:?}"
    );
    // Three retries: two server waits and the wait for a key.
    assert_eq!(report.retry_counts[&Category::RateLimit].used, 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_the_server_forces_is_counted_and_bounded() {
    let forced = Script::status(400, vec![("x-should-retry", "true")], "try again");
    let up = Scripted::new(vec![forced]);
    let sets = ["FALLBACK_MODELS=off", "RETRY_BUDGET_SERVER_FORCED=2", "PROVIDER_STREAM_BACKOFF_S=0"];
    let h = Harness::single(policy(&sets), up.clone());
    let report = call(&h).await;
    assert_eq!((report.outcome, up.opened()), (Outcome::Failed, 3));
    assert_eq!(report.retry_counts[&Category::InvalidRequest], Used { used: 2, budget: 2 });

    let up = Scripted::new(vec![Script::status(400, vec![("x-should-retry", "true")], "try again")]);
    let h = Harness::single(policy(&["FALLBACK_MODELS=off", "RETRY_BUDGET_SERVER_FORCED=0"]), up.clone());
    assert_eq!(call(&h).await.outcome, Outcome::Failed);
    assert_eq!(up.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_fleet_budget_refusal_never_hops_to_the_same_provider() {
    let refused = || Script::refuse(Failure::Transport { kind: TransportKind::Refused, message: "refused".into() });
    let sets = [
        "FLEET_RETRY_BUDGET_MIN=0",
        "FLEET_RETRY_BUDGET_PERCENT=20",
        "FLEET_RETRY_BUDGET_CATEGORIES=connection",
        "FALLBACK_MODELS=p/m2,q/m1",
    ];
    let (p, q) = (Scripted::new(vec![refused()]), Scripted::new(vec![Script::ok("c:ok\n")]));
    let h = Harness::new(policy(&sets), vec![("p", vec!["m1", "m2"], p.clone(), 0), ("q", vec!["m1"], q.clone(), 0)]);
    let report = call(&h).await;
    assert_eq!((report.outcome, p.opened(), q.opened()), (Outcome::Ok, 1, 1));
    assert_eq!(report.hops.len(), 1);
    assert_eq!((report.hops[0].from.to_string(), report.hops[0].to.to_string()), ("p/m1".into(), "q/m1".into()));

    // With only the same provider's models left, the call ends.
    let p = Scripted::new(vec![refused()]);
    let sets = [
        "FLEET_RETRY_BUDGET_MIN=0",
        "FLEET_RETRY_BUDGET_PERCENT=20",
        "FLEET_RETRY_BUDGET_CATEGORIES=connection",
        "FALLBACK_MODELS=p/m2",
    ];
    let h = Harness::new(policy(&sets), vec![("p", vec!["m1", "m2"], p.clone(), 0)]);
    let report = call(&h).await;
    assert_eq!((report.outcome, p.opened(), report.hops.len()), (Outcome::Failed, 1, 0));
    assert_eq!(report.error.unwrap().transport, Some(TransportKind::Refused));
}

/// A `Retry-After: 0` must not send every stream back at once: the sleep
/// is a jittered draw of at least the backoff base, while the event keeps
/// what the server asked for.
#[tokio::test(start_paused = true)]
async fn an_immediate_retry_after_still_waits_the_jittered_floor() {
    let up = Scripted::new(vec![Script::status(429, vec![("retry-after", "0")], "busy"), Script::ok("c:ok\n")]);
    let h = Harness::single(policy(&["FALLBACK_MODELS=off", "PROVIDER_STREAM_BACKOFF_S=1"]), up);
    assert_eq!(call(&h).await.outcome, Outcome::Ok);
    let scheduled = h.sink.kinds().into_iter().find_map(|k| match k {
        EventKind::BackoffScheduled { nominal, sleep, .. } => Some((nominal, sleep)),
        _ => None,
    });
    let (nominal, sleep) = scheduled.unwrap();
    assert_eq!(nominal, Duration::ZERO);
    assert!(sleep >= S(1) && sleep <= Duration::from_millis(1250), "{sleep:?}");
}

#[tokio::test(start_paused = true)]
async fn a_seed_repeats_the_backoff_sleeps() {
    let failing = || {
        Scripted::new(vec![
            Script::refuse(Failure::Transport { kind: TransportKind::Reset, message: "reset".into() }),
            Script::refuse(Failure::Transport { kind: TransportKind::Reset, message: "reset".into() }),
            Script::ok("c:ok\n"),
        ])
    };
    let sleeps = |seed: u64| async move {
        let mut h = Harness::single(policy(&["FALLBACK_MODELS=off", "BACKOFF_JITTER=full"]), failing());
        h.executor.seed = seed;
        call(&h).await.backoff_sleeps
    };
    let first = sleeps(7).await;
    assert_eq!(first.len(), 2);
    assert_eq!(sleeps(7).await, first);
    assert_ne!(sleeps(8).await, first);
}

#[tokio::test(start_paused = true)]
async fn every_attempt_says_how_it_ended() {
    let up = Scripted::new(vec![
        Script::refuse(Failure::Transport { kind: TransportKind::KernelTimeout, message: "timed out".into() }),
        Script::refuse(Failure::Timeout { timer: TimerKind::Connect, after: S(10) }),
        Script::status(503, vec![], "busy"),
        Script::stream(vec![Step::Send("c:partial\n"), Step::Send("s:stop\n"), Step::Send("d\n")]),
    ]);
    let h = Harness::single(policy(&["FALLBACK_MODELS=off", "PROVIDER_STREAM_BACKOFF_S=0"]), up);
    let report = call(&h).await;
    assert_eq!(report.outcome, Outcome::Ok);
    let ends: Vec<(u32, AttemptEnd, Option<String>)> = h
        .sink
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::AttemptEnded { end, stop_reason } => Some((e.attempt, end, stop_reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            (1, AttemptEnd::Transport { kind: TransportKind::KernelTimeout }, None),
            (2, AttemptEnd::Timer { timer: TimerKind::Connect }, None),
            (3, AttemptEnd::Status { status: 503 }, None),
            (4, AttemptEnd::Done, Some("stop".into())),
        ]
    );
    // The kernel's timeout is no timer of ours; the connect timer is, and
    // the timeline gets its mark.
    let fired: Vec<(u32, TimerKind)> = h
        .sink
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::TimerFired { timer, .. } => Some((e.attempt, timer)),
            _ => None,
        })
        .collect();
    assert_eq!(fired, [(2, TimerKind::Connect)]);
}

#[tokio::test(start_paused = true)]
async fn headers_error_bodies_and_low_buckets_are_recorded_without_secrets() {
    let up = Scripted::new(vec![
        Script::status(
            401,
            vec![("set-cookie", "session=s3cr3t"), ("x-request-id", "req_1"), ("retry-after-ms", "700")],
            r#"{"error":"Incorrect API key provided: sk-proj-abcdefghijklmnopqrstu"}"#,
        ),
        Script {
            headers_after: Duration::ZERO,
            open: Ok((
                200,
                vec![
                    ("content-type", "text/event-stream"),
                    ("x-ratelimit-limit-tokens", "1000"),
                    ("x-ratelimit-remaining-tokens", "50"),
                    ("x-ratelimit-reset-tokens", "6s"),
                ],
            )),
            body: vec![Step::Send("c:ok\n"), Step::Send("d\n")],
        },
    ]);
    let h = Harness::new(policy(&["FALLBACK_MODELS=off"]), vec![("p", vec!["m1"], up, 2)]);
    let report = call(&h).await;
    assert_eq!(report.outcome, Outcome::Ok);
    assert_eq!(report.low_buckets, [LowBucket { bucket: "tokens", remaining: 50, limit: Some(1000) }]);
    let events = h.sink.events();
    let first = kinds_of(&events, 1);
    let headers = first
        .iter()
        .find_map(|k| match k {
            EventKind::ResponseHeaders { headers } => Some(headers.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(headers, [("x-request-id".to_owned(), "req_1".to_owned()), ("retry-after-ms".into(), "700".into())]);
    let body = first
        .iter()
        .find_map(|k| match k {
            EventKind::ErrorBody { body, .. } => Some(body.clone()),
            _ => None,
        })
        .unwrap();
    assert!(body.contains("Incorrect API key") && !body.contains("sk-proj"), "{body}");
    let recorded = serde_json::to_string(&events).unwrap();
    assert!(!recorded.contains("s3cr3t") && !recorded.contains("sk-proj") && !recorded.contains("p-key-"));

    // A successful response says its token bucket runs low.
    let second = kinds_of(&events, 2);
    assert!(second.iter().any(|k| matches!(
        k,
        EventKind::RateLimitLow { bucket, remaining: 50, limit: Some(1000), reset: Some(reset) }
            if bucket == "tokens" && *reset == S(6)
    )));
    assert!(second.iter().any(|k| matches!(k, EventKind::RateLimitObserved { tokens_remaining: Some(50), .. })));
}

#[tokio::test(start_paused = true)]
async fn bodies_are_recorded_only_when_asked_and_up_to_the_cap() {
    let body = || Script::stream(vec![Step::Send("c:Hel"), Step::Send("lo\np:\n"), Step::Send("d\n")]);
    let recorded = |sets: &'static [&'static str]| async move {
        let h = Harness::single(policy(sets), Scripted::new(vec![body()]));
        assert_eq!(call(&h).await.outcome, Outcome::Ok);
        let events = h.sink.events();
        let bodies: Vec<RecordedBody> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::BodyRecorded { body } => Some(body.clone()),
                _ => None,
            })
            .collect();
        // The body follows its attempt's end.
        if !bodies.is_empty() {
            let last_two: Vec<&EventKind> = events.iter().rev().skip(1).take(2).map(|e| &e.kind).collect();
            assert!(matches!(last_two[..], [EventKind::BodyRecorded { .. }, EventKind::AttemptEnded { .. }]));
        }
        bodies
    };
    assert_eq!(recorded(&["FALLBACK_MODELS=off"]).await, []);
    assert_eq!(
        recorded(&["FALLBACK_MODELS=off", "RECORD_BODIES=raw"]).await,
        [RecordedBody::Raw { bytes: b"c:Hello\np:\nd\n".to_vec(), truncated: false }]
    );
    assert_eq!(
        recorded(&["FALLBACK_MODELS=off", "RECORD_BODIES=text"]).await,
        [RecordedBody::Text { texts: vec!["Hello".into(), String::new()], truncated: false }]
    );
}
