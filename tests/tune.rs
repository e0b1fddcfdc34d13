//! Tune on real recordings: built-in scenarios run through the real HTTP
//! stack and recorded, then searched by what-if for the tightest timers
//! that fire on no healthy stream — and every suggestion checked again
//! here by a what-if of its own.
//!
//! A built-in scenario plays the same script on every stream, so a run
//! with stalled and healthy streams together is made of two recordings
//! with the same tunables: the second's streams join the first's under new
//! ids. Each stream replays from its own attempts, so the union replays as
//! one run of both would.

mod recorded;

use recorded::record;
use stallscope::core::category::TimerKind;
use stallscope::diagnosis::VerdictKind;
use stallscope::providers::Dialect::OpenAiChat;
use stallscope::replay::advice;
use stallscope::replay::recording::Recording;
use stallscope::replay::tune::{MAX_PROBES_PER_TIMER, TimerTuning, TuneError, TuneReport, check, tune};
use stallscope::replay::upstream::Assumptions;
use stallscope::replay::whatif::{WhatIf, what_if};
use stallscope::tunables::Value;

/// `first` with the streams of `second` added under new ids, all at once.
fn together(mut first: Recording, second: Recording) -> Recording {
    let values = |r: &Recording| r.tunables.iter().map(|(spec, e)| (spec.name, e.value.clone())).collect::<Vec<_>>();
    assert_eq!(values(&first), values(&second), "the two runs must share their tunables");
    let offset = first.streams.iter().map(|s| s.id + 1).max().unwrap_or(0);
    first.streams.extend(second.streams.into_iter().map(|mut s| {
        s.id += offset;
        s
    }));
    let streams = u32::try_from(first.streams.len()).unwrap();
    (first.meta.requests, first.meta.concurrency) = (streams, streams);
    first
}

fn timer(report: &TuneReport, timer: TimerKind) -> &TimerTuning {
    report.timers.iter().find(|t| t.timer == timer).unwrap()
}

/// False positives of one setting, by a what-if of its own.
fn false_positives(recording: &Recording, set: String) -> usize {
    let whatif = WhatIf { overrides: vec![set], ..WhatIf::default() };
    what_if(recording, &whatif).unwrap().summary.false_positives
}

/// Two streams whose model hung behind a chatty gateway (caught by the
/// data-stall timer after 0.5 s of keep-alives, then a healthy retry) and
/// two healthy streams: tune finds a shorter data-stall timeout that
/// catches both stalls sooner and fires on none of the healthy attempts,
/// and the next value down the grid does fire on one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_among_healthy_streams_is_caught_sooner_by_a_shorter_data_stall_timeout() {
    let (stalled, healthy) =
        tokio::join!(record("ping-flood-stall", OpenAiChat, &[]), record("healthy", OpenAiChat, &[]));
    let recording = together(stalled, healthy);
    let report = tokio::task::spawn_blocking({
        let recording = recording.clone();
        move || tune(&recording, Assumptions::default()).unwrap()
    })
    .await
    .unwrap();
    // Every probe is compared with the run replayed unchanged, so the live
    // runtime's lateness (what keeps a replay from being exact) cancels.
    assert_eq!(report.fidelity.streams, 4);

    let stall = timer(&report, TimerKind::DataStall);
    assert_eq!(stall.current_s, Some(0.5));
    let value = stall.suggested_s.unwrap_or_else(|| panic!("{stall:#?}"));
    assert!(value < 0.5, "{stall:#?}");
    let evidence = stall.evidence.as_ref().unwrap();
    let caught: Vec<(u64, u32)> = evidence.caught.iter().map(|c| (c.stream, c.attempt)).collect();
    assert_eq!(caught, [(0, 1), (1, 1)], "{evidence:#?}");
    for c in &evidence.caught {
        assert_eq!(c.before_timer, Some(TimerKind::DataStall));
        // The stall went unnoticed for 0.5 s after the last reasoning
        // token; this value notices it at least the difference sooner
        // (sooner still when it fires between two of the tokens).
        assert!(c.sooner_s > 0.5 - value - 0.001, "{c:?}");
    }
    assert!(evidence.false_positives.is_empty());
    assert_eq!((evidence.healthy_streams, evidence.healthy_retries), (2, 2));
    assert!(
        evidence
            .sentence()
            .ends_with("and fired on none of the 2 healthy streams and 2 healthy retries (what-if on this run)"),
        "{}",
        evidence.sentence()
    );

    // Checked independently: the value fires on no healthy attempt, the
    // next one down the grid does.
    let name = "SSE_DATA_STALL_TIMEOUT_S";
    assert_eq!(false_positives(&recording, format!("{name}={value}")), 0);
    let edge = stall.next_tighter.unwrap_or_else(|| panic!("{stall:#?}"));
    assert!(edge.value_s < value && edge.false_positives > 0, "{edge:?}");
    assert_eq!(false_positives(&recording, format!("{name}={}", edge.value_s)), edge.false_positives);

    for t in &report.timers {
        assert!(t.probes.len() <= MAX_PROBES_PER_TIMER, "{t:#?}");
    }
    let combined = report.combined.as_ref().unwrap();
    assert!(combined.false_positives.is_empty(), "{combined:#?}");
    assert_eq!(combined.caught.len(), 2);
    assert!(report.suggested.iter().any(|s| s.assignment() == format!("{name}={value}")), "{:?}", report.suggested);
}

/// A buffering proxy holds a healthy answer back for 1.5 s; a silent stall
/// beside it is caught by the idle timer after 3 s. Tune lowers the idle
/// timeout toward the stall, but never to the buffering gap: there it
/// would end the buffered streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_stops_above_a_buffering_proxys_gap() {
    let sets = [
        "SSE_IDLE_TIMEOUT_S=3",
        "SSE_DATA_STALL_TIMEOUT_S=5",
        "SSE_TTFB_TIMEOUT_S=5",
        "PROVIDER_STREAM_BACKOFF_S=0.05",
    ];
    let (stalled, buffered) =
        tokio::join!(record("silent-stall", OpenAiChat, &sets), record("proxy-buffered", OpenAiChat, &sets));
    let recording = together(stalled, buffered);
    let report = tokio::task::spawn_blocking({
        let recording = recording.clone();
        move || tune(&recording, Assumptions::default()).unwrap()
    })
    .await
    .unwrap();

    let idle = timer(&report, TimerKind::Idle);
    let value = idle.suggested_s.unwrap_or_else(|| panic!("{idle:#?}"));
    assert!((1.5..3.0).contains(&value), "{idle:#?}");
    let edge = idle.next_tighter.unwrap();
    assert!(edge.value_s <= 1.5, "{edge:?}");
    let evidence = idle.evidence.as_ref().unwrap();
    let caught: Vec<(u64, TimerKind)> = evidence.caught.iter().map(|c| (c.stream, c.timer)).collect();
    assert_eq!(caught, [(0, TimerKind::Idle), (1, TimerKind::Idle)], "{evidence:#?}");
    assert!(evidence.caught.iter().all(|c| (c.sooner_s - (3.0 - value)).abs() < 0.01), "{evidence:#?}");
    assert_eq!(evidence.healthy_streams, 2, "the buffered streams are healthy and were checked");

    // The stalls' verdicts carry the setting, checked; the buffered
    // streams' verdicts (healthy, or proxy buffering) carry none.
    let candidates = advice::by_stream(&report);
    for stream in &recording.streams {
        let checked = candidates.get(&stream.id).and_then(|c| advice::choose(&stream.verdict, c));
        if stream.id < 2 {
            assert_eq!(stream.verdict.kind, VerdictKind::SilentStall, "{:#?}", stream.verdict);
            let checked = checked.unwrap_or_else(|| panic!("stream {}: {candidates:#?}", stream.id));
            assert_eq!(checked.settings, [format!("SSE_IDLE_TIMEOUT_S={}", Value::Float(value))]);
            assert_eq!((checked.caught, checked.false_positives), (2, 0));
            assert_eq!(checked.sentence, evidence.sentence());
        } else {
            assert_eq!(checked, None, "stream {}", stream.id);
        }
    }
}

/// Two answers that crawl (caught by a floor of 5 progress events a second
/// over 1 s) beside two healthy streams, whose 20 tokens in half a second
/// are the slowest window the floor may ask for: tune raises the floor to
/// 20, which catches both crawls sooner and fires on neither healthy
/// stream, and the crawls' verdicts carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_among_healthy_streams_is_caught_sooner_by_a_higher_floor() {
    let sets = ["SSE_DATA_STALL_TIMEOUT_S=1", "SSE_MIN_RATE=5", "SSE_MIN_RATE_WINDOW_S=1"];
    let (crawled, healthy) = tokio::join!(record("crawl", OpenAiChat, &sets), record("healthy", OpenAiChat, &sets));
    let recording = together(crawled, healthy);
    let report = tokio::task::spawn_blocking({
        let recording = recording.clone();
        move || tune(&recording, Assumptions::default()).unwrap()
    })
    .await
    .unwrap();

    let floor = timer(&report, TimerKind::MinRate);
    assert_eq!((floor.unit, floor.current_s, floor.suggested_s), ("events/s", Some(5.0), Some(20.0)), "{floor:#?}");
    assert_eq!(floor.probes.len(), 1, "the value is read off the recording and checked once");
    let evidence = floor.evidence.as_ref().unwrap();
    let caught: Vec<(u64, TimerKind, Option<TimerKind>)> =
        evidence.caught.iter().map(|c| (c.stream, c.timer, c.before_timer)).collect();
    let min_rate = (TimerKind::MinRate, Some(TimerKind::MinRate));
    assert_eq!(caught, [(0, min_rate.0, min_rate.1), (1, min_rate.0, min_rate.1)], "{evidence:#?}");
    assert!(evidence.false_positives.is_empty() && evidence.healthy_streams == 2, "{evidence:#?}");
    assert!(
        evidence.sentence().starts_with("SSE_MIN_RATE=20 would have caught these 2 stalls"),
        "{}",
        evidence.sentence()
    );
    // Checked independently. (A healthy stream shorter than a window is
    // never judged, so a higher floor would not fire on these either: the
    // value stops at their pace, so it would not cut them had they gone on.)
    assert_eq!(false_positives(&recording, "SSE_MIN_RATE=20".to_owned()), 0);

    let candidates = advice::by_stream(&report);
    for stream in recording.streams.iter().filter(|s| s.id < 2) {
        assert_eq!(stream.verdict.kind, VerdictKind::Crawl, "{:#?}", stream.verdict);
        assert_eq!(stream.verdict.tunable.as_deref(), Some("STALLSCOPE_SSE_MIN_RATE"));
        let checked = candidates.get(&stream.id).and_then(|c| advice::choose(&stream.verdict, c)).unwrap();
        assert_eq!(checked.settings, ["SSE_MIN_RATE=20"]);
    }
}

/// A run with nothing to catch, or nothing healthy to check against,
/// cannot be tuned, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_without_a_stall_cannot_be_tuned() {
    let recording = record("healthy", OpenAiChat, &[]).await;
    let err = tune(&recording, Assumptions::default()).unwrap_err();
    assert!(matches!(err, TuneError::Untunable { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot be tuned: no timer fired"), "{err}");
}

/// `check` tells what one setting would have done, in the sentence a
/// diagnosis carries — honest about false positives too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_puts_one_setting_in_a_sentence() {
    let (stalled, healthy) =
        tokio::join!(record("ping-flood-stall", OpenAiChat, &[]), record("healthy", OpenAiChat, &[]));
    let recording = together(stalled, healthy);
    let checked = check(&recording, &[("STALLSCOPE_SSE_DATA_STALL_TIMEOUT_S", "0.2")]).unwrap();
    let sentence = checked.sentence();
    assert!(sentence.starts_with("SSE_DATA_STALL_TIMEOUT_S=0.2 would have caught these 2 stalls 0.3"), "{sentence}");
    assert!(
        sentence.ends_with("and fired on none of the 2 healthy streams and 2 healthy retries (what-if on this run)"),
        "{sentence}"
    );

    // Content every 25 ms: an idle timeout of 20 ms ends every healthy
    // attempt, and the retries after them were never recorded.
    let checked = check(&recording, &[("SSE_IDLE_TIMEOUT_S", "0.02")]).unwrap();
    // Every healthy attempt the replay reaches fires (with four streams
    // failing at once, the fleet's retry budget may keep one from its
    // healthy retry).
    let reached = checked.healthy_streams + checked.healthy_retries;
    assert_eq!((checked.healthy_streams, checked.false_positive_attempts()), (2, reached), "{checked:#?}");
    let sentence = checked.sentence();
    assert!(sentence.contains(&format!("but fired on {reached} of the 2 healthy streams and ")), "{sentence}");
    assert!(sentence.contains("on assuming stall=silence, attempt=last-to-target)"), "{sentence}");
}
