//! `stallscope observe --guard` in front of the simulator and small
//! upstreams of the test's own, on loopback, driven by a plain HTTP client
//! as an agent: before content, a stall, a keep-alive-only stall or a 429
//! is retried by the core, and the agent gets one well-formed response,
//! its start events once; after content a stall ends the agent's stream in
//! its dialect's own terms (`GUARD_AFTER_CONTENT`); a wait above the cap
//! goes back to the agent as the provider sent it; every guarded response
//! says so in `x-stallscope-guard: on`; the guarded run replays as it ran.
//! A stall between a block's start and its first text gives the agent, in
//! each dialect, each start event once (checked on its raw bytes), a
//! Responses retry's new ids the agent's first ones; a failover takes
//! none of the agent's credentials to the other provider; an upstream
//! that gzips unasked reaches the agent decoded.

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

/// The headers [`backup`] was sent, each request's.
static BACKUP_SAW: Mutex<Vec<Vec<(String, String)>>> = Mutex::new(Vec::new());

/// A backup provider that answers only its own key, for the model the
/// failover hop names; it keeps the headers it was sent.
fn backup(request: &hyper::Request<hyper::body::Incoming>) -> Answer {
    let headers = request.headers().iter().map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_owned()));
    BACKUP_SAW.lock().unwrap().push(headers.collect());
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

/// The agent's credentials of every kind, sent with its call: none may
/// reach another provider.
const AGENT_CREDENTIALS: [(&str, &str); 5] = [
    ("authorization", "Bearer agent-key-9"),
    ("x-api-key", "agent-key-9"),
    ("cookie", "session=agent-cookie-4"),
    ("helicone-auth", "Bearer sk-helicone-agent-5"),
    ("openai-organization", "org-agent-6"),
];

/// A provider the agent's own one cannot reach: the call fails over, as
/// FALLBACK_MODELS says, to a configured provider, which gets the agent's
/// body with its model and its own key (from its variable), and of the
/// agent's headers only what a request needs: none of its keys, cookies,
/// gateway keys or organisation; the agent reads the backup's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_goes_to_a_configured_provider_with_its_own_key_and_none_of_the_agent_s_credentials() {
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
    let mut request =
        client.post(format!("{base}/v1/chat/completions")).header("content-type", "application/json").body(STREAMED);
    for (name, value) in AGENT_CREDENTIALS {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(content(&response.text().await.unwrap()), "from the backup");
    let saw = BACKUP_SAW.lock().unwrap().clone();
    assert_eq!(saw.len(), 1, "{saw:?}");
    for (name, value) in AGENT_CREDENTIALS {
        assert!(!saw[0].iter().any(|(_, v)| v.contains(value)), "{name} reached the backup: {saw:?}");
    }
    let names: Vec<&str> = saw[0].iter().map(|(n, _)| n.as_str()).collect();
    assert!(!names.contains(&"cookie") && !names.contains(&"x-api-key"), "{names:?}");
    assert!(saw[0].contains(&("authorization".to_owned(), "Bearer backup-key-7731".to_owned())), "{saw:?}");
    assert!(saw[0].contains(&("content-type".to_owned(), "application/json".to_owned())), "{saw:?}");
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

/// One event of a stream as the agent read it: its name and its data,
/// parsed where it is JSON.
struct Sse {
    name: String,
    data: serde_json::Value,
}

/// The events of a stream the agent read, in order.
fn events(text: &str) -> Vec<Sse> {
    text.split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default().to_owned();
            let data: Vec<&str> = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            let data = data.join("\n");
            (!data.is_empty())
                .then(|| Sse { name, data: serde_json::from_str(&data).unwrap_or(serde_json::Value::Null) })
        })
        .collect()
}

/// Says in `wrong` when `keys` (what each start event of one kind
/// starts) has none, or one twice.
fn each_once(wrong: &mut Vec<String>, what: &str, keys: Vec<String>) {
    let mut distinct = keys.clone();
    distinct.sort();
    distinct.dedup();
    if keys.is_empty() || distinct.len() != keys.len() {
        wrong.push(format!("{what}: {keys:?}"));
    }
}

/// What is wrong with a stream the agent read (`text`) from `path`'s
/// dialect, against one well-formed answer of `whole`: each start event
/// once (per block index, output item, content part); Responses' one item
/// id and response id throughout and `sequence_number` strictly
/// increasing; the text once; the stream's end.
fn ill_formed(path: &str, text: &str, whole: &str) -> Vec<String> {
    let events = events(text);
    let mut wrong = Vec::new();
    let named = |name: &str| events.iter().filter(|e| e.name == name).collect::<Vec<_>>();
    let keys = |name: &str, fields: &[&str]| -> Vec<String> {
        named(name)
            .iter()
            .map(|e| fields.iter().map(|f| e.data[*f].to_string()).collect::<Vec<_>>().join("/"))
            .collect()
    };
    let said: String = match path {
        "/v1/messages" => {
            for name in ["message_start", "message_stop"] {
                each_once(&mut wrong, name, keys(name, &[]));
            }
            each_once(&mut wrong, "content_block_start by index", keys("content_block_start", &["index"]));
            named("content_block_delta").iter().filter_map(|e| e.data["delta"]["text"].as_str()).collect()
        }
        "/v1/responses" => {
            for name in ["response.created", "response.in_progress", "response.completed"] {
                each_once(&mut wrong, name, keys(name, &[]));
            }
            let items = keys("response.output_item.added", &["output_index"]);
            each_once(&mut wrong, "output_item.added by output_index", items);
            let parts = keys("response.content_part.added", &["output_index", "content_index"]);
            each_once(&mut wrong, "content_part.added by output and content index", parts);
            let numbers: Vec<u64> = events.iter().filter_map(|e| e.data["sequence_number"].as_u64()).collect();
            if numbers.len() != events.len() || !numbers.windows(2).all(|w| w[0] < w[1]) {
                wrong.push(format!("sequence numbers {numbers:?}"));
            }
            for (what, ids) in [
                (
                    "item ids",
                    events
                        .iter()
                        .flat_map(|e| {
                            [&e.data["item_id"], &e.data["item"]["id"], &e.data["response"]["output"][0]["id"]]
                        })
                        .filter_map(|id| id.as_str())
                        .collect::<Vec<_>>(),
                ),
                ("response ids", events.iter().filter_map(|e| e.data["response"]["id"].as_str()).collect()),
            ] {
                let mut distinct = ids.clone();
                distinct.dedup();
                if distinct.len() != 1 {
                    wrong.push(format!("{what} {ids:?}"));
                }
            }
            named("response.output_text.delta").iter().filter_map(|e| e.data["delta"].as_str()).collect()
        }
        _ => {
            let roles = text.matches(r#""role":"assistant""#).count();
            if roles != 1 {
                wrong.push(format!("the role chunk {roles} times"));
            }
            if !text.ends_with("data: [DONE]\n\n") {
                wrong.push("no [DONE]".into());
            }
            content(text)
        }
    };
    if said != whole {
        wrong.push(format!("text {said:?}"));
    }
    wrong
}

/// A streamed request of each dialect: its path and body.
const DIALECTS: [(&str, &str); 3] = [
    ("/v1/chat/completions", STREAMED),
    ("/v1/responses", r#"{"model":"gpt-x","stream":true,"input":"hi"}"#),
    (
        "/v1/messages",
        r#"{"model":"claude-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    ),
];

/// Posts `body` to `path` through `observer`: the status and the raw
/// text the agent read.
async fn raw_call(observer: &Running, path: &str, body: &'static str) -> (u16, String) {
    let client = reqwest::Client::builder().read_timeout(Duration::from_secs(20)).build().unwrap();
    let response = client.post(format!("{}{path}", observer.base)).body(body).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The stall between a block's start and its first text
/// (`stall-after-block-start`), in each dialect: the retry opens its
/// message and block again, and the agent's raw bytes hold each start
/// event once (per block index, output item and content part), one item
/// id, sequence numbers that only go up, and the whole text once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_after_a_block_opened_gives_the_agent_each_start_event_once() {
    let sets = [GUARD, "SSE_IDLE_TIMEOUT_S=0.3", "PROVIDER_STREAM_BACKOFF_S=0.01"];
    for (path, body) in DIALECTS {
        let source = ObserveSource::Scenario("stall-after-block-start".into());
        let observer = Running::start_with(source, None, &sets).await;
        let (status, text) = raw_call(&observer, path, body).await;
        assert_eq!(status, 200, "{path}: {text}");
        let wrong = ill_formed(path, &text, &"tok ".repeat(20));
        assert!(wrong.is_empty(), "{path}: {}\n{text}", wrong.join("; "));
        let calls = observer.ended(1).await;
        let (report, verdict) = (&calls[0].report, &calls[0].verdict);
        assert_eq!((report.outcome, report.attempts), (Outcome::Ok, 2), "{path}: {}", verdict.summary);
        assert_eq!(calls[0].delivered, Some(Delivered::Whole), "{path}");
        observer.stop().await;
    }
}

/// Requests a [`renamed_retry`] upstream has had.
static RENAMED_ATTEMPTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A Responses upstream whose first attempt opens its response and
/// output item (`resp_1`, `msg_1`) and content part, then goes silent;
/// the next names its response and item afresh (`resp_2`, `msg_2`) and
/// numbers its events from 0 again, as a provider's new response does.
fn renamed_retry(_: &hyper::Request<hyper::body::Incoming>) -> Answer {
    let attempt = RENAMED_ATTEMPTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let (response, item) = (format!("resp_{attempt}"), format!("msg_{attempt}"));
    let event = |sequence: usize, kind: &str, fields: String| {
        Bytes::from(format!("event: {kind}\ndata: {{\"type\":\"{kind}\",{fields}\"sequence_number\":{sequence}}}\n\n"))
    };
    let head = format!(r#""response":{{"id":"{response}","object":"response","status":"in_progress","output":[]}},"#);
    let at = format!(r#""item_id":"{item}","output_index":0,"content_index":0,"#);
    let mut events = vec![
        event(0, "response.created", head.clone()),
        event(1, "response.in_progress", head),
        event(
            2,
            "response.output_item.added",
            format!(
                r#""output_index":0,"item":{{"id":"{item}","type":"message","status":"in_progress","role":"assistant","content":[]}},"#
            ),
        ),
        event(
            3,
            "response.content_part.added",
            format!(r#"{at}"part":{{"type":"output_text","text":"","annotations":[]}},"#),
        ),
    ];
    let ms = Duration::from_millis;
    let mut chunks: Vec<(Duration, Bytes)> = events.drain(..).map(|e| (ms(0), e)).collect();
    if attempt == 1 {
        chunks.push((Duration::from_secs(3600), Bytes::from_static(b": never\n\n")));
    } else {
        for (n, text) in ["Hello", ", world"].into_iter().enumerate() {
            chunks.push((ms(10), event(4 + n, "response.output_text.delta", format!(r#"{at}"delta":"{text}","#))));
        }
        let done = format!(
            r#""response":{{"id":"{response}","object":"response","status":"completed","output":[{{"id":"{item}","type":"message","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"Hello, world","annotations":[]}}]}}]}},"#
        );
        chunks.push((ms(10), event(6, "response.completed", done)));
    }
    Answer { status: 200, headers: vec![("content-type", "text/event-stream".to_owned())], chunks }
}

/// A Responses retry under new ids, numbered from 0 again: the agent reads
/// one response under the ids it had first, numbered on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_retry_under_new_ids_reaches_the_agent_under_its_first_ones() {
    let upstream = serve(renamed_retry).await;
    let sets = [GUARD, "SSE_IDLE_TIMEOUT_S=0.3", "PROVIDER_STREAM_BACKOFF_S=0.01"];
    let observer = Running::start_with(ObserveSource::Upstream(format!("http://{upstream}")), None, &sets).await;
    let (status, text) = raw_call(&observer, DIALECTS[1].0, DIALECTS[1].1).await;
    assert_eq!(status, 200, "{text}");
    let wrong = ill_formed(DIALECTS[1].0, &text, "Hello, world");
    assert!(wrong.is_empty(), "{}\n{text}", wrong.join("; "));
    assert!(!text.contains("msg_2") && !text.contains("resp_2"), "{text}");
    let numbers: Vec<u64> = events(&text).iter().filter_map(|e| e.data["sequence_number"].as_u64()).collect();
    assert_eq!(numbers, [0, 1, 2, 3, 4, 5, 6], "numbered on only where it had to be");
    let calls = observer.ended(1).await;
    assert_eq!((calls[0].report.outcome, calls[0].report.attempts), (Outcome::Ok, 2), "{}", calls[0].verdict.summary);
    observer.stop().await;
}

/// `events` compressed as a server that gzips a stream writes them: each
/// flushed as it goes, then the gzip trailer.
fn gzipped(events: &[&str]) -> Vec<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut chunks = Vec::new();
    for event in events {
        encoder.write_all(event.as_bytes()).unwrap();
        encoder.flush().unwrap();
        chunks.push(Bytes::from(std::mem::take(encoder.get_mut())));
    }
    chunks.push(Bytes::from(encoder.finish().unwrap()));
    chunks
}

/// A chat upstream that gzips its stream though the request asked for no
/// compression (a hop that compresses whatever it carries).
fn gzips_a_stream(_: &hyper::Request<hyper::body::Incoming>) -> Answer {
    let delta = |text: &str| {
        format!(
            "data: {{\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x\",\
             \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    let events = [delta("Hello"), delta(", wor"), delta("ld"), "data: [DONE]\n\n".to_owned()];
    let chunks = gzipped(&events.iter().map(String::as_str).collect::<Vec<_>>());
    Answer {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned()), ("content-encoding", "gzip".to_owned())],
        chunks: chunks.into_iter().map(|chunk| (Duration::from_millis(10), chunk)).collect(),
    }
}

/// A 429 whose wait is above the cap, its JSON body gzipped.
fn gzips_a_refusal(_: &hyper::Request<hyper::body::Incoming>) -> Answer {
    let body = gzipped(&[r#"{"error":{"message":"slow down","type":"rate_limit"}}"#]).concat();
    Answer {
        status: 429,
        headers: vec![
            ("content-type", "application/json".to_owned()),
            ("content-encoding", "gzip".to_owned()),
            ("retry-after", "3600".to_owned()),
        ],
        chunks: vec![(Duration::ZERO, Bytes::from(body))],
    }
}

/// A chat stream in an encoding nobody here decodes.
fn zstd_stream(_: &hyper::Request<hyper::body::Incoming>) -> Answer {
    Answer {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned()), ("content-encoding", "zstd".to_owned())],
        chunks: vec![(Duration::ZERO, Bytes::from_static(b"\x28\xb5\x2f\xfd\x00\x58"))],
    }
}

/// An upstream that compresses unasked: the core reads the text and the
/// agent gets it decoded, with no `content-encoding` (what the core
/// classified and what the agent read agree), a stream or a refusal; a
/// stream in an encoding that cannot be decoded fails, named, before
/// anything reached the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_gzips_unasked_reaches_the_agent_decoded() {
    let upstream = serve(gzips_a_stream).await;
    let observer = Running::start_with(ObserveSource::Upstream(format!("http://{upstream}")), None, &[GUARD]).await;
    let client = reqwest::Client::new();
    let response = client.post(format!("{}/v1/chat/completions", observer.base)).body(STREAMED).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-encoding").is_none(), "{:?}", response.headers());
    let text = response.text().await.unwrap();
    assert_eq!(content(&text), "Hello, world", "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let calls = observer.ended(1).await;
    assert_eq!((calls[0].report.outcome, calls[0].report.attempts), (Outcome::Ok, 1), "{}", calls[0].verdict.summary);
    assert_eq!(calls[0].report.content, "Hello, world");
    observer.stop().await;

    let upstream = serve(gzips_a_refusal).await;
    let observer = Running::start_with(ObserveSource::Upstream(format!("http://{upstream}")), None, &[GUARD]).await;
    let response = client.post(format!("{}/v1/chat/completions", observer.base)).body(STREAMED).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("content-encoding").is_none(), "{:?}", response.headers());
    assert_eq!(response.text().await.unwrap(), r#"{"error":{"message":"slow down","type":"rate_limit"}}"#);
    let calls = observer.ended(1).await;
    assert_eq!(calls[0].verdict.kind, VerdictKind::RateLimited, "{}", calls[0].verdict.summary);
    assert_eq!(calls[0].delivered, Some(Delivered::ProviderAnswer(429)));
    observer.stop().await;

    // An encoding that cannot be decoded is a failure that names it.
    let upstream = serve(zstd_stream).await;
    let sets = [GUARD, "PROVIDER_STREAM_BACKOFF_S=0.01", "PROVIDER_STREAM_BACKOFF_MAX_S=0.05"];
    let observer = Running::start_with(ObserveSource::Upstream(format!("http://{upstream}")), None, &sets).await;
    let response = client.post(format!("{}/v1/chat/completions", observer.base)).body(STREAMED).send().await.unwrap();
    let status = response.status();
    let said = response.text().await.unwrap();
    assert_eq!(status, 502, "{said}");
    assert!(said.contains("content-encoding zstd"), "{said}");
    let calls = observer.ended(1).await;
    assert_eq!(calls[0].report.outcome, Outcome::Failed, "{}", calls[0].verdict.summary);
    assert_eq!(calls[0].delivered, Some(Delivered::OwnAnswer(502)));
    observer.stop().await;
}
