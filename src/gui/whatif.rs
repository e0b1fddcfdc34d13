//! The app's what-if: a recorded run replayed under the tunables being
//! edited, on a background thread (the library's `replay::whatif` does the
//! work), shown as a fidelity badge, the diff table, and the recorded and
//! what-if lanes interleaved per stream on one time axis, each with its
//! verdict.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};

use egui::{RichText, Ui};
use tokio_util::sync::CancellationToken;

use super::lanes::{Side, Timeline};
use crate::core::event::{Event, VecSink};
use crate::diagnosis::{Diagnosis, StreamCourse};
use crate::replay::recording::Recording;
use crate::replay::whatif::{Fidelity, StreamWhatIf, VerdictChange, WhatIf, WhatIfReport, what_if_until};
use crate::store::{RunId, Store};

/// A what-if's result, ready to show.
#[derive(Debug)]
pub struct Outcome {
    /// The run replayed.
    pub run: RunId,
    /// What changed.
    pub report: WhatIfReport,
    /// How faithfully the run replays unchanged.
    pub fidelity: Fidelity,
    /// Each stream's recorded lane followed by its what-if lane.
    pub timeline: Timeline,
}

/// The what-if of the run shown, if one was asked for.
#[derive(Debug, Default)]
pub struct WhatIfView {
    pending: Option<Receiver<Result<Outcome, String>>>,
    /// Stops the pending what-if when another replaces it or the run is no
    /// longer shown: nobody would read it, and its replay would take the
    /// CPU the live runs measure.
    stop: CancellationToken,
    outcome: Option<Outcome>,
    error: Option<String>,
    /// Whether the lanes show the recorded and what-if lanes.
    pub show_lanes: bool,
}

impl WhatIfView {
    /// Replays run `run` of the database `db` under `changes` (`NAME=VALUE`).
    pub fn start(&mut self, db: PathBuf, run: RunId, changes: Vec<String>, ctx: &egui::Context) {
        self.stop.cancel();
        self.stop = CancellationToken::new();
        let (tx, rx) = channel();
        let ctx = ctx.clone();
        let stop = self.stop.clone();
        std::thread::spawn(move || {
            let _ = tx.send(compute(&db, run, changes, &stop));
            ctx.request_repaint();
        });
        (self.pending, self.error) = (Some(rx), None);
    }

    /// Forgets the what-if (another run is shown), stopping it if it runs.
    pub fn clear(&mut self) {
        *self = WhatIfView::default();
    }

    /// Takes in a finished what-if; true when one arrived.
    pub fn poll(&mut self) -> bool {
        let Some(rx) = &self.pending else { return false };
        let Ok(result) = rx.try_recv() else { return false };
        self.pending = None;
        match result {
            Ok(outcome) => {
                self.outcome = Some(outcome);
                self.show_lanes = true;
            }
            Err(e) => self.error = Some(e),
        }
        true
    }

    /// Whether a what-if is being computed.
    pub fn is_running(&self) -> bool {
        self.pending.is_some()
    }

    /// The finished what-if, if any.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// The lanes to show instead of the run's own, when asked for.
    pub fn timeline(&self) -> Option<&Timeline> {
        self.outcome.as_ref().filter(|_| self.show_lanes).map(|o| &o.timeline)
    }

    /// Draws the badge, the summary and the diff table.
    pub fn ui(&mut self, ui: &mut Ui) {
        if self.is_running() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Replaying the run under the edited tunables…");
            });
        }
        if let Some(error) = &self.error {
            ui.label(RichText::new(format!("What-if could not run: {error}")).color(ui.visuals().error_fg_color));
        }
        let Some(outcome) = &self.outcome else { return };
        let report = &outcome.report;
        ui.horizontal_wrapped(|ui| {
            badge(ui, &outcome.fidelity);
            ui.separator();
            let changes = if report.overrides.is_empty() { "no change".to_owned() } else { report.overrides.join(" ") };
            let s = &report.summary;
            ui.label(format!(
                "What-if on run {}: {changes} — {} of {} streams changed, {}, {} saved, {} lost, {} false positives, \
                 {} resting on an assumption, {} unknown",
                outcome.run,
                s.changed,
                s.streams,
                s.sooner_words(),
                s.saved,
                s.lost,
                s.false_positives,
                s.assumed,
                s.unknown
            ));
            ui.checkbox(&mut self.show_lanes, "What-if lanes");
        });
        let shown = report.streams.iter().filter(|s| differs(s)).count();
        egui::CollapsingHeader::new(format!("What changed ({shown} streams)"))
            .default_open(shown > 0 && report.streams.len() <= 20)
            .show(ui, |ui| diff_table(ui, report));
    }
}

/// Green when the unchanged replay reproduces the recording, amber when
/// some streams do not: their what-if is less certain.
fn badge(ui: &mut Ui, fidelity: &Fidelity) {
    let colours = super::palette::of(ui.visuals());
    let (colour, text) =
        if fidelity.is_exact() { (colours.ok, "replay faithful") } else { (colours.recovered, "replay approximate") };
    ui.label(RichText::new(format!("● {text}")).color(colour).strong()).on_hover_text(format!(
        "Replayed unchanged, {} of {} streams reproduce the recording (outcome, attempts, hops, categories, \
         timers within 5 ms); worst timer drift {:.1} ms",
        fidelity.reproduced,
        fidelity.streams,
        fidelity.worst_drift_s * 1000.0
    ));
}

fn diff_table(ui: &mut Ui, report: &WhatIfReport) {
    egui::Grid::new("whatif-diff").striped(true).num_columns(4).show(ui, |ui| {
        for title in ["stream", "before", "after", "why it differs or what it assumes"] {
            ui.label(RichText::new(title).strong());
        }
        ui.end_row();
        for stream in report.streams.iter().filter(|s| differs(s)) {
            ui.label(stream.stream.to_string());
            ui.label(course(&stream.before));
            ui.label(course(&stream.after));
            let mut notes = differences(&stream.before, &stream.after);
            notes.extend(stream.sooner_words());
            notes.extend(
                stream
                    .false_positives
                    .iter()
                    .map(|f| format!("false positive: {} in healthy attempt {}", f.timer, f.attempt)),
            );
            notes.extend(stream.assumptions.iter().cloned());
            notes.extend(stream.notes.iter().cloned());
            if let Some(v) = stream.verdict.as_ref().filter(|v| v.before.kind != v.after.kind) {
                notes.push(format!("verdict: {} → {}", v.before.kind.label(), v.after.kind.label()));
            }
            // Wrapped in what is left of the row: a narrow window keeps the
            // table inside it.
            ui.add(egui::Label::new(notes.join("\n")).wrap());
            ui.end_row();
        }
    });
}

/// Whether a stream's what-if has something to show in the table: a
/// change, a stall caught or a call ended sooner or later, an assumption.
fn differs(stream: &StreamWhatIf) -> bool {
    stream.changed
        || stream.sooner_s.is_some()
        || stream.ended_sooner_s.is_some()
        || !stream.assumptions.is_empty()
        || !stream.notes.is_empty()
}

/// What differs between two courses, in words (times aside: see
/// [`StreamWhatIf::sooner_words`]).
fn differences(before: &StreamCourse, after: &StreamCourse) -> Vec<String> {
    let mut notes = Vec::new();
    if before.outcome != after.outcome {
        notes.push(format!("{} → {}", before.outcome, after.outcome));
    }
    let timers = |c: &StreamCourse| c.fired.iter().map(|f| f.timer.name()).collect::<Vec<_>>().join(", ");
    let (was, now) = (timers(before), timers(after));
    if was != now {
        let none = |t: String| if t.is_empty() { "no timer".to_owned() } else { t };
        notes.push(format!("{} fires instead of {}", none(now), none(was)));
    }
    if before.attempts != after.attempts {
        notes.push(format!("{} attempts instead of {}", after.attempts, before.attempts));
    }
    notes
}

/// `ok, 2 attempts, idle at 1.10 s (+1.00)`.
fn course(c: &StreamCourse) -> String {
    let mut text = format!("{}, {} attempt(s)", c.outcome, c.attempts);
    for f in &c.fired {
        text.push_str(&format!(", {} at {:.2} s (+{:.2})", f.timer, f.at_s, f.detected_after_s));
    }
    text
}

impl Drop for WhatIfView {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Loads, replays and lays out run `run`, unless `stop` stops it first.
fn compute(db: &PathBuf, run: RunId, changes: Vec<String>, stop: &CancellationToken) -> Result<Outcome, String> {
    let store = Store::open(db).map_err(|e| e.to_string())?;
    let recording = Recording::load(&store, run).map_err(|e| e.to_string())?;
    let unchanged = what_if_until(&recording, &WhatIf::default(), None, stop).map_err(|e| e.to_string())?;
    let fidelity = Fidelity::of(&unchanged);
    let replayed = Arc::new(VecSink::new());
    let whatif = WhatIf { overrides: changes, verdicts: true, ..WhatIf::default() };
    let report = what_if_until(&recording, &whatif, Some(replayed.clone()), stop).map_err(|e| e.to_string())?;
    let recorded = store.run_events(run).map_err(|e| e.to_string())?;
    let timeline = interleaved(run, recorded, replayed.events(), &report);
    Ok(Outcome { run, report, fidelity, timeline })
}

/// One timeline with each stream's recorded lane followed by its what-if
/// lane, both from the run's epoch, each with its verdict from `report`.
fn interleaved(run: RunId, recorded: Vec<Event>, replayed: Vec<Event>, report: &WhatIfReport) -> Timeline {
    let verdicts = |side: fn(&VerdictChange<Diagnosis>) -> &Diagnosis| {
        report.streams.iter().filter_map(|s| Some((s.stream, side(s.verdict.as_ref()?).clone()))).collect()
    };
    Timeline::paired([
        Side { label: format!("run {run}"), events: recorded, verdicts: verdicts(|v| &v.before) },
        Side { label: "what-if".to_owned(), events: replayed, verdicts: verdicts(|v| &v.after) },
    ])
}
