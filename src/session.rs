//! One run from start to report, shared by both front ends: the settings
//! for what is run, the in-process simulator when a built-in scenario or a
//! scenario file is run, the recorder, the executor, the calls and the report.
//!
//! The CLI's `run` and the app's **Run** button differ only in how they
//! show progress, so both call [`run_session`] and pass their own sink and
//! progress callback. A route probe makes its own list of calls and runs
//! it the same way ([`run_call_list_recorded`]).
//!
//! A lag probe runs beside the calls on the same runtime for the whole run
//! ([`crate::core::lag_probe`]): every timer that fires carries how late
//! the runtime was, the probe's readings go to the sink beside the events,
//! and the outcome says how many timeouts the client's own overload makes
//! untrustworthy.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, ConfigFile, Layers, Settings};
use crate::core::event::{Event, EventSink, StreamId};
use crate::core::executor::{Call, CallReport, Origin};
use crate::core::failover::Target;
use crate::core::lag_probe::{LagProbe, LagSample, LagSummary};
use crate::core::schedule::run_call_list;
use crate::core::transport::ClientCache;
use crate::diagnosis::{Collector, Diagnosis, diagnose};
use crate::providers::Dialect;
use crate::providers::setup::{ProviderConfig, SetupError, key_counts};
use crate::recorder::{Recorder, RecorderHandle, RecorderOptions, RecorderSink};
use crate::report::RunReport;
use crate::run::{RigError, RunPlan, ScenarioRig, executor, recommended_tunables, rig};
use crate::sim::{Scenario, SimError, builtin};
use crate::store::StoreError;
use crate::store::runs::{RunMeta, RunStart};

/// Where a run's calls go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunSource {
    /// A built-in scenario, served in-process; no config file or key needed.
    Scenario {
        /// The scenario's name.
        name: String,
        /// The dialect its simulator speaks.
        dialect: Dialect,
    },
    /// A scenario file in the built-ins' format, served in-process.
    ScenarioFile {
        /// The file.
        path: PathBuf,
        /// The dialect its simulator speaks.
        dialect: Dialect,
    },
    /// The providers of a config file.
    Config {
        /// The file; `None` reads the default location (when it exists).
        path: Option<PathBuf>,
        /// The primary target, `provider/model`; `None` takes the first row.
        target: Option<String>,
    },
}

/// Where a run is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordTo {
    /// The database file.
    pub db: PathBuf,
    /// A free label for the run.
    pub label: Option<String>,
    /// The batch the run is part of (runs started together share it).
    pub batch: Option<i64>,
}

/// Everything one run needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPlan {
    /// What to call.
    pub source: RunSource,
    /// How many calls.
    pub requests: usize,
    /// How many at once.
    pub concurrency: usize,
    /// The prompt of every call.
    pub prompt: String,
    /// `NAME=VALUE` overrides (`--set`).
    pub overrides: Vec<String>,
    /// `NAME=VALUE` edits from the app, the top tunable layer.
    pub edits: Vec<String>,
    /// Record the run, or not.
    pub recording: Option<RecordTo>,
    /// The seed of every call's random draws; `None` draws one (it is
    /// recorded either way, so a run can be repeated with `--seed`).
    pub seed: Option<u64>,
}

/// A run that could not start or could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The scenario is unknown or broken.
    #[error(transparent)]
    Scenario(#[from] SimError),
    /// The simulator could not be served.
    #[error(transparent)]
    Rig(#[from] RigError),
    /// The config file, a tunable or a rule is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A provider row cannot be used (a missing key variable, a bad URL).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The database could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// There is nothing to call.
    #[error("no provider to call: give --scenario NAME, or a config file (--config PATH) with a [[provider]] row")]
    NoProvider,
    /// The target is not `provider/model`.
    #[error("{0}")]
    BadTarget(String),
    /// The target names no provider row.
    #[error("--target {target}: no [[provider]] row is named `{provider}`")]
    UnknownProvider {
        /// The target given.
        target: String,
        /// Its provider part.
        provider: String,
    },
}

/// What a finished run leaves.
#[derive(Debug, Clone)]
pub struct SessionOutcome {
    /// The report (`run_id` set when it was recorded).
    pub report: RunReport,
    /// Events the recorder could not keep (it fell behind).
    pub dropped_events: u64,
    /// Observed calls our clocks were not replayed on, so got no
    /// would-fire mark: the replay queue was full (observe only).
    pub unreplayed_calls: u64,
    /// The timers that fired and how many the runtime's own lag makes
    /// untrustworthy.
    pub lag: LagSummary,
}

/// Runs the plan to the end (or until `cancel`). Events go to the recorder
/// (when recording) and to `watcher`; `on_finish` sees each call as it
/// ends, with its verdict (after every event of the call has reached
/// `watcher`).
/// `env` is the process environment, the layer between the config file and
/// the overrides, and where key variables are looked up.
pub async fn run_session(
    plan: &SessionPlan,
    env: &[(String, String)],
    watcher: Option<Arc<dyn EventSink>>,
    cancel: &CancellationToken,
    on_finish: impl Fn(&CallReport, &Diagnosis) + Send + Sync + 'static,
) -> Result<SessionOutcome, SessionError> {
    let (settings, providers, target, rig) = prepare(plan, env).await?;
    let run_plan =
        RunPlan { requests: plan.requests, concurrency: plan.concurrency, target, prompt: plan.prompt.clone() };
    let calls = CallList {
        settings,
        providers,
        scenario: scenario_name(&plan.source),
        calls: run_plan.calls().collect(),
        concurrency: plan.concurrency,
        recording: plan.recording.clone(),
        seed: plan.seed,
    };
    let outcome = run_call_list_recorded(calls, env, watcher, cancel, on_finish).await;
    if let Some(rig) = rig {
        rig.server.shutdown().await;
    }
    outcome
}

/// Calls ready to run as one run, with everything they run with: what
/// [`run_session`] makes of a plan, and what a route probe
/// ([`crate::probe`]) makes of the configured routes.
#[derive(Debug, Clone)]
pub struct CallList {
    /// The effective settings.
    pub settings: Settings,
    /// The provider rows to connect (their keys are looked up, so every
    /// row here needs its key).
    pub providers: Vec<ProviderConfig>,
    /// The scenario served, when one is.
    pub scenario: Option<String>,
    /// The calls, started in this order.
    pub calls: Vec<Call>,
    /// How many at once.
    pub concurrency: usize,
    /// Record the run, or not.
    pub recording: Option<RecordTo>,
    /// The seed of every call's random draws; `None` draws one.
    pub seed: Option<u64>,
}

/// Runs `list` to the end (or until `cancel`), recorded as one run when it
/// says so, as [`run_session`] does for a plan.
pub async fn run_call_list_recorded(
    list: CallList,
    env: &[(String, String)],
    watcher: Option<Arc<dyn EventSink>>,
    cancel: &CancellationToken,
    on_finish: impl Fn(&CallReport, &Diagnosis) + Send + Sync + 'static,
) -> Result<SessionOutcome, SessionError> {
    let settings = &list.settings;
    let origin = Origin::now(list.seed.unwrap_or_else(rand::random));
    let clients = ClientCache::new();
    let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    // Keys and URLs are checked before anything is recorded: a run that
    // cannot start leaves no row in the history. Its sinks are attached
    // below, before any call emits.
    let mut executor = executor(settings, &list.providers, &clients, Arc::new(Tee(Vec::new())), origin, lookup)?;
    let recorder = match &list.recording {
        Some(recording) => {
            let meta = RunMeta {
                requests: u32::try_from(list.calls.len()).unwrap_or(u32::MAX),
                concurrency: u32::try_from(list.concurrency).unwrap_or(u32::MAX),
                seed: origin.seed,
                epoch_unix_ns: origin.epoch_unix_ns(),
                rules: serde_json::to_value(settings.classifier.rules()).unwrap_or_default(),
                pools: key_counts(&list.providers),
            };
            let start =
                RunStart::new(recording.label.clone(), list.scenario.clone(), &settings.tunables, &list.providers)
                    .with_meta(meta)
                    .in_batch(recording.batch);
            Some(start_recorder(recording, start, settings).await?)
        }
        None => None,
    };
    // Every stream's events are folded for its verdict as they come, and
    // let go once the call ends and its verdict is made.
    let verdicts = Arc::new(Collector::new(Some(settings.policy.retry.clone())));
    let judged: Arc<Mutex<Vec<(StreamId, Diagnosis)>>> = Arc::default();
    let mut sinks: Vec<Arc<dyn EventSink>> = vec![verdicts.clone()];
    sinks.extend(recorder.as_ref().map(|(recorder, _)| Arc::new(recorder.clone()) as Arc<dyn EventSink>));
    sinks.extend(watcher);
    executor.sink = Arc::new(Tee(sinks));
    let probe = LagProbe::start(origin.epoch, Arc::clone(&executor.sink));
    executor.lag = Some(probe.meter());
    let started = tokio::time::Instant::now();
    let on_call = {
        let (verdicts, judged) = (Arc::clone(&verdicts), Arc::clone(&judged));
        move |call: &CallReport| {
            let verdict = verdicts.take(call.stream).unwrap_or_else(|| diagnose(&[]));
            on_finish(call, &verdict);
            if let Ok(mut judged) = judged.lock() {
                judged.push((call.stream, verdict));
            }
        }
    };
    let requests = list.calls.len();
    let reports = run_call_list(&executor, list.calls, list.concurrency, cancel, on_call).await;
    let lag = probe.stop();
    let mut report = RunReport::new(list.scenario.clone(), settings.tunables.snapshot(), &reports, started.elapsed());
    report.seed = Some(origin.seed);
    report.stopped = cancel.is_cancelled();
    report.summary.not_started = requests.saturating_sub(reports.len());
    let mut diagnoses = std::mem::take(&mut *judged.lock().unwrap_or_else(PoisonError::into_inner));
    diagnoses.extend(verdicts.diagnoses());
    report.attach_diagnoses(diagnoses);
    let dropped_events = match recorder {
        Some((_, handle)) => finish_recording(handle, &mut report).await?,
        None => 0,
    };
    Ok(SessionOutcome { report, dropped_events, unreplayed_calls: 0, lag })
}

/// Stores `report` as the run `handle` records, with the run's id, once
/// its last events are committed; how many events the recorder could not
/// keep. The report has no run id when the store could not take it.
pub(crate) async fn finish_recording(handle: RecorderHandle, report: &mut RunReport) -> Result<u64, StoreError> {
    report.run_id = Some(handle.run_id());
    let stored = report.clone();
    let finished = blocking(move || handle.finish(&stored)).await;
    if finished.is_err() {
        report.run_id = None;
    }
    finished
}

/// Starts recording a run in `recording`'s database, with the recorder's
/// flush interval and body budget from the tunables of `settings`.
pub(crate) async fn start_recorder(
    recording: &RecordTo,
    start: RunStart,
    settings: &Settings,
) -> Result<(RecorderSink, RecorderHandle), StoreError> {
    let flush = settings.tunables.get("STALLSCOPE_RECORDER_FLUSH_MS").value.as_i64().unsigned_abs();
    let body_mb = settings.tunables.get("STALLSCOPE_RECORDER_BODY_BUDGET_MB").value.as_i64().unsigned_abs();
    let options = RecorderOptions {
        flush_interval: Duration::from_millis(flush),
        body_budget: body_mb << 20,
        ..RecorderOptions::default()
    };
    let db = recording.db.clone();
    blocking(move || Recorder::start_with(&db, start, options)).await
}

/// Runs database work off the runtime's workers: opening (and perhaps
/// migrating) a store and waiting for the last commit would otherwise stall
/// every stream and the in-process simulator sharing those workers.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        // The work panicked: let the panic continue rather than invent an error.
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

/// The effective settings of a plan, without running it: what the app's
/// tunables editor shows and what [`run_session`] will use.
pub fn settings_for(
    source: &RunSource,
    overrides: &[String],
    edits: &[String],
    env: &[(String, String)],
) -> Result<Settings, SessionError> {
    let env = env.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    match resolve(source)? {
        Resolved::Scenario { name, scenario, .. } => {
            let recommended = recommended_tunables(&scenario);
            let layers = Layers { config: ConfigFile::None, scenario: Some((&name, &recommended)), overrides, edits };
            Ok(Settings::load(layers, env)?)
        }
        Resolved::Config { path, .. } => {
            let config = path.map_or(ConfigFile::Default, ConfigFile::Path);
            Ok(Settings::load(Layers { config, scenario: None, overrides, edits }, env)?)
        }
    }
}

/// A [`RunSource`] with its scenario read.
enum Resolved<'a> {
    /// A scenario served in-process.
    Scenario { name: String, scenario: Scenario, dialect: Dialect },
    /// The providers of a config file.
    Config { path: Option<&'a Path>, target: Option<&'a str> },
}

/// Reads the scenario `source` names, if it names one.
fn resolve(source: &RunSource) -> Result<Resolved<'_>, SimError> {
    let name = scenario_name(source).unwrap_or_default();
    Ok(match source {
        RunSource::Scenario { name: builtin_name, dialect } => {
            Resolved::Scenario { name, scenario: builtin(builtin_name)?, dialect: *dialect }
        }
        RunSource::ScenarioFile { path, dialect } => {
            Resolved::Scenario { name, scenario: Scenario::from_file(path)?, dialect: *dialect }
        }
        RunSource::Config { path, target } => Resolved::Config { path: path.as_deref(), target: target.as_deref() },
    })
}

/// Settings, provider rows, the primary target and (for a scenario) the
/// simulator serving it.
async fn prepare(
    plan: &SessionPlan,
    env: &[(String, String)],
) -> Result<(Settings, Vec<ProviderConfig>, Target, Option<ScenarioRig>), SessionError> {
    match resolve(&plan.source)? {
        Resolved::Scenario { scenario, dialect, .. } => {
            let settings = settings_for(&plan.source, &plan.overrides, &plan.edits, env)?;
            let rig = rig(scenario, dialect).await?;
            let (providers, target) = (rig.providers.clone(), rig.target.clone());
            Ok((settings, providers, target, Some(rig)))
        }
        Resolved::Config { target, .. } => {
            let mut settings = settings_for(&plan.source, &plan.overrides, &plan.edits, env)?;
            let providers = std::mem::take(&mut settings.providers);
            let target = match (target, providers.first()) {
                (Some(text), _) => Target::parse(text).map_err(SessionError::BadTarget)?,
                (None, Some(row)) => Target::new(&row.name, &row.model),
                (None, None) => return Err(SessionError::NoProvider),
            };
            if !providers.iter().any(|p| p.name == target.provider) {
                let provider = target.provider.clone();
                return Err(SessionError::UnknownProvider { target: target.to_string(), provider });
            }
            // Only providers the calls can reach are connected, so a run of
            // one provider needs no key for the others.
            let configured: Vec<Target> = providers.iter().map(|p| Target::new(&p.name, &p.model)).collect();
            let chain = settings.policy.failover.fallback.chain(&target, &configured);
            let providers = providers.into_iter().filter(|p| chain.iter().any(|t| t.provider == p.name)).collect();
            Ok((settings, providers, target, None))
        }
    }
}

fn scenario_name(source: &RunSource) -> Option<String> {
    match source {
        RunSource::Scenario { name, .. } => Some(name.clone()),
        RunSource::ScenarioFile { path, .. } => Some(path.display().to_string()),
        RunSource::Config { .. } => None,
    }
}

/// Delivers every event to several sinks, in order.
pub(crate) struct Tee(pub(crate) Vec<Arc<dyn EventSink>>);

impl EventSink for Tee {
    fn emit(&self, event: Event) {
        if let Some((last, rest)) = self.0.split_last() {
            for sink in rest {
                sink.emit(event.clone());
            }
            last.emit(event);
        }
    }

    fn runtime_lag(&self, sample: LagSample) {
        for sink in &self.0 {
            sink.runtime_lag(sample);
        }
    }
}
