//! Observe's proxy held to nginx's standard on the agent side, with raw
//! sockets and plain clients as agents on loopback: Ctrl-C and SIGTERM stop
//! it in every state (an idle keep-alive connection, a request arriving on
//! one as it stops, a request waiting on a silent upstream); half-sent
//! heads are closed by the header timeout, a slow body is answered 408, a
//! large one 413, each recorded; past the connection and in-flight caps an
//! agent gets a 503 with Retry-After in its dialect's error shape; an
//! upgrade gets a 501; HTTP/2 with prior knowledge is served; an agent
//! that gives up before the response head is heard where it gave up.

mod observer;
mod programs;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use observer::{GUARD, Running};
use programs::{Answer, free_port, serve, temp_dir};
use stallscope::core::event::Outcome;
use stallscope::observe::{ObserveSource, Service};
use stallscope::store::Store;

/// A streamed chat request.
const STREAMED: &str = r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A generous bound on what should take a moment: a debug build on a
/// loaded machine.
const BOUND: Duration = Duration::from_secs(10);

/// An upstream that takes connections and never answers.
async fn black_hole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}")
}

/// An upstream that answers a stream's head and then nothing.
fn silent_after_head(_: &hyper::Request<hyper::body::Incoming>) -> Answer {
    Answer {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        chunks: vec![(Duration::from_secs(3600), Bytes::from_static(b"data: {}\n\n"))],
    }
}

/// A raw connection to `base` (`http://HOST:PORT`).
fn connect(base: &str) -> TcpStream {
    let stream = TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(BOUND)).unwrap();
    stream
}

/// What `stream` reads until the server closes it (or the bound passes).
fn read_to_close(stream: &mut TcpStream) -> (String, bool) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&seen).into_owned(), true),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&seen).into_owned(), true);
            }
            Err(_) => return (String::from_utf8_lossy(&seen).into_owned(), false),
        }
    }
}

/// Stopping with an idle keep-alive connection, a request that arrives on
/// one as observe stops, and a non-streamed request waiting on a silent
/// upstream: observe stops at once, the waiting call ends cancelled, the
/// late request is told observe is stopping, and the run is `stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_ends_every_state_at_once_and_the_run_is_stopped() {
    let dir = temp_dir(&format!("limits-stop-{}", free_port()));
    let db = dir.join("observe.db");
    let upstream = black_hole().await;
    let observer = Running::start(ObserveSource::Upstream(upstream), Some(&db)).await;
    let base = observer.base.clone();
    // An idle keep-alive connection, and one that will send a request as
    // observe stops.
    let idle = connect(&base);
    let mut late = connect(&base);
    // A non-streamed request, its upstream silent.
    let waiting = tokio::spawn({
        let url = format!("{base}/v1/models");
        async move { reqwest::Client::new().get(url).send().await.map(|r| r.status().as_u16()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = tokio::spawn(async move { observer.stop().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The request on the open connection, sent as observe stops: answered
    // (503, stopping) or the connection closed under it; never a spin.
    let late_said = tokio::task::spawn_blocking(move || {
        let _ = late.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n");
        read_to_close(&mut late)
    });
    let report = tokio::time::timeout(BOUND, stopping).await.expect("observe stops").unwrap();
    let (said, closed) = tokio::time::timeout(BOUND, late_said).await.unwrap().unwrap();
    assert!(closed, "the connection is closed once observe has stopped: {said}");
    assert!(said.is_empty() || said.starts_with("HTTP/1.1 503"), "{said}");
    let waited = tokio::time::timeout(BOUND, waiting).await.unwrap().unwrap();
    assert!(waited.as_ref().map_or(true, |s| *s == 502), "{waited:?}");
    drop(idle);
    assert!(report.stopped);
    assert_eq!(report.summary.cancelled, 1, "the waiting call ends cancelled: {:?}", report.summary);
    let store = Store::open(&db).unwrap();
    let run = &store.list_runs().unwrap()[0];
    assert_eq!(run.status.name(), "stopped");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM (a service manager's stop) ends `stallscope observe` as Ctrl-C
/// does, with a request waiting on a silent upstream: the process exits
/// with its summary line, the run recorded as stopped.
#[test]
fn sigterm_stops_the_process_and_records_the_run_stopped() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(black_hole());
    let dir = temp_dir(&format!("limits-term-{}", free_port()));
    let db = dir.join("observe.db");
    let port = free_port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(["observe", "--listen", &format!("127.0.0.1:{port}"), "--upstream", &upstream, "--db"])
        .arg(&db)
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = programs::Running(child);
    programs::wait_for_port(port, &mut child.0, BOUND);
    let mut waiting = connect(&format!("http://127.0.0.1:{port}"));
    waiting.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.0.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = Instant::now() + BOUND;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "observe still runs {BOUND:?} after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let mut stdout = String::new();
    child.0.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    assert!(stdout.contains("recorded as run"), "{stdout}");
    let store = Store::open(&db).unwrap();
    assert_eq!(store.list_runs().unwrap()[0].status.name(), "stopped");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Connections that sent half a request head, or nothing, are closed by
/// the header timeout and counted; a slow body is answered 408 and a body
/// over the limit 413, each recorded as a call that names its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_heads_are_closed_and_slow_or_large_bodies_are_refused_and_recorded() {
    let upstream = format!("http://{}", serve(silent_after_head).await);
    let sets = ["PROXY_HEADER_TIMEOUT_S=0.5", "PROXY_BODY_TIMEOUT_S=0.5", "PROXY_MAX_REQUEST_MB=1"];
    let observer = Running::start_with(ObserveSource::Upstream(upstream), None, &sets).await;
    let base = observer.base.clone();
    let closed = tokio::task::spawn_blocking(move || {
        let mut half: Vec<TcpStream> = (0..20).map(|_| connect(&base)).collect();
        for (i, stream) in half.iter_mut().enumerate() {
            // Half of them half a head, the rest nothing at all.
            if i % 2 == 0 {
                stream.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n").unwrap();
            }
        }
        half.iter_mut().map(|s| read_to_close(s).1).filter(|closed| *closed).count()
    });
    assert_eq!(
        tokio::time::timeout(BOUND * 2, closed).await.unwrap().unwrap(),
        20,
        "every half-open connection closed"
    );

    let base = observer.base.clone();
    let slow = tokio::task::spawn_blocking(move || {
        let mut stream = connect(&base);
        let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\"";
        stream.write_all(head.as_bytes()).unwrap();
        read_to_close(&mut stream).0
    });
    let said = tokio::time::timeout(BOUND, slow).await.unwrap().unwrap();
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    assert!(said.contains("PROXY_BODY_TIMEOUT_S"), "{said}");

    let large = format!(r#"{{"model":"gpt-x","stream":true,"pad":"{}"}}"#, "x".repeat(2 << 20));
    let response =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", observer.base)).body(large).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let said: serde_json::Value = response.json().await.unwrap();
    assert_eq!(said["error"]["type"], "invalid_request_error", "the dialect's own shape: {said}");

    let calls = observer.ended(2).await;
    assert_eq!(calls.len(), 2, "the 408 and the 413 are calls");
    for (call, limit) in calls.iter().zip(["PROXY_BODY_TIMEOUT_S", "PROXY_MAX_REQUEST_MB"]) {
        assert_eq!((call.report.outcome, call.report.attempts), (Outcome::Failed, 0));
        let error = call.report.error.as_ref().unwrap();
        assert!(error.message.contains(limit), "{}", error.message);
        assert!(call.verdict.summary.contains(limit), "the verdict names the limit: {}", call.verdict.summary);
    }
    observer.stop().await;
}

/// Past the connection cap a connection's request gets a 503 with
/// Retry-After and the connection closes; past the in-flight cap a
/// request gets a 503 in its dialect's error shape, recorded; an upgrade
/// gets a 501.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_caps_an_agent_is_told_to_come_back_and_an_upgrade_is_refused() {
    let upstream = format!("http://{}", serve(silent_after_head).await);
    let sets = ["PROXY_MAX_CONNECTIONS=2", "PROXY_MAX_IN_FLIGHT=1"];
    let service = Service { metrics_addr: Some("127.0.0.1:0".parse().unwrap()), ..Service::default() };
    let observer = Running::start_service(ObserveSource::Upstream(upstream), None, &sets, service).await;
    let base = observer.base.clone();
    // One stream in flight (its upstream silent after the head).
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let first = client.post(format!("{base}/v1/chat/completions")).body(STREAMED).send().await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    // A second request, on a second connection: past the in-flight cap.
    let busy = client.post(format!("{base}/v1/messages")).body(STREAMED).send().await.unwrap();
    assert_eq!(busy.status().as_u16(), 503);
    assert_eq!(busy.headers()["retry-after"], "1");
    let said: serde_json::Value = busy.json().await.unwrap();
    assert_eq!(said["error"]["type"], "overloaded_error", "Anthropic's own shape: {said}");
    assert!(said["error"]["message"].as_str().unwrap().contains("PROXY_MAX_IN_FLIGHT"), "{said}");
    // A third connection while two are open: past the connection cap.
    let (keep, over) = {
        let base = base.clone();
        tokio::task::spawn_blocking(move || {
            // The second request's connection, let go by its client, must
            // have left its place under the cap before these two take theirs.
            std::thread::sleep(Duration::from_millis(500));
            let keep = connect(&base);
            std::thread::sleep(Duration::from_millis(200));
            let mut over = connect(&base);
            over.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            (keep, read_to_close(&mut over))
        })
        .await
        .unwrap()
    };
    let (said, closed) = over;
    assert!(said.starts_with("HTTP/1.1 503"), "{said}");
    assert!(said.contains("retry-after: 1") && said.contains("PROXY_MAX_CONNECTIONS"), "{said}");
    assert!(closed, "then closed");
    drop((keep, first));
    // An upgrade.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let upgrade = tokio::task::spawn_blocking(move || {
        let mut stream = connect(&base);
        let head = "GET /v1/realtime HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\
                    sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
        stream.write_all(head.as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    let said = tokio::time::timeout(BOUND, upgrade).await.unwrap().unwrap();
    assert!(said.starts_with("HTTP/1.1 501"), "{said}");
    let calls = observer.ended(2).await;
    assert!(calls.iter().any(|c| c.report.error.as_ref().is_some_and(|e| e.message.contains("PROXY_MAX_IN_FLIGHT"))));
    // Each refusal is counted by its reason, a closed list.
    let metrics = observer.seen().metrics.expect("metrics served");
    let text = reqwest::get(format!("http://{metrics}/metrics")).await.unwrap().text().await.unwrap();
    for reason in ["in_flight", "connections", "upgrade"] {
        let counted = text.lines().any(|l| {
            l.starts_with("stallscope_proxy_refused_total{")
                && l.contains(&format!("reason=\"{reason}\""))
                && l.ends_with(" 1")
        });
        assert!(counted, "{reason}: {text}");
    }
    observer.stop().await;
}

/// An agent that speaks HTTP/2 with prior knowledge is served: its
/// streamed call reads whole, recorded like any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_with_prior_knowledge_is_served() {
    let observer = Running::start(ObserveSource::Scenario("healthy".into()), None).await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let response = client.post(format!("{}/v1/chat/completions", observer.base)).body(STREAMED).send().await.unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let calls = observer.ended(1).await;
    assert_eq!(calls[0].report.outcome, Outcome::Ok);
    observer.stop().await;
}

/// An agent that gives up while the upstream has not answered its head
/// (a TTFB stall, where an SDK's timeout fires first) is heard where it
/// gave up, observed and guarded: its call ends cancelled then, not when
/// observe stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_gives_up_before_the_head_is_heard_where_it_gave_up() {
    for sets in [&[][..], &[GUARD][..]] {
        let observer = Running::start_with(ObserveSource::Upstream(black_hole().await), None, sets).await;
        let impatient = reqwest::Client::builder().timeout(Duration::from_millis(600)).build().unwrap();
        let url = format!("{}/v1/chat/completions", observer.base);
        assert!(impatient.post(&url).body(STREAMED).send().await.is_err(), "the agent gives up");
        let calls = observer.ended(1).await;
        assert_eq!(calls.len(), 1, "heard before observe stops ({sets:?})");
        let call = &calls[0];
        assert_eq!(call.report.outcome, Outcome::Cancelled);
        assert!(call.report.elapsed < Duration::from_secs(5), "ended where the agent went: {:?}", call.report.elapsed);
        assert!(call.verdict.summary.contains("the agent disconnected"), "{}", call.verdict.summary);
        if let Some(delivered) = call.delivered {
            assert_eq!(delivered, stallscope::observe::Delivered::Cut, "the agent got nothing");
        }
        observer.stop().await;
    }
}
