//! Tune on real recordings: built-in scenarios run through the real HTTP
//! stack and recorded, then searched for the tightest timers that fire on
//! no healthy attempt, with room, each suggestion checked by what-if — and
//! checked again here by a what-if of its own, as is the headroom tune
//! reads off the recordings without replaying them.
//!
//! The stories run seconds where real traffic runs minutes, so these
//! searches scale the floors of real traffic down ([`SCALE`]); one test
//! holds that at the real scale nothing so tight is ever suggested.
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
use stallscope::replay::tune::{
    FLOORS, MARGIN, MAX_PROBES_PER_TIMER, TimerTuning, TuneError, TuneOptions, TuneReport, check, grid, tune,
};
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

/// The floors of real traffic, scaled to the stories' seconds.
const SCALE: f64 = 0.001;

fn scaled() -> TuneOptions {
    TuneOptions { floor_scale: SCALE, ..TuneOptions::default() }
}

/// Tunes `recordings` on a blocking thread (tune drives runtimes of its own).
async fn tuned(recordings: Vec<Recording>, options: TuneOptions) -> Result<TuneReport, TuneError> {
    tokio::task::spawn_blocking(move || tune(&recordings, &options)).await.unwrap()
}

/// False positives of one setting, by a what-if of its own.
fn false_positives(recording: &Recording, set: String) -> usize {
    let whatif = WhatIf { overrides: vec![set], ..WhatIf::default() };
    what_if(recording, &whatif).unwrap().summary.false_positives
}

/// The grid value just below `value`.
fn below(value: f64) -> f64 {
    grid().into_iter().rev().find(|&v| v < value).unwrap()
}

/// Two streams whose model hung behind a chatty gateway (caught by the
/// data-stall timer after 0.5 s of keep-alives, then a healthy retry) and
/// two healthy streams: tune reads the longest healthy wait for progress,
/// suggests a shorter data-stall timeout with room over it, checked to
/// catch both stalls sooner and fire on no healthy attempt; the grid value
/// below the tightest it reads does fire on one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_among_healthy_streams_is_caught_sooner_by_a_shorter_data_stall_timeout() {
    let (stalled, healthy) =
        tokio::join!(record("ping-flood-stall", OpenAiChat, &[]), record("healthy", OpenAiChat, &[]));
    let recording = together(stalled, healthy);
    let report = tuned(vec![recording.clone()], scaled()).await.unwrap();
    // Every check is compared with the run replayed unchanged, so the live
    // runtime's lateness (what keeps a replay from being exact) cancels.
    assert_eq!((report.fidelity.streams, report.replayed_runs, report.healthy_attempts), (4, 1, 4));

    let stall = timer(&report, TimerKind::DataStall);
    assert_eq!(stall.current_s, Some(0.5));
    let value = stall.suggested_s.unwrap_or_else(|| panic!("{stall:#?}"));
    let headroom = stall.headroom.as_ref().unwrap();
    assert_eq!(headroom.attempts, 4);
    assert!(value < 0.5 && value >= MARGIN * headroom.worst && value >= stall.floor_s, "{stall:#?}");
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
    assert!(evidence.is_clean());
    assert_eq!(evidence.healthy_attempts, 4);
    assert!(
        evidence.sentence().ends_with(
            "and fired on none of the 4 healthy attempts (what-if on this run: it fits this traffic, not every day)"
        ),
        "{}",
        evidence.sentence()
    );

    // Checked independently: the value fires on no healthy attempt, and
    // the headroom read off the recording is the replay's edge: the grid
    // value below the tightest fires on one.
    let name = "SSE_DATA_STALL_TIMEOUT_S";
    assert_eq!(false_positives(&recording, format!("{name}={value}")), 0);
    let tightest = stall.tightest_s.unwrap();
    assert_eq!(false_positives(&recording, format!("{name}={}", Value::Float(tightest))), 0);
    assert!(false_positives(&recording, format!("{name}={}", Value::Float(below(tightest)))) > 0, "{stall:#?}");

    for t in &report.timers {
        assert!(t.probes.len() <= MAX_PROBES_PER_TIMER, "{t:#?}");
    }
    let combined = report.combined.as_ref().unwrap();
    assert!(combined.is_clean(), "{combined:#?}");
    assert_eq!(combined.caught.len(), 2);
    assert!(report.suggested.iter().any(|s| s.assignment() == format!("{name}={value}")), "{:?}", report.suggested);

    // Review R6: a verdict gets a timer's checked suggestion only when the
    // suggestions together lose no stream and fire on no healthy attempt.
    assert!(!advice::by_stream(&report, recording.run).is_empty());
    let mut together_loses = report.clone();
    together_loses.combined.as_mut().unwrap().lost = 1;
    assert!(advice::by_stream(&together_loses, recording.run).is_empty());
}

/// A buffering proxy holds a healthy answer back for 1.5 s; a silent stall
/// beside it is caught by the idle timer after 5 s. Tune lowers the idle
/// timeout toward the stall, but keeps room over the buffering gap: at the
/// gap it would end the buffered streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_timeout_keeps_room_over_a_buffering_proxys_gap() {
    let sets = [
        "SSE_IDLE_TIMEOUT_S=5",
        "SSE_DATA_STALL_TIMEOUT_S=8",
        "SSE_TTFB_TIMEOUT_S=8",
        "PROVIDER_STREAM_BACKOFF_S=0.05",
    ];
    let (stalled, buffered) =
        tokio::join!(record("silent-stall", OpenAiChat, &sets), record("proxy-buffered", OpenAiChat, &sets));
    let recording = together(stalled, buffered);
    let report = tuned(vec![recording.clone()], scaled()).await.unwrap();

    let idle = timer(&report, TimerKind::Idle);
    let headroom = idle.headroom.as_ref().unwrap();
    assert!((1.5..1.6).contains(&headroom.worst), "the buffered gap: {idle:#?}");
    let value = idle.suggested_s.unwrap_or_else(|| panic!("{idle:#?}"));
    assert!((MARGIN * 1.5..5.0).contains(&value), "{idle:#?}");
    // Without the room, the tightest would have fired on no buffered
    // stream either, but the value below it does.
    assert!(false_positives(&recording, format!("SSE_IDLE_TIMEOUT_S={}", below(idle.tightest_s.unwrap()))) > 0);
    let evidence = idle.evidence.as_ref().unwrap();
    let caught: Vec<(u64, TimerKind)> = evidence.caught.iter().map(|c| (c.stream, c.timer)).collect();
    assert_eq!(caught, [(0, TimerKind::Idle), (1, TimerKind::Idle)], "{evidence:#?}");
    assert!(evidence.caught.iter().all(|c| (c.sooner_s - (5.0 - value)).abs() < 0.01), "{evidence:#?}");
    assert!(evidence.healthy_attempts >= 2, "the buffered streams are healthy and were checked");

    // The stalls' verdicts carry the setting, checked; the buffered
    // streams' verdicts (healthy, or proxy buffering) carry none.
    let candidates = advice::by_stream(&report, recording.run);
    for stream in &recording.streams {
        let checked = candidates.get(&stream.id).and_then(|c| advice::choose(&stream.verdict, c));
        if stream.id < 2 {
            assert_eq!(stream.verdict.kind, VerdictKind::SilentStall, "{:#?}", stream.verdict);
            let checked = checked.unwrap_or_else(|| panic!("stream {}: {candidates:#?}", stream.id));
            assert_eq!(checked.settings, [format!("SSE_IDLE_TIMEOUT_S={}", Value::Float(value))]);
            assert_eq!((checked.caught, checked.false_positives), (2, 0));
            assert_eq!(checked.healthy_attempts, evidence.healthy_attempts);
            assert_eq!(checked.sentence, evidence.sentence());
        } else {
            assert_eq!(checked, None, "stream {}", stream.id);
        }
    }
}

/// Two answers that crawl (caught by a floor of 5 progress events a second
/// over 1 s) beside two healthy streams, whose 20 tokens in half a second
/// are the slowest window the floor may ask for: tune reads that pace off
/// the recording and checks the floor with room under it (20 / 1.5 = 13.3:
/// 12) once. It catches both crawls sooner and fires on neither healthy
/// stream, but only by a fifth less than the run's own floor took (every
/// floor fires within half a second of the crawl's start), so it is not
/// suggested, and the verdict says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_among_healthy_streams_is_checked_at_a_floor_with_room_under_their_pace() {
    let sets = ["SSE_DATA_STALL_TIMEOUT_S=1", "SSE_MIN_RATE=5", "SSE_MIN_RATE_WINDOW_S=1"];
    let (crawled, healthy) = tokio::join!(record("crawl", OpenAiChat, &sets), record("healthy", OpenAiChat, &sets));
    let recording = together(crawled, healthy);
    let report = tuned(vec![recording.clone()], scaled()).await.unwrap();

    let floor = timer(&report, TimerKind::MinRate);
    assert_eq!(floor.headroom.as_ref().map(|h| h.worst), Some(20.0), "{floor:#?}");
    assert_eq!((floor.unit, floor.current_s, floor.tightest_s), ("events/s", Some(5.0), Some(20.0)), "{floor:#?}");
    assert_eq!(floor.safe_s, Some(12.0), "{floor:#?}");
    assert_eq!(floor.probes.len(), 1, "the value is read off the recording and checked once");
    let evidence = floor.evidence.as_ref().unwrap();
    let caught: Vec<(u64, TimerKind, Option<TimerKind>)> =
        evidence.caught.iter().map(|c| (c.stream, c.timer, c.before_timer)).collect();
    let min_rate = (TimerKind::MinRate, Some(TimerKind::MinRate));
    assert_eq!(caught, [(0, min_rate.0, min_rate.1), (1, min_rate.0, min_rate.1)], "{evidence:#?}");
    assert!(evidence.is_clean(), "{evidence:#?}");
    assert_eq!(floor.suggested_s, None, "{floor:#?}");
    assert!(floor.verdict.contains("under a fifth of the time the runs' own timers took"), "{}", floor.verdict);
    // Checked independently. (A healthy stream shorter than a window is
    // never judged, so a higher floor would not fire on these either: the
    // value stops under their pace, so it would not cut them had they gone
    // on.)
    assert_eq!(false_positives(&recording, "SSE_MIN_RATE=12".to_owned()), 0);
    assert!(report.suggested.iter().all(|s| s.name != "STALLSCOPE_SSE_MIN_RATE"), "{:?}", report.suggested);
}

/// At the scale of real traffic, tune never suggests the stories' tight
/// values: the app's first run once offered SSE_DATA_STALL_TIMEOUT_S=0.04,
/// which would cut nearly every real stream. Each timer keeps its own,
/// saying it is already tighter than real traffic allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_scale_of_real_traffic_no_timer_below_its_floor_is_suggested() {
    let (stalled, healthy) =
        tokio::join!(record("ping-flood-stall", OpenAiChat, &[]), record("healthy", OpenAiChat, &[]));
    let report = tuned(vec![together(stalled, healthy)], TuneOptions::default()).await.unwrap();
    assert!(report.suggested.is_empty() && report.combined.is_none(), "{report:#?}");
    let stall = timer(&report, TimerKind::DataStall);
    let floor = FLOORS.iter().find(|(t, _)| *t == TimerKind::DataStall).unwrap().1;
    assert_eq!(stall.floor_s, floor);
    assert!(stall.verdict.starts_with("keep 0.5 s: the longest healthy wait for progress was"), "{}", stall.verdict);
    assert!(stall.verdict.ends_with("(0.5 s is itself tighter than real traffic allows)"), "{}", stall.verdict);
}

/// A run of healthy traffic catches no stall, but says how tight each
/// timer can go: tune reports each timer's headroom and tightest value,
/// says it caught nothing, and suggests nothing. A run with nothing
/// healthy to check against cannot be tuned, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_run_reports_how_tight_each_timer_can_go() {
    let recording = record("healthy", OpenAiChat, &[]).await;
    let report = tuned(vec![recording.clone()], scaled()).await.unwrap();
    assert_eq!((report.stalls, report.healthy_attempts, report.replayed_runs), (0, 2, 0), "{report:#?}");
    assert!(report.suggested.is_empty() && report.combined.is_none());
    for kind in [TimerKind::Ttfb, TimerKind::Idle, TimerKind::DataStall, TimerKind::Total] {
        let t = timer(&report, kind);
        let headroom = t.headroom.as_ref().unwrap_or_else(|| panic!("{t:#?}"));
        assert_eq!(headroom.attempts, 2);
        assert!(t.tightest_s.unwrap() > headroom.worst, "{t:#?}");
        assert!(t.verdict.contains("no stall here to catch sooner"), "{}", t.verdict);
    }
    // The tightest it reads fires on neither healthy stream.
    let idle = timer(&report, TimerKind::Idle).tightest_s.unwrap();
    assert_eq!(false_positives(&recording, format!("SSE_IDLE_TIMEOUT_S={}", Value::Float(idle))), 0);

    let failed = record("auth-expired", OpenAiChat, &[]).await;
    let err = tuned(vec![failed], scaled()).await.unwrap_err();
    assert!(matches!(err, TuneError::Untunable { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot be tuned: no attempt completed"), "{err}");
}

/// Tune from a history: the same search over several runs' attempts
/// together, counted over all of them; a run whose every attempt completed
/// replays unchanged and is not replayed, but its healthy attempts are
/// checked against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_runs_are_tuned_together() {
    let (stalled, healthy, more) = tokio::join!(
        record("ping-flood-stall", OpenAiChat, &[]),
        record("healthy", OpenAiChat, &[]),
        record("healthy", OpenAiChat, &[])
    );
    let runs: Vec<Recording> = [stalled, healthy, more]
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.run = i as i64 + 11;
            r
        })
        .collect();
    let report = tuned(runs.clone(), scaled()).await.unwrap();
    assert_eq!(report.runs, [11, 12, 13]);
    // The stalled run's retries and the healthy runs' streams.
    assert_eq!((report.healthy_attempts, report.replayed_runs), (6, 1), "{report:#?}");
    let stall = timer(&report, TimerKind::DataStall);
    let evidence = stall.evidence.as_ref().unwrap_or_else(|| panic!("{stall:#?}"));
    assert_eq!((evidence.runs, evidence.healthy_attempts), (3, 6));
    assert!(evidence.caught.iter().all(|c| c.run == 11), "{evidence:#?}");
    assert!(evidence.sentence().contains("(what-if on these 3 runs: "), "{}", evidence.sentence());
    // Suggestions attach to the run they were caught in only.
    assert!(!advice::by_stream(&report, 11).is_empty());
    assert!(advice::by_stream(&report, 12).is_empty());
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
        sentence.ends_with(
            "and fired on none of the 4 healthy attempts (what-if on this run: it fits this traffic, not every day)"
        ),
        "{sentence}"
    );

    // Content every 25 ms: an idle timeout of 20 ms ends every healthy
    // attempt, and the retries after them were never recorded.
    let checked = check(&recording, &[("SSE_IDLE_TIMEOUT_S", "0.02")]).unwrap();
    // Every healthy attempt the replay reaches fires (with four streams
    // failing at once, the fleet's retry budget may keep one from its
    // healthy retry).
    let reached = checked.healthy_attempts;
    assert_eq!(checked.false_positive_attempts(), reached, "{checked:#?}");
    let sentence = checked.sentence();
    assert!(sentence.contains(&format!("but fired on {reached} of the {reached} healthy attempts")), "{sentence}");
    assert!(sentence.contains("on assuming stall=silence, attempt=last-to-target)"), "{sentence}");
}
