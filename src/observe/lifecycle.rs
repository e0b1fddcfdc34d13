//! An observer's life once bound: serving until it stops, a new run every
//! rotation, and each run closed once its last call has ended (its report
//! recorded, its traces sent, the retention applied), the last one as
//! `stopped`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::retries::{self, Recent};
use super::segment::Segment;
use super::state::State;
use super::traces::{self, Traces};
use super::{ObserveError, ObserveEvent, ObservedCall, Observer, RunEnded, server};
use crate::core::event::EventSink;
use crate::metrics::{Metrics, MetricsServer};
use crate::session::SessionOutcome;
use crate::store::StoreError;
use crate::watch::Retention;

impl Observer {
    /// Serves until `cancel`, recording the run when asked; `on_call` sees
    /// each call as it ends, with its verdict. Returns the last run's
    /// report and the events the recorder could not keep.
    pub async fn run(
        self,
        cancel: &CancellationToken,
        watcher: Option<Arc<dyn EventSink>>,
        on_call: impl Fn(&ObservedCall) + Send + Sync + 'static,
    ) -> Result<SessionOutcome, ObserveError> {
        self.run_watched(cancel, watcher, move |event| {
            if let ObserveEvent::Call(call) = event {
                on_call(call);
            }
        })
        .await
    }

    /// [`Observer::run`], with everything it does told to `on_event`: each
    /// call as it ends, where metrics are served, each run rotated out,
    /// each batch of traces.
    pub async fn run_watched(
        mut self,
        cancel: &CancellationToken,
        watcher: Option<Arc<dyn EventSink>>,
        on_event: impl Fn(ObserveEvent<'_>) + Send + Sync + 'static,
    ) -> Result<SessionOutcome, ObserveError> {
        self.setup.watcher = watcher;
        let site = self.site();
        if let Some(metrics) = &self.setup.metrics {
            self.limits.refused.report_to(Arc::clone(metrics), site.clone());
        }
        let label = self.recording.as_ref().and_then(|r| r.label.clone()).unwrap_or_else(|| site.clone());
        // What can fail goes first: a run opened and then left would read
        // as interrupted.
        let traces = match (&self.service.otlp, &self.recording) {
            (Some(destination), Some(recording)) => {
                Some(Arc::new(Traces::new(destination.sender()?, recording.db.clone())))
            }
            _ => None,
        };
        let server = match (self.service.metrics_addr, &self.setup.metrics) {
            (Some(addr), Some(metrics)) => Some(MetricsServer::start(addr, Arc::clone(metrics)).await?),
            _ => None,
        };
        let first = Segment::open(&self.setup, label.clone(), self.recording.as_ref()).await?;
        if let Some(server) = &server {
            on_event(ObserveEvent::Serving(server.addr()));
        }
        let state = Arc::new(State {
            routes: self.routes,
            clients: self.clients,
            current: Mutex::new(Arc::new(first)),
            recent: Recent::new(self.service.retry_window.unwrap_or(retries::RETRY_WINDOW)),
            traces: traces.clone(),
            on_event: Box::new(on_event),
            cancel: cancel.clone(),
            guards: self.setup.guard,
            limits: self.limits,
        });
        let closer = Closer {
            state: Arc::clone(&state),
            scenario: self.setup.scenario.clone(),
            tunables: self.setup.settings.tunables.snapshot(),
            metrics: self.setup.metrics.clone(),
            site,
            retention: self.service.retention.filter(|_| self.recording.is_some()),
            db: self.recording.as_ref().map(|r| r.db.clone()),
        };
        let sending = traces.map(|traces| {
            let state = Arc::clone(&state);
            tokio::spawn(traces::every(traces, cancel.clone(), move |sent| {
                (state.on_event)(ObserveEvent::Traces(&sent))
            }))
        });
        let accepting = tokio::spawn(server::accept(self.listener, Arc::clone(&state), cancel.clone()));
        let mut closing = JoinSet::new();
        let mut rotate_at = self.service.rotate.map(|every| Instant::now() + every);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(HOUSEKEEPING) => {}
            }
            let now = Instant::now();
            state.expire(now);
            while closing.try_join_next().is_some() {}
            // A new run every interval, once the run in force has had a call.
            if let (Some(at), Some(every)) = (rotate_at, self.service.rotate)
                && now >= at
                && state.current().taken() > 0
            {
                rotate_at = Some(now + every);
                match Segment::open(&self.setup, label.clone(), self.recording.as_ref()).await {
                    Ok(next) => {
                        let old = std::mem::replace(
                            &mut *state.current.lock().unwrap_or_else(PoisonError::into_inner),
                            Arc::new(next),
                        );
                        let closer = closer.clone();
                        closing.spawn(async move {
                            let (ended, _) = closer.close(old, false).await;
                            (closer.state.on_event)(ObserveEvent::Rotated(&ended));
                        });
                    }
                    // The database cannot be written: the run in force goes on.
                    Err(e) => (state.on_event)(ObserveEvent::NotRotated(&e)),
                }
            }
        }
        // The calls end with their cancelled token, and their answers to the
        // agents with them; each run closes once its calls have ended.
        if let Some(sending) = sending {
            let _ = sending.await;
        }
        while closing.join_next().await.is_some() {}
        let (last, error) = closer.close(state.current(), true).await;
        // Calls whose run closed as they failed: over, counted, not sent.
        for ended in state.recent.drain() {
            state.over(&ended.segment, &ended.report, &ended.verdict);
        }
        if let Ok(connections) = accepting.await {
            connections.close().await;
        }
        if let Some(server) = server {
            server.shutdown().await;
        }
        if let Some(server) = self.scenario {
            server.shutdown().await;
        }
        match error {
            Some(error) => Err(ObserveError::Store(error)),
            None => Ok(last.outcome),
        }
    }
}

/// How often an observer lets go of the calls whose retry window passed,
/// and looks whether a rotation is due.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// How long the calls over when observe stops may take to be sent as
/// traces: observe stops within two seconds, whatever the collector does.
const LAST_TRACES: Duration = Duration::from_secs(1);

/// Closes an observer's runs.
#[derive(Clone)]
struct Closer {
    state: Arc<State>,
    scenario: Option<String>,
    tunables: serde_json::Map<String, serde_json::Value>,
    metrics: Option<Arc<Metrics>>,
    site: String,
    retention: Option<Retention>,
    db: Option<PathBuf>,
}

impl Closer {
    /// Retires `segment` and closes it once its calls have ended (recorded
    /// as `stopped` when observe stopped with it); sends its calls' traces
    /// (within [`LAST_TRACES`] when observe stopped), then applies the
    /// retention, which never deletes the run just closed. Returns the
    /// store error that lost its record, if one did.
    async fn close(&self, segment: Arc<Segment>, stopped: bool) -> (RunEnded, Option<StoreError>) {
        segment.retire();
        for ended in self.state.recent.take_of(&segment) {
            self.state.over(&ended.segment, &ended.report, &ended.verdict);
        }
        let closed = segment.close(stopped, self.scenario.clone(), self.tunables.clone()).await;
        if let Some(metrics) = &self.metrics {
            metrics.recorder_dropped(&self.site, closed.outcome.dropped_events);
            metrics.unreplayed_calls(&self.site, closed.outcome.unreplayed_calls);
        }
        if let Some(traces) = &self.state.traces {
            let cancel = match stopped {
                false => self.state.cancel.clone(),
                true => {
                    let deadline = CancellationToken::new();
                    let guard = deadline.clone().drop_guard();
                    tokio::spawn(async move {
                        tokio::time::sleep(LAST_TRACES).await;
                        drop(guard);
                    });
                    deadline
                }
            };
            if let Some(result) = traces.send(&cancel).await {
                (self.state.on_event)(ObserveEvent::Traces(&result));
            }
        }
        let error = closed.error.as_ref().map(ToString::to_string);
        let mut ended = RunEnded { outcome: closed.outcome, deleted: Vec::new(), error };
        if let (Some(retention), Some(db), Some(run)) = (self.retention, self.db.clone(), ended.outcome.report.run_id) {
            match retention.prune_now(db, segment.label.clone(), Some(run)).await {
                Ok(ids) => ended.deleted = ids,
                Err(e) => ended.error = Some(format!("retention: {e}")),
            }
        }
        (ended, closed.error)
    }
}
