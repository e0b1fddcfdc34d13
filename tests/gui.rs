//! The desktop app driven headless with egui_kittest: real app state, real
//! runs against the in-process simulator on loopback, controls found by
//! their labels as a screen reader would.

use std::path::Path;
use std::time::Duration;

mod app;
mod history;

use app::{Scratch, copied, wait_for};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use stallscope::core::category::{Category, TimerKind};
use stallscope::core::event::{Event, EventKind, Outcome};
use stallscope::core::failover::Target;
use stallscope::diagnosis::{Basis, Diagnosis, Severity, VerdictKind};
use stallscope::gui::lanes::Timeline;
use stallscope::gui::live::Choice;
use stallscope::gui::timeline::{BytesScale, Clock, OutcomeFilter, TimelineView, VerdictFilter};
use stallscope::gui::{App, Launch, Tab};

/// The app over an empty config and a fresh database in `dir`, with an
/// empty environment (a developer's own settings must not leak in).
fn app(dir: &Path) -> Harness<'static, App> {
    app_with_env(dir, vec![])
}

fn app_with_env(dir: &Path, env: Vec<(String, String)>) -> Harness<'static, App> {
    let config = dir.join("config.toml");
    std::fs::write(&config, "").unwrap();
    let db = dir.join("runs.db");
    Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_eframe(move |cc| App::new(cc, Launch { config: Some(config), overrides: vec![] }, Some(db), env))
}

/// Steps frames (real time passes between them) until `done`, for at most 30 s.
fn step_until(h: &mut Harness<'_, App>, what: &str, done: impl Fn(&App) -> bool) {
    wait_for(h, what, |h| done(h.state()));
}

fn finished(app: &App, streams: usize) -> bool {
    !app.live.is_running() && app.live.timeline().lanes.len() == streams
}

/// Presses Run and waits until the run's `streams` streams have ended and
/// its suggestions are checked (a check arriving later would change what
/// a test looks at under it).
fn run_to_end(h: &mut Harness<'_, App>, streams: usize) {
    h.get_by_label("Run").click();
    // One frame takes the click and starts the run, so an earlier run's
    // finished lanes cannot pass for this one's.
    h.step();
    step_until(h, &format!("{streams} stream(s) to end"), |app| finished(app, streams));
    step_until(h, "the suggestions checked", |app| !app.live.checks.is_running());
}

/// Sets the form to `requests` calls of `scenario`.
fn choose(h: &mut Harness<'_, App>, scenario: &str, requests: u32) {
    h.state_mut().prefs.form.choice = Choice::Scenario(scenario.into());
    h.state_mut().prefs.form.requests = requests;
}

#[test]
fn a_scenario_run_started_from_the_ui_fills_its_lanes() {
    let dir = Scratch::new("run");
    let mut h = app(dir.path());
    h.get_by_label("Source").click();
    h.run();
    h.get_by_label("scenario: healthy").click();
    h.run();
    assert_eq!(h.state().prefs.form.choice, Choice::Scenario("healthy".into()));
    run_to_end(&mut h, 4);
    let lanes = &h.state().live.timeline().lanes;
    assert!(lanes.iter().all(|l| l.outcome == Some(Outcome::Ok)));
    assert!(lanes.iter().all(|l| l.total_bytes > 0 && !l.output_ticks.is_empty() && l.bytes.len() > 1));
    // The summary strip and each lane's header say how the streams ended.
    h.get_by_label_contains("4 ok · 0 partial · 0 failed");
    for stream in 0..4 {
        h.get_by_label(&format!("healthy #{stream}  ok"));
    }
    assert!(h.state().live.results[0].contains("recorded as run 1"), "{:?}", h.state().live.results);
}

#[test]
fn a_stall_shows_the_fired_timer_the_backoff_and_the_retry() {
    let dir = Scratch::new("stall");
    let mut h = app(dir.path());
    choose(&mut h, "silent-stall", 1);
    run_to_end(&mut h, 1);
    let lane = &h.state().live.timeline().lanes[0];
    assert_eq!(lane.outcome, Some(Outcome::Ok));
    assert_eq!(lane.attempt_count, 2);
    assert!(lane.fired.iter().any(|m| m.text == "idle timer fired"), "{:?}", lane.fired);
    assert_eq!(lane.sleeps.len(), 1);
    assert!(lane.timers.iter().any(|t| t.fired), "an idle track ends at its threshold");
    h.get_by_label_contains("retries: timeout 1");
}

#[test]
fn an_invalid_tunable_is_refused_inline_and_blocks_the_run() {
    let dir = Scratch::new("tunables");
    let mut h = app(dir.path());
    // No scenario layer: the field shows the default, 1800.
    h.state_mut().prefs.form.choice = Choice::AllStories;
    h.get_by_label("Tunables").click();
    h.run();
    let field = h.get_by_label("SSE_IDLE_TIMEOUT_S");
    field.focus();
    field.type_text("x");
    h.run();
    h.get_by_label_contains("STALLSCOPE_SSE_IDLE_TIMEOUT_S=\"1800x\"");
    h.get_by_label_contains("is not accepted");
    assert_eq!(h.state().prefs.tunables.invalid(), 1);
    h.get_by_label("Live").click();
    h.run();
    h.get_by_label_contains("edited tunable(s) are not accepted");
    h.get_by_label("Tunables").click();
    h.run();
    h.get_by_label("Reset SSE_IDLE_TIMEOUT_S").click();
    h.run();
    assert!(h.query_by_label_contains("is not accepted").is_none());
    assert_eq!(h.state().prefs.tunables.invalid(), 0);
}

#[test]
fn a_stored_run_opens_from_the_history_in_the_timeline() {
    let dir = Scratch::new("history");
    let mut h = app(dir.path());
    choose(&mut h, "rate-limited-ms", 2);
    h.state_mut().prefs.form.label = "from-test".into();
    run_to_end(&mut h, 2);
    h.get_by_label("History").click();
    wait_for(&mut h, "the history to list run 1", |h| h.query_by_label("Open run 1").is_some());
    h.get_by_label_contains("from-test");
    h.get_by_label("Open run 1").click();
    step_until(&mut h, "the stored run to open", |app| {
        app.prefs.tab == Tab::Live && !app.live.timeline().lanes.is_empty()
    });
    step_until(&mut h, "the suggestions checked", |app| !app.live.checks.is_running());
    h.get_by_label_contains("Showing stored run 1 · from-test · rate-limited-ms");
    let lanes = &h.state().live.timeline().lanes;
    assert_eq!(lanes.len(), 2);
    // The server's Retry-After shaped the sleep, and the store kept why.
    assert!(lanes.iter().all(|l| l.sleeps.iter().any(|s| s.reason == "retry-after-ms")), "{:?}", lanes[0].sleeps);
    // Each stored lane shows the verdict read from its stored events.
    assert_eq!(h.query_all_by_label("▲ rate limited (recovered)").count(), 2);
    // A stored lane opens in the detail panel: the 429, with the header
    // the wait came from.
    h.get_by_label("Lane run 1 · from-test · rate-limited-ms #1").click();
    h.run();
    assert!(h.query_all_by_label_contains("HTTP 429").count() >= 1);
    assert!(h.query_all_by_label("retry-after-ms").count() >= 1);
}

#[test]
fn the_budget_follows_a_tunable_edit() {
    let dir = Scratch::new("budget");
    let mut h = app(dir.path());
    h.state_mut().prefs.form.choice = Choice::AllStories;
    h.get_by_label("Budget").click();
    h.run();
    let verdict =
        |h: &Harness<'_, App>| h.get_by_label_contains("Worst case").accesskit_node().value().unwrap_or_default();
    let before = verdict(&h);
    assert!(before.contains("fits") || before.contains("NOT fit"), "{before}");
    // A 5 s cap on every attempt shortens the worst case.
    h.get_by_label("Tunables").click();
    h.run();
    let field = h.get_by_label("SSE_TOTAL_TIMEOUT_S");
    field.focus();
    field.type_text("5");
    h.run();
    h.get_by_label("Budget").click();
    h.run();
    let after = verdict(&h);
    assert_ne!(before, after);
    assert_eq!(h.state().prefs.tunables.assignments(), ["STALLSCOPE_SSE_TOTAL_TIMEOUT_S=05"]);
}

#[test]
fn a_proxy_password_from_the_environment_is_never_shown() {
    let dir = Scratch::new("secret");
    let env = vec![("STALLSCOPE_PROXY".to_owned(), "http://ops:hunter2@127.0.0.1:3128".to_owned())];
    let mut h = app_with_env(dir.path(), env);
    h.get_by_label("Tunables").click();
    h.run();
    // The value is there, from the environment, with its password masked.
    h.get_by_label("env");
    assert!(h.query_by_label_contains("hunter2").is_none());
    assert!(!h.get_by_label("PROXY").value().unwrap_or_default().contains("hunter2"));
    // The field starts empty (the masked value is its hint), so typing
    // cannot carry the mask into a new value.
    let field = h.get_by_label("PROXY");
    field.focus();
    field.type_text("off");
    h.run();
    assert_eq!(h.state().prefs.tunables.assignments(), ["STALLSCOPE_PROXY=off"]);
}

#[test]
fn two_stored_runs_compare_by_tunables_and_outcomes() {
    let dir = Scratch::new("compare");
    let mut h = app(dir.path());
    choose(&mut h, "healthy", 1);
    run_to_end(&mut h, 1);
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_TCP_KEEPCNT".into(), "5".into());
    run_to_end(&mut h, 1);
    assert!(h.state().live.results[0].contains("recorded as run 2"), "{:?}", h.state().live.results);
    h.get_by_label("History").click();
    wait_for(&mut h, "the history to list run 2", |h| h.query_by_label("A 2").is_some());
    h.get_by_label("A 1").click();
    h.run();
    h.get_by_label("B 2").click();
    h.run();
    h.get_by_label("Compare run 1 with run 2").click();
    wait_for(&mut h, "the comparison", |h| h.query_by_label_contains("Tunables that differ").is_some());
    h.get_by_label("Tunables that differ: 1");
    h.get_by_label("STALLSCOPE_TCP_KEEPCNT");
    h.get_by_label("Streams whose outcome changed: 0");
}

/// A harness over the timeline view alone, showing `timeline` as ended.
fn timeline_harness(timeline: Timeline) -> Harness<'static, (TimelineView, Timeline)> {
    let builder = Harness::builder().with_size(egui::vec2(1200.0, 700.0));
    builder.with_context_setup(|ctx| ctx.set_fonts(stallscope::gui::fonts())).build_ui_state(
        |ui, (view, timeline): &mut (TimelineView, Timeline)| {
            let end = timeline.end_s();
            view.ui(ui, timeline, Clock::Ended(end));
        },
        (TimelineView::default(), timeline),
    )
}

#[test]
fn every_lane_plot_spans_the_same_pixels_as_the_axis_whatever_its_header_holds() {
    // Headers of very different widths: a short label, a long one that
    // cannot wrap, and a long error.
    let mut timeline = Timeline::new();
    let short = timeline.add_part("ok", 0.0);
    let long = timeline.add_part("a-scenario-label-far-too-long-for-any-lane-header-to-hold", 0.0);
    let target = Target::new("sim", "model");
    let at = |ms| Duration::from_millis(ms);
    for (part, stream) in [(short, 0), (long, 1), (short, 2)] {
        let event = |ms, kind| Event { at: at(ms), stream, attempt: 1, kind };
        timeline.ingest(part, &event(0, EventKind::CallStarted { target: target.clone(), context_tokens: None }));
        timeline.ingest(part, &event(50, EventKind::ChunkReceived { bytes: 10 }));
    }
    let error = EventKind::ErrorClassified {
        category: Category::Timeout,
        timer: Some(TimerKind::Idle),
        status: None,
        retryable: false,
        rule: "builtin:an-unbreakable-rule-name-that-runs-on-and-on-and-on-and-on".into(),
        message: "stalled".into(),
    };
    timeline.ingest(short, &Event { at: at(80), stream: 2, attempt: 1, kind: error });
    let mut h = timeline_harness(timeline);
    h.run();
    let axis = h.get_by_label("Time axis").rect();
    let plots: Vec<egui::Rect> = h.query_all_by_label_contains("Plot of ").map(|node| node.rect()).collect();
    assert_eq!(plots.len(), 3);
    for plot in plots {
        assert_eq!((plot.left(), plot.right()), (axis.left(), axis.right()), "a lane's plot against the axis");
    }
}

/// Records one silent-stall call and opens it from the history.
fn open_a_stored_stall(h: &mut Harness<'_, App>) {
    choose(h, "silent-stall", 1);
    run_to_end(h, 1);
    h.get_by_label("History").click();
    wait_for(h, "the history to list run 1", |h| h.query_by_label("Open run 1").is_some());
    h.get_by_label("Open run 1").click();
    step_until(h, "the stored run to open", |app| app.live.playback().is_some());
    step_until(h, "the suggestions checked", |app| !app.live.checks.is_running());
}

fn cursor(h: &Harness<'_, App>) -> f64 {
    h.state().live.playback().expect("a stored run is shown").position_s()
}

fn shown(h: &Harness<'_, App>) -> (u64, Option<Outcome>) {
    let timeline = h.state().live.timeline();
    (timeline.event_count(), timeline.lanes.first().and_then(|l| l.outcome))
}

#[test]
fn a_stored_run_plays_steps_and_scrubs_back_on_the_lanes() {
    let dir = Scratch::new("replay");
    let mut h = app(dir.path());
    open_a_stored_stall(&mut h);
    // Opened paused at its end: the whole run, as recorded.
    let (total, outcome) = shown(&h);
    assert_eq!(outcome, Some(Outcome::Ok));
    let end = h.state().live.playback().unwrap().duration_s();
    assert!(end > 0.5, "a stall takes a while: {end}");
    let play_width = h.get_by_label("Play").rect().width();
    let lane = |h: &Harness<'_, App>| h.get_by(|n| n.label().is_some_and(|l| l.starts_with("Plot of "))).rect();
    h.run();
    let lane_at_end = lane(&h);

    // Home: the run's first moment, the call not finished.
    h.key_press(egui::Key::Home);
    h.step();
    let (at_start, outcome) = shown(&h);
    assert_eq!((cursor(&h), outcome), (0.0, None));
    assert!(at_start < total, "{at_start} of {total}");

    // A step shows the next moment's events and nothing more.
    h.get_by_label("Step forward").click();
    h.step();
    let stepped = shown(&h).0;
    assert!(stepped > at_start && cursor(&h) > 0.0, "{stepped} events at {}", cursor(&h));
    h.key_press(egui::Key::ArrowLeft);
    h.step();
    assert_eq!((shown(&h).0, cursor(&h)), (at_start, 0.0));

    // Play: each frame moves the cursor by its dt (kittest: a quarter
    // second, of which a frame takes at most a tenth) at 1×.
    h.get_by_label("Play").click();
    h.step();
    h.run_steps(4);
    let played = cursor(&h);
    assert!(played > 0.3 && played < 0.55, "{played}");
    assert!(shown(&h).0 > at_start);
    // Gui review D13: the toggle keeps its width, so nothing after it moves.
    assert_eq!(h.get_by_label("Pause").rect().width(), play_width);
    // Space pauses (after the frame that takes the key in has moved on);
    // the cursor stays put.
    h.key_press(egui::Key::Space);
    h.step();
    let paused = cursor(&h);
    assert!((paused - played - 0.1).abs() < 1e-6, "{paused} after {played}");
    h.run_steps(3);
    assert_eq!(cursor(&h), paused);
    assert!(!h.state().live.playback().unwrap().is_playing());

    // At 1000× the rest of the run plays in a frame, and stops at its end.
    h.get_by_label("Speed").click();
    h.run();
    h.get_by_label("1000×").click();
    h.run();
    assert_eq!(h.state().live.playback().unwrap().speed(), 1000.0);
    h.key_press(egui::Key::Space);
    h.run_steps(3);
    assert_eq!((cursor(&h), shown(&h)), (end, (total, Some(Outcome::Ok))));
    h.get_by_label("Play");

    // The scrubber back to before the stall: the lane is running again,
    // with the events up to there only.
    h.get_by_label("Cursor").set_value_accesskit(paused);
    h.run();
    assert!((cursor(&h) - paused).abs() < 1e-9, "{}", cursor(&h));
    let (scrubbed, outcome) = shown(&h);
    assert_eq!(outcome, None);
    assert!(scrubbed > at_start && scrubbed < total, "{scrubbed} of {total}");
    // Gui review D13: the verdict lines above the lane keep their room
    // while its verdict is not reached, so the lane stays put.
    assert!(h.query_by_label_contains("1 of 1 streams:").is_none(), "no verdict yet");
    assert_eq!(lane(&h), lane_at_end);
    h.get_by_label_contains(&format!("{scrubbed} of {total} events"));
    // End: everything again.
    h.key_press(egui::Key::End);
    h.step();
    assert_eq!(shown(&h), (total, Some(Outcome::Ok)));
}

#[test]
fn typing_a_space_in_a_field_does_not_play_the_stored_run() {
    let dir = Scratch::new("replay-typing");
    let mut h = app(dir.path());
    open_a_stored_stall(&mut h);
    let field = h.get_by_label("Prompt");
    field.focus();
    field.type_text(" ");
    h.key_press(egui::Key::Space);
    h.run_steps(2);
    assert!(!h.state().live.playback().unwrap().is_playing());
}

/// After a recorded run, an edited tunable and What-if replay the run in
/// virtual time: a fidelity badge, the summary of what changed, and each
/// stream's recorded lane beside its what-if lane on one time axis.
#[test]
fn what_if_replays_the_run_just_recorded_under_an_edit() {
    let dir = Scratch::new("whatif");
    let mut h = app(dir.path());
    choose(&mut h, "silent-stall", 2);
    run_to_end(&mut h, 2);
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_SSE_IDLE_TIMEOUT_S".into(), "0.4".into());
    h.run();
    h.get_by_label("What-if on run 1").click();
    step_until(&mut h, "the what-if to finish", |app| app.live.whatif.outcome().is_some());
    h.get_by_label_contains("replay faithful");
    h.get_by_label_contains("What-if on run 1: STALLSCOPE_SSE_IDLE_TIMEOUT_S=0.4");
    let outcome = h.state().live.whatif.outcome().unwrap();
    assert!(outcome.fidelity.is_exact(), "{:?}", outcome.fidelity);
    let lanes = &h.state().live.timeline().lanes;
    let parts: Vec<(usize, u64)> = lanes.iter().map(|l| (l.part, l.stream)).collect();
    assert_eq!(parts, [(0, 0), (1, 0), (0, 1), (1, 1)], "recorded and what-if lanes interleave per stream");
    // The idle timer fires 0.6 s sooner in each what-if lane.
    let fired = |i: usize| lanes[i].fired[0].at_s;
    for stream in [0, 2] {
        assert!((fired(stream) - fired(stream + 1) - 0.6).abs() < 0.01, "{} vs {}", fired(stream), fired(stream + 1));
    }
    // A what-if lane opens in the detail panel like any other.
    h.get_by_label("Lane what-if #1").click();
    h.run();
    h.get_by_label_contains("timer: idle 0.400 s, FIRED at");
    // The recorded run and its what-if each get their verdict summary.
    h.get_by_label("Verdicts, run 1: 2 streams");
    h.get_by_label("Verdicts, what-if: 2 streams");
    // Unticking the box shows the run's own lanes again.
    h.get_by_label("What-if lanes").click();
    h.run();
    assert_eq!(h.state().live.timeline().lanes.len(), 2);
}

/// Clicking a lane opens its detail panel: each attempt's response and
/// timers, and the stream's log with times, which copies as text and as
/// JSON.
#[test]
fn clicking_a_lane_opens_its_details_and_copies_its_log() {
    let dir = Scratch::new("detail");
    let mut h = app(dir.path());
    choose(&mut h, "silent-stall", 1);
    run_to_end(&mut h, 1);
    assert!(h.query_by_label("Copy log").is_none(), "no panel before a lane is picked");
    // The lane's verdict, as the stream finished: a silent stall the retry
    // recovered from.
    h.get_by_label("▲ silent stall (recovered)");
    h.get_by_label_contains("1 of 1 streams: silent stall");
    h.get_by_label("Lane silent-stall #0").click();
    h.run();
    // The verdict with its evidence and what governs it.
    h.get_by_label("▲ silent stall · recovered");
    h.get_by_label("Evidence");
    h.get_by_label("Tunable: STALLSCOPE_SSE_IDLE_TIMEOUT_S");
    assert!(h.query_by_label_contains("Suggestion: ").is_some());
    // The first attempt got its headers, then its idle timer fired; the
    // second streamed to the end.
    h.get_by_label_contains("Attempt 1 → sim/");
    h.get_by_label_contains("Attempt 2 → sim/");
    assert_eq!(h.query_all_by_label("HTTP 200 text/event-stream").count(), 2);
    h.get_by_label_contains("timer: idle 1.000 s, FIRED at");
    assert_eq!(h.query_all_by_label_contains("ended at ").count(), 2);
    h.get_by_label_contains(": idle timer fired · ");
    // The log begins with the call's start, at its time on the run's clock.
    let first = h.get_by_label_contains("call  call started → sim/").accesskit_node().value().unwrap_or_default();
    let at: f64 = first.split(" s ").next().unwrap().trim().parse().unwrap();
    assert!((0.0..0.5).contains(&at), "{first}");
    h.get_by_label("Copy log").click();
    h.step();
    let log = copied(&h).expect("the log on the clipboard");
    assert!(log.starts_with("silent-stall #0 → sim/"), "{log}");
    assert!(log.lines().nth(1).is_some_and(|l| l.starts_with("verdict: silent_stall: ")), "{log}");
    assert!(log.contains("idle timer FIRED after 1.000 s") && log.contains("chunks"), "{log}");
    assert!(log.lines().last().is_some_and(|l| l.contains("#2    finished: ok after 2 attempt(s)")), "{log}");
    h.get_by_label("Copy JSON").click();
    h.step();
    let json: serde_json::Value = serde_json::from_str(&copied(&h).expect("the JSON on the clipboard")).unwrap();
    assert_eq!((json["outcome"].as_str(), json["attempts"].as_array().map(Vec::len)), (Some("ok"), Some(2)));
    assert_eq!(json["attempts"][0]["end"], "idle timer fired");
    assert_eq!(
        (json["diagnosis"]["kind"].as_str(), json["diagnosis"]["trusted"].as_bool()),
        (Some("silent_stall"), Some(true))
    );
    h.get_by_label("Close").click();
    h.run();
    assert!(h.query_by_label("Copy log").is_none());
}

/// While a run goes on, the summary says how many of its calls are done,
/// running and queued; once all are done, only the counts.
#[test]
fn a_run_says_how_many_of_its_calls_are_done_running_and_queued() {
    let dir = Scratch::new("progress");
    let mut h = app(dir.path());
    choose(&mut h, "healthy", 6);
    h.state_mut().prefs.form.concurrency = 2;
    h.get_by_label("Run").click();
    h.step();
    wait_for(&mut h, "the summary to count queued calls", |h| {
        h.query_by_label_contains(" of 6 done: ").is_some_and(|n| {
            n.accesskit_node().value().is_some_and(|v| v.contains(" · 2 running · ") && v.contains(" queued"))
        })
    });
    step_until(&mut h, "6 stream(s) to end", |app| finished(app, 6));
    h.get_by_label_contains("6 ok · 0 partial · 0 failed · 0 cancelled · 0 running   p50 ");
    assert!(h.query_by_label_contains(" done: ").is_none());
}

/// Another lane's panel opens at its verdict, not scrolled down to where
/// the last one was read; the log's lines wrap to the panel's width
/// instead of being cut at its edge.
#[test]
fn another_lanes_panel_opens_at_its_verdict_and_its_log_wraps() {
    let dir = Scratch::new("detail-scroll");
    let mut h = app(dir.path());
    choose(&mut h, "silent-stall", 2);
    run_to_end(&mut h, 2);
    let verdict_top = |h: &Harness<'_, App>| h.get_by_label("▲ silent stall · recovered").rect().top();
    let below_buttons = |h: &Harness<'_, App>| h.get_by_label("Copy log").rect().bottom();
    h.get_by_label("Lane silent-stall #0").click();
    h.run();
    assert!(verdict_top(&h) > below_buttons(&h), "a panel opens at its verdict");
    // Read down to the second attempt's end: the verdict scrolls away.
    h.query_all_by_label_contains("ended at ").last().unwrap().scroll_to_me();
    h.run();
    assert!(verdict_top(&h) < below_buttons(&h), "the panel scrolled down");
    h.get_by_label("Lane silent-stall #1").click();
    h.run();
    assert!(h.get_by_label("silent-stall #1").rect().top() < below_buttons(&h));
    assert!(verdict_top(&h) > below_buttons(&h), "the next lane's panel opens at its verdict");
    // Every log line is inside the panel, and the longest takes more than
    // one row rather than being cut.
    let panel = h.get_by_label("Copy log").rect().left()..=h.get_by_label("Close").rect().right() + 1.0;
    let lines: Vec<_> = h
        .query_all_by_label_contains(" s  #")
        .filter(|l| l.accesskit_node().value().is_some_and(|v| v.starts_with("  ")))
        .collect();
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| panel.contains(&l.rect().right())), "each log line within the panel");
    let row = lines.iter().map(|l| l.rect().height()).fold(f32::INFINITY, f32::min);
    assert!(lines.iter().any(|l| l.rect().height() > 1.5 * row), "a long line wraps");
}

/// A story's run is tighter than real traffic allows: the app checks its
/// suggestions and offers none (it once offered
/// SSE_DATA_STALL_TIMEOUT_S=0.04 to paste, which cuts nearly every real
/// stream), and says why.
#[test]
fn a_storys_run_gets_no_suggestion_tighter_than_real_traffic_allows() {
    let dir = Scratch::new("unchecked");
    let mut h = app(dir.path());
    choose(&mut h, "silent-stall", 2);
    run_to_end(&mut h, 2);
    h.get_by_label_contains("Suggestions checked by what-if on run 1: none — no tighter timer keeps room");
    h.get_by_label("Lane silent-stall #0").click();
    h.run();
    assert!(h.query_by_label_contains("Checked by what-if:").is_none());
    assert!(h.query_by_label("Copy --set lines").is_none());
}

/// A stored run at the scale of real traffic — a keep-alive-only stall the
/// data-stall timer gave up on after 900 s, beside a healthy call — gets a
/// suggestion checked by what-if, as `runs show` gives it: the detail panel
/// says what the setting would have done, against how many healthy
/// attempts, and copies it as a `--set` line.
#[test]
fn a_recorded_stall_gets_a_checked_suggestion_to_copy() {
    let dir = Scratch::new("checked");
    history::round(&mut stallscope::store::Store::open(dir.path().join("runs.db")).unwrap(), 0, 0, true);
    let mut h = app(dir.path());
    h.get_by_label("History").click();
    wait_for(&mut h, "the history to list run 1", |h| h.query_by_label("Open run 1").is_some());
    h.get_by_label("Open run 1").click();
    step_until(&mut h, "the stored run to open", |app| app.live.playback().is_some());
    wait_for(&mut h, "the suggestions checked", |h| {
        h.query_by_label_contains("Suggestions checked by what-if on run 1: 1 stream").is_some()
    });
    let timeline = h.state().live.timeline();
    let lane = format!("Lane {} #0", timeline.label(&timeline.lanes[0]));
    h.get_by_label(&lane).click();
    h.run();
    h.get_by_label_contains("Checked by what-if: SSE_DATA_STALL_TIMEOUT_S=300");
    h.get_by_label_contains("fired on none of the 2 healthy attempts");
    h.get_by_label_contains("it fits this traffic, not every day");
    h.get_by_label("Copy --set lines").scroll_to_me();
    h.run();
    h.get_by_label("Copy --set lines").click();
    h.step();
    let lines = copied(&h).expect("the --set lines on the clipboard");
    assert_eq!(lines, "--set SSE_DATA_STALL_TIMEOUT_S=300");
}

/// ↑ and ↓ move the selection between the lanes shown, Esc closes it.
#[test]
fn the_keyboard_moves_between_lanes_and_closes_the_panel() {
    let dir = Scratch::new("detail-keys");
    let mut h = app(dir.path());
    choose(&mut h, "healthy", 3);
    run_to_end(&mut h, 3);
    h.get_by_label("Lane healthy #0").click();
    h.run();
    let selected =
        |h: &Harness<'_, App>| h.state().prefs.timeline.selected_lane(h.state().live.timeline()).map(|l| l.stream);
    assert_eq!(selected(&h), Some(0));
    h.key_press(egui::Key::ArrowDown);
    h.run();
    h.key_press(egui::Key::ArrowDown);
    h.run();
    assert_eq!(selected(&h), Some(2));
    h.key_press(egui::Key::ArrowDown);
    h.run();
    assert_eq!(selected(&h), Some(2), "the last lane stays selected");
    h.key_press(egui::Key::ArrowUp);
    h.run();
    assert_eq!(selected(&h), Some(1));
    h.get_by_label_contains("Event log (");
    h.key_press(egui::Key::Escape);
    h.run();
    assert_eq!(selected(&h), None);
    assert!(h.query_by_label_contains("Event log (").is_none());
    // A click on a lane's plot selects it too.
    h.get_by_label("Plot of healthy stream 2").click();
    h.run();
    assert_eq!(selected(&h), Some(2));
}

/// A finished stream `stream` of `part` with the verdict `kind`.
fn judged(timeline: &mut Timeline, part: usize, stream: u64, kind: VerdictKind, severity: Severity, trusted: bool) {
    let target = Target::new("sim", "model");
    let event = |ms, kind| Event { at: Duration::from_millis(ms), stream, attempt: 1, kind };
    timeline.ingest(part, &event(0, EventKind::CallStarted { target, context_tokens: None }));
    timeline.ingest(part, &event(40, EventKind::ChunkReceived { bytes: 10 }));
    let outcome = if severity == Severity::Failed { Outcome::Failed } else { Outcome::Ok };
    timeline.ingest(part, &event(90, EventKind::Finished { outcome, attempts: 1, stop_reason: None }));
    let summary = format!("{} on stream {stream}", kind.label());
    let mark = if trusted { summary } else { format!("client overloaded: not trustworthy; {summary}") };
    let diagnosis = Diagnosis {
        kind,
        severity,
        summary: mark,
        evidence: vec![],
        tunable: Some("STALLSCOPE_SSE_IDLE_TIMEOUT_S".into()),
        suggestion: None,
        checked: None,
        trusted,
        basis: Basis::default(),
    };
    timeline.set_verdict(part, stream, diagnosis);
}

/// The overview's legend names every state it draws, each inside the
/// strip's row even with few lanes (gui review D12).
#[test]
fn the_overview_legend_names_every_state_within_its_row() {
    let mut timeline = Timeline::new();
    let part = timeline.add_part("few", 0.0);
    judged(&mut timeline, part, 0, VerdictKind::Healthy, Severity::Ok, true);
    judged(&mut timeline, part, 1, VerdictKind::SilentStall, Severity::Failed, true);
    let mut h = timeline_harness(timeline);
    h.run();
    let strip = h.get_by_label("Overview of 2 streams").rect();
    for name in
        ["where it failed", "a stream that failed", "timer fired or cut", "failover", "backoff", "data", "waiting"]
    {
        let key = h.get_by_label(&format!("■ {name}")).rect();
        assert!(key.top() >= strip.top() - 1.0 && key.bottom() <= strip.bottom() + 1.0, "{name}: {key:?} in {strip:?}");
    }
}

/// Every lane carries its verdict (shape and words as well as colour),
/// the summary above the lanes groups the verdicts shown, and lanes filter
/// by verdict, with the summary following the filter.
#[test]
fn lanes_carry_their_verdicts_and_filter_by_them() {
    let mut timeline = Timeline::new();
    let part = timeline.add_part("mixed", 0.0);
    judged(&mut timeline, part, 0, VerdictKind::SilentStall, Severity::Recovered, true);
    judged(&mut timeline, part, 1, VerdictKind::SilentStall, Severity::Failed, false);
    judged(&mut timeline, part, 2, VerdictKind::Healthy, Severity::Ok, true);
    let mut h = timeline_harness(timeline);
    h.run();
    h.get_by_label("▲ silent stall (recovered)");
    h.get_by_label("■ silent stall (failed) ‼ not trustworthy");
    h.get_by_label("● healthy (ok)");
    h.get_by_label("Verdicts: 3 streams · 1 not trustworthy (client overloaded)");
    let plots = |h: &Harness<'_, (TimelineView, Timeline)>| h.query_all_by_label_contains("Plot of ").count();
    assert_eq!(plots(&h), 3);
    let pick = |h: &mut Harness<'_, (TimelineView, Timeline)>, choice: &str| {
        h.get_by_label("Verdict").click();
        h.run();
        h.get_by_label(choice).click();
        h.run();
    };

    pick(&mut h, "silent stall (2)");
    assert_eq!(plots(&h), 2);
    h.get_by_label("Verdicts: 2 streams · 1 not trustworthy (client overloaded)");
    h.get_by_label_contains("1 ok · 0 partial · 1 failed");

    pick(&mut h, "not trustworthy (1)");
    assert_eq!(plots(&h), 1);
    h.get_by_label("Verdicts: 1 stream · 1 not trustworthy (client overloaded)");

    // A line of the summary filters by its verdict.
    pick(&mut h, "all verdicts");
    assert_eq!(plots(&h), 3);
    let healthy = h.get_by_label_contains("of 3 streams: healthy");
    healthy.click();
    h.run();
    assert_eq!(plots(&h), 1);
    assert_eq!(h.state().0.verdict_filter, VerdictFilter::Kind(VerdictKind::Healthy));
}

// ---------------------------------------------------------------------
// The timeline as an operator's console: what a run shows when it ends,
// navigation, the overview, the marks, keys and copying.
// ---------------------------------------------------------------------

/// `n` finished lanes of one part, each 100 ms later than the one before
/// and 200 ms long; those in `failed` failed after an idle timer fired.
fn many_lanes(n: u64, failed: &[u64]) -> Timeline {
    let mut timeline = Timeline::new();
    let part = timeline.add_part("load", 0.0);
    for stream in 0..n {
        let start = stream * 100;
        let event = |ms, kind| Event { at: Duration::from_millis(start + ms), stream, attempt: 1, kind };
        let target = Target::new("sim", "model");
        timeline.ingest(part, &event(0, EventKind::CallStarted { target, context_tokens: None }));
        timeline.ingest(part, &event(50, EventKind::ChunkReceived { bytes: 100 * (stream as usize + 1) }));
        let outcome = if failed.contains(&stream) {
            let fired = EventKind::TimerFired { timer: TimerKind::Idle, after: Duration::from_millis(150), lag: None };
            timeline.ingest(part, &event(200, fired));
            Outcome::Failed
        } else {
            Outcome::Ok
        };
        timeline.ingest(part, &event(200, EventKind::Finished { outcome, attempts: 1, stop_reason: None }));
    }
    timeline
}

type ViewHarness = Harness<'static, (TimelineView, Timeline)>;

fn span(h: &ViewHarness) -> (f64, f64) {
    let shown = h.state().0.shown_span().expect("drawn");
    (shown.start_s, shown.end_s)
}

fn selected_stream(h: &ViewHarness) -> Option<u64> {
    h.state().0.selected_lane(&h.state().1).map(|l| l.stream)
}

fn right_drag(h: &mut ViewHarness, from: egui::Pos2, to: egui::Pos2) {
    let button = |pos, pressed| egui::Event::PointerButton {
        pos,
        button: egui::PointerButton::Secondary,
        pressed,
        modifiers: egui::Modifiers::NONE,
    };
    h.hover_at(from);
    h.step();
    h.event(button(from, true));
    h.step();
    h.hover_at(from + (to - from) / 2.0);
    h.step();
    h.hover_at(to);
    h.step();
    h.event(button(to, false));
    h.run();
}

/// Item 1: Fit covers the lanes the filter shows, a right-drag box zooms
/// to the span boxed, and zooming never changes the follow window.
#[test]
fn fit_follows_the_filter_and_a_right_drag_box_zooms() {
    let mut h = timeline_harness(many_lanes(30, &[20]));
    h.run();
    // Opened fitted: the whole run, 0 to 3.1 s, and a little room.
    let (a, b) = span(&h);
    assert!(a < 0.0 && a > -0.1 && b > 3.1 && b < 3.2, "{a}..{b}");
    // Only the failed lane: Fit shows its 200 ms, not the run.
    h.state_mut().0.outcome_filter = OutcomeFilter::Only(Outcome::Failed);
    h.run();
    h.get_by_label("Fit").click();
    h.run();
    let (a, b) = span(&h);
    assert!(a < 2.0 && a > 1.98 && b > 2.2 && b < 2.22, "{a}..{b}");
    // A box over the middle half of the lane's plot: that half is shown.
    let plot = h.get_by_label("Plot of load stream 20").rect();
    let at = |f: f32| egui::pos2(plot.left() + plot.width() * f, plot.center().y);
    right_drag(&mut h, at(0.25), at(0.75));
    let (c, d) = span(&h);
    let (want_c, want_d) = (a + (b - a) * 0.25, a + (b - a) * 0.75);
    assert!((c - want_c).abs() < 0.01 && (d - want_d).abs() < 0.01, "{c}..{d}, wanted {want_c}..{want_d}");
    // Zooming is not a setting: the follow window is what it was.
    assert_eq!(h.state().0.window_s, TimelineView::default().window_s);
    assert!(!h.state().0.follow_live);
}

/// Item 1 in the app: a run that ends is shown fitted and from the top,
/// whatever the last run's zoom and scroll; F5 starts it (item 8).
#[test]
fn a_run_that_ends_is_fitted_and_shown_from_the_top() {
    let dir = Scratch::new("fit-end");
    let mut h = app(dir.path());
    choose(&mut h, "healthy", 12);
    h.state_mut().prefs.form.concurrency = 12;
    run_to_end(&mut h, 12);
    // Scroll down to the last lane and zoom in, as a user looking around.
    h.get_by_label("Lane healthy #0").click();
    h.run();
    for _ in 0..11 {
        h.key_press(egui::Key::ArrowDown);
        // The scroll glides there over a few frames.
        h.run_steps(3);
    }
    h.run_steps(10);
    assert!(!h.state().prefs.timeline.rows_shown().contains(&0));
    h.key_press(egui::Key::W);
    h.run();
    let window = h.state().prefs.timeline.window_s;
    // F5 runs again; when the run ends its lanes are fitted, top first.
    h.key_press(egui::Key::F5);
    h.step();
    assert!(h.state().live.is_running(), "F5 starts a run");
    step_until(&mut h, "the second run to end", |app| finished(app, 12));
    h.run();
    let view = &h.state().prefs.timeline;
    assert_eq!(view.rows_shown().start, 0);
    let timeline = h.state().live.timeline();
    let order = view.visible_lanes(timeline, timeline.end_s());
    let fitted = view.fitted(timeline, &order, timeline.end_s());
    let shown = view.shown_span().unwrap();
    assert!((shown.start_s - fitted.start_s).abs() < 0.05 && (shown.end_s - fitted.end_s).abs() < 0.05, "{shown:?}");
    assert_eq!(view.window_s, window, "the zoom did not become the follow window");
    assert_eq!(view.selected_lane(timeline), None, "a new run starts with nothing selected");

    // Scrolled down and zoomed in again, then a stored run is opened: it
    // too is shown whole, from its first lane.
    h.get_by_label("Lane healthy #0").click();
    h.run();
    for _ in 0..11 {
        h.key_press(egui::Key::ArrowDown);
        h.run_steps(3);
    }
    h.key_press(egui::Key::W);
    h.run_steps(10);
    assert!(!h.state().prefs.timeline.rows_shown().contains(&0));
    h.get_by_label("History").click();
    wait_for(&mut h, "the history to list run 1", |h| h.query_by_label("Open run 1").is_some());
    h.get_by_label("Open run 1").click();
    step_until(&mut h, "the stored run to open", |app| app.live.playback().is_some());
    h.run_steps(3);
    let view = &h.state().prefs.timeline;
    assert_eq!(view.rows_shown().start, 0);
    let timeline = h.state().live.timeline();
    let order = view.visible_lanes(timeline, timeline.end_s());
    let fitted = view.fitted(timeline, &order, timeline.end_s());
    assert_eq!(view.shown_span(), Some(fitted));
}

/// Item 8: W/S zoom, A/D and the arrows pan, F fits, `/` goes to the
/// filter, Esc closes the panel; Ctrl+C copies what hovering a lane says
/// and Copy summary copies the summary.
#[test]
fn the_keys_move_the_view_and_copy_what_is_shown() {
    let mut h = timeline_harness(many_lanes(4, &[3]));
    h.run();
    let fitted = span(&h);
    let width = |s: (f64, f64)| s.1 - s.0;
    h.key_press(egui::Key::W);
    h.run();
    assert!((width(span(&h)) - width(fitted) * 0.8).abs() < 1e-6, "{:?}", span(&h));
    h.key_press(egui::Key::S);
    h.run();
    assert!((width(span(&h)) - width(fitted)).abs() < 1e-6);
    h.key_press(egui::Key::D);
    h.run();
    assert!((span(&h).0 - fitted.0 - width(fitted) * 0.2).abs() < 1e-6, "{:?}", span(&h));
    h.key_press(egui::Key::ArrowLeft);
    h.key_press(egui::Key::A);
    h.run();
    assert!((span(&h).0 - fitted.0 + width(fitted) * 0.2).abs() < 1e-6, "{:?}", span(&h));
    h.key_press(egui::Key::F);
    h.run();
    assert_eq!(span(&h), fitted);

    // `/` puts the cursor in the filter: what is typed next filters.
    h.key_press(egui::Key::Slash);
    h.run();
    h.event(egui::Event::Text("fail".into()));
    h.run();
    assert_eq!(h.state().0.text_filter, "fail");
    assert_eq!(h.query_all_by_label_contains("Plot of ").count(), 1);
    h.key_press(egui::Key::Escape);
    h.run();

    // Hovering a lane, Ctrl+C copies what the tooltip says (the lane runs
    // over the last 40 % of the span shown).
    let plot = h.get_by_label("Plot of load stream 3").rect();
    h.hover_at(egui::pos2(plot.left() + plot.width() * 0.8, plot.center().y));
    h.run();
    h.event(egui::Event::Copy);
    h.step();
    let text = copied(&h).expect("the hover text on the clipboard");
    assert!(text.contains(" s · ") && text.contains("received"), "{text}");
    h.get_by_label("Copy summary").click();
    h.step();
    let summary = copied(&h).expect("the summary on the clipboard");
    assert!(summary.starts_with("0 ok · 0 partial · 1 failed"), "{summary}");

    // Esc closes a lane's panel.
    h.get_by_label("Lane load #3").click();
    h.run();
    assert_eq!(selected_stream(&h), Some(3));
    h.key_press(egui::Key::Escape);
    h.run();
    assert_eq!(selected_stream(&h), None);
}

/// Item 7: with more lanes than fit, the overview stays above them; a
/// click on a failed lane's row goes to that lane; the text filter
/// matches outcomes and verdicts.
#[test]
fn the_overview_jumps_to_a_lane_and_the_filter_matches_outcomes_and_verdicts() {
    let mut timeline = many_lanes(60, &[45]);
    judged(&mut timeline, 0, 60, VerdictKind::SilentStall, Severity::Failed, false);
    let mut h = timeline_harness(timeline);
    h.run();
    let strip = h.get_by_label("Overview of 61 streams").rect();
    assert!(!h.state().0.rows_shown().contains(&45), "lane 45 starts out of view");
    // Row 45 of 61, at the time that lane failed (2.7 s of 0..6.1 s).
    let y = strip.top() + strip.height() * (45.5 / 61.0);
    let x = strip.left() + strip.width() * (4.7 / 6.2);
    h.get_by_label("Overview of 61 streams").hover();
    h.run();
    h.hover_at(egui::pos2(x, y));
    h.run();
    h.event(egui::Event::PointerButton {
        pos: egui::pos2(x, y),
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: egui::Modifiers::NONE,
    });
    h.event(egui::Event::PointerButton {
        pos: egui::pos2(x, y),
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: egui::Modifiers::NONE,
    });
    h.run();
    assert_eq!(selected_stream(&h), Some(45));
    assert!(h.state().0.rows_shown().contains(&45), "scrolled to it: {:?}", h.state().0.rows_shown());
    h.get_by_label("Plot of load stream 45");
    // The overview is still there, above the lanes.
    h.get_by_label("Overview of 61 streams");

    let filtered = |h: &mut ViewHarness, text: &str| {
        h.state_mut().0.text_filter = text.into();
        h.run();
        let timeline = &h.state().1;
        let order = h.state().0.visible_lanes(timeline, timeline.end_s());
        order.iter().map(|&i| timeline.lanes[i].stream).collect::<Vec<_>>()
    };
    assert_eq!(filtered(&mut h, "failed"), [45, 60]);
    assert_eq!(filtered(&mut h, "silent stall"), [60]);
    assert_eq!(filtered(&mut h, "not trustworthy"), [60]);
    assert_eq!(filtered(&mut h, "OK").len(), 59);
}

/// Item 3: the legend names each timer and mark once, in body text; the
/// bytes scale is an option; a proxy's "everything at once" is a burst on
/// its lane.
#[test]
fn the_marks_have_a_legible_legend_a_bytes_scale_and_a_visible_burst() {
    let dir = Scratch::new("marks");
    let mut h = app(dir.path());
    choose(&mut h, "proxy-buffered", 1);
    run_to_end(&mut h, 1);
    let lane = &h.state().live.timeline().lanes[0];
    assert_eq!(lane.bursts.len(), 1, "the proxy's release is one burst: {:?}", lane.output_ticks);
    let released = lane.bursts[0].at_s;
    assert!(released > 1.4, "after the 1.5 s hold: {released}");
    for entry in ["bytes received", "burst (output all at once)", "backoff sleep", "timer fired", "ttfb", "idle"] {
        h.get_by_label(entry);
    }
    assert!(h.query_by_label_contains("(1 = fires)").is_none());
    // The bytes scale: each lane's own, or the largest lane's.
    h.get_by_label("Bytes scale").click();
    h.run();
    h.get_by_label("largest lane").click();
    h.run();
    assert_eq!(h.state().prefs.timeline.bytes_scale, BytesScale::Shared);
}

/// History's multi-select → **Tune on these**: the runs picked are tuned
/// together, as `stallscope tune --runs` does, and the window says what
/// the CLI would, with the `--set` lines to copy.
#[test]
fn runs_picked_in_the_history_are_tuned_together() {
    let dir = Scratch::new("tune-these");
    {
        let mut store = stallscope::store::Store::open(dir.path().join("runs.db")).unwrap();
        for (index, stalled) in [(0, true), (1, false), (2, true)] {
            history::round(&mut store, index, index as i64 * 60_000_000_000, stalled);
        }
    }
    let mut h = app(dir.path());
    h.get_by_label("History").click();
    wait_for(&mut h, "the history to list run 3", |h| h.query_by_label("Tune on run 3").is_some());
    assert!(h.query_by_label("Tune (pick runs)").is_some(), "nothing picked yet");
    for run in [1, 3] {
        h.get_by_label(&format!("Tune on run {run}")).click();
        h.run();
    }
    h.get_by_label("Tune on these 2 runs").click();
    wait_for(&mut h, "the tune", |h| h.query_by_label_contains("tune 2 runs over").is_some());
    h.get_by_label("Tune on runs 1, 3");
    h.get_by_label_contains("4 healthy attempts, 2 stalls");
    h.get_by_label_contains("SSE_DATA_STALL_TIMEOUT_S=300");
    h.get_by_label("Copy --set lines").click();
    h.step();
    assert_eq!(copied(&h).as_deref(), Some("--set SSE_DATA_STALL_TIMEOUT_S=300 --set SSE_TOTAL_TIMEOUT_S=600"));
}

/// Gui review D3: F5 runs and Shift+F5 stops from any tab; Shift+F5 used
/// to start a run, as the plain F5 check read it first.
#[test]
fn f5_runs_and_shift_f5_stops_from_any_tab() {
    let dir = Scratch::new("shortcuts");
    let mut h = app(dir.path());
    choose(&mut h, "silent-stall", 2);
    h.key_press_modifiers(egui::Modifiers::SHIFT, egui::Key::F5);
    h.step();
    assert!(!h.state().live.is_running(), "Shift+F5 started a run");
    h.get_by_label("History").click();
    h.run();
    h.key_press(egui::Key::F5);
    h.step();
    assert!(h.state().live.is_running(), "F5 on the History tab did not run");
    h.key_press_modifiers(egui::Modifiers::SHIFT, egui::Key::F5);
    step_until(&mut h, "the run to stop", |app| !app.live.is_running());
}

/// Gui review D14: a broken config file is named once in the tab bar, not
/// "config: config …".
#[test]
fn a_broken_config_is_named_once() {
    let dir = Scratch::new("broken-config");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[[provider]]\nname = 3\n").unwrap();
    let db = dir.path().join("runs.db");
    let mut h = Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_eframe(move |cc| App::new(cc, Launch { config: Some(config), overrides: vec![] }, Some(db), vec![]));
    h.run();
    let node = h.get_by_label_contains("config.toml").accesskit_node();
    let shown = node.label().or(node.value()).unwrap_or_default();
    assert!(shown.starts_with("config ") && !shown.contains("config: config"), "{shown}");
}

/// Gui review D16: Copy .env of a scenario's tunables writes the defaults
/// for the values the scenario scaled down, and its demo values only when
/// asked.
#[test]
fn a_scenarios_demo_values_reach_the_env_file_only_when_asked() {
    let dir = Scratch::new("env-demo");
    let mut h = app(dir.path());
    choose(&mut h, "silent-stall", 1);
    h.get_by_label("Tunables").click();
    h.run();
    h.get_by_label("Copy .env").click();
    h.step();
    let env = copied(&h).expect("the .env on the clipboard");
    assert!(env.contains("\nSTALLSCOPE_SSE_IDLE_TIMEOUT_S=1800\n"), "{env}");
    assert!(env.contains("[scenario silent-stall sets 1, a demo value: its default here]"), "{env}");
    h.get_by_label("With the scenario's demo values").click();
    h.run();
    h.get_by_label("Copy .env").click();
    h.step();
    let env = copied(&h).expect("the .env on the clipboard");
    assert!(env.contains("[scenario silent-stall]\nSTALLSCOPE_SSE_IDLE_TIMEOUT_S=1\n"), "{env}");
}
