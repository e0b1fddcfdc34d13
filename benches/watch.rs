//! What the canary costs: scraping `/metrics` at fleet size, and
//! `stallscope watch` between rounds and per round.
//!
//! Run with `cargo bench --bench watch` (about 40 seconds). Without
//! `--bench` (as under `cargo test --benches`) the same code runs on tiny
//! sizes as a smoke test. A plain `main`: the second part measures a child
//! process over seconds.
//!
//! 1. **Scrape time.** [`Metrics`] filled through [`CallMetrics`] with one
//!    stalled, retried call per route, for 100 providers × 3 models × 10
//!    sites (3,000 routes: every counter and histogram family gets a series
//!    per route). Measured: encoding the text in process, and a scrape over
//!    HTTP from the `/metrics` server on loopback (encoding, hyper, the
//!    socket and reading the body), each the median of 20 after a warm-up.
//!    Baseline, same run: the same two with one route, so the per-route
//!    cost reads as a ratio.
//! 2. **The canary between rounds.** The real binary, `stallscope watch
//!    --scenario healthy --requests 1 --every 15s`, unrecorded and
//!    recorded: CPU (utime + stime from `/proc/PID/stat`, 10 ms ticks) and
//!    RSS (`VmRSS`) over 10 s of idle after a round, and the CPU of one
//!    round (around its start and its line on stdout, less the idle rate
//!    over that time). The in-process simulator serving the scenario is
//!    part of the round's cost.

#[path = "common/stats.rs"]
mod stats;
use stats::median;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{AttemptEnd, Event, EventClass, EventKind, EventSink, Outcome, SleepReason};
use stallscope::core::executor::{CallReport, Hop};
use stallscope::core::failover::Target;
use stallscope::diagnosis::diagnose;
use stallscope::metrics::{Metrics, MetricsServer};

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (providers, models, sites, reps) = if full { (100, 3, 10, 20) } else { (2, 1, 1, 2) };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("1. scrape time of /metrics");
    let base = rt.block_on(scrape(1, 1, 1, reps));
    let fleet = rt.block_on(scrape(providers, models, sites, reps));
    for (name, s) in [("baseline, 1 route", &base), ("fleet", &fleet)] {
        println!(
            "   {name:<18} {:>5} routes {:>7} series {:>9.1} KiB   encode {:>8.3} ms   HTTP scrape {:>8.3} ms",
            s.routes,
            s.series,
            s.bytes as f64 / 1024.0,
            s.encode_ms,
            s.scrape_ms
        );
    }
    println!(
        "   fleet / baseline: encode {:.0}x, scrape {:.0}x for {}x the routes; per route {:.1} µs encode, {:.1} µs scrape",
        fleet.encode_ms / base.encode_ms,
        fleet.scrape_ms / base.scrape_ms,
        fleet.routes,
        fleet.encode_ms * 1e3 / fleet.routes as f64,
        fleet.scrape_ms * 1e3 / fleet.routes as f64
    );
    let (every, idle_window) = if full {
        (Duration::from_secs(15), Duration::from_secs(10))
    } else {
        (Duration::from_secs(2), Duration::from_millis(300))
    };
    println!(
        "2. the canary between rounds (stallscope watch --scenario healthy --requests 1 --every {}s)",
        every.as_secs()
    );
    for recorded in [false, true] {
        let c = canary(recorded, every, idle_window);
        println!(
            "   {:<10} idle {:>6.3} % of a core   RSS {:>7.1} MiB   one round {:>6.1} ms CPU",
            if recorded { "recorded" } else { "unrecorded" },
            c.idle_cpu_share * 100.0,
            c.rss_kib as f64 / 1024.0,
            c.round_cpu_ms
        );
    }
}

struct Scrape {
    routes: usize,
    series: usize,
    bytes: usize,
    encode_ms: f64,
    scrape_ms: f64,
}

/// A call to `first` whose first attempt stalls until the data-stall
/// timer fires, then is retried and succeeds.
fn stalled_call(stream: u64, first: &Target) -> (Vec<Event>, CallReport) {
    let at = |ms: u64, attempt: u32, kind: EventKind| Event { at: Duration::from_millis(ms), stream, attempt, kind };
    let events = vec![
        at(0, 0, EventKind::CallStarted { target: first.clone(), context_tokens: None }),
        at(0, 1, EventKind::AttemptStarted { target: first.clone(), credential: None }),
        at(40, 1, EventKind::ChunkReceived { bytes: 64 }),
        at(40, 1, EventKind::SseReceived { class: EventClass::Reasoning, chars: 8, progress: true }),
        at(540, 1, EventKind::TimerFired { timer: TimerKind::DataStall, after: Duration::from_millis(500), lag: None }),
        at(
            540,
            1,
            EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::DataStall }, stop_reason: None },
        ),
        at(
            540,
            0,
            EventKind::BackoffScheduled {
                retry: 1,
                category: Category::Timeout,
                nominal: Duration::from_millis(50),
                sleep: Duration::from_millis(50),
                reason: SleepReason::Backoff,
            },
        ),
        at(590, 2, EventKind::AttemptStarted { target: first.clone(), credential: None }),
        at(620, 2, EventKind::ChunkReceived { bytes: 64 }),
        at(620, 2, EventKind::SseReceived { class: EventClass::Content, chars: 8, progress: true }),
        at(700, 2, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) }),
        at(700, 0, EventKind::Finished { outcome: Outcome::Ok, attempts: 2, stop_reason: Some("stop".into()) }),
    ];
    let report = CallReport {
        stream,
        outcome: Outcome::Ok,
        target: first.clone(),
        attempts: 2,
        elapsed: Duration::from_millis(700),
        ttfb: Some(Duration::from_millis(30)),
        bytes: 128,
        events: 2,
        keepalives: 0,
        content: String::new(),
        stop_reason: Some("stop".into()),
        error: None,
        hops: Vec::<Hop>::new(),
        backoff_sleeps: vec![Duration::from_millis(50)],
        retry_after: vec![None],
        refused_wait: None,
        retry_counts: Default::default(),
        low_buckets: Vec::new(),
    };
    (events, report)
}

async fn scrape(providers: usize, models: usize, sites: usize, reps: usize) -> Scrape {
    let metrics = Arc::new(Metrics::new());
    for site in 0..sites {
        let sink = metrics.calls(&format!("site-{site}"));
        for provider in 0..providers {
            for model in 0..models {
                let stream = (provider * models + model) as u64;
                let (events, report) =
                    stalled_call(stream, &Target::new(format!("provider-{provider}"), format!("model-{model}")));
                let verdict = diagnose(&events);
                for event in events {
                    sink.emit(event);
                }
                sink.on_finish(&report, &verdict);
            }
        }
    }
    let text = metrics.encode();
    let series = text.lines().filter(|l| !l.starts_with('#')).count();
    let encode_ms = median((0..=reps).map(|_| timed(|| metrics.encode().len()).0).skip(1).collect());
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), Arc::clone(&metrics)).await.unwrap();
    let url = format!("http://{}/metrics", server.addr());
    let client = reqwest::Client::new();
    let mut scrapes = Vec::new();
    for _ in 0..=reps {
        let started = Instant::now();
        let body = client.get(&url).send().await.unwrap().bytes().await.unwrap();
        scrapes.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(body.len(), text.len());
    }
    server.shutdown().await;
    Scrape {
        routes: providers * models * sites,
        series,
        bytes: text.len(),
        encode_ms,
        scrape_ms: median(scrapes.into_iter().skip(1).collect()),
    }
}

fn timed<T>(work: impl FnOnce() -> T) -> (f64, T) {
    let started = Instant::now();
    let out = work();
    (started.elapsed().as_secs_f64() * 1e3, out)
}

struct Canary {
    idle_cpu_share: f64,
    rss_kib: u64,
    round_cpu_ms: f64,
}

/// A child process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU seconds (utime + stime) of a process.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| f.iter().filter_map(|t| t.parse::<f64>().ok()).sum());
    // CLK_TCK is 100 on Linux.
    ticks / 100.0
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn canary(recorded: bool, every: Duration, idle_window: Duration) -> Canary {
    let dir = std::env::temp_dir().join(format!("stallscope-bench-watch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_stallscope"));
    command
        .args(["watch", "--scenario", "healthy", "--requests", "1", "--site", "bench"])
        .arg(format!("--every={}ms", every.as_millis()))
        .args(["--metrics-addr", "127.0.0.1:0"]);
    match recorded {
        true => command.arg("--db").arg(dir.join("w.db")),
        false => command.arg("--no-record"),
    };
    let mut child = Running(command.env_clear().stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap());
    let pid = child.0.id();
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let started = Instant::now();
    let mut next_line = || lines.next().unwrap().unwrap();
    assert!(next_line().starts_with("round 0"));
    // Let the end of the round settle, then watch it idle.
    std::thread::sleep(Duration::from_millis(300));
    let (cpu_before, idle_from) = (cpu_seconds(pid), Instant::now());
    std::thread::sleep(idle_window);
    let idle_s = idle_from.elapsed().as_secs_f64();
    let idle_cpu_share = (cpu_seconds(pid) - cpu_before) / idle_s;
    let rss = rss_kib(pid);
    // Round 1 starts `every` after round 0.
    std::thread::sleep((started + every).saturating_duration_since(Instant::now() + Duration::from_millis(100)));
    let (cpu_before, from) = (cpu_seconds(pid), Instant::now());
    assert!(next_line().starts_with("round 1"));
    let round_cpu = cpu_seconds(pid) - cpu_before - idle_cpu_share * from.elapsed().as_secs_f64();
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    Canary { idle_cpu_share, rss_kib: rss, round_cpu_ms: round_cpu.max(0.0) * 1e3 }
}
