//! The live view: what to run (a configured provider, every failure story
//! at once, or a built-in scenario, each explained by its own description
//! and the tunables it sets), how many calls, the **Run** and **Stop**
//! buttons, and the timeline of the run going on, or of a stored run
//! opened from the history, played back with a transport bar, or two
//! stored runs compared stream by stream; **What-if** on the run shown,
//! under the tunables being edited; and **Probe**, the readiness of every
//! configured route ([`super::probe`]). Before the first run it says what
//! the app is for and offers one.

use std::path::PathBuf;
use std::time::Instant;

use egui::{RichText, Ui};
use serde::{Deserialize, Serialize};

use super::checks::SuggestionCheck;
use super::form::labelled;
use super::lanes::Timeline;
use super::playback::{Change, Command, Playback};
use super::probe::ProbeView;
use super::replay::Replay;
use super::runner::{EVENT_CAPACITY, Runner, Update};
use super::saved_url;
use super::timeline::{Clock, TimelineView};
use super::transport;
use super::whatif::WhatIfView;
use crate::observe::{ObservePlan, ObserveSource, Service};
use crate::probe::ProbePlan;
use crate::providers::Dialect;
use crate::session::{RecordTo, RunSource, SessionPlan};
use crate::sim::{builtin, builtin_names};
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
    /// A label for the next recorded run only (it is cleared when the run
    /// starts, so it never sticks to later runs).
    pub label: String,
    /// Where **Observe** listens for an agent's requests.
    pub observe_listen: String,
    /// The one upstream **Observe** forwards to; empty: the source above
    /// (its scenario's simulator, or every configured provider's route).
    /// Saved with its password masked ([`saved_url`]).
    #[serde(serialize_with = "saved_url::serialize")]
    pub observe_upstream: String,
    /// **Observe** guards: the core acts on the agent's streamed calls.
    pub observe_guard: bool,
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
            observe_listen: "127.0.0.1:8787".to_owned(),
            observe_upstream: String::new(),
            observe_guard: false,
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
        // The parts of one press of Run are one batch in the history.
        let batch = (matches!(self.choice, Choice::AllStories)).then(|| (rand::random::<u64>() >> 1) as i64);
        let recording = db.filter(|_| self.record).map(|db| RecordTo { db, label, batch });
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

impl RunForm {
    /// What **Observe** observes: the upstream given, else the source
    /// chosen above; why not, when it cannot.
    pub fn observe_plan(
        &self,
        config: Option<PathBuf>,
        overrides: Vec<String>,
        edits: Vec<String>,
        db: Option<PathBuf>,
    ) -> Result<ObservePlan, String> {
        let listen = self.observe_listen.trim().parse().map_err(|_| {
            format!("Observe: listen address `{}` is not one; give an address like 127.0.0.1:8787", self.observe_listen)
        })?;
        let upstream = self.observe_upstream.trim();
        if let Some(why) = saved_url::masked("Observe: the upstream", upstream) {
            return Err(why);
        }
        let source = match &self.choice {
            _ if !upstream.is_empty() => ObserveSource::Upstream(upstream.to_owned()),
            Choice::Scenario(name) => ObserveSource::Scenario(name.clone()),
            Choice::Provider(_) => ObserveSource::Config(config.clone()),
            Choice::AllStories => {
                return Err("Observe: give an upstream, or choose one scenario or a configured provider as the source"
                    .to_owned());
            }
        };
        let label = (!self.label.trim().is_empty()).then(|| self.label.trim().to_owned());
        let recording = db.filter(|_| self.record).map(|db| RecordTo { db, label, batch: None });
        Ok(ObservePlan {
            listen,
            allow_remote: false,
            source,
            config,
            overrides,
            edits,
            recording,
            guard: self.observe_guard,
            service: Service::default(),
        })
    }
}

/// What a choice is, in words: its description and what to try with it.
#[derive(Debug, Clone, PartialEq)]
pub struct About {
    /// What it does.
    pub description: String,
    /// What to change to see something else happen.
    pub try_this: String,
}

impl About {
    /// The words for `choice` (a scenario's own description and the
    /// tunables it sets).
    pub fn of(choice: &Choice) -> About {
        match choice {
            Choice::Scenario(name) => match builtin(name) {
                Ok(scenario) => {
                    let sets: Vec<String> = scenario.run().tunables.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let try_this = match sets.is_empty() {
                        true => "It sets no tunable: edit any in the Tunables view, run again and compare in History."
                            .to_owned(),
                        false => format!(
                            "It sets {}. Change them in the Tunables view, then Run again, or What-if on this run, \
                             to see what else would happen.",
                            sets.join(", ")
                        ),
                    };
                    About { description: scenario.description().to_owned(), try_this }
                }
                Err(e) => About { description: e.to_string(), try_this: String::new() },
            },
            Choice::AllStories => About {
                description: "Every built-in failure story except healthy, at once: one part per scenario, one \
                              batch in History."
                    .to_owned(),
                try_this: "Open a failing lane's detail for its verdict, or pick one scenario to see it alone."
                    .to_owned(),
            },
            Choice::Provider(target) => About {
                description: format!(
                    "Real calls to {target} from your config file; only the providers this run can fail over to \
                     need their keys."
                ),
                try_this: "Keep Requests low: every call is billed.".to_owned(),
            },
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
    /// Two stored runs' lanes, stream by stream, from History's Compare.
    Compared {
        /// Which runs, in words.
        title: String,
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
    /// Probe every configured route.
    Probe,
    /// Observe an agent's traffic.
    Observe,
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
    /// The label the run going on (or last) was recorded with.
    label: Option<String>,
    /// The words about the form's choice, kept while it stays chosen.
    about: Option<(Choice, About)>,
    /// Fold the words at the next frame: lanes came to be shown, and
    /// they need the room.
    fold_about: bool,
    /// Events the runner's channel holds (`None`: [`EVENT_CAPACITY`]).
    event_capacity: Option<usize>,
    /// The what-if of the run shown.
    pub whatif: WhatIfView,
    /// The suggestions of the run shown, checked by what-if.
    pub checks: SuggestionCheck,
    /// The readiness of the configured routes.
    pub probe: ProbeView,
    /// Where the observer going on listens and forwards, once it does.
    observing: Option<String>,
    /// Whether the observer going on (or last) guards.
    guarding: bool,
}

impl Live {
    /// A live view whose runs' event channel holds only `capacity` events
    /// (the app's is [`EVENT_CAPACITY`]).
    pub fn with_event_capacity(capacity: usize) -> Live {
        Live { event_capacity: Some(capacity), ..Live::default() }
    }

    /// Starts a run of `plans` (label, plan), replacing what is shown.
    pub fn start(&mut self, plans: Vec<(String, SessionPlan)>, env: Vec<(String, String)>, ctx: &egui::Context) {
        self.label = plans.first().and_then(|(_, p)| p.recording.as_ref()?.label.clone());
        if self.runner().is_none() {
            return;
        }
        self.timeline = Timeline::new();
        self.results.clear();
        (self.replayable, self.recorded) = (None, Vec::new());
        self.whatif.clear();
        self.checks.clear();
        // What was shown is gone: its heap may go back to the system.
        super::memory::give_back();
        let mut sessions = Vec::with_capacity(plans.len());
        for (label, plan) in plans {
            let part = self.timeline.add_part(label, 0.0);
            self.timeline.plan(part, plan.requests);
            sessions.push(plan);
        }
        let ctx = ctx.clone();
        if let Some(runner) = &mut self.runner {
            runner.start(sessions, env, move || ctx.request_repaint());
        }
        self.showing = Showing::Live { started: Instant::now(), ended_s: None };
        self.fold_about = true;
    }

    /// Observes an agent's traffic under `plan`, replacing what is shown:
    /// its calls come in as lanes, with their verdicts as they end.
    pub fn start_observe(&mut self, plan: ObservePlan, env: Vec<(String, String)>, ctx: &egui::Context) {
        self.label = plan.recording.as_ref().and_then(|r| r.label.clone());
        if self.runner().is_none() {
            return;
        }
        self.timeline = Timeline::new();
        self.results.clear();
        (self.replayable, self.recorded, self.observing, self.guarding) = (None, Vec::new(), None, plan.guard);
        self.whatif.clear();
        self.checks.clear();
        super::memory::give_back();
        self.timeline.add_part(format!("observe@{}", plan.listen), 0.0);
        let ctx = ctx.clone();
        if let Some(runner) = &mut self.runner {
            runner.observe(plan, env, move || ctx.request_repaint());
        }
        self.showing = Showing::Live { started: Instant::now(), ended_s: None };
        self.fold_about = true;
    }

    /// Where the observer going on listens and forwards, once it does:
    /// `observing on http://127.0.0.1:8787 → https://api.openai.com`, or
    /// `guarding on …` when it guards.
    pub fn observing(&self) -> Option<&str> {
        self.observing.as_deref()
    }

    /// The runner, started at first use; `None` (and a result line saying
    /// why) when its runtime cannot start.
    fn runner(&mut self) -> Option<&mut Runner> {
        if self.runner.is_none() {
            match Runner::with_capacity(self.event_capacity.unwrap_or(EVENT_CAPACITY)) {
                Ok(runner) => self.runner = Some(runner),
                Err(e) => self.results = vec![format!("cannot start the background runtime: {e}")],
            }
        }
        self.runner.as_mut()
    }

    /// Probes every configured route of `plan` on the runner's runtime.
    pub fn start_probe(&mut self, plan: ProbePlan, env: Vec<(String, String)>, ctx: &egui::Context) {
        // Made here first, then borrowed beside the probe view.
        if self.runner().is_some()
            && let Some(runner) = &self.runner
        {
            self.probe.start(runner, plan, env, ctx);
        }
    }

    /// Events of the run going on that the app fell behind on and did not
    /// show.
    pub fn dropped(&self) -> u64 {
        self.runner.as_ref().map_or(0, Runner::dropped)
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
        let playback = Playback::new(replay.duration_s());
        self.show(Timeline::new(), Some(id), Showing::Stored { title, replay: Box::new(replay), playback });
    }

    /// Shows two stored runs' lanes (`timeline`, from History's Compare).
    pub fn show_compared(&mut self, title: String, timeline: Timeline) {
        self.show(timeline, None, Showing::Compared { title });
    }

    /// Replaces what is shown (stopping a run going on, and forgetting its
    /// results, what-if and checks) with stored lanes.
    fn show(&mut self, timeline: Timeline, replayable: Option<RunId>, showing: Showing) {
        self.stop();
        (self.timeline, self.replayable, self.showing) = (timeline, replayable, showing);
        self.results.clear();
        self.whatif.clear();
        self.checks.clear();
        self.fold_about = true;
        super::memory::give_back();
    }

    /// Checks the suggestions of the run shown by what-if, from `db`, when
    /// it is one recorded run (as `runs show` does).
    pub fn start_checks(&mut self, db: Option<PathBuf>, ctx: &egui::Context) {
        let (Some(db), Some(run)) = (db, self.replayable) else { return };
        match &self.showing {
            Showing::Stored { replay, .. } => self.checks.start(db, run, replay.timeline(), ctx),
            _ if self.timeline.parts.len() == 1 => self.checks.start(db, run, &self.timeline, ctx),
            _ => {}
        }
    }

    /// Takes in a finished check and gives the run's verdicts their
    /// checked suggestions; true when one arrived.
    pub fn poll_checks(&mut self) -> bool {
        if !self.checks.poll() {
            return false;
        }
        match &mut self.showing {
            Showing::Stored { replay, .. } => {
                let checked = self.checks.checked(replay.timeline());
                replay.set_verdicts(checked.into_iter().map(|((_, stream), d)| (stream, d)).collect());
            }
            _ => {
                for ((part, stream), diagnosis) in self.checks.checked(&self.timeline) {
                    self.timeline.set_verdict(part, stream, diagnosis);
                }
            }
        }
        true
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
            Showing::Nothing | Showing::Live { .. } | Showing::Compared { .. } => &self.timeline,
        }
    }

    /// The playback of the stored run shown, if one is.
    pub fn playback(&self) -> Option<&Playback> {
        match &self.showing {
            Showing::Stored { playback, .. } => Some(playback),
            Showing::Nothing | Showing::Live { .. } | Showing::Compared { .. } => None,
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
                Update::Observing { part, url, routes } => {
                    // The address bound, which a port 0 only now tells.
                    if let Some(p) = self.timeline.parts.get_mut(part) {
                        p.label = format!("observe@{}", url.trim_start_matches("http://"));
                    }
                    let doing = if self.guarding { "guarding" } else { "observing" };
                    self.observing = Some(format!("{doing} on {url} → {routes}"));
                }
                Update::PartDone { part, result } => {
                    self.observing = None;
                    if let Ok(outcome) = &result {
                        self.recorded.extend(outcome.report.run_id);
                    }
                    let label = self.timeline.parts.get(part).map_or("", |p| p.label.as_str());
                    self.results.push(match result {
                        Ok(outcome) => {
                            let recorded =
                                outcome.report.run_id.map(|id| format!(", recorded as run {id}")).unwrap_or_default();
                            format!("{label}: {}{recorded}", outcome.report.summary_line())
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
            Showing::Nothing | Showing::Compared { .. } => Clock::Ended(self.timeline.end_s()),
        }
    }

    /// Draws the form, the status and the timeline. Returns what a button
    /// asked for. With `stored_runs` in the database, the welcome for a
    /// newcomer gives way to a line on where they are.
    pub fn ui(
        &mut self,
        ui: &mut Ui,
        form: &mut RunForm,
        view: &mut TimelineView,
        providers: &[String],
        blocked: Option<String>,
        stored_runs: usize,
    ) -> Action {
        // Everything above the lanes takes at most half the height: in a
        // small window it scrolls, and the lanes keep the rest. Before
        // anything is shown there are no lanes to keep room for.
        let most = match self.showing {
            Showing::Nothing => ui.available_height(),
            _ => (ui.available_height() * HEADER_SHARE).max(HEADER_MIN),
        };
        let header = egui::ScrollArea::vertical().id_salt("live-header").max_height(most).auto_shrink([false, true]);
        let (action, shown) = header
            .show(ui, |ui| {
                let action = self.header_ui(ui, form, providers, blocked, stored_runs);
                let clock = self.clock();
                (action, view.header(ui, self.timeline(), clock))
            })
            .inner;
        let clock = self.clock();
        view.lanes(ui, self.timeline(), clock, shown);
        action
    }

    /// The form, what is shown and its transport, results, probe, checks
    /// and what-if: the view's header above the timeline's own.
    fn header_ui(
        &mut self,
        ui: &mut Ui,
        form: &mut RunForm,
        providers: &[String],
        blocked: Option<String>,
        stored_runs: usize,
    ) -> Action {
        let mut action = Action::None;
        let running = self.is_running();
        ui.horizontal_wrapped(|ui| {
            source_picker(ui, form, providers);
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
            labelled(ui, "Requests", 50.0, |ui| ui.add(egui::DragValue::new(&mut form.requests).range(1..=100_000)));
            labelled(ui, "Concurrency", 50.0, |ui| {
                ui.add(egui::DragValue::new(&mut form.concurrency).range(1..=10_000))
            });
            ui.checkbox(&mut form.record, "Record");
            let label = egui::TextEdit::singleline(&mut form.label).desired_width(100.0).hint_text("none");
            labelled(ui, "Label next run", 100.0, |ui| ui.add_enabled(form.record, label))
                .on_hover_text("Recorded with the next run only, and shown in History; cleared when the run starts");
            let can_run = !running && blocked.is_none();
            // F5 and Shift+F5 are read by the app, on every tab.
            let button = ui.add_enabled(can_run, egui::Button::new(RichText::new("Run").strong()));
            if let Some(why) = &blocked {
                button.on_disabled_hover_text(why);
            } else if button.on_hover_text("F5").clicked() {
                action = Action::Run;
            }
            let stop = ui.add_enabled(running, egui::Button::new("Stop")).on_hover_text("Shift+F5");
            if stop.clicked() {
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
            ui.separator();
            let probe_blocked = providers.is_empty().then_some("Probe needs [[provider]] rows in the config file");
            if self.probe.button(ui, probe_blocked) {
                action = Action::Probe;
            }
            if running {
                ui.spinner();
            }
        });
        ui.horizontal_wrapped(|ui| {
            let listen = egui::TextEdit::singleline(&mut form.observe_listen).desired_width(130.0);
            labelled(ui, "Observe on", 130.0, |ui| ui.add(listen));
            let upstream = egui::TextEdit::singleline(&mut form.observe_upstream)
                .desired_width(240.0)
                .hint_text("the source above");
            labelled(ui, "Upstream", 240.0, |ui| ui.add(upstream)).on_hover_text(
                "Where the agent's requests go, e.g. https://api.openai.com; empty: the source above (a \
                 scenario's simulator, or every configured provider under /<name>). A password in it is \
                 shown and saved as ***: type it again after a relaunch",
            );
            ui.checkbox(&mut form.observe_guard, "Guard").on_hover_text(
                "The core acts on the agent's streamed calls, under the tunables in force: before content, a \
                 stall, a failure or a retryable answer is retried and the agent gets one whole answer; after \
                 content, a stall ends its stream in the dialect's own terms (GUARD_AFTER_CONTENT). Each \
                 guarded response carries x-stallscope-guard: on. Applies when Observe starts.",
            );
            let can = !running && blocked.is_none();
            let button = ui.add_enabled(can, egui::Button::new("Observe")).on_hover_text(
                "A recording streaming proxy for your own agent: point its base URL here; its calls pass \
                 through unchanged (with Guard, the core acts on the streamed ones) and come in as lanes, with \
                 their verdicts. Stop ends it.",
            );
            if button.clicked() {
                action = Action::Observe;
            }
            if let Some(observing) = &self.observing {
                ui.label(RichText::new(observing).strong());
            }
        });
        let error = ui.visuals().error_fg_color;
        ui.horizontal(|ui| {
            let label = ui.label("Prompt");
            // Why Run is greyed out takes the right half of this row, cut
            // to fit: a line of its own would push everything below it down
            // as it comes and goes.
            let room = ui.available_width() * if blocked.is_some() { 0.5 } else { 1.0 };
            let prompt = egui::TextEdit::singleline(&mut form.prompt).desired_width(room - ui.spacing().item_spacing.x);
            ui.add(prompt).labelled_by(label.id);
            if let Some(why) = &blocked {
                ui.add(egui::Label::new(RichText::new(why).color(error)).truncate()).on_hover_text(why);
            }
        });
        self.about_ui(ui, &form.choice);
        let mut commands = Vec::new();
        match &self.showing {
            Showing::Nothing if stored_runs > 0 => {
                ui.label(format!(
                    "Press Run (F5) for a run of the source above, or open a stored run in History ({} stored).",
                    stored_runs
                ));
            }
            Showing::Nothing => {
                if welcome(ui) {
                    form.choice = Choice::Scenario(FIRST_RUN.to_owned());
                    action = Action::Run;
                }
            }
            Showing::Stored { title, replay, playback } => {
                ui.label(RichText::new(format!("Showing stored {title}")).strong());
                let events = (replay.timeline().event_count(), replay.total_events());
                commands = [transport::shortcuts(ui), transport::bar(ui, playback, events)].concat();
            }
            Showing::Compared { title } => {
                ui.label(
                    RichText::new(format!("Comparing {title}: each stream's two lanes one above the other")).strong(),
                );
            }
            Showing::Live { .. } => {
                if let Some(label) = &self.label {
                    ui.label(format!("Recorded with the label \u{201c}{label}\u{201d}"));
                }
            }
        }
        for command in commands {
            if self.command(command) {
                ui.ctx().request_repaint();
            }
        }
        let dropped = self.dropped();
        if dropped > 0 {
            ui.label(
                RichText::new(format!(
                    "{dropped} events not shown: the app fell behind the run (the recording keeps every event)"
                ))
                .color(ui.visuals().warn_fg_color),
            );
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
                    let colour = if line.contains("could not run") { error } else { ui.visuals().text_color() };
                    ui.label(RichText::new(line).color(colour));
                }
            });
        }
        self.probe.ui(ui);
        self.checks.ui(ui);
        self.whatif.ui(ui);
        ui.separator();
        action
    }

    /// What the chosen source is and what to try with it, folded into one
    /// header line once a run is shown.
    fn about_ui(&mut self, ui: &mut Ui, choice: &Choice) {
        if self.about.as_ref().is_none_or(|(c, _)| c != choice) {
            self.about = Some((choice.clone(), About::of(choice)));
        }
        let Some((_, about)) = &self.about else { return };
        let nothing_shown = matches!(self.showing, Showing::Nothing);
        let mut header = egui::CollapsingHeader::new(format!("About {}", choice.title()))
            .id_salt("about-choice")
            .default_open(nothing_shown);
        if std::mem::take(&mut self.fold_about) {
            header = header.open(Some(false));
        }
        header.show(ui, |ui| {
            ui.label(&about.description);
            if !about.try_this.is_empty() {
                ui.label(RichText::new(format!("Try: {}", about.try_this)).italics());
            }
        });
    }
}

/// The share of the Live view's height its header may take before it
/// scrolls.
const HEADER_SHARE: f32 = 0.45;
/// The least it gets, however small the window.
const HEADER_MIN: f32 = 120.0;

/// The scenario a first run shows: one stall, caught and retried.
pub const FIRST_RUN: &str = "silent-stall";

/// What the app is for, before anything is shown; true when the user asks
/// for the first run.
fn welcome(ui: &mut Ui) -> bool {
    let mut go = false;
    ui.add_space(8.0);
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.heading("Watch streaming LLM calls fail, and see what the client does about it");
        ui.label(
            "Each call is a lane: bytes as they arrive, the timers watching it (first byte, idle, data stall), \
             retries with their backoff, failovers and the verdict on how it ended. Built-in scenarios play \
             real failures (a silent stall, a buffering proxy, a 429 storm) through the same HTTP stack as \
             real providers, with no key and no cost; every run is recorded for History, Compare and What-if.",
        );
        ui.add_space(4.0);
        go = ui
            .button(RichText::new(format!("First run: {FIRST_RUN}, {} calls", RunForm::default().requests)).strong())
            .on_hover_text(About::of(&Choice::Scenario(FIRST_RUN.to_owned())).description)
            .clicked();
        ui.label("Or pick a source above (each comes with what it shows) and press Run.");
    });
    go
}

/// The source picker: configured providers first (they are why a user
/// configured anything), then every failure story at once, then each
/// scenario, with its description on hover.
fn source_picker(ui: &mut Ui, form: &mut RunForm, providers: &[String]) {
    let source = egui::ComboBox::from_label("Source").selected_text(form.choice.title()).width(240.0).height(420.0);
    source.show_ui(ui, |ui| {
        if !providers.is_empty() {
            ui.label(RichText::new("Configured providers").weak());
            for target in providers {
                let choice = Choice::Provider(target.clone());
                let title = choice.title();
                ui.selectable_value(&mut form.choice, choice, title);
            }
            ui.separator();
        }
        ui.label(RichText::new("Built-in scenarios (no key, no cost)").weak());
        let all = ui.selectable_value(&mut form.choice, Choice::AllStories, Choice::AllStories.title());
        beside(&all, || About::of(&Choice::AllStories).description);
        for name in builtin_names() {
            let choice = Choice::Scenario((*name).to_owned());
            let title = choice.title();
            let entry = ui.selectable_value(&mut form.choice, choice, title);
            // Read only for the entry under the pointer.
            beside(&entry, || builtin(name).map(|s| s.description().to_owned()).unwrap_or_default());
        }
    });
}

/// A list entry's description on hover, beside the list rather than over
/// the entries under it (the other side when there is no room).
fn beside(entry: &egui::Response, text: impl FnOnce() -> String) {
    let mut tooltip = egui::Tooltip::for_enabled(entry);
    tooltip.popup = tooltip.popup.align(egui::RectAlign::RIGHT_START);
    tooltip.show(|ui| ui.label(text()));
}
