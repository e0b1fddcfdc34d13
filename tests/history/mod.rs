//! A history of canary rounds at the scale of real traffic, written into
//! a store as the recorder would have written them, with the default
//! tunables: each call streams 40 content events over 4 s and completes;
//! in a stalled round the first call's first attempt sends only
//! keep-alives after its headers, every 15 s, until the data-stall timer
//! (900 s) gives up, and a retry completes. For tune's benchmark and for
//! tests that need real-scale timers (a story's run at the simulator's
//! scale is tighter than real traffic allows).

use std::time::Duration;

use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{AttemptEnd, Event, EventClass, EventKind, Outcome, SleepReason};
use stallscope::core::failover::Target;
use stallscope::providers::Dialect;
use stallscope::providers::setup::ProviderConfig;
use stallscope::store::runs::{RunMeta, RunStart};
use stallscope::store::{RunId, Store};
use stallscope::tunables::Tunables;

/// Events of one attempt: its start, headers and `events` content events
/// 0.1 s apart from `t0` (seconds since the round's epoch).
fn attempt(stream: u64, number: u32, t0: f64, events: u64, target: &Target) -> Vec<Event> {
    let event = |s: f64, kind| Event { at: Duration::from_secs_f64(s), stream, attempt: number, kind };
    let mut out = vec![
        event(t0, EventKind::AttemptStarted { target: target.clone(), credential: None }),
        event(t0 + 0.3, EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) }),
    ];
    for i in 0..events {
        let t = t0 + 0.3 + i as f64 * 0.1;
        out.push(event(t, EventKind::ChunkReceived { bytes: 90 }));
        out.push(event(t, EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true }));
    }
    out
}

/// One round of two calls (the first stalling when `stalled`), labelled
/// `watch@bench`, its wall clock at `epoch_unix_ns`.
pub fn round(store: &mut Store, index: u64, epoch_unix_ns: i64, stalled: bool) -> RunId {
    let providers = [ProviderConfig::at_root("sim", Dialect::OpenAiChat, "http://127.0.0.1:9", "model")];
    let meta = RunMeta {
        requests: 2,
        concurrency: 2,
        seed: index,
        epoch_unix_ns,
        rules: serde_json::json!([]),
        pools: [("sim".to_owned(), 0)].into(),
    };
    let label = Some("watch@bench".to_owned());
    let start = RunStart::new(label, None, &Tunables::defaults(), &providers).with_meta(meta);
    let run = store.begin_run(&start).unwrap();
    let target = Target::new("sim", "model");
    for stream in 0..2 {
        let event = |s: f64, attempt, kind| Event { at: Duration::from_secs_f64(s), stream, attempt, kind };
        let mut events =
            vec![event(0.0, 0, EventKind::CallStarted { target: target.clone(), context_tokens: Some(3) })];
        let mut attempts = 1;
        let mut t = 0.0;
        if stalled && stream == 0 {
            // Headers, then only keep-alives every 15 s: no content came,
            // so the retry is allowed.
            events.extend(attempt(stream, 1, t, 0, &target));
            for i in 0..60 {
                let at = 0.3 + f64::from(i) * 15.0;
                events.push(event(at, 1, EventKind::ChunkReceived { bytes: 14 }));
                let ping = EventKind::SseReceived { class: EventClass::Keepalive, chars: 0, progress: false };
                events.push(event(at, 1, ping));
            }
            let fired = 0.3 + 900.0;
            let data_stall = TimerKind::DataStall;
            events.push(event(
                fired,
                1,
                EventKind::TimerFired { timer: data_stall, after: Duration::from_secs(900), lag: None },
            ));
            events.push(event(
                fired,
                1,
                EventKind::AttemptEnded { end: AttemptEnd::Timer { timer: data_stall }, stop_reason: None },
            ));
            events.push(event(
                fired,
                1,
                EventKind::ErrorClassified {
                    category: Category::Timeout,
                    timer: Some(data_stall),
                    status: None,
                    retryable: true,
                    rule: "builtin: timer fired".into(),
                    message: "data_stall timer fired after 900 s".into(),
                },
            ));
            let sleep = Duration::from_secs(2);
            events.push(event(
                fired,
                0,
                EventKind::BackoffScheduled {
                    retry: 1,
                    category: Category::Timeout,
                    nominal: sleep,
                    sleep,
                    reason: SleepReason::Backoff,
                },
            ));
            (attempts, t) = (2, fired + 2.0);
        }
        events.extend(attempt(stream, attempts, t, 40, &target));
        let end = t + 0.3 + 4.0;
        events.push(event(
            end,
            attempts,
            EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) },
        ));
        events.push(event(
            end,
            0,
            EventKind::Finished { outcome: Outcome::Ok, attempts, stop_reason: Some("stop".into()) },
        ));
        store.append_events(run, &events).unwrap();
    }
    run
}
