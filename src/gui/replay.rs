//! A stored run shown as of a time cursor: its events in time order, the
//! timeline model holding those up to the cursor, and checkpoints of that
//! model so the cursor moves backward without re-reading the database or
//! rebuilding from the start.
//!
//! Forward, the events between the old and the new cursor are folded into
//! the model. Backward, the model is [rewound](Timeline::rewind) to the
//! last checkpoint at or before the cursor and the few events from there on
//! are folded in again. A checkpoint is taken every [`CHECKPOINT_EVERY`]
//! events, and never more often than one per [`EVENTS_PER_LANE`] events per
//! lane, because a checkpoint's size follows the lanes, not the events.
//! `cargo bench --bench frame` measured the choice (release, 1,000
//! streams, 1 M events): folding in runs at about 13 M events/s, so the at
//! most 16,384 events after a checkpoint cost about a millisecond (a
//! backward scrub took 0.3–0.8 ms, against 36–70 ms to rebuild from the
//! start); the 62 checkpoints of ~400 B per lane hold 24 MiB, 25 B per
//! event, about half the model's 45 MiB. A clone of the model instead
//! would cost 17 ms to restore and up to 45 MiB per checkpoint.

use super::lanes::{Checkpoint, Timeline};
use crate::core::event::{Event, StreamId};
use crate::diagnosis::Diagnosis;

/// Events between two checkpoints, at least.
pub const CHECKPOINT_EVERY: usize = 16_384;

/// Events per lane between two checkpoints, at least (bounds their memory
/// on runs with many streams and few events each).
pub const EVENTS_PER_LANE: usize = 16;

/// A stored run, replayable to any moment.
#[derive(Debug)]
pub struct Replay {
    /// Sorted by time; each stream's events keep their recorded order.
    events: Vec<Event>,
    /// Each event's time in seconds, for searching.
    moments: Vec<f64>,
    timeline: Timeline,
    part: usize,
    /// The model holds `events[..taken]`.
    taken: usize,
    /// In the order they were taken, so by event count.
    checkpoints: Vec<Checkpoint>,
}

impl Replay {
    /// The run of `events` (in any order; they are sorted by time, a
    /// stream's own order kept), its lanes labelled `label`, with the
    /// model built to the end.
    pub fn new(label: impl Into<String>, mut events: Vec<Event>) -> Self {
        events.sort_by_key(|e| e.at);
        let moments = events.iter().map(|e| e.at.as_secs_f64()).collect();
        let mut timeline = Timeline::new();
        let part = timeline.add_part(label, 0.0);
        let mut checkpoints = vec![timeline.checkpoint()];
        let mut since = 0;
        for event in &events {
            if since >= CHECKPOINT_EVERY.max(EVENTS_PER_LANE * timeline.lanes.len()) {
                checkpoints.push(timeline.checkpoint());
                since = 0;
            }
            timeline.ingest(part, event);
            since += 1;
        }
        let taken = events.len();
        Replay { events, moments, timeline, part, taken, checkpoints }
    }

    /// Gives the run's streams their verdicts (each lane shows its own
    /// once the cursor is past its finish).
    pub fn set_verdicts(&mut self, verdicts: Vec<(StreamId, Diagnosis)>) {
        for (stream, diagnosis) in verdicts {
            self.timeline.set_verdict(self.part, stream, diagnosis);
        }
    }

    /// The model as of the cursor.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The time of each event, sorted (what steps move between).
    pub fn moments(&self) -> &[f64] {
        &self.moments
    }

    /// The last event's time: the run's length.
    pub fn duration_s(&self) -> f64 {
        self.moments.last().copied().unwrap_or(0.0)
    }

    /// Every event of the run.
    pub fn total_events(&self) -> usize {
        self.events.len()
    }

    /// The checkpoints kept, and the bytes they hold.
    pub fn checkpoint_cost(&self) -> (usize, usize) {
        (self.checkpoints.len(), self.checkpoints.iter().map(Checkpoint::size_bytes).sum())
    }

    /// Brings the model to the run as of `to_s`: every event at or before it.
    pub fn seek(&mut self, to_s: f64) {
        let target = self.moments.partition_point(|&t| t <= to_s);
        if target < self.taken {
            // The first checkpoint holds no events, so one always qualifies.
            let after = self.checkpoints.partition_point(|c| c.event_count() as usize <= target);
            let checkpoint = &self.checkpoints[after - 1];
            self.timeline.rewind(checkpoint);
            self.taken = checkpoint.event_count() as usize;
        }
        for event in &self.events[self.taken..target.max(self.taken)] {
            self.timeline.ingest(self.part, event);
        }
        self.taken = target.max(self.taken);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::event::{EventKind, Outcome};
    use crate::core::failover::Target;

    /// `streams` streams of `chunks` chunks each, 10 ms apart, grouped by
    /// stream as the store returns them.
    fn run(streams: u64, chunks: u64) -> Vec<Event> {
        let mut events = vec![];
        for stream in 0..streams {
            let event = |ms: u64, kind| Event { at: Duration::from_millis(ms), stream, attempt: 1, kind };
            events.push(event(stream, EventKind::CallStarted { target: Target::new("p", "m"), context_tokens: None }));
            for i in 0..chunks {
                events.push(event(stream + 10 * (i + 1), EventKind::ChunkReceived { bytes: 1 }));
            }
            let end = stream + 10 * (chunks + 1);
            events.push(event(end, EventKind::Finished { outcome: Outcome::Ok, attempts: 1, stop_reason: None }));
        }
        events
    }

    /// The model built straight from the events at or before `to_s`.
    fn straight(events: &[Event], to_s: f64) -> Timeline {
        let mut sorted = events.to_vec();
        sorted.sort_by_key(|e| e.at);
        let upto: Vec<Event> = sorted.into_iter().filter(|e| e.at.as_secs_f64() <= to_s).collect();
        Timeline::from_events("run", &upto)
    }

    #[test]
    fn a_replay_opens_with_the_whole_run_in_time_order() {
        let events = run(3, 4);
        let replay = Replay::new("run", events.clone());
        assert_eq!(replay.timeline().event_count(), 18);
        assert_eq!(*replay.timeline(), straight(&events, f64::MAX));
        assert!(replay.moments().windows(2).all(|w| w[0] <= w[1]));
        assert!((replay.duration_s() - 0.052).abs() < 1e-9);
        // The lanes come in the order their streams started, not stored.
        assert!(replay.timeline().lanes.iter().all(|l| l.outcome == Some(Outcome::Ok)));
    }

    #[test]
    fn any_seek_gives_the_model_built_straight_to_that_moment() {
        // Enough events for several checkpoints.
        let events = run(4, CHECKPOINT_EVERY as u64);
        let mut replay = Replay::new("run", events.clone());
        assert!(replay.checkpoint_cost().0 >= 4, "{:?}", replay.checkpoint_cost());
        let end = replay.duration_s();
        // Backward from the end, forward, backward past a checkpoint, to
        // the very start, and to the end again.
        for to_s in [end * 0.7, end * 0.9, end * 0.2, 0.0, 0.005, end * 0.5, end] {
            replay.seek(to_s);
            let expected = straight(&events, to_s);
            assert_eq!(replay.timeline().event_count(), expected.event_count(), "at {to_s}");
            assert!(*replay.timeline() == expected, "at {to_s} the model differs from one built straight");
        }
    }

    #[test]
    fn checkpoints_cost_a_bounded_number_of_bytes_per_event() {
        // Many streams of 16 events each: were checkpoints taken every
        // CHECKPOINT_EVERY events whatever the lanes, their bytes would grow
        // with the number of checkpoints (~80 B per event here).
        let replay = Replay::new("run", run(8192, 14));
        let (count, bytes) = replay.checkpoint_cost();
        let events = replay.total_events();
        // A lane's checkpoint is a few hundred bytes, taken at most once per
        // 16 events per lane: 25-odd bytes per event at worst.
        assert!(bytes / events <= 32, "{count} checkpoints hold {bytes} bytes for {events} events");
    }
}
