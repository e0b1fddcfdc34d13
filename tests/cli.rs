//! The command line as a user runs it: the real binary, its stdout, stderr
//! and exit code.

use std::process::{Command, Output};

/// A database file of this test process, removed when the process ends.
fn scratch_db() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("stallscope-cli-{}.db", std::process::id()))
}

fn stallscope(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stallscope"));
    // No inherited STALLSCOPE_* variables, no default config file, and a
    // database of the tests' own.
    command
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .env("STALLSCOPE_DB", scratch_db());
    command.args(args).envs(env.iter().copied()).output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn tunables_json_lists_every_tunable_with_its_source() {
    let out = stdout(&stallscope(
        &["--set", "SSE_IDLE_TIMEOUT_S=600", "tunables", "--json"],
        &[("STALLSCOPE_TCP_KEEPCNT", "5")],
    ));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), stallscope::tunables::TUNABLES.len());
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap().clone();
    let idle = row("STALLSCOPE_SSE_IDLE_TIMEOUT_S");
    assert_eq!(
        (idle["value"].as_f64(), idle["default"].as_f64(), idle["source"].as_str()),
        (Some(600.0), Some(1800.0), Some("--set"))
    );
    assert_eq!(
        (idle["unit"].as_str(), idle["type"].as_str(), idle["group"].as_str()),
        (Some("s"), Some("float"), Some("stream"))
    );
    assert!(idle["allowed"].as_str().unwrap().contains("86400"), "{idle}");
    assert_eq!(row("STALLSCOPE_TCP_KEEPCNT")["source"], "env");
    let read = row("STALLSCOPE_HTTP_READ_TIMEOUT_S");
    assert_eq!((read["value"].as_f64(), read["source"].as_str()), (Some(660.0), Some("derived")));
}

#[test]
fn tunables_table_and_env_export() {
    let table = stdout(&stallscope(&["tunables"], &[]));
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S"), "{table}");
    let env =
        stdout(&stallscope(&["--set", "FALLBACK_MODELS=off", "tunables", "--env", "--prefix", "OPENPROGRAM_"], &[]));
    assert!(env.contains("\nOPENPROGRAM_FALLBACK_MODELS=off\n"), "{env}");
    assert!(env.contains("\nOPENPROGRAM_SSE_IDLE_TIMEOUT_S=1800\n"), "{env}");
    assert!(!env.contains("STALLSCOPE_"), "{env}");
}

#[test]
fn bad_input_gets_one_clear_line_and_a_non_zero_exit() {
    /// Arguments, environment, and what stderr must say.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 7] = [
        (&["--set", "SSE_IDLE_TIMOUT_S=3", "tunables"], &[], "did you mean STALLSCOPE_SSE_IDLE_TIMEOUT_S?"),
        // The default command is the app; without a display it says what to do instead.
        (&[], &[], "without a display, use the command line (stallscope --help)"),
        (&["budget", "--deadline", "1e30"], &[], "--deadline 1e30 is not accepted"),
        (&["budget", "--layer", "x:4:1e300"], &[], "layer `x:4:1e300` is not NAME:RUNS"),
        (
            &["tunables"],
            &[("STALLSCOPE_TCP_KEEPCNT", "lots")],
            "STALLSCOPE_TCP_KEEPCNT=\"lots\" (from env) is not accepted",
        ),
        (&["--config", "/nonexistent/x.toml", "tunables"], &[], "cannot read config /nonexistent/x.toml"),
        (&["budget", "--layer", "candidates"], &[], "layer `candidates` is not NAME:RUNS"),
    ];
    for (args, env, wanted) in cases {
        let output = stallscope(args, env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("stallscope: ") && stderr.contains(wanted), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}

#[test]
fn budget_reproduces_seed_003_from_the_command_line() {
    let sets = [
        "SSE_TOTAL_TIMEOUT_S=90",
        "PROVIDER_STREAM_RETRIES=2",
        "PROVIDER_STREAM_BACKOFF_S=0.5",
        "PROVIDER_STREAM_BACKOFF_MAX_S=8",
        "BACKOFF_JITTER=full",
        "RETRY_AFTER_MAX_S=0",
        "FALLBACK_MODELS=off",
    ];
    let mut args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    args.extend(["budget", "--deadline", "120", "--layer", "same-agent:2:0.25", "--layer", "candidates:12", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&stallscope(&args, &[]))).unwrap();
    let worst: Vec<f64> = report["layers"].as_array().unwrap().iter().map(|l| l["worst"].as_f64().unwrap()).collect();
    assert_eq!(worst, [90.0, 271.5, 543.25, 6519.0]);
    assert_eq!(report["fits"], false);

    args.pop();
    let text = stdout(&stallscope(&args, &[]));
    assert!(text.contains("does NOT fit the caller's deadline of 120.000 s"), "{text}");
}

#[test]
fn run_json_is_exactly_one_object_in_the_documented_shape() {
    let out = stdout(&stallscope(
        &[
            "run",
            "--scenario",
            "server-error-then-ok",
            "--requests",
            "3",
            "--concurrency",
            "2",
            "--json",
            "--no-record",
        ],
        &[],
    ));
    assert_eq!(out.trim_end().lines().count(), 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["run_id"], serde_json::Value::Null);
    assert_eq!(report["scenario"], "server-error-then-ok");
    assert_eq!(report["tunables"]["STALLSCOPE_PROVIDER_STREAM_BACKOFF_S"], 0.05);
    let summary = &report["summary"];
    assert_eq!((summary["ok"].as_u64(), summary["failed"].as_u64()), (Some(3), Some(0)));
    assert!(summary["elapsed_ms"].as_f64().unwrap() > 0.0);
    let streams = report["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 3);
    for (i, s) in streams.iter().enumerate() {
        let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = vec![
            "attempts",
            "backoff_sleeps_ms",
            "bytes",
            "content",
            "diagnosis",
            "elapsed_ms",
            "error",
            "events",
            "failover_hops",
            "index",
            "keepalives",
            "model",
            "outcome",
            "provider",
            "rate_limits_low",
            "retry_after_ms",
            "retry_counts",
            "stop_reason",
            "ttfb_ms",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(s["index"], i as u64);
        assert_eq!(
            (s["outcome"].as_str(), s["attempts"].as_u64(), s["provider"].as_str()),
            (Some("ok"), Some(2), Some("sim"))
        );
        assert_eq!(s["retry_counts"]["server_error"]["used"], 1);
        assert_eq!(s["retry_counts"]["server_error"]["budget"], 2);
        assert_eq!(s["retry_after_ms"], serde_json::json!([null]));
        assert!(s["backoff_sleeps_ms"][0].as_f64().unwrap() > 0.0);
        assert_eq!(
            (s["diagnosis"]["kind"].as_str(), s["diagnosis"]["severity"].as_str()),
            (Some("server_error"), Some("recovered"))
        );
    }
    assert_eq!(report["diagnosis"]["groups"][0]["summary"], "3 of 3 streams: server error (3 recovered)");

    let out =
        stdout(&stallscope(&["run", "--scenario", "auth-expired", "--json", "--dialect", "anthropic-messages"], &[]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let error = &report["streams"][0]["error"];
    assert_eq!(
        (error["category"].as_str(), error["status"].as_u64(), error["retryable"].as_bool()),
        (Some("auth"), Some(401), Some(false))
    );
    assert_eq!(error["timer"], serde_json::Value::Null);
    assert_eq!(report["summary"]["failed"], 1);
}

#[test]
fn run_reports_hops_and_timers_in_human_form() {
    let out = stdout(&stallscope(&["run", "--scenario", "dead-primary"], &[]));
    assert!(out.contains("hop unreachable/sim-model-a→sim/sim-model-a [connection]"), "{out}");
    assert!(out.contains("1 ok, 0 partial, 0 failed, 0 cancelled"), "{out}");
}

#[test]
fn run_refuses_bad_input_with_one_line() {
    let dir = std::env::temp_dir().join(format!("stallscope-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let needs_key = dir.join("key.toml");
    std::fs::write(
        &needs_key,
        "[[provider]]\nname = \"openai\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"STALLSCOPE_TEST_MISSING_KEY\"\n",
    )
    .unwrap();
    let bad_kind = dir.join("kind.toml");
    std::fs::write(
        &bad_kind,
        "[[provider]]\nname = \"x\"\nkind = \"openai\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let key = needs_key.to_str().unwrap();
    let kind = bad_kind.to_str().unwrap();
    type Case<'a> = (&'a [&'a str], &'a str);
    let cases: [Case; 5] = [
        (&["run", "--scenario", "nope"], "no built-in scenario named \"nope\"; the built-ins are: healthy,"),
        (&["run", "--config", key], "environment variable STALLSCOPE_TEST_MISSING_KEY is not set"),
        (&["run", "--config", kind], "line 3"),
        (&["run", "--scenario", "healthy", "--set", "SSE_IDLE_TIMEOUT_S=-1"], "STALLSCOPE_SSE_IDLE_TIMEOUT_S=\"-1\""),
        (&["run", "--config", "/nonexistent/x.toml"], "cannot read config"),
    ];
    for (args, wanted) in cases {
        let output = stallscope(args, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(wanted), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sim_lists_scenarios_and_serves_one_printing_its_url() {
    let list = stdout(&stallscope(&["sim", "--list"], &[]));
    assert_eq!(list.lines().count(), stallscope::sim::builtin_names().len(), "{list}");
    assert!(list.lines().any(|l| l.starts_with("ping-flood-stall ")), "{list}");

    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(["sim", "--scenario", "healthy"])
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let body = runtime.block_on(async {
        let response = reqwest::Client::new()
            .post(format!("{url}/v1/messages"))
            .body(r#"{"model":"m","stream":true,"max_tokens":5,"messages":[]}"#)
            .send()
            .await
            .unwrap();
        response.text().await.unwrap()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        body.starts_with("event: message_start\n")
            && body.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        "{body}"
    );
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("stallscope-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_recorded_run_is_listed_shown_exported_and_deleted() {
    let dir = temp("history");
    let db = dir.join("h.db");
    let db = db.to_str().unwrap();
    let printed = stdout(&stallscope(
        &["run", "--scenario", "silent-stall", "--requests", "2", "--db", db, "--label", "vpn", "--json"],
        &[],
    ));
    let report: serde_json::Value = serde_json::from_str(&printed).unwrap();
    let id = report["run_id"].as_i64().expect("a recorded run has an id");

    let runs: serde_json::Value =
        serde_json::from_str(&stdout(&stallscope(&["runs", "--db", db, "list", "--json"], &[]))).unwrap();
    let run = &runs[0];
    assert_eq!(
        (run["id"].as_i64(), run["status"].as_str(), run["label"].as_str()),
        (Some(id), Some("completed"), Some("vpn"))
    );
    assert_eq!(run["outcomes"]["ok"], 2);
    assert_eq!(run["retries"], 2);

    // `runs show --json` is the report `run --json` printed, and with the
    // suggestions checked, the same with each stall's checked setting.
    let show = |extra: &[&str]| {
        let id = id.to_string();
        let args = [&["runs", "--db", db, "show", &id, "--json"], extra].concat();
        stdout(&stallscope(&args, &[]))
    };
    assert_eq!(show(&["--no-check"]), printed);
    // The story runs seconds where real traffic runs minutes: at the real
    // scale nothing so tight is suggested (see tests/tune.rs).
    let checked: serde_json::Value = serde_json::from_str(&show(&["--floor-scale", "0.001"])).unwrap();
    let mut unchecked = checked.clone();
    for stream in unchecked["streams"].as_array_mut().unwrap() {
        let setting = &stream["diagnosis"]["checked"]["settings"][0];
        assert!(setting.as_str().unwrap().starts_with("SSE_IDLE_TIMEOUT_S="), "{checked}");
        stream["diagnosis"]["checked"] = serde_json::Value::Null;
    }
    unchecked["diagnosis"]["groups"][0]["checked"] = serde_json::Value::Null;
    assert_eq!(unchecked, serde_json::from_str::<serde_json::Value>(&printed).unwrap());

    let trace: serde_json::Value = serde_json::from_str(&stdout(&stallscope(
        &["export", "--db", db, &id.to_string(), "--format", "chrome-trace"],
        &[],
    )))
    .unwrap();
    let items = trace["traceEvents"].as_array().unwrap();
    let pids: std::collections::BTreeSet<u64> = items.iter().map(|e| e["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), 2, "one track per stream");
    assert!(items.iter().any(|e| e["name"] == "idle timer fired"));
    assert!(items.iter().any(|e| e["name"] == "backoff" && e["ph"] == "X"));
    let jsonl = stdout(&stallscope(&["export", "--db", db, &id.to_string(), "--format", "jsonl"], &[]));
    assert!(jsonl.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()) && jsonl.lines().count() > 20);

    stdout(&stallscope(&["run", "--scenario", "healthy", "--db", db, "--set", "SSE_IDLE_TIMEOUT_S=5"], &[]));
    let compared = stdout(&stallscope(&["runs", "--db", db, "compare", &id.to_string(), &(id + 1).to_string()], &[]));
    assert!(compared.contains("STALLSCOPE_SSE_IDLE_TIMEOUT_S: 1.0 → 5.0"), "{compared}");
    // Review S7: the streams whose outcome changed, as the app lists them.
    assert!(compared.contains(&format!("streams whose outcome changed (run {id} → run {}): ", id + 1)), "{compared}");
    stdout(&stallscope(&["runs", "--db", db, "delete", &id.to_string()], &[]));
    let gone = stallscope(&["runs", "--db", db, "show", &id.to_string()], &[]);
    assert_eq!(gone.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `runs compare` marks the streams the fleet budget decided: which of a
/// run's calls it refuses depends on which retried first. Twelve calls rate
/// limited at once: the budget (at least 3 retries in flight) refuses nine,
/// and with its minimum raised, none.
#[test]
fn compare_marks_the_changes_the_fleet_budget_decided() {
    let dir = temp("fleet-compare");
    let db = dir.join("runs.db");
    let db = db.to_str().unwrap();
    let run = |extra: &[&str]| {
        let args =
            [&["run", "--scenario", "rate-limited-ms", "--requests", "12", "--concurrency", "12", "--db", db], extra];
        stdout(&stallscope(&args.concat(), &[]));
    };
    run(&[]);
    run(&["--set", "FLEET_RETRY_BUDGET_MIN=100"]);
    let compared = stdout(&stallscope(&["runs", "--db", db, "compare", "1", "2"], &[]));
    let changes: Vec<&str> = compared.lines().filter(|l| l.starts_with("  stream ")).collect();
    assert!(!changes.is_empty(), "{compared}");
    assert!(changes.iter().all(|l| l.ends_with(": failed → ok (fleet budget)")), "{compared}");
    assert!(
        compared.contains("  fleet budget: refused by the fleet retry budget, which the calls of a run share"),
        "{compared}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGKILL mid-run: the database stays intact, the run is marked
/// interrupted, and what was flushed before the kill is there.
#[test]
fn a_killed_run_is_interrupted_and_keeps_its_flushed_events() {
    let dir = temp("crash");
    let db = dir.join("c.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args([
            "run",
            "--scenario",
            "silent-stall",
            "--requests",
            "20",
            "--concurrency",
            "20",
            "--set",
            "SSE_IDLE_TIMEOUT_S=60",
        ])
        .arg("--db")
        .arg(&db)
        .env_clear()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Every stream starts and stalls at once; the recorder flushes every
    // 200 ms. Killed once every stream's headers are on disk (reading the
    // database while the run writes it, as an operator would).
    let path = db.to_str().unwrap().to_owned();
    let headers = || -> std::collections::BTreeSet<u64> {
        let output = stallscope(&["export", "--db", &path, "1", "--format", "jsonl"], &[]);
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["kind"]["type"] == "headers_received")
            .filter_map(|e| e["stream"].as_u64())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while headers().len() < 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    let db = db.to_str().unwrap();
    let runs: serde_json::Value =
        serde_json::from_str(&stdout(&stallscope(&["runs", "--db", db, "list", "--json"], &[]))).unwrap();
    assert_eq!(runs[0]["status"], "interrupted");
    let id = runs[0]["id"].as_i64().unwrap().to_string();
    let events = stdout(&stallscope(&["export", "--db", db, &id, "--format", "jsonl"], &[]));
    let started: std::collections::BTreeSet<u64> = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"]["type"] == "headers_received")
        .map(|e| e["stream"].as_u64().unwrap())
        .collect();
    assert_eq!(started.len(), 20, "every stream's headers were flushed before the kill");

    // No report, but every stream's verdict from what was recorded.
    let shown = stdout(&stallscope(&["runs", "--db", db, "show", &id], &[]));
    assert!(
        shown.starts_with(&format!("run {id} is interrupted: no report; the verdicts of its 20 streams")),
        "{shown}"
    );
    assert!(shown.contains("20 of 20 streams: incomplete recording"), "{shown}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&stallscope(&["runs", "--db", db, "show", &id, "--json"], &[]))).unwrap();
    assert_eq!((&json["status"], &json["report"]), (&serde_json::json!("interrupted"), &serde_json::Value::Null));
    let kinds: Vec<&str> =
        json["streams"].as_array().unwrap().iter().map(|s| s["diagnosis"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["incomplete"; 20], "{json}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Processes opening one new database at once (a run starting while its
/// history is read) all get it: one creates the schema, the others find
/// it.
#[test]
fn processes_opening_a_new_database_at_once_all_succeed() {
    let dir = temp("race");
    for round in 0..5 {
        let db = dir.join(format!("new-{round}.db"));
        let opens: Vec<_> = (0..4)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_stallscope"))
                    .args(["runs", "list", "--json", "--db"])
                    .arg(&db)
                    .env_clear()
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for open in opens {
            assert_eq!(stdout(&open.wait_with_output().unwrap()), "[]\n");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `stallscope sim ARGS` serving on loopback, and the URL it prints.
fn serve_sim(args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut sim = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .arg("sim")
        .args(args)
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = std::io::BufReader::new(sim.stdout.take().unwrap()).lines().next().unwrap().unwrap();
    (sim, url)
}

/// A key from the environment reaches the provider and nothing else: not
/// the database, not an export, not the output.
#[test]
fn keys_never_reach_the_database_exports_or_output() {
    const KEY: &str = "sk-test-RECOGNISABLE-4f1c9a77e2";
    let dir = temp("secrets");
    let (mut sim, url) = serve_sim(&["--scenario", "auth-expired"]);
    let config = dir.join("c.toml");
    std::fs::write(
        &config,
        format!("[[provider]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\napi_key_envs = [\"TEST_KEY\", \"TEST_KEY_2\"]\n"),
    )
    .unwrap();
    let db = dir.join("s.db");
    let (config, db_text) = (config.to_str().unwrap(), db.to_str().unwrap());
    let env = [("TEST_KEY", KEY), ("TEST_KEY_2", "sk-second-RECOGNISABLE-0000")];
    let run = stallscope(&["--config", config, "run", "--db", db_text, "--json"], &env);
    let listed = stallscope(&["runs", "--db", db_text, "list", "--json"], &[]);
    let exports: Vec<Output> = ["jsonl", "chrome-trace"]
        .iter()
        .map(|f| stallscope(&["export", "--db", db_text, "1", "--format", f], &[]))
        .collect();
    let _ = sim.kill();
    let _ = sim.wait();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    // Refused once (401), the key rested and the pool's other key took over.
    assert_eq!(
        (report["streams"][0]["outcome"].as_str(), report["streams"][0]["attempts"].as_u64()),
        (Some("ok"), Some(2))
    );
    let mut seen: Vec<u8> = Vec::new();
    for output in std::iter::once(&run).chain([&listed]).chain(exports.iter()) {
        seen.extend(&output.stdout);
        seen.extend(&output.stderr);
    }
    for file in std::fs::read_dir(&dir).unwrap() {
        seen.extend(std::fs::read(file.unwrap().path()).unwrap());
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(!text.contains("RECOGNISABLE"), "a key leaked");
    assert!(text.contains("TEST_KEY"), "the variable's name is recorded");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run repeated with its seed draws the same jitter: the backoff sleeps
/// match to the nanosecond, and the report names the seed.
#[test]
fn a_run_repeated_with_its_seed_sleeps_the_same() {
    let sleeps = |seed: &str| {
        let args = ["run", "--scenario", "server-error-then-ok", "--requests", "3", "--concurrency", "3"];
        let args = [&args[..], &["--seed", seed, "--no-record", "--json"]].concat();
        let out = stdout(&stallscope(&args, &[("STALLSCOPE_BACKOFF_JITTER", "full")]));
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["seed"].as_u64(), seed.parse().ok());
        let streams = report["streams"].as_array().unwrap().clone();
        streams.iter().map(|s| s["backoff_sleeps_ms"].clone()).collect::<Vec<_>>()
    };
    let first = sleeps("7");
    assert!(first.iter().all(|s| s.as_array().is_some_and(|a| a.len() == 1)), "{first:?}");
    assert_eq!(sleeps("7"), first);
    assert_ne!(sleeps("8"), first);
}

/// The issue's check: with the defaults and additive escalation, the call's
/// worst case is 7065 s (each timer escalated, then summed).
#[test]
fn budget_escalates_each_timer_before_summing() {
    let out = stdout(&stallscope(&["--set", "TIMEOUT_ESCALATION=additive", "budget", "--json"], &[]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let call = report["layers"].as_array().unwrap().iter().find(|l| l["name"] == "call").unwrap();
    assert_eq!(call["worst"].as_f64(), Some(7065.0), "{out}");
}

/// The issue's check: a recorded run of `rate-limited-ms` keeps the header
/// its waits came from, in the order the events happened.
#[test]
fn a_recorded_rate_limited_run_exports_its_retry_after_ms_header() {
    let db = std::env::temp_dir().join(format!("stallscope-cli-ratelimited-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&db);
    let path = db.to_str().unwrap();
    stdout(&stallscope(&["run", "--scenario", "rate-limited-ms", "--db", path, "--json"], &[]));
    let out = stdout(&stallscope(&["export", "1", "--format", "jsonl", "--db", path], &[]));
    let events: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let headers = events.iter().find(|e| e["kind"]["type"] == "response_headers").unwrap();
    let pairs = headers["kind"]["headers"].as_array().unwrap();
    assert!(pairs.iter().any(|p| p[0] == "retry-after-ms" && p[1] == "700"), "{headers}");
    let types: Vec<&str> =
        events.iter().filter(|e| e["attempt"] == 1).filter_map(|e| e["kind"]["type"].as_str()).collect();
    let at = |t: &str| types.iter().position(|x| *x == t).unwrap();
    assert!(at("headers_received") < at("response_headers") && at("response_headers") < at("rate_limit_observed"));
    assert!(at("error_body") < at("attempt_ended") && at("attempt_ended") < at("error_classified"), "{types:?}");
    let _ = std::fs::remove_file(&db);
}

/// `whatif --json` has the fixed shape scripts rely on, and bad input is
/// one clear message.
#[test]
fn whatif_json_has_a_fixed_shape_and_refuses_bad_assumptions() {
    let db = std::env::temp_dir().join(format!("stallscope-cli-whatif-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&db);
    let path = db.to_str().unwrap();
    stdout(&stallscope(&["run", "--scenario", "silent-stall", "--db", path, "--json"], &[]));

    let out = stdout(&stallscope(&["--set", "SSE_IDLE_TIMEOUT_S=0.4", "whatif", "1", "--db", path, "--json"], &[]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["changed"], false, "a sooner idle timer changes when, not what: {out}");
    let stream = &report["streams"][0];
    let keys: Vec<&str> = stream.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "after",
            "assumptions",
            "before",
            "changed",
            "ended_sooner_s",
            "false_positives",
            "notes",
            "sooner_s",
            "stream",
            "verdict"
        ]
    );
    assert!((stream["sooner_s"].as_f64().unwrap() - 0.6).abs() < 0.01, "{out}");
    let summary = &report["summary"];
    assert_eq!(summary["sooner"], summary["streams"], "{out}");
    assert!(summary["time_saved_s"].as_f64().unwrap() > 0.59, "{out}");
    assert_eq!(
        (&stream["verdict"]["before"]["kind"], &stream["verdict"]["after"]["kind"]),
        (&"silent_stall".into(), &"silent_stall".into())
    );
    let verdicts = &report["verdicts"];
    assert_eq!(verdicts["after"]["groups"][0]["kind"], "silent_stall", "{out}");
    assert_eq!(stream["before"]["fired"][0]["timer"], "idle");
    let (before, after) = (&stream["before"]["fired"][0]["at_s"], &stream["after"]["fired"][0]["at_s"]);
    assert!(before.as_f64().unwrap() - after.as_f64().unwrap() > 0.59, "{before} {after}");

    let out =
        stdout(&stallscope(&["--set", "SSE_DATA_STALL_TIMEOUT_S=0.2", "whatif", "1", "--db", path, "--json"], &[]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((report["changed"].as_bool(), report["summary"]["changed"].as_u64()), (Some(true), Some(1)));

    let bad = stallscope(&["whatif", "1", "--db", path, "--assume", "stall=forever"], &[]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("stall=forever") && err.contains("silence, keepalives, stop"),
        "{err}"
    );
    let missing = stallscope(&["whatif", "9", "--db", path], &[]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no run 9"));
    let _ = std::fs::remove_file(&db);
}

/// Starts `stallscope ARGS` (a `sim` command) and reads the URL it prints.
/// The child is killed when the returned guard drops.
fn serve(args: &[&str]) -> (ChildGuard, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .args(args)
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (ChildGuard(child), url)
}

/// Kills and reaps a child process when dropped, even when a test fails.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The issue's check: a recorded silent-stall run, served by `sim
/// --from-run`, is met again by `run --config` pointed at it: the idle
/// timer fires in attempt 1 and attempt 2 completes.
#[test]
fn sim_from_run_serves_a_recorded_run_to_run_config() {
    let dir = temp("from-run");
    let (recorded, replayed) = (dir.join("recorded.db"), dir.join("replayed.db"));
    let recorded = recorded.to_str().unwrap();
    stdout(&stallscope(&["run", "--scenario", "silent-stall", "--db", recorded, "--json"], &[]));
    let (_server, url) = serve(&["sim", "--from-run", "1", "--db", recorded]);
    let config = dir.join("config.toml");
    let row = format!(
        "[[provider]]\nname = \"sim\"\nkind = \"openai-chat\"\nbase_url = \"{url}/v1\"\nmodel = \"sim-model-a\"\n"
    );
    std::fs::write(&config, row).unwrap();
    let sets = ["--set", "SSE_IDLE_TIMEOUT_S=1", "--set", "PROVIDER_STREAM_BACKOFF_S=0.05"];
    let replayed = replayed.to_str().unwrap();
    let args = [&["--config", config.to_str().unwrap()][..], &sets, &["run", "--db", replayed, "--json"]].concat();
    let report: serde_json::Value = serde_json::from_str(&stdout(&stallscope(&args, &[]))).unwrap();
    let stream = &report["streams"][0];
    assert_eq!((stream["outcome"].as_str(), stream["attempts"].as_u64()), (Some("ok"), Some(2)), "{report}");
    let out = stdout(&stallscope(&["export", "1", "--format", "jsonl", "--db", replayed], &[]));
    let fired: Vec<(u64, String)> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"]["type"] == "timer_fired")
        .map(|e| (e["attempt"].as_u64().unwrap(), e["kind"]["timer"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(fired, [(1, "idle".to_owned())]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An operator's own scenario file runs with `run --scenario-file` and is
/// served by `sim --scenario-file`.
#[test]
fn a_scenario_file_runs_and_is_served() {
    let dir = temp("scenario-file");
    let path = dir.join("flaky.toml");
    let story = r#"
description = "One 503, then a healthy stream."
[run]
STALLSCOPE_PROVIDER_STREAM_BACKOFF_S = 0.05

[[attempts]]
status = 503

[[attempts]]
steps = [{ content = "ok ", count = 3, every_ms = 5 }]
"#;
    std::fs::write(&path, story).unwrap();
    let path = path.to_str().unwrap();
    let out = stdout(&stallscope(&["run", "--scenario-file", path, "--no-record", "--json"], &[]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let stream = &report["streams"][0];
    assert_eq!(
        (stream["outcome"].as_str(), stream["attempts"].as_u64(), stream["content"].as_str()),
        (Some("ok"), Some(2), Some("ok ok ok ")),
        "{report}"
    );
    assert_eq!(report["scenario"].as_str(), Some(path), "{report}");

    let (_server, url) = serve(&["sim", "--scenario-file", path]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let statuses = runtime.block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let mut statuses = Vec::new();
        for _ in 0..2 {
            let response = client.post(format!("{url}/v1/chat/completions")).body("{}").send().await.unwrap();
            statuses.push((response.status().as_u16(), response.text().await.unwrap().ends_with("data: [DONE]\n\n")));
        }
        statuses
    });
    assert_eq!(statuses, [(503, false), (200, true)]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A typo in a step name, a value of the wrong type and an unknown
/// top-level key each give one line naming the file, the line and column,
/// and what is allowed.
#[test]
fn a_bad_scenario_file_names_the_line_and_what_is_allowed() {
    let dir = temp("bad-scenario");
    let cases = [
        (
            "[[attempts]]\nsteps = [\n  { content = \"a\" },\n  { stal_ms = 5 },\n]\n",
            "line 4, column 5: unknown field `stal_ms`, expected one of `preamble`, `open_block`, `content`",
        ),
        ("[[attempts]]\nheaders_delay_ms = \"soon\"\n", "line 2, column 20: `headers_delay_ms`: invalid type: string"),
        (
            "decription = \"x\"\n[[attempts]]\n",
            "line 1, column 1: unknown field `decription`, expected one of `description`",
        ),
    ];
    for (i, (text, wanted)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let path = path.to_str().unwrap();
        for args in [["run", "--scenario-file", path, "--no-record"].as_slice(), &["sim", "--scenario-file", path]] {
            let (command, output) = (args[0], stallscope(args, &[]));
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{command} {path}: {stderr}");
            assert!(stderr.contains(&format!("scenario {path}, {wanted}")), "{command} {path}: {stderr}");
            assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tune` prints each timer's verdict with its evidence, then the
/// suggestions as `--set` lines and a `.env` block; `--json` has a fixed
/// shape; a run with nothing to catch says why it cannot be tuned.
#[test]
fn tune_prints_set_lines_an_env_block_and_a_fixed_json_shape() {
    let dir = temp("tune");
    let db = dir.join("runs.db");
    let path = db.to_str().unwrap();
    stdout(&stallscope(&["run", "--scenario", "ping-flood-stall", "--db", path, "--label", "canary"], &[]));
    stdout(&stallscope(&["run", "--scenario", "healthy", "--db", path, "--label", "canary"], &[]));
    let scaled = ["--floor-scale", "0.001"];

    let out = stdout(&stallscope(&[&["tune", "--runs", "1,2", "--db", path][..], &scaled].concat(), &[]));
    assert!(out.starts_with("tune 2 runs over "), "{out}");
    assert!(out.contains("each value is checked against these 2 healthy attempts: it fits this traffic"), "{out}");
    assert!(out.contains("\ndata_stall (STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S): 0.5 s → "), "{out}");
    assert!(out.contains("the longest healthy wait for progress was "), "{out}");
    assert!(out.contains("would have caught this stall"), "{out}");
    let set = out
        .split_whitespace()
        .skip_while(|w| *w != "--set")
        .find(|w| w.starts_with("SSE_DATA_STALL_TIMEOUT_S="))
        .unwrap_or_else(|| panic!("{out}"));
    let env = out.split("As .env:\n").nth(1).unwrap_or_else(|| panic!("{out}"));
    assert!(env.lines().any(|line| line == format!("STALLSCOPE_{set}")), "{out}");
    // The same runs chosen by their label.
    let labelled = stdout(&stallscope(
        &[&["tune", "--label", "canary", "--since", "1d", "--db", path][..], &scaled].concat(),
        &[],
    ));
    assert!(labelled.contains(&format!("--set {set}")), "{labelled}");

    // `runs show` carries what tune finds on its run on each verdict it
    // would change.
    let show = |extra: &[&str]| stdout(&stallscope(&[&["runs", "show", "1", "--db", path][..], extra].concat(), &[]));
    let shown = show(&scaled);
    assert!(shown.contains("checked: SSE_DATA_STALL_TIMEOUT_S="), "{shown}");
    assert!(shown.contains("it fits this traffic, not every day"), "{shown}");
    let report: serde_json::Value = serde_json::from_str(&show(&["--json", "--floor-scale", "0.001"])).unwrap();
    let checked = &report["streams"][0]["diagnosis"]["checked"];
    assert_eq!(checked["false_positives"], 0, "{report}");
    assert!(checked["healthy_attempts"].as_u64().unwrap() > 0, "{report}");
    assert!(!show(&["--no-check"]).contains("checked:"));
    // At the scale of real traffic the story's 0.5 s is already tighter
    // than any real stream allows: nothing is suggested.
    let real = stdout(&stallscope(&["tune", "1", "--db", path], &[]));
    assert!(real.contains("is itself tighter than real traffic allows"), "{real}");
    assert!(!real.contains("As --set:"), "{real}");
    assert!(!show(&[]).contains("checked:"));

    // A healthy run says how tight each timer can go, and succeeds.
    let healthy = stdout(&stallscope(&[&["tune", "2", "--db", path][..], &scaled].concat(), &[]));
    assert!(healthy.contains("No stall on these runs"), "{healthy}");
    assert!(healthy.contains("the tightest value firing on none is"), "{healthy}");

    let json = stdout(&stallscope(&[&["tune", "--runs", "1,2", "--db", path, "--json"][..], &scaled].concat(), &[]));
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().map(String::as_str).collect::<Vec<_>>().join(",");
    assert_eq!(
        keys(&report),
        "assumptions,combined,fidelity,floor_scale,healthy_attempts,probes,replayed_runs,routes,runs,span_s,stalls,\
         suggested,timers"
    );
    assert_eq!(
        keys(&report["timers"][0]),
        "current_s,earlier_s,evidence,floor_s,headroom,probes,safe_s,suggested_s,tightest_s,timer,tunable,unit,verdict"
    );
    assert_eq!(keys(&report["timers"][0]["headroom"]), "attempts,p50,p90,p99,worst,worst_at");
    assert_eq!(
        keys(&report["combined"]),
        "assumed,assumptions,caught,false_positives,healthy_attempts,lost,runs,saved,settings,sooner_s,unknown"
    );
    let timers: Vec<&str> = report["timers"].as_array().unwrap().iter().map(|t| t["timer"].as_str().unwrap()).collect();
    assert_eq!(timers, ["ttfb", "idle", "data_stall", "min_rate", "total"]);
    assert_eq!(report["combined"]["false_positives"], serde_json::json!([]));
    assert_eq!(report["runs"], serde_json::json!([1, 2]));

    let cases: [(&[&str], &str); 6] = [
        (&["tune", "9", "--db", path], "no run 9"),
        (&["tune", "--db", path], "give a run, --runs RUN,…, or --label LABEL and/or --since DURATION"),
        (&["tune", "--label", "nope", "--db", path], "no ended run labelled \"nope\""),
        (&["tune", "--since", "soon", "--db", path], "--since soon: `soon` is not a duration"),
        (&["tune", "1", "--floor-scale", "2", "--db", path], "floor scale 2: allowed: above 0 and at most 1"),
        (&["--set", "SSE_IDLE_TIMEOUT_S=1", "tune", "1", "--db", path], "--set SSE_IDLE_TIMEOUT_S=1: tune searches"),
    ];
    for (args, wanted) in cases {
        let output = stallscope(args, &[]);
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && err.contains(wanted), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `explain` lists every rule tried, with why, up to the one that matched,
/// for a response given on the command line (with the config file's rules)
/// or a recorded attempt (with the verdict the run recorded).
#[test]
fn explain_names_each_rule_tried_and_the_match() {
    let out =
        stdout(&stallscope(&["explain", "--status", "429", "--header", "retry-after: 3", "--body", "slow down"], &[]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "failure: HTTP 429: slow down", "{out}");
    assert_eq!(lines[1], "rules tried, in order (no user rules, then the built-ins for HTTP error responses):");
    assert!(lines[2].starts_with("  no    builtin: context overflow: the body has none of"), "{out}");
    assert_eq!(lines[3], "  no    builtin: status 429 insufficient_quota: the body lacks \"insufficient_quota\"");
    assert_eq!(lines[4], "  MATCH builtin: status 429: status 429");
    assert_eq!(lines[5], "verdict: rate_limit by builtin: status 429; rate_limit is retried");
    assert_eq!(lines[6], "the server asked to wait 3.000 s (header value \"3\")");

    let dir = temp("explain");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[[classifier.rule]]\nname = \"vllm\"\nbody_contains = \"queue full\"\ncategory = \"rate_limit\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let out = stdout(&stallscope(&["--config", config, "explain", "--status", "500", "--body", "Queue Full"], &[]));
    assert!(out.contains("(1 user rule, then the built-ins for HTTP error responses)"), "{out}");
    assert!(out.contains("  MATCH user rule 1 (vllm): the body or error contains \"queue full\"\n"), "{out}");
    assert!(!out.contains("builtin:"), "no built-in is tried after a match: {out}");

    let out = stdout(&stallscope(&["explain", "--kind", "reset", "--body", "peer went away"], &[]));
    assert!(out.contains("  MATCH builtin: connection reset: the transport reported reset\n"), "{out}");

    let db = dir.join("runs.db");
    let path = db.to_str().unwrap();
    stdout(&stallscope(&["run", "--scenario", "rate-limited-seconds", "--db", path], &[]));
    let out = stdout(&stallscope(&["explain", "--run", "1", "--stream", "0", "--db", path], &[]));
    assert!(out.starts_with("attempt 1 of stream 0 of run 1, with the headers the recorder keeps\n"), "{out}");
    assert!(out.contains("  MATCH builtin: status 429: status 429\n"), "{out}");
    assert!(out.contains("the server asked to wait 1.000 s (header value \"1\")"), "{out}");
    assert!(out.ends_with("recorded verdict (the run's own rules): rate_limit by builtin: status 429\n"), "{out}");

    let cases: [(&[&str], &str); 6] = [
        (&["explain"], "explain needs a failure: give --status"),
        (&["explain", "--kind", "gateway"], "--kind gateway is not accepted; allowed: refused, unreachable"),
        (&["explain", "--status", "500", "--header", "no colon"], "--header \"no colon\" is not accepted"),
        (&["explain", "--timer", "idle", "--status", "500"], "--status does not go with --kind timeout"),
        (&["explain", "--timer", "nap"], "--timer nap is not accepted; allowed: connect, ttfb, idle"),
        (
            &["explain", "--run", "1", "--stream", "0", "--attempt", "2", "--db", path],
            "attempt 2 of stream 0 completed",
        ),
    ];
    for (args, wanted) in cases {
        let output = stallscope(args, &[]);
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && err.contains(wanted), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review D5 and R2, through the whole path: a user rule on a header
/// outside the recorder's allowlist (`x-envoy-overloaded`) classifies the
/// replay as it did live, and a key a gateway echoes in its error body
/// reaches neither the database nor an export, bodies recorded raw.
#[test]
fn a_rule_on_an_unlisted_header_replays_and_an_echoed_key_is_never_recorded() {
    const ECHOED: &str = "sk-proj-ECHOEDKEY0123456789";
    let dir = temp("rule-header");
    let scenario = dir.join("envoy.toml");
    std::fs::write(
        &scenario,
        format!(
            "description = \"An Envoy that sheds load\"\n\n[[attempts]]\nstatus = 503\nheaders = {{ \
             \"x-envoy-overloaded\" = \"true\" }}\nbody = \"Incorrect API key provided: {ECHOED}\"\n\n[[attempts]]\n\
             steps = [{{ content = \"tok \", count = 5, every_ms = 10 }}]\n"
        ),
    )
    .unwrap();
    let (mut sim, url) = serve_sim(&["--scenario-file", scenario.to_str().unwrap()]);
    let config = dir.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[[provider]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\n\n\
             [[classifier.rule]]\nname = \"envoy\"\nheader = \"X-Envoy-Overloaded\"\ncategory = \"rate_limit\"\n\n\
             [tunables]\nSTALLSCOPE_RECORD_BODIES = \"raw\"\nSTALLSCOPE_PROVIDER_STREAM_BACKOFF_S = 0.01\n"
        ),
    )
    .unwrap();
    let db = dir.join("r.db");
    let (config, path) = (config.to_str().unwrap(), db.to_str().unwrap());
    let run = stdout(&stallscope(&["--config", config, "run", "--db", path, "--json"], &[]));
    let whatif = stdout(&stallscope(&["whatif", "1", "--db", path, "--json"], &[]));
    let export = stdout(&stallscope(&["export", "1", "--db", path, "--format", "jsonl", "--bodies"], &[]));
    let _ = sim.kill();
    let _ = sim.wait();

    let report: serde_json::Value = serde_json::from_str(&run).unwrap();
    assert_eq!(report["streams"][0]["outcome"], "ok", "{run}");
    let live = export.lines().find(|l| l.contains("\"error_classified\"")).unwrap_or_else(|| panic!("{export}"));
    assert!(live.contains("\"rate_limit\"") && live.contains("envoy"), "the rule classified live: {live}");
    let replayed: serde_json::Value = serde_json::from_str(&whatif).unwrap();
    assert_eq!(replayed["changed"], false, "{whatif}");
    let stream = &replayed["streams"][0];
    assert_eq!(stream["before"]["categories"], serde_json::json!(["rate_limit"]), "{whatif}");
    assert_eq!(stream["after"]["categories"], stream["before"]["categories"], "{whatif}");

    let mut kept = std::fs::read(&db).unwrap();
    kept.extend(export.as_bytes());
    assert!(!String::from_utf8_lossy(&kept).contains("ECHOEDKEY"), "the echoed key was recorded");
    let _ = std::fs::remove_dir_all(&dir);
}
