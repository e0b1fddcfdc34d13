//! An observer (`stallscope observe`'s library) running in a test, with
//! every call it saw, for the tests that put agents in front of it.

#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stallscope::observe::{ObserveEvent, ObservePlan, ObserveSource, ObservedCall, Observer, Service};
use stallscope::report::RunReport;
use stallscope::session::RecordTo;
use tokio_util::sync::CancellationToken;

/// Among a test's settings, this one starts the observer as a guard
/// (`--guard`) instead of a tunable.
pub const GUARD: &str = "--guard";

/// An observer running until its token is cancelled, with every call it
/// saw.
pub struct Running {
    /// `http://127.0.0.1:PORT`, where agents send their requests.
    pub base: String,
    cancel: CancellationToken,
    calls: Arc<Mutex<Vec<ObservedCall>>>,
    seen: Arc<Mutex<Seen>>,
    run: tokio::task::JoinHandle<RunReport>,
}

/// What an observer said beside its calls.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Where its metrics are served.
    pub metrics: Option<std::net::SocketAddr>,
    /// The runs it rotated out: each one's id and calls.
    pub rotated: Vec<(Option<i64>, usize)>,
    /// Each batch of traces: spans sent, or why not.
    pub traces: Vec<Result<usize, String>>,
}

impl Running {
    /// Observes `source`, recording into `db` when given.
    pub async fn start(source: ObserveSource, db: Option<&Path>) -> Running {
        Running::start_with(source, db, &[]).await
    }

    /// [`Running::start`] with tunables `sets` in force.
    pub async fn start_with(source: ObserveSource, db: Option<&Path>, sets: &[&str]) -> Running {
        Running::start_service(source, db, sets, Service::default()).await
    }

    /// [`Running::start_with`], serving as `service` says.
    pub async fn start_service(source: ObserveSource, db: Option<&Path>, sets: &[&str], service: Service) -> Running {
        let plan = ObservePlan {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_remote: false,
            source,
            config: None,
            overrides: sets.iter().filter(|s| **s != GUARD).map(|s| (*s).to_owned()).collect(),
            edits: Vec::new(),
            recording: db.map(|db| RecordTo { db: db.to_owned(), label: None, batch: None }),
            guard: sets.contains(&GUARD),
            service,
        };
        let observer = Observer::bind(&plan, &[]).await.unwrap();
        let base = format!("http://{}", observer.addr());
        let (cancel, calls) = (CancellationToken::new(), Arc::<Mutex<Vec<ObservedCall>>>::default());
        let seen = Arc::<Mutex<Seen>>::default();
        let (token, calls_seen, said) = (cancel.clone(), Arc::clone(&calls), Arc::clone(&seen));
        let run = tokio::spawn(async move {
            let on_event = move |event: ObserveEvent<'_>| match event {
                ObserveEvent::Call(call) => calls_seen.lock().unwrap().push(call.clone()),
                ObserveEvent::Serving(addr) => said.lock().unwrap().metrics = Some(addr),
                ObserveEvent::Rotated(ended) => {
                    let report = &ended.outcome.report;
                    let sum = &report.summary;
                    let calls = sum.ok + sum.partial + sum.failed + sum.cancelled;
                    said.lock().unwrap().rotated.push((report.run_id, calls));
                }
                ObserveEvent::Traces(sent) => {
                    said.lock().unwrap().traces.push(sent.as_ref().map(|s| s.spans).map_err(Clone::clone))
                }
                ObserveEvent::NotRotated(error) => panic!("not rotated: {error}"),
            };
            observer.run_watched(&token, None, on_event).await.unwrap().report
        });
        Running { base, cancel, calls, seen, run }
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

    /// What it said so far beside its calls.
    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    /// Stops observing and returns the run's report.
    pub async fn stop(self) -> RunReport {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.run).await.expect("observe stops").unwrap()
    }
}
