//! One run of an observer: the calls recorded under one epoch and label,
//! from the moment it opens until it is rotated out (`--rotate`) or
//! observe stops, then closed once its last call has ended.
//!
//! A segment owns what is per run: the executor its calls go through (its
//! epoch, its sink), the recorder, the metrics sink (each keyed by stream,
//! and stream ids are per run), the lag probe and the count of its calls
//! (a [`Tally`]: what a call leaves behind once it has ended is counts,
//! never its report, so a run of a million calls holds what a run of ten
//! does; each stream is in the recording). A
//! call belongs to the segment it started in, and so do the agent's
//! retries of it while that segment still takes calls; once retired, a
//! segment takes none, and an agent's retry of one of its calls is a new
//! call of the segment in force.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Setup;
use super::guard::GuardedUpstream;
use super::relay::ObservedUpstream;
use super::would_fire::{Clocks, Going};
use crate::core::event::{EventSink, StreamId};
use crate::core::executor::{CallReport, Executor, Origin};
use crate::core::failover::Target;
use crate::core::fleet::Fleet;
use crate::core::lag_probe::LagProbe;
use crate::core::policy::{CorePolicy, RetrySettings};
use crate::core::upstream::{Upstream, Upstreams};
use crate::diagnosis::Diagnosis;
use crate::metrics::CallMetrics;
use crate::recorder::{Flusher, RecorderHandle};
use crate::replay::recording::RecordedProvider;
use crate::report::Tally;
use crate::session::{RecordTo, SessionOutcome, Tee, finish_recording, start_recorder};
use crate::store::runs::{RunMeta, RunStart};
use crate::store::{RunId, StoreError};

/// How a run's calls reach their upstream.
pub(super) struct Calls {
    /// What is only watched (every call under observe; under the guard,
    /// the agent's requests that are not streams): each call's one attempt
    /// relays the agent's request as it came.
    pub watched: Arc<ObservedUpstream>,
    /// Under the guard, its streamed calls of a dialect: each attempt sends
    /// the agent's request again.
    pub guarded: Option<Arc<GuardedUpstream>>,
}

/// One run of an observer.
pub(super) struct Segment {
    /// Its run's label.
    pub label: String,
    /// The executor its streamed calls go through: the guard's, or the
    /// same as `watching`.
    pub executor: Executor,
    /// The executor of what is only watched, under observe's policy.
    pub watching: Executor,
    /// How its calls reach their upstream.
    pub calls: Calls,
    /// Each call's record while it goes (the executor's sink feeds it).
    pub going: Arc<Going>,
    /// Where events go beyond [`Going`]: the recorder, the metrics, the
    /// front end.
    pub out: Arc<dyn EventSink>,
    /// What our clocks would have done, replayed under this run's
    /// recording; none under the guard, where they act.
    pub clocks: Option<Clocks>,
    /// The retry limits verdicts are read against (observe's: none).
    pub limits: RetrySettings,
    /// Its calls counted for Prometheus, when served.
    pub metrics: Option<Arc<CallMetrics>>,
    /// The recorded run, when recorded.
    pub run_id: Option<RunId>,
    /// Flushes its recording (for the traces read back from it).
    pub flusher: Option<Flusher>,
    recorder: Mutex<Option<RecorderHandle>>,
    probe: Mutex<Option<LagProbe>>,
    started: Instant,
    seed: u64,
    next: AtomicU64,
    admission: Mutex<Admission>,
    call_ended: Notify,
    tally: Mutex<Tally>,
}

/// Whether a segment takes calls, and how many it has going.
#[derive(Default)]
struct Admission {
    in_flight: usize,
    taken: u64,
    retired: bool,
}

impl Segment {
    /// Opens a run labelled `label`: its recorder (when recording; a
    /// database that cannot be written is the error), executor and lag
    /// probe.
    pub async fn open(setup: &Setup, label: String, recording: Option<&RecordTo>) -> Result<Segment, StoreError> {
        let origin = Origin::now(rand::random());
        let settings = &setup.settings;
        // The calls are the agent's: how many, and how many at once, is not
        // known ahead (0: open-ended). No key pool is used.
        let meta = RunMeta {
            requests: 0,
            concurrency: 0,
            seed: origin.seed,
            epoch_unix_ns: origin.epoch_unix_ns(),
            rules: serde_json::to_value(settings.classifier.rules()).unwrap_or_default(),
            pools: Default::default(),
        };
        let clocks = setup.replays.clone().map(|replays| {
            Clocks::new(
                replays,
                settings.tunables.clone(),
                meta.clone(),
                settings.classifier.rules().to_vec(),
                setup
                    .recorded
                    .iter()
                    .map(|p| RecordedProvider { target: Target::new(&p.name, &p.model), dialect: Some(p.kind) })
                    .collect(),
            )
        });
        let recorder = match recording {
            Some(recording) => {
                let start =
                    RunStart::new(Some(label.clone()), setup.scenario.clone(), &settings.tunables, &setup.recorded)
                        .with_meta(meta);
                Some(start_recorder(&RecordTo { label: None, ..recording.clone() }, start, settings).await?)
            }
            None => None,
        };
        let metrics = setup.metrics.as_ref().map(|m| Arc::new(m.calls(&label)));
        let mut sinks: Vec<Arc<dyn EventSink>> = Vec::new();
        sinks.extend(recorder.as_ref().map(|(sink, _)| Arc::new(sink.clone()) as Arc<dyn EventSink>));
        sinks.extend(metrics.clone().map(|m| m as Arc<dyn EventSink>));
        sinks.extend(setup.watcher.clone());
        let out: Arc<dyn EventSink> = Arc::new(Tee(sinks));
        let going = Arc::new(Going::default());
        let watched = Arc::new(ObservedUpstream::default());
        let guarded = setup.guard.then(|| {
            Arc::new(GuardedUpstream::new(Arc::clone(&setup.failover.elsewhere), &setup.settings.policy.transport))
        });
        let calls = Calls { watched: Arc::clone(&watched), guarded: guarded.clone() };
        // Every provider a call may be recorded under goes to one upstream.
        let to = |upstream: Arc<dyn Upstream>| {
            let mut upstreams = Upstreams { targets: setup.failover.targets.clone(), ..Upstreams::default() };
            let elsewhere = setup.failover.elsewhere.keys();
            for name in setup.recorded.iter().map(|row| &row.name).chain(elsewhere) {
                upstreams.providers.insert(name.clone(), Arc::clone(&upstream));
            }
            Arc::new(upstreams)
        };
        let probe = LagProbe::start(origin.epoch, Arc::clone(&out));
        let executor_of = |policy: &CorePolicy, upstream: Arc<dyn Upstream>| Executor {
            fleet: Arc::new(Fleet::new(policy.fleet, setup.failover.pools.clone())),
            policy: Arc::new(policy.clone()),
            classifier: Arc::new(settings.classifier.clone()),
            upstreams: to(upstream),
            sink: Arc::new(Tee(vec![going.clone(), Arc::clone(&out)])),
            epoch: origin.epoch,
            wall_epoch: origin.wall_epoch,
            seed: origin.seed,
            lag: Some(probe.meter()),
        };
        let watching = executor_of(&setup.watch_policy, watched);
        let executor = match guarded {
            Some(guarded) => executor_of(&settings.policy, guarded),
            None => watching.clone(),
        };
        let (run_id, flusher) = match &recorder {
            Some((_, handle)) => (Some(handle.run_id()), Some(handle.flusher())),
            None => (None, None),
        };
        Ok(Segment {
            label,
            executor,
            watching,
            calls,
            going,
            out,
            clocks,
            limits: settings.policy.retry.clone(),
            metrics,
            run_id,
            flusher,
            recorder: Mutex::new(recorder.map(|(_, handle)| handle)),
            probe: Mutex::new(Some(probe)),
            started: Instant::now(),
            seed: origin.seed,
            next: AtomicU64::new(0),
            admission: Mutex::default(),
            call_ended: Notify::new(),
            tally: Mutex::default(),
        })
    }

    /// Takes a call: `continued`'s stream (an agent's retry), else a new
    /// one; `None` once the segment is retired. The call is in flight
    /// until [`Segment::release`].
    pub fn admit(&self, continued: Option<StreamId>) -> Option<StreamId> {
        let mut admission = self.admission.lock().unwrap_or_else(PoisonError::into_inner);
        if admission.retired {
            return None;
        }
        admission.in_flight += 1;
        admission.taken += 1;
        Some(continued.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed)))
    }

    /// A call admitted has ended.
    pub fn release(&self) {
        let mut admission = self.admission.lock().unwrap_or_else(PoisonError::into_inner);
        admission.in_flight = admission.in_flight.saturating_sub(1);
        drop(admission);
        self.call_ended.notify_waiters();
    }

    /// Whether it still takes calls (an agent's retries of its calls too).
    pub fn admitting(&self) -> bool {
        !self.admission.lock().unwrap_or_else(PoisonError::into_inner).retired
    }

    /// How many requests it has taken.
    pub fn taken(&self) -> u64 {
        self.admission.lock().unwrap_or_else(PoisonError::into_inner).taken
    }

    /// Takes no more calls.
    pub fn retire(&self) {
        self.admission.lock().unwrap_or_else(PoisonError::into_inner).retired = true;
    }

    /// Counts a call that ended, with its verdict, in the run's report.
    pub fn keep(&self, report: &CallReport, verdict: &Diagnosis) {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner).add(report, verdict);
    }

    /// Takes back what [`Segment::keep`] counted of a call an agent's
    /// retry now continues: the call counts once, as it ends last.
    pub fn forget(&self, report: &CallReport, verdict: &Diagnosis) {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner).remove(report, verdict);
    }

    /// Waits until every call admitted has ended.
    async fn settled(&self) {
        loop {
            let woken = self.call_ended.notified();
            if self.admission.lock().unwrap_or_else(PoisonError::into_inner).in_flight == 0 {
                return;
            }
            woken.await;
        }
    }

    /// Closes the retired segment once its last call has ended: its run's
    /// report, recorded as `stopped` when observe stopped with it, and its
    /// recording finished. The error: the database could not be written
    /// (the report then has no run id).
    pub async fn close(
        &self,
        stopped: bool,
        scenario: Option<String>,
        tunables: serde_json::Map<String, serde_json::Value>,
    ) -> Closed {
        self.settled().await;
        let lag = self.probe.lock().unwrap_or_else(PoisonError::into_inner).take().map(LagProbe::stop);
        let tally = std::mem::take(&mut *self.tally.lock().unwrap_or_else(PoisonError::into_inner));
        let mut report = tally.report(scenario, tunables, self.started.elapsed());
        report.seed = Some(self.seed);
        report.stopped = stopped;
        let unreplayed_calls = self.clocks.as_ref().map_or(0, Clocks::unreplayed);
        let handle = self.recorder.lock().unwrap_or_else(PoisonError::into_inner).take();
        let (mut dropped_events, mut error) = (0, None);
        if let Some(handle) = handle {
            match finish_recording(handle, &mut report).await {
                Ok(dropped) => dropped_events = dropped,
                Err(e) => error = Some(e),
            }
        }
        let lag = lag.unwrap_or_default();
        Closed { outcome: SessionOutcome { report, dropped_events, unreplayed_calls, lag }, error }
    }
}

/// A closed segment: its run's outcome, and why its record could not be
/// kept, when it could not.
pub(super) struct Closed {
    /// The run's report, and what the recorder and the would-fire replay
    /// dropped.
    pub outcome: SessionOutcome,
    /// The database could not be written.
    pub error: Option<StoreError>,
}
