//! The app as an operator's console (issue 14), driven headless with
//! egui_kittest over real app state: scenarios a newcomer can discover, a
//! tunables editor that cannot mislead, a history that says what happened,
//! every tab usable in a small window, a bounded event channel, the
//! system's theme, and a config file fixed while the app runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod app;

use app::{Scratch, wait_for};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use stallscope::gui::history::RunAgain;
use stallscope::gui::live::{Choice, Live};
use stallscope::gui::{App, Launch, Tab, repaint_every};
use stallscope::store::runs::RunStatus;
use stallscope::store::{RunStart, Store};
use stallscope::tunables::Tunables;

/// The app in a `size` window over `dir`'s config (empty unless written
/// already) and database, with the environment `env` only.
fn console(dir: &Scratch, size: (f32, f32), env: Vec<(String, String)>) -> Harness<'static, App> {
    if !dir.config().exists() {
        std::fs::write(dir.config(), "").unwrap();
    }
    let (config, db) = (dir.config(), dir.db());
    Harness::builder()
        .with_size(egui::vec2(size.0, size.1))
        .build_eframe(move |cc| App::new(cc, Launch { config: Some(config), overrides: vec![] }, Some(db), env))
}

fn app(dir: &Scratch) -> Harness<'static, App> {
    console(dir, (1280.0, 800.0), vec![])
}

fn ran(h: &Harness<'_, App>, streams: usize) -> bool {
    !h.state().live.is_running() && h.state().live.timeline().lanes.len() == streams
}

/// Presses Run and waits until the run's `streams` streams have ended.
fn run_to_end(h: &mut Harness<'_, App>, streams: usize) {
    h.get_by_label("Run").click();
    h.step();
    wait_for(h, &format!("{streams} stream(s) to end"), |h| ran(h, streams));
    // A check of its suggestions arriving later would change what a test
    // looks at under it.
    wait_for(h, "the suggestions checked", |h| !h.state().live.checks.is_running());
}

fn choose(h: &mut Harness<'_, App>, scenario: &str, requests: u32) {
    h.state_mut().prefs.form.choice = Choice::Scenario(scenario.into());
    h.state_mut().prefs.form.requests = requests;
}

fn tab(h: &mut Harness<'_, App>, name: &str) {
    h.get_by_label(name).click();
    h.run();
}

fn is_disabled(h: &Harness<'_, App>, label: &str) -> bool {
    h.get_by_label(label).accesskit_node().is_disabled()
}

/// The runs in `db`, newest first.
fn stored(db: &Path) -> Vec<stallscope::store::runs::RunSummary> {
    Store::open(db).unwrap().list_runs().unwrap()
}

// Item 2: discoverable scenarios.

#[test]
fn the_empty_live_view_says_what_the_app_is_for_and_offers_a_first_run() {
    let dir = Scratch::new("welcome");
    let mut h = app(&dir);
    h.run();
    h.get_by_label_contains("Watch streaming LLM calls fail");
    h.get_by_label("First run: silent-stall, 4 calls").click();
    h.step();
    wait_for(&mut h, "the first run to end", |h| ran(h, 4));
    assert_eq!(h.state().prefs.form.choice, Choice::Scenario("silent-stall".into()));
    assert!(h.query_by_label_contains("Watch streaming LLM calls fail").is_none(), "the welcome gives way to lanes");
    assert!(h.query_by_label_contains("The VPN or NAT stall").is_none(), "so does the scenario's description");
    h.get_by_label("About scenario: silent-stall").click();
    h.run();
    h.get_by_label_contains("The VPN or NAT stall");
}

#[test]
fn the_picker_puts_configured_providers_first_and_each_choice_explains_itself() {
    let dir = Scratch::new("picker");
    let row =
        "[[provider]]\nname = \"acme\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m1\"\n";
    std::fs::write(dir.config(), row).unwrap();
    let mut h = app(&dir);
    h.get_by_label("Source").click();
    h.run();
    let top = |h: &Harness<'_, App>, label: &str| h.get_by_label(label).rect().top();
    assert!(top(&h, "provider: acme/m1") < top(&h, "all failure stories"));
    assert!(top(&h, "all failure stories") < top(&h, "scenario: auth-expired"));
    // An entry's description shows beside the list, not over the entries
    // under it (gui review D18). (About shows another scenario's.)
    choose(&mut h, "drip", 4);
    h.run();
    let entry = h.get_by_label("scenario: silent-stall").rect();
    h.get_by_label("scenario: silent-stall").hover();
    h.run();
    let description = h.get_by_label_contains("The VPN or NAT stall").rect();
    assert!(
        description.left() >= entry.right() || description.right() <= entry.left(),
        "{description:?} over {entry:?}"
    );
    h.get_by_label("scenario: proxy-buffered").click();
    h.run();
    // The scenario's own description, and what to change to see more.
    h.get_by_label_contains("tighten STALLSCOPE_SSE_IDLE_TIMEOUT_S below 1.5");
    let try_this = h.get_by_label_contains("Try: It sets ").value().unwrap_or_default();
    assert!(try_this.contains("STALLSCOPE_SSE_IDLE_TIMEOUT_S=3"), "{try_this}");
}

// Item 4: the tunables editor cannot mislead.

#[test]
fn export_refuses_while_an_edit_is_invalid_and_asks_before_replacing_a_file() {
    let dir = Scratch::new("export");
    let mut h = app(&dir);
    let file = dir.path().join("tuned.env");
    h.state_mut().prefs.tunables.env_path = file.display().to_string();
    tab(&mut h, "Tunables");
    // The full path is on screen before anything is written.
    h.get_by_label(&format!("→ {}", file.display()));
    let field = h.get_by_label("SSE_IDLE_TIMEOUT_S");
    field.focus();
    field.type_text("abc");
    h.run();
    assert!(is_disabled(&h, "Export .env") && is_disabled(&h, "Copy .env"));
    h.get_by_label_contains("fix them before exporting");
    assert!(!file.exists());
    h.get_by_label("Reset SSE_IDLE_TIMEOUT_S").click();
    h.run();
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_TCP_KEEPCNT".into(), "7".into());
    h.get_by_label("Export .env").click();
    h.run();
    assert!(std::fs::read_to_string(&file).unwrap().contains("STALLSCOPE_TCP_KEEPCNT=7"));
    h.get_by_label_contains(&format!("to {}", file.display()));
    // A second export finds the file: nothing is written until the user says so.
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_TCP_KEEPCNT".into(), "8".into());
    h.get_by_label("Export .env").click();
    h.run();
    h.get_by_label_contains("exists: replace it?");
    assert!(std::fs::read_to_string(&file).unwrap().contains("STALLSCOPE_TCP_KEEPCNT=7"));
    h.get_by_label("Replace tuned.env").click();
    h.run();
    assert!(std::fs::read_to_string(&file).unwrap().contains("STALLSCOPE_TCP_KEEPCNT=8"));
}

#[test]
fn reset_all_edits_can_be_undone() {
    let dir = Scratch::new("undo");
    let mut h = app(&dir);
    let edits = [("STALLSCOPE_TCP_KEEPCNT", "7"), ("STALLSCOPE_SSE_IDLE_TIMEOUT_S", "9")];
    for (name, value) in edits {
        h.state_mut().prefs.tunables.edits.insert(name.into(), value.into());
    }
    tab(&mut h, "Tunables");
    assert!(is_disabled(&h, "Undo reset"));
    h.get_by_label("Reset all edits").click();
    h.run();
    assert!(h.state().prefs.tunables.edits.is_empty());
    h.get_by_label_contains("reset 2 edit(s)");
    h.get_by_label("Undo reset").click();
    h.run();
    let back: Vec<(&str, &str)> =
        h.state().prefs.tunables.edits.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(back, [("STALLSCOPE_SSE_IDLE_TIMEOUT_S", "9"), ("STALLSCOPE_TCP_KEEPCNT", "7")]);
}

#[test]
fn switches_are_checkboxes_and_choices_are_pickers() {
    let dir = Scratch::new("widgets");
    let mut h = app(&dir);
    h.state_mut().prefs.tunables.filter = "ROTATION".into();
    tab(&mut h, "Tunables");
    h.get_by_label("CREDENTIAL_ROTATION").click();
    h.run();
    h.get_by_label("least-used").click();
    h.run();
    assert_eq!(h.state().prefs.tunables.assignments(), ["STALLSCOPE_CREDENTIAL_ROTATION=least-used"]);
    h.state_mut().prefs.tunables.filter = "PARTIAL_RECOVERY".into();
    h.run();
    let switch = h.get_by_label("PARTIAL_RECOVERY");
    assert_eq!(switch.accesskit_node().role(), egui::accesskit::Role::CheckBox);
    switch.click();
    h.run();
    assert!(h.state().prefs.tunables.edits.contains_key("STALLSCOPE_PARTIAL_RECOVERY"));
    assert_eq!(h.state().prefs.tunables.invalid(), 0, "a checkbox can only give a valid switch");
}

#[test]
fn an_error_under_a_field_does_not_move_the_rows_below() {
    let dir = Scratch::new("steady");
    let mut h = app(&dir);
    h.state_mut().prefs.tunables.filter = "SSE_".into();
    tab(&mut h, "Tunables");
    let below = |h: &Harness<'_, App>| h.get_by_label("SSE_DATA_STALL_TIMEOUT_S").rect();
    let before = below(&h);
    let field = h.get_by_label("SSE_IDLE_TIMEOUT_S");
    assert!(field.rect().top() < before.top());
    field.focus();
    field.type_text("abc");
    h.run();
    h.get_by_label_contains("(from the app's Tunables view) is not accepted");
    assert_eq!(below(&h), before);
    // The Live view says why Run is greyed out on Run's own row: what is
    // under it stays where it was.
    h.state_mut().prefs.tunables.edits.clear();
    tab(&mut h, "Live");
    let about = |h: &Harness<'_, App>| h.get_by_label_contains("About scenario").rect();
    let before = about(&h);
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_SSE_IDLE_TIMEOUT_S".into(), "abc".into());
    h.run();
    h.get_by_label_contains("edited tunable(s) are not accepted: fix them in the Tunables view");
    assert_eq!(about(&h), before);
}

// Item 5: history says what happened.

/// A run of `scenario` stored in `db` as part of `batch`.
fn store_run(db: &Path, scenario: &str, batch: Option<i64>) {
    let mut store = Store::open(db).unwrap();
    let start = RunStart::new(None, Some(scenario.into()), &Tunables::defaults(), &[]).in_batch(batch);
    let id = store.begin_run(&start).unwrap();
    let report = stallscope::report::RunReport::new(
        Some(scenario.into()),
        Tunables::defaults().snapshot(),
        &[],
        Duration::from_millis(5),
    );
    store.finish_run(id, &report, 0).unwrap();
}

/// The welcome card is for a newcomer: with runs stored, the Live view
/// says where they are instead (gui review D18).
#[test]
fn the_welcome_is_for_a_newcomer_only() {
    let dir = Scratch::new("welcome");
    let mut h = app(&dir);
    h.run();
    h.get_by_label_contains("First run: silent-stall");
    drop(h);
    store_run(&dir.db(), "healthy", None);
    let mut h = app(&dir);
    wait_for(&mut h, "the history read", |h| h.state().prefs.history.stored() == 1);
    h.run();
    assert!(h.query_by_label_contains("First run: ").is_none());
    h.get_by_label_contains("or open a stored run in History (1 stored)");
}

#[test]
fn a_batch_is_one_history_row_that_unfolds_into_its_parts() {
    let dir = Scratch::new("batch");
    for scenario in ["drip", "silent-stall", "slow-ttfb"] {
        store_run(&dir.db(), scenario, Some(42));
    }
    store_run(&dir.db(), "healthy", None);
    let mut h = app(&dir);
    tab(&mut h, "History");
    wait_for(&mut h, "the history", |h| h.query_by_label("Open run 4").is_some());
    h.get_by_label("3 scenarios: drip, silent-stall, slow-ttfb");
    h.get_by_label("More on batch 1");
    assert!(h.query_by_label("Open run 1").is_none(), "parts are folded");
    h.get_by_label("Show 3 parts").click();
    h.run();
    for id in 1..=3 {
        h.get_by_label(&format!("Open run {id}"));
    }
    // Start times carry seconds.
    let started = h.query_all_by_label_contains(":").filter_map(|n| n.value()).collect::<Vec<_>>();
    assert!(started.iter().any(|t| t.len() == 19 && t.as_bytes()[16] == b':'), "{started:?}");
}

#[test]
fn a_batch_run_from_the_form_is_recorded_as_one_batch() {
    let form = stallscope::gui::live::RunForm { choice: Choice::AllStories, ..Default::default() };
    let plans = form.plans(None, vec![], vec![], Some(PathBuf::from("x.db")));
    let batches: std::collections::BTreeSet<_> =
        plans.iter().map(|(_, p)| p.recording.as_ref().unwrap().batch).collect();
    assert!(plans.len() > 10);
    assert_eq!(batches.len(), 1);
    assert!(batches.iter().all(Option::is_some));
}

#[test]
fn a_stopped_run_says_stopped_and_its_queue_is_not_started() {
    let dir = Scratch::new("stop");
    let mut h = app(&dir);
    choose(&mut h, "silent-stall", 6);
    h.state_mut().prefs.form.concurrency = 2;
    // Both first calls stall for a minute: only Stop ends them.
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_SSE_IDLE_TIMEOUT_S".into(), "60".into());
    h.get_by_label("Run").click();
    wait_for(&mut h, "two calls to start", |h| h.state().live.timeline().lanes.len() == 2);
    // Running a stored run again now would cancel this one: it is refused.
    let again = RunAgain {
        from: 9,
        choice: Choice::Scenario("healthy".into()),
        requests: 1,
        concurrency: 1,
        edits: Default::default(),
    };
    let ctx = h.ctx.clone();
    h.state_mut().run_again(again, &ctx);
    assert!(h.state().live.is_running());
    assert!(h.state().live.results.iter().any(|r| r.contains("a run is going on; stop it first")));
    h.get_by_label("Stop").click();
    wait_for(&mut h, "the run to stop", |h| !h.state().live.is_running());
    h.get_by_label_contains("stopped: 0 ok, 0 partial, 0 failed, 2 cancelled, 4 not started");
    let run = &stored(&dir.db())[0];
    assert_eq!((run.status, run.outcomes.cancelled, run.outcomes.not_started), (RunStatus::Stopped, 2, 4));
    assert_eq!((run.p50_ms, run.p99_ms), (None, None), "no call ran to its end");
    tab(&mut h, "History");
    wait_for(&mut h, "the stopped run", |h| h.query_by_label("stopped, 4 not started").is_some());
    assert!(h.query_by_label("0 ms").is_none());
}

#[test]
fn a_run_that_cannot_start_leaves_no_row_and_says_why() {
    let dir = Scratch::new("nokey");
    let row = "[[provider]]\nname = \"acme\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
               model = \"m1\"\napi_key_env = \"ACME_KEY\"\n";
    std::fs::write(dir.config(), row).unwrap();
    let mut h = app(&dir);
    h.state_mut().prefs.form.choice = Choice::Provider("acme/m1".into());
    h.get_by_label("Run").click();
    wait_for(&mut h, "the run to give up", |h| !h.state().live.results.is_empty());
    h.get_by_label_contains("could not run: provider `acme`: environment variable ACME_KEY is not set");
    assert!(!dir.db().exists() || stored(&dir.db()).is_empty(), "nothing was recorded");
}

#[test]
fn the_label_goes_with_the_next_run_only() {
    let dir = Scratch::new("label");
    let mut h = app(&dir);
    choose(&mut h, "healthy", 1);
    let field = h.get_by_label("Label next run");
    field.focus();
    field.type_text("baseline");
    h.run();
    run_to_end(&mut h, 1);
    h.get_by_label_contains("Recorded with the label “baseline”");
    assert_eq!(h.state().prefs.form.label, "", "the field is cleared once used");
    run_to_end(&mut h, 1);
    let labels: Vec<Option<String>> = stored(&dir.db()).into_iter().map(|r| r.label).collect();
    assert_eq!(labels, [None, Some("baseline".to_owned())]);
}

#[test]
fn a_row_exports_its_trace_runs_again_and_is_deleted_after_a_confirmation() {
    let dir = Scratch::new("row");
    let mut h = app(&dir);
    choose(&mut h, "healthy", 2);
    h.state_mut().prefs.form.concurrency = 1;
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_TCP_KEEPCNT".into(), "5".into());
    run_to_end(&mut h, 2);
    h.state_mut().prefs.history.export_dir = dir.path().display().to_string();
    h.state_mut().prefs.tunables.edits.clear();
    h.state_mut().prefs.form = Default::default();
    tab(&mut h, "History");
    wait_for(&mut h, "run 1", |h| h.query_by_label("Open run 1").is_some());

    h.get_by_label("More on run 1").click();
    h.run();
    h.get_by_label("Export run 1 as a Perfetto trace").click();
    let trace = dir.path().join("run-1.trace.json");
    wait_for(&mut h, "the trace", |h| h.query_by_label_contains("wrote run 1's trace").is_some());
    let events: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(events.as_array().is_some_and(|a| !a.is_empty()) || events["traceEvents"].is_array());

    h.get_by_label("More on run 1").click();
    h.run();
    h.get_by_label("Run run 1 again with these settings").click();
    wait_for(&mut h, "run 2 to end", |h| h.state().prefs.tab == Tab::Live && ran(h, 2));
    let app = h.state();
    assert_eq!(app.prefs.form.choice, Choice::Scenario("healthy".into()));
    assert_eq!((app.prefs.form.requests, app.prefs.form.concurrency), (2, 1));
    assert_eq!(app.prefs.tunables.assignments(), ["STALLSCOPE_TCP_KEEPCNT=5"]);

    tab(&mut h, "History");
    wait_for(&mut h, "run 2", |h| h.query_by_label("Open run 2").is_some());
    h.get_by_label("More on run 1").click();
    h.run();
    h.get_by_label("Delete run 1…").click();
    h.run();
    h.get_by_label_contains("Delete run 1 and everything recorded for it?");
    assert_eq!(stored(&dir.db()).len(), 2, "nothing is deleted before the confirmation");
    h.get_by_label("Delete run 1").click();
    wait_for(&mut h, "run 1 to go", |h| h.query_by_label("Open run 1").is_none());
    let left: Vec<i64> = stored(&dir.db()).iter().map(|r| r.id).collect();
    assert_eq!(left, [2]);
}

#[test]
fn compare_shows_each_change_with_its_unit() {
    let dir = Scratch::new("delta");
    let mut h = app(&dir);
    choose(&mut h, "healthy", 1);
    run_to_end(&mut h, 1);
    choose(&mut h, "healthy", 2);
    run_to_end(&mut h, 2);
    tab(&mut h, "History");
    wait_for(&mut h, "run 2", |h| h.query_by_label("A 2").is_some());
    h.get_by_label("A 1").click();
    h.run();
    h.get_by_label("B 2").click();
    h.run();
    h.get_by_label("Compare run 1 with run 2").click();
    wait_for(&mut h, "the comparison", |h| h.query_by_label("change").is_some());
    h.get_by_label("+1 calls");
    assert!(h.query_all_by_label_contains(" ms").count() >= 3, "p50, p99 and elapsed with their unit");

    // Both runs' lanes, stream by stream, on one axis from each run's start.
    h.get_by_label("Show both runs' lanes").click();
    wait_for(&mut h, "the lanes of both runs", |h| h.query_by_label_contains("Comparing runs 1 and 2").is_some());
    let timeline = h.state().live.timeline();
    let labels: Vec<&str> = timeline.parts.iter().map(|p| p.label.as_str()).collect();
    assert_eq!((labels, timeline.parts_compared), (vec!["run 1", "run 2"], true));
    let lanes: Vec<(usize, u64)> = timeline.lanes.iter().map(|l| (l.part, l.stream)).collect();
    assert_eq!(lanes, [(0, 0), (1, 0), (1, 1)], "stream 0 of each run, then run 2's second stream");
    assert!(timeline.lanes.iter().all(|l| l.started_s < 1.0), "each run's lanes start at its own start");
    assert!(timeline.lanes.iter().all(|l| timeline.verdict(l).is_some()), "each lane keeps its verdict");
    // The summary is each run's own, named, not the two pooled.
    h.run();
    let summary = h.get_by_label_contains("run 1: 1 ok · ").accesskit_node().value().unwrap_or_default();
    assert!(summary.contains("\nrun 2: 2 ok · "), "{summary}");
}

// Item 6: every tab usable at 800×600.

#[test]
fn at_800_by_600_the_history_scrolls_sideways_to_its_last_column() {
    let dir = Scratch::new("narrow");
    store_run(&dir.db(), "healthy", None);
    let mut h = console(&dir, (800.0, 600.0), vec![]);
    tab(&mut h, "History");
    wait_for(&mut h, "run 1", |h| h.query_by_label("Open run 1").is_some());
    assert!(h.get_by_label("Open run 1").rect().left() > 800.0, "the last column starts off-screen");
    // A sideways wheel (or Shift and the wheel) over the table.
    let table = h.get_by_label("Started (UTC) ▼").rect().center();
    h.event(egui::Event::PointerMoved(table));
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Point,
        delta: egui::vec2(-600.0, 0.0),
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Unknown,
        modifiers: egui::Modifiers::NONE,
    });
    h.run();
    let open = h.get_by_label("Open run 1").rect();
    assert!(open.right() <= 800.0 && open.left() >= 0.0, "{open:?}");
    h.get_by_label("Open run 1").click();
    wait_for(&mut h, "the run to open", |h| h.state().prefs.tab == Tab::Live);
}

#[test]
fn at_800_by_600_each_form_label_stays_beside_its_field() {
    let dir = Scratch::new("form");
    let mut h = console(&dir, (800.0, 600.0), vec![]);
    h.run();
    for label in ["Requests", "Concurrency", "Label next run"] {
        let name = h.get_by_label(label).rect();
        let field = h.query_all_by_label(label).map(|n| n.rect()).find(|r| *r != name).unwrap_or(name);
        assert!((name.center().y - field.center().y).abs() < 4.0, "{label}: {name:?} and {field:?}");
        // The row wraps before a pair that does not fit, instead of running off the window.
        assert!(field.right() <= 800.0, "{label}: {field:?}");
    }
}

/// At 800×600 with a stored run open and a what-if over it, the lanes
/// keep at least half the height: what is above them scrolls; the
/// transport bar and the what-if line wrap inside the window.
#[test]
fn at_800_by_600_a_stored_run_and_its_what_if_leave_the_lanes_half_the_height() {
    let dir = Scratch::new("small-whatif");
    let mut h = console(&dir, (800.0, 600.0), vec![]);
    choose(&mut h, "silent-stall", 2);
    run_to_end(&mut h, 2);
    tab(&mut h, "History");
    wait_for(&mut h, "run 1", |h| h.query_by_label("Open run 1").is_some());
    // The table's last column starts off-screen at this width.
    h.get_by_label("Open run 1").click_accesskit();
    wait_for(&mut h, "the stored run", |h| h.query_by_label_contains("Showing stored run 1").is_some());
    h.state_mut().prefs.tunables.edits.insert("STALLSCOPE_SSE_IDLE_TIMEOUT_S".into(), "0.4".into());
    h.run();
    h.get_by_label("What-if on run 1").click();
    wait_for(&mut h, "the what-if", |h| h.state().live.whatif.outcome().is_some());
    h.run();
    let (view, axis) = (h.get_by_label("Live").rect().bottom(), h.get_by_label("Time axis").rect());
    assert!(600.0 - axis.top() >= (600.0 - view) / 2.0, "the lanes have half the view below {view}: {axis:?}");
    inside_800(&h);
    assert!(axis.right() <= 800.0, "{axis:?}");
    let first = h.query_all_by_label_contains("Plot of ").map(|n| n.rect()).fold(f32::INFINITY, |y, r| y.min(r.top()));
    assert!(first < 600.0 - 60.0, "a lane shows: {first}");
    for label in ["Speed", "Cursor"] {
        let r = h.get_by_label(label).rect();
        assert!(r.right() <= 800.0, "{label}: {r:?}");
    }
    let whatif = h.get_by_label_contains("What-if on run 1: STALLSCOPE_SSE_IDLE_TIMEOUT_S=0.4").rect();
    assert!(whatif.right() <= 800.0, "{whatif:?}");
    // The budget's table and chart legend too.
    tab(&mut h, "Budget");
    inside_800(&h);
}

/// The budget table's last column takes the rest of the row and wraps in
/// it, small window or large: not a column a button wide with its words
/// running down the page (a Grid that is not told its number of columns
/// wraps the last one in its first frame's width).
#[test]
fn the_budget_table_s_last_column_takes_the_rest_of_the_row() {
    for (width, height) in [(800.0, 600.0), (1600.0, 1000.0)] {
        let dir = Scratch::new(&format!("budget-{width}"));
        let mut h = console(&dir, (width, height), vec![]);
        h.run();
        tab(&mut h, "Budget");
        let how = h.get_by_label("how").rect();
        let cells: Vec<egui::Rect> = h
            .query_all_by(|node| {
                node.role() == egui::accesskit::Role::Label
                    && node
                        .bounding_box()
                        .is_some_and(|b| (b.x0 as f32 - how.left()).abs() < 1.0 && b.y0 as f32 > how.bottom())
            })
            .map(|node| node.rect())
            .collect();
        assert_eq!(cells.len(), 2, "the attempt's and the call's: {cells:?}");
        for cell in cells {
            assert!(cell.width() >= 300.0 && cell.right() <= width, "{width}: {cell:?}");
            assert!(cell.height() <= 3.0 * how.height(), "{width}: at most 3 lines under {how:?}: {cell:?}");
        }
    }
}

/// Nothing reaches past an 800-pixel window's right edge (a row that did
/// would widen every row under it).
fn inside_800(h: &Harness<'_, App>) {
    for node in h.query_all_by(|_| true) {
        let right = node.accesskit_node().bounding_box().map_or(0.0, |b| b.x1);
        assert!(right <= 800.5, "{:?} ends at {right}", node.accesskit_node().value());
    }
}

#[test]
fn at_640_by_400_every_tab_keeps_its_controls_inside_the_window() {
    let dir = Scratch::new("tiny");
    let mut h = console(&dir, (640.0, 400.0), vec![]);
    h.run();
    let inside = |h: &Harness<'_, App>, label: &str| {
        let r = h.get_by_label(label).rect();
        assert!(r.left() >= 0.0 && r.right() <= 640.0 && r.bottom() <= 400.0, "{label}: {r:?}");
    };
    for label in ["Run", "Stop", "Source"] {
        inside(&h, label);
    }
    for label in ["Label next run", "Theme"] {
        inside(&h, label);
    }
    tab(&mut h, "Tunables");
    for label in ["Filter tunables", "Undo reset", "File", "Export .env", "Copy .env"] {
        inside(&h, label);
    }
    tab(&mut h, "Budget");
    inside(&h, "Budget");
    tab(&mut h, "History");
    for label in ["Refresh", "Filter runs", "Export folder"] {
        inside(&h, label);
    }
}

#[test]
fn lanes_can_be_taller_on_a_large_window() {
    let dir = Scratch::new("height");
    let mut h = app(&dir);
    choose(&mut h, "healthy", 1);
    run_to_end(&mut h, 1);
    let lane = |h: &Harness<'_, App>| h.get_by_label("Lane healthy #0").rect().height();
    let (before, set) = (lane(&h), h.state().prefs.timeline.lane_height);
    h.get_by_label("Lane height").focus();
    h.get_by_label("Lane height").set_value_accesskit(f64::from(set) * 2.0);
    h.run();
    assert_eq!(h.state().prefs.timeline.lane_height, set * 2.0);
    // The lane itself is drawn that much taller.
    assert!((lane(&h) - before - set).abs() < 1.0, "{before} → {}", lane(&h));
}

// Item 9: cost while running.

#[test]
fn a_run_repaints_slowly_where_its_lanes_are_not_shown() {
    assert!(repaint_every(Tab::History) >= repaint_every(Tab::Live) * 5);
    assert!(repaint_every(Tab::Budget) >= repaint_every(Tab::Live) * 5);
}

#[test]
fn events_the_app_falls_behind_on_are_dropped_counted_and_shown() {
    let dir = Scratch::new("drops");
    let mut h = app(&dir);
    h.state_mut().live = Live::with_event_capacity(8);
    choose(&mut h, "healthy", 4);
    h.get_by_label("Run").click();
    h.step();
    // No frame drains the channel until the run is over.
    std::thread::sleep(Duration::from_secs(3));
    wait_for(&mut h, "the run to end", |h| !h.state().live.is_running());
    let dropped = h.state().live.dropped();
    assert!(dropped > 0);
    h.get_by_label(&format!(
        "{dropped} events not shown: the app fell behind the run (the recording keeps every event)"
    ));
    // Verdicts and part ends are never dropped; the recording has everything.
    assert_eq!(h.state().live.results.len(), 1);
    let run = &stored(&dir.db())[0];
    assert_eq!((run.outcomes.ok, run.dropped_events), (4, 0));
}

// Item 10: smaller things.

#[test]
fn the_theme_follows_the_system() {
    let dir = Scratch::new("theme");
    let mut h = app(&dir);
    h.run();
    assert_eq!(h.ctx.options(|o| o.theme_preference), egui::ThemePreference::System);
    for (system, dark) in [(egui::Theme::Light, false), (egui::Theme::Dark, true), (egui::Theme::Light, false)] {
        h.input_mut().system_theme = Some(system);
        h.run();
        assert_eq!(h.ctx.theme() == egui::Theme::Dark, dark, "{system:?}");
    }
}

#[test]
fn a_run_of_one_provider_needs_no_key_for_the_others() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let scenario = stallscope::sim::builtin("healthy").unwrap();
    let server = runtime.block_on(stallscope::sim::SimServer::start(scenario, 0)).unwrap();
    let dir = Scratch::new("onekey");
    let rows = format!(
        "[[provider]]\nname = \"near\"\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"sim-model-a\"\n\
         api_key_env = \"NEAR_KEY\"\n\n[[provider]]\nname = \"far\"\nkind = \"openai-chat\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"FAR_KEY\"\n",
        server.base_url()
    );
    std::fs::write(dir.config(), rows).unwrap();
    let mut h = console(&dir, (1280.0, 800.0), vec![("NEAR_KEY".into(), "sk-near".into())]);
    h.state_mut().prefs.form.choice = Choice::Provider("near/sim-model-a".into());
    h.state_mut().prefs.form.requests = 1;
    run_to_end(&mut h, 1);
    assert!(h.state().live.results[0].contains("1 ok"), "{:?}", h.state().live.results);
    runtime.block_on(server.shutdown());
}

#[test]
fn a_config_file_fixed_while_the_app_runs_is_read_again() {
    let dir = Scratch::new("reload");
    std::fs::write(dir.config(), "[[provider]]\nname = \"acme\"\nkind = \"nonsense\"\n").unwrap();
    let mut h = app(&dir);
    h.run();
    // Named once: its errors already say "config PATH: …".
    let named = format!("config {}: ", dir.config().display());
    h.get_by_label_contains(&named);
    assert!(h.query_by_label_contains("config: config").is_none());
    let row =
        "[[provider]]\nname = \"acme\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m1\"\n";
    // The fix wakes the window: it is read without a mouse move (gui review
    // D14). Frames are drawn here only when one is asked for, as eframe
    // draws them.
    std::fs::write(dir.config(), row).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while h.query_by_label_contains(&named).is_some() {
        assert!(std::time::Instant::now() < deadline, "the fix never woke the window");
        if h.ctx.has_requested_repaint() {
            h.step();
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    h.get_by_label("Source").click();
    h.run();
    h.get_by_label("provider: acme/m1");
}

#[test]
fn help_says_the_app_opens_without_a_subcommand_and_the_app_takes_db_and_config() {
    use clap::Parser;
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_stallscope")).arg("--help").output().unwrap();
    let text = String::from_utf8(help.stdout).unwrap();
    assert!(text.contains("With no subcommand, stallscope opens the desktop app"), "{text}");
    let cli = stallscope::cli::Cli::try_parse_from(["stallscope", "--db", "mine.db", "--config", "c.toml"]).unwrap();
    assert_eq!((cli.db, cli.config, cli.command.is_none()), (Some("mine.db".into()), Some("c.toml".into()), true));
}
