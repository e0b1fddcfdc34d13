//! What one watch round does. Each kind runs its calls through the same
//! session path `stallscope run` uses, so a round is recorded, diagnosed
//! and counted exactly like a run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use crate::core::event::EventSink;
use crate::core::failover::Target;
use crate::metrics::{CallMetrics, LabelNames};
use crate::probe::{self, ProbeError, ProbePlan, Probed, Readiness};
use crate::providers::Dialect;
use crate::run::{SIM_MODELS, SIM_PROVIDER, UNREACHABLE_PROVIDER};
use crate::session::{RecordTo, RunSource, SessionError, SessionOutcome, SessionPlan, run_session, settings_for};

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
    /// A route probe ([`crate::probe`]): every configured route alone,
    /// with a tiny prompt and a realistic payload.
    Probe {
        /// The config file; `None` reads the default location.
        config: Option<PathBuf>,
        /// The realistic payload's tokens; `None` reads the config's
        /// `[probe] context_tokens`, else the probe's default.
        context_tokens: Option<u64>,
    },
}

/// What every round of a watch shares.
#[derive(Debug, Clone)]
pub struct CallPlan {
    /// Calls per round (made at once); a probe makes two per route.
    pub requests: usize,
    /// The prompt of every call; a probe has its own two.
    pub prompt: String,
    /// `NAME=VALUE` tunable overrides (`--set`).
    pub overrides: Vec<String>,
}

/// A round that could not run, or whose record was lost.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// The settings, the config, a key or the scenario cannot work, or the
    /// database could not be written.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The probe's own settings cannot work (no route, a payload size out
    /// of range).
    #[error(transparent)]
    Probe(ProbeError),
    /// No configured route could be set up, so the probe called nothing.
    #[error("no route could be probed: {0}")]
    NoRouteProbed(String),
}

impl From<ProbeError> for RoundError {
    /// A probe's session error is the round's, so the watch tells a
    /// database it cannot write apart the same way for every kind.
    fn from(error: ProbeError) -> Self {
        match error {
            ProbeError::Session(error) => RoundError::Session(error),
            other => RoundError::Probe(other),
        }
    }
}

/// A round that ran: the session's outcome, how many calls ended, and
/// for a probe its matrix.
pub(super) struct Ran {
    pub result: Result<SessionOutcome, RoundError>,
    pub calls_ended: usize,
    pub readiness: Option<Readiness>,
}

impl Round {
    /// Where its calls go.
    pub fn source(&self) -> RunSource {
        match self {
            Round::Scenario { name, dialect } => RunSource::Scenario { name: name.clone(), dialect: *dialect },
            Round::Calls { config, target } => RunSource::Config { path: config.clone(), target: target.clone() },
            Round::Probe { config, .. } => RunSource::Config { path: config.clone(), target: None },
        }
    }

    /// The provider and model names its calls are counted under, from the
    /// settings it runs with: the configured rows and failover targets, the
    /// primary target asked for, and for a scenario the simulator's rows.
    pub(super) fn label_names(&self, calls: &CallPlan, env: &[(String, String)]) -> Result<LabelNames, SessionError> {
        let settings = settings_for(&self.source(), &calls.overrides, &[], env)?;
        let names = LabelNames::configured(&settings.providers, &settings.policy.failover.fallback);
        Ok(match self {
            Round::Scenario { .. } => SIM_MODELS
                .into_iter()
                .fold(names, |names, model| names.with_target(&Target::new(SIM_PROVIDER, model)))
                .with_providers([UNREACHABLE_PROVIDER.to_owned()]),
            Round::Calls { target: Some(text), .. } => match Target::parse(text) {
                Ok(target) => names.with_target(&target),
                // The round says why it cannot run.
                Err(_) => names,
            },
            Round::Calls { target: None, .. } | Round::Probe { .. } => names,
        })
    }

    /// Runs the round's calls, counting them into `metrics` and recording
    /// them when `recording` is given.
    pub(super) async fn run(
        &self,
        calls: &CallPlan,
        recording: Option<RecordTo>,
        metrics: &Arc<CallMetrics>,
        env: &[(String, String)],
        cancel: &CancellationToken,
    ) -> Ran {
        let ended = Arc::new(AtomicUsize::new(0));
        let on_finish = {
            let (metrics, ended) = (Arc::clone(metrics), Arc::clone(&ended));
            move |report: &_, verdict: &_| {
                metrics.on_finish(report, verdict);
                ended.fetch_add(1, Ordering::Relaxed);
            }
        };
        let watcher = Some(Arc::clone(metrics) as Arc<dyn EventSink>);
        let (result, readiness) = match self {
            Round::Probe { config, context_tokens } => {
                let plan = ProbePlan {
                    config: config.clone(),
                    overrides: calls.overrides.clone(),
                    edits: Vec::new(),
                    context_tokens: *context_tokens,
                    concurrency: probe::DEFAULT_CONCURRENCY,
                    recording,
                    seed: None,
                };
                match probe::probe_run(&plan, env, watcher, cancel, on_finish).await {
                    Ok(Probed { readiness, outcome: Some(outcome) }) => (Ok(outcome), Some(readiness)),
                    Ok(Probed { readiness, outcome: None }) => {
                        (Err(RoundError::NoRouteProbed(problems(&readiness))), Some(readiness))
                    }
                    Err(error) => (Err(error.into()), None),
                }
            }
            Round::Scenario { .. } | Round::Calls { .. } => {
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
                (run_session(&plan, env, watcher, cancel, on_finish).await.map_err(RoundError::from), None)
            }
        };
        Ran { result, calls_ended: ended.load(Ordering::Relaxed), readiness }
    }
}

/// Why the routes were not probed, each reason once (routes of one
/// provider share theirs).
fn problems(readiness: &Readiness) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for problem in readiness.routes.iter().filter_map(|r| r.problem.as_deref()) {
        if !seen.contains(&problem) {
            seen.push(problem);
        }
    }
    seen.join("; ")
}
