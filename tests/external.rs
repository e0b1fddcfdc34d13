//! Our parsers, transport and verdicts against software we did not write:
//! the independent mock provider `@copilotkit/aimock` (all three
//! dialects) and a real forward proxy, `tinyproxy`, plain and with a
//! CONNECT tunnel. The intermediaries that cut, time out or buffer a
//! stream are in `hops.rs`.
//!
//! These run whenever the programs are present. Where one is absent they say
//! so and pass, so a fresh checkout's `cargo test` works; `.ci/run` installs
//! both and sets `STALLSCOPE_REQUIRE_EXTERNAL=1`, which turns a missing
//! program into a failure.

mod programs;

use programs::{Running, STARTING, external, free_port, listening, on_path, temp_dir};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use stallscope::config::{ConfigFile, Layers, Settings};
use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{EventClass, EventKind, Outcome, VecSink};
use stallscope::core::executor::{Call, CallReport, Origin};
use stallscope::core::failover::Target;
use stallscope::core::transport::ClientCache;
use stallscope::core::upstream::CallInput;
use stallscope::providers::Dialect;
use stallscope::providers::setup::ProviderConfig;
use stallscope::run::{executor, rig};
use stallscope::sim::{SimServer, TlsIdentity, builtin};
use tokio_util::sync::CancellationToken;

fn aimock() -> Option<PathBuf> {
    let cli = std::env::var_os("STALLSCOPE_AIMOCK_CLI").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/aimock/node_modules/@copilotkit/aimock/dist/cli.js")
    });
    external("@copilotkit/aimock (with node)", on_path("node").and(Some(cli)).filter(|p| p.is_file()))
}

fn tinyproxy() -> Option<PathBuf> {
    external("tinyproxy", on_path("tinyproxy"))
}

fn row(name: &str, dialect: Dialect, root: &str, proxy: Option<String>) -> ProviderConfig {
    ProviderConfig { proxy, ..ProviderConfig::at_root(name, dialect, root, "m") }
}

/// How long the content events of a call took to arrive, first to last.
fn content_spread(sink: &VecSink) -> Duration {
    let content_at: Vec<Duration> = sink
        .events()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::SseReceived { class: EventClass::Content, .. }))
        .map(|e| e.at)
        .collect();
    *content_at.last().unwrap() - content_at[0]
}

async fn call(rows: &[ProviderConfig], target: Target, prompt: &str, sets: &[&str]) -> (CallReport, Arc<VecSink>) {
    let overrides: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
    let layers = Layers { config: ConfigFile::None, scenario: None, overrides: &overrides, edits: &[] };
    let settings = Settings::load(layers, Vec::<(String, String)>::new()).unwrap();
    let sink = Arc::new(VecSink::new());
    let executor = executor(&settings, rows, &ClientCache::new(), sink.clone(), Origin::now(0), |_| None).unwrap();
    let call = Call {
        stream: 1,
        target,
        input: CallInput { prompt: prompt.into(), context_tokens: Some(2), ..CallInput::default() },
        not_before: None,
    };
    (executor.run(&call, &CancellationToken::new()).await, sink)
}

const FIXTURES: &str = r#"{
  "fixtures": [
    { "match": { "userMessage": "hello" }, "response": { "content": "Hello from aimock, streamed in pieces." }, "chunkSize": 5 },
    { "match": { "userMessage": "slow" }, "response": { "content": "Slow to start." }, "streamingProfile": { "ttft": 1500, "tps": 50 } },
    { "match": { "userMessage": "truncate" }, "response": { "content": "This answer will be cut off before it ends." },
      "chunkSize": 5, "truncateAfterChunks": 8, "streamingProfile": { "ttft": 0, "tps": 200 } },
    { "match": { "userMessage": "limit" }, "response": { "error": { "message": "Rate limit exceeded.", "type": "rate_limit_error", "code": "rate_limit_exceeded" }, "status": 429 } }
  ]
}"#;

fn start_aimock(cli: &Path) -> (Running, String) {
    use std::io::BufRead;
    let dir = temp_dir("aimock");
    std::fs::write(dir.join("fixtures.json"), FIXTURES).unwrap();
    let _starting = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    // Port 0: aimock picks a free port and prints where it listens.
    let mut child = Command::new("node")
        .arg(cli)
        .args(["-p", "0", "-h", "127.0.0.1", "-f"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next().expect("aimock exited before listening").unwrap();
        if let Some((_, url)) = line.split_once("listening on ") {
            break url.trim().to_owned();
        }
    };
    // Keep draining so aimock never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (Running(child), url)
}

#[tokio::test]
async fn the_three_dialects_against_aimock() {
    let Some(cli) = aimock() else { return };
    let (_aimock, root) = start_aimock(&cli);
    let quick = ["FALLBACK_MODELS=off", "PROVIDER_STREAM_BACKOFF_S=0.05"];
    for dialect in Dialect::ALL {
        let rows = [row("aimock", dialect, &root, None)];
        let target = || Target::new("aimock", "m");

        // A healthy stream, its content split over many events.
        let (r, sink) = call(&rows, target(), "hello", &quick).await;
        assert_eq!((r.outcome, r.attempts), (Outcome::Ok, 1), "{dialect}: {:?}", sink.kinds());
        assert_eq!(r.content, "Hello from aimock, streamed in pieces.", "{dialect}");
        let contents = sink
            .kinds()
            .iter()
            .filter(|k| matches!(k, EventKind::SseReceived { class: EventClass::Content, .. }))
            .count();
        assert!(contents >= 7, "{dialect}: {contents} content events");
        assert!(r.stop_reason.is_some(), "{dialect}");

        // A slow first token trips a short TTFB guard.
        let sets = ["FALLBACK_MODELS=off", "SSE_TTFB_TIMEOUT_S=0.3", "RETRY_BUDGET_TIMEOUT=0"];
        let (r, _) = call(&rows, target(), "slow", &sets).await;
        let error = r.error.unwrap();
        assert_eq!(
            (r.outcome, error.category, error.timer),
            (Outcome::Failed, Category::Timeout, Some(TimerKind::Ttfb)),
            "{dialect}"
        );

        // A stream cut off after a few chunks: partial recovery keeps them.
        let (r, _) = call(&rows, target(), "truncate", &quick).await;
        assert_eq!(r.outcome, Outcome::Partial, "{dialect}: {:?}", r.error);
        assert!(
            !r.content.is_empty() && "This answer will be cut off before it ends.".starts_with(&r.content),
            "{dialect}: {:?}",
            r.content
        );
        assert_eq!(r.stop_reason.as_deref(), Some("length"));

        // 429 with Retry-After and exhausted buckets; a cap below the
        // server's wait reports it instead of sleeping.
        let sets = ["FALLBACK_MODELS=off", "RETRY_AFTER_MAX_S=0.5"];
        let (r, sink) = call(&rows, target(), "limit", &sets).await;
        let error = r.error.unwrap();
        assert_eq!(
            (r.outcome, error.category, error.status),
            (Outcome::Failed, Category::RateLimit, Some(429)),
            "{dialect}"
        );
        assert_eq!(r.refused_wait, Some(Duration::from_secs(1)), "{dialect}");
        assert!(
            sink.kinds().iter().any(|k| matches!(k, EventKind::RateLimitObserved { requests_remaining: Some(0), .. }))
        );
    }
}

fn start_tinyproxy(program: &Path) -> (Running, u16) {
    let dir = temp_dir("tinyproxy");
    let _starting = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    let port = free_port();
    let config = dir.join("tinyproxy.conf");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 200\nAllow 127.0.0.1\nDisableViaHeader Yes\nLogLevel Critical\nPidFile \"{}\"\n",
            dir.join("tinyproxy.pid").display()
        ),
    )
    .unwrap();
    (listening(Command::new(program).arg("-d").arg("-c").arg(&config), port), port)
}

/// The healthy scenario through a real forward proxy: the stream arrives
/// token by token (not buffered), and stopping the proxy breaks the route,
/// which shows the proxy really carried it.
#[tokio::test]
async fn streams_arrive_unbuffered_through_a_forward_proxy() {
    let Some(program) = tinyproxy() else { return };
    let (proxy, port) = start_tinyproxy(&program);
    let rig = rig(builtin("healthy").unwrap(), Dialect::OpenAiChat).await.unwrap();
    let root = rig.server.base_url();
    let rows = [row("proxied", Dialect::OpenAiChat, &root, Some(format!("http://127.0.0.1:{port}")))];
    let (r, sink) = call(&rows, Target::new("proxied", "m"), "hi", &["FALLBACK_MODELS=off"]).await;
    assert_eq!((r.outcome, r.content.as_str()), (Outcome::Ok, "tok ".repeat(20).as_str()), "{:?}", r.error);
    // Twenty tokens 25 ms apart: unbuffered, they arrive spread over ~475 ms;
    // a buffering proxy would hand them over within a millisecond.
    let spread = content_spread(&sink);
    assert!(spread >= Duration::from_millis(150), "tokens arrived within {spread:?}: the proxy buffered them");

    drop(proxy);
    let sets = ["FALLBACK_MODELS=off", "RETRY_BUDGET_CONNECTION=0"];
    let (r, _) = call(&rows, Target::new("proxied", "m"), "hi", &sets).await;
    assert_eq!((r.outcome, r.error.unwrap().category), (Outcome::Failed, Category::Connection));
    rig.server.shutdown().await;
}

fn tls_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls").join(name)
}

/// The same stream over HTTPS through the proxy's CONNECT tunnel, trusting
/// the test CA through the provider's `ca_file`; without it the handshake
/// is refused.
#[tokio::test]
async fn https_streams_arrive_unbuffered_through_a_connect_tunnel() {
    let Some(program) = tinyproxy() else { return };
    let (_proxy, port) = start_tinyproxy(&program);
    let identity = TlsIdentity {
        cert_chain_pem: std::fs::read(tls_fixture("server.pem")).unwrap(),
        key_pem: std::fs::read(tls_fixture("server.key")).unwrap(),
    };
    let server = SimServer::start_tls(builtin("healthy").unwrap(), 0, &identity).await.unwrap();
    let root = server.base_url();
    assert!(root.starts_with("https://127.0.0.1:"), "{root}");
    let proxy = Some(format!("http://127.0.0.1:{port}"));
    for dialect in Dialect::ALL {
        let trusting =
            ProviderConfig { ca_file: Some(tls_fixture("ca.pem")), ..row("tls", dialect, &root, proxy.clone()) };
        let rows = [trusting];
        let (r, sink) = call(&rows, Target::new("tls", "m"), "hi", &["FALLBACK_MODELS=off"]).await;
        assert_eq!(
            (r.outcome, r.content.as_str()),
            (Outcome::Ok, "tok ".repeat(20).as_str()),
            "{dialect}: {:?}",
            r.error
        );
        let spread = content_spread(&sink);
        assert!(spread >= Duration::from_millis(150), "{dialect}: tokens arrived within {spread:?}");
    }
    let untrusted = [row("tls", Dialect::OpenAiChat, &root, proxy)];
    let sets = ["FALLBACK_MODELS=off", "RETRY_BUDGET_CONNECTION=0"];
    let (r, _) = call(&untrusted, Target::new("tls", "m"), "hi", &sets).await;
    let error = r.error.unwrap();
    assert_eq!((r.outcome, error.category), (Outcome::Failed, Category::Connection));
    assert!(error.message.to_ascii_lowercase().contains("certificate"), "{}", error.message);
    server.shutdown().await;
}
