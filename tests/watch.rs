//! `stallscope watch` against the simulator on loopback: rounds recorded
//! like runs and counted into metrics, retention, a database that cannot
//! be written or whose disk fills up (a real full tmpfs, as root), rounds
//! that are route probes, Ctrl-C on the real binary, and rounds sent to a
//! loopback OTLP receiver (before retention, and cancelled while it never
//! answers).

mod programs;
mod receiver;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use stallscope::export::otlp::{Destination, REQUEST_TIMEOUT};
use stallscope::metrics::{Metrics, RoundResult};
use stallscope::probe::is_probe_label;
use stallscope::providers::Dialect;
use stallscope::sim::{Scenario, SimServer};
use stallscope::store::Store;
use stallscope::store::runs::RunStatus;
use stallscope::watch::{CallPlan, RecordingChange, Retention, Round, RoundReport, Slot, WatchEvent, WatchPlan, watch};
use tokio_util::sync::CancellationToken;

use programs::{Running, free_port, interrupt_once_started, temp_dir, wait_for_port};
use receiver::{Answer, Receiver};

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

/// A route whose streams a hop cuts after the same silence round after
/// round is said to be, with the hop's knob (issue 24).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_cut_after_one_silence_every_round_is_said_to_be() {
    let mut plan = plan("idle-cut", None, Retention::Rounds(5));
    plan.calls.requests = 1;
    let (rounds, _) = watch_rounds(&plan, 2, |_| {}).await;
    assert_eq!(rounds[0].fixed_cuts, Vec::new(), "one cut is no pattern");
    let said: Vec<String> = rounds[1].fixed_cuts.iter().map(|c| c.sentence("rounds")).collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("route sim/sim-model-a: cut at 1.5"), "{}", said[0]);
    assert!(said[0].contains(" s of silence (±0.0"), "{}", said[0]);
    assert!(said[0].contains("in 2 of 2 rounds: a hop on this path closes streams idle for 1.5 s"), "{}", said[0]);
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

/// A small tmpfs, unmounted when dropped (also when the test fails).
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` at a new directory, or says why it cannot
    /// (mounting needs root; `.ci/run` runs as root and requires it).
    fn mount(name: &str, size: &str) -> Option<SmallDisk> {
        let path = temp_dir(name);
        let mount =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(&path).output();
        let why = match mount {
            Ok(out) if out.status.success() => return Some(SmallDisk { path }),
            Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            Err(e) => e.to_string(),
        };
        let required = std::env::var("STALLSCOPE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1");
        assert!(!required, "cannot mount a tmpfs ({why}) and STALLSCOPE_REQUIRE_EXTERNAL=1 (.ci/run runs as root)");
        eprintln!("skipped: cannot mount a tmpfs ({why}); a full disk needs root to make");
        let _ = std::fs::remove_dir_all(&path);
        None
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while file.write_all(&block).and_then(|()| file.sync_all()).is_ok() {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A disk that fills up between rounds: the canary says recording
/// stopped, keeps probing, keeps what it had recorded, and records again
/// once there is room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_recording_keeps_what_was_recorded_and_the_watch_goes_on() {
    let Some(disk) = SmallDisk::mount("watch-full-disk", "4m") else { return };
    let db = disk.path.join("w.db");
    let mut filler = None;
    let mut ended = 0;
    let fill_and_free = |_: &RoundReport| {
        ended += 1;
        match ended {
            1 => filler = Some(disk.fill()),
            3 => std::fs::remove_file(filler.take().unwrap()).unwrap(),
            _ => {}
        }
    };
    let (rounds, metrics) =
        watch_rounds(&plan("ping-flood-stall", Some(db.clone()), Retention::Rounds(10)), 4, fill_and_free).await;
    let results: Vec<RoundResult> = rounds.iter().map(|r| r.result).collect();
    assert_eq!(results[0], RoundResult::Recorded);
    match &rounds[1].recording {
        Some(RecordingChange::Stopped(why)) => assert!(why.contains("the disk is full"), "{why}"),
        other => panic!("recording should stop when the disk is full, not {other:?}"),
    }
    assert_eq!(results[1..3], [RoundResult::Unrecorded, RoundResult::Unrecorded]);
    for round in &rounds[1..3] {
        let report = round.report.as_ref().expect("the calls ran unrecorded");
        assert_eq!((report.run_id, report.summary.ok), (None, 2));
    }
    assert_eq!(rounds[3].recording, Some(RecordingChange::Resumed));
    assert_eq!(results[3], RoundResult::Recorded);
    let text = metrics.encode();
    assert_eq!(series(&text, r#"stallscope_watch_rounds_total{site="lab",result="unrecorded"}"#), 2.0);
    assert_eq!(series(&text, r#"stallscope_watch_recording{site="lab"}"#), 1.0);
    // The round recorded before the disk filled is whole, beside the one after.
    let store = Store::open(&db).unwrap();
    let kept: Vec<i64> = store.list_runs().unwrap().into_iter().map(|r| r.id).collect();
    let recorded = [&rounds[0], &rounds[3]].map(|r| r.report.as_ref().unwrap().run_id.unwrap());
    assert_eq!(kept, [recorded[1], recorded[0]]);
    let first = store.run_events(recorded[0]).unwrap();
    assert!(
        first.iter().filter(|e| matches!(e.kind, stallscope::core::event::EventKind::Finished { .. })).count() == 2
    );
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

/// Two routes for a probe: `healthy` answers anything; `bigstall` answers a
/// short prompt, but a request of 4000 bytes or more gets its headers and
/// opening event, then silence. Timers and retries are scaled down so the
/// stall costs well under a second, and the realistic payload (1500
/// tokens, about 6000 bytes) is over the threshold.
struct ProbeRig {
    _sims: [SimServer; 2],
    config: PathBuf,
}

async fn probe_rig(dir: &Path) -> ProbeRig {
    let serve = |text: &'static str| async move {
        SimServer::start(Scenario::from_toml(text, "test.toml").unwrap(), 0).await.unwrap()
    };
    let healthy = serve("[[attempts]]\nsteps = [{ content = \"ok\" }]\n").await;
    let stall = serve(
        "[[attempts]]\nsteps = [{ content = \"ok\" }]\n\n[large_requests]\nfrom_bytes = 4000\n\n\
         [[large_requests.attempts]]\nsteps = [{ preamble = true }, { stall_ms = \"forever\" }]\n",
    )
    .await;
    let row = |name: &str, sim: &SimServer| {
        format!(
            "[[provider]]\nname = \"{name}\"\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\n",
            sim.base_url()
        )
    };
    let config = dir.join("config.toml");
    let text = [
        row("healthy", &healthy),
        row("bigstall", &stall),
        "[tunables]\nSSE_IDLE_TIMEOUT_S = 0.3\nSSE_DATA_STALL_TIMEOUT_S = 0.3\n\
         PROVIDER_STREAM_RETRIES = 1\nPROVIDER_STREAM_BACKOFF_S = 0.02\n\n[probe]\ncontext_tokens = 1500\n"
            .to_owned(),
    ]
    .concat();
    std::fs::write(&config, text).unwrap();
    ProbeRig { _sims: [healthy, stall], config }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_rounds_are_recorded_as_probes_of_the_site_counted_and_pruned() {
    let dir = temp_dir("watch-probe");
    let rig = probe_rig(&dir).await;
    let db = dir.join("w.db");
    let mut plan = plan("healthy", Some(db.clone()), Retention::Rounds(1));
    plan.round = Round::Probe { config: Some(rig.config.clone()), context_tokens: None };
    let (rounds, metrics) = watch_rounds(&plan, 2, |_| {}).await;
    let mut ids = Vec::new();
    for round in &rounds {
        assert_eq!((round.result, &round.error), (RoundResult::Recorded, &None));
        let readiness = round.readiness.as_ref().expect("a probe round has a matrix");
        let ready: Vec<(&str, bool)> = readiness.routes.iter().map(|r| (r.route.as_str(), r.ready)).collect();
        assert_eq!(ready, [("healthy/m", true), ("bigstall/m", false)]);
        assert_eq!((readiness.ready, readiness.routes_total, readiness.context_tokens), (1, 2, 1500));
        // The matrix and the report are the same run: two calls per route.
        let report = round.report.as_ref().unwrap();
        assert_eq!((readiness.run_id, report.summary.ok, report.summary.failed), (report.run_id, 3, 1));
        ids.push(report.run_id.unwrap());
    }
    // `--keep 1`: the second round pushes the first out.
    assert_eq!((rounds[0].deleted.clone(), rounds[1].deleted.clone()), (vec![], vec![ids[0]]));
    let runs = Store::open(&db).unwrap().list_runs().unwrap();
    let kept: Vec<(i64, Option<&str>)> = runs.iter().map(|r| (r.id, r.label.as_deref())).collect();
    assert_eq!(kept, [(ids[1], Some("probe: watch@lab"))]);
    // So History refuses to run it again as one list of calls.
    assert!(is_probe_label(runs[0].label.as_deref().unwrap()));
    let text = metrics.encode();
    let calls = |route: &str, outcome: &str| {
        series(
            &text,
            &format!(r#"stallscope_calls_total{{site="lab",provider="{route}",model="m",outcome="{outcome}","#),
        )
    };
    assert_eq!((calls("healthy", "ok"), calls("bigstall", "ok"), calls("bigstall", "failed")), (4.0, 2.0, 2.0));
    // The stalled realistic probe's two attempts, each round.
    assert_eq!(
        series(&text, r#"stallscope_timer_fires_total{site="lab",provider="bigstall",model="m",timer="data_stall"}"#),
        4.0
    );
    assert_eq!(series(&text, r#"stallscope_route_ready{site="lab",provider="healthy",model="m"}"#), 1.0);
    assert_eq!(series(&text, r#"stallscope_route_ready{site="lab",provider="bigstall",model="m"}"#), 0.0);
    assert_eq!(series(&text, r#"stallscope_watch_rounds_total{site="lab",result="recorded"}"#), 2.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_round_with_no_route_it_can_set_up_ends_the_watch_with_why() {
    let dir = temp_dir("watch-probe-nokey");
    let config = dir.join("config.toml");
    let row = "[[provider]]\nname = \"nokey\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
               model = \"m\"\napi_key_env = \"WATCH_PROBE_TEST_UNSET_KEY\"\n";
    std::fs::write(&config, row).unwrap();
    let mut plan = plan("healthy", None, Retention::Rounds(5));
    plan.round = Round::Probe { config: Some(config), context_tokens: None };
    let error = watch(&plan, &[], Arc::new(Metrics::new()), &CancellationToken::new(), |_| {}).await.unwrap_err();
    let text = error.to_string();
    assert!(text.starts_with("no route could be probed: ") && text.contains("WATCH_PROBE_TEST_UNSET_KEY"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_probe_prints_each_rounds_readiness_and_serves_it_on_metrics() {
    let dir = temp_dir("watch-probe-cli");
    let rig = probe_rig(&dir).await;
    let port = free_port();
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_stallscope"))
            .arg("--config")
            .arg(&rig.config)
            .args(["watch", "--probe", "--context-tokens", "1200", "--every", "1h", "--site", "lab", "--keep", "1"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}"), "--db"])
            .arg(dir.join("w.db"))
            .env_clear()
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port, &mut child.0, Duration::from_secs(20));
    let stdout = child.0.stdout.take().unwrap();
    let line =
        tokio::task::spawn_blocking(move || BufReader::new(stdout).lines().next().unwrap().unwrap()).await.unwrap();
    assert!(line.starts_with("round 0: recorded, 1/2 routes ready, 3 ok, 0 partial, 1 failed"), "{line}");
    let body = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    assert!(body.contains(r#"stallscope_route_ready{site="lab",provider="bigstall",model="m"} 0"#), "{body}");
    assert!(body.contains(r#"stallscope_route_ready{site="lab",provider="healthy",model="m"} 1"#), "{body}");
    let kill = Command::new("kill").args(["-INT", &child.0.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let status = tokio::task::spawn_blocking(move || child.0.wait().unwrap()).await.unwrap();
    assert_eq!(status.code(), Some(0));
    let runs = Store::open(dir.join("w.db")).unwrap().list_runs().unwrap();
    assert_eq!(runs.iter().map(|r| r.label.as_deref()).collect::<Vec<_>>(), [Some("probe: watch@lab")]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review D9: retention ran before the send, so a round it deleted at once
/// was never sent ("no run N").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_is_sent_before_retention_may_delete_it() {
    let dir = temp_dir("watch-send-first");
    let receiver = Receiver::start(Answer::Status(200));
    // So short a retention that a round is past it once it has run.
    let mut plan = plan("healthy", Some(dir.join("w.db")), Retention::Days(1e-12));
    plan.otlp = Some(Destination::new(&receiver.base));
    let (rounds, _) = watch_rounds(&plan, 1, |_| {}).await;
    let id = rounds[0].report.as_ref().unwrap().run_id.unwrap();
    assert_eq!(rounds[0].deleted, vec![id], "the round itself is past the retention");
    let sent = rounds[0].traces.clone().unwrap().unwrap();
    assert_eq!((sent.calls, sent.url.as_str()), (2, format!("{}/v1/traces", receiver.base).as_str()));
    assert_eq!(receiver.requests().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review D3: the send had no timeout and did not listen to `cancel`, so a
/// receiver that accepts and never answers held the round, and Ctrl-C,
/// for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_ends_a_round_whose_receiver_never_answers() {
    let dir = temp_dir("watch-silent-receiver");
    let receiver = Arc::new(Receiver::start(Answer::Never));
    let mut plan = plan("healthy", Some(dir.join("w.db")), Retention::Rounds(5));
    plan.otlp = Some(Destination::new(&receiver.base));
    let cancel = CancellationToken::new();
    let (stop, waiting) = (cancel.clone(), Arc::clone(&receiver));
    // Cancelled once the round's traces are on their way.
    tokio::task::spawn_blocking(move || {
        waiting.wait_for(1, Duration::from_secs(60));
        stop.cancel();
    });
    let mut rounds = Vec::new();
    let watched = watch(&plan, &[], Arc::new(Metrics::new()), &cancel, |event| {
        if let WatchEvent::Round(round) = event {
            rounds.push(*round);
        }
    });
    // A guard against the hang, not a measurement: the message below
    // tells a cancelled send from one the request timeout ended.
    let ran = tokio::time::timeout(2 * REQUEST_TIMEOUT, watched).await.expect("the watch ends when cancelled").unwrap();
    assert_eq!(ran, 1);
    assert_eq!(rounds[0].result, RoundResult::Recorded);
    let why = rounds[0].traces.clone().unwrap().unwrap_err();
    assert!(why.ends_with("/v1/traces was cancelled"), "{why}");
    let _ = std::fs::remove_dir_all(&dir);
}
