//! Ctrl-C on `stallscope run`: the real binary gets a real SIGINT mid-run,
//! stops its calls, prints and records the run as stopped with its queued
//! calls not started, and exits with 130.

mod programs;

use std::process::Command;

use programs::interrupt_once_started;

#[test]
fn ctrl_c_stops_the_calls_and_records_the_run_as_stopped() {
    let dir = std::env::temp_dir().join(format!("stallscope-stopped-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("s.db");
    // Two calls at a time, each stalled for a minute: eight stay queued.
    let run = ["run", "--scenario", "silent-stall", "--requests", "10", "--concurrency", "2"];
    let args = [&run[..], &["--set", "SSE_IDLE_TIMEOUT_S=60"]].concat();
    // Ctrl-C once both first calls are in flight (their streams recorded).
    let output = interrupt_once_started(&args, &db, 2);
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(130), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("stopped: 0 ok, 0 partial, 0 failed, 2 cancelled, 8 not started"), "{stdout}");
    assert!(stderr.contains("stopped by Ctrl-C"), "{stderr}");

    let runs = stallscope::store::Store::open(&db).unwrap().list_runs().unwrap();
    let run = &runs[0];
    assert_eq!(run.status, stallscope::store::runs::RunStatus::Stopped);
    assert_eq!((run.outcomes.cancelled, run.outcomes.not_started), (2, 8));
    assert_eq!(run.p50_ms, None, "a cancelled call's time is not a latency");
    let list = |json: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stallscope"));
        command.args(["runs", "--db"]).arg(&db).arg("list").args(json).env_clear();
        command.output().unwrap().stdout
    };
    let listed: serde_json::Value = serde_json::from_slice(&list(&["--json"])).unwrap();
    assert_eq!(listed[0]["status"], "stopped");
    let listed = String::from_utf8(list(&[])).unwrap();
    let row: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    // id, status, date, time (to the second), scenario, outcomes, not started
    assert_eq!((row[1], row[3].len(), row[5], row[6]), ("stopped", 8, "0/0/0/2", "8"), "{listed}");
    let _ = std::fs::remove_dir_all(&dir);
}
