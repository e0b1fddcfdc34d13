//! The app's **Probe** button, driven headless with egui_kittest: the
//! readiness of every configured route, probed on the runner's runtime
//! against simulators on loopback, shown as a matrix and recorded.

mod app;

use app::{Scratch, wait_for};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use stallscope::gui::{App, Launch};
use stallscope::sim::{Scenario, SimServer};
use stallscope::store::Store;

/// Answers a short prompt; a request of 4000 bytes or more stalls after
/// its opening event.
const LARGE_STALL: &str = "[[attempts]]\nsteps = [{ content = \"ok\" }]\n\n[large_requests]\nfrom_bytes = 4000\n\n\
                           [[large_requests.attempts]]\nsteps = [{ preamble = true }, { stall_ms = \"forever\" }]\n";

fn row(name: &str, sim: &SimServer) -> String {
    format!(
        "[[provider]]\nname = \"{name}\"\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\n",
        sim.base_url()
    )
}

fn app(dir: &Scratch) -> Harness<'static, App> {
    let (config, db) = (dir.config(), dir.db());
    Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_eframe(move |cc| App::new(cc, Launch { config: Some(config), overrides: vec![] }, Some(db), vec![]))
}

#[test]
fn the_probe_button_shows_the_readiness_matrix_and_records_the_probe() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let serve = |text: &str| runtime.block_on(SimServer::start(Scenario::from_toml(text, "t.toml").unwrap(), 0));
    let healthy = serve("[[attempts]]\nsteps = [{ content = \"ok\" }]\n").unwrap();
    let stalling = serve(LARGE_STALL).unwrap();
    let dir = Scratch::new("probe");
    let tunables = "[tunables]\nSSE_IDLE_TIMEOUT_S = 0.3\nPROVIDER_STREAM_RETRIES = 1\n\
                    PROVIDER_STREAM_BACKOFF_S = 0.02\n\n[probe]\ncontext_tokens = 1500\n";
    std::fs::write(dir.config(), [row("fine", &healthy), row("bigstall", &stalling), tunables.to_owned()].concat())
        .unwrap();
    let mut h = app(&dir);
    h.run();
    h.get_by_label("Probe").click();
    h.step();
    assert!(h.state().live.probe.is_running());
    wait_for(&mut h, "the probe to end", |h| h.state().live.probe.readiness().is_some());
    let readiness = h.state().live.probe.readiness().unwrap().clone();
    let routes: Vec<(&str, bool)> = readiness.routes.iter().map(|r| (r.route.as_str(), r.ready)).collect();
    assert_eq!(routes, [("fine/m", true), ("bigstall/m", false)]);
    let run = readiness.run_id.expect("the form records, so the probe is recorded");
    h.get_by_label_contains(&format!(
        "Route readiness: 1 of 2 routes ready (realistic payload: 1500 tokens, recorded as run {run})"
    ));
    h.get_by_label("bigstall/m");
    h.get_by_label("failed");
    // The probe is a run of the history, labelled as one.
    h.get_by_label("History").click();
    wait_for(&mut h, "the history to list the probe", |h| h.query_by_label(&format!("Open run {run}")).is_some());
    h.get_by_label("probe");
    let store = Store::open(dir.db()).unwrap();
    let listed = store.list_runs().unwrap();
    assert_eq!(listed.iter().map(|r| (r.id, r.label.as_deref())).collect::<Vec<_>>(), [(run, Some("probe"))]);
    runtime.block_on(async {
        healthy.shutdown().await;
        stalling.shutdown().await;
    });
}

#[test]
fn without_configured_routes_the_probe_button_says_what_it_needs() {
    let dir = Scratch::new("probe-empty");
    std::fs::write(dir.config(), "").unwrap();
    let mut h = app(&dir);
    h.run();
    let button = h.get_by_label("Probe");
    button.hover();
    h.run();
    h.get_by_label_contains("Probe needs [[provider]] rows in the config file");
    assert!(h.get_by_label("Probe").accesskit_node().is_disabled());
}
