//! The desktop app (the default command): live lanes of every stream, the
//! stored history, the tunables editor and the budget view, over the same
//! library calls as the CLI.
//!
//! The UI thread never waits on the network or the database: runs go on a
//! background runtime ([`runner`]), events arrive through a channel that
//! [`App::logic`](eframe::App::logic) drains every frame, and history reads
//! run on background threads. While a run goes on the app repaints at
//! 30 frames a second only when the Live view shows it, and four times a
//! second otherwise. The theme follows the system's, light or dark; the
//! config file is read again when it changes.

pub mod budget;
pub mod checks;
pub mod config_watch;
pub mod decimate;
pub mod detail;
pub mod form;
pub mod history;
pub mod labels;
pub mod lanes;
pub mod live;
pub mod memory;
pub mod overview;
pub mod palette;
pub mod playback;
pub mod probe;
pub mod replay;
pub mod runner;
pub mod save;
pub mod saved_url;
pub mod timeline;
pub mod transport;
pub mod tunables;
pub mod tune_runs;
pub mod verdicts;
pub mod viewport;
pub mod whatif;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigFile, Layers, Settings, default_path, process_env};
use crate::probe::{DEFAULT_CONCURRENCY, ProbePlan};
use crate::session::{RecordTo, RunSource, settings_for};
use crate::store::Store;
use budget::BudgetView;
use config_watch::ConfigWatch;
use history::{HistoryView, Picked, RunAgain};
use live::{Action, Choice, Live, RunForm};
use timeline::{LANE_HEIGHTS, TimelineView};
use tunables::TunablesEditor;

/// What the app is started with (from the command line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    /// The config file (`None`: the default location, when it exists).
    pub config: Option<PathBuf>,
    /// `--set NAME=VALUE` overrides, below the app's own edits.
    pub overrides: Vec<String>,
}

/// Opens the app's window over the database `db` (`None`: the platform's)
/// and runs it until it is closed.
pub fn open(launch: Launch, db: Option<PathBuf>) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_title("stallscope").with_inner_size([1440.0, 900.0]),
        ..Default::default()
    };
    let db = db.or_else(Store::default_path);
    eframe::run_native("stallscope", options, Box::new(move |cc| Ok(Box::new(App::new(cc, launch, db, process_env())))))
        .map_err(|e| {
            anyhow::anyhow!(
                "the window could not be opened ({e}); without a display, use the command line (stallscope --help)"
            )
        })
}

/// The views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Tab {
    /// The run form and the timeline.
    #[default]
    Live,
    /// Stored runs.
    History,
    /// The tunables editor.
    Tunables,
    /// The worst-case budget.
    Budget,
}

/// Everything that persists between launches.
#[derive(Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct Prefs {
    /// The view shown.
    pub tab: Tab,
    /// The run form.
    pub form: RunForm,
    /// Timeline options.
    pub timeline: TimelineView,
    /// Tunable edits and export options.
    pub tunables: TunablesEditor,
    /// Budget inputs.
    pub budget: BudgetView,
    /// History filter and sort.
    pub history: HistoryView,
    /// Light, dark, or as the system is (the default).
    pub theme: egui::ThemePreference,
}

impl Default for Prefs {
    fn default() -> Self {
        Prefs {
            tab: Tab::default(),
            form: RunForm::default(),
            timeline: TimelineView::default(),
            tunables: TunablesEditor::default(),
            budget: BudgetView::default(),
            history: HistoryView::default(),
            theme: egui::ThemePreference::System,
        }
    }
}

const PREFS_KEY: &str = "stallscope";

/// The app.
pub struct App {
    /// What persists.
    pub prefs: Prefs,
    /// The run going on and its timeline.
    pub live: Live,
    launch: Launch,
    db: Option<PathBuf>,
    env: Vec<(String, String)>,
    providers: Result<Vec<String>, String>,
    settings: Option<(SettingsKey, Result<Settings, String>)>,
    config_watch: ConfigWatch,
}

/// egui's fonts with Hack behind Ubuntu in proportional text too, for
/// the arrows and shapes the lanes and legends use (→ ■ ▲ ▼).
pub fn fonts() -> egui::FontDefinitions {
    let mut fonts = egui::FontDefinitions::default();
    if let Some(family) = fonts.families.get_mut(&egui::FontFamily::Proportional) {
        let at = family.iter().position(|f| f == "Ubuntu-Light").map_or(0, |i| i + 1);
        family.insert(at, "Hack".to_owned());
    }
    fonts
}

/// What the effective settings depend on.
type SettingsKey = (Choice, Vec<String>);

impl App {
    /// The app over the database `db` and the environment `env`, with the
    /// state saved by the last launch (when the platform keeps one).
    pub fn new(
        cc: &eframe::CreationContext<'_>,
        launch: Launch,
        db: Option<PathBuf>,
        env: Vec<(String, String)>,
    ) -> Self {
        cc.egui_ctx.set_fonts(fonts());
        let prefs: Prefs = cc.storage.and_then(|s| eframe::get_value(s, PREFS_KEY)).unwrap_or_default();
        let config_watch = ConfigWatch::new(launch.config.clone().or_else(default_path), cc.egui_ctx.clone());
        let mut app = App {
            prefs,
            live: Live::default(),
            launch,
            db,
            env,
            providers: Ok(Vec::new()),
            settings: None,
            config_watch,
        };
        app.read_config();
        app.prefs.history.refresh(&app.db, &cc.egui_ctx);
        app
    }

    /// Reads the providers of the config file (again), and forgets the
    /// settings made from the old one.
    fn read_config(&mut self) {
        let source = RunSource::Config { path: self.launch.config.clone(), target: None };
        self.providers = settings_for(&source, &self.launch.overrides, &[], &self.env)
            .map(|s| s.providers.iter().map(|p| format!("{}/{}", p.name, p.model)).collect())
            .map_err(|e| e.to_string());
        self.settings = None;
        // A provider that left the config is not offered again.
        if let Choice::Provider(target) = &self.prefs.form.choice
            && !self.providers.as_ref().is_ok_and(|p| p.contains(target))
        {
            self.prefs.form.choice = RunForm::default().choice;
        }
    }

    /// Reads the config file again when it changed (a fix is picked up
    /// without a restart, and without waiting for a repaint: see
    /// [`config_watch`]).
    fn watch_config(&mut self) {
        if self.config_watch.changed() {
            self.read_config();
        }
    }

    /// The effective settings of the next run (recomputed only when the
    /// choice or the edits change).
    pub fn settings(&mut self) -> &Result<Settings, String> {
        let key = (self.prefs.form.choice.clone(), self.prefs.tunables.assignments());
        if self.settings.as_ref().is_none_or(|(k, _)| *k != key) {
            let settings = self.compute_settings(&key);
            self.settings = Some((key, settings));
        }
        &self.settings.as_ref().expect("just set").1
    }

    fn compute_settings(&self, (choice, edits): &SettingsKey) -> Result<Settings, String> {
        let (env, overrides) = (&self.env, &self.launch.overrides);
        let result = match choice {
            Choice::Scenario(name) => {
                let source = RunSource::Scenario { name: name.clone(), dialect: self.prefs.form.dialect };
                settings_for(&source, overrides, edits, env)
            }
            Choice::Provider(_) => {
                let source = RunSource::Config { path: self.launch.config.clone(), target: None };
                settings_for(&source, overrides, edits, env)
            }
            // Each story adds its own recommendations on top of these.
            Choice::AllStories => {
                let layers = Layers { config: ConfigFile::None, scenario: None, overrides, edits };
                Settings::load(layers, env.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(Into::into)
            }
        };
        result.map_err(|e| e.to_string())
    }

    /// F5 runs and Shift+F5 stops, as in an IDE's debugger, from any tab
    /// and even from a field. egui's plain F5 also matches Shift+F5, so
    /// the more specific shortcut is read first.
    fn shortcuts(&mut self, ctx: &egui::Context) {
        let stop = ctx.input_mut(|i| i.consume_key(egui::Modifiers::SHIFT, egui::Key::F5));
        let run = !stop && ctx.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::F5));
        if stop && self.live.is_running() {
            self.live.stop();
        }
        if run && !self.live.is_running() && self.blocked().is_none() {
            self.start_run(ctx);
        }
    }

    /// Why Run cannot be pressed now, if it cannot.
    fn blocked(&mut self) -> Option<String> {
        let invalid = self.prefs.tunables.invalid();
        if invalid > 0 {
            return Some(format!("{invalid} edited tunable(s) are not accepted: fix them in the Tunables view"));
        }
        self.settings().as_ref().err().cloned()
    }

    /// Starts a run of the form's choice. The label goes with this run
    /// only.
    pub fn start_run(&mut self, ctx: &egui::Context) {
        let (config, overrides) = (self.launch.config.clone(), self.launch.overrides.clone());
        let plans = self.prefs.form.plans(config, overrides, self.prefs.tunables.assignments(), self.db.clone());
        self.live.start(plans, self.env.clone(), ctx);
        self.prefs.form.label.clear();
        self.prefs.timeline.follow_live = true;
    }

    /// Observes an agent's traffic with the form's listen address and
    /// upstream (else its source), under the tunables being edited.
    pub fn start_observe(&mut self, ctx: &egui::Context) {
        let (config, overrides, edits) =
            (self.launch.config.clone(), self.launch.overrides.clone(), self.prefs.tunables.assignments());
        match self.prefs.form.observe_plan(config, overrides, edits, self.db.clone()) {
            Ok(plan) => {
                self.live.start_observe(plan, self.env.clone(), ctx);
                self.prefs.form.label.clear();
                self.prefs.timeline.follow_live = true;
            }
            Err(why) => self.live.results.push(why),
        }
    }

    /// Probes every configured route with the tunables being edited,
    /// recorded when the form records.
    pub fn start_probe(&mut self, ctx: &egui::Context) {
        let recording = self.db.clone().filter(|_| self.prefs.form.record);
        let plan = ProbePlan {
            config: self.launch.config.clone(),
            overrides: self.launch.overrides.clone(),
            edits: self.prefs.tunables.assignments(),
            context_tokens: None,
            concurrency: DEFAULT_CONCURRENCY,
            recording: recording.map(|db| RecordTo { db, label: None, batch: None }),
            seed: None,
        };
        self.live.start_probe(plan, self.env.clone(), ctx);
    }

    /// Starts a stored run again with its settings: its source and size
    /// in the form, its explicitly set tunables as the edits (the edits
    /// they replace can be brought back with Undo reset).
    pub fn run_again(&mut self, again: RunAgain, ctx: &egui::Context) {
        self.prefs.tab = Tab::Live;
        if self.live.is_running() {
            // Starting would cancel the run going on without a word.
            let refused = format!("run {} again: could not run: a run is going on; stop it first", again.from);
            self.live.results.push(refused);
            return;
        }
        let form = &mut self.prefs.form;
        (form.choice, form.requests, form.concurrency) = (again.choice, again.requests, again.concurrency);
        self.prefs.tunables.replace(again.edits);
        match self.blocked() {
            None => self.start_run(ctx),
            Some(why) => self.live.results = vec![format!("run {} again: could not run: {why}", again.from)],
        }
    }

    fn tabs(&mut self, ui: &mut egui::Ui) {
        // Wraps in a narrow window rather than widen every view below.
        ui.horizontal_wrapped(|ui| {
            ui.heading("stallscope");
            ui.separator();
            for (tab, name) in
                [(Tab::Live, "Live"), (Tab::History, "History"), (Tab::Tunables, "Tunables"), (Tab::Budget, "Budget")]
            {
                ui.selectable_value(&mut self.prefs.tab, tab, name);
            }
            if self.prefs.tab == Tab::Live {
                ui.separator();
                let height =
                    egui::DragValue::new(&mut self.prefs.timeline.lane_height).range(LANE_HEIGHTS).suffix(" px");
                form::labelled(ui, "Lane height", 60.0, |ui| ui.add(height));
            }
            ui.separator();
            theme_picker(ui, &mut self.prefs.theme);
            if let Err(e) = &self.providers {
                ui.separator();
                ui.label(egui::RichText::new(config_problem(e)).color(ui.visuals().error_fg_color));
            }
        });
    }
}

/// The theme: the system's (the default), or light or dark whatever the
/// system says.
fn theme_picker(ui: &mut egui::Ui, preference: &mut egui::ThemePreference) {
    let name = |p| match p {
        egui::ThemePreference::System => "as the system",
        egui::ThemePreference::Light => "light",
        egui::ThemePreference::Dark => "dark",
    };
    let picker = egui::ComboBox::from_label("Theme").selected_text(name(*preference));
    picker.show_ui(ui, |ui| {
        for choice in [egui::ThemePreference::System, egui::ThemePreference::Light, egui::ThemePreference::Dark] {
            ui.selectable_value(preference, choice, name(choice));
        }
    });
}

/// How often a run going on is drawn: smoothly where its lanes show, and
/// just enough elsewhere for the tabs' spinners and the channel to keep up.
pub fn repaint_every(tab: Tab) -> Duration {
    match tab {
        Tab::Live => Duration::from_millis(33),
        Tab::History | Tab::Tunables | Tab::Budget => Duration::from_millis(250),
    }
}

impl eframe::App for App {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        if ctx.options(|o| o.theme_preference) != self.prefs.theme {
            ctx.set_theme(self.prefs.theme);
        }
        self.watch_config();
        if self.live.poll() {
            // The run's record is complete: show it in the history, and
            // check its suggestions.
            self.prefs.history.refresh(&self.db, ctx);
            self.live.start_checks(self.db.clone(), ctx);
        }
        match self.prefs.history.poll(&self.db, ctx) {
            Some(Picked::Open(opened)) => {
                self.live.show_stored(opened.title, opened.id, opened.replay);
                self.live.start_checks(self.db.clone(), ctx);
                self.prefs.timeline.fit();
                self.prefs.tab = Tab::Live;
            }
            Some(Picked::Again(again)) => self.run_again(again, ctx),
            Some(Picked::Compared { title, timeline }) => {
                self.live.show_compared(title, timeline);
                self.prefs.timeline.fit();
                self.prefs.tab = Tab::Live;
            }
            None => {}
        }
        self.live.poll_checks();
        if self.live.probe.poll() {
            // A recorded probe is a run of the history.
            self.prefs.history.refresh(&self.db, ctx);
        }
        if self.live.whatif.poll() {
            self.prefs.timeline.fit();
        }
        if self.live.is_running() || self.live.probe.is_running() {
            ctx.request_repaint_after(repaint_every(self.prefs.tab));
        }
        // At most a tenth of a second per frame: a slow frame (a big jump
        // folded into the lanes) must not make the next jump bigger still.
        let dt = ctx.input(|i| i.stable_dt).min(0.1);
        if self.live.advance(f64::from(dt)) {
            ctx.request_repaint();
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.shortcuts(ui.ctx());
        egui::Panel::top("tabs").show(ui, |ui| self.tabs(ui));
        egui::CentralPanel::default().show(ui, |ui| match self.prefs.tab {
            Tab::Live => {
                let blocked = self.blocked();
                let providers = self.providers.clone().unwrap_or_default();
                let stored_runs = self.prefs.history.stored();
                let Prefs { form, timeline, .. } = &mut self.prefs;
                match self.live.ui(ui, form, timeline, &providers, blocked, stored_runs) {
                    Action::Run => self.start_run(ui.ctx()),
                    Action::WhatIf => {
                        let changes = self.prefs.tunables.assignments();
                        self.live.start_whatif(self.db.clone(), changes, ui.ctx());
                    }
                    Action::Probe => self.start_probe(ui.ctx()),
                    Action::Observe => self.start_observe(ui.ctx()),
                    Action::None => {}
                }
            }
            Tab::History => self.prefs.history.ui(ui, &self.db),
            Tab::Tunables => {
                self.settings();
                let settings = &self.settings.as_ref().expect("computed above").1;
                ui.label(format!("Effective for: {}", self.prefs.form.choice.title()));
                self.prefs.tunables.ui(ui, settings);
            }
            Tab::Budget => {
                self.settings();
                let settings = &self.settings.as_ref().expect("computed above").1;
                // Its table and plot need more room than a small window has.
                egui::ScrollArea::both().auto_shrink([false, false]).show(ui, |ui| {
                    ui.label(format!("Tunables of: {}", self.prefs.form.choice.title()));
                    self.prefs.budget.ui(ui, settings);
                });
            }
        });
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, PREFS_KEY, &self.prefs);
    }

    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        self.live.stop();
    }
}

/// The config file's problem, as the tab bar says it: named once (its
/// errors already say "config PATH: …").
fn config_problem(error: &str) -> String {
    if error.starts_with("config ") || error.starts_with("cannot read config ") {
        error.to_owned()
    } else {
        format!("config: {error}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_persists_survives_a_restart_and_an_older_save() {
        let mut prefs = Prefs { tab: Tab::Budget, ..Prefs::default() };
        prefs.form.choice = Choice::AllStories;
        prefs.form.requests = 9;
        prefs.tunables.edits.insert("STALLSCOPE_TCP_KEEPCNT".to_owned(), "5".to_owned());
        prefs.budget.deadline_s = 42.0;
        prefs.history.filter = "stall".to_owned();
        prefs.timeline.compact = true;
        let back: Prefs = serde_json::from_str(&serde_json::to_string(&prefs).unwrap()).unwrap();
        assert_eq!((back.tab, back.form.choice, back.form.requests), (Tab::Budget, Choice::AllStories, 9));
        assert_eq!(back.tunables.edits, prefs.tunables.edits);
        assert_eq!(
            (back.budget.deadline_s, back.history.filter.as_str(), back.timeline.compact),
            (42.0, "stall", true)
        );
        // A save from a version that knew fewer settings still loads.
        let old: Prefs = serde_json::from_str(r#"{"form": {"requests": 3}}"#).unwrap();
        assert_eq!((old.form.requests, old.form.concurrency, old.tab), (3, RunForm::default().concurrency, Tab::Live));
    }

    /// Review D10: the upstream (and a proxy typed as an edit) was saved as
    /// typed, password and all. Saved masked, read back it is refused with
    /// a word instead of sent with `***` as its password.
    #[test]
    fn credentials_typed_are_not_saved_and_masked_ones_are_not_used() {
        use crate::observe::ObserveSource;
        let mut prefs = Prefs::default();
        prefs.form.observe_upstream = "http://user:s3cretpass@127.0.0.1:9/llm".to_owned();
        let proxy = "STALLSCOPE_PROXY";
        prefs.tunables.edits.insert(proxy.to_owned(), "http://bob:hunter2@proxy:3128".to_owned());
        prefs.tunables.edits.insert("STALLSCOPE_TCP_KEEPCNT".to_owned(), "5".to_owned());
        // In the session, what was typed is what is used.
        let plan = prefs.form.observe_plan(None, Vec::new(), Vec::new(), None).unwrap();
        assert_eq!(plan.source, ObserveSource::Upstream("http://user:s3cretpass@127.0.0.1:9/llm".to_owned()));
        assert_eq!(prefs.tunables.assignments().len(), 2);
        let saved = serde_json::to_string(&prefs).unwrap();
        assert!(!saved.contains("s3cretpass") && !saved.contains("hunter2"), "{saved}");
        assert!(saved.contains(r#""observe_upstream":"http://user:***@127.0.0.1:9/llm""#), "{saved}");
        assert!(saved.contains(r#""STALLSCOPE_PROXY":"http://bob:***@proxy:3128""#), "{saved}");
        let back: Prefs = serde_json::from_str(&saved).unwrap();
        let refused = back.form.observe_plan(None, Vec::new(), Vec::new(), None).unwrap_err();
        assert!(
            refused.contains("http://user:***@127.0.0.1:9/llm") && refused.contains("type them again"),
            "{refused}"
        );
        assert!(back.tunables.error(proxy).is_some_and(|why| why.contains("type them again")));
        assert_eq!(back.tunables.assignments(), vec!["STALLSCOPE_TCP_KEEPCNT=5".to_owned()]);
    }
}
