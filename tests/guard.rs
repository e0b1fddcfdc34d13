//! `stallscope observe --guard` in front of the simulator and small
//! upstreams of the test's own, on loopback, driven by a plain HTTP client
//! as an agent: before content, a stall, a keep-alive-only stall or a 429
//! is retried by the core, and the agent gets one well-formed response,
//! its start events once; after content a stall ends the agent's stream in
//! its dialect's own terms (`GUARD_AFTER_CONTENT`); a wait above the cap
//! goes back to the agent as the provider sent it; every guarded response
//! says so in `x-stallscope-guard: on`; the guarded run replays as it ran.

mod observer;
mod programs;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use observer::{GUARD, Running};
use programs::{Answer, free_port, serve, temp_dir};
use stallscope::core::event::Outcome;
use stallscope::diagnosis::{Severity, VerdictKind};
use stallscope::observe::{Delivered, ObservePlan, ObserveSource, Observer, Service};
use stallscope::replay::recording::Recording;
use stallscope::replay::whatif::fidelity;
use stallscope::store::Store;
use tokio_util::sync::CancellationToken;

/// A streamed chat request.
const STREAMED: &str = r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// What the agent read.
struct Read {
    status: u16,
    guarded: bool,
    text: String,
    took: Duration,
}

/// Posts a streamed chat request through `observer` and reads the whole
/// answer (the agent's own read timeout: 20 s, longer than any test).
async fn agent_call(observer: &Running) -> Read {
    let client = reqwest::Client::builder().read_timeout(Duration::from_secs(20)).build().unwrap();
    let started = Instant::now();
    let mut response =
        client.post(format!("{}/v1/chat/completions", observer.base)).body(STREAMED).send().await.unwrap();
    let status = response.status().as_u16();
    let guarded = response.headers().get("x-stallscope-guard").is_some_and(|v| v == "on");
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        bytes.extend_from_slice(&chunk);
    }
    Read { status, guarded, text: String::from_utf8(bytes).unwrap(), took: started.elapsed() }
}

/// The content of a chat stream's deltas, joined.
fn content(text: &str) -> String {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}

/// Each failure story the core retries before content: the agent reads one
/// complete stream with its role chunk once, marked guarded; the call is
/// recorded as recovered on the attempt that answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_content_the_guard_retries_and_the_agent_reads_one_whole_answer() {
    let healthy = Running::start_with(ObserveSource::Scenario("healthy".into()), None, &[GUARD]).await;
    let expected = agent_call(&healthy).await;
    healthy.stop().await;
    assert_eq!((expected.status, expected.guarded), (200, true));
    let whole = content(&expected.text);
    assert!(!whole.is_empty());
    let fast = ["PROVIDER_STREAM_BACKOFF_S=0.01", "PROVIDER_STREAM_BACKOFF_MAX_S=0.05"];
    for (scenario, clock, attempts, kind) in [
        ("silent-stall", "SSE_IDLE_TIMEOUT_S=0.3", 2, VerdictKind::SilentStall),
        ("rate-limited-ms", "SSE_IDLE_TIMEOUT_S=5", 3, VerdictKind::RateLimited),
    ] {
        let sets = [GUARD, clock, fast[0], fast[1]];
        let observer = Running::start_with(ObserveSource::Scenario(scenario.into()), None, &sets).await;
        let read = agent_call(&observer).await;
        assert_eq!((read.status, read.guarded), (200, true), "{scenario}: {}", read.text);
        assert_eq!(content(&read.text), whole, "{scenario}: the whole answer, once");
        assert_eq!(read.text.matches(r#""role":"assistant""#).count(), 1, "{scenario}: one start: {}", read.text);
        assert!(read.text.ends_with("data: [DONE]\n\n"), "{scenario}");
        assert!(read.took < Duration::from_secs(5), "{scenario}: {:?}", read.took);
        let calls = observer.ended(1).await;
        let (report, verdict) = (&calls[0].report, &calls[0].verdict);
        assert_eq!((report.outcome, report.attempts), (Outcome::Ok, attempts), "{scenario}: {}", verdict.summary);
        assert_eq!((verdict.kind, verdict.severity), (kind, Severity::Recovered), "{scenario}: {}", verdict.summary);
        assert_eq!(calls[0].delivered, Some(Delivered::Whole));
        observer.stop().await;
    }
}

/// Reasoning that reached the agent is content to the guard (issue 26:
/// "no text, reasoning or tool-call delta"): a stall after it is not
/// retried, for the agent's SDK would hold the first attempt's reasoning
/// block and the retry's beside it, and ends in the dialect's terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_after_reasoning_is_not_retried() {
    let sets = [GUARD, "SSE_DATA_STALL_TIMEOUT_S=0.3"];
    let observer = Running::start_with(ObserveSource::Scenario("ping-flood-stall".into()), None, &sets).await;
    let read = agent_call(&observer).await;
    assert_eq!((read.status, read.guarded), (200, true));
    assert!(read.text.contains("reasoning"), "the reasoning went on: {}", read.text);
    assert!(read.text.contains(r#""type":"server_error""#), "ended with chat's error: {}", read.text);
    let calls = observer.ended(1).await;
    let (report, verdict) = (&calls[0].report, &calls[0].verdict);
    assert_eq!((report.outcome, report.attempts), (Outcome::Failed, 1), "{}", verdict.summary);
    assert_eq!(verdict.kind, VerdictKind::KeepaliveOnlyStall, "{}", verdict.summary);
    observer.stop().await;
}

/// An upstream that streams three deltas, then goes silent for good.
fn stalls_after_content(_: &hyper::Request<hyper::body::Incoming>) -> Answer {
    let delta = |text: &str| {
        Bytes::from(format!(
            "data: {{\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x\",\
             \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
        ))
    };
    let role = Bytes::from_static(
        b"data: {\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x\",\
          \"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
    );
    let ms = Duration::from_millis;
    Answer {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned())],
        chunks: vec![
            (ms(0), role),
            (ms(20), delta("Hello")),
            (ms(20), delta(", wor")),
            (ms(20), delta("ld")),
            (Duration::from_secs(3600), delta("never")),
        ],
    }
}

/// After content the guard never retries: a stall its idle clock catches
/// ends the agent's stream in chat's own terms, as GUARD_AFTER_CONTENT
/// says: an in-stream error (the default) or a length finish with the
/// partial answer. Either way the agent has its text once, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_content_a_stall_ends_the_stream_in_the_dialect_s_terms() {
    let upstream = serve(stalls_after_content).await;
    for (how, outcome, delivered) in
        [("error", Outcome::Failed, Delivered::ErrorEnding), ("finish", Outcome::Partial, Delivered::LengthFinish)]
    {
        let after = format!("GUARD_AFTER_CONTENT={how}");
        let sets = [GUARD, "SSE_IDLE_TIMEOUT_S=0.3", after.as_str()];
        let observer = Running::start_with(ObserveSource::Upstream(format!("http://{upstream}")), None, &sets).await;
        let read = agent_call(&observer).await;
        assert_eq!((read.status, read.guarded), (200, true));
        assert_eq!(content(&read.text), "Hello, world", "{how}: {}", read.text);
        assert!(read.took < Duration::from_secs(3), "{how}: {:?}", read.took);
        let last: serde_json::Value = read
            .text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .filter_map(|d| serde_json::from_str(d).ok())
            .next_back()
            .unwrap();
        match how {
            "error" => assert_eq!(last["error"]["type"], "server_error", "{}", read.text),
            _ => {
                assert_eq!(last["choices"][0]["finish_reason"], "length", "{}", read.text);
                assert!(read.text.ends_with("data: [DONE]\n\n"));
            }
        }
        let calls = observer.ended(1).await;
        assert_eq!((calls[0].report.outcome, calls[0].report.attempts), (outcome, 1), "{}", calls[0].verdict.summary);
        assert_eq!(calls[0].delivered, Some(delivered));
        observer.stop().await;
    }
}

/// An upstream that asks for a wait far above the cap.
fn asks_for_an_hour(_: &hyper::Request<hyper::body::Incoming>) -> Answer {
    Answer {
        status: 429,
        headers: vec![("content-type", "application/json".to_owned()), ("retry-after", "3600".to_owned())],
        chunks: vec![(Duration::ZERO, Bytes::from_static(br#"{"error":{"message":"slow down","type":"rate_limit"}}"#))],
    }
}

/// A wait above RETRY_AFTER_MAX_S goes back to the agent as the provider
/// sent it: its status, its retry-after, its body, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_above_the_cap_goes_back_to_the_agent_as_sent() {
    let upstream = serve(asks_for_an_hour).await;
    let observer = Running::start_with(ObserveSource::Upstream(format!("http://{upstream}")), None, &[GUARD]).await;
    let client = reqwest::Client::new();
    let response = client.post(format!("{}/v1/chat/completions", observer.base)).body(STREAMED).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers().get("retry-after").unwrap(), "3600");
    assert_eq!(response.headers().get("x-stallscope-guard").unwrap(), "on");
    assert_eq!(response.text().await.unwrap(), r#"{"error":{"message":"slow down","type":"rate_limit"}}"#);
    // A request the guard only passes on says it is there too.
    let listed = client.get(format!("{}/v1/models", observer.base)).send().await.unwrap();
    assert_eq!(listed.headers().get("x-stallscope-guard").unwrap(), "on");
    let calls = observer.ended(2).await;
    let verdict = &calls[0].verdict;
    assert_eq!((calls[0].report.attempts, verdict.kind), (1, VerdictKind::RateLimited), "{}", verdict.summary);
    assert!(verdict.summary.contains("refused"), "{}", verdict.summary);
    assert_eq!(calls[0].delivered, Some(Delivered::ProviderAnswer(429)));
    observer.stop().await;
}

/// A guarded run is recorded like any run: replayed with its own
/// tunables, every stream comes out as it went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_run_replays_as_it_ran() {
    let dir = temp_dir(&format!("guard-replay-{}", free_port()));
    let db = dir.join("guard.db");
    let sets = [GUARD, "SSE_IDLE_TIMEOUT_S=0.3", "PROVIDER_STREAM_BACKOFF_S=0.01"];
    let observer = Running::start_with(ObserveSource::Scenario("silent-stall".into()), Some(&db), &sets).await;
    assert_eq!(agent_call(&observer).await.status, 200);
    observer.ended(1).await;
    observer.stop().await;
    let store = Store::open(&db).unwrap();
    let run = store.list_runs().unwrap()[0].id;
    let recording = Recording::load(&store, run).unwrap();
    let fidelity = fidelity(&recording).unwrap();
    assert!(fidelity.is_exact(), "{fidelity:?}");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A backup provider that answers only its own key, for the model the
/// failover hop names.
fn backup(request: &hyper::Request<hyper::body::Incoming>) -> Answer {
    let authorized = request.headers().get("authorization").is_some_and(|v| v == "Bearer backup-key-7731");
    let agent_key = request.headers().values().any(|v| v.as_bytes().windows(9).any(|w| w == b"agent-key"));
    if !authorized || agent_key {
        return Answer {
            status: 401,
            headers: vec![("content-type", "application/json".to_owned())],
            chunks: vec![(
                Duration::ZERO,
                Bytes::from_static(br#"{"error":{"message":"wrong key","type":"invalid_request_error"}}"#),
            )],
        };
    }
    let chunk = |text: &str| {
        Bytes::from(format!(
            "data: {{\"id\":\"b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-backup\",\
             \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
        ))
    };
    Answer {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned())],
        chunks: vec![
            (Duration::ZERO, chunk("from the backup")),
            (Duration::from_millis(10), Bytes::from_static(b"data: [DONE]\n\n")),
        ],
    }
}

/// A provider the agent's own one cannot reach: the call fails over, as
/// FALLBACK_MODELS says, to a configured provider, which gets the agent's
/// body with its model and its own key (from its variable), never the
/// agent's; the agent reads the backup's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_goes_to_a_configured_provider_with_its_own_key() {
    let backup = serve(backup).await;
    let dir = temp_dir(&format!("guard-failover-{}", free_port()));
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[provider]]\nname = \"backup\"\nkind = \"openai-chat\"\nbase_url = \"http://{backup}/v1\"\n\
             model = \"gpt-backup\"\napi_key_env = \"BACKUP_KEY\"\n"
        ),
    )
    .unwrap();
    let plan = ObservePlan {
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_remote: false,
        source: ObserveSource::Upstream(format!("http://127.0.0.1:{}", free_port())),
        config: Some(config),
        overrides: ["FALLBACK_MODELS=backup/gpt-backup", "RETRY_BUDGET_CONNECTION=0"].map(str::to_owned).to_vec(),
        edits: Vec::new(),
        recording: None,
        guard: true,
        service: Service::default(),
    };
    let env = [("BACKUP_KEY".to_owned(), "backup-key-7731".to_owned())];
    let observer = Observer::bind(&plan, &env).await.unwrap();
    let base = format!("http://{}", observer.addr());
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&calls);
    let run = tokio::spawn(async move {
        observer.run(&token, None, move |call| seen.lock().unwrap().push(call.report.clone())).await.unwrap()
    });
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .header("authorization", "Bearer agent-key-9")
        .body(STREAMED)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(content(&response.text().await.unwrap()), "from the backup");
    for _ in 0..100 {
        if !calls.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = calls.lock().unwrap()[0].clone();
    assert_eq!(report.outcome, Outcome::Ok);
    let hops: Vec<String> = report.hops.iter().map(|h| format!("{} -> {}", h.from, h.to)).collect();
    assert_eq!(hops, ["upstream/gpt-x -> backup/gpt-backup"]);
    cancel.cancel();
    run.await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
