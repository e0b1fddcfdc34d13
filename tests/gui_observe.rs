//! The app's **Observe** (issue 25) driven headless: on a built-in
//! scenario's simulator, a plain HTTP client's requests come in as lanes
//! with their verdicts, and Stop ends the run, recorded.

mod app;

use app::{Scratch, open, wait_for};
use egui_kittest::kittest::Queryable;
use stallscope::core::event::Outcome;
use stallscope::diagnosis::VerdictKind;
use stallscope::gui::live::Choice;

/// Sends `n` streamed chat requests to `base` one after the other, as an
/// agent would, from a thread of its own.
fn agent(base: String, n: usize) -> std::thread::JoinHandle<Vec<u16>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let client = reqwest::Client::new();
            let mut statuses = Vec::new();
            for i in 0..n {
                let body =
                    format!(r#"{{"model":"gpt-x","stream":true,"messages":[{{"role":"user","content":"call {i}"}}]}}"#);
                let response = client.post(format!("{base}/v1/chat/completions")).body(body).send().await.unwrap();
                statuses.push(response.status().as_u16());
                response.text().await.unwrap();
            }
            statuses
        })
    })
}

#[test]
fn observed_calls_come_in_as_lanes_with_their_verdicts() {
    let dir = Scratch::new("observe");
    let mut h = open(&dir);
    h.state_mut().prefs.form.choice = Choice::Scenario("healthy".into());
    h.state_mut().prefs.form.observe_listen = "127.0.0.1:0".into();
    h.run();
    h.get_by_label("Observe").click();
    wait_for(&mut h, "the observer to listen", |h| h.state().live.observing().is_some());
    let observing = h.state().live.observing().unwrap().to_owned();
    h.get_by_label(&observing);
    let base = observing.trim_start_matches("observing on ").split(' ').next().unwrap().to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{observing}");

    let agent = agent(base.clone(), 2);
    wait_for(&mut h, "two observed calls with verdicts", |h| {
        let live = &h.state().live;
        let lanes = &live.timeline().lanes;
        lanes.len() == 2 && lanes.iter().all(|l| live.timeline().verdict(l).is_some())
    });
    assert_eq!(agent.join().unwrap(), [200, 200]);
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
