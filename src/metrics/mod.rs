//! Prometheus metrics of runs: what the core decided, call by call, counted
//! and timed for a scraper, in the Prometheus text format (through
//! `prometheus-client`, the official Rust client).
//!
//! [`Metrics`] holds every family; [`CallMetrics`] feeds it from one run's
//! typed events (it is an [`crate::core::event::EventSink`]) and from each
//! call's report and verdict; [`MetricsServer`] serves `/metrics` over
//! HTTP. The names follow Prometheus's conventions: the `stallscope_`
//! prefix, base units (`_seconds`), `_total` on counters.
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `stallscope_calls_total` | counter | site, provider, model, outcome, verdict |
//! | `stallscope_attempts_total` | counter | site, provider, model, end |
//! | `stallscope_retries_total` | counter | site, provider, model, category |
//! | `stallscope_timer_fires_total` | counter | site, provider, model, timer |
//! | `stallscope_would_fire_total` | counter | site, provider, model, timer |
//! | `stallscope_failover_hops_total` | counter | site, from, to, reason |
//! | `stallscope_ttfb_seconds` | histogram | site, provider, model |
//! | `stallscope_call_duration_seconds` | histogram | site, provider, model, outcome |
//! | `stallscope_stall_detection_seconds` | histogram | site, provider, model, timer |
//! | `stallscope_backoff_sleep_seconds` | histogram | site, provider, model, reason |
//! | `stallscope_recorder_dropped_events_total` | counter | site |
//! | `stallscope_runtime_lag_seconds` | histogram | site |
//! | `stallscope_watch_rounds_total` | counter | site, result |
//! | `stallscope_watch_rounds_skipped_total` | counter | site |
//! | `stallscope_watch_round_duration_seconds` | histogram | site |
//! | `stallscope_watch_last_round_timestamp_seconds` | gauge | site |
//! | `stallscope_watch_recording` | gauge | site |
//! | `stallscope_route_ready` | gauge | site, provider, model |
//!
//! A call counts under the route it was made for (`provider`/`model` of its
//! first target), with its outcome and its verdict's kind; its attempts,
//! retries, timers, TTFB and detection times count under the target each
//! attempt went to. Every label value comes from a closed list (outcomes,
//! verdict kinds, categories, timers, how an attempt ended) or from the
//! configuration (sites, providers, models), so the number of series is
//! bounded: no stream ids, no error messages, no keys. The metrics hold
//! that bound themselves: a provider or model name that is not among the
//! [`LabelNames`] they were given (the configured rows and failover
//! targets; for observe its routes) counts as `other`, whoever passes it,
//! so an observed agent's invented `model` adds no series. A route that
//! leaves the configuration leaves `stallscope_route_ready` with the next
//! probe, so a removed route does not stay "not ready" for ever.

mod labels;
mod server;
mod sink;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use labels::{AttemptLabels, CallLabels, CategoryLabels, HopLabels, OutcomeLabels, RoundLabels, Route, SiteLabels};
use labels::{RefusedLabels, SleepLabels, TimerLabels};

use crate::core::failover::Target;

pub use labels::LabelNames;
pub use server::{MetricsServer, ServeError};
pub use sink::CallMetrics;

/// The `Content-Type` of what [`Metrics::encode`] writes (the Prometheus
/// text format, version 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The address `/metrics` is served on by default (the port is the one
/// OpenTelemetry's Prometheus exporters use by convention).
pub const DEFAULT_ADDR: &str = "127.0.0.1:9464";

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// How a watch round ended, as `stallscope_watch_rounds_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundResult {
    /// The round ran and was recorded.
    Recorded,
    /// The round ran but was not recorded (recording off, or the database
    /// could not be written).
    Unrecorded,
    /// The round could not run (its simulator or its providers could not
    /// be set up).
    Failed,
}

impl RoundResult {
    /// The label value.
    pub const fn name(self) -> &'static str {
        match self {
            RoundResult::Recorded => "recorded",
            RoundResult::Unrecorded => "unrecorded",
            RoundResult::Failed => "failed",
        }
    }
}

/// Every metric family, registered once; shared by the sinks of many runs
/// and the server.
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    attempts: Family<AttemptLabels, Counter>,
    retries: Family<CategoryLabels, Counter>,
    timer_fires: Family<TimerLabels, Counter>,
    would_fire: Family<TimerLabels, Counter>,
    failover_hops: Family<HopLabels, Counter>,
    ttfb: Histograms<Route>,
    call_duration: Histograms<OutcomeLabels>,
    stall_detection: Histograms<TimerLabels>,
    backoff_sleep: Histograms<SleepLabels>,
    recorder_dropped: Family<SiteLabels, Counter>,
    unreplayed_calls: Family<SiteLabels, Counter>,
    proxy_refused: Family<RefusedLabels, Counter>,
    runtime_lag: Histograms<SiteLabels>,
    rounds: Family<RoundLabels, Counter>,
    rounds_skipped: Family<SiteLabels, Counter>,
    round_duration: Histograms<SiteLabels>,
    last_round: Family<SiteLabels, Gauge<f64, AtomicU64>>,
    recording: Family<SiteLabels, Gauge>,
    route_ready: Family<Route, Gauge>,
    /// The routes each site's last probe set `route_ready` for.
    probed_routes: Mutex<HashMap<String, Vec<Route>>>,
    /// The provider and model names kept as label values.
    names: RwLock<Arc<LabelNames>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Network and provider waits: 10 ms to about 80 s.
fn wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

/// Whole calls and rounds: 50 ms to about 7 min.
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 14))
}

/// Our own runtime's lateness: 1 ms to about 8 s.
fn lag_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family, registered and empty, keeping `names` as label
    /// values ([`Metrics::set_names`]).
    pub fn with_names(names: LabelNames) -> Metrics {
        let metrics = Metrics::new();
        metrics.set_names(names);
        metrics
    }

    /// The provider and model names kept as label values from now on, for
    /// the sinks made after this call and the routes' readiness; every
    /// other name counts as `other`. A watch sets them each round from
    /// the configuration it reads, observe from its routes.
    pub fn set_names(&self, names: LabelNames) {
        *self.names.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(names);
    }

    fn names(&self) -> Arc<LabelNames> {
        Arc::clone(&self.names.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Every family, registered and empty, with no names kept: every
    /// provider and model counts as `other` until [`Metrics::set_names`].
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("stallscope");
        let metrics = Metrics {
            calls: Family::default(),
            attempts: Family::default(),
            retries: Family::default(),
            timer_fires: Family::default(),
            would_fire: Family::default(),
            failover_hops: Family::default(),
            ttfb: Family::new_with_constructor(wait_buckets),
            call_duration: Family::new_with_constructor(call_buckets),
            stall_detection: Family::new_with_constructor(wait_buckets),
            backoff_sleep: Family::new_with_constructor(wait_buckets),
            recorder_dropped: Family::default(),
            unreplayed_calls: Family::default(),
            proxy_refused: Family::default(),
            runtime_lag: Family::new_with_constructor(lag_buckets),
            rounds: Family::default(),
            rounds_skipped: Family::default(),
            round_duration: Family::new_with_constructor(call_buckets),
            last_round: Family::default(),
            recording: Family::default(),
            route_ready: Family::default(),
            probed_routes: Mutex::default(),
            names: RwLock::default(),
            registry: Registry::default(),
        };
        let m = &metrics;
        registry.register(
            "calls",
            "Calls ended, by the route they were made for, their outcome and their verdict's kind",
            m.calls.clone(),
        );
        registry.register("attempts", "Attempts ended, by target and how they ended", m.attempts.clone());
        registry.register("retries", "Retries scheduled, by target and failure category", m.retries.clone());
        registry.register("timer_fires", "Timers that fired, by target and timer", m.timer_fires.clone());
        registry.register(
            "would_fire",
            "Observed attempts on which one of our timers, under the tunables in force, would have fired (observe acts on none), by target and timer",
            m.would_fire.clone(),
        );
        registry.register(
            "failover_hops",
            "Failover hops, by targets left and taken and cause",
            m.failover_hops.clone(),
        );
        registry.register_with_unit(
            "ttfb",
            "Time from an attempt's start to its first body byte",
            Unit::Seconds,
            m.ttfb.clone(),
        );
        registry.register_with_unit(
            "call_duration",
            "Time from a call's start to its end, by route and outcome",
            Unit::Seconds,
            m.call_duration.clone(),
        );
        registry.register_with_unit(
            "stall_detection",
            "How long a stall went unnoticed before a timer fired: since the attempt's last byte, or last progress event for the data-stall and throughput-floor (min_rate) timers",
            Unit::Seconds,
            m.stall_detection.clone(),
        );
        registry.register_with_unit(
            "backoff_sleep",
            "Sleeps before retries, by target and reason (backoff or server_requested)",
            Unit::Seconds,
            m.backoff_sleep.clone(),
        );
        registry.register(
            "recorder_dropped_events",
            "Events the recorder could not keep (it fell behind)",
            m.recorder_dropped.clone(),
        );
        registry.register(
            "observe_unreplayed_calls",
            "Observed calls our clocks' would-fire replay fell behind on and did not replay",
            m.unreplayed_calls.clone(),
        );
        registry.register(
            "proxy_refused",
            "Agents' connections and requests observe's proxy answered or closed itself, by reason: a PROXY_* limit, an upgrade, observe stopping, an accept error waited out",
            m.proxy_refused.clone(),
        );
        registry.register_with_unit(
            "runtime_lag",
            "Our own runtime's scheduling lag while calls ran, the largest per 100 ms",
            Unit::Seconds,
            m.runtime_lag.clone(),
        );
        registry.register("watch_rounds", "Watch rounds, by result", m.rounds.clone());
        registry.register(
            "watch_rounds_skipped",
            "Scheduled watch rounds skipped because the round before ran past their start",
            m.rounds_skipped.clone(),
        );
        registry.register_with_unit(
            "watch_round_duration",
            "Wall-clock time of a watch round",
            Unit::Seconds,
            m.round_duration.clone(),
        );
        registry.register(
            "watch_last_round_timestamp_seconds",
            "When the last watch round ended, Unix seconds",
            m.last_round.clone(),
        );
        registry.register(
            "watch_recording",
            "1 while watch rounds are recorded, 0 while the database cannot be written",
            m.recording.clone(),
        );
        registry.register(
            "route_ready",
            "1 when the route's last probe found it ready (tiny and realistic payload ok, no failure), else 0",
            m.route_ready.clone(),
        );
        Metrics { registry, ..metrics }
    }

    /// A sink for one run's events at `site`, keeping the names set now.
    pub fn calls(self: &Arc<Self>, site: &str) -> CallMetrics {
        CallMetrics::new(Arc::clone(self), site, self.names())
    }

    /// Counts events the recorder of a run at `site` dropped.
    pub fn recorder_dropped(&self, site: &str, events: u64) {
        self.recorder_dropped.get_or_create(&SiteLabels::new(site)).inc_by(events);
    }

    /// Counts observed calls at `site` whose would-fire replay was dropped.
    pub fn unreplayed_calls(&self, site: &str, calls: u64) {
        self.unreplayed_calls.get_or_create(&SiteLabels::new(site)).inc_by(calls);
    }

    /// Counts one agent's connection or request observe's proxy at `site`
    /// turned away, for `reason` (one of a closed list).
    pub fn proxy_refused(&self, site: &str, reason: &'static str) {
        self.proxy_refused.get_or_create(&RefusedLabels { site: site.to_owned(), reason }).inc();
    }

    /// Counts one watch round at `site`: how it ended, how long it took,
    /// when it ended (Unix seconds) and whether rounds are being recorded.
    pub fn round_finished(&self, site: &str, result: RoundResult, took: Duration, ended_unix_s: f64) {
        let labels = SiteLabels::new(site);
        self.rounds.get_or_create(&RoundLabels { site: site.to_owned(), result: result.name() }).inc();
        self.round_duration.get_or_create(&labels).observe(took.as_secs_f64());
        self.last_round.get_or_create(&labels).set(ended_unix_s);
        if result != RoundResult::Failed {
            self.recording.get_or_create(&labels).set(i64::from(result == RoundResult::Recorded));
        }
    }

    /// Sets each route's readiness at `site` from a probe of every route
    /// the configuration has; routes of the site's last probe that are not
    /// among them are removed.
    pub fn routes_ready(&self, site: &str, routes: &[(Target, bool)]) {
        let names = self.names();
        let now: Vec<Route> = routes.iter().map(|(target, _)| Route::new(site, target, &names)).collect();
        let mut probed = self.probed_routes.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in probed.get(site).into_iter().flatten().filter(|route| !now.contains(route)) {
            self.route_ready.remove(gone);
        }
        for (route, (_, ready)) in now.iter().zip(routes) {
            self.route_ready.get_or_create(route).set(i64::from(*ready));
        }
        probed.insert(site.to_owned(), now);
    }

    /// Counts scheduled rounds at `site` that were skipped.
    pub fn rounds_skipped(&self, site: &str, rounds: u64) {
        self.rounds_skipped.get_or_create(&SiteLabels::new(site)).inc_by(rounds);
    }

    /// Every series in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail, and the registry encodes only
        // metric types the text format has.
        let _ = prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests;
