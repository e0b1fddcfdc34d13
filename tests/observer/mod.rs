//! An observer (`stallscope observe`'s library) running in a test, with
//! every call it saw, for the tests that put agents in front of it.

#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stallscope::observe::{ObservePlan, ObserveSource, ObservedCall, Observer};
use stallscope::report::RunReport;
use stallscope::session::RecordTo;
use tokio_util::sync::CancellationToken;

/// An observer running until its token is cancelled, with every call it
/// saw.
pub struct Running {
    /// `http://127.0.0.1:PORT`, where agents send their requests.
    pub base: String,
    cancel: CancellationToken,
    calls: Arc<Mutex<Vec<ObservedCall>>>,
    run: tokio::task::JoinHandle<RunReport>,
}

impl Running {
    /// Observes `source`, recording into `db` when given.
    pub async fn start(source: ObserveSource, db: Option<&Path>) -> Running {
        Running::start_with(source, db, &[]).await
    }

    /// [`Running::start`] with tunables `sets` in force.
    pub async fn start_with(source: ObserveSource, db: Option<&Path>, sets: &[&str]) -> Running {
        let plan = ObservePlan {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
            source,
            config: None,
            overrides: sets.iter().map(|s| (*s).to_owned()).collect(),
            edits: Vec::new(),
            recording: db.map(|db| RecordTo { db: db.to_owned(), label: None, batch: None }),
        };
        let observer = Observer::bind(&plan, &[]).await.unwrap();
        let base = format!("http://{}", observer.addr());
        let (cancel, calls) = (CancellationToken::new(), Arc::<Mutex<Vec<ObservedCall>>>::default());
        let (token, seen) = (cancel.clone(), Arc::clone(&calls));
        let run = tokio::spawn(async move {
            observer.run(&token, None, move |call| seen.lock().unwrap().push(call.clone())).await.unwrap().report
        });
        Running { base, cancel, calls, run }
    }

    /// Waits until `n` calls have ended.
    pub async fn ended(&self, n: usize) -> Vec<ObservedCall> {
        for _ in 0..200 {
            if self.calls.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.calls.lock().unwrap().clone()
    }

    /// Stops observing and returns the run's report.
    pub async fn stop(self) -> RunReport {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.run).await.expect("observe stops").unwrap()
    }
}
