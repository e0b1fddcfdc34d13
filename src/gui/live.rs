//! The live view: what to run (a built-in scenario, every failure story at
//! once, or a configured provider), how many calls, the **Run** and
//! **Stop** buttons, and the timeline of the run going on, or of a stored
//! run opened from the history, played back with a transport bar; and
//! **What-if** on the run shown, under the tunables being edited.

use std::path::PathBuf;
use std::time::Instant;

use egui::{Color32, RichText, Ui};
use serde::{Deserialize, Serialize};

use super::lanes::Timeline;
use super::playback::{Change, Command, Playback};
use super::replay::Replay;
use super::runner::{Runner, Update};
use super::timeline::{Clock, TimelineView};
use super::transport;
use super::whatif::WhatIfView;
use crate::providers::Dialect;
use crate::session::{Recording, RunSource, SessionPlan};
use crate::sim::builtin_names;
use crate::store::RunId;

/// What the next run calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Choice {
    /// One built-in scenario.
    Scenario(String),
    /// Every built-in scenario except `healthy`, at once.
    AllStories,
    /// A configured provider, `provider/model`.
    Provider(String),
}

impl Choice {
    /// The name shown in the picker.
    pub fn title(&self) -> String {
        match self {
            Choice::Scenario(name) => format!("scenario: {name}"),
            Choice::AllStories => "all failure stories".to_owned(),
            Choice::Provider(target) => format!("provider: {target}"),
        }
    }
}

/// The run form; it persists between launches.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RunForm {
    /// What to call.
    pub choice: Choice,
    /// The dialect scenarios are served in.
    pub dialect: Dialect,
    /// Calls per scenario or provider.
    pub requests: u32,
    /// Calls at once.
    pub concurrency: u32,
    /// The prompt.
    pub prompt: String,
    /// Record the run in the database.
    pub record: bool,
    /// A label for the recorded run.
    pub label: String,
}

impl Default for RunForm {
    fn default() -> Self {
        RunForm {
            choice: Choice::Scenario("silent-stall".to_owned()),
            dialect: Dialect::OpenAiChat,
            requests: 4,
            concurrency: 4,
            prompt: "Say hello in five words.".to_owned(),
            record: true,
            label: String::new(),
        }
    }
}

impl RunForm {
    /// The sessions a run of this form starts, one per part.
    pub fn plans(
        &self,
        config: Option<PathBuf>,
        overrides: Vec<String>,
        edits: Vec<String>,
        db: Option<PathBuf>,
    ) -> Vec<(String, SessionPlan)> {
        let label = (!self.label.trim().is_empty()).then(|| self.label.trim().to_owned());
        let recording = db.filter(|_| self.record).map(|db| Recording { db, label });
        let plan = |source| SessionPlan {
            source,
            requests: self.requests.max(1) as usize,
            concurrency: self.concurrency.max(1) as usize,
            prompt: self.prompt.clone(),
            overrides: overrides.clone(),
            edits: edits.clone(),
            recording: recording.clone(),
            seed: None,
        };
        let scenario =
            |name: &str| (name.to_owned(), plan(RunSource::Scenario { name: name.to_owned(), dialect: self.dialect }));
        match &self.choice {
            Choice::Scenario(name) => vec![scenario(name)],
            Choice::AllStories => builtin_names().iter().filter(|n| **n != "healthy").map(|n| scenario(n)).collect(),
            Choice::Provider(target) => {
                vec![(target.clone(), plan(RunSource::Config { path: config, target: Some(target.clone()) }))]
            }
        }
    }
}

/// What the timeline shows.
#[derive(Debug, Default)]
enum Showing {
    /// Nothing yet.
    #[default]
    Nothing,
    /// A run started from here.
    Live {
        /// When it started.
        started: Instant,
        /// Its clock when it ended.
        ended_s: Option<f64>,
    },
    /// A run read from the store, played back.
    Stored {
        /// Its title.
        title: String,
        /// Its events and the lanes as of the cursor.
        replay: Box<Replay>,
        /// The cursor.
        playback: Playback,
    },
}

/// Brings the lanes to the cursor if it moved; returns whether playback
/// wants another frame.
fn follow(replay: &mut Replay, playback: &Playback, change: Change) -> bool {
    if change.moved {
        replay.seek(playback.position_s());
    }
    change.needs_repaint
}

/// What the live view's buttons asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Run the form's choice.
    Run,
    /// Replay the run shown under the edited tunables.
    WhatIf,
}

/// The live view's state that does not persist.
#[derive(Debug, Default)]
pub struct Live {
    runner: Option<Runner>,
    /// The streams of the run started from here.
    timeline: Timeline,
    showing: Showing,
    /// One line per finished part: its report summary or its error.
    pub results: Vec<String>,
    /// The stored run a what-if would replay: the one opened, or the one
    /// just recorded (when a run recorded exactly one).
    replayable: Option<RunId>,
    /// Runs recorded by the run going on.
    recorded: Vec<RunId>,
    /// The what-if of the run shown.
    pub whatif: WhatIfView,
}

impl Live {
    /// Starts a run of `plans` (label, plan), replacing what is shown.
    pub fn start(&mut self, plans: Vec<(String, SessionPlan)>, env: Vec<(String, String)>, ctx: &egui::Context) {
        let runner = match &mut self.runner {
            Some(runner) => runner,
            None => match Runner::new() {
                Ok(runner) => self.runner.insert(runner),
                Err(e) => {
                    self.results = vec![format!("cannot start the background runtime: {e}")];
                    return;
                }
            },
        };
        self.timeline = Timeline::new();
        self.results.clear();
        (self.replayable, self.recorded) = (None, Vec::new());
        self.whatif.clear();
        let mut sessions = Vec::with_capacity(plans.len());
        for (label, plan) in plans {
            self.timeline.add_part(label, 0.0);
            sessions.push(plan);
        }
        let ctx = ctx.clone();
        runner.start(sessions, env, move || ctx.request_repaint());
        self.showing = Showing::Live { started: Instant::now(), ended_s: None };
    }

    /// Cancels the run going on.
    pub fn stop(&mut self) {
        if let Some(runner) = &mut self.runner {
            runner.stop();
        }
    }

    /// Whether a run is going on.
    pub fn is_running(&self) -> bool {
        self.runner.as_ref().is_some_and(Runner::is_running)
    }

    /// Shows stored run `id`, paused at its end.
    pub fn show_stored(&mut self, title: String, id: RunId, replay: Replay) {
        self.stop();
        self.timeline = Timeline::new();
        self.results.clear();
        self.replayable = Some(id);
        self.whatif.clear();
        let playback = Playback::new(replay.duration_s());
        self.showing = Showing::Stored { title, replay: Box::new(replay), playback };
    }

    /// Replays the run shown under `changes` (`NAME=VALUE`), from `db`.
    pub fn start_whatif(&mut self, db: Option<PathBuf>, changes: Vec<String>, ctx: &egui::Context) {
        match (db, self.replayable) {
            (Some(db), Some(run)) => self.whatif.start(db, run, changes, ctx),
            _ => self.results.push("What-if needs a recorded run: record a run, or open one from the history".into()),
        }
    }

    /// The streams shown: the what-if's lanes when shown, the run going on,
    /// or a stored run as of its cursor.
    pub fn timeline(&self) -> &Timeline {
        if let Some(timeline) = self.whatif.timeline() {
            return timeline;
        }
        match &self.showing {
            Showing::Stored { replay, .. } => replay.timeline(),
            Showing::Nothing | Showing::Live { .. } => &self.timeline,
        }
    }

    /// The playback of the stored run shown, if one is.
    pub fn playback(&self) -> Option<&Playback> {
        match &self.showing {
            Showing::Stored { playback, .. } => Some(playback),
            Showing::Nothing | Showing::Live { .. } => None,
        }
    }

    /// Lets `dt_s` seconds pass for a stored run being played; returns
    /// true while it plays (another frame is wanted).
    pub fn advance(&mut self, dt_s: f64) -> bool {
        let Showing::Stored { replay, playback, .. } = &mut self.showing else { return false };
        let change = playback.advance(dt_s);
        follow(replay, playback, change)
    }

    /// Carries out a transport command on the stored run shown; returns
    /// true when it plays (another frame is wanted).
    pub fn command(&mut self, command: Command) -> bool {
        let Showing::Stored { replay, playback, .. } = &mut self.showing else { return false };
        let change = playback.apply(command, replay.moments());
        follow(replay, playback, change)
    }

    /// Takes in what arrived from the run; returns true when its last part
    /// just ended.
    pub fn poll(&mut self) -> bool {
        let Some(runner) = &mut self.runner else { return false };
        let was_running = runner.is_running();
        for update in runner.drain() {
            match update {
                Update::Event { part, event } => self.timeline.ingest(part, &event),
                Update::Verdict { part, stream, diagnosis } => self.timeline.set_verdict(part, stream, *diagnosis),
                Update::PartDone { part, result } => {
                    if let Ok(outcome) = &result {
                        self.recorded.extend(outcome.report.run_id);
                    }
                    let label = self.timeline.parts.get(part).map_or("", |p| p.label.as_str());
                    self.results.push(match result {
                        Ok(outcome) => {
                            let s = &outcome.report.summary;
                            let recorded =
                                outcome.report.run_id.map(|id| format!(", recorded as run {id}")).unwrap_or_default();
                            format!(
                                "{label}: {} ok, {} partial, {} failed, {} cancelled in {:.0} ms{recorded}",
                                s.ok, s.partial, s.failed, s.cancelled, s.elapsed_ms
                            )
                        }
                        Err(e) => format!("{label}: could not run: {e}"),
                    });
                }
            }
        }
        let ended = was_running && !runner.is_running();
        if ended && let [run] = self.recorded[..] {
            self.replayable = Some(run);
        }
        if ended && let Showing::Live { ended_s, started } = &mut self.showing {
            *ended_s = Some(started.elapsed().as_secs_f64().max(self.timeline.end_s()));
        }
        ended
    }

    /// The present on the timeline's clock.
    pub fn clock(&self) -> Clock {
        if let Some(timeline) = self.whatif.timeline() {
            return Clock::Ended(timeline.end_s());
        }
        match &self.showing {
            Showing::Live { started, ended_s: None } => Clock::Live(started.elapsed().as_secs_f64()),
            Showing::Live { ended_s: Some(end), .. } => Clock::Ended(*end),
            Showing::Stored { playback, .. } => Clock::Cursor(playback.position_s()),
            Showing::Nothing => Clock::Ended(self.timeline.end_s()),
        }
    }

    /// Draws the form, the status and the timeline. Returns what a button
    /// asked for.
    pub fn ui(
        &mut self,
        ui: &mut Ui,
        form: &mut RunForm,
        view: &mut TimelineView,
        providers: &[String],
        blocked: Option<String>,
    ) -> Action {
        let mut action = Action::None;
        ui.horizontal_wrapped(|ui| {
            // egui writes a combo box's label after it; separators keep the pairs apart.
            let source = egui::ComboBox::from_label("Source").selected_text(form.choice.title()).width(240.0);
            source.show_ui(ui, |ui| {
                ui.selectable_value(&mut form.choice, Choice::AllStories, Choice::AllStories.title());
                for name in builtin_names() {
                    let choice = Choice::Scenario((*name).to_owned());
                    let title = choice.title();
                    ui.selectable_value(&mut form.choice, choice, title);
                }
                for target in providers {
                    let choice = Choice::Provider(target.clone());
                    let title = choice.title();
                    ui.selectable_value(&mut form.choice, choice, title);
                }
            });
            ui.separator();
            let scenario = !matches!(form.choice, Choice::Provider(_));
            ui.add_enabled_ui(scenario, |ui| {
                let dialects = egui::ComboBox::from_label("Dialect").selected_text(form.dialect.to_string());
                dialects.show_ui(ui, |ui| {
                    for dialect in [Dialect::OpenAiChat, Dialect::OpenAiResponses, Dialect::AnthropicMessages] {
                        ui.selectable_value(&mut form.dialect, dialect, dialect.to_string());
                    }
                });
            });
            ui.separator();
            let label = ui.label("Requests");
            ui.add(egui::DragValue::new(&mut form.requests).range(1..=100_000)).labelled_by(label.id);
            let label = ui.label("Concurrency");
            ui.add(egui::DragValue::new(&mut form.concurrency).range(1..=10_000)).labelled_by(label.id);
            ui.checkbox(&mut form.record, "Record");
            let label = ui.label("Label");
            ui.add(egui::TextEdit::singleline(&mut form.label).desired_width(100.0)).labelled_by(label.id);
            let running = self.is_running();
            let can_run = !running && blocked.is_none();
            // F5 runs and Shift+F5 stops, as in an IDE's debugger, even from a field.
            let (run_key, stop_key) = ui.input_mut(|i| {
                (
                    i.consume_key(egui::Modifiers::NONE, egui::Key::F5),
                    i.consume_key(egui::Modifiers::SHIFT, egui::Key::F5),
                )
            });
            let button = ui.add_enabled(can_run, egui::Button::new(RichText::new("Run").strong()));
            if let Some(why) = &blocked {
                button.on_disabled_hover_text(why);
            } else if button.on_hover_text("F5").clicked() || (run_key && can_run) {
                action = Action::Run;
            }
            let stop = ui.add_enabled(running, egui::Button::new("Stop")).on_hover_text("Shift+F5");
            if stop.clicked() || (stop_key && running) {
                self.stop();
            }
            if let Some(run) = self.replayable {
                ui.separator();
                let can = !running && !self.whatif.is_running() && blocked.is_none();
                let button = ui.add_enabled(can, egui::Button::new(format!("What-if on run {run}")));
                let button = button.on_hover_text(
                    "Replay this run's network behaviour through the core under the tunables being edited, \
                     in virtual time, and show what would change",
                );
                if let Some(why) = &blocked {
                    button.on_disabled_hover_text(why);
                } else if button.clicked() {
                    action = Action::WhatIf;
                }
            }
            if running {
                ui.spinner();
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("Prompt");
            ui.add(egui::TextEdit::singleline(&mut form.prompt).desired_width(f32::INFINITY)).labelled_by(label.id);
        });
        if let Some(why) = blocked {
            ui.label(RichText::new(why).color(Color32::LIGHT_RED));
        }
        let mut commands = Vec::new();
        match &self.showing {
            Showing::Nothing => {
                ui.label("Pick a source and press Run: lanes fill in as the streams go.");
            }
            Showing::Stored { title, replay, playback } => {
                ui.label(RichText::new(format!("Showing stored {title}")).strong());
                let events = (replay.timeline().event_count(), replay.total_events());
                commands = [transport::shortcuts(ui), transport::bar(ui, playback, events)].concat();
            }
            Showing::Live { .. } => {}
        }
        for command in commands {
            if self.command(command) {
                ui.ctx().request_repaint();
            }
        }
        if !self.results.is_empty() {
            let failed = self.results.iter().filter(|r| r.contains("could not run")).count();
            let title = match failed {
                0 => format!("Results of {} part(s)", self.results.len()),
                n => format!("Results of {} part(s), {n} could not run", self.results.len()),
            };
            // Open by default when something could not run: that is the news.
            egui::CollapsingHeader::new(title).default_open(failed > 0 || self.results.len() == 1).show(ui, |ui| {
                for line in &self.results {
                    let colour =
                        if line.contains("could not run") { Color32::LIGHT_RED } else { ui.visuals().text_color() };
                    ui.label(RichText::new(line).color(colour));
                }
            });
        }
        self.whatif.ui(ui);
        ui.separator();
        let clock = self.clock();
        view.ui(ui, self.timeline(), clock);
        action
    }
}
