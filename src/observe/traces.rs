//! Each observed call, once it is over, sent as an OpenTelemetry trace
//! (`--otlp URL`), so observe beside agents on many machines feeds the
//! OTLP backend the canary feeds. A call is read back from its recording
//! and rendered by [`crate::export::otlp`], the one renderer of a
//! recorded call, with the ids a later `export --otlp` of its run gives
//! it (a receiver that keys on them keeps one copy).
//!
//! Calls are sent in batches, every [`EVERY`] and when a run closes: each
//! batch first waits for its runs' recorders to commit what the calls
//! emitted. A receiver that is down, or never answers, costs that batch
//! (after the exporter's timeouts), never the observer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::segment::Segment;
use crate::core::event::StreamId;
use crate::export::otlp::{self, OtlpError, Sender, Sent};
use crate::recorder::Flusher;
use crate::session::blocking;
use crate::store::{RunId, Store};

/// How often the calls that are over are sent.
pub(super) const EVERY: Duration = Duration::from_secs(5);

/// The calls waiting to be sent, and where they go.
pub(super) struct Traces {
    sender: Sender,
    db: PathBuf,
    /// Each run's calls that are over.
    waiting: Mutex<BTreeMap<RunId, Waiting>>,
}

/// A run's calls that are over, with what flushes its recording.
type Waiting = (Option<Flusher>, Vec<StreamId>);

impl Traces {
    /// Sends to `sender` the calls recorded in `db`.
    pub fn new(sender: Sender, db: PathBuf) -> Traces {
        Traces { sender, db, waiting: Mutex::default() }
    }

    /// Call `stream` of `segment` is over: sent with the next batch (a
    /// segment that records nothing has nothing to send).
    pub fn over(&self, segment: &Segment, stream: StreamId) {
        let Some(run) = segment.run_id else { return };
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.entry(run).or_insert_with(|| (segment.flusher.clone(), Vec::new())).1.push(stream);
    }

    /// Sends every call waiting, unless `cancel` fires first; `None` when
    /// none was.
    pub async fn send(&self, cancel: &CancellationToken) -> Option<Result<Sent, String>> {
        let batch = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(PoisonError::into_inner));
        if batch.is_empty() {
            return None;
        }
        let db = self.db.clone();
        let read = blocking(move || {
            let store = Store::open(&db)?;
            let mut runs = Vec::new();
            for (run, (flusher, streams)) in batch {
                // A finished recording has committed everything already.
                if let Some(flusher) = flusher {
                    let _ = flusher.flush();
                }
                runs.push(otlp::streams_traces(&store, run, &streams).map_err(|e| e.to_string()));
            }
            Ok(runs)
        });
        let runs = match read.await {
            Ok(runs) => runs,
            Err(e) => return Some(Err(e.to_string())),
        };
        let mut sent = Sent { url: self.sender.url().to_owned(), calls: 0, spans: 0 };
        for traces in runs {
            let traces = match traces {
                Ok(traces) => traces,
                Err(e) => return Some(Err(e)),
            };
            let run = tokio::select! {
                biased;
                () = cancel.cancelled() => Err(OtlpError::Cancelled { url: self.sender.url().to_owned() }),
                run = self.sender.send(&traces) => run,
            };
            match run {
                Ok(run) => (sent.calls, sent.spans) = (sent.calls + run.calls, sent.spans + run.spans),
                Err(e) => return Some(Err(e.to_string())),
            }
        }
        Some(Ok(sent))
    }
}

/// Sends what is over every [`EVERY`] until `cancel`, each batch's result
/// to `said`.
pub(super) async fn every(traces: Arc<Traces>, cancel: CancellationToken, said: impl Fn(Result<Sent, String>)) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        if let Some(result) = traces.send(&cancel).await {
            said(result);
        }
    }
}
