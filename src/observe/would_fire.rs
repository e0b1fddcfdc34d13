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
//!
//! The replays wait in a bounded queue ([`QUEUED`]): a call that ends
//! while it is full is not replayed, gets no mark, and is counted
//! ([`Clocks::unreplayed`], said when its run closes), as the recorder
//! counts the events it could not keep.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
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

/// Replays waiting for the replay thread, at most. Each call waits for
/// its own replay as it ends, so the queue holds at most the calls ending
/// at once: this many, beyond the one being replayed, before one goes
/// unreplayed.
pub(super) const QUEUED: usize = 1024;

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
    /// Calls not replayed: the queue was full.
    unreplayed: AtomicU64,
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
        Clocks { base, run, replays, unreplayed: AtomicU64::new(0) }
    }

    /// How many calls were not replayed (so got no mark) because the
    /// replay queue was full.
    pub fn unreplayed(&self) -> u64 {
        self.unreplayed.load(Ordering::Relaxed)
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
        match self.replays.jobs.try_send((replay, reply)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.unreplayed.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            // The replay thread could not start: no mark, as documented there.
            Err(TrySendError::Disconnected(_)) => return None,
        }
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
    jobs: SyncSender<Job>,
}

impl Replays {
    /// Replays recordings with `recorded` tunables and `rules` under the
    /// clocks of `in_force`.
    pub fn start(in_force: &Tunables, recorded: &Tunables, rules: Vec<Rule>) -> Replays {
        let overrides = CLOCKS.iter().map(|name| format!("{name}={}", in_force.get(name).value)).collect();
        let whatif = WhatIf { overrides, ..WhatIf::default() };
        let recorded = recorded.clone();
        let (jobs, taken) = std::sync::mpsc::sync_channel::<Job>(QUEUED);
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

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;
    use crate::core::failover::Target;

    /// One call's record with one attempt begun.
    fn record() -> StreamRecord {
        let target = Target::new("upstream", "m");
        let mut record = StreamRecord::default();
        for (at, kind) in [
            (0, EventKind::CallStarted { target: target.clone(), context_tokens: None }),
            (1, EventKind::AttemptStarted { target, credential: None }),
        ] {
            record.push(&Event { at: Duration::from_millis(at), stream: 0, attempt: 1, kind });
        }
        record
    }

    #[test]
    fn a_call_that_finds_the_queue_full_is_not_replayed_and_is_counted() {
        // A queue of two with no replay thread behind it: nothing is taken
        // until the test takes it.
        let (jobs, taken) = std::sync::mpsc::sync_channel::<Job>(2);
        let meta = RunMeta {
            requests: 0,
            concurrency: 0,
            seed: 1,
            epoch_unix_ns: 0,
            rules: serde_json::Value::Null,
            pools: Default::default(),
        };
        let clocks = Clocks::new(Replays { jobs }, Tunables::defaults(), meta, Vec::new(), Vec::new());
        let record = record();
        // Each queues its replay and is left waiting for the answer.
        for _ in 0..2 {
            assert!(clocks.first(0, &record).now_or_never().is_none(), "queued, waiting");
        }
        assert_eq!(clocks.unreplayed(), 0);
        assert_eq!(clocks.first(0, &record).now_or_never(), Some(None), "full: no mark, at once");
        assert_eq!(clocks.unreplayed(), 1);
        // The replay thread takes one: the next call finds room.
        drop(taken.try_recv().unwrap());
        assert!(clocks.first(0, &record).now_or_never().is_none(), "queued again");
        assert_eq!(clocks.first(0, &record).now_or_never(), Some(None));
        assert_eq!(clocks.unreplayed(), 2);
        assert_eq!(taken.try_iter().count(), 2, "the queue held two, never more");
    }
}
