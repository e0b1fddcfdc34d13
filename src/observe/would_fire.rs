//! What stallscope's clocks would have done on an observed stream: the
//! stream replayed in virtual time through the core under the tunables in
//! force (observe itself ran with every clock off), by the same what-if
//! that replays any run, and the first timer that fires within what was
//! recorded ("the idle timer (30 s) would have fired at 30.0 s; the agent
//! waited 412 s"). A timer that would fire only after the agent had given
//! up is not claimed: what came after is not known.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::core::category::TimerKind;
use crate::core::classify::Rule;
use crate::core::event::{Event, EventKind, EventSink, StreamId};
use crate::diagnosis::RecordedRun;
use crate::replay::recording::{self, RecordedProvider, Recording};
use crate::replay::whatif::{WhatIf, what_if_watched};
use crate::store::runs::RunMeta;
use crate::tunables::Tunables;

/// The clock tunables observe switches off, whose values in force are
/// what the replay runs under.
pub(super) const CLOCKS: [&str; 7] = [
    "STALLSCOPE_SSE_TTFB_TIMEOUT_S",
    "STALLSCOPE_SSE_IDLE_TIMEOUT_S",
    "STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S",
    "STALLSCOPE_SSE_TOTAL_TIMEOUT_S",
    "STALLSCOPE_SSE_MIN_RATE",
    "STALLSCOPE_CALL_DEADLINE_S",
    "STALLSCOPE_TTFB_DISABLE_ABOVE_TOKENS",
];

/// A timer of ours that would have fired on an observed stream.
#[derive(Debug, Clone, PartialEq)]
pub struct WouldFire {
    /// Which.
    pub timer: TimerKind,
    /// Its budget.
    pub budget: Duration,
    /// When, since the attempt started.
    pub at: Duration,
    /// How long the attempt went on as recorded.
    pub recorded: Duration,
}

impl WouldFire {
    /// "the idle timer (30 s) would have fired at 30.0 s, of 412 s".
    pub fn words(&self) -> String {
        format!(
            "our {} timer ({} s) would have fired at {:.1} s, of {:.1} s",
            self.timer,
            self.budget.as_secs_f64(),
            self.at.as_secs_f64(),
            self.recorded.as_secs_f64()
        )
    }
}

/// What a replay of one observed stream needs: the run as recorded, with
/// no stream, and the clock settings in force.
pub(super) struct Clocks {
    base: Recording,
    /// How the recorded run's verdicts are read: made once, from its
    /// tunables.
    run: RecordedRun,
    overrides: Vec<String>,
}

impl Clocks {
    /// Replays under `in_force`'s clocks the streams of a run recorded
    /// with `recorded` tunables, `meta`, `rules` and `providers`.
    pub fn new(
        in_force: &Tunables,
        recorded: Tunables,
        meta: RunMeta,
        rules: Vec<Rule>,
        providers: Vec<RecordedProvider>,
    ) -> Clocks {
        let overrides = CLOCKS.iter().map(|name| format!("{name}={}", in_force.get(name).value)).collect();
        let run = RecordedRun::new(&recorded.sourced_snapshot(), &BTreeMap::new());
        let base = Recording { run: 0, tunables: recorded, meta, rules, providers, streams: Vec::new() };
        Clocks { base, run, overrides }
    }

    /// The first of our timers that would have fired on `events` (stream
    /// `stream`'s, as recorded) before the recording of its attempt ended.
    pub fn first(&self, stream: StreamId, events: &[Event]) -> Option<WouldFire> {
        let started = events.iter().find(|e| matches!(e.kind, EventKind::AttemptStarted { .. }))?.at;
        let ended = events.last()?.at;
        let mut replay = Recording { streams: Vec::new(), ..self.base.clone() };
        replay.streams.push(recording::stream(stream, events, &self.run));
        let fired = Arc::new(FirstFired::default());
        let whatif = WhatIf { overrides: self.overrides.clone(), ..WhatIf::default() };
        what_if_watched(&replay, &whatif, Some(fired.clone() as Arc<dyn EventSink>)).ok()?;
        let (at, timer, budget) = fired.0.lock().unwrap_or_else(PoisonError::into_inner).take()?;
        (at <= ended).then(|| WouldFire {
            timer,
            budget,
            at: at.saturating_sub(started),
            recorded: ended.saturating_sub(started),
        })
    }
}

/// Each call's events while it is going, for its replay once it ends:
/// the one copy of a stream's events observe holds (the recorder and the
/// verdicts keep none).
#[derive(Default)]
pub(super) struct Going(Mutex<std::collections::HashMap<StreamId, Vec<Event>>>);

impl Going {
    /// Takes the events of call `stream`, which has ended.
    pub fn take(&self, stream: StreamId) -> Vec<Event> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&stream).unwrap_or_default()
    }
}

impl EventSink for Going {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).entry(event.stream).or_default().push(event);
    }
}

/// The first timer a replay fired, and when.
#[derive(Default)]
struct FirstFired(Mutex<Option<(Duration, TimerKind, Duration)>>);

impl EventSink for FirstFired {
    fn emit(&self, event: Event) {
        if let EventKind::TimerFired { timer, after, .. } = event.kind {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert((event.at, timer, after));
        }
    }
}
