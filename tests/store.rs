//! The run database and the recorder: events read back as written, runs
//! listed, shown and deleted, bad files refused with one clear message,
//! crashed runs marked interrupted, a flood counted instead of blocking,
//! and no secret in the file.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{
    AttemptEnd, AttemptPhase, Event, EventClass, EventKind, EventSink, Outcome, RecordedBody, SleepReason,
};
use stallscope::core::executor::{CallReport, Used};
use stallscope::core::failover::Target;
use stallscope::core::failure::TransportKind;
use stallscope::diagnosis::diagnose;
use stallscope::providers::Dialect;
use stallscope::providers::setup::ProviderConfig;
use stallscope::recorder::{Recorder, RecorderOptions};
use stallscope::report::{ErrorReport, HopReport, LowBucketReport, RunReport, StreamReport, Summary, Tally};
use stallscope::store::{RunMeta, RunStart, RunStatus, SCHEMA_VERSION, Store, StoreError};
use stallscope::tunables::Tunables;

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("stallscope-store-{}-{name}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn start(label: &str) -> RunStart {
    let mut tunables = Tunables::defaults();
    tunables.apply_override("SSE_IDLE_TIMEOUT_S=120").unwrap();
    let sim = ProviderConfig::at_root("sim", Dialect::OpenAiChat, "http://127.0.0.1:9", "sim-model-a");
    RunStart::new(Some(label.to_owned()), Some("stall_midstream".to_owned()), &tunables, &[sim])
}

fn at(ns: u64, stream: u64, attempt: u32, kind: EventKind) -> Event {
    Event { at: Duration::from_nanos(ns), stream, attempt, kind }
}

/// Every kind of event, with the optional parts both present and absent.
fn every_kind() -> Vec<EventKind> {
    let t = Target::new("p", "org/model");
    let mut kinds = vec![
        EventKind::CallStarted { target: t.clone(), context_tokens: Some(3) },
        EventKind::CallStarted { target: Target::new("a/b", " odd "), context_tokens: None },
        EventKind::AttemptStarted { target: t.clone(), credential: Some(1) },
        EventKind::AttemptStarted { target: t.clone(), credential: None },
        EventKind::HeadersReceived { status: 200, content_type: Some("text/event-stream".into()) },
        EventKind::HeadersReceived { status: 429, content_type: None },
        EventKind::ChunkReceived { bytes: 42 },
        EventKind::ChunkReceived { bytes: 0 },
        EventKind::TimerDisarmed { timer: TimerKind::Ttfb, reason: "large context \"é\"".into() },
        EventKind::RateLimitObserved { requests_remaining: Some(0), tokens_remaining: None, exhausted_reset: None },
        EventKind::RateLimitObserved {
            requests_remaining: None,
            tokens_remaining: Some(9_000_000),
            exhausted_reset: Some(Duration::new(3, 7)),
        },
        EventKind::ErrorClassified {
            category: Category::RateLimit,
            timer: None,
            status: Some(429),
            retryable: true,
            rule: "builtin: status 429".into(),
            message: "HTTP 429".into(),
        },
        EventKind::ErrorClassified {
            category: Category::Timeout,
            timer: Some(TimerKind::DataStall),
            status: None,
            retryable: false,
            rule: "r".into(),
            message: String::new(),
        },
        EventKind::BackoffScheduled {
            retry: 1,
            category: Category::RateLimit,
            nominal: Duration::from_millis(700),
            sleep: Duration::from_nanos(750_000_001),
            reason: SleepReason::ServerRequested { header: "retry-after-ms".into() },
        },
        EventKind::BackoffScheduled {
            retry: 2,
            category: Category::Connection,
            nominal: Duration::ZERO,
            sleep: Duration::from_secs(1),
            reason: SleepReason::Backoff,
        },
        EventKind::ServerWaitRefused { requested: Duration::from_secs(600), cap: Duration::from_secs(60) },
        EventKind::RetryBudgetRefused { provider: "p".into(), in_flight: 3, limit: 3 },
        EventKind::FailedOver { from: t.clone(), to: Target::new("q", "m"), reason: Category::Overloaded },
        EventKind::CredentialCooledDown { provider: "p".into(), credential: 0, cooldown: Duration::from_secs(300) },
        EventKind::CredentialRotated { provider: "p".into(), from: 0, to: 1 },
        EventKind::Finished { outcome: Outcome::Partial, attempts: 2, stop_reason: Some("length".into()) },
        // Larger than a column holds: stored as JSON.
        EventKind::TimerArmed { timer: TimerKind::Total, after: Duration::MAX, floor: None },
        EventKind::ResponseHeaders {
            headers: vec![
                ("retry-after-ms".into(), "700".into()),
                ("x-ratelimit-remaining-requests".into(), "0".into()),
                ("server".into(), "\"odd\" ✓ \u{0}".into()),
                ("via".into(), String::new()),
            ],
        },
        EventKind::ResponseHeaders { headers: vec![] },
        EventKind::ErrorBody { body: "{\"error\":{\"message\":\"slow down\"}}".into(), truncated: false },
        EventKind::ErrorBody { body: "ü".repeat(3000), truncated: true },
        EventKind::ErrorBody { body: String::new(), truncated: false },
        EventKind::RateLimitLow {
            bucket: "tokens".into(),
            remaining: 10,
            limit: Some(1000),
            reset: Some(Duration::new(3, 7)),
        },
        EventKind::RateLimitLow { bucket: "requests".into(), remaining: 0, limit: None, reset: None },
        EventKind::RateLimitLow { bucket: "daily_widgets".into(), remaining: 1, limit: Some(9), reset: None },
        EventKind::RateLimitLow {
            bucket: "output_tokens".into(),
            remaining: i64::MAX as u64,
            limit: Some(0),
            reset: Some(Duration::from_nanos(u64::MAX)),
        },
        // Larger than a column holds: stored as JSON.
        EventKind::RateLimitLow { bucket: "input_tokens".into(), remaining: u64::MAX, limit: None, reset: None },
        EventKind::RateLimitLow {
            bucket: "tokens".into(),
            remaining: 1,
            limit: Some(u64::MAX),
            reset: Some(Duration::MAX),
        },
        EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("end_turn".into()) },
        EventKind::AttemptEnded { end: AttemptEnd::Status { status: 429 }, stop_reason: None },
        EventKind::AttemptEnded { end: AttemptEnd::Status { status: u16::MAX }, stop_reason: None },
        EventKind::AttemptEnded {
            end: AttemptEnd::InStream { code: Some("overloaded_error".into()) },
            stop_reason: None,
        },
        EventKind::AttemptEnded { end: AttemptEnd::InStream { code: None }, stop_reason: Some(String::new()) },
        EventKind::AttemptEnded { end: AttemptEnd::Malformed, stop_reason: None },
        EventKind::AttemptEnded { end: AttemptEnd::Cancelled, stop_reason: Some("length".into()) },
        EventKind::BodyRecorded {
            body: RecordedBody::Text {
                texts: vec!["Hel".into(), String::new(), "lo \"✓\"".into()], truncated: false
            },
        },
        EventKind::BodyRecorded { body: RecordedBody::Text { texts: vec![], truncated: true } },
        EventKind::BodyRecorded { body: RecordedBody::Raw { bytes: b"data: {}\n\n".to_vec(), truncated: true } },
        EventKind::BodyRecorded { body: RecordedBody::Raw { bytes: vec![], truncated: false } },
        EventKind::BodyRecorded {
            body: RecordedBody::Raw { bytes: (0..=255u8).cycle().take(70_000).collect(), truncated: false },
        },
    ];
    for kind in TransportKind::ALL {
        kinds.push(EventKind::AttemptEnded { end: AttemptEnd::Transport { kind }, stop_reason: None });
    }
    for timer in TimerKind::ALL {
        kinds.push(EventKind::AttemptEnded { end: AttemptEnd::Timer { timer }, stop_reason: None });
    }
    let phases = [
        AttemptPhase::Connecting,
        AttemptPhase::AwaitingHeaders,
        AttemptPhase::AwaitingFirstContent,
        AttemptPhase::Streaming,
        AttemptPhase::Done,
    ];
    kinds.extend(phases.map(|phase| EventKind::PhaseChanged { phase }));
    let classes = [
        EventClass::Keepalive,
        EventClass::Lifecycle,
        EventClass::Reasoning,
        EventClass::Content,
        EventClass::ToolCall,
        EventClass::Error,
    ];
    for class in classes {
        for progress in [false, true] {
            kinds.push(EventKind::SseReceived { class, chars: 5, progress });
        }
    }
    for timer in TimerKind::ALL {
        let floor = (timer == TimerKind::MinRate).then_some(2.5);
        kinds.push(EventKind::TimerArmed { timer, after: Duration::from_millis(1500), floor });
        kinds.push(EventKind::TimerFired { timer, after: Duration::from_secs(2), lag: None });
        kinds.push(EventKind::TimerFired {
            timer,
            after: Duration::from_secs(2),
            lag: Some(Duration::from_micros(1500)),
        });
    }
    for category in Category::ALL {
        kinds.push(EventKind::PartialRecovered { chars: 7, category });
    }
    for outcome in [Outcome::Ok, Outcome::Partial, Outcome::Failed, Outcome::Cancelled] {
        kinds.push(EventKind::Finished { outcome, attempts: 1, stop_reason: None });
    }
    kinds
}

#[test]
fn every_event_kind_reads_back_as_written_in_time_order() {
    let dir = TempDir::new("kinds");
    let mut store = Store::open(dir.join("runs.db")).unwrap();
    let run = store.begin_run(&start("kinds")).unwrap();
    // Two streams interleaved, each kind between chunk events so packs form
    // and are closed; times with sub-microsecond parts.
    let mut written: [Vec<Event>; 2] = Default::default();
    let mut all = Vec::new();
    for (i, kind) in every_kind().into_iter().enumerate() {
        for stream in 0..2u64 {
            let base = 1_000_000_007 * i as u64 + stream;
            let events = [
                at(base, stream, 1, EventKind::ChunkReceived { bytes: i }),
                at(
                    base + 10,
                    stream,
                    1,
                    EventKind::SseReceived { class: EventClass::Content, chars: i, progress: true },
                ),
                at(base + 20, stream, 2, kind.clone()),
            ];
            written[stream as usize].extend(events.iter().cloned());
            all.extend(events);
        }
    }
    let (first, second) = all.split_at(all.len() / 3);
    store.append_events(run, first).unwrap();
    store.append_events(run, second).unwrap();
    drop(store);
    let store = Store::open(dir.join("runs.db")).unwrap();
    for stream in 0..2u64 {
        assert_eq!(store.events(run, stream).unwrap(), written[stream as usize], "stream {stream}");
    }
    assert_eq!(store.streams(run).unwrap(), [0, 1]);
    assert_eq!(store.run_events(run).unwrap().len(), all.len());
    assert_eq!(store.list_runs().unwrap()[0].events, all.len() as u64);
}

#[test]
fn batches_of_chunks_keep_their_order_across_appends() {
    let mut store = Store::open_in_memory().unwrap();
    let run = store.begin_run(&start("batches")).unwrap();
    let mut expected: BTreeMap<u64, Vec<Event>> = BTreeMap::new();
    let mut time = 0;
    for batch in 0..5 {
        let mut events = Vec::new();
        for i in 0..2_000u64 {
            time += 333;
            let stream = i % 3;
            let kind = match i % 7 {
                0 => EventKind::PhaseChanged { phase: AttemptPhase::Streaming },
                1 | 2 => EventKind::SseReceived {
                    class: EventClass::Reasoning,
                    chars: (i * batch) as usize,
                    progress: false,
                },
                _ => EventKind::ChunkReceived { bytes: (i * 31) as usize },
            };
            let event = at(time, stream, 1 + (batch as u32 / 2), kind);
            expected.entry(stream).or_default().push(event.clone());
            events.push(event);
        }
        store.append_events(run, &events).unwrap();
    }
    for (stream, events) in expected {
        assert_eq!(store.events(run, stream).unwrap(), events);
    }
}

fn stream_report(index: u64, outcome: &'static str, elapsed_ms: f64) -> StreamReport {
    StreamReport {
        index,
        outcome,
        provider: "sim".into(),
        model: "sim-model-a".into(),
        attempts: 2,
        elapsed_ms,
        ttfb_ms: Some(12.345678901234567),
        bytes: 1234,
        events: 17,
        keepalives: 2,
        content: "Hello \"world\" 1.5e3 ✓".into(),
        stop_reason: Some("stop".into()),
        error: (outcome == "failed").then(|| ErrorReport {
            category: "timeout".into(),
            timer: Some("data_stall".into()),
            transport: None,
            status: None,
            retryable: true,
            rule: "builtin: timer".into(),
            message: "no progress for 1.5 s".into(),
        }),
        failover_hops: vec![HopReport { from: "sim/a".into(), to: "sim/b".into(), reason: "overloaded".into() }],
        backoff_sleeps_ms: vec![55794.528960999996, 0.1],
        retry_after_ms: vec![None, Some(94655.19882300001)],
        retry_counts: BTreeMap::from([("timeout".to_owned(), Used { used: 1, budget: 3 })]),
        rate_limits_low: vec![LowBucketReport { bucket: "tokens".into(), remaining: 12, limit: Some(1000) }],
        diagnosis: None,
    }
}

fn report() -> RunReport {
    let mut tunables = Tunables::defaults();
    // This value and several below are ones serde_json's default parser reads one ulp off.
    tunables.apply_override("SSE_IDLE_TIMEOUT_S=1000.1407407394599").unwrap();
    RunReport {
        run_id: None,
        scenario: Some("stall_midstream".into()),
        seed: Some(u64::MAX),
        tunables: tunables.snapshot(),
        summary: Summary { ok: 2, partial: 0, failed: 1, cancelled: 0, not_started: 0, elapsed_ms: 49799.393084999996 },
        stopped: false,
        streams: vec![
            stream_report(0, "ok", 100.25),
            stream_report(1, "failed", 3000.5),
            stream_report(2, "ok", 55794.528960999996),
        ],
        diagnosis: None,
        counted: None,
    }
}

#[test]
fn runs_are_listed_shown_compared_and_deleted() {
    let dir = TempDir::new("list");
    let mut store = Store::open(dir.join("runs.db")).unwrap();
    let first = store.begin_run(&start("first")).unwrap();
    let second = store.begin_run(&start("second")).unwrap();
    store.append_events(first, &[at(5, 0, 1, EventKind::ChunkReceived { bytes: 1 })]).unwrap();
    store.finish_run(first, &report(), 4).unwrap();

    let runs = store.list_runs().unwrap();
    assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), [second, first], "newest first");
    let done = &runs[1];
    assert_eq!((done.status, done.label.as_deref()), (RunStatus::Completed, Some("first")));
    assert_eq!(done.scenario.as_deref(), Some("stall_midstream"));
    assert_eq!(done.providers, ["sim"]);
    assert_eq!((done.outcomes.ok, done.outcomes.failed), (2, 1));
    assert_eq!((done.p50_ms, done.p99_ms), (Some(3000.5), Some(55794.528960999996)));
    assert_eq!((done.retries, done.dropped_events, done.events), (Some(3), 4, 1));
    assert_eq!(runs[0].status, RunStatus::Running);

    // `runs show`: the report as given, with its id.
    let mut expected = report();
    expected.run_id = Some(first);
    assert_eq!(store.run_report(first).unwrap(), Some(expected.clone()));
    assert_eq!(store.run_report_json(first).unwrap().unwrap(), serde_json::to_string(&expected).unwrap());
    assert_eq!(store.run_report(second).unwrap(), None, "no report while running");
    assert_eq!(store.run_report(999).unwrap(), None);

    // `runs compare`: tunables with their sources.
    let record = store.run(first).unwrap().unwrap();
    let idle = &record.tunables["STALLSCOPE_SSE_IDLE_TIMEOUT_S"];
    assert_eq!((idle["value"].as_f64(), idle["source"].as_str()), (Some(120.0), Some("--set")));
    assert_eq!(record.providers[0]["name"], "sim");

    assert!(store.delete_run(first).unwrap());
    assert!(!store.delete_run(first).unwrap());
    assert_eq!(store.list_runs().unwrap().len(), 1);
    assert!(store.events(first, 0).unwrap().is_empty());
    assert!(matches!(store.finish_run(first, &report(), 0), Err(StoreError::NoSuchRun { .. })));
    let chunk = at(1, 0, 1, EventKind::ChunkReceived { bytes: 1 });
    assert!(matches!(store.append_events(first, &[chunk]), Err(StoreError::NoSuchRun { .. })));
}

/// A report that counted its calls (an observer's) lists no stream: the
/// run's row takes its percentiles and retries, and reading it back lists
/// each stream from the recording, for `runs show`.
#[test]
fn a_counted_report_reads_back_with_its_streams_from_the_recording() {
    let dir = TempDir::new("counted");
    let mut store = Store::open(dir.join("runs.db")).unwrap();
    let run = store.begin_run(&start("observe@here")).unwrap();
    let target = Target::new("upstream", "m");
    let (mut tally, verdict, mut events) = (Tally::default(), diagnose(&[]), Vec::new());
    for (stream, outcome, ms) in [(0, Outcome::Ok, 120), (1, Outcome::Failed, 30), (2, Outcome::Ok, 480)] {
        let started = stream * 1_000_000_000;
        events.push(at(started, stream, 0, EventKind::CallStarted { target: target.clone(), context_tokens: None }));
        let finished = EventKind::Finished { outcome, attempts: 1, stop_reason: None };
        events.push(at(started + ms * 1_000_000, stream, 1, finished));
        let mut call = CallReport::empty(stream, target.clone());
        (call.outcome, call.elapsed) = (outcome, Duration::from_millis(ms));
        tally.add(&call, &verdict);
    }
    store.append_events(run, &events).unwrap();
    let report = tally.report(None, serde_json::Map::new(), Duration::from_secs(3));
    assert!(report.streams.is_empty());
    store.finish_run(run, &report, 0).unwrap();

    let summary = store.list_runs().unwrap().remove(0);
    assert_eq!((summary.outcomes.ok, summary.outcomes.failed), (2, 1));
    let counted = report.counted.clone().unwrap();
    assert_eq!((summary.p50_ms, summary.p99_ms), (counted.p50_ms, counted.p99_ms));
    assert!(summary.p50_ms.is_some_and(|p| (p / 120.0 - 1.0).abs() <= 0.01), "{:?}", summary.p50_ms);
    let read = store.run_report(run).unwrap().unwrap();
    let streams: Vec<_> =
        read.streams.iter().map(|s| (s.index, s.outcome, s.provider.as_str(), s.elapsed_ms)).collect();
    assert_eq!(streams, [(0, "ok", "upstream", 120.0), (1, "failed", "upstream", 30.0), (2, "ok", "upstream", 480.0)]);
    assert_eq!(read.counted, report.counted);
    let shown = store.diagnosed_report(run).unwrap().unwrap();
    assert_eq!(shown.diagnosis.map(|d| d.streams), Some(3), "every stream's verdict, from its events");
}

#[test]
fn a_database_from_a_newer_schema_is_refused_and_left_untouched() {
    let dir = TempDir::new("newer");
    let path = dir.join("runs.db");
    drop(Store::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    }
    let before = fs::read(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::TooNew { .. }), "{err:?}");
    let message = err.to_string();
    assert_eq!(
        message,
        format!(
            "{} was written by a newer stallscope (schema version {}; this version understands up to {}); \
             it was left untouched: use a newer stallscope or choose another file (--db PATH)",
            path.display(),
            SCHEMA_VERSION + 1,
            SCHEMA_VERSION
        )
    );
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn a_corrupt_file_is_refused_with_its_path() {
    let dir = TempDir::new("corrupt");
    let path = dir.join("runs.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    fs::write(&path, &garbage).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with(&format!("{} is not a readable stallscope run database", path.display())), "{message}");
    assert!(message.contains("left untouched"), "{message}");
    assert_eq!(fs::read(&path).unwrap(), garbage);
}

#[test]
fn another_programs_database_is_refused() {
    let dir = TempDir::new("foreign");
    let path = dir.join("other.db");
    rusqlite::Connection::open(&path).unwrap().execute_batch("CREATE TABLE notes (body TEXT);").unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NotOurs { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));
}

#[test]
fn a_read_only_location_is_refused_with_its_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("readonly");
    let locked = dir.join("locked");
    fs::create_dir(&locked).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).unwrap();
    // Root writes anywhere; /sys refuses even root.
    let writable = fs::write(locked.join("probe"), b"").is_ok();
    let (file, nested) = if writable {
        (PathBuf::from("/sys/stallscope-test.db"), PathBuf::from("/sys/stallscope-test/runs.db"))
    } else {
        (locked.join("runs.db"), locked.join("sub/runs.db"))
    };
    for path in [&file, &nested] {
        let err = Store::open(path).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, StoreError::ReadOnly { .. } | StoreError::CreateDir { .. }), "{err:?}");
        let shown = if path == &nested { path.parent().unwrap() } else { path.as_path() };
        assert!(message.contains(&shown.display().to_string()), "{message}");
    }
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
}

fn set_owner(path: &Path, run: i64, pid: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute("UPDATE runs SET pid = ?1 WHERE id = ?2", [pid, run]).unwrap();
}

#[test]
fn runs_of_dead_processes_are_marked_interrupted_on_open() {
    let dir = TempDir::new("interrupted");
    let path = dir.join("runs.db");
    let mut store = Store::open(&path).unwrap();
    let dead = store.begin_run(&start("dead")).unwrap();
    let alive = store.begin_run(&start("alive")).unwrap();
    let events = [
        at(1_000, 0, 1, EventKind::CallStarted { target: Target::new("sim", "m"), context_tokens: None }),
        at(3_000_000_000, 0, 1, EventKind::Finished { outcome: Outcome::Ok, attempts: 1, stop_reason: None }),
        at(2_000, 1, 1, EventKind::CallStarted { target: Target::new("sim", "m"), context_tokens: None }),
    ];
    store.append_events(dead, &events).unwrap();
    drop(store);
    set_owner(&path, dead, 99_999_999);

    let store = Store::open(&path).unwrap();
    let runs = store.list_runs().unwrap();
    let dead_run = runs.iter().find(|r| r.id == dead).unwrap();
    let alive_run = runs.iter().find(|r| r.id == alive).unwrap();
    assert_eq!(dead_run.status, RunStatus::Interrupted);
    assert_eq!(alive_run.status, RunStatus::Running, "this process is still alive");
    assert_eq!(dead_run.ended_at_ms, Some(dead_run.started_at_ms + 3_000));
    assert_eq!(dead_run.outcomes.ok, 1, "counted from the recorded Finished events");
    assert_eq!(dead_run.p50_ms, Some(2999.999));
    assert_eq!(store.events(dead, 0).unwrap(), events[..2]);
}

#[test]
fn the_recorder_stores_events_and_the_report() {
    let dir = TempDir::new("recorder");
    let path = dir.join("nested/dir/runs.db");
    let (sink, handle) = Recorder::start(&path, start("recorded")).unwrap();
    let run = handle.run_id();
    let events: Vec<Event> =
        (0..5_000u64).map(|i| at(i * 1_000, i % 10, 1, EventKind::ChunkReceived { bytes: i as usize })).collect();
    for event in &events {
        sink.emit(event.clone());
    }
    handle.flush().unwrap();
    let reader = Store::open(&path).unwrap();
    assert_eq!(reader.events(run, 3).unwrap().len(), 500, "flushed events are visible to other connections");
    let dropped = handle.finish(&report()).unwrap();
    assert_eq!(dropped, 0);
    let mut expected = report();
    expected.run_id = Some(run);
    assert_eq!(reader.run_report(run).unwrap(), Some(expected));
    assert_eq!(reader.run_events(run).unwrap(), events);
    let summary = &reader.list_runs().unwrap()[0];
    assert_eq!((summary.status, summary.events, summary.dropped_events), (RunStatus::Completed, 5_000, 0));
    // After finish the sink drops (and counts) instead of failing.
    sink.emit(events[0].clone());
    assert_eq!(sink.dropped(), 1);
}

#[test]
fn dropping_the_handle_keeps_queued_events_and_the_run_running() {
    let dir = TempDir::new("dropped-handle");
    let path = dir.join("runs.db");
    let options = RecorderOptions { flush_interval: Duration::from_secs(60), ..RecorderOptions::default() };
    let (sink, handle) = Recorder::start_with(&path, start("crash"), options).unwrap();
    let run = handle.run_id();
    for i in 0..100 {
        sink.emit(at(i, 0, 1, EventKind::ChunkReceived { bytes: 1 }));
    }
    drop(handle);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.events(run, 0).unwrap().len(), 100);
    assert_eq!(store.list_runs().unwrap()[0].status, RunStatus::Running);
    drop(store);
    // Once its process is gone, the next open marks it interrupted.
    set_owner(&path, run, 99_999_999);
    assert_eq!(Store::open(&path).unwrap().list_runs().unwrap()[0].status, RunStatus::Interrupted);
}

#[test]
fn a_flood_is_counted_as_drops_and_never_blocks_the_stream() {
    let dir = TempDir::new("flood");
    let path = dir.join("runs.db");
    let options = RecorderOptions {
        capacity: 4,
        flush_interval: Duration::from_millis(10),
        batch_events: 8,
        ..RecorderOptions::default()
    };
    let (sink, handle) = Recorder::start_with(&path, start("flood"), options).unwrap();
    let run = handle.run_id();
    // Another connection holds the write lock: the writer stalls on its
    // first commit, as it would behind a slow disk.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let emitted = 20_000u64;
    let started = Instant::now();
    for i in 0..emitted {
        sink.emit(at(i, i % 4, 1, EventKind::ChunkReceived { bytes: 100 }));
    }
    let took = started.elapsed();
    blocker.execute_batch("ROLLBACK").unwrap();
    assert!(took < Duration::from_secs(1), "emitting {emitted} events took {took:?}: the sink blocked");
    let dropped = handle.finish(&report()).unwrap();
    assert!(dropped > emitted / 2, "only {dropped} dropped");
    let store = Store::open(&path).unwrap();
    let stored: usize = (0..4).map(|s| store.events(run, s).unwrap().len()).sum();
    assert_eq!(stored as u64 + dropped, emitted, "every event is either stored or counted");
    let summary = &store.list_runs().unwrap()[0];
    assert_eq!((summary.dropped_events, summary.events), (dropped, stored as u64));
    // Counted per stream too, and the streams add up to the run.
    let record = store.run(run).unwrap().unwrap();
    for (stream, lost) in &record.dropped_by_stream {
        let kept = store.events(run, *stream).unwrap().len() as u64;
        assert_eq!(kept + lost, emitted / 4, "stream {stream}");
    }
    assert_eq!(record.dropped_by_stream.values().sum::<u64>(), dropped);
}

fn raw_body(len: usize) -> EventKind {
    let bytes = b"data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"abc\"}}\n\n".iter().copied().cycle();
    EventKind::BodyRecorded { body: RecordedBody::Raw { bytes: bytes.take(len).collect(), truncated: false } }
}

/// Bodies can never pin more memory than the budget: one that would take
/// the bytes waiting over it is dropped and counted, never waited for.
#[test]
fn bodies_over_the_budget_are_dropped_and_counted_never_waited_for() {
    let dir = TempDir::new("body-budget");
    let path = dir.join("runs.db");
    let options = RecorderOptions { body_budget: 100_000, ..RecorderOptions::default() };
    let (sink, handle) = Recorder::start_with(&path, start("bodies"), options).unwrap();
    let run = handle.run_id();
    // The writer cannot commit, so no body's bytes are released meanwhile.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    for stream in 0..10u64 {
        sink.emit(at(stream, stream, 1, EventKind::ChunkReceived { bytes: 30_000 }));
        sink.emit(at(stream + 1, stream, 1, raw_body(30_000)));
    }
    let took = started.elapsed();
    blocker.execute_batch("ROLLBACK").unwrap();
    assert!(took < Duration::from_secs(1), "emitting took {took:?}: the sink waited");
    assert_eq!((sink.dropped(), sink.dropped_bodies()), (7, 7), "three bodies of 30 kB fit 100 kB");
    // A flush writes the counts, per stream too: a crash after it keeps them.
    handle.flush().unwrap();
    let store = Store::open(&path).unwrap();
    let lost: BTreeMap<u64, u64> = (3..10).map(|s| (s, 1)).collect();
    assert_eq!(store.run(run).unwrap().unwrap().dropped_by_stream, lost);
    assert_eq!(handle.finish(&report()).unwrap(), 7);
    let record = store.run(run).unwrap().unwrap();
    assert_eq!((record.summary.dropped_events, record.summary.dropped_bodies), (7, 7));
    assert_eq!(record.dropped_by_stream, lost);
    for stream in 0..3 {
        assert_eq!(store.events(run, stream).unwrap()[1].kind, raw_body(30_000));
    }
    // Once committed, bodies no longer count against the budget.
    let options = RecorderOptions { body_budget: 100_000, ..RecorderOptions::default() };
    let (sink, handle) = Recorder::start_with(&path, start("bodies"), options).unwrap();
    for stream in 0..10u64 {
        sink.emit(at(1, stream, 1, raw_body(30_000)));
        handle.flush().unwrap();
    }
    assert_eq!(handle.finish(&report()).unwrap(), 0);
}

/// Bodies waiting use up the budget, so the writer commits them once half
/// of it is used rather than at the next flush.
#[test]
fn bodies_are_committed_early_once_half_the_budget_waits() {
    let dir = TempDir::new("body-early");
    let path = dir.join("runs.db");
    let options =
        RecorderOptions { body_budget: 100_000, flush_interval: Duration::from_secs(60), ..RecorderOptions::default() };
    let (sink, handle) = Recorder::start_with(&path, start("early"), options).unwrap();
    let run = handle.run_id();
    let reader = Store::open(&path).unwrap();
    for pair in 0..5u64 {
        // Two bodies of 30 kB: 60 kB waiting, over half the budget.
        sink.emit(at(1, pair, 1, raw_body(30_000)));
        sink.emit(at(2, pair, 1, raw_body(30_000)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while reader.events(run, pair).unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "pair {pair} was not committed before the flush interval");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(handle.finish(&report()).unwrap(), 0);
}

#[test]
fn bodies_are_stored_apart_compressed_and_read_back_in_their_place() {
    let dir = TempDir::new("bodies");
    let path = dir.join("runs.db");
    let mut store = Store::open(&path).unwrap();
    let run = store.begin_run(&start("bodies")).unwrap();
    let t = Target::new("sim", "m");
    let text = EventKind::BodyRecorded {
        body: RecordedBody::Text { texts: vec!["Hello".into(), String::new(), " world".into()], truncated: true },
    };
    let events = vec![
        at(1, 0, 1, EventKind::AttemptStarted { target: t.clone(), credential: None }),
        at(2, 0, 1, EventKind::ChunkReceived { bytes: 65_536 }),
        at(
            3,
            0,
            1,
            EventKind::AttemptEnded { end: AttemptEnd::Transport { kind: TransportKind::Reset }, stop_reason: None },
        ),
        // Same instant: the order written is the order read.
        at(3, 0, 1, raw_body(65_536)),
        at(3, 0, 1, EventKind::ChunkReceived { bytes: 1 }),
        at(4, 0, 2, EventKind::AttemptStarted { target: t, credential: None }),
        at(5, 0, 2, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) }),
        at(5, 0, 2, text),
    ];
    store.append_events(run, &events).unwrap();
    assert_eq!(store.events(run, 0).unwrap(), events);
    assert_eq!(store.run_events(run).unwrap(), events);
    assert_eq!(store.list_runs().unwrap()[0].events, events.len() as u64);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let rows: Vec<(i64, String, i64, i64, i64)> = conn
        .prepare("SELECT attempt, mode, truncated, length, length(data) FROM bodies ORDER BY attempt")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].0, rows[0].1.as_str(), rows[0].2, rows[0].3), (1, "raw", 0, 65_536));
    assert!(rows[0].4 < 65_536 / 10, "raw body stored in {} bytes", rows[0].4);
    assert_eq!((rows[1].0, rows[1].1.as_str(), rows[1].2), (2, "text", 1));
    let in_events: i64 = conn.query_row("SELECT max(length(detail)) FROM events", [], |r| r.get(0)).unwrap();
    assert!(in_events < 100, "a body leaked into the events table ({in_events} bytes)");
    assert!(store.delete_run(run).unwrap());
    let left: i64 = conn.query_row("SELECT count(*) FROM bodies", [], |r| r.get(0)).unwrap();
    assert_eq!(left, 0, "deleting the run deletes its bodies");
}

/// The `attempts` table says how and when each attempt ended; events
/// between attempts (attempt 0) never make a row.
#[test]
fn attempt_rows_say_how_attempts_ended_and_attempt_zero_has_none() {
    let dir = TempDir::new("attempt-ends");
    let path = dir.join("runs.db");
    let mut store = Store::open(&path).unwrap();
    let run = store.begin_run(&start("ends")).unwrap();
    let t = Target::new("sim", "m");
    let classified = EventKind::ErrorClassified {
        category: Category::RateLimit,
        timer: None,
        status: None,
        retryable: true,
        rule: "every key rests".into(),
        message: "no key".into(),
    };
    let events = [
        at(1, 0, 1, EventKind::AttemptStarted { target: t.clone(), credential: Some(0) }),
        at(2, 0, 1, EventKind::HeadersReceived { status: 429, content_type: None }),
        at(3, 0, 1, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 429 }, stop_reason: None }),
        at(4, 1, 0, EventKind::AttemptStarted { target: t, credential: None }),
        at(5, 1, 0, classified),
        at(6, 1, 0, EventKind::AttemptEnded { end: AttemptEnd::Cancelled, stop_reason: None }),
    ];
    store.append_events(run, &events).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    /// stream, attempt, ended_ns, end_code, end_value
    type Ended = (i64, i64, Option<i64>, Option<i64>, Option<i64>);
    let rows: Vec<Ended> = conn
        .prepare("SELECT stream, attempt, ended_ns, end_code, end_value FROM attempts ORDER BY stream")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [(0, 1, Some(3), Some(3), Some(429))], "end code 3 is `status`");
    assert_eq!(store.events(run, 1).unwrap(), events[3..], "attempt-0 events are still recorded");
}

fn meta() -> RunMeta {
    RunMeta {
        requests: 40,
        concurrency: 8,
        seed: u64::MAX - 5,
        epoch_unix_ns: 1_795_982_918_799_123_456,
        rules: serde_json::json!([{"match": {"status": 529}, "category": "overloaded"}]),
        pools: BTreeMap::from([("anthropic".to_owned(), 3)]),
    }
}

#[test]
fn run_meta_is_stored_and_a_run_without_it_says_what_replay_lacks() {
    let mut store = Store::open_in_memory().unwrap();
    let full = store.begin_run(&start("full").with_meta(meta())).unwrap();
    let bare = store.begin_run(&start("bare")).unwrap();
    let record = store.run(full).unwrap().unwrap();
    assert_eq!(record.meta, Some(meta()));
    assert_eq!(record.recorded_schema, SCHEMA_VERSION);
    assert!(record.lacks().is_empty() && record.replay_note().is_none(), "{:?}", record.lacks());
    let record = store.run(bare).unwrap().unwrap();
    assert_eq!(record.meta, None);
    assert_eq!(
        record.replay_note().unwrap(),
        format!(
            "run {bare} was recorded without its seed, its wall clock, its rules or its key pools: \
             replay cannot reproduce its decisions"
        )
    );
}

/// A stored snapshot rebuilds the tunables the run had: the same values,
/// exactly, and the same sources.
#[test]
fn a_stored_tunables_snapshot_rebuilds_the_run_tunables() {
    let mut tunables = Tunables::defaults();
    // serde_json's default parser reads this value one ulp off.
    tunables.apply_override("SSE_IDLE_TIMEOUT_S=1000.1407407394599").unwrap();
    tunables.apply_override("TCP_KEEPCNT=3").unwrap();
    assert_eq!(tunables.get("STALLSCOPE_TCP_KEEPCNT").value, Tunables::defaults().get("STALLSCOPE_TCP_KEEPCNT").value);
    let mut store = Store::open_in_memory().unwrap();
    let run = store.begin_run(&RunStart::new(None, None, &tunables, &[])).unwrap();
    let record = store.run(run).unwrap().unwrap();
    assert_eq!(Tunables::from_snapshot(&record.tunables).unwrap(), tunables);
}

/// The issue's check, at the store: a recorded `retry-after-ms` header
/// shows in `export --format jsonl`; bodies only with `--bodies`.
#[test]
fn export_shows_response_headers_and_bodies_only_on_request() {
    let dir = TempDir::new("export-headers");
    let path = dir.join("runs.db");
    let mut store = Store::open(&path).unwrap();
    let run = store.begin_run(&start("headers").with_meta(meta())).unwrap();
    let headers =
        vec![("retry-after-ms".to_owned(), "700".to_owned()), ("x-should-retry".to_owned(), "true".to_owned())];
    let events = [
        at(1, 0, 1, EventKind::HeadersReceived { status: 429, content_type: Some("application/json".into()) }),
        at(1, 0, 1, EventKind::ResponseHeaders { headers: headers.clone() }),
        at(2, 0, 1, EventKind::AttemptEnded { end: AttemptEnd::Status { status: 429 }, stop_reason: None }),
        at(2, 0, 1, raw_body(1000)),
    ];
    store.append_events(run, &events).unwrap();
    drop(store);
    let export = |extra: &[&str]| {
        let mut args = vec!["export", "--format", "jsonl", "--db", path.to_str().unwrap()];
        let id = run.to_string();
        args.push(&id);
        args.extend(extra);
        cli(&args)
    };
    let (lines, note) = export(&[]);
    assert!(note.is_empty(), "a full recording needs no note: {note}");
    let exported = exported_events(&lines);
    assert_eq!(exported, events[..3]);
    assert!(lines.contains(r#"["retry-after-ms","700"]"#), "{lines}");
    let (lines, _) = export(&["--bodies"]);
    let exported = exported_events(&lines);
    assert_eq!(exported, events);
}

/// The events of a JSON-lines export (the lines with a `kind`; the
/// verdicts that follow them have none).
fn exported_events(lines: &str) -> Vec<Event> {
    lines
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).unwrap().get("kind").is_some())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs the real binary with no inherited configuration; returns stdout
/// and stderr, failing the test when it fails.
fn cli(args: &[&str]) -> (String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "stallscope {args:?}: {stderr}");
    (String::from_utf8(output.stdout).unwrap(), stderr)
}

/// A database as stallscope wrote it before schema 2: only the first
/// migration, and a run with its events and report written as that
/// version wrote them.
fn schema_1_database(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(include_str!("../src/store/sql/0001_init.sql")).unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    let tunables = serde_json::Value::Object(Tunables::defaults().sourced_snapshot());
    let mut old_report = report();
    old_report.run_id = Some(1);
    conn.execute(
        "INSERT INTO runs (id, started_at, ended_at, status, label, scenario, pid, pid_start, tunables, providers, \
         report, events, ok, partial, failed, cancelled, p50_ms, p99_ms, retries, elapsed_ms) \
         VALUES (1, 1795982918799, 1795982920000, 'completed', 'old', 'stall_midstream', 1, NULL, ?1, \
         '[{\"name\":\"sim\"}]', ?2, 4, 2, 0, 1, 0, 3000.5, 55794.5, 3, 49799.4)",
        [tunables.to_string(), serde_json::to_string(&old_report).unwrap()],
    )
    .unwrap();
    conn.execute_batch(
        "INSERT INTO events (run_id, stream, attempt, at_ns, kind, n, code, value, aux, detail, packed) VALUES
           (1, 0, 1, 1000, 1, 1, NULL, NULL, NULL, '[\"sim\",\"sim-model-a\"]', NULL),
           (1, 0, 1, 2000, 2, 1, NULL, 0, NULL, '[\"sim\",\"sim-model-a\"]', NULL),
           (1, 0, 1, 3000, 4, 1, NULL, 200, NULL, '\"text/event-stream\"', NULL),
           (1, 0, 1, 9000, 19, 1, 0, 1, NULL, '\"stop\"', NULL);
         INSERT INTO streams (run_id, stream, provider, model, started_ns, ended_ns, outcome, attempts)
           VALUES (1, 0, 'sim', 'sim-model-a', 1000, 9000, 'ok', 1);
         INSERT INTO attempts (run_id, stream, attempt, provider, model, credential, started_ns, status)
           VALUES (1, 0, 1, 'sim', 'sim-model-a', 0, 2000, 200);",
    )
    .unwrap();
    1
}

/// Old databases open and migrate; their runs still list, show and
/// export, and say what they lack.
#[test]
fn a_schema_1_database_migrates_and_its_runs_list_show_export_and_say_what_they_lack() {
    let dir = TempDir::new("schema-1");
    let path = dir.join("old.db");
    let run = schema_1_database(&path);
    let store = Store::open(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let runs = store.list_runs().unwrap();
    assert_eq!((runs.len(), runs[0].status, runs[0].dropped_bodies), (1, RunStatus::Completed, 0));
    let record = store.run(run).unwrap().unwrap();
    assert_eq!((record.meta.as_ref(), record.recorded_schema), (None, 1));
    assert!(record.lacks().contains(&"response headers") && record.lacks().contains(&"its seed"));
    let events = store.events(run, 0).unwrap();
    assert_eq!(events.len(), 4);
    assert_eq!(
        events[3].kind,
        EventKind::Finished { outcome: Outcome::Ok, attempts: 1, stop_reason: Some("stop".into()) }
    );
    drop(store);

    let db = path.to_str().unwrap();
    let note = "run 1 was recorded by an older stallscope without its seed, its wall clock, its rules, its key pools, \
                response headers, how attempts ended or dropped events per stream: replay cannot reproduce its decisions";
    let (listed, _) = cli(&["runs", "--db", db, "list"]);
    assert!(listed.contains("stall_midstream") && listed.contains("old"), "{listed}");
    let (shown, _) = cli(&["runs", "--db", db, "show", "1"]);
    assert!(shown.contains("sim/sim-model-a"), "{shown}");
    assert!(shown.contains("dropped: 0 events"), "{shown}");
    assert!(shown.contains(note), "{shown}");
    let (lines, stderr) = cli(&["export", "--db", db, "1", "--format", "jsonl"]);
    let exported = exported_events(&lines);
    assert_eq!(exported, events);
    assert!(stderr.contains(note), "{stderr}");
    let (trace, _) = cli(&["export", "--db", db, "1", "--format", "chrome-trace"]);
    let trace: serde_json::Value = serde_json::from_str(&trace).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().iter().any(|e| e["name"] == "finished: ok"));
    // What-if refuses to invent what the run never recorded, saying why.
    let whatif = std::process::Command::new(env!("CARGO_BIN_EXE_stallscope"))
        .env_clear()
        .env("HOME", "/nonexistent")
        .args(["whatif", "1", "--db", db])
        .output()
        .unwrap();
    assert!(!whatif.status.success());
    assert!(String::from_utf8_lossy(&whatif.stderr).contains(note), "{}", String::from_utf8_lossy(&whatif.stderr));
}

/// `runs show` prints what the run was recorded with and what it lost.
#[test]
fn runs_show_prints_the_run_meta_and_its_drops() {
    let dir = TempDir::new("show-meta");
    let path = dir.join("runs.db");
    let (sink, handle) = Recorder::start(&path, start("meta").with_meta(meta())).unwrap();
    let run = handle.run_id();
    sink.emit(at(1, 0, 1, EventKind::ChunkReceived { bytes: 1 }));
    handle.finish(&report()).unwrap();
    // As a recorder that fell behind would have left it.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "UPDATE runs SET dropped_events = 5, dropped_bodies = 1;
         INSERT INTO streams (run_id, stream, dropped_events) VALUES (1, 2, 4), (1, 7, 1)
           ON CONFLICT DO UPDATE SET dropped_events = excluded.dropped_events;",
    )
    .unwrap();
    let (shown, _) = cli(&["runs", "--db", path.to_str().unwrap(), "show", &run.to_string()]);
    assert!(
        shown.contains(&format!(
            "recorded: 40 calls, concurrency 8, seed {}, clock at start 2026-11-29 20:08:38.799 UTC, keys per pool: anthropic 3\n",
            u64::MAX - 5
        )),
        "{shown}"
    );
    assert!(shown.contains("dropped: 5 events (1 of them bodies); by stream 2: 4, 7: 1\n"), "{shown}");
    assert!(!shown.contains("replay cannot"), "{shown}");
}

#[test]
fn secrets_never_reach_the_database() {
    let dir = TempDir::new("secrets");
    let path = dir.join("runs.db");
    let provider = ProviderConfig {
        api_key_env: Some("STALLSCOPE_TEST_KEY_VAR".into()),
        api_key_envs: vec!["STALLSCOPE_TEST_KEY_TWO".into()],
        proxy: Some("http://proxyuser:proxy-s3cret@proxy:3128".into()),
        headers: BTreeMap::from([("x-api-key".to_owned(), "sk-header-s3cret".to_owned())]),
        ..ProviderConfig::at_root(
            "openai",
            Dialect::OpenAiChat,
            "https://u:url-s3cret@api.example.com/?key=q-s3cret",
            "m",
        )
    };
    let mut tunables = Tunables::defaults();
    tunables.apply_override("PROXY=http://user:tunable-s3cret@proxy:3128").unwrap();
    let start = RunStart::new(None, None, &tunables, &[provider]);
    let mut store = Store::open(&path).unwrap();
    let run = store.begin_run(&start).unwrap();
    store.finish_run(run, &report(), 0).unwrap();
    let record = store.run(run).unwrap().unwrap();
    drop(store);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend(fs::read(dir.join("runs.db-wal")).unwrap_or_default());
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains("s3cret"), "a secret is in the database file");
    assert!(text.contains("STALLSCOPE_TEST_KEY_VAR") && text.contains("STALLSCOPE_TEST_KEY_TWO"));
    let row = &record.providers[0];
    assert_eq!(row["api_key_env"], "STALLSCOPE_TEST_KEY_VAR");
    assert_eq!(row["headers"]["x-api-key"], "***");
    // Passwords and queries are masked; user names are kept (issue 32).
    assert_eq!(row["base_url"], "https://u:***@api.example.com/?***");
    assert_eq!(row["proxy"], "http://proxyuser:***@proxy:3128");
}

/// CPU time (user + system) of this process so far (Linux).
fn cpu_time() -> Duration {
    let stat = fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10)
}

/// Emits `total` events over `streams` streams at `rate` events/s (paced
/// in 1 ms steps); returns (wall time including finish, ns per emit, dropped).
fn paced(path: &Path, streams: u64, rate: u64, total: u64) -> (Duration, f64, u64, i64) {
    let (sink, handle) = Recorder::start(path, start("ingest")).unwrap();
    let run = handle.run_id();
    let per_ms = (rate / 1_000).max(1);
    let started = Instant::now();
    let mut emitting = Duration::ZERO;
    let mut i = 0u64;
    while i < total {
        let t = Instant::now();
        for _ in 0..per_ms.min(total - i) {
            let kind = if i.is_multiple_of(2) {
                EventKind::ChunkReceived { bytes: 100 + (i % 50) as usize }
            } else {
                EventKind::SseReceived { class: EventClass::Content, chars: 4, progress: true }
            };
            sink.emit(at(i * 1_000, i % streams, 1, kind));
            i += 1;
        }
        emitting += t.elapsed();
        let due = Duration::from_micros(i * 1_000_000 / rate);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    let dropped = handle.finish(&report()).unwrap();
    (started.elapsed(), emitting.as_nanos() as f64 / total as f64, dropped, run)
}

/// Records `attempts` attempts of `body_len` bytes of SSE text each, as
/// fast as they can be emitted, into a channel that holds them all (so the
/// time is the writer's): per attempt its start, 4 KiB chunks, one SSE
/// event per event of the text, its end and, when `bodies`, its raw body.
/// Returns (wall time including finish, events, body bytes, dropped, run).
fn attempts_with_bodies(path: &Path, attempts: u64, body_len: usize, bodies: bool) -> (Duration, u64, u64, u64, i64) {
    // Deltas of varied words, as a model writes them.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut body = Vec::with_capacity(body_len + 256);
    let mut sse = 0;
    while body.len() < body_len {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let word: String = (0..2 + (seed >> 60)).map(|i| (b'a' + ((seed >> (i * 5)) % 26) as u8) as char).collect();
        body.extend_from_slice(
            format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{word} \"}}}}]}}\n\n").as_bytes(),
        );
        sse += 1;
    }
    body.truncate(body_len);
    let options = RecorderOptions { capacity: 1 << 20, ..RecorderOptions::default() };
    let (sink, handle) = Recorder::start_with(path, start("bodies"), options).unwrap();
    let run = handle.run_id();
    let target = Target::new("sim", "m");
    let started = Instant::now();
    let (mut events, mut body_bytes, mut t) = (0u64, 0u64, 0u64);
    let mut emit = |stream: u64, kind: EventKind| {
        t += 1_000;
        sink.emit(at(t, stream, 1, kind));
        events += 1;
    };
    for stream in 0..attempts {
        emit(stream, EventKind::AttemptStarted { target: target.clone(), credential: None });
        for chunk in body.chunks(4096) {
            emit(stream, EventKind::ChunkReceived { bytes: chunk.len() });
        }
        for _ in 0..sse {
            emit(stream, EventKind::SseReceived { class: EventClass::Content, chars: 6, progress: true });
        }
        emit(stream, EventKind::AttemptEnded { end: AttemptEnd::Done, stop_reason: Some("stop".into()) });
        if bodies {
            emit(stream, EventKind::BodyRecorded { body: RecordedBody::Raw { bytes: body.clone(), truncated: false } });
            body_bytes += body.len() as u64;
        }
    }
    let dropped = handle.finish(&report()).unwrap();
    (started.elapsed(), events, body_bytes, dropped, run)
}

/// Figures for the issue's measurements (not a pass/fail test): run with
/// `cargo test --release --test store -- --ignored --nocapture figures`.
#[test]
#[ignore = "a measurement; run in release"]
fn figures() {
    let dir = TempDir::new("figures");
    let path = dir.join("runs.db");
    for streams in [1u64, 1_000] {
        for rate in [1_000_000u64, 2_000_000, 4_000_000] {
            let total = rate * 2;
            let (took, emit_ns, dropped, run) = paced(&path, streams, rate, total);
            println!(
                "ingest {streams} stream(s) at {rate}/s: {total} events in {took:?}, emit {emit_ns:.0} ns/event, dropped {dropped}"
            );
            if streams == 1 && rate == 1_000_000 {
                let store = Store::open(&path).unwrap();
                for _ in 0..3 {
                    let t = Instant::now();
                    let events = store.events(run, 0).unwrap();
                    println!("load one stream: {} events in {:?}", events.len(), t.elapsed());
                }
            }
        }
    }
    for bodies in [false, true] {
        let (took, events, body_bytes, dropped, run) = attempts_with_bodies(&path, 100, 64 << 10, bodies);
        let secs = took.as_secs_f64();
        let mode = if bodies { "raw" } else { "off" };
        let mut line = format!(
            "RECORD_BODIES={mode}: 100 attempts x 64 KiB of SSE, {events} events in {took:?} ({:.2} M events/s",
            events as f64 / secs / 1e6
        );
        if bodies {
            let conn = rusqlite::Connection::open(&path).unwrap();
            let (length, stored): (i64, i64) = conn
                .query_row("SELECT sum(length), sum(length(data)) FROM bodies WHERE run_id = ?1", [run], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap();
            line.push_str(&format!(
                ", bodies {:.1} MB/s, stored {:.1}x smaller",
                body_bytes as f64 / secs / 1e6,
                length as f64 / stored as f64
            ));
        }
        println!("{line}), dropped {dropped}");
    }
    let cpu = cpu_time();
    let (took, _, dropped, _) = paced(&path, 1_000, 20_000, 100_000);
    let used = cpu_time() - cpu;
    println!(
        "1000 streams x 20 events/s for {took:?}: recorder + emitter CPU {used:?} ({:.3} core), dropped {dropped}",
        used.as_secs_f64() / took.as_secs_f64()
    );
}

/// The app's "all failure stories" starts a recorder per scenario at once:
/// a fresh database opened by many threads together must come up once,
/// with every run recorded.
#[test]
fn many_recorders_can_start_on_a_fresh_database_at_once() {
    let dir = TempDir::new("fresh-race");
    let path = dir.join("runs.db");
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let (sink, handle) = Recorder::start(&path, start(&format!("racer {i}")))?;
                sink.emit(at(1, 0, 1, EventKind::ChunkReceived { bytes: 1 }));
                handle.finish(&report()).map(|_| ())
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap().unwrap();
    }
    assert_eq!(Store::open(&path).unwrap().list_runs().unwrap().len(), 16);
}
