//! Recordings for tests over them: a built-in scenario run through the
//! real HTTP stack, two calls at once, recorded into a database of its own
//! and loaded back.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use stallscope::providers::Dialect;
use stallscope::replay::recording::Recording;
use stallscope::session::{RecordTo, RunSource, SessionPlan, run_session};
use stallscope::store::Store;
use tokio_util::sync::CancellationToken;

/// Runs `scenario` in `dialect` with `sets` on top of the scenario's
/// tunables, recorded, and loads the recording.
pub async fn record(scenario: &str, dialect: Dialect, sets: &[&str]) -> Recording {
    record_with_lag(scenario, dialect, sets).await.0
}

/// [`record`], and the largest lag our own runtime recorded while it ran.
pub async fn record_with_lag(scenario: &str, dialect: Dialect, sets: &[&str]) -> (Recording, Duration) {
    let db = scratch(&format!("{scenario}-{}-{}", dialect.name(), sets.join(",").replace(['=', '.'], "_")));
    let plan = SessionPlan {
        source: RunSource::Scenario { name: scenario.to_owned(), dialect },
        requests: 2,
        concurrency: 2,
        prompt: "Say hello.".to_owned(),
        overrides: sets.iter().map(|s| (*s).to_owned()).collect(),
        edits: Vec::new(),
        recording: Some(RecordTo { db: db.clone(), label: None, batch: None }),
        seed: Some(7),
    };
    let outcome = run_session(&plan, &[], None, &CancellationToken::new(), |_, _| {}).await.unwrap();
    let run = outcome.report.run_id.unwrap();
    let loaded = tokio::task::spawn_blocking(move || {
        let store = Store::open(&db).unwrap();
        let lag = store.runtime_lag(run).unwrap().iter().map(|s| s.lag).max().unwrap_or_default();
        (Recording::load(&store, run).unwrap(), lag)
    });
    loaded.await.unwrap()
}

/// A database path of this process, new for each call.
fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("stallscope-recorded-{}-{n}-{name}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}
