//! Recorded runs' traces sent to a real OTLP receiver, from the CLI, the
//! app's History and the canary (`watch --otlp`): Arize Phoenix (`phoenix serve`, from PyPI),
//! which takes OTLP/HTTP at `/v1/traces` and lists what it kept at
//! `/v1/projects/default/spans`.
//!
//! Phoenix is found as `STALLSCOPE_PHOENIX`, `phoenix` on the PATH, or in
//! the virtualenv `.ci/run` installs (`~/.cache/stallscope-phoenix`). Where
//! it is absent the test says so and passes, unless
//! `STALLSCOPE_REQUIRE_EXTERNAL=1`.

mod app;
mod programs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use app::{Scratch, wait_for};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use programs::{Running, external, free_port, on_path, temp_dir, wait_for_port};
use serde_json::Value;
use stallscope::gui::{App, Launch};

fn phoenix() -> Option<PathBuf> {
    let cached = std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/stallscope-phoenix/bin/phoenix"));
    let found = std::env::var_os("STALLSCOPE_PHOENIX")
        .map(PathBuf::from)
        .or_else(|| on_path("phoenix"))
        .or(cached)
        .filter(|p| p.is_file());
    external("Arize Phoenix (pip install arize-phoenix)", found)
}

/// Phoenix on a free loopback port, with its own working directory; its
/// base URL.
fn start_phoenix(program: &Path) -> (Running, String) {
    let dir = temp_dir("phoenix");
    let (port, grpc) = (free_port(), free_port());
    let child = Command::new(program)
        .arg("serve")
        .env("PHOENIX_WORKING_DIR", &dir)
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", grpc.to_string())
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    // Its first start migrates a new database: a minute on a busy machine.
    wait_for_port(port, &mut running.0, Duration::from_secs(240));
    (running, format!("http://127.0.0.1:{port}"))
}

/// The app over the database `db`, on its History tab.
fn history(db: PathBuf) -> Harness<'static, App> {
    let mut h = Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .build_eframe(move |cc| App::new(cc, Launch { config: None, overrides: vec![] }, Some(db), vec![]));
    h.get_by_label("History").click();
    h.run();
    h
}

fn stallscope(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_stallscope")).args(args).env_clear().output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "stallscope {args:?}: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// Every span Phoenix lists, once it lists `expected` of them.
async fn listed(base: &str, expected: usize) -> Vec<Value> {
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/projects/default/spans?limit=1000");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = match client.get(&url).send().await {
            Ok(response) => response.json::<Value>().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let spans = answer["data"].as_array().cloned().unwrap_or_default();
        // Phoenix ingests in the background.
        if spans.len() >= expected {
            return spans;
        }
        assert!(Instant::now() < deadline, "Phoenix lists {} of {expected} spans after 60 s", spans.len());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn event_names(span: &Value) -> Vec<&str> {
    span["events"].as_array().into_iter().flatten().filter_map(|e| e["name"].as_str()).collect()
}

#[tokio::test]
async fn a_recorded_run_reaches_phoenix_as_a_trace_per_call() {
    let Some(program) = phoenix() else { return };
    let dir = temp_dir("otlp");
    let db = dir.join("runs.db");
    let db = db.to_str().unwrap();
    stallscope(&["run", "--db", db, "--scenario", "silent-stall", "--requests", "2", "--seed", "3"]);
    let (_phoenix, base) = start_phoenix(&program);

    let sent = stallscope(&["export", "--db", db, "1", "--otlp", &base]);
    assert!(sent.starts_with("sent run 1: 2 calls, "), "{sent}");
    let count: usize = sent.split(", ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
    let spans = listed(&base, count).await;
    assert_eq!(spans.len(), count, "every span kept once");

    let mut traces: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for span in &spans {
        traces.entry(span["context"]["trace_id"].as_str().unwrap()).or_default().push(span);
    }
    assert_eq!(traces.len(), 2, "a trace per call");
    for spans in traces.values() {
        let roots: Vec<_> = spans.iter().filter(|s| s["parent_id"].is_null()).collect();
        let [call] = roots[..] else { panic!("one root span per trace: {roots:?}") };
        assert_eq!(call["name"], "chat sim-model-a");
        assert_eq!(call["attributes"]["gen_ai.provider.name"], "sim");
        assert_eq!(call["attributes"]["gen_ai.request.model"], "sim-model-a");
        assert_eq!(call["attributes"]["stallscope.outcome"], "ok");
        assert_eq!(call["attributes"]["stallscope.verdict"], "silent_stall");
        assert!(event_names(call).contains(&"verdict"), "{call}");
        let call_id = &call["context"]["span_id"];
        assert!(spans.iter().filter(|s| !s["parent_id"].is_null()).all(|s| &s["parent_id"] == call_id));

        let second = spans.iter().find(|s| s["name"] == "attempt 2 sim/sim-model-a").unwrap();
        assert_eq!(event_names(second), ["response headers", "first output"]);
        let mut children: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        children.sort();
        assert_eq!(children, ["attempt 1 sim/sim-model-a", "attempt 2 sim/sim-model-a", "backoff", "chat sim-model-a"]);
        let first = spans.iter().find(|s| s["name"] == "attempt 1 sim/sim-model-a").unwrap();
        assert_eq!(first["status_code"], "ERROR");
        // The stall comes after the opening event, before any output.
        assert_eq!(event_names(first), ["response headers", "timer fired", "error classified"]);
        let fired = &first["events"][1]["attributes"];
        assert_eq!(
            (fired["stallscope.timer"].as_str(), fired["stallscope.budget_s"].as_f64()),
            (Some("idle"), Some(1.0))
        );
    }

    // The app sends a stored run the same way, from its History row: here
    // a failover story, whose hop is an event on the call's span.
    let scratch = Scratch::new("otlp");
    let db = scratch.db();
    stallscope(&["run", "--db", db.to_str().unwrap(), "--scenario", "dead-primary"]);
    let mut h = history(db);
    h.state_mut().prefs.history.otlp_endpoint = base.clone();
    wait_for(&mut h, "run 1", |h| h.query_by_label("More on run 1").is_some());
    h.get_by_label("More on run 1").click();
    h.run();
    h.get_by_label("Send run 1 as OpenTelemetry traces").click();
    wait_for(&mut h, "the traces sent", |h| h.query_by_label_contains("sent run 1 to ").is_some());
    let node = h.get_by_label_contains("sent run 1 to ").accesskit_node();
    let shown = node.label().or(node.value()).unwrap_or_default();
    let more: usize = shown.split(", ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().expect(&shown);
    let spans = listed(&base, count + more).await;
    let hop = spans.iter().find(|s| event_names(s).contains(&"failover")).expect("the failover hop");
    assert_eq!(hop["name"], "chat sim-model-a");
    let total = count + more;

    // The canary sends each round it records.
    let round_db = scratch.path().join("rounds.db");
    let mut watch = Running(
        Command::new(env!("CARGO_BIN_EXE_stallscope"))
            .args(["watch", "--scenario", "healthy", "--every", "1s", "--metrics-addr", "127.0.0.1:0", "--otlp", &base])
            .arg("--db")
            .arg(&round_db)
            .env_clear()
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = watch.0.stdout.take().unwrap();
    let first = std::io::BufRead::lines(std::io::BufReader::new(stdout)).next().unwrap().unwrap();
    drop(watch);
    assert!(first.starts_with("round 0: recorded") && first.ends_with(" spans sent"), "{first}");
    let sent: usize = first.rsplit(", ").next().and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
    assert_eq!(listed(&base, total + sent).await.len(), total + sent);
    let _ = std::fs::remove_dir_all(&dir);
}
