//! Whole-system stream benchmarks over loopback (127.0.0.1 only). Every
//! figure is read against a baseline measured in the same run on the same
//! server, because the machine is shared and absolute numbers drift.
//!
//! Run with `cargo bench --bench streams` (about 1.5 minutes; add
//! `-- --only 2` or `-- --only 1,3` for some parts). Without `--bench` (as
//! under `cargo test --benches`) the same code runs on tiny sizes as a smoke
//! test. A plain `main` rather than criterion: these are whole-system runs
//! of a fraction of a second to ten seconds each.
//!
//! 1. **Throughput of one long healthy stream.** A minimal hyper server in
//!    this file streams a pre-rendered OpenAI chat completions body (a role
//!    chunk, 200,000 content chunks of 280 B shaped like OpenAI's with usage
//!    on, a finish chunk, a usage chunk, `[DONE]`) as fast as the socket
//!    takes it, as chunked HTTP/1.1 frames of (a) one SSE event each and
//!    (b) 64 KiB. The same response is read by raw `reqwest`
//!    `bytes_stream()` byte counting (the baseline, a plain client) and by
//!    the whole core: `HttpUpstream` over reqwest → our SSE parser → the
//!    chat decoder → the governor → the executor → a counting `EventSink`.
//!    `vs raw` is events/s over the baseline's events/s (goals: core ≥ 0.8
//!    at one event per frame; core ≥ 5 M events/s at 64 KiB). Each row is
//!    the median of 8 runs after a warm-up run; the paths take turns, in
//!    reverse order every other rep, and the summary's core/raw is the
//!    median of each rep's own pair, with its range. The other rows
//!    attribute the difference: raw reqwest with the core's own client (its
//!    transport settings), raw reqwest feeding the decoder in its loop (the
//!    best any governor over this transport and decoder could do), hyper's
//!    HTTP/1 connection driven in the reading task, alone and feeding the
//!    decoder (reqwest runs the connection as a task of its own and hands
//!    each chunk across: these rows show what that hand-over costs), and,
//!    run after the socket paths, in memory (no socket) the governor, the
//!    decoder, the SSE parser, and serde_json merely skimming each payload
//!    (`IgnoredAny`, the floor of any full JSON read).
//! 2. **Stall-detection lateness.** 1,000 concurrent calls through
//!    `run_calls` against the simulator playing "headers, one event, then
//!    nothing forever", idle timer 1 s, no retries, no failover. For each
//!    call, lateness = the `TimerFired` event's `at` − (the last
//!    `ChunkReceived` `at` + 1 s): both are the governor's own clock reads.
//!    Baselines, same runtime, same run: bare `tokio::time::sleep_until` in
//!    1,000 concurrent tasks started together (the goal's baseline: core p99
//!    ≤ 1.5 × its p99), the same with the core's exact spread of deadlines,
//!    and raw reqwest reading the same stalls with the idle rule written by
//!    hand (same sockets and server, no core; it closes each connection at
//!    once, where the core closes it 100 ms later off the detection path,
//!    see `governor::CLOSE_DELAY`). 3 rounds, pooled.
//! 3. **CPU and peak RSS at load.** 1,000 concurrent streams, each a content
//!    event every 50 ms for 10 s (the simulator's `{ content = "tok ",
//!    count = 200, every_ms = 50 }`). The client runs in a child process
//!    (this binary re-executed with `--child`), so its CPU (utime + stime
//!    from `/proc/self/stat` around the run; cores = CPU s / wall s) and peak
//!    RSS (`VmHWM` of a fresh process) are the client's alone; the server
//!    stays in this process and its CPU is reported beside. The core
//!    (`run_calls` with a counting sink) is compared with raw reqwest
//!    consuming the same streams; the difference is the core's part (goals:
//!    core client ≤ 0.5 core, core's part ≤ 64 MiB). A lighter server (one
//!    shared pre-rendered event, one sleep per event) serves the same load
//!    again to show what the simulator itself costs.
//!
//! 4. **Capacity.** The largest number of concurrent `healthy` streams
//!    (the built-in scenario: reasoning, then content, an event every 25 ms
//!    for 575 ms; idle timer 1 s, data stall 0.5 s) that this machine runs
//!    with no timer firing at all, as `stallscope run --scenario healthy
//!    --requests N --concurrency N` runs them: [`run_session`] on a
//!    two-worker runtime with the simulator in-process and the run
//!    recorded (to a scratch database), every stream started at once, no
//!    connection warmed. Each trial reports the timers that fired and how
//!    many the lag probe marked untrustworthy. Baseline, same run and same
//!    simulator: raw reqwest reading the same streams with one 0.5 s
//!    timeout per chunk (1 s for the headers). Both are searched by
//!    doubling and then halving the gap between the largest clean and the
//!    smallest failing concurrency, down to a step of 250, up to 9,000
//!    (each stream holds two sockets here, and the limit on open files is
//!    20,000); the paths take turns.
//!
//! In parts 2 and 3 every client first opens its 1,000 connections (see
//! [`warm_pool`]): a thousand simultaneous connects overflow the listen
//! backlog, and the dropped handshakes are retried only after 1 s, which
//! would otherwise be measured as stalls and as ramp-up.
//!
//! Reading the ratios: for throughput, 1 means "as fast as raw reqwest"
//! (above 1 only by noise, since every other path does more work); for
//! lateness and CPU, 1 means "costs nothing beyond the baseline".

#[path = "common/stats.rs"]
mod stats;
use stats::median;

use std::convert::Infallible;
use std::future::poll_fn;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::{Pin, pin};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Context;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Body as _, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use stallscope::config::{ConfigFile, Layers, Settings};
use stallscope::core::category::TimerKind;
use stallscope::core::event::{Event, EventKind, EventSink, Outcome};
use stallscope::core::executor::{Call, CallReport, Executor, Origin};
use stallscope::core::failover::Target;
use stallscope::core::failure::Failure;
use stallscope::core::governor::{AttemptProgress, AttemptScope, CLOSE_DELAY, run_attempt};
use stallscope::core::transport::{ClientCache, build_client};
use stallscope::core::upstream::{AttemptRequest, CallInput, Decoder, Response as UpstreamResponse, Upstream};
use stallscope::providers::Dialect;
use stallscope::providers::setup::ProviderConfig;
use stallscope::providers::sse::SseParser;
use stallscope::recorder::Recorder;
use stallscope::report::RunReport;
use stallscope::run::{RunPlan, executor, run_calls};
use stallscope::session::{RecordTo, RunSource, SessionPlan, run_session};
use stallscope::sim::{STREAM_HEADER, Scenario, SimServer, builtin};
use stallscope::store::runs::RunStart;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The model named in requests and chunks.
const MODEL: &str = "gpt-4o-mini";
/// What the raw baseline posts (the core posts its own, equivalent body).
const REQUEST_JSON: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}],"stream":true,"stream_options":{"include_usage":true}}"#;
/// Clock ticks per second of `/proc/self/stat` (`getconf CLK_TCK`).
const CLK_TCK: f64 = 100.0;

/// How big each part runs.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Part 1: content events in the long stream.
    events: usize,
    /// Part 1: measured runs per path (median reported), after one warm-up.
    reps: usize,
    /// Part 1: bytes per frame of the blocked chunking.
    block: usize,
    /// Part 2: concurrent stalled calls per round.
    stall_streams: usize,
    /// Part 2: rounds (samples are pooled).
    stall_rounds: usize,
    /// Part 2: the idle timeout.
    stall_threshold: Duration,
    /// Part 3: concurrent streams.
    load_streams: usize,
    /// Part 3: content events per stream.
    load_events: u32,
    /// Part 3: milliseconds between events.
    load_every_ms: u64,
    /// Part 4: the first concurrency tried.
    capacity_start: usize,
    /// Part 4: the resolution of the search.
    capacity_step: usize,
    /// Part 4: the largest concurrency tried.
    capacity_max: usize,
}

const FULL: Sizes = Sizes {
    events: 200_000,
    reps: 8,
    block: 64 * 1024,
    stall_streams: 1_000,
    stall_rounds: 3,
    stall_threshold: Duration::from_secs(1),
    load_streams: 1_000,
    load_events: 200,
    load_every_ms: 50,
    capacity_start: 1_000,
    capacity_step: 250,
    capacity_max: 9_000,
};

/// A smoke test of every path, for runs without `--bench`.
const QUICK: Sizes = Sizes {
    events: 2_000,
    reps: 1,
    block: 64 * 1024,
    stall_streams: 50,
    stall_rounds: 1,
    stall_threshold: Duration::from_millis(200),
    load_streams: 20,
    load_events: 10,
    load_every_ms: 50,
    capacity_start: 50,
    capacity_step: 50,
    capacity_max: 100,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--child") {
        child(&args[at + 1..]);
        return;
    }
    let sizes = if args.iter().any(|a| a == "--bench") { FULL } else { QUICK };
    let server_rt = runtime("bench-server");
    let client_rt = runtime("bench-client");
    // `--only 2` (or `--only 1,3`) runs some parts.
    let only = args.iter().position(|a| a == "--only").and_then(|at| args.get(at + 1));
    let part = |n: &str| only.is_none_or(|only| only.split(',').any(|p| p.trim() == n));
    println!("stallscope stream benchmarks (loopback, {} cores)", cores());
    println!();
    if part("1") {
        throughput(&server_rt, &client_rt, sizes);
    }
    if part("2") {
        lateness(&server_rt, &client_rt, sizes);
    }
    if part("3") {
        load(&server_rt, sizes);
    }
    if part("4") {
        capacity(sizes);
    }
}

fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name(name)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build the {name} runtime: {e}"))
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Runs `future` as a spawned task of `rt` (never in the main future) and
/// waits for it.
fn spawned<T: Send + 'static>(rt: &Runtime, future: impl Future<Output = T> + Send + 'static) -> T {
    rt.block_on(async move { tokio::spawn(future).await.expect("benchmark task panicked") })
}

// ---------------------------------------------------------------------------
// Shared pieces: settings, executor, counting sink, /proc readers.
// ---------------------------------------------------------------------------

/// Effective settings: shipped defaults, no config file, no environment,
/// proxies off, no retries and no failover, plus `extra`.
fn settings(extra: &[String]) -> Settings {
    let mut overrides: Vec<String> =
        ["PROXY=off", "PROVIDER_STREAM_RETRIES=0", "FALLBACK_MODELS=off"].map(str::to_owned).to_vec();
    overrides.extend_from_slice(extra);
    let layers = Layers { config: ConfigFile::None, scenario: None, overrides: &overrides, edits: &[] };
    Settings::load(layers, Vec::<(String, String)>::new()).expect("bench settings")
}

/// An executor with one OpenAI chat provider at `root` (`http://host:port`).
fn core_executor(
    settings: &Settings,
    root: &str,
    clients: &ClientCache,
    sink: Arc<dyn EventSink>,
) -> (Executor, Target) {
    let row = ProviderConfig::at_root("bench", Dialect::OpenAiChat, root, MODEL);
    let executor = executor(settings, &[row], clients, sink, Origin::now(0), |_| None).expect("bench executor");
    (executor, Target::new("bench", MODEL))
}

/// Part 3's calls through the core: the pool warmed, then the calls, with
/// RSS read before and CPU and wall clock started just before them.
struct CoreCalls {
    rss_before_kib: u64,
    cpu_at_start: f64,
    started: Instant,
    reports: Vec<CallReport>,
}

impl CoreCalls {
    async fn run(settings: &Settings, root: &str, streams: usize, sink: Arc<dyn EventSink>) -> CoreCalls {
        let clients = ClientCache::new();
        let (executor, target) = core_executor(settings, root, &clients, sink);
        let clients = clients.clients(&settings.policy.transport).expect("the executor's clients");
        warm_pool(|stream| clients.for_stream(stream).clone(), root, streams).await;
        let plan = RunPlan { requests: streams, concurrency: streams, target, prompt: "Say hello.".to_owned() };
        let rss_before_kib = status_kib("VmRSS");
        let (cpu_at_start, started) = (cpu_seconds(), Instant::now());
        let reports = run_calls(&executor, &plan, &CancellationToken::new(), |_| {}).await;
        CoreCalls { rss_before_kib, cpu_at_start, started, reports }
    }

    /// CPU seconds and wall seconds since the calls began.
    fn stop(&self) -> (f64, f64) {
        (cpu_seconds() - self.cpu_at_start, self.started.elapsed().as_secs_f64())
    }

    /// Calls that ended `ok`, and bytes received.
    fn tally(&self) -> (u64, u64) {
        let ok = self.reports.iter().filter(|r| r.outcome == Outcome::Ok).count() as u64;
        (ok, self.reports.iter().map(|r| r.bytes).sum())
    }
}

/// A plain reqwest client: the raw baseline.
fn plain_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().tcp_nodelay(true).build().expect("plain reqwest client")
}

/// Marks a warm-up request: the bench server holds it for [`WARM_HOLD`] and
/// answers 204; the simulator answers it with attempt 1 of its scenario
/// (see [`sim_scenario`]).
const WARM_HEADER: &str = "x-bench-warm";
/// How long a warm-up request keeps its connection busy.
const WARM_HOLD: Duration = Duration::from_millis(300);

/// Opens `connections` pooled keep-alive connections on `client` to `root`,
/// one per stream id `0..connections`: each request is held by the server
/// for [`WARM_HOLD`], so they overlap and none can reuse another's
/// connection. Without this, a thousand calls connecting at once overflow
/// the listen backlog, and the dropped handshakes are retried only after
/// 1 s. Connects are spread over a few milliseconds for the same reason.
async fn warm_pool(client_of: impl Fn(u64) -> reqwest::Client, root: &str, connections: usize) {
    let url = format!("{root}/v1/chat/completions");
    let mut tasks = Vec::with_capacity(connections);
    for stream in 0..connections {
        if stream % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let request = chat_request(&client_of(stream as u64), &url, stream as u64).header(WARM_HEADER, "1");
        tasks.push(tokio::spawn(async move { request.send().await.ok()?.bytes().await.ok() }));
    }
    let mut opened = 0;
    for task in tasks {
        opened += usize::from(matches!(task.await, Ok(Some(_))));
    }
    if opened < connections {
        eprintln!("warning: only {opened} of {connections} warm-up requests succeeded");
    }
    // A connection goes back to the pool from a task of its own once its
    // response is read; give those tasks time to run.
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// A simulator scenario whose attempt 1 (of every stream) is the warm-up,
/// held for [`WARM_HOLD`] then ended, and whose later attempts play `steps`.
fn sim_scenario(steps: &str) -> Scenario {
    let text = format!(
        "[[attempts]]\nheaders_delay_ms = {}\nsteps = [{{ end = true }}]\n\n[[attempts]]\nsteps = [{steps}]\n",
        WARM_HOLD.as_millis()
    );
    Scenario::from_toml(&text, "bench").expect("bench scenario")
}

/// Counts events by kind; what a cheap real sink costs.
#[derive(Debug, Default)]
struct CountingSink {
    events: AtomicU64,
    chunks: AtomicU64,
    sse: AtomicU64,
}

impl EventSink for CountingSink {
    fn emit(&self, event: Event) {
        self.events.fetch_add(1, Ordering::Relaxed);
        match event.kind {
            EventKind::ChunkReceived { .. } => self.chunks.fetch_add(1, Ordering::Relaxed),
            EventKind::SseReceived { .. } => self.sse.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

/// This process's CPU time (user + system), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is
    // field 3, utime 14 and stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / CLK_TCK
}

/// A `/proc/self/status` memory figure, in KiB.
fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The smallest and the largest value.
fn range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values.into_iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| (low.min(v), high.max(v)))
}

/// The `q` quantile (nearest rank) of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

// ---------------------------------------------------------------------------
// The bench server: a pre-rendered body as fast as possible, or paced.
// ---------------------------------------------------------------------------

type BenchBody = UnsyncBoxBody<Bytes, Infallible>;

/// What the bench server answers every request with.
enum Script {
    /// These frames, back to back, as fast as the socket takes them.
    Burst(Arc<Vec<Bytes>>),
    /// `head`, then `count` × (`every`, `event`), then `tail`.
    Paced { head: Bytes, event: Bytes, tail: Bytes, count: u32, every: Duration },
}

/// A loopback HTTP/1.1 server answering every POST with its script.
struct BenchServer {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl BenchServer {
    /// Must run inside the runtime that is to serve.
    async fn start(script: Script) -> BenchServer {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.expect("bind the bench server");
        let addr = listener.local_addr().expect("bench server address");
        let script = Arc::new(script);
        let accept = tokio::spawn(async move {
            // Dropped with this task, which ends every connection.
            let mut connections = JoinSet::new();
            loop {
                while connections.try_join_next().is_some() {}
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let script = Arc::clone(&script);
                connections.spawn(async move {
                    let service = service_fn(move |request| respond(request, Arc::clone(&script)));
                    // writev off: frames are copied into one buffer and
                    // written in large syscalls, so the server is never the
                    // bottleneck (the client still sees one chunked-encoding
                    // frame per event).
                    let _ = http1::Builder::new().writev(false).serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        BenchServer { addr, accept }
    }

    fn root(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn respond(request: Request<Incoming>, script: Arc<Script>) -> Result<Response<BenchBody>, Infallible> {
    if request.headers().contains_key(WARM_HEADER) {
        tokio::time::sleep(WARM_HOLD).await;
        let mut response = Response::new(http_body_util::Empty::new().boxed_unsync());
        *response.status_mut() = http::StatusCode::NO_CONTENT;
        return Ok(response);
    }
    // Read the request to its end so the connection stays reusable.
    let _ = request.into_body().collect().await;
    let body = match &*script {
        Script::Burst(frames) => {
            let frames = Arc::clone(frames);
            let frames = (0..frames.len()).map(move |i| Ok(Frame::data(frames[i].clone())));
            StreamBody::new(stream::iter(frames)).boxed_unsync()
        }
        Script::Paced { head, event, tail, count, every } => {
            let (head, event, tail, count, every) = (head.clone(), event.clone(), tail.clone(), *count, *every);
            let frames = stream::unfold(0, move |i| {
                let (head, event, tail) = (head.clone(), event.clone(), tail.clone());
                async move {
                    let frame = match i {
                        0 => head,
                        i if i <= count => {
                            tokio::time::sleep(every).await;
                            event
                        }
                        i if i == count + 1 => tail,
                        _ => return None,
                    };
                    Some((Ok(Frame::data(frame)), i + 1))
                }
            });
            StreamBody::new(frames).boxed_unsync()
        }
    };
    let mut response = Response::new(body);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// One chat completion chunk event, as OpenAI sends it with usage on.
fn chat_event(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\
         \"created\":1700000000,\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_44709d6fcb\",\
         \"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}],\
         \"usage\":null}}\n\n"
    )
}

fn head_event() -> String {
    chat_event(r#"{"role":"assistant","content":""}"#, "null")
}

fn content_event() -> String {
    chat_event(r#"{"content":"tok "}"#, "null")
}

/// The finish chunk, the usage chunk and `[DONE]`.
fn tail_events(tokens: usize) -> String {
    let usage = format!(
        "data: {{\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\
         \"created\":1700000000,\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_44709d6fcb\",\
         \"choices\":[],\"usage\":{{\"prompt_tokens\":9,\"completion_tokens\":{tokens},\"total_tokens\":{}}}}}\n\n",
        tokens + 9
    );
    format!("{}{usage}data: [DONE]\n\n", chat_event("{}", "\"stop\""))
}

/// A rendered healthy stream.
struct Body {
    bytes: Bytes,
    /// Where each SSE event ends.
    event_ends: Vec<usize>,
    /// Events the core parses (everything but `[DONE]`).
    parsed_events: u64,
}

fn render_body(content_events: usize) -> Body {
    let content = content_event();
    let mut text = Vec::with_capacity(content.len() * (content_events + 4));
    let mut event_ends = Vec::with_capacity(content_events + 4);
    let mut push = |event: &str| {
        text.extend_from_slice(event.as_bytes());
        event_ends.push(text.len());
    };
    push(&head_event());
    for _ in 0..content_events {
        push(&content);
    }
    for event in tail_events(content_events).split_inclusive("\n\n") {
        push(event);
    }
    // Role, content, finish and usage chunks are events; `[DONE]` ends it.
    let parsed_events = content_events as u64 + 3;
    Body { bytes: Bytes::from(text), event_ends, parsed_events }
}

/// One frame per SSE event.
fn event_frames(body: &Body) -> Vec<Bytes> {
    let mut start = 0;
    body.event_ends
        .iter()
        .map(|&end| {
            let frame = body.bytes.slice(start..end);
            start = end;
            frame
        })
        .collect()
}

/// Frames of `size` bytes, cut anywhere.
fn block_frames(body: &Body, size: usize) -> Vec<Bytes> {
    (0..body.bytes.len()).step_by(size).map(|at| body.bytes.slice(at..(at + size).min(body.bytes.len()))).collect()
}

// ---------------------------------------------------------------------------
// Part 1: throughput.
// ---------------------------------------------------------------------------

/// One timed read of a whole stream.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    secs: f64,
    bytes: u64,
    chunks: u64,
}

/// Raw reqwest: POST, then count the bytes of `bytes_stream()`.
async fn raw_stream(client: reqwest::Client, url: String, stream: u64) -> Result<Run, String> {
    let start = Instant::now();
    let mut body = send(chat_request(&client, &url, stream)).await?.bytes_stream();
    let (mut bytes, mut chunks) = (0, 0);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("raw body: {e}"))?;
        bytes += chunk.len() as u64;
        chunks += 1;
    }
    Ok(Run { secs: start.elapsed().as_secs_f64(), bytes, chunks })
}

/// The chat completions request every raw client sends, as stream `stream`.
fn chat_request(client: &reqwest::Client, url: &str, stream: u64) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header(STREAM_HEADER, stream)
        .header(ACCEPT, "text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(REQUEST_JSON)
}

/// Sends a raw request and insists on a success status.
async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, String> {
    let response = request.send().await.map_err(|e| format!("raw request: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("raw request: status {}", response.status()));
    }
    Ok(response)
}

/// Raw reqwest feeding each chunk to the chat decoder in the loop: what any
/// governor over this transport and decoder could reach at best.
async fn raw_decoded(client: reqwest::Client, url: String, expect: u64) -> Result<Run, String> {
    let start = Instant::now();
    let mut body = send(chat_request(&client, &url, 1)).await?.bytes_stream();
    let (mut decoder, mut out) = (Dialect::OpenAiChat.decoder(), Vec::new());
    let (mut bytes, mut chunks, mut decoded) = (0, 0, 0);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("raw body: {e}"))?;
        bytes += chunk.len() as u64;
        chunks += 1;
        decoder.feed(&chunk, &mut out);
        decoded += out.len() as u64;
        out.clear();
    }
    // Every event, the stop reason and `[DONE]`.
    assert_eq!(decoded, expect + 2, "decoded items");
    Ok(Run { secs: start.elapsed().as_secs_f64(), bytes, chunks })
}

/// hyper's HTTP/1 client connection driven in the task that reads the body,
/// where reqwest runs it as a task of its own and hands each chunk across:
/// what the same bytes cost without that hand-over. A fresh connection per
/// run (not timed); with `decode`, each chunk also goes through the SSE
/// parser and the chat decoder, as in [`raw_decoded`].
async fn one_task_stream(addr: SocketAddr, decode: bool, expect: u64) -> Result<Run, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| format!("one-task connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| format!("one-task nodelay: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| format!("handshake: {e}"))?;
    let request = Request::post("/v1/chat/completions")
        .header(HOST, addr.to_string())
        .header(STREAM_HEADER, 1)
        .header(ACCEPT, "text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(REQUEST_JSON.as_bytes())))
        .map_err(|e| format!("one-task request: {e}"))?;
    let mut connection = pin!(connection);
    let mut connection_open = true;
    // Polls the connection (until it ends) before whatever the task waits on.
    let mut drive = |cx: &mut Context<'_>| {
        if connection_open && connection.as_mut().poll(cx).is_ready() {
            connection_open = false;
        }
    };
    let start = Instant::now();
    let mut response = pin!(sender.send_request(request));
    let response = poll_fn(|cx| {
        drive(cx);
        response.as_mut().poll(cx)
    })
    .await
    .map_err(|e| format!("one-task response: {e}"))?;
    let mut body = response.into_body();
    let (mut decoder, mut out) = (Dialect::OpenAiChat.decoder(), Vec::new());
    let (mut bytes, mut chunks, mut decoded) = (0, 0, 0);
    while let Some(frame) = poll_fn(|cx| {
        drive(cx);
        Pin::new(&mut body).poll_frame(cx)
    })
    .await
    {
        let Ok(chunk) = frame.map_err(|e| format!("one-task body: {e}"))?.into_data() else { continue };
        bytes += chunk.len() as u64;
        chunks += 1;
        if decode {
            decoder.feed(&chunk, &mut out);
            decoded += out.len() as u64;
            out.clear();
        }
    }
    if decode {
        assert_eq!(decoded, expect + 2, "decoded items");
    }
    Ok(Run { secs: start.elapsed().as_secs_f64(), bytes, chunks })
}

/// The whole core: one call through the executor.
async fn core_stream(executor: Executor, target: Target, sink: Arc<CountingSink>, expect: u64) -> Run {
    let call = Call {
        stream: 1,
        target,
        input: CallInput { prompt: "Say hello.".to_owned(), context_tokens: Some(3), ..CallInput::default() },
        not_before: None,
    };
    let chunks = sink.chunks.load(Ordering::Relaxed);
    let start = Instant::now();
    let report = executor.run(&call, &CancellationToken::new()).await;
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(report.outcome, Outcome::Ok, "core stream failed: {:?}", report.error);
    assert_eq!(report.events, expect, "core stream parsed an unexpected number of events");
    Run { secs, bytes: report.bytes, chunks: sink.chunks.load(Ordering::Relaxed) - chunks }
}

/// An upstream whose body is the given frames, ready at once: the core
/// without the network.
struct InMemory(Arc<Vec<Bytes>>);

impl Upstream for InMemory {
    fn open<'a>(&'a self, _request: AttemptRequest<'a>) -> BoxFuture<'a, Result<UpstreamResponse, Failure>> {
        let frames = Arc::clone(&self.0);
        Box::pin(async move {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            let body = stream::iter((0..frames.len()).map(move |i| Ok(frames[i].clone().into()))).boxed();
            Ok(UpstreamResponse::new(200, headers, body))
        })
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(Dialect::OpenAiChat.decoder())
    }
}

/// The governor (with decoder and counting sink) over in-memory frames.
async fn governor_in_memory(frames: Arc<Vec<Bytes>>, settings: Arc<Settings>, expect: u64) -> Run {
    let policy = &settings.policy;
    let timers = policy.timers.for_attempt(Some(3), &policy.retry.escalation, 0, 0);
    let (target, input, cancel) = (Target::new("bench", MODEL), CallInput::default(), CancellationToken::new());
    let sink = CountingSink::default();
    let scope = AttemptScope {
        sink: &sink,
        epoch: Instant::now(),
        stream: 1,
        attempt: 1,
        deadline: None,
        cancel: &cancel,
        wall_epoch: std::time::SystemTime::now(),
        bodies: stallscope::core::policy::BodySettings::default(),
        lag: None,
        rule_headers: &[],
    };
    let request = AttemptRequest { stream: 1, attempt: 1, target: &target, credential: None, input: &input };
    let mut progress = AttemptProgress::default();
    let upstream = InMemory(frames);
    let start = Instant::now();
    run_attempt(&upstream, request, &timers, &scope, &mut progress).await.expect("in-memory attempt");
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(progress.events, expect);
    Run { secs, bytes: progress.bytes, chunks: sink.chunks.load(Ordering::Relaxed) }
}

/// The SSE parser alone over the frames.
fn parse_only(frames: &[Bytes], expect: u64) -> Run {
    let start = std::time::Instant::now();
    let mut parser = SseParser::new(SseParser::DEFAULT_MAX_LINE);
    let mut items = 0u64;
    for frame in frames {
        parser.feed(frame, &mut |_| items += 1).expect("parse");
    }
    parser.finish(&mut |_| items += 1).expect("parse");
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(items, expect + 1, "parser items");
    Run { secs, bytes: frames.iter().map(|f| f.len() as u64).sum(), chunks: frames.len() as u64 }
}

/// The parser and the chat decoder over the frames.
fn decode_only(frames: &[Bytes], expect: u64) -> Run {
    let start = std::time::Instant::now();
    let mut decoder = Dialect::OpenAiChat.decoder();
    let mut out = Vec::new();
    let mut decoded = 0u64;
    for frame in frames {
        decoder.feed(frame, &mut out);
        decoded += out.len() as u64;
        out.clear();
    }
    decoder.finish(&mut out);
    decoded += out.len() as u64;
    let secs = start.elapsed().as_secs_f64();
    // Every event, the stop reason and `[DONE]`.
    assert_eq!(decoded, expect + 2, "decoded items");
    Run { secs, bytes: frames.iter().map(|f| f.len() as u64).sum(), chunks: frames.len() as u64 }
}

/// The paths of part 1 read over the socket, in table order (the first is
/// the baseline).
const SOCKET_PATHS: [&str; 6] = [
    "raw reqwest bytes_stream (plain client)",
    "raw reqwest bytes_stream (the core's client)",
    "raw reqwest (plain) + SSE parser + chat decoder",
    "core: executor → counting sink",
    "hyper, connection driven in the reading task",
    "hyper in one task + SSE parser + chat decoder",
];

/// The paths of part 1 run in memory, in table order.
const MEMORY_PATHS: [&str; 4] = [
    "in memory: governor + decoder + sink",
    "in memory: SSE parser + chat decoder",
    "in memory: serde_json IgnoredAny per payload",
    "in memory: SSE parser only",
];

/// The `data:` payloads of the JSON events.
fn json_payloads(body: &Body) -> Vec<Bytes> {
    let mut start = 0;
    let mut payloads = Vec::with_capacity(body.event_ends.len());
    for &end in &body.event_ends {
        let event = &body.bytes[start..end];
        if let Some(json) = event.strip_prefix(b"data: ").and_then(|e| e.strip_suffix(b"\n\n"))
            && json.first() == Some(&b'{')
        {
            let at = start + 6;
            payloads.push(body.bytes.slice(at..at + json.len()));
        }
        start = end;
    }
    payloads
}

/// The floor of any full JSON read: serde_json validating and skipping each
/// payload (`IgnoredAny`), with no SSE framing and no fields kept.
fn json_floor(payloads: &[Bytes]) -> Run {
    let start = std::time::Instant::now();
    for payload in payloads {
        let parsed: serde::de::IgnoredAny = serde_json::from_slice(payload).expect("payload is JSON");
        std::hint::black_box(parsed);
    }
    let secs = start.elapsed().as_secs_f64();
    Run { secs, bytes: payloads.iter().map(|p| p.len() as u64).sum(), chunks: payloads.len() as u64 }
}

/// Median figures of one path.
struct Figures {
    label: &'static str,
    secs: f64,
    spread: (f64, f64),
    bytes: u64,
    chunks: u64,
}

impl Figures {
    fn of(label: &'static str, runs: &[Run]) -> Figures {
        let secs = median(runs.iter().map(|r| r.secs).collect());
        let chunks = median(runs.iter().map(|r| r.chunks as f64).collect()) as u64;
        Figures {
            label,
            secs,
            spread: range(runs.iter().map(|r| r.secs)),
            bytes: runs.first().map_or(0, |r| r.bytes),
            chunks,
        }
    }

    fn events_per_sec(&self, events: u64) -> f64 {
        events as f64 / self.secs
    }
}

fn throughput(server_rt: &Runtime, client_rt: &Runtime, sizes: Sizes) {
    let body = render_body(sizes.events);
    let events = body.event_ends.len() as u64;
    let expect = body.parsed_events;
    println!(
        "1. Throughput of one healthy stream: {} SSE events ({} content), {:.1} MB, median of {} runs ({} at 64 KiB)",
        events,
        sizes.events,
        body.bytes.len() as f64 / 1e6,
        sizes.reps,
        sizes.reps * 3
    );
    println!(
        "   {:<46}{:>11}{:>9}{:>10}{:>9}{:>17}{:>8}",
        "path", "events/s", "MB/s", "chunks", "B/chunk", "run s (min-max)", "vs raw"
    );
    let settings = Arc::new(settings(&[]));
    let payloads = json_payloads(&body);
    // A 64 KiB raw run takes about 10 ms: more runs steady its median.
    let chunkings = [
        ("one event per frame", event_frames(&body), sizes.reps),
        ("64 KiB frames", block_frames(&body, sizes.block), sizes.reps * 3),
    ];
    let mut summary = Vec::new();
    for (name, frames, reps) in chunkings {
        let frames = Arc::new(frames);
        let server = server_rt.block_on(BenchServer::start(Script::Burst(Arc::clone(&frames))));
        let url = format!("{}/v1/chat/completions", server.root());
        let plain = plain_client();
        let core_client = build_client(&settings.policy.transport).expect("core transport client");
        let sink = Arc::new(CountingSink::default());
        let (executor, target) =
            client_rt.block_on(async { core_executor(&settings, &server.root(), &ClientCache::new(), sink.clone()) });
        let mut socket_runs: Vec<Vec<Run>> = vec![Vec::new(); SOCKET_PATHS.len()];
        for rep in 0..=reps {
            // Every other rep runs the paths in reverse, so drift and the
            // place in a rep weigh on every path alike: a path run right
            // after CPU-bound work, or first after a pause, reads slower.
            let mut order: Vec<usize> = (0..SOCKET_PATHS.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            let mut this = [Run::default(); SOCKET_PATHS.len()];
            for path in order {
                this[path] = match path {
                    0 => spawned(client_rt, raw_stream(plain.clone(), url.clone(), 1)).expect("raw stream"),
                    1 => spawned(client_rt, raw_stream(core_client.clone(), url.clone(), 1)).expect("raw stream"),
                    2 => spawned(client_rt, raw_decoded(plain.clone(), url.clone(), expect)).expect("raw stream"),
                    3 => spawned(client_rt, core_stream(executor.clone(), target.clone(), sink.clone(), expect)),
                    4 => spawned(client_rt, one_task_stream(server.addr, false, expect)).expect("one-task stream"),
                    _ => spawned(client_rt, one_task_stream(server.addr, true, expect)).expect("one-task stream"),
                };
                assert_eq!(this[path].bytes, body.bytes.len() as u64, "a stream lost bytes");
            }
            // Run 0 warms connections, caches and the allocator.
            if rep > 0 {
                for (path, run) in socket_runs.iter_mut().zip(this) {
                    path.push(run);
                }
            }
        }
        // In memory, after the socket runs: CPU-bound work on the main
        // thread slows the socket path run next.
        let mut memory_runs: Vec<Vec<Run>> = vec![Vec::new(); MEMORY_PATHS.len()];
        for rep in 0..=reps {
            let this = [
                spawned(client_rt, governor_in_memory(Arc::clone(&frames), Arc::clone(&settings), expect)),
                decode_only(&frames, expect),
                json_floor(&payloads),
                parse_only(&frames, expect),
            ];
            if rep > 0 {
                for (path, run) in memory_runs.iter_mut().zip(this) {
                    path.push(run);
                }
            }
        }
        let paths = SOCKET_PATHS.iter().chain(&MEMORY_PATHS);
        let runs = socket_runs.iter().chain(&memory_runs);
        let rows: Vec<Figures> = paths.zip(runs).map(|(label, runs)| Figures::of(label, runs)).collect();
        let raw = &rows[0];
        println!("   {name}:");
        for row in &rows {
            println!(
                "   {:<46}{:>10.2}M{:>9.0}{:>10}{:>9.0}{:>9.3}-{:<7.3}{:>8.2}",
                row.label,
                row.events_per_sec(events) / 1e6,
                row.bytes as f64 / row.secs / 1e6,
                row.chunks,
                row.bytes as f64 / row.chunks.max(1) as f64,
                row.spread.0,
                row.spread.1,
                raw.secs / row.secs,
            );
        }
        // Each rep's core run against the same rep's raw run.
        let paired: Vec<f64> =
            socket_runs[0].iter().zip(&socket_runs[3]).map(|(raw, core)| raw.secs / core.secs).collect();
        summary.push((name, rows[3].events_per_sec(events), range(paired.iter().copied()), median(paired)));
        drop(server);
    }
    println!();
    for (name, per_sec, (low, high), ratio) in summary {
        println!(
            "   core/raw, {name:<20} {ratio:>5.2} (median of each rep's pair; {low:.2}-{high:.2}); core {:.2} M events/s",
            per_sec / 1e6
        );
    }
    println!("   goal core/raw ≥ 0.8 at one event per frame; core ≥ 5 M events/s at 64 KiB frames");
    println!();
}

// ---------------------------------------------------------------------------
// Part 2: stall-detection lateness.
// ---------------------------------------------------------------------------

/// Records, per stream, when the idle clock was last reset and when it fired.
struct LatenessSink {
    reset_ns: Vec<AtomicU64>,
    fired_ns: Vec<AtomicU64>,
    other_timers: AtomicU64,
}

impl LatenessSink {
    fn new(streams: usize) -> Self {
        LatenessSink {
            reset_ns: (0..streams).map(|_| AtomicU64::new(0)).collect(),
            fired_ns: (0..streams).map(|_| AtomicU64::new(u64::MAX)).collect(),
            other_timers: AtomicU64::new(0),
        }
    }
}

impl EventSink for LatenessSink {
    fn emit(&self, event: Event) {
        let Some(i) = usize::try_from(event.stream).ok().filter(|&i| i < self.reset_ns.len()) else { return };
        let at = u64::try_from(event.at.as_nanos()).unwrap_or(u64::MAX);
        match event.kind {
            // The governor resets the idle clock with the same `now` it
            // stamps the chunk with (headers: just before the stamp).
            EventKind::HeadersReceived { .. } | EventKind::ChunkReceived { .. } => {
                self.reset_ns[i].fetch_max(at, Ordering::Relaxed);
            }
            EventKind::TimerFired { timer: TimerKind::Idle, .. } => self.fired_ns[i].store(at, Ordering::Relaxed),
            EventKind::TimerFired { .. } => {
                self.other_timers.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// One round of stalled calls: per-call lateness in ms, the due times (ns
/// since the executor's epoch, for the matched baseline), the calls that did
/// not end on the idle timer, and the process CPU seconds of the calls.
async fn stalled_calls(root: String, sizes: Sizes) -> (Vec<f64>, Vec<u64>, usize, f64) {
    let threshold = format!("SSE_IDLE_TIMEOUT_S={}", sizes.stall_threshold.as_secs_f64());
    let settings = settings(&[threshold, "SSE_DATA_STALL_TIMEOUT_S=0".to_owned()]);
    let sink = Arc::new(LatenessSink::new(sizes.stall_streams));
    let clients = ClientCache::new();
    let (executor, target) = core_executor(&settings, &root, &clients, sink.clone());
    let clients = clients.clients(&settings.policy.transport).expect("the executor's clients");
    warm_pool(|stream| clients.for_stream(stream).clone(), &root, sizes.stall_streams).await;
    let plan = RunPlan {
        requests: sizes.stall_streams,
        concurrency: sizes.stall_streams,
        target,
        prompt: "Say hello.".to_owned(),
    };
    let cpu = cpu_seconds();
    let reports = run_calls(&executor, &plan, &CancellationToken::new(), |_| {}).await;
    // The core closes a connection it gave up on a moment later: its CPU
    // belongs to the calls.
    tokio::time::sleep(TEARDOWN_WAIT).await;
    let cpu = cpu_seconds() - cpu;
    let threshold_ns = u64::try_from(sizes.stall_threshold.as_nanos()).unwrap_or(u64::MAX);
    let (mut late, mut due, mut missing) = (Vec::new(), Vec::new(), 0);
    for report in &reports {
        let i = report.stream as usize;
        let (reset, fired) = (sink.reset_ns[i].load(Ordering::Relaxed), sink.fired_ns[i].load(Ordering::Relaxed));
        if fired == u64::MAX || reset == 0 {
            missing += 1;
            continue;
        }
        let should = reset + threshold_ns;
        late.push((fired as f64 - should as f64) / 1e6);
        due.push(should);
    }
    missing += sizes.stall_streams - reports.len();
    missing += sink.other_timers.load(Ordering::Relaxed) as usize;
    (late, due, missing, cpu)
}

/// How long after its calls end part 2 keeps counting CPU: past the core's
/// delayed close of a connection it gave up on.
const TEARDOWN_WAIT: Duration = CLOSE_DELAY.saturating_mul(2);

/// The same stalls read by raw reqwest, with the idle rule written by hand
/// (a `sleep_until` re-armed on every chunk, raced against the body): the
/// same sockets, server and teardown as the core, without the core. Returns
/// per-stream lateness in ms, the spread of the deadlines, the streams that
/// did not end on the timer, and the process CPU seconds of the streams.
async fn raw_stalls(root: String, sizes: Sizes) -> (Vec<f64>, Duration, usize, f64) {
    let client = plain_client();
    warm_pool(|_| client.clone(), &root, sizes.stall_streams).await;
    let url = format!("{root}/v1/chat/completions");
    let threshold = sizes.stall_threshold;
    let cpu = cpu_seconds();
    let tasks: Vec<_> = (0..sizes.stall_streams)
        .map(|stream| {
            let request = chat_request(&client, &url, stream as u64);
            tokio::spawn(async move {
                let response = request.send().await.ok()?;
                let mut due = Instant::now() + threshold;
                let mut body = response.bytes_stream();
                loop {
                    tokio::select! {
                        biased;
                        chunk = body.next() => match chunk {
                            Some(Ok(_)) => due = Instant::now() + threshold,
                            _ => return None,
                        },
                        () = tokio::time::sleep_until(due) => {
                            return Some((due, Instant::now().saturating_duration_since(due).as_secs_f64() * 1e3));
                        }
                    }
                }
            })
        })
        .collect();
    let (mut late, mut dues, mut missing) = (Vec::with_capacity(tasks.len()), Vec::new(), 0);
    for task in tasks {
        match task.await {
            Ok(Some((due, ms))) => {
                late.push(ms);
                dues.push(due);
            }
            _ => missing += 1,
        }
    }
    // Waited as for the core, so both count the same idle time.
    tokio::time::sleep(TEARDOWN_WAIT).await;
    let cpu = cpu_seconds() - cpu;
    let spread = match (dues.iter().min(), dues.iter().max()) {
        (Some(first), Some(last)) => last.saturating_duration_since(*first),
        _ => Duration::ZERO,
    };
    (late, spread, missing, cpu)
}

/// Bare sleeps: task `i` sleeps until `start + offsets[i]` (+ threshold);
/// returns each wake-up's lateness in ms.
async fn sleep_lateness(offsets: Vec<Duration>, threshold: Duration) -> Vec<f64> {
    let start = Instant::now();
    let tasks: Vec<_> = offsets
        .into_iter()
        .map(|offset| {
            tokio::spawn(async move {
                let due = start + threshold + offset;
                tokio::time::sleep_until(due).await;
                Instant::now().saturating_duration_since(due).as_secs_f64() * 1e3
            })
        })
        .collect();
    let mut late = Vec::with_capacity(tasks.len());
    for task in tasks {
        late.push(task.await.expect("sleep task"));
    }
    late
}

fn lateness(server_rt: &Runtime, client_rt: &Runtime, sizes: Sizes) {
    let threshold = sizes.stall_threshold;
    println!(
        "2. Stall-detection lateness: {} concurrent calls, idle timeout {:.1} s, stall after headers + 1 event, \
         {} round(s) pooled",
        sizes.stall_streams,
        threshold.as_secs_f64(),
        sizes.stall_rounds
    );
    let scenario = sim_scenario(r#"{ preamble = true }, { stall_ms = "forever" }"#);
    let (mut core, mut raw, mut together, mut matched) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut missing, mut spread, mut raw_spread, mut core_cpu, mut raw_cpu) =
        (0, Duration::ZERO, Duration::ZERO, 0.0, 0.0);
    for _ in 0..sizes.stall_rounds {
        // A fresh simulator per measurement: stream ids start over, and
        // held connections end with it.
        let sim = server_rt.block_on(SimServer::start(scenario.clone(), 0)).expect("simulator");
        let (late, due, lost, cpu) = client_rt.block_on(stalled_calls(sim.base_url(), sizes));
        server_rt.block_on(sim.shutdown());
        core.extend(late);
        missing += lost;
        core_cpu += cpu;
        let sim = server_rt.block_on(SimServer::start(scenario.clone(), 0)).expect("simulator");
        let (late, raw_deadlines, lost, cpu) = client_rt.block_on(raw_stalls(sim.base_url(), sizes));
        raw_spread = raw_spread.max(raw_deadlines);
        server_rt.block_on(sim.shutdown());
        raw.extend(late);
        missing += lost;
        raw_cpu += cpu;
        let offsets = vec![Duration::ZERO; sizes.stall_streams];
        together.extend(client_rt.block_on(sleep_lateness(offsets, threshold)));
        let first = due.iter().copied().min().unwrap_or(0);
        let offsets: Vec<Duration> = due.iter().map(|&d| Duration::from_nanos(d - first)).collect();
        spread = spread.max(offsets.iter().copied().max().unwrap_or_default());
        matched.extend(client_rt.block_on(sleep_lateness(offsets, threshold)));
    }
    let mut rows = [
        ("core: TimerFired − (last byte + timeout)", core),
        ("raw reqwest + hand-written idle sleep_until", raw),
        ("bare sleep_until, started together", together),
        ("bare sleep_until, core's deadline spread", matched),
    ];
    for (_, v) in &mut rows {
        v.sort_by(f64::total_cmp);
    }
    println!("   {:<44}{:>8}{:>10}{:>10}{:>10}{:>10}", "ms late", "n", "p50", "p99", "max", "min");
    for (label, v) in &rows {
        println!(
            "   {:<44}{:>8}{:>10.3}{:>10.3}{:>10.3}{:>10.3}",
            label,
            v.len(),
            quantile(v, 0.5),
            quantile(v, 0.99),
            quantile(v, 1.0),
            quantile(v, 0.0)
        );
    }
    let p99 = |i: usize| quantile(&rows[i].1, 0.99);
    let ratio = p99(0) / p99(2);
    println!(
        "   core p99 / bare sleep p99: {ratio:.2} (started together), {:.2} (same spread); core p99 / raw reqwest \
         p99: {:.2}",
        p99(0) / p99(3),
        p99(0) / p99(1),
    );
    let calls = (sizes.stall_streams * sizes.stall_rounds) as f64;
    println!(
        "   deadlines spread over {:.0} ms (core), {:.0} ms (raw); process CPU per stalled stream (request, stall, \
         teardown, both ends): core {:.0} µs, raw {:.0} µs",
        spread.as_secs_f64() * 1e3,
        raw_spread.as_secs_f64() * 1e3,
        core_cpu / calls * 1e6,
        raw_cpu / calls * 1e6
    );
    if missing > 0 {
        println!("   WARNING: {missing} streams did not end on the idle timer");
    }
    println!("   goal core p99 ≤ 1.5 × sleep p99: {}", verdict(ratio <= 1.5));
    println!();
}

// ---------------------------------------------------------------------------
// Part 3: CPU and peak RSS at load (client in a child process).
// ---------------------------------------------------------------------------

/// What a child run reports.
#[derive(Debug, Default, Clone, Copy)]
struct ChildResult {
    cpu_s: f64,
    wall_s: f64,
    hwm_kib: u64,
    rss_before_kib: u64,
    ok: u64,
    events: u64,
    bytes: u64,
    /// The server's CPU over the child's whole life (this process).
    server_cpu_s: f64,
    server_wall_s: f64,
}

fn run_child(mode: &str, root: &str, sizes: Sizes) -> ChildResult {
    let exe = std::env::current_exe().expect("own executable");
    let (cpu, start) = (cpu_seconds(), std::time::Instant::now());
    let output = Command::new(exe)
        .args(["--child", mode, root, &sizes.load_streams.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("start the child client");
    let (server_cpu_s, server_wall_s) = (cpu_seconds() - cpu, start.elapsed().as_secs_f64());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("CHILD ")) else {
        panic!("the {mode} child printed no result (status {}): {stdout}", output.status)
    };
    let mut result = ChildResult { server_cpu_s, server_wall_s, ..ChildResult::default() };
    for (key, value) in line.split_whitespace().filter_map(|kv| kv.split_once('=')) {
        let float = value.parse::<f64>().unwrap_or(f64::NAN);
        let int = value.parse::<u64>().unwrap_or(0);
        match key {
            "cpu_s" => result.cpu_s = float,
            "wall_s" => result.wall_s = float,
            "hwm_kib" => result.hwm_kib = int,
            "rss_before_kib" => result.rss_before_kib = int,
            "ok" => result.ok = int,
            "events" => result.events = int,
            "bytes" => result.bytes = int,
            _ => {}
        }
    }
    result
}

/// The child: `--child core|raw ROOT STREAMS`. Prints one `CHILD k=v …` line.
fn child(args: &[String]) {
    let (Some(mode), Some(root), Some(streams)) = (args.first(), args.get(1), args.get(2)) else {
        panic!("usage: --child core|raw ROOT STREAMS")
    };
    let streams: usize = streams.parse().expect("STREAMS");
    let rt = runtime("child-client");
    let (mode, root) = (mode.clone(), root.clone());
    let (cpu_s, wall_s, rss_before_kib, ok, events, bytes) = rt.block_on(async move {
        match mode.as_str() {
            "core" => {
                let sink = Arc::new(CountingSink::default());
                let calls = CoreCalls::run(&settings(&[]), &root, streams, sink.clone()).await;
                let (cpu, wall) = calls.stop();
                let (ok, bytes) = calls.tally();
                (cpu, wall, calls.rss_before_kib, ok, sink.sse.load(Ordering::Relaxed), bytes)
            }
            "recorded" => {
                // The same as "core", with every event recorded to SQLite.
                let settings = settings(&[]);
                let db = std::env::temp_dir().join(format!("stallscope-bench-{}.db", std::process::id()));
                let start = RunStart::new(Some("bench".into()), None, &settings.tunables, &[]);
                let (sink, handle) = Recorder::start(&db, start).expect("the recorder");
                let calls = CoreCalls::run(&settings, &root, streams, Arc::new(sink)).await;
                // The last commit is part of what recording costs.
                let report = RunReport::new(None, Default::default(), &calls.reports, calls.started.elapsed());
                let dropped = handle.finish(&report).expect("the recording finishes");
                let (cpu, wall) = calls.stop();
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
                }
                let (ok, bytes) = calls.tally();
                let events = calls.reports.iter().map(|r| r.events).sum::<u64>();
                eprintln!("   (recorded run: {dropped} events dropped)");
                (cpu, wall, calls.rss_before_kib, ok, events, bytes)
            }
            "raw" => {
                let client = plain_client();
                warm_pool(|_| client.clone(), &root, streams).await;
                let url = format!("{root}/v1/chat/completions");
                let rss = status_kib("VmRSS");
                let (cpu, start) = (cpu_seconds(), Instant::now());
                let tasks: Vec<_> =
                    (0..streams).map(|i| tokio::spawn(raw_stream(client.clone(), url.clone(), i as u64))).collect();
                let (mut ok, mut chunks, mut bytes) = (0, 0, 0);
                for task in tasks {
                    match task.await {
                        Ok(Ok(run)) => {
                            ok += 1;
                            chunks += run.chunks;
                            bytes += run.bytes;
                        }
                        Ok(Err(e)) => eprintln!("raw stream failed: {e}"),
                        Err(e) => eprintln!("raw task failed: {e}"),
                    }
                }
                let (cpu, wall) = (cpu_seconds() - cpu, start.elapsed().as_secs_f64());
                (cpu, wall, rss, ok, chunks, bytes)
            }
            other => panic!("unknown child mode {other}"),
        }
    });
    let hwm = status_kib("VmHWM");
    println!(
        "CHILD cpu_s={cpu_s} wall_s={wall_s} hwm_kib={hwm} rss_before_kib={rss_before_kib} ok={ok} events={events} \
         bytes={bytes}"
    );
}

fn load(server_rt: &Runtime, sizes: Sizes) {
    let seconds = f64::from(sizes.load_events) * sizes.load_every_ms as f64 / 1e3;
    println!(
        "3. Load: {} concurrent streams × {} content events every {} ms ({:.1} s); client in a child process",
        sizes.load_streams, sizes.load_events, sizes.load_every_ms, seconds
    );
    let scenario = sim_scenario(&format!(
        r#"{{ content = "tok ", count = {}, every_ms = {} }}"#,
        sizes.load_events, sizes.load_every_ms
    ));
    // A fresh simulator per child: stream ids (which pick the attempt
    // script) start over.
    let on_sim = |mode: &str| {
        let sim = server_rt.block_on(SimServer::start(scenario.clone(), 0)).expect("simulator");
        let result = run_child(mode, &sim.base_url(), sizes);
        server_rt.block_on(sim.shutdown());
        result
    };
    let (raw, core) = (on_sim("raw"), on_sim("core"));
    let light = server_rt.block_on(BenchServer::start(Script::Paced {
        head: Bytes::from(head_event()),
        event: Bytes::from(content_event()),
        tail: Bytes::from(tail_events(sizes.load_events as usize)),
        count: sizes.load_events,
        every: Duration::from_millis(sizes.load_every_ms),
    }));
    let raw_light = run_child("raw", &light.root(), sizes);
    let core_light = run_child("core", &light.root(), sizes);
    let recorded_light = run_child("recorded", &light.root(), sizes);
    drop(light);

    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "   {:<30}{:>8}{:>9}{:>9}{:>10}{:>11}{:>11}{:>10}{:>13}",
        "client (server)", "ok", "wall s", "CPU s", "cores", "peak MiB", "+run MiB", "events", "server cores"
    );
    let rows = [
        ("raw reqwest (simulator)", raw),
        ("core run_calls (simulator)", core),
        ("raw reqwest (light server)", raw_light),
        ("core run_calls (light server)", core_light),
        ("core + recorder (light server)", recorded_light),
    ];
    for (label, r) in &rows {
        println!(
            "   {:<30}{:>8}{:>9.2}{:>9.2}{:>10.3}{:>11.1}{:>11.1}{:>10}{:>13.3}",
            label,
            r.ok,
            r.wall_s,
            r.cpu_s,
            r.cpu_s / r.wall_s,
            mib(r.hwm_kib),
            mib(r.hwm_kib.saturating_sub(r.rss_before_kib)),
            r.events,
            r.server_cpu_s / r.server_wall_s,
        );
    }
    println!("   (events: SSE events seen by the core's sink, or body chunks read by raw reqwest)");
    for (server, raw, core) in [("simulator", raw, core), ("light server", raw_light, core_light)] {
        let extra_cores = core.cpu_s / core.wall_s - raw.cpu_s / raw.wall_s;
        let extra_mib = mib(core.hwm_kib) - mib(raw.hwm_kib);
        println!(
            "   {server:<13} core − raw: {extra_cores:+.3} cores ({:.2}× raw CPU), {extra_mib:+.1} MiB peak RSS \
             ({:.2}× raw); core total {:.3} cores, {:.1} MiB",
            core.cpu_s / raw.cpu_s,
            core.hwm_kib as f64 / raw.hwm_kib as f64,
            core.cpu_s / core.wall_s,
            mib(core.hwm_kib)
        );
    }
    let total = core.cpu_s / core.wall_s;
    let extra_mib = mib(core.hwm_kib) - mib(raw.hwm_kib);
    println!(
        "   goal ≤ 0.5 core for the core client: {} ({total:.3}); goal ≤ 64 MiB for the core's part: {} ({extra_mib:+.1} \
         MiB over raw, {:.1} MiB in all)",
        verdict(total <= 0.5),
        verdict(extra_mib <= 64.0),
        mib(core.hwm_kib)
    );
    let expected = sizes.load_streams as u64;
    if rows.iter().any(|(_, r)| r.ok != expected) {
        println!("   WARNING: not every stream completed (expected {expected} ok per run)");
    }
}

// ---------------------------------------------------------------------------
// Part 4: capacity.
// ---------------------------------------------------------------------------

/// How one trial of part 4 went.
#[derive(Debug, Clone, Copy, Default)]
struct Trial {
    /// Timers that fired (raw: chunk waits that timed out).
    fired: u64,
    /// Of those, marked untrustworthy by the lag probe (the core only).
    untrusted: u64,
    /// Streams that did not end `ok`.
    not_ok: usize,
    /// The largest runtime lag the probe measured (the core only).
    max_lag: Duration,
    secs: f64,
}

impl Trial {
    fn clean(&self) -> bool {
        self.fired == 0 && self.not_ok == 0
    }
}

/// One path's search for its largest clean concurrency.
struct Search {
    label: &'static str,
    trial: fn(usize) -> Trial,
    /// The largest concurrency that ran clean.
    clean: usize,
    /// The smallest that did not, and how.
    failing: Option<(usize, Trial)>,
}

impl Search {
    /// The next concurrency to try, or `None` when the search is done.
    fn next(&self, sizes: Sizes) -> Option<usize> {
        let step = sizes.capacity_step;
        let next = match self.failing {
            None if self.clean == 0 => sizes.capacity_start,
            None => (self.clean * 2).min(sizes.capacity_max),
            Some((failing, _)) => (self.clean + failing) / 2 / step * step,
        };
        (next > self.clean && self.failing.is_none_or(|(failing, _)| next < failing)).then_some(next)
    }
}

/// A fresh two-worker runtime per trial, as `stallscope run` builds one.
fn trial_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("trial runtime")
}

/// `streams` healthy calls at once through [`run_session`], recorded.
fn core_trial(streams: usize) -> Trial {
    let dir = std::env::temp_dir().join(format!("stallscope-bench-capacity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let plan = SessionPlan {
        source: RunSource::Scenario { name: "healthy".to_owned(), dialect: Dialect::OpenAiChat },
        requests: streams,
        concurrency: streams,
        prompt: "Say hello.".to_owned(),
        overrides: Vec::new(),
        edits: Vec::new(),
        recording: Some(RecordTo { db: dir.join("runs.db"), label: None, batch: None }),
        seed: Some(1),
    };
    let started = Instant::now();
    let outcome = trial_runtime()
        .block_on(run_session(&plan, &[], None, &CancellationToken::new(), |_, _| {}))
        .expect("capacity run");
    let _ = std::fs::remove_dir_all(&dir);
    let lag = outcome.lag;
    Trial {
        fired: lag.fired,
        untrusted: lag.untrusted,
        not_ok: streams - outcome.report.summary.ok,
        max_lag: lag.max_lag,
        secs: started.elapsed().as_secs_f64(),
    }
}

/// How a raw healthy stream ended.
enum RawEnd {
    Done,
    TimedOut,
    Failed,
}

/// Raw reqwest reading one healthy stream under the scenario's rule
/// written by hand: 1 s for the headers, then 0.5 s for each chunk.
async fn raw_healthy(client: reqwest::Client, url: String, stream: u64) -> RawEnd {
    let response = match tokio::time::timeout(Duration::from_secs(1), send(chat_request(&client, &url, stream))).await {
        Err(_) => return RawEnd::TimedOut,
        Ok(Err(_)) => return RawEnd::Failed,
        Ok(Ok(response)) => response,
    };
    let mut body = response.bytes_stream();
    loop {
        match tokio::time::timeout(Duration::from_millis(500), body.next()).await {
            Err(_) => return RawEnd::TimedOut,
            Ok(None) => return RawEnd::Done,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(_))) => return RawEnd::Failed,
        }
    }
}

/// `streams` healthy streams at once through raw reqwest, the simulator on
/// the same runtime.
fn raw_trial(streams: usize) -> Trial {
    let started = Instant::now();
    let (fired, not_ok) = trial_runtime().block_on(async move {
        let sim = SimServer::start(builtin("healthy").expect("the healthy scenario"), 0).await.expect("simulator");
        let (client, url) = (plain_client(), format!("{}/v1/chat/completions", sim.base_url()));
        let tasks: Vec<JoinHandle<RawEnd>> =
            (0..streams).map(|i| tokio::spawn(raw_healthy(client.clone(), url.clone(), i as u64))).collect();
        let (mut fired, mut not_ok) = (0, 0);
        for task in tasks {
            match task.await {
                Ok(RawEnd::Done) => {}
                Ok(RawEnd::TimedOut) => (fired, not_ok) = (fired + 1, not_ok + 1),
                Ok(RawEnd::Failed) | Err(_) => not_ok += 1,
            }
        }
        sim.shutdown().await;
        (fired, not_ok)
    });
    Trial { fired, not_ok, secs: started.elapsed().as_secs_f64(), ..Trial::default() }
}

fn capacity(sizes: Sizes) {
    println!(
        "4. Capacity: the most concurrent `healthy` streams that run with no timer firing (all started at once, \
         step {}, up to {})",
        sizes.capacity_step, sizes.capacity_max
    );
    let mut searches = [
        Search { label: "core (run_session, recorded)", trial: core_trial, clean: 0, failing: None },
        Search { label: "raw reqwest, 0.5 s per chunk", trial: raw_trial, clean: 0, failing: None },
    ];
    let mut turn = 0;
    loop {
        let pending: Vec<usize> = (0..searches.len()).filter(|&i| searches[i].next(sizes).is_some()).collect();
        if pending.is_empty() {
            break;
        }
        // The paths take turns, in reverse order every other round.
        let order: Vec<usize> = if turn % 2 == 0 { pending } else { pending.into_iter().rev().collect() };
        turn += 1;
        for i in order {
            let search = &mut searches[i];
            let Some(streams) = search.next(sizes) else { continue };
            let trial = (search.trial)(streams);
            println!(
                "   {:<30}{streams:>7}: {:>5} fired, {:>5} untrusted, {:>5} not ok, lag up to {:>5.0} ms, {:.1} s",
                search.label,
                trial.fired,
                trial.untrusted,
                trial.not_ok,
                trial.max_lag.as_secs_f64() * 1e3,
                trial.secs
            );
            if trial.clean() {
                search.clean = streams;
            } else {
                search.failing = Some((streams, trial));
            }
        }
    }
    for search in &searches {
        let limit = match search.failing {
            Some((streams, trial)) => format!(
                "; at {streams}: {} fired ({} untrusted), {} not ok",
                trial.fired, trial.untrusted, trial.not_ok
            ),
            None => format!(" (every trial up to {} was clean)", sizes.capacity_max),
        };
        println!("   largest clean, {:<30}{:>7}{limit}", search.label, search.clean);
    }
    let [core, raw] = &searches;
    println!("   core/raw: {:.2}", core.clean as f64 / raw.clean.max(1) as f64);
}
