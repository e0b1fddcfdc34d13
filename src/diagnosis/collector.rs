//! Diagnosing many streams from one interleaved flow of events: as a sink
//! during a run, or over a run's events read back for export. Each stream's
//! events are folded as they come; nothing per event is kept.

use crate::core::event::{Event, EventSink, StreamId};
use crate::core::per_stream::PerStream;
use crate::core::policy::RetrySettings;

use super::call::judge;
use super::facts::CallFacts;
use super::verdict::Diagnosis;

/// Folds events by stream and diagnoses every stream at the end.
#[derive(Debug)]
pub struct Collector {
    streams: PerStream<CallFacts>,
    limits: Option<RetrySettings>,
}

impl Collector {
    /// A collector whose verdicts read retry denials against `limits` (the
    /// run's retry settings; `None` when unknown).
    pub fn new(limits: Option<RetrySettings>) -> Collector {
        Collector { streams: PerStream::default(), limits }
    }

    /// Folds one event in.
    pub fn push(&self, event: &Event) {
        self.streams.with(event.stream, |streams| streams.entry(event.stream).or_default().push(event));
    }

    /// The verdict on `stream`, whose facts are then let go: for a stream
    /// that has finished, so a live view gets each verdict as its stream
    /// ends and memory follows the streams still going.
    pub fn take(&self, stream: StreamId) -> Option<Diagnosis> {
        let facts = self.streams.remove(stream)?;
        Some(judge(&facts, self.limits.as_ref()))
    }

    /// The verdict on every stream seen so far, in stream order.
    pub fn diagnoses(&self) -> Vec<(StreamId, Diagnosis)> {
        self.streams.map(|stream, facts| (stream, judge(facts, self.limits.as_ref())))
    }
}

impl EventSink for Collector {
    fn emit(&self, event: Event) {
        self.push(&event);
    }
}
