//! `stallscope watch` and `stallscope observe` scraped by a real
//! Prometheus (the Debian package), checked through Prometheus's HTTP API
//! against the rounds the store holds and the calls an agent made, the
//! shipped dashboard's queries run on both; and the alerting rules shipped
//! in docs/ checked by `promtool`.
//!
//! Both run whenever the programs are present (see [`programs`] for what
//! happens when one is absent).

mod programs;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stallscope::core::category::TimerKind;
use stallscope::core::event::EventKind;
use stallscope::store::Store;

use programs::{Running, external, free_port, on_path, temp_dir, wait_for_port};

/// Prometheus's program (`prometheus` or `promtool`), or why the test is
/// skipped.
fn prometheus_program(name: &str) -> Option<PathBuf> {
    external(&format!("{name} (Debian package `prometheus`)"), on_path(name))
}

/// One instant query: each series' labels and value.
async fn query(client: &reqwest::Client, base: &str, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let mut url = reqwest::Url::parse(&format!("{base}/api/v1/query")).unwrap();
    url.query_pairs_mut().append_pair("query", promql);
    let body: serde_json::Value = client.get(url).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["status"], "success", "{promql}: {body}");
    body["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["metric"].clone(), s["value"][1].as_str().unwrap().parse().unwrap()))
        .collect()
}

/// A Prometheus on `web_port`, storing in `dir`, scraping `/metrics` on
/// `metrics_port` every 0.7 s, once it has scraped it; and its base URL.
async fn start_prometheus(prometheus: &Path, dir: &Path, metrics_port: u16, web_port: u16) -> (Running, String) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 700ms\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: stallscope\n    \
             static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let mut server = Running(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{web_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_port(web_port, &mut server.0, Duration::from_secs(20));
    let base = format!("http://127.0.0.1:{web_port}");
    let client = reqwest::Client::new();
    // It listens before its storage is open, and answers 503 until then.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client.get(format!("{base}/-/ready")).send().await.is_ok_and(|r| r.status().is_success()) {
        assert!(Instant::now() < deadline, "Prometheus is not ready after 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its first scrape comes only once discovery hands it the target (up
    // to 5 s after it is ready): a series that appears before then is
    // first seen with its later value, and its first increase is lost.
    while query(&client, &base, r#"up{job="stallscope"}"#).await.is_empty() {
        assert!(Instant::now() < deadline, "Prometheus has not scraped after 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (server, base)
}

/// Data-stall timer fires the store holds for the oldest `rounds` rounds.
fn stored_data_stall_fires(db: &Path, rounds: usize) -> Option<usize> {
    let store = Store::open(db).ok()?;
    let mut ids = store.ended_with_label("watch@ci").ok()?;
    if ids.len() < rounds {
        return None;
    }
    ids.sort();
    let fired = |id| {
        let events = store.run_events(id).unwrap();
        events.iter().filter(|e| matches!(e.kind, EventKind::TimerFired { timer: TimerKind::DataStall, .. })).count()
    };
    Some(ids[..rounds].iter().map(|(id, _)| fired(*id)).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_counters_the_store_records() {
    let Some(prometheus) = prometheus_program("prometheus") else { return };
    let dir = temp_dir("prometheus-scrape");
    let db = dir.join("w.db");
    let (metrics_port, web_port) = (free_port(), free_port());
    let mut watch = Running(
        Command::new(env!("CARGO_BIN_EXE_stallscope"))
            .args(["watch", "--scenario", "ping-flood-stall", "--every", "1s", "--site", "ci", "--requests", "2"])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            // Scaled down: the stall is caught after 0.3 s.
            .args(["--set", "SSE_DATA_STALL_TIMEOUT_S=0.3", "--set", "PROVIDER_STREAM_BACKOFF_S=0.01", "--db"])
            .arg(&db)
            .env_clear()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(metrics_port, &mut watch.0, Duration::from_secs(20));
    let (server, base) = start_prometheus(&prometheus, &dir, metrics_port, web_port).await;
    let client = reqwest::Client::new();
    // A scrape during a round may see its timers fire before the round is
    // counted (rounds start each second; scrapes every 0.7 s, so they do
    // not keep one phase to the rounds): poll until one scrape shows whole rounds, at least three
    // recorded. A loaded machine runs rounds slowly: allow it three
    // minutes. A round the store could not take runs unrecorded (counted
    // under its own result), and its fires are in the counter, not the store.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut seen = None;
    let (rounds, fires) = loop {
        assert!(
            Instant::now() < deadline,
            "Prometheus never showed three whole rounds: (recorded, rounds, fires, stored) {seen:?}"
        );
        let both = query(
            &client,
            &base,
            r#"stallscope_watch_rounds_total or stallscope_timer_fires_total{timer="data_stall"}"#,
        )
        .await;
        let value = |name: &str, result: Option<&str>| {
            both.iter()
                .filter(|(m, _)| m["__name__"] == name && result.is_none_or(|r| m["result"] == r))
                .map(|(_, v)| *v)
                .sum::<f64>()
        };
        let recorded = value("stallscope_watch_rounds_total", Some("recorded")) as usize;
        let rounds = recorded + value("stallscope_watch_rounds_total", Some("unrecorded")) as usize;
        let fires = value("stallscope_timer_fires_total", None);
        let stored = stored_data_stall_fires(&db, recorded);
        // Every call's first attempt stalls behind keep-alives.
        if recorded >= 3 && fires as usize == 2 * rounds && stored == Some(2 * recorded) {
            break (rounds, fires);
        }
        seen = Some((recorded, rounds, fires, stored));
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let up = query(&client, &base, r#"up{job="stallscope"}"#).await;
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].1, 1.0);
    let calls = query(&client, &base, r#"sum by (verdict) (stallscope_calls_total{site="ci"})"#).await;
    assert!(
        calls.iter().any(|(m, v)| m["verdict"] == "keepalive_only_stall" && *v >= (2 * rounds) as f64),
        "{calls:?}"
    );
    let detected =
        query(&client, &base, r#"stallscope_stall_detection_seconds_count{site="ci",timer="data_stall"}"#).await;
    assert!(detected.iter().map(|(_, v)| v).sum::<f64>() >= fires, "{detected:?}");
    // Every call stalled.
    dashboard_queries_run(&client, &base, "Stall rate by site and provider", |rates| {
        rates.iter().map(|(m, v)| (serde_json::json!([m["site"], m["provider"]]), *v)).collect::<Vec<_>>()
            == vec![(serde_json::json!(["ci", "sim"]), 1.0)]
    })
    .await;
    drop(server);
    drop(watch);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `stallscope observe` in front of an agent that gives up on a slow first
/// token, twice, scraped by Prometheus: its site is observe@SITE; our
/// idle timer would have fired on each of the agent's attempts, and each
/// call, once its retry window passed, counts as cancelled; the
/// dashboard's observe panels show them (a counter's first sample is its
/// start, so the second call is what a rate sees).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_an_observer() {
    let Some(prometheus) = prometheus_program("prometheus") else { return };
    let dir = temp_dir("prometheus-observe");
    let (listen_port, metrics_port, web_port) = (free_port(), free_port(), free_port());
    let mut observe = Running(
        Command::new(env!("CARGO_BIN_EXE_stallscope"))
            .args(["observe", "--scenario", "slow-first-token", "--site", "ci", "--retry-window", "500ms"])
            .args(["--listen", &format!("127.0.0.1:{listen_port}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(["--set", "SSE_IDLE_TIMEOUT_S=0.3", "--no-record"])
            .env_clear()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(metrics_port, &mut observe.0, Duration::from_secs(20));
    let (server, base) = start_prometheus(&prometheus, &dir, metrics_port, web_port).await;
    let impatient = reqwest::Client::builder().read_timeout(Duration::from_millis(800)).build().unwrap();
    for round in 0..2 {
        if round > 0 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        // The first message differs: two calls, not a call and its retry.
        let response = impatient
            .post(format!("http://127.0.0.1:{listen_port}/v1/chat/completions"))
            .body(format!(r#"{{"model":"gpt-x","stream":true,"messages":[{{"role":"user","content":"hi {round}"}}]}}"#))
            .send()
            .await
            .unwrap();
        assert!(response.text().await.is_err(), "the agent's own timeout");
    }
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let calls = query(&client, &base, r#"stallscope_calls_total{site="observe@ci",verdict="cancelled"}"#).await;
        let would = query(&client, &base, r#"stallscope_would_fire_total{site="observe@ci",timer="idle"}"#).await;
        if calls.iter().any(|(_, v)| *v >= 2.0) && would.iter().any(|(_, v)| *v >= 2.0) {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus never showed the observed call: {calls:?} {would:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    dashboard_queries_run(&client, &base, "Observed agents: where our timers would have fired", |fired| {
        fired.iter().any(|(m, v)| m["timer"] == "idle" && *v > 0.0)
    })
    .await;
    drop(server);
    drop(observe);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The series of one dashboard panel's query.
type Series = Vec<(serde_json::Value, f64)>;

/// Every query of the shipped Grafana dashboard runs on what Prometheus
/// scraped (its variables set to "all"), and panel `title`'s first query
/// comes to what `shows` looks for (a rate needs two scrapes of the series,
/// and a change between them: 0 / 0 is NaN until then).
async fn dashboard_queries_run(client: &reqwest::Client, base: &str, title: &str, shows: impl Fn(&Series) -> bool) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/grafana/stallscope-canary.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.iter().any(|p| p["title"] == title), "no panel {title}");
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let promql = expr.replace("$site", ".*").replace("$provider", ".*").replace("$__rate_interval", "1m");
            let mut result = query(client, base, &promql).await;
            if panel["title"] == title {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !shows(&result) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    result = query(client, base, &promql).await;
                }
                assert!(shows(&result), "{title}: {promql}: {result:?}");
            }
        }
    }
}

#[test]
fn the_shipped_alerting_rules_pass_promtool() {
    let Some(promtool) = prometheus_program("promtool") else { return };
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/prometheus/alerts.yml");
    let output = Command::new(promtool).args(["check", "rules"]).arg(&rules).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(text.contains("SUCCESS"), "{text}");
}
