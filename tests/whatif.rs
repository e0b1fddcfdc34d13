//! What-if on real recordings: each built-in scenario is run through the
//! real HTTP stack and recorded, then replayed through the core in virtual
//! time — unchanged (the null test: it must reproduce the recording) and
//! under changed tunables (it must show what the change would do, and say
//! where it had to assume).

mod recorded;

use std::sync::Arc;
use std::time::Duration;

use recorded::{record, record_with_lag};
use stallscope::core::category::TimerKind;
use stallscope::core::event::{EventKind, VecSink};
use stallscope::diagnosis::{CourseOutcome, StreamCourse, VerdictKind};
use stallscope::providers::Dialect;
use stallscope::replay::recording::Recording;
use stallscope::replay::upstream::{Assumptions, StallAssumption};
use stallscope::replay::whatif::{
    FIDELITY_TOLERANCE, Fidelity, WhatIf, WhatIfError, WhatIfReport, what_if, what_if_until, what_if_watched,
};
use stallscope::sim::builtin_names;
use stallscope::tunables::Tunables;

fn whatif(recording: &Recording, sets: &[&str], assumptions: Assumptions) -> WhatIfReport {
    let whatif = WhatIf { overrides: sets.iter().map(|s| (*s).to_owned()).collect(), assumptions, verdicts: true };
    what_if(recording, &whatif).unwrap()
}

/// With the recorded tunables and seed, what-if reproduces the recording:
/// the same outcomes, attempts, hops and categories, and every timer fires
/// within 5 ms of when it fired live (beyond the lag our own runtime
/// recorded at that moment), and every stream's verdict is the one its
/// recording got — for every built-in scenario in every dialect.
///
/// A live run during which our own runtime lagged past that tolerance is
/// no reference (a timer it fired late may have lost a race the replay's
/// on-time timer wins): such a recording that does not replay is made
/// again, up to three times, and only a calm recording's difference fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_tunables_reproduce_every_recorded_scenario() {
    // Each scenario in each dialect, with bodies recorded not at all, as
    // text or raw in turn, so every scenario and every dialect meets every
    // mode (review D1: with bodies recorded, an error body replayed as
    // filler; D2: a raw body cut short replayed as a broken stream).
    const BODIES: [&str; 3] = ["RECORD_BODIES=off", "RECORD_BODIES=text", "RECORD_BODIES=raw"];
    let runs: Vec<(&str, Dialect, &str)> = builtin_names()
        .iter()
        .enumerate()
        .flat_map(|(i, name)| {
            Dialect::ALL.into_iter().enumerate().map(move |(j, dialect)| (*name, dialect, BODIES[(i + j) % 3]))
        })
        .collect();
    let recordings = futures_util::future::join_all(
        runs.iter().map(|&(name, dialect, bodies)| async move { record_with_lag(name, dialect, &[bodies]).await }),
    )
    .await;
    let (mut failures, mut unjudged) = (Vec::new(), Vec::new());
    for (&(name, dialect, bodies), (mut recording, mut lag)) in runs.iter().zip(recordings) {
        let mut tries = 1;
        let differences = loop {
            let differences = differences(&recording);
            if differences.is_empty() || lag <= FIDELITY_TOLERANCE || tries == 3 {
                break differences;
            }
            (recording, lag) = record_with_lag(name, dialect, &[bodies]).await;
            tries += 1;
        };
        let what = format!("{name} ({}, {bodies})", dialect.name());
        match (differences.is_empty(), lag <= FIDELITY_TOLERANCE) {
            (true, _) => {}
            (false, true) => failures.push(format!("{what}:\n{}", differences.join("\n"))),
            (false, false) => unjudged.push(format!("{what}: our own runtime lagged up to {lag:?}")),
        }
    }
    if !unjudged.is_empty() {
        eprintln!("not judged, every recording lagged: {}", unjudged.join("; "));
    }
    assert!(failures.is_empty(), "{} recordings not reproduced:\n{}", failures.len(), failures.join("\n"));
    assert!(unjudged.len() * 4 <= runs.len(), "too many recordings lagged to judge: {}", unjudged.join("; "));
}

/// How the null what-if of `recording` differs from it, in words.
fn differences(recording: &Recording) -> Vec<String> {
    let mut differences = Vec::new();
    // Diagnosed from the replay's events, each stream gets the verdict its
    // recording got.
    let unchanged = whatif(recording, &[], Assumptions::default());
    for stream in &unchanged.streams {
        let verdict = stream.verdict.as_ref().unwrap();
        let (before, after) = (&verdict.before, &verdict.after);
        if (before.kind, before.severity) != (after.kind, after.severity) {
            differences.push(format!(
                "stream {}: verdict {} ({}) replays as {} ({}): {}",
                stream.stream,
                before.kind,
                before.severity.name(),
                after.kind,
                after.severity.name(),
                after.summary
            ));
        }
    }
    let s = &unchanged.summary;
    if s.sooner + s.later > 0 {
        differences.push(format!("unchanged, {}", s.sooner_words()));
    }
    let fidelity = Fidelity::of(&unchanged);
    if !fidelity.is_exact() {
        let streams: Vec<String> = unchanged
            .streams
            .iter()
            .map(|s| format!("{:?}\n  → {:?}\n  {:?}", s.before, s.after, s.assumptions))
            .collect();
        differences.push(format!("{fidelity:?}\n{}", streams.join("\n")));
    }
    differences
}

/// The live runtime may be late to a call, or from a call to its first
/// attempt (a loaded machine, another task on the worker): that lateness
/// is its own, not a decision. The replay starts the call where its
/// recording did, and judges each timer from its attempt's start.
#[tokio::test]
async fn lateness_of_the_live_runtime_before_an_attempt_is_not_a_replay_difference() {
    let mut recording = record("silent-stall", Dialect::OpenAiChat, &[]).await;
    let (late_call, late_attempt) = (Duration::from_millis(40), Duration::from_millis(9));
    let stream = recording.streams.iter_mut().max_by_key(|s| s.started).unwrap();
    let late_id = stream.id;
    stream.started += late_call;
    stream.last_at += late_call + late_attempt;
    for attempt in &mut stream.attempts {
        attempt.started += late_call + late_attempt;
        attempt.response.iter_mut().for_each(|r| r.at += late_call + late_attempt);
        let mut chunks = attempt.chunks.to_vec();
        chunks.iter_mut().for_each(|c| c.at += late_call + late_attempt);
        attempt.chunks = chunks.into();
        attempt.ended.iter_mut().for_each(|(at, _)| *at += late_call + late_attempt);
    }
    stream.course.fired.iter_mut().for_each(|f| f.at_s += late_attempt.as_secs_f64());
    let recorded_start = stream.started;

    let sink = Arc::new(VecSink::new());
    let report = what_if_watched(&recording, &WhatIf::default(), Some(sink.clone())).unwrap();
    let fidelity = Fidelity::of(&report);
    assert!(fidelity.is_exact(), "{fidelity:?}");
    let replayed_start = sink
        .events()
        .into_iter()
        .find(|e| e.stream == late_id && matches!(e.kind, EventKind::CallStarted { .. }))
        .unwrap()
        .at;
    assert!(replayed_start.abs_diff(recorded_start) < Duration::from_millis(1), "{replayed_start:?}");
}

/// A lower idle timeout notices the silent stall sooner, by the difference.
#[tokio::test]
async fn a_lower_idle_timeout_detects_the_silent_stall_sooner() {
    let recording = record("silent-stall", Dialect::OpenAiChat, &[]).await;
    let report = whatif(&recording, &["SSE_IDLE_TIMEOUT_S=0.4"], Assumptions::default());
    for stream in &report.streams {
        let (before, after) = (&stream.before.fired[0], &stream.after.fired[0]);
        assert_eq!((before.timer, after.timer), (TimerKind::Idle, TimerKind::Idle));
        assert!((before.detected_after_s - 1.0).abs() < 0.01, "{before:?}");
        assert!((after.detected_after_s - 0.4).abs() < 0.005, "{after:?}");
        assert!((before.at_s - after.at_s - 0.6).abs() < 0.01, "{before:?} {after:?}");
        assert_eq!((stream.after.outcome, stream.changed), (CourseOutcome::Ok, false));
        assert!(stream.assumptions.is_empty());
        // Not a change of course, but the answer asked for: the stall is
        // caught, and the call ends, 0.6 s sooner.
        let sooner = stream.sooner_s.unwrap();
        assert!((sooner - 0.6).abs() < 0.01, "{stream:?}");
        assert!((stream.ended_sooner_s.unwrap() - 0.6).abs() < 0.02, "{stream:?}");
        // The verdict is the same pattern, caught by the shorter timer.
        let verdict = stream.verdict.as_ref().unwrap();
        assert_eq!((verdict.before.kind, verdict.after.kind), (VerdictKind::SilentStall, VerdictKind::SilentStall));
        let budgets = (verdict.before.basis.timer_budget_ms, verdict.after.basis.timer_budget_ms);
        assert_eq!(budgets, (Some(1000.0), Some(400.0)));
    }
    let s = &report.summary;
    assert_eq!((s.changed, s.sooner, s.later), (0, report.streams.len(), 0));
    let saved = 0.6 * report.streams.len() as f64;
    assert!((s.time_saved_s - saved).abs() < 0.02 * report.streams.len() as f64, "{s:?}");
    assert!(s.sooner_words().starts_with(&format!("{} caught or ended sooner (", s.sooner)), "{s:?}");
    let idle = report.timers.iter().find(|t| t.timer == TimerKind::Idle).unwrap();
    assert_eq!((idle.before.seconds, idle.after.seconds), (Some(1.0), Some(0.4)));
    assert_eq!(idle.after.source, "--set");
}

/// Keep-alives hide a hung model from the idle timer; only the data-stall
/// timer catches it. Raising the data-stall timeout past the recorded
/// stall keeps the stream alive to the end of its recording, and from
/// there its fate rests on what is assumed.
#[tokio::test]
async fn a_ping_flood_is_caught_by_data_stall_alone_and_a_longer_one_rests_on_an_assumption() {
    let recording = record("ping-flood-stall", Dialect::AnthropicMessages, &[]).await;
    let report = whatif(&recording, &["SSE_IDLE_TIMEOUT_S=0.3"], Assumptions::default());
    for stream in &report.streams {
        let fired: Vec<TimerKind> = stream.after.fired.iter().map(|f| f.timer).collect();
        assert_eq!(fired, [TimerKind::DataStall], "the idle timer never fires on keep-alives");
    }

    let longer = ["SSE_DATA_STALL_TIMEOUT_S=5"];
    let keepalives = Assumptions { stall: StallAssumption::Keepalives, ..Assumptions::default() };
    let report = whatif(&recording, &longer, keepalives);
    for stream in &report.streams {
        assert_eq!(stream.after.fired[0].timer, TimerKind::DataStall);
        assert!((stream.after.fired[0].detected_after_s - 5.0).abs() < 0.005, "{:?}", stream.after.fired);
        assert!(stream.assumptions.iter().any(|a| a.contains("keepalives")), "{:?}", stream.assumptions);
    }
    assert_eq!(report.summary.assumed, report.streams.len());

    let stop = Assumptions { stall: StallAssumption::Stop, ..Assumptions::default() };
    let report = whatif(&recording, &longer, stop);
    assert!(report.streams.iter().all(|s| s.after.outcome == CourseOutcome::Unknown));
    assert_eq!(report.summary.unknown, report.streams.len());
    // Its verdict says so too (gui review D6): the cancellation its replay
    // ended in was never the call's.
    for stream in &report.streams {
        let after = &stream.verdict.as_ref().unwrap().after;
        assert_eq!(after.kind, VerdictKind::Unknown, "{after:?}");
        assert!(after.summary.contains("outlived its recording"), "{}", after.summary);
    }
    let groups = &report.verdicts.as_ref().unwrap().after.groups;
    assert!(groups.iter().all(|g| g.kind == VerdictKind::Unknown), "{groups:?}");
}

/// Tightening the idle timeout below a buffering proxy's gap turns a
/// healthy stream into a false positive, and the report says so.
#[tokio::test]
async fn an_idle_timeout_below_a_buffered_gap_is_a_false_positive() {
    let recording = record("proxy-buffered", Dialect::OpenAiResponses, &[]).await;
    let report = whatif(&recording, &["SSE_IDLE_TIMEOUT_S=1"], Assumptions::default());
    assert!(report.changed);
    for stream in &report.streams {
        assert_eq!(stream.before.outcome, CourseOutcome::Ok);
        // The recorded attempt was healthy; the retries after it were never
        // recorded, so what they do rests on an assumption, said as such.
        let fp: Vec<(u32, TimerKind)> = stream.false_positives.iter().map(|f| (f.attempt, f.timer)).collect();
        assert_eq!(fp, [(1, TimerKind::Idle)], "{stream:?}");
        assert!(stream.assumptions.iter().any(|a| a.starts_with("attempt 2 was never recorded")), "{stream:?}");
    }
    assert_eq!(report.summary.false_positives, report.streams.len());
}

/// Review D1: with bodies recorded (as text or raw), an error body that a
/// built-in rule reads (`context_length_exceeded`: a context overflow, not
/// a plain invalid request) replays as recorded, and so classifies as it
/// did live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_error_body_classifies_in_replay_as_it_did_live() {
    for bodies in ["RECORD_BODIES=text", "RECORD_BODIES=raw"] {
        let recording = record("context-overflow", Dialect::OpenAiChat, &[bodies]).await;
        let report = whatif(&recording, &[], Assumptions::default());
        for stream in &report.streams {
            let verdict = stream.verdict.as_ref().unwrap();
            assert_eq!(verdict.before.kind, VerdictKind::ContextOverflow, "{bodies}: {:?}", verdict.before);
            assert_eq!(verdict.after.kind, verdict.before.kind, "{bodies}: {:?}", verdict.after);
        }
        assert!(Fidelity::of(&report).is_exact(), "{bodies}: {:?}", Fidelity::of(&report));
    }
}

/// Review D2: a raw body longer than RECORD_BODY_MAX_KB is recorded cut
/// short; its replay plays the recorded events, not the cut bytes padded
/// with spaces, so a stream that completed live completes in replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_body_cut_at_its_cap_replays_as_the_stream_it_was() {
    let recording = record("healthy", Dialect::AnthropicMessages, &["RECORD_BODIES=raw", "RECORD_BODY_MAX_KB=1"]).await;
    let cut = recording
        .streams
        .iter()
        .flat_map(|s| &s.attempts)
        .any(|a| matches!(&a.body, Some(stallscope::core::event::RecordedBody::Raw { truncated: true, .. })));
    assert!(cut, "the body outgrew its 1 KiB cap");
    let report = whatif(&recording, &[], Assumptions::default());
    assert!(report.streams.iter().all(|s| s.after.outcome == CourseOutcome::Ok), "{:?}", report.streams);
    assert!(Fidelity::of(&report).is_exact(), "{:?}", Fidelity::of(&report));
}

/// Review R9: an error body recorded only in part is classified in replay
/// from what was kept, and the report says so for the attempts it played.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_body_recorded_in_part_is_noted() {
    let mut recording = record("context-overflow", Dialect::OpenAiChat, &[]).await;
    let stream = &mut recording.streams[0];
    stream.attempts[0].response.as_mut().unwrap().error_body_cut = true;
    let id = stream.id;
    let report = whatif(&recording, &[], Assumptions::default());
    let noted = report.streams.iter().find(|s| s.stream == id).unwrap();
    assert!(
        noted.notes.iter().any(|n| n.starts_with("attempt 1: the error body was recorded cut to 4 KiB")),
        "{noted:?}"
    );
    assert!(noted.assumptions.is_empty(), "a note is no assumption: {noted:?}");
    assert!(report.streams.iter().filter(|s| s.stream != id).all(|s| s.notes.is_empty()));
}

/// Review R7: keep-alives assumed to go on past the recording, with the
/// data-stall timer off and nothing else armed but the idle timer they
/// reset, would ping until the replay's day-long horizon: a wake and an
/// event each. The play stops there instead and says the stream's end is
/// unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_assumed_forever_stop_where_only_the_idle_timer_could_end_them() {
    let recording = record("ping-flood-stall", Dialect::OpenAiChat, &[]).await;
    let keepalives = Assumptions { stall: StallAssumption::Keepalives, ..Assumptions::default() };
    let sink = Arc::new(VecSink::new());
    let whatif =
        WhatIf { overrides: vec!["SSE_DATA_STALL_TIMEOUT_S=0".into()], assumptions: keepalives, verdicts: true };
    let report = what_if_watched(&recording, &whatif, Some(sink.clone())).unwrap();
    for stream in &report.streams {
        assert_eq!(stream.after.outcome, CourseOutcome::Unknown, "{stream:?}");
        assert!(stream.assumptions.iter().any(|a| a.contains("it would never end")), "{stream:?}");
    }
    // Every recorded event replayed and a few more, not a day of pings.
    let recorded: usize =
        recording.streams.iter().map(|s| s.attempts.iter().map(|a| a.events.len() * 3).sum::<usize>()).sum();
    assert!(sink.events().len() < recorded + 200, "{} events", sink.events().len());
}

/// A run recorded before the fleet budget's categories could be chosen ran
/// with the budget over every retry, a silent stall's included: its
/// snapshot lacks `FLEET_RETRY_BUDGET_CATEGORIES`, and it replays as it ran
/// (the refusal again), not as today's default would have run it.
#[tokio::test]
async fn a_run_recorded_before_the_fleet_budget_had_categories_replays_as_it_ran() {
    const CATEGORIES: &str = "STALLSCOPE_FLEET_RETRY_BUDGET_CATEGORIES";
    // Two calls stalling at once, one retry in flight allowed: as before.
    let before = "FLEET_RETRY_BUDGET_CATEGORIES=connection,timeout,rate_limit,overloaded,server_error,auth,\
                  invalid_request,permanent";
    let mut recording = record("silent-stall", Dialect::OpenAiChat, &["FLEET_RETRY_BUDGET_MIN=1", before]).await;
    let outcomes = |courses: Vec<&StreamCourse>| courses.iter().map(|c| c.outcome).collect::<Vec<_>>();
    let recorded = outcomes(recording.streams.iter().map(|s| &s.course).collect());
    assert_eq!(recorded.iter().filter(|&&o| o == CourseOutcome::Failed).count(), 1, "{recorded:?}");
    let mut older = recording.tunables.sourced_snapshot();
    older.remove(CATEGORIES);
    recording.tunables = Tunables::from_snapshot(&older).unwrap();

    let replayed = whatif(&recording, &[], Assumptions::default());
    assert!(Fidelity::of(&replayed).is_exact(), "{:?}", replayed.streams);
    assert_eq!(outcomes(replayed.streams.iter().map(|s| &s.after).collect()), recorded);
    // Under today's default the stall's retry is not the budget's to refuse:
    // it is made, and what it met was never recorded, which the report says.
    let today = ["FLEET_RETRY_BUDGET_CATEGORIES=timeout:ttfb,rate_limit,overloaded,server_error"];
    let today = whatif(&recording, &today, Assumptions::default());
    let refused = today.streams.iter().find(|s| s.before.outcome == CourseOutcome::Failed).unwrap();
    assert!(refused.changed && refused.after.attempts > 1, "{refused:?}");
    assert!(refused.assumptions.iter().any(|a| a.starts_with("attempt 2 was never recorded")), "{refused:?}");
}

/// Review R8: a what-if the app no longer shows is stopped, not run to
/// its end on a machine the app shares with the runs it measures: once
/// its token is cancelled it ends with `Cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_what_if_ends_cancelled() {
    let recording = record("silent-stall", Dialect::OpenAiChat, &[]).await;
    let stop = tokio_util::sync::CancellationToken::new();
    stop.cancel();
    let result = what_if_until(&recording, &WhatIf::default(), None, &stop);
    assert!(matches!(result, Err(WhatIfError::Cancelled)), "{result:?}");
}
