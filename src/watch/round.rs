//! What one watch round does. Each kind runs its calls through the same
//! session path `stallscope run` uses, so a round is recorded, diagnosed
//! and counted exactly like a run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use crate::core::event::EventSink;
use crate::metrics::CallMetrics;
use crate::providers::Dialect;
use crate::session::{Recording, RunSource, SessionError, SessionOutcome, SessionPlan, run_session};

/// The kinds of round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Calls against a built-in scenario served in-process (a canary of
    /// stallscope itself, and how the tests drive a watch).
    Scenario {
        /// The scenario.
        name: String,
        /// The dialect its simulator speaks.
        dialect: Dialect,
    },
    /// Calls to the configured providers.
    Calls {
        /// The config file; `None` reads the default location.
        config: Option<PathBuf>,
        /// The primary target, `provider/model`; `None` takes the first row.
        target: Option<String>,
    },
}

/// What every round of a watch shares.
#[derive(Debug, Clone)]
pub struct CallPlan {
    /// Calls per round (made at once).
    pub requests: usize,
    /// The prompt of every call.
    pub prompt: String,
    /// `NAME=VALUE` tunable overrides (`--set`).
    pub overrides: Vec<String>,
}

/// A round that ran: the session's outcome and how many calls ended.
pub(super) struct Ran {
    pub result: Result<SessionOutcome, SessionError>,
    pub calls_ended: usize,
}

impl Round {
    /// Where its calls go.
    pub fn source(&self) -> RunSource {
        match self {
            Round::Scenario { name, dialect } => RunSource::Scenario { name: name.clone(), dialect: *dialect },
            Round::Calls { config, target } => RunSource::Config { path: config.clone(), target: target.clone() },
        }
    }

    /// Runs the round's calls, counting them into `metrics` and recording
    /// them when `recording` is given.
    pub(super) async fn run(
        &self,
        calls: &CallPlan,
        recording: Option<Recording>,
        metrics: &Arc<CallMetrics>,
        env: &[(String, String)],
        cancel: &CancellationToken,
    ) -> Ran {
        let plan = SessionPlan {
            source: self.source(),
            requests: calls.requests,
            concurrency: calls.requests,
            prompt: calls.prompt.clone(),
            overrides: calls.overrides.clone(),
            edits: Vec::new(),
            recording,
            seed: None,
        };
        let ended = Arc::new(AtomicUsize::new(0));
        let on_finish = {
            let (metrics, ended) = (Arc::clone(metrics), Arc::clone(&ended));
            move |report: &_, verdict: &_| {
                metrics.on_finish(report, verdict);
                ended.fetch_add(1, Ordering::Relaxed);
            }
        };
        let watcher = Arc::clone(metrics) as Arc<dyn EventSink>;
        let result = run_session(&plan, env, Some(watcher), cancel, on_finish).await;
        Ran { result, calls_ended: ended.load(Ordering::Relaxed) }
    }
}
