//! Suggestions checked by what-if for the run shown, as `runs show` checks
//! them: the library's tune and [`advice`] on a background thread (about
//! thirty replays of the run), then each verdict they would have caught
//! sooner is given its checked setting, which the detail panel shows and
//! copies as `--set` lines.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, channel};

use egui::{RichText, Ui};
use tokio_util::sync::CancellationToken;

use super::lanes::Timeline;
use crate::core::event::StreamId;
use crate::diagnosis::{CheckedSuggestion, Diagnosis};
use crate::replay::advice;
use crate::replay::recording::Recording;
use crate::replay::tune::{TuneOptions, tune};
use crate::store::{RunId, Store};

/// For each stream a suggestion would have caught sooner, the candidates.
type Found = BTreeMap<StreamId, Vec<(f64, CheckedSuggestion)>>;

/// The check of the run shown, if one was started.
#[derive(Debug, Default)]
pub struct SuggestionCheck {
    pending: Option<(RunId, Receiver<Result<Found, String>>)>,
    /// Stops the pending check: one nobody looks at any more (another run
    /// is shown) must not go on replaying on the machine the live runs
    /// share.
    stop: CancellationToken,
    /// The run checked and what was found, until another run is shown.
    found: Option<(RunId, Found)>,
    /// Why nothing could be checked, in words.
    note: Option<String>,
}

impl SuggestionCheck {
    /// Checks run `run` of the database `db` when `timeline`'s verdicts
    /// are [worth checking](advice::worth_checking). Forgets any earlier
    /// run's check.
    pub fn start(&mut self, db: PathBuf, run: RunId, timeline: &Timeline, ctx: &egui::Context) {
        *self = SuggestionCheck::default();
        if !advice::worth_checking(timeline.verdicts().map(|(_, d)| &**d)) {
            return;
        }
        let (tx, rx) = channel();
        let ctx = ctx.clone();
        let stop = self.stop.clone();
        std::thread::spawn(move || {
            let _ = tx.send(check(&db, run, stop));
            ctx.request_repaint();
        });
        self.pending = Some((run, rx));
    }

    /// Forgets the check (another run is shown), stopping it if it runs.
    pub fn clear(&mut self) {
        *self = SuggestionCheck::default();
    }

    /// Takes in a finished check; true when one arrived.
    pub fn poll(&mut self) -> bool {
        let Some((run, rx)) = &self.pending else { return false };
        let Ok(result) = rx.try_recv() else { return false };
        let run = *run;
        self.pending = None;
        match result {
            Ok(found) => self.found = Some((run, found)),
            Err(e) => self.note = Some(e),
        }
        true
    }

    /// The verdicts of `timeline` (one run's lanes) that the check found a
    /// suggestion for, each with it attached, by part and stream.
    pub fn checked(&self, timeline: &Timeline) -> Vec<((usize, StreamId), Diagnosis)> {
        let Some((_, found)) = &self.found else { return Vec::new() };
        timeline
            .verdicts()
            .filter_map(|((part, stream), verdict)| {
                let chosen = advice::choose(verdict, found.get(&stream)?)?;
                (verdict.checked.as_ref() != Some(&chosen)).then(|| {
                    let mut diagnosis = Diagnosis::clone(verdict);
                    diagnosis.checked = Some(chosen);
                    ((part, stream), diagnosis)
                })
            })
            .collect()
    }

    /// Whether a check is running.
    pub fn is_running(&self) -> bool {
        self.pending.is_some()
    }

    /// A line saying what the check is doing or why it found nothing.
    pub fn ui(&self, ui: &mut Ui) {
        if let Some((run, _)) = &self.pending {
            // No spinner: it would repaint every frame for the seconds a
            // check takes; the check's thread asks for one repaint when done.
            ui.label(RichText::new(format!("Checking suggestions by what-if on run {run}…")).weak());
        } else if let Some(note) = &self.note {
            ui.label(RichText::new(format!("Suggestions not checked: {note}")).weak());
        } else if let Some((run, found)) = &self.found {
            let text = match found.len() {
                0 => format!(
                    "Suggestions checked by what-if on run {run}: none — no tighter timer keeps room over this run's \
                     healthy attempts and the floors of real traffic (`stallscope tune {run}` says why, timer by timer)"
                ),
                1 => format!("Suggestions checked by what-if on run {run}: 1 stream would have been caught sooner"),
                n => format!("Suggestions checked by what-if on run {run}: {n} streams would have been caught sooner"),
            };
            ui.label(RichText::new(text).weak());
        }
    }
}

impl Drop for SuggestionCheck {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What tune finds on the run, by stream.
fn check(db: &PathBuf, run: RunId, stop: CancellationToken) -> Result<Found, String> {
    let store = Store::open(db).map_err(|e| e.to_string())?;
    let recording = Recording::load(&store, run).map_err(|e| e.to_string())?;
    let options = TuneOptions { stop, ..TuneOptions::default() };
    let report = tune(std::slice::from_ref(&recording), &options).map_err(|e| e.to_string())?;
    Ok(advice::by_stream(&report, run))
}
