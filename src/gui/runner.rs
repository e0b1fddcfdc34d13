//! Runs sessions for the app on a background tokio runtime and carries
//! their events, each stream's verdict as it finishes (the session's own,
//! made once per stream), and their results back through a channel that
//! the UI thread drains each frame, so the UI never waits on the network
//! or the database and never diagnoses.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use tokio_util::sync::CancellationToken;

use crate::core::event::{Event, EventSink, StreamId};
use crate::core::executor::CallReport;
use crate::diagnosis::Diagnosis;
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
    /// A part ended: its report, or why it could not run.
    PartDone {
        /// The part.
        part: usize,
        /// The outcome or the one-line error.
        result: Result<SessionOutcome, String>,
    },
}

/// Owns the runtime and the run in progress.
pub struct Runner {
    runtime: tokio::runtime::Runtime,
    updates: Receiver<(u64, Update)>,
    sender: Sender<(u64, Update)>,
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
    sender: Sender<(u64, Update)>,
}

impl EventSink for ChannelSink {
    fn emit(&self, event: Event) {
        // The app dropping its receiver (closing) is the only failure, and
        // then nobody is left to show the event to.
        let _ = self.sender.send((self.generation, Update::Event { part: self.part, event }));
    }
}

impl Runner {
    /// A runner with its own two-worker runtime.
    pub fn new() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stallscope-run")
            .enable_all()
            .build()?;
        let (sender, updates) = channel();
        Ok(Runner { runtime, updates, sender, generation: 0, cancel: CancellationToken::new(), parts_running: 0 })
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
        let env: Arc<[(String, String)]> = env.into();
        let wake = Arc::new(wake);
        for (part, plan) in plans.into_iter().enumerate() {
            let generation = self.generation;
            let sender = self.sender.clone();
            let (cancel, env, wake) = (self.cancel.clone(), Arc::clone(&env), Arc::clone(&wake));
            self.runtime.spawn(async move {
                let sink = Arc::new(ChannelSink { generation, part, sender: sender.clone() });
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

    /// Cancels the run in progress (its calls end as `cancelled`).
    pub fn stop(&mut self) {
        self.cancel.cancel();
    }

    /// Whether parts of the current run are still going.
    pub fn is_running(&self) -> bool {
        self.parts_running > 0
    }

    /// The updates of the current run that have arrived, oldest first.
    pub fn drain(&mut self) -> Vec<Update> {
        let mut out = Vec::new();
        while let Ok((generation, update)) = self.updates.try_recv() {
            if generation != self.generation {
                continue;
            }
            if matches!(update, Update::PartDone { .. }) {
                self.parts_running = self.parts_running.saturating_sub(1);
            }
            out.push(update);
        }
        out
    }
}
