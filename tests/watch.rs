//! `stallscope watch` against the simulator on loopback: rounds recorded
//! like runs and counted into metrics, retention, a database that cannot
//! be written, and Ctrl-C on the real binary.

mod programs;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stallscope::metrics::{Metrics, RoundResult};
use stallscope::providers::Dialect;
use stallscope::store::Store;
use stallscope::store::runs::RunStatus;
use stallscope::watch::{CallPlan, RecordingChange, Retention, Round, RoundReport, Slot, WatchEvent, WatchPlan, watch};
use tokio_util::sync::CancellationToken;

use programs::{interrupt_once_started, temp_dir};

fn plan(scenario: &str, db: Option<PathBuf>, retention: Retention) -> WatchPlan {
    WatchPlan {
        round: Round::Scenario { name: scenario.into(), dialect: Dialect::OpenAiChat },
        calls: CallPlan { requests: 2, prompt: "hello".into(), overrides: Vec::new() },
        every: Duration::from_millis(200),
        site: "lab".into(),
        db,
        retention,
        metrics_addr: None,
        otlp: None,
    }
}

/// Watches until `rounds` rounds have ended, calling `between` after
/// each; returns their reports and the metrics.
async fn watch_rounds(
    plan: &WatchPlan,
    rounds: usize,
    mut between: impl FnMut(&RoundReport),
) -> (Vec<RoundReport>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let cancel = CancellationToken::new();
    let mut seen = Vec::new();
    let ran = watch(plan, &[], Arc::clone(&metrics), &cancel, |event| {
        if let WatchEvent::Round(round) = event {
            between(&round);
            seen.push(*round);
            if seen.len() == rounds {
                cancel.cancel();
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(ran as usize, rounds);
    (seen, metrics)
}

fn series(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_are_recorded_as_labelled_runs_and_retention_keeps_the_newest() {
    let dir = temp_dir("watch-keep");
    let db = dir.join("w.db");
    let (rounds, metrics) = watch_rounds(&plan("healthy", Some(db.clone()), Retention::Rounds(2)), 4, |_| {}).await;
    let ids: Vec<i64> = rounds.iter().map(|r| r.report.as_ref().unwrap().run_id.unwrap()).collect();
    assert!(rounds.iter().all(|r| r.result == RoundResult::Recorded && r.recording.is_none()));
    assert_eq!(rounds[0].slot, Slot { index: 0, skipped: 0 }, "the first round starts at once");
    // Rounds 0 and 1 are kept until rounds 2 and 3 push them out.
    let deleted: Vec<Vec<i64>> = rounds.iter().map(|r| r.deleted.clone()).collect();
    assert_eq!(deleted, vec![vec![], vec![], vec![ids[0]], vec![ids[1]]]);
    let store = Store::open(&db).unwrap();
    let kept: Vec<(i64, Option<String>, Option<String>)> =
        store.list_runs().unwrap().into_iter().map(|r| (r.id, r.label, r.scenario)).collect();
    let round = |id| (id, Some("watch@lab".to_owned()), Some("healthy".to_owned()));
    assert_eq!(kept, vec![round(ids[3]), round(ids[2])]);
    let text = metrics.encode();
    assert_eq!(
        series(&text, r#"stallscope_calls_total{site="lab",provider="sim",model="sim-model-a",outcome="ok",verdict="#),
        8.0
    );
    assert_eq!(series(&text, r#"stallscope_watch_rounds_total{site="lab",result="recorded"}"#), 4.0);
    assert_eq!(series(&text, r#"stallscope_watch_recording{site="lab"}"#), 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_cannot_be_written_turns_recording_off_once_and_the_watch_goes_on() {
    let dir = temp_dir("watch-readonly");
    // A directory that cannot be created (a file is in its place), even by
    // root, which ignores read-only permissions; after round 1 it can.
    let parent = dir.join("not-a-dir");
    std::fs::write(&parent, "").unwrap();
    let db = parent.join("w.db");
    let mut ended = 0;
    let fix = |_: &RoundReport| {
        ended += 1;
        if ended == 2 {
            std::fs::remove_file(&parent).unwrap();
        }
    };
    let (rounds, metrics) =
        watch_rounds(&plan("ping-flood-stall", Some(db.clone()), Retention::Rounds(5)), 3, fix).await;
    match &rounds[0].recording {
        Some(RecordingChange::Stopped(why)) => assert!(why.contains("not-a-dir"), "{why}"),
        other => panic!("recording should stop at the first round, not {other:?}"),
    }
    assert_eq!(rounds[1].recording, None, "said once");
    assert_eq!(rounds[2].recording, Some(RecordingChange::Resumed));
    let results: Vec<RoundResult> = rounds.iter().map(|r| r.result).collect();
    assert_eq!(results, [RoundResult::Unrecorded, RoundResult::Unrecorded, RoundResult::Recorded]);
    for round in &rounds[..2] {
        let report = round.report.as_ref().expect("the calls ran unrecorded");
        assert_eq!((report.run_id, report.summary.ok), (None, 2));
    }
    let text = metrics.encode();
    // Each call's first attempt stalled with only keep-alives arriving.
    assert_eq!(
        series(
            &text,
            r#"stallscope_timer_fires_total{site="lab",provider="sim",model="sim-model-a",timer="data_stall"}"#
        ),
        6.0
    );
    assert_eq!(series(&text, r#"stallscope_watch_rounds_total{site="lab",result="unrecorded"}"#), 2.0);
    assert_eq!(series(&text, r#"stallscope_watch_recording{site="lab"}"#), 1.0);
    assert_eq!(Store::open(&db).unwrap().list_runs().unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_outage_is_recorded_and_counted_and_the_watch_goes_on() {
    let dir = temp_dir("watch-outage");
    // A configured provider nobody listens for: every connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.join("config.toml");
    let row = format!(
        "[[provider]]\nname = \"down\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:{closed}\"\nmodel = \"m\"\n"
    );
    std::fs::write(&config, row).unwrap();
    let mut plan = plan("healthy", Some(dir.join("w.db")), Retention::Rounds(5));
    plan.round = Round::Calls { config: Some(config), target: None };
    plan.calls.overrides = vec!["PROVIDER_STREAM_BACKOFF_S=0.01".into()];
    let (rounds, metrics) = watch_rounds(&plan, 2, |_| {}).await;
    for round in &rounds {
        assert_eq!(round.result, RoundResult::Recorded);
        let report = round.report.as_ref().unwrap();
        assert_eq!((report.summary.failed, report.summary.ok), (2, 0));
    }
    let text = metrics.encode();
    assert_eq!(
        series(
            &text,
            r#"stallscope_calls_total{site="lab",provider="down",model="m",outcome="failed",verdict="refused"}"#
        ),
        4.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_cannot_run_at_first_ends_the_watch_with_its_reason() {
    let plan = plan("no-such-scenario", None, Retention::Rounds(5));
    let error = watch(&plan, &[], Arc::new(Metrics::new()), &CancellationToken::new(), |_| {}).await.unwrap_err();
    assert!(error.to_string().contains("no-such-scenario"), "{error}");
}

#[test]
fn ctrl_c_ends_the_round_its_record_and_the_watch_with_exit_0() {
    let dir = temp_dir("watch-ctrl-c");
    let db = dir.join("w.db");
    // Each call stalls for a minute: the round is in flight when Ctrl-C comes.
    let watch = ["watch", "--scenario", "silent-stall", "--every", "1h", "--site", "lab", "--requests", "2"];
    let args = [&watch[..], &["--metrics-addr", "127.0.0.1:0", "--set", "SSE_IDLE_TIMEOUT_S=60"]].concat();
    let output = interrupt_once_started(&args, &db, 2);
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("serving metrics on http://127.0.0.1:"), "{stderr}");
    assert!(stdout.starts_with("round 0: recorded, stopped: 0 ok, 0 partial, 0 failed, 2 cancelled"), "{stdout}");
    let runs = Store::open(&db).unwrap().list_runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].status, runs[0].label.as_deref()), (RunStatus::Stopped, Some("watch@lab")));
    assert_eq!(runs[0].outcomes.cancelled, 2);
    let _ = std::fs::remove_dir_all(&dir);
}
