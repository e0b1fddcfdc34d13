//! Observe: a recording streaming proxy an operator puts in front of their
//! own agent. Each request goes on to its real provider as it came, the
//! agent's key included, and its response comes back chunk by chunk as it
//! is read, compressed if it was (the recording reads a decoded copy:
//! gzip and deflate); each is recorded as a stream of a run labelled
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

mod encoding;
mod exchange;
mod relay;
mod retries;
pub mod routes;
mod would_fire;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, Settings};
use crate::core::event::{EventSink, Outcome, StreamId};
use crate::core::executor::{CallReport, Executor, Origin};
use crate::core::failover::Target;
use crate::core::fleet::Fleet;
use crate::core::lag_probe::LagSummary;
use crate::core::policy::CorePolicy;
use crate::core::policy::RetrySettings;
use crate::core::transport::{ProxySetting, TransportSettings, build_client};
use crate::core::upstream::{Upstream, Upstreams};
use crate::diagnosis::{Diagnosis, diagnose_with};
use crate::providers::Dialect;
use crate::providers::setup::ProviderConfig;
use crate::recorder::RecorderHandle;
use crate::replay::recording::RecordedProvider;
use crate::report::RunReport;
use crate::session::{RecordTo, RunSource, SessionError, SessionOutcome, Tee, blocking, settings_for, start_recorder};
use crate::sim::{SimError, SimServer, builtin};
use crate::store::StoreError;
use crate::store::runs::{RunMeta, RunStart};
use crate::tunables::Tunables;
use relay::ObservedUpstream;
use retries::{Ended, Key, Recent};
use routes::{Route, Routes};
pub use would_fire::WouldFire;
use would_fire::{Clocks, Going};

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

/// What to observe, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// have fired on it before it ended, when one would.
    pub would_fire: Option<WouldFire>,
}

/// What every connection shares.
struct State {
    routes: Routes,
    clients: HashMap<String, reqwest::Client>,
    upstream: Arc<ObservedUpstream>,
    executor: Executor,
    /// The retry limits verdicts are read against (observe's: none).
    limits: RetrySettings,
    going: Arc<Going>,
    recent: Recent,
    clocks: Clocks,
    next: AtomicU64,
    /// Calls started and not yet ended, and a wake-up when one ends.
    in_flight: (AtomicUsize, Notify),
    calls: Mutex<Vec<(CallReport, Diagnosis)>>,
    on_call: Box<dyn Fn(&ObservedCall) + Send + Sync>,
    cancel: CancellationToken,
}

impl State {
    /// The stream of a call starting: `continued`'s (a retry), else a new
    /// one; the call counts as in flight until [`State::finished`].
    fn start(&self, continued: Option<StreamId>) -> StreamId {
        self.in_flight.0.fetch_add(1, Ordering::SeqCst);
        continued.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn since_epoch(&self, at: Instant) -> std::time::Duration {
        at.saturating_duration_since(self.executor.epoch)
    }

    /// Takes a call's report once it has ended, with what our clocks would
    /// have done on it (replayed off the runtime's workers); returns why it
    /// failed, for the 502 of a call the upstream never answered.
    async fn finished(self: &Arc<Self>, report: CallReport, key: Key, retried: Option<Ended>) -> Option<String> {
        let (stream, now, continued) = (report.stream, Instant::now(), retried.is_some());
        let (mut events, report) = match retried {
            Some(mut ended) => {
                let gap = now.saturating_duration_since(ended.at).saturating_sub(report.elapsed);
                (std::mem::take(&mut ended.events), ended.continued(report, gap))
            }
            None => (Vec::new(), report),
        };
        events.extend(self.going.take(stream));
        let verdict = diagnose_with(&events, &self.limits);
        let state = Arc::clone(self);
        let replayed = tokio::task::spawn_blocking(move || {
            let would_fire = state.clocks.first(stream, &events);
            (would_fire, events)
        });
        let (would_fire, events) = match replayed.await {
            Ok(replayed) => replayed,
            // The replay panicked: let the panic continue rather than invent a mark.
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        };
        let why = report.error.as_ref().map(|e| e.message.clone());
        (self.on_call)(&ObservedCall { report: report.clone(), verdict: verdict.clone(), would_fire });
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if continued {
            calls.retain(|(r, _)| r.stream != stream);
        }
        calls.push((report.clone(), verdict));
        drop(calls);
        // A call that failed or was cut may be retried by the agent.
        if report.outcome != Outcome::Ok && !self.cancel.is_cancelled() {
            self.recent.keep(Ended { key, stream, at: now, events, report });
        }
        self.in_flight.0.fetch_sub(1, Ordering::SeqCst);
        self.in_flight.1.notify_waiters();
        why
    }

    /// Waits until every call started has ended.
    async fn settled(&self) {
        loop {
            let woken = self.in_flight.1.notified();
            if self.in_flight.0.load(Ordering::SeqCst) == 0 {
                return;
            }
            woken.await;
        }
    }
}

/// A bound observer, ready to run.
pub struct Observer {
    listener: TcpListener,
    addr: SocketAddr,
    settings: Settings,
    /// The tunables before observe switched every action off: the clocks
    /// whose would-fire it reports.
    in_force: Tunables,
    routes: Routes,
    clients: HashMap<String, reqwest::Client>,
    scenario: Option<(String, SimServer)>,
    recording: Option<RecordTo>,
}

impl Observer {
    /// Reads the settings, sets up the routes (serving a scenario's
    /// simulator when asked) and binds the listen address.
    pub async fn bind(plan: &ObservePlan, env: &[(String, String)]) -> Result<Observer, ObserveError> {
        if !plan.listen.ip().is_loopback() && !plan.allow_remote {
            return Err(ObserveError::Remote(plan.listen));
        }
        let config = match &plan.source {
            ObserveSource::Config(path) => path.clone(),
            _ => plan.config.clone(),
        };
        let source = RunSource::Config { path: config, target: None };
        let mut settings = settings_for(&source, &plan.overrides, &plan.edits, env)?;
        let in_force = settings.tunables.clone();
        for setting in WATCH_ONLY {
            settings.tunables.apply_override(setting).map_err(ConfigError::from).map_err(SessionError::from)?;
        }
        settings.policy =
            CorePolicy::from_tunables(&settings.tunables).map_err(ConfigError::from).map_err(SessionError::from)?;
        let providers = std::mem::take(&mut settings.providers);
        let mut scenario = None;
        let rows: Vec<(Route, ProxySetting)> = match &plan.source {
            ObserveSource::Upstream(url) => vec![(upstream_route(url)?, settings.policy.transport.proxy.clone())],
            ObserveSource::Scenario(name) => {
                let server = SimServer::start(builtin(name)?, 0).await?;
                let route = Route { name: "sim".to_owned(), root: server.base_url() };
                scenario = Some((name.clone(), server));
                vec![(route, ProxySetting::Off)]
            }
            ObserveSource::Config(_) => {
                if providers.is_empty() {
                    return Err(ObserveError::NoRoutes);
                }
                let mut rows: Vec<(Route, ProxySetting)> = Vec::new();
                for p in &providers {
                    if rows.iter().all(|(r, _)| r.name != p.name) {
                        let proxy = p
                            .proxy
                            .as_deref()
                            .map_or_else(|| settings.policy.transport.proxy.clone(), ProxySetting::parse);
                        rows.push((
                            Route { name: p.name.clone(), root: p.base_url.trim_end_matches('/').to_owned() },
                            proxy,
                        ));
                    }
                }
                rows
            }
        };
        let mut clients = HashMap::new();
        for (route, proxy) in &rows {
            // Observe keeps no read timeout of its own: the agent's is the
            // one that counts.
            let transport =
                TransportSettings { read_timeout: None, proxy: proxy.clone(), ..settings.policy.transport.clone() };
            let client = build_client(&transport)
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
        Ok(Observer {
            listener,
            addr,
            settings,
            in_force,
            routes,
            clients,
            scenario,
            recording: plan.recording.clone(),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where requests go, in words.
    pub fn routes(&self) -> String {
        self.routes.describe()
    }

    /// Serves until `cancel`, recording the run when asked; `on_call` sees
    /// each call as it ends, with its verdict. Returns the run's report and
    /// the events the recorder could not keep (observe measures no lag of
    /// its own: its clocks act on nothing).
    pub async fn run(
        self,
        cancel: &CancellationToken,
        watcher: Option<Arc<dyn EventSink>>,
        on_call: impl Fn(&ObservedCall) + Send + Sync + 'static,
    ) -> Result<SessionOutcome, ObserveError> {
        let origin = Origin::now(rand::random());
        let recorded = recorded_providers(&self.routes);
        let label = format!("observe@{}", self.addr);
        let scenario = self.scenario.as_ref().map(|(name, _)| name.clone());
        // The calls are the agent's: how many, and how many at once, is not
        // known ahead (0: open-ended). No key pool is used.
        let meta = RunMeta {
            requests: 0,
            concurrency: 0,
            seed: origin.seed,
            epoch_unix_ns: origin.epoch_unix_ns(),
            rules: serde_json::to_value(self.settings.classifier.rules()).unwrap_or_default(),
            pools: BTreeMap::new(),
        };
        let clocks = Clocks::new(
            &self.in_force,
            self.settings.tunables.clone(),
            meta.clone(),
            self.settings.classifier.rules().to_vec(),
            recorded
                .iter()
                .map(|p| RecordedProvider { target: Target::new(&p.name, &p.model), dialect: Some(p.kind) })
                .collect(),
        );
        let recorder = match &self.recording {
            Some(recording) => {
                let label = Some(recording.label.clone().unwrap_or(label));
                let start = RunStart::new(label, scenario.clone(), &self.settings.tunables, &recorded).with_meta(meta);
                Some(start_recorder(&RecordTo { label: None, ..recording.clone() }, start, &self.settings).await?)
            }
            None => None,
        };
        let going = Arc::new(Going::default());
        let mut sinks: Vec<Arc<dyn EventSink>> = vec![going.clone()];
        sinks.extend(recorder.as_ref().map(|(sink, _)| Arc::new(sink.clone()) as Arc<dyn EventSink>));
        sinks.extend(watcher);
        let upstream = Arc::new(ObservedUpstream::default());
        let mut upstreams = Upstreams::default();
        for row in &recorded {
            upstreams.providers.insert(row.name.clone(), Arc::clone(&upstream) as Arc<dyn Upstream>);
        }
        let policy = self.settings.policy.clone();
        let executor = Executor {
            fleet: Arc::new(Fleet::new(policy.fleet, HashMap::new())),
            policy: Arc::new(policy),
            classifier: Arc::new(self.settings.classifier.clone()),
            upstreams: Arc::new(upstreams),
            sink: Arc::new(Tee(sinks)),
            epoch: origin.epoch,
            wall_epoch: origin.wall_epoch,
            seed: origin.seed,
            lag: None,
        };
        let state = Arc::new(State {
            routes: self.routes,
            clients: self.clients,
            upstream,
            executor,
            limits: self.settings.policy.retry.clone(),
            going,
            recent: Recent::default(),
            clocks,
            next: AtomicU64::new(0),
            in_flight: (AtomicUsize::new(0), Notify::new()),
            calls: Mutex::new(Vec::new()),
            on_call: Box::new(on_call),
            cancel: cancel.clone(),
        });
        let started = Instant::now();
        serve(self.listener, Arc::clone(&state), cancel).await;
        let calls = std::mem::take(&mut *state.calls.lock().unwrap_or_else(PoisonError::into_inner));
        let (reports, diagnoses): (Vec<CallReport>, Vec<(StreamId, Diagnosis)>) = calls
            .into_iter()
            .map(|(report, verdict)| {
                let stream = report.stream;
                (report, (stream, verdict))
            })
            .unzip();
        let mut report = RunReport::new(scenario, self.settings.tunables.snapshot(), &reports, started.elapsed());
        report.seed = Some(origin.seed);
        report.stopped = true;
        report.attach_diagnoses(diagnoses);
        let dropped_events = match recorder {
            Some((_, handle)) => finish(handle, &mut report).await?,
            None => 0,
        };
        if let Some((_, server)) = self.scenario {
            server.shutdown().await;
        }
        Ok(SessionOutcome { report, dropped_events, lag: LagSummary::default() })
    }
}

/// Commits the run's last events and its report; how many events the
/// recorder could not keep.
async fn finish(handle: RecorderHandle, report: &mut RunReport) -> Result<u64, StoreError> {
    report.run_id = Some(handle.run_id());
    let stored = report.clone();
    blocking(move || handle.finish(&stored)).await
}

/// Accepts connections until `cancel`, then lets the calls in flight end
/// (each is cancelled with it) before returning.
async fn serve(listener: TcpListener, state: Arc<State>, cancel: &CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        connections.spawn(async move {
            let service = service_fn(move |request| exchange::handle(Arc::clone(&state), request));
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
    // The calls end with their cancelled token, and their answers to the
    // agents with them; then the connections, idle ones too, are closed.
    state.settled().await;
    connections.shutdown().await;
}

/// The providers observed calls are recorded under: one per route and
/// dialect ([`routes::provider_name`]), at the route's root, so a replay
/// decodes each recorded stream as its dialect.
fn recorded_providers(routes: &Routes) -> Vec<ProviderConfig> {
    let all = match routes {
        Routes::One(route) => std::slice::from_ref(route),
        Routes::Named(routes) => routes.as_slice(),
    };
    all.iter()
        .flat_map(|route| {
            Dialect::ALL.map(|dialect| ProviderConfig {
                name: routes::provider_name(&route.name, Some(dialect)),
                kind: dialect,
                base_url: route.root.clone(),
                ..ProviderConfig::at_root("", dialect, "", "observed")
            })
        })
        .collect()
}

/// The route of `--upstream URL`.
fn upstream_route(url: &str) -> Result<Route, ObserveError> {
    let bad = |why: &str| ObserveError::Upstream { url: crate::core::redact::url(url), why: why.to_owned() };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.has_host() {
        return Err(bad("not an http(s) URL with a host"));
    }
    if parsed.query().is_some() {
        return Err(bad("a query is not a path prefix"));
    }
    Ok(Route { name: "upstream".to_owned(), root: url.trim_end_matches('/').to_owned() })
}
