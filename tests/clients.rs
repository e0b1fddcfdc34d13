//! Real agents' clients through `stallscope observe` in front of the
//! simulator: the official `openai` and `anthropic` Python SDKs and the
//! `openai` npm package, each streaming. Each reads through observe the
//! text it reads directly; an SDK read timeout shorter than a silent stall
//! is recorded where the SDK gave up; the key an SDK sends is nowhere in
//! the database.
//!
//! The clients come from `.ci/run`: a virtualenv holding both SDKs
//! (`$STALLSCOPE_CLIENTS_PYTHON`, else `~/.cache/stallscope-clients`) and
//! the npm package under `.tools/openai-node`. Where they are absent the
//! tests say so and pass (`STALLSCOPE_REQUIRE_EXTERNAL=1` fails instead).

mod observer;
mod programs;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use observer::Running;
use programs::{files_text, free_port, openai_node, python, temp_dir};
use stallscope::core::event::Outcome;
use stallscope::diagnosis::VerdictKind;
use stallscope::observe::ObserveSource;
use stallscope::sim::{SimServer, builtin};

/// A key only the client sends.
const KEY: &str = "sk-client-RECOGNISABLE-8813";

/// Streams a chat completion with openai-python: prints the text, or
/// `ERROR <exception type>`.
const OPENAI_PY: &str = r#"
import sys, openai
client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0, timeout=float(sys.argv[3]))
try:
    stream = client.chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": "hi"}], stream=True)
    print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
except Exception as e:
    print("ERROR " + type(e).__name__)
"#;

/// Streams a message with the anthropic SDK: prints the text, or `ERROR …`.
const ANTHROPIC_PY: &str = r#"
import sys, anthropic
client = anthropic.Anthropic(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0, timeout=float(sys.argv[3]))
try:
    with client.messages.stream(
            model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as stream:
        print("".join(stream.text_stream))
except Exception as e:
    print("ERROR " + type(e).__name__)
"#;

/// Streams a chat completion with the openai npm package.
const OPENAI_JS: &str = r#"
const OpenAI = require(process.argv[1]);
const client = new (OpenAI.default || OpenAI)({ baseURL: process.argv[2], apiKey: process.argv[3], maxRetries: 0 });
(async () => {
  const stream = await client.chat.completions.create(
    { model: 'gpt-x', messages: [{ role: 'user', content: 'hi' }], stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  console.log(text);
})().catch((e) => console.log('ERROR ' + e.constructor.name));
"#;

/// Runs a client program off the runtime's workers; its stdout, trimmed.
async fn client(program: PathBuf, args: Vec<String>) -> String {
    let output = tokio::task::spawn_blocking(move || Command::new(program).args(args).output().unwrap()).await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

async fn python_sdk(script: &str, base: String, timeout_s: f64) -> Option<String> {
    let python = python()?;
    Some(client(python, vec!["-c".into(), script.into(), base, KEY.into(), timeout_s.to_string()]).await)
}

/// Each client reads through observe the text it reads directly from the
/// simulator; each call is a healthy stream of the run, and the key the
/// clients sent is nowhere in its database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_reads_through_observe_what_it_reads_directly() {
    let (Some(_), Some(module)) = (python(), openai_node()) else { return };
    let dir = temp_dir(&format!("clients-{}", free_port()));
    let db = dir.join("observe.db");
    let observed = Running::start(ObserveSource::Scenario("healthy".into()), Some(&db)).await;
    let direct = SimServer::start(builtin("healthy").unwrap(), 0).await.unwrap();
    let (through, root) = (observed.base.clone(), direct.base_url());
    let openai = |base: &str| python_sdk(OPENAI_PY, format!("{base}/v1"), 10.0);
    let anthropic = |base: &str| python_sdk(ANTHROPIC_PY, base.to_owned(), 10.0);
    let node = |base: &str| {
        let args = vec!["-e".into(), OPENAI_JS.into(), module.display().to_string(), format!("{base}/v1"), KEY.into()];
        client(PathBuf::from("node"), args)
    };
    let tokens = "tok ".repeat(20);
    for (sdk, via, plain) in [
        ("openai-python", openai(&through).await, openai(&root).await),
        ("anthropic", anthropic(&through).await, anthropic(&root).await),
        ("openai-node", Some(node(&through).await), Some(node(&root).await)),
    ] {
        let (via, plain) = (via.unwrap(), plain.unwrap());
        assert_eq!(via, plain, "{sdk}: through observe as directly");
        assert_eq!(via.trim(), tokens.trim(), "{sdk}");
    }
    let calls = observed.ended(3).await;
    for call in &calls {
        assert_eq!(call.verdict.kind, VerdictKind::Healthy, "{}: {}", call.report.target, call.verdict.summary);
    }
    let targets: Vec<String> = calls.iter().map(|c| c.report.target.to_string()).collect();
    assert!(targets.contains(&"sim.messages/claude-x".to_owned()), "{targets:?}");
    observed.stop().await;
    assert!(!files_text(&dir).contains("RECOGNISABLE"), "a client's key was recorded");
    direct.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// openai-python with a 1 s timeout in front of a silent stall raises its
/// own timeout error, and observe records the call cancelled where the
/// SDK gave up, with where our idle timer (0.5 s in force) would have
/// fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_timeout_is_recorded_where_the_sdk_gave_up() {
    if python().is_none() {
        return;
    }
    let sets = ["SSE_IDLE_TIMEOUT_S=0.5"];
    let observed = Running::start_with(ObserveSource::Scenario("silent-stall".into()), None, &sets).await;
    let said = python_sdk(OPENAI_PY, format!("{}/v1", observed.base), 1.0).await.unwrap();
    assert_eq!(said, "ERROR APITimeoutError");
    let calls = observed.ended(1).await;
    let (report, verdict) = (&calls[0].report, &calls[0].verdict);
    assert_eq!((report.outcome, verdict.kind), (Outcome::Cancelled, VerdictKind::Cancelled), "{}", verdict.summary);
    assert!(report.elapsed >= Duration::from_millis(900) && report.elapsed < Duration::from_secs(3), "{report:?}");
    let would = calls[0].would_fire.as_ref().map(|w| w.words()).unwrap_or_default();
    assert!(would.starts_with("our idle timer (0.5 s) would have fired at 0.5 s"), "{would}");
    observed.stop().await;
}

/// openai-python's own retries of a 429 with `retry-after-ms` (its
/// max_retries=2, against two 429s and then an answer) are the attempts of
/// one observed call, the SDK's waits its backoff: rate limited,
/// recovered on attempt 3, each wait as asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_s_own_retries_are_attempts_of_one_call() {
    let Some(python) = python() else { return };
    let observed = Running::start(ObserveSource::Scenario("rate-limited-ms".into()), None).await;
    let retrying = OPENAI_PY.replace("max_retries=0", "max_retries=2");
    let base = format!("{}/v1", observed.base);
    let said = client(python, vec!["-c".into(), retrying, base, KEY.into(), "10".into()]).await;
    assert_eq!(said.trim(), "tok ".repeat(20).trim());
    let calls = observed.ended(3).await;
    let last = calls.last().unwrap();
    assert!(calls.iter().all(|c| c.report.stream == last.report.stream), "one call");
    assert_eq!((last.report.outcome, last.report.attempts), (Outcome::Ok, 3));
    for wait in &last.report.backoff_sleeps {
        assert!(*wait >= Duration::from_millis(650) && *wait < Duration::from_secs(3), "the SDK's wait: {wait:?}");
    }
    let verdict = &last.verdict;
    let evidence: Vec<String> = verdict.evidence.iter().map(|e| format!("{:?} {}", e.at_ms, e.text)).collect();
    assert_eq!(verdict.kind, VerdictKind::RateLimited, "{}\n{}", verdict.summary, evidence.join("\n"));
    assert!(verdict.summary.contains("asked to wait 0.70 s (retry-after-ms), honoured"), "{}", verdict.summary);
    assert!(verdict.summary.ends_with("recovered on attempt 3"), "{}", verdict.summary);
    observed.stop().await;
}
