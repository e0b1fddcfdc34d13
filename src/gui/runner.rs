//! Runs sessions for the app on a background tokio runtime and carries
//! their events, each stream's verdict as it finishes (the session's own,
//! made once per stream), and their results back through channels that
//! the UI thread drains each frame, so the UI never waits on the network
//! or the database and never diagnoses.
//!
//! Events go through a bounded channel: a UI that is not drawing (a
//! minimised window during a long run) must not let it grow without
//! limit, so an event that finds it full is dropped and counted (the
//! recording keeps every event; only the live lanes miss it). Verdicts and
//! part ends, a few per stream, go through a channel of their own and are
//! never dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

use tokio_util::sync::CancellationToken;

use crate::core::event::{Event, EventSink, StreamId};
use crate::core::executor::CallReport;
use crate::diagnosis::Diagnosis;
use crate::observe::{ObservePlan, ObservedCall, Observer};
use crate::session::{SessionOutcome, SessionPlan, run_session};

/// What arrives from a run.
#[derive(Debug)]
pub enum Update {
    /// An event of one part of the run.
    Event {
        /// The part (one per session started together).
        part: usize,
        /// The event.
        event: Event,
    },
    /// A stream of one part finished, and this is its verdict.
    Verdict {
        /// The part.
        part: usize,
        /// The stream.
        stream: StreamId,
        /// The verdict.
        diagnosis: Box<Diagnosis>,
    },
    /// An observer of part `part` listens, and where its requests go.
    Observing {
        /// The part.
        part: usize,
        /// `http://ADDR`, where an agent sends its requests.
        url: String,
        /// Where they go, in words.
        routes: String,
    },
    /// A part ended: its report, or why it could not run.
    PartDone {
        /// The part.
        part: usize,
        /// The outcome or the one-line error.
        result: Result<SessionOutcome, String>,
    },
}

/// Events the channel holds before it drops: at 33 ms a frame, well over a
/// million events a second; with another tab showing, drained four times
/// a second, a quarter of that.
pub const EVENT_CAPACITY: usize = 1 << 16;

/// Owns the runtime and the run in progress.
pub struct Runner {
    runtime: tokio::runtime::Runtime,
    events: Receiver<(u64, Update)>,
    event_sender: SyncSender<(u64, Update)>,
    updates: Receiver<(u64, Update)>,
    sender: Sender<(u64, Update)>,
    dropped: Arc<AtomicU64>,
    generation: u64,
    cancel: CancellationToken,
    parts_running: usize,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").field("generation", &self.generation).field("parts", &self.parts_running).finish()
    }
}

/// The sink a part's events leave through.
struct ChannelSink {
    generation: u64,
    part: usize,
    events: SyncSender<(u64, Update)>,
    dropped: Arc<AtomicU64>,
}

impl EventSink for ChannelSink {
    fn emit(&self, event: Event) {
        if self.events.try_send((self.generation, Update::Event { part: self.part, event })).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Runner {
    /// A runner with its own two-worker runtime, holding up to
    /// [`EVENT_CAPACITY`] events the UI has not taken yet.
    pub fn new() -> std::io::Result<Self> {
        Runner::with_capacity(EVENT_CAPACITY)
    }

    /// A runner whose event channel holds `capacity` events.
    pub fn with_capacity(capacity: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stallscope-run")
            .enable_all()
            .build()?;
        let (sender, updates) = channel();
        let (event_sender, events) = sync_channel(capacity);
        Ok(Runner {
            runtime,
            events,
            event_sender,
            updates,
            sender,
            dropped: Arc::default(),
            generation: 0,
            cancel: CancellationToken::new(),
            parts_running: 0,
        })
    }

    /// Starts every plan at once as parts 0, 1, …; any earlier run is
    /// cancelled and its late updates are ignored. `wake` is called when a
    /// part ends, so an idle UI repaints.
    pub fn start(
        &mut self,
        plans: Vec<SessionPlan>,
        env: Vec<(String, String)>,
        wake: impl Fn() + Send + Sync + 'static,
    ) {
        self.stop();
        self.generation += 1;
        self.cancel = CancellationToken::new();
        self.parts_running = plans.len();
        self.dropped = Arc::default();
        let env: Arc<[(String, String)]> = env.into();
        let wake = Arc::new(wake);
        for (part, plan) in plans.into_iter().enumerate() {
            let generation = self.generation;
            let (sender, events, dropped) = (self.sender.clone(), self.event_sender.clone(), Arc::clone(&self.dropped));
            let (cancel, env, wake) = (self.cancel.clone(), Arc::clone(&env), Arc::clone(&wake));
            self.runtime.spawn(async move {
                let sink = Arc::new(ChannelSink { generation, part, events, dropped });
                // The session's verdict on each stream, sent after its last
                // event went through the sink.
                let verdicts = sender.clone();
                let on_finish = move |call: &CallReport, diagnosis: &Diagnosis| {
                    let verdict = Update::Verdict { part, stream: call.stream, diagnosis: Box::new(diagnosis.clone()) };
                    let _ = verdicts.send((generation, verdict));
                };
                let result = run_session(&plan, &env, Some(sink), &cancel, on_finish).await.map_err(|e| e.to_string());
                let _ = sender.send((generation, Update::PartDone { part, result }));
                wake();
            });
        }
    }

    /// Observes an agent's traffic ([`crate::observe`]) as the one part of
    /// a run until stopped: its calls' events and verdicts come as a run's
    /// do, once it listens an [`Update::Observing`] says where; any
    /// earlier run is cancelled.
    pub fn observe(&mut self, plan: ObservePlan, env: Vec<(String, String)>, wake: impl Fn() + Send + Sync + 'static) {
        self.stop();
        self.generation += 1;
        self.cancel = CancellationToken::new();
        self.parts_running = 1;
        self.dropped = Arc::default();
        let (generation, part) = (self.generation, 0);
        let (sender, events, dropped) = (self.sender.clone(), self.event_sender.clone(), Arc::clone(&self.dropped));
        let (cancel, wake) = (self.cancel.clone(), Arc::new(wake));
        self.runtime.spawn(async move {
            let sink = Arc::new(ChannelSink { generation, part, events, dropped });
            let result = match Observer::bind(&plan, &env).await {
                Ok(observer) => {
                    let (url, routes) = (format!("http://{}", observer.addr()), observer.routes());
                    let _ = sender.send((generation, Update::Observing { part, url, routes }));
                    wake();
                    let (verdicts, woken) = (sender.clone(), Arc::clone(&wake));
                    let on_call = move |call: &ObservedCall| {
                        let diagnosis = Box::new(call.verdict.clone());
                        let _ = verdicts
                            .send((generation, Update::Verdict { part, stream: call.report.stream, diagnosis }));
                        woken();
                    };
                    observer.run(&cancel, Some(sink), on_call).await.map_err(|e| e.to_string())
                }
                Err(e) => Err(e.to_string()),
            };
            let _ = sender.send((generation, Update::PartDone { part, result }));
            wake();
        });
    }

    /// Runs `work` on the runner's runtime beside any run (a route probe).
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(work);
    }

    /// Cancels the run in progress (its calls end as `cancelled`).
    pub fn stop(&mut self) {
        self.cancel.cancel();
    }

    /// Whether parts of the current run are still going.
    pub fn is_running(&self) -> bool {
        self.parts_running > 0
    }

    /// Events of the current run that found the channel full and were
    /// not shown.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The updates of the current run that have arrived: its events, then
    /// its verdicts and part ends. The verdicts and part ends are taken
    /// first, so the events sent before them are all in the events taken.
    pub fn drain(&mut self) -> Vec<Update> {
        let generation = self.generation;
        let current = |(g, update): (u64, Update)| (g == generation).then_some(update);
        let control: Vec<Update> = self.updates.try_iter().filter_map(current).collect();
        let mut out: Vec<Update> = self.events.try_iter().filter_map(current).collect();
        self.parts_running =
            self.parts_running.saturating_sub(control.iter().filter(|u| matches!(u, Update::PartDone { .. })).count());
        out.extend(control);
        out
    }
}
