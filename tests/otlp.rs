//! Recorded runs' traces sent to a real OTLP receiver, from the CLI, the
//! app's History and the canary (`watch --otlp`): Arize Phoenix (`phoenix serve`, from PyPI),
//! which takes OTLP/HTTP at `/v1/traces` and lists what it kept at
//! `/v1/projects/default/spans`.
//!
//! Phoenix is found as `STALLSCOPE_PHOENIX`, `phoenix` on the PATH, or in
//! the virtualenv `.ci/run` installs (`~/.cache/stallscope-phoenix`). Where
//! it is absent the test says so and passes, unless
//! `STALLSCOPE_REQUIRE_EXTERNAL=1`.
//!
//! The other tests send to a loopback receiver of our own
//! ([`receiver`]): headers, credentials that never show, no error body in
//! a span, and Ctrl-C ending a watch whose receiver never answers.

mod app;
mod programs;
mod receiver;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use app::{Scratch, wait_for};
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable, by};
use programs::{Running, external, free_port, on_path, temp_dir, wait_for_port};
use receiver::{Answer, Receiver};
use serde_json::Value;
use stallscope::export::otlp::REQUEST_TIMEOUT;
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
    let output = stallscope_with(args, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "stallscope {args:?}: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// `stallscope ARGS` with only the environment `env`, however it ends.
fn stallscope_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stallscope"));
    command.args(args).env_clear().envs(env.iter().copied());
    command.output().unwrap()
}

/// Its standard output and error, one after the other.
fn printed(output: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `stallscope watch ARGS --db DB` (one round an hour, metrics on any port,
/// only the environment `env`), running.
fn start_watch(args: &[&str], db: &Path, env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(["watch", "--every", "1h", "--metrics-addr", "127.0.0.1:0"])
        .args(args)
        .arg("--db")
        .arg(db)
        .env_clear()
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sends `watch` SIGINT (Ctrl-C) and waits for it to end, for at most
/// `limit` (a guard against a hang: past it, it is killed and the test
/// fails).
fn interrupt(mut watch: Child, limit: Duration) -> Output {
    let kill = Command::new("kill").args(["-INT", &watch.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + limit;
    while watch.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = watch.kill();
            let _ = watch.wait();
            panic!("watch still ran {limit:?} after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    watch.wait_with_output().unwrap()
}

/// The first line `watch` prints on standard output: round 0's.
fn first_round(watch: &mut Child) -> String {
    let stdout = watch.stdout.as_mut().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    line
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

    // An observer sends each agent's call once it is over, while it runs.
    let port = free_port();
    let mut observe = Running(
        Command::new(env!("CARGO_BIN_EXE_stallscope"))
            .args(["observe", "--scenario", "healthy", "--listen", &format!("127.0.0.1:{port}"), "--otlp", &base])
            .arg("--db")
            .arg(scratch.path().join("observed.db"))
            .env_clear()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port, &mut observe.0, Duration::from_secs(20));
    let answer = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .body(r#"{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap();
    assert!(answer.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let observed = loop {
        let spans = listed(&base, total + sent + 1).await;
        if let Some(call) = spans.iter().find(|s| s["name"] == "chat gpt-x") {
            break call.clone();
        }
        assert!(Instant::now() < deadline, "the observed call never reached Phoenix");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    drop(observe);
    assert_eq!(observed["attributes"]["gen_ai.provider.name"], "sim");
    assert_eq!(observed["attributes"]["stallscope.verdict"], "healthy");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scratch database holding run 1, of `scenario` (one call).
fn recorded(name: &str, scenario: &[&str]) -> (PathBuf, String) {
    let dir = temp_dir(name);
    let db = dir.join("runs.db").to_str().unwrap().to_owned();
    stallscope(&[&["run", "--db", &db, "--requests", "1"], scenario].concat());
    (dir, db)
}

/// Review R1: the only way to authenticate was credentials in the URL.
#[test]
fn headers_reach_the_receiver_with_values_read_from_the_environment_and_never_shown() {
    let (dir, db) = recorded("otlp-headers", &["--scenario", "healthy"]);
    let receiver = Receiver::start(Answer::Status(200));
    let env = [("OTLP_KEY", "s3cret-key")];
    let headers = ["--otlp-header", "x-api-key=env:OTLP_KEY", "--otlp-header", "x-tenant=lab"];
    let output =
        stallscope_with(&[&["export", "--db", &db, "1", "--otlp", &receiver.base], &headers[..]].concat(), &env);
    let text = printed(&output);
    assert!(output.status.success(), "{text}");
    assert!(text.starts_with("sent run 1: 1 calls, "), "{text}");
    assert!(text.contains(&format!(" spans to {}/v1/traces", receiver.base)) && !text.contains("s3cret"), "{text}");
    let [request] = &receiver.requests()[..] else { panic!("{:?}", receiver.requests()) };
    assert_eq!((request.header("x-api-key"), request.header("x-tenant")), (Some("s3cret-key"), Some("lab")));
    assert_eq!(request.header("content-type"), Some("application/x-protobuf"));

    // The canary sends them with each round.
    let mut watch = start_watch(
        &[&["--scenario", "healthy", "--otlp", &receiver.base], &headers[..]].concat(),
        &dir.join("w.db"),
        &env,
    );
    let line = first_round(&mut watch);
    let output = interrupt(watch, Duration::from_secs(60));
    assert!(
        line.starts_with("round 0: recorded") && line.trim_end().ends_with(" spans sent"),
        "{line}{}",
        printed(&output)
    );
    assert!(!printed(&output).contains("s3cret"));
    let requests = receiver.wait_for(2, Duration::from_secs(60));
    assert_eq!(requests[1].header("x-api-key"), Some("s3cret-key"));

    // A variable that is not set is named; no value is shown.
    let missing = stallscope_with(
        &["export", "--db", &db, "1", "--otlp", &receiver.base, "--otlp-header", "x-api-key=env:NOPE"],
        &[],
    );
    assert_eq!(missing.status.code(), Some(2));
    let text = printed(&missing);
    assert!(
        text.contains("OTLP header `x-api-key=…` is not accepted: the environment variable NOPE is not set"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review R1: the URL's password was printed when the receiver refused or
/// was not there (and on every failing round of `watch`).
#[test]
fn no_output_shows_the_credentials_of_an_otlp_url() {
    let (dir, db) = recorded("otlp-password", &["--scenario", "healthy"]);
    let refusing = Receiver::start(Answer::Status(401));
    let with_credentials = |port: u16| format!("http://otel:pa55word@127.0.0.1:{port}/?api_key=t0ken");
    let clean = |text: &str| {
        text.contains("http://otel:***@127.0.0.1:") && !text.contains("pa55word") && !text.contains("t0ken")
    };
    for (port, said) in [(refusing.port, "refused the traces: 401"), (free_port(), "cannot send traces to")] {
        let output = stallscope_with(&["export", "--db", &db, "1", "--otlp", &with_credentials(port)], &[]);
        let text = printed(&output);
        assert_eq!(output.status.code(), Some(2), "{text}");
        assert!(clean(&text) && text.contains(said), "{text}");
    }
    // reqwest sends the URL's user info as Basic auth: it is used, not shown.
    assert!(refusing.requests()[0].header("authorization").is_some_and(|v| v.starts_with("Basic ")));

    let mut watch =
        start_watch(&["--scenario", "healthy", "--otlp", &with_credentials(refusing.port)], &dir.join("w.db"), &[]);
    let line = first_round(&mut watch);
    let output = interrupt(watch, Duration::from_secs(60));
    let text = format!("{line}{}", printed(&output));
    assert!(text.contains("stallscope: round 0: traces not sent: http://otel:***@") && clean(&text), "{text}");
    // A bad endpoint is refused before any round, masked too.
    let db = dir.join("w.db");
    let watch = ["watch", "--scenario", "healthy", "--metrics-addr", "127.0.0.1:0", "--db", db.to_str().unwrap()];
    let output = stallscope_with(&[&watch[..], &["--otlp", "ftp://otel:pa55word@h"]].concat(), &[]);
    let text = printed(&output);
    assert!(
        text.contains("OTLP endpoint \"ftp://otel:***@h\" is not accepted") && !text.contains("pa55word"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review R10: a failed attempt's span status was the failure's message,
/// which quotes the error body.
#[test]
fn exported_traces_carry_no_error_body() {
    let scenario = temp_dir("otlp-body").join("body.toml");
    let body = r#"{"error": {"message": "zebra-quartz-7 failed at db-42.internal", "type": "server_error"}}"#;
    let toml = format!(
        "[run]\nSTALLSCOPE_PROVIDER_STREAM_BACKOFF_S = 0.05\n\n[[attempts]]\nstatus = 500\nbody = '{body}'\n\n[[attempts]]\nsteps = [{{ content = \"ok\" }}]\n"
    );
    std::fs::write(&scenario, toml).unwrap();
    let (dir, db) = recorded("otlp-body", &["--scenario-file", scenario.to_str().unwrap()]);
    // The recording keeps the message, body and all: the export must leave it out.
    let events = stallscope(&["export", "--db", &db, "1", "--format", "jsonl"]);
    assert!(events.contains("zebra-quartz-7"), "{events}");
    let receiver = Receiver::start(Answer::Status(200));
    stallscope(&["export", "--db", &db, "1", "--otlp", &receiver.base]);
    let [request] = &receiver.requests()[..] else { panic!("{:?}", receiver.requests()) };
    let sent = String::from_utf8_lossy(&request.body);
    assert!(sent.contains("server_error: HTTP 500 (") && !sent.contains("zebra-quartz-7"), "{sent}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review D3: Ctrl-C only cancelled the token, and the round's send
/// listened to neither it nor a clock: with a receiver that accepts and
/// never answers, `watch` ran on until SIGKILL.
#[test]
fn ctrl_c_ends_a_watch_whose_receiver_never_answers() {
    let dir = temp_dir("otlp-silent");
    let receiver = Receiver::start(Answer::Never);
    let watch = start_watch(&["--scenario", "healthy", "--otlp", &receiver.base], &dir.join("w.db"), &[]);
    // Round 0 is recorded and its traces are on their way.
    receiver.wait_for(1, Duration::from_secs(60));
    // The guard is past the request timeout: the message below tells a
    // cancelled send from one that timed out.
    let output = interrupt(watch, 2 * REQUEST_TIMEOUT);
    let text = printed(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.starts_with("round 0: recorded"), "{text}");
    let said =
        format!("stallscope: round 0: traces not sent: sending traces to {}/v1/traces was cancelled", receiver.base);
    assert!(text.contains(&said), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review R1 (and D3's "sending traces…" for ever): the app showed the
/// URL's password while sending and after, and saved it with its settings.
#[test]
fn the_app_shows_the_refusal_but_neither_shows_nor_saves_the_urls_password() {
    let refusing = Receiver::start(Answer::Status(401));
    let scratch = Scratch::new("otlp-password");
    let db = scratch.db();
    stallscope(&["run", "--db", db.to_str().unwrap(), "--scenario", "healthy", "--requests", "1"]);
    let mut h = history(db);
    let endpoint = format!("http://otel:pa55word@127.0.0.1:{}", refusing.port);
    h.state_mut().prefs.history.otlp_endpoint = endpoint.clone();
    wait_for(&mut h, "run 1", |h| h.query_by_label("More on run 1").is_some());
    h.get_by_label("More on run 1").click();
    h.run();
    h.get_by_label("Send run 1 as OpenTelemetry traces").click();
    wait_for(&mut h, "the refusal", |h| h.query_by_label_contains("refused the traces").is_some());
    let node = h.get_by_label_contains("refused the traces").accesskit_node();
    let shown = node.label().or(node.value()).unwrap_or_default();
    assert!(
        shown.contains(&format!("http://otel:***@127.0.0.1:{}/v1/traces refused the traces: 401", refusing.port)),
        "{shown}"
    );
    // Only the endpoint's own field holds it, as typed.
    let leaks = by().predicate(|node| {
        let field = |n: &egui_kittest::kittest::AccessKitNode<'_>| n.role() == Role::TextInput;
        let text = format!("{:?} {:?}", node.label(), node.value());
        text.contains("pa55word") && !field(node) && !node.parent().is_some_and(|p| field(&p))
    });
    let leaked: Vec<String> =
        h.query_all(leaks).map(|n| format!("{:?}", (n.accesskit_node().label(), n.accesskit_node().value()))).collect();
    assert!(leaked.is_empty(), "{leaked:?}");
    let saved = serde_json::to_string(&h.state().prefs).unwrap();
    assert!(
        !saved.contains("pa55word") && saved.contains(&format!("\"http://otel:***@127.0.0.1:{}\"", refusing.port)),
        "{saved}"
    );
    assert_eq!(h.state().prefs.history.otlp_endpoint, endpoint, "kept for this session");
}
