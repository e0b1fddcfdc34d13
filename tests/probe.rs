//! Route readiness against the simulator on loopback: routes whose
//! simulators answer differently, probed through the library and through
//! the binary, with the matrix, the ready count, the exit status and the
//! recorded run checked, and the keys looked for everywhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stallscope::diagnosis::Severity;
use stallscope::probe::{ProbePlan, Readiness, probe};
use stallscope::session::RecordTo;
use stallscope::sim::{Scenario, SimServer};
use stallscope::store::Store;
use tokio_util::sync::CancellationToken;

/// A key only the environment holds; it must never be seen again.
const KEY: &str = "sk-probe-RECOGNISABLE-93ab1c";

/// Answers anything at once.
const HEALTHY: &str = "[[attempts]]\nsteps = [{ content = \"ok\" }]\n";

/// Answers a short prompt; a request of 4000 bytes or more gets its
/// headers and opening event, then silence (every attempt).
const LARGE_STALL: &str = "[[attempts]]\nsteps = [{ content = \"ok\" }]\n\n[large_requests]\nfrom_bytes = 4000\n\n\
                           [[large_requests.attempts]]\nsteps = [{ preamble = true }, { stall_ms = \"forever\" }]\n";

/// Timers and retries scaled down so a stall costs well under a second.
const TUNABLES: &str = "[tunables]\nSSE_IDLE_TIMEOUT_S = 0.3\nSSE_DATA_STALL_TIMEOUT_S = 0.3\n\
                        PROVIDER_STREAM_RETRIES = 1\nPROVIDER_STREAM_BACKOFF_S = 0.02\n";

/// A directory of this test's own, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stallscope-probe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn serve(text: &str) -> SimServer {
    SimServer::start(Scenario::from_toml(text, "test.toml").unwrap(), 0).await.unwrap()
}

fn row(name: &str, sim: &SimServer, key_env: Option<&str>) -> String {
    let key = key_env.map(|k| format!("api_key_env = \"{k}\"\n")).unwrap_or_default();
    format!(
        "[[provider]]\nname = \"{name}\"\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n{key}\n",
        sim.base_url()
    )
}

/// The simulators and a config of four routes: healthy, one that stalls
/// on a large request, one whose key variable is not set, and one whose
/// key is set (to [`KEY`]).
struct Rig {
    _sims: [SimServer; 2],
    config: PathBuf,
}

async fn rig(dir: &Path, extra: &str) -> Rig {
    let (healthy, large) = (serve(HEALTHY).await, serve(LARGE_STALL).await);
    let config = dir.join("config.toml");
    let text = [
        row("healthy", &healthy, None),
        row("bigstall", &large, None),
        row("nokey", &healthy, Some("PROBE_TEST_UNSET_KEY")),
        row("keyed", &healthy, Some("PROBE_TEST_KEY")),
        TUNABLES.to_owned(),
        extra.to_owned(),
    ]
    .concat();
    std::fs::write(&config, text).unwrap();
    Rig { _sims: [healthy, large], config }
}

fn env() -> Vec<(String, String)> {
    vec![("PROBE_TEST_KEY".to_owned(), KEY.to_owned())]
}

/// Every byte of the files under `dir` (the database and its journal).
fn files_text(dir: &Path) -> String {
    let mut seen = Vec::new();
    for file in std::fs::read_dir(dir).unwrap() {
        seen.extend(std::fs::read(file.unwrap().path()).unwrap());
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_matrix_names_the_route_that_stalls_only_on_a_realistic_payload() {
    let dir = scratch("library");
    // The config's [probe] section sizes the realistic payload: 1500
    // tokens is about 6000 bytes, over the large-request threshold.
    let rig = rig(&dir, "[probe]\ncontext_tokens = 1500\n").await;
    let db = dir.join("probe.db");
    let plan = ProbePlan {
        config: Some(rig.config.clone()),
        overrides: Vec::new(),
        edits: Vec::new(),
        context_tokens: None,
        concurrency: 4,
        recording: Some(RecordTo { db: db.clone(), label: Some("nightly".to_owned()), batch: None }),
        seed: Some(3),
    };
    let readiness = probe(&plan, &env(), None, &CancellationToken::new()).await.unwrap();
    let routes: Vec<(&str, bool)> = readiness.routes.iter().map(|r| (r.route.as_str(), r.ready)).collect();
    assert_eq!(routes, [("healthy/m", true), ("bigstall/m", false), ("nokey/m", false), ("keyed/m", true)]);
    assert_eq!((readiness.ready, readiness.routes_total, readiness.context_tokens), (2, 4, 1500));
    assert!(!readiness.all_ready() && !readiness.stopped);

    let healthy = &readiness.routes[0];
    let tiny = healthy.tiny.as_ref().unwrap();
    assert_eq!((tiny.outcome, tiny.attempts, tiny.severity), ("ok", 1, Severity::Ok));
    assert!(tiny.ttfb_ms.is_some() && tiny.elapsed_ms > 0.0, "{tiny:?}");
    assert_eq!(healthy.realistic.as_ref().map(|p| p.outcome), Some("ok"));

    // Seed 003's route: "hi" passes, the real payload stalls every time.
    let stall = &readiness.routes[1];
    let (tiny, realistic) = (stall.tiny.as_ref().unwrap(), stall.realistic.as_ref().unwrap());
    assert_eq!((tiny.outcome, tiny.severity), ("ok", Severity::Ok));
    assert_eq!((realistic.outcome, realistic.attempts, realistic.severity), ("failed", 2, Severity::Failed));
    assert_eq!(stall.verdict, Some(realistic.verdict), "the worse verdict is the route's");
    assert!(stall.summary.as_deref().is_some_and(|s| s.contains("silent stall")), "{:?}", stall.summary);
    assert!(realistic.ttfb_ms.is_some(), "headers came before the silence");

    let nokey = &readiness.routes[2];
    assert!((nokey.tiny.is_none() && nokey.realistic.is_none()), "a route that cannot be set up is not called");
    assert!(nokey.problem.as_deref().unwrap().contains("PROBE_TEST_UNSET_KEY is not set"), "{nokey:?}");

    // Recorded like any run, labelled as a probe, two streams per probed route.
    let store = Store::open(&db).unwrap();
    let run_id = readiness.run_id.expect("recorded");
    let summary = store.list_runs().unwrap().into_iter().find(|r| r.id == run_id).unwrap();
    assert_eq!(summary.label.as_deref(), Some("probe: nightly"));
    assert_eq!(store.streams(run_id).unwrap(), [0, 1, 2, 3, 4, 5]);
    let report = store.run_report(run_id).unwrap().unwrap();
    let outcomes: Vec<(&str, &str)> = report.streams.iter().map(|s| (s.provider.as_str(), s.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            ("healthy", "ok"),
            ("healthy", "ok"),
            ("bigstall", "ok"),
            ("bigstall", "failed"),
            ("keyed", "ok"),
            ("keyed", "ok")
        ]
    );
    assert_eq!(report.tunables["STALLSCOPE_FALLBACK_MODELS"], "off", "each route is probed alone");
    drop(store);
    let json = serde_json::to_string(&readiness).unwrap();
    assert!(!json.contains("RECOGNISABLE") && !files_text(&dir).contains("RECOGNISABLE"), "a key leaked");
    assert!(files_text(&dir).contains("PROBE_TEST_KEY"), "the variable's name is recorded");
    let _ = std::fs::remove_dir_all(&dir);
}

fn stallscope(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stallscope"));
    command.env_clear().env("HOME", "/nonexistent").env("XDG_CONFIG_HOME", "/nonexistent");
    command.envs(env()).args(args).output().expect("the binary runs")
}

/// Runs the binary off the runtime, which keeps serving the simulators.
async fn stallscope_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || stallscope(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_prints_the_matrix_and_exits_non_zero_when_a_route_is_not_ready() {
    let dir = scratch("cli");
    let rig = rig(&dir, "").await;
    let (config, db) = (rig.config.display().to_string(), dir.join("cli.db").display().to_string());
    let args = |extra: &[&str]| {
        [&["--config", config.as_str(), "probe", "--db", db.as_str()][..], extra]
            .concat()
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let json = stallscope_async(args(&["--context-tokens", "1500", "--json"])).await;
    assert_eq!(json.status.code(), Some(1), "{}", String::from_utf8_lossy(&json.stderr));
    assert_eq!(String::from_utf8_lossy(&json.stderr).trim(), "stallscope: 2 of 4 routes are not ready");
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>().join(",");
    assert_eq!(keys(&value), "comparisons,context_tokens,ready,routes,routes_total,run_id,stopped");
    assert_eq!(keys(&value["routes"][0]), "fixed_cut,problem,ready,realistic,route,severity,summary,tiny,verdict");
    assert_eq!(
        keys(&value["routes"][0]["tiny"]),
        "attempts,elapsed_ms,outcome,severity,silence_ms,stream,summary,ttfb_ms,verdict"
    );
    assert_eq!(value["comparisons"], serde_json::json!([]), "every route goes the same way: nothing to compare");
    assert_eq!((value["ready"].as_u64(), value["routes_total"].as_u64()), (Some(2), Some(4)));
    assert_eq!(value["routes"][1]["realistic"]["outcome"], "failed");
    assert!(value["routes"][2]["tiny"].is_null() && value["routes"][2]["problem"].is_string(), "{value}");
    assert!(value["run_id"].is_i64());

    let table = stallscope_async(args(&["--context-tokens", "1500", "--no-record"])).await;
    assert_eq!(table.status.code(), Some(1));
    let text = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("ROUTE") && lines[0].ends_with("VERDICT"), "{text}");
    assert!(lines[2].starts_with("bigstall/m") && lines[2].contains(" no ") && lines[2].contains("failed"), "{text}");
    assert!(text.contains("nokey/m: provider `nokey`: environment variable PROBE_TEST_UNSET_KEY"), "{text}");
    assert!(text.ends_with("2 of 4 routes ready (realistic payload: 1500 tokens)\n"), "{text}");

    // A payload under the threshold passes the stalling route: only the
    // missing key keeps the exit status at 1.
    let small = stallscope_async(args(&["--no-record", "--context-tokens", "200", "--json"])).await;
    let value: serde_json::Value = serde_json::from_slice(&small.stdout).unwrap();
    assert_eq!((small.status.code(), value["ready"].as_u64()), (Some(1), Some(3)));

    let mut seen = String::new();
    for output in [&json, &table, &small] {
        seen.push_str(&String::from_utf8_lossy(&output.stdout));
        seen.push_str(&String::from_utf8_lossy(&output.stderr));
    }
    seen.push_str(&files_text(&dir));
    assert!(!seen.contains("RECOGNISABLE"), "a key leaked");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_ready_exits_zero() {
    let dir = scratch("ready");
    let sim = serve(HEALTHY).await;
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        [row("a", &sim, None), row("b", &sim, Some("PROBE_TEST_KEY")), TUNABLES.to_owned()].concat(),
    )
    .unwrap();
    let args = ["--config", config.to_str().unwrap(), "probe", "--no-record", "--context-tokens", "300", "--compare"];
    let out = stallscope_async(args.iter().map(|a| (*a).to_owned()).collect()).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 of 2 routes ready"), "{text}");
    assert!(
        text.ends_with("no endpoint is configured on more than one path (directly and through a proxy) to compare\n"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_sizes_and_empty_configs_are_refused_with_what_is_allowed() {
    let dir = scratch("bad");
    let config = dir.join("config.toml");
    std::fs::write(&config, "[probe]\ncontext_tokens = 0\n[[provider]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n").unwrap();
    let config = config.to_str().unwrap();
    let out = stallscope(&["--config", config, "probe", "--no-record"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("[probe]: context_tokens 0 is not allowed; use 1 to 1000000"), "{err}");
    let out = stallscope(&["--config", config, "probe", "--no-record", "--context-tokens", "2000000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid value '2000000' for '--context-tokens <N>': 2000000 is not in 1..=1000000"), "{err}");
    let empty = dir.join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let out = stallscope(&["--config", empty.to_str().unwrap(), "probe", "--no-record"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("no route to probe"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The readiness rule is in the help, with the exit status.
#[test]
fn the_help_says_when_a_route_is_ready_and_what_the_exit_status_means() {
    let out = stallscope(&["probe", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("A route is ready when both probes end ok and neither verdict is worse than"), "{help}");
    assert!(help.contains("0 when every route is ready, 1 when any route is not"), "{help}");
}

/// The fixed JSON shape, also for a matrix that probed nothing.
#[test]
fn readiness_serializes_every_field_even_when_empty() {
    let readiness: Readiness = stallscope::probe::matrix(&[], &Default::default(), &[], None, 5);
    let value = serde_json::to_value(&readiness).unwrap();
    assert_eq!(
        value,
        serde_json::json!({"run_id": null, "context_tokens": 5, "ready": 0, "routes_total": 0, "stopped": false, "routes": [], "comparisons": []})
    );
}

#[test]
fn routes_that_cannot_be_set_up_are_neither_called_nor_recorded() {
    let dir = scratch("nokey");
    let config = dir.join("config.toml");
    let row = "[[provider]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
               api_key_env = \"PROBE_TEST_UNSET_KEY\"\n";
    std::fs::write(&config, row).unwrap();
    let db = dir.join("never.db");
    let out = stallscope(&["--config", config.to_str().unwrap(), "probe", "--db", db.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(value["run_id"].is_null() && value["routes"][0]["tiny"].is_null(), "{value}");
    assert!(value["routes"][0]["problem"].as_str().unwrap().contains("PROBE_TEST_UNSET_KEY"), "{value}");
    assert!(!db.exists(), "nothing was recorded");
    let _ = std::fs::remove_dir_all(&dir);
}
