//! Diagnosis on recorded runs: each built-in scenario (and the limits the
//! scenarios cannot show alone) is run through the real HTTP stack,
//! recorded, and its verdicts checked twice — as the run reported them and
//! as `runs show` computes them again from the stored events.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use stallscope::core::category::TimerKind;
use stallscope::core::event::{AttemptEnd, Event, EventKind, EventSink};
use stallscope::core::failover::Target;
use stallscope::diagnosis::{DeniedBy, Diagnosis, Severity, Topic, UNTRUSTED, VerdictKind};
use stallscope::providers::Dialect;
use stallscope::report::RunReport;
use stallscope::run::rig;
use stallscope::session::{RecordTo, RunSource, SessionPlan, run_session};
use stallscope::sim::builtin;
use stallscope::store::Store;
use stallscope::store::runs::RunStart;
use stallscope::tunables::Tunables;
use tokio_util::sync::CancellationToken;

fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("stallscope-diagnosis-{}-{n}-{name}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Runs `scenario` recorded, and returns the report as the run made it and
/// as the store diagnoses it again.
async fn record(
    scenario: &str,
    dialect: Dialect,
    sets: &[&str],
    calls: usize,
    cancel: CancellationToken,
) -> [RunReport; 2] {
    let source = RunSource::Scenario { name: scenario.to_owned(), dialect };
    record_source(source, sets, calls, cancel, None).await
}

/// Runs `source` recorded, as [`record`] does, its events seen by `watcher` too.
async fn record_source(
    source: RunSource,
    sets: &[&str],
    calls: usize,
    cancel: CancellationToken,
    watcher: Option<Arc<dyn EventSink>>,
) -> [RunReport; 2] {
    let db = scratch("run");
    let plan = SessionPlan {
        source,
        requests: calls,
        concurrency: calls,
        prompt: "Say hello.".to_owned(),
        overrides: sets.iter().map(|s| (*s).to_owned()).collect(),
        edits: Vec::new(),
        recording: Some(RecordTo { db: db.clone(), label: None, batch: None }),
        seed: Some(7),
    };
    let live = run_session(&plan, &[], watcher, &cancel, |_, _| {}).await.unwrap().report;
    let run = live.run_id.unwrap();
    let stored = tokio::task::spawn_blocking(move || {
        let report = Store::open(&db).unwrap().diagnosed_report(run).unwrap().unwrap();
        let _ = std::fs::remove_file(&db);
        report
    });
    [live, stored.await.unwrap()]
}

fn verdicts(report: &RunReport) -> Vec<&Diagnosis> {
    report.streams.iter().map(|s| s.diagnosis.as_ref().expect("every stream has a verdict")).collect()
}

/// What one scenario's verdict must be.
struct Expect {
    scenario: &'static str,
    sets: &'static [&'static str],
    kind: VerdictKind,
    severity: Severity,
    /// Words the summary must hold.
    says: &'static [&'static str],
    timer: Option<TimerKind>,
    denied_by: Option<DeniedBy>,
}

const fn expect(scenario: &'static str, kind: VerdictKind, severity: Severity) -> Expect {
    Expect { scenario, sets: &[], kind, severity, says: &[], timer: None, denied_by: None }
}

/// Every pattern the built-in scenarios produce, in every dialect: the
/// verdict the run reports, and the same verdict again from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_scenario_gets_the_verdict_of_its_pattern() {
    use Severity::*;
    use VerdictKind as K;
    let cases = [
        expect("healthy", K::Healthy, Ok),
        expect("malformed-missing-data", K::Healthy, Ok),
        Expect {
            says: &["the longest silence", "of the idle timer's 2 s"],
            ..expect("slow-first-token", K::HealthySlow, Notice)
        },
        Expect {
            says: &["no response headers", "until the TTFB timer (1 s) fired", "recovered on attempt 2"],
            timer: Some(TimerKind::Ttfb),
            ..expect("slow-ttfb", K::NoResponse, Recovered)
        },
        Expect {
            says: &["headers after", "of silence until the idle timer (1 s) fired", "recovered on attempt 2"],
            timer: Some(TimerKind::Idle),
            ..expect("silent-stall", K::SilentStall, Recovered)
        },
        Expect {
            says: &["keep-alives and no progress for", "until the data-stall timer (0.5 s) fired"],
            timer: Some(TimerKind::DataStall),
            ..expect("ping-flood-stall", K::KeepaliveOnlyStall, Recovered)
        },
        Expect { says: &["reads per event"], ..expect("drip", K::SlowDrip, Notice) },
        Expect {
            says: &["against a floor of 5/s", "until the throughput-floor timer (1 s) fired"],
            timer: Some(TimerKind::MinRate),
            ..expect("crawl", K::Crawl, Partial)
        },
        Expect {
            says: &["then no body byte until", "within 50 ms"],
            ..expect("proxy-buffered", K::ProxyBuffering, Notice)
        },
        Expect {
            says: &["1 progress event", "partial recovery kept 5 characters"],
            ..expect("reset-after-first-token", K::ResetMidStream, Partial)
        },
        Expect {
            says: &["of silence until the idle timer (1 s) fired", "partial recovery kept 20 characters"],
            timer: Some(TimerKind::Idle),
            ..expect("stall-after-content", K::SilentStall, Partial)
        },
        Expect {
            says: &[", headers after", "recovered on attempt 2"],
            ..expect("closed-early", K::ClosedEarly, Recovered)
        },
        Expect {
            says: &["the connection was closed after 1.", " s of silence, ", "recovered on attempt 2"],
            ..expect("idle-cut", K::IdleCut, Recovered)
        },
        Expect {
            says: &["HTTP 429", "asked to wait 0.70 s (retry-after-ms), honoured", "2 attempts alike"],
            ..expect("rate-limited-ms", K::RateLimited, Recovered)
        },
        Expect {
            says: &["asked to wait 1.00 s (retry-after), honoured"],
            ..expect("rate-limited-seconds", K::RateLimited, Recovered)
        },
        Expect {
            says: &["HTTP 503", "(retry-after), honoured"],
            ..expect("rate-limited-date", K::Overloaded, Recovered)
        },
        Expect {
            sets: &["RETRY_AFTER_MAX_S=0.5", "FALLBACK_MODELS=off"],
            says: &["asked to wait 0.70 s, refused: over the 0.5 s cap", "failed after 1 attempt"],
            denied_by: Some(DeniedBy::ServerWaitCap),
            ..expect("rate-limited-ms", K::RateLimited, Failed)
        },
        Expect {
            says: &["in-stream error", "2 attempts alike"],
            ..expect("overloaded-in-stream", K::Overloaded, Recovered)
        },
        Expect { says: &["HTTP 500"], ..expect("server-error-then-ok", K::ServerError, Recovered) },
        Expect {
            says: &["unreachable/sim-model-a", "recovered on attempt 3 on sim/sim-model-a after a failover"],
            ..expect("dead-primary", K::Refused, Recovered)
        },
        Expect { says: &["HTTP 401", "not retried"], ..expect("auth-expired", K::Auth, Failed) },
        Expect { says: &["HTTP 400"], ..expect("context-overflow", K::ContextOverflow, Failed) },
        Expect {
            says: &["not valid UTF-8", "the server_error retry budget (2) is spent"],
            denied_by: Some(DeniedBy::CategoryBudget),
            ..expect("malformed-sse", K::MalformedStream, Failed)
        },
        Expect { says: &["longer than"], ..expect("malformed-long-line", K::MalformedStream, Recovered) },
        // The deadline leaves no room for the backoff after the stall.
        Expect {
            sets: &["CALL_DEADLINE_S=1.5", "PROVIDER_STREAM_BACKOFF_S=1", "BACKOFF_JITTER=none"],
            says: &[
                "retry denied by the call deadline after silent stall",
                "would have crossed the 1.5 s call deadline",
            ],
            timer: Some(TimerKind::Idle),
            denied_by: Some(DeniedBy::Deadline),
            ..expect("silent-stall", K::RetryDenied, Failed)
        },
    ];
    let runs = cases.iter().flat_map(|case| Dialect::ALL.map(move |dialect| (case, dialect)));
    let recorded = futures_util::future::join_all(runs.map(|(case, dialect)| async move {
        (case, dialect, record(case.scenario, dialect, case.sets, 1, CancellationToken::new()).await)
    }))
    .await;
    let mut failures = Vec::new();
    for (case, dialect, [live, stored]) in &recorded {
        let name = format!("{} {:?} ({})", case.scenario, case.sets, dialect.name());
        let (d, again) = (verdicts(live)[0], verdicts(stored)[0]);
        let mut wrong = Vec::new();
        if (d.kind, d.severity) != (case.kind, case.severity) {
            wrong.push(format!("{} {} instead of {} {}", d.kind, d.severity.name(), case.kind, case.severity.name()));
        }
        wrong.extend(case.says.iter().filter(|w| !d.summary.contains(*w)).map(|w| format!("no `{w}`")));
        if case.timer.is_some() && d.basis.timer != case.timer {
            wrong.push(format!("caught by {:?}", d.basis.timer));
        }
        if d.basis.denied_by != case.denied_by {
            wrong.push(format!("denied by {:?}", d.basis.denied_by));
        }
        if d.evidence.is_empty() {
            wrong.push("without evidence".to_owned());
        }
        // Every scenario runs at once: on a machine busy with more, a timer
        // can fire late, and then the verdict must say so, with the lag.
        if !d.trusted && !d.evidence.iter().any(|e| e.topic == Topic::Lag) {
            wrong.push("untrusted without the lag as evidence".to_owned());
        }
        if d != again {
            wrong.push(format!("read back as {again:?}"));
        }
        if !wrong.is_empty() {
            failures.push(format!("{name}: {}\n  {}", wrong.join("; "), d.summary));
        }
    }
    assert!(failures.is_empty(), "{} verdicts wrong:\n{}", failures.len(), failures.join("\n"));
}

/// The case: the fleet retry budget refuses a retry, and the
/// verdict says so, with the numbers, instead of just "server error".
#[tokio::test]
async fn a_retry_the_fleet_budget_refused_says_so() {
    let sets = ["FLEET_RETRY_BUDGET_MIN=1", "FLEET_RETRY_BUDGET_PERCENT=0", "FALLBACK_MODELS=off"];
    let [live, stored] = record("server-error-then-ok", Dialect::OpenAiChat, &sets, 4, CancellationToken::new()).await;
    let denied: Vec<&Diagnosis> =
        verdicts(&live).into_iter().filter(|d| d.basis.denied_by == Some(DeniedBy::FleetBudget)).collect();
    assert!(!denied.is_empty(), "{:#?}", verdicts(&live));
    for d in &denied {
        assert_eq!((d.kind, d.severity), (VerdictKind::RetryDenied, Severity::Failed), "{}", d.summary);
        assert!(
            d.summary.contains("the fleet retry budget of sim refused a retry (1 in flight, limit 1)"),
            "{}",
            d.summary
        );
        assert_eq!(d.tunable.as_deref(), Some("STALLSCOPE_FLEET_RETRY_BUDGET_PERCENT"));
    }
    let run = live.diagnosis.as_ref().unwrap();
    let group = run.groups.iter().find(|g| g.kind == VerdictKind::RetryDenied).unwrap();
    assert!(group.summary.contains("retry denied by the fleet retry budget"), "{}", group.summary);
    assert_eq!(
        live.streams.iter().map(|s| &s.diagnosis).collect::<Vec<_>>(),
        stored.streams.iter().map(|s| &s.diagnosis).collect::<Vec<_>>()
    );
}

/// Cancels the run once a stream's headers arrive: its call is in flight
/// (a call cancelled before it starts never starts).
struct CancelInFlight(CancellationToken);

impl EventSink for CancelInFlight {
    fn emit(&self, event: Event) {
        if matches!(event.kind, EventKind::HeadersReceived { .. }) {
            self.0.cancel();
        }
    }
}

#[tokio::test]
async fn a_cancelled_call_is_cancelled() {
    let cancel = CancellationToken::new();
    let watcher = Arc::new(CancelInFlight(cancel.clone()));
    let source = RunSource::Scenario { name: "silent-stall".to_owned(), dialect: Dialect::OpenAiChat };
    let [live, stored] = record_source(source, &[], 1, cancel, Some(watcher)).await;
    let d = verdicts(&live)[0];
    assert_eq!(
        (d.kind, d.severity, d.tunable.as_deref()),
        (VerdictKind::Cancelled, Severity::Notice, None),
        "{}",
        d.summary
    );
    assert_eq!(Some(d), verdicts(&stored).first().copied());
}

/// Many streams of one pattern make one sentence with what they share
/// (three, so the fleet retry budget's floor lets every retry through).
#[tokio::test]
async fn the_run_summary_groups_streams_by_verdict() {
    let [live, _] = record("ping-flood-stall", Dialect::AnthropicMessages, &[], 3, CancellationToken::new()).await;
    let run = live.diagnosis.unwrap();
    assert_eq!((run.streams, run.untrusted, run.groups.len()), (3, 0, 1), "{run:#?}");
    assert_eq!(
        run.groups[0].summary,
        "3 of 3 streams: keep-alive-only stall, caught by the data-stall timer after 0.5 s each (3 recovered)"
    );
    assert_eq!(run.groups[0].streams, [0, 1, 2]);
}

/// The lag a timer fired with is kept by the store, and a stored run whose
/// timer fired on a late runtime is diagnosed untrustworthy.
#[test]
fn a_stored_timer_that_fired_late_is_not_trusted() {
    let db = scratch("lag");
    let mut store = Store::open(&db).unwrap();
    let tunables = Tunables::defaults();
    let run = store.begin_run(&RunStart::new(None, None, &tunables, &[])).unwrap();
    let at = |ms: u64, attempt: u32, kind: EventKind| Event { at: Duration::from_millis(ms), stream: 0, attempt, kind };
    let target = Target::new("p", "m");
    let late = Some(Duration::from_millis(250));
    let events = [
        at(0, 0, EventKind::CallStarted { target: target.clone(), context_tokens: None }),
        at(0, 1, EventKind::AttemptStarted { target, credential: None }),
        at(0, 1, EventKind::TimerArmed { timer: TimerKind::Idle, after: Duration::from_secs(1), floor: None }),
        at(5, 1, EventKind::HeadersReceived { status: 200, content_type: None }),
        at(1250, 1, EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_secs(1), lag: late }),
        at(1250, 1, EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: TimerKind::Idle }, stop_reason: None }),
    ];
    store.append_events(run, &events).unwrap();
    let d = store.diagnoses(run, &[0]).unwrap().remove(0).1;
    assert!(!d.trusted && d.summary.starts_with(UNTRUSTED), "{}", d.summary);
    assert!(d.evidence.iter().any(|e| e.topic == Topic::Lag && e.text.contains("0.25 s late")), "{:?}", d.evidence);
    drop(store);
    let _ = std::fs::remove_file(&db);
}

/// The CLI: every stream of `run --json` has the documented diagnosis
/// object, `runs show --json --no-check` prints the same, `runs show`
/// prints a verdict per stream, the run's sentence and the setting what-if
/// checked, and a trace carries the verdicts.
#[test]
fn the_cli_prints_and_exports_the_verdicts() {
    let db = scratch("cli");
    let db_text = db.to_str().unwrap();
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_stallscope"))
            .env_clear()
            .env("HOME", "/nonexistent")
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let printed =
        cli(&["run", "--scenario", "silent-stall", "--requests", "2", "--concurrency", "2", "--db", db_text, "--json"]);
    let report: serde_json::Value = serde_json::from_str(&printed).unwrap();
    for stream in report["streams"].as_array().unwrap() {
        let d = stream["diagnosis"].as_object().unwrap();
        for key in ["kind", "severity", "summary", "evidence", "tunable", "suggestion", "trusted"] {
            assert!(d.contains_key(key), "no {key} in {d:?}");
        }
        assert_eq!((d["kind"].as_str(), d["trusted"].as_bool()), (Some("silent_stall"), Some(true)));
    }
    assert_eq!(report["diagnosis"]["groups"][0]["kind"], "silent_stall");
    assert_eq!(cli(&["runs", "--db", db_text, "show", "1", "--json", "--no-check"]), printed);

    let shown = cli(&["runs", "--db", db_text, "show", "1"]);
    let verdict_lines =
        shown.lines().filter(|l| l.contains(" silent_stall ") && l.contains("silent stall: headers after")).count();
    assert_eq!(verdict_lines, 2, "{shown}");
    assert!(
        shown.contains("2 of 2 streams: silent stall, caught by the idle timer after 1 s each (2 recovered)"),
        "{shown}"
    );
    // A 1 s stall is far under the floors of real traffic: no suggestion,
    // and the run says why.
    assert!(!shown.contains("  checked: "), "{shown}");
    assert!(shown.contains("checked by what-if: no suggestion — no tighter timer keeps room"), "{shown}");
    // At the scale of this run, tune checks against the healthy retries.
    let scaled = cli(&["runs", "--db", db_text, "show", "1", "--floor-scale", "0.001"]);
    assert!(scaled.contains("  checked: SSE_IDLE_TIMEOUT_S="), "{scaled}");
    assert!(scaled.contains("would have caught these 2 stalls"), "{scaled}");

    let trace: serde_json::Value =
        serde_json::from_str(&cli(&["export", "1", "--db", db_text, "--format", "chrome-trace"])).unwrap();
    let verdicts: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("verdict: silent stall"))
        .collect();
    assert_eq!(verdicts.len(), 2);
    assert_eq!(verdicts[0]["args"]["kind"], "silent_stall");
    let _ = std::fs::remove_file(&db);
}

/// Connections that fail on loopback, each named for what failed: a TLS
/// handshake with a listener that speaks plain HTTP, and a SOCKS proxy
/// where nothing listens.
#[tokio::test]
async fn failed_connections_are_named_for_what_failed() {
    let rig = rig(builtin("healthy").unwrap(), Dialect::OpenAiChat).await.unwrap();
    let plain = rig.server.base_url();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let socks = format!("PROXY=socks5://127.0.0.1:{closed}");
    let cases = [
        (plain.replace("http://", "https://"), None, VerdictKind::TlsFailure),
        (plain.clone(), Some(socks.as_str()), VerdictKind::ProxyFailure),
    ];
    for (url, proxy, kind) in cases {
        let config = scratch("config").with_extension("toml");
        let row =
            format!("[[provider]]\nname = \"p\"\nkind = \"openai-chat\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\n");
        std::fs::write(&config, row).unwrap();
        let mut sets = vec!["FALLBACK_MODELS=off", "RETRY_BUDGET_CONNECTION=1", "PROVIDER_STREAM_BACKOFF_S=0.05"];
        sets.extend(proxy);
        let source = RunSource::Config { path: Some(config.clone()), target: None };
        let [live, stored] = record_source(source, &sets, 1, CancellationToken::new(), None).await;
        let d = verdicts(&live)[0];
        assert_eq!((d.kind, d.severity), (kind, Severity::Failed), "{}", d.summary);
        assert!(d.summary.contains("p/m after ") && d.summary.contains("2 attempts alike"), "{}", d.summary);
        assert_eq!(Some(d), verdicts(&stored).first().copied());
        let _ = std::fs::remove_file(&config);
    }
    rig.server.shutdown().await;
}
