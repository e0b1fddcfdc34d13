//! Diagnosing a recorded run: its streams read against the retry limits
//! the run was recorded with, each verdict saying when its stream lost
//! events to a recorder that fell behind (the verdict rests on what was
//! kept).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::core::event::{Event, StreamId};
use crate::core::policy::{CorePolicy, RetrySettings};
use crate::tunables::Tunables;

use super::StreamFold;
use super::collector::Collector;
use super::text::fact;
use super::verdict::{Diagnosis, Topic};

/// What a recorded run's verdicts are read against.
#[derive(Debug, Clone)]
pub struct RecordedRun {
    limits: Option<RetrySettings>,
    dropped: BTreeMap<StreamId, u64>,
}

impl RecordedRun {
    /// From the run's stored tunables snapshot (name → `{"value",
    /// "source"}`; limits unknown when it cannot be read back) and its
    /// events lost per stream.
    pub fn new(tunables: &Map<String, Value>, dropped: &BTreeMap<StreamId, u64>) -> RecordedRun {
        let limits = Tunables::from_snapshot(tunables)
            .ok()
            .and_then(|t| CorePolicy::from_tunables(&t).ok())
            .map(|policy| policy.retry);
        RecordedRun { limits, dropped: dropped.clone() }
    }

    /// The verdict on one stream from its events.
    pub fn diagnose(&self, stream: StreamId, events: &[Event]) -> Diagnosis {
        self.judge(stream, &StreamFold::of(events))
    }

    /// The verdict on one stream from the fold of its events.
    pub fn judge(&self, stream: StreamId, fold: &StreamFold) -> Diagnosis {
        self.annotate(stream, fold.verdict(self.limits.as_ref()))
    }

    /// The verdict on every stream of the run's events read in one flow
    /// (any order of streams), in stream order.
    pub fn diagnose_all(&self, events: &[Event]) -> Vec<(StreamId, Diagnosis)> {
        let collector = Collector::new(self.limits.clone());
        events.iter().for_each(|e| collector.push(e));
        collector.diagnoses().into_iter().map(|(stream, d)| (stream, self.annotate(stream, d))).collect()
    }

    fn annotate(&self, stream: StreamId, mut diagnosis: Diagnosis) -> Diagnosis {
        if let Some(&lost) = self.dropped.get(&stream).filter(|&&n| n > 0) {
            diagnosis.evidence.push(fact(
                Topic::Recording,
                None,
                None,
                format!("{lost} of this stream's events were not recorded (the recorder fell behind)"),
            ));
        }
        diagnosis
    }
}
