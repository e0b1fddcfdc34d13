//! The tool's own honesty: every timer that fires says how late our own
//! runtime was, and a timeout that the client's overload may have caused is
//! marked untrustworthy (`core::lag::lag_untrusts`); in guard mode such a
//! timer is held instead, and the call goes on.
//!
//! The filling rule runs in paused time with lag written into the meter by
//! hand. The whole stack runs twice against the simulator: once on a
//! runtime whose only worker is blocked most of the time (every timeout
//! there is the client's doing, and must be marked), once calm (a real
//! stall, caught with a small lag, not marked). Neither asserts a speed:
//! the starved run blocks for 200 ms where its timers allow 100 ms, and the
//! calm one allows 200 ms of lag where a calm runtime shows a few.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stallscope::core::category::TimerKind;
use stallscope::core::event::{Event, EventKind, Outcome};
use stallscope::core::lag::lag_untrusts;
use stallscope::core::lag_probe::LagMeter;
use stallscope::diagnosis::diagnose;
use stallscope::providers::Dialect;
use stallscope::session::{RecordTo, RunSource, SessionOutcome, SessionPlan, run_session};
use stallscope::store::Store;
use support::{Harness, Script, Scripted, Step, policy};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Every `TimerFired` of a run: (timer, budget, lag).
fn fired(events: &[Event]) -> Vec<(TimerKind, Duration, Option<Duration>)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TimerFired { timer, after, lag } => Some((timer, after, lag)),
            _ => None,
        })
        .collect()
}

/// One call with a 1 s idle timer and no retry over `body`; its executor
/// reads the meter returned, empty (each test writes what a probe would).
fn metered(body: Vec<Step>) -> (Harness, LagMeter) {
    let up = Scripted::new(vec![Script::stream(body)]);
    let mut h =
        Harness::single(policy(&["SSE_IDLE_TIMEOUT_S=1", "PROVIDER_STREAM_RETRIES=0", "FALLBACK_MODELS=off"]), up);
    let meter = LagMeter::new(h.executor.epoch);
    h.executor.lag = Some(meter.clone());
    (h, meter)
}

#[tokio::test(start_paused = true)]
async fn a_fired_timer_carries_the_largest_lag_since_its_budget_began() {
    let (h, meter) = metered(vec![Step::Send("c:hi\n"), Step::Hang]);
    let start = Instant::now();
    // The chunk comes at once, so the idle budget runs from 0 to 1 s: a
    // stall at 0.6 s is inside it.
    meter.record(start + MS(600), MS(150));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(report.outcome, Outcome::Partial);
    assert_eq!(fired(&h.sink.events()), [(TimerKind::Idle, MS(1000), Some(MS(150)))]);
    let summary = meter.summary();
    assert_eq!((summary.fired, summary.untrusted), (1, 1));
}

/// Guard mode: the idle timer comes due at 1 s while our runtime runs
/// 0.35 s late, is held, and the bytes that come at 1.5 s finish the call;
/// its verdict says the lateness was ours, not the network's.
#[tokio::test(start_paused = true)]
async fn guard_mode_holds_a_timer_that_came_due_late_and_the_call_completes() {
    let body = vec![Step::Send("c:hi\n"), Step::Wait(MS(1500)), Step::Send("c:there\n"), Step::Send("d\n")];
    let (mut h, meter) = metered(body);
    Arc::make_mut(&mut h.executor.policy).timers.hold_when_late = true;
    meter.record(Instant::now() + MS(600), MS(350));
    let report = h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!((report.outcome, report.attempts), (Outcome::Ok, 1));
    let events = h.sink.events();
    assert_eq!(fired(&events), []);
    let held: Vec<(u128, TimerKind, Duration, Duration)> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TimerHeld { timer, after, lag } => Some((e.at.as_millis(), timer, after, lag)),
            _ => None,
        })
        .collect();
    assert_eq!(held, [(1000, TimerKind::Idle, MS(1000), MS(350))]);
    assert_eq!(meter.summary().fired, 0);
    let verdict = diagnose(&events);
    assert!(!verdict.trusted, "{verdict:?}");
    assert!(verdict.summary.contains("not acted on (client overloaded)"), "{}", verdict.summary);
}

#[tokio::test(start_paused = true)]
async fn lag_before_a_timers_budget_began_is_not_its_own() {
    // Pings every 0.5 s until 2 s, then silence: the idle budget that fires
    // ran from 2 s to 3 s.
    let mut body = Vec::new();
    for _ in 0..4 {
        body.extend([Step::Send("p\n"), Step::Wait(MS(500))]);
    }
    body.extend([Step::Send("p\n"), Step::Hang]);
    let (h, meter) = metered(body);
    let start = Instant::now();
    meter.record(start + MS(500), MS(400));
    meter.record(start + MS(2500), MS(30));
    h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(fired(&h.sink.events()), [(TimerKind::Idle, MS(1000), Some(MS(30)))]);
    assert_eq!((meter.summary().fired, meter.summary().untrusted), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn the_executors_deadline_carries_lag_and_a_run_without_a_probe_none() {
    let up = Scripted::new(vec![Script::status(500, vec![], "boom")]);
    let sets = ["CALL_DEADLINE_S=5", "PROVIDER_STREAM_BACKOFF_S=10", "PROVIDER_STREAM_BACKOFF_MAX_S=10"];
    let mut h = Harness::single(policy(&[&sets[..], &["BACKOFF_JITTER=none", "FALLBACK_MODELS=off"]].concat()), up);
    let meter = LagMeter::new(h.executor.epoch);
    meter.record(Instant::now(), MS(700));
    h.executor.lag = Some(meter);
    h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(fired(&h.sink.events()), [(TimerKind::Deadline, MS(5000), Some(MS(700)))]);

    let (mut h, _) = metered(vec![Step::Send("p\n"), Step::Hang]);
    h.executor.lag = None;
    h.executor.run(&h.call("m1"), &CancellationToken::new()).await;
    assert_eq!(fired(&h.sink.events()), [(TimerKind::Idle, MS(1000), None)]);
}

/// A database file of its own, removed at the end.
struct TempDb(PathBuf);

impl TempDb {
    fn new(name: &str) -> TempDb {
        let dir = std::env::temp_dir().join(format!("stallscope-lag-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDb(dir.join("runs.db"))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn plan(scenario: &str, streams: usize, sets: &[&str], db: &TempDb) -> SessionPlan {
    SessionPlan {
        source: RunSource::Scenario { name: scenario.to_owned(), dialect: Dialect::OpenAiChat },
        requests: streams,
        concurrency: streams,
        prompt: "Say hello.".to_owned(),
        overrides: sets.iter().map(|s| (*s).to_owned()).collect(),
        edits: Vec::new(),
        recording: Some(RecordTo { db: db.0.clone(), label: None, batch: None }),
        seed: Some(13),
    }
}

/// Every event of the recorded run, and its lag readings.
fn recorded(outcome: &SessionOutcome, db: &TempDb) -> (Vec<Event>, Vec<Duration>) {
    let store = Store::open(&db.0).unwrap();
    let run = outcome.report.run_id.unwrap();
    let lags = store.runtime_lag(run).unwrap().into_iter().map(|s| s.lag).collect();
    (store.run_events(run).unwrap(), lags)
}

#[test]
fn a_starved_runtime_marks_every_timeout_it_causes() {
    let db = TempDb::new("starved");
    // One worker, and a task that holds it for 200 ms after every 10 ms it
    // lets the others run: the streams' 100 ms timers fire because the
    // client is not reading, while the simulator sends on time.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sets = [
        "STALLSCOPE_SSE_IDLE_TIMEOUT_S=0.1",
        "STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S=0.1",
        "STALLSCOPE_PROVIDER_STREAM_RETRIES=0",
        "STALLSCOPE_FALLBACK_MODELS=off",
    ];
    let plan = plan("healthy", 100, &sets, &db);
    let outcome = runtime.block_on(async {
        let hog = tokio::spawn(async {
            loop {
                tokio::time::sleep(MS(10)).await;
                std::thread::sleep(MS(200));
            }
        });
        let outcome = run_session(&plan, &[], None, &CancellationToken::new(), |_, _| {}).await.unwrap();
        hog.abort();
        outcome
    });
    assert_eq!(outcome.dropped_events, 0);
    let (events, lags) = recorded(&outcome, &db);
    let fired = fired(&events);
    assert!(!fired.is_empty(), "a starved client saw no timeout");
    for (timer, budget, lag) in &fired {
        let lag = lag.unwrap_or_else(|| panic!("{timer} timer fired without a lag"));
        assert!(lag_untrusts(*budget, lag), "{timer} timer of {budget:?} fired with only {lag:?} of lag");
    }
    let summary = outcome.lag;
    assert_eq!((summary.fired, summary.untrusted), (fired.len() as u64, fired.len() as u64));
    assert!(summary.max_lag >= MS(150), "{summary:?}");
    assert!(lags.iter().any(|lag| *lag >= MS(150)), "the recorded lag series misses the stalls: {lags:?}");
    let note = summary.overload_note().unwrap();
    assert!(
        note.starts_with(&format!("client overloaded: {0} of {0} timeouts not trustworthy", fired.len())),
        "{note}"
    );
    // Every verdict a timer decided says it cannot be trusted, in words.
    let timed_out: std::collections::HashSet<u64> =
        events.iter().filter(|e| matches!(e.kind, EventKind::TimerFired { .. })).map(|e| e.stream).collect();
    for stream in outcome.report.streams.iter().filter(|s| timed_out.contains(&s.index)) {
        let verdict = stream.diagnosis.as_ref().unwrap();
        assert!(!verdict.trusted, "stream {}: {verdict:?}", stream.index);
        assert!(verdict.summary.contains("not trustworthy"), "stream {}: {}", stream.index, verdict.summary);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calm_runs_real_stalls_carry_small_lags_and_are_trusted() {
    let db = TempDb::new("calm");
    // Each stream's first attempt goes silent after its first event; the
    // 2 s idle timer catches it and the retry is healthy.
    let sets = ["STALLSCOPE_SSE_IDLE_TIMEOUT_S=2"];
    let plan = plan("silent-stall", 20, &sets, &db);
    let outcome = run_session(&plan, &[], None, &CancellationToken::new(), |_, _| {}).await.unwrap();
    let (events, lags) = recorded(&outcome, &db);
    let fired = fired(&events);
    assert_eq!(fired.len(), 20, "one stall per stream: {fired:?}");
    for (timer, budget, lag) in &fired {
        assert_eq!((*timer, *budget), (TimerKind::Idle, MS(2000)));
        let lag = lag.unwrap_or_else(|| panic!("the idle timer fired without a lag"));
        assert!(!lag_untrusts(*budget, lag), "a calm run's stall was marked: {lag:?} of lag");
    }
    assert_eq!((outcome.lag.fired, outcome.lag.untrusted), (20, 0));
    assert_eq!(outcome.lag.overload_note(), None);
    assert!(outcome.report.streams.iter().all(|s| s.diagnosis.as_ref().unwrap().trusted));
    // The probe ran through the run: a reading per 100 ms, give or take.
    assert!(lags.len() >= 15, "{} readings over a run of {} ms", lags.len(), outcome.report.summary.elapsed_ms);
}
