//! End-to-end tests: a real simulator on loopback, a real HTTP client.

use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use super::{STREAM_HEADER, Scenario, SimServer, builtin};
use crate::providers::Dialect;

async fn serve(name: &str) -> SimServer {
    SimServer::start(builtin(name).unwrap(), 0).await.unwrap()
}

async fn serve_toml(text: &str) -> SimServer {
    SimServer::start(Scenario::from_toml(text, "test.toml").unwrap(), 0).await.unwrap()
}

/// A fresh client (no pooled connection carries over between tests) that
/// ignores any proxy configured in the environment.
fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn post(server: &SimServer, dialect: Dialect, stream: Option<&str>) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}{}", server.base_url(), dialect.server_path()))
        .body(r#"{"model":"echo-model","stream":true,"messages":[]}"#);
    if let Some(stream) = stream {
        request = request.header(STREAM_HEADER, stream);
    }
    request.send().await.unwrap()
}

/// Reads the body to its end, noting when each chunk arrived; the error, if
/// the body broke, comes last.
async fn read_all(response: &mut reqwest::Response) -> (Vec<(Duration, Bytes)>, Option<reqwest::Error>) {
    let start = Instant::now();
    let mut chunks = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => chunks.push((start.elapsed(), chunk)),
            Ok(None) => return (chunks, None),
            Err(e) => return (chunks, Some(e)),
        }
    }
}

fn joined(chunks: &[(Duration, Bytes)]) -> Vec<u8> {
    chunks.iter().flat_map(|(_, c)| c.iter().copied()).collect()
}

/// Whether any error in `error`'s source chain is an I/O error of `kind`.
fn has_io_kind(error: &reqwest::Error, kind: std::io::ErrorKind) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == kind) {
            return true;
        }
        source = e.source();
    }
    false
}

/// A request's body size picks its script: the small one is answered,
/// the large one stalls before its headers, and both count as attempts
/// of the stream.
#[tokio::test]
async fn large_request_bodies_play_the_large_scripts() {
    let server = serve_toml(
        "[[attempts]]\nsteps = [{ content = \"ok\" }]\n\
         [large_requests]\nfrom_bytes = 2000\n\
         [[large_requests.attempts]]\nheaders_delay_ms = 60000\n",
    )
    .await;
    let send = |padding: usize| {
        let body = format!(r#"{{"model":"m","stream":true,"messages":[],"pad":"{}"}}"#, "x".repeat(padding));
        let url = format!("{}{}", server.base_url(), Dialect::OpenAiChat.server_path());
        let request = client().post(url).header(STREAM_HEADER, "s").body(body);
        request.send()
    };
    assert_eq!(send(10).await.unwrap().status(), 200);
    let large = tokio::time::timeout(Duration::from_millis(300), send(4000)).await;
    assert!(large.is_err(), "a large request waits a minute for its headers: {large:?}");
    assert_eq!(server.attempts("s"), 2);
}

#[tokio::test]
async fn healthy_streams_end_with_each_dialects_terminal_events() {
    let server = serve("healthy").await;
    let read = |dialect| {
        let server = &server;
        async move {
            let mut response = post(server, dialect, None).await;
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["content-type"], "text/event-stream");
            let (chunks, error) = read_all(&mut response).await;
            assert!(error.is_none(), "{error:?}");
            // One event per frame: the chunks arrive spread over time.
            assert!(chunks.len() > 10, "{} chunks", chunks.len());
            String::from_utf8(joined(&chunks)).unwrap()
        }
    };
    let (chat, responses, messages) =
        tokio::join!(read(Dialect::OpenAiChat), read(Dialect::OpenAiResponses), read(Dialect::AnthropicMessages));
    assert!(chat.contains(r#""model":"echo-model""#));
    assert!(chat.contains(r#""delta":{"content":"tok "}"#));
    assert!(chat.contains(r#""delta":{"reasoning_content":"Let me think. "}"#));
    assert!(chat.contains(r#""usage":{"prompt_tokens":25,"completion_tokens":23,"total_tokens":48}"#));
    assert!(chat.contains(r#""choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#));
    assert!(chat.ends_with("}}\n\ndata: [DONE]\n\n"));
    let last = responses.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: response.completed\ndata: {\"type\":\"response.completed\""), "{last}");
    assert!(last.contains(r#""status":"completed""#) && last.contains(r#""output_tokens":23"#));
    assert!(messages.starts_with("event: message_start\n"));
    assert!(messages.contains(r#""model":"echo-model""#));
    assert!(messages.ends_with(
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\
         \"stop_sequence\":null},\"usage\":{\"output_tokens\":23}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    ));
    server.shutdown().await;
}

#[tokio::test]
async fn attempts_are_counted_per_stream_and_the_last_script_repeats() {
    let server = serve_toml("[[attempts]]\nstatus = 500\n[[attempts]]").await;
    let statuses = [(Some("a"), 500), (Some("a"), 200), (Some("b"), 500), (None, 500), (Some("a"), 200), (None, 200)];
    for (stream, status) in statuses {
        let response = post(&server, Dialect::OpenAiChat, stream).await;
        assert_eq!(response.status(), status, "stream {stream:?}");
        if status == 500 {
            assert_eq!(response.headers()["content-type"], "application/json");
            let body: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
            assert_eq!(body["error"]["type"], "server_error");
        } else {
            assert!(response.text().await.unwrap().ends_with("data: [DONE]\n\n"));
        }
    }
    assert_eq!((server.attempts("a"), server.attempts("b"), server.attempts(""), server.attempts("c")), (3, 1, 2, 0));
}

#[tokio::test]
async fn rate_limits_carry_each_retry_after_form() {
    let (ms, seconds, date, overloaded) = tokio::join!(
        serve("rate-limited-ms"),
        serve("rate-limited-seconds"),
        serve("rate-limited-date"),
        serve("overloaded-in-stream")
    );
    let response = post(&ms, Dialect::OpenAiChat, Some("s")).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after-ms"], "700");
    let body: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");

    let response = post(&seconds, Dialect::AnthropicMessages, None).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    assert!(response.text().await.unwrap().starts_with(r#"{"type":"error","error":{"type":"rate_limit_error""#));

    let before = SystemTime::now();
    let response = post(&date, Dialect::OpenAiResponses, None).await;
    assert_eq!(response.status(), 503);
    let at = httpdate::parse_http_date(response.headers()["retry-after"].to_str().unwrap()).unwrap();
    let wait = at.duration_since(before).unwrap();
    assert!(wait >= Duration::from_secs(2) && wait <= Duration::from_secs(4), "{wait:?}");

    // Attempt 1 is an in-stream error, attempt 2 a 529.
    let mut response = post(&overloaded, Dialect::AnthropicMessages, Some("o")).await;
    let (chunks, error) = read_all(&mut response).await;
    assert!(error.is_none());
    assert!(joined(&chunks).ends_with(
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
    ));
    let response = post(&overloaded, Dialect::AnthropicMessages, Some("o")).await;
    assert_eq!(response.status(), 529);
    assert_eq!(response.headers()["retry-after-ms"], "300");
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
    );
}

#[tokio::test]
async fn a_stall_holds_the_connection_open_without_bytes() {
    let server = serve("silent-stall").await;
    let mut response = post(&server, Dialect::OpenAiChat, Some("s")).await;
    assert_eq!(response.status(), 200);
    let opening = response.chunk().await.unwrap().unwrap();
    assert!(opening.starts_with(b"data: {\"id\":\"chatcmpl-sim\""));
    let next = tokio::time::timeout(Duration::from_millis(300), response.chunk()).await;
    assert!(next.is_err(), "expected silence, got {next:?}");
    // Attempt 2 of the same stream recovers.
    let response = post(&server, Dialect::OpenAiChat, Some("s")).await;
    assert!(response.text().await.unwrap().ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn pings_keep_a_stalled_stream_warm() {
    let server = serve("ping-flood-stall").await;
    let mut response = post(&server, Dialect::AnthropicMessages, None).await;
    let deadline = Instant::now() + Duration::from_millis(450);
    let mut seen = Vec::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline.into(), response.chunk()).await {
        seen.extend_from_slice(&chunk);
    }
    let text = String::from_utf8(seen).unwrap();
    assert!(text.contains("\"thinking_delta\",\"thinking\":\"Thinking. \""));
    // One ping after the block opened, then one every 100 ms.
    assert!(text.matches("event: ping\ndata: {\"type\": \"ping\"}\n\n").count() >= 3, "{text}");
    assert!(!text.contains("message_stop"));
}

#[tokio::test]
async fn a_reset_is_a_connection_error_after_the_first_token() {
    let server = serve("reset-after-first-token").await;
    let mut response = post(&server, Dialect::OpenAiResponses, Some("r")).await;
    let (chunks, error) = read_all(&mut response).await;
    let error = error.expect("the body must break");
    assert!(has_io_kind(&error, std::io::ErrorKind::ConnectionReset), "{error:?}");
    let text = String::from_utf8(joined(&chunks)).unwrap();
    assert!(text.contains(r#""delta":"Hello""#));
    assert!(!text.contains("response.completed"));
}

#[tokio::test]
async fn hangup_breaks_the_body_and_close_ends_it_cleanly() {
    let server = serve_toml(
        "[[attempts]]\nsteps = [{ content = \"a\" }, { hangup = true }]\n\
         [[attempts]]\nsteps = [{ content = \"a\" }, { close = true }]",
    )
    .await;
    let mut response = post(&server, Dialect::OpenAiChat, None).await;
    let (chunks, error) = read_all(&mut response).await;
    let error = error.expect("an unterminated chunked body is an error");
    assert!(!has_io_kind(&error, std::io::ErrorKind::ConnectionReset), "{error:?}");
    assert!(joined(&chunks).ends_with(b"\"content\":\"a\"},\"finish_reason\":null}]}\n\n"));
    let mut response = post(&server, Dialect::OpenAiChat, None).await;
    let (chunks, error) = read_all(&mut response).await;
    assert!(error.is_none(), "{error:?}");
    assert!(joined(&chunks).ends_with(b"\"content\":\"a\"},\"finish_reason\":null}]}\n\n"));
}

#[tokio::test]
async fn a_drip_arrives_in_small_pieces_over_time() {
    let server = serve_toml(
        "[[attempts]]\nsteps = [{ drip_bytes = 40, every_ms = 10 }, { content = \"tok \", count = 2, every_ms = 500 }]",
    )
    .await;
    let mut response = post(&server, Dialect::OpenAiChat, None).await;
    let (chunks, error) = read_all(&mut response).await;
    assert!(error.is_none());
    let body = joined(&chunks);
    assert!(body.ends_with(b"data: [DONE]\n\n"));
    assert!(chunks.iter().all(|(_, c)| c.len() <= 40));
    assert!(chunks.len() >= body.len() / 40);
    let (last, _) = chunks.last().unwrap();
    // Paced by the drip (10 ms a piece), not the content's 500 ms.
    assert!(*last >= Duration::from_millis(10 * (chunks.len() as u64 - 2)), "{last:?}");
    assert!(*last < Duration::from_millis(900), "{last:?}");
}

#[tokio::test]
async fn a_buffered_stream_arrives_in_one_piece_after_the_delay() {
    let server =
        serve_toml("[[attempts]]\nsteps = [{ buffer_ms = 300 }, { content = \"tok \", count = 5, every_ms = 50 }]")
            .await;
    let start = Instant::now();
    let mut response = post(&server, Dialect::AnthropicMessages, None).await;
    let (chunks, error) = read_all(&mut response).await;
    assert!(error.is_none());
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(joined(&chunks).ends_with(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
}

#[tokio::test]
async fn malformed_streams_are_sent_as_scripted() {
    let (long, utf8) = tokio::join!(serve("malformed-long-line"), serve("malformed-sse"));
    let start = Instant::now();
    let mut response = post(&long, Dialect::OpenAiChat, None).await;
    let (chunks, error) = read_all(&mut response).await;
    assert!(error.is_none());
    assert!(start.elapsed() >= Duration::from_millis(300), "the line is held open");
    let body = joined(&chunks);
    let line = body.split(|b| *b == b'\n').find(|l| l.starts_with(b"data: xxx")).unwrap();
    assert_eq!(line.len(), 6 + 6 * 1024 * 1024);
    assert!(body.ends_with(b"data: [DONE]\n\n"));

    let mut response = post(&utf8, Dialect::OpenAiChat, None).await;
    let (chunks, _) = read_all(&mut response).await;
    let body = joined(&chunks);
    assert!(std::str::from_utf8(&body).is_err());
    assert!(body.windows(2).any(|w| w == b"\xff\xfe"));
}

#[tokio::test]
async fn headers_wait_when_delayed() {
    let server = serve_toml("[[attempts]]\nheaders_delay_ms = 200").await;
    let start = Instant::now();
    let response = post(&server, Dialect::OpenAiResponses, None).await;
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(response.text().await.unwrap().contains("response.completed"));
}

#[tokio::test]
async fn unknown_paths_and_methods_are_refused() {
    let server = serve("healthy").await;
    let response = client().post(format!("{}/v1/completions", server.base_url())).send().await.unwrap();
    assert_eq!(response.status(), 404);
    assert!(response.text().await.unwrap().contains("/v1/messages"));
    let response = client().get(format!("{}/v1/messages", server.base_url())).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(server.attempts(""), 0);
}

#[tokio::test]
async fn shutdown_closes_the_listener() {
    let server = serve("healthy").await;
    let addr = server.addr();
    assert!(addr.ip().is_loopback());
    server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
