//! What `stallscope observe` adds to every chunk of an agent's stream:
//! the same stream read directly, through observe (recording everything)
//! and through nginx with `proxy_buffering off` (the Debian package;
//! skipped and said when absent), in the same run, the three taking turns
//! (in reverse order every other round), over loopback only.
//!
//! A hyper server in this file streams OpenAI chat completion chunks, one
//! SSE event per HTTP chunk every 20 ms, each stamped with when it was
//! written (nanoseconds on this process's clock); the clients are plain
//! reqwest in this process, so a chunk's latency is the time from its
//! write to its read, on one clock. Reported per path: latency p50 and
//! p99, and what the path adds over direct (the medians of each round's
//! difference); CPU per chunk of this process (server, clients and, for
//! observe, the proxy) and of nginx's process; for observe, events the
//! recorder could not keep. 1 stream and 1,000 concurrent streams.
//!
//! Run with `cargo bench --bench observe` (about a minute). Without
//! `--bench` (as under `cargo test --benches`) the same code runs on tiny
//! sizes as a smoke test.

use std::convert::Infallible;
use std::net::SocketAddr;
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
use stallscope::observe::{ObservePlan, ObserveSource, Observer};
use stallscope::session::RecordTo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The clock chunks are stamped with.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ns() -> u64 {
    EPOCH.elapsed().as_nanos() as u64
}

/// Between two chunks of a stream.
const EVERY: Duration = Duration::from_millis(20);

/// Serves `chunks` stamped chat chunks per request, one every [`EVERY`].
async fn server(chunks: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(move |_request| async move {
                    let frames = futures_util::stream::unfold(0, move |i| async move {
                        if i > chunks {
                            return None;
                        }
                        if i > 0 {
                            tokio::time::sleep(EVERY).await;
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

/// Reads `streams` streams from `base` at once; every chunk's latency.
async fn read_all(client: &reqwest::Client, base: &str, streams: usize) -> Vec<u64> {
    let url = format!("{base}/v1/chat/completions");
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let reads = (0..streams).map(|_| async {
        let response = client.post(&url).body(body).send().await.unwrap();
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

/// nginx in front of `upstream`, buffering off, HTTP/1.1 to it.
fn nginx(upstream: SocketAddr) -> Option<(Child, String)> {
    let program = ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| std::path::Path::new(p).is_file())?;
    let dir = std::env::temp_dir().join(format!("stallscope-bench-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
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
        .arg(&dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((child, format!("http://127.0.0.1:{port}")))
}

/// One path's latencies and this process's CPU over one round.
struct Measured {
    latencies: Vec<u64>,
    cpu_s: f64,
    proxy_cpu_s: f64,
}

async fn measure(client: &reqwest::Client, base: &str, streams: usize, proxy_pid: Option<u32>) -> Measured {
    let (ours, theirs) = (cpu_s("self"), proxy_pid.map_or(0.0, |p| cpu_s(&p.to_string())));
    let mut latencies = read_all(client, base, streams).await;
    latencies.sort_unstable();
    Measured {
        latencies,
        cpu_s: cpu_s("self") - ours,
        proxy_cpu_s: proxy_pid.map_or(0.0, |p| cpu_s(&p.to_string())) - theirs,
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (sizes, chunks, rounds): (&[usize], usize, usize) = if full { (&[1, 1000], 100, 3) } else { (&[1, 4], 5, 1) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let _ = *EPOCH;
        let upstream = server(chunks).await;
        let direct = format!("http://{upstream}");
        let db = std::env::temp_dir().join(format!("stallscope-bench-observe-{}.db", std::process::id()));
        let plan = ObservePlan {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
            source: ObserveSource::Upstream(direct.clone()),
            config: None,
            overrides: vec!["RECORDER_FLUSH_MS=200".into()],
            edits: Vec::new(),
            recording: Some(RecordTo { db: db.clone(), label: Some("bench".into()), batch: None }),
            service: Default::default(),
        };
        let observer = Observer::bind(&plan, &[]).await.unwrap();
        let observed = format!("http://{}", observer.addr());
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let observing = tokio::spawn(async move { observer.run(&token, None, |_| {}).await.unwrap() });
        let nginx = nginx(upstream);
        if nginx.is_none() {
            println!("nginx: skipped (not installed: apt-get install nginx-light)");
        }
        let client = reqwest::Client::builder().pool_max_idle_per_host(2000).build().unwrap();
        for &streams in sizes {
            let mut paths: Vec<(&str, String, Option<u32>)> =
                vec![("direct", direct.clone(), None), ("observe", observed.clone(), None)];
            if let Some((child, base)) = &nginx {
                paths.push(("nginx", base.clone(), Some(child.id())));
            }
            let mut results: Vec<Vec<Measured>> = paths.iter().map(|_| Vec::new()).collect();
            for round in 0..rounds {
                let order: Vec<usize> =
                    if round % 2 == 0 { (0..paths.len()).collect() } else { (0..paths.len()).rev().collect() };
                for i in order {
                    let (_, base, pid) = &paths[i];
                    results[i].push(measure(&client, base, streams, *pid).await);
                }
            }
            println!("{streams} stream(s), {chunks} chunks each, {rounds} round(s):");
            let per_chunk = (streams * chunks) as f64;
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            for (i, (name, _, _)) in paths.iter().enumerate() {
                let p50 = median(results[i].iter().map(|m| percentile(&m.latencies, 0.5)).collect());
                let p99 = median(results[i].iter().map(|m| percentile(&m.latencies, 0.99)).collect());
                let added = |p: f64| {
                    median(
                        results[i]
                            .iter()
                            .zip(&results[0])
                            .map(|(m, d)| percentile(&m.latencies, p) - percentile(&d.latencies, p))
                            .collect(),
                    )
                };
                let ours = median(results[i].iter().map(|m| m.cpu_s / per_chunk * 1e6).collect());
                let proxy = median(results[i].iter().map(|m| m.proxy_cpu_s / per_chunk * 1e6).collect());
                let read = results[i].iter().map(|m| m.latencies.len()).min().unwrap_or(0);
                println!(
                    "  {name:<8} p50 {p50:7.3} ms  p99 {p99:7.3} ms  added p50 {:+.3} ms  p99 {:+.3} ms  \
                     this process {ours:6.1} µs/chunk  proxy process {proxy:6.1} µs/chunk  ({read} chunks read)",
                    added(0.5),
                    added(0.99)
                );
            }
            let observe_cpu = median(
                results[1].iter().zip(&results[0]).map(|(o, d)| (o.cpu_s - d.cpu_s) / per_chunk * 1e6).collect(),
            );
            println!("  observe's own CPU (this process, observe minus direct): {observe_cpu:.1} µs/chunk");
        }
        cancel.cancel();
        let outcome = observing.await.unwrap();
        println!(
            "observe recorded {} calls; events the recorder could not keep: {}",
            outcome.report.streams.len(),
            outcome.dropped_events
        );
        if let Some((mut child, _)) = nginx {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&db);
    });
}
