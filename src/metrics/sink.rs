//! One run's events and calls, counted into the shared [`Metrics`] as they
//! come: a sink beside the recorder, so counters move while a long stall
//! is still going, and each call's report and verdict as the call ends.

use std::sync::Arc;
use std::time::Duration;

use crate::core::category::TimerKind;
use crate::core::event::{AttemptEnd, Event, EventKind, EventSink, SleepReason};
use crate::core::executor::CallReport;
use crate::core::failover::Target;
use crate::core::lag_probe::LagSample;
use crate::core::per_stream::PerStream;
use crate::diagnosis::{Diagnosis, StreamFold};

use super::Metrics;
use super::labels::{AttemptLabels, CallLabels, CategoryLabels, HopLabels, LabelNames, OutcomeLabels, Route};
use super::labels::{SiteLabels, SleepLabels, TimerLabels};

/// What is kept of a stream while it runs.
struct StreamState {
    /// The current attempt's target.
    route: Route,
    /// When the current attempt started, until its first body byte.
    awaiting_first_byte: Option<Duration>,
    /// Its events folded as the diagnosis folds them, for how long each
    /// stall went unnoticed (the events that say when a clock restarted).
    fold: StreamFold,
}

/// Counts one run's events and calls at one site into [`Metrics`].
pub struct CallMetrics {
    metrics: Arc<Metrics>,
    site: String,
    /// The provider and model names kept as label values.
    names: Arc<LabelNames>,
    streams: PerStream<StreamState>,
}

impl std::fmt::Debug for CallMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallMetrics").field("site", &self.site).finish_non_exhaustive()
    }
}

/// How an attempt ended, as the `end` label (the event's own tag names).
fn end_name(end: &AttemptEnd) -> &'static str {
    match end {
        AttemptEnd::Done => "done",
        AttemptEnd::Transport { .. } => "transport",
        AttemptEnd::Timer { .. } => "timer",
        AttemptEnd::Status { .. } => "status",
        AttemptEnd::InStream { .. } => "in_stream",
        AttemptEnd::Malformed => "malformed",
        AttemptEnd::Cancelled => "cancelled",
    }
}

fn sleep_name(reason: &SleepReason) -> &'static str {
    match reason {
        SleepReason::Backoff => "backoff",
        SleepReason::ServerRequested { .. } => "server_requested",
    }
}

impl CallMetrics {
    pub(super) fn new(metrics: Arc<Metrics>, site: &str, names: Arc<LabelNames>) -> CallMetrics {
        CallMetrics { metrics, site: site.to_owned(), names, streams: PerStream::default() }
    }

    fn route(&self, target: &Target) -> Route {
        Route::new(&self.site, target, &self.names)
    }

    /// Counts a call that ended, with its verdict: under the route it was
    /// made for (the first target, which a failover hop left).
    pub fn on_finish(&self, report: &CallReport, verdict: &Diagnosis) {
        let first = report.hops.first().map_or(&report.target, |hop| &hop.from);
        let route = self.route(first);
        let outcome = report.outcome.name();
        let m = &self.metrics;
        m.calls.get_or_create(&CallLabels { route: route.clone(), outcome, verdict: verdict.kind.name() }).inc();
        m.call_duration.get_or_create(&OutcomeLabels { route, outcome }).observe(report.elapsed.as_secs_f64());
    }

    /// Counts an observed attempt to `target` on which our `timer` would
    /// have fired.
    pub fn would_fire(&self, target: &Target, timer: TimerKind) {
        let labels = TimerLabels { route: self.route(target), timer: timer.name() };
        self.metrics.would_fire.get_or_create(&labels).inc();
    }

    /// Counts what one event of a stream says, with the stream's current
    /// target.
    fn count(&self, state: &mut StreamState, event: &Event) {
        let m = &self.metrics;
        let route = || state.route.clone();
        match &event.kind {
            EventKind::ChunkReceived { .. } => {
                if let Some(started) = state.awaiting_first_byte.take() {
                    m.ttfb.get_or_create(&route()).observe(event.at.saturating_sub(started).as_secs_f64());
                }
            }
            EventKind::AttemptEnded { end, .. } => {
                m.attempts.get_or_create(&AttemptLabels { route: route(), end: end_name(end) }).inc();
            }
            EventKind::TimerFired { timer, .. } => {
                let labels = TimerLabels { route: route(), timer: timer.name() };
                m.timer_fires.get_or_create(&labels).inc();
                if let Some(fired) = state.fold.last_fired() {
                    m.stall_detection.get_or_create(&labels).observe(fired.detected_after_s);
                }
            }
            EventKind::BackoffScheduled { category, sleep, reason, .. } => {
                m.retries.get_or_create(&CategoryLabels { route: route(), category: category.name() }).inc();
                let labels = SleepLabels { route: route(), reason: sleep_name(reason) };
                m.backoff_sleep.get_or_create(&labels).observe(sleep.as_secs_f64());
            }
            EventKind::FailedOver { from, to, reason } => {
                let labels = HopLabels {
                    site: self.site.clone(),
                    from: self.names.target(from),
                    to: self.names.target(to),
                    reason: reason.name(),
                };
                m.failover_hops.get_or_create(&labels).inc();
            }
            _ => {}
        }
    }
}

impl EventSink for CallMetrics {
    fn emit(&self, event: Event) {
        // Most events (keep-alives, phases, headers' values) say nothing
        // counted here: they are let through without taking a lock.
        let wanted = matches!(
            event.kind,
            EventKind::CallStarted { .. }
                | EventKind::AttemptStarted { .. }
                | EventKind::HeadersReceived { .. }
                | EventKind::ChunkReceived { .. }
                | EventKind::SseReceived { progress: true, .. }
                | EventKind::AttemptEnded { .. }
                | EventKind::TimerFired { .. }
                | EventKind::BackoffScheduled { .. }
                | EventKind::FailedOver { .. }
                | EventKind::Finished { .. }
        );
        if !wanted {
            return;
        }
        self.streams.with(event.stream, |streams| {
            if let EventKind::Finished { .. } = event.kind {
                streams.remove(&event.stream);
                return;
            }
            let state = match &event.kind {
                EventKind::CallStarted { target, .. } | EventKind::AttemptStarted { target, .. } => {
                    let route = self.route(target);
                    let state = streams.entry(event.stream).or_insert_with(|| StreamState {
                        route: route.clone(),
                        awaiting_first_byte: None,
                        fold: StreamFold::default(),
                    });
                    state.route = route;
                    if let EventKind::AttemptStarted { .. } = event.kind {
                        state.awaiting_first_byte = Some(event.at);
                    }
                    state
                }
                // A stream whose start this sink never saw has no target to
                // count under.
                _ => match streams.get_mut(&event.stream) {
                    Some(state) => state,
                    None => return,
                },
            };
            state.fold.push(&event);
            self.count(state, &event);
        });
    }

    fn runtime_lag(&self, sample: LagSample) {
        self.metrics.runtime_lag.get_or_create(&SiteLabels::new(&self.site)).observe(sample.lag.as_secs_f64());
    }
}
