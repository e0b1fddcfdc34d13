//! `stallscope observe` in front of an upstream that compresses its
//! answers, driven by a plain HTTP client as an agent (reqwest here
//! decodes nothing): the agent receives the compressed bytes exactly as
//! the upstream wrote them, while the recording reads the text they stand
//! for — a gzip stream is recorded as the same stream uncompressed is, a
//! gzip error body as its text — and a body in an encoding observe does
//! not decode is recorded as such, by name.

mod observer;
mod programs;

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use hyper::body::Incoming;
use observer::Running;
use programs::{Answer, free_port, serve, temp_dir};
use stallscope::core::event::{EventClass, EventKind};
use stallscope::diagnosis::VerdictKind;
use stallscope::observe::ObserveSource;
use stallscope::report::StreamReport;
use stallscope::store::Store;

/// The upstream's event stream: an OpenAI chat stream of three content
/// deltas.
const EVENTS: [&str; 6] = [
    r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
    r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"}}]}"#,
    r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" there,"}}]}"#,
    r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" operator"}}]}"#,
    r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    "data: [DONE]",
];

/// The upstream's rate-limit answer.
const RATE_LIMITED: &str = r#"{"error":{"message":"Rate limit reached for gpt-x, slow down","type":"requests"}}"#;

/// The upstream's models list.
const MODELS: &str = r#"{"object":"list","data":[{"id":"gpt-x","object":"model"}]}"#;

/// `texts` as the upstream writes them under `encoding`: as they are, or
/// gzip or br flushed after each (what a server compressing a stream
/// does), its end last. `zstd` stands for an encoding observe does not
/// decode: any bytes serve.
fn wire(texts: &[String], encoding: Option<&str>) -> Vec<Bytes> {
    let Some(encoding) = encoding else { return texts.iter().map(|t| Bytes::from(t.clone())).collect() };
    if encoding == "br" {
        let mut encoder = brotli::CompressorWriter::new(Vec::new(), 4096, 5, 22);
        let mut chunks = flushed(&mut encoder, brotli::CompressorWriter::get_mut, texts);
        chunks.push(Bytes::from(encoder.into_inner()));
        return chunks;
    }
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let mut chunks = flushed(&mut encoder, GzEncoder::get_mut, texts);
    chunks.push(Bytes::from(encoder.finish().unwrap()));
    if encoding == "zstd" {
        chunks.iter_mut().for_each(|chunk| *chunk = chunk.iter().map(|b| b ^ 0x5a).collect());
    }
    chunks
}

/// Each of `texts` through `encoder`, flushed after each: what it wrote
/// for each (`written` is where it writes).
fn flushed<E: Write>(encoder: &mut E, written: fn(&mut E) -> &mut Vec<u8>, texts: &[String]) -> Vec<Bytes> {
    texts
        .iter()
        .map(|text| {
            encoder.write_all(text.as_bytes()).unwrap();
            encoder.flush().unwrap();
            Bytes::from(std::mem::take(written(encoder)))
        })
        .collect()
}

/// The event stream's chunks, one event each.
fn stream_texts() -> Vec<String> {
    EVENTS.iter().map(|event| format!("{event}\n\n")).collect()
}

/// What the upstream answers `request`: status, content type, the texts
/// it writes (one write each), and the encoding the agent accepts (its
/// `accept-encoding`, whole).
fn answer(request: &hyper::Request<Incoming>) -> (u16, &'static str, Vec<String>, Option<String>) {
    let accepted = request.headers().get("accept-encoding").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let limited = request.headers().contains_key("x-test-rate-limited");
    match request.uri().path() {
        "/v1/models" => (200, "application/json", vec![MODELS.to_owned()], accepted),
        _ if limited => (429, "application/json", vec![RATE_LIMITED.to_owned()], accepted),
        _ => (200, "text/event-stream", stream_texts(), accepted),
    }
}

/// Serves [`answer`]s on loopback, each chunk written 20 ms after the
/// last.
async fn upstream() -> SocketAddr {
    serve(|request| {
        let (status, content_type, texts, encoding) = answer(request);
        let chunks = wire(&texts, encoding.as_deref()).into_iter().map(|c| (Duration::from_millis(20), c)).collect();
        let mut headers = vec![("content-type", content_type.to_owned())];
        headers.extend(encoding.map(|encoding| ("content-encoding", encoding)));
        Answer { status, headers, chunks }
    })
    .await
}

/// What an agent got: status, `content-encoding`, the body's bytes.
struct Got {
    status: u16,
    encoding: Option<String>,
    bytes: Vec<u8>,
}

/// Sends `request` as an agent accepting `encoding`, and reads the answer
/// chunk by chunk.
async fn agent_call(request: reqwest::RequestBuilder, encoding: Option<&str>) -> Got {
    let request = match encoding {
        Some(encoding) => request.header("accept-encoding", encoding),
        None => request,
    };
    let mut response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let encoding = response.headers().get("content-encoding").map(|v| v.to_str().unwrap().to_owned());
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        bytes.extend_from_slice(&chunk);
    }
    Got { status, encoding, bytes }
}

/// A streamed chat request, `n` told apart by its prompt (the same body
/// again after a failed call would be the agent's retry).
fn streamed(client: &reqwest::Client, base: &str, n: u32) -> reqwest::RequestBuilder {
    let body = format!(r#"{{"model":"gpt-x","stream":true,"messages":[{{"role":"user","content":"hi {n}"}}]}}"#);
    client.post(format!("{base}/v1/chat/completions")).header("content-type", "application/json").body(body)
}

/// The recorded run in `db`: its streams, in order, each with the number
/// of content events recorded, and the error bodies recorded.
fn recorded(db: &Path) -> (Vec<(StreamReport, usize)>, Vec<String>) {
    let store = Store::open(db).unwrap();
    let run = store.list_runs().unwrap()[0].id;
    let mut report = store.diagnosed_report(run).unwrap().unwrap();
    report.streams.sort_by_key(|s| s.index);
    let events = store.run_events(run).unwrap();
    let streams = report
        .streams
        .into_iter()
        .map(|stream| {
            let content = events
                .iter()
                .filter(|e| e.stream == stream.index)
                .filter(|e| matches!(e.kind, EventKind::SseReceived { class: EventClass::Content, .. }))
                .count();
            (stream, content)
        })
        .collect();
    let bodies = events
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ErrorBody { body, .. } => Some(body),
            _ => None,
        })
        .collect();
    (streams, bodies)
}

/// A gzip or br stream reaches the agent as the upstream wrote it, byte
/// for byte with its `content-encoding`, and is recorded as the same
/// stream uncompressed is: healthy, its content events and text; a gzip
/// error body is recorded as its text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_stream_reaches_the_agent_compressed_and_is_recorded_decoded() {
    let dir = temp_dir(&format!("observe-gzip-{}", free_port()));
    let db = dir.join("observe.db");
    let upstream = upstream().await;
    let observer = Running::start(ObserveSource::Upstream(format!("http://{upstream}")), Some(&db)).await;
    let client = reqwest::Client::new();

    let plain = agent_call(streamed(&client, &observer.base, 1), None).await;
    assert_eq!((plain.status, plain.encoding.as_deref()), (200, None));
    assert_eq!(plain.bytes, stream_texts().concat().as_bytes());
    let gzip = agent_call(streamed(&client, &observer.base, 2), Some("gzip")).await;
    assert_eq!((gzip.status, gzip.encoding.as_deref()), (200, Some("gzip")), "the header goes on as it came");
    assert_eq!(gzip.bytes, wire(&stream_texts(), Some("gzip")).concat(), "the agent reads what the upstream wrote");
    let limited =
        agent_call(streamed(&client, &observer.base, 3).header("x-test-rate-limited", "1"), Some("gzip")).await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.bytes, wire(&[RATE_LIMITED.to_owned()], Some("gzip")).concat());
    let br = agent_call(streamed(&client, &observer.base, 4), Some("br")).await;
    assert_eq!((br.status, br.encoding.as_deref()), (200, Some("br")));
    assert_eq!(br.bytes, wire(&stream_texts(), Some("br")).concat(), "the agent reads what the upstream wrote");
    let calls = observer.ended(4).await;
    let kinds: Vec<VerdictKind> = calls.iter().map(|c| c.verdict.kind).collect();
    let healthy = VerdictKind::Healthy;
    assert_eq!(kinds, [healthy, healthy, VerdictKind::RateLimited, healthy], "{calls:?}");
    observer.stop().await;

    let (streams, error_bodies) = recorded(&db);
    let [(plain, plain_content), (gzip, gzip_content), (limited, _), (br, br_content)] = &streams[..] else {
        panic!("{streams:?}")
    };
    assert_eq!((br.outcome, *br_content), ("ok", 3), "as the plain stream: {br:?}");
    assert_eq!((plain.outcome, *plain_content), ("ok", 3));
    assert_eq!((gzip.outcome, *gzip_content), ("ok", 3), "as the plain stream: {gzip:?}");
    // The text, events and bytes the core read of each (observe's run
    // counts its calls: its report lists none of these).
    let read = |i: usize| {
        let r = &calls[i].report;
        (r.content.clone(), r.events, r.bytes)
    };
    assert_eq!((read(1), read(3)), (read(0), read(0)), "gzip and br as the plain stream");
    assert_eq!(read(1).0, "Hello there, operator");
    assert_eq!(gzip.diagnosis.as_ref().map(|d| d.kind), Some(VerdictKind::Healthy));
    assert_eq!(limited.outcome, "failed");
    assert_eq!(error_bodies, [RATE_LIMITED], "the error body is recorded as its text");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A body in an encoding observe does not decode still reaches the agent
/// byte for byte; the recording says why it could not read it, naming the
/// encoding: a stream as malformed, a models list still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_observe_cannot_decode_reaches_the_agent_and_is_recorded_by_name() {
    let upstream = upstream().await;
    let observer = Running::start(ObserveSource::Upstream(format!("http://{upstream}")), None).await;
    let client = reqwest::Client::new();
    let zstd = agent_call(streamed(&client, &observer.base, 1), Some("zstd")).await;
    assert_eq!((zstd.status, zstd.encoding.as_deref()), (200, Some("zstd")));
    assert_eq!(zstd.bytes, wire(&stream_texts(), Some("zstd")).concat(), "the agent reads what the upstream wrote");
    let models = agent_call(client.get(format!("{}/v1/models", observer.base)), Some("zstd")).await;
    assert_eq!((models.status, models.encoding.as_deref()), (200, Some("zstd")));
    assert_eq!(models.bytes, wire(&[MODELS.to_owned()], Some("zstd")).concat());
    let calls = observer.ended(2).await;
    let (stream, list) = (&calls[0], &calls[1]);
    assert_eq!(stream.verdict.kind, VerdictKind::MalformedStream, "{}", stream.verdict.summary);
    assert!(
        stream
            .verdict
            .summary
            .starts_with("malformed stream: content-encoding zstd: observe records only gzip, deflate and br"),
        "{}",
        stream.verdict.summary
    );
    assert_eq!(list.report.outcome, stallscope::core::event::Outcome::Ok, "{}", list.verdict.summary);
    observer.stop().await;
}
