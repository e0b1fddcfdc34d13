//! What stallscope's clocks would have done on an observed stream: each
//! of its attempts (one request of the agent's) replayed, once it has
//! ended, in virtual time through the core under the tunables in force
//! (observe itself runs with every clock off), by the same what-if that
//! replays any run, and the first timer that fires within what was
//! recorded ("the idle timer (30 s) would have fired at 30.0 s; the agent
//! waited 412 s"). The mark goes into the stream's events as a
//! [`EventKind::TimerWouldFire`] where the timer would have fired, so the
//! lanes, the log and the verdict read it as they read the rest. A timer
//! that would fire only after the agent had given up is not claimed: what
//! came after is not known.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::core::category::TimerKind;
use crate::core::classify::Rule;
use crate::core::event::{Event, EventKind, EventSink, StreamId};
use crate::core::per_stream::PerStream;
use crate::diagnosis::RecordedRun;
use crate::replay::recording::{RecordedAttempt, RecordedProvider, Recording, StreamRecord};
use crate::replay::whatif::{Replayer, WhatIf};
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

/// A timer of ours that would have fired on an observed attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct WouldFire {
    /// The attempt (the agent's request) it would have fired on.
    pub attempt: u32,
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
/// no stream, and the thread that replays it under the clocks in force.
pub(super) struct Clocks {
    base: Recording,
    /// How the recorded run's verdicts are read: made once, from its
    /// tunables.
    run: RecordedRun,
    replays: Replays,
}

impl Clocks {
    /// Replays on `replays` the streams of a run recorded with `recorded`
    /// tunables, `meta`, `rules` and `providers`.
    pub fn new(
        replays: Replays,
        recorded: Tunables,
        meta: RunMeta,
        rules: Vec<Rule>,
        providers: Vec<RecordedProvider>,
    ) -> Clocks {
        let run = RecordedRun::new(&recorded.sourced_snapshot(), &BTreeMap::new());
        let base = Recording { run: 0, tunables: recorded, meta, rules, providers, streams: Vec::new() };
        Clocks { base, run, replays }
    }

    /// The first of our timers that would have fired on the latest
    /// attempt of `record` (call `stream`'s, as recorded so far), before
    /// the recording of that attempt ended: the attempt replayed alone, as
    /// the agent's request it was.
    pub async fn first(&self, stream: StreamId, record: &StreamRecord) -> Option<(WouldFire, Event)> {
        let mut recorded = record.recorded(stream, &self.run);
        let latest = recorded.attempts.pop()?;
        let (ordinal, (started, ended)) = (latest.ordinal, latest.span());
        recorded.started = started;
        recorded.attempts = vec![RecordedAttempt { ordinal: 1, ..latest }];
        let (reply, fired) = oneshot::channel();
        let replay = Recording { streams: vec![recorded], ..self.base.clone() };
        self.replays.jobs.send((replay, reply)).ok()?;
        let (at, timer, budget) = fired.await.ok()??;
        let kind = EventKind::TimerWouldFire { timer, after: budget };
        let would = WouldFire {
            attempt: ordinal,
            timer,
            budget,
            at: at.saturating_sub(started),
            recorded: ended.saturating_sub(started),
        };
        (at <= ended).then_some((would, Event { at, stream, attempt: ordinal, kind }))
    }
}

/// The first timer a replay fired: when, which, its budget.
type Fired = (Duration, TimerKind, Duration);

/// A recording to replay, and where its first fired timer goes.
type Job = (Recording, oneshot::Sender<Option<Fired>>);

/// Observed attempts replayed one after the other on a thread of its own,
/// with one [`Replayer`] (settings read and runtime made once): a thread
/// and a runtime for each call would cost more than its replay. The
/// thread ends with the last handle.
#[derive(Clone)]
pub(super) struct Replays {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl Replays {
    /// Replays recordings with `recorded` tunables and `rules` under the
    /// clocks of `in_force`.
    pub fn start(in_force: &Tunables, recorded: &Tunables, rules: Vec<Rule>) -> Replays {
        let overrides = CLOCKS.iter().map(|name| format!("{name}={}", in_force.get(name).value)).collect();
        let whatif = WhatIf { overrides, ..WhatIf::default() };
        let recorded = recorded.clone();
        let (jobs, taken) = std::sync::mpsc::channel::<Job>();
        // A thread that cannot start leaves the jobs unanswered: no mark.
        let _ = std::thread::Builder::new().name("stallscope-replays".into()).spawn(move || {
            // Settings that do not load make no mark: every job is answered
            // none (the tunables were read already; this does not happen).
            let replayer = Replayer::new(&recorded, &rules, whatif).ok();
            for (recording, reply) in taken {
                let fired = Arc::new(FirstFired::default());
                let first = replayer.as_ref().and_then(|replayer| {
                    replayer.replay(&recording, Some(fired.clone() as Arc<dyn EventSink>)).ok()?;
                    fired.0.lock().unwrap_or_else(PoisonError::into_inner).take()
                });
                let _ = reply.send(first);
            }
        });
        Replays { jobs }
    }
}

/// Each call's events folded while it goes, for its verdict and its
/// replay once it ends: the one record of a stream observe holds (the
/// recorder and the front ends keep their own), no event kept.
#[derive(Default)]
pub(super) struct Going(PerStream<StreamRecord>);

impl Going {
    /// Takes the record of call `stream`, which has ended.
    pub fn take(&self, stream: StreamId) -> StreamRecord {
        self.0.remove(stream).unwrap_or_default()
    }

    /// Goes on with `record` for call `stream`: an agent's retry of it.
    pub fn resume(&self, stream: StreamId, record: StreamRecord) {
        self.0.with(stream, |streams| streams.insert(stream, record));
    }
}

impl EventSink for Going {
    fn emit(&self, event: Event) {
        self.0.with(event.stream, |streams| streams.entry(event.stream).or_default().push(&event));
    }
}

/// The first timer a replay fired, and when.
#[derive(Default)]
struct FirstFired(Mutex<Option<Fired>>);

impl EventSink for FirstFired {
    fn emit(&self, event: Event) {
        if let EventKind::TimerFired { timer, after, .. } = event.kind {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert((event.at, timer, after));
        }
    }
}
