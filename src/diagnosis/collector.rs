//! Diagnosing many streams from one interleaved flow of events: as a sink
//! during a run, or over a run's events read back for export. Each stream's
//! events are folded as they come; nothing per event is kept.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::core::event::{Event, EventSink, StreamId};
use crate::core::policy::RetrySettings;

use super::call::judge;
use super::facts::CallFacts;
use super::verdict::Diagnosis;

/// Streams hash to this many independently locked maps, so thousands of
/// concurrent streams emitting at once rarely wait on one another.
const SHARDS: usize = 64;

/// Folds events by stream and diagnoses every stream at the end.
#[derive(Debug)]
pub struct Collector {
    shards: Vec<Mutex<HashMap<StreamId, CallFacts>>>,
    limits: Option<RetrySettings>,
}

impl Collector {
    /// A collector whose verdicts read retry denials against `limits` (the
    /// run's retry settings; `None` when unknown).
    pub fn new(limits: Option<RetrySettings>) -> Collector {
        Collector { shards: (0..SHARDS).map(|_| Mutex::default()).collect(), limits }
    }

    fn shard(&self, stream: StreamId) -> &Mutex<HashMap<StreamId, CallFacts>> {
        &self.shards[(stream % SHARDS as u64) as usize]
    }

    /// Folds one event in.
    pub fn push(&self, event: &Event) {
        if let Ok(mut streams) = self.shard(event.stream).lock() {
            streams.entry(event.stream).or_default().push(event);
        }
    }

    /// The verdict on `stream`, whose facts are then let go: for a stream
    /// that has finished, so a live view gets each verdict as its stream
    /// ends and memory follows the streams still going.
    pub fn take(&self, stream: StreamId) -> Option<Diagnosis> {
        let facts = self.shard(stream).lock().ok()?.remove(&stream)?;
        Some(judge(&facts, self.limits.as_ref()))
    }

    /// The verdict on every stream seen so far, in stream order.
    pub fn diagnoses(&self) -> Vec<(StreamId, Diagnosis)> {
        let mut out: Vec<(StreamId, Diagnosis)> = self
            .shards
            .iter()
            .filter_map(|shard| shard.lock().ok())
            .flat_map(|streams| {
                streams.iter().map(|(stream, facts)| (*stream, judge(facts, self.limits.as_ref()))).collect::<Vec<_>>()
            })
            .collect();
        out.sort_by_key(|(stream, _)| *stream);
        out
    }
}

impl EventSink for Collector {
    fn emit(&self, event: Event) {
        self.push(&event);
    }
}
