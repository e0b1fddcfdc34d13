//! The app's **Observe** (issue 25) driven headless: on a built-in
//! scenario's simulator, a plain HTTP client's requests come in as lanes
//! with their verdicts, and Stop ends the run, recorded; an agent that
//! gives up on a silent stall reads as the agent disconnecting, with our
//! timer's would-fire mark on its lane; with **Guard** (issue 26) the
//! core retries a silent stall and the agent reads one whole answer.

mod app;

use app::{Scratch, open, wait_for};
use egui_kittest::kittest::Queryable;
use std::time::Duration;

use stallscope::core::category::TimerKind;
use stallscope::core::event::Outcome;
use stallscope::diagnosis::{Severity, VerdictKind};
use stallscope::gui::live::Choice;

/// What the agent read of one response.
#[derive(Debug)]
struct Read {
    status: u16,
    /// Its `x-stallscope-guard` header.
    guard: Option<String>,
    /// Its body; empty when the agent gave up reading it.
    body: String,
}

/// Each response's status.
fn statuses(reads: &[Read]) -> Vec<u16> {
    reads.iter().map(|r| r.status).collect()
}

/// Sends `n` streamed chat requests to `base` one after the other, as an
/// agent would, from a thread of its own.
fn agent(base: String, n: usize) -> std::thread::JoinHandle<Vec<Read>> {
    agent_with(base, n, reqwest::Client::new())
}

/// [`agent`] with its own client; returns what it read of each response
/// (a client's read timeout gives up on a silent one).
fn agent_with(base: String, n: usize, client: reqwest::Client) -> std::thread::JoinHandle<Vec<Read>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut reads = Vec::new();
            for i in 0..n {
                let body =
                    format!(r#"{{"model":"gpt-x","stream":true,"messages":[{{"role":"user","content":"call {i}"}}]}}"#);
                let response = client.post(format!("{base}/v1/chat/completions")).body(body).send().await.unwrap();
                let status = response.status().as_u16();
                let guard = response.headers().get("x-stallscope-guard").and_then(|v| v.to_str().ok()).map(Into::into);
                reads.push(Read { status, guard, body: response.text().await.unwrap_or_default() });
            }
            reads
        })
    })
}

/// Starts **Observe** on built-in scenario `scenario` (guarding when the
/// form says so); returns its base URL.
fn observe(h: &mut egui_kittest::Harness<'static, stallscope::gui::App>, scenario: &str) -> String {
    h.state_mut().prefs.form.choice = Choice::Scenario(scenario.into());
    h.state_mut().prefs.form.observe_listen = "127.0.0.1:0".into();
    h.run();
    h.get_by_label("Observe").click();
    wait_for(h, "the observer to listen", |h| h.state().live.observing().is_some());
    let observing = h.state().live.observing().unwrap().to_owned();
    h.get_by_label(&observing);
    // `observing on URL → …`, or `guarding on URL → …`.
    let base = observing.split(' ').nth(2).unwrap().to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{observing}");
    base
}

#[test]
fn observed_calls_come_in_as_lanes_with_their_verdicts() {
    let dir = Scratch::new("observe");
    let mut h = open(&dir);
    let base = observe(&mut h, "healthy");

    let agent = agent(base.clone(), 2);
    wait_for(&mut h, "two observed calls with verdicts", |h| {
        let live = &h.state().live;
        let lanes = &live.timeline().lanes;
        lanes.len() == 2 && lanes.iter().all(|l| live.timeline().verdict(l).is_some())
    });
    assert_eq!(statuses(&agent.join().unwrap()), [200, 200]);
    let timeline = h.state().live.timeline();
    for lane in &timeline.lanes {
        assert_eq!(lane.outcome, Some(Outcome::Ok));
        assert_eq!(timeline.verdict(lane).map(|v| v.kind), Some(VerdictKind::Healthy));
    }
    let part = base.trim_start_matches("http://");
    h.get_by_label(&format!("observe@{part} #0  ok"));
    h.get_by_label_contains("2 of 2 streams: healthy");

    h.get_by_label("Stop").click();
    wait_for(&mut h, "the observer to stop", |h| !h.state().live.is_running());
    let results = &h.state().live.results;
    assert!(results.iter().any(|r| r.contains("2 ok") && r.contains("recorded as run 1")), "{results:?}");
}

/// An agent whose own read timeout (1 s) is shorter than a silent stall
/// gives up: its lane's verdict says the agent disconnected, and the lane
/// has our idle timer's mark (0.4 s in force) where it would have fired,
/// named in the legend, the run's verdicts and the stream's log.
#[test]
fn an_agent_that_gives_up_on_a_silent_stall_shows_our_timer_s_mark() {
    let dir = Scratch::new("observe-gone");
    let mut h = open(&dir);
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_SSE_IDLE_TIMEOUT_S".into(), "0.4".into());
    let base = observe(&mut h, "silent-stall");
    let impatient = reqwest::Client::builder().read_timeout(Duration::from_secs(1)).build().unwrap();
    let agent = agent_with(base.clone(), 1, impatient);
    wait_for(&mut h, "the observed call with its verdict", |h| {
        let live = &h.state().live;
        live.timeline().lanes.first().is_some_and(|l| live.timeline().verdict(l).is_some())
    });
    assert_eq!(statuses(&agent.join().unwrap()), [200]);
    let timeline = h.state().live.timeline();
    let lane = &timeline.lanes[0];
    assert_eq!(lane.outcome, Some(Outcome::Cancelled));
    let verdict = timeline.verdict(lane).unwrap();
    assert_eq!(verdict.kind, VerdictKind::Cancelled, "{}", verdict.summary);
    assert!(verdict.summary.starts_with("cancelled: the agent disconnected after 1."), "{}", verdict.summary);
    assert!(verdict.summary.contains("our idle timer (0.4 s) would have fired at 0.4"), "{}", verdict.summary);
    let [mark] = &lane.would_fire[..] else { panic!("one mark: {:?}", lane.would_fire) };
    assert_eq!((mark.timer, mark.label().as_str()), (TimerKind::Idle, "idle 400 ms would fire"));
    assert!(mark.at_s < lane.agent_gone[0].at_s, "our timer first, then the agent: {lane:?}");
    assert!(lane.agent_gone[0].text.starts_with("agent gone after 1."), "{:?}", lane.agent_gone);

    h.get_by_label("our timer would fire (observed: not acted on)");
    h.get_by_label("agent gone (observed)");
    h.get_by_label_contains(
        "1 of 1 streams: cancelled, the agent disconnected from 1, our idle timer would have fired on 1",
    );
    let part = base.trim_start_matches("http://");
    h.get_by_label(&format!("Lane observe@{part} #0")).click();
    // Observe goes on listening, so the app keeps repainting: a few frames.
    h.run_steps(3);
    h.get_by_label_contains("our idle timer (0.400 s) would have fired here (observed: not acted on)");
    h.get_by_label_contains("#1    the agent disconnected");
    h.get_by_label_contains("timer: idle 0.400 s, would have fired at");

    h.get_by_label("Stop").click();
    wait_for(&mut h, "the observer to stop", |h| !h.state().live.is_running());
}

/// With **Guard** ticked, a silent stall (the idle timer at 0.3 s in
/// force) is retried by the core: the agent reads one complete answer,
/// marked guarded, and the lane shows the call recovered on attempt 2.
#[test]
fn a_guarded_silent_stall_is_retried_and_the_agent_reads_a_whole_answer() {
    let dir = Scratch::new("observe-guard");
    let mut h = open(&dir);
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_SSE_IDLE_TIMEOUT_S".into(), "0.3".into());
    h.get_by_label("Guard").click();
    h.run();
    assert!(h.state().prefs.form.observe_guard);
    let base = observe(&mut h, "silent-stall");
    assert!(h.state().live.observing().unwrap().starts_with("guarding on http://"));

    let agent = agent(base.clone(), 1);
    wait_for(&mut h, "the guarded call with its verdict", |h| {
        let live = &h.state().live;
        live.timeline().lanes.first().is_some_and(|l| live.timeline().verdict(l).is_some())
    });
    let [read] = &agent.join().unwrap()[..] else { panic!("one response") };
    assert_eq!((read.status, read.guard.as_deref()), (200, Some("on")), "{}", read.body);
    assert_eq!(read.body.matches(r#""role":"assistant""#).count(), 1, "one start: {}", read.body);
    assert!(read.body.ends_with("data: [DONE]\n\n"), "{}", read.body);
    let timeline = h.state().live.timeline();
    let lane = &timeline.lanes[0];
    assert_eq!((lane.outcome, lane.attempt_count), (Some(Outcome::Ok), 2));
    let verdict = timeline.verdict(lane).unwrap();
    assert_eq!(
        (verdict.kind, verdict.severity),
        (VerdictKind::SilentStall, Severity::Recovered),
        "{}",
        verdict.summary
    );
    assert!(verdict.summary.ends_with("recovered on attempt 2"), "{}", verdict.summary);
    let part = base.trim_start_matches("http://");
    h.get_by_label(&format!("observe@{part} #0  ok"));

    h.get_by_label("Stop").click();
    wait_for(&mut h, "the guard to stop", |h| !h.state().live.is_running());
    let results = &h.state().live.results;
    assert!(results.iter().any(|r| r.contains("1 ok") && r.contains("recorded as run 1")), "{results:?}");
}
