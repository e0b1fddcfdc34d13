//! Running many calls through the core: N calls, at most C at once, each
//! in its own task, all sharing one executor (and so one fleet budget,
//! one set of credential pools and one client per transport); and the rig
//! that serves a built-in scenario in-process for such a run.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::core::event::EventSink;
use crate::core::executor::{Call, CallReport, Executor, Origin};
use crate::core::failover::Target;
use crate::core::fleet::Fleet;
use crate::core::schedule::run_call_list;
use crate::core::transport::ClientCache;
use crate::core::upstream::CallInput;
use crate::providers::Dialect;
use crate::providers::setup::{ProviderConfig, SetupError, connect};
use crate::sim::{Scenario, SimError, SimServer};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    /// How many calls.
    pub requests: usize,
    /// How many at once.
    pub concurrency: usize,
    /// The primary target of every call.
    pub target: Target,
    /// The prompt.
    pub prompt: String,
}

impl RunPlan {
    /// The plan's calls, streams 0 to `requests - 1`.
    pub fn calls(&self) -> impl Iterator<Item = Call> + '_ {
        let context_tokens = Some(estimated_tokens(&self.prompt));
        (0..self.requests).map(move |index| Call {
            stream: index as u64,
            target: self.target.clone(),
            input: CallInput { prompt: self.prompt.clone(), context_tokens, ..CallInput::default() },
            not_before: None,
        })
    }
}

/// A rough context size of `prompt`: about four characters a token.
pub fn estimated_tokens(prompt: &str) -> u64 {
    prompt.len().div_ceil(4) as u64
}

/// Runs the plan; `on_finish` sees each call as it ends (for progress).
/// Returns the report of every call that started, in index order (calls
/// still queued when `cancel` fires never start).
pub async fn run_calls(
    executor: &Executor,
    plan: &RunPlan,
    cancel: &CancellationToken,
    on_finish: impl Fn(&CallReport) + Send + Sync + 'static,
) -> Vec<CallReport> {
    run_call_list(executor, plan.calls(), plan.concurrency, cancel, on_finish).await
}

/// Models the in-process simulator offers, so the default failover chain
/// has somewhere to go.
pub const SIM_MODELS: [&str; 3] = ["sim-model-a", "sim-model-b", "sim-model-c"];

/// The provider name of the in-process simulator's rows.
pub const SIM_PROVIDER: &str = "sim";

/// The provider name of a `primary_unreachable` scenario's primary.
pub const UNREACHABLE_PROVIDER: &str = "unreachable";

/// A built-in scenario served in-process, with provider rows pointing at it.
pub struct ScenarioRig {
    /// The simulator.
    pub server: SimServer,
    /// Provider rows: the simulator's models, and for `primary_unreachable`
    /// scenarios a primary on a port nobody listens on.
    pub providers: Vec<ProviderConfig>,
    /// The primary target of each call.
    pub target: Target,
}

/// A scenario's tunable layer: its recommendations, plus the failover chain
/// an unreachable primary needs.
pub fn recommended_tunables(scenario: &Scenario) -> BTreeMap<String, String> {
    let mut tunables = scenario.run().tunables.clone();
    if scenario.run().primary_unreachable {
        tunables.entry("STALLSCOPE_FALLBACK_MODELS".to_owned()).or_insert_with(|| format!("sim/{}", SIM_MODELS[0]));
    }
    tunables
}

/// A scenario could not be served.
#[derive(Debug, thiserror::Error)]
pub enum RigError {
    /// The simulator did not start.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// No closed port could be found for an unreachable primary.
    #[error("cannot reserve a closed port for the unreachable primary: {0}")]
    Port(#[from] std::io::Error),
}

/// Serves `scenario` on an ephemeral loopback port speaking `dialect`.
pub async fn rig(scenario: Scenario, dialect: Dialect) -> Result<ScenarioRig, RigError> {
    let unreachable = scenario.run().primary_unreachable;
    let server = SimServer::start(scenario, 0).await?;
    let mut providers: Vec<ProviderConfig> = SIM_MODELS
        .iter()
        .map(|model| ProviderConfig::at_root(SIM_PROVIDER, dialect, &server.base_url(), model))
        .collect();
    let mut target = Target::new(SIM_PROVIDER, SIM_MODELS[0]);
    if unreachable {
        // Bound and released at once: nothing listens there, so connections
        // are refused and the call fails over to the simulator.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dead = ProviderConfig::at_root(
            UNREACHABLE_PROVIDER,
            dialect,
            &format!("http://127.0.0.1:{closed}"),
            SIM_MODELS[0],
        );
        providers.insert(0, dead);
        target = Target::new(UNREACHABLE_PROVIDER, SIM_MODELS[0]);
    }
    Ok(ScenarioRig { server, providers, target })
}

/// An executor over `providers` with the effective settings, sending events
/// to `sink`, its clocks and draws starting at `origin`. `env` looks up key
/// variables.
pub fn executor(
    settings: &Settings,
    providers: &[ProviderConfig],
    clients: &ClientCache,
    sink: Arc<dyn EventSink>,
    origin: Origin,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Executor, SetupError> {
    let (upstreams, pools) = connect(providers, &settings.policy, clients, env)?;
    Ok(Executor {
        fleet: Arc::new(Fleet::new(settings.policy.fleet, pools)),
        policy: Arc::new(settings.policy.clone()),
        classifier: Arc::new(settings.classifier.clone()),
        upstreams: Arc::new(upstreams),
        sink,
        epoch: origin.epoch,
        wall_epoch: origin.wall_epoch,
        seed: origin.seed,
        // Measured only where a lag probe runs beside the calls (a session).
        lag: None,
    })
}
