//! What `stallscope observe` adds to every chunk of an agent's stream:
//! the same stream read directly, through observe (recording everything),
//! through `observe --guard` (the core in force: the governor takes each
//! chunk in before it goes on, re-framed) and through nginx with
//! `proxy_buffering off` (the Debian package;
//! skipped and said when absent), in the same run, the three taking turns
//! (in reverse order every other round), over loopback only. Each proxy
//! runs in a process of its own, as an operator runs it: observe is this
//! build's `stallscope` binary (release under `cargo bench`), recording to
//! a database of its own, stopped with SIGINT at the end.
//!
//! A hyper server in this file streams OpenAI chat completion chunks, one
//! SSE event per HTTP chunk at the pace each request asks for, each stamped with when it was
//! written (nanoseconds on this process's clock); the clients are plain
//! reqwest in this process, so a chunk's latency is the time from its
//! write to its read, on one clock. Reported per path: latency p50 and
//! p99, and what the path adds over direct (the medians of each round's
//! difference); CPU per chunk of this process (server and clients) and of
//! the proxy's process, both read from /proc alike; for observe, its last
//! line, how many of the calls sent through it its database holds, and the
//! events its recorder could not keep. 1 stream (a chunk every 20 ms),
//! 1,000 concurrent streams at a chunk every 100 ms (room to spare: the
//! latency a proxy adds) and at one every 20 ms (the two cores saturated
//! by the clients and the proxy: what each path costs).
//!
//! Run with `cargo bench --bench observe` (about two minutes). Without
//! `--bench` (as under `cargo test --benches`) the same code runs on tiny
//! sizes as a smoke test.
//!
//! The soak, instead: `STALLSCOPE_SOAK=1000000 cargo bench --bench
//! observe` sends that many calls (a five-chunk stream each, written at
//! once) through observe, then through the guard, 200 in flight, and
//! reads the proxy's resident memory (VmRSS) after the 10,000th call and
//! every 100,000th; at the end, whether its recorder or its would-fire
//! replay dropped anything and whether its database holds every call.
//! The goal (issue 32): memory after the last call within 16 MiB of
//! memory after the 10,000th. It never runs without `--bench`.
//!
//! The half-open bench, instead: `STALLSCOPE_HALF_OPEN=10000 cargo bench
//! --bench observe` measures 100 streams (a chunk every 20 ms) directly
//! and through observe alone, taking turns over 3 rounds, three times:
//! before, while that many idle agent connections that each sent half a
//! request head are held open against observe (run with
//! `PROXY_MAX_CONNECTIONS` twice that and its default 30 s header
//! timeout), and after the timeout has closed them, each counted. The
//! goal (issue 32): the added p99 changes by under 1 ms. The bench lifts
//! its own open-file limit to the hard limit (setrlimit; observe inherits
//! it) and says so when that is too low. It never runs without `--bench`.

#[path = "common/stats.rs"]
mod stats;
use stats::median;

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use stallscope::store::Store;
use tokio::net::TcpListener;

/// The clock chunks are stamped with.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ns() -> u64 {
    EPOCH.elapsed().as_nanos() as u64
}

/// One measured load: how many streams at once, of how many chunks, one
/// how often.
#[derive(Debug, Clone, Copy)]
struct Load {
    streams: usize,
    chunks: usize,
    every: Duration,
}

impl Load {
    /// The header a request asks for its stream's shape with.
    const HEADER: &str = "x-bench-load";

    /// `chunks,every_ms`, as the header carries it.
    fn header(self) -> String {
        format!("{},{}", self.chunks, self.every.as_millis())
    }

    /// The stream shape a request's header asks for.
    fn of(request: &hyper::Request<hyper::body::Incoming>) -> (usize, Duration) {
        let asked = request.headers().get(Load::HEADER).and_then(|v| v.to_str().ok()).unwrap_or("1,20");
        let (chunks, every) = asked.split_once(',').unwrap_or(("1", "20"));
        (chunks.parse().unwrap_or(1), Duration::from_millis(every.parse().unwrap_or(20)))
    }
}

/// Serves each request the stamped chat chunks its [`Load`] header asks
/// for.
async fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(move |request| async move {
                    let (chunks, every) = Load::of(&request);
                    let frames = futures_util::stream::unfold(0, move |i| async move {
                        if i > chunks {
                            return None;
                        }
                        // A pace of zero writes the whole stream at once.
                        if i > 0 && !every.is_zero() {
                            tokio::time::sleep(every).await;
                        }
                        let text = if i == chunks {
                            "data: [DONE]\n\n".to_owned()
                        } else {
                            format!(
                                "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":\"m\",\
                                 \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok \"}},\"finish_reason\":null}}]}}\n\n",
                                now_ns()
                            )
                        };
                        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), i + 1))
                    });
                    let body = UnsyncBoxBody::new(StreamBody::new(frames));
                    let mut response = hyper::Response::new(body);
                    response.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
                    Ok::<_, Infallible>(response)
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}

/// Reads `load`'s streams from `base` at once; every chunk's latency.
async fn read_all(client: &reqwest::Client, base: &str, load: Load) -> Vec<u64> {
    let url = format!("{base}/v1/chat/completions");
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let reads = (0..load.streams).map(|_| async {
        let response = client.post(&url).header(Load::HEADER, load.header()).body(body).send().await.unwrap();
        let mut latencies = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(Ok(chunk)) = chunks.next().await {
            let read = now_ns();
            let text = String::from_utf8_lossy(&chunk);
            for stamp in text.split("\"created\":").skip(1) {
                if let Ok(sent) = stamp.split(',').next().unwrap_or_default().parse::<u64>() {
                    latencies.push(read.saturating_sub(sent));
                }
            }
        }
        latencies
    });
    futures_util::future::join_all(reads).await.concat()
}

/// CPU seconds of process `pid` (`self` for this one), from /proc.
fn cpu_s(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime, fields 14 and 15 of the line (11 and 12 after the name).
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1e6
}

/// A proxy in a process of its own, killed if the bench ends without
/// stopping it.
struct Proxy {
    child: Child,
    base: String,
}

impl Proxy {
    /// The address it listens on.
    fn base_addr(&self) -> SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (it is freed for the proxy to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits for `child` to listen on `port`; false if it ended or never did.
fn listening(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline || !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// nginx in front of `upstream`, buffering off, HTTP/1.1 to it.
fn nginx(upstream: SocketAddr, dir: &Path) -> Option<Proxy> {
    let program = ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| Path::new(p).is_file())?;
    let port = free_port();
    let d = dir.display();
    let config = format!(
        "daemon off;\nmaster_process off;\nuser root;\nworker_rlimit_nofile 8192;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\nevents {{ worker_connections 8192; }}\nhttp {{\n  access_log off;\n\
         client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/f;\n\
         uwsgi_temp_path {d}/u;\n  scgi_temp_path {d}/s;\n  server {{\n    listen 127.0.0.1:{port} backlog=4096;\n\
         location / {{\n      proxy_pass http://{upstream};\n      proxy_http_version 1.1;\n\
         proxy_buffering off;\n      proxy_read_timeout 300s;\n    }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), config).ok()?;
    let child = Command::new(program)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut proxy = Proxy { child, base: format!("http://127.0.0.1:{port}") };
    listening(&mut proxy.child, port).then_some(proxy)
}

/// `stallscope observe` in front of `upstream`, recording into `dir`, as an
/// operator runs it: this build's binary, nothing of this environment
/// (no config, no STALLSCOPE_ variables), tunables at their defaults but
/// for `settings` (`NAME=VALUE`, as `--set` takes them). Its one line a call is read on a
/// thread of its own so the pipe never fills; the thread returns the last.
fn observe(
    upstream: SocketAddr,
    dir: &Path,
    mode: Mode,
    settings: &[String],
) -> (Proxy, std::thread::JoinHandle<Option<String>>) {
    let port = free_port();
    let name = mode.name();
    let errors = dir.join(format!("{name}.err"));
    let child = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(["observe", "--listen", &format!("127.0.0.1:{port}"), "--upstream", &format!("http://{upstream}")])
        .args(mode.flags())
        .args(settings.iter().flat_map(|setting| ["--set", setting]))
        .args(["--set", "RECORDER_FLUSH_MS=200", "--label", "bench", "--db"])
        .arg(dir.join(format!("{name}.db")))
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&errors).unwrap())
        .spawn()
        .unwrap();
    let mut proxy = Proxy { child, base: format!("http://127.0.0.1:{port}") };
    let stdout = proxy.child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).last());
    if !listening(&mut proxy.child, port) {
        panic!("stallscope {name} did not listen on {port}: {}", std::fs::read_to_string(&errors).unwrap_or_default());
    }
    (proxy, lines)
}

/// How `stallscope observe` runs in the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Watching, acting on nothing.
    Observe,
    /// `--guard`: the core in force.
    Guard,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Observe => "observe",
            Mode::Guard => "guard",
        }
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            Mode::Observe => &[],
            Mode::Guard => &["--guard"],
        }
    }
}

/// Stops observe as Ctrl-C does and waits for it; its last line.
fn stop(mut observe: Proxy, lines: std::thread::JoinHandle<Option<String>>) -> String {
    let pid = observe.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    // A guard against a hang: past it, the proxy is killed when dropped.
    let deadline = Instant::now() + Duration::from_secs(120);
    while observe.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "stallscope observe still ran 120 s after Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    }
    lines.join().unwrap().unwrap_or_default()
}

/// The events observe's last line says the recorder could not keep
/// ("…; N events the recorder fell behind on were not kept", absent when 0).
fn not_kept(last_line: &str) -> u64 {
    said(last_line, " events the recorder fell behind on were not kept")
}

/// The count before `what` in one of the clauses of observe's last line
/// (each ends at `;`, `:` or `,`, as in "…; the proxy's limits acted: 3
/// connections closed by the header timeout, …"; 0 when none says it).
fn said(last_line: &str, what: &str) -> u64 {
    let count = last_line.split([';', ':', ',']).find_map(|p| p.trim().strip_suffix(what));
    count.and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// Streams with events recorded in `db` (observe's one run).
fn recorded_streams(db: &Path) -> usize {
    let store = Store::open(db).unwrap();
    let runs = store.list_runs().unwrap();
    runs.iter().map(|run| store.streams(run.id).unwrap().len()).sum()
}

/// Lifts this process's open-file limit to its hard limit: 1,000 streams
/// hold two sockets each on every path, and observe inherits the limit.
/// The limit now in force, when it could be read.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn raise_open_files() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            }
        }
    }
    Some(limit.rlim_cur)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn raise_open_files() -> Option<u64> {
    None
}

/// One path's latencies, and the CPU of this process and of the proxy's,
/// over one round.
struct Measured {
    latencies: Vec<u64>,
    cpu_s: f64,
    proxy_cpu_s: f64,
}

async fn measure(client: &reqwest::Client, base: &str, load: Load, proxy_pid: Option<u32>) -> Measured {
    let (ours, theirs) = (cpu_s("self"), proxy_pid.map_or(0.0, |p| cpu_s(&p.to_string())));
    let mut latencies = read_all(client, base, load).await;
    latencies.sort_unstable();
    Measured {
        latencies,
        cpu_s: cpu_s("self") - ours,
        proxy_cpu_s: proxy_pid.map_or(0.0, |p| cpu_s(&p.to_string())) - theirs,
    }
}

/// A path the bench reads streams through: its name, its base URL and
/// the proxy's process (`None` for direct).
type Via<'a> = (&'a str, &'a str, Option<u32>);

/// `rounds` rounds of `load` through each of `paths`, the paths taking
/// turns (in reverse order every other round); each path's rounds.
async fn take_turns(client: &reqwest::Client, paths: &[Via<'_>], load: Load, rounds: usize) -> Vec<Vec<Measured>> {
    let mut results: Vec<Vec<Measured>> = paths.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let order: Vec<usize> =
            if round % 2 == 0 { (0..paths.len()).collect() } else { (0..paths.len()).rev().collect() };
        for i in order {
            let (_, base, pid) = paths[i];
            results[i].push(measure(client, base, load, pid).await);
        }
    }
    results
}

/// One path's figures over its rounds: each the median of the rounds'.
struct Summary {
    p50: f64,
    p99: f64,
    /// What the path adds over direct, each round against direct's in the
    /// same round.
    added_p50: f64,
    added_p99: f64,
    /// CPU per chunk, µs, of this process and of the proxy's.
    ours: f64,
    proxy: f64,
    /// The fewest chunks a round read.
    read: usize,
}

impl Summary {
    fn of(path: &[Measured], direct: &[Measured], load: Load) -> Summary {
        let per_chunk = (load.streams * load.chunks) as f64;
        let at = |p: f64| median(path.iter().map(|m| percentile(&m.latencies, p)).collect());
        let added = |p: f64| {
            median(
                path.iter()
                    .zip(direct)
                    .map(|(m, d)| percentile(&m.latencies, p) - percentile(&d.latencies, p))
                    .collect(),
            )
        };
        Summary {
            p50: at(0.5),
            p99: at(0.99),
            added_p50: added(0.5),
            added_p99: added(0.99),
            ours: median(path.iter().map(|m| m.cpu_s / per_chunk * 1e6).collect()),
            proxy: median(path.iter().map(|m| m.proxy_cpu_s / per_chunk * 1e6).collect()),
            read: path.iter().map(|m| m.latencies.len()).min().unwrap_or(0),
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Summary { p50, p99, added_p50, added_p99, ours, proxy, read } = self;
        write!(
            f,
            "p50 {p50:7.3} ms  p99 {p99:7.3} ms  added p50 {added_p50:+.3} ms  p99 {added_p99:+.3} ms  \
             this process {ours:6.1} µs/chunk  proxy process {proxy:6.1} µs/chunk  ({read} chunks read)"
        )
    }
}

/// Resident memory of process `pid` in KiB, from /proc (VmRSS).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap_or_default();
    line.trim().trim_end_matches("kB").trim().parse().unwrap_or(0)
}

/// How many calls the soak has in flight.
const SOAK_IN_FLIGHT: usize = 200;

/// Sends `calls` short streams through `base`, [`SOAK_IN_FLIGHT`] at
/// once; the proxy's memory (KiB) after the 10,000th call and every
/// 100,000th, and after the last.
async fn soak_calls(client: &reqwest::Client, base: &str, calls: u64, pid: u32) -> Vec<(u64, u64)> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    let load = Load { streams: 1, chunks: 5, every: Duration::ZERO };
    let (started, done) = (AtomicU64::new(0), AtomicU64::new(0));
    let readings = Mutex::new(Vec::new());
    let url = format!("{base}/v1/chat/completions");
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let worker = || async {
        while started.fetch_add(1, Ordering::Relaxed) < calls {
            let response = client.post(&url).header(Load::HEADER, load.header()).body(body).send().await.unwrap();
            assert!(response.status().is_success(), "{}", response.status());
            response.bytes().await.unwrap();
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            if n == 10_000 || n % 100_000 == 0 || n == calls {
                readings.lock().unwrap().push((n, rss_kib(pid)));
            }
        }
    };
    futures_util::future::join_all((0..SOAK_IN_FLIGHT).map(|_| worker())).await;
    let mut readings = readings.into_inner().unwrap();
    readings.sort_unstable();
    readings.dedup_by_key(|r| r.0);
    readings
}

/// The soak: `calls` calls through observe, then the guard, each in a
/// process of its own; its figures printed, and every call checked to be
/// recorded with nothing dropped.
fn soak(calls: u64) {
    let _ = raise_open_files();
    let dir = std::env::temp_dir().join(format!("stallscope-bench-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let upstream = server().await;
        let client = reqwest::Client::builder().pool_max_idle_per_host(2 * SOAK_IN_FLIGHT).build().unwrap();
        for mode in [Mode::Observe, Mode::Guard] {
            let name = mode.name();
            let (proxy, lines) = observe(upstream, &dir, mode, &[]);
            let pid = proxy.child.id();
            let (rss_at_start, clock) = (rss_kib(pid), Instant::now());
            let readings = soak_calls(&client, &proxy.base, calls, pid).await;
            let took = clock.elapsed();
            let last_line = stop(proxy, lines);
            let recorded = recorded_streams(&dir.join(format!("{name}.db")));
            let (dropped, unreplayed) = (
                not_kept(&last_line),
                said(&last_line, " calls the would-fire replay fell behind on were not replayed"),
            );
            println!(
                "{name}: {calls} calls, {SOAK_IN_FLIGHT} in flight, in {:.0} s ({:.0} calls/s); RSS {:.1} MiB at start",
                took.as_secs_f64(),
                calls as f64 / took.as_secs_f64(),
                rss_at_start as f64 / 1024.0
            );
            for (n, kib) in &readings {
                println!("  after {n:>9} calls  RSS {:7.1} MiB", *kib as f64 / 1024.0);
            }
            let at = |n: u64| readings.iter().find(|r| r.0 == n).map(|r| r.1 as i64);
            if let (Some(early), Some(last)) = (at(10_000), readings.last()) {
                let grew = (last.1 as i64 - early) as f64 / 1024.0;
                let verdict = if grew <= 16.0 { "within" } else { "NOT within" };
                println!("  RSS after the last call {grew:+.1} MiB from after the 10,000th: {verdict} the 16 MiB goal");
            }
            println!("  last line: {last_line}");
            println!(
                "  recorded {recorded} of {calls} calls; events the recorder could not keep: {dropped}; calls not \
                 replayed: {unreplayed}"
            );
            assert_eq!(recorded as u64, calls, "every call {name} passed on is recorded");
            assert_eq!((dropped, unreplayed), (0, 0), "{name} dropped nothing");
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The real streams the half-open bench measures: 100 at once, each 100
/// chunks, one every 20 ms.
const HALF_OPEN_LOAD: Load = Load { streams: 100, chunks: 100, every: Duration::from_millis(20) };

/// Observe's header timeout in the half-open bench: its default, said
/// here so the bench knows when the connections are due to be closed.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// What each half-open connection sends: half a request head, never
/// finished.
const HALF_HEAD: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-ty";

/// Open file descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |fds| fds.count())
}

/// Opens `count` connections to `addr`, each sending [`HALF_HEAD`] and
/// then waiting to be closed, 64 connecting at a time; each task returns
/// how long its connection was held after it sent, and `closed` counts
/// them as they close.
fn half_open_connections(
    addr: SocketAddr,
    count: usize,
    sent: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
    closed: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> tokio::task::JoinSet<Duration> {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connecting = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
    let mut connections = tokio::task::JoinSet::new();
    for _ in 0..count {
        let (connecting, sent, closed) = (connecting.clone(), sent.clone(), closed.clone());
        connections.spawn(async move {
            let permit = connecting.acquire_owned().await.unwrap();
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("a half-open connection to observe");
            stream.write_all(HALF_HEAD).await.expect("half a request head written");
            let since = Instant::now();
            sent.fetch_add(1, Ordering::Relaxed);
            drop(permit);
            let mut answer = [0u8; 1024];
            while matches!(stream.read(&mut answer).await, Ok(n) if n > 0) {}
            closed.fetch_add(1, Ordering::Relaxed);
            since.elapsed()
        });
    }
    connections
}

/// The half-open bench: 100 real streams' added p99 through observe
/// alone, then while `connections` idle agent connections, each having
/// sent half a request head, are held open against it, then again once
/// its header timeout has closed them all.
fn half_open(connections: usize) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let limit = raise_open_files();
    // Each process holds every half-open connection's socket and each
    // real stream's two, with room for the rest.
    let needed = connections + 2 * HALF_OPEN_LOAD.streams + 200;
    if let Some(limit) = limit {
        assert!(
            limit >= needed as u64,
            "STALLSCOPE_HALF_OPEN={connections} needs {needed} open files in this process and in observe's; \
             the limit here is {limit} (raise the hard limit, `ulimit -Hn`, or ask for fewer)"
        );
    }
    let rounds = 3;
    let dir = std::env::temp_dir().join(format!("stallscope-bench-half-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let _ = *EPOCH;
        let upstream = server().await;
        let direct = format!("http://{upstream}");
        let settings = [
            format!("PROXY_MAX_CONNECTIONS={}", 2 * connections),
            format!("PROXY_HEADER_TIMEOUT_S={}", HEADER_TIMEOUT.as_secs()),
        ];
        let (proxy, lines) = observe(upstream, &dir, Mode::Observe, &settings);
        let pid = proxy.child.id();
        let idle_fds = open_fds(pid);
        // Idle keep-alive connections are let go well within the header
        // timeout, so it closes only the half-open ones.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(2 * HALF_OPEN_LOAD.streams)
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let paths: [Via; 2] = [("direct", &direct, None), ("observe", &proxy.base, Some(pid))];
        let run = |phase: &'static str| {
            let (client, paths) = (&client, &paths);
            async move {
                let results = take_turns(client, paths, HALF_OPEN_LOAD, rounds).await;
                let summary = Summary::of(&results[1], &results[0], HALF_OPEN_LOAD);
                println!(
                    "  {phase:<28} direct p99 {:7.3} ms  observe {summary}",
                    Summary::of(&results[0], &results[0], HALF_OPEN_LOAD).p99
                );
                summary.added_p99
            }
        };
        let Load { streams, chunks, every } = HALF_OPEN_LOAD;
        println!(
            "{streams} streams, {chunks} chunks each, one every {every:?}, {rounds} round(s) a phase; {connections} \
             half-open connections, observe's header timeout {HEADER_TIMEOUT:?}:"
        );
        let before = run("before").await;
        let (sent, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let clock = Instant::now();
        let mut held = half_open_connections(proxy.base_addr(), connections, &sent, &closed);
        let deadline = clock + Duration::from_secs(60);
        while sent.load(Ordering::Relaxed) < connections || open_fds(pid) < idle_fds + connections {
            assert!(
                Instant::now() < deadline,
                "observe held {} sockets of {connections} half-open connections ({} sent) 60 s after they began",
                open_fds(pid).saturating_sub(idle_fds),
                sent.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let opened = clock.elapsed();
        let during = run("while held").await;
        let closed_during = closed.load(Ordering::Relaxed);
        let measured = clock.elapsed();
        // Each is due to be closed a header timeout after it sent; a
        // bound past that, the rest count as still held.
        let mut times = Vec::new();
        let bound = tokio::time::Instant::now() + HEADER_TIMEOUT + Duration::from_secs(30);
        while let Ok(Some(Ok(time))) = tokio::time::timeout_at(bound, held.join_next()).await {
            times.push(time);
        }
        held.abort_all();
        let after = run("after they were closed").await;
        let last_line = stop(proxy, lines);
        let by_timeout = said(&last_line, " connections closed by the header timeout");
        times.sort_unstable();
        println!(
            "  {connections} half-open connections held by observe {:.1} s after they began; the measurement \
             while held ended {:.1} s after they began, {closed_during} closed before it did",
            opened.as_secs_f64(),
            measured.as_secs_f64()
        );
        if let (Some(first), Some(last)) = (times.first(), times.last()) {
            println!(
                "  {} closed by observe, held {:.1}–{:.1} s after each sent; its last line counts {by_timeout} \
                 closed by the header timeout",
                times.len(),
                first.as_secs_f64(),
                last.as_secs_f64()
            );
        }
        println!(
            "  added p99 while held {:+.3} ms against {:+.3} before ({:+.3} ms) and {:+.3} after ({:+.3} ms): \
             the goal is a change under 1 ms",
            during,
            before,
            during - before,
            after,
            during - after
        );
        println!("  last line: {last_line}");
        let recorded = recorded_streams(&dir.join("observe.db"));
        assert_eq!(recorded, 3 * rounds * HALF_OPEN_LOAD.streams, "every real stream is recorded");
        assert_eq!(times.len(), connections, "every half-open connection was closed");
        assert_eq!(by_timeout, connections as u64, "observe counted each closed by the header timeout");
    });
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    if let (true, Ok(calls)) = (full, std::env::var("STALLSCOPE_SOAK")) {
        let calls = calls.parse().expect("STALLSCOPE_SOAK is a number of calls, e.g. 1000000");
        return soak(calls);
    }
    if let (true, Ok(connections)) = (full, std::env::var("STALLSCOPE_HALF_OPEN")) {
        let connections = connections.parse().expect("STALLSCOPE_HALF_OPEN is a number of connections, e.g. 10000");
        return half_open(connections);
    }
    let load = |streams, chunks, every_ms| Load { streams, chunks, every: Duration::from_millis(every_ms) };
    // At 1,000 streams, a chunk every 100 ms leaves this machine's two
    // cores room (what a proxy adds to a chunk's latency); one every 20 ms
    // saturates them with the clients' load (what each path costs).
    let (loads, rounds) = match full {
        true => (vec![load(1, 100, 20), load(1000, 50, 100), load(1000, 100, 20)], 3),
        false => (vec![load(1, 5, 20), load(4, 5, 20)], 1),
    };
    let _ = raise_open_files();
    let dir = std::env::temp_dir().join(format!("stallscope-bench-observe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let _ = *EPOCH;
        let upstream = server().await;
        let direct = format!("http://{upstream}");
        let (observe_proxy, observe_lines) = observe(upstream, &dir, Mode::Observe, &[]);
        let (guard, guard_lines) = observe(upstream, &dir, Mode::Guard, &[]);
        let nginx = nginx(upstream, &dir);
        if nginx.is_none() {
            println!("nginx: skipped (not installed: apt-get install nginx-light)");
        }
        let client = reqwest::Client::builder().pool_max_idle_per_host(2000).build().unwrap();
        for &load in &loads {
            let mut paths: Vec<Via> = vec![
                ("direct", &direct, None),
                ("observe", &observe_proxy.base, Some(observe_proxy.child.id())),
                ("guard", &guard.base, Some(guard.child.id())),
            ];
            if let Some(proxy) = &nginx {
                paths.push(("nginx", &proxy.base, Some(proxy.child.id())));
            }
            let results = take_turns(&client, &paths, load, rounds).await;
            let Load { streams, chunks, every } = load;
            println!("{streams} stream(s), {chunks} chunks each, one every {every:?}, {rounds} round(s):");
            for (i, (name, _, _)) in paths.iter().enumerate() {
                println!("  {name:<8} {}", Summary::of(&results[i], &results[0], load));
            }
        }
        let calls = loads.iter().map(|l| l.streams).sum::<usize>() * rounds;
        for (mode, proxy, lines) in [(Mode::Observe, observe_proxy, observe_lines), (Mode::Guard, guard, guard_lines)] {
            let name = mode.name();
            let last_line = stop(proxy, lines);
            let recorded = recorded_streams(&dir.join(format!("{name}.db")));
            println!("{name}'s last line: {last_line}");
            println!(
                "{name} recorded {recorded} of the {calls} calls sent through it; events the recorder could not keep: {}",
                not_kept(&last_line)
            );
            assert_eq!(recorded, calls, "every call {name} passed on is recorded");
        }
        drop(nginx);
    });
    let _ = std::fs::remove_dir_all(&dir);
}
