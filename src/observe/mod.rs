//! Observe: a recording streaming proxy an operator puts in front of their
//! own agent. Each request goes on to its real provider as it came, the
//! agent's key included, and its response comes back chunk by chunk as it
//! is read, compressed if it was (the recording reads a decoded copy:
//! gzip, deflate and br); each is recorded as a stream of a run labelled
//! `observe@ADDR`, with the events, verdicts, exports and what-if of
//! stallscope's own calls.
//!
//! **Nothing is acted on.** An observed call is a call of the core's
//! executor under [`WATCH_ONLY`]: one attempt, no retry, no failover, no
//! partial recovery, every stream clock off. The agent's own behaviour is
//! what is recorded (its timeouts show as the agent disconnecting, which
//! ends the call `cancelled`). The seam for acting is the executor
//! itself: guard mode runs the same calls under the real tunables.
//!
//! **Routes** ([`routes`]): `--upstream URL`, whose path prefixes every
//! request's; one route per configured `[[provider]]` under its name
//! (`/<provider>/…` → its `base_url`, through its proxy); or a built-in
//! scenario's simulator (`--scenario`), which needs no key and no network.
//! A path no route takes gets 404: observe forwards only to its upstreams.
//!
//! **Keys.** Request headers are forwarded, never recorded: the recording
//! keeps the response's allowlisted headers, as any run's does. Observe
//! listens on loopback unless told otherwise ([`ObserveError::Remote`]).
//!
//! **Where things are**, in the order a request meets them:
//!
//! | file | what |
//! |---|---|
//! | `server` | accepting connections, HTTP/1.1 and HTTP/2, the connection cap, stopping |
//! | `limits` | the proxy's limits (`PROXY_*`) and what they turned away |
//! | `exchange` | one request's phases: route, request filter, admit, the call, its end |
//! | `routes` | which upstream and dialect a path goes to |
//! | `state` | what connections share: the run in force, a call's admission and end |
//! | `retries` | the agent's own retries as attempts of one call |
//! | `agent` | the agent's side: the body it reads, and noticing it go |
//! | `answers` | the answers the proxy gives itself, in the dialect's error shape |
//! | `relay`, `encoding` | a watched call's upstream leg: the agent's bytes as they came, a decoded copy for the core |
//! | `guard`, `guard/opening`, `failover` | a guarded call's upstream leg: attempts sent again, the agent's answer well-formed, failover with the row's own key |
//! | `segment`, `lifecycle` | one run of an observer; rotation and closing |
//! | `would_fire`, `traces` | our clocks replayed on a watched call; calls sent as traces |

mod agent;
mod answers;
mod encoding;
mod exchange;
mod failover;
mod guard;
mod lifecycle;
mod limits;
mod relay;
mod retries;
pub mod routes;
mod segment;
mod server;
mod state;
mod traces;
mod would_fire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{ConfigError, Settings};
use crate::core::event::EventSink;
use crate::core::executor::CallReport;
use crate::core::policy::CorePolicy;
use crate::core::transport::{ProxySetting, TransportSettings, build_client};
use crate::diagnosis::Diagnosis;
use crate::export::otlp::{Destination, OtlpError, Sent};
use crate::metrics::{Metrics, ServeError};
use crate::providers::Dialect;
use crate::providers::ending::AfterContent;
use crate::providers::setup::ProviderConfig;
use crate::session::{RecordTo, RunSource, SessionError, SessionOutcome, settings_for};
use crate::sim::{SimError, SimServer, builtin};
use crate::store::{RunId, StoreError};
use crate::tunables::Tunables;
use crate::watch::Retention;
use failover::Failover;
pub use guard::Delivered;
use limits::Limits;
pub use limits::{Refusal, Refusals};
use routes::{Route, Routes};
use would_fire::Replays;
pub use would_fire::WouldFire;

/// The tunables that make the executor watch and never act: no retry, no
/// failover, no partial recovery, no stream clock.
pub const WATCH_ONLY: [&str; 10] = [
    "STALLSCOPE_PROVIDER_STREAM_RETRIES=0",
    "STALLSCOPE_FALLBACK_MODELS=off",
    "STALLSCOPE_PARTIAL_RECOVERY=0",
    "STALLSCOPE_SSE_TTFB_TIMEOUT_S=0",
    "STALLSCOPE_SSE_IDLE_TIMEOUT_S=0",
    "STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S=0",
    "STALLSCOPE_SSE_TOTAL_TIMEOUT_S=0",
    "STALLSCOPE_SSE_MIN_RATE=0",
    "STALLSCOPE_CALL_DEADLINE_S=0",
    "STALLSCOPE_TTFB_DISABLE_ABOVE_TOKENS=0",
];

/// Where observed requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObserveSource {
    /// One upstream (`--upstream URL`).
    Upstream(String),
    /// One route per `[[provider]]` of this config file (`None`: the
    /// default location).
    Config(Option<PathBuf>),
    /// A built-in scenario's simulator, served in-process.
    Scenario(String),
}

/// What a long-running observer adds: a new run every interval, which
/// of its runs the database keeps, where it measures from, its Prometheus
/// metrics and its traces.
#[derive(Debug, Clone, Default)]
pub struct Service {
    /// Start a new run every interval, once the run in force has had a
    /// call (`--rotate`); `None`: one run until observe stops.
    pub rotate: Option<Duration>,
    /// Which runs of its label the database keeps (`None`: all).
    pub retention: Option<Retention>,
    /// Where it measures from (`--site`): its runs are labelled
    /// `observe@SITE`, and that is its metrics' `site` (default: the
    /// listen address).
    pub site: Option<String>,
    /// Where `/metrics` is served.
    pub metrics_addr: Option<SocketAddr>,
    /// Where each call, once over, is sent as an OpenTelemetry trace (read
    /// back from its recording, so recording must be on).
    pub otlp: Option<Destination>,
    /// How long after a failed call a request with the same body is its
    /// retry (`--retry-window`; `None`: a minute): until then the call is
    /// not over, so not yet counted or sent.
    pub retry_window: Option<Duration>,
}

/// What to observe, and how.
#[derive(Debug, Clone)]
pub struct ObservePlan {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Listening beyond loopback was asked for (`--allow-remote`).
    pub allow_remote: bool,
    /// Where requests go.
    pub source: ObserveSource,
    /// The config file whose tunables apply (with `--upstream` or a
    /// scenario; a config source names its own).
    pub config: Option<PathBuf>,
    /// `NAME=VALUE` overrides (`--set`).
    pub overrides: Vec<String>,
    /// `NAME=VALUE` edits from the app, above the overrides.
    pub edits: Vec<String>,
    /// Record the run, or not.
    pub recording: Option<RecordTo>,
    /// The core acts on the agent's streamed calls (`--guard`): retries
    /// before content, the dialect's own end after it.
    pub guard: bool,
    /// Rotation, retention, metrics and traces.
    pub service: Service,
}

/// Observe could not start, or its record could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// The settings or the config file are wrong.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The scenario is unknown, or its simulator could not be served.
    #[error(transparent)]
    Scenario(#[from] SimError),
    /// The listen address could not be bound.
    #[error("--listen {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A non-loopback address without `--allow-remote`.
    #[error(
        "--listen {0} is reachable from other machines: observe would forward their requests, with their keys, to \
         the upstream; listen on 127.0.0.1, or add --allow-remote if that is meant"
    )]
    Remote(SocketAddr),
    /// The upstream URL is not one.
    #[error("--upstream {url}: {why}; give an http:// or https:// URL, e.g. https://api.openai.com")]
    Upstream {
        /// As given.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// Traces asked for without recording, which they are read back from.
    #[error("--otlp sends each call read back from its recording: it needs recording (drop --no-record)")]
    OtlpUnrecorded,
    /// `/metrics` could not be served.
    #[error(transparent)]
    Metrics(#[from] ServeError),
    /// The OTLP endpoint is not one traces can be sent to.
    #[error(transparent)]
    Otlp(#[from] OtlpError),
    /// A config source with no `[[provider]]` row.
    #[error("no route to observe: the config file has no [[provider]] row (give --upstream URL, or --config PATH)")]
    NoRoutes,
    /// An HTTP client could not be made for a route.
    #[error("route {route}: {message}")]
    Client {
        /// The route.
        route: String,
        /// Why.
        message: String,
    },
    /// The database could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One observed call, as it ended.
#[derive(Debug, Clone)]
pub struct ObservedCall {
    /// What the core reports of it (`target` is `route/model`).
    pub report: CallReport,
    /// Its verdict.
    pub verdict: Diagnosis,
    /// The first of our timers, under the tunables in force, that would
    /// have fired on its latest attempt before that attempt ended, when
    /// one would.
    pub would_fire: Option<WouldFire>,
    /// Under the guard, what the agent got.
    pub delivered: Option<Delivered>,
}

/// A run an observer rotated out and closed.
#[derive(Debug)]
pub struct RunEnded {
    /// Its report (`run_id` set when it was recorded) and what the
    /// recorder could not keep.
    pub outcome: SessionOutcome,
    /// Older runs of its label the retention deleted after it.
    pub deleted: Vec<RunId>,
    /// Why its record, or the retention, failed, when one did.
    pub error: Option<String>,
}

/// What an observer tells its front end as it goes.
#[derive(Debug)]
pub enum ObserveEvent<'a> {
    /// `/metrics` is served on this address.
    Serving(SocketAddr),
    /// An agent's request ended: a call, or the next attempt of one.
    Call(&'a ObservedCall),
    /// A run was rotated out (`--rotate`) and closed.
    Rotated(&'a RunEnded),
    /// A new run could not be opened (its recorder could not start): the
    /// run in force goes on, and the next rotation tries again.
    NotRotated(&'a StoreError),
    /// Calls that were over were sent as traces, or could not be.
    Traces(&'a Result<Sent, String>),
}

/// What every run of an observer opens with.
struct Setup {
    /// The settings observe runs under (every action off, unless it
    /// guards).
    settings: Settings,
    /// The policy of what is only watched: observe's own, every action off
    /// (the same as the settings' unless it guards).
    watch_policy: CorePolicy,
    /// Replays each ended attempt under the clocks in force (the
    /// tunables before observe switched every action off); none under the
    /// guard, whose clocks act.
    replays: Option<Replays>,
    /// The core acts on the streamed calls (`--guard`).
    guard: bool,
    /// Under the guard, the configured providers a call may fail over to,
    /// each with its pool of keys, and every configured target (the
    /// default chain's).
    failover: Failover,
    /// The providers its calls are recorded under.
    recorded: Vec<ProviderConfig>,
    /// The scenario served behind it, if one is.
    scenario: Option<String>,
    /// The front end's sink.
    watcher: Option<Arc<dyn EventSink>>,
    /// The Prometheus metrics, when served.
    metrics: Option<Arc<Metrics>>,
}

/// A bound observer, ready to run.
pub struct Observer {
    listener: TcpListener,
    addr: SocketAddr,
    setup: Setup,
    routes: Routes,
    clients: HashMap<String, reqwest::Client>,
    scenario: Option<SimServer>,
    recording: Option<RecordTo>,
    service: Service,
    limits: Arc<Limits>,
}

impl Observer {
    /// Reads the settings, sets up the routes (serving a scenario's
    /// simulator when asked) and binds the listen address.
    pub async fn bind(plan: &ObservePlan, env: &[(String, String)]) -> Result<Observer, ObserveError> {
        if !plan.listen.ip().is_loopback() && !plan.allow_remote {
            return Err(ObserveError::Remote(plan.listen));
        }
        if plan.service.otlp.is_some() && plan.recording.is_none() {
            return Err(ObserveError::OtlpUnrecorded);
        }
        // A scenario's own demo values (its idle timer of a second, say)
        // are in force as they are for `run --scenario`: our clocks catch
        // its story in seconds, not after the defaults' half hour.
        let source = match &plan.source {
            ObserveSource::Config(path) => RunSource::Config { path: path.clone(), target: None },
            ObserveSource::Upstream(_) => RunSource::Config { path: plan.config.clone(), target: None },
            ObserveSource::Scenario(name) => RunSource::Scenario { name: name.clone(), dialect: Dialect::OpenAiChat },
        };
        let mut settings = settings_for(&source, &plan.overrides, &plan.edits, env)?;
        let in_force = settings.tunables.clone();
        let acting: Vec<String> = match plan.guard {
            true => vec![guard_recovery(&settings.tunables)],
            false => WATCH_ONLY.map(str::to_owned).to_vec(),
        };
        for setting in &acting {
            settings.tunables.apply_override(setting).map_err(ConfigError::from).map_err(SessionError::from)?;
        }
        settings.policy =
            CorePolicy::from_tunables(&settings.tunables).map_err(ConfigError::from).map_err(SessionError::from)?;
        // What is only watched (every call, or under the guard the requests
        // that are not streams) runs under observe's own policy.
        let mut watched = in_force.clone();
        for setting in WATCH_ONLY {
            watched.apply_override(setting).map_err(ConfigError::from).map_err(SessionError::from)?;
        }
        let watch_policy =
            CorePolicy::from_tunables(&watched).map_err(ConfigError::from).map_err(SessionError::from)?;
        // The guard cuts no healthy stream for its own lateness: a clock due
        // while our runtime is late is held, and says so.
        settings.policy.timers.hold_when_late = plan.guard;
        // Before content is before anything the agent could tell from a
        // healthy call: reasoning it has is content too.
        settings.policy.timers.reasoning_commits = plan.guard;
        let providers = std::mem::take(&mut settings.providers);
        let mut scenario = None;
        let base = &settings.policy.transport;
        let rows: Vec<(Route, TransportSettings)> = match &plan.source {
            ObserveSource::Upstream(url) => vec![(upstream_route(url)?, base.clone())],
            ObserveSource::Scenario(name) => {
                let server = SimServer::start(builtin(name)?, 0).await?;
                let route = Route { name: "sim".to_owned(), root: server.base_url() };
                scenario = Some((name.clone(), server));
                vec![(route, TransportSettings { proxy: ProxySetting::Off, ..base.clone() })]
            }
            ObserveSource::Config(_) => {
                if providers.is_empty() {
                    return Err(ObserveError::NoRoutes);
                }
                let mut rows: Vec<(Route, TransportSettings)> = Vec::new();
                for p in &providers {
                    if rows.iter().all(|(r, _)| r.name != p.name) {
                        let route = Route { name: p.name.clone(), root: p.base_url.trim_end_matches('/').to_owned() };
                        rows.push((route, p.transport(base)));
                    }
                }
                rows
            }
        };
        let mut clients = HashMap::new();
        for (route, transport) in &rows {
            // Observe keeps no read timeout of its own: the agent's is the
            // one that counts. The guard keeps the core's, as any call does.
            let read_timeout = transport.read_timeout.filter(|_| plan.guard);
            let client = build_client(&TransportSettings { read_timeout, ..transport.clone() })
                .map_err(|e| ObserveError::Client { route: route.name.clone(), message: e.to_string() })?;
            clients.insert(route.name.clone(), client);
        }
        let routes = match &plan.source {
            ObserveSource::Config(_) => Routes::Named(rows.into_iter().map(|(r, _)| r).collect()),
            _ => Routes::One(rows.into_iter().map(|(r, _)| r).next().ok_or(ObserveError::NoRoutes)?),
        };
        let listener =
            TcpListener::bind(plan.listen).await.map_err(|source| ObserveError::Bind { addr: plan.listen, source })?;
        let addr = listener.local_addr().map_err(|source| ObserveError::Bind { addr: plan.listen, source })?;
        let (scenario, server) = scenario.unzip();
        let replays =
            (!plan.guard).then(|| Replays::start(&in_force, &settings.tunables, settings.classifier.rules().to_vec()));
        let (failover, failover_rows) = match plan.guard {
            true => (Failover::of(&providers, &settings.policy, env)?, providers.as_slice()),
            false => (Failover::default(), &[][..]),
        };
        let setup = Setup {
            watch_policy: CorePolicy { transport: settings.policy.transport.clone(), ..watch_policy },
            settings,
            replays,
            guard: plan.guard,
            failover,
            recorded: recorded_providers(&routes, failover_rows),
            scenario,
            watcher: None,
            metrics: plan
                .service
                .metrics_addr
                .map(|_| Arc::new(Metrics::with_names(routes.metric_names(&providers, &in_force)))),
        };
        Ok(Observer {
            listener,
            addr,
            setup,
            routes,
            clients,
            scenario: server,
            recording: plan.recording.clone(),
            service: plan.service.clone(),
            limits: Arc::new(Limits::of(&in_force)),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the core acts on the streamed calls (`--guard`).
    pub fn guards(&self) -> bool {
        self.setup.guard
    }

    /// What its limits turn away as it runs, counted by why.
    pub fn refusals(&self) -> Arc<Refusals> {
        Arc::clone(&self.limits.refused)
    }

    /// Where requests go, in words.
    pub fn routes(&self) -> String {
        self.routes.describe()
    }

    /// The label of its runs, and the `site` of its metrics:
    /// `observe@SITE` (`--site`), else `observe@ADDR`; `guard@…` when the
    /// core acts, so the history tells guarded runs apart.
    pub fn site(&self) -> String {
        let kind = if self.setup.guard { "guard" } else { "observe" };
        format!("{kind}@{}", self.service.site.clone().unwrap_or_else(|| self.addr.to_string()))
    }
}

/// The providers observed calls are recorded under: one per route and
/// dialect ([`routes::provider_name`]), at the route's root, so a replay
/// decodes each recorded stream as its dialect; and the configured
/// providers a guarded call may fail over to (`failover`), their keys
/// redacted as any run's.
fn recorded_providers(routes: &Routes, failover: &[ProviderConfig]) -> Vec<ProviderConfig> {
    let all = match routes {
        Routes::One(route) => std::slice::from_ref(route),
        Routes::Named(routes) => routes.as_slice(),
    };
    let mut recorded: Vec<ProviderConfig> = all
        .iter()
        .flat_map(|route| {
            Dialect::ALL.map(|dialect| ProviderConfig {
                name: routes::provider_name(&route.name, Some(dialect)),
                kind: dialect,
                base_url: route.root.clone(),
                ..ProviderConfig::at_root("", dialect, "", "observed")
            })
        })
        .collect();
    let routed: Vec<String> = recorded.iter().map(|p| p.name.clone()).collect();
    recorded.extend(failover.iter().filter(|row| !routed.contains(&row.name)).cloned());
    recorded
}

/// The guard's one change to the tunables in force: partial recovery is
/// what `GUARD_AFTER_CONTENT` says, `finish` being it (the agent keeps the
/// partial answer with a length finish), `error` its absence.
fn guard_recovery(tunables: &Tunables) -> String {
    let finish = tunables.get("STALLSCOPE_GUARD_AFTER_CONTENT").value.as_str() == AfterContent::Finish.name();
    format!("STALLSCOPE_PARTIAL_RECOVERY={}", u8::from(finish))
}

/// The route of `--upstream URL`.
fn upstream_route(url: &str) -> Result<Route, ObserveError> {
    let bad = |why: &str| ObserveError::Upstream { url: crate::core::redact::url(url), why: why.to_owned() };
    if crate::core::redact::is_masked(url) {
        return Err(bad("its credentials are masked (***), as stallscope shows them: give the real ones"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
        return Err(bad("not an http(s) URL with a host"));
    }
    if parsed.query().is_some() {
        return Err(bad("a query is not a path prefix"));
    }
    Ok(Route { name: "upstream".to_owned(), root: url.trim_end_matches('/').to_owned() })
}
