//! History's **Tune on these**: the runs picked in the table, tuned
//! together off the UI thread — the search `stallscope tune --runs` makes,
//! per route when the runs span routes — and what it found, in the words
//! the CLI prints, with its `--set` lines to copy.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, channel};

use egui::{RichText, Ui};
use tokio_util::sync::CancellationToken;

use crate::replay::recording::Recording;
use crate::replay::tune::{TuneOptions, TuneReport, tune};
use crate::replay::tune_text::report_text;
use crate::store::{RunId, Store};

/// The runs picked to tune, the search in flight and what it found.
#[derive(Debug, Default)]
pub struct TuneRuns {
    picked: BTreeSet<RunId>,
    pending: Option<Receiver<Result<TuneReport, String>>>,
    stop: CancellationToken,
    found: Option<Found>,
}

/// What one search found, for the runs it was made on.
#[derive(Debug)]
struct Found {
    runs: Vec<RunId>,
    text: String,
    set_lines: Option<String>,
}

impl TuneRuns {
    /// The runs picked, in order.
    pub fn picked(&self) -> Vec<RunId> {
        self.picked.iter().copied().collect()
    }

    /// Whether a search is running.
    pub fn is_running(&self) -> bool {
        self.pending.is_some()
    }

    /// The checkbox that picks `ids` (a run, or a batch's parts together).
    pub fn checkbox_ui(&mut self, ui: &mut Ui, ids: &[RunId], name: &str) {
        let mut chosen = ids.iter().all(|id| self.picked.contains(id));
        let name = format!("Tune on {name}");
        let response = ui.add(egui::Checkbox::without_text(&mut chosen));
        response.widget_info(|| egui::WidgetInfo::selected(egui::Role::CheckBox, true, chosen, &name));
        if response.on_hover_text(&name).changed() {
            for id in ids {
                if chosen {
                    self.picked.insert(*id);
                } else {
                    self.picked.remove(id);
                }
            }
        }
    }

    /// Forgets runs that were deleted.
    pub fn forget(&mut self, ids: &[RunId]) {
        self.picked.retain(|id| !ids.contains(id));
    }

    /// The toolbar's button: tunes the picked runs together.
    pub fn button_ui(&mut self, ui: &mut Ui, db: &Option<PathBuf>) {
        let runs = self.picked();
        let text = match runs.len() {
            0 => "Tune (pick runs)".to_owned(),
            1 => format!("Tune on run {}", runs[0]),
            n => format!("Tune on these {n} runs"),
        };
        let hover = "The tightest timers these runs' healthy attempts allow and the stalls they would have caught \
                     sooner, each checked by what-if on every run (as `stallscope tune --runs`)";
        let button = ui.add_enabled(!runs.is_empty() && !self.is_running(), egui::Button::new(text));
        if button.on_hover_text(hover).clicked()
            && let Some(db) = db
        {
            self.start(db.clone(), runs, ui.ctx().clone());
        }
    }

    fn start(&mut self, db: PathBuf, runs: Vec<RunId>, ctx: egui::Context) {
        self.stop.cancel();
        self.stop = CancellationToken::new();
        let (tx, rx) = channel();
        let stop = self.stop.clone();
        self.found = Some(Found { runs: runs.clone(), text: String::new(), set_lines: None });
        std::thread::spawn(move || {
            let _ = tx.send(search(&db, &runs, stop));
            ctx.request_repaint();
        });
        self.pending = Some(rx);
    }

    /// Takes in a finished search; an error comes back in words.
    pub fn poll(&mut self) -> Option<String> {
        let result = self.pending.as_ref()?.try_recv().ok()?;
        self.pending = None;
        match result {
            Ok(report) => {
                let set_lines = (!report.suggested.is_empty()).then(|| report.set_lines());
                if let Some(found) = &mut self.found {
                    found.text = report_text(&report);
                    found.set_lines = set_lines;
                }
                None
            }
            Err(e) => {
                self.found = None;
                Some(format!("Tune not done: {e}"))
            }
        }
    }

    /// The window with what the search found (or that it runs); closing
    /// it stops a search still running.
    pub fn window_ui(&mut self, ctx: &egui::Context) {
        let Some(found) = &self.found else { return };
        let mut open = true;
        let runs: Vec<String> = found.runs.iter().map(RunId::to_string).collect();
        let title = match runs.as_slice() {
            [one] => format!("Tune on run {one}"),
            _ => format!("Tune on runs {}", runs.join(", ")),
        };
        let running = self.pending.is_some();
        egui::Window::new(title).open(&mut open).default_width(640.0).default_height(520.0).vscroll(true).show(
            ctx,
            |ui| {
                if running {
                    ui.label(RichText::new("Checking every timer by what-if on these runs…").weak());
                    return;
                }
                if let Some(lines) = &found.set_lines
                    && ui.button("Copy --set lines").clicked()
                {
                    ui.ctx().copy_text(lines.clone());
                }
                ui.add(egui::Label::new(RichText::new(&found.text).monospace()).wrap());
            },
        );
        if !open {
            self.stop.cancel();
            self.pending = None;
            self.found = None;
        }
    }
}

impl Drop for TuneRuns {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Loads `runs` from the database at `db` and tunes them together.
fn search(db: &PathBuf, runs: &[RunId], stop: CancellationToken) -> Result<TuneReport, String> {
    let store = Store::open(db).map_err(|e| e.to_string())?;
    let recordings = runs
        .iter()
        .map(|&run| Recording::load(&store, run).map_err(|e| format!("run {run}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let options = TuneOptions { stop, ..TuneOptions::default() };
    tune(&recordings, &options).map_err(|e| e.to_string())
}
