//! `stallscope observe` in front of the simulator on loopback, driven by a
//! plain HTTP client as an agent: what the agent receives through it is
//! what the upstream sent, chunk by chunk; every call is recorded as a
//! stream of one run with its verdict; the agent giving up, a request of
//! no stream, an upstream that cannot be reached and a path no route
//! takes are each answered and recorded as they happened; the agent's key
//! is never recorded.

mod observer;
mod programs;

use std::time::Duration;

use observer::Running;
use programs::{files_text, free_port, temp_dir};
use stallscope::core::category::TimerKind;
use stallscope::core::event::{AttemptEnd, EventKind, Outcome};
use stallscope::diagnosis::{Severity, VerdictKind};
use stallscope::observe::{ObserveError, ObservePlan, ObserveSource, Observer, Service};
use stallscope::replay::recording::Recording;
use stallscope::replay::whatif::{WhatIf, what_if};
use stallscope::sim::{SimServer, builtin};
use stallscope::store::Store;
use stallscope::watch::Retention;

/// A key only the agent's headers carry.
const KEY: &str = "sk-observe-RECOGNISABLE-5521";

/// A streamed chat request.
const STREAMED: &str = r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// The calls a run's report counts (an observer's report lists none).
fn calls_in(report: &stallscope::report::RunReport) -> usize {
    let sum = &report.summary;
    sum.ok + sum.partial + sum.failed + sum.cancelled
}

/// Posts `body` to `url` as an agent with its key, and reads the answer
/// chunk by chunk: status, the chunks' sizes as read, the text.
async fn agent_call(client: &reqwest::Client, url: &str, body: &str) -> (u16, Vec<usize>, String) {
    let mut response = client
        .post(url)
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let (mut sizes, mut bytes) = (Vec::new(), Vec::new());
    while let Some(chunk) = response.chunk().await.unwrap() {
        sizes.push(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    (status, sizes, String::from_utf8(bytes).unwrap())
}

/// A streamed call through observe reads as it does directly: the same
/// text in the same chunks; it is recorded as a healthy stream of a run
/// labelled observe@ADDR, and the agent's key is nowhere in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_reads_as_it_does_directly_and_is_recorded() {
    let dir = temp_dir(&format!("observe-{}", free_port()));
    let db = dir.join("observe.db");
    let observer = Running::start(ObserveSource::Scenario("healthy".into()), Some(&db)).await;
    let direct = SimServer::start(builtin("healthy").unwrap(), 0).await.unwrap();
    let client = reqwest::Client::new();
    let (status, observed_chunks, observed) =
        agent_call(&client, &format!("{}/v1/chat/completions", observer.base), STREAMED).await;
    let (_, direct_chunks, direct_text) =
        agent_call(&client, &format!("{}/v1/chat/completions", direct.base_url()), STREAMED).await;
    assert_eq!(status, 200);
    assert_eq!(observed, direct_text, "the agent reads what the upstream sent");
    assert!(observed.ends_with("data: [DONE]\n\n"), "{observed}");
    assert_eq!(observed_chunks, direct_chunks, "one read a write, as directly: nothing buffered or re-chunked");
    let calls = observer.ended(1).await;
    assert_eq!(calls[0].verdict.kind, VerdictKind::Healthy, "{}", calls[0].verdict.summary);
    assert_eq!(calls[0].report.target.to_string(), "sim/gpt-x");
    let base = observer.base.clone();
    let report = observer.stop().await;
    assert_eq!((calls_in(&report), report.stopped), (1, true));
    let store = Store::open(&db).unwrap();
    let run = store.list_runs().unwrap().into_iter().next().unwrap();
    assert_eq!(run.label.as_deref(), Some(format!("observe@{}", base.trim_start_matches("http://")).as_str()));
    let stored = store.diagnosed_report(run.id).unwrap().unwrap();
    assert_eq!(stored.streams[0].diagnosis.as_ref().map(|d| d.kind), Some(VerdictKind::Healthy));
    // What the run's counted report keeps of no call is read from its events.
    let shown = &stored.streams[0];
    assert_eq!(shown.bytes, calls[0].report.bytes, "bytes as the call counted them");
    assert!(shown.ttfb_ms.is_some() && shown.events > 0, "{shown:?}");
    assert_eq!(shown.stop_reason, calls[0].report.stop_reason);
    drop(store);
    assert!(!files_text(&dir).contains("RECOGNISABLE"), "the agent's key was recorded");
    direct.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent that gives up on a silent stall (its own 1 s read timeout)
/// ends the call there: cancelled, after about its timeout, before any
/// content; our idle timer, at 0.4 s in force, would have fired first,
/// and says when. The recording has both: the agent disconnecting where
/// it did, then the call's end, and our timer's mark where it would have
/// fired. A healthy call has no such mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_giving_up_ends_the_call_where_it_gave_up() {
    let sets = ["SSE_IDLE_TIMEOUT_S=0.4"];
    let dir = temp_dir(&format!("observe-gone-{}", free_port()));
    let db = dir.join("observe.db");
    let observer = Running::start_with(ObserveSource::Scenario("silent-stall".into()), Some(&db), &sets).await;
    let impatient = reqwest::Client::builder().read_timeout(Duration::from_secs(1)).build().unwrap();
    let url = format!("{}/v1/chat/completions", observer.base);
    let response = impatient.post(&url).body(STREAMED).send().await.unwrap();
    assert!(response.text().await.is_err(), "the agent's own timeout");
    let calls = observer.ended(1).await;
    let (report, verdict) = (&calls[0].report, &calls[0].verdict);
    assert_eq!((report.outcome, verdict.kind), (Outcome::Cancelled, VerdictKind::Cancelled), "{}", verdict.summary);
    assert!(
        report.elapsed >= Duration::from_secs(1) && report.elapsed < Duration::from_secs(3),
        "{:?}",
        report.elapsed
    );
    assert!(verdict.summary.contains("before any content"), "{}", verdict.summary);
    let would = calls[0].would_fire.as_ref().expect("our idle timer would have fired");
    assert!(would.words().starts_with("our idle timer (0.4 s) would have fired at 0.4 s, of 1."), "{}", would.words());
    observer.stop().await;
    let store = Store::open(&db).unwrap();
    let run = store.list_runs().unwrap()[0].id;
    let events = store.events(run, report.stream).unwrap();
    let started = events.iter().find(|e| matches!(e.kind, EventKind::AttemptStarted { .. })).unwrap().at;
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    let gone = kinds.iter().position(|k| matches!(k, EventKind::AgentDisconnected)).expect("the agent disconnected");
    assert!(
        matches!(kinds[gone + 1], EventKind::AttemptEnded { end: AttemptEnd::Cancelled, .. }),
        "the call ends where the agent went: {kinds:?}"
    );
    let mark = events.iter().find(|e| matches!(e.kind, EventKind::TimerWouldFire { .. })).expect("our timer's mark");
    assert!(
        matches!(mark.kind, EventKind::TimerWouldFire { timer: TimerKind::Idle, after } if after == Duration::from_millis(400))
    );
    let into = mark.at - started;
    assert!(into >= Duration::from_millis(400) && into < Duration::from_millis(900), "{into:?} into the attempt");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);

    let healthy = Running::start_with(ObserveSource::Scenario("healthy".into()), None, &sets).await;
    let client = reqwest::Client::new();
    agent_call(&client, &format!("{}/v1/chat/completions", healthy.base), STREAMED).await;
    assert_eq!(healthy.ended(1).await[0].would_fire, None, "tokens 25 ms apart keep a 0.4 s idle timer at rest");
    healthy.stop().await;
}

/// A request of no stream (a models list) passes through as the upstream
/// answered it, and is recorded as an attempt without a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_no_stream_passes_through_as_answered() {
    let observer = Running::start(ObserveSource::Scenario("healthy".into()), None).await;
    let response = reqwest::get(format!("{}/v1/models", observer.base)).await.unwrap();
    assert_eq!(response.status(), 404, "the simulator serves no models list");
    assert!(response.text().await.unwrap().contains("no endpoint /v1/models"));
    let calls = observer.ended(1).await;
    assert_eq!(calls[0].verdict.kind, VerdictKind::InvalidRequest, "{}", calls[0].verdict.summary);
    assert_eq!(calls[0].report.attempts, 1);
    observer.stop().await;
}

/// With a config's routes: `/<provider>/…` goes to that provider; one that
/// cannot be reached gets observe's own 502 naming why; a path no route
/// takes gets 404 and is sent nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_go_to_their_provider_and_nowhere_else() {
    let sim = SimServer::start(builtin("healthy").unwrap(), 0).await.unwrap();
    let dir = temp_dir(&format!("observe-routes-{}", free_port()));
    let config = dir.join("config.toml");
    let row = |name: &str, base: &str| {
        format!("[[provider]]\nname = \"{name}\"\nkind = \"openai-chat\"\nbase_url = \"{base}/v1\"\nmodel = \"m\"\n\n")
    };
    let dead = format!("http://127.0.0.1:{}", free_port());
    std::fs::write(&config, row("lab", &sim.base_url()) + &row("dead", &dead)).unwrap();
    let observer = Running::start(ObserveSource::Config(Some(config)), None).await;
    let client = reqwest::Client::new();
    let (status, _, text) = agent_call(&client, &format!("{}/lab/chat/completions", observer.base), STREAMED).await;
    assert_eq!(status, 200);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let (status, _, text) = agent_call(&client, &format!("{}/dead/chat/completions", observer.base), STREAMED).await;
    assert_eq!(status, 502, "{text}");
    // In the dialect's own error shape, which the agent's SDK raises.
    let said: serde_json::Value = serde_json::from_str(&text).unwrap();
    let message = said["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(&format!("stallscope observe: {dead}/v1/chat/completions: ")), "{text}");
    assert!(message.contains("refused"), "{text}");
    let (status, _, text) = agent_call(&client, &format!("{}/elsewhere/v1/messages", observer.base), STREAMED).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("no route for /elsewhere/v1/messages"), "{text}");
    let calls = observer.ended(2).await;
    let kinds: Vec<VerdictKind> = calls.iter().map(|c| c.verdict.kind).collect();
    assert!(kinds.contains(&VerdictKind::Healthy) && kinds.contains(&VerdictKind::Refused), "{kinds:?}");
    let refused = calls.iter().find(|c| c.verdict.kind == VerdictKind::Refused).unwrap();
    assert!(
        refused.verdict.summary.ends_with("retries are off (STALLSCOPE_PROVIDER_STREAM_RETRIES=0)"),
        "{}",
        refused.verdict.summary
    );
    assert_eq!(calls_in(&observer.stop().await), 2, "the unrouted request is no call");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Listening beyond loopback needs --allow-remote, and says why.
#[tokio::test]
async fn a_remote_listen_address_needs_allow_remote() {
    let plan = ObservePlan {
        listen: "0.0.0.0:0".parse().unwrap(),
        allow_remote: false,
        source: ObserveSource::Upstream("https://api.openai.com".into()),
        config: None,
        overrides: Vec::new(),
        edits: Vec::new(),
        recording: None,
        guard: false,
        service: Service::default(),
    };
    let error = Observer::bind(&plan, &[]).await.err().unwrap();
    assert!(matches!(error, ObserveError::Remote(_)), "{error}");
    assert!(error.to_string().contains("add --allow-remote if that is meant"), "{error}");
    let bad = ObservePlan {
        listen: "127.0.0.1:0".parse().unwrap(),
        source: ObserveSource::Upstream("ftp://x".into()),
        ..plan
    };
    let error = Observer::bind(&bad, &[]).await.err().unwrap();
    assert!(error.to_string().starts_with("--upstream ftp://x: not an http(s) URL"), "{error}");
}

/// The agent's own retry of a call it gave up on (the same body again)
/// is the call's next attempt, its wait the backoff: one stream of two
/// attempts, recovered; a request with another body is a new call. A
/// what-if of the recorded run with our idle timer in the agent's place
/// catches the stall sooner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_s_own_retry_is_the_call_s_next_attempt() {
    let dir = temp_dir(&format!("observe-retry-{}", free_port()));
    let db = dir.join("observe.db");
    let observer = Running::start(ObserveSource::Scenario("silent-stall".into()), Some(&db)).await;
    let url = format!("{}/v1/chat/completions", observer.base);
    let impatient = reqwest::Client::builder().read_timeout(Duration::from_millis(800)).build().unwrap();
    let first = impatient.post(&url).body(STREAMED).send().await.unwrap();
    assert!(first.text().await.is_err(), "the agent gives up");
    observer.ended(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = reqwest::Client::new();
    let (status, _, text) = agent_call(&client, &url, STREAMED).await;
    assert_eq!(status, 200);
    assert!(text.ends_with("data: [DONE]\n\n"), "the simulator's attempt 2 is healthy: {text}");
    let calls = observer.ended(2).await;
    let retried = &calls[1];
    assert_eq!(retried.report.stream, calls[0].report.stream, "one call");
    assert_eq!((retried.report.outcome, retried.report.attempts), (Outcome::Ok, 2));
    let gap = retried.report.backoff_sleeps[0];
    assert!(gap >= Duration::from_millis(250) && gap < Duration::from_secs(2), "the agent's wait: {gap:?}");
    let verdict = &retried.verdict;
    assert_eq!((verdict.kind, verdict.severity), (VerdictKind::Cancelled, Severity::Recovered), "{}", verdict.summary);
    assert!(verdict.summary.ends_with("recovered on attempt 2"), "{}", verdict.summary);
    let other = r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"another"}]}"#;
    agent_call(&client, &url, other).await;
    let calls = observer.ended(3).await;
    assert_ne!(calls[2].report.stream, calls[0].report.stream, "another body is another call");
    let report = observer.stop().await;
    assert_eq!(calls_in(&report), 2, "the retried call counts once");
    assert_eq!((report.summary.ok, report.summary.cancelled), (2, 0), "the retried call as it ended last");

    let store = Store::open(&db).unwrap();
    let run = store.list_runs().unwrap()[0].id;
    let recording = Recording::load(&store, run).unwrap();
    let sets = ["SSE_IDLE_TIMEOUT_S=0.3", "PROVIDER_STREAM_RETRIES=2"].map(str::to_owned).to_vec();
    let whatif = what_if(&recording, &WhatIf { overrides: sets, ..WhatIf::default() }).unwrap();
    let stream = &whatif.streams[0];
    assert!(stream.sooner_s.is_some_and(|s| s > 0.3), "{stream:?}");
    assert_eq!(stream.after.attempts, 2, "{stream:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls `url` (a `/metrics`) until a line starts with `series` and ends
/// with `value`, within 10 s.
async fn metric_reaches(client: &reqwest::Client, url: &str, series: &str, value: &str) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        text = client.get(url).send().await.unwrap().text().await.unwrap();
        if text.lines().any(|l| l.starts_with(series) && l.ends_with(&format!(" {value}"))) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {series} … {value} in:\n{text}");
}

/// A long-running observer: it serves the metrics `watch` serves, labelled
/// observe@SITE, our clocks' would-fire counts as each attempt ends and a
/// call once it is over (its retry window passed); it starts a new run
/// every interval once the last one had a call, and the database keeps
/// the runs `--keep` says, never the one just closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_observer_rotates_its_runs_and_serves_its_metrics() {
    let dir = temp_dir(&format!("observe-service-{}", free_port()));
    let db = dir.join("observe.db");
    let service = Service {
        rotate: Some(Duration::from_millis(1500)),
        retention: Some(Retention::Rounds(1)),
        site: Some("lab".into()),
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        retry_window: Some(Duration::from_millis(500)),
        ..Service::default()
    };
    let sets = ["SSE_IDLE_TIMEOUT_S=0.4"];
    let source = ObserveSource::Scenario("silent-stall".into());
    let observer = Running::start_service(source, Some(&db), &sets, service).await;
    let mut serving = None;
    for _ in 0..100 {
        serving = observer.seen().metrics;
        if serving.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = format!("http://{}/metrics", serving.expect("metrics are served"));
    let impatient = reqwest::Client::builder().read_timeout(Duration::from_secs(1)).build().unwrap();
    let url = format!("{}/v1/chat/completions", observer.base);
    let response = impatient.post(&url).body(STREAMED).send().await.unwrap();
    assert!(response.text().await.is_err(), "the agent's own timeout");
    let client = reqwest::Client::new();
    // The agent's `model` is none of the configuration's: it counts as
    // `other` (review D8), under the route it came by.
    let site = r#"site="observe@lab",provider="sim",model="other""#;
    metric_reaches(&client, &metrics, &format!(r#"stallscope_would_fire_total{{{site},timer="idle"}}"#), "1").await;
    // Counted once its retry window has passed.
    let calls = format!(r#"stallscope_calls_total{{{site},outcome="cancelled",verdict="cancelled"}}"#);
    metric_reaches(&client, &metrics, &calls, "1").await;
    for _ in 0..100 {
        if !observer.seen().rotated.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = observer.seen().rotated.first().copied().expect("the first run was rotated out");
    assert_eq!(first.1, 1, "its one call");
    // The scenario's next call answers.
    let (status, _, _) = agent_call(&client, &url, STREAMED).await;
    assert_eq!(status, 200);
    observer.ended(2).await;
    let last = observer.stop().await;
    assert_eq!(calls_in(&last), 1, "the second run has the second call");
    let store = Store::open(&db).unwrap();
    let runs: Vec<_> =
        store.list_runs().unwrap().into_iter().filter(|r| r.label.as_deref() == Some("observe@lab")).collect();
    assert_eq!(runs.len(), 1, "--keep 1 deleted the first run at the last one's close: {runs:?}");
    assert_eq!(Some(runs[0].id), last.run_id);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An upstream that goes on writing after its stream said it was done.
fn writes_after_done(_: &hyper::Request<hyper::body::Incoming>) -> programs::Answer {
    let chunk = |ms, text: &'static str| (Duration::from_millis(ms), bytes::Bytes::from_static(text.as_bytes()));
    programs::Answer {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned())],
        chunks: vec![
            chunk(0, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"),
            chunk(20, "data: [DONE]\n\n"),
            chunk(50, ": said after the end\n\n"),
        ],
    }
}

/// The core stops reading a stream once it says it is done; the agent
/// still gets every byte the upstream sends after that, as a proxy passes
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_comes_after_the_stream_is_done_still_reaches_the_agent() {
    let upstream = programs::serve(writes_after_done).await;
    let observer = Running::start(ObserveSource::Upstream(format!("http://{upstream}")), None).await;
    let client = reqwest::Client::new();
    let (status, _, text) = agent_call(&client, &format!("{}/v1/chat/completions", observer.base), STREAMED).await;
    assert_eq!(status, 200);
    assert!(text.ends_with("data: [DONE]\n\n: said after the end\n\n"), "{text:?}");
    assert_eq!(observer.ended(1).await[0].verdict.kind, VerdictKind::Healthy);
    observer.stop().await;
}
