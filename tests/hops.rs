//! Which hop cut, timed out or buffered a stream, against the
//! intermediaries operators meet, from Debian's packages: nginx, HAProxy,
//! Squid and Caddy, each started by the test on loopback with a config the
//! test writes, in front of the simulator, with its timeouts scaled down to
//! seconds; and `probe --compare` telling which path a fault follows.
//!
//! Each runs whenever its program is present; where one is absent the test
//! says so and passes, so a fresh checkout's `cargo test` works; `.ci/run`
//! installs them all and sets `STALLSCOPE_REQUIRE_EXTERNAL=1`, which turns
//! a missing program into a failure.

mod programs;

use programs::{Running, STARTING, external, free_port, listening, on_path, temp_dir};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use stallscope::config::{ConfigFile, Layers, Settings};
use stallscope::core::event::{EventClass, EventKind, Outcome, VecSink};
use stallscope::core::executor::{Call, CallReport, Origin};
use stallscope::core::failover::Target;
use stallscope::core::transport::ClientCache;
use stallscope::core::upstream::CallInput;
use stallscope::diagnosis::{Diagnosis, RunDiagnosis, VerdictKind, diagnose, summarize};
use stallscope::probe::{ProbePlan, probe};
use stallscope::providers::Dialect;
use stallscope::providers::setup::ProviderConfig;
use stallscope::run::executor;
use stallscope::sim::{Scenario, SimServer};
use tokio_util::sync::CancellationToken;

/// A Debian program, on the `PATH` or where its package puts it.
fn program(name: &str) -> Option<PathBuf> {
    let installed = ["/usr/sbin", "/usr/bin"].iter().map(|dir| Path::new(dir).join(name)).find(|p| p.is_file());
    external(name, on_path(name).or(installed))
}

/// The hop `name` started on a free loopback port, with a config file
/// `file` in a scratch directory written by `config` (given the port and
/// the directory), its arguments added by `args` (given the directory and
/// the file); once it listens.
fn start(
    name: &str,
    file: &str,
    config: impl FnOnce(u16, &Path) -> String,
    args: impl FnOnce(&mut Command, &Path, &Path),
) -> Option<(Running, u16)> {
    let program = program(name)?;
    let dir = temp_dir(&format!("{name}-{}", free_port()));
    let _starting = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    let port = free_port();
    let path = dir.join(file);
    std::fs::write(&path, config(port, &dir)).unwrap();
    let mut command = Command::new(program);
    args(&mut command, &dir, &path);
    Some((listening(&mut command, port), port))
}

/// The simulator playing `scenario` (TOML, as `assets/scenarios/`), and
/// its address (`127.0.0.1:PORT`).
async fn simulator(scenario: &str) -> (SimServer, String) {
    let server = SimServer::start(Scenario::from_toml(scenario, "hops.toml").unwrap(), 0).await.unwrap();
    let authority = server.base_url().trim_start_matches("http://").to_owned();
    (server, authority)
}

/// Three tokens, then silence for good: a stream a hop's idle timer cuts.
const GOES_QUIET: &str = r#"
[[attempts]]
steps = [{ content = "tok ", count = 3, every_ms = 25 }, { stall_ms = "forever" }]
"#;

/// Forty tokens 50 ms apart: a reply of two seconds, which a buffering hop
/// hands over at its end.
const LONG_REPLY: &str = r#"
[[attempts]]
steps = [{ content = "token ", count = 40, every_ms = 50 }]
"#;

/// An answer whose headers take 3 s: a hop with a shorter timeout on
/// its upstream answers for it.
const SLOW_ANSWER: &str = r#"
[[attempts]]
headers_delay_ms = 3000
steps = [{ content = "tok ", count = 10, every_ms = 25 }]
"#;

/// The calls of one run and their verdicts.
struct Run {
    reports: Vec<CallReport>,
    verdicts: Vec<(u64, Diagnosis)>,
    summary: RunDiagnosis,
    sink: Arc<VecSink>,
}

impl Run {
    fn verdict(&self, stream: u64) -> &Diagnosis {
        &self.verdicts.iter().find(|(s, _)| *s == stream).unwrap().1
    }

    /// How long stream `stream`'s content took to arrive, first to last.
    fn content_spread(&self, stream: u64) -> Duration {
        let at: Vec<Duration> = self
            .sink
            .events()
            .into_iter()
            .filter(|e| {
                e.stream == stream && matches!(e.kind, EventKind::SseReceived { class: EventClass::Content, .. })
            })
            .map(|e| e.at)
            .collect();
        at.last().copied().unwrap_or_default().saturating_sub(at.first().copied().unwrap_or_default())
    }
}

/// `streams` calls at once to `row` under the tunables `sets`, each
/// diagnosed, and the run's summary.
async fn calls(row: ProviderConfig, streams: u64, sets: &[&str]) -> Run {
    let overrides: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
    let layers = Layers { config: ConfigFile::None, scenario: None, overrides: &overrides, edits: &[] };
    let settings = Settings::load(layers, Vec::<(String, String)>::new()).unwrap();
    let sink = Arc::new(VecSink::new());
    let target = Target::new(&row.name, "m");
    let executor = executor(&settings, &[row], &ClientCache::new(), sink.clone(), Origin::now(0), |_| None).unwrap();
    let cancel = CancellationToken::new();
    let reports = join_all((1..=streams).map(|stream| {
        let call = Call {
            stream,
            target: target.clone(),
            input: CallInput { prompt: "hi".into(), context_tokens: Some(2), ..CallInput::default() },
            not_before: None,
        };
        let (executor, cancel) = (&executor, &cancel);
        async move { executor.run(&call, cancel).await }
    }))
    .await;
    let events = sink.events();
    let verdicts: Vec<(u64, Diagnosis)> = (1..=streams)
        .map(|stream| (stream, diagnose(&events.iter().filter(|e| e.stream == stream).cloned().collect::<Vec<_>>())))
        .collect();
    let summary = summarize(&verdicts);
    Run { reports, verdicts, summary, sink }
}

/// A provider row reaching the simulator at `base_url`, through `proxy`.
fn row(base_url: &str, proxy: Option<String>) -> ProviderConfig {
    ProviderConfig { proxy, ..ProviderConfig::at_root("hop", Dialect::OpenAiChat, base_url, "m") }
}

/// Tunables that leave the cutting to the hop: our idle and data-stall
/// timers far above its, no fallback.
const HOP_CUTS: [&str; 3] = ["SSE_IDLE_TIMEOUT_S=30", "SSE_DATA_STALL_TIMEOUT_S=30", "FALLBACK_MODELS=off"];

/// Every stream of `run` was cut after a silence within `silences`, and
/// the run's one group says the cuts share it; returns that sentence.
fn cut_alike(run: &Run, silences: std::ops::Range<Duration>) -> &str {
    for (stream, d) in &run.verdicts {
        assert_eq!(d.kind, VerdictKind::IdleCut, "stream {stream}: {}", d.summary);
        let idle = Duration::from_secs_f64(d.basis.idle_ms.unwrap() / 1000.0);
        assert!(silences.contains(&idle), "stream {stream}: cut after {idle:?} of silence, not {silences:?}");
    }
    assert!(run.reports.iter().all(|r| r.outcome == Outcome::Partial), "content had streamed: kept as partial");
    assert_eq!(run.summary.groups.len(), 1, "{:?}", run.summary.groups);
    let summary = &run.summary.groups[0].summary;
    let streams = run.verdicts.len();
    assert!(summary.starts_with(&format!("{streams} of {streams} streams: idle cut")), "{summary}");
    assert!(summary.contains(" s of silence (±0."), "{summary}");
    assert!(summary.contains("a hop on this path closes streams idle for "), "{summary}");
    summary
}

/// nginx and HAProxy set to 2 s cut a little early: nginx moves a running
/// timer only by 300 ms or more, HAProxy's runs from its last read.
const TWO_SECONDS: std::ops::Range<Duration> = Duration::from_millis(1_700)..Duration::from_millis(2_300);

/// nginx as a reverse proxy to `upstream` (`host:port`), one process in the
/// foreground, its location given `directives` (`proxy_read_timeout 2s;`).
fn start_nginx(upstream: &str, directives: &str) -> Option<(Running, u16)> {
    let config = |port, dir: &Path| {
        let d = dir.display();
        format!(
            "daemon off;\nmaster_process off;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://{upstream};\n\
                   {directives}\n    }}\n  }}\n}}\n"
        )
    };
    start("nginx", "nginx.conf", config, |command, dir, file| {
        command.arg("-p").arg(dir).arg("-c").arg(file);
    })
}

/// nginx (`proxy_read_timeout 2s`, buffering off) cuts three quiet streams
/// after 2 s of silence each: idle cuts, the run's group saying they share
/// the silence and naming nginx's knob.
#[tokio::test]
async fn nginx_cuts_quiet_streams_after_its_read_timeout() {
    let (sim, upstream) = simulator(GOES_QUIET).await;
    let Some((_nginx, port)) =
        start_nginx(&upstream, "proxy_http_version 1.1; proxy_read_timeout 2s; proxy_buffering off;")
    else {
        return;
    };
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 3, &HOP_CUTS).await;
    let summary = cut_alike(&run, TWO_SECONDS);
    assert!(
        summary.contains("closes streams idle for 2 s (nginx's `proxy_read_timeout`, 60.0 s unless set)"),
        "{summary}"
    );
    let suggestion = run.verdict(1).suggestion.clone().unwrap_or_default();
    assert!(suggestion.starts_with("nginx (`server: nginx/"), "{suggestion}");
    sim.shutdown().await;
}

/// nginx in front of a backend whose first answer takes 3 s, giving up
/// after 1 s: its own 504 page is a gateway timeout, named nginx with the
/// knob that ran out, not the provider's server error; the retry, answered
/// in 200 ms, streams through.
#[tokio::test]
async fn an_nginx_504_is_a_gateway_timeout_named_for_nginx() {
    let (sim, upstream) = simulator(&format!("{SLOW_ANSWER}{}", SLOW_ANSWER.replace("3000", "200"))).await;
    let Some((_nginx, port)) = start_nginx(&upstream, "proxy_http_version 1.1; proxy_read_timeout 1s;") else { return };
    let sets = ["FALLBACK_MODELS=off", "PROVIDER_STREAM_BACKOFF_S=0.05"];
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 1, &sets).await;
    let (r, d) = (&run.reports[0], run.verdict(1));
    assert_eq!((r.outcome, r.attempts), (Outcome::Ok, 2), "{:?}", r.error);
    assert_eq!(d.kind, VerdictKind::GatewayTimeout, "{}", d.summary);
    assert!(d.summary.contains("nginx answered HTTP 504 after 1.0"), "{}", d.summary);
    let suggestion = d.suggestion.clone().unwrap_or_default();
    assert!(suggestion.contains("(nginx (`server: nginx/"), "{suggestion}");
    assert!(suggestion.contains("raise its `proxy_read_timeout`"), "{suggestion}");
    sim.shutdown().await;
}

/// HAProxy in HTTP mode in front of `upstream`, its server-side
/// inactivity timeout `timeout_server` (`2s`).
fn start_haproxy(upstream: &str, timeout_server: &str) -> Option<(Running, u16)> {
    let config = |port, _: &Path| {
        format!(
            "global\n  maxconn 200\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 60s\n\
               timeout server {timeout_server}\nfrontend front\n  bind 127.0.0.1:{port}\n  default_backend sim\n\
             backend sim\n  server sim {upstream}\n"
        )
    };
    start("haproxy", "haproxy.cfg", config, |command, _, file| {
        command.arg("-db").arg("-f").arg(file);
    })
}

/// HAProxy (`timeout server 2s`) cuts quiet streams after 2 s of silence:
/// idle cuts grouped by the silence. HAProxy sends no header of its own,
/// so no hop is named: the silence alone says a hop's timer.
#[tokio::test]
async fn haproxy_cuts_quiet_streams_after_its_server_timeout() {
    let (sim, upstream) = simulator(GOES_QUIET).await;
    let Some((_haproxy, port)) = start_haproxy(&upstream, "2s") else { return };
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 3, &HOP_CUTS).await;
    let summary = cut_alike(&run, TWO_SECONDS);
    assert!(summary.contains("closes streams idle for 2 s"), "{summary}");
    assert!(!summary.contains("server:"), "{summary}");
    let suggestion = run.verdict(1).suggestion.clone().unwrap_or_default();
    assert!(suggestion.starts_with("no header names a hop"), "{suggestion}");
    sim.shutdown().await;
}

/// HAProxy's own 504, before the provider's headers, is a gateway timeout
/// (its page, not the provider's JSON), and the same wait on both attempts
/// says so.
#[tokio::test]
async fn a_haproxy_504_is_a_gateway_timeout() {
    let (sim, upstream) = simulator(SLOW_ANSWER).await;
    let Some((_haproxy, port)) = start_haproxy(&upstream, "1s") else { return };
    let sets = ["FALLBACK_MODELS=off", "PROVIDER_STREAM_BACKOFF_S=0.05", "RETRY_BUDGET_SERVER_ERROR=1"];
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 1, &sets).await;
    let (r, d) = (&run.reports[0], run.verdict(1));
    assert_eq!((r.outcome, r.attempts), (Outcome::Failed, 2), "{:?}", r.error);
    assert_eq!(d.kind, VerdictKind::GatewayTimeout, "{}", d.summary);
    assert!(d.summary.contains("a gateway answered HTTP 504 after 1.0"), "{}", d.summary);
    assert!(d.summary.contains("(2 attempts alike, each after 1.0"), "{}", d.summary);
    assert_eq!(d.tunable, None, "the hop's timeout is the fix, not our retries");
    sim.shutdown().await;
}

/// Squid as a forward proxy for plain HTTP (where it can add its `Via`),
/// giving up on a server silent for `read_timeout` (`2 seconds`).
fn start_squid(read_timeout: &str) -> Option<(Running, u16)> {
    let config = |port, dir: &Path| {
        let d = dir.display();
        format!(
            "http_port 127.0.0.1:{port}\nacl local src 127.0.0.1\nhttp_access allow local\nhttp_access deny all\n\
             cache deny all\ncache_mem 0 MB\nread_timeout {read_timeout}\npid_filename {d}/squid.pid\n\
             access_log none\ncache_log {d}/cache.log\ncoredump_dir {d}\nshutdown_lifetime 0 seconds\n\
             visible_hostname proxy.test\n"
        )
    };
    start("squid", "squid.conf", config, |command, dir, file| {
        // Squid drops root for its own user, which must reach its files.
        let _ = Command::new("chmod").arg("-R").arg("a+rwX").arg(dir).status();
        command.arg("-N").arg("-f").arg(file);
    })
}

/// Through Squid a healthy stream streams (token by token, never blamed),
/// and a quiet one is cut after Squid's `read_timeout`, named by its `Via`.
#[tokio::test]
async fn squid_streams_and_cuts_quiet_streams_after_its_read_timeout() {
    let Some((_squid, port)) = start_squid("2 seconds") else { return };
    let proxy = Some(format!("http://127.0.0.1:{port}"));

    let (sim, upstream) = simulator(LONG_REPLY).await;
    let run = calls(row(&format!("http://{upstream}"), proxy.clone()), 1, &HOP_CUTS).await;
    let d = run.verdict(1);
    assert_eq!((run.reports[0].outcome, d.kind), (Outcome::Ok, VerdictKind::Healthy), "{}", d.summary);
    assert!(d.basis.peer.iter().any(|(n, v)| n == "via" && v.contains("squid")), "{:?}", d.basis.peer);
    assert!(run.content_spread(1) >= Duration::from_secs(1), "Squid held the tokens back");
    sim.shutdown().await;

    let (sim, upstream) = simulator(GOES_QUIET).await;
    let run = calls(row(&format!("http://{upstream}"), proxy), 2, &HOP_CUTS).await;
    // Squid looks for timeouts on a coarse clock: its 2 s cut after 2.8 s
    // and 3.8 s in trials.
    let summary = cut_alike(&run, Duration::from_secs(2)..Duration::from_millis(4_300));
    assert!(summary.contains("behind the same proxy (via: 1.1 proxy.test (squid/"), "{summary}");
    assert!(summary.contains("(Squid's `read_timeout`, 900 s unless set)"), "{summary}");
    sim.shutdown().await;
}

/// Caddy as a reverse proxy in front of `upstream`, its `reverse_proxy`
/// block given `options` (`""`: its defaults).
fn start_caddy(upstream: &str, options: &str) -> Option<(Running, u16)> {
    let config = |port, _: &Path| {
        format!(
            "{{\n  admin off\n  auto_https off\n}}\nhttp://127.0.0.1:{port} {{\n  reverse_proxy {upstream} {{\n\
             {options}\n  }}\n}}\n"
        )
    };
    start("caddy", "Caddyfile", config, |command, dir, file| {
        command
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(file)
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir);
    })
}

/// Caddy flushes an event stream as it comes: healthy, never blamed,
/// though its `server` header names it.
#[tokio::test]
async fn caddy_streams_an_event_stream_unbuffered() {
    let (sim, upstream) = simulator(LONG_REPLY).await;
    let Some((_caddy, port)) = start_caddy(&upstream, "") else { return };
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 1, &HOP_CUTS).await;
    let d = run.verdict(1);
    assert_eq!((run.reports[0].outcome, d.kind), (Outcome::Ok, VerdictKind::Healthy), "{}", d.summary);
    assert!(d.basis.peer.iter().any(|(n, v)| n == "server" && v == "Caddy"), "{:?}", d.basis.peer);
    assert!(run.content_spread(1) >= Duration::from_secs(1), "Caddy held the tokens back");
    sim.shutdown().await;
}

/// Caddy has no read timeout unless given one; with its transport's
/// `read_timeout 2s` it cuts quiet streams after 2 s of silence, and its
/// `server` header names it.
#[tokio::test]
async fn caddy_with_a_read_timeout_cuts_quiet_streams() {
    let (sim, upstream) = simulator(GOES_QUIET).await;
    let Some((_caddy, port)) = start_caddy(&upstream, "transport http {\n      read_timeout 2s\n    }") else { return };
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 3, &HOP_CUTS).await;
    let summary = cut_alike(&run, TWO_SECONDS);
    assert!(summary.contains("from the same server (server: Caddy)"), "{summary}");
    assert!(summary.contains("closes streams idle for 2 s (Caddy, named by `server: Caddy`)"), "{summary}");
    sim.shutdown().await;
}

/// nginx with its defaults (buffering on, HTTP/1.0 to the upstream) holds
/// a two-second reply back and lets it go a 4 KiB buffer at a time: proxy
/// buffering, naming nginx and its knob. With TTFB off (a large prompt) and
/// a 1 s data-stall timer, that timer fires between two lumps and it is
/// still buffering, not a dead peer. The upstream's `X-Accel-Buffering:
/// no` lets it stream: healthy, never blamed.
#[tokio::test]
async fn nginx_buffering_is_named_whichever_clock_catches_it() {
    let (sim, upstream) = simulator(LONG_REPLY).await;
    let Some((_nginx, port)) = start_nginx(&upstream, "") else { return };
    let base = format!("http://127.0.0.1:{port}");
    let run = calls(row(&base, None), 1, &HOP_CUTS).await;
    let d = run.verdict(1);
    assert_eq!((run.reports[0].outcome, d.kind), (Outcome::Ok, VerdictKind::ProxyBuffering), "{}", d.summary);
    assert!(d.summary.contains("progress events) in 2 reads"), "{}", d.summary);
    let suggestion = d.suggestion.clone().unwrap_or_default();
    assert!(suggestion.starts_with("nginx (`server: nginx/"), "{suggestion}");
    assert!(suggestion.contains("switch nginx's buffering off (`proxy_buffering off`"), "{suggestion}");
    sim.shutdown().await;

    let (sim, upstream) = simulator(&LONG_REPLY.replace("count = 40", "count = 80")).await;
    let Some((_nginx, port)) = start_nginx(&upstream, "") else { return };
    let sets = ["SSE_TTFB_TIMEOUT_S=0", "SSE_DATA_STALL_TIMEOUT_S=1", "SSE_IDLE_TIMEOUT_S=30", "FALLBACK_MODELS=off"];
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 1, &sets).await;
    let d = run.verdict(1);
    assert_eq!((run.reports[0].outcome, d.kind), (Outcome::Partial, VerdictKind::ProxyBuffering), "{}", d.summary);
    assert!(d.summary.contains("then nothing until the data-stall timer (1 s) fired"), "{}", d.summary);
    assert_eq!(d.tunable.as_deref(), Some("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S"));
    sim.shutdown().await;

    let unbuffered = LONG_REPLY.replace("[[attempts]]", "[[attempts]]\nheaders = { \"x-accel-buffering\" = \"no\" }");
    let (sim, upstream) = simulator(&unbuffered).await;
    let Some((_nginx, port)) = start_nginx(&upstream, "proxy_http_version 1.1;") else { return };
    let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 1, &HOP_CUTS).await;
    let d = run.verdict(1);
    assert_eq!((run.reports[0].outcome, d.kind), (Outcome::Ok, VerdictKind::Healthy), "{}", d.summary);
    assert!(run.content_spread(1) >= Duration::from_secs(1), "nginx held the tokens back");
    sim.shutdown().await;
}

/// The provider's own errors through nginx stay the provider's: a 502
/// with its JSON error body is a server error, not a gateway timeout, and
/// a 503 says overloaded.
#[tokio::test]
async fn a_provider_s_own_error_through_nginx_stays_the_provider_s() {
    for (status, kind) in [(502, VerdictKind::ServerError), (503, VerdictKind::Overloaded)] {
        let (sim, upstream) = simulator(&format!("[[attempts]]\nstatus = {status}\n")).await;
        let Some((_nginx, port)) = start_nginx(&upstream, "proxy_http_version 1.1;") else { return };
        let sets = ["FALLBACK_MODELS=off", "RETRY_BUDGET_SERVER_ERROR=0", "RETRY_BUDGET_OVERLOADED=0"];
        let run = calls(row(&format!("http://127.0.0.1:{port}"), None), 1, &sets).await;
        let d = run.verdict(1);
        assert_eq!(d.kind, kind, "{status}: {}", d.summary);
        assert!(
            d.evidence.iter().any(|e| e.text.starts_with("body: {")),
            "{status}: the provider's JSON: {:?}",
            d.evidence
        );
        sim.shutdown().await;
    }
}

/// `probe --compare` on one endpoint configured twice, directly and
/// through Squid (`read_timeout 2 seconds`), whose answer pauses 6 s
/// between its tokens: the fault follows the path through Squid, which
/// cuts it; the direct path waits it out.
#[tokio::test]
async fn the_probe_says_the_fault_follows_the_path_through_the_proxy() {
    let Some((_squid, port)) = start_squid("2 seconds") else { return };
    let pauses = r#"
[[attempts]]
steps = [{ content = "tok ", count = 3, every_ms = 25 }, { stall_ms = 6000 }, { content = "tok ", count = 3 }]
"#;
    let (sim, upstream) = simulator(pauses).await;
    let dir = temp_dir(&format!("compare-{}", free_port()));
    let config = dir.join("config.toml");
    let route = |name: &str, proxy: &str| {
        format!(
            "[[provider]]\nname = \"{name}\"\nkind = \"openai-chat\"\nbase_url = \"http://{upstream}/v1\"\n\
             model = \"m\"\nproxy = \"{proxy}\"\n\n"
        )
    };
    std::fs::write(&config, route("direct", "off") + &route("office", &format!("http://127.0.0.1:{port}"))).unwrap();
    let plan = ProbePlan {
        config: Some(config),
        overrides: ["SSE_IDLE_TIMEOUT_S=30", "SSE_DATA_STALL_TIMEOUT_S=30"].map(str::to_owned).to_vec(),
        edits: Vec::new(),
        context_tokens: Some(100),
        concurrency: 4,
        recording: None,
        seed: None,
    };
    let readiness = probe(&plan, &[], None, &CancellationToken::new()).await.unwrap();
    assert_eq!((readiness.ready, readiness.comparisons.len()), (1, 1), "{:?}", readiness.comparisons);
    let finding = &readiness.comparisons[0].finding;
    assert!(
        finding.starts_with(&format!("the fault follows the path: via 127.0.0.1:{port}: idle cut after ")),
        "{finding}"
    );
    assert!(finding.contains(" s of silence (partial); direct: healthy"), "{finding}");
    sim.shutdown().await;
}
